"""The CuPy engine: its algorithms on the CPU everywhere, its kernels on a GPU where there is one.

Tests marked ``gpu`` need CuPy and a CUDA device and skip with the registry's reason otherwise.
The rest run everywhere:

- the engine's orchestration (:mod:`segcli.engines.cupy_fold`) on NumPy arrays, with NumPy
  stand-ins for the CUDA kernels (:class:`NumpyKernels`, written from each kernel's contract);
- the CUDA kernel sources themselves, compiled as C++ for one CPU thread (:data:`CPP_SHIM`,
  needs g++), driven by the same orchestration and held to the NumPy engine's bytes;
- every generated kernel variant compiled by NVRTC for sm_90, where CuPy is installed (NVRTC
  needs no GPU).
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import shutil
import subprocess
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import segcli
from segcli import ops
from segcli.core import reduce_arrays
from segcli.engines import cupy_fold, cupy_kernels, get_engine
from segcli.engines.base import Engine
from segcli.engines.cupy_fold import FoldOptions, fold_block, key_decode, key_encode
from segcli.engines.numpy_engine import ENGINE as NUMPY_ENGINE
from segcli.errors import EngineUnavailableError

try:  # `python -m pytest` puts the repository on sys.path; plain `pytest` puts tests/ there
    from tests.matrix import default_run
    from tests.reference import reference_reduce
    from tests.test_min_max_ties import rule_reduce, tied_data
except ModuleNotFoundError:
    from matrix import default_run  # type: ignore[no-redef]
    from reference import reference_reduce  # type: ignore[no-redef]
    from test_min_max_ties import rule_reduce, tied_data  # type: ignore[no-redef]

FLOATS = ["float16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
COMPLEX = ["complex64", "complex128"]
BOOL = ["bool"]
#: The integer widths whose cases the default run leaves to the full matrix (tests/matrix.py):
#: the kernels' templates are the same code for every integer, whose narrowest and widest of
#: each sign stay in the default run.
MIDDLE_INTS = ("int16", "int32", "uint16", "uint32")


def common_dtype(dtype: str) -> bool:
    """Whether a case of ``dtype`` is in the default run (see :data:`MIDDLE_INTS`)."""
    return dtype not in MIDDLE_INTS


#: Every op of the table the kernels fold: a new op is taken through the engine by itself
#: (one they do not fold is refused: test_an_op_without_a_kernel_is_refused_before_any_row_moves).
OPS = [name for name, op in ops.OPS.items() if cupy_fold.has_kernel(op)]
#: The ops whose float results depend on the order of the fold (they keep lanes).
ROUNDING_OPS = [name for name in OPS if any(i.fold.rounds for i in ops.OPS[name].intermediates)]
#: The ops folded by seg_joint, every intermediate at once (see segcli.ops).
JOINT_OPS = [name for name in OPS if ops.OPS[name].joint is not None]
#: Ops whose kernel calls CUDA's (or, through the C++ shim, the C library's) ``exp``, which may
#: round a term one bit away from NumPy's own ``exp``: they agree to the last bit of the
#: result's dtype, not to the byte.
EXP_OPS = [name for name in OPS if ops.OPS[name].joint == "logsumexp"]


def _cases() -> list[tuple[str, str]]:
    cases = []
    for op, dtype in itertools.product(OPS, FLOATS + INTS + COMPLEX + BOOL):
        if np.dtype(dtype).kind not in ops.get_op(op).data_kinds:
            continue
        cases.append((op, dtype))
    return cases


CASES = _cases()
DEFAULT_OPTIONS = FoldOptions()


def make_inputs(
    dtype: str,
    rows: int,
    width: int,
    n: int,
    *,
    sorted_ids: bool,
    seed: int = 0,
    ids_dtype: str = "int64",
) -> tuple[np.ndarray, np.ndarray]:
    """Data whose products stay finite-ish and whose integer sums wrap, ids with drops."""
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "f":
        data = rng.uniform(0.5, 1.5, (rows, width)) * rng.choice([-1, 1], (rows, width))
    elif kind == "c":
        data = rng.uniform(0.5, 1.5, (rows, width)) + 1j * rng.uniform(-0.5, 0.5, (rows, width))
    elif kind == "b":
        data = rng.random((rows, width)) < 0.7
    else:
        info = np.iinfo(dtype)
        data = rng.integers(info.min, info.max, (rows, width), dtype=dtype, endpoint=True)
    data = data.astype(dtype)
    if sorted_ids:
        ids = np.sort(rng.integers(0, n + 2, rows))  # ids >= n: a dropped suffix
    else:
        ids = rng.integers(-2, n, rows)  # negative ids: dropped rows
        if np.dtype(ids_dtype).kind == "u":
            ids = np.where(ids < 0, n - 1, ids)
    return data, ids.astype(ids_dtype)


def assert_same_bytes(got: np.ndarray, want: np.ndarray) -> None:
    """Byte for byte, except that a NaN matches any NaN: CUDA's arithmetic returns its own
    canonical NaN where x86 keeps the operand's payload (or its negative default NaN)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    g, w = np.ravel(got), np.ravel(want)
    if got.dtype.kind == "c":
        g, w = g.view(g.real.dtype), w.view(w.real.dtype)
    if got.dtype.kind in "fc":
        nan = np.isnan(g)
        assert np.array_equal(nan, np.isnan(w)), "NaN in different places"
        g, w = g[~nan], w[~nan]
    assert g.tobytes() == w.tobytes()


