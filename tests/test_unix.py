"""segcli as a well-kept Unix tool: pipes, closed streams, one-line errors, honest exit codes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.errors import EXIT_BROKEN_PIPE, EXIT_CODES
from tests.matrix import default_run
from tests.pipes import fifo_fed_with

README = Path(__file__).resolve().parent.parent / "README.md"


def segcli(*args: object, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    """The real entry point in a child process: pipes, closed descriptors and exit codes as a
    shell sees them."""
    kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    command = [sys.executable, "-m", "segcli", *map(str, args)]
    return subprocess.run(command, timeout=60, check=False, **kwargs)


def stderr_lines(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    return result.stderr.decode().splitlines()


def closed_after_ten_bytes(argv: list[object]) -> tuple[int, bytes]:
    """Run segcli with ``argv``, read 10 bytes of its stdout and close it, as ``| head -c 10``
    does: its exit code and stderr."""
    command = [sys.executable, "-m", "segcli", *map(str, argv)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.read(10)
        child.stdout.close()
        stderr = child.stderr.read()
        return child.wait(timeout=60), stderr


@pytest.fixture
def wide_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A result far larger than a pipe's buffer, so a reader that leaves early cuts it off."""
    data, ids = tmp_path / "wide.npy", tmp_path / "wide_ids.npy"
    np.save(data, np.ones(300_000, np.float64))
    np.save(ids, np.arange(300_000, dtype=np.int64))
    return data, ids


# The FIFO test of tests/test_unix_edges.py takes every format in the default run; stdout takes
# the default text and two binary writers there, every format in the full matrix.
@default_run(lambda fmt: fmt in (None, "npy", "parquet"))
@pytest.mark.parametrize("fmt", [None, "npy", "npz", "parquet", "arrow", "csv", "tsv", "json"])
def test_closed_stdout_exits_141_silently_for_every_format(wide_pair, fmt):
    output = [] if fmt is None else ["-o", "-", "--format", fmt]
    assert closed_after_ten_bytes(["sum", *wide_pair, "-q", *output]) == (EXIT_BROKEN_PIPE, b"")


@pytest.mark.parametrize(
    ("command", "output"),
    [(["sum"], []), (["agg", "--op", "sum,mean"], []), (["max"], ["-o", "-", "--format", "csv"])],
)
def test_closed_stdout_still_writes_the_summary_json_with_exit_141(
    wide_pair, tmp_path, command, output
):
    summary = tmp_path / "s.json"
    argv = [command[0], *map(str, wide_pair), *command[1:], "-q", *output]
    argv += ["--summary-json", str(summary)]
    assert closed_after_ten_bytes(argv) == (EXIT_BROKEN_PIPE, b"")
    # 141 prints no line, so error is null; exit_code says how the run ended.
    facts = json.loads(summary.read_text())
    assert facts == {
        "schema_version": 1,
        "command": command[0],
        "exit_code": EXIT_BROKEN_PIPE,
        "error": None,
    }


