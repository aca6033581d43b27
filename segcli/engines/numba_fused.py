"""One pass for the common ``agg`` lists (imported only by
:mod:`segcli.engines.numba_engine`): a float column's sum, min, max and var/std's shifted sums
folded together, each row read once, where the combined op folds them part by part otherwise
(:func:`segcli.multi.fold_rows`: a pass over the block per part, and min and max apart).

The bytes are those of the part-by-part folds. Each lane folds its own rows in row order, as
the lane folds of sum and the moments do, so those sums take the same additions in the same
order. min and max keep one state, not a lane each: each lane folds its own candidate per
segment with the row it came from, and the candidates then fold into the state in row order.
The sequential fold's result is the first NaN, else the last row of the extreme value (ties of
0.0 and -0.0 go to the later row; see :func:`segcli.engines.numba_kernels.combine`); a lane's
candidate is the same for its own rows, so folding the candidates by row gives it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from segcli.engines.numba_kernels import lane_piece

_JIT: dict[str, Any] = {"cache": True, "nogil": True}

#: The packed float64 record of a lane and segment: sum, shift, shifted sum, shifted sum of
#: squares, rows (exact in float64 to 2**53).
SUM, SHIFT, SHIFTED_SUM, SQUARES, ROWS = range(5)
RECORD = 5


@njit(**_JIT)
def _fused_run(column, ids, record, extremes, rows, n, first_row, with_moments, with_extremes):  # type: ignore[no-untyped-def]
    """One lane's rows (block-local row 0 is global row ``first_row``) into its records
    ``(n, 5)`` and its min/max candidates ``extremes`` ``(n, 2)`` with their rows."""
    segments = np.uint64(n)
    for r in range(ids.shape[0]):
        g = np.uint64(ids[r])  # unsigned: no wraparound of negative indices to test for
        if g >= segments:
            continue
        v = column[r]
        x = np.float64(v)
        record[g, SUM] += x
        seen = record[g, ROWS]
        if with_moments:
            if seen == 0.0:
                record[g, SHIFT] = x
            d = x - record[g, SHIFT]
            record[g, SHIFTED_SUM] += d
            record[g, SQUARES] += d * d + (x - x)  # NaN for an inf or NaN value: see ops
        record[g, ROWS] = seen + 1.0
        if with_extremes:
            # combine()'s rule: keep the candidate if smaller (larger) or NaN, else take v.
            low = extremes[g, 0]
            if not (low < v or low != low):
                extremes[g, 0] = v
                rows[g, 0] = first_row + r
            high = extremes[g, 1]
            if not (high > v or high != high):
                extremes[g, 1] = v
                rows[g, 1] = first_row + r


@njit(**_JIT)
def fold_fused(  # type: ignore[no-untyped-def]
    column,
    ids,
    records,
    extremes,
    rows,
    n,
    first_row,
    lane_rows,
    lanes,
    lane,
    with_moments,
    with_extremes,
):
    """Rows of a block into the lanes' ``records`` ``(lanes, n + pad, 5)``, ``extremes``
    ``(lanes, n + pad, 2)`` and their ``rows`` (``-1``: no candidate yet); ``lane`` >= 0
    folds that lane's rows only (one thread per lane), -1 every lane's."""
    count = ids.shape[0]
    p = 0
    while p < count:
        end, k = lane_piece(first_row, p, count, lane_rows, lanes)
        if lane < 0 or k == lane:
            _fused_run(
                column[p:end],
                ids[p:end],
                records[k],
                extremes[k],
                rows[k],
                n,
                first_row + p,
                with_moments,
                with_extremes,
            )
        p = end


@njit(**_JIT)
def fold_candidates(state, extremes, rows, which, smallest):  # type: ignore[no-untyped-def]
    """The lanes' candidates of column ``which`` of ``extremes`` into ``state`` (one value per
    segment, from the rows before), in the order of their rows, by combine()'s rule."""
    lanes = rows.shape[0]
    for g in range(state.shape[0]):
        after = np.int64(-1)
        while True:
            k_next = -1
            for k in range(lanes):
                row = rows[k, g, which]
                if row > after and (k_next < 0 or row < rows[k_next, g, which]):
                    k_next = k
            if k_next < 0:
                break
            after = rows[k_next, g, which]
            v = extremes[k_next, g, which]
            acc = state[g]
            if smallest:
                if not (acc < v or acc != acc):
                    state[g] = v
            elif not (acc > v or acc != acc):
                state[g] = v
