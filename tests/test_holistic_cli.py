"""median, quantile and nunique on the command line: NumPy's answers per segment, the same bytes
in memory, over sorted streams and through --tmp-dir partitions, no partition file left behind,
and the usage errors of --q, --tmp-dir and the engines that refuse them."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from tests.peak import run_measured
from tests.reference import reference_reduce
from tests.test_signals import names, start, stop

HOLISTIC = ["median", "quantile", "nunique"]
Q = 0.3
#: ids of shape (rows,) or (rows, 2), data with these inner dimensions.
LAYOUTS = {"1d": ((60,), ()), "inner": ((60,), (3,)), "nd_ids": ((12, 5), (2,))}


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def error_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


def q_args(op: str) -> list[str]:
    return ["--q", str(Q)] if op == "quantile" else []


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values with ties (so nunique and the middle picks meet equal values), a NaN in floats."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    values = rng.integers(-40, 40, shape).astype(np.float64) / 4
    if kind == "u":
        values = np.abs(values) * 4
    elif kind == "i":
        values = values * 4
    data = values.astype(dtype)
    if kind == "c":
        data = data + 1j * rng.integers(0, 2, shape).astype(dtype)
    if kind == "f":
        data.reshape(-1)[7] = np.nan
    return data


def save(tmp_path: Path, data: np.ndarray, ids: np.ndarray) -> tuple[Path, Path]:
    data_path, ids_path = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data_path, data)
    np.save(ids_path, ids)
    return data_path, ids_path


def result_of(tmp_path: Path, op: str, data: Path, ids: Path, *options: object) -> np.ndarray:
    out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}.npy"
    result = run(op, data, ids, *q_args(op), *options, "-q", "-o", out)
    assert result.exit_code == 0, result.stderr
    return np.load(out)


def same_bytes(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


CASES = [
    (op, dtype)
    for op in HOLISTIC
    for dtype in ["float16", "float32", "float64", "int8", "int32", "uint64", "complex64", "bool"]
    if op == "nunique" or dtype not in ("complex64", "bool")
]


@pytest.mark.parametrize(("op", "dtype"), CASES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_cli_gives_numpys_answer_per_segment(tmp_path, op, dtype, layout):
    ids_shape, inner = LAYOUTS[layout]
    rng = np.random.default_rng([HOLISTIC.index(op), len(dtype), len(layout)])
    ids = rng.integers(-1, 6, ids_shape)
    ids[ids == 3] = 4  # segment 3 stays empty
    data = sample(dtype, ids_shape + inner, seed=len(dtype))
    paths = save(tmp_path, data, ids)
    got = result_of(tmp_path, op, *paths, "-n", 7)
    want = reference_reduce(data, ids, 7, op, q=Q)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


def test_int64_extremes_against_a_reference_that_does_not_wrap(tmp_path):
    """The reference loop took quantile's neighbours' difference in int64, where 3 - (-2**63)
    wraps: it gave +3.7e18 for a quantile between -2**63 and 3."""
    data = np.array([3, 3, -(2**63), 2**63 - 1, -7, 0], np.int64)
    ids = np.array([0, 0, 0, 1, 1, 1])
    got = result_of(tmp_path, "quantile", *save(tmp_path, data, ids))
    same_bytes(got, reference_reduce(data, ids, 2, "quantile", q=Q))
    assert -(2.0**63) < got[0] < 3


@pytest.mark.parametrize("op", HOLISTIC)
def test_sorted_family_drops_ids_at_or_past_n(tmp_path, op):
    ids = np.repeat(np.arange(8), 5)
    data = sample("float32", (40, 2))
    paths = save(tmp_path, data, ids)
    got = result_of(tmp_path, op, *paths, "--sorted", "-n", 6)
    same_bytes(got, reference_reduce(data, ids, 6, op, q=Q).astype(got.dtype))


def test_numba_engine_gives_numpys_bytes(tmp_path):
    ids = np.random.default_rng(1).integers(0, 5, 200)
    paths = save(tmp_path, sample("float64", (200,)), ids)
    for op in HOLISTIC:
        numpy = result_of(tmp_path, op, *paths, "--engine", "numpy")
        same_bytes(result_of(tmp_path, op, *paths, "--engine", "numba"), numpy)


# --- streamed: sorted blocks and --tmp-dir partitions give the in-memory bytes ---------------


STREAMING = {
    "rows per block": ["--chunk-rows", "7"],
    "memory limit": ["--memory-limit", "2KB"],
}


@pytest.mark.parametrize("op", HOLISTIC)
@pytest.mark.parametrize("inner", [(), (3,)])
@pytest.mark.parametrize("how", list(STREAMING))
@pytest.mark.parametrize("n", [None, 9])
def test_unsorted_partitions_give_the_in_memory_bytes(tmp_path, op, inner, how, n):
    rng = np.random.default_rng(5)
    ids = rng.integers(-2, 9, 500)
    paths = save(tmp_path, sample("float32", (500, *inner), seed=3), ids)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    given = [] if n is None else ["-n", n]
    in_memory = result_of(tmp_path, op, *paths, *given)
    summary = tmp_path / "summary.json"
    options = [*STREAMING[how], "--tmp-dir", scratch, "--summary-json", summary]
    same_bytes(result_of(tmp_path, op, *paths, *given, *options), in_memory)
    facts = json.loads(summary.read_text())
    assert facts["mode"] == "streaming"
    if how == "memory limit":  # a 2 KB budget deals the 500 rows to many partitions
        assert facts["extra"]["partitions"] > 1
    assert names(scratch) == []  # every partition file removed


@pytest.mark.parametrize("op", HOLISTIC)
@pytest.mark.parametrize("inner", [(), (3,)])
@pytest.mark.parametrize("n", [None, 6])
def test_sorted_stream_gives_the_in_memory_bytes(tmp_path, op, inner, n):
    ids = np.sort(np.random.default_rng(2).integers(0, 9, 300))
    paths = save(tmp_path, sample("float64", (300, *inner), seed=4), ids)
    given = ["--sorted"] + ([] if n is None else ["-n", n])
    in_memory = result_of(tmp_path, op, *paths, *given)
    summary = tmp_path / "summary.json"
    streamed = result_of(
        tmp_path, op, *paths, *given, "--chunk-rows", 11, "--summary-json", summary
    )
    same_bytes(streamed, in_memory)
    assert json.loads(summary.read_text())["mode"] == "streaming"


def test_stdin_streams_through_partitions(tmp_path):
    ids = np.random.default_rng(3).integers(0, 4, 100)
    data_path, ids_path = save(tmp_path, sample("float32", (100,)), ids)
    in_memory = result_of(tmp_path, "median", data_path, ids_path)
    out = tmp_path / "piped.npy"
    with open(data_path, "rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "segcli", "median", "-", str(ids_path), "-q", "-o", str(out)],
            stdin=stdin,
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    same_bytes(np.load(out), in_memory)


@pytest.mark.parametrize("op", HOLISTIC)
def test_parquet_on_stdin_is_read_whole_as_for_other_ops(tmp_path, op):
    """Parquet cannot stream from a pipe: read whole (it was taken for an Arrow stream)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    rng = np.random.default_rng(5)
    pq.write_table(pa.table({"v": sample("float64", (40,)), "id": rng.integers(0, 4, 40)}), table)
    args = ["--data-column", "v", "--ids-column", "id", *q_args(op), "-q"]
    from_file = run(op, table, *args)
    assert from_file.exit_code == 0, from_file.stderr
    piped = CliRunner().invoke(cli, [op, "-", *args], input=table.read_bytes())
    assert piped.exit_code == 0, piped.stderr
    assert piped.stdout == from_file.stdout