@pytest.fixture
def one_block_table(tmp_path: Path) -> Path:
    """200,000 segments: text that leaves in one write, longer than a pipe's buffer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "one_block.parquet"
    rows = np.arange(200_000)
    pq.write_table(pa.table({"k": rows.astype(str), "s": rows, "v": np.ones(rows.size)}), path)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["sum", "--ids-column", "s"],
        ["sum", "--by", "k"],
        ["agg", "--op", "sum", "--ids-column", "s"],
        ["agg", "--op", "sum", "--ids-column", "s", "-o", "-", "--format", "csv"],
        ["agg", "--op", "sum", "--ids-column", "s", "-o", "-", "--format", "npz"],
    ],
)
def test_reader_leaving_mid_write_of_one_block_is_141(one_block_table, args):
    # A pipe takes part of one large write and returns the count, no error: a writer that
    # ignores the count drops the rest and exits 0 as if all of it had been read.
    command, *options = args
    argv = [command, one_block_table, "--data-column", "v", *options, "-q"]
    assert closed_after_ten_bytes(argv) == (EXIT_BROKEN_PIPE, b"")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("output", [[], ["-o", "-", "--format", "csv"]])
def test_full_stdout_is_exit_5_in_one_line(pair, output):
    with open("/dev/full", "wb") as full:
        result = segcli("sum", *pair, "-q", *output, stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 5
    assert stderr_lines(result) == ["Error: <stdout>: cannot write (No space left on device)"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_info_to_a_full_stdout_is_exit_5_in_one_line(pair, json_flag):
    with open("/dev/full", "wb") as full:
        result = segcli("info", pair[0], *json_flag, stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 5
    assert stderr_lines(result) == ["Error: <stdout>: cannot write (No space left on device)"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--help"], ["--version"], ["sum", "--help"]])
def test_help_and_version_to_a_full_stdout_are_exit_5_in_one_line(args):
    with open("/dev/full", "wb") as full:
        result = segcli(*args, stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 5
    assert stderr_lines(result) == ["Error: <stdout>: cannot write (No space left on device)"]


def test_version_to_a_closed_stdout_is_exit_5_in_one_line():
    result = segcli("--version", preexec_fn=lambda: os.close(1))
    assert result.returncode == 5
    assert stderr_lines(result) == ["Error: <stdout>: cannot write (Bad file descriptor)"]


def test_closed_stdin_reads_as_no_input(pair):
    result = segcli("sum", "-", pair[1], "-q", stdin=subprocess.DEVNULL)
    closed = segcli("sum", "-", pair[1], "-q", preexec_fn=lambda: os.close(0))
    for got in (result, closed):
        assert got.returncode == 3
        assert stderr_lines(got) == [
            "Error: <stdin>: no input (expected a .npy or Arrow IPC stream)"
        ]


def test_closed_stdout_descriptor_is_a_write_error(pair):
    result = segcli("sum", *pair, "-q", preexec_fn=lambda: os.close(1))
    assert result.returncode == 5
    assert result.stderr.decode().splitlines() == [
        "Error: <stdout>: cannot write (Bad file descriptor)"
    ]


@pytest.mark.parametrize(("args", "code"), [([], 0), (["-n", "1"], 1), (["--nope"], 2)])
def test_closed_stderr_keeps_the_exit_code(pair, args, code):
    result = segcli("sum", *pair, *args, preexec_fn=lambda: os.close(2))
    assert result.returncode == code


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--fil", "1"],
            "Error: No such option '--fil'. Did you mean '--fill'? (see 'segcli sum --help')",
        ),
        (
            ["-n", "-1"],
            "Error: Invalid value for '-n' / '--num-segments': -1 is not in the range x>=0. "
            "(see 'segcli sum --help')",
        ),
        (
            ["--rtol", "-1"],
            "Error: Invalid value for '--rtol': -1.0 is not a finite number >= 0 "
            "(see 'segcli sum --help')",
        ),
        (
            ["--atol", "nan"],
            "Error: Invalid value for '--atol': nan is not a finite number >= 0 "
            "(see 'segcli sum --help')",
        ),
        (
            ["--atol", "inf"],
            "Error: Invalid value for '--atol': inf is not a finite number >= 0 "
            "(see 'segcli sum --help')",
        ),
        (
            ["--memory-limit", "5IB"],
            "Error: --memory-limit '5IB' is not a size (e.g. 512MB, 2GB, 1.5GiB) "
            "(see 'segcli sum --help')",
        ),
        (
            ["--chunk-rows", str(2**64)],
            "Error: Invalid value for '--chunk-rows': 18446744073709551616 is not in the range "
            "1<=x<=4611686018427387904. (see 'segcli sum --help')",
        ),
    ],
)
def test_usage_errors_are_one_line_with_the_hint(pair, args, line):
    result = segcli("sum", *pair, *args)
    assert result.returncode == 2
    assert stderr_lines(result) == [line]
    assert result.stdout == b""


def test_usage_error_of_a_group_level_command_names_segcli():
    result = segcli("frobnicate")
    assert result.returncode == 2
    [line] = stderr_lines(result)
    assert line.startswith("Error: No such command 'frobnicate'.")
    assert line.endswith("(see 'segcli --help')")


def _readme_exit_codes() -> list[tuple[int, str]]:
    text = README.read_text()
    section = text[text.index("## Exit codes") :]
    section = section[: section.index("\n\n", section.index("| code |"))]
    return [
        (int(code), meaning)
        for code, meaning in re.findall(r"^\| (\d+) \| (.*) \|$", section, re.M)
    ]


def test_readme_and_help_list_every_exit_code():
    assert _readme_exit_codes() == list(EXIT_CODES)
    for args in (["--help"], ["sum", "--help"], ["check", "--help"], ["info", "--help"]):
        help_text = " ".join(CliRunner().invoke(cli, args).stdout.split())
        for code, meaning in EXIT_CODES:
            assert f"{code} {meaning}" in help_text, (args, code)


def cli_run(*args: object, input: bytes | None = None) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


@pytest.mark.parametrize(
    ("golden", "message"),
    [
        ("[1, 2]", "not a segcli result JSON (expected an object with shape, dtype and values"),
        ('{"shape": [3]}', "not a segcli result JSON (no 'dtype' key)"),
        ('{"shape": [3], "dtype": "float32", "values": [1e400, 1, 2]}', "1e400 is out of"),
        ('{"shape": [1e400], "dtype": "float32", "values": [1]}', "1e400 is out of"),
        ('{"shape": 3, "dtype": "float32", "values": [1]}', "not a segcli result JSON ("),
        ('{"shape": [3], "dtype": "nope", "values": [1, 2, 3]}', "not a segcli result JSON ("),
        ('{"shape": [3], "dtype": "float32", "values": [1, [2], 3]}', "not a segcli result"),
        ('{"shape": [3], "dtype": "int8", "values": [1, 2, 3000]}', "not a segcli result JSON ("),
    ],
)
def test_malformed_expect_json_is_one_line_exit_3(pair, tmp_path, golden, message):
    path = tmp_path / "golden.json"
    path.write_text(golden)
    result = cli_run("sum", *pair, "-q", "--expect", path)
    assert result.exit_code == 3
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Error: {path}: ") and message in line


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_golden_table_without_its_value_column_says_so(pair, tmp_path, suffix):
    # Only a segcli table of an (n, 0) result has no value column; one whose value column was
    # renamed must not read as that and fail as a shape mismatch, (3, 0) against (3,).
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    path = tmp_path / f"golden.{suffix}"
    table = pa.table({"segment": [0, 1, 2], "val": [3.0, 0.0, 7.0], "count": [2, 0, 2]})
    if suffix == "parquet":
        pq.write_table(table, path)
    else:
        pcsv.write_csv(table, path)
    result = cli_run("sum", *pair, "-q", "--expect", path)
    assert result.exit_code == 3
    assert result.stderr.splitlines() == [
        f"Error: {path}: no 'value' or 'value_*' columns (columns: segment, val, count)"
    ]


@pytest.mark.parametrize(
    ("segments", "line"),
    [
        ("0,7,2", "row 1 has segment 7, not one of the result's segments 0..2 (1 row differs)"),
        ("2,0,2", "row 2 has segment 2 again (first at row 0); the result has each of "),
    ],
)
def test_golden_with_other_segments_is_a_failed_check_naming_the_row(
    pair, tmp_path, segments, line
):
    # Like agg's golden and --by's keys: other segments are a mismatch (exit 4), not a
    # corrupt file (exit 3).
    path = tmp_path / "golden.csv"
    rows = zip(segments.split(","), ["3.0", "0.0", "7.0"], strict=True)
    path.write_text("segment,value\n" + "".join(f"{s},{v}\n" for s, v in rows))
    result = cli_run("sum", *pair, "-q", "--expect", path)
    assert result.exit_code == 4
    [got] = result.stderr.splitlines()
    assert got.startswith(f"Error: {path}: {line}")


def test_expect_with_a_two_array_npz_names_no_missing_option(pair, tmp_path):
    golden = tmp_path / "two.npz"
    np.savez(golden, a=np.zeros(3), b=np.zeros(3))
    result = cli_run("sum", *pair, "-q", "--expect", golden)
    assert result.exit_code == 3
    assert result.stderr.splitlines() == [
        f"Error: {golden}: holds 2 arrays and none is named 'result' (keys: a, b); "
        "a golden .npz needs a 'result' array or one array"
    ]
    assert "--key" not in result.stderr


def test_expect_mismatch_shows_got_vs_expected_and_largest_differences(pair, tmp_path):
    golden = tmp_path / "golden.npy"
    np.save(golden, np.array([3, 1, 9, 0], np.float32))  # the result is [3, 0, 7, 0]
    result = cli_run("sum", *pair, "-n", "4", "-q", "--expect", golden)
    assert result.exit_code == 4
    assert result.stderr.splitlines() == [
        f"Error: {golden}: 2 of 4 segments differ (rtol=1e-05, atol=1e-08): 1, 2; "
        "segment 1 got 0. expected 1., segment 2 got 7. expected 9.; "
        "largest difference: absolute 2 (segment 2), relative 1 (segment 1)"
    ]


def test_expect_mismatch_of_large_integers_gives_their_exact_difference(tmp_path):
    """int64 values 1,000 apart near 2**62 are 1,024 apart in float64, and uint64 values one
    apart near 2**64 are 0 apart: the largest difference is the integers' own."""
    data, ids, golden = tmp_path / "d.npy", tmp_path / "i.npy", tmp_path / "golden.npy"
    np.save(ids, np.array([0, 1]))
    for values, expected, difference in (
        ([2**62, 5], [2**62 + 1000, 5], "absolute 1000 (segment 0)"),
        ([2**64 - 3, 5], [2**64 - 2, 5], "absolute 1 (segment 0)"),
    ):
        dtype = np.int64 if values[0] < 2**63 else np.uint64
        np.save(data, np.array(values, dtype))
        np.save(golden, np.array(expected, dtype))
        result = cli_run("first", data, ids, "-q", "--expect", golden)
        assert result.exit_code == 4
        assert f"largest difference: {difference}, relative" in result.stderr, result.stderr


