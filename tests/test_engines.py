"""Every engine against the loop oracle, numba against NumPy bit for bit, and the fold contract.

The fold contract (``segcli.engines.base``): each segment's rows combine in global row order,
so folding a block in many pieces gives the same bytes as one fold, on every engine.

The numba engine compiles a kernel for every data dtype, accumulator dtype, ids dtype and
layout it meets, which is most of this file's time on a cold cache. The default run takes the
common dtypes through the unsorted layouts and :data:`SORTED_DTYPES` through the sorted ones;
the other pairs (marked ``full_matrix``) are collected only with ``SEGCLI_FULL_MATRIX=1``:
``SEGCLI_FULL_MATRIX=1 pytest tests/test_engines.py -m full_matrix``. The numba engine takes
float32 and int64 data in the default run (tests/matrix.py), NumPy every dtype.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import segcli
from segcli import ops
from segcli.engines import get_engine
from segcli.errors import EngineUnavailableError
from tests.engine_params import ENGINES
from tests.matrix import FULL_MATRIX, NUMBA_DATA_DTYPES, default_run, numba_takes
from tests.reference import reference_reduce

ROOT = Path(__file__).resolve().parent.parent
#: Every op of the table the engines fold, in its order (the seeds below use the index); the
#: holistic ops, which no engine folds, are tests/test_holistic*.py's.
OP_NAMES = [name for name, op in ops.OPS.items() if not op.holistic]
#: The ops whose float results depend on the order of the fold (they keep lanes).
ROUNDING_OPS = [
    name for name, op in ops.OPS.items() if any(i.fold.rounds for i in op.intermediates)
]
DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint64", "complex64"]
#: ids of shape (rows,) or (rows, 2), data with these inner dimensions, and the family.
LAYOUTS = {
    "1d": ((40,), (), False),
    "2d": ((40,), (3,), False),
    "nd_ids": ((8, 5), (2,), False),
    "sorted": ((40,), (), True),
    "sorted_2d": ((40,), (3,), True),
}
N = 6
#: Dtypes users rarely fold, whose kernels are the same code as a common dtype's (int8 as
#: int32, uint8 and uint64 as int64 with an unsigned accumulator).
RARE_DTYPES = ("int8", "uint8", "uint64")
#: Over sorted ids every op kind compiles a run fold per data dtype, the costliest compiles of
#: the suite: the default run keeps the dtypes users fold most (the rest in the full matrix).
SORTED_DTYPES = ("float32",)


def _in_default_run(dtype: str, layout: str) -> bool:
    # The rare dtypes' arithmetic (wrapping, unsigned fills) stays in the default run through
    # tests/test_spec.py on every engine; here they would only compile more kernels.
    if LAYOUTS[layout][2]:  # sorted ids
        return dtype in SORTED_DTYPES
    return dtype not in RARE_DTYPES


#: Dtypes whose bit-for-bit comparison runs in the full matrix only: each compiles a kernel
#: family per layout (about 5 s of a cold run each), from the same source as float32's
#: (float64, float16, complex64 fold in float64 or complex128 too) or int64's (int32 wraps in
#: its own width the same way); the default run checks them against the oracle on NumPy
#: (test_matches_reference) and against SPEC (tests/test_spec.py).
BIT_FOR_BIT_FULL_MATRIX_ONLY = ("float16", "float64", "int32", "complex64")


def dtype_layouts(*, full_matrix_only: tuple[str, ...] = ()) -> list[Any]:
    """Every dtype x layout pair of the default run, plus the full matrix's when asked for;
    ``full_matrix_only`` moves more dtypes out of the default run."""
    pairs = []
    for dtype in DTYPES:
        for layout in LAYOUTS:
            if _in_default_run(dtype, layout) and dtype not in full_matrix_only:
                pairs.append(pytest.param(dtype, layout, id=f"{dtype}-{layout}"))
            elif FULL_MATRIX:
                pairs.append(
                    pytest.param(
                        dtype, layout, id=f"{dtype}-{layout}", marks=pytest.mark.full_matrix
                    )
                )
    return pairs


def _numba_available() -> bool:
    try:
        get_engine("numba")
    except EngineUnavailableError:
        return False
    return True


needs_numba = pytest.mark.skipif(not _numba_available(), reason="numba is not installed")


def _supported(op: str, dtype: str) -> bool:
    return np.dtype(dtype).kind in ops.get_op(op).data_kinds


def make_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values that exercise each dtype: full-range integers (so sums and products wrap),
    small floats (so products stay finite) with repeated values and signed zeros."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if dt.kind == "c":
        return (rng.uniform(-2, 2, shape) + 1j * rng.uniform(-2, 2, shape)).astype(dt)
    values = rng.uniform(-2, 2, shape).round(1).astype(dt)
    values.flat[::7] = -0.0
    return values


def make_ids(
    rng: np.random.Generator, ids_shape: tuple[int, ...], n: int, sorted_ids: bool
) -> np.ndarray:
    """Unsorted ids include negatives (dropped); sorted ones include ids >= n (dropped).

    int64, NumPy's default and what ids files usually hold (so the rest of the suite reuses the
    kernels these tests compile); the other widths: ``test_numba_reads_ids_of_every_width``.
    """
    if sorted_ids:
        return np.sort(rng.integers(0, n + 2, ids_shape)).astype(np.int64)
    return rng.integers(-2, n, ids_shape).astype(np.int64)


def _exact(op: str, dtype: str) -> bool:
    """Whether the result is exact: no fold whose rounding depends on the order, and no
    arithmetic after the folds (the result is an intermediate, in the data's dtype)."""
    op_def, data_dtype = ops.get_op(op), np.dtype(dtype)
    if not op_def.intermediates:
        return True
    order_free = all(
        not i.fold.order_matters(i.acc_dtype(data_dtype)) for i in op_def.intermediates
    )
    return order_free and op_def.out_dtype(data_dtype) == data_dtype


def assert_matches_reference(got: np.ndarray, want: np.ndarray, op: str, dtype: str) -> None:
    """Integers, min, max and count exactly; float and complex arithmetic to within rounding."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    if _exact(op, dtype):
        np.testing.assert_array_equal(got, want)
        if op in ("min", "max") and got.dtype.kind == "f":  # which of 0.0 and -0.0, too
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    else:
        rtol = {np.float16: 2e-3, np.float32: 2e-6}.get(got.dtype.type, 1e-12)
        if got.dtype.kind == "c":
            rtol = 2e-6 if got.dtype == np.complex64 else 1e-12
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def fold_in_blocks(
    engine: str,
    data: np.ndarray,
    ids: np.ndarray,
    n: int,
    op: str,
    cuts: list[int],
    *,
    sorted_ids: bool,
) -> bytes:
    """Fold the rows in consecutive blocks ending at ``cuts``, as a streaming driver does."""
    impl = get_engine(engine)
    op_def = ops.get_op(op)
    rows = data.reshape(ids.size, -1)
    state = impl.new_state(op_def, n, data.shape[1:], data.dtype, sorted_ids=sorted_ids)
    start = 0
    for stop in [*cuts, ids.size]:
        impl.fold(state, rows[start:stop], ids[start:stop], sorted_ids=sorted_ids)
        start = stop
    return ops.finalize(state.to_host()).tobytes()


# --- every op x dtype x layout against the oracle ---------------------------------------------


# (and numba's other dtypes: the rule of tests/matrix.py)
@default_run(lambda engine, dtype, layout: engine != "numba" or dtype != "int64" or layout == "1d")
@pytest.mark.parametrize(("dtype", "layout"), dtype_layouts())
@pytest.mark.parametrize("op", OP_NAMES)
def test_matches_reference(engine: str, op: str, dtype: str, layout: str) -> None:
    if not _supported(op, dtype):
        pytest.skip("the op takes real data only")
    ids_shape, inner, sorted_ids = LAYOUTS[layout]
    rng = np.random.default_rng([OP_NAMES.index(op), DTYPES.index(dtype), len(layout)])
    data = make_data(rng, ids_shape + inner, dtype)
    ids = make_ids(rng, ids_shape, N, sorted_ids)
    got = segcli.segment_reduce(data, ids, N, op, sorted=sorted_ids, engine=engine)
    want = reference_reduce(data, ids, N, op, sorted_ids=sorted_ids)
    assert_matches_reference(got, want, op, dtype)


# --- numba is NumPy, bit for bit, on every code path ------------------------------------------


@pytest.fixture
def numba_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the numba engine take its threaded paths even on small inputs."""
    from segcli.engines import numba_engine

    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(numba_engine, "THREADS", 2)


@needs_numba
@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "threads"])
@default_run(lambda dtype, layout: dtype != "int64" or layout == "1d")  # int64 2-D: as float32's
@pytest.mark.parametrize(
    ("dtype", "layout"), dtype_layouts(full_matrix_only=BIT_FOR_BIT_FULL_MATRIX_ONLY)
)
@pytest.mark.parametrize("op", OP_NAMES)
def test_numba_equals_numpy_bit_for_bit(
    request: pytest.FixtureRequest, op: str, dtype: str, layout: str, parallel: bool
) -> None:
    if not _supported(op, dtype):
        pytest.skip("the op takes real data only")
    if parallel:
        request.getfixturevalue("numba_parallel")
    ids_shape, inner, sorted_ids = LAYOUTS[layout]
    scale = 25 if len(ids_shape) == 1 else 5  # enough rows per segment for every path
    ids_shape = (ids_shape[0] * scale, *ids_shape[1:])
    rng = np.random.default_rng([OP_NAMES.index(op), DTYPES.index(dtype), 7])
    data = make_data(rng, ids_shape + inner, dtype)
    if data.dtype.kind == "f" and op in ("min", "max"):
        data.flat[::11] = np.nan
    ids = make_ids(rng, ids_shape, N, sorted_ids)
    results = [
        segcli.reduce_arrays(data, ids, N, op, sorted=sorted_ids, engine=name)
        for name in ("numpy", "numba")
    ]
    assert results[0].result.dtype == results[1].result.dtype
    assert results[0].result.tobytes() == results[1].result.tobytes()
    assert results[0].counts.tobytes() == results[1].counts.tobytes()


