"""Streaming gives the same bytes as the in-memory path, and validates across block edges."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import segcli
from segcli import core, io
from segcli.cli import cli
from segcli.drivers.stream import reduce_stream
from segcli.errors import InvalidInputError
from tests.conftest import ENGINES
from tests.matrix import NUMBA_DATA_DTYPES, default_run

OPS = [name for name, op in segcli.OPS.items() if not op.holistic]  # tests/test_holistic_cli.py
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint64, np.complex64]


def save_pair(tmp_path: Path, data: np.ndarray, ids: np.ndarray) -> tuple[str, str]:
    data_path, ids_path = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data_path, data)
    np.save(ids_path, ids)
    return str(data_path), str(ids_path)


def stream(data_path, ids_path, n, op, *, rows, engine="numpy", sorted_ids=False, **kw):
    reduction, plan = reduce_stream(
        io.open_chunked(data_path),
        io.open_chunked(ids_path, role="ids"),
        n,
        op,
        sorted_ids=sorted_ids,
        engine=engine,
        block_rows=rows,
        **kw,
    )
    return reduction, plan


def sample(dtype, rows, inner=(), seed=0):
    rng = np.random.default_rng(seed)
    values = rng.normal(0, 50, (rows, *inner))
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.normal(0, 5, values.shape)
    if np.dtype(dtype).kind in "iu":
        values = np.abs(values) if np.dtype(dtype).kind == "u" else values
    return values.astype(dtype)


# min and max refuse complex data (test_spec covers the error).
OP_DTYPES = [(op, d) for op in OPS for d in DTYPES if np.dtype(d).kind in segcli.OPS[op].data_kinds]


#: What streaming adds is engine-neutral (blocks, validation, growth); every dtype streams on
#: NumPy, and the compiled engines, whose bytes test_engines.py holds to NumPy's for every
#: dtype (in the full matrix), stream one float and one integer dtype (each further dtype is
#: more kernels to compile).
COMPILED_ENGINE_DTYPES = NUMBA_DATA_DTYPES


def _engine_op_dtypes() -> list[object]:
    cases = []
    for param in ENGINES:
        name = param.values[0]
        for op, dtype in OP_DTYPES:
            if name != "numpy" and np.dtype(dtype).name not in COMPILED_ENGINE_DTYPES:
                continue
            case_id = f"{name}-{op}-{np.dtype(dtype).name}"
            cases.append(pytest.param(name, op, dtype, marks=param.marks, id=case_id))
    return cases


# Every op over a float and an integer dtype; the other dtypes (each with the same blocks and
# growth) with an op of each fold kind, the rest in the full matrix.
@default_run(
    lambda op, dtype: (
        np.dtype(dtype).name in COMPILED_ENGINE_DTYPES or op in ("sum", "max", "mean", "first")
    )
)
@pytest.mark.parametrize(("engine", "op", "dtype"), _engine_op_dtypes())
@pytest.mark.parametrize("sorted_ids", [False, True])
def test_streaming_bytes_equal_in_memory(tmp_path, engine, op, dtype, sorted_ids):
    rows = 200
    data = sample(dtype, rows, (3,))
    rng = np.random.default_rng(1)
    ids = np.sort(rng.integers(0, 30, rows)) if sorted_ids else rng.integers(-2, 30, rows)
    paths = save_pair(tmp_path, data, ids)
    expected = segcli.segment_reduce(data, ids, 30, op, sorted=sorted_ids, engine=engine)
    for rows_per_block in (1, 7, 64, 1000):
        got, _ = stream(*paths, 30, op, rows=rows_per_block, engine=engine, sorted_ids=sorted_ids)
        assert got.result.dtype == expected.dtype
        assert got.result.tobytes() == expected.tobytes(), rows_per_block


@pytest.mark.usefixtures("short_lanes")
@pytest.mark.parametrize("dtype", ["float16", "float32", "complex64"])
@pytest.mark.parametrize("op", ["sum", "mean", "prod", "var", "std", "logsumexp"])
@pytest.mark.parametrize("sorted_ids", [False, True])
def test_streaming_bytes_equal_in_memory_across_lane_boundaries(
    tmp_path, engine, op, dtype, sorted_ids
):
    if op in ("var", "std", "logsumexp") and dtype == "complex64":
        pytest.skip("var, std and logsumexp take real data only")
    rows = 300
    data = sample(dtype, rows, (2,), seed=4)
    rng = np.random.default_rng(5)
    ids = np.sort(rng.integers(0, 8, rows)) if sorted_ids else rng.integers(-1, 8, rows)
    paths = save_pair(tmp_path, data, ids)
    expected = segcli.segment_reduce(data, ids, None, op, sorted=sorted_ids, engine=engine)
    for rows_per_block in (3, 64):
        got, _ = stream(*paths, None, op, rows=rows_per_block, engine=engine, sorted_ids=sorted_ids)
        assert got.result.tobytes() == expected.tobytes(), rows_per_block


def test_block_edges_inside_segments_and_inferred_n(tmp_path, engine):
    # float32, whose sorted folds the engine tests compile anyway (tests/matrix.py)
    data = np.arange(1, 101, dtype=np.float32) / 7
    ids = np.repeat(np.arange(10), 10)  # every block edge of 3 rows cuts a segment
    paths = save_pair(tmp_path, data, ids)
    for op in ("sum", "mean", "prod"):
        got, plan = stream(*paths, None, op, rows=3, engine=engine, sorted_ids=True)
        expected = segcli.segment_reduce(data, ids, None, op, sorted=True, engine=engine)
        assert got.result.tobytes() == expected.tobytes()
        assert got.id_report.inferred and got.id_report.num_segments == 10
        assert plan.blocks == 34


def test_inferred_n_grows_with_late_large_ids(tmp_path):
    ids = np.array([0, 1, 0, 1, 500, 3, -1, 2])
    data = np.arange(8, dtype=np.int32)
    paths = save_pair(tmp_path, data, ids)
    got, _ = stream(*paths, None, "max", rows=2)
    expected = segcli.segment_reduce(data, ids, None, "max")
    assert got.result.shape == (501,)
    assert got.result.tobytes() == expected.tobytes()
    assert got.id_report.dropped_negative == 1


def test_multidimensional_ids_stream(tmp_path):
    data = np.arange(1, 13).reshape(2, 3, 2)
    ids = np.array([[0, 1, 0], [2, -1, 1]])
    paths = save_pair(tmp_path, data, ids)
    got, _ = stream(*paths, 4, "sum", rows=1)
    np.testing.assert_array_equal(got.result, [[6, 8], [14, 16], [7, 8], [0, 0]])


def test_empty_input_streams(tmp_path):
    paths = save_pair(tmp_path, np.zeros((0, 2), np.float32), np.zeros(0, np.int32))
    got, _ = stream(*paths, 3, "min", rows=4)
    assert got.result.shape == (3, 2)
    assert (got.result == np.finfo(np.float32).max).all()


def in_memory_error(data, ids, n, **kw) -> str:
    """The message of the command line's in-memory run (in its option words)."""
    with pytest.raises(InvalidInputError) as caught:
        core.reduce_with_option_words(data, ids, n, "sum", ids_label="ids", **kw)
    return str(caught.value)