# --- temporary files: gone on success, on an error, on Ctrl-C ---------------------------------


def test_an_invalid_id_after_partitioning_removes_the_files(tmp_path):
    ids = np.zeros(400, np.int64)
    ids[-1] = 9  # out of range [0, 5), found in the last block, after the others were written
    paths = save(tmp_path, sample("float32", (400,)), ids)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "out.npy"
    result = run("median", *paths, "-n", 5, "--chunk-rows", 16, "--tmp-dir", scratch, "-o", out)
    assert result.exit_code == 1
    assert error_lines(result) == [
        f"Error: {paths[1]}: segment_ids[399] = 9 is out of range [0, 5) (1 id out of range)"
    ]
    assert names(scratch) == [] and not out.exists()


def test_interrupt_while_partitioned_removes_the_files(tmp_path):
    ids = np.random.default_rng(0).integers(0, 50, 2000)
    save(tmp_path, sample("float32", (2000,)), ids)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = ["median", "data.npy", "ids.npy", "--chunk-rows", "100", "--tmp-dir", "scratch"]
    process = start([*args, "-q", "-o", "out.npy"], "holistic-finish", tmp_path)
    (partitioned,) = scratch.iterdir()
    assert len(names(partitioned)) >= 2  # the rows are in partition files now, provably
    stderr = stop(process, signal.SIGINT)
    assert process.returncode == 130
    assert stderr == "segcli: interrupted; nothing was written\n"
    assert names(scratch) == [] and not (tmp_path / "out.npy").exists()


