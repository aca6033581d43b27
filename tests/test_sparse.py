"""TF's sparse segment family and weights (``--indices``, ``--weights``) against plain loops."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.engines import Engine
from segcli.errors import InvalidInputError, UsageError
from segcli.sparse import Labeled, sparse_reduce
from tests.matrix import FULL_MATRIX, default_run
from tests.peak import run_measured

OPS = ("sum", "mean", "min", "max", "prod", "sqrt_n", "count")


def run(*args: Any):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


# --- the reference: plain loops --------------------------------------------------------------


def _reduce_rows(op: str, rows: list[np.ndarray], inner: tuple[int, ...], dtype: Any) -> Any:
    if op == "count":
        return len(rows)
    if not rows:
        empty = {"prod": 1, "min": _largest(dtype), "max": _lowest(dtype)}
        return np.full(inner, empty.get(op, 0), dtype=np.float64)
    stack = np.array(rows, dtype=np.float64)
    if op == "sum":
        return stack.sum(axis=0)
    if op == "prod":
        return stack.prod(axis=0)
    if op == "min":
        return stack.min(axis=0)
    if op == "max":
        return stack.max(axis=0)
    if op == "mean":
        return stack.sum(axis=0) / len(rows)
    return stack.sum(axis=0) / math.sqrt(len(rows))  # sqrt_n


def _largest(dtype: Any) -> Any:
    dtype = np.dtype(dtype)
    return np.finfo(dtype).max if dtype.kind == "f" else np.iinfo(dtype).max


def _lowest(dtype: Any) -> Any:
    dtype = np.dtype(dtype)
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def sparse_loop(data: np.ndarray, ids: np.ndarray, indices: np.ndarray, n: int, op: str) -> list:
    """``out[s] = reduce(data[indices[i]] for i with ids[i] == s)``, one segment at a time."""
    out = []
    for s in range(n):
        rows = [data[indices[i]] for i in range(len(ids)) if ids[i] == s]
        out.append(_reduce_rows(op, rows, data.shape[1:], data.dtype))
    return out


def weighted_loop(
    data: np.ndarray, ids: np.ndarray, indices: np.ndarray | None, w: np.ndarray, n: int, op: str
) -> np.ndarray:
    """TF's combiners: sum(w x), / sum(w) (mean), / sqrt(sum(w^2)) (sqrt_n); 0 when the
    divisor is 0 or the segment empty."""
    out = np.zeros((n, *data.shape[1:]))
    for s in range(n):
        total, wsum, wsq = np.zeros(data.shape[1:]), 0.0, 0.0
        for i in range(len(ids)):
            if ids[i] == s:
                row = data[indices[i]] if indices is not None else data[i]
                total = total + float(w[i]) * row.astype(np.float64)
                wsum += float(w[i])
                wsq += float(w[i]) ** 2
        divisor = {"sum": 1.0, "mean": wsum, "sqrt_n": math.sqrt(wsq)}[op]
        out[s] = total / divisor if divisor != 0 else 0
    return out


def _sparse(data, ids, n, op, indices=None, weights=None, **options):
    return sparse_reduce(
        Labeled(np.asarray(data), "data"),
        Labeled(np.asarray(ids), "ids"),
        n,
        op,
        indices=None if indices is None else Labeled(np.asarray(indices), "idx"),
        weights=None if weights is None else Labeled(np.asarray(weights), "w"),
        **options,
    )


@pytest.fixture
def case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A table of 7 rows x (2, 3), 12 indices in sorted segments with gaps and repeats."""
    rng = np.random.default_rng(16)
    data = rng.normal(size=(7, 2, 3)).astype(np.float32)
    ids = np.array([0, 0, 0, 2, 2, 3, 3, 3, 3, 5, 5, 5])
    indices = np.array([6, 0, 6, 1, 1, 2, 3, 4, 5, 0, 0, 6])
    return data, ids, indices


# --- every op with --indices -----------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_every_op_with_indices_matches_the_loop(case, op, engine):
    data, ids, indices = case
    got = _sparse(data, ids, 8, op, indices, engine=engine, block_rows=5).result
    expected = np.array(sparse_loop(data, ids, indices, 8, op))
    if op != "count":
        assert got.shape == (8, 2, 3)
        assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected.astype(got.dtype), rtol=1e-6)


def test_integer_data_keeps_its_dtype_and_empty_segments_fill(case):
    _, ids, indices = case
    ints = (case[0] * 10).astype(np.int16)
    got = _sparse(ints, ids, 7, "max", indices).result
    expected = np.array(sparse_loop(ints, ids, indices, 7, "max"))
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, expected.astype(np.int16))
    assert (got[6] == np.iinfo(np.int16).min).all()  # a trailing segment given by -n


def test_n_defaults_to_last_id_plus_one_and_zero_for_no_ids(case):
    data, ids, indices = case
    assert _sparse(data, ids, None, "sum", indices).result.shape[0] == 6
    empty = _sparse(data, np.zeros(0, np.int64), None, "mean", np.zeros(0, np.int64))
    assert empty.result.shape == (0, 2, 3)


def test_block_size_does_not_change_the_bytes(case):
    data, ids, indices = case
    whole = _sparse(data, ids, 6, "mean", indices, weights=np.arange(12.0)).result
    for block in (1, 2, 7):
        got = _sparse(data, ids, 6, "mean", indices, weights=np.arange(12.0), block_rows=block)
        assert got.result.tobytes() == whole.tobytes()