#: Id widths read by every fold kernel in the default run; the others compile a kernel family
#: each for the same loops, and run in the full matrix.
COMMON_ID_WIDTHS = ("uint8", "int32")


def _id_widths() -> list[Any]:
    return [
        pytest.param(width)
        if width in COMMON_ID_WIDTHS
        else pytest.param(width, marks=pytest.mark.full_matrix)
        for width in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "uint64")
        if width in COMMON_ID_WIDTHS or FULL_MATRIX
    ]


@needs_numba
@pytest.mark.parametrize("ids_dtype", _id_widths())
@pytest.mark.parametrize("sorted_ids", [False, True])
def test_numba_reads_ids_of_every_width(ids_dtype: str, sorted_ids: bool) -> None:
    """int64 ids: every other test. Every op reads ids the same way, so one fold op (and
    count, which reads only ids) spares compiling each op's loops for each width."""
    rng = np.random.default_rng(3)
    data = rng.uniform(-1, 1, (500, 2)).astype(np.float32)
    low = 0 if sorted_ids or ids_dtype.startswith("u") else -2
    ids = rng.integers(low, 9 if sorted_ids else 7, 500).astype(ids_dtype)  # sorted: drop >= 7
    if sorted_ids:
        ids.sort()
    for op in ("sum", "count"):
        want = segcli.segment_reduce(data, ids, 7, op, sorted=sorted_ids, engine="numpy")
        got = segcli.segment_reduce(data, ids, 7, op, sorted=sorted_ids, engine="numba")
        assert got.tobytes() == want.tobytes()


