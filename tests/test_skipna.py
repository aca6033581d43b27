"""``--skipna``: NaN and null values left out element by element, on every path, against the
loop reference (``tests/reference.py``)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli import core, io, ops
from segcli.cli import cli
from segcli.drivers.stream import reduce_stream
from segcli.errors import InvalidInputError
from tests.conftest import ENGINES
from tests.entry import run_main
from tests.reference import reference_reduce_skipna

MERGEABLE = [
    "sum", "mean", "min", "max", "prod", "sqrt_n", "count", "var", "std",
    "argmin", "argmax", "first", "last", "any", "all", "logsumexp",
]  # fmt: skip
CPU_ENGINES = [p for p in ENGINES if p.id != "cupy"]


def run_cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def with_nans(dtype: Any, rows: int, inner: tuple[int, ...] = (), seed: int = 0) -> np.ndarray:
    """Values with about a third NaN, and a column of the first segment entirely NaN."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0, 3, (rows, *inner)).round(1).astype(dtype)
    values[rng.random(values.shape) < 0.35] = np.nan
    values[:3] = 0.5  # ties for argmin/argmax and first/last to get wrong
    return values


def masked_ints(dtype: Any, rows: int, inner: tuple[int, ...] = (), seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    values = rng.integers(-5, 6, (rows, *inner)).astype(dtype)
    return np.ma.MaskedArray(values, mask=rng.random(values.shape) < 0.35)


def ids_for(rows: int, n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1, n, rows)


def expected(data: Any, ids: np.ndarray, n: int, op: str, **kw: Any) -> np.ndarray:
    missing = np.ma.getmaskarray(data) if isinstance(data, np.ma.MaskedArray) else None
    return reference_reduce_skipna(np.ma.getdata(data), ids, n, op, missing=missing, **kw)


def assert_matches(got: np.ndarray, want: np.ndarray, op: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind in "fc" and op not in ("min", "max", "first", "last"):
        tight = got.dtype != np.float32
        np.testing.assert_allclose(
            got, want, rtol=1e-12 if tight else 1e-5, atol=1e-9 if tight else 1e-4
        )
    else:
        np.testing.assert_array_equal(got, want)


# --- every op against the reference ---------------------------------------------------------


@pytest.mark.parametrize("inner", [(), (3,)], ids=["1d", "inner3"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("op", MERGEABLE)
def test_every_op_matches_the_reference(op: str, dtype: str, inner: tuple[int, ...]) -> None:
    if np.dtype(dtype).kind == "f":
        data = with_nans(dtype, 60, inner)
    else:
        data = masked_ints(dtype, 60, inner)
    ids = ids_for(60, 7)
    got = core.reduce_arrays(data, ids, 8, op, skipna=True).result
    assert_matches(got, expected(data, ids, 8, op), op)


# numba's float64 case is the full matrix's (tests/matrix.py's numba rule reads ``dtype``).
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("engine", [p for p in CPU_ENGINES if p.id != "numpy"])
@pytest.mark.parametrize("op", MERGEABLE)
def test_other_engines_give_numpys_bytes(op: str, engine: str, dtype: str) -> None:
    """NaN in float rows, and masked int64 values (with the float32 case)."""
    ids = ids_for(500, 40, seed=4)
    masked = [masked_ints(np.int64, 500)] if dtype == "float32" else []
    for data in (with_nans(dtype, 500, (2,), seed=3), *masked):
        numpy = core.reduce_arrays(data, ids, 40, op, engine="numpy", skipna=True).result
        other = core.reduce_arrays(data, ids, 40, op, engine=engine, skipna=True).result
        assert numpy.tobytes() == other.tobytes()


# numba's sorted float64 kernels are the full matrix's (tests/matrix.py's numba rule).
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("engine", CPU_ENGINES)
@pytest.mark.parametrize("op", MERGEABLE)
def test_sorted_family(op: str, engine: str, dtype: str) -> None:
    """Rows dropped by id for a missing value must not break a sorted run's fold."""
    ids = np.sort(np.random.default_rng(3).integers(0, 9, 70))
    for data in (with_nans(dtype, 70, seed=2), with_nans(dtype, 70, (2,), seed=2)):
        got = core.reduce_arrays(data, ids, 8, op, sorted=True, engine=engine, skipna=True)
        assert_matches(got.result, expected(data, ids, 8, op), op)


@pytest.mark.parametrize("op", [op for op in MERGEABLE if ops.OPS[op].accepts_complex])
def test_complex_nan_is_missing(op: str) -> None:
    data = with_nans(np.float64, 50, (2,), seed=4) + 1j * with_nans(np.float64, 50, (2,), seed=5)
    ids = ids_for(50, 5)
    got = core.reduce_arrays(data, ids, 5, op, skipna=True).result
    assert_matches(got, expected(data, ids, 5, op), op)


def test_sorted_family_and_ddof() -> None:
    data = with_nans(np.float64, 40, (2,))
    ids = np.sort(np.random.default_rng(2).integers(0, 6, 40))
    var = ops.with_ddof("var", 1)
    got = core.reduce_arrays(data, ids, 5, var, sorted=True, skipna=True).result
    np.testing.assert_allclose(got, expected(data, ids, 5, "var", ddof=1), equal_nan=True)


def test_count_counts_present_values_element_by_element() -> None:
    data = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 4.0]])
    got = core.segment_reduce(data, [0, 0, 1], 3, "count", skipna=True)
    assert got.shape == (3, 2)
    np.testing.assert_array_equal(got, [[1, 0], [1, 1], [0, 0]])


def test_an_element_with_no_present_value_gets_the_fill() -> None:
    data = np.array([[np.nan, 1.0], [np.nan, 2.0]])
    reduction = core.reduce_arrays(data, [0, 0], 1, "mean", fill="-7", skipna=True)
    np.testing.assert_array_equal(reduction.result, [[-7.0, 1.5]])
    argmax = core.segment_reduce(data, [0, 0], 1, "argmax", skipna=True)
    np.testing.assert_array_equal(argmax, [[-1, 1]])


def test_without_skipna_nothing_changes() -> None:
    data = np.array([1.0, np.nan, 3.0])
    assert np.isnan(core.segment_reduce(data, [0, 0, 1], 2, "sum")[0])
    assert core.segment_reduce(data, [0, 0, 1], 2, "sum", skipna=True)[0] == 1.0


# --- streaming and Dask ----------------------------------------------------------------------


@pytest.mark.parametrize("op", MERGEABLE)
def test_streaming_gives_the_in_memory_bytes_for_every_block_size(
    op: str, tmp_path: Path, short_lanes: int
) -> None:
    data, ids = with_nans(np.float64, 90, (2,), seed=5), ids_for(90, 9, seed=6)
    np.save(tmp_path / "d.npy", data)
    np.save(tmp_path / "i.npy", ids)
    whole = core.reduce_arrays(data, ids, 9, op, skipna=True).result
    for rows in (1, 7, 32):
        reduction, _ = reduce_stream(
            io.open_chunked(str(tmp_path / "d.npy")),
            io.open_chunked(str(tmp_path / "i.npy"), role="ids"),
            9,
            ops.skipna_op(op),
            block_rows=rows,
        )
        assert reduction.result.tobytes() == whole.tobytes(), rows


@pytest.mark.parametrize("op", ["mean", "min", "argmin", "first", "last", "var", "logsumexp"])
def test_dask_partitions_merge_to_the_in_memory_result(op: str, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from segcli.drivers import dask as seg_dask
    from segcli.drivers.base import RunSpec
    from segcli.drivers.dask import tasks

    data, ids = with_nans(np.float64, 80, (2,), seed=7), ids_for(80, 6, seed=8)
    for k, (a, b) in enumerate(itertools.pairwise([0, 25, 26, 80])):
        np.save(tmp_path / f"d-{k}.npy", data[a:b])
        np.save(tmp_path / f"i-{k}.npy", ids[a:b])
    spec = RunSpec(op=op, data=str(tmp_path / "d-*.npy"), ids=str(tmp_path / "i-*.npy"))
    plan = seg_dask.plan_run(spec)
    job = tasks.Job(ops.skipna_op(op), 6, sorted_ids=False, elements=data.size)
    merged = tasks.combine_results(*(tasks.run_partition(p, job) for p in plan.partitions))
    assert merged.state is not None
    got = ops.finalize(merged.state)
    want = core.reduce_arrays(data, ids, 6, op, skipna=True).result
    np.testing.assert_allclose(got, want, rtol=1e-12)


# --- tables: nulls in values and in ids ------------------------------------------------------


@pytest.fixture
def table(tmp_path: Path) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "f": pa.array([1.5, None, float("nan"), 4.0, 5.0, None], pa.float32()),
                "i": pa.array([1, None, 3, 4, None, 6], pa.int64()),
                "id": pa.array([0, 0, 1, None, 1, 2], pa.int32()),
            }
        ),
        path,
    )
    return path


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]], ids=["memory", "stream"])
@pytest.mark.parametrize(
    ("column", "op", "want"),
    [
        ("f", "sum", [1.5, 5.0, 0.0]),
        ("f", "mean", [1.5, 5.0, 0.0]),
        ("i", "sum", [1, 3, 6]),
        ("i", "count", [1, 1, 1]),
        ("i", "min", [1, 3, 6]),
        ("i", "argmax", [0, 2, 5]),
        ("f", "median", [1.5, 5.0, 0.0]),
        ("f", "nunique", [1, 1, 0]),
        ("i", "median", [1.0, 3.0, 6.0]),
        ("i", "nunique", [1, 1, 1]),
    ],
)
def test_parquet_nulls_are_left_out(
    table: Path, column: str, op: str, want: list[Any], chunk: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out.npy"
    args = [op, str(table), "--data-column", column, "--ids-column", "id", "--skipna"]
    result = run_cli(*args, *chunk, "-o", str(out), "--summary-json", str(tmp_path / "s.json"))
    assert result.exit_code == 0, result.stderr
    np.testing.assert_array_equal(np.load(out), want)
    facts = json.loads((tmp_path / "s.json").read_text())
    skipped_values = 2 if column == "i" else 3  # among the rows used (row 3 has a null id)
    assert facts["skipped"] == {"values": skipped_values, "rows": 1}
    assert facts["rows_dropped_negative"] == 0 and facts["rows_used"] == 5


def test_nulls_without_skipna_stay_an_error(table: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.npy"
    result = run_cli("sum", str(table), "--data-column", "f", "--ids-column", "id", "-o", str(out))
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "null" in result.stderr
    assert not out.exists()


def test_summary_text_says_what_was_skipped(table: Path) -> None:
    result = run_cli("sum", str(table), "--data-column", "i", "--ids-column", "id", "--skipna")
    assert result.exit_code == 0, result.stderr
    assert "2 missing values (NaN or null), 1 row with a null id" in result.stderr
    plain = run_cli("sum", str(table), "--data-column", "f", "--ids-column", "f", "--skipna")
    assert plain.exit_code != 0  # float ids stay an error


def test_by_with_null_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    rows = 300
    carrier = rng.choice(["AA", "BB", "CC"], rows)
    origin = rng.choice(["X", "Y"], rows)
    values = rng.normal(size=rows)
    null = rng.random(rows) < 0.3
    path = tmp_path / "flights.parquet"
    pq.write_table(
        pa.table({"carrier": carrier, "origin": origin, "delay": pa.array(values, mask=null)}),
        path,
    )
    outs = []
    for extra in ([], ["--chunk-rows", "17"]):
        out = tmp_path / f"out{len(outs)}.parquet"
        result = run_cli(
            "mean", str(path), "--data-column", "delay", "--by", "carrier,origin", "--skipna",
            "-o", str(out), *extra,
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        outs.append(pq.read_table(out))
    assert outs[0].equals(outs[1])
    got = outs[0].to_pydict()
    for c, o, mean in zip(got["carrier"], got["origin"], got["value"], strict=True):
        pick = (carrier == c) & (origin == o) & ~null
        assert mean == pytest.approx(values[pick].mean(), rel=1e-12)


# --- agg, check, engines ---------------------------------------------------------------------


def test_agg_has_count_and_rows_columns(tmp_path: Path) -> None:
    data = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 4.0]])
    np.save(tmp_path / "d.npy", data)
    np.save(tmp_path / "i.npy", np.array([0, 0, 1]))
    out = tmp_path / "out.parquet"
    args = ["agg", str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), "--op", "sum,count"]
    result = run_cli(*args, "--skipna", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    got = pq.read_table(out)
    assert got.column_names == ["segment", "sum_0", "sum_1", "count_0", "count_1", "rows"]
    assert got.column("count_0").to_pylist() == [1, 1]
    assert got.column("count_1").to_pylist() == [0, 1]
    assert got.column("rows").to_pylist() == [2, 1]
    assert got.column("sum_0").to_pylist() == [1.0, 3.0]
    plain = run_cli(*args, "-o", str(tmp_path / "plain.parquet"))
    assert pq.read_table(tmp_path / "plain.parquet").column_names[-1] == "count"
    assert plain.exit_code == 0


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]])
def test_agg_count_alone_writes_npy_like_count(tmp_path: Path, chunk: list[str]) -> None:
    """``rows`` stands in for the trailing count column, which .npy never holds: one op is one
    result, so ``agg --op count --skipna`` writes the bytes of ``count --skipna``."""
    np.save(tmp_path / "d.npy", np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 4.0]]))
    np.save(tmp_path / "i.npy", np.array([0, 0, 1]))
    inputs = [str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), "--skipna", "-q", *chunk]
    agg, single = tmp_path / "agg.npy", tmp_path / "count.npy"
    result = run_cli("agg", *inputs, "--op", "count", "-o", str(agg))
    assert result.exit_code == 0, result.stderr
    assert run_cli("count", *inputs, "-o", str(single)).exit_code == 0
    assert agg.read_bytes() == single.read_bytes()
    np.testing.assert_array_equal(np.load(agg), [[1, 0], [1, 1]])