def test_a_small_stream_makes_files_only_for_the_partitions_it_reaches(tmp_path, monkeypatch):
    """A CSV's length is not known before its end, so it is dealt to the most partitions
    (1,024); its 3 segments reach at most 3 of them, and only theirs get files."""
    from segcli import holistic_runs

    ids = np.arange(40) % 3
    table = tmp_path / "t.csv"
    table.write_text("v,id\n" + "".join(f"{i / 4},{g}\n" for i, g in enumerate(ids)))
    listed: list[list[str]] = []
    finish = holistic_runs.Partitions.finish

    def listing_finish(self: Any, num_segments: int) -> list[np.ndarray]:
        listed.append(sorted(os.listdir(self.directory)))
        return finish(self, num_segments)

    monkeypatch.setattr(holistic_runs.Partitions, "finish", listing_finish)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    args = ["--data-column", "v", "--ids-column", "id", "-q", "--chunk-rows", 7]
    summary = tmp_path / "summary.json"
    streamed = run("median", table, *args, "--tmp-dir", scratch, "--summary-json", summary)
    assert streamed.exit_code == 0, streamed.stderr
    assert json.loads(summary.read_text())["extra"]["partitions"] == 1024
    ((*files,),) = listed
    assert 2 <= len(files) <= 6 and {name.split(".")[1] for name in files} == {"values", "ids"}
    assert names(scratch) == []
    whole = run("median", table, "--data-column", "v", "--ids-column", "id", "-q")
    assert streamed.stdout == whole.stdout


def test_tmp_dir_must_be_a_writable_directory_before_any_input_is_read(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    for where, what in ((tmp_path / "missing", "no such directory"), (a_file, "not a directory")):
        # DATA does not exist either: the --tmp-dir error comes first, before any read.
        result = run(
            "median", tmp_path / "no-data.npy", tmp_path / "no-ids.npy", "--tmp-dir", where
        )
        assert result.exit_code == 5
        assert len(error_lines(result)) == 1 and f"--tmp-dir {where}: {what}" in result.stderr


# --- options and refusals ---------------------------------------------------------------------


def test_fill_goes_to_empty_segments_in_the_result_dtype(tmp_path, pair):
    got = result_of(tmp_path, "median", *pair, "-n", 4, "--fill", "nan")
    np.testing.assert_array_equal(got, np.array([1.5, np.nan, 3.5, np.nan], np.float32))
    got = result_of(tmp_path, "nunique", *pair, "-n", 4, "--fill", "-1")
    same_bytes(got, np.array([2, -1, 2, -1], np.int64))
    result = run("nunique", *pair, "--fill", "0.5")
    assert (
        result.exit_code == 2
        and "--fill 0.5 cannot be stored in the int64 result of nunique" in result.stderr
    )


def test_expect_compares_with_a_golden_file(tmp_path, pair):
    golden = tmp_path / "golden.npy"
    np.save(golden, np.array([1.5, 0, 3.5], np.float32))
    assert run("median", *pair, "--expect", golden, "-q").exit_code == 0
    np.save(golden, np.array([1.5, 0, 3.0], np.float32))
    result = run("median", *pair, "--expect", golden, "-q")
    assert result.exit_code == 4 and len(error_lines(result)) == 1


@pytest.mark.parametrize("op", ["median", "quantile"])
def test_complex_data_is_refused_naming_the_op(tmp_path, op):
    paths = save(tmp_path, np.ones(4, np.complex64), np.zeros(4, np.int32))
    result = run(op, *paths, *q_args(op), "-o", tmp_path / "out.npy")
    assert result.exit_code == 1
    assert error_lines(result) == [
        f"Error: {paths[0]}: complex64 data is not supported by {op} (accepted: float16/32/64, "
        "signed and unsigned integers)"
    ]
    assert not (tmp_path / "out.npy").exists()


def test_check_takes_the_holistic_ops(tmp_path):
    paths = save(tmp_path, np.ones(4, np.complex64), np.zeros(4, np.int32))
    assert run("check", *paths, "--op", "nunique", "-q").exit_code == 0
    result = run("check", *paths, "--op", "sum,median", "-q")
    assert result.exit_code == 1 and "complex64 data is not supported by median" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["quantile"], "Missing option '--q'"),
        (["quantile", "--q", "1.5"], "--q 1.5 is outside [0, 1]"),
        (["sum", "--q", "0.5"], "No such option '--q'"),
        (["agg", "--op", "mean,median", "--q", "0.5"], "--q applies to quantile only"),
        (["agg", "--op", "mean,quantile"], "quantile needs --q"),
        (["median", "--engine", "dask"], "median cannot run on Dask"),
        (["nunique", "--engine", "cupy"], "engine 'cupy' has no kernel for nunique"),
        (
            ["agg", "--op", "sum,median", "--engine", "cupy"],
            "engine 'cupy' has no kernel for median",
        ),
    ],
)
def test_usage_errors(tmp_path, pair, args, message):
    out = tmp_path / "out.npz"
    result = run(args[0], *pair, *args[1:], "-o", out)
    assert result.exit_code == 2, result.stderr
    assert len(error_lines(result)) == 1 and message in result.stderr
    assert not out.exists()


