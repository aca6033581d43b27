"""The NumPy engine: the reference every other engine is tested against, and the fallback.

Vectorised, no Python loop over rows or segments. Unsorted ids fold with ``ufunc.at``, which
applies rows in index order (deterministic) and is fast only when the accumulator and the
values share a dtype, so values are cast to the accumulator's dtype first. Sorted ids use
``reduceat`` on run starts where the result cannot depend on the order of additions (integers,
min, max); float sums and products keep ``ufunc.at``'s row order, so that a segment split
across streaming blocks gives the same bytes as one in memory.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from segcli import ops
from segcli.engines.base import Engine

#: Elements per block when building the flat index of 2-D rows: bounds the index's memory.
_BLOCK_ELEMENTS = 1 << 20


def _keep_valid(data: np.ndarray, ids: np.ndarray, num_segments: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop rows whose id validation allowed to drop; ids come back as intp."""
    if ids.size and (
        (ids.dtype.kind == "i" and int(ids.min()) < 0) or int(ids.max()) >= num_segments
    ):
        keep = ids < num_segments
        if ids.dtype.kind == "i":
            keep &= ids >= 0
        data, ids = data[keep], ids[keep]
    return data, ids.astype(np.intp, copy=False)


def _exact_under_reordering(state: ops.State) -> bool:
    acc = state.acc
    return acc is not None and (acc.dtype.kind in "iu" or state.op.ufunc in (np.minimum, np.maximum))


class NumpyEngine(Engine):
    name: ClassVar[str] = "numpy"

    def fold(self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool) -> None:
        data, ids = _keep_valid(data, ids, state.num_segments)
        if ids.size == 0:
            return
        state.count += np.bincount(ids, minlength=state.num_segments)
        ufunc = state.op.ufunc
        if ufunc is None or data.shape[1] == 0:
            return
        values = data.astype(state.acc.dtype, copy=False)
        # NaN compares and integer products wrap by design; neither deserves a warning.
        with np.errstate(invalid="ignore", over="ignore"):
            if sorted_ids and _exact_under_reordering(state):
                _fold_runs(ufunc, state.acc, values, ids)
            elif values.shape[1] == 1:
                ufunc.at(state.acc[:, 0], ids, values[:, 0])
            else:
                _fold_rows(ufunc, state.acc, values, ids)


def _fold_runs(ufunc: np.ufunc, acc: np.ndarray, values: np.ndarray, ids: np.ndarray) -> None:
    """Sorted ids: reduce each run of equal ids with ``reduceat``, then merge runs into ``acc``."""
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    partial = ufunc.reduceat(values, starts, axis=0)
    segments = ids[starts]  # unique, so a fancy-index update touches each segment once
    acc[segments] = ufunc(acc[segments], partial)


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