def test_numpy_engine_folds_each_gathered_block_into_its_bags_only(monkeypatch):
    """Each block of 10 rows holds 5 bags of 1,000: the NumPy engine folds into those 5
    (some of its folds cost O(n) a call, which made a million bags 6x slower)."""
    from segcli.engines.numpy_engine import ENGINE

    seen: list[int] = []
    fold_block = ENGINE.fold_block

    def spy(state, data, ids, **options):
        seen.append(state.num_segments)
        fold_block(state, data, ids, **options)

    monkeypatch.setattr(ENGINE, "fold_block", spy)
    rng = np.random.default_rng(3)
    data = rng.normal(size=(50, 4))
    ids, indices = np.repeat(np.arange(1000), 2), rng.integers(0, 50, 2000)
    w = rng.normal(size=2000)
    got = _sparse(data, ids, None, "mean", indices, w, engine="numpy", block_rows=10).result
    assert max(seen) == 5
    np.testing.assert_allclose(got, weighted_loop(data, ids, indices, w, 1000, "mean"))


class CupyOrchestrationOnCpu(Engine):
    """The CuPy engine's fold on NumPy arrays, with NumPy stand-ins for its CUDA kernels (as
    tests/test_gpu.py checks it on machines without a GPU)."""

    name = "cupy-on-cpu"

    def fold_block(self, state, data, ids, *, sorted_ids, first_row):
        from segcli.engines.cupy_fold import FoldOptions, fold_block
        from tests.test_gpu import NumpyKernels

        fold_block(
            state,
            data,
            ids,
            sorted_ids=sorted_ids,
            kernels=NumpyKernels(),
            xp=np,
            options=FoldOptions(),
            first_row=first_row,
        )


@pytest.mark.parametrize("op", OPS)
def test_cupy_fold_on_the_cpu_gives_the_numpy_bytes(case, op):
    data, ids, indices = case
    weights = np.linspace(-1.0, 2.0, 12) if op in ("sum", "mean", "sqrt_n") else None
    want = _sparse(data, ids, 7, op, indices, weights, engine="numpy", block_rows=5)
    got = _sparse(data, ids, 7, op, indices, weights, engine=CupyOrchestrationOnCpu(), block_rows=5)
    assert got.result.tobytes() == want.result.tobytes()


# --- weights ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
def test_weighted_combiners_with_zero_divisors(case, op, engine):
    data, ids, indices = case
    # Segment 0: weights cancel (sum(w) = 0); segment 2: all zero (sum(w^2) = 0).
    w = np.array([1.0, -2.0, 1.0, 0.0, 0.0, 0.5, 2.0, 1.0, 3.0, 1.0, 1.0, 1.0])
    got = _sparse(data, ids, 7, op, indices, weights=w, engine=engine, block_rows=4).result
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, weighted_loop(data, ids, indices, w, 7, op), rtol=1e-6)
    if op == "mean":
        assert (got[0] == 0).all()
    if op != "sum":
        assert (got[2] == 0).all()


@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
def test_weighted_integer_data_gives_float64(case, op):
    _, ids, indices = case
    ints = np.arange(7 * 2, dtype=np.int8).reshape(7, 2)
    w = np.arange(12, dtype=np.int32) - 3
    got = _sparse(ints, ids, 6, op, indices, weights=w).result
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, weighted_loop(ints, ids, indices, w, 6, op))


def test_weights_without_indices_follow_the_unsorted_family():
    data = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    ids = np.array([2, -1, 0, 2])  # -1 drops its row, as in the unsorted family
    w = np.array([0.5, 9.0, 2.0, 1.5])
    got = _sparse(data, ids, 3, "mean", weights=w).result
    expected = weighted_loop(data, ids, None, w, 3, "mean")
    np.testing.assert_allclose(got, expected)
    np.testing.assert_allclose(got[2], [(0.5 * 1 + 1.5 * 7) / 2, (0.5 * 2 + 1.5 * 8) / 2])


def test_weights_under_sorted_drop_ids_beyond_n_and_fill_empty():
    data = np.array([[1.0], [2.0], [4.0], [8.0]], np.float32)
    ids = np.array([0, 0, 2, 3])  # n = 3: the row of id 3 is dropped, as --sorted drops it
    w = np.array([1.0, 3.0, 2.0, 5.0])
    got = _sparse(data, ids, 3, "mean", weights=w, sorted_ids=True, fill="-1")
    np.testing.assert_array_equal(got.result, np.array([[7 / 4], [-1], [4]], np.float32))
    assert got.id_report.dropped_beyond == 1


def test_weights_shaped_like_the_ids():
    data = np.arange(12.0).reshape(2, 3, 2)
    ids = np.array([[0, 1, 0], [1, 1, 0]])
    w = np.arange(6.0).reshape(2, 3)
    got = _sparse(data, ids, 2, "sum", weights=w).result
    flat = data.reshape(6, 2)
    expected = weighted_loop(flat, ids.reshape(-1), None, w.reshape(-1), 2, "sum")
    np.testing.assert_allclose(got, expected)


# --- the numba engine's fused gather ----------------------------------------------------------


