"""Compiled joint folds of the numba engine: argmin/argmax, first/last, var/std (shifted sums)
and any/all (imported only by :mod:`segcli.engines.numba_engine`).

Each kernel walks a block's rows once, in row order, on the calling thread: the same steps in
the same order as the NumPy engine's ``ufunc.at`` folds (see :mod:`segcli.engines.numpy_engine`),
so the results are the same bytes whatever the block split. Ids are compared as
``np.uint64(id) < n``, as in :mod:`segcli.engines.numba_kernels`: one test skips the rows to
drop on either side. logsumexp stays NumPy's: its ``exp`` must be NumPy's own to keep the bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@njit(**_JIT)
def fold_arg(data, ids, best, row, count, first_row, smallest):  # type: ignore[no-untyped-def]
    """argmin (``smallest``) or argmax: the first row of the extreme; a NaN is the extreme."""
    n = count.shape[0]
    width = data.shape[1]
    for r in range(data.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        for j in range(width):
            k = g * width + j
            v = data[r, j]
            cur = best[k]
            if row[k] < 0:
                best[k] = v
                row[k] = first_row + r
            elif cur != cur:
                continue  # NaN already: the first NaN keeps its row
            elif v != v or (v < cur if smallest else v > cur):
                best[k] = v
                row[k] = first_row + r


@njit(**_JIT)
def fold_pick(data, ids, picked, row, count, first_row, latest):  # type: ignore[no-untyped-def]
    """first (the value of the smallest row) or last (``latest``: the largest)."""
    n = count.shape[0]
    width = data.shape[1]
    unset = np.iinfo(np.int64).max
    for r in range(data.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        for j in range(width):
            k = g * width + j
            if latest or row[k] == unset:
                picked[k] = data[r, j]
                row[k] = first_row + r


@njit(**_JIT)
def fold_moments(data, ids, shift, shifted_sum, squares, count):  # type: ignore[no-untyped-def]
    """Sums of the values shifted by the segment's first value, in float64."""
    n = count.shape[0]
    width = data.shape[1]
    for r in range(data.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        fresh = count[g] == 0
        count[g] += 1
        for j in range(width):
            k = g * width + j
            x = np.float64(data[r, j])
            if fresh:
                shift[k] = x
            d = x - shift[k]
            shifted_sum[k] += d
            squares[k] += d * d


@njit(**_JIT)
def fold_logical(data, ids, acc, count, every):  # type: ignore[no-untyped-def]
    """any (a non-zero value; NaN is one) or all (``every``: no zero value)."""
    n = count.shape[0]
    width = data.shape[1]
    for r in range(data.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        for j in range(width):
            k = g * width + j
            if every:
                acc[k] = acc[k] and data[r, j] != 0
            else:
                acc[k] = acc[k] or data[r, j] != 0
