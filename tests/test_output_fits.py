"""The "does the output fit" check: it counts what the chosen writer needs, its estimate is
not below the measured peak, and it reads the cgroup's memory limit where there is one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from segcli import core, memory, ops
from segcli.cli import cli
from tests.peak import run_measured


def peak_bytes(*args: object) -> int:
    measured = run_measured(*args)
    assert measured.returncode == 0, measured.stderr
    return measured.peak_bytes


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    data, ids = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data, np.arange(4, dtype=np.float32))
    np.save(ids, np.array([0, 1, 2, 3]))
    return data, ids


@pytest.mark.parametrize("suffix", ["npy", "json"])
def test_estimate_is_not_below_the_measured_peak(inputs, tmp_path, suffix):
    n = 1_000_000
    out = tmp_path / f"out.{suffix}"
    baseline = peak_bytes("sum", *inputs, "-n", 4, "-q", "-o", out)
    peak = peak_bytes("sum", *inputs, "-n", n, "-q", "-o", out)
    f32 = np.dtype(np.float32)
    estimate = core.output_bytes(ops.get_op("sum"), n, (), f32, False, suffix)
    assert estimate >= peak - baseline, (estimate, peak - baseline)
    assert estimate <= 2 * (peak - baseline) + 16 * n  # and not wildly above it


def test_the_writer_decides_whether_the_output_fits(inputs, tmp_path, monkeypatch):
    n = 1_000_000
    f32 = np.dtype(np.float32)
    npy = core.output_bytes(ops.get_op("sum"), n, (), f32, False, "npy")
    json = core.output_bytes(ops.get_op("sum"), n, (), f32, False, "json")
    assert json > 4 * npy
    monkeypatch.setattr(core, "available_bytes", lambda: (npy + json) // 2)
    runner = CliRunner()
    ok = runner.invoke(cli, ["sum", *map(str, inputs), "-n", n, "-q", "-o", tmp_path / "o.npy"])
    assert ok.exit_code == 0, ok.output
    out = tmp_path / "o.json"
    refused = runner.invoke(cli, ["sum", *map(str, inputs), "-n", n, "-q", "-o", out])
    assert refused.exit_code == 1
    assert refused.stderr == (
        f"Error: num_segments = {n}: the output needs {json:,} bytes "
        f"({memory.human_bytes(json)}) to write json, more than the "
        f"{memory.human_bytes((npy + json) // 2)} of memory available\n"
    )
    assert not out.exists()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_limit_less_usage_is_the_room(tmp_path):
    write(tmp_path / "proc", "0::/user.slice/job\n")
    write(tmp_path / "cg/user.slice/job/memory.max", "max\n")
    write(tmp_path / "cg/user.slice/memory.max", "1000000\n")
    write(tmp_path / "cg/user.slice/memory.current", "250000\n")
    assert memory.cgroup_room_bytes(str(tmp_path / "cg"), str(tmp_path / "proc")) == 750_000


def test_cgroup_v1_limit_is_read_from_the_memory_controller(tmp_path):
    write(tmp_path / "proc", "5:cpu:/\n4:memory:/docker/abc\n0::/\n")
    # A container mounts its own cgroup as the root: the path from /proc is not there.
    write(tmp_path / "cg/memory/memory.limit_in_bytes", "2000000\n")
    write(tmp_path / "cg/memory/memory.usage_in_bytes", "500000\n")
    assert memory.cgroup_room_bytes(str(tmp_path / "cg"), str(tmp_path / "proc")) == 1_500_000


def test_no_cgroup_limit(tmp_path):
    write(tmp_path / "proc", "4:memory:/\n")
    write(tmp_path / "cg/memory/memory.limit_in_bytes", "9223372036854771712\n")
    assert memory.cgroup_room_bytes(str(tmp_path / "cg"), str(tmp_path / "proc")) is None
    assert memory.cgroup_room_bytes(str(tmp_path / "none"), str(tmp_path / "none")) is None


def test_available_memory_is_the_smaller_of_host_and_cgroup(monkeypatch):
    monkeypatch.setattr(memory, "_host_available_bytes", lambda: 8 << 30)
    monkeypatch.setattr(memory, "cgroup_room_bytes", lambda: 1 << 30)
    assert memory.available_bytes() == 1 << 30
    monkeypatch.setattr(memory, "cgroup_room_bytes", lambda: None)
    assert memory.available_bytes() == 8 << 30


@pytest.mark.parametrize("streamed", [False, True], ids=["in-memory", "streamed"])
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
def test_an_inferred_n_too_large_names_the_largest_id(
    tmp_path: Path, streamed: bool, sorted_ids: bool
) -> None:
    """Without -n the user never wrote the n the message names: it says where n came from."""
    data, ids = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data, np.ones(2, np.float32))
    np.save(ids, np.array([0, 2**62], np.int64))
    args = ["sum", str(data), str(ids), "-q", "-o", str(tmp_path / "out.npy")]
    args += ["--chunk-rows", "1"] if streamed else []
    args += ["--sorted"] if sorted_ids else []
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert result.stderr.startswith(
        f"Error: num_segments = {2**62 + 1} (inferred: the largest id is {2**62}): "
        "the output needs "
    )
    given = CliRunner().invoke(cli, [*args, "-n", str(2**62 + 1)])
    assert given.exit_code == 1
    assert given.stderr.startswith(f"Error: num_segments = {2**62 + 1}: the output needs ")
    assert not (tmp_path / "out.npy").exists()