def _no_blocked_fold(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the blocked fold (a float64 n x inner state) was used")


@pytest.fixture
def fused_case() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """40 bags (a long one, gaps, a trailing run) over a table with a NaN and -0.0 rows, and
    weights that cancel in one bag (sum(w) = 0) and are all zero in another."""
    rng = np.random.default_rng(7)
    data = rng.normal(size=(30, 3, 2)).astype(np.float32)  # with float64 weights: a common pair
    data[4] = np.nan
    data[5] = -0.0
    ids = np.sort(np.concatenate([rng.integers(0, 40, 150), np.full(60, 17), [0, 0, 1, 1]]))
    indices = rng.integers(0, 30, ids.size)
    indices[:2], indices[2:4] = 5, 5  # bags 0 and 1 only -0.0 rows: sums of -0.0 give +0.0
    weights = rng.normal(size=ids.size)
    weights[:2] = [1.5, -1.5]
    weights[2:4] = 0.0
    return data, ids, indices, weights


def _fused_pairs() -> list[Any]:
    """(dtype, weights) of the fused gather's test; each pair compiles kernels of its own:
    the default run folds float32 tables, unweighted and with float64 weights; float64,
    integer and int16 tables are in the full matrix (``SEGCLI_FULL_MATRIX=1``)."""
    pairs = [pytest.param(dtype, weights, id=f"{dtype}-{weights}") for dtype, weights in (
        ("float32", None), ("float32", "float64"),
    )]  # fmt: skip
    if FULL_MATRIX:
        pairs += [
            pytest.param(dtype, weights, id=f"{dtype}-{weights}", marks=pytest.mark.full_matrix)
            for dtype, weights in (
                ("float64", None), ("uint8", "int64"), ("float64", "int32"), ("int16", "float32")
            )
        ]  # fmt: skip
    return pairs


@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
@pytest.mark.parametrize(("dtype", "weights"), _fused_pairs())
@pytest.mark.parametrize("block_rows", [None, 1, 3, 64])
def test_numba_fuses_the_gather_with_the_numpy_bytes(
    fused_case, monkeypatch, op, dtype, weights, block_rows
):
    data, ids, indices, w = fused_case
    if dtype[0] in "iu":
        data = np.nan_to_num(data * 10).astype(dtype)
    data = data.astype(dtype)
    w = None if weights is None else (w * 3).astype(weights)
    want = _sparse(data, ids, 45, op, indices, w, engine="numpy", fill="7")
    monkeypatch.setattr("segcli.sparse.SparseFold", _no_blocked_fold)
    got = _sparse(data, ids, 45, op, indices, w, engine="numba", fill="7", block_rows=block_rows)
    assert (got.result.dtype, got.result.shape) == (want.result.dtype, want.result.shape)
    assert got.result.tobytes() == want.result.tobytes()
    assert got.counts.tobytes() == want.counts.tobytes()
    assert (got.result[40:] == 7).all()


@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
def test_numba_fused_gather_of_one_dimensional_data(fused_case, op):
    data, ids, indices, w = fused_case
    flat = np.ascontiguousarray(data[:, 0, 0]).astype(np.float32)
    for weights in (None, w):
        want = _sparse(flat, ids, None, op, indices, weights, engine="numpy").result
        got = _sparse(flat, ids, None, op, indices, weights, engine="numba").result
        assert got.shape == (40,)
        assert got.tobytes() == want.tobytes()


def test_numba_fused_gather_gives_the_same_bytes_on_any_number_of_threads(fused_case, monkeypatch):
    from segcli.engines import numba_engine

    data, ids, indices, w = fused_case
    want = _sparse(data, ids, None, "mean", indices, w, engine="numpy").result
    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    for threads in (2, 3, 7):
        monkeypatch.setattr(numba_engine, "THREADS", threads)
        for rows in (None, 50):
            got = _sparse(data, ids, None, "mean", indices, w, engine="numba", block_rows=rows)
            assert got.result.tobytes() == want.tobytes()


@pytest.fixture
def wide_case() -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """Bags of 1 row to more than ``RUN_ROWS`` (the register fold's pieces) over 50 table rows,
    ids up to 29 of n = 32 (trailing empty bags)."""
    rng = np.random.default_rng(11)
    ids = np.sort(np.concatenate([rng.integers(0, 30, 300), np.full(150, 12), [29]]))
    return ids, rng.integers(0, 50, ids.size), rng


def _wide_table(rng: np.random.Generator, width: int, dtype: str) -> np.ndarray:
    """Values of many magnitudes (their float64 sums round in the last bits), NaN and -0.0."""
    data = rng.normal(size=(50, width)) * 10.0 ** rng.integers(-3, 8, (50, width))
    data[3], data[4] = np.nan, -0.0
    return data.astype(dtype)


#: The weighted pair the register fold's test takes in the default run, at one width (the
#: kernels of the weighted combiners' and the fused gather's tests); float32 weights, float64
#: and int16 tables are the full matrix's.
COMMON_WEIGHTED = {("float32", "float64")}


def _wide_cases() -> list[Any]:
    """(dtype, weights, width, index dtype) of the register fold's test. Each pair and index
    dtype compiles kernels of its own (a few seconds each on a cold cache): the default run
    folds unweighted float32 tables, the common case, at every width, and the pairs of
    :data:`COMMON_WEIGHTED` at one width, with int64 indices; with ``SEGCLI_FULL_MATRIX=1``
    every pair at every width with every index dtype (``-m full_matrix``), narrow (uint16)
    ones included: their kernels alone took 5 s of a cold default run."""
    cases = []
    for dtype, weights in [
        ("float32", None), ("float64", None), ("float32", "float64"), ("float32", "float32"),
        ("float64", "int32"), ("int16", "float64"),
    ]:  # fmt: skip
        for width in (8, 13, 64, 75, 136):
            for index_dtype in ("int64", "int32", "uint16"):
                case = f"{dtype}-{weights}-{width}-{index_dtype}"
                plain = (dtype, weights) == ("float32", None)
                common_pair = plain or (width == 13 and (dtype, weights) in COMMON_WEIGHTED)
                if common_pair and index_dtype == "int64":
                    cases.append(pytest.param(dtype, weights, width, index_dtype, id=case))
                elif FULL_MATRIX:
                    cases.append(
                        pytest.param(
                            dtype, weights, width, index_dtype, id=case,
                            marks=pytest.mark.full_matrix,
                        )
                    )  # fmt: skip
    return cases


@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
@pytest.mark.parametrize(("dtype", "weights", "width", "index_dtype"), _wide_cases())
def test_numba_register_fold_of_wide_rows_gives_the_numpy_bytes(
    wide_case, monkeypatch, op, dtype, weights, width, index_dtype
):
    """Rows of 8 columns or more fold in registers (64 and 8 at a time, then one by one)."""
    from segcli.engines import numba_engine

    ids, indices, rng = wide_case
    data = _wide_table(rng, width, "float64" if dtype == "int16" else dtype)
    if dtype == "int16":
        data = np.clip(np.nan_to_num(data), -3e4, 3e4).astype(dtype)
    w = None if weights is None else (rng.normal(size=ids.size) * 5).astype(weights)
    want = _sparse(data, ids, 32, op, indices, w, engine="numpy").result
    monkeypatch.setattr("segcli.sparse.SparseFold", _no_blocked_fold)
    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    picks = indices.astype(index_dtype)
    for threads, rows in ((1, None), (1, 7), (3, None), (3, 40)):
        monkeypatch.setattr(numba_engine, "THREADS", threads)
        got = _sparse(data, ids, 32, op, picks, w, engine="numba", block_rows=rows).result
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("width", [8, 64])
def test_numba_weighted_fold_gives_numpys_bytes_for_nans_of_either_sign(width):
    """A bag whose sum is already NaN meets a NaN of the other sign: whichever the add keeps
    (a fused multiply-add may keep the other), the result says NaN as NumPy's ``nan``."""
    pytest.importorskip("numba")
    data = np.zeros((4, width), np.float32)
    data[1] = np.nan
    data[2] = -np.abs(np.float32(np.nan))
    data[3, 3] = np.nan
    ids, indices = np.array([0, 0, 1, 1, 1, 2]), np.array([1, 2, 2, 1, 0, 3])
    w = np.array([0.5, 2.0, 1.5, -1.0, 3.0, 1.0])  # float64: COMMON_WEIGHTED's kernels
    for op in ("sum", "mean", "sqrt_n"):
        want = _sparse(data, ids, None, op, indices, w, engine="numpy").result
        got = _sparse(data, ids, None, op, indices, w, engine="numba").result
        assert np.isnan(want[:2, 0]).all() and not np.signbit(want[:2, 0]).any()
        assert got.tobytes() == want.tobytes(), op


# Each layout compiles the gather again: Fortran order (a layout of its own) is the full matrix's.
@default_run(lambda layout: layout == "every other column")
@pytest.mark.parametrize("layout", ["fortran", "every other column"])
def test_numba_fused_gather_of_strided_rows_gives_the_numpy_bytes(wide_case, layout):
    """Rows whose values are not contiguous fold a row at a time, with the same bytes."""
    ids, indices, rng = wide_case
    wide = _wide_table(rng, 80, "float32")
    data = np.asfortranarray(wide[:, :40]) if layout == "fortran" else wide[:, ::2]
    assert not data.flags.c_contiguous
    for op, w in (("sum", None), ("mean", None), ("mean", rng.normal(size=ids.size))):
        want = _sparse(data, ids, None, op, indices, w, engine="numpy").result
        got = _sparse(data, ids, None, op, indices, w, engine="numba").result
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("op", ["sum", "sqrt_n"])
def test_numba_streamed_gather_matches_the_numpy_engine_in_memory(files, tmp_path, op):
    """Bags cross block boundaries (5 rows a block) and n grows as ids arrive."""
    outs = []
    for extra in (["--engine", "numpy"], ["--engine", "numba", "--chunk-rows", "5"]):
        out = tmp_path / f"out{len(extra)}.npy"
        args = ["--indices", files["idx"], "--weights", files["w"], *extra, "-o", out]
        result = run(op, files["data"], files["ids"], *args, "--summary-json", "-")
        assert result.exit_code == 0, result.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


@pytest.mark.full_matrix  # a peak-memory run of seconds: CI's second line
def test_numba_fused_gather_keeps_no_float64_state(tmp_path):
    """200k bags x 64 float32: the blocked fold held a float64 sum (2x the output) and a
    float64 quotient (2x more); the fused fold holds the output alone."""
    rng = np.random.default_rng(1)
    bags, width = 200_000, 64
    np.save(tmp_path / "table.npy", rng.random((1000, width), dtype=np.float32))
    np.save(tmp_path / "bags.npy", np.repeat(np.arange(bags), 2))
    np.save(tmp_path / "idx.npy", rng.integers(0, 1000, 2 * bags))
    np.save(tmp_path / "one.npy", np.zeros(1, np.int64))
    common = ["--engine", "numba", "-q", "-o", tmp_path / "out.npy"]
    one = tmp_path / "one.npy"
    baseline = run_measured("mean", tmp_path / "table.npy", one, "--indices", one, *common)
    measured = run_measured(
        "mean", tmp_path / "table.npy", tmp_path / "bags.npy", "--indices", tmp_path / "idx.npy",
        *common,
    )  # fmt: skip
    assert baseline.returncode == 0 and measured.returncode == 0, measured.stderr
    output = bags * width * 4
    inputs = 2 * (2 * bags * 8)
    assert measured.peak_bytes - baseline.peak_bytes < output + inputs + output // 2


@pytest.mark.full_matrix  # a peak-memory run of seconds: CI's second line
def test_numba_streamed_gather_grows_its_output_in_place(tmp_path):
    """410k bags found block by block (n not given): the output grows as ids arrive. Grown
    by copying into a doubled array, the old output sat beside the new one (2x the output);
    resized in place by quarters it stays under 1.5x (plus the summary's NaN mask)."""
    rng = np.random.default_rng(2)
    bags, width = 410_000, 64
    np.save(tmp_path / "table.npy", rng.random((1000, width), dtype=np.float32))
    np.save(tmp_path / "bags.npy", np.arange(bags))
    np.save(tmp_path / "idx.npy", rng.integers(0, 1000, bags))
    np.save(tmp_path / "one.npy", np.zeros(1, np.int64))
    common = ["--chunk-rows", "50000", "--engine", "numba", "-q", "-o", tmp_path / "out.npy"]
    one = tmp_path / "one.npy"
    for _ in range(2):  # the first may compile the kernels (and hold the compiler's memory)
        baseline = run_measured("mean", tmp_path / "table.npy", one, "--indices", one, *common)
    measured = run_measured(
        "mean", tmp_path / "table.npy", tmp_path / "bags.npy", "--indices", tmp_path / "idx.npy",
        *common,
    )  # fmt: skip
    assert baseline.returncode == 0 and measured.returncode == 0, measured.stderr
    output = bags * width * 4
    assert measured.peak_bytes - baseline.peak_bytes < 1.75 * output
    assert np.load(tmp_path / "out.npy").shape == (bags, width)


def _tensorflow() -> Any:
    """TensorFlow, quiet, or a clean skip where it is not installed (it is an optional check,
    never a dependency)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


TF_SPARSE = {"sum": "segment_sum", "mean": "segment_mean", "sqrt_n": "segment_sqrt_n"}


@pytest.mark.parametrize("op", TF_SPARSE)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("n", [None, 6, 9])
@pytest.mark.parametrize("engine_name", ["numpy", "numba"])
def test_tensorflow_agrees_where_installed(case, op, dtype, n, engine_name):
    """tf.sparse.segment_{sum,mean,sqrt_n}, with and without num_segments (empty and trailing
    segments give 0; n defaults to the last id + 1). TF's mean and sqrt_n refuse integer data;
    segcli's integer sum keeps the dtype, as TF's does."""
    tf = _tensorflow()
    data, ids, indices = case
    data = (data * 10).astype(dtype)
    if dtype == "int32" and op != "sum":
        with pytest.raises(tf.errors.InvalidArgumentError):
            getattr(tf.sparse, TF_SPARSE[op])(data, indices, ids, num_segments=n)
        return
    expected = getattr(tf.sparse, TF_SPARSE[op])(data, indices, ids, num_segments=n).numpy()
    got = _sparse(data, ids, n, op, indices, engine=engine_name).result
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-6 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
@pytest.mark.parametrize("engine_name", ["numpy", "numba"])
def test_tensorflow_embedding_lookup_sparse_agrees_where_installed(case, op, engine_name):
    """embedding_lookup_sparse's combiners (sqrtn is segcli's sqrt_n): bag 0's weights cancel
    and bag 2's are all zero (TF's div_no_nan gives 0), bag 1 and 4 are empty."""
    tf = _tensorflow()
    data, ids, indices = case
    w = np.array([1.0, -2.0, 1.0, 0.0, 0.0, 0.5, 2.0, 1.0, 3.0, 1.0, 1.0, 1.0], np.float32)
    positions = np.concatenate([np.arange(np.count_nonzero(ids == s)) for s in np.unique(ids)])
    where = np.stack([ids, positions], axis=1)
    shape = [int(ids[-1]) + 1, int(positions.max()) + 1]
    sp_ids = tf.sparse.SparseTensor(where, indices, shape)
    sp_weights = tf.sparse.SparseTensor(where, w, shape)
    combiner = "sqrtn" if op == "sqrt_n" else op
    expected = tf.nn.embedding_lookup_sparse(data, sp_ids, sp_weights, combiner=combiner).numpy()
    got = _sparse(data, ids, None, op, indices, weights=w, engine=engine_name).result
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("ids", "indices", "n", "tf_message"),
    [
        ([0, 2, 1], [0, 1, 2], None, "segment ids are not increasing"),
        ([-1, 0, 0], [0, 1, 2], None, "Segment id -1 out of range"),
        ([0, 0, 5], [0, 1, 2], 3, "segment ids must be < num_segments"),
        ([0, 0, 1], [0, 7, 2], None, "indices[1] == 7 out of range [0, 3)"),
        ([0, 0, 1], [0, -1, 2], None, "indices[1] == -1 out of range [0, 3)"),
        ([0, 0, 1], [0, 1], None, "segment_ids and indices should have same size"),
    ],
)
def test_tensorflow_refuses_what_segcli_refuses_where_installed(ids, indices, n, tf_message):
    tf = _tensorflow()
    data = np.ones((3, 2), np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(tf_message)):
        tf.sparse.segment_sum(data, indices, ids, num_segments=n)
    with pytest.raises(InvalidInputError):
        _sparse(data, ids, n, "sum", indices)


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "n", "message"),
    [
        ([0, 2, 1], None, "ids: segment_ids[2] = 1 < segment_ids[1] = 2: --indices needs"),
        ([-1, 0, -1], None, "ids: segment_ids[0] = -1 is negative"),
        ([0, 3, 5], 3, "ids: segment_ids[1] = 3 is out of range [0, 3) (2 ids out of range)"),
    ],
)
def test_bad_ids_name_the_first_offender(ids, n, message, engine):
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        _sparse(np.ones((3, 2), np.float32), ids, n, "sum", [0, 1, 2], engine=engine)


def test_index_out_of_range_names_first_and_count(engine):
    with pytest.raises(InvalidInputError) as raised:
        _sparse(
            np.ones((3, 2), np.float32), [0, 0, 1, 1], None, "sum", [1, 3, -1, 7], engine=engine
        )
    expected = "idx: indices[1] = 3 is out of range [0, 3) (3 indices out of range)"
    assert str(raised.value) == expected


@pytest.mark.parametrize(
    ("ids", "indices", "n"),
    [
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, 3, 4, 5], None),  # clean
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, 3, 4, 5], 4),  # clean
        ([-1, 1, 1, 2, 2, 3], [0, 1, 2, 3, 4, 5], None),
        ([0, 1, 2, 1, 2, 3], [0, 1, 2, 3, 4, 5], None),  # a decrease where the threads split
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, 3, 4, 5], 3),
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, 6, 4, 5], None),
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, -3, 4, 5], None),
        (np.array([0, 1, 1, 2, 2, 2**64 - 1], np.uint64), [0, 1, 2, 3, 4, 5], None),
        ([0, 1, 1, 2, 2, 3], np.array([0, 1, 2, 3, 4, 2**63], np.uint64), None),
    ],
)
def test_numba_gather_scan_passes_only_clean_inputs(monkeypatch, ids, indices, n):
    """The numba engine's one-pass check, on one thread and on two (split after row 3): it
    calls clean what the NumPy checker lets through, except values beyond int64, which it
    leaves to that checker."""
    from segcli.engines import numba_engine
    from segcli.engines.numba_sparse import gather_is_clean
    from segcli.sparse import SparseChecker

    ids, indices = np.asarray(ids), np.asarray(indices)
    checker = SparseChecker(n, 6, "ids", "idx")
    checker.feed(ids, indices)
    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    for threads in (1, 2):
        monkeypatch.setattr(numba_engine, "THREADS", threads)
        fits = max(int(ids.max()), int(indices.max())) < 2**63
        assert gather_is_clean(ids, indices, n, 6) is (fits and not checker.failed)


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize(
    ("ids", "indices", "n"),
    [
        ([-1, 1, 1, 2, 2, 3], [0, 1, 2, 3, 4, 5], None),
        ([0, 1, 2, 1, 2, 3], [0, 1, 2, 3, 4, 5], None),  # a decrease where the threads split
        ([0, 1, 1, 2, 2, 1], [0, 1, 2, 3, 4, 5], None),  # the last id decreases: n too small
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, 3, 4, 5], 3),
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, 6, 4, 5], None),
        ([0, 1, 1, 2, 2, 3], [0, 1, 2, 3, 4, -3], None),  # in the last bag
        ([0, 1, 1, 2, 2, 3], [7, 1, 2, 3, 4, 5], None),  # in the first row
        ([3, 1, 1, 2, 2, 2**40], [0, 1, 2, 3, 4, 5], None),  # n from the last id: too large
        (np.array([0, 1, 1, 2, 2**63, 2**64 - 1], np.uint64), [0, 1, 2, 3, 4, 5], None),
        ([0, 1, 1, 2, 2, 3], np.array([0, 1, 2, 3, 4, 2**63], np.uint64), None),
    ],
)
def test_numba_fused_fold_checks_the_rows_it_reads(monkeypatch, op, ids, indices, n):
    """The fused fold checks ids and indices as it reads them, with no pass before it: a
    broken rule, found mid-fold on one thread or two, is the NumPy engine's error."""
    from segcli.engines import numba_engine

    def no_scan(*args: Any) -> bool:
        raise AssertionError("a pass over the ids and indices ran before the fused fold")

    data = np.arange(12, dtype=np.float32).reshape(6, 2)  # the kernels other tests compile
    with pytest.raises(InvalidInputError) as want:
        _sparse(data, ids, n, op, indices, engine="numpy")
    monkeypatch.setattr("segcli.engines.numba_sparse.gather_is_clean", no_scan)
    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    for threads in (1, 2):
        monkeypatch.setattr(numba_engine, "THREADS", threads)
        with pytest.raises(InvalidInputError) as got:
            _sparse(data, ids, n, op, indices, engine="numba")
        assert str(got.value) == str(want.value)