def test_dev_stdin_pipe_keeps_the_bytes_the_sniff_read(pair):
    result = segcli("sum", "/dev/stdin", pair[1], "-q", input=pair[0].read_bytes())
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"0\t3.0\n1\t0.0\n2\t7.0\n"


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]])
def test_process_substitution_pipes_read_in_memory_and_streamed(pair, chunk):
    """``segcli sum <(cat data.npy) <(cat ids.npy)``: two pipes named /dev/fd/N."""
    pipes = [os.pipe() for _ in pair]
    with subprocess.Popen(
        [sys.executable, "-m", "segcli", "sum", *(f"/dev/fd/{r}" for r, _ in pipes), "-q", *chunk],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=[r for r, _ in pipes],
    ) as child:
        for (read_end, write_end), path in zip(pipes, pair, strict=True):
            os.close(read_end)
            os.write(write_end, path.read_bytes())
            os.close(write_end)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out == b"0\t3.0\n1\t0.0\n2\t7.0\n"


@pytest.fixture
def table_bytes(tmp_path: Path) -> dict[str, bytes]:
    import pyarrow as pa
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    table = pa.table({"v": np.arange(4.0), "s": np.array([0, 0, 1, 1])})
    pq.write_table(table, tmp_path / "t.parquet")
    feather.write_feather(table, tmp_path / "t.feather")
    return {fmt: (tmp_path / f"t.{fmt}").read_bytes() for fmt in ("parquet", "feather")}


@pytest.mark.parametrize("fmt", ["parquet", "feather"])
def test_parquet_and_feather_on_stdin_are_read(table_bytes, fmt):
    result = cli_run(
        "sum", "-", "--data-column", "v", "--ids-column", "s", "-q", input=table_bytes[fmt]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t1.0\n1\t5.0\n"


def _arrow_stream_bytes() -> bytes:
    import pyarrow as pa

    table = pa.table({"v": np.arange(4.0), "s": np.array([0, 0, 1, 1])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]])
def test_arrow_stream_through_a_pipe_path_reads_as_through_stdin(tmp_path, chunk):
    # ``<(...)`` and ``/dev/stdin`` name a pipe without a suffix: the bytes must say the format.
    stream = _arrow_stream_bytes()
    columns = ["--data-column", "v", "--ids-column", "s", "-q", *chunk]
    through_stdin = segcli("sum", "-", *columns, input=stream)
    fifo = fifo_fed_with(tmp_path, stream)
    through_path = segcli("sum", fifo, *columns)
    assert through_stdin.returncode == 0, through_stdin.stderr
    assert through_path.returncode == 0, through_path.stderr
    assert through_path.stdout == through_stdin.stdout == b"0\t1.0\n1\t5.0\n"
    assert "ipc: stream" in segcli("info", fifo_fed_with(tmp_path, stream)).stdout.decode()