def streaming_error(tmp_path, data, ids, n, rows, **kw) -> str:
    paths = save_pair(tmp_path, data, ids)
    source = io.open_chunked(paths[1], role="ids")
    source.label = "ids"  # type: ignore[misc]  # same label as the in-memory call
    with pytest.raises(InvalidInputError) as caught:
        reduce_stream(io.open_chunked(paths[0]), source, n, "sum", block_rows=rows, **kw)
    return str(caught.value)


def test_out_of_range_error_names_the_global_position(tmp_path):
    data, ids = np.ones(10), np.array([0, 1, 2, 3, 4, 9, 1, 8, 0, 0])
    message = streaming_error(tmp_path, data, ids, 5, rows=3)
    assert message == "ids: segment_ids[5] = 9 is out of range [0, 5) (2 ids out of range)"
    assert message == in_memory_error(data, ids, 5)


def test_decrease_across_a_block_edge_is_found(tmp_path):
    data, ids = np.ones(6), np.array([0, 1, 2, 1, 1, 2])  # the fall 2 -> 1 is at the edge
    message = streaming_error(tmp_path, data, ids, None, rows=3, sorted_ids=True)
    assert message == (
        "ids: segment_ids[3] = 1 < segment_ids[2] = 2: --sorted ids must be non-decreasing "
        "(1 decrease)"
    )
    assert message == in_memory_error(data, ids, None, sorted=True)


