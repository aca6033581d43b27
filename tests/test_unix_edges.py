"""Edge cases of a well-behaved Unix tool: hostile names on a terminal, full and stalled
streams, signals at awkward moments, outputs that cannot be what their names promise."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import signal
import stat
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.matrix import default_run

#: A name rich would read as markup, and one holding an escape sequence and a line break.
HOSTILE_NAMES = ("[bold]x.npy", "e\x1b[31mred.npy", "nl\nx.npy")


def segcli(*args: object, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """The real entry point in a child process, exit codes as a shell sees them."""
    kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    command = [sys.executable, "-m", "segcli", *map(str, args)]
    return subprocess.run(command, timeout=60, check=False, **kwargs)


def segcli_on_a_terminal(*args: object, cwd: Path) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal (so the summary is rich's table): the exit code
    and every byte the terminal received."""
    controller, terminal = pty.openpty()
    env = dict(os.environ, COLUMNS="160", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    command = [sys.executable, "-m", "segcli", *map(str, args)]
    with subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=terminal
    ) as child:
        os.close(terminal)
        received = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            received += chunk
        code = child.wait(timeout=60)
    os.close(controller)
    return code, received.decode()


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    for name in HOSTILE_NAMES:
        np.save(tmp_path / name, np.arange(4.0))
    np.save(tmp_path / "ids.npy", np.array([0, 0, 1, 1]))
    return tmp_path


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("[bold]x.npy", "[bold]x.npy"),
        ("e\x1b[31mred.npy", "e\\x1b[31mred.npy"),
        ("nl\nx.npy", "nl\\nx.npy"),
    ],
)
def test_hostile_file_names_print_literally_in_the_terminal_summary(hostile, name, shown):
    code, screen = segcli_on_a_terminal("sum", name, "ids.npy", cwd=hostile)
    assert code == 0
    [data_line] = [line for line in screen.splitlines() if "data" in line]
    assert f"{shown}  (4,) float64" in data_line
    assert "\x1b[31m" not in screen


@pytest.mark.parametrize(
    ("name", "shown"),
    [("e\x1b[31mred.npy", "e\\x1b[31mred.npy"), ("nl\nx.npy", "nl\\nx.npy")],
)
def test_hostile_file_names_stay_one_line_in_the_plain_summary(hostile, name, shown):
    result = segcli("sum", name, "ids.npy", cwd=hostile)
    assert result.returncode == 0
    lines = result.stderr.decode().splitlines()
    assert f"  data            {shown}  (4,) float64" in lines


def test_hostile_column_names_and_keys_print_literally(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"v\x1b[2J": [1.0, 2.0], "[bold]k": ["x\x1b[31m", "[red]y"]})
    pq.write_table(table, tmp_path / "t.parquet")
    pq.write_table(pa.table({"[bold]k": ["x\x1b[31m"]}), tmp_path / "keys.parquet")
    code, screen = segcli_on_a_terminal(
        "sum", "t.parquet", "--data-column", "v\x1b[2J", "--by", "[bold]k", cwd=tmp_path
    )
    assert code == 0
    assert "t.parquet:v\\x1b[2J" in screen and "[bold]k  (string)" in screen
    assert "\x1b[2J" not in screen
    info = segcli("info", tmp_path / "t.parquet")
    assert "  v\\x1b[2J: double, nulls 0" in info.stdout.decode().splitlines()
    missing = segcli(
        "sum",
        "t.parquet",
        "--data-column",
        "v\x1b[2J",
        "--by",
        "[bold]k",
        "--keys-from",
        "keys.parquet",
        cwd=tmp_path,
    )
    assert missing.returncode == 1
    assert missing.stderr.decode().splitlines() == [
        "Error: t.parquet: row 1 has key [bold]k='[red]y', which is not in --keys-from "
        "keys.parquet (1 row with a key not in it)"
    ]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    ("args", "code"),
    [
        ([], 0),
        (["-q", "--summary-json", "-"], 0),
        (["-n", "1"], 1),
        (["--nope"], 2),
        (["--expect", "missing.npy"], 3),
        (["-o", "no/such/folder/out.npy"], 5),
    ],
)
def test_full_stderr_keeps_the_exit_code(hostile, args, code):
    with open("/dev/full", "wb") as full:
        result = segcli("sum", "[bold]x.npy", "ids.npy", *args, cwd=hostile, stderr=full)
    assert result.returncode == code
    if code == 0 and "-q" not in args:
        assert result.stdout == b"0\t1.0\n1\t5.0\n"