def assert_within_an_ulp(got: np.ndarray, want: np.ndarray) -> None:
    """Float results at most one unit in the last place of their dtype apart (NaN and the
    infinities in the same places)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    with np.errstate(invalid="ignore"):  # inf - inf, spacing(inf): NaN, and "same" anyway
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        ulp = np.spacing(np.abs(want))
        assert np.all(same | (np.abs(got - want) <= ulp)), (got[~same], want[~same])


def assert_kernel_bytes(got: np.ndarray, want: np.ndarray, op: str) -> None:
    """:func:`assert_same_bytes`, but for :data:`EXP_OPS` (to the last bit)."""
    if op in EXP_OPS:
        assert_within_an_ulp(got, want)
    else:
        assert_same_bytes(got, want)


def assert_same_result(got: np.ndarray, want: np.ndarray, op: str) -> None:
    """Integers, min, max and count bit for bit; float sums and products within rounding."""
    assert got.dtype == want.dtype and got.shape == want.shape
    rounds = any(i.fold.rounds for i in ops.get_op(op).intermediates)
    if not rounds or got.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
        assert got.tobytes() == want.tobytes()
        return
    rtol = {2: 2e-3, 4: 2e-5, 8: 1e-11, 16: 1e-11}[got.dtype.itemsize]
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


# --- NumPy stand-ins for the CUDA kernels ----------------------------------------------------


def _as_u64(values: np.ndarray) -> np.ndarray:
    """``(u64)(long long)v``: sign-extend, then reinterpret."""
    if values.dtype == np.uint64:
        return values
    return values.astype(np.int64).view(np.uint64)


def _combine(combine: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if combine == "add":
        return a + b
    if a.dtype.kind != "c":
        return a * b
    # The kernel's complex product, term for term with no fused multiply-add.
    real = a.real * b.real - a.imag * b.imag
    imag = a.real * b.imag + a.imag * b.real
    return real + 1j * imag


class NumpyKernels:
    """Each CUDA kernel's contract (see ``cupy_kernels``) in NumPy, for the CPU tests."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def scatter(self, mode, ids, vals, slots, count, n, width) -> None:
        self.calls.append(f"scatter:{mode}")
        assert ids.ndim == 1 and ids.flags.c_contiguous
        keep = cupy_fold.valid_rows(ids, n, np)
        segs = ids[keep].astype(np.int64)
        np.add.at(count, segs, 1)
        if mode == "count":
            return
        assert vals.dtype.name in cupy_kernels.C_TYPES and vals.flags.c_contiguous
        assert slots.shape == (n, width) and vals.shape[1] == width
        rows = vals[keep]
        if mode == "add_int":
            np.add.at(slots, segs, _as_u64(rows))
        elif mode == "add_float":
            np.add.at(slots, segs, rows.astype(np.float64))
        else:
            ufunc = np.minimum if mode == "min" else np.maximum
            ufunc.at(slots, segs, key_encode(rows, mode == "min", np))

    def fold_pieces(
        self, combine, acc_kind, src, order, starts, segs, dst, width, from_acc
    ) -> None:
        self.calls.append(f"pieces:{combine}:{acc_kind}:{from_acc}")
        assert starts.dtype == np.int64 and (order is None or order.dtype == np.int64)
        pairs = acc_kind == "c128"
        if pairs:
            src_rows = src.reshape(src.shape[0], width, 2)
            src_rows = src_rows[..., 0].astype(np.float64) + 1j * src_rows[..., 1]
            dst_rows = dst.view(np.complex128)
        elif acc_kind == "u64":
            src_rows, dst_rows = _as_u64(src), dst
        else:
            src_rows, dst_rows = src.astype(np.float64), dst
        identity = 1 if combine == "mul" else 0
        with np.errstate(all="ignore"):
            for p in range(starts.shape[0] - 1):
                positions = range(int(starts[p]), int(starts[p + 1]))
                rows = [int(order[k]) if order is not None else k for k in positions]
                target = int(segs[p]) if from_acc else p
                a = (
                    dst_rows[target].copy()
                    if from_acc
                    else np.full(width, identity, dst_rows.dtype)
                )
                for row in rows:  # strictly in position order
                    a = _combine(combine, a, src_rows[row])
                dst_rows[target] = a

    def joint(
        self, fold, value_type, src, order, gathered, starts, segs, count, arrays, width, first_row
    ) -> None:
        self.calls.append(f"joint:{fold}:{order is not None}:{gathered}")
        assert starts.dtype == segs.dtype == count.dtype == np.int64
        assert order is None or order.dtype == np.int64
        assert all(a.flags.c_contiguous for a in (src, *arrays)) and len(arrays) == 3
        assert value_type in cupy_kernels.joint_value_types(fold)
        values = src.reshape(src.shape[0], width, -1)  # raw16 values: pairs of uint64
        state = [a.reshape(a.shape[0], width, -1) for a in arrays]
        step = _JOINT_STEPS[fold]
        with np.errstate(all="ignore"):
            for p in range(starts.shape[0] - 1):
                g = int(segs[p])
                positions = range(int(starts[p]), int(starts[p + 1]))
                rows = [int(order[k]) if order is not None else k for k in positions]
                at = list(positions) if gathered else rows
                for c in range(width):
                    run = [(values[k, c], first_row + r) for k, r in zip(at, rows, strict=True)]
                    # Read only by a step that reads it, as the kernel's: logsumexp's lanes
                    # pass the count of the n segments, which virtual segments overrun.
                    step(state, g, c, run, partial(_count_of, count, g))


def _count_of(count: np.ndarray, g: int) -> int:
    return int(count[g])


def _moments_step(state, g, c, run, count) -> None:
    shift, total, squares = (a[g, c, 0] for a in state)
    fresh = count() == 0
    for v, _ in run:
        x = np.float64(v[0])
        if fresh:
            shift, fresh = x, False
        d = x - shift
        total, squares = total + d, squares + (d * d + (x - x))
    state[0][g, c, 0], state[1][g, c, 0], state[2][g, c, 0] = shift, total, squares


def _arg_step(smallest: bool):
    def step(state, g, c, run, count) -> None:
        best, at = state[0][g, c, 0], state[1][g, c, 0]
        for v, row in run:
            v = v[0]
            if at < 0:
                best, at = v, row
            elif best != best:
                break
            elif v != v or (v < best if smallest else v > best):
                best, at = v, row
        state[0][g, c, 0], state[1][g, c, 0] = best, at

    return step


def _pick_step(latest: bool):
    def step(state, g, c, run, count) -> None:
        v, row = run[-1] if latest else run[0]
        if (row > state[1][g, c, 0]) if latest else (row < state[1][g, c, 0]):
            state[0][g, c], state[1][g, c, 0] = v, row

    return step


def _logsumexp_step(state, g, c, run, count) -> None:
    top, scale, total = state[0][g, c, 0], int(state[1][g, c, 0]), state[2][g, c, 0]
    for v, _ in run:
        x = np.float64(v[0])
        if not abs(x) < ops.LARGEST_SCALED:
            if top == top and (x != x or x > top):
                top = x
            continue
        e = ops.scale_of(x)
        m = np.exp(x - e * np.log(2.0))
        if int(e) > scale:
            total, scale = np.ldexp(total, max(scale - int(e), -2000)), int(e)
        total = total + np.ldexp(m, max(int(e) - scale, -2000))
    state[0][g, c, 0], state[1][g, c, 0], state[2][g, c, 0] = top, scale, total


#: The stand-in of each joint fold of ``seg_joint``, from its contract.
_JOINT_STEPS = {
    "moments": _moments_step,
    "argmin": _arg_step(smallest=True),
    "argmax": _arg_step(smallest=False),
    "first": _pick_step(latest=False),
    "last": _pick_step(latest=True),
    "logsumexp": _logsumexp_step,
}


def cpu_fold(
    op: str,
    data: np.ndarray,
    ids: np.ndarray,
    n: int,
    *,
    sorted_ids: bool,
    options: FoldOptions = DEFAULT_OPTIONS,
    blocks: int = 1,
    kernels: NumpyKernels | None = None,
) -> np.ndarray:
    """The CuPy engine's orchestration, on NumPy arrays, folded in ``blocks`` blocks."""
    op_def = ops.get_op(op)
    state = ops.new_state(op_def, n, data.shape[1:], data.dtype)
    kernels = kernels or NumpyKernels()
    bounds = np.linspace(0, ids.shape[0], blocks + 1).astype(int)
    for a, b in itertools.pairwise(bounds):
        fold_block(
            state,
            data[a:b].reshape(b - a, -1),
            ids[a:b],
            sorted_ids=sorted_ids,
            kernels=kernels,
            xp=np,
            options=options,
            first_row=a,
        )
    return ops.finalize(state)


def numpy_engine_fold(op: str, data: np.ndarray, ids: np.ndarray, n: int, sorted_ids: bool):
    state = NUMPY_ENGINE.new_state(ops.get_op(op), n, data.shape[1:], data.dtype)
    NUMPY_ENGINE.fold(state, data.reshape(ids.shape[0], -1), ids, sorted_ids=sorted_ids)
    return ops.finalize(state)


# --- CPU: the orchestration against the NumPy engine -----------------------------------------


@default_run(common_dtype)
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize(("op", "dtype"), CASES)
def test_orchestration_matches_numpy_engine(op: str, dtype: str, sorted_ids: bool) -> None:
    data, ids = make_inputs(dtype, 300, 3, 7, sorted_ids=sorted_ids)
    want = numpy_engine_fold(op, data, ids, 7, sorted_ids)
    tree = FoldOptions(tree_reduce=True, piece_rows=4)
    assert_same_result(cpu_fold(op, data, ids, 7, sorted_ids=sorted_ids, options=tree), want, op)
    got = cpu_fold(op, data, ids, 7, sorted_ids=sorted_ids)
    assert got.tobytes() == want.tobytes()  # the default folds in the NumPy engine's order


