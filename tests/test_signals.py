"""SIGINT, SIGTERM and SIGHUP: exit 128 + signal, one line that tells the truth, no file left.

No sleeping and hoping: each run is stopped at a named checkpoint (segcli.signals.checkpoint),
where it writes one byte to a pipe and waits, so the signal provably lands there.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import platform
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import numpy as np
import pytest

from segcli.io.commit import TEMP_PREFIX
from segcli.signals import CHECKPOINT_ENV, CHECKPOINT_FD_ENV

NOTHING = "nothing was written"


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def start(
    args: list[str],
    checkpoint: str,
    cwd: Path,
    stdin: int | None = None,
    *,
    own_group: bool = False,
    ignoring: tuple[int, ...] = (),
) -> subprocess.Popen[str]:
    """``python -m segcli ARGS``, returned once it has reached ``checkpoint``; ``own_group``:
    in a process group of its own (and its children's), as a shell's foreground job;
    ``ignoring``: signals it starts with ignored, as ``nohup`` starts its command."""

    def ignore_signals() -> None:
        for signum in ignoring:
            signal.signal(signum, signal.SIG_IGN)

    ready_read, ready_write = os.pipe()
    env = dict(os.environ, **{CHECKPOINT_ENV: checkpoint, CHECKPOINT_FD_ENV: str(ready_write)})
    process = subprocess.Popen(
        [sys.executable, "-m", "segcli", *args],
        cwd=cwd,
        env=env,
        pass_fds=(ready_write,),
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=own_group,
        preexec_fn=ignore_signals if ignoring else None,
    )
    os.close(ready_write)
    try:
        readable, _, _ = select.select([ready_read], [], [], 60)
        assert readable and os.read(ready_read, 1) == b"!", process.communicate()[1]
    finally:
        os.close(ready_read)
    return process


def stop(process: subprocess.Popen[str], signum: int) -> str:
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    return stderr


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    np.save(tmp_path / "data.npy", np.arange(100, dtype=np.float32))
    np.save(tmp_path / "ids.npy", np.arange(100, dtype=np.int32) % 7)
    return tmp_path


@pytest.mark.parametrize(
    ("signum", "line"),
    [
        (signal.SIGINT, f"segcli: interrupted; {NOTHING}"),
        (signal.SIGTERM, f"segcli: stopped by SIGTERM; {NOTHING}"),
        (signal.SIGHUP, f"segcli: stopped by SIGHUP; {NOTHING}"),
    ],
)
def test_signal_while_outputs_are_staged_removes_them(inputs, signum, line):
    (inputs / "out.npy").write_bytes(b"old")
    process = start(
        ["sum", "data.npy", "ids.npy", "-q", "-o", "out.npy", "--summary-json", "s.json"],
        "staged",
        inputs,
    )
    assert any(name.startswith(TEMP_PREFIX) for name in names(inputs))  # mid-write, provably
    stderr = stop(process, signum)
    assert process.returncode == 128 + signum
    assert stderr == line + "\n"
    assert names(inputs) == ["data.npy", "ids.npy", "out.npy", "s.json"]
    assert (inputs / "out.npy").read_bytes() == b"old"
    # The summary says how the run ended, as a failed run's does.
    facts = json.loads((inputs / "s.json").read_text())
    expected = {"schema_version": 1, "command": "sum", "exit_code": 128 + signum, "error": line}
    assert facts == expected


@pytest.mark.parametrize(
    ("command", "point"),
    [(["agg", "--op", "sum,max"], "reduce"), (["mean"], "reduce"), (["check"], "staged")],
)
def test_signal_mid_run_writes_the_summary_with_its_exit_code(inputs, command, point):
    args = [*command[:1], "data.npy", "ids.npy", *command[1:], "-q", "--summary-json", "s.json"]
    stderr = stop(start(args, point, inputs), signal.SIGTERM)
    line = f"segcli: stopped by SIGTERM; {NOTHING}"
    assert stderr == line + "\n"
    facts = json.loads((inputs / "s.json").read_text())
    assert (facts["command"], facts["exit_code"], facts["error"]) == (command[0], 143, line)


def test_signal_after_the_commit_keeps_the_summary_facts_with_its_exit_code(inputs):
    process = start(
        ["sum", "data.npy", "ids.npy", "-q", "-o", "out.npy", "--summary-json", "s.json"],
        "committed",
        inputs,
    )
    stop(process, signal.SIGINT)
    facts = json.loads((inputs / "s.json").read_text())
    assert facts["exit_code"] == 130
    assert facts["error"] == "segcli: interrupted; the output was written"
    assert (facts["rows_used"], facts["output_path"]) == (100, "out.npy")


def test_interrupt_after_the_commit_says_the_output_was_written(inputs):
    process = start(
        ["sum", "data.npy", "ids.npy", "-q", "-o", "out.npy", "--summary-json", "s.json"],
        "committed",
        inputs,
    )
    stderr = stop(process, signal.SIGINT)
    assert process.returncode == 130
    assert stderr == "segcli: interrupted; the output was written\n"
    assert names(inputs) == ["data.npy", "ids.npy", "out.npy", "s.json"]
    expected = np.bincount(np.arange(100) % 7, weights=np.arange(100))
    np.testing.assert_array_equal(np.load(inputs / "out.npy"), expected)


@pytest.mark.parametrize("ignored", [signal.SIGHUP, signal.SIGINT])
def test_a_signal_ignored_at_start_stays_ignored(inputs, ignored):
    """``nohup segcli ...`` outlives a hang-up, and a script's ``segcli ... &`` a Ctrl-C: the
    SIGTERM sent after the ignored signal is the one that ends the run."""
    args = ["sum", "data.npy", "ids.npy", "-q", "-o", "out.npy"]
    process = start(args, "staged", inputs, ignoring=(ignored,))
    process.send_signal(ignored)
    with pytest.raises(subprocess.TimeoutExpired):  # handled, it would end the run at once
        process.wait(timeout=0.5)
    stderr = stop(process, signal.SIGTERM)
    assert process.returncode == 143
    assert stderr == f"segcli: stopped by SIGTERM; {NOTHING}\n"
    assert names(inputs) == ["data.npy", "ids.npy"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_start_up_is_one_line(inputs, signum):
    process = start(["sum", "data.npy", "ids.npy", "-o", "out.npy"], "startup", inputs)
    stderr = stop(process, signum)
    assert process.returncode == 128 + signum
    assert len(stderr.splitlines()) == 1 and stderr.endswith(f"{NOTHING}\n")
    assert names(inputs) == ["data.npy", "ids.npy"]


def _thread_reading_stdin(pid: int) -> bool:
    """Whether a thread of ``pid`` sits in read(0, ...) (its syscall number, then fd 0)."""
    number = {"x86_64": 0, "aarch64": 63}[platform.machine()]
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "syscall").read_text().split()
        if len(fields) > 1 and fields[0] == str(number) and int(fields[1], 16) == 0:
            return True
    return False


def _unread_bytes(fd: int) -> int:
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0])


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64") or not Path("/proc/self/syscall").exists(),
    reason="needs Linux's /proc/PID/task/TID/syscall to see the read",
)
def test_interrupt_while_blocked_reading_stdin_is_one_line(inputs):
    # Half a .npy on stdin: the run streams what came, then waits in read() for the rest.
    np.save(inputs / "ids.npy", np.zeros(100_000, np.int32))
    whole = io.BytesIO()
    np.save(whole, np.ones(100_000, np.float32))
    half = whole.getvalue()[:-200_000]
    stdin_read, stdin_write = os.pipe()
    try:
        os.write(stdin_write, half[:60_000])  # less than a pipe holds
        process = start(
            ["sum", "-", "ids.npy", "--chunk-rows", "1000", "-q", "-o", "out.npy"],
            "reduce+",
            inputs,
            stdin=stdin_read,
        )
        os.close(stdin_read)
        deadline = time.monotonic() + 60
        while _unread_bytes(stdin_write) or not _thread_reading_stdin(process.pid):
            assert time.monotonic() < deadline, "segcli never blocked on stdin"
            time.sleep(0.01)
        stderr = stop(process, signal.SIGINT)
    finally:
        os.close(stdin_write)
    assert process.returncode == 130
    assert stderr == f"segcli: interrupted; {NOTHING}\n"
    assert names(inputs) == ["data.npy", "ids.npy"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_while_shutting_down_after_an_error_keeps_its_exit_code(inputs, signum):
    (inputs / "out.npy").write_bytes(b"old")
    args = ["sum", "data.npy", "ids.npy", "-n", "2", "-o", "out.npy", "--summary-json", "s.json"]
    process = start(args, "closing", inputs)  # the run failed; it is removing its staged files
    stderr = stop(process, signum)
    line = "Error: ids.npy: segment_ids[2] = 2 is out of range [0, 2) (70 ids out of range)"
    assert process.returncode == 1
    assert stderr == line + "\n"
    assert names(inputs) == ["data.npy", "ids.npy", "out.npy", "s.json"]
    assert (inputs / "out.npy").read_bytes() == b"old"
    facts = json.loads((inputs / "s.json").read_text())
    assert (facts["exit_code"], facts["error"]) == (1, line)


@pytest.mark.full_matrix  # a local cluster's start and stop: seconds, CI's second line
def test_ctrl_c_on_a_local_dask_cluster_is_one_line(inputs):
    """A terminal's Ctrl-C reaches the whole foreground group, the workers too: theirs end
    quietly, and segcli's own line is all stderr holds."""
    pytest.importorskip("distributed")
    args = ["sum", "data.npy", "ids.npy", "--engine", "dask", "-q", "-o", "out.npy"]
    process = start(args, "local-cluster", inputs, own_group=True)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert stderr == f"segcli: interrupted; {NOTHING}\n"
    assert names(inputs) == ["data.npy", "ids.npy"]
