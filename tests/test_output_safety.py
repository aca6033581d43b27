"""Writing a file is a promise: through symlinks, straight to FIFOs and devices, never over a
write-protected file or an input, and every output of a run or none."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.errors import UsageError
from segcli.io import OutputSet
from segcli.io.commit import TEMP_PREFIX

SEGCLI = (sys.executable, "-m", "segcli")
FORMATS = ("npy", "npz", "parquet", "arrow", "csv", "tsv", "json")


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def no_temp_files(*folders: Path) -> bool:
    return not any(p.name.startswith(TEMP_PREFIX) for f in folders for p in f.iterdir())


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


# ---------------------------------------------------------------------------------------------
# symlinks


def test_output_through_a_symlink_replaces_its_target_and_keeps_the_link(pair, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "real.npy"
    target.write_bytes(b"old")
    link = tmp_path / "link.npy"
    link.symlink_to(target)
    result = run("sum", *pair, "-q", "-o", link)
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    np.testing.assert_array_equal(np.load(target), [3, 0, 7])
    assert no_temp_files(tmp_path, elsewhere)


def test_output_through_a_dangling_symlink_creates_its_target(pair, tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    result = run("sum", *pair, "-q", "-o", link)
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink()
    assert json.loads((tmp_path / "made.json").read_text())["values"] == [3.0, 0.0, 7.0]


def test_summary_json_to_dev_stdout_writes_to_stdout_and_keeps_the_link(pair, tmp_path):
    stdout = tmp_path / "stdout.txt"
    with open(stdout, "wb") as handle:
        before = os.fstat(handle.fileno()).st_ino
        done = subprocess.run(
            [
                *SEGCLI,
                "sum",
                *map(str, pair),
                "-q",
                "-o",
                "out.npy",
                "--summary-json",
                "/dev/stdout",
            ],
            cwd=tmp_path,
            stdout=handle,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert Path("/dev/stdout").is_symlink()
    # Written into the shell's file, not renamed over it: the same inode holds the summary.
    assert stdout.stat().st_ino == before
    assert json.loads(stdout.read_text())["op"] == "sum"
    assert np.load(tmp_path / "out.npy").tolist() == [3.0, 0.0, 7.0]
    assert no_temp_files(tmp_path)


# ---------------------------------------------------------------------------------------------
# FIFOs, devices and /dev/fd/N


def _read_all(path: str, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as handle:
            into.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_streams_to_a_fifo_with_a_files_bytes(pair, tmp_path, fmt):
    reference = tmp_path / f"reference.{fmt}"
    assert run("mean", *pair, "-q", "-o", reference).exit_code == 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_all(str(fifo), got)
    result = run("mean", *pair, "-q", "-o", fifo, "--format", fmt)
    reader.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert got == [reference.read_bytes()]
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "csv"])
def test_keys_out_to_a_fifo_gets_a_files_bytes(tmp_path, fmt):
    # An Arrow key table went to a FIFO as an IPC stream, which a reader of keys.arrow (an
    # Arrow file, as -o writes to a FIFO) could not open.
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0, 3.0], "k": ["b", "a", "b"]}), table)
    by = ["sum", table, "--data-column", "x", "--by", "k", "-q"]
    reference = tmp_path / f"reference.{fmt}"
    assert run(*by, "-o", tmp_path / "a.npy", "--keys-out", reference).exit_code == 0
    fifo = tmp_path / f"keys.{fmt}"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_all(str(fifo), got)
    result = run(*by, "-o", tmp_path / "b.npy", "--keys-out", fifo)
    reader.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert got == [reference.read_bytes()]
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["-n", "1"], 1),
        (["--fill", "abc"], 2),
        (["--summary-json", "missing/s.json"], 5),
        (["--no-such-option"], 2),  # the parser stops before any option's value is looked at
    ],
    ids=["invalid-ids", "usage-error", "summary-folder-missing", "parse-error"],
)
def test_a_failed_run_ends_its_fifo_readers_file(pair, tmp_path, args, code):
    # The shell's > opens a FIFO before the command runs, so its reader sees an end of file
    # whatever the command does; segcli opened it only to write a result, and the reader of a
    # failed run (gzip < out.fifo) waited forever; so too when the run stopped before it had
    # looked at -o (--summary-json is checked first).
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = _read_all(str(fifo), got)
    args = [str(tmp_path / a) if a.startswith("missing/") else a for a in args]
    command = [*SEGCLI, "sum", *map(str, pair), "-q", "-o", str(fifo), "--format", "npy", *args]
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    reader.join(timeout=30)
    assert done.returncode == code, done.stderr
    assert got == [b""]
    assert stat.S_ISFIFO(fifo.stat().st_mode)


@pytest.mark.parametrize("summary", [["--summary-json", "-"], []], ids=["json", "table"])
def test_output_to_dev_stderr_of_a_file_comes_before_the_summary(pair, tmp_path, summary):
    # /dev/stderr opened again by name had a file offset of its own: the summary, written
    # through stderr's descriptor from offset 0 afterwards, overwrote the result.
    stderr = tmp_path / "stderr.txt"
    command = [*SEGCLI, "sum", *map(str, pair), "-o", "/dev/stderr", "--format", "csv"]
    with open(stderr, "wb") as handle:
        done = subprocess.run([*command, *summary], stderr=handle, timeout=60, check=False)
    assert done.returncode == 0
    text = stderr.read_text()
    assert text.startswith("segment,value,count\n0,3.0,2\n1,0.0,0\n2,7.0,2\n"), text
    assert "sum" in text[60:]


def test_output_to_dev_stdin_does_not_write_the_file_behind_it(pair, tmp_path):
    # Opened again by name, stdin's file took the result, though the shell opened it to read.
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\n")
    command = [*SEGCLI, "sum", *map(str, pair), "-q", "-o", "/dev/stdin", "--format", "csv"]
    with open(victim, "rb") as handle:
        done = subprocess.run(command, stdin=handle, capture_output=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (
        5,
        b"Error: -o /dev/stdin: cannot write (open for reading only)\n",
    )
    assert victim.read_bytes() == b"keep me\n"


@pytest.mark.parametrize(
    ("path", "reason"),
    [("/dev/stdin", "open for reading only"), ("/dev/fd/200", "Bad file descriptor")],
)
def test_a_descriptor_that_cannot_be_written_is_refused_before_any_input_is_read(
    tmp_path, path, reason
):
    # DATA does not exist: exit 5, not 3, shows the output was checked first (it was refused
    # only when the finished result went to it).
    command = [*SEGCLI, "sum", "missing.npy", "ids.npy", "-q", "-o", path, "--format", "csv"]
    with open(os.devnull, "rb") as stdin:
        done = subprocess.run(
            command, stdin=stdin, cwd=tmp_path, capture_output=True, timeout=60, check=False
        )
    assert (done.returncode, done.stderr.decode()) == (
        5,
        f"Error: -o {path}: cannot write ({reason})\n",
    )


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_a_key_table_that_cannot_be_written_keeps_the_result_off_stdout(
    tmp_path, monkeypatch, command
):
    # The result went to stdout (or a FIFO) first, and then the key table failed: its reader
    # had the result without its keys, from a run that failed. Now the file goes first.
    import errno

    import pyarrow as pa
    import pyarrow.parquet as pq

    from segcli.io import keyed

    def disk_full(*args: object) -> list[str]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(keyed, "key_fields", disk_full)
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0, 3.0], "k": ["b", "a", "b"]}), table)
    keys = tmp_path / "keys.csv"
    result = run(
        *command, table, "--data-column", "x", "--by", "k", "-q", "-o", "-", "--format", "npz",
        "--keys-out", keys,
    )  # fmt: skip
    assert result.exit_code == 5
    assert result.stderr == f"Error: --keys-out {keys}: cannot write (No space left on device)\n"
    assert result.stdout_bytes == b""
    assert names(tmp_path) == ["t.parquet"]


def test_output_to_dev_fd_like_process_substitution(pair, tmp_path):
    # ``-o >(gzip > x)`` hands segcli /dev/fd/N, the write end of a pipe.
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as reader:
        done = subprocess.Popen(
            [
                *SEGCLI,
                "sum",
                *map(str, pair),
                "-q",
                "-o",
                f"/dev/fd/{write_end}",
                "--format",
                "npy",
            ],
            pass_fds=(write_end,),
            stderr=subprocess.PIPE,
            text=True,
        )
        os.close(write_end)
        got = reader.read()
        _, stderr = done.communicate(timeout=60)
    assert done.returncode == 0, stderr
    np.testing.assert_array_equal(np.load(io.BytesIO(got)), [3, 0, 7])
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_writes_to_dev_null(pair, fmt):
    result = run(
        "sum", *pair, "-q", "-o", os.devnull, "--format", fmt, "--summary-json", os.devnull
    )
    assert result.exit_code == 0, result.stderr
    assert Path(os.devnull).is_char_device()


# ---------------------------------------------------------------------------------------------
# write-protected outputs


@pytest.mark.parametrize("via_link", [False, True])
def test_write_protected_output_is_refused_and_unchanged(pair, tmp_path, via_link):
    protected = tmp_path / "protected.npy"
    protected.write_bytes(b"keep me")
    protected.chmod(0o444)
    out = protected
    if via_link:
        out = tmp_path / "link.npy"
        out.symlink_to(protected)
    result = run("sum", *pair, "-q", "-o", out)
    assert result.exit_code == 5
    assert result.stderr == f"Error: -o {out}: is write-protected; not replacing it\n"
    assert protected.read_bytes() == b"keep me"
    assert stat.S_IMODE(protected.stat().st_mode) == 0o444
    assert no_temp_files(tmp_path)


def test_write_protected_summary_json_is_refused_before_anything_is_written(pair, tmp_path):
    summary = tmp_path / "s.json"
    summary.write_text("{}")
    summary.chmod(0o400)
    result = run("sum", *pair, "-q", "-o", tmp_path / "x.npy", "--summary-json", summary)
    assert result.exit_code == 5
    assert error_lines(result.stderr) == [
        f"Error: --summary-json {summary}: is write-protected; not replacing it"
    ]
    assert names(tmp_path) == ["data.npy", "ids.npy", "s.json"]


# ---------------------------------------------------------------------------------------------
# all outputs or none


def test_an_unknown_output_format_is_refused_before_any_input_is_read(tmp_path):
    result = run("sum", tmp_path / "missing.npy", tmp_path / "ids.npy", "-o", tmp_path / "x.bin")
    assert result.exit_code == 2
    assert error_lines(result.stderr)[0].startswith(f"Error: {tmp_path / 'x.bin'}: cannot tell")
    assert names(tmp_path) == []


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_a_folder_as_output_without_a_format_is_said_to_be_one(pair, tmp_path, command):
    # It said "cannot tell the output format from the file name" (exit 2); given a format,
    # the same folder was "is a directory" (exit 5).
    folder = tmp_path / "results"
    folder.mkdir()
    result = run(command[0], *pair, *command[1:], "-q", "-o", folder)
    assert result.exit_code == 5
    assert error_lines(result.stderr) == [f"Error: -o {folder}: is a directory"]
    assert names(folder) == []


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
@pytest.mark.parametrize("option", ["-o", "--summary-json"])
def test_an_empty_output_path_is_refused_before_anything_is_written(
    pair, tmp_path, monkeypatch, option, command
):
    # '' resolves to the working folder: once, the result went to stdout, then the summary
    # failed to replace the folder (exit 5), its temporary file left in the folder above.
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    before = names(tmp_path)
    result = run(command[0], *pair, *command[1:], "-q", option, "")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert error_lines(result.stderr) == [f"Error: {option} '': an empty path names no file"]
    assert names(tmp_path) == before and names(work) == []


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_an_empty_keys_out_path_is_said_to_be_one(tmp_path, command):
    # It was "--keys-out : need a .parquet, .arrow, .csv or .tsv file name", the path unseen.
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0], "k": ["b", "a"]}), table)
    by = [*command, table, "--data-column", "x", "--by", "k", "-q"]
    result = run(*by, "-o", tmp_path / "out.npz", "--keys-out", "")
    assert result.exit_code == 2
    assert error_lines(result.stderr) == ["Error: --keys-out '': an empty path names no file"]
    assert names(tmp_path) == ["t.parquet"]


def test_missing_summary_folder_fails_before_any_input_is_read(tmp_path):
    # The inputs do not even exist: exit 5 (not 3) proves the outputs were checked first.
    result = run(
        "sum",
        tmp_path / "missing.npy",
        tmp_path / "missing-ids.npy",
        "-o",
        tmp_path / "x.npy",
        "--summary-json",
        tmp_path / "nodir" / "s.json",
    )
    assert result.exit_code == 5
    assert result.stderr == (
        f"Error: --summary-json {tmp_path / 'nodir' / 's.json'}: folder {tmp_path / 'nodir'} "
        "does not exist\n"
    )
    assert names(tmp_path) == []


def test_output_folder_is_checked_for_check_too(tmp_path):
    summary = tmp_path / "nodir" / "s.json"
    result = run("check", tmp_path / "missing.npy", tmp_path / "ids.npy", "--summary-json", summary)
    assert result.exit_code == 5
    assert names(tmp_path) == []


def test_a_failed_check_writes_no_result_only_the_summary_saying_why(pair, tmp_path):
    golden = tmp_path / "golden.npy"
    np.save(golden, np.array([0, 0, 0], np.float32))
    out, summary = tmp_path / "x.npy", tmp_path / "s.json"
    result = run("sum", *pair, "-q", "-o", out, "--summary-json", summary, "--expect", golden)
    assert result.exit_code == 4
    # The result is never written; the summary is the run's report, so CI can read why it failed.
    assert names(tmp_path) == ["data.npy", "golden.npy", "ids.npy", "s.json"]
    assert json.loads(summary.read_text())["exit_code"] == 4


def test_both_outputs_are_written_together(pair, tmp_path):
    out, summary = tmp_path / "x.parquet", tmp_path / "s.json"
    result = run("sum", *pair, "-q", "-o", out, "--summary-json", summary)
    assert result.exit_code == 0, result.stderr
    assert json.loads(summary.read_text())["output_path"] == str(out)
    assert names(tmp_path) == ["data.npy", "ids.npy", "s.json", "x.parquet"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-o", "x.npy", "--summary-json", "x.npy"],
            "-o x.npy is the same file as --summary-json x.npy",
        ),
        (["-o", "data.npy"], "-o data.npy is the same file as DATA data.npy"),
        (["--summary-json", "ids.npy"], "--summary-json ids.npy is the same file as IDS ids.npy"),
        (["-o", "hard.npy"], "-o hard.npy is the same file as DATA data.npy"),
        (["-o", "soft.npy"], "-o soft.npy is the same file as DATA data.npy"),
        (["-o", "g.npy", "--expect", "g.npy"], "-o g.npy is the same file as --expect g.npy"),
    ],
)
def test_an_output_that_is_another_output_or_an_input_is_a_usage_error(
    pair, tmp_path, monkeypatch, args, message
):
    monkeypatch.chdir(tmp_path)
    os.link("data.npy", "hard.npy")
    os.symlink("data.npy", "soft.npy")
    np.save("g.npy", np.zeros(3, np.float32))
    before = {name: (tmp_path / name).read_bytes() for name in names(tmp_path)}
    result = run("sum", "data.npy", "ids.npy", "-q", *args)
    assert result.exit_code == 2
    assert error_lines(result.stderr) == [f"Error: {message}"]
    assert {name: (tmp_path / name).read_bytes() for name in names(tmp_path)} == before


@pytest.mark.parametrize(
    ("args", "stdout_to", "message"),
    [
        (
            ["-o", "/dev/stdout", "--summary-json", "/dev/stdout"],
            "mixed.txt",
            "-o /dev/stdout is the same file as --summary-json /dev/stdout",
        ),
        (
            ["-o", "/dev/fd/1", "--summary-json", "/proc/self/fd/1"],
            "mixed.txt",
            "-o /dev/fd/1 is the same file as --summary-json /proc/self/fd/1",
        ),
        (
            ["-o", "/dev/stdout", "--summary-json", "mixed.txt"],
            "mixed.txt",
            "-o /dev/stdout is the same file as --summary-json mixed.txt",
        ),
        (
            ["-o", "fifo", "--summary-json", "./fifo"],
            None,
            "-o fifo is the same file as --summary-json ./fifo",
        ),
        (
            ["-o", "fifo", "--summary-json", "link"],
            None,
            "-o fifo is the same file as --summary-json link",
        ),
        (
            ["-o", "fifo", "--summary-json", "hard"],
            None,
            "-o fifo is the same file as --summary-json hard",
        ),
        (
            ["-o", "/dev/stdout", "--summary-json", "fifo"],
            "fifo",
            "-o /dev/stdout is the same file as --summary-json fifo",
        ),
        (
            ["-o", "-", "--summary-json", "/dev/stdout"],
            "mixed.txt",
            "-o - is the same file as --summary-json /dev/stdout",
        ),
        (
            ["-o", "-", "--summary-json", "mixed.txt"],
            "mixed.txt",
            "-o - is the same file as --summary-json mixed.txt",
        ),
        (
            ["-o", "-", "--summary-json", "link"],
            "fifo",
            "-o - is the same file as --summary-json link",
        ),
    ],
    ids=[
        "dev-stdout-twice",
        "fd-1-twice",
        "stdout-is-the-file",
        "fifo-twice",
        "fifo-by-link",
        "fifo-hard-link",
        "stdout-is-the-fifo",
        "dash-and-dev-stdout",
        "dash-and-its-file",
        "dash-and-its-fifo",
    ],
)
def test_one_fifo_or_descriptor_named_by_both_outputs_is_a_usage_error(
    pair, tmp_path, args, stdout_to, message
):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "link").symlink_to("fifo")
    os.link(fifo, tmp_path / "hard")
    # The FIFO's reader: a run that wrote before refusing would hand it bytes.
    with subprocess.Popen(["cat", "fifo"], cwd=tmp_path, stdout=subprocess.PIPE) as reader:
        with open(tmp_path / (stdout_to or "stdout.txt"), "wb") as stdout:
            done = subprocess.run(
                [*SEGCLI, "sum", *map(str, pair), "-q", "--format", "csv", *args],
                cwd=tmp_path,
                stdout=stdout,
                stderr=subprocess.PIPE,
                text=True,
                timeout=60,
                check=False,
            )
        with contextlib.suppress(OSError):  # ENXIO: it saw its end of file and left
            # A writer that comes and goes: the reader's end of file, if it still waits.
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        got = reader.communicate(timeout=60)[0]
    assert done.returncode == 2
    assert error_lines(done.stderr) == [f"Error: {message} (see 'segcli sum --help')"]
    assert got == b""
    if stdout_to == "mixed.txt":
        assert (tmp_path / "mixed.txt").read_bytes() == b""


@pytest.mark.parametrize("summary", ["/dev/stdout", "mixed.txt"])
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_the_summary_json_on_the_results_stdout_is_a_usage_error(pair, tmp_path, command, summary):
    """Without -o the result prints on stdout: a summary bound there too would mix into the
    result lines, as with -o -. ``check`` prints no result, so its facts may go there."""
    with open(tmp_path / "mixed.txt", "wb") as stdout:
        done = subprocess.run(
            [*SEGCLI, *command, *map(str, pair), "-q", "--summary-json", summary],
            cwd=tmp_path,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert error_lines(done.stderr) == [
        f"Error: the result (on stdout without -o) is the same file as --summary-json "
        f"{summary} (see 'segcli {command[0]} --help')"
    ]
    assert (tmp_path / "mixed.txt").read_bytes() == b""
    with open(tmp_path / "mixed.txt", "wb") as stdout:
        checked = subprocess.run(
            [*SEGCLI, "check", *map(str, pair), "-q", "--summary-json", summary],
            cwd=tmp_path,
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    assert checked.returncode == 0, checked.stderr
    assert json.loads((tmp_path / "mixed.txt").read_text())["command"] == "check"


# ---------------------------------------------------------------------------------------------
# the transaction itself


def test_output_set_commits_every_output_together(tmp_path):
    paths = [str(tmp_path / name) for name in ("a.bin", "b.bin", "c.bin")]
    with OutputSet() as outputs:
        for path in paths:
            outputs.reserve(path)
        assert names(tmp_path) == []  # a long run holds no empty file
        for path in paths:
            with outputs.stage(path) as handle:
                handle.write(path.encode())
        assert all(name.startswith(TEMP_PREFIX) for name in names(tmp_path))
        assert not outputs.committed
    assert outputs.committed
    assert names(tmp_path) == ["a.bin", "b.bin", "c.bin"]
    assert all(Path(p).read_text() == p for p in paths)


def test_output_set_aborted_removes_every_staged_file(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"old")
    with pytest.raises(RuntimeError), OutputSet() as outputs:
        outputs.reserve(str(tmp_path / "a.bin"))
        outputs.reserve(str(tmp_path / "b.bin"))
        with outputs.stage(str(tmp_path / "a.bin")) as handle:
            handle.write(b"new")
        raise RuntimeError("a later step failed")
    assert not outputs.committed
    assert names(tmp_path) == ["a.bin"]
    assert (tmp_path / "a.bin").read_bytes() == b"old"


def test_output_set_two_names_for_one_file(tmp_path):
    with pytest.raises(UsageError, match="same file"), OutputSet() as outputs:
        outputs.reserve(str(tmp_path / "x.bin"))
        outputs.reserve(str(tmp_path / "." / "x.bin"), "--summary-json")
    assert names(tmp_path) == []


@pytest.mark.parametrize(
    ("bytes_free", "said"),
    [(0, "no space left on device"), (3 << 20, "3.0 MiB free on its device")],
)
def test_a_short_write_says_how_much_room_its_device_had(tmp_path, monkeypatch, bytes_free, said):
    """NumPy reports a short write (a full disk) by byte counts, with no errno: the message
    adds what the file system says is left."""
    from segcli.errors import WriteError

    class Full:
        f_bavail, f_frsize = bytes_free // 4096, 4096

    monkeypatch.setattr(os, "statvfs", lambda path: Full())
    target = str(tmp_path / "a.npy")
    with pytest.raises(WriteError) as raised, OutputSet() as outputs:
        outputs.reserve(target, "-o")
        with outputs.stage(target):
            raise OSError("2000000 requested and 131056 written")
    assert (
        str(raised.value)
        == f"-o {target}: cannot write (2000000 requested and 131056 written: {said})"
    )
    assert names(tmp_path) == []


@pytest.mark.parametrize("result_to", ["-", "/dev/stdout"])
def test_two_descriptors_into_one_pipe_are_two_streams(pair, result_to):
    """``-o - --summary-json /dev/stderr 2>&1 | tool``: the pipe takes both, as a terminal
    would (and as it takes the summary printed on stderr)."""
    outputs = ["--format", "csv", "-o", result_to, "--summary-json", "/dev/stderr"]
    done = subprocess.run(
        [*SEGCLI, "sum", *map(str, pair), "-q", *outputs],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    text = done.stdout.decode()
    assert "segment,value,count" in text and '"exit_code": 0' in text


def test_a_file_with_other_hard_links_is_replaced_and_said_so(pair, tmp_path):
    """The rename that keeps an output atomic gives it a new file: its other names keep the
    old bytes (the shell's > would write through them), and the run says so."""
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    os.link(target, tmp_path / "other.csv")
    done = subprocess.run(
        [*SEGCLI, "sum", *map(str, pair), "-q", "-o", str(target)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "other.csv").read_text() == "old\n"
    assert target.read_text().startswith("segment,value")
    note = f"segcli: note: {target} has another name (a hard link), which keeps the old contents"
    assert note in done.stderr


def test_a_replacement_drops_set_id_bits_without_root_privilege(monkeypatch, tmp_path):
    """As the kernel does when a process without privilege writes a file through >."""
    from segcli.io import commit

    path = tmp_path / "f"
    path.write_text("x")
    os.chmod(path, 0o6775)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert commit._kept_mode(os.stat(path)) == 0o775
    os.chmod(path, 0o6764)  # set-group-id without group execute marks locking, not privilege
    assert commit._kept_mode(os.stat(path)) == 0o2764
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert commit._kept_mode(os.stat(path)) == 0o6764