def test_stderr_closed_by_its_reader_keeps_the_exit_code(hostile):
    reader, writer = os.pipe()
    os.close(reader)  # no one will read what segcli says
    try:
        passed = segcli("check", "[bold]x.npy", "ids.npy", cwd=hostile, stderr=writer)
        failed = segcli(
            "check",
            "[bold]x.npy",
            "ids.npy",
            "-n",
            "5",
            "--max-empty",
            "0",
            cwd=hostile,
            stderr=writer,
        )
    finally:
        os.close(writer)
    assert (passed.returncode, failed.returncode) == (0, 4)


def _wait_until_full(pipe_read_end: int, child: subprocess.Popen[bytes]) -> None:
    """Until the pipe holds most of what it can and stops growing: the writer is blocked in
    write(). (Partly filled pages keep a pipe from reading as exactly full.)"""
    capacity = fcntl.fcntl(pipe_read_end, F_GETPIPE_SZ)
    deadline = time.monotonic() + 60
    seen, steady = -1, 0
    while steady < 5:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "segcli never filled the pipe"
        time.sleep(0.1)
        unread = _unread_bytes(pipe_read_end)
        steady = steady + 1 if unread == seen and unread > capacity // 2 else 0
        seen = unread


def _unread_bytes(fd: int) -> int:
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0])


#: Linux's fcntl for a pipe's capacity (Python names it from 3.10 on Linux only).
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


@pytest.fixture
def large_pair(tmp_path: Path) -> tuple[Path, Path]:
    """An 8 MB result: far more than a pipe holds."""
    return _pair(tmp_path, 1_000_000)