@needs_numba
def test_numba_reads_non_native_byte_order_and_strided_data() -> None:
    rng = np.random.default_rng(4)
    data = rng.uniform(-1, 1, (300, 4)).astype(">f8")[:, ::2]
    ids = rng.integers(0, 5, 300).astype(">i8")
    want = segcli.segment_reduce(data.astype(np.float64), ids.astype(np.int64), 5, engine="numpy")
    got = segcli.segment_reduce(data, ids, 5, engine="numba")
    assert got.dtype == np.float64 and got.dtype.isnative
    assert got.tobytes() == want.tobytes()


#: Big-endian dtypes the compiled engine takes in the default run: the swap comes before any
#: engine, and these swap to dtypes whose kernels the default run compiles anyway (the others
#: would compile a kernel family each; they run in the full matrix).
COMMON_BIG_ENDIAN = (">f4", ">c8")


def _big_endian_cases() -> list[Any]:
    cases = []
    for engine in ENGINES:
        name = engine.values[0]
        for op in OP_NAMES:
            for dtype in (">f2", ">f4", ">i2", ">u8", ">c8"):
                if dtype == ">c8" and not ops.OPS[op].accepts_complex:
                    continue
                rare = name == "numba" and dtype not in COMMON_BIG_ENDIAN
                # numba's sorted complex kernels are the full matrix's too: a case of their own.
                split = name == "numba" and dtype == ">c8"
                runs = [(False,), (True,)] if split else [(False, True)]
                for sorted_runs in runs:
                    sorted_only = sorted_runs == (True,)
                    full = rare or sorted_only
                    if full and not FULL_MATRIX:
                        continue
                    marks = [*engine.marks, *([pytest.mark.full_matrix] if full else [])]
                    case = f"{name}-{op}-{dtype}" + ("-sorted" if sorted_only else "")
                    cases.append(pytest.param(name, op, dtype, sorted_runs, id=case, marks=marks))
    return cases


@pytest.mark.parametrize(("engine_name", "op", "dtype", "sorted_runs"), _big_endian_cases())
def test_big_endian_data_gives_the_native_result(
    engine_name: str, op: str, dtype: str, sorted_runs: tuple[bool, ...]
) -> None:
    # The file readers swap big-endian arrays once; library callers' arrays are swapped too,
    # so every engine and op gives the bytes and native dtype of the same values read from a file.
    data = np.array([[3, 1], [2, 5], [4, 4]], dtype=dtype)
    native = data.astype(data.dtype.newbyteorder("="))
    for sorted_ids in sorted_runs:
        want = segcli.segment_reduce(native, [0, 0, 2], 3, op, engine="numpy", sorted=sorted_ids)
        got = segcli.segment_reduce(data, [0, 0, 2], 3, op, engine=engine_name, sorted=sorted_ids)
        assert got.dtype == want.dtype and got.dtype.isnative
        assert got.tobytes() == want.tobytes()


# --- the fold contract: block splits do not change a byte -------------------------------------