def test_numba_gather_reads_uint64_ids_and_indices_with_the_int64_kernels():
    """uint64 values are read as int64 (the same bits; beyond int64 is negative, so refused):
    a gather of uint64 ids and indices gives the int64 bytes and compiles nothing for uint64."""
    pytest.importorskip("numba")
    from segcli.engines import numba_sparse

    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids, indices = np.array([0, 1, 1, 3]), np.array([5, 0, 2, 2])
    want = _sparse(data, ids, None, "sum", indices, engine="numba").result
    ids64, indices64 = ids.astype(np.uint64), indices.astype(np.uint64)
    got = _sparse(data, ids64, None, "sum", indices64, engine="numba").result
    assert got.tobytes() == want.tobytes()
    compiled = [str(arg) for sig in numba_sparse.fold_bags.signatures for arg in sig]
    assert compiled and not any("uint64" in arg for arg in compiled)


def test_numba_fused_fold_names_a_broken_id_before_bad_weights():
    """Rules are still reported in the order a user would fix them: a broken id before the
    weights' shape, as the NumPy engine does, though the fused fold checks ids last."""
    for engine in ("numpy", "numba"):
        with pytest.raises(InvalidInputError, match=r"segment_ids\[2\] = 1 < segment_ids"):
            _sparse(np.ones((3, 2)), [0, 2, 1], None, "mean", [0, 1, 2], [1.0, 2.0], engine=engine)