CSV_TEXT = b"v,s\n1.0,0\n2.0,1\n"
TEXT_REFUSED = (
    "this looks like CSV/TSV text, which is read only from a path ending in .csv or .tsv (a "
    "file, or a named pipe), not from stdin or <(...); save it to such a file"
)


@pytest.mark.parametrize(
    "args",
    [
        ["sum", "-", "--data-column", "v", "--ids-column", "s"],
        ["sum", "-", "IDS"],
        ["info", "-"],
    ],
)
def test_csv_on_stdin_is_refused_by_name(pair, args):
    args = [pair[1] if arg == "IDS" else arg for arg in args]
    result = segcli(*args, "-q" if args[0] == "sum" else "--json", input=CSV_TEXT)
    assert result.returncode == 3
    assert stderr_lines(result) == [f"Error: <stdin>: {TEXT_REFUSED}"]


def _two_gib_of_address_space() -> None:
    """A regression that read the endless stream whole fails with MemoryError, not the OOM
    killer."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.parametrize(
    "args", [["sum", "-", "IDS"], ["info", "-"], ["info", "/dev/zero"]], ids=lambda a: a[-1]
)
def test_unknown_bytes_on_a_stream_are_refused_from_their_first_bytes(pair, args):
    """Bytes that open no known format are not read whole in the hope of an Arrow stream: an
    endless one (/dev/zero) is refused at once."""
    args = [str(pair[1]) if arg == "IDS" else arg for arg in args]
    with open("/dev/zero", "rb") as zeros:
        result = subprocess.run(
            [sys.executable, "-m", "segcli", *args],
            stdin=zeros,
            capture_output=True,
            timeout=60,
            preexec_fn=_two_gib_of_address_space,
        )
    label = "<stdin>" if "-" in args else "/dev/zero"
    assert result.returncode == 3, result.stderr
    assert stderr_lines(result) == [
        f"Error: {label}: not a .npy, Parquet or Arrow IPC stream (it opens with bytes "
        "00 00 00 00 00 00; an Arrow stream opens with ff ff ff ff)"
    ]


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_info_reads_a_named_pipe_with_a_text_suffix_as_the_commands_do(tmp_path, suffix):
    text = CSV_TEXT if suffix == "csv" else b'{"v": 1.0, "s": 0}\n{"v": 2.0, "s": 1}\n'
    fifo = tmp_path / f"named.{suffix}"
    os.mkfifo(fifo)
    with subprocess.Popen(
        [sys.executable, "-m", "segcli", "info", str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as child:
        fifo.write_bytes(text)  # opens once segcli has, as a shell's writer would
        out, err = child.communicate(timeout=60)
    result = subprocess.CompletedProcess(child.args, child.returncode, out, err)
    assert result.returncode == 0, result.stderr
    assert f"size: {len(text)} bytes\nrows: 2\n".encode() in result.stdout
    assert b"  v: double, nulls 0\n  s: int64, nulls 0\n" in result.stdout


@pytest.mark.parametrize("name", ["named.csv.gz", "named.jsonl.bz2"])
@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "1"]])
def test_compressed_named_pipe_is_decompressed_by_its_suffix(tmp_path, name, chunk):
    import bz2
    import gzip

    text = CSV_TEXT if ".csv" in name else b'{"v": 1.0, "s": 0}\n{"v": 2.0, "s": 1}\n'
    fifo = tmp_path / name
    os.mkfifo(fifo)
    args = ["sum", fifo, "--data-column", "v", "--ids-column", "s", "-q", *chunk]
    with subprocess.Popen(
        [sys.executable, "-m", "segcli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as child:
        fifo.write_bytes(gzip.compress(text) if name.endswith(".gz") else bz2.compress(text))
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out == b"0\t1.0\n1\t2.0\n"


@pytest.mark.parametrize("command", [["sum", "--data-column", "v", "--ids-column", "s"], ["info"]])
def test_csv_through_a_pipe_path_is_refused_by_name(tmp_path, command):
    fifo = fifo_fed_with(tmp_path, CSV_TEXT)
    result = segcli(command[0], fifo, *command[1:])
    assert result.returncode == 3
    assert stderr_lines(result) == [f"Error: {fifo}: {TEXT_REFUSED}"]


GZIP_REFUSED = (
    "this is gzip-compressed, which is read only from a path whose suffix says so (.csv.gz, "
    ".jsonl.gz, ...), not from stdin or <(...); decompress it first, e.g. <(zcat FILE)"
)


@pytest.mark.parametrize("command", [["sum", "--data-column", "v", "--ids-column", "s"], ["info"]])
def test_compressed_stdin_and_pipe_are_refused_by_name(tmp_path, command):
    import gzip

    packed = gzip.compress(b'{"v": 1.0, "s": 0}\n')
    _refused_through_stdin_and_a_pipe(tmp_path, command, packed, GZIP_REFUSED)


def _refused_through_stdin_and_a_pipe(
    tmp_path: Path, command: list[str], payload: bytes, message: str
) -> None:
    """``payload`` given as ``-`` and through a named pipe: exit 3 and the one line."""
    through_stdin = segcli(command[0], "-", *command[1:], input=payload)
    fifo = fifo_fed_with(tmp_path, payload)
    through_path = segcli(command[0], fifo, *command[1:])
    for result, label in ((through_stdin, "<stdin>"), (through_path, str(fifo))):
        assert result.returncode == 3
        assert stderr_lines(result) == [f"Error: {label}: {message}"]


@pytest.mark.parametrize("where", ["pipe", "/dev/null"])
def test_an_empty_pipe_by_path_reads_as_no_input(pair, tmp_path, where):
    """``segcli sum <(failed-producer) ids.npy``: it said the pipe "opens with bytes ;"."""
    empty = fifo_fed_with(tmp_path, b"") if where == "pipe" else Path(where)
    result = segcli("sum", empty, pair[1], "-q")
    assert result.returncode == 3
    assert stderr_lines(result) == [
        f"Error: {empty}: no input (it gave no bytes; expected a .npy, Parquet or Arrow IPC stream)"
    ]


NPZ_REFUSED = (
    "this is an .npz archive, which is read from a file only (a zip archive is read by "
    "seeking), not from stdin or a pipe; save it to a file first"
)


@pytest.mark.parametrize("command", [["sum", "--data-key", "d", "--ids-key", "i"], ["info"]])
def test_npz_on_stdin_and_through_a_pipe_is_refused_by_name(tmp_path, command):
    archive = tmp_path / "a.npz"
    np.savez(archive, d=np.arange(3.0), i=np.array([0, 1, 1]))
    _refused_through_stdin_and_a_pipe(tmp_path, command, archive.read_bytes(), NPZ_REFUSED)


@pytest.mark.parametrize("ids", ["-", "ids"])
def test_npy_on_stdin_for_both_inputs_says_what_stdin_takes(pair, ids):
    args = ["sum", "-", "-"] if ids == "-" else ["sum", "-"]
    result = segcli(*args, input=pair[0].read_bytes())
    assert result.returncode == 2
    [line] = stderr_lines(result)
    if ids == "-":
        assert line.startswith("Error: DATA and IDS cannot both be '-': stdin holds one input; ")
        assert "give '-' once with --data-column and --ids-column" in line
    else:
        assert line.startswith("Error: <stdin>: a .npy stream holds one array; give IDS as a file")


def test_cut_off_npy_stream_says_how_many_rows_arrived(tmp_path):
    path, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(path, np.arange(100.0))
    np.save(ids, np.arange(100) % 7)
    cut = path.read_bytes()[:500]
    for args, input in (([path.with_name("cut.npy")], None), (["-"], cut)):
        path.with_name("cut.npy").write_bytes(cut)
        result = cli_run("sum", *args, ids, "-q", input=input)
        assert result.exit_code == 3
        [line] = result.stderr.splitlines()
        assert line.endswith("46 of 100 rows arrived (372 of 800 bytes)"), line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "v,s\n1,0\n2,99999999999999999999\n",
            "column 's' holds 99999999999999999999 at row 1, an integer beyond int64",
        ),
        ("v,s\n", "segment_ids has no values, so no type to tell (read as float64: a header-only"),
        ("v,s\n1,0\n2,1.5\n", "segment_ids[1] = 1.5 is not a whole number (1 such id)"),
        (
            "v,s\n1,0\n2,1.0\n",
            "segment_ids must be integers, got float64 with whole values; write them as plain "
            "integers (1, not 1.0, 1e0 or +1)",
        ),
        # pyarrow reads an integer with a plus sign as a float: the hint names the sign too.
        ("v,s\n1,+1\n2,0\n", "got float64 with whole values; write them as plain integers"),
    ],
)
def test_float_ids_from_csv_say_what_is_really_wrong(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    result = cli_run("sum", path, "--data-column", "v", "--ids-column", "s", "-q")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert message in line and "got float64 (accepted" not in line


def test_a_null_in_float_ids_under_skipna_is_named_with_the_float_problem(tmp_path):
    """Under --skipna a null reads as NaN: the message says it may be a null, and that the
    column is float because of how its numbers are written, not that a NaN is the fault."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "t.csv").write_text("v,s\n1.5,0.0\n2.5,\n3.5,1.0\n")
    pq.write_table(pa.table({"v": [1.0, 2.0, 3.0], "s": [0.0, None, 1.0]}), tmp_path / "t.parquet")
    hints = {
        "t.csv": "write them as plain integers (1, not 1.0, 1e0 or +1)",
        "t.parquet": "cast the column to an integer type first",
    }
    for name, hint in hints.items():
        path = tmp_path / name
        result = cli_run("mean", path, "--data-column", "v", "--ids-column", "s", "--skipna", "-q")
        assert result.exit_code == 1
        assert result.stderr.splitlines() == [
            f"Error: {path}:s: segment_ids[1] is NaN or null (1 such id); segment_ids must be "
            f"integers, got float64 with whole values otherwise; {hint}"
        ]