@pytest.mark.parametrize("lanes", ["lanes of 65536 rows", "lanes of 5 rows"])
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "complex64"])
@pytest.mark.parametrize("op", OP_NAMES)
def test_block_split_gives_identical_bytes(
    request: pytest.FixtureRequest, engine: str, op: str, dtype: str, sorted_ids: bool, lanes: str
) -> None:
    if not _supported(op, dtype):
        pytest.skip("the op takes real data only")
    if lanes.endswith("5 rows"):
        request.getfixturevalue("short_lanes")
    rng = np.random.default_rng([OP_NAMES.index(op), DTYPES.index(dtype)])
    # Values of very different sizes, so that a reordered float sum would change its bits.
    data = make_data(rng, (60, 2), dtype)
    if data.dtype.kind in "fc":
        data = (data * rng.choice([1e-3, 1.0, 1e3], (60, 1))).astype(dtype)
    ids = make_ids(rng, (60,), 4, sorted_ids)
    whole = fold_in_blocks(engine, data, ids, 4, op, [], sorted_ids=sorted_ids)
    one_row_blocks = list(range(1, 60))
    uneven = sorted(rng.choice(np.arange(1, 60), 7, replace=False).tolist())
    for cuts in (one_row_blocks, uneven, [30]):
        assert fold_in_blocks(engine, data, ids, 4, op, cuts, sorted_ids=sorted_ids) == whole


@needs_numba
@pytest.mark.usefixtures("numba_parallel")
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("op", ["sum", "min", "prod", "count"])
def test_numba_threads_and_blocks_give_numpy_bytes(op: str, sorted_ids: bool) -> None:
    rng = np.random.default_rng(5)
    # float32, whose kernels the bit-for-bit tests compile (float64's: the full matrix there).
    data = (rng.standard_normal(4000) * rng.choice([1e-8, 1.0, 1e8], 4000)).astype(np.float32)
    ids = make_ids(rng, (4000,), 3, sorted_ids)
    want = fold_in_blocks("numpy", data, ids, 3, op, [], sorted_ids=sorted_ids)
    for cuts in ([], [1, 2, 1999, 3000], list(range(100, 4000, 100))):
        assert fold_in_blocks("numba", data, ids, 3, op, cuts, sorted_ids=sorted_ids) == want