def test_check_accepts_null_values_under_skipna(table: Path) -> None:
    args = ["check", str(table), "--data-column", "i", "--ids-column", "id"]
    assert run_cli(*args).exit_code == 1
    result = run_cli(*args, "--skipna")
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]], ids=["memory", "stream"])
@pytest.mark.parametrize(
    ("column", "missing", "first"), [("f", 3, 1), ("i", 2, 1)], ids=["float", "int"]
)
def test_check_names_nulls_as_missing_values_under_skipna(
    table: Path, tmp_path: Path, chunk: list[str], column: str, missing: int, first: int
) -> None:
    """Not "NaN values": a float column's nulls read as NaN and are counted with them, an int
    column's are nulls alone; both are the run summary's "missing values (NaN or null)"."""
    args = ["check", str(table), "--data-column", column, "--ids-column", "id", "--skipna"]
    facts = tmp_path / "check.json"
    result = run_cli(*args, *chunk, "--summary-json", str(facts))
    assert result.exit_code == 0, result.stderr
    assert f"  missing values  {missing} (NaN or null)\n" in result.stderr
    assert "NaN values" not in result.stderr
    assert json.loads(facts.read_text())["missing_values"] == missing
    failed = run_cli(*args, *chunk, "--no-nan", "-q")
    assert failed.exit_code == 4
    assert failed.stderr == (
        f"Error: {table}:{column}: {missing} missing values (NaN or null) (--no-nan), "
        f"the first at [{first}]\n"
    )


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]], ids=["memory", "stream"])
def test_check_tells_null_ids_from_negative_ids_as_a_run_does(
    tmp_path: Path, chunk: list[str]
) -> None:
    """A null id's row is dropped like a negative id's, but counted apart, as in the run's
    summary: rows_dropped_negative is the same number in both JSONs."""
    path = tmp_path / "t.parquet"
    ids = pa.array([0, None, -1, 1, None, 1], pa.int32())
    pq.write_table(pa.table({"v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "id": ids}), path)
    inputs = [str(path), "--data-column", "v", "--ids-column", "id", "--skipna", *chunk]
    checked, ran = tmp_path / "check.json", tmp_path / "run.json"
    result = run_cli("check", *inputs, "--max-dropped", "2", "--summary-json", str(checked))
    assert result.exit_code == 4
    assert result.stderr.endswith(
        "more than --max-dropped 2 (1 with a negative id, 2 with a null id; first dropped: "
        "segment_ids[1] is null)\n"
    )
    assert "  dropped rows    3 (2 with a null id)\n" in result.stderr
    out = tmp_path / "out.npy"
    assert run_cli("sum", *inputs, "-o", str(out), "--summary-json", str(ran)).exit_code == 0
    check_facts, run_facts = json.loads(checked.read_text()), json.loads(ran.read_text())
    assert check_facts["rows_dropped_negative"] == run_facts["rows_dropped_negative"] == 1
    assert check_facts["rows_dropped_null_id"] == run_facts["skipped"]["rows"] == 2
    assert check_facts["rows_dropped"] == 3
    by_key = run_cli("check", *inputs[:3], "--by", "id", "--skipna", "--summary-json", "-")
    assert "rows_dropped_null_id" not in json.loads(by_key.stderr)  # no ids: missing keys


def test_check_without_skipna_still_counts_nan_values(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.array([1.0, np.nan, np.nan]))
    np.save(tmp_path / "i.npy", np.array([0, 0, 1]))
    facts = tmp_path / "check.json"
    args = ["check", str(tmp_path / "d.npy"), str(tmp_path / "i.npy")]
    result = run_cli(*args, "--summary-json", str(facts))
    assert result.exit_code == 0, result.stderr
    assert "  NaN values      2\n" in result.stderr and "missing" not in result.stderr
    assert "missing_values" not in json.loads(facts.read_text())


def test_cupy_refuses_skipna(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.array([1.0, np.nan]))
    np.save(tmp_path / "i.npy", np.array([0, 0]))
    out = tmp_path / "out.npy"
    result = run_main(
        "sum", str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), "--skipna",
        "--engine", "cupy", "-o", str(out),
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--skipna" in result.stderr
    assert not out.exists()


@pytest.mark.dask
def test_dask_run_skips_nulls_and_counts_null_ids(table: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    args = ["argmax", str(table), "--data-column", "i", "--ids-column", "id", "--skipna"]
    outs = []
    for engine in ("numpy", "dask"):
        out, summary = tmp_path / f"{engine}.npy", tmp_path / f"{engine}.json"
        result = run_cli(*args, "--engine", engine, "-o", str(out), "--summary-json", str(summary))
        assert result.exit_code == 0, result.stderr
        outs.append(np.load(out))
        assert json.loads(summary.read_text())["skipped"] == {"values": 2, "rows": 1}
    np.testing.assert_array_equal(outs[0], outs[1])


def gather_reference(op: str, data: np.ndarray, ids: np.ndarray, idx: np.ndarray, n: int) -> Any:
    """``op`` of ``data[idx]`` per segment, NaN left out element by element (a loop)."""
    out = np.full((n, data.shape[1]), -1 if op == "argmax" else 0.0)
    for s in range(n):
        rows = np.flatnonzero(ids == s)
        for j in range(data.shape[1]):
            values = data[idx[rows], j]
            present = ~np.isnan(values)
            if not present.any():
                continue
            if op == "argmax":
                out[s, j] = rows[np.nanargmax(values)]  # the row of the ids, not of DATA
            else:
                out[s, j] = {"sum": np.nansum, "mean": np.nanmean, "median": np.nanmedian}[op](
                    values
                )
    return out


@pytest.mark.parametrize("op", ["sum", "mean", "median", "argmax"])
def test_gathered_rows_leave_missing_values_out(op: str, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    data = rng.normal(size=(20, 3))
    data[rng.random(data.shape) < 0.3] = np.nan
    ids = np.sort(rng.integers(0, 9, 120))
    idx = rng.integers(0, 20, 120)
    for name, array in (("d", data), ("s", ids), ("i", idx)):
        np.save(tmp_path / f"{name}.npy", array)
    base = [op, str(tmp_path / "d.npy"), str(tmp_path / "s.npy"), "-n", "11", "--skipna"]
    base += ["--indices", str(tmp_path / "i.npy")]
    outs = []
    for k, extra in enumerate([[], ["--engine", "numba"], ["--chunk-rows", "17"]]):
        out = tmp_path / f"{k}.npy"
        result = run_main(*base, *extra, "-o", str(out), "-q")
        assert result.exit_code == 0, result.stderr
        outs.append(np.load(out))
    want = gather_reference(op, data, ids, idx, 11)
    np.testing.assert_allclose(outs[0], want, rtol=1e-12)
    for other in outs[1:]:  # the fused numba gather is passed over: the same bytes
        assert other.tobytes() == outs[0].tobytes()


def test_gathered_nulls_leave_values_out_and_refuse_null_indices(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table(
            {
                "x": pa.array([1.0, None, 3.0, 4.0], pa.float64()),
                "s": pa.array([0, 0, 1, 1], pa.int32()),
                "i": pa.array([1, 1, 0, None], pa.int32()),
            }
        ),
        path,
    )
    out = tmp_path / "out.npy"
    args = ["sum", str(path), "--data-column", "x", "--ids-column", "s", "--skipna"]
    args += ["--indices-column", "i", "-o", str(out), "-q"]
    result = run_main(*args)
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "has 1 null (first at row 3)" in result.stderr
    assert "(--skipna leaves out missing data values only)" in result.stderr
    assert not out.exists()
    pq.write_table(pa.table({"x": [1.0, None, 3.0], "s": [0, 0, 1], "i": [1, 0, 2]}), path)
    result = run_main(*args)
    assert result.exit_code == 0, result.stderr
    np.testing.assert_array_equal(np.load(out), [1.0, 3.0])  # row 1 of x is null: left out


def test_weighted_runs_refuse_skipna(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.array([1.0, np.nan]))
    np.save(tmp_path / "i.npy", np.array([0, 0]))
    result = run_main(
        "sum", str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), "--skipna",
        "--weights", str(tmp_path / "d.npy"),
    )  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--skipna" in result.stderr


@pytest.mark.parametrize("chunk", [[], ["--chunk-rows", "2"]], ids=["memory", "stream"])
def test_sorted_ids_refuse_a_null_as_a_negative(
    table: Path, chunk: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out.npy"
    args = ["sum", str(table), "--data-column", "f", "--ids-column", "id", "--skipna", "--sorted"]
    result = run_cli(*args, *chunk, "-o", str(out))
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "segment_ids[3] is null (1 null id); --sorted ids cannot be null" in result.stderr
    assert not out.exists()


def test_dask_partitions_refuse_a_sorted_null_id_as_one_machine_does(table: Path) -> None:
    pytest.importorskip("distributed")
    from segcli.drivers import dask as seg_dask
    from segcli.drivers.base import RunSpec
    from segcli.drivers.dask import tasks

    spec = RunSpec(op="sum", data=str(table), data_column="f", ids_column="id", sorted_ids=True)
    (part,) = seg_dask.plan_run(spec).partitions
    job = tasks.Job(ops.skipna_op("sum"), None, sorted_ids=True, elements=6)
    for task in (tasks.run_partition, tasks.read_partition_rows):
        with pytest.raises(InvalidInputError) as raised:
            task(part, job)
        assert str(raised.value) == (
            f"{table}:id: segment_ids[3] is null (1 null id); --sorted ids cannot be null, "
            "as they cannot be negative"
        )


def test_auto_passes_the_gpu_over(monkeypatch: pytest.MonkeyPatch) -> None:
    from segcli import engines
    from segcli.engines.base import Engine

    class FakeGpu(Engine):
        name = "cupy"

    real = engines.get_engine
    monkeypatch.setattr(engines, "get_engine", lambda n: FakeGpu() if n == "cupy" else real(n))
    assert engines.choose_engine("auto", elements=10**12).engine.name == "cupy"
    choice = engines.choose_engine("auto", elements=10**12, skipna=True)
    assert choice.engine.name != "cupy"