# --- agg ---------------------------------------------------------------------------------------


AGG_OPS = "mean,median,quantile,nunique,count"


@pytest.mark.parametrize(
    "options", [[], ["--chunk-rows", "9"], ["--sorted"], ["--sorted", "--chunk-rows", "9"]]
)
def test_agg_columns_equal_the_single_op_commands(tmp_path, options):
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 6, 120)
    if "--sorted" in options:
        ids = np.sort(ids)
    paths = save(tmp_path, sample("float64", (120, 2)), ids)
    out = tmp_path / "agg.npz"
    result = run("agg", *paths, "--op", AGG_OPS, "--q", Q, *options, "-q", "-o", out)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as archive:
        columns = {name: archive[name] for name in archive.files}
    assert list(columns)[:5] == ["mean", "median", f"q{Q}", "nunique", "count"]
    family = [o for o in options if o == "--sorted"]
    for op in ("mean", "median", "quantile", "nunique", "count"):
        alone = result_of(tmp_path, op, *paths, *family)
        same_bytes(columns[f"q{Q}" if op == "quantile" else op], alone)


@pytest.mark.parametrize(("q", "name"), [("0.9", "q0.9"), (".5", "q0.5"), ("-0", "q0.0")])
def test_agg_text_names_the_quantile_column(pair, q, name):
    result = run("agg", *pair, "--op", "median,quantile", "--q", q, "-q")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[0].split("\t") == ["segment", "median", name, "count"]


def test_agg_reads_the_data_once(tmp_path, pair, monkeypatch):
    from segcli.drivers import holistic, memory

    reads = []
    real_read, real_open = memory.read, holistic.open_inputs
    monkeypatch.setattr(memory, "read", lambda spec: reads.append("whole") or real_read(spec))
    monkeypatch.setattr(
        holistic, "open_inputs", lambda spec: reads.append("stream") or real_open(spec)
    )
    for options, read in (([], ["whole"]), (["--chunk-rows", "2"], ["stream"])):
        reads.clear()
        result = run(
            "agg", *pair, "--op", "sum,median,nunique", *options, "-q", "-o", tmp_path / "o.npz"
        )
        assert result.exit_code == 0, result.stderr
        assert reads == read


# --- memory ------------------------------------------------------------------------------------


PEAK_ROWS = 12_500_000  # 200 MB of input: float64 values and int64 ids