@default_run(common_dtype)
@pytest.mark.parametrize(("op", "dtype"), [c for c in CASES if c[0] in ROUNDING_OPS])
def test_default_is_bit_identical_to_numpy_engine_whatever_the_blocks(op: str, dtype: str) -> None:
    data, ids = make_inputs(dtype, 400, 2, 5, sorted_ids=False, seed=3)
    want = numpy_engine_fold(op, data, ids, 5, False)
    for blocks in (1, 3, 400):
        got = cpu_fold(op, data, ids, 5, sorted_ids=False, blocks=blocks)
        assert got.tobytes() == want.tobytes()


@default_run(common_dtype)
@pytest.mark.usefixtures("short_lanes")
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize(("op", "dtype"), [c for c in CASES if c[0] in ROUNDING_OPS])
def test_lanes_fold_like_the_numpy_engine_whatever_the_blocks(
    op: str, dtype: str, sorted_ids: bool
) -> None:
    data, ids = make_inputs(dtype, 400, 2, 5, sorted_ids=sorted_ids, seed=4)
    want = numpy_engine_fold(op, data, ids, 5, sorted_ids)
    for blocks in (1, 3, 7):
        got = cpu_fold(op, data, ids, 5, sorted_ids=sorted_ids, blocks=blocks)
        assert got.tobytes() == want.tobytes()


def test_orchestration_matches_the_reference_on_multidimensional_inner() -> None:
    data, ids = make_inputs("float32", 50, 6, 4, sorted_ids=False, seed=5)
    data = data.reshape(50, 2, 3)
    for op in OPS:
        want = reference_reduce(data, ids, 4, op)
        got = cpu_fold(op, data, ids, 4, sorted_ids=False)
        assert got.shape == want.shape
        assert_same_result(got, want.astype(got.dtype), op)


@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "count", "mean"])
def test_tree_reduce_is_deterministic_within_rounding(op: str) -> None:
    data, ids = make_inputs("float64", 2000, 1, 9, sorted_ids=False, seed=7)
    tree = FoldOptions(tree_reduce=True, piece_rows=8)
    once = cpu_fold(op, data, ids, 9, sorted_ids=False, blocks=4, options=tree)
    again = cpu_fold(op, data, ids, 9, sorted_ids=False, blocks=4, options=tree)
    assert once.tobytes() == again.tobytes()
    assert_same_result(once, numpy_engine_fold(op, data, ids, 9, False), op)


def test_each_op_takes_the_path_its_determinism_needs() -> None:
    float32, int32, int64 = np.dtype("float32"), np.dtype("int32"), np.dtype("int64")
    path = {
        (op.name, dtype.name, fast): cupy_fold.scatter_mode(op, op.acc_dtype(dtype), fast)
        for op in map(ops.get_op, OPS)
        if op.joint is None
        for dtype in (float32, int32, int64)
        for fast in (False, True)
    }
    assert path["count", "float32", False] == "count"
    assert path["min", "float32", False] == "min" and path["max", "int64", False] == "max"
    assert path["sum", "int32", False] == "add_int"
    assert path["mean", "int32", False] == "add_int"  # int64 accumulator: exact atomics
    assert path["mean", "int64", False] is None  # float64 accumulator: ordered
    assert path["sum", "float32", False] is None
    assert path["sum", "float32", True] == "add_float"
    assert path["prod", "int32", True] is None  # no atomic multiply: always ordered
    assert path["any", "float32", False] == "max" and path["all", "int64", True] == "min"
    assert all(cupy_fold.scatter_mode(ops.get_op(op), None, True) is None for op in JOINT_OPS)


def test_kernels_called_per_path() -> None:
    data, ids = make_inputs("float32", 100, 1, 3, sorted_ids=False)
    for options, expected in (
        (FoldOptions(), ["scatter:count", "pieces:add:f64:True"]),
        (FoldOptions(fast_atomics=True), ["scatter:add_float"]),
        (FoldOptions(tree_reduce=True), ["scatter:count", "pieces:add:f64:False"]),
    ):
        kernels = NumpyKernels()
        cpu_fold("sum", data, ids, 3, sorted_ids=False, options=options, kernels=kernels)
        assert kernels.calls[: len(expected)] == expected
        assert kernels.calls[-1].endswith(":True") or options.fast_atomics


@pytest.mark.parametrize("tree", [False, True])
def test_wide_rows_fold_through_the_permutation(tree: bool) -> None:
    """Rows of 128 bytes or more are read through the sort's permutation, not gathered."""
    data, ids = make_inputs("float32", 500, 40, 11, sorted_ids=False, seed=8)

    class Watch(NumpyKernels):
        def fold_pieces(self, combine, acc_kind, src, order, *args) -> None:
            self.calls.append("ordered" if order is not None else "plain")
            super().fold_pieces(combine, acc_kind, src, order, *args)

    kernels = Watch()
    options = FoldOptions(tree_reduce=tree, piece_rows=4)
    got = cpu_fold("sum", data, ids, 11, sorted_ids=False, options=options, kernels=kernels)
    assert "ordered" in kernels.calls
    want = numpy_engine_fold("sum", data, ids, 11, False)
    if tree:
        assert_same_result(got, want, "sum")
    else:
        assert got.tobytes() == want.tobytes()


def test_fast_atomics_and_tree_reduce_exclude_each_other() -> None:
    with pytest.raises(ValueError, match="exclude"):
        FoldOptions(fast_atomics=True, tree_reduce=True)


def test_piece_levels_shrink_by_piece_rows() -> None:
    segs = np.zeros(100_000, np.int64)
    kernels = NumpyKernels()
    vals = np.ones((100_000, 1), np.float32)
    dst = np.zeros((1, 1))
    levels = cupy_fold.fold_ordered(kernels, np, "add", "f64", vals, None, segs, dst, 1, 64)
    assert levels == 3  # 100000 -> 1563 -> 25 -> 1
    assert dst[0, 0] == 100_000
    starts, runs = cupy_fold.piece_starts(np.array([0, 0, 0, 1, 1, 3, 3, 3, 3]), 4, np)
    assert starts.tolist() == [0, 3, 4, 5, 8] and runs == 3


def test_sort_rows_groups_stably_and_drops() -> None:
    ids = np.array([2, -1, 0, 2, 5, 0, 1], np.int16)
    order, segs = cupy_fold.sort_rows(ids, 3, False, np)
    assert order.tolist() == [2, 5, 6, 0, 3] and segs.tolist() == [0, 0, 1, 2, 2]
    order, segs = cupy_fold.sort_rows(np.array([0, 0, 2, 3, 3], np.uint64), 3, True, np)
    assert order is None and segs.tolist() == [0, 0, 2]
    huge = np.array([2**64 - 1, 1], np.uint64)  # compared by value, never wrapped to -1
    assert cupy_fold.valid_rows(huge, 3, np).tolist() == [False, True]


def test_plan_blocks_covers_the_rows_in_order() -> None:
    assert cupy_fold.plan_blocks(0, 8) == []
    assert cupy_fold.plan_blocks(10, 8, 32) == [(0, 4), (4, 8), (8, 10)]
    assert cupy_fold.plan_blocks(3, 100, 10) == [(0, 1), (1, 2), (2, 3)]  # at least one row
    plan = cupy_fold.plan_blocks(1_000_003, 12)
    assert plan[0][0] == 0 and plan[-1][1] == 1_000_003
    assert all(a[1] == b[0] for a, b in itertools.pairwise(plan))


