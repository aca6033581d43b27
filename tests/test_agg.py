"""``segcli agg``: several ops and data columns in one pass, each column byte for byte what the
single-op command gives."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli import ops
from segcli.cli import cli
from segcli.multi import combined_op
from tests.pipes import fifo_fed_with

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"


def run(*args: object, input: bytes | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


def ops_for(dtype: np.dtype) -> list[str]:
    """Every op of the table that agg folds and that takes data of ``dtype``."""
    return [
        name
        for name, op in ops.OPS.items()
        if np.dtype(dtype).kind in op.data_kinds and not op.holistic
    ]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(7)
    data, ids = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data, rng.normal(size=50).astype(np.float32))
    segment_ids = rng.integers(-1, 6, size=50)
    segment_ids[segment_ids == 4] = 5  # segment 4 stays empty
    np.save(ids, segment_ids)
    return data, ids


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "table.parquet"
    pq.write_table(
        pa.table(
            {
                "a": pa.array([1.0, 2.0, 3.0, 4.0, 5.0], pa.float64()),
                "b": pa.array([10, 20, 30, 40, 50], pa.int32()),
                "id": pa.array([0, 1, 0, 2, 2], pa.int64()),
            }
        ),
        path,
    )
    return path


def error_lines(result) -> int:
    return sum(line.startswith("Error:") for line in result.stderr.splitlines())


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def assert_agg_gives_the_single_ops_bytes(tmp_path, data, ids, names, args):
    """``agg --op NAMES ARGS`` writes each op's column with the bytes of the op's own command."""
    out = tmp_path / "all.npz"
    result = run("agg", data, ids, "--op", ",".join(names), "-o", out, *args)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as got:
        for name in names:
            single = tmp_path / f"{name}.npy"
            assert run(name, data, ids, "-o", single, *args).exit_code == 0
            assert got[name].tobytes() == np.load(single).tobytes(), name


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.complex64])
@pytest.mark.parametrize("chunk", [None, 3])
def test_every_op_in_one_agg_gives_the_single_op_bytes(tmp_path, dtype, chunk):
    rng = np.random.default_rng(3)
    values = rng.normal(scale=40, size=(40, 2)) * (1 + 1j if np.dtype(dtype).kind == "c" else 1)
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, values.astype(dtype))
    np.save(ids, rng.integers(-1, 7, size=40))
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    names = ops_for(dtype)
    out = tmp_path / "all.npz"
    result = run("agg", data, ids, "--op", ",".join(names), "-o", out, "-q", *chunking)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as got:
        assert list(got.files) == [*names, "counts"]
        for name in names:
            single = tmp_path / f"{name}.npy"
            assert run(name, data, ids, "-o", single, "-q", *chunking).exit_code == 0
            expected = np.load(single)
            assert got[name].dtype == expected.dtype, name
            assert got[name].tobytes() == expected.tobytes(), name


@pytest.mark.parametrize("chunk", [None, 3])
def test_bool_data_folds_every_op_that_takes_it_in_one_agg(tmp_path, chunk):
    """any, all, count and nunique take bool data (SPEC), alone and together in agg."""
    rng = np.random.default_rng(4)
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, rng.random((30, 2)) < 0.5)
    np.save(ids, rng.integers(-1, 6, size=30))
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    names = ["any", "all", "count", "nunique"]
    for fill in ([], ["--fill", "1"]):
        args = ("-q", *chunking, *fill)
        assert_agg_gives_the_single_ops_bytes(tmp_path, data, ids, names, args)


@pytest.mark.parametrize("chunk", [None, 3])
def test_every_engine_folds_the_combined_state_like_the_single_ops(tmp_path, engine, chunk):
    rng = np.random.default_rng(5)
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, rng.normal(size=30).astype(np.float32))
    np.save(ids, rng.integers(-1, 5, size=30))
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    names = ops_for(np.float32)
    args = ("--engine", engine, "-q", *chunking)
    assert_agg_gives_the_single_ops_bytes(tmp_path, data, ids, names, args)


@pytest.mark.usefixtures("short_lanes")
@pytest.mark.parametrize("skipna", [False, True], ids=["nan", "skipna"])
@pytest.mark.parametrize("chunk", [None, 3])
def test_var_std_beside_other_ops_keep_the_single_op_lanes(tmp_path, engine, chunk, skipna):
    """var/std's and logsumexp's lanes (dealt every 5 rows here) sit beside the float sums' in
    the combined state and merge alike: the single ops' bytes, in memory and streamed, NaN
    left in or out."""
    rng = np.random.default_rng(8)
    values = 1e4 + rng.normal(size=(60, 2)) * rng.choice([1e-3, 1.0, 1e3], (60, 1))
    values[rng.choice(60, 6, replace=False), rng.integers(0, 2, 6)] = np.nan
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, values.astype(np.float32))  # numba's default data dtype (tests/matrix.py)
    np.save(ids, rng.integers(-1, 5, size=60))
    names = ["sum", "var", "mean", "std", "argmin", "min", "logsumexp"]
    args = ["--engine", engine, "-q"]
    args += [] if chunk is None else ["--chunk-rows", chunk]
    args += ["--skipna"] if skipna else []
    assert_agg_gives_the_single_ops_bytes(tmp_path, data, ids, names, args)


@pytest.mark.parametrize("chunk", [None, 1, 4])
def test_joint_ops_with_ddof_give_the_single_op_bytes(tmp_path, chunk):
    rng = np.random.default_rng(9)
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, (1e6 + rng.random(size=(33, 2))).astype(np.float64))
    np.save(ids, rng.integers(-1, 6, size=33))
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    names = ["var", "first", "std", "argmax", "sum", "logsumexp", "last", "argmin", "count"]
    out = tmp_path / "all.npz"
    args = ("-q", *chunking)
    result = run("agg", data, ids, "--op", ",".join(names), "--ddof", 1, "-o", out, *args)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as got:
        for name in names:
            single = tmp_path / f"{name}.npy"
            ddof = ["--ddof", 1] if name in ("var", "std") else []
            assert run(name, data, ids, "-o", single, *ddof, *args).exit_code == 0
            assert got[name].tobytes() == np.load(single).tobytes(), name


def test_ddof_without_var_or_std_is_a_usage_error(pair, tmp_path):
    out = tmp_path / "out.csv"
    result = run("agg", *pair, "--op", "sum,max", "--ddof", "1", "-o", out)
    assert result.exit_code == 2
    assert "--ddof applies to var and std only" in result.stderr and error_lines(result) == 1
    assert not out.exists()


def test_tmp_dir_without_a_sorting_op_is_a_usage_error(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """As the single-op commands without a sorting op, which have no --tmp-dir: refused, not
    silently unused, before any input is read (a missing DATA does not come first)."""
    out = tmp_path / "out.csv"
    spill = tmp_path / "spill"
    spill.mkdir()
    assert run("sum", *pair, "--tmp-dir", spill, "-o", out).exit_code == 2
    for data in (pair[0], tmp_path / "missing.npy"):
        result = run("agg", data, pair[1], "--op", "sum,max", "--tmp-dir", spill, "-o", out)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.splitlines()[-1] == (
            "Error: --tmp-dir applies to median, quantile and nunique only, not sum, max"
        )
        assert error_lines(result) == 1 and "Traceback" not in result.stderr
    assert listing(tmp_path) == ["data.npy", "ids.npy", "spill"]
    result = run("agg", *pair, "--op", "sum,median", "--tmp-dir", spill, "-o", out)
    assert result.exit_code == 0, result.stderr
    assert listing(spill) == []


def test_joint_ops_keep_their_intermediates_once():
    op = combined_op(("var", "std", "mean", "argmin", "sum"), np.dtype(np.float32), ())
    names = [i.name for i in op.intermediates]
    assert names.count("moments.shift") == 1 and names.count("sum") == 1
    assert [part.op.name for part in op.parts] == ["agg", "var", "argmin"]
    # argmin's fold keeps one lane, in row order; var's keeps lanes like the float sums
    state = ops.new_state(op, 3, (), np.dtype(np.float32))
    assert state.arrays["argmin.arg_row"].shape[0] == 1
    assert state.arrays["moments.shifted_sum"].shape[0] == ops.LANES
    assert state.arrays["moments.shifted_count"].shape[0] == ops.LANES
    assert state.arrays["sum"].shape[0] == ops.LANES
    # sorted ids keep one lane for all of them
    state = ops.new_state(op, 3, (), np.dtype(np.float32), sorted_ids=True)
    assert {array.shape[0] for array in state.arrays.values() if array.ndim == 3} == {1}


def test_combined_ops_come_back_from_pickling_as_themselves():
    import pickle

    op = combined_op(("std", "first"), np.dtype(np.float64), (2,), fill="3")
    assert pickle.loads(pickle.dumps(op)) is op
    assert {op: 1}[op] == 1  # hashable, as the table's ops are


def test_shared_intermediates_are_kept_once():
    float_op = combined_op(("sum", "mean", "sqrt_n", "count"), np.dtype(np.float32), ())
    assert [i.name for i in float_op.intermediates] == ["sum"]
    # sum wraps in int64 while mean sums 64-bit integers exactly in float64: two accumulators
    int_op = combined_op(("sum", "mean", "sqrt_n"), np.dtype(np.int64), ())
    assert [i.acc_dtype(np.dtype(np.int64)) for i in int_op.intermediates] == [
        np.dtype(np.int64),
        np.dtype(np.float64),
    ]


@pytest.mark.parametrize("option", ["--no-header", "--no-output-header"])
def test_agg_sum_equals_segcli_sum(pair, option):
    """SPEC's ``--no-header`` drops the header line (``--no-output-header``: the same)."""
    single = run("sum", *pair, "-q")
    agg = run("agg", *pair, "--op", "sum", "-q", option)
    assert agg.exit_code == 0, agg.stderr
    expected = [line.split("\t") for line in single.stdout.splitlines()]
    got = [line.split("\t") for line in agg.stdout.splitlines()]
    assert [row[:2] for row in got] == expected
    assert run("agg", *pair, "--op", "sum", "-q").stdout.splitlines()[0] == "segment\tsum\tcount"