def test_whole_float_npy_ids_get_a_cast_hint(pair, tmp_path):
    ids = tmp_path / "f.npy"
    np.save(ids, np.array([0.0, 0.0, 2.0, 2.0]))
    result = cli_run("sum", pair[0], ids, "-q")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"Error: {ids}: segment_ids must be integers, got float64 with whole values; cast them "
        "to integers first, e.g. np.load(...).astype(np.int64)"
    ]


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "7"]])
def test_check_no_nan_names_the_first_nan(tmp_path, chunk):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    values = np.ones((100, 3))
    values[57, 2] = values[80, 0] = np.nan
    np.save(data, values)
    np.save(ids, np.arange(100) % 7)
    result = cli_run("check", data, ids, "--no-nan", "-q", *chunk)
    assert result.exit_code == 4
    assert result.stderr.splitlines() == [
        f"Error: {data}: 2 NaN values (--no-nan), the first at [57, 2]"
    ]


SAMPLES = README.parent / "sample_data"


def test_info_reads_npy_and_arrow_streams_on_stdin(tmp_path):
    import pyarrow as pa

    npy = (SAMPLES / "data.npy").read_bytes()
    result = cli_run("info", "-", "--json", input=npy)
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stdout)
    assert (facts["format"], facts["size"], facts["shape"]) == ("npy", len(npy), [1000])
    table = pa.table({"v": pa.array([1.0, None, 3.0]), "s": [0, 1, 1]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    result = cli_run("info", "-", input=sink.getvalue().to_pybytes())
    assert result.exit_code == 0, result.stderr
    assert "ipc: stream" in result.stdout and "  v: double, nulls 1" in result.stdout


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_info_on_a_truncated_npy_is_exit_3_with_rows_found(tmp_path, source):
    cut = (SAMPLES / "data.npy").read_bytes()[:300]
    path = tmp_path / "cut.npy"
    path.write_bytes(cut)
    result = cli_run("info", path if source == "file" else "-", input=cut)
    assert result.exit_code == 3
    label = path if source == "file" else "<stdin>"
    assert result.stderr.splitlines() == [
        f"Error: {label}: truncated .npy: 43 of 1000 rows arrived (172 of 4000 bytes)"
    ]
    assert result.stdout == ""


def test_info_shows_each_column_type_and_null_count(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": [1.0, None, None], "s": [0, 1, None]}), path)
    result = cli_run("info", path)
    assert result.exit_code == 0
    assert "  v: double, nulls 2\n  s: int64, nulls 1\n" in result.stdout


def test_info_counts_null_rows_of_nested_and_dotted_parquet_columns(tmp_path):
    """A list's leaf counts empty lists and null elements, a struct's its fields' nulls, and
    a name with a dot is no path: each column's count is its null rows, as in Arrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "a": [1.0, 2.0, 3.0],
            "l": pa.array([[1.0], [], [None]]),
            "s": pa.array([{"x": 1.0}, {"x": None}, None]),
            "a.b": [None, None, 1.0],
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    result = cli_run("info", path)
    assert result.exit_code == 0
    read_back = pq.read_table(path)  # Parquet names a list's item "element"
    for field, column in zip(read_back.schema, table.columns, strict=True):
        assert f"  {field.name}: {field.type}, nulls {column.null_count}\n" in result.stdout
    assert [column.null_count for column in table.columns] == [0, 0, 1, 2]


def test_info_counts_the_null_rows_of_each_parquet_column_sharing_a_name(tmp_path):
    """A nested column is read by position: read by name, the second ``a`` got the first's
    count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lists = [pa.array([[1.0], None, None]), pa.array([[1.0], [2.0], None])]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_arrays(lists, names=["a", "a"]), path, row_group_size=2)
    result = cli_run("info", path, "--json")
    assert result.exit_code == 0, result.stderr
    assert [column["nulls"] for column in json.loads(result.stdout)["columns"]] == [2, 1]


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_info_counts_rows_on_a_null_dictionary_entry_as_nulls(tmp_path, kind):
    # As --by counts them missing: a null index and an index to a null entry.
    import pyarrow as pa
    import pyarrow.ipc as ipc

    def batch(indices, entries):
        keys = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int8()), pa.array(entries))
        return pa.record_batch({"k": keys})

    path = tmp_path / "t.arrow"
    first, second = batch([0, None, 1], ["a", None]), batch([1, 1, 0], ["b", None])
    new = ipc.new_file if kind == "file" else ipc.new_stream
    with new(path, first.schema) as writer:
        writer.write_batch(first)
        if kind == "stream":  # a file holds one dictionary for every batch
            writer.write_batch(second)
    result = cli_run("info", path)
    assert result.exit_code == 0
    assert f"k: {first.schema.field('k').type}, nulls {2 if kind == 'file' else 4}\n" in (
        result.stdout
    )


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_info_counts_null_dictionary_entries_in_an_empty_batch_and_of_the_null_type(tmp_path, kind):
    # The sum of an empty batch's rows on a null entry is a null, not 0; and the null check
    # of a dictionary of the null type crashed the process.
    import pyarrow as pa
    import pyarrow.ipc as ipc

    indices = pa.array([0, None, 1], pa.int8())
    batch = pa.record_batch(
        {
            "k": pa.DictionaryArray.from_arrays(indices, pa.array(["a", None])),
            "n": pa.DictionaryArray.from_arrays(indices, pa.nulls(2)),
        }
    )
    path = tmp_path / "t.arrow"
    with (ipc.new_file if kind == "file" else ipc.new_stream)(path, batch.schema) as writer:
        writer.write_batch(batch)
        writer.write_batch(batch.slice(0, 0))
    result = cli_run("info", path)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.endswith(
        f"  k: {batch.schema.field('k').type}, nulls 2\n"
        f"  n: {batch.schema.field('n').type}, nulls 3\n"
    )