def test_output_too_large_fails_before_reading(tmp_path):
    paths = save_pair(tmp_path, np.ones(4), np.zeros(4, np.int64))
    with pytest.raises(InvalidInputError, match="the output needs"):
        stream(*paths, 10**15, "sum", rows=2)


def write_parquet(path: Path, data: np.ndarray, ids: np.ndarray, row_group: int) -> None:
    pq.write_table(pa.table({"x": data, "seg": ids}), path, row_group_size=row_group)


def test_parquet_row_groups_stream_like_in_memory(tmp_path):
    rng = np.random.default_rng(3)
    data = rng.normal(size=1000).astype(np.float32)
    ids = rng.integers(0, 17, 1000).astype(np.int32)
    path = tmp_path / "t.parquet"
    write_parquet(path, data, ids, row_group=130)
    reduction, plan = reduce_stream(
        io.open_chunked(str(path), column="x"),
        io.open_chunked(str(path), column="seg"),
        None,
        "mean",
        block_rows=97,
    )
    assert reduction.result.tobytes() == segcli.segment_reduce(data, ids, None, "mean").tobytes()
    assert plan.blocks == 11


def run_cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_memory_limit_switches_to_streaming(tmp_path):
    data = np.random.default_rng(0).normal(size=5000)
    ids = np.random.default_rng(1).integers(0, 40, 5000)
    paths = save_pair(tmp_path, data, ids)
    summary = tmp_path / "s.json"
    small = run_cli(
        "sum",
        *paths,
        "-q",
        "--memory-limit",
        "10KB",
        "-o",
        tmp_path / "a.npy",
        "--summary-json",
        summary,
    )
    assert small.exit_code == 0, small.stderr
    facts = json.loads(summary.read_text())
    assert facts["mode"] == "streaming" and facts["extra"]["chunks"] > 1
    big = run_cli("sum", *paths, "-q", "-o", tmp_path / "b.npy", "--summary-json", summary)
    assert json.loads(summary.read_text())["mode"] == "in-memory"
    assert big.exit_code == 0
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def test_invalid_streamed_input_writes_nothing(tmp_path):
    paths = save_pair(tmp_path, np.ones(100), np.r_[np.zeros(99, np.int64), 7])
    out = tmp_path / "out.npy"
    result = run_cli("sum", *paths, "-n", "5", "--chunk-rows", "10", "-o", out)
    assert result.exit_code == 1
    assert "segment_ids[99] = 7 is out of range [0, 5) (1 id out of range)" in result.stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npy", "ids.npy"]


def test_bad_memory_limit_is_a_usage_error(tmp_path):
    paths = save_pair(tmp_path, np.ones(3), np.zeros(3, np.int64))
    result = run_cli("sum", *paths, "--memory-limit", "lots")
    assert result.exit_code == 2 and "--memory-limit 'lots' is not a size" in result.stderr


@pytest.mark.parametrize("size", ["0", "0GB", "0.1B"])
def test_a_memory_limit_of_nothing_is_a_usage_error(tmp_path, size):
    """0 would stream a row at a time (others spell "no limit" so): refused, nothing read."""
    paths = save_pair(tmp_path, np.ones(3), np.zeros(3, np.int64))
    result = run_cli("sum", *paths, "--memory-limit", size)
    assert result.exit_code == 2, result.stderr
    assert f"--memory-limit '{size}': give a size above 0 bytes" in result.stderr