# --- CPU: order-keys -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_keys_sort_like_values_and_round_trip(dtype: str) -> None:
    info = np.finfo(dtype)
    values = np.array(
        [
            -np.inf,
            -info.max,
            -1.5,
            -info.tiny,
            -info.smallest_subnormal,
            -0.0,
            0.0,
            info.smallest_subnormal,
            info.tiny,
            1.0,
            info.max,
            np.inf,
        ],
        dtype=dtype,
    )
    for for_min in (True, False):
        keys = key_encode(values, for_min, np)
        assert keys.dtype == np.uint64 and np.all(np.diff(keys.astype(object)) > 0)
        back = key_decode(keys, np.dtype(dtype), np)
        assert back.tobytes() == values.tobytes()  # -0.0 and +0.0 kept apart
    nan = np.array([np.nan, -np.nan], dtype=dtype)
    assert key_encode(nan, True, np).tolist() == [0, 0]  # below -inf: NaN wins min
    assert key_encode(nan, False, np).tolist() == [2**64 - 1] * 2  # above +inf: wins max
    canonical = np.array([np.nan, np.nan], dtype=dtype)
    assert key_decode(key_encode(nan, True, np), np.dtype(dtype), np).tobytes() == (
        canonical.tobytes()
    )


@pytest.mark.parametrize("dtype", INTS)
def test_integer_keys_sort_like_values_and_round_trip(dtype: str) -> None:
    info = np.iinfo(dtype)
    values = np.array(sorted({info.min, info.min + 1, 0, 1, info.max - 1, info.max}), dtype)
    keys = key_encode(values, True, np)
    assert np.all(np.diff(keys.astype(object)) > 0)
    assert key_decode(keys, np.dtype(dtype), np).tobytes() == values.tobytes()


def test_min_max_nan_propagates_and_inf_only_segment_is_inf() -> None:
    data = np.array([[1.0], [np.nan], [3.0], [np.inf], [np.inf]], np.float32)
    ids = np.array([0, 0, 0, 1, 1])
    for op in ("min", "max"):
        got = cpu_fold(op, data, ids, 3, sorted_ids=False)
        assert np.isnan(got[0, 0]) and got[1, 0] == np.inf
        assert got[2, 0] == (np.finfo(np.float32).max if op == "min" else np.finfo(np.float32).min)


# --- CPU: the kernel sources compile (NVRTC needs no GPU) ------------------------------------


@pytest.mark.parametrize("family", ["scatter", "pieces", "joint"])
def test_every_kernel_source_compiles_with_nvrtc(family: str) -> None:
    """Per kernel family, so that a check can compile one (each variant takes ~0.1 s)."""
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc", reason="needs CuPy's NVRTC")
    try:
        nvrtc.getVersion()
    except Exception as exc:  # the binding without libnvrtc
        pytest.skip(f"NVRTC library not loadable: {exc}")
    failures = []
    sources = cupy_kernels.all_sources()
    assert {name.partition("[")[0] for name in sources} == {"scatter", "pieces", "joint"}
    for name, source in sources.items():
        if not name.startswith(f"{family}["):
            continue
        program = nvrtc.createProgram(source, "segcli.cu", [], [])
        try:
            nvrtc.compileProgram(program, ["-arch=sm_90", *cupy_kernels.OPTIONS])
        except Exception:
            failures.append(f"{name}:\n{nvrtc.getProgramLog(program)}")
    assert not failures, failures[0]


def test_asking_for_cupy_without_a_device_is_a_clear_error() -> None:
    try:
        get_engine("cupy")
    except EngineUnavailableError as exc:
        assert "segcli[gpu]" in str(exc) or "device" in str(exc)
    else:
        pytest.skip("a CUDA device is present")


# --- CPU: the CUDA sources themselves, compiled as C++ for one CPU thread --------------------

# With one block of one thread, every grid-stride loop visits every element in order, atomics
# are plain read-modify-writes and the block's shared memory is one static array. That runs the
# kernels' own C code (ids to segments, order-keys, integer wrap, complex products, piece
# bounds) on the CPU, against the same expectations as the GPU. What it cannot check is the
# concurrency: real atomics, shared memory across threads and launch configurations.
CPP_SHIM = r"""
#include <cmath>
#include <cstring>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __restrict__
struct segcli_dim3 { unsigned int x; };
static const segcli_dim3 blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
typedef unsigned long long segcli_u64;
static inline segcli_u64 atomicAdd(segcli_u64* p, segcli_u64 v) {
    segcli_u64 o = *p; *p = o + v; return o;
}
static inline double atomicAdd(double* p, double v) { double o = *p; *p = o + v; return o; }
static inline segcli_u64 atomicMin(segcli_u64* p, segcli_u64 v) {
    segcli_u64 o = *p; if (v < o) *p = v; return o;
}
static inline segcli_u64 atomicMax(segcli_u64* p, segcli_u64 v) {
    segcli_u64 o = *p; if (v > o) *p = v; return o;
}
static inline long long __double_as_longlong(double d) {
    long long r; std::memcpy(&r, &d, 8); return r;
}
#define __syncthreads()
extern "C" { segcli_u64 smem[1 << 16]; }
"""
_MACROS = (
    *("U64_MAX", "SIGN_BIT", "IDENTITY", "CONVERT", "HAS_ACC", "SHARED", "ORDERED", "FROM_ACC"),
    *("GATHERED", "LN2", "LARGEST_SCALED", "PLAIN_EXP"),
)
CPP_ID_TYPES = ("long long", "unsigned long long", "int")


class CppKernels(NumpyKernels):
    """The kernel table, calling the CUDA sources compiled as C++ (see CPP_SHIM)."""

    def __init__(self, library: Any, index: dict[str, int], shared: bool | None) -> None:
        super().__init__()
        self._library, self._index, self._shared = library, index, shared

    def _function(self, source: str) -> Any:
        function = getattr(self._library, f"segcli_k{self._index[source]}")
        function.restype = None
        return function

    def scatter(self, mode, ids, vals, slots, count, n, width) -> None:
        self.calls.append(f"scatter:{mode}")
        has_acc = mode != "count"
        shared = (n * (width + 1) if has_acc else n) <= cupy_kernels.SHARED_SLOTS
        if self._shared is not None:
            shared = self._shared
        value_type = cupy_kernels.c_type(vals.dtype) if has_acc else None
        source = cupy_kernels.scatter_source(
            mode, cupy_kernels.c_type(ids.dtype), value_type, shared
        )
        pointer = ctypes.c_void_p
        self._function(source)(
            pointer(ids.ctypes.data),
            pointer((vals if has_acc else ids).ctypes.data),
            pointer((slots if has_acc else count).ctypes.data),
            pointer(count.ctypes.data),
            ctypes.c_longlong(ids.shape[0]),
            ctypes.c_longlong(width),
            ctypes.c_longlong(n),
        )

    def fold_pieces(self, combine, acc_kind, src, order, starts, segs, dst, width, from_acc):
        self.calls.append(f"pieces:{combine}:{acc_kind}:{from_acc}")
        source = cupy_kernels.fold_pieces_source(
            combine, acc_kind, cupy_kernels.c_type(src.dtype), order is not None, from_acc
        )
        for array in (src, starts, dst, order, segs):
            assert array is None or array.flags.c_contiguous
        pointer = ctypes.c_void_p
        self._function(source)(
            pointer(src.ctypes.data),
            pointer((starts if order is None else order).ctypes.data),
            pointer(starts.ctypes.data),
            pointer((starts if segs is None else segs).ctypes.data),
            pointer(dst.ctypes.data),
            ctypes.c_longlong(starts.shape[0] - 1),
            ctypes.c_longlong(width),
        )

    def joint(
        self, fold, value_type, src, order, gathered, starts, segs, count, arrays, width, first_row
    ) -> None:
        self.calls.append(f"joint:{fold}:{order is not None}:{gathered}")
        source = cupy_kernels.joint_source(fold, value_type, order is not None, gathered)
        for array in (src, starts, segs, count, order, *arrays):
            assert array is None or array.flags.c_contiguous
        pointer = ctypes.c_void_p
        self._function(source)(
            pointer(src.ctypes.data),
            pointer((starts if order is None else order).ctypes.data),
            pointer(starts.ctypes.data),
            pointer(segs.ctypes.data),
            pointer(count.ctypes.data),
            *(pointer(array.ctypes.data) for array in arrays),
            ctypes.c_longlong(starts.shape[0] - 1),
            ctypes.c_longlong(width),
            ctypes.c_longlong(first_row),
        )