def test_text_on_stdout_has_a_header_then_count(pair):
    result = run("agg", *pair, "--op", "mean,max", "-q")
    lines = result.stdout.splitlines()
    assert lines[0] == "segment\tmean\tmax\tcount"
    assert len(lines) == 1 + 6
    assert lines[5].split("\t")[0] == "4" and lines[5].split("\t")[3] == "0"


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_column_op_headers_are_quoted_like_fields(tmp_path, suffix):
    """Data columns named with a tab, a quote or a line break reach the header as
    ``<column>_<op>``: quoted, the header reads back as the names (and the file as a golden)."""
    names = ["a\tb", 'c"d', "e\nf"]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [0, 1, 0], **{name: [1.0, 2.0, 4.0] for name in names}}), path)
    out = tmp_path / f"out{suffix}"
    args = [path, "--data-column", 'a\tb,c"d,e\nf', "--ids-column", "id", "--op", "sum,max", "-q"]
    assert run("agg", *args, "-o", out).exit_code == 0
    delimiter = "\t" if suffix == ".tsv" else ","
    options = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    read = pacsv.read_csv(out, parse_options=options)
    expected = [f"{name}_{op}" for name in names for op in ("sum", "max")]
    assert read.column_names == ["segment", *expected, "count"]
    assert read.column("e\nf_sum").to_pylist() == [5.0, 2.0]
    assert run("agg", *args, "--expect", out).exit_code == 0


def test_count_op_is_the_only_count_column(pair, tmp_path):
    out = tmp_path / "out.csv"
    assert run("agg", *pair, "--op", "count,sum", "-o", out, "-q").exit_code == 0
    assert out.read_text().splitlines()[0] == "segment,count,sum"


def test_several_data_columns_are_named_column_op(table, tmp_path):
    out = tmp_path / "out.csv"
    result = run(
        "agg", table, "--data-column", "a,b", "--ids-column", "id", "--op", "sum,max", "-o", out
    )
    assert result.exit_code == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines == [
        "segment,a_sum,a_max,b_sum,b_max,count",
        "0,4.0,3.0,40,30,2",
        "1,2.0,2.0,20,20,1",
        "2,9.0,5.0,90,50,2",
    ]


def test_data_column_names_holding_commas_are_given_in_quotes(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [0, 1, 0], "price, USD": [1.0, 2.0, 4.0], "q": [1, 2, 3]}), path)
    out = tmp_path / "out.csv"
    args = ["--ids-column", "id", "-o", out, "-q"]
    result = run("agg", path, "--data-column", ' "price, USD" ,q', "--op", "sum", *args)
    assert result.exit_code == 0, result.stderr
    assert out.read_text().splitlines() == [
        'segment,"price, USD_sum",q_sum,count',
        "0,5.0,4,2",
        "1,2.0,2,1",
    ]
    # A single-op command takes the name as it is, or in quotes as the listings show it.
    for given in ("price, USD", '"price, USD"'):
        single = run("sum", path, "--data-column", given, "--ids-column", "id", "-q")
        assert single.stdout.splitlines() == ["0\t5.0", "1\t2.0"], single.stderr


def test_inner_dims_flatten_to_name_index(tmp_path):
    out = tmp_path / "out.tsv"
    args = (SAMPLES / "accel.npy", SAMPLES / "ids.npy", "--op", "min,count", "-o", out, "-q")
    assert run("agg", *args).exit_code == 0
    assert out.read_text().splitlines()[0] == "segment\tmin_0\tmin_1\tmin_2\tcount"


@pytest.mark.parametrize("suffix", ["parquet", "arrow"])
def test_arrow_tables_hold_one_row_per_segment(pair, tmp_path, suffix):
    out = tmp_path / f"out.{suffix}"
    assert run("agg", *pair, "--op", "sum,min", "-o", out, "-q").exit_code == 0
    if suffix == "parquet":
        got = pq.read_table(out)
    else:
        with pa.memory_map(str(out)) as source:
            got = pa.ipc.open_file(source).read_all()
    assert got.column_names == ["segment", "sum", "min", "count"]
    assert got.num_rows == 6
    expected = tmp_path / "sum.npy"
    run("sum", *pair, "-o", expected, "-q")
    np.testing.assert_array_equal(got.column("sum").to_numpy(), np.load(expected))


def test_json_holds_one_list_per_column(pair, tmp_path):
    out = tmp_path / "out.json"
    assert run("agg", *pair, "--op", "max,count", "-o", out, "-q").exit_code == 0
    doc = json.loads(out.read_text())
    assert list(doc) == ["segment", "max", "count"]
    assert doc["segment"] == list(range(6))


def test_npy_with_several_results_is_a_usage_error(pair, tmp_path):
    result = run("agg", *pair, "--op", "sum,mean", "-o", tmp_path / "out.npy")
    assert result.exit_code == 2
    assert ".npz" in result.stderr and error_lines(result) == 1
    assert "out.npy" not in listing(tmp_path)


def test_npy_with_one_result_is_that_result(pair, tmp_path):
    out, single = tmp_path / "out.npy", tmp_path / "single.npy"
    assert run("agg", *pair, "--op", "mean", "-o", out, "-q").exit_code == 0
    run("mean", *pair, "-o", single, "-q")
    assert out.read_bytes() == single.read_bytes()