# 200 MB through --tmp-dir, about 4 s of the default run: the full matrix holds it (CI runs both).
@pytest.mark.full_matrix
def test_median_through_tmp_dir_keeps_to_the_memory_limit(tmp_path):
    """Read whole, this input peaks above 700 MB; partitioned with a 64 MB budget, at the
    interpreter plus a few 8 MB blocks and one partition's sort."""
    rows = np.arange(PEAK_ROWS, dtype=np.int64)
    np.save(tmp_path / "ids.npy", rows * 7919 % 1000)
    np.save(tmp_path / "data.npy", (rows * 104729 % 100_003).astype(np.float64))
    del rows
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "out.npy"
    args = ["--memory-limit", "64MB", "--tmp-dir", scratch, "-q", "-o", out]
    measured = run_measured("median", tmp_path / "data.npy", tmp_path / "ids.npy", *args)
    assert measured.returncode == 0, measured.stderr
    peak = measured.peak_bytes / 2**20
    assert peak < 192, f"peak {peak:.0f} MiB"
    assert names(scratch) == []
    values, ids = (np.load(tmp_path / name, mmap_mode="r") for name in ("data.npy", "ids.npy"))
    got = np.load(out)
    for segment in (0, 1, 999):
        assert got[segment] == np.median(values[ids == segment])


def test_strided_ids_spread_over_the_partitions(tmp_path):
    """Ids that are all multiples of 1024 (so of any power-of-two partition count) must not
    land in one partition: that one would hold the whole input and finish it in memory."""
    rows = np.arange(2_000_000, dtype=np.int64)
    np.save(tmp_path / "ids.npy", rows * 7919 % 1000 * 1024)
    np.save(tmp_path / "data.npy", (rows * 104729 % 100_003).astype(np.float64))
    del rows
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "out.npy"
    args = ["--memory-limit", "4MB", "--tmp-dir", scratch, "--summary-json", "-", "-o", out]
    measured = run_measured("median", tmp_path / "data.npy", tmp_path / "ids.npy", *args)
    assert measured.returncode == 0, measured.stderr
    assert json.loads(measured.stderr)["extra"]["partitions"] == 64  # 1024 is a multiple
    # What the imports take depends on the install (a fresh one's libraries map larger
    # pages): the run is measured beside the same command on a tiny input.
    np.save(tmp_path / "tiny-ids.npy", np.arange(3) * 1024)
    np.save(tmp_path / "tiny-data.npy", np.arange(3.0))
    tiny = [tmp_path / "tiny-data.npy", tmp_path / "tiny-ids.npy", *args[:-1], tmp_path / "t.npy"]
    baseline = run_measured("median", *tiny)
    assert baseline.returncode == 0, baseline.stderr
    # 32 MB of input in one partition took 108 MiB more than the tiny run (its sort); spread,
    # 32 to 35 MiB more.
    beyond = (measured.peak_bytes - baseline.peak_bytes) / 2**20
    assert beyond < 70, f"{beyond:.0f} MiB beyond the tiny run's peak"
    assert names(scratch) == []
    in_memory = result_of(tmp_path, "median", tmp_path / "data.npy", tmp_path / "ids.npy")
    same_bytes(np.load(out), in_memory)


class _FullDisk:
    """A partition file on a full disk: every write fails, as ENOSPC does."""

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        pass


def test_a_full_tmp_dir_is_exit_5_and_leaves_nothing(tmp_path, monkeypatch):
    from segcli import holistic_runs

    monkeypatch.setattr(holistic_runs, "open", lambda *args: _FullDisk(), raising=False)
    paths = save(tmp_path, sample("float32", (100,)), np.arange(100) % 3)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    out = tmp_path / "out.npy"
    result = run("median", *paths, "--chunk-rows", 10, "--tmp-dir", scratch, "-o", out)
    assert result.exit_code == 5
    assert error_lines(result) == [
        f"Error: --tmp-dir {scratch}: cannot write partition files (No space left on device)"
    ]
    assert names(scratch) == [] and not out.exists()


def test_partitions_fit_the_budget_and_the_open_file_limit(monkeypatch):
    import resource

    from segcli.holistic_runs import MAX_PARTITIONS, partition_count

    # 6 GB of partition files in 32 MB shares (a 256 MB budget): 179 partitions.
    assert partition_count(500_000_000, 12, 256 << 20) == 179
    assert partition_count(1000, 12, 256 << 20) == 1
    monkeypatch.setattr(resource, "getrlimit", lambda which: (200, 200))
    assert partition_count(-1, 12, None) == 68  # two files each, 64 descriptors spared
    monkeypatch.setattr(resource, "getrlimit", lambda which: (10**6, 10**6))
    assert partition_count(-1, 12, None) == MAX_PARTITIONS  # a stream of unknown length


