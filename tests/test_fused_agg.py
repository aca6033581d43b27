"""The numba engine's one-pass fold of ``agg``'s common lists (sum or mean, min, max, var or
std over a float column) gives the bytes of the part-by-part folds and of the NumPy engine:
lanes dealt every 5 rows, blocks cut anywhere, ties of 0.0 and -0.0 and NaNs (payloads and
signs) whose rows fall in different lanes, ids outside ``[0, n)`` dropped."""

from __future__ import annotations

import numpy as np
import pytest

from segcli import multi, ops
from segcli.engines import get_engine
from segcli.engines import numba_engine as numba_engine_module
from tests.matrix import default_run
from tests.test_engines import needs_numba

pytestmark = [needs_numba, pytest.mark.usefixtures("short_lanes")]

N = 7
LISTS = [
    ("sum", "mean", "min", "max", "std", "count"),
    ("mean", "var"),
    ("min", "max"),
    ("sum", "max"),
    ("min", "std", "count"),
]


def awkward_column(dtype: str, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mostly zeros of both signs (every min and max a tie across lanes), some large values
    (the shifted sums' cancellation), a few NaNs with a sign and a payload, ids from -1 to N."""
    rng = np.random.default_rng([seed, rows, len(dtype)])
    dt = np.dtype(dtype)
    pool = np.array([0.0, -0.0, 0.0, -0.0, 1e6 + 0.5, -3.25], dt)
    data = rng.choice(pool, rows)
    nan_bits = {4: 0xFFC0_0123, 8: 0xFFF8_0000_0000_0123}[dt.itemsize]
    nans = rng.choice(rows, max(1, rows // 5000), replace=False)
    data[nans[::2]] = np.array(nan_bits, f"u{dt.itemsize}").view(dt)
    data[nans[1::2]] = np.nan
    ids = rng.integers(-1, N + 1, rows).astype(np.int32)
    return data, ids


def folded(engine: str, names: tuple[str, ...], data, ids, cuts, *, at_once: bool) -> np.ndarray:
    """The combined op's result (a field per op) over blocks ending at ``cuts``; ``at_once``
    False: the numba engine's one pass turned off (the part-by-part folds)."""
    impl = get_engine(engine)
    op = multi.combined_op(names, data.dtype, ())
    state = ops.new_state(op, N, (), data.dtype)
    start = 0
    for stop in [*cuts, ids.size]:
        rows, block_ids = data[start:stop, None], ids[start:stop]
        if at_once:
            multi.fold_rows(impl, state, rows, block_ids, sorted_ids=False)
        else:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(type(impl), "fold_at_once", lambda *args, **kwargs: False)
                multi.fold_rows(impl, state, rows, block_ids, sorted_ids=False)
        start = stop
    return ops.finalize(state)


def fold_counted(monkeypatch) -> list[int]:
    """Calls of the one-pass fold, counted."""
    calls: list[int] = []
    original = numba_engine_module._fold_fused
    monkeypatch.setattr(
        numba_engine_module, "_fold_fused", lambda *a: calls.append(1) or original(*a)
    )
    return calls


# Each op list compiles a one-pass kernel per dtype (and the part-by-part folds it is held to):
# float32 columns in the default run, float64 in the full matrix (tests/matrix.py's numba rule).
@default_run(lambda dtype: dtype == "float32")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("names", LISTS, ids=",".join)
@pytest.mark.parametrize("cuts", [[], [3, 11, 12, 400, 1234]], ids=["one", "blocks"])
def test_the_one_pass_gives_the_part_by_part_and_numpy_bytes(dtype, names, cuts, monkeypatch):
    data, ids = awkward_column(dtype, 3000, seed=len(names))
    calls = fold_counted(monkeypatch)
    got = folded("numba", names, data, ids, cuts, at_once=True)
    assert calls, "the one-pass fold did not run"
    assert got.tobytes() == folded("numba", names, data, ids, cuts, at_once=False).tobytes()
    numpy = folded("numpy", names, data, ids, cuts, at_once=True)
    for name in names:  # NaN payloads too: arithmetic ops say NaN as NumPy's nan
        assert got[name].tobytes() == numpy[name].tobytes(), name


# float64's threaded kernels compile for this test alone: the full matrix's (tests/matrix.py).
@default_run(lambda dtype: dtype == "float32")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_thread_per_lane_gives_the_same_bytes(dtype, monkeypatch):
    """Blocks of more than PARALLEL_MIN_ELEMENTS rows fold each lane on its own thread."""
    data, ids = awkward_column(dtype, 300_000, seed=1)
    names = LISTS[0]
    calls = fold_counted(monkeypatch)
    got = folded("numba", names, data, ids, [123_457], at_once=True)
    assert calls
    assert got.tobytes() == folded("numba", names, data, ids, [123_457], at_once=False).tobytes()


def test_a_list_of_one_group_keeps_its_own_kernel():
    """sum and mean share one intermediate: nothing to fuse, the sum kernel folds it."""
    op = multi.combined_op(("sum", "mean", "count"), np.dtype(np.float32), ())
    state = ops.new_state(op, N, (), np.dtype(np.float32))
    rows = np.zeros((10, 1), np.float32)
    assert not numba_engine_module._fusable(state, rows, sorted_ids=False)


def test_sorted_ids_skipna_and_wide_rows_fold_part_by_part():
    dtype = np.dtype(np.float64)
    op = multi.combined_op(("sum", "std"), dtype, ())
    state = ops.new_state(op, N, (), dtype)
    assert numba_engine_module._fusable(state, np.zeros((4, 1)), sorted_ids=False)
    assert not numba_engine_module._fusable(state, np.zeros((4, 1)), sorted_ids=True)
    wide = multi.combined_op(("sum", "std"), dtype, (2,))
    wide_state = ops.new_state(wide, N, (2,), dtype)
    assert not numba_engine_module._fusable(wide_state, np.zeros((4, 2)), sorted_ids=False)
    skipping = ops.skipna_op(multi.combined_op(("sum", "std"), dtype, (), skipna=True))
    skip_state = ops.new_state(skipping, N, (), dtype)
    assert not numba_engine_module._fusable(skip_state, np.zeros((4, 1)), sorted_ids=False)