@needs_numba
@pytest.mark.parametrize("short_run_rows", [0, 10**9], ids=["side-by-side", "one-by-one"])
@pytest.mark.parametrize("op", ["sum", "min", "max", "prod", "mean"])
def test_numba_sorted_runs_either_way_give_numpy_bytes(
    op: str, short_run_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sorted runs fold eight side by side or one after another (by their average length):
    both give the NumPy engine's bytes, over runs of 1 to 3,000 rows, NaN and block cuts."""
    from segcli.engines import numba_engine

    monkeypatch.setattr(numba_engine, "SHORT_RUN_ROWS", short_run_rows)
    rng = np.random.default_rng(11)
    lengths = rng.choice([1, 2, 7, 40, 3000], 60)
    ids = np.repeat(np.arange(0, 120, 2), lengths)  # every other segment empty
    data = rng.standard_normal(ids.size) * rng.choice([1e-8, 1.0, 1e8], ids.size)
    data = data.astype(np.float32)  # the sorted kernels the bit-for-bit tests compile
    data[rng.choice(ids.size, 5, replace=False)] = np.nan
    want = fold_in_blocks("numpy", data, ids, 121, op, [], sorted_ids=True)
    for cuts in ([], [1, 2, 500, 4001], list(range(997, ids.size, 997))):
        assert fold_in_blocks("numba", data, ids, 121, op, cuts, sorted_ids=True) == want


# --- lanes: float sums and products fold in two lanes of row runs ----------------------------


def lane_rule_sum(data: np.ndarray, ids: np.ndarray, n: int, lane_rows: int) -> np.ndarray:
    """The documented rule, written out: row r adds into lane (r // lane_rows) % 2 in row
    order, in float64; the result is lane 0 + lane 1."""
    lanes = [[0.0] * n, [0.0] * n]
    for row, (value, g) in enumerate(zip(data.tolist(), ids.tolist(), strict=True)):
        if 0 <= g < n:
            lane = lanes[(row // lane_rows) % 2]
            lane[g] = lane[g] + value
    return np.array([a + b for a, b in zip(*lanes, strict=True)])


def test_float_sums_follow_the_lane_rule(engine: str, short_lanes: int) -> None:
    # Rows 0-4 go to lane 0, 5-9 to lane 1, ...: 1e16 swallows the ones that share its lane.
    data = np.array([1e16, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1e16, 1, 1, 1, 1, 3.5], dtype=np.float64)
    ids = np.array([0] * 12 + [1, 1, -1, 1])
    want = lane_rule_sum(data, ids, 2, short_lanes)
    row_order = np.zeros(2)
    for value, g in zip(data, ids, strict=True):
        if g >= 0:
            row_order[g] += value
    assert want[0] != row_order[0]  # the case tells the lane rule from a plain row-order sum
    got = segcli.segment_reduce(data, ids, 2, "sum", engine=engine)
    assert got.tobytes() == want.tobytes()
    rng = np.random.default_rng(9)
    data = rng.standard_normal(300) * rng.choice([1e-8, 1.0, 1e8], 300)
    for low in (-1, 0):  # with rows to drop, and without
        ids = rng.integers(low, 4, 300)
        got = segcli.segment_reduce(data, ids, 4, "sum", engine=engine)
        assert got.tobytes() == lane_rule_sum(data, ids, 4, short_lanes).tobytes()


@needs_numba
@pytest.mark.usefixtures("numba_parallel", "short_lanes")
@pytest.mark.parametrize("inner", [(), (3,)], ids=["1-D", "2-D"])
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@default_run(lambda dtype: dtype in NUMBA_DATA_DTYPES)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64"])
@pytest.mark.parametrize("op", ROUNDING_OPS)
def test_numba_lanes_on_threads_and_blocks_give_numpy_bytes(
    op: str, dtype: str, sorted_ids: bool, inner: tuple[int, ...]
) -> None:
    if not _supported(op, dtype):
        pytest.skip("the op takes real data only")
    rng = np.random.default_rng([OP_NAMES.index(op), DTYPES.index(dtype)])
    data = make_data(rng, (400, *inner), dtype)
    if op != "prod":  # values of very different sizes, so any reordering shows
        data = (data * rng.choice([1e-3, 1.0, 1e3], (400,) + (1,) * len(inner))).astype(dtype)
    ids = make_ids(rng, (400,), 6, sorted_ids)
    want = fold_in_blocks("numpy", data, ids, 6, op, [], sorted_ids=sorted_ids)
    for cuts in ([], [3, 4, 199, 300], list(range(7, 400, 7))):
        assert fold_in_blocks("numba", data, ids, 6, op, cuts, sorted_ids=sorted_ids) == want


@needs_numba
@pytest.mark.usefixtures("numba_parallel", "short_lanes")
@pytest.mark.parametrize("packed", [True, False], ids=["small-state", "large-state"])
@pytest.mark.parametrize("inner", [(), (3,), (0,)], ids=["1-D", "2-D", "no-columns"])
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
def test_numba_var_lanes_give_numpy_bytes_on_each_path(
    monkeypatch: pytest.MonkeyPatch, packed: bool, inner: tuple[int, ...], sorted_ids: bool
) -> None:
    """var's kernels, packed (a state that fits the cache) or one array per intermediate, on
    threads per lane and across blocks: the NumPy engine's bytes, NaN and inf included."""
    from segcli.engines import numba_engine

    if not packed:
        monkeypatch.setattr(numba_engine, "_CACHE_BYTES", 0)
    rng = np.random.default_rng(12)
    data = 1e5 + rng.standard_normal((400, *inner)) * rng.choice([1e-3, 1.0, 1e3], 400).reshape(
        (400,) + (1,) * len(inner)
    )
    if data.size:
        data.reshape(-1)[rng.choice(data.size, 4, replace=False)] = [np.nan, np.inf, -np.inf, 0]
    ids = make_ids(rng, (400,), 7, sorted_ids)
    for op in ("var", "std"):
        want = fold_in_blocks("numpy", data, ids, 7, op, [], sorted_ids=sorted_ids)
        for cuts in ([], [3, 4, 199, 300], list(range(7, 400, 7))):
            got = fold_in_blocks("numba", data, ids, 7, op, cuts, sorted_ids=sorted_ids)
            assert got == want, (op, cuts)


def test_lanes_only_where_the_order_matters() -> None:
    f32, i32 = np.dtype(np.float32), np.dtype(np.int32)
    lanes = {
        (name, dtype.name): ops.new_state(ops.get_op(name), 3, (), dtype).lanes
        for name in OP_NAMES
        for dtype in (f32, i32, np.dtype(np.complex64))
        if _supported(name, dtype.name)
    }
    assert lanes["sum", "float32"] == lanes["prod", "complex64"] == ops.LANES == 2
    assert lanes["mean", "float32"] == lanes["sqrt_n", "float32"] == 2
    assert lanes["min", "float32"] == lanes["max", "float32"] == 1
    assert lanes["sum", "int32"] == lanes["mean", "int32"] == lanes["count", "float32"] == 1
    # var/std and logsumexp opt in to lanes for their joint fold (any data dtype); argmin
    # keeps row order
    assert lanes["var", "float32"] == lanes["std", "int32"] == 2
    assert lanes["logsumexp", "float32"] == lanes["logsumexp", "int32"] == 2
    assert lanes["argmin", "float32"] == 1
    assert ops.new_state(ops.get_op("logsumexp"), 3, (), f32, sorted_ids=True).lanes == 1
    assert ops.new_state(ops.get_op("var"), 3, (), f32, sorted_ids=True).lanes == 1
    sorted_sum = ops.new_state(ops.get_op("sum"), 3, (), f32, sorted_ids=True)
    assert sorted_sum.lanes == 1  # sorted ids fold in row order: no second lane to allocate
    assert ops.state_bytes(ops.get_op("sum"), 10, (), f32, sorted_ids=True) < ops.state_bytes(
        ops.get_op("sum"), 10, (), f32
    )
    assert ops.lane_pieces(65_530, 10, 2) == [(0, 6, 0), (6, 10, 1)]
    assert ops.lane_pieces(0, 10, 1) == [(0, 10, 0)]


# --- NaN and infinity -------------------------------------------------------------------------


@pytest.mark.parametrize("sorted_ids", [False, True])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_nan_and_inf_rules(engine: str, dtype: str, sorted_ids: bool) -> None:
    nan, inf = np.nan, np.inf
    data = np.array([1, nan, 3, inf, inf, -inf, -inf, nan, 2, 5], dtype)
    ids = np.array([0, 0, 0, 1, 1, 2, 2, 3, 3, 5])

    def run(op: str) -> np.ndarray:
        return segcli.segment_reduce(data, ids, 6, op, sorted=sorted_ids, engine=engine)

    big = np.finfo(dtype).max
    np.testing.assert_array_equal(run("min"), np.array([nan, inf, -inf, nan, big, 5], dtype))
    np.testing.assert_array_equal(run("max"), np.array([nan, inf, -inf, nan, -big, 5], dtype))
    np.testing.assert_array_equal(run("sum"), np.array([nan, inf, -inf, nan, 0, 5], dtype))
    np.testing.assert_array_equal(run("count"), [3, 2, 2, 2, 0, 1])


def test_nan_propagates_from_any_row_of_a_long_segment(engine: str) -> None:
    for where in (0, 1, 999, 1999):
        data = np.ones(2000, np.float32)
        data[where] = np.nan
        ids = np.zeros(2000, np.int32)
        for op in ("min", "max"):
            assert np.isnan(segcli.segment_reduce(data, ids, 1, op, engine=engine)[0])


_NAN_PAYLOADS = {
    "float32": (np.uint32, [0x7FC00001, 0xFFC00002, 0x7FC00003]),
    "float64": (np.uint64, [0x7FF8000000000001, 0xFFF8000000000002, 0x7FF8000000000003]),
}
_ARITHMETIC = ("sum", "prod", "mean", "sqrt_n", "var", "logsumexp")
_PICKING = ("min", "max", "first", "last")


@pytest.mark.parametrize("width", [0, 3])
@pytest.mark.parametrize("sorted_ids", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nans_of_other_payloads_and_signs_give_one_result(
    engine: str, dtype: str, sorted_ids: bool, width: int
) -> None:
    """Two NaNs meeting in an add: which one wins is the compiler's and the hardware's
    choice, so an arithmetic op's NaN is NumPy's ``nan`` on every engine; an op that picks a
    value keeps its bits, the same on every engine."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((600, width) if width else 600).astype(dtype)
    unsigned, payloads = _NAN_PAYLOADS[dtype]
    flat = data.reshape(-1).view(unsigned)
    flat[rng.choice(flat.size, 90, replace=False)] = np.array(payloads, unsigned)[np.arange(90) % 3]
    ids = np.sort(rng.integers(0, 7, 600))
    if not sorted_ids:
        ids = rng.permutation(ids)
    for op in _ARITHMETIC + _PICKING:
        got = segcli.segment_reduce(data, ids, 7, op, sorted=sorted_ids, engine=engine)
        want = segcli.segment_reduce(data, ids, 7, op, sorted=sorted_ids, engine="numpy")
        assert got.tobytes() == want.tobytes(), op
        nan = np.isnan(got)
        assert nan.any() or op in ("first", "last"), op
        if op in _ARITHMETIC:
            assert (got[nan].view(unsigned) == np.array(np.nan, dtype).view(unsigned)).all(), op
        else:  # a value of the data: one of the payloads
            assert set(got[nan].view(unsigned).tolist()) <= set(payloads), op


# --- dropped rows and empty inputs ------------------------------------------------------------


def test_dropped_rows_are_skipped(engine: str) -> None:
    data = np.arange(1, 7, dtype=np.float32)
    unsorted = segcli.reduce_arrays(data, [-1, 0, -2, 1, 0, -1], 2, "sum", engine=engine)
    np.testing.assert_array_equal(unsorted.result, [7, 4])
    np.testing.assert_array_equal(unsorted.counts, [2, 1])
    trailing = segcli.reduce_arrays(data, [0, 0, 1, 2, 3, 3], 2, "max", sorted=True, engine=engine)
    np.testing.assert_array_equal(trailing.result, [2, 3])
    np.testing.assert_array_equal(trailing.counts, [2, 1])


@pytest.mark.parametrize("given_n", [True, False])
def test_unsorted_ids_are_checked_by_the_fold_counts(
    engine: str, given_n: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No full scan of valid unsorted ids: the counts prove which rows were folded."""
    from segcli import validate

    def no_scan(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the ids were scanned before the fold")

    monkeypatch.setattr(validate, "check_ids", no_scan)
    n = 3 if given_n else None
    reduction = segcli.reduce_arrays([1.0, 2.0, 4.0, 8.0], [2, -1, 0, 2], n, engine=engine)
    assert reduction.result.tolist() == [4.0, 0.0, 9.0]
    assert reduction.id_report.num_segments == 3 and reduction.id_report.inferred == (not given_n)
    assert reduction.id_report.dropped_negative == 1 and reduction.id_report.rows_used == 3


@pytest.mark.parametrize("sorted_ids", [False, True])
@pytest.mark.parametrize("op", OP_NAMES)
def test_empty_inputs(engine: str, op: str, sorted_ids: bool) -> None:
    def run(data: Any, ids: Any, n: int | None) -> segcli.Reduction:
        return segcli.reduce_arrays(data, ids, n, op, sorted=sorted_ids, engine=engine)

    no_rows = run(np.zeros((0, 2), np.float32), np.zeros(0, np.int32), 3)
    want = reference_reduce(np.zeros((0, 2), np.float32), np.zeros(0, np.int32), 3, op)
    assert no_rows.result.shape == want.shape
    np.testing.assert_array_equal(no_rows.result, want)
    np.testing.assert_array_equal(no_rows.counts, [0, 0, 0])

    no_segments = run(np.ones(4, np.float64), np.full(4, -1 if not sorted_ids else 0), 0)
    assert no_segments.result.shape == (0,)
    assert no_segments.counts.shape == (0,)

    no_columns = run(np.zeros((5, 0), np.float32), [0, 0, 1, 1, 1], 3)
    assert no_columns.result.shape == ((3,) if op == "count" else (3, 0))
    np.testing.assert_array_equal(no_columns.counts, [2, 3, 0])


# --- property: random data, ids in [-2, n), every op, every engine ----------------------------


#: The property's data dtypes.
PROPERTY_DTYPES = ["float32", "float64", "int32", "uint8"]


def _property_cases() -> list[Any]:
    """(engine, pool): each engine draws from every dtype; the numba engine also from its
    default-run dtypes alone, its case in the default run (each dtype compiles a kernel family)."""
    cases = [pytest.param(*e.values, "all", marks=e.marks, id=f"{e.id}-all") for e in ENGINES]
    numba = next(e for e in ENGINES if e.id == "numba")
    return [*cases, pytest.param(*numba.values, "numba's", marks=numba.marks, id="numba-numba's")]


@st.composite
def reductions(
    draw: st.DrawFn, dtypes: list[str] = PROPERTY_DTYPES
) -> tuple[np.ndarray, np.ndarray, int, str]:
    n = draw(st.integers(0, 6))
    rows = draw(st.integers(0, 30))
    inner = draw(st.sampled_from([(), (2,)]))
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    elements = st.floats(-100, 100, width=32) if np.dtype(dtype).kind == "f" else None
    data = draw(hnp.arrays(dtype, (rows, *inner), elements=elements))
    ids = draw(hnp.arrays(np.int64, rows, elements=st.integers(-2, max(n - 1, -1))))
    op = draw(st.sampled_from(OP_NAMES))
    return data, ids, n, op


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(draws=st.data())
@default_run(lambda engine, pool: engine != "numba" or pool == "numba's")
@pytest.mark.parametrize(("engine", "pool"), _property_cases())
def test_property_matches_reference(engine: str, pool: str, draws: st.DataObject) -> None:
    dtypes = [d for d in PROPERTY_DTYPES if pool == "all" or numba_takes("numba", d)]
    data, ids, n, op = draws.draw(reductions(dtypes))
    got = segcli.segment_reduce(data, ids, n, op, engine=engine)
    assert_matches_reference(got, reference_reduce(data, ids, n, op), op, data.dtype.name)


# --- validation's numba scan: the same reports and messages as the NumPy passes ---------------


def _scan_outcome(ids: np.ndarray, n: int | None, sorted_ids: bool, blocks: int) -> str:
    from segcli import validate

    scanner = validate.IdScanner(tuple(ids.shape), n, sorted_ids, "ids.npy")
    for block in np.array_split(ids.reshape(-1), blocks):
        scanner.feed(block)
    try:
        return repr(scanner.finish())
    except segcli.SegcliError as exc:
        return f"error: {exc}"


@needs_numba
@pytest.mark.parametrize(
    ("ids", "n", "sorted_ids"),
    [
        (np.array([3, -1, 0, 5, -7, 2], np.int8), 4, False),
        (np.array([3, -1, 0, 5, -7, 2], np.int64), None, False),
        (np.array([0, 1, 1, 4, 9], np.uint64), 3, False),
        (np.array([0, 2**64 - 1], np.uint64), 5, False),
        (np.array([0, 0, 1, 3, 3, 7], np.int32), 4, True),
        (np.array([0, 2, 1, 3, 2, 5], np.int32), None, True),
        (np.array([-2, 0, 1], np.int32), None, True),
        (np.array([[0, 1, 9], [2, -1, 8]], np.int32), 3, False),
    ],
)
@pytest.mark.parametrize("blocks", [1, 3])
@pytest.mark.parametrize("slices", ["one pass", "two slices at once"])
def test_numba_validation_scan_matches_numpy(
    monkeypatch: pytest.MonkeyPatch,
    ids: np.ndarray,
    n: int | None,
    sorted_ids: bool,
    blocks: int,
    slices: str,
) -> None:
    from segcli import validate
    from segcli.engines import numba_engine

    monkeypatch.setattr(validate, "ENGINE_SCAN_MIN_IDS", 1)
    monkeypatch.setattr(validate, "_id_scanner", lambda: None)
    want = _scan_outcome(ids, n, sorted_ids, blocks)
    monkeypatch.setattr(validate, "_id_scanner", lambda: numba_engine.ENGINE)
    if slices == "one pass":
        monkeypatch.setattr(validate, "CONCURRENT_SCAN_MIN_IDS", 2**62)
    else:  # every block of two or more ids is cut in two and scanned on two threads
        monkeypatch.setattr(validate, "CONCURRENT_SCAN_MIN_IDS", 2)
        monkeypatch.setattr(numba_engine, "THREADS", 2)
    assert _scan_outcome(ids, n, sorted_ids, blocks) == want


@needs_numba
def test_validation_uses_the_scan_of_an_engine_already_imported_only() -> None:
    """The registry offers numba's scan once numba's module is loaded (its start-up paid),
    and never imports an engine to get one."""
    import subprocess
    import sys

    code = (
        "import sys; from segcli.engines import id_scanner; "
        "print(id_scanner(), 'segcli.engines.numba_engine' in sys.modules); "
        "import segcli.engines.numba_engine as e; print(id_scanner() is e.ENGINE)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "None False\nTrue\n", "")


@needs_numba
def test_numba_says_once_per_machine_that_it_compiles(tmp_path: Any) -> None:
    """Through the CLI, which prints the engine's notices; the library prints nothing, even
    when it compiles."""
    import subprocess
    import sys

    np.save(tmp_path / "data.npy", np.array([1.0, 2.0]))
    np.save(tmp_path / "ids.npy", np.array([0, 1]))

    def run(cache: str, *command: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / cache)}
        return subprocess.run(
            [sys.executable, *command], capture_output=True, text=True, env=env, cwd=tmp_path
        )

    # count compiles the fewest kernels: the cheapest cold cache to fill, twice.
    library = run(
        "a", "-c", "import segcli; segcli.segment_reduce([1.0], [0], 1, 'count', engine='numba')"
    )
    assert (library.returncode, library.stdout, library.stderr) == (0, "", "")
    cli = ["-m", "segcli", "count", "data.npy", "ids.npy", "--engine", "numba", "-q"]
    first, second = run("b", *cli), run("b", *cli)
    assert first.returncode == 0, first.stderr
    assert first.stderr == "segcli: compiling kernels, first run only\n"
    assert second.stderr == ""


@needs_numba
def test_packed_sum_kernel_refuses_a_layout_its_address_arithmetic_cannot_read() -> None:
    from segcli.engines import numba_kernels

    data, ids = np.ones(10, np.float32), np.zeros(10, np.int32)
    pairs = np.zeros((2, 3, 2))
    numba_kernels.fold_sum_counted(data, ids, pairs, 0, 4, -1)
    assert pairs[:, 0].tolist() == [[6.0, 6.0], [4.0, 4.0]]  # rows 0-3 and 8-9, then 4-7
    with pytest.raises(ValueError, match="C-contiguous"):
        numba_kernels.fold_sum_counted(data, ids, np.zeros((2, 3, 4))[:, :, :2], 0, 4, -1)


@needs_numba
def test_numba_compiles_the_folds_of_the_op_it_runs_only() -> None:
    """One compiled fold per op kind: a min compiles no sum, product or max loop (compiling
    every op's loops for each dtype was most of the first run's compile time)."""
    from segcli.engines import numba_kernels

    data = np.arange(40, dtype=np.int16).reshape(20, 2)
    ids = np.arange(20, dtype=np.int16) // 3
    for rows, kernels in ((data[:, 0], numba_kernels.FOLD_FLAT), (data, numba_kernels.FOLD_ROWS)):
        before = [set(kernel.signatures) for kernel in kernels]
        got = segcli.segment_reduce(rows, ids, 7, "min", engine="numba")
        assert got.tobytes() == segcli.segment_reduce(rows, ids, 7, "min", engine="numpy").tobytes()
        grown = [
            kind for kind, kernel in enumerate(kernels) if set(kernel.signatures) != before[kind]
        ]
        assert grown in ([], [numba_kernels.MIN])  # [] if an earlier test compiled it
        assert any(str(sig[0].dtype) == "int16" for sig in kernels[numba_kernels.MIN].signatures)