@pytest.fixture(scope="module")
def cpp_library(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, int]]:
    """Every scatter (for CPP_ID_TYPES) and piece kernel in one shared library."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("needs a C++ compiler (g++) to run the CUDA sources on the CPU")
    sources = [
        source
        for name, source in cupy_kernels.all_sources().items()
        if name.startswith(("pieces", "joint")) or any(f",{t}," in name for t in CPP_ID_TYPES)
    ]
    parts = [CPP_SHIM]
    index: dict[str, int] = {}
    for i, source in enumerate(sources):
        index[source] = i
        body = source
        for kernel in ("seg_scatter", "seg_fold_pieces", "seg_joint"):
            body = body.replace(
                f'extern "C" __global__ void {kernel}(', f'extern "C" void segcli_k{i}('
            )
        parts.append(f"namespace k{i} {{\n{body}\n}}\n")
        parts.extend(f"#undef {macro}\n" for macro in _MACROS)
    folder = tmp_path_factory.mktemp("cuda_as_cpp")
    (folder / "kernels.cpp").write_text("".join(parts))
    built = subprocess.run(
        [
            compiler,
            "-O0",  # the kernels run on tiny inputs: compiling is the cost
            "-shared",
            "-fPIC",
            "-ffp-contract=off",
            "-Wno-unknown-pragmas",
            "-o",
            str(folder / "kernels.so"),
            str(folder / "kernels.cpp"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    return ctypes.CDLL(str(folder / "kernels.so")), index


# The global-memory variant of every op over the widest and the commonest float; of the other
# dtypes, the auto (shared-memory) one, whose loads and stores are the same template's; of the
# integers, the narrowest and widest of each sign (the others' templates are the same code).
# Sorted ids (run-wise folds, the same template for every dtype) over those two floats and
# int64; the rest in the full matrix.
@default_run(
    lambda dtype, shared, sorted_ids: (
        common_dtype(dtype)
        and (shared is None or dtype in ("float32", "float64"))
        and (not sorted_ids or dtype in ("float32", "float64", "int64"))
    )
)
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize(
    ("op", "dtype", "shared"),
    [
        (op, dtype, shared)
        for op, dtype in CASES
        for shared in (None, False)
        # Joint folds scatter only counts: their shared and global counts are sum's.
        if shared is None or op not in JOINT_OPS
    ],
    ids=lambda value: {None: "auto", False: "global"}.get(value, value),
)
def test_cuda_sources_on_the_cpu_match_numpy_engine(
    cpp_library: tuple[Any, dict[str, int]], op: str, dtype: str, sorted_ids: bool, shared
) -> None:
    for ids_dtype, width in (("int64", 3), ("uint64", 1), ("int32", 45)):
        data, ids = make_inputs(dtype, 300, width, 7, sorted_ids=sorted_ids, ids_dtype=ids_dtype)
        want = numpy_engine_fold(op, data, ids, 7, sorted_ids)
        kernels = CppKernels(*cpp_library, shared)
        got = cpu_fold(op, data, ids, 7, sorted_ids=sorted_ids, kernels=kernels, blocks=2)
        assert_kernel_bytes(got, want, op)
        for options in (
            FoldOptions(tree_reduce=True, piece_rows=4),
            FoldOptions(fast_atomics=True),
        ):
            kernels = CppKernels(*cpp_library, shared)
            got = cpu_fold(
                op, data, ids, 7, sorted_ids=sorted_ids, kernels=kernels, options=options
            )
            assert_same_result(got, want, op)


def test_cuda_min_max_keys_on_the_cpu(cpp_library: tuple[Any, dict[str, int]]) -> None:
    data = np.array([[1.0], [np.nan], [3.0], [np.inf], [np.inf], [-0.0], [-np.inf]], np.float32)
    ids = np.array([0, 0, 0, 1, 1, 2, 2])
    for op in ("min", "max"):
        kernels = CppKernels(*cpp_library, None)
        got = cpu_fold(op, data, ids, 4, sorted_ids=False, kernels=kernels)
        want = numpy_engine_fold(op, data, ids, 4, False)
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_cuda_min_max_ties_follow_the_rule(
    cpp_library: tuple[Any, dict[str, int]], dtype: str, sorted_ids: bool
) -> None:
    """Of 0.0 and -0.0 the later row wins, and of NaNs the first one (its bits), as on every
    engine; the order-keys alone give -0.0 for min, 0.0 for max and one NaN, whatever the
    order. In one block and in several (a zero or NaN in the state meets the block's)."""
    for op in ("min", "max"):
        data, ids = tied_data(dtype, op, (300, 3), nan=True, sorted_ids=sorted_ids)
        want = numpy_engine_fold(op, data, ids, 5, sorted_ids)
        assert want.tobytes() == rule_reduce(data, ids, 5, op).tobytes()
        for blocks in (1, 4, 300):
            for kernels in (NumpyKernels(), CppKernels(*cpp_library, None)):
                got = cpu_fold(
                    op, data, ids, 5, sorted_ids=sorted_ids, kernels=kernels, blocks=blocks
                )
                assert got.tobytes() == want.tobytes()


# --- CPU: the joint folds and any/all at their edges ---------------------------------------

#: Ops folded by seg_joint or by the non-zero flags (any, all).
EDGE_OPS = [*JOINT_OPS, "any", "all"]
EDGE_CASES = [c for c in CASES if c[0] in EDGE_OPS]


def _nan_with_payload(dtype: np.dtype) -> Any:
    """A quiet NaN with a payload and its sign bit set: only a copy keeps these bits."""
    bits = {2: 0xFE01, 4: 0xFFC0_0123, 8: 0xFFF8_0000_0000_0123}[dtype.itemsize]
    return np.array(bits, f"u{dtype.itemsize}").view(dtype)


def edge_inputs(dtype: str, sorted_ids: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """60 rows of (2, 3) values drawn from a few, so ties are many: NaN (several per segment,
    one with a payload), +-0, +-inf, extremes of integer types; 9 segments, 7 and 8 empty,
    dropped ids (negative or >= n)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "fc":
        real = dt if dt.kind == "f" else np.dtype(f"f{dt.itemsize // 2}")
        pool = np.array([-1.0, 0.0, -0.0, 1.0, 2.0, np.inf, -np.inf, np.nan], real)
        pool = np.append(pool, _nan_with_payload(real))
        data = pool[rng.integers(0, pool.size, (60, 2, 3))].astype(dt)
        if dt.kind == "c":
            data.imag = pool[rng.integers(0, pool.size, (60, 2, 3))]
    elif dt.kind == "b":
        data = rng.random((60, 2, 3)) < 0.8
    else:
        info = np.iinfo(dt)
        pool = np.array(sorted({info.min, 0, 1, info.max}), dt)
        data = pool[rng.integers(0, pool.size, (60, 2, 3))]
    ids = rng.integers(-1, 7, 60) if not sorted_ids else np.sort(rng.integers(0, 7, 60))
    ids[::13] = 9  # >= n: dropped
    if sorted_ids:
        ids = np.sort(ids)
    return data, ids


@default_run(common_dtype)
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize(("op", "dtype"), EDGE_CASES)
def test_joint_and_logical_edges_match_numpy_engine(
    cpp_library: tuple[Any, dict[str, int]], op: str, dtype: str, sorted_ids: bool
) -> None:
    """The CUDA sources (as C++) and their stand-ins, in 1, 4 and 60 blocks (so global row
    numbers cross blocks): the NumPy engine's bytes, NaN payloads of first/last included."""
    data, ids = edge_inputs(dtype, sorted_ids)
    want = numpy_engine_fold(op, data, ids, 9, sorted_ids)
    for blocks in (1, 4, 60):
        for kernels in (NumpyKernels(), CppKernels(*cpp_library, None)):
            got = cpu_fold(op, data, ids, 9, sorted_ids=sorted_ids, kernels=kernels, blocks=blocks)
            assert_kernel_bytes(got, want, op)
            if op in ("first", "last"):  # copies: every bit, NaN payloads too
                assert got.tobytes() == want.tobytes()


def test_argmin_argmax_the_first_nan_wins_and_ties_take_the_first_row(
    cpp_library: tuple[Any, dict[str, int]],
) -> None:
    data = np.array([3.0, 1.0, 0.0, -0.0, np.nan, 1.0, np.nan, 5.0, 0.0, -0.0, 7.0, 7.0])
    ids = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 2])
    for blocks in (1, 5, 12):  # a row's number is global, whichever block holds it
        kernels = CppKernels(*cpp_library, None)
        for op, rows in (("argmin", [4, 8, 10, -1]), ("argmax", [4, 8, 10, -1])):
            got = cpu_fold(
                op, data[:, None], ids, 4, sorted_ids=True, kernels=kernels, blocks=blocks
            )
            assert got[:, 0].tolist() == rows
        without_nan = cpu_fold(
            "argmin", data[:4, None], ids[:4], 1, sorted_ids=False, kernels=kernels, blocks=4
        )
        assert without_nan[:, 0].tolist() == [2]  # -0.0 ties with 0.0: the earlier row


