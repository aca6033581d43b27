"""The NumPy engine: the reference every other engine is tested against, and the fallback.

Vectorised, no Python loop over rows or segments. Unsorted ids fold with ``ufunc.at``, which
applies rows in index order (deterministic) and is fast only when the accumulator and the
values share a dtype, so values are cast to the accumulator's dtype first. Sorted ids use
``reduceat`` on run starts where the result cannot depend on the order of additions (integers,
min, max); float sums and products keep ``ufunc.at``'s row order within each lane (see
:mod:`segcli.ops`), so that a segment split across streaming blocks gives the same bytes as one
in memory.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from segcli import ops
from segcli.engines.base import Engine

#: Elements per block when building the flat index of 2-D rows: bounds the index's memory.
_BLOCK_ELEMENTS = 1 << 20

#: How a block's rows map to lanes: None (all lane 0), ``ops.lane_pieces`` (no row dropped),
#: or each kept row's lane.
Laning = list[tuple[int, int, int]] | np.ndarray | None


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
        kept = (
            _kept_range_sorted(ids, state.num_segments)
            if sorted_ids
            else _kept_rows(ids, state.num_segments)
        )
        # Sorted ids fold every row into lane 0 (see segcli.ops); unsorted ones deal rows to
        # lanes by their global row number, known only before rows are dropped.
        laning: Laning = None
        if state.lanes > 1 and not sorted_ids:
            if kept is None:
                laning = ops.lane_pieces(first_row, ids.size, state.lanes)
            else:
                laning = ops.row_lanes(first_row, ids.size, state.lanes)[kept]
        if kept is not None:
            data, ids = data[kept], ids[kept]
        if ids.size == 0:
            return
        if sorted_ids:
            self._fold_sorted(state, data, ids)
        else:
            self._fold_unsorted(state, data, ids, laning)

    def _fold_unsorted(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, laning: Laning
    ) -> None:
        # One intp copy serves both: bincount and ufunc.at convert other dtypes on every call,
        # and ufunc.at with int32 indices measured 2.5x slower than with intp. With lanes the
        # copy becomes the lane-wise index, so it must be a copy.
        index = ids.astype(np.intp, copy=laning is not None)
        state.count += np.bincount(index, minlength=state.num_segments)
        ufunc = state.op.ufunc
        if ufunc is None or data.shape[1] == 0:
            return
        values = data.astype(state.acc.dtype, copy=False)
        if laning is None:
            _fold_in_order(ufunc, state.acc[0], values, index)
            return
        # Lane k of segment g is row k * n + g of the accumulator seen as (lanes * n, inner),
        # so one ufunc.at folds every lane, each in row order.
        n = state.num_segments
        if isinstance(laning, list):
            for start, stop, lane in laning:
                if lane:
                    index[start:stop] += lane * n
        else:
            index += laning * n
        _fold_in_order(ufunc, state.acc.reshape(-1, state.acc.shape[2]), values, index)

    def _fold_sorted(self, state: ops.State, data: np.ndarray, ids: np.ndarray) -> None:
        starts = _run_starts(ids)
        segments = ids[starts].astype(np.intp)  # unique: each fancy-index update hits once
        state.count[segments] += np.diff(starts, append=ids.size)
        ufunc = state.op.ufunc
        if ufunc is None or data.shape[1] == 0:
            return
        values = data.astype(state.acc.dtype, copy=False)
        acc = state.acc[0]
        with np.errstate(invalid="ignore", over="ignore"):
            if _exact_under_reordering(state):
                partial = ufunc.reduceat(values, starts, axis=0)
                acc[segments] = ufunc(acc[segments], partial)
                return
        # reduceat sums pairwise; float sums keep ufunc.at's row order (see module doc).
        _fold_in_order(ufunc, acc, values, ids.astype(np.intp))


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
