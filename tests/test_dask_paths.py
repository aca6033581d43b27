"""The Dask engine's inputs and its cluster, as a user meets them: folders and globs with
--by, relative paths, file names that look like globs, scheduler addresses, Dask's own logging,
a lost scheduler, and agg over several columns. One local worker process serves the module."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from segcli.drivers import dask as seg_dask  # noqa: E402
from tests.entry import run_main  # noqa: E402

pytestmark = pytest.mark.dask


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    cluster = seg_dask.local_cluster(1, silence_logs=logging.CRITICAL)
    yield str(cluster.scheduler_address)
    cluster.close()


def _keyed_files(folder: Path, files: int = 3) -> pa.Table:
    folder.mkdir()
    rng = np.random.default_rng(4)
    tables = []
    for k in range(files):
        table = pa.table(
            {
                "key": pa.array(rng.choice(["a", "b", "c"], 40)),
                "x": rng.integers(0, 100, 40).astype(np.float64),
            }
        )
        pq.write_table(table, folder / f"part-{k}.parquet", row_group_size=15)
        tables.append(table)
    return pa.concat_tables(tables)


def _segcli(*args: Any) -> Any:
    return run_main(*args)


# --- 6: --by on a folder or a bare glob ----------------------------------------------------------


@pytest.mark.parametrize("given", ["folder", "glob"])
def test_by_on_a_folder_or_a_glob_gives_the_single_machine_result(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    whole = _keyed_files(tmp_path / "parts")
    pq.write_table(whole, tmp_path / "whole.parquet")
    monkeypatch.chdir(tmp_path)
    one = _segcli(
        "sum", "whole.parquet", "--data-column", "x", "--by", "key", "-q", "-o", "one.csv"
    )
    assert one.exit_code == 0, one.stderr
    data = "parts" if given == "folder" else "parts/*.parquet"
    args = ["--data-column", "x", "--by", "key", "-q", "-o", "dask.csv"]
    ran = _segcli("sum", data, *args, "--engine", "dask", "--scheduler", address)
    assert ran.exit_code == 0, ran.stderr
    assert Path("dask.csv").read_text() == Path("one.csv").read_text()


# --- 7, 8, 12: relative paths, names that look like globs, errors naming the typed path --------


def _pair(folder: Path, data_name: str, ids_name: str) -> np.ndarray:
    data = np.arange(12, dtype=np.float64)
    np.save(folder / data_name, data)
    np.save(folder / ids_name, np.arange(12) % 3)
    return np.array([data[0::3].sum(), data[1::3].sum(), data[2::3].sum()])


def test_relative_paths_reach_workers_with_another_working_directory(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker started in the test's first directory; the client runs in tmp_path."""
    (tmp_path / "in").mkdir()
    want = _pair(tmp_path / "in", "data.npy", "ids.npy")
    monkeypatch.chdir(tmp_path)
    args = ["in/data.npy", "in/ids.npy", "--engine", "dask", "--scheduler", address]
    ran = _segcli("sum", *args, "-q", "-o", "out.npy")
    assert ran.exit_code == 0, ran.stderr
    np.testing.assert_array_equal(np.load("out.npy"), want)


@pytest.mark.parametrize("name", ["data[1].npy", "data*.npy"])
def test_a_file_whose_name_looks_like_a_glob_is_that_file(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    want = _pair(tmp_path, name, "ids.npy")
    np.save(tmp_path / "data1.npy", np.zeros(12))  # what '[1]' would match as a glob
    monkeypatch.chdir(tmp_path)
    args = [name, "ids.npy", "--engine", "dask", "--scheduler", address]
    ran = _segcli("sum", *args, "-q", "-o", "out.npy")
    assert ran.exit_code == 0, ran.stderr
    np.testing.assert_array_equal(np.load("out.npy"), want)


def test_a_worker_error_names_the_path_as_typed(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "in").mkdir()
    _pair(tmp_path / "in", "data.npy", "ids.npy")
    whole = (tmp_path / "in" / "data.npy").read_bytes()
    (tmp_path / "in" / "data.npy").write_bytes(whole[:-3])  # the header is fine, a row is short
    monkeypatch.chdir(tmp_path)
    args = ["in/data.npy", "in/ids.npy", "--engine", "dask", "--scheduler", address]
    ran = _segcli("sum", *args, "-q", "-o", "out.npy")
    assert ran.exit_code == 3
    [line] = ran.stderr.splitlines()
    assert line.startswith("Error: in/data.npy: truncated .npy"), line
    assert str(tmp_path) not in line and not Path("out.npy").exists()


@pytest.mark.parametrize(
    ("data", "output"),
    [
        ("parts", ["-o", "parts/part-1.parquet"]),
        ("parts/*.parquet", ["-o", "./parts/part-2.parquet"]),
        ("parts/*.parquet", ["--summary-json", "parts/part-0.parquet"]),
    ],
)
def test_an_output_that_is_a_shard_of_a_folder_or_glob_is_refused(
    address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: str, output: list[str]
) -> None:
    _keyed_files(tmp_path / "parts")
    before = {p.name: p.read_bytes() for p in (tmp_path / "parts").iterdir()}
    monkeypatch.chdir(tmp_path)
    args = ["--data-column", "x", "--by", "key", "-q", *output]
    ran = _segcli("sum", data, *args, "--engine", "dask", "--scheduler", address)
    assert ran.exit_code == 2, ran.stderr
    shard = Path(output[1]).name
    assert f"{output[0]} {output[1]} is the same file as DATA parts/{shard}" in ran.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "parts").iterdir()} == before