def test_first_last_copy_every_bit(cpp_library: tuple[Any, dict[str, int]]) -> None:
    real = np.array([_nan_with_payload(np.dtype("f8")), -0.0, np.nan, 1.0])
    data = (real + 0j).astype(np.complex128)
    data.imag = real[::-1]
    ids = np.array([1, 1, 0, 0])
    for op, rows in (("first", [2, 0]), ("last", [3, 1])):
        got = cpu_fold(
            op, data[:, None], ids, 2, sorted_ids=False, kernels=CppKernels(*cpp_library, None)
        )
        assert got[:, 0].tobytes() == data[rows].tobytes()


def test_var_of_large_offsets_meets_1e_9_against_two_passes(
    cpp_library: tuple[Any, dict[str, int]],
) -> None:
    rng = np.random.default_rng(14)
    data = 1e9 + rng.random((20_000, 1))
    ids = rng.integers(0, 5, 20_000)
    got = cpu_fold(
        "var", data, ids, 5, sorted_ids=False, kernels=CppKernels(*cpp_library, None), blocks=3
    )
    two_pass = np.array([np.var(data[ids == s]) for s in range(5)])
    np.testing.assert_allclose(got[:, 0], two_pass, rtol=1e-9, atol=0)
    assert got.tobytes() == numpy_engine_fold("var", data, ids, 5, False).tobytes()


def test_logsumexp_bytes_do_not_depend_on_the_blocks(
    cpp_library: tuple[Any, dict[str, int]],
) -> None:
    """Maxima that arrive late move the scaled sums many times; every cut gives the same
    bytes, and the NumPy engine's to the last bit (its ``exp`` is not the C library's)."""
    rng = np.random.default_rng(6)
    data = np.sort(rng.standard_normal(120) * 400)[:, None]
    data[::9] = -1e300
    ids = rng.integers(0, 3, 120)
    runs = {
        cpu_fold(
            "logsumexp",
            data,
            ids,
            3,
            sorted_ids=False,
            kernels=CppKernels(*cpp_library, None),
            blocks=blocks,
        ).tobytes()
        for blocks in (1, 5, 64, 120)
    }
    assert len(runs) == 1
    got = np.frombuffer(runs.pop(), np.float64)
    assert_within_an_ulp(got, numpy_engine_fold("logsumexp", data, ids, 3, False)[:, 0])
    want = [np.logaddexp.reduce(data[ids == s, 0]) for s in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-14)


_POOLS = {
    "f": [-1.0, 0.0, -0.0, 1.0, 2.5, -7.25, 1e3, np.inf, -np.inf, np.nan],
    "i": [-128, -1, 0, 1, 127],
    "u": [0, 1, 255],
}


@st.composite
def joint_cases(draw: st.DrawFn) -> tuple[str, np.ndarray, np.ndarray, int, bool, list[int]]:
    """An op of EDGE_OPS on rows drawn from a few values (ties, NaN, +-0, infinities), ids
    with drops (or sorted), and the rows cut into blocks anywhere."""
    op = draw(st.sampled_from(EDGE_OPS))
    dtype = np.dtype(draw(st.sampled_from(["float16", "float32", "float64", "int8", "uint64"])))
    n, rows, width = (
        draw(st.integers(1, 5)),
        draw(st.integers(1, 40)),
        draw(st.sampled_from([1, 3])),
    )
    data = draw(hnp.arrays(dtype, (rows, width), elements=st.sampled_from(_POOLS[dtype.kind])))
    sorted_ids = draw(st.booleans())
    if sorted_ids:
        ids = np.sort(draw(hnp.arrays(np.int64, rows, elements=st.integers(0, n + 1))))
    else:
        ids = draw(hnp.arrays(np.int64, rows, elements=st.integers(-2, n)))
    cuts = sorted(draw(st.sets(st.integers(1, rows - 1), max_size=3))) if rows > 1 else []
    return op, data, ids, n, sorted_ids, cuts


@settings(max_examples=150, deadline=None)
@given(case=joint_cases())
def test_property_joint_kernels_match_numpy_engine_whatever_the_cuts(
    cpp_library: tuple[Any, dict[str, int]], case: tuple[Any, ...]
) -> None:
    op, data, ids, n, sorted_ids, cuts = case
    want = numpy_engine_fold(op, data, ids, n, sorted_ids)
    state = ops.new_state(ops.get_op(op), n, data.shape[1:], data.dtype)
    kernels = CppKernels(*cpp_library, None)
    for a, b in itertools.pairwise([0, *cuts, ids.shape[0]]):
        fold_block(
            state,
            data[a:b],
            ids[a:b],
            sorted_ids=sorted_ids,
            kernels=kernels,
            xp=np,
            options=DEFAULT_OPTIONS,
            first_row=a,
        )
    got = ops.finalize(state)
    assert_kernel_bytes(got, want, op)
    if op in ("first", "last"):
        assert got.tobytes() == want.tobytes()