def test_cli_numba_gather_error_found_mid_fold_writes_nothing(files, tmp_path):
    out = tmp_path / "out.npy"
    bad = tmp_path / "bad.npy"
    indices = np.load(files["idx"])
    indices[[7, 10]] = [9, -1]
    np.save(bad, indices)
    result = run("sum", files["data"], files["ids"], "--indices", bad, "--engine", "numba",
                 "-o", out, "-q")  # fmt: skip
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: {bad}: indices[7] = 9 is out of range [0, 7) (2 indices out of range)"
    ]
    assert not out.exists()


@pytest.mark.parametrize("streamed", [False, True])
def test_numba_mapped_output_gives_the_numpy_bytes(fused_case, monkeypatch, tmp_path, streamed):
    """A large output is a mapping of its own (no NumPy huge-page request): the same bytes,
    in memory and streamed (where it grows as ids arrive, from a mapped start with -n)."""
    from segcli.engines import numba_sparse

    data, ids, indices, w = fused_case
    want = _sparse(data, ids, 45, "mean", indices, w, engine="numpy").result
    monkeypatch.setattr(numba_sparse, "MAPPED_OUTPUT_BYTES", 1)
    if not streamed:
        got = _sparse(data, ids, 45, "mean", indices, w, engine="numba").result
        assert not got.flags.owndata
        assert got.tobytes() == want.tobytes()
        return
    bags = numba_sparse.BagFold(data.reshape(30, 6), "mean", 1, data.dtype, weighted=True)
    assert not bags.out.flags.owndata
    for part in np.array_split(np.arange(ids.size), 4):
        bags.grow(int(ids[part[-1]]) + 1)
        assert bags.fold(ids[part], indices[part], w[part])
    bags.grow(45)
    got, _ = bags.result(45, None)
    assert got.reshape(want.shape).tobytes() == want.tobytes()