# --- 9: scheduler addresses that no tcp connection reaches ---------------------------------------


@pytest.mark.parametrize(
    ("scheduler", "message"),
    [
        ("inproc://somewhere", "not inproc://)"),
        ("ucx://127.0.0.1:8786", "not ucx://)"),
        ("ws://127.0.0.1:8786", "not ws://)"),
        ("tcp://no-such-host.invalid:8786", "cannot resolve Dask scheduler host"),
    ],
)
def test_an_address_no_tcp_connection_reaches_is_exit_2_at_once(
    tmp_path: Path, scheduler: str, message: str
) -> None:
    import time

    _pair(tmp_path, "data.npy", "ids.npy")
    started = time.perf_counter()
    ran = _segcli(
        "sum", tmp_path / "data.npy", tmp_path / "ids.npy", "--engine", "dask",
        "--scheduler", scheduler, "-o", tmp_path / "out.npy",
    )  # fmt: skip
    assert time.perf_counter() - started < 5
    assert ran.exit_code == 2
    [line] = ran.stderr.splitlines()
    assert line.startswith("Error: ") and message in line
    assert not (tmp_path / "out.npy").exists()


# --- 10, 11: a scheduler lost during the run, and Dask's own log lines ------------------------


@pytest.fixture
def own_scheduler() -> Iterator[tuple[str, Any]]:
    """A scheduler and one worker in processes of their own, so that a test can kill the
    scheduler: its address and its process."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    where = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
         "--port", str(port), "--no-dashboard"], **quiet,
    )  # fmt: skip
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", where, "--nthreads", "1",
         "--no-dashboard"], **quiet,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield where, scheduler
    finally:
        for process in (worker, scheduler):
            process.kill()
            process.wait()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_scheduler_lost_during_the_run_is_exit_6_in_one_line(
    own_scheduler: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where, scheduler = own_scheduler
    _pair(tmp_path, "data.npy", "ids.npy")
    follow = seg_dask._follow

    def lose_the_scheduler(*args: Any, **kwargs: Any) -> None:
        scheduler.kill()  # the tasks are submitted: the client now waits for their results
        scheduler.wait()
        follow(*args, **kwargs)

    monkeypatch.setattr(seg_dask, "_follow", lose_the_scheduler)
    # What Dask's loggers would print on the terminal (its handlers write to stderr).
    seen = _Records()
    loggers = [logging.getLogger(name) for name in ("distributed", "distributed.client")]
    for logger in loggers:
        logger.addHandler(seen)
    try:
        ran = _segcli(
            "sum", tmp_path / "data.npy", tmp_path / "ids.npy", "--engine", "dask",
            "--scheduler", where, "-o", tmp_path / "out.npy",
        )  # fmt: skip
    finally:
        for logger in loggers:
            logger.removeHandler(seen)
    assert ran.exit_code == 6
    [line] = ran.stderr.splitlines()
    assert line.startswith("Error: ") and "lost the Dask scheduler" in line
    assert line.endswith("nothing was written")
    assert [record.getMessage() for record in seen.records] == []
    assert not (tmp_path / "out.npy").exists()
    assert not any(logger.disabled for logger in loggers)  # the caller's logging as it was


# --- 13: agg over several data columns starts one cluster ----------------------------------------


def test_agg_of_several_columns_starts_one_local_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(9)
    table = pa.table(
        {
            "a": rng.random(60),
            "b": rng.random(60),
            "c": rng.random(60),
            "seg": rng.integers(0, 4, 60),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=20)
    started: list[Any] = []
    local_cluster = seg_dask.local_cluster

    def one_worker(n_workers: int | None = None, **options: Any) -> Any:
        started.append(local_cluster(1, **options))
        return started[-1]

    monkeypatch.setattr(seg_dask, "local_cluster", one_worker)
    args = ["agg", tmp_path / "t.parquet", "--data-column", "a,b,c", "--ids-column", "seg"]
    args += ["--op", "sum,max", "-q"]
    ran = _segcli(*args, "--engine", "dask", "-o", tmp_path / "dask.csv")
    assert ran.exit_code == 0, ran.stderr
    assert len(started) == 1
    one = _segcli(*args, "-o", tmp_path / "one.csv")
    assert one.exit_code == 0, one.stderr
    assert (tmp_path / "dask.csv").read_text() == (tmp_path / "one.csv").read_text()


# --- A Ctrl-C while a future is let go -------------------------------------------------------

# The main thread lets go of a Dask future (its __del__ tells the client's event loop) wherever
# the last reference dies; a signal whose handler runs in there raises in a finalizer, which
# Python prints and forgets. Stands for it: a finalizer during which the signal comes.
_SIGNAL_IN_A_FINALIZER = """
import os, signal, sys, time
from segcli.signals import Interrupted, install_handlers

class Future:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))  # the handler runs here, inside the finalizer

import segcli.signals
segcli.signals._RESEND_DELAY_S = float(sys.argv[1])
install_handlers()
try:
    Future()
    time.sleep(10)
except Interrupted as interrupted:
    sys.exit(interrupted.exit_code)
"""


# With no delay the signal sent again comes while the hook that sends it still runs (as on a
# loaded machine): it must not be lost there either.
@pytest.mark.parametrize("resend_delay", ["0.01", "0"])
def test_a_signal_that_comes_while_a_future_is_let_go_still_ends_the_run(
    resend_delay: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_IN_A_FINALIZER, resend_delay],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (130, "")