def test_expect_passes_and_fails(pair, tmp_path):
    golden = tmp_path / "golden.csv"
    assert run("agg", *pair, "--op", "sum,max", "-o", golden, "-q").exit_code == 0
    out = tmp_path / "out.parquet"
    passed = run("agg", *pair, "--op", "sum,max", "--expect", golden, "-o", out, "-q")
    assert passed.exit_code == 0, passed.stderr
    lines = golden.read_text().splitlines()
    lines[1] = lines[1].replace(lines[1].split(",")[2], "1234.5", 1)
    golden.write_text("\n".join(lines) + "\n")
    out.unlink()
    failed = run("agg", *pair, "--op", "sum,max", "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 4
    assert "column max" in failed.stderr and "segment 0" in failed.stderr
    assert error_lines(failed) == 1
    assert not out.exists()


def test_expect_compares_integer_columns_exactly(tmp_path):
    """As the single-op --expect: --rtol and --atol apply to float columns; a row number or
    an integer sum one off is a mismatch, however large the number."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    values = np.zeros(300_001, np.int64)
    values[200_000] = 7
    np.save(data, values)
    np.save(ids, np.zeros(values.size, np.int64))
    golden = tmp_path / "golden.csv"
    args = ["--op", "argmax,sum,mean", "-q"]
    assert run("agg", data, ids, *args, "-o", golden).exit_code == 0
    header, row = golden.read_text().splitlines()
    assert row.split(",")[:3] == ["0", "200000", "7"]
    for column, name in ((1, "argmax"), (2, "sum"), (3, "mean")):
        fields = row.split(",")
        fields[column] = str(
            float(fields[column]) * 1.001 if name == "mean" else int(fields[column]) + 1
        )
        golden.write_text(f"{header}\n{','.join(fields)}\n")
        ran = run("agg", data, ids, *args, "--expect", golden, "--rtol", "0.01")
        if name == "mean":  # the float column keeps its tolerance
            assert ran.exit_code == 0, ran.stderr
            continue
        assert ran.exit_code == 4, ran.stderr
        assert f"column {name} differs in 1 segment(s), the first segment 0:" in ran.stderr
        assert error_lines(ran) == 1


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".json"])
def test_expect_compares_uint64_columns_of_a_text_golden_exactly(tmp_path, suffix):
    """A uint64 result past int64 (a max of hashed ids) read back from text is compared as
    the integer it is: through float64, 2**64 - 2 and 2**64 - 3 were the same number."""
    data, ids, other = tmp_path / "d.npy", tmp_path / "i.npy", tmp_path / "other.npy"
    np.save(data, np.array([2**64 - 2, 7], np.uint64))
    np.save(other, np.array([2**64 - 3, 7], np.uint64))
    np.save(ids, np.array([0, 1]))
    golden = tmp_path / f"golden{suffix}"
    assert run("agg", data, ids, "--op", "max,first", "-o", golden, "-q").exit_code == 0
    assert run("agg", data, ids, "--op", "max,first", "--expect", golden, "-q").exit_code == 0
    failed = run("agg", other, ids, "--op", "max,first", "--expect", golden, "-q")
    assert failed.exit_code == 4, failed.stderr
    assert f"column max differs in 1 segment(s), the first segment 0: {2**64 - 3} vs " in (
        failed.stderr
    )
    assert error_lines(failed) == 1


def test_expect_compares_the_segment_column_of_a_golden_table(pair, tmp_path):
    """Rows of a golden table in another order are other segments: a mismatch, even where the
    values happen to agree (here: two empty segments, swapped)."""
    golden, npz = tmp_path / "golden.csv", tmp_path / "golden.npz"
    args = ["--op", "sum,max", "-n", 9, "-q"]
    assert run("agg", *pair, *args, "-o", golden).exit_code == 0
    assert run("agg", *pair, *args, "-o", npz).exit_code == 0
    assert run("agg", *pair, *args, "--expect", npz).exit_code == 0  # no segment column
    lines = golden.read_text().splitlines()
    lines[7], lines[8] = lines[8], lines[7]  # segments 6 and 7, both empty
    assert lines[7].split(",")[1:] == lines[8].split(",")[1:]
    golden.write_text("\n".join(lines) + "\n")
    for tolerance in ([], ["--rtol", "0.5"]):  # segment numbers are compared exactly
        failed = run("agg", *pair, *args, "--expect", golden, *tolerance)
        assert failed.exit_code == 4, failed.stderr
        assert failed.stderr.startswith(f"Error: --expect {golden}: column segment differs in 2")
        assert error_lines(failed) == 1


def test_expect_compares_the_segment_list_of_a_json_golden(pair, tmp_path):
    """A JSON golden's ``segment`` list is compared as a table's column is, not renumbered:
    two empty segments swapped there fail although their values agree."""
    golden = tmp_path / "golden.json"
    args = ["--op", "sum,max", "-n", 9, "-q"]
    assert run("agg", *pair, *args, "-o", golden).exit_code == 0
    assert run("agg", *pair, *args, "--expect", golden).exit_code == 0
    doc = json.loads(golden.read_text())
    assert doc["segment"][6:8] == [6, 7] and doc["sum"][6] == doc["sum"][7]
    doc["segment"][6:8] = [7, 6]
    golden.write_text(json.dumps(doc))
    failed = run("agg", *pair, *args, "--expect", golden)
    assert failed.exit_code == 4, failed.stderr
    assert failed.stderr.startswith(f"Error: --expect {golden}: column segment differs in 2")
    assert error_lines(failed) == 1


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_expect_compares_the_rows_per_segment_of_a_golden(pair, tmp_path, suffix):
    """The trailing count column (an .npz's ``counts``) is a column like the others: a golden
    whose count differs fails, naming it and the first segment, even where every value agrees."""
    golden, out = tmp_path / f"golden{suffix}", tmp_path / "out.csv"
    args = ["--op", "sum,max", "-q"]
    assert run("agg", *pair, *args, "-o", golden).exit_code == 0
    assert run("agg", *pair, *args, "--expect", golden).exit_code == 0
    name = "counts" if suffix == ".npz" else "count"
    if suffix == ".npz":
        arrays = dict(np.load(golden))
        arrays[name][3] += 1
        np.savez(golden, **arrays)
    else:
        table = pq.read_table(golden) if suffix == ".parquet" else pacsv.read_csv(golden)
        counts = table.column(name).to_numpy().copy()
        counts[3] += 1
        table = table.set_column(table.column_names.index(name), name, pa.array(counts))
        (pq.write_table if suffix == ".parquet" else pacsv.write_csv)(table, golden)
    failed = run("agg", *pair, *args, "--expect", golden, "-o", out)
    assert failed.exit_code == 4, failed.stderr
    assert failed.stderr.startswith(f"Error: --expect {golden}: column {name} differs in 1 ")
    assert "the first segment 3:" in failed.stderr
    assert error_lines(failed) == 1
    assert not out.exists()


def test_expect_compares_the_count_column_of_a_by_golden(keyed, tmp_path):
    golden = tmp_path / "golden.csv"
    args = ("--data-column", "delay", "--by", "carrier", "--op", "mean", "-q")
    assert run("agg", keyed, *args, "-o", golden).exit_code == 0
    assert run("agg", keyed, *args, "--expect", golden).exit_code == 0
    lines = golden.read_text().splitlines()
    fields = lines[2].split(",")
    fields[-1] = str(int(fields[-1]) + 1)
    lines[2] = ",".join(fields)
    golden.write_text("\n".join(lines) + "\n")
    failed = run("agg", keyed, *args, "--expect", golden)
    assert failed.exit_code == 4, failed.stderr
    assert "column count differs in 1 segment(s), the first segment 1:" in failed.stderr
    assert error_lines(failed) == 1


def test_expect_refuses_a_golden_result_column_the_run_does_not_give(pair, tmp_path):
    """A golden made with --op sum,max checks max too: a run without max cannot pass it."""
    golden, out = tmp_path / "golden.csv", tmp_path / "out.csv"
    assert run("agg", *pair, "--op", "sum,max", "-o", golden, "-q").exit_code == 0
    failed = run("agg", *pair, "--op", "sum", "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 1, failed.stderr
    assert failed.stderr == (
        f"Error: --expect {golden}: column 'max' is not a result of this run (results: sum)\n"
    )
    assert not out.exists()
    # Its segment and count columns are no results: the run that wrote it passes.
    assert run("agg", *pair, "--op", "sum,max", "--expect", golden, "-q").exit_code == 0


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_expect_compares_the_key_columns_of_a_by_golden(tmp_path, suffix):
    """Keys are compared as the table shows them ("007" stays "007"); keys in another order
    fail even where every value agrees (here: two empty groups of --keys-from, swapped)."""
    table, order = tmp_path / "t.parquet", tmp_path / "order.parquet"
    pq.write_table(pa.table({"zip": ["007", "007", "10"], "v": [1.0, 2.0, 3.0]}), table)
    golden = tmp_path / f"golden.{suffix}"
    args = ["agg", table, "--by", "zip", "--data-column", "v", "--op", "sum", "-q"]
    pq.write_table(pa.table({"zip": ["007", "10", "8", "9"]}), order)
    assert run(*args, "--keys-from", order, "-o", golden).exit_code == 0
    passed = run(*args, "--keys-from", order, "--expect", golden)
    assert passed.exit_code == 0, passed.stderr
    pq.write_table(pa.table({"zip": ["007", "10", "9", "8"]}), order)
    failed = run(*args, "--keys-from", order, "--expect", golden)
    assert failed.exit_code == 4, failed.stderr
    assert failed.stderr == (
        f"Error: --expect {golden}: row 2 has key zip='9', the golden file zip='8' (the keys "
        "differ in 2 of 4 rows)\n"
    )


@pytest.mark.parametrize("by", [False, True])
def test_expect_takes_the_arrow_stream_agg_writes_on_stdout(pair, tmp_path, by):
    """``-o - --format arrow > golden.arrow`` is an Arrow IPC stream, not the file format:
    the golden the single-op command takes back, agg takes too."""
    args = ["--op", "sum,max", "-q"]
    if by:
        table = tmp_path / "t.parquet"
        pq.write_table(pa.table({"k": ["a", "b", "a"], "v": [1.0, 2.0, 3.0]}), table)
        inputs: list[object] = [table, "--data-column", "v", "--by", "k"]
    else:
        inputs = list(pair)
    written = run("agg", *inputs, *args, "-o", "-", "--format", "arrow")
    assert written.exit_code == 0, written.stderr
    golden = tmp_path / "golden.arrow"
    golden.write_bytes(written.stdout_bytes)
    passed = run("agg", *inputs, *args, "--expect", golden)
    assert passed.exit_code == 0, passed.stderr


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
def test_expect_reads_a_golden_table_through_a_pipe(pair, tmp_path):
    golden = tmp_path / "golden.parquet"
    assert run("agg", *pair, "--op", "sum,max", "-o", golden, "-q").exit_code == 0
    fifo = fifo_fed_with(tmp_path, golden.read_bytes())
    passed = run("agg", *pair, "--op", "sum,max", "--expect", fifo, "-q")
    assert passed.exit_code == 0, passed.stderr


@pytest.mark.parametrize("suffix", ["parquet", "arrow", "csv"])
def test_expect_with_a_corrupt_golden_is_exit_3(pair, tmp_path, suffix):
    """A file that cannot be read is exit 3, as the single-op command says, not invalid data."""
    golden = tmp_path / f"golden.{suffix}"
    golden.write_bytes(b"\x00\x01junk" if suffix != "csv" else b'a,b\n"1,2\n')
    failed = run("agg", *pair, "--op", "sum,max", "--expect", golden, "-q")
    assert failed.exit_code == 3, failed.stderr
    assert failed.stderr.startswith(f"Error: --expect {golden}: cannot read (")
    assert error_lines(failed) == 1


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
def test_expect_from_stdin_is_a_usage_error(pair, command):
    failed = run(command[0], *pair, *command[1:], "--expect", "-", "-q", input=b"")
    assert failed.exit_code == 2, failed.stderr
    assert "Error: --expect reads a file, not stdin" in failed.stderr
    assert error_lines(failed) == 1


@pytest.mark.parametrize("extra", [[], ["--chunk-rows", "3"]])
def test_expect_takes_the_npy_a_one_result_run_writes(pair, tmp_path, extra):
    """agg writes a one-result run to .npy; it takes that file back as a golden, as the
    single-op command does (a run of several results is told to use .npz or a table)."""
    golden = tmp_path / "golden.npy"
    for names in ("median", "count"):
        args = ["--op", names, "--skipna", "-q", *extra]
        assert run("agg", *pair, *args, "-o", golden).exit_code == 0
        passed = run("agg", *pair, *args, "--expect", golden)
        assert passed.exit_code == 0, passed.stderr
    failed = run("agg", *pair, "--op", "count", "-n", 9, "-q", "--expect", golden)
    assert failed.exit_code == 4, failed.stderr
    several = run("agg", *pair, "--op", "sum,max", "-q", "--expect", golden)
    assert several.exit_code == 2, several.stderr
    assert "holds one array, and this run gives 2 result columns (sum, max)" in several.stderr
    assert error_lines(several) == 1


def test_expect_reads_complex_text_and_names_a_word(tmp_path):
    """A CSV golden holds complex values as text; a word in a column is named, not a crash."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([1 + 2j, 3, 4j, 5], np.complex64))
    np.save(ids, np.array([0, 0, 1, 3]))
    golden, out = tmp_path / "golden.csv", tmp_path / "out.npz"
    assert run("agg", data, ids, "--op", "sum,first", "-o", golden, "-q").exit_code == 0
    passed = run("agg", data, ids, "--op", "sum,first", "--expect", golden, "-q")
    assert passed.exit_code == 0, passed.stderr
    golden.write_text(golden.read_text().replace("(4+2j)", "(4+3j)"))
    failed = run("agg", data, ids, "--op", "sum,first", "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 4, failed.stderr
    assert "column sum differs" in failed.stderr and error_lines(failed) == 1
    golden.write_text(golden.read_text().replace("4j", "four"))
    word = run("agg", data, ids, "--op", "sum,first", "--expect", golden, "-o", out, "-q")
    assert word.exit_code == 3, word.stderr
    assert word.stderr == f"Error: --expect {golden}: column 'sum' row 1: 'four' is not a number\n"
    assert not out.exists()


def test_expect_takes_the_json_agg_writes(tmp_path):
    """The .json agg writes is a golden like its tables: NaN and infinities written as text,
    complex as [re, im] pairs and inner dimensions as nested lists read back; a changed value
    or count fails (exit 4, one line naming the column and the segment)."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([[1, np.nan], [np.inf, 2], [3, 4], [5, 6]], np.float32))
    np.save(ids, np.array([0, 0, 2, -1]))
    cdata = tmp_path / "c.npy"
    np.save(cdata, np.array([1 + 2j, 3, 4j, 5], np.complex64))
    golden, out = tmp_path / "golden.json", tmp_path / "out.npz"
    for inputs, names in (([data, ids], "sum,argmax,any,count"), ([cdata, ids], "sum,first")):
        args = [*inputs, "--op", names, "-q"]
        assert run("agg", *args, "-o", golden).exit_code == 0
        passed = run("agg", *args, "--expect", golden)
        assert passed.exit_code == 0, passed.stderr
    doc = json.loads(golden.read_text())
    assert doc["sum"][0] == [4.0, 2.0]  # the run's 1+2j and 3 as [re, im]
    doc["sum"][2] = [0.0, 4.5]
    golden.write_text(json.dumps(doc))
    failed = run("agg", cdata, ids, "--op", "sum,first", "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 4, failed.stderr
    assert failed.stderr.startswith(f"Error: --expect {golden}: column sum differs in 1 ")
    assert "the first segment 2:" in failed.stderr and error_lines(failed) == 1
    assert not out.exists()


def test_expect_with_a_json_that_is_no_agg_result_is_exit_3(pair, tmp_path):
    golden = tmp_path / "golden.json"
    for text in ("[1, 2]", '{"sum": [[1, 2], [3]]}', '{"sum": "1"}', "{"):
        golden.write_text(text)
        failed = run("agg", *pair, "--op", "sum,max", "--expect", golden, "-q")
        assert failed.exit_code == 3, (text, failed.stderr)
        assert failed.stderr.startswith(f"Error: --expect {golden}: cannot read (")
        assert error_lines(failed) == 1


def test_expect_says_a_json_golden_is_a_single_op_commands(pair, tmp_path):
    """The single-op JSON (shape, dtype, values, counts) is no object of columns: the error says
    whose layout it is and what to do, not that its dtype is no list."""
    golden, out = tmp_path / "golden.json", tmp_path / "out.csv"
    assert run("sum", *pair, "-o", golden, "-q").exit_code == 0
    failed = run("agg", *pair, "--op", "sum", "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 3, failed.stderr
    assert failed.stderr == (
        f"Error: --expect {golden}: a single-op command's result (shape, dtype and values), "
        "not agg's columns (results: sum): write the golden with agg, or check it with the "
        "single-op command\n"
    )
    assert not out.exists()
    assert run("sum", *pair, "--expect", golden, "-q").exit_code == 0


@pytest.mark.parametrize("suffix", [".json", ".npz", ".npy"])
def test_expect_names_a_golden_column_of_other_rows_as_the_file_does(tmp_path, suffix):
    """A JSON, .npz or .npy golden holds 2-D ``sum`` whole: a row count that differs names
    ``sum``, as the file does, not the flattened ``sum_0`` of a table (a JSON's ``segment``
    list, compared first as a table's column is, is named before it)."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.arange(8.0).reshape(4, 2))
    np.save(ids, np.array([0, 0, 1, 1]))
    golden, out = tmp_path / f"golden{suffix}", tmp_path / "out.csv"
    assert run("agg", data, ids, "--op", "sum", "-o", golden, "-q").exit_code == 0
    failed = run("agg", data, ids, "--op", "sum", "-n", 3, "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 4, failed.stderr
    first = "segment" if suffix == ".json" else "sum"
    assert failed.stderr == f"Error: --expect {golden}: column {first} has 2 rows, the result 3\n"
    assert not out.exists()


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz"])
def test_expect_says_a_golden_table_is_a_single_op_commands(pair, tmp_path, suffix):
    golden, out = tmp_path / f"golden{suffix}", tmp_path / "out.csv"
    assert run("sum", *pair, "-o", golden, "-q").exit_code == 0
    failed = run("agg", *pair, "--op", "sum", "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 1, failed.stderr
    column = "result" if suffix == ".npz" else "value"
    assert failed.stderr == (
        f"Error: --expect {golden}: no column 'sum' to compare with; the golden has {column} "
        "instead; it is a single-op command's golden: write it with agg, or check it with the "
        "single-op command\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz", ".json"])
def test_a_single_op_expect_says_a_golden_is_aggs(pair, tmp_path, suffix):
    """The reverse: a single-op command given agg's golden says so, with the same exit code
    (1, a layout, not a damaged file); one of agg --op count, whose columns are those of an
    (n, 0) result's golden, gets the hint beside the shape it fails on."""
    golden, out = tmp_path / f"golden{suffix}", tmp_path / "out.csv"
    assert run("agg", *pair, "--op", "sum,max", "-o", golden, "-q").exit_code == 0
    failed = run("sum", *pair, "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 1, failed.stderr
    assert failed.stderr == (
        f"Error: {golden}: no single result but a column per op (sum, max): it is agg's "
        "golden; check it with agg, or write the golden with this command\n"
    )
    assert not out.exists()
    counted = tmp_path / "count.csv"
    assert run("agg", *pair, "--op", "count", "-o", counted, "-q").exit_code == 0
    failed = run("count", *pair, "--expect", counted, "-q")
    assert failed.exit_code == 4, failed.stderr
    assert failed.stderr.endswith(
        "(only segment and count columns: if agg --op count wrote it, check it with agg)\n"
    )


def test_expect_lists_the_golden_columns_where_none_stands_in(pair, tmp_path):
    golden = tmp_path / "golden.csv"
    assert run("agg", *pair, "--op", "sum,max", "-o", golden, "-q").exit_code == 0
    failed = run("agg", *pair, "--op", "sum,max,min", "--expect", golden, "-q")
    assert failed.exit_code == 1, failed.stderr
    assert failed.stderr == (
        f"Error: --expect {golden}: no column 'min' to compare with (the golden's columns: "
        "segment, sum, max, count)\n"
    )


@pytest.mark.parametrize(
    ("suffix", "said"),
    [
        (
            ".csv",
            "no column 'count' to compare with; the golden has count_0, count_1, rows instead",
        ),
        (
            ".json",
            "column 'count' holds 2 values per segment, the result 1; the golden also has rows",
        ),
    ],
)
def test_expect_names_the_columns_of_a_skipna_golden(tmp_path, suffix, said):
    """Of 2-D data, --skipna's count op counts per element (count_0, count_1) and a rows column
    counts rows: a run without --skipna, whose count is per row, names the golden's columns that
    differ and the --skipna run that wrote them; and the other way round."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([[1.0, np.nan], [2.0, 3.0], [np.nan, 4.0], [5.0, 6.0]]))
    np.save(ids, np.array([0, 0, 1, 1]))
    golden, out = tmp_path / f"golden{suffix}", tmp_path / "out.csv"
    args = [data, ids, "--op", "sum,count", "-q"]
    assert run("agg", *args, "--skipna", "-o", golden).exit_code == 0
    failed = run("agg", *args, "--expect", golden, "-o", out)
    assert failed.exit_code == 1, failed.stderr
    assert failed.stderr == (
        f"Error: --expect {golden}: {said}; it is a --skipna run's golden (a rows column)\n"
    )
    assert not out.exists()
    assert run("agg", *args, "-o", golden).exit_code == 0
    failed = run("agg", *args, "--skipna", "--expect", golden, "-o", out)
    assert failed.exit_code == 1, failed.stderr
    assert failed.stderr == (
        f"Error: --expect {golden}: column 'count' holds 1 value per segment, the result 2 "
        "(count_0, count_1); it is the golden of a run without --skipna (no rows column)\n"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("ops_list", "message"),
    [
        ("sum,mode", "unknown op 'mode'"),
        ("", "need op names"),
        ("sum,,max", "need op names"),
        ("sum,sum", "'sum' is given twice"),
    ],
)
def test_bad_op_lists_are_usage_errors(pair, tmp_path, ops_list, message):
    out = tmp_path / "out.csv"
    result = run("agg", *pair, "--op", ops_list, "-o", out)
    assert result.exit_code == 2
    assert message in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--indices", "idx.npy", "--op", "sum,median"], "--indices with median"),
        (["--scheduler", "tcp://127.0.0.1:9"], "--scheduler applies to --engine dask only"),
        (["--fill", "0.5", "--op", "count,sum"], "cannot be stored in the int64 result of count"),
    ],
)
def test_refused_options_write_nothing(pair, tmp_path, extra, message):
    out = tmp_path / "out.csv"
    args = ["agg", *pair, *extra, "-o", out]
    if "--op" not in extra:
        args += ["--op", "sum,max"]
    result = run(*args)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert listing(tmp_path) == ["data.npy", "ids.npy"]


@pytest.mark.parametrize("suffix", ["parquet", "npz", "json"])
def test_no_output_header_with_a_binary_or_json_output_is_a_usage_error(pair, tmp_path, suffix):
    """It has no header line to drop: refused like --float-format, not silently ignored."""
    out = tmp_path / f"out.{suffix}"
    result = run("agg", *pair, "--op", "sum,max", "--no-header", "-o", out)
    assert result.exit_code == 2, result.stderr
    assert f"--no-header applies to text, csv and tsv output, not {suffix}" in result.stderr
    assert error_lines(result) == 1
    assert listing(tmp_path) == ["data.npy", "ids.npy"]


def test_fill_applies_to_every_op(pair):
    result = run("agg", *pair, "--op", "sum,min,count", "--fill", "7", "-q")
    assert result.stdout.splitlines()[5] == "4\t7.0\t7.0\t7"


@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_float_format_formats_complex_columns_as_the_single_op_does(tmp_path, suffix):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([1 / 3 + 2j, 3, 4j, 5], np.complex128))
    np.save(ids, np.array([0, 0, 1, 3]))
    agg, single = tmp_path / f"agg.{suffix}", tmp_path / f"sum.{suffix}"
    args = ["--float-format", "%.3g", "-q"]
    assert run("agg", data, ids, "--op", "sum", "-o", agg, *args).exit_code == 0
    assert run("sum", data, ids, "-o", single, *args).exit_code == 0
    assert agg.read_text() == single.read_text().replace("value", "sum", 1)
    assert "(3.33+2j)" in agg.read_text()


def test_complex_data_is_refused_naming_the_op(tmp_path):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.ones(3, np.complex64))
    np.save(ids, np.zeros(3, np.int64))
    result = run("agg", data, ids, "--op", "sum,max", "-q")
    assert result.exit_code == 1
    assert "not supported by max" in result.stderr


def test_summary_json_has_one_entry_per_result_column(pair, tmp_path):
    summary = tmp_path / "summary.json"
    result = run("agg", *pair, "--op", "sum,max", "-q", "--summary-json", summary)
    assert result.exit_code == 0
    facts = json.loads(summary.read_text())
    assert [c["name"] for c in facts["results"]] == ["sum", "max"]
    single = json.loads(run("max", *pair, "-q", "--summary-json", "-").stderr)
    assert facts["results"][1]["result_max"] == single["result_max"]
    assert facts["results"][1]["nan_count"] == 0 and facts["nan_count"] == 0


@pytest.mark.parametrize("chunk", [None, 2])
@pytest.mark.parametrize("names", ["mean", "median", "mean,median"])
def test_skipna_summary_counts_the_missing_values_of_every_column(tmp_path, chunk, names):
    path = tmp_path / "gaps.parquet"
    table = {
        "id": pa.array([0, 0, 1, None, 2, 2, 1], pa.int32()),
        "a": pa.array([1.0, None, float("nan"), 4.0, None, None, 7.0]),
        "b": pa.array([1, 2, None, 4, 5, 6, 7], pa.int16()),
    }
    pq.write_table(pa.table(table), path)
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    args = ["--ids-column", "id", "--op", names, "--skipna", "-q", "--summary-json", "-"]
    result = run("agg", path, "--data-column", "a,b", *args, *chunking)
    assert result.exit_code == 0, result.stderr
    # a: rows 1, 2, 4 and 5; b: row 2 (row 3 has a null id: dropped, not skipped)
    assert json.loads(result.stderr)["skipped"] == {"values": 5, "rows": 1}


def test_check_takes_a_list_of_ops(tmp_path):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.ones(3, np.complex64))
    np.save(ids, np.zeros(3, np.int64))
    assert run("check", data, ids, "--op", "sum,mean", "-q").exit_code == 0
    refused = run("check", data, ids, "--op", "sum,min", "-q")
    assert refused.exit_code == 1 and "not supported by min" in refused.stderr
    assert run("check", data, ids, "--op", "sum,nope", "-q").exit_code == 2


def test_stdin_streams_like_a_file(pair):
    data, ids = pair
    from_file = run("agg", data, ids, "--op", "sum,max", "-q")
    from_stdin = run("agg", "-", ids, "--op", "sum,max", "-q", input=data.read_bytes())
    assert from_stdin.exit_code == 0, from_stdin.stderr
    assert from_stdin.stdout == from_file.stdout


def test_sorted_ids_give_the_single_op_bytes(tmp_path):
    rng = np.random.default_rng(11)
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, rng.normal(size=25).astype(np.float64))
    np.save(ids, np.sort(rng.integers(0, 6, size=25)))
    names = ops_for(np.float64)
    sorted_args = ("--sorted", "-n", "5", "-q", "--chunk-rows", "4")
    assert_agg_gives_the_single_ops_bytes(tmp_path, data, ids, names, sorted_args)


@pytest.fixture
def keyed(tmp_path: Path) -> Path:
    rng = np.random.default_rng(13)
    path = tmp_path / "keyed.parquet"
    carriers = np.array(["UA", "AA", "DL", None], dtype=object)[rng.integers(0, 4, 80)]
    pq.write_table(
        pa.table(
            {
                "carrier": pa.array(carriers.tolist(), pa.string()),
                "delay": pa.array(rng.normal(scale=20, size=80), pa.float64()),
                "seats": pa.array(rng.integers(50, 300, 80), pa.int32()),
            }
        ),
        path,
        row_group_size=16,
    )
    return path


JOINT_AND_PLAIN = "mean,std,argmax,first,min,count,logsumexp"


@pytest.mark.parametrize("chunk", [None, 7])
def test_by_gives_each_single_op_by_result(keyed, tmp_path, chunk):
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    by = ("--data-column", "delay", "--by", "carrier", "-q", *chunking)
    out, keys = tmp_path / "all.npz", tmp_path / "keys.csv"
    result = run("agg", keyed, *by, "--op", JOINT_AND_PLAIN, "-o", out, "--keys-out", keys)
    assert result.exit_code == 0, result.stderr
    assert keys.read_text().splitlines() == ["carrier", "AA", "DL", "UA"]  # sorted, null dropped
    with np.load(out) as got:
        for name in JOINT_AND_PLAIN.split(","):
            single = tmp_path / f"{name}.npy"
            args = ("-o", single, "--keys-out", tmp_path / f"{name}.csv")
            assert run(name, keyed, *by, *args).exit_code == 0
            assert got[name].tobytes() == np.load(single).tobytes(), name


def test_by_tables_start_with_the_key_columns(keyed, tmp_path):
    out = tmp_path / "out.parquet"
    args = ("--data-column", "delay", "--by", "carrier", "--op", "mean,var", "-q")
    assert run("agg", keyed, *args, "-o", out).exit_code == 0
    table = pq.read_table(out)
    assert table.column_names == ["carrier", "mean", "var", "count"]
    assert table.schema.field("carrier").type == pa.string()
    text = run("agg", keyed, *args).stdout.splitlines()
    assert text[0] == "carrier\tmean\tvar\tcount"
    assert [line.split("\t")[0] for line in text[1:]] == ["AA", "DL", "UA"]
    doc = json.loads(run("agg", keyed, *args, "-o", "-", "--format", "json").stdout)
    assert list(doc) == ["keys", "mean", "var", "count"]
    assert doc["keys"] == {"carrier": ["AA", "DL", "UA"]}


def test_by_npz_without_keys_out_is_a_usage_error(keyed, tmp_path):
    out = tmp_path / "out.npz"
    args = ("--data-column", "delay", "--by", "carrier", "--op", "mean,std", "-o", out)
    result = run("agg", keyed, *args)
    assert result.exit_code == 2
    assert "--keys-out" in result.stderr and error_lines(result) == 1
    assert not out.exists()


def test_by_with_several_columns_names_column_op(keyed, tmp_path):
    out = tmp_path / "out.csv"
    args = ("--data-column", "delay,seats", "--by", "carrier", "--op", "max,last", "-q")
    assert run("agg", keyed, *args, "-o", out).exit_code == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "carrier,delay_max,delay_last,seats_max,seats_last,count"
    assert [line.split(",")[0] for line in lines[1:]] == ["AA", "DL", "UA"]


def test_expect_compares_by_results(keyed, tmp_path):
    golden = tmp_path / "golden.parquet"
    args = ("--data-column", "delay", "--by", "carrier", "--op", "std,argmin", "-q")
    assert run("agg", keyed, *args, "-o", golden).exit_code == 0
    passed = run("agg", keyed, *args, "--expect", golden, "--chunk-rows", 5)
    assert passed.exit_code == 0, passed.stderr
    table = pq.read_table(golden)
    table = table.set_column(2, "argmin", pa.array([0, 0, 0], pa.int64()))
    pq.write_table(table, golden)
    failed = run("agg", keyed, *args, "--expect", golden)
    assert failed.exit_code == 4 and "column argmin" in failed.stderr
    assert error_lines(failed) == 1


def test_expect_takes_the_json_of_a_by_run(keyed, tmp_path):
    golden = tmp_path / "golden.json"
    args = ("--data-column", "delay", "--by", "carrier", "--op", "mean,last", "-q")
    assert run("agg", keyed, *args, "-o", golden).exit_code == 0
    passed = run("agg", keyed, *args, "--expect", golden)
    assert passed.exit_code == 0, passed.stderr
    doc = json.loads(golden.read_text())
    doc["count"][1] += 1
    golden.write_text(json.dumps(doc))
    failed = run("agg", keyed, *args, "--expect", golden)
    assert failed.exit_code == 4, failed.stderr
    assert "column count differs in 1 segment(s), the first segment 1:" in failed.stderr


@pytest.fixture(scope="module")
def scheduler():
    """A local cluster of two worker processes (ops travel to them pickled)."""
    import logging

    pytest.importorskip("distributed")
    from segcli.drivers import dask as seg_dask

    cluster = seg_dask.local_cluster(2, silence_logs=logging.CRITICAL)
    yield str(cluster.scheduler_address)
    cluster.close()


@pytest.mark.dask
@pytest.mark.parametrize("grouping", ["ids", "by"])
def test_dask_gives_the_single_op_dask_bytes(scheduler, keyed, tmp_path, grouping):
    if grouping == "by":
        inputs = (keyed, "--data-column", "delay", "--by", "carrier")
    else:
        data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
        rng = np.random.default_rng(17)
        np.save(data, (1e3 + rng.normal(size=(90, 2))).astype(np.float32))
        np.save(ids, rng.integers(-1, 8, size=90))
        inputs = (data, ids)
    dask = ("--engine", "dask", "--scheduler", scheduler, "--chunk-rows", 20, "-q")
    names = "sum,var,std,argmin,first,last,logsumexp,count"
    out = tmp_path / "all.npz"
    keys = ("--keys-out", tmp_path / "keys.csv") if grouping == "by" else ()
    result = run("agg", *inputs, "--op", names, "--ddof", 1, *dask, "-o", out, *keys)
    assert result.exit_code == 0, result.stderr
    with np.load(out) as got:
        for name in names.split(","):
            ddof = ["--ddof", 1] if name in ("var", "std") else []
            single = tmp_path / f"{name}.npy"
            keys = ("--keys-out", tmp_path / f"{name}.csv") if grouping == "by" else ()
            assert run(name, *inputs, *dask, *ddof, "-o", single, *keys).exit_code == 0
            assert got[name].tobytes() == np.load(single).tobytes(), name
        # --ddof reaches the workers (a --by job once sent the op's name alone, so ddof 0);
        # Dask merges var partitions in another order: 1e-12 is its documented tolerance
        here = tmp_path / "here.npy"
        keys = ("--keys-out", tmp_path / "here.csv") if grouping == "by" else ()
        assert run("var", *inputs, "--ddof", 1, "-q", "-o", here, *keys).exit_code == 0
        np.testing.assert_allclose(got["var"], np.load(here), rtol=1e-12)


SEVERAL = ("--data-column", "a,b,v", "--ids-column", "id")
SEVERAL_OPS = "sum,std,argmin,first,max,count"


@pytest.fixture
def wide(tmp_path: Path) -> dict[str, Path]:
    """One table in each format: float64 a, int32 b, float32 pairs v, ids with drops."""
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(21)
    rows = 45
    columns = {
        "a": pa.array(rng.normal(size=rows)),
        "b": pa.array(rng.integers(-50, 50, rows), pa.int32()),
        "v": pa.array(
            rng.normal(size=(rows, 2)).astype(np.float32).tolist(), pa.list_(pa.float32(), 2)
        ),
        "id": pa.array(rng.integers(-1, 6, rows)),
    }
    table = pa.table(columns)
    paths = {"parquet": tmp_path / "wide.parquet", "arrow": tmp_path / "wide.arrow"}
    pq.write_table(table, paths["parquet"], row_group_size=8)
    with pa.ipc.new_file(str(paths["arrow"]), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=10):
            writer.write_batch(batch)
    paths["csv"] = tmp_path / "wide.csv"
    pacsv.write_csv(table.drop_columns(["v"]), paths["csv"])
    return paths


def npz_arrays(path: Path) -> dict[str, bytes]:
    with np.load(path) as got:
        return {name: got[name].tobytes() for name in got.files}


def test_several_columns_give_each_columns_single_op_bytes(wide, tmp_path):
    out = tmp_path / "all.npz"
    result = run("agg", wide["parquet"], *SEVERAL, "--op", SEVERAL_OPS, "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    got = npz_arrays(out)
    for column in ("a", "b", "v"):
        for name in SEVERAL_OPS.split(","):
            single = tmp_path / "single.npy"
            args = (wide["parquet"], "--data-column", column, "--ids-column", "id", "-q")
            assert run(name, *args, "-o", single).exit_code == 0
            assert got[f"{column}_{name}"] == np.load(single).tobytes(), (column, name)


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "csv"])
@pytest.mark.parametrize("chunk", [1, 4, 9])
def test_several_columns_stream_with_the_in_memory_bytes(wide, tmp_path, fmt, chunk):
    columns = ("--data-column", "a,b", "--ids-column", "id") if fmt == "csv" else SEVERAL
    whole, streamed = tmp_path / "whole.npz", tmp_path / "streamed.npz"
    args = (wide[fmt], *columns, "--op", SEVERAL_OPS, "-q")
    assert run("agg", *args, "-o", whole).exit_code == 0
    result = run("agg", *args, "-o", streamed, "--chunk-rows", chunk)
    assert result.exit_code == 0, result.stderr
    assert npz_arrays(streamed) == npz_arrays(whole)


@pytest.mark.parametrize("chunk", [None, 5])
def test_several_columns_read_the_table_once(wide, tmp_path, monkeypatch, chunk):
    from segcli.io import column_set, tables

    reads: list[str] = []
    for owner, name in ((tables.TableFile, "read"), (column_set.TableBatches, "_open")):
        original = getattr(owner, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    out = tmp_path / "out.csv"
    result = run("agg", wide["parquet"], *SEVERAL, "--op", "mean,var", "-o", out, *chunking)
    assert result.exit_code == 0, result.stderr
    assert reads == (["read"] if chunk is None else ["_open"])


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
def test_several_columns_from_a_pipe_that_can_be_read_once(wide, tmp_path):
    fifo = fifo_fed_with(tmp_path, wide["parquet"].read_bytes())
    args = (*SEVERAL, "--op", "sum,argmax", "-q")
    from_pipe = run("agg", fifo, *args)
    assert from_pipe.exit_code == 0, from_pipe.stderr
    assert from_pipe.stdout == run("agg", wide["parquet"], *args).stdout


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
def test_a_pipe_without_a_suffix_is_read_once_by_a_single_op(wide, tmp_path):
    """The does-it-fit check must not open the pipe itself: it took the sniffed bytes' place,
    and then waited for a writer that had gone (the run hung)."""
    import subprocess
    import sys

    fifo = fifo_fed_with(tmp_path, wide["parquet"].read_bytes())
    column = SEVERAL[1].split(",")[0]
    args = ["sum", "--data-column", column, "--ids-column", "id", "-q"]
    ran = subprocess.run(
        [sys.executable, "-m", "segcli", args[0], str(fifo), *args[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == run(args[0], wide["parquet"], *args[1:]).stdout


@pytest.mark.parametrize("kind", ["arrow stream", "parquet"])
def test_several_columns_from_stdin(wide, kind):
    args = (*SEVERAL, "--op", "min,last,count", "-q")
    if kind == "parquet":  # read whole
        payload = wide["parquet"].read_bytes()
    else:  # streamed: one pass of the stream for every column and the ids
        table = pq.read_table(wide["parquet"])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=7):
                writer.write_batch(batch)
        payload = sink.getvalue().to_pybytes()
    from_stdin = run("agg", "-", *args, input=payload)
    assert from_stdin.exit_code == 0, from_stdin.stderr
    assert from_stdin.stdout == run("agg", wide["parquet"], *args).stdout


@pytest.mark.parametrize("chunk", [None, 2])
@pytest.mark.parametrize(
    ("columns", "message", "code"),
    [
        ("a,s", "column 's' has type string, not a numeric type", 1),
        ("a,n", "column 'n' has 1 null (first at row 2)", 1),
        ("a,zz", "no column 'zz'", 2),
    ],
)
def test_several_columns_name_the_bad_one(tmp_path, chunk, columns, message, code):
    path = tmp_path / "t.parquet"
    table = {
        "a": [1.0, 2.0, 3.0, 4.0],
        "n": [1.0, 2.0, None, 4.0],
        "s": ["w", "x", "y", "z"],
        "id": [0, 1, 1, 0],
    }
    pq.write_table(pa.table(table), path)
    out = tmp_path / "out.csv"
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    args = ("--data-column", columns, "--ids-column", "id", "--op", "sum", *chunking)
    result = run("agg", path, *args, "-o", out)
    assert result.exit_code == code
    assert message in result.stderr and error_lines(result) == 1
    assert not out.exists()


def test_several_columns_of_an_array_file_are_a_usage_error(pair, tmp_path):
    result = run("agg", *pair, "--data-column", "a,b", "--op", "sum")
    assert result.exit_code == 2
    assert "--data-column applies only to table files" in result.stderr


def test_check_takes_joint_ops_in_its_list(tmp_path):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.ones(3, np.complex64))
    np.save(ids, np.zeros(3, np.int64))
    assert run("check", data, ids, "--op", "sum,first,last", "-q").exit_code == 0
    refused = run("check", data, ids, "--op", "sum,var,argmax", "-q")
    assert refused.exit_code == 1 and "not supported by var" in refused.stderr
    assert error_lines(refused) == 1


def test_expect_compares_several_columns_streamed(wide, tmp_path):
    golden = tmp_path / "golden.npz"
    args = (wide["parquet"], *SEVERAL, "--op", "var,argmax,logsumexp", "-q")
    assert run("agg", *args, "-o", golden).exit_code == 0
    out = tmp_path / "out.csv"
    passed = run("agg", *args, "--expect", golden, "--chunk-rows", 4, "-o", out)
    assert passed.exit_code == 0, passed.stderr
    with np.load(golden) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["b_argmax"] = arrays["b_argmax"] + 1
    np.savez(golden, **arrays)
    out.unlink()
    failed = run("agg", *args, "--expect", golden, "--chunk-rows", 4, "-o", out)
    assert failed.exit_code == 4 and "column b_argmax" in failed.stderr
    assert error_lines(failed) == 1 and not out.exists()


@pytest.mark.parametrize("chunk", [None, 1, 6])
def test_by_with_several_columns_reads_them_with_the_keys_once(keyed, tmp_path, monkeypatch, chunk):
    calls: list[str] = []
    for name in ("read", "iter_batches"):
        original = getattr(pq.ParquetFile, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(pq.ParquetFile, name, counted)
    chunking = [] if chunk is None else ["--chunk-rows", chunk]
    args = ("--data-column", "delay,seats", "--by", "carrier", "--op", "std,argmin,last", "-q")
    out = tmp_path / "out.npz"
    keys = ("--keys-out", tmp_path / "keys.csv")
    result = run("agg", keyed, *args, "-o", out, *keys, *chunking)
    assert result.exit_code == 0, result.stderr
    # In memory one read of every column; streamed one stream of the data columns beside the
    # key columns' own, as a one-column run streams its data and keys.
    assert calls == (["read"] if chunk is None else ["iter_batches", "iter_batches"])
    monkeypatch.undo()
    got = npz_arrays(out)
    for column in ("delay", "seats"):
        for name in ("std", "argmin", "last"):
            single = tmp_path / "single.npy"
            one = ("--data-column", column, "--by", "carrier", "-q", "-o", single)
            assert run(name, keyed, *one, "--keys-out", tmp_path / "k.csv").exit_code == 0
            assert got[f"{column}_{name}"] == np.load(single).tobytes(), (column, name)


@pytest.mark.dask
def test_dask_with_several_columns_gives_each_columns_dask_bytes(scheduler, wide, tmp_path):
    dask = ("--engine", "dask", "--scheduler", scheduler, "--chunk-rows", 10, "-q")
    args = ("--ids-column", "id", "--op", "sum,std,argmax", *dask)
    out = tmp_path / "all.npz"
    result = run("agg", wide["parquet"], "--data-column", "a,b", *args, "-o", out)
    assert result.exit_code == 0, result.stderr
    got = npz_arrays(out)
    for column in ("a", "b"):
        one = tmp_path / f"{column}.npz"
        assert run("agg", wide["parquet"], "--data-column", column, *args, "-o", one).exit_code == 0
        for name, values in npz_arrays(one).items():
            if name != "counts":
                assert got[f"{column}_{name}"] == values, (column, name)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
@pytest.mark.parametrize("source", ["stdin", "pipe"])
def test_several_columns_with_a_sorting_op_from_a_pipe_are_a_usage_error(wide, tmp_path, source):
    """The sorting ops read DATA once per column: a second read of a pipe found nothing (stdin,
    a misleading format error) or waited for a writer that had gone (a named pipe hung)."""
    import subprocess
    import sys

    out = tmp_path / "o.csv"
    payload = wide["parquet"].read_bytes()
    data = "-" if source == "stdin" else str(fifo_fed_with(tmp_path, payload))
    args = ["agg", data, *SEVERAL, "--op", "sum,median", "-o", str(out)]
    # A process with a timeout: the hang, were it back, fails the test instead of the suite.
    ran = subprocess.run(
        [sys.executable, "-m", "segcli", *args],
        input=payload if source == "stdin" else None,
        capture_output=True,
        timeout=60,
    )
    stderr = ran.stderr.decode()
    assert ran.returncode == 2, stderr
    assert stderr.count("Error:") == 1 and "Traceback" not in stderr
    assert "several --data-column with median, quantile or nunique" in stderr
    assert not out.exists()


def test_several_columns_from_stdin_on_dask_are_a_usage_error(wide, tmp_path):
    args = ("agg", "-", *SEVERAL, "--op", "sum", "--engine", "dask", "-o", tmp_path / "o.csv")
    result = run(*args, input=wide["parquet"].read_bytes())
    assert result.exit_code == 2
    assert "several --data-column on Dask" in result.stderr and error_lines(result) == 1
    assert not (tmp_path / "o.csv").exists()


GATHER_OPS = ("sum", "mean", "std", "argmax", "first", "count", "sqrt_n", "max")


@pytest.mark.parametrize("skipna", [False, True], ids=["plain", "skipna"])
@pytest.mark.parametrize(
    "extra", [(), ("--engine", "numba"), ("--chunk-rows", "13")], ids=["numpy", "numba", "stream"]
)
def test_gathered_rows_give_each_single_ops_bytes(tmp_path, extra, skipna):
    """agg --indices folds every op over the gathered rows at once (the fused numba gather of
    a single sum or mean gives the same bytes)."""
    rng = np.random.default_rng(5)
    data = rng.normal(size=(30, 2)).astype(np.float32)  # the gather kernels tests compile
    data[rng.random(data.shape) < 0.2] = np.nan
    np.save(tmp_path / "d.npy", data)
    np.save(tmp_path / "s.npy", np.sort(rng.integers(0, 8, 200)))
    np.save(tmp_path / "i.npy", rng.integers(0, 30, 200))
    common = [tmp_path / "d.npy", tmp_path / "s.npy", "--indices", tmp_path / "i.npy", "-n", 10]
    common += [*extra, *(["--skipna"] if skipna else []), "-q"]
    result = run("agg", *common, "--op", ",".join(GATHER_OPS), "-o", tmp_path / "a.npz")
    assert result.exit_code == 0, result.stderr
    columns = np.load(tmp_path / "a.npz")
    for op in GATHER_OPS:
        single = run(op, *common, "-o", tmp_path / "one.npy")
        assert single.exit_code == 0, single.stderr
        assert np.load(tmp_path / "one.npy").tobytes() == columns[op].tobytes(), op


def test_gathered_rows_refuse_the_sorting_ops(tmp_path):
    np.save(tmp_path / "d.npy", np.arange(4.0))
    np.save(tmp_path / "s.npy", np.array([0, 0, 1, 1]))
    args = [tmp_path / "d.npy", tmp_path / "s.npy", "--indices", tmp_path / "s.npy"]
    result = run("agg", *args, "--op", "sum,median", "-o", tmp_path / "a.npz")
    assert result.exit_code == 2
    assert error_lines(result) == 1 and "median" in result.stderr
    assert not (tmp_path / "a.npz").exists()


def test_summary_says_each_result_range_holds_the_fill_of_empty_segments(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.array([1.0, 2.0, 4.0]))
    np.save(tmp_path / "i.npy", np.array([0, 0, 2]))
    inputs = [str(tmp_path / "d.npy"), str(tmp_path / "i.npy")]
    out = str(tmp_path / "out.csv")
    result = CliRunner().invoke(cli, ["agg", *inputs, "--op", "sum,min", "-o", out])
    assert result.exit_code == 0, result.stderr
    note = "(the fill of 1 empty segment included)"
    assert f"  result sum      range [0, 4], 0 NaN {note}\n" in result.stderr
    assert f"  result min      range [1, 1.79769e+308], 0 NaN {note}\n" in result.stderr


def test_summary_says_the_rows_column_holds_no_fill(tmp_path: Path) -> None:
    """Under --skipna the ``rows`` column counts each segment's rows, an empty one's 0
    included: no fill. The count op's column takes --fill (7 here) as every op's does."""
    np.save(tmp_path / "d.npy", np.array([1.0, np.nan, 4.0]))
    np.save(tmp_path / "i.npy", np.array([0, 0, 2]))
    inputs = [str(tmp_path / "d.npy"), str(tmp_path / "i.npy")]
    out = str(tmp_path / "out.csv")
    args = ["agg", *inputs, "--op", "sum,count", "--skipna", "--fill", "7", "-o", out]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.stderr
    note = "(the fill of 1 empty segment and any all-skipped segment included)"
    assert f"  result count    range [1, 7], 0 NaN {note}\n" in result.stderr
    assert "  result rows     range [0, 2], 0 NaN\n" in result.stderr


def test_summary_json_of_infinite_columns_is_written_with_inf_strings(tmp_path: Path) -> None:
    """An infinite column range crashed the JSON (no inf in JSON) and the run wrote nothing."""
    np.save(tmp_path / "d.npy", np.array([np.inf, -np.inf, np.nan]))
    np.save(tmp_path / "i.npy", np.array([0, 1, 2]))
    inputs = [str(tmp_path / "d.npy"), str(tmp_path / "i.npy")]
    out, facts = tmp_path / "out.csv", tmp_path / "s.json"
    args = ["agg", *inputs, "--op", "sum,max", "-o", str(out), "--summary-json", str(facts), "-q"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == "" and out.exists()
    columns = json.loads(facts.read_text())["results"]
    assert [(c["result_min"], c["result_max"], c["nan_count"]) for c in columns] == [
        ("-inf", "inf", 1),
        ("-inf", "inf", 1),
    ]


def test_summary_names_the_ops_asked_and_every_data_column(tmp_path: Path) -> None:
    """``op`` is the ops (not the result columns, nor the ``rows`` count column); ``data``
    names every column read, not only the first."""
    path = tmp_path / "t.parquet"
    table = {"a": [1.0, 2.0], "b": pa.array([4, 5], pa.int32()), "id": [0, 1]}
    pq.write_table(pa.table(table), path)
    facts = tmp_path / "s.json"
    args = ["agg", str(path), "--data-column", "a,b", "--ids-column", "id", "--skipna"]
    args += ["--op", "sum,count", "-o", str(tmp_path / "o.csv"), "--summary-json", str(facts)]
    result = CliRunner().invoke(cli, [*args, "--no-progress"])
    assert result.exit_code == 0, result.stderr
    assert f"  data            {path}:a, {path}:b  (2,) float64,int32\n" in result.stderr
    assert "  op              sum,count (unsorted)\n" in result.stderr
    summary = json.loads(facts.read_text())
    assert summary["op"] == "sum,count"
    assert summary["data"]["label"] == f"{path}:a, {path}:b"
    assert summary["data"]["dtype"] == "float64,int32" and summary["data"]["bytes"] == 16 + 8
    names = [column["name"] for column in summary["results"]]
    assert names == ["a_sum", "a_count", "b_sum", "b_count", "rows"]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_complex_result_columns_are_written_as_pairs_and_read_back_as_a_golden(
    tmp_path: Path, suffix: str
) -> None:
    """Parquet and Arrow have no complex type: agg stores a complex column as (re, im) pairs,
    as the single-op command stores its value column, with the complex dtype in the field's
    metadata; --expect reads such a golden back as complex values."""
    data, ids = tmp_path / "c.npy", tmp_path / "i.npy"
    np.save(data, (np.arange(6) + 1j * np.arange(6)).astype(np.complex64))
    np.save(ids, np.array([0, 0, 1, 1, 2, 2]))
    out = tmp_path / f"out{suffix}"
    result = run("agg", data, ids, "--op", "sum,mean,first", "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    table = pq.read_table(out) if suffix == ".parquet" else pa.ipc.open_file(out).read_all()
    assert table.column_names == ["segment", "sum", "mean", "first", "count"]
    assert table.schema.field("sum").type == pa.list_(pa.float32(), 2)
    assert table.schema.field("sum").metadata == {b"segcli.dtype": b"complex64"}
    assert table.column("sum").to_pylist() == [[1, 1], [5, 5], [9, 9]]
    assert table.column("mean").to_pylist() == [[0.5, 0.5], [2.5, 2.5], [4.5, 4.5]]
    assert table.column("count").to_pylist() == [2, 2, 2]
    single = tmp_path / f"single{suffix}"
    assert run("sum", data, ids, "-o", single, "-q").exit_code == 0
    read = pq.read_table if suffix == ".parquet" else lambda p: pa.ipc.open_file(p).read_all()
    assert read(single).column("value").to_pylist() == table.column("sum").to_pylist()
    passed = run("agg", data, ids, "--op", "sum,mean,first", "--expect", out, "-q")
    assert passed.exit_code == 0, passed.stderr
    # A changed imaginary part fails the check, naming the column and the segment.
    pairs = table.column("sum").combine_chunks()
    changed = pa.FixedSizeListArray.from_arrays(pa.array([1, 1, 5, 6, 9, 9], pa.float32()), 2)
    assert changed.to_pylist() != pairs.to_pylist()
    table = table.set_column(1, table.schema.field("sum"), changed)
    golden = tmp_path / f"golden{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, golden)
    else:
        with pa.ipc.new_file(golden, table.schema) as writer:
            writer.write_table(table)
    failed = run("agg", data, ids, "--op", "sum,mean,first", "--expect", golden, "-q")
    assert failed.exit_code == 4, failed.stderr
    assert "column sum differs in 1 " in failed.stderr and "the first segment 1:" in failed.stderr


def test_a_golden_whose_pairs_are_no_complex_column_is_exit_3(tmp_path: Path) -> None:
    data, ids = tmp_path / "c.npy", tmp_path / "i.npy"
    np.save(data, np.array([1 + 2j, 3j]))
    np.save(ids, np.array([0, 1]))
    float_pairs = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2, 0, 3]), 2)
    integer_pairs = pa.FixedSizeListArray.from_arrays(pa.array([1, 2, 0, 3]), 2)
    for dtype, values in ((b"float64", float_pairs), (b"complex128", integer_pairs)):
        field = pa.field("sum", values.type, metadata={b"segcli.dtype": dtype})
        schema = pa.schema([pa.field("segment", pa.int64()), field, pa.field("count", pa.int64())])
        golden = tmp_path / "golden.parquet"
        pq.write_table(
            pa.table([pa.array([0, 1]), values, pa.array([1, 1])], schema=schema), golden
        )
        failed = run("agg", data, ids, "--op", "sum", "--expect", golden, "-q")
        assert failed.exit_code == 3, failed.stderr
        assert failed.stderr.startswith(f"Error: --expect {golden}: column 'sum' holds pairs that")
        assert error_lines(failed) == 1


def test_a_fill_one_column_cannot_hold_names_that_column(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "a": np.array([1.5, 2.5, 3.5], np.float32),
                "b": np.array([1, 2, 3], np.int8),
                "id": np.array([0, 0, 2]),
            }
        ),
        path,
    )
    out = tmp_path / "out.csv"
    args = ["agg", path, "--data-column", "a,b", "--ids-column", "id", "--op", "sum,max"]
    result = run(*args, "--fill", "300", "-o", out)
    assert result.exit_code == 2
    assert f"Error: {path}:b: --fill 300 cannot be stored in the int8 result of sum" in (
        result.output
    )
    assert not out.exists()
    assert run(*args, "--fill", "100", "-o", out).exit_code == 0


def test_npz_under_skipna_holds_the_count_op_and_the_rows_per_segment_once(tmp_path: Path) -> None:
    """Tables name the rows per segment ``rows`` beside the count op; an .npz holds them as
    ``counts``, as it does for every op, and not a second time."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([1.0, np.nan, 3.0, 4.0]))
    np.save(ids, np.array([0, 0, 1, 1]))
    out = tmp_path / "o.npz"
    result = run("agg", data, ids, "--op", "sum,count", "--skipna", "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    with np.load(out) as archive:
        assert sorted(archive.files) == ["count", "counts", "sum"]
        np.testing.assert_array_equal(archive["count"], [1, 2])
        np.testing.assert_array_equal(archive["counts"], [2, 2])
    checked = run("agg", data, ids, "--op", "sum,count", "--skipna", "--expect", out, "-q")
    assert checked.exit_code == 0, checked.stderr


def test_check_takes_the_runs_ddof_and_q_and_refuses_them_as_the_run_does(tmp_path: Path) -> None:
    """A CI line can copy the run's options: ``check --op quantile,std --q 0.9 --ddof 1``."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.arange(4.0))
    np.save(ids, np.array([0, 0, 1, 1]))
    ok = run("check", data, ids, "--op", "quantile,std", "--q", "0.9", "--ddof", "1", "-q")
    assert ok.exit_code == 0, ok.stderr
    for options, said in (
        (["--op", "sum", "--q", "0.9"], "--q applies to quantile only, not sum"),
        (["--op", "quantile", "--q", "1.5"], "--q 1.5 is outside [0, 1]"),
        (["--op", "sum", "--ddof", "1"], "--ddof applies to var and std only"),
        (["--op", "quantile"], "quantile needs --q"),
    ):
        refused = run("check", data, ids, *options, "-q")
        assert refused.exit_code == 2 and said in refused.stderr, refused.stderr
        # the run refuses the same options alike
        ran = run("agg", data, ids, *options, "-q")
        assert ran.exit_code == 2 and said in ran.stderr, ran.stderr


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum"]])
def test_a_golden_csv_that_is_not_utf8_names_its_line(pair, tmp_path, command):
    """A golden saved as Latin-1 (a spreadsheet's export, say) names the line and its bytes,
    not the decoder's byte position or pyarrow's "invalid UTF8 data"."""
    golden, out = tmp_path / "golden.csv", tmp_path / "out.npz"
    golden.write_bytes(b"segment,sum,note\n0,1.0,ok\n1,2.0,caf\xe9\n")
    failed = run(*command, *pair, "--expect", golden, "-o", out, "-q")
    assert failed.exit_code == 3, failed.stderr
    label = f"--expect {golden}" if command[0] == "agg" else str(golden)
    assert failed.stderr == (
        f"Error: {label}: line 3 holds b'1,2.0,caf\\xe9', which is not UTF-8; convert the file "
        "to UTF-8 (e.g. iconv -f latin1 -t utf-8)\n"
    )
    assert not out.exists()


def test_a_golden_that_fails_to_read_is_one_line(pair, tmp_path, monkeypatch):
    """A read that fails once the golden's format is known (an I/O error, say) is exit 3 in
    one line naming the golden, not an internal error."""
    from segcli import agg_expect

    golden = tmp_path / "golden.csv"
    assert run("agg", *pair, "--op", "sum", "-o", golden, "-q").exit_code == 0

    def failing_read(path: str) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(agg_expect, "pipe_bytes", failing_read)
    failed = run("agg", *pair, "--op", "sum", "--expect", golden, "-q")
    assert failed.exit_code == 3, failed.stderr
    assert (
        failed.stderr == f"Error: --expect {golden}: cannot read ([Errno 5] Input/output error)\n"
    )