def test_a_refused_output_mapping_is_out_of_memory_not_an_internal_error(
    fused_case, monkeypatch, tmp_path
):
    from segcli.engines import numba_sparse

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(12, "Cannot allocate memory")

    data, ids, indices, _ = fused_case
    for name, array in (("d", data), ("i", ids), ("x", indices)):
        np.save(tmp_path / f"{name}.npy", array)
    monkeypatch.setattr(numba_sparse, "MAPPED_OUTPUT_BYTES", 1)
    monkeypatch.setattr(numba_sparse.mmap, "mmap", refuse)
    out = tmp_path / "out.npy"
    result = run("mean", tmp_path / "d.npy", tmp_path / "i.npy", "--indices", tmp_path / "x.npy",
                 "--engine", "numba", "-o", out)  # fmt: skip
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and "out of memory" in result.stderr
    assert not out.exists()


def test_float_indices_are_refused_not_truncated():
    with pytest.raises(InvalidInputError, match="indices must be integers, got float64"):
        _sparse(np.ones((3, 2)), [0, 1], None, "sum", [0.0, 1.0])


def test_length_mismatch_names_both_lengths():
    with pytest.raises(InvalidInputError) as raised:
        _sparse(np.ones((3, 2)), [0, 1, 1], None, "sum", [0, 1])
    assert str(raised.value) == "idx: 2 indices for 3 segment ids in ids (one index per id)"
    with pytest.raises(
        InvalidInputError,
        match=r"3 weights \(shape \(3,\)\) for 2 indices: need one weight per index",
    ):
        _sparse(np.ones((3, 2)), [0, 1], None, "sum", [0, 1], weights=[1.0, 2.0, 3.0])