def test_npy_on_stdin_streams_in_one_pass(tmp_path):
    import io as stdlib_io

    buffer = stdlib_io.BytesIO()
    data = np.arange(10, dtype=np.float32)
    np.save(buffer, data)
    ids = tmp_path / "ids.npy"
    np.save(ids, np.arange(10) % 3)
    summary = tmp_path / "s.json"
    result = CliRunner().invoke(
        cli,
        ["sum", "-", str(ids), "--chunk-rows", "4", "-q", "--summary-json", str(summary)],
        input=buffer.getvalue(),
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t18.0\n1\t12.0\n2\t15.0\n"
    facts = json.loads(summary.read_text())
    assert facts["mode"] == "streaming" and facts["extra"] == {"chunks": 3}


def test_an_arrow_stream_on_stdin_is_said_to_be_of_unknown_length(tmp_path):
    """auto picks NumPy for a stream before its length is known: the summary said it chose so
    for "0 elements" of a stream that held rows."""
    import io as stdlib_io

    table = pa.table({"x": np.arange(6, dtype=np.float32), "seg": np.arange(6) % 2})
    buffer = stdlib_io.BytesIO()
    with pa.ipc.new_stream(buffer, table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    summary = tmp_path / "s.json"
    args = ["sum", "-", "--data-column", "x", "--ids-column", "seg", "--summary-json", summary]
    result = CliRunner().invoke(
        cli, [*map(str, args), "-q"], input=buffer.getvalue(), catch_exceptions=False
    )
    assert result.exit_code == 0, result.stderr
    facts = json.loads(summary.read_text())
    assert facts["engine_reason"].startswith("auto: a stream of unknown length; ")
    assert facts["data"]["shape"] == [6]


def test_check_streams_with_the_same_verdict(tmp_path):
    data = np.array([1.0, np.nan, 3.0, 4.0, np.nan, 6.0])
    paths = save_pair(tmp_path, data, np.array([0, 0, 2, 2, 5, 5]))
    facts = {}
    for mode_options in ([], ["--chunk-rows", "4"]):
        summary = tmp_path / "check.json"
        result = run_cli(
            "check",
            *paths,
            "-n",
            "6",
            "--no-nan",
            "--max-empty",
            "2",
            "-q",
            "--summary-json",
            summary,
            *mode_options,
        )
        assert result.exit_code == 4
        assert "3 empty segments, more than --max-empty 2 (first empty: segment 1)" in (
            result.stderr
        )
        assert "2 NaN values (--no-nan)" in result.stderr
        facts[bool(mode_options)] = json.loads(summary.read_text())
    assert facts[True].pop("mode") == "streaming" and facts[False].pop("mode") == "in-memory"
    assert facts[True] == facts[False]


def arrow_stream_bytes(table: pa.Table, batch_rows: int) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def test_arrow_stream_on_stdin_streams_by_record_batch(tmp_path):
    rng = np.random.default_rng(5)
    data = rng.normal(size=1000).astype(np.float32)
    ids = rng.integers(-1, 9, 1000).astype(np.int32)
    stream = arrow_stream_bytes(pa.table({"x": data, "seg": ids}), batch_rows=77)
    summary = tmp_path / "s.json"
    result = CliRunner().invoke(
        cli,
        [
            "mean",
            "-",
            "--data-column",
            "x",
            "--ids-column",
            "seg",
            "--chunk-rows",
            "50",
            "-o",
            str(tmp_path / "out.npy"),
            "-q",
            "--summary-json",
            str(summary),
        ],
        input=stream,
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.stderr
    expected = segcli.segment_reduce(data, ids, None, "mean")
    assert np.load(tmp_path / "out.npy").tobytes() == expected.tobytes()
    facts = json.loads(summary.read_text())
    assert facts["mode"] == "streaming" and facts["extra"] == {"chunks": 20}
    assert facts["data"]["shape"] == [1000] and facts["data"]["label"] == "<stdin>:x"
    assert facts["rows_dropped_negative"] == int((ids < 0).sum())


def test_arrow_stream_on_stdin_reports_invalid_ids_at_their_global_row(tmp_path):
    ids = np.zeros(300, np.int64)
    ids[250] = 9
    stream = arrow_stream_bytes(pa.table({"x": np.ones(300), "seg": ids}), batch_rows=64)
    out = tmp_path / "out.npy"
    result = CliRunner().invoke(
        cli,
        ["sum", "-", "--data-column", "x", "--ids-column", "seg", "-n", "3", "-o", str(out)],
        input=stream,
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: <stdin>:seg: segment_ids[250] = 9 is out of range [0, 3) (1 id out of range)\n"
    )
    assert not out.exists()


def test_inputs_of_different_lengths_are_an_error_when_streaming(tmp_path):
    paths = save_pair(tmp_path, np.ones(10), np.zeros(10, np.int64))
    short_ids = tmp_path / "short.npy"
    np.save(short_ids, np.zeros(7, np.int64))
    with pytest.raises(InvalidInputError):
        stream(paths[0], str(short_ids), 1, "sum", rows=3)


@pytest.mark.parametrize("ids_rows", [8, 12])
@pytest.mark.parametrize(
    "command",
    [["sum", "data.csv"], ["sum", "--sorted", "data.csv"], ["agg", "--op", "sum,max", "data.csv"]],
)
def test_text_inputs_found_to_differ_in_length_give_the_in_memory_error(
    tmp_path, monkeypatch, command, ids_rows
):
    """CSV lengths are known only at their end: a streamed run then names the input that
    ended first and both lengths, as the whole read does, whichever block it stops in."""
    from tests.entry import run_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_text("x,y\n" + "".join(f"{i}.5,{i}\n" for i in range(10)))
    (tmp_path / "ids.csv").write_text("s\n" + "".join(f"{i // 3}\n" for i in range(ids_rows)))
    columns = ["--data-column", "x,y" if command[0] == "agg" else "x", "--ids-column", "s"]
    args = [*command, "ids.csv", *columns, "-q", "-o", "out.npz"]
    want = run_main(*args)
    assert want.exit_code == 1 and len(want.stderr.splitlines()) == 1
    assert want.stderr.startswith("Error: ids.csv:s: ") and f"{ids_rows}" in want.stderr
    for rows in (3, 5, 7):
        got = run_main(*args, "--chunk-rows", rows)
        assert (got.exit_code, got.stderr) == (want.exit_code, want.stderr)
        assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("ids_rows", [8, 12])
def test_check_of_text_inputs_that_differ_in_length_gives_the_in_memory_error(
    tmp_path, monkeypatch, ids_rows
):
    """``check --sorted`` streams through its own driver: the same message as in memory."""
    from tests.entry import run_main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_text("x\n" + "".join(f"{i}.5\n" for i in range(10)))
    (tmp_path / "ids.csv").write_text("s\n" + "".join(f"{i // 3}\n" for i in range(ids_rows)))
    args = ["check", "--sorted", "data.csv", "ids.csv", "--data-column", "x", "--ids-column", "s"]
    want = run_main(*args, "-q")
    assert want.exit_code == 1 and len(want.stderr.splitlines()) == 1
    for rows in (3, 5, 7):
        got = run_main(*args, "-q", "--chunk-rows", rows)
        assert (got.exit_code, got.stderr) == (want.exit_code, want.stderr)


# --- reading ahead ----------------------------------------------------------------------------


def _source(items, log, fail_after=None):
    try:
        for k, item in enumerate(items):
            if fail_after is not None and k == fail_after:
                raise InvalidInputError(f"bad block {k}")
            log.append(("read", item))
            yield item
    finally:
        log.append(("closed", None))


def _readers_alive():
    import threading

    return [t for t in threading.enumerate() if t.name == "segcli-read-ahead" and t.is_alive()]


def test_read_ahead_yields_every_block_in_order_and_closes_the_source():
    from segcli.drivers.stream import read_ahead

    log = []
    assert list(read_ahead(_source(range(50), log))) == list(range(50))
    assert log[-1] == ("closed", None) and not _readers_alive()


def test_read_ahead_raises_the_readers_error_after_the_blocks_before_it():
    from segcli.drivers.stream import read_ahead

    log = []
    got = []
    with pytest.raises(InvalidInputError, match="bad block 3"):
        for item in read_ahead(_source(range(10), log, fail_after=3)):
            got.append(item)
    assert got == [0, 1, 2] and ("closed", None) in log and not _readers_alive()


def test_read_ahead_stops_the_reader_when_the_consumer_stops():
    from segcli.drivers.stream import read_ahead

    log = []
    blocks = read_ahead(_source(range(1000), log))
    assert next(blocks) == 0
    blocks.close()  # what a failed fold or validation does, leaving the loop
    for reader in _readers_alive():  # it stops at its next block; nobody waits for it
        reader.join(timeout=5)
    assert log[-1] == ("closed", None) and not _readers_alive()
    assert len([entry for entry in log if entry[0] == "read"]) < 10  # at most one ahead


def test_default_streaming_for_files_over_the_threshold(tmp_path, monkeypatch):
    from segcli import pipeline

    rng = np.random.default_rng(3)
    paths = save_pair(tmp_path, rng.normal(size=3000), rng.integers(-2, 50, 3000))
    monkeypatch.setattr(pipeline, "STREAM_FROM_BYTES", 10_000)
    summary = tmp_path / "s.json"
    result = run_cli("mean", *paths, "-q", "-o", tmp_path / "a.npy", "--summary-json", summary)
    assert result.exit_code == 0, result.stderr
    assert json.loads(summary.read_text())["mode"] == "streaming"
    # A --memory-limit the files fit in keeps them in memory, whatever the default threshold.
    result = run_cli(
        "mean",
        *paths,
        "-q",
        "--memory-limit",
        "1GB",
        "-o",
        tmp_path / "b.npy",
        "--summary-json",
        summary,
    )
    assert json.loads(summary.read_text())["mode"] == "in-memory"
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def test_read_ahead_does_not_wait_for_a_stalled_reader():
    """Ctrl-C while a pipe on stdin is stalled: leaving the loop must not hang on the read."""
    import threading
    import time

    from segcli.drivers.stream import read_ahead

    release = threading.Event()

    def stalled():
        yield 0
        release.wait(30)  # a read that does not return
        yield 1

    blocks = read_ahead(stalled())
    assert next(blocks) == 0
    started = time.perf_counter()
    blocks.close()
    assert time.perf_counter() - started < 1.0
    release.set()
    for reader in _readers_alive():
        reader.join(timeout=5)


def test_fortran_order_npy_over_the_threshold_streams(tmp_path, monkeypatch):
    """A Fortran-order .npy (np.save of a pandas frame's values) streams a piece of every
    column per block: the same bytes as read whole."""
    from segcli import pipeline

    monkeypatch.setattr(pipeline, "STREAM_FROM_BYTES", 1000)
    data = np.asfortranarray(np.arange(600, dtype=np.float64).reshape(200, 3))
    ids = np.arange(200) % 7
    paths = save_pair(tmp_path, data, ids)
    summary = tmp_path / "s.json"
    result = run_cli("sum", *paths, "-q", "-o", tmp_path / "a.npy", "--summary-json", summary)
    assert result.exit_code == 0, result.stderr
    assert json.loads(summary.read_text())["mode"] == "streaming"
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), segcli.segment_reduce(data, ids))
    whole = run_cli("sum", *paths, "-q", "--memory-limit", "1GB", "-o", tmp_path / "b.npy")
    assert whole.exit_code == 0, whole.stderr
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()


def test_fortran_order_npz_member_over_the_threshold_is_read_whole(tmp_path, monkeypatch):
    """A Fortran-order array in an .npz cannot stream: it still runs (in memory) unless
    streaming was asked for, which is then a usage error and writes nothing."""
    from segcli import pipeline

    monkeypatch.setattr(pipeline, "STREAM_FROM_BYTES", 1000)
    data = np.asfortranarray(np.arange(600, dtype=np.float64).reshape(200, 3))
    ids = np.arange(200) % 7
    np.savez(tmp_path / "data.npz", x=data)
    np.save(tmp_path / "ids.npy", ids)
    paths = (tmp_path / "data.npz", tmp_path / "ids.npy")
    summary = tmp_path / "s.json"
    result = run_cli("sum", *paths, "-q", "-o", tmp_path / "a.npy", "--summary-json", summary)
    assert result.exit_code == 0, result.stderr
    assert json.loads(summary.read_text())["mode"] == "in-memory"
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), segcli.segment_reduce(data, ids))
    checked = run_cli("check", *paths, "-q", "--summary-json", summary)
    assert checked.exit_code == 0, checked.stderr
    assert json.loads(summary.read_text())["mode"] == "in-memory"
    asked = run_cli("sum", *paths, "-q", "--chunk-rows", "50", "-o", tmp_path / "b.npy")
    assert asked.exit_code == 2, asked.stderr
    assert "data.npz:x: cannot stream a Fortran-order array" in asked.stderr
    assert not (tmp_path / "b.npy").exists()


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_sorted_decrease_after_an_id_too_large_for_memory_is_the_error(tmp_path, engine):
    # The first block's id 2**40 alone would need terabytes; the decrease after it makes the
    # ids invalid, which the in-memory path reports first (it checks every id before sizing).
    data, ids = np.ones(4), np.array([0, 2**40, 1, 1])
    message = streaming_error(tmp_path, data, ids, None, rows=2, sorted_ids=True, engine=engine)
    assert message == in_memory_error(data, ids, None, sorted=True)
    assert message.startswith("ids: segment_ids[2] = 1 < segment_ids[1] = 1099511627776")