class CppEngine(Engine):
    """The CuPy engine with its CUDA sources run as C++ on host arrays: its fold_block, less
    the device transfers (:mod:`segcli.engines.cupy_engine`)."""

    name = "cupy-as-cpp"

    def __init__(self, cpp_library: tuple[Any, dict[str, int]]) -> None:
        self.cpp_library = cpp_library

    def fold_block(self, state, data, ids, *, sorted_ids, first_row) -> None:
        cupy_fold.refuse_without_kernel(state.op)
        native = np.dtype(data.dtype).newbyteorder("=")
        fold_block(
            state,
            np.ascontiguousarray(data, dtype=native),
            np.ascontiguousarray(ids, dtype=np.dtype(ids.dtype).newbyteorder("=")),
            sorted_ids=sorted_ids,
            kernels=CppKernels(*self.cpp_library, None),
            xp=np,
            options=DEFAULT_OPTIONS,
            first_row=first_row,
        )


@pytest.mark.usefixtures("short_lanes")
@pytest.mark.parametrize("op", [name for name in OPS if ops.OPS[name].joint_lanes])
def test_joint_lanes_through_the_cuda_sources_match_numpy_engine(
    cpp_library: tuple[Any, dict[str, int]], op: str
) -> None:
    """var/std's and logsumexp's lanes (dealt every 5 rows here), grouped as virtual segments
    for the compiled seg_joint, folded whole and in blocks that cut the lanes' runs: the NumPy
    engine's result (logsumexp's to the last bit: the C library's exp)."""
    data, ids = make_inputs("float64", 300, 2, 6, sorted_ids=False, seed=13)
    data = data * 600  # logsumexp: values past ops.PLAIN_EXP beside plain ones
    want = numpy_engine_fold(op, data, ids, 6, False)
    engine = CppEngine(cpp_library)
    for cuts in ([], [3, 4, 131, 299], list(range(7, 300, 7))):
        state = engine.new_state(ops.get_op(op), 6, (2,), data.dtype)
        assert state.lanes == 2
        for start, stop in zip([0, *cuts], [*cuts, 300], strict=True):
            engine.fold(state, data[start:stop], ids[start:stop], sorted_ids=False)
        assert_kernel_bytes(ops.finalize(state), want, op)


#: (ids shape, inner shape, sorted): 1-D and N-D ids (--sorted takes 1-D only), no inner
#: dimension, one, two.
_LAYOUTS = {
    "1d": ((40,), (), False),
    "1d-inner": ((40,), (3,), False),
    "nd-inner": ((8, 5), (2, 3), False),
    "1d-sorted": ((40,), (), True),
    "1d-inner-sorted": ((40,), (3,), True),
}


@default_run(common_dtype)
@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        (op, dtype)
        for op in OPS
        for dtype in ("float16", "float64", "int16", "uint64", "complex64", "bool")
        if np.dtype(dtype).kind in ops.get_op(op).data_kinds
    ],
)
def test_library_through_the_cuda_sources_matches_numpy_engine(
    cpp_library: tuple[Any, dict[str, int]], op: str, dtype: str, layout: str
) -> None:
    """The whole library call (validation, N-D ids, inner dimensions, counts) with the CuPy
    engine's fold and kernels: the NumPy engine's result and counts."""
    ids_shape, inner, sorted_ids = _LAYOUTS[layout]
    data, _ = edge_inputs(dtype, sorted_ids, seed=len(layout))
    data = data.reshape(40, -1)[:, : int(np.prod(inner, dtype=int))].reshape(ids_shape + inner)
    rng = np.random.default_rng(len(layout))
    ids = rng.integers(0, 7, 40) if sorted_ids else rng.integers(-1, 6, 40)
    ids = (np.sort(ids) if sorted_ids else ids).reshape(ids_shape)
    want = reduce_arrays(data, ids, 8, op, sorted=sorted_ids, engine="numpy")
    got = reduce_arrays(data, ids, 8, op, sorted=sorted_ids, engine=CppEngine(cpp_library))
    assert got.counts.tobytes() == want.counts.tobytes()
    assert_kernel_bytes(got.result, want.result, op)


@pytest.mark.parametrize("op", JOINT_OPS)
def test_joint_folds_take_one_path_whatever_the_options(op: str) -> None:
    """Every joint fold goes through seg_joint in row order, then counts (var/std count each
    lane's rows too); the options for float sums change nothing."""
    data, ids = make_inputs("float32", 200, 2, 5, sorted_ids=False, seed=11)
    want = numpy_engine_fold(op, data, ids, 5, False)
    for options in (FoldOptions(), FoldOptions(tree_reduce=True), FoldOptions(fast_atomics=True)):
        kernels = NumpyKernels()
        got = cpu_fold(op, data, ids, 5, sorted_ids=False, options=options, kernels=kernels)
        assert got.tobytes() == want.tobytes()
        gathered = op not in ("first", "last")  # narrow rows, read in segment order
        lane_counts = any(i.name == "shifted_count" for i in ops.OPS[op].intermediates)
        counts = ["scatter:count"] * (2 if lane_counts else 1)
        assert kernels.calls == [f"joint:{ops.OPS[op].joint}:True:{gathered}", *counts]


@pytest.mark.parametrize("op", EDGE_OPS)
def test_rows_without_columns_only_count(op: str) -> None:
    ids = np.array([0, 2, 2, -1])
    kernels = NumpyKernels()
    got = cpu_fold(op, np.ones((4, 0)), ids, 3, sorted_ids=False, kernels=kernels)
    assert got.shape == (3, 0) and kernels.calls == ["scatter:count"]


def test_an_op_without_a_kernel_is_refused_before_any_row_moves() -> None:
    unknown = dataclasses.replace(ops.OPS["var"], joint="median")
    assert not cupy_fold.has_kernel(unknown)
    with pytest.raises(EngineUnavailableError, match="no kernel for var yet"):
        cupy_fold.refuse_without_kernel(unknown)
    for op in ops.OPS.values():
        if not op.holistic:  # the sorting ops run on the CPU (segcli.holistic)
            cupy_fold.refuse_without_kernel(op)  # every mergeable op of the table has one


# --- GPU -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu() -> Any:
    """The CuPy engine module, or a skip that says why it cannot run here."""
    try:
        get_engine("cupy")
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    from segcli.engines import cupy_engine

    return cupy_engine


def gpu_fold(engine: Any, op: str, data: Any, ids: Any, n: int, sorted_ids: bool) -> np.ndarray:
    state = engine.new_state(ops.get_op(op), n, tuple(data.shape[1:]), np.dtype(data.dtype))
    engine.fold(state, data.reshape(ids.shape[0], -1), ids, sorted_ids=sorted_ids)
    return ops.finalize(state.to_host())


@pytest.mark.gpu
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize(("op", "dtype"), CASES)
def test_gpu_matches_numpy_engine(gpu: Any, op: str, dtype: str, sorted_ids: bool) -> None:
    """The default engine gives the NumPy engine's bytes; tree_reduce its values within
    rounding."""
    tree = gpu.ENGINE.with_options(tree_reduce=True)
    for rows, width, n in ((1000, 1, 13), (3000, 5, 700), (257, 70, 3)):
        data, ids = make_inputs(dtype, rows, width, n, sorted_ids=sorted_ids, seed=rows)
        want = segcli.segment_reduce(data, ids, n, op, sorted=sorted_ids, engine="numpy")
        got = segcli.segment_reduce(data, ids, n, op, sorted=sorted_ids, engine="cupy")
        assert_kernel_bytes(got, want, op)
        assert_same_result(gpu_fold(tree, op, data, ids, n, sorted_ids), want, op)


