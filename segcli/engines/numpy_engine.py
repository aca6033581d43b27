"""The NumPy engine: the reference every other engine is tested against, and the fallback.

Vectorised, no Python loop over rows or segments. Folds whose result depends on the order (float
sums and products) and every fold over unsorted ids go through ``ufunc.at``, which applies rows
in index order (deterministic) and is fast only when the accumulator and the values share a
dtype; they run a chunk of rows at a time through reused buffers, so memory does not grow with
the input. Each lane (see :mod:`segcli.ops`) folds its rows in row order, so that a segment
split across streaming blocks gives the same bytes as one in memory. Sorted ids use
``reduceat`` on run starts where the result cannot depend on the order (integers, min, max).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from segcli import ops
from segcli.engines.base import Engine

#: Elements per block when building the flat index of 2-D rows: bounds the index's memory.
_BLOCK_ELEMENTS = 1 << 20
#: Elements per chunk of an unsorted fold: the reused intp and value buffers hold this many.
_CHUNK_ELEMENTS = 1 << 20


def _kept_rows(ids: np.ndarray, num_segments: int) -> np.ndarray | None:
    """The mask of rows to fold (validation let the others through to be dropped); None when
    every row folds."""
    if ids.size and (
        (ids.dtype.kind == "i" and int(ids.min()) < 0) or int(ids.max()) >= num_segments
    ):
        keep = ids < num_segments
        if ids.dtype.kind == "i":
            keep &= ids >= 0
        return keep
    return None


def _kept_range_sorted(ids: np.ndarray, num_segments: int) -> slice:
    """Sorted ids keep one contiguous range of rows: two binary searches, no copy."""
    if ids.size == 0:
        return slice(0, 0)
    lo = int(np.searchsorted(ids, 0)) if ids.dtype.kind == "i" and ids[0] < 0 else 0
    if int(ids[-1]) < num_segments:
        hi = ids.size
    else:  # n fits the ids' dtype here, since some id is >= n
        hi = int(np.searchsorted(ids, ids.dtype.type(num_segments)))
    return slice(lo, hi)


def _exact_under_reordering(state: ops.State) -> bool:
    acc = state.acc
    return acc is not None and (
        acc.dtype.kind in "iu" or state.op.ufunc in (np.minimum, np.maximum)
    )


def _run_starts(ids: np.ndarray) -> np.ndarray:
    """Where each run of equal (sorted) ids starts."""
    return np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))


class NumpyEngine(Engine):
    name: ClassVar[str] = "numpy"

    def fold_block(
        self,
        state: ops.State,
        data: np.ndarray,
        ids: np.ndarray,
        *,
        sorted_ids: bool,
        first_row: int,
    ) -> None:
        if ids.size == 0:
            return
        if not sorted_ids:
            lanes = ops.lane_pieces(first_row, ids.size, state.lanes)
            self._fold_in_chunks(state, data, ids, lanes)
            return
        kept = _kept_range_sorted(ids, state.num_segments)
        data, ids = data[kept], ids[kept]
        if ids.size == 0:
            return
        if state.acc is not None and not _exact_under_reordering(state):
            # reduceat sums pairwise; float sums and products keep ufunc.at's row order, and
            # sorted ids keep every row in lane 0 (see segcli.ops).
            self._fold_in_chunks(state, data, ids, [(0, ids.size, 0)], drops=False)
        else:
            self._fold_sorted(state, data, ids)

    def _fold_in_chunks(
        self,
        state: ops.State,
        data: np.ndarray,
        ids: np.ndarray,
        lanes: list[tuple[int, int, int]],
        *,
        drops: bool = True,
    ) -> None:
        """A chunk of rows at a time through two reused buffers: the ids as intp (ufunc.at with
        int32 indices measured 2.5x slower) and the values in the accumulator's dtype
        (``ufunc.at`` is fast only when they share it). Whole-array copies cost more than
        the fold in fresh memory, and their size grew with the input. ``drops=False``: every
        id is known to lie in ``[0, n)``."""
        n = state.num_segments
        ufunc = state.op.ufunc
        acc = None
        if ufunc is not None and data.shape[1] > 0:
            # Lane k of segment g is row k * n + g of the accumulator seen as
            # (lanes * n, inner), so one ufunc.at folds every lane, each in row order.
            acc = state.acc.reshape(-1, state.acc.shape[2])
        rows, width = data.shape
        step = max(1, _CHUNK_ELEMENTS // max(1, width))
        index_buffer = np.empty(min(rows, step), np.intp)
        value_buffer = None
        if acc is not None and data.dtype != acc.dtype:
            value_buffer = np.empty((min(rows, step), width), acc.dtype)
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            index = index_buffer[: stop - start]
            np.copyto(index, ids[start:stop], casting="unsafe")
            # Rows validation let through to be dropped (negative ids, or ids >= n) are found
            # on the ids themselves: the intp copy wraps the largest unsigned ones.
            keep = _kept_rows(ids[start:stop], n) if drops else None
            _count_into(state.count, index if keep is None else index[keep])
            if acc is None or ufunc is None:
                continue
            values = data[start:stop]
            if value_buffer is not None:
                values = value_buffer[: stop - start]
                np.copyto(values, data[start:stop], casting="unsafe")
            # Lanes follow row numbers: offset the rows by lane first, then drop.
            _offset_lanes(index, lanes, start, stop, n)
            if keep is not None:
                index, values = index[keep], values[keep]
            _fold_in_order(ufunc, acc, values, index)

    def _fold_sorted(self, state: ops.State, data: np.ndarray, ids: np.ndarray) -> None:
        """Sorted ids where the order cannot matter (counts, integers, min, max): ``reduceat``
        on the run starts, one update per segment."""
        starts = _run_starts(ids)
        segments = ids[starts].astype(np.intp)  # unique: each fancy-index update hits once
        state.count[segments] += np.diff(starts, append=ids.size)
        ufunc = state.op.ufunc
        if ufunc is None or data.shape[1] == 0:
            return
        acc = state.acc[0]
        with np.errstate(invalid="ignore", over="ignore"):
            partial = ufunc.reduceat(data.astype(acc.dtype, copy=False), starts, axis=0)
            acc[segments] = ufunc(acc[segments], partial)


def _offset_lanes(
    index: np.ndarray, lanes: list[tuple[int, int, int]], start: int, stop: int, n: int
) -> None:
    """Add ``lane * n`` to the rows of ``index`` (rows ``[start, stop)`` of the block) that
    ``lanes`` (the block's ``ops.lane_pieces``) deals to lane 1 and up."""
    for a, b, lane in lanes:
        if b <= start or not lane:
            continue
        if a >= stop:
            break
        index[max(a, start) - start : min(b, stop) - start] += lane * n


def _count_into(count: np.ndarray, index: np.ndarray) -> None:
    """Add each segment's rows in ``index`` (intp, within ``[0, len(count))``) to ``count``."""
    if count.shape[0] <= 4 * index.shape[0]:
        count += np.bincount(index, minlength=count.shape[0])
    else:  # few rows for many segments: bincount's O(n) result would cost more than the rows
        np.add.at(count, index, 1)


def _fold_in_order(ufunc: np.ufunc, acc: np.ndarray, values: np.ndarray, index: np.ndarray) -> None:
    """``ufunc.at`` in row order into ``acc`` (2-D); ``values`` have the accumulator's dtype."""
    # NaN compares and integer products wrap by design; neither deserves a warning.
    with np.errstate(invalid="ignore", over="ignore"):
        if values.shape[1] == 1:
            ufunc.at(acc[:, 0], index, values[:, 0])
        else:
            _fold_rows(ufunc, acc, values, index)


def _fold_rows(ufunc: np.ufunc, acc: np.ndarray, values: np.ndarray, ids: np.ndarray) -> None:
    """2-D rows: ``ufunc.at`` on a flat index, built a block of rows at a time."""
    width = values.shape[1]
    flat_acc = acc.reshape(-1)
    columns = np.arange(width, dtype=np.intp)
    step = max(1, _BLOCK_ELEMENTS // width)
    for start in range(0, ids.size, step):
        block_ids = ids[start : start + step]
        flat_index = (block_ids[:, None] * width + columns).reshape(-1)
        ufunc.at(flat_acc, flat_index, values[start : start + step].reshape(-1))


ENGINE = NumpyEngine()