@pytest.mark.parametrize(
    ("text", "options", "columns"),
    [
        ("1.5,0\n2.5,1\n", ["--no-input-header"], "rows: 2\ncolumns:\n  1: double, nulls 0\n"),
        ("v;s\n1.5;0\n", ["--delimiter", ";"], "rows: 1\ncolumns:\n  v: double, nulls 0\n"),
        ("1.5;0\n", ["--delimiter", ";", "--no-input-header"], "  2: int64, nulls 0\n"),
    ],
)
def test_info_reads_a_csv_as_the_commands_would(tmp_path, text, options, columns):
    path = tmp_path / "t.csv"
    path.write_text(text)
    result = cli_run("info", path, *options)
    assert result.exit_code == 0, result.output
    assert columns in result.stdout


@pytest.mark.parametrize("option", [["--no-input-header"], ["--delimiter", ";"]])
def test_info_csv_options_on_another_format_are_a_usage_error(pair, option):
    result = cli_run("info", pair[0], *option)
    assert result.exit_code == 2
    assert f"{option[0]} applies to CSV/TSV inputs only" in result.stderr


def test_info_help_examples_name_files_that_exist(monkeypatch):
    monkeypatch.chdir(SAMPLES.parent)
    help_text = CliRunner().invoke(cli, ["info", "--help"]).stdout
    named = re.findall(r"sample_data/\S+", help_text)
    assert named
    for path in named:
        assert Path(path).is_file(), path
        assert cli_run("info", path).exit_code == 0