@pytest.mark.parametrize("op", ["min", "max", "prod", "count"])
def test_weights_with_other_ops_are_a_usage_error(op):
    with pytest.raises(UsageError, match=f"--weights applies to sum, mean, sqrt_n only, not {op}"):
        _sparse(np.ones((3, 2)), [0, 1], None, op, [0, 1], weights=[1.0, 2.0])


# --- the command line ------------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path, case) -> dict[str, Path]:
    data, ids, indices = case
    paths = {name: tmp_path / f"{name}.npy" for name in ("data", "ids", "idx", "w", "fidx")}
    np.save(paths["data"], data)
    np.save(paths["ids"], ids)
    np.save(paths["idx"], indices)
    np.save(paths["w"], np.linspace(0.5, 2.0, 12))
    np.save(paths["fidx"], indices.astype(np.float64))
    return paths


def test_cli_gathers_and_writes(files, tmp_path):
    out = tmp_path / "out.npy"
    result = run("mean", files["data"], files["ids"], "--indices", files["idx"], "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    data, ids, indices = np.load(files["data"]), np.load(files["ids"]), np.load(files["idx"])
    np.testing.assert_allclose(np.load(out), sparse_loop(data, ids, indices, 6, "mean"), rtol=1e-6)


@pytest.mark.parametrize("streamed", [[], ["--chunk-rows", "4"]], ids=["memory", "stream"])
def test_summary_names_the_indices_and_weights_read(files, tmp_path, streamed):
    """A CI reader tells a gathered run from a plain one by the summary alone."""
    import json

    paths = [files["data"], files["ids"], "--indices", files["idx"], "--weights", files["w"]]
    result = run("mean", *paths, *streamed, "--summary-json", "-", "-o", tmp_path / "o.npy")
    assert result.exit_code == 0, result.stderr
    extra = json.loads(result.stderr)["extra"]
    assert (extra["indices"], extra["weights"]) == (str(files["idx"]), str(files["w"]))
    shown = run("mean", *paths, *streamed, "-o", tmp_path / "o.npy").stderr
    [mode] = [line for line in shown.splitlines() if line.lstrip().startswith("mode")]
    assert f"indices {files['idx']}" in mode and f"weights {files['w']}" in mode


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--indices", "fidx"], 1, "fidx.npy: indices must be integers, got float64"),
        (["--indices", "idx", "-n", "4"], 1, "segment_ids[9] = 5 is out of range [0, 4)"),
        (["--indices", "idx", "--weights", "w", "--op-is", "max"], 2, "--weights applies to"),
        (["--indices", "idx", "--engine", "dask"], 2, "dask: every partition would need all"),
        (["--weights", "w", "--engine", "dask"], 2, "dask: the Dask engine folds no weights"),
        (["--indices", "idx", "--memory-limit", "100B"], 2, "which must fit in memory"),
    ],
)
def test_cli_errors_are_one_line_and_write_nothing(files, tmp_path, extra, code, message):
    op = "max" if "--op-is" in extra else "sum"
    args = [files.get(a, a) for a in extra if a not in ("--op-is", "max")]
    out = tmp_path / "out.npy"
    result = run(op, files["data"], files["ids"], *args, "-o", out, "-q")
    assert result.exit_code == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("Error")] == [
        result.stderr.strip().splitlines()[-1]
    ]
    assert not out.exists()


def test_cli_refuses_indices_with_by(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"k": ["a", "b"], "v": [1.0, 2.0]}), tmp_path / "t.parquet")
    np.save(tmp_path / "idx.npy", np.array([0, 1]))
    args = ["--data-column", "v", "--by", "k", "--indices", tmp_path / "idx.npy", "-q"]
    result = run("sum", tmp_path / "t.parquet", *args)
    assert result.exit_code == 2
    assert "--indices/--weights cannot be used with --by" in result.stderr