@pytest.mark.parametrize("command", ["sum", "check"])
def test_cli_sorted_decrease_after_an_id_too_large_for_memory_is_the_error(tmp_path, command):
    paths = save_pair(tmp_path, np.ones(4), np.array([0, 2**40, 1, 1]))
    for extra in ((), ("--chunk-rows", "1"), ("--chunk-rows", "2")):
        got = run_cli(command, *paths, "--sorted", "-q", *extra)
        assert got.exit_code == 1
        assert got.stderr == (
            f"Error: {paths[1]}: segment_ids[2] = 1 < segment_ids[1] = 1099511627776: "
            "--sorted ids must be non-decreasing (1 decrease)\n"
        )


@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_sorted_ids_out_of_order_in_a_block_are_an_error_not_a_crash(tmp_path, engine):
    """A block whose ids are not sorted must never reach the sorted fold (which indexes the
    state by them): the run ends with the in-memory path's error, exit 1."""
    ids = np.tile(np.array([0, 1, 2, 900, -7, 3, 4, 5]), 50)
    paths = save_pair(tmp_path, np.ones(ids.size), ids)
    want = run_cli("sum", *paths, "-n", "10", "--sorted", "--engine", engine, "-q")
    assert want.exit_code == 1 and "is negative; --sorted ids must be >= 0" in want.stderr
    for rows in ("3", "8", "1000"):
        got = run_cli(
            "sum",
            *paths,
            "-n",
            "10",
            "--sorted",
            "--engine",
            engine,
            "--chunk-rows",
            rows,
            "-q",
            "-o",
            tmp_path / "out.npy",
        )
        assert (got.exit_code, got.stderr) == (want.exit_code, want.stderr)
        assert not (tmp_path / "out.npy").exists()


def test_read_ahead_started_early_reads_before_the_first_block_is_asked_for():
    """reduce_stream starts its reader before loading the engine: the first blocks are read
    while numba loads, and the reader stops when the caller leaves before asking for any."""
    import time

    from segcli.drivers.stream import ReadAhead

    log = []
    with ReadAhead(_source(range(1000), log)):
        deadline = time.monotonic() + 5
        while not log and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log[0] == ("read", 0)  # read though nothing was asked for yet
    for reader in _readers_alive():
        reader.join(timeout=5)
    assert log[-1] == ("closed", None) and not _readers_alive()
    assert len([entry for entry in log if entry[0] == "read"]) < 10  # at most one ahead