@pytest.mark.parametrize("chunk_rows", [None, 2])
@pytest.mark.parametrize("sorted_ids", [False, True])
def test_skipna_field_reaches_the_sort(tmp_path, chunk_rows, sorted_ids):
    """The request's skipna (its flag comes with --skipna) leaves NaN out on every path."""
    from segcli.pipeline import RunRequest, run

    data = np.array([1.0, np.nan, 3.0, np.nan, np.nan], np.float32)
    paths = save(tmp_path, data, np.array([0, 0, 0, 1, 2]))
    want = {False: [np.nan, np.nan, np.nan], True: [2.0, 0.0, 0.0]}
    for skipna, expected in want.items():
        request = RunRequest(
            op="median",
            data=str(paths[0]),
            ids=str(paths[1]),
            sorted_ids=sorted_ids,
            chunk_rows=chunk_rows,
            skipna=skipna,
            output=str(tmp_path / "out.npy"),
        )
        np.testing.assert_array_equal(run(request).result, np.array(expected, np.float32))


def test_a_request_with_q_and_no_quantile_is_a_usage_error(pair):
    from segcli.errors import UsageError
    from segcli.pipeline import RunRequest

    with pytest.raises(UsageError, match="--q applies to quantile only, not sum"):
        RunRequest(op="sum", data=str(pair[0]), ids=str(pair[1]), q=0.5).spec()


def test_help_lists_the_holistic_ops_with_one_line_each():
    listed = run("--help").stdout
    for op, start_of_help in (
        ("median", "Median of each segment"),
        ("quantile", "Quantile --q Q of each segment"),
        ("nunique", "Number of distinct values"),
    ):
        lines = [line for line in listed.splitlines() if line.split()[:1] == [op]]
        assert len(lines) == 1 and start_of_help in lines[0]
    assert "--tmp-dir DIR" in run("median", "--help").stdout
    assert "--q Q" in run("quantile", "--help").stdout and "--q Q" in run("agg", "--help").stdout


@pytest.mark.parametrize("skipna", [[], ["--skipna"]], ids=["plain", "skipna"])
@pytest.mark.parametrize(
    ("data", "ids"),
    [
        (np.zeros((3, 0), np.float32), np.array([0, 1, 1])),  # rows of no values
        (np.float32(2.5), np.array(1)),  # 0-D: one row, read whole on every path
        (np.array([2.5, 3.5], np.float32), np.array(1)),
    ],
    ids=["inner-size-0", "0-d-both", "0-d-ids"],
)
def test_edge_shapes_stream_as_they_run_in_memory(tmp_path, data, ids, skipna):
    """A streamed holistic run of rows of no values (its partition files hold no bytes) or of
    a 0-D input (one row, read whole) gives the in-memory bytes, not an error."""
    np.save(tmp_path / "d.npy", data)
    np.save(tmp_path / "i.npy", ids)
    outs = {}
    for name, extra in (
        ("whole", []),
        ("blocks", ["--chunk-rows", "1"]),
        ("budget", ["--memory-limit", "1B"]),
    ):
        out = tmp_path / f"{name}.npz"
        args = ["agg", tmp_path / "d.npy", tmp_path / "i.npy", "--op", "median,quantile,nunique"]
        result = run(*args, "--q", Q, "-q", "-o", out, *skipna, *extra)
        assert result.exit_code == 0, result.stderr
        outs[name] = out.read_bytes()
    assert outs["blocks"] == outs["whole"] and outs["budget"] == outs["whole"]


def test_an_input_whose_sort_would_not_fit_streams_through_partitions(tmp_path):
    """Sorted whole, values take about four times their bytes: an input under the limit but
    over a quarter of it goes through partition files (same bytes as a whole read)."""
    rng = np.random.default_rng(1)
    np.save(tmp_path / "d.npy", rng.random(1_000_000, dtype=np.float32))  # 4 MB
    np.save(tmp_path / "i.npy", rng.integers(0, 100, 1_000_000, dtype=np.int32))  # 4 MB
    facts = tmp_path / "s.json"
    common = [tmp_path / "d.npy", tmp_path / "i.npy", "-q", "--summary-json", facts]
    assert run("median", *common, "--memory-limit", "10MB", "-o", tmp_path / "a.npy").exit_code == 0
    assert json.loads(facts.read_text())["mode"] == "streaming"
    assert run("median", *common, "--memory-limit", "40MB", "-o", tmp_path / "b.npy").exit_code == 0
    assert json.loads(facts.read_text())["mode"] == "in-memory"
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