@pytest.mark.parametrize(
    ("stray", "n", "warned"),
    [(2_000_000, None, True), (999_999, None, False), (2_000_000, "2000001", False)],
)
def test_huge_inferred_n_warns_in_one_line_and_the_run_continues(pair, tmp_path, stray, n, warned):
    ids, out = tmp_path / "stray.npy", tmp_path / "out.npy"
    np.save(ids, np.array([0, 1, stray, 2]))
    result = cli_run("count", pair[0], ids, "-q", "-o", out, *(["-n", n] if n else []))
    assert result.exit_code == 0
    assert np.load(out).shape == (stray + 1,)
    expected = [
        f"Warning: n = {stray + 1:,} was inferred from the largest id, for only 4 ids: most "
        "segments will be empty (give -n to silence this, or check the ids for a stray value)"
    ]
    assert result.stderr.splitlines() == (expected if warned else [])


@pytest.mark.parametrize(
    "path",
    [
        [],
        ["--memory-limit", "10"],
        ["--chunk-rows", "1"],
        ["--engine", "dask"],
        ["stdin-data"],
        ["stdin-data", "--chunk-rows", "1"],
        ["stdin-ids"],
    ],
)
def test_zero_d_ids_give_the_in_memory_answer_on_every_path(tmp_path, path):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.arange(6.0).reshape(2, 3))
    np.save(ids, np.array(2))
    args: list[object] = [data, ids]
    given: bytes | None = None
    if path[:1] == ["stdin-data"]:
        args, given, path = ["-", ids], data.read_bytes(), path[1:]
    elif path[:1] == ["stdin-ids"]:
        args, given, path = [data, "-"], ids.read_bytes(), path[1:]
    result = cli_run("sum", *args, "-q", *path, input=given)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        "0\t0.0\t0.0\t0.0\t0.0\t0.0\t0.0\n"
        "1\t0.0\t0.0\t0.0\t0.0\t0.0\t0.0\n"
        "2\t0.0\t1.0\t2.0\t3.0\t4.0\t5.0\n"
    )


def test_zero_d_data_and_ids_check_over_the_streaming_threshold(tmp_path):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array(5.0))
    np.save(ids, np.array(2))
    result = cli_run("check", data, ids, "--chunk-rows", "1", "--summary-json", "-")
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stderr)
    assert (facts["num_segments"], facts["empty_segments"], facts["mode"]) == (3, 2, "in-memory")


@pytest.mark.parametrize(
    ("ids", "flags", "cause"),
    [
        ([0, -1, -1, 2], [], "2 with a negative id; first dropped: segment_ids[1] = -1"),
        (
            [0, 1, 5, 6],
            ["--sorted", "-n", "2"],
            "2 with an id >= n under --sorted; first dropped: segment_ids[2] = 5",
        ),
    ],
)
def test_check_max_dropped_fails_with_exit_4_and_writes_the_json(tmp_path, ids, flags, cause):
    data, ids_path, summary = tmp_path / "d.npy", tmp_path / "i.npy", tmp_path / "s.json"
    np.save(data, np.arange(4.0))
    np.save(ids_path, np.array(ids))
    passing = cli_run("check", data, ids_path, *flags, "--max-dropped", "2", "-q")
    assert passing.exit_code == 0, passing.stderr
    args = ["check", data, ids_path, *flags, "--max-dropped", "1", "-q", "--summary-json", summary]
    result = cli_run(*args)
    assert result.exit_code == 4
    line = f"Error: {ids_path}: 2 dropped rows, more than --max-dropped 1 ({cause})"
    assert result.stderr.splitlines() == [line]
    facts = json.loads(summary.read_text())
    assert (facts["passed"], facts["exit_code"], facts["error"]) == (False, 4, line)
    assert facts["rows_dropped"] == 2


@pytest.mark.parametrize("command", ["check", "sum"])
def test_summary_json_is_written_when_the_run_fails(pair, tmp_path, command):
    summary = tmp_path / "s.json"
    result = cli_run(command, *pair, "-n", "1", "-q", "--summary-json", summary)
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    facts = json.loads(summary.read_text())
    assert facts["command"] == command
    assert (facts["exit_code"], facts["error"]) == (1, line)
    assert not list(tmp_path.glob("*.tmp*"))


def test_summary_json_of_a_passing_run_says_exit_0(pair):
    result = cli_run("sum", *pair, "-q", "--summary-json", "-")
    facts = json.loads(result.stderr)
    assert (facts["exit_code"], facts["error"]) == (0, None)