@pytest.fixture
def pipeful_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A result of 100,000 rows: over 0.8 MB in every format, more than a pipe holds (64 KiB)
    and quick to format as text."""
    return _pair(tmp_path, 100_000)


def _pair(folder: Path, rows: int) -> tuple[Path, Path]:
    data, ids = folder / "large.npy", folder / "large_ids.npy"
    np.save(data, np.random.default_rng(0).random(rows))
    np.save(ids, np.arange(rows, dtype=np.int64))
    return data, ids


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux's pipe ioctls")
@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_sigterm_while_a_stalled_pipe_blocks_the_write_ends_promptly(large_pair, fmt):
    command = [sys.executable, "-m", "segcli", "sum", *map(str, large_pair), "-q", "-o", "-"]
    with subprocess.Popen(
        [*command, "--format", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        assert child.stdout is not None and child.stderr is not None
        try:
            _wait_until_full(child.stdout.fileno(), child)
            child.send_signal(signal.SIGTERM)
            code = child.wait(timeout=10)  # the reader still reads nothing
        finally:
            if child.poll() is None:
                child.kill()
        stderr = child.stderr.read().decode()
    assert code == 143
    assert len(stderr.splitlines()) == 1 and stderr.startswith("segcli: stopped by SIGTERM")


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux's pipe ioctls")
@pytest.mark.parametrize(
    ("signum", "args"),
    [
        (signal.SIGINT, ["sum"]),  # text lines
        (signal.SIGTERM, ["sum", "-o", "-", "--format", "npy"]),
        (signal.SIGINT, ["agg", "--op", "sum,mean", "-o", "-", "--format", "npz"]),
    ],
)
def test_interrupt_after_stdout_began_says_the_output_was_cut_off(large_pair, signum, args):
    command = [sys.executable, "-m", "segcli", args[0], *map(str, large_pair), "-q", *args[1:]]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        try:
            _wait_until_full(child.stdout.fileno(), child)
            child.send_signal(signum)
            code = child.wait(timeout=10)
        finally:
            if child.poll() is None:
                child.kill()
        stderr = child.stderr.read().decode()
    what = "interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    assert (code, stderr) == (128 + signum, f"segcli: {what}; the output was cut off\n")


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux's pipe ioctls")
def test_interrupt_while_writing_a_fifo_says_the_output_was_cut_off(large_pair, tmp_path):
    fifo = tmp_path / "out.fifo"
    command = [sys.executable, "-m", "segcli", "sum", *map(str, large_pair), "-q", "-o", fifo]
    code, stderr = _interrupted_once_fifo_is_full([*map(str, command), "--format", "csv"], fifo)
    assert (code, stderr) == (130, "segcli: interrupted; the output was cut off\n")


def _interrupted_once_fifo_is_full(command: list[str], fifo: Path) -> tuple[int, str]:
    """Run ``command``, which writes the FIFO ``fifo`` (made here) that is open but never
    read; send SIGINT once the FIFO is full: its exit code and stderr."""
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # there, but reading nothing
    try:
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
            try:
                _wait_until_full(reader, child)
                child.send_signal(signal.SIGINT)
                code = child.wait(timeout=10)
            finally:
                if child.poll() is None:
                    child.kill()
            assert child.stderr is not None
            return code, child.stderr.read().decode()
    finally:
        os.close(reader)


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux's pipe ioctls")
@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_interrupt_while_keys_out_fills_a_fifo_ends_promptly(tmp_path, fmt):
    # pyarrow answered the interrupted write by writing its footer, which blocked on the
    # stalled reader again: the run hung until killed.
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = 100_000
    table = tmp_path / "t.parquet"
    keys = [f"key-{i:07d}" for i in range(rows)]
    pq.write_table(pa.table({"x": np.ones(rows), "k": keys}), table)
    fifo = tmp_path / f"keys.{fmt}"
    args = ["sum", table, "--data-column", "x", "--by", "k", "-q", "-o", tmp_path / "out.npy"]
    command = [sys.executable, "-m", "segcli", *map(str, args), "--keys-out", str(fifo)]
    code, stderr = _interrupted_once_fifo_is_full(command, fifo)
    assert (code, stderr) == (130, "segcli: interrupted; the output was cut off\n")
    assert not (tmp_path / "out.npy").exists()


@pytest.mark.parametrize(
    ("command", "name", "hint"),
    [
        (
            ["sum"],
            "out.csv.gz",
            "write out.csv and compress it afterwards, or pipe it through "
            "gzip: -o >(gzip > out.csv.gz) --format csv",
        ),
        (
            ["sum", "--format", "npy"],
            "out.npy.xz",
            "write out.npy and compress it afterwards, "
            "or pipe it through xz: -o >(xz > out.npy.xz) --format npy",
        ),
        (
            ["mean"],
            "out.parquet.BZ2",
            "write out.parquet and compress it afterwards, or pipe it "
            "through bzip2: -o >(bzip2 > out.parquet.BZ2) --format parquet",
        ),
        (
            ["agg", "--op", "sum"],
            "out.zst",
            "write out and compress it afterwards, or pipe it "
            "through zstd: -o >(zstd > out.zst) --format FORMAT",
        ),
        (
            ["agg", "--op", "sum,max"],
            "out.tsv.lz4",
            "write out.tsv and compress it afterwards, "
            "or pipe it through lz4: -o >(lz4 > out.tsv.lz4) --format tsv",
        ),
    ],
)
def test_compressed_output_names_are_refused_before_any_read(tmp_path, command, name, hint):
    # DATA does not exist: the refusal comes first, so it is the one line and the code.
    result = segcli(command[0], "missing.npy", "ids.npy", *command[1:], "-o", name, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        f"Error: -o {name}: segcli does not compress, so this name would hold plain bytes; "
        f"{hint} (see 'segcli {command[0]} --help')"
    ]
    assert list(tmp_path.iterdir()) == []


def test_compressed_summary_json_name_is_refused_and_a_fifo_so_named_is_not(hostile):
    result = segcli("sum", "[bold]x.npy", "ids.npy", "--summary-json", "s.json.gz", cwd=hostile)
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        "Error: --summary-json s.json.gz: segcli does not compress, so this name would hold "
        "plain bytes; write s.json and compress it afterwards (see 'segcli sum --help')"
    ]
    fifo = hostile / "to_gzip.gz"  # a FIFO takes the bytes as they are, whatever its name
    os.mkfifo(fifo)
    with subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE) as reader:
        done = segcli(
            "sum", "[bold]x.npy", "ids.npy", "-q", "-o", fifo, "--format", "csv", cwd=hostile
        )
        assert reader.communicate(timeout=60)[0] == b"segment,value,count\n0,1.0,2\n1,5.0,2\n"
    assert done.returncode == 0, done.stderr


# Every format of one result; agg's several columns through one text and one binary writer.
@default_run(lambda fmt, command: command == ["sum"] or fmt in ("csv", "npz"))
@pytest.mark.parametrize("fmt", ["npy", "npz", "parquet", "arrow", "csv", "tsv", "json"])
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_fifo_whose_reader_leaves_early_exits_141_silently(pipeful_pair, tmp_path, fmt, command):
    if command[0] == "agg" and fmt == "npy":
        command = ["agg", "--op", "sum"]  # .npy holds one result column
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)

    def read_a_little() -> None:
        with open(fifo, "rb") as pipe:
            pipe.read(10)  # then closes it, as `head -c 10` does

    reader = threading.Thread(target=read_a_little)
    reader.start()
    args = [*command[1:], "-q", "-o", fifo, "--format", fmt]
    result = segcli(command[0], *pipeful_pair, *args)
    reader.join(timeout=60)
    assert (result.returncode, result.stderr) == (141, b"")


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]], ids=["memory", "stream"])
@pytest.mark.parametrize(
    ("ids", "flags", "first"),
    [
        ([[0, 1, 2], [3, -2, -1]], [], "segment_ids[1, 1] = -2"),
        ([0, 1, 1, 4, 5, 6], ["--sorted", "-n", "3"], "segment_ids[3] = 4"),
    ],
)
def test_check_max_dropped_names_the_first_dropped_row(tmp_path, chunk, ids, flags, first):
    data, ids_path = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.arange(6.0).reshape(np.shape(ids)))
    np.save(ids_path, np.array(ids))
    result = segcli("check", data, ids_path, *flags, *chunk, "--max-dropped", "1", "-q")
    assert result.returncode == 4
    [line] = result.stderr.decode().splitlines()
    assert line.endswith(f"; first dropped: {first})")


@pytest.mark.parametrize(
    ("output", "line"),
    [
        ("no/such/out.npy", "-o no/such/out.npy: folder no/such does not exist"),
        # As the shell's > would: "no" does not exist, so neither does "no/.."
        ("no/../out.npy", "-o no/../out.npy: folder no/.. does not exist"),
        ("out.npy/", "-o out.npy/: names a folder (a file name cannot end with /)"),
        (".", "-o .: is a directory"),
        ("/dev/full", "-o /dev/full: cannot write (No space left on device)"),
        ("/proc/out.npy", "-o /proc/out.npy: cannot create a file in /proc ("),
    ],
)
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_write_errors_name_the_option_and_the_path(hostile, command, output, line):
    if output.startswith("/") and not os.path.exists(os.path.dirname(output)):
        pytest.skip(f"needs {os.path.dirname(output)}")
    args = [*command[1:], "-q", "-o", output, "--format", "npy" if command == ["sum"] else "csv"]
    result = segcli(command[0], "[bold]x.npy", "ids.npy", *args, cwd=hostile)
    assert result.returncode == 5
    [got] = result.stderr.decode().splitlines()
    assert got.startswith("Error: " + line.format(tmp=os.path.realpath(hostile)))


@pytest.fixture
def terminal() -> Iterator[tuple[int, int]]:
    """A pseudo-terminal: its controller's and its terminal's descriptors."""
    controller, tty = pty.openpty()
    yield controller, tty
    for fd in (controller, tty):
        with contextlib.suppress(OSError):
            os.close(fd)


def segcli_to_a_terminal(
    terminal: tuple[int, int], *args: object, cwd: Path, stderr_too: bool = False
) -> tuple[int, bytes, str]:
    """Run with stdout on ``terminal`` and stdin a pipe that stays open and empty, so that a
    run that reads stdin never ends (the test fails after 30 s). The exit code, every byte the
    terminal received, and stderr (on the terminal too with ``stderr_too``)."""
    controller, tty = terminal
    command = [sys.executable, "-m", "segcli", *map(str, args)]
    stdin, held_open = os.pipe()
    stderr = tty if stderr_too else subprocess.PIPE
    try:
        with subprocess.Popen(command, cwd=cwd, stdin=stdin, stdout=tty, stderr=stderr) as child:
            os.close(tty)  # the child's are now the only ends: it closing them ends the read
            os.close(stdin)
            screen = _screen(controller, child)
            code = child.wait(timeout=60)
            errors = b"" if child.stderr is None else child.stderr.read()
    finally:
        os.close(held_open)
    return code, screen, errors.decode()


def _screen(controller: int, child: subprocess.Popen[bytes]) -> bytes:
    """What the child puts on its terminal, until it exits."""
    received = b""
    deadline = time.monotonic() + 30
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([controller], [], [], left)[0]:
            break
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the child closed its end
            return received
        if not chunk:
            return received
        received += chunk
    child.kill()
    pytest.fail(f"still running after 30 s (waiting for stdin?); the terminal got {received!r}")


@pytest.mark.parametrize(
    ("args", "label"),
    [
        (["sum", "-", "ids.npy"], "<stdin>"),
        (["sum", "/dev/stdin", "ids.npy"], "/dev/stdin"),
        (["agg", "-", "ids.npy", "--op", "sum,max"], "<stdin>"),
        (["info", "-"], "<stdin>"),
    ],
)
def test_an_input_from_a_terminal_is_refused_not_waited_for(pair, terminal, args, label):
    """Nothing redirected: it waited in silence for a .npy no one can type (as gzip and zstd
    refuse to read compressed data from a terminal)."""
    command = [sys.executable, "-m", "segcli", *args, "-q" if args[0] != "info" else "--json"]
    _, tty = terminal
    with subprocess.Popen(
        command, cwd=pair[0].parent, stdin=tty, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as child:
        try:
            stdout, stderr = child.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            pytest.fail("still waiting for stdin after 20 s")
    assert child.returncode == 3
    assert stdout == b""
    assert stderr.decode() == (
        f"Error: {label}: is a terminal; redirect the input from a file or a pipe "
        "(e.g. '< data.npy' or 'producer |')\n"
    )


TO_STDOUT = "refusing to write binary {fmt} to a terminal; redirect stdout or use -o FILE"
TO_A_PATH = (
    "{path}: refusing to write binary {fmt} to a terminal; "
    "write a file or a pipe, or a text format (csv, tsv, json)"
)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["sum", "-o", "-"], TO_STDOUT.format(fmt="npy")),
        (["median", "-o", "-", "--format", "parquet"], TO_STDOUT.format(fmt="parquet")),
        (["agg", "--op", "sum,max", "-o", "-", "--format", "arrow"], TO_STDOUT.format(fmt="arrow")),
        (
            ["sum", "-o", "/dev/stdout", "--format", "npy"],
            TO_A_PATH.format(path="-o /dev/stdout", fmt="npy"),
        ),
        (
            ["mean", "-o", "{tty}", "--format", "parquet"],
            TO_A_PATH.format(path="-o {tty}", fmt="parquet"),
        ),
        (["agg", "--op", "sum", "-o", "tty.npz"], TO_A_PATH.format(path="-o tty.npz", fmt="npz")),
    ],
    ids=["stdout", "stdout-median", "stdout-agg", "dev-stdout", "tty-by-name", "link-to-tty"],
)
def test_binary_to_a_terminal_is_refused_before_any_input_is_read(hostile, terminal, args, line):
    tty = os.ttyname(terminal[1])
    (hostile / "tty.npz").symlink_to(tty)
    args = [tty if a == "{tty}" else a for a in args]
    # DATA is stdin, left open and empty: a run that read it before refusing would never end.
    code, screen, stderr = segcli_to_a_terminal(
        terminal, args[0], "-", "ids.npy", "-q", "--summary-json", "s.json", *args[1:], cwd=hostile
    )
    assert (code, stderr.splitlines()) == (5, ["Error: " + line.replace("{tty}", tty)])
    assert screen == b""
    assert json.loads((hostile / "s.json").read_text())["exit_code"] == 5


def test_text_and_its_summary_share_a_terminal_as_stdout_and_stderr(hostile, terminal):
    code, screen, _ = segcli_to_a_terminal(
        terminal,
        "sum",
        "[bold]x.npy",
        "ids.npy",
        "-q",
        "-o",
        "/dev/stdout",
        "--format",
        "csv",
        "--summary-json",
        "/dev/stderr",
        cwd=hostile,
        stderr_too=True,
    )
    assert code == 0, screen
    text = screen.decode().replace("\r\n", "\n")  # the terminal's own line ends
    assert text.startswith("segment,value,count\n0,1.0,2\n1,5.0,2\n{")
    assert json.loads(text[text.index("{") :])["output_path"] == "/dev/stdout"


needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to give files away"
)


@needs_root
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum"]])
def test_replacing_an_output_keeps_its_owner_and_group(hostile, command):
    out = hostile / "out.npy"
    out.write_bytes(b"old")
    os.chown(out, 12345, 23456)
    out.chmod(0o640)
    result = segcli(
        command[0], "[bold]x.npy", "ids.npy", *command[1:], "-q", "-o", out, cwd=hostile
    )
    assert result.returncode == 0, result.stderr
    found = out.stat()
    assert (found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)) == (12345, 23456, 0o640)
    np.testing.assert_array_equal(np.load(out), [1.0, 5.0])


#: A POSIX access ACL as Linux stores it in ``system.posix_acl_access``: the owner rw, user
#: 12345 rw, the group r, the mask rw, others r (mode 0o664).
_ACL = struct.pack("<I", 2) + b"".join(
    struct.pack("<HHI", tag, perm, who)
    for tag, perm, who in [
        (0x01, 6, 0xFFFFFFFF),
        (0x02, 6, 12345),
        (0x04, 4, 0xFFFFFFFF),
        (0x10, 6, 0xFFFFFFFF),
        (0x20, 4, 0xFFFFFFFF),
    ]
)


@pytest.mark.skipif(not hasattr(os, "setxattr"), reason="needs Linux's extended attributes")
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum"]])
def test_replacing_an_output_keeps_its_acl_and_extended_attributes(hostile, command):
    # The replacement was a new file: an ACL that let a colleague write the old one was lost.
    out = hostile / "out.npy"
    out.write_bytes(b"old")
    out.chmod(0o664)
    try:
        os.setxattr(out, "user.team", b"analytics")
        os.setxattr(out, "system.posix_acl_access", _ACL)
    except OSError as exc:
        pytest.skip(f"this file system keeps no ACL or user attribute ({exc.strerror})")
    result = segcli(
        command[0], "[bold]x.npy", "ids.npy", *command[1:], "-q", "-o", out, cwd=hostile
    )
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(out), [1.0, 5.0])
    assert os.getxattr(out, "user.team") == b"analytics"
    assert os.getxattr(out, "system.posix_acl_access") == _ACL
    assert stat.S_IMODE(out.stat().st_mode) == 0o664


@needs_root
def test_a_file_mounted_on_its_own_is_refused_before_any_input_is_read(tmp_path):
    # A container's one-file volume: the rename over it failed (EBUSY) only after the whole run.
    volume, out = tmp_path / "host file.csv", tmp_path / "in container" / "out put.csv"
    volume.write_bytes(b"host\n")
    out.parent.mkdir()
    out.write_bytes(b"")
    if subprocess.run(["mount", "--bind", volume, out], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount a file here")
    try:
        result = segcli("sum", tmp_path / "missing.npy", "ids.npy", "-o", out)
    finally:
        subprocess.run(["umount", out], check=True)
    assert result.returncode == 5
    assert result.stderr.decode() == (
        f"Error: -o {out}: is a mount point (a file mounted on its own, as a container's one-file "
        "volume), which cannot be replaced whole; write another file and copy it over, or let "
        "the shell write it (-o - --format FORMAT > PATH)\n"
    )
    assert volume.read_bytes() == b"host\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host file.csv", "in container"]


def test_an_owner_the_process_may_not_give_is_left_as_a_new_file_would_be(tmp_path, monkeypatch):
    # Only root may give a file away: for anyone else the chown fails, and the commit goes on.
    from segcli.io.commit import OutputSet

    out = tmp_path / "out.bin"
    out.write_bytes(b"old")
    mine = (out.stat().st_uid, out.stat().st_gid)
    tried = []

    def refused(path: str, uid: int, gid: int) -> None:
        tried.append((uid, gid))
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "stat", _stat_owned_by(os.stat, str(out), (12345, 23456)))
    monkeypatch.setattr(os, "chown", refused)
    with OutputSet() as outputs:
        outputs.reserve(str(out))
        with outputs.stage(str(out)) as handle:
            handle.write(b"new")
    assert out.read_bytes() == b"new"
    assert tried == [(12345, 23456), (-1, 23456)]  # the owner and group, then the group alone
    monkeypatch.undo()
    assert (out.stat().st_uid, out.stat().st_gid) == mine


def _stat_owned_by(real_stat: Any, path: str, owner: tuple[int, int]) -> Any:
    """``os.stat`` that reports ``path`` as owned by ``owner`` (uid, gid)."""

    def fake(name: Any, *args: Any, **kwargs: Any) -> Any:
        found = real_stat(name, *args, **kwargs)
        if os.fspath(name) != path:
            return found
        fields = list(found)
        fields[4], fields[5] = owner
        return os.stat_result(fields)

    return fake
