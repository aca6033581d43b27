"""``--skipna`` float sums folded by the NumPy engine's packed fold, NaN left out in the fold
itself (``NumpyEngine.fold_sum_skipping_nan``): the same state, bit for bit, as the general
path (the identity in each missing value's place, the present values counted apart)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from segcli import ops
from segcli.engines.numpy_engine import NumpyEngine


def values_with_nan(dtype: str, rows: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.normal(0, 1e3, rows).astype(dtype)
    if values.dtype.kind == "f":
        values[rng.random(rows) < 0.1] = np.nan
        values[65530:65545] = np.nan  # across a chunk's and a lane's first boundary
        values[:4] = np.nan  # the first rows: a segment may start with a missing value
    return values


def fold_blocks(
    op: str, values: np.ndarray, ids: np.ndarray, n: int, block: int, *, sorted_ids: bool
) -> ops.State:
    engine = NumpyEngine()
    state = engine.new_state(ops.skipna_op(op), n, (), values.dtype, sorted_ids=sorted_ids)
    column = values.reshape(-1, 1)
    for start in range(0, len(ids), block):
        rows = slice(start, start + block)
        engine.fold(state, column[rows], ids[rows], sorted_ids=sorted_ids)
    return state


def the_bytes(state: ops.State) -> dict[str, Any]:
    arrays = {name: np.asarray(array).tobytes() for name, array in state.arrays.items()}
    return {**arrays, "count": np.asarray(state.count).tobytes(), "rows": state.next_row}


def general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(NumpyEngine, "fold_sum_skipping_nan", lambda *a, **k: None)


@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("block", [200_000, 70_001, 1_000])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int64"])
@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
def test_the_packed_fold_gives_the_general_paths_bytes(
    op: str, dtype: str, block: int, sorted_ids: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, n = 200_000, 7
    values = values_with_nan(dtype, rows)
    ids = np.random.default_rng(1).integers(-1, n + 2, rows)  # dropped: -1 and >= n
    if sorted_ids:
        ids = np.sort(np.clip(ids, 0, None))
    fast = fold_blocks(op, values, ids, n, block, sorted_ids=sorted_ids)
    general_path(monkeypatch)
    general = fold_blocks(op, values, ids, n, block, sorted_ids=sorted_ids)
    assert the_bytes(fast) == the_bytes(general)
    assert ops.skipped_values(fast) == ops.skipped_values(general)


def test_the_packed_fold_is_the_one_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[int] = []
    fold = NumpyEngine.fold_sum_skipping_nan

    def spy(*args: Any, **kwargs: Any) -> Any:
        present = fold(*args, **kwargs)
        taken.append(-1 if present is None else int(present.sum()))
        return present

    monkeypatch.setattr(NumpyEngine, "fold_sum_skipping_nan", spy)
    values = np.array([1.0, np.nan, 2.0, np.nan, 4.0])
    state = fold_blocks("mean", values, np.array([0, 0, 1, 1, 1]), 2, 5, sorted_ids=False)
    assert taken == [3]
    assert state.count.tolist() == [2, 3]
    assert np.asarray(state.arrays["present"])[0, :, 0].tolist() == [1, 2]


def test_a_masked_block_keeps_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> None:
        calls.append(1)

    monkeypatch.setattr(NumpyEngine, "fold_sum_skipping_nan", spy)
    values = np.ma.MaskedArray([1.0, 5.0, 2.0], mask=[False, True, False])
    engine = NumpyEngine()
    state = engine.new_state(ops.skipna_op("sum"), 1, (), np.dtype(np.float64))
    engine.fold(state, values.reshape(-1, 1), np.zeros(3, np.int64), sorted_ids=False)
    assert calls == []
    assert np.asarray(state.arrays["sum"]).sum() == 3.0
    assert np.asarray(state.arrays["present"]).tolist() == [[[2]]]


@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("block", [50_000, 999])
@pytest.mark.parametrize("masked", [False, True], ids=["nan", "masked-ints"])
def test_count_counts_rows_and_present_values(sorted_ids: bool, block: int, masked: bool) -> None:
    rows, n = 50_000, 5
    rng = np.random.default_rng(2)
    ids = rng.integers(-1, n + 1, rows)
    if sorted_ids:
        ids = np.sort(np.clip(ids, 0, None))
    missing = rng.random(rows) < 0.2
    values: Any = rng.normal(size=rows)
    if masked:
        values = np.ma.MaskedArray(rng.integers(0, 9, rows), mask=missing)
    else:
        values[missing] = np.nan
    engine = NumpyEngine()
    state = engine.new_state(ops.skipna_op("count"), n, (), values.dtype, sorted_ids=sorted_ids)
    column = values.reshape(-1, 1)
    for start in range(0, rows, block):
        part = slice(start, start + block)
        engine.fold(state, column[part], ids[part], sorted_ids=sorted_ids)
    kept = (ids >= 0) & (ids < n)
    assert state.count.tolist() == np.bincount(ids[kept], minlength=n).tolist()
    present = np.bincount(ids[kept & ~missing], minlength=n)
    assert np.asarray(state.arrays["present"])[0, :, 0].tolist() == present.tolist()


def sum_blocks(values: np.ndarray, ids: np.ndarray, n: int, block: int) -> ops.State:
    """A plain float sum (no --skipna) folded block by block."""
    engine = NumpyEngine()
    state = engine.new_state(ops.OPS["sum"], n, (), values.dtype)
    for start in range(0, len(ids), block):
        rows = slice(start, start + block)
        engine.fold(state, values.reshape(-1, 1)[rows], ids[rows], sorted_ids=False)
    return state


@pytest.mark.parametrize("skipna", [False, True], ids=["plain", "skipna"])
@pytest.mark.parametrize("block", [70_001, 1_000])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_many_segments_fold_unpacked_with_the_packed_bytes(
    op: str, block: int, skipna: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of few rows among many segments (a --by run over a million keys, streamed) fold
    their sums and counts in place, not packed: the packed fold copies every sum in and out
    each block. The bytes are the packed fold's (and, under --skipna, the general path's)."""
    from segcli.engines import numpy_engine

    rows, n = 200_000, 60_000
    values = values_with_nan("float64", rows)
    values[::997] = -np.inf
    ids = np.random.default_rng(4).integers(-1, n + 2, rows)  # dropped: -1 and >= n

    def fold() -> ops.State:
        if skipna:
            return fold_blocks(op, values, ids, n, block, sorted_ids=False)
        return sum_blocks(values, ids, n, block)

    unpacked: list[int] = []
    plain_unpacked = numpy_engine._PackedSumFolder._fold_unpacked

    def spy(self: Any, lanes: Any, present: Any) -> None:
        unpacked.append(len(lanes))
        plain_unpacked(self, lanes, present)

    monkeypatch.setattr(numpy_engine._PackedSumFolder, "_fold_unpacked", spy)
    sparse = fold()
    assert len(unpacked) == -(-rows // block)  # every block folded unpacked
    monkeypatch.setattr(numpy_engine, "_PACKED_ROWS_PER_SUM", 0)  # every block packed
    unpacked.clear()
    packed = fold()
    assert unpacked == []
    assert the_bytes(sparse) == the_bytes(packed)
    if skipna:
        general_path(monkeypatch)
        general = fold()
        assert the_bytes(sparse) == the_bytes(general)
        assert ops.skipped_values(sparse) == ops.skipped_values(general)