def test_cli_table_columns(tmp_path, case):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    data, ids, indices = case
    w = np.linspace(-1.0, 1.0, 12)
    np.save(tmp_path / "vocab.npy", data)
    table = pa.table({"bag": ids, "token": indices, "weight": w})
    pq.write_table(table, tmp_path / "bags.parquet")
    out = tmp_path / "out.npy"
    result = run(
        "sqrt_n",
        tmp_path / "vocab.npy",
        tmp_path / "bags.parquet",
        "--ids-column",
        "bag",
        "--indices-column",
        "token",
        "--weights-column",
        "weight",
        "-o",
        out,
        "-q",
    )
    assert result.exit_code == 0, result.stderr
    expected = weighted_loop(data, ids, indices, w, 6, "sqrt_n")
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-6)


def _summary(stderr: str) -> dict[str, Any]:
    return dict(json.loads(stderr))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [[], ["-n", "9"]])
def test_streamed_ids_and_indices_give_the_in_memory_bytes(files, tmp_path, op, n):
    weights = ["--weights", files["w"]] if op in ("sum", "mean", "sqrt_n") else []
    outs, modes = [], []
    for extra in ([], ["--chunk-rows", "5"]):
        out = tmp_path / f"out{len(extra)}.npy"
        args = ["--indices", files["idx"], *weights, *n, *extra, "-o", out]
        result = run(op, files["data"], files["ids"], *args, "--summary-json", "-")
        assert result.exit_code == 0, result.stderr
        outs.append(out.read_bytes())
        modes.append(_summary(result.stderr)["mode"])
    assert modes == ["in-memory", "streaming"]
    assert outs[0] == outs[1]


def test_streamed_errors_match_in_memory(tmp_path):
    np.save(tmp_path / "data.npy", np.ones((4, 2), np.float32))
    cases = {
        "ids": np.array([0, 1, 1, 0, 2, -1, 5]),
        "idx": np.array([0, 9, 1, 2, 3, -2, 7]),
    }
    for name, array in cases.items():
        np.save(tmp_path / f"{name}.npy", array)
    args = [tmp_path / "data.npy", tmp_path / "ids.npy", "--indices", tmp_path / "idx.npy", "-q"]
    whole = run("sum", *args)
    for rows in ("1", "2", "3"):
        streamed = run("sum", *args, "--chunk-rows", rows)
        assert (streamed.exit_code, streamed.stderr) == (whole.exit_code, whole.stderr)
    assert whole.exit_code == 1
    assert whole.stderr == "Error: " + str(tmp_path / "ids.npy") + (
        ": segment_ids[5] = -1 is negative: --indices needs ids >= 0 (1 negative id)\n"
    )


def test_csv_lengths_found_at_the_end_name_both(tmp_path):
    np.save(tmp_path / "data.npy", np.ones((6, 2), np.float32))
    (tmp_path / "bags.csv").write_text("bag,token\n0,5\n0,0\n1,2\n3,2\n")
    (tmp_path / "short.csv").write_text("token\n5\n0\n2\n")
    args = [tmp_path / "data.npy", tmp_path / "bags.csv", "--ids-column", "bag"]
    args += ["--indices", tmp_path / "short.csv", "--indices-column", "token", "-q"]
    for extra in ([], ["--chunk-rows", "2"]):
        result = run("mean", *args, *extra, "-o", tmp_path / "out.npy")
        assert result.exit_code == 1
        assert result.stderr.endswith(
            "3 indices for 4 segment ids in "
            + str(tmp_path / "bags.csv")
            + ":bag (one index per id)\n"
        )
        assert not (tmp_path / "out.npy").exists()


@default_run(lambda blocks: bool(blocks))  # the streamed case
@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "4096"]], ids=["in-memory", "streamed"])
def test_gather_memory_is_bounded_by_the_block(tmp_path, blocks):
    """2M indices into a 100k x 16 float32 table: gathering them whole would take 128 MB."""
    rng = np.random.default_rng(0)
    rows, width, picks = 100_000, 16, 2_000_000
    np.save(tmp_path / "table.npy", rng.random((rows, width), dtype=np.float32))
    np.save(tmp_path / "bags.npy", np.repeat(np.arange(1000), picks // 1000))
    np.save(tmp_path / "idx.npy", rng.integers(0, rows, picks))
    np.save(tmp_path / "one.npy", np.zeros(1, np.int64))
    common = ["-q", "-o", tmp_path / "out.npy", "--memory-limit", "1GB"]
    baseline = run_measured(
        "mean", tmp_path / "table.npy", tmp_path / "one.npy", "--indices", tmp_path / "one.npy",
        *common,
    )  # fmt: skip
    measured = run_measured(
        "mean", tmp_path / "table.npy", tmp_path / "bags.npy", "--indices", tmp_path / "idx.npy",
        *blocks, *common,
    )  # fmt: skip
    assert baseline.returncode == 0 and measured.returncode == 0, measured.stderr
    gathered_whole = picks * width * 4
    # In memory the ids and indices (32 MB) are read whole; the gathered rows never are.
    assert measured.peak_bytes - baseline.peak_bytes < gathered_whole // 2


def test_the_indices_count_toward_the_choice_to_stream(tmp_path):
    """DATA and IDS fit the memory limit, the indices beside them do not: the run streams."""
    rng = np.random.default_rng(7)
    np.save(tmp_path / "vocab.npy", rng.random((1000, 4), dtype=np.float32))
    np.save(tmp_path / "idx.npy", rng.integers(0, 1000, 2_000_000))  # 16 MB
    np.save(tmp_path / "bags.npy", np.sort(rng.integers(0, 5000, 2_000_000)).astype(np.int16))
    facts = tmp_path / "s.json"
    args = [tmp_path / "vocab.npy", tmp_path / "bags.npy", "--indices", tmp_path / "idx.npy"]
    result = run(
        "sum",
        *args,
        "--memory-limit",
        "10MB",
        "-o",
        tmp_path / "a.npy",
        "-q",
        "--summary-json",
        facts,
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(facts.read_text())["mode"] == "streaming"
    whole = run("sum", *args, "--memory-limit", "1GB", "-o", tmp_path / "b.npy", "-q")
    assert whole.exit_code == 0, whole.stderr
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes()