@pytest.mark.gpu
@pytest.mark.parametrize("ids_dtype", ["int8", "uint8", "int16", "int32", "uint32", "uint64"])
def test_gpu_every_id_dtype(gpu: Any, ids_dtype: str) -> None:
    data, ids = make_inputs("float32", 5000, 1, 100, sorted_ids=False, ids_dtype=ids_dtype)
    for op in ("sum", "min", "count"):
        want = segcli.segment_reduce(data, ids, 100, op, engine="numpy")
        assert_same_result(segcli.segment_reduce(data, ids, 100, op, engine="cupy"), want, op)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["sum", "mean", "prod", "sqrt_n"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "int64"])
def test_gpu_bytes_do_not_depend_on_blocks(gpu: Any, op: str, dtype: str) -> None:
    data, ids = make_inputs(dtype, 20_000, 2, 50, sorted_ids=False, seed=2)
    want = numpy_engine_fold(op, data, ids, 50, False)
    for block_bytes in (1 << 10, 1 << 14, 1 << 30):
        engine = gpu.CupyEngine(block_bytes=block_bytes)
        assert_same_bytes(gpu_fold(engine, op, data, ids, 50, False), want)


@pytest.mark.gpu
@pytest.mark.parametrize("op", OPS)
def test_gpu_same_bytes_run_after_run(gpu: Any, op: str) -> None:
    tree = gpu.ENGINE.with_options(tree_reduce=True)
    for n, sorted_ids in ((1000, False), (300_000, False), (20, True)):
        data, ids = make_inputs("float32", 1_000_000, 1, n, sorted_ids=sorted_ids, seed=n)
        for engine in (gpu.ENGINE, tree):
            runs = {gpu_fold(engine, op, data, ids, n, sorted_ids).tobytes() for _ in range(3)}
            assert len(runs) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize(("op", "dtype"), EDGE_CASES)
def test_gpu_joint_and_logical_edges(gpu: Any, op: str, dtype: str, sorted_ids: bool) -> None:
    """NaN, ties, +-0, infinities, empty segments, inner dimensions; blocks of a few rows (row
    numbers cross blocks) give the same bytes as one block."""
    data, ids = edge_inputs(dtype, sorted_ids, seed=1)
    want = numpy_engine_fold(op, data, ids, 9, sorted_ids)
    whole = gpu_fold(gpu.ENGINE, op, data, ids, 9, sorted_ids)
    assert_kernel_bytes(whole, want, op)
    if op in ("first", "last"):  # copies: every bit, NaN payloads too
        assert whole.tobytes() == want.tobytes()
    small = gpu.CupyEngine(block_bytes=64)
    assert gpu_fold(small, op, data, ids, 9, sorted_ids).tobytes() == whole.tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("op", JOINT_OPS)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "uint64"])
def test_gpu_joint_bytes_do_not_depend_on_blocks(gpu: Any, op: str, dtype: str) -> None:
    data, ids = make_inputs(dtype, 20_000, 2, 50, sorted_ids=False, seed=2)
    want = numpy_engine_fold(op, data, ids, 50, False)
    runs = set()
    for block_bytes in (1 << 10, 1 << 14, 1 << 30):
        got = gpu_fold(gpu.CupyEngine(block_bytes=block_bytes), op, data, ids, 50, False)
        assert_kernel_bytes(got, want, op)
        runs.add(got.tobytes())
    assert len(runs) == 1


@pytest.mark.gpu
@pytest.mark.parametrize(
    "op",
    ["sum", "min", "prod", "count", "mean", "var", "argmax", "first", "last", "any", "logsumexp"],
)
def test_gpu_streaming_blocks_and_device_inputs(gpu: Any, op: str, monkeypatch) -> None:
    """Many small blocks through the pinned pipeline, device-resident inputs, and several folds
    into one state as the streaming driver makes them: the NumPy engine's bytes every time."""
    import cupy

    # Small chunks and threaded host copies, so these small inputs take the whole pipeline.
    monkeypatch.setattr(gpu, "CHUNK_BYTES", 5000)
    monkeypatch.setattr(gpu, "_PARALLEL_COPY_BYTES", 1000)

    data, ids = make_inputs("float64", 200_000, 3, 999, sorted_ids=False, seed=9)
    small = gpu.CupyEngine(block_bytes=1 << 16)
    host = gpu_fold(small, op, data, ids, 999, False)
    device = gpu_fold(small, op, cupy.asarray(data), cupy.asarray(ids), 999, False)
    assert host.tobytes() == device.tobytes()
    assert_kernel_bytes(host, numpy_engine_fold(op, data, ids, 999, False), op)
    # The streaming driver's way: several folds into one state.
    state = small.new_state(ops.get_op(op), 999, (3,), data.dtype)
    for a in range(0, 200_000, 30_001):
        small.fold(state, data[a : a + 30_001], ids[a : a + 30_001], sorted_ids=False)
    assert ops.finalize(state.to_host()).tobytes() == host.tobytes()


@pytest.mark.gpu
def test_gpu_fast_atomics_within_rounding(gpu: Any) -> None:
    fast = gpu.ENGINE.with_options(fast_atomics=True)
    for n in (10, 5000):
        data, ids = make_inputs("float32", 300_000, 2, n, sorted_ids=False, seed=n)
        for op in ("sum", "mean", "sqrt_n"):
            want = numpy_engine_fold(op, data, ids, n, False)
            assert_same_result(gpu_fold(fast, op, data, ids, n, False), want, op)


@pytest.mark.gpu
def test_gpu_host_input_kinds(gpu: Any, tmp_path: Any, monkeypatch) -> None:
    """Big-endian, strided and memory-mapped host inputs are copied correctly."""
    monkeypatch.setattr(gpu, "CHUNK_BYTES", 7000)
    monkeypatch.setattr(gpu, "_PARALLEL_COPY_BYTES", 1000)
    data, ids = make_inputs("float32", 10_000, 4, 77, sorted_ids=False, seed=4)
    want = numpy_engine_fold("sum", data, ids, 77, False)
    path = tmp_path / "data.npy"
    np.save(path, data)
    for variant in (
        data.astype(">f4"),
        np.asfortranarray(data),
        np.load(path, mmap_mode="r"),
    ):
        got = gpu_fold(gpu.ENGINE, "sum", variant, ids.astype(">i8"), 77, False)
        assert_same_bytes(got, want)


@pytest.mark.gpu
def test_gpu_nan_inf_and_wrap_edges(gpu: Any) -> None:
    data = np.array([1, np.nan, 3, np.inf, np.inf, -np.inf], np.float32)
    ids = np.array([0, 0, 0, 1, 1, 2])
    for op in ("min", "max", "sum"):
        want = segcli.segment_reduce(data, ids, 4, op, engine="numpy")
        got = segcli.segment_reduce(data, ids, 4, op, engine="cupy")
        assert_same_bytes(got, want)
    wrap = segcli.segment_reduce(np.array([2**31 - 1, 1], np.int32), [0, 0], 1, engine="cupy")
    assert wrap[0] == -(2**31)
    assert (
        segcli.segment_reduce(np.array([16, 9], np.int8), [0, 0], 1, "prod", engine="cupy")[0]
        == -112
    )