def test_skips_are_summarised_in_one_line(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(5))
        def test_gpu(i):
            pytest.skip("engine 'cupy' is not available")

        def test_other():
            pytest.skip("needs /dev/full")

        def test_runs():
            pass
        """
    )
    result = pytester.runpytest("-rfE", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=6)
    lines = result.outlines
    assert "skipped 6: 5 engine 'cupy' is not available; 1 needs /dev/full" in lines
    assert not [line for line in lines if line.startswith("SKIPPED")]


def test_readme_documents_every_check_json_field_and_the_options(pair):
    result = cli_run("check", *pair, "-q", "--summary-json", "-")
    text = README.read_text()
    section = text[text.index("`segcli check --summary-json` writes:") :]
    section = section[: section.index("\n\n", section.index("| field |"))]
    documented = set(re.findall(r"`(\w+)`", section))
    assert set(json.loads(result.stderr)) <= documented
    for phrase in ("`--fast-atomics`", "`segcli check --op OP`", "`segcli info FILE --json`"):
        assert phrase in text


def test_plain_segcli_shows_the_help_not_an_error_line():
    result = segcli()
    assert result.returncode in (0, 2)  # click 8.2 exits 2 here, older versions 0
    assert b"Usage: segcli [OPTIONS] COMMAND [ARGS]..." in result.stdout + result.stderr
    assert not (result.stdout + result.stderr).startswith(b"Error:")


def test_streamed_float_ids_get_a_hedged_cast_hint(pair, tmp_path):
    ids = tmp_path / "f.npy"
    np.save(ids, np.array([0.0, 0.0, 2.0, 2.0]))
    result = cli_run("sum", pair[0], "-", "-q", input=ids.read_bytes())
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "Error: <stdin>: segment_ids must be integers, got float64 (accepted: int8/16/32/64, "
        "uint8/16/32/64); if they hold whole numbers, cast them to integers first, e.g. "
        "np.load(...).astype(np.int64)"
    ]


def test_info_on_a_pipe_path_reads_it_once(pair):
    read_end, write_end = os.pipe()
    with subprocess.Popen(
        [sys.executable, "-m", "segcli", "info", f"/dev/fd/{read_end}", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=[read_end],
    ) as child:
        os.close(read_end)
        os.write(write_end, pair[0].read_bytes())
        os.close(write_end)
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    facts = json.loads(out)
    assert (facts["format"], facts["shape"], facts["size"]) == ("npy", [4], pair[0].stat().st_size)


def test_a_signalling_nan_leaves_stderr_silent(tmp_path):
    """NumPy reports widening a float32 signalling NaN as a RuntimeWarning; the run's result
    already holds the NaN, and -q means nothing on stderr."""
    data, ids = tmp_path / "snan.npy", tmp_path / "ids.npy"
    values = np.array([1, 2, 3, 4], np.float32)
    values.view(np.uint32)[1] = 0x7F800001  # a signalling NaN
    np.save(data, values)
    np.save(ids, np.array([0, 0, 1, 1], np.int32))
    for op in ("sum", "mean"):
        result = segcli(op, data, ids, "-q")
        assert result.returncode == 0, result.stderr
        assert result.stderr == b""
        assert result.stdout.decode().splitlines()[0] == "0\tnan"


@pytest.mark.parametrize(
    ("args", "help_of"),
    [
        (["sum", "a.npy", "b.npy", "-n"], "segcli sum"),
        (["agg", "a.npy", "--op"], "segcli agg"),
        (["-n"], "segcli"),
    ],
)
def test_an_option_missing_its_value_points_to_its_commands_help(args, help_of):
    result = segcli(*args)
    assert result.returncode == 2
    [line] = stderr_lines(result)
    assert line.endswith(f"(see '{help_of} --help')"), line


@pytest.mark.parametrize(
    ("code", "status", "said"), [(3, 3, ""), (None, 0, ""), ("bye", 1, "bye\n")]
)
def test_the_process_ends_after_its_exit_handlers_without_teardown(code, status, said):
    """``leave`` skips the interpreter's teardown (where native thread pools may abort a
    finished run) but not what Python's exit does: exit handlers, flushed streams."""
    script = (
        "import atexit, sys\n"
        "from segcli.__main__ import leave\n"
        "atexit.register(lambda: print('handler ran'))\n"
        "sys.stdout.write('buffered')\n"
        f"leave({code!r})\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=False
    )
    assert result.returncode == status
    assert result.stdout == b"bufferedhandler ran\n"
    assert result.stderr.decode() == said


def test_an_arrow_stream_without_its_end_marker_is_noted_once(tmp_path: Path) -> None:
    """An Arrow IPC stream cut short between two batches (its writer stopped early) reads as a
    shorter stream: the format lets a stream end without its end-of-stream marker. The run
    still succeeds, but says once, even with -q, that the marker is missing: from a file read
    whole or streamed, and from a pipe. A stream that has it is read without a word."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table({"x": [1.0, 2.0, 3.0], "seg": [0, 1, 1]})
    whole = tmp_path / "whole.arrows"
    with ipc.new_stream(str(whole), table.schema) as writer:
        writer.write_table(table)
        writer.write_table(table)
    cut = tmp_path / "cut.arrows"
    cut.write_bytes(whole.read_bytes()[:-8])
    note = "ends without the Arrow stream's end-of-stream marker; if its writer stopped early"
    args = ["--data-column", "x", "--ids-column", "seg", "-q", "-o", tmp_path / "out.npy"]
    for path in (whole, cut):
        for streamed in ([], ["--memory-limit", "1KB"]):
            done = segcli("sum", path, *args, *streamed)
            assert done.returncode == 0, done.stderr
            said = [line for line in stderr_lines(done) if note in line]
            assert said == (
                [f"segcli: note: {path} {note}, the rows it did not write are missing"]
                if path == cut
                else []
            )
            assert np.load(tmp_path / "out.npy").tolist() == [2.0, 10.0]
        with path.open("rb") as stdin:
            piped = segcli("sum", "-", *args, stdin=stdin)
        assert piped.returncode == 0, piped.stderr
        assert (note in piped.stderr.decode()) == (path == cut)
