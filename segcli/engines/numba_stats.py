"""Compiled joint folds of the numba engine: argmin/argmax, first/last, var/std (shifted sums)
and any/all (imported only by :mod:`segcli.engines.numba_engine`).

Each kernel walks a block's rows once, in row order, on the calling thread (the moments
kernels: the rows of one lane, or of each lane in turn): the same steps in the same order as
the NumPy engine's ``ufunc.at`` folds (see :mod:`segcli.engines.numpy_engine`), so the results
are the same bytes whatever the block split or thread. Ids are compared as
``np.uint64(id) < n``, as in :mod:`segcli.engines.numba_kernels`: one test skips the rows to
drop on either side. logsumexp's ``exp`` must be NumPy's own to keep the bytes: its kernels
prepare each value's argument of ``exp`` and fold the results, and NumPy takes the ``exp``
between them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from segcli.engines.numba_kernels import lane_piece

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
def fold_moments(  # type: ignore[no-untyped-def]
    data, ids, shift, shifted_sum, squares, counted, first_row, lane_rows, lanes, lane
):
    """Per lane, sums of the values shifted by the lane's first value of the segment, in
    float64 (``shift``, ``shifted_sum``, ``squares`` and ``counted``, the lane's values per
    element, are ``(lanes, n * width)``; the caller takes the rows from ``counted``). Rows go
    to their lane as ``segcli.ops`` deals them (``lanes`` 1: all to lane 0); ``lane`` >= 0
    folds that lane's rows only (one thread per lane), -1 every lane's."""
    width = data.shape[1]
    n = counted.shape[1] // width if width else 0
    rows = data.shape[0]
    p = 0
    while p < rows:
        end, k = lane_piece(first_row, p, rows, lane_rows, lanes)
        if lane >= 0 and k != lane:
            p = end
            continue
        for r in range(p, end):
            g = ids[r]
            if np.uint64(g) >= np.uint64(n):
                continue
            for j in range(width):
                e = g * width + j
                x = np.float64(data[r, j])
                if counted[k, e] == 0:
                    shift[k, e] = x
                counted[k, e] += 1
                d = x - shift[k, e]
                shifted_sum[k, e] += d
                squares[k, e] += d * d
        p = end


@njit(**_JIT)
def _moments_column_run(column, ids, shift, shifted_sum, squares, counted):  # type: ignore[no-untyped-def]
    """One lane's rows of 1-D data into its own (C-contiguous) intermediates."""
    n = counted.shape[0]
    for r in range(column.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        x = np.float64(column[r])
        if counted[g] == 0:
            shift[g] = x
        counted[g] += 1
        d = x - shift[g]
        shifted_sum[g] += d
        squares[g] += d * d


@njit(**_JIT)
def fold_moments_column(  # type: ignore[no-untyped-def]
    column, ids, shift, shifted_sum, squares, counted, first_row, lane_rows, lanes, lane
):
    """:func:`fold_moments` for 1-D data, a lane's run at a time through its own slices
    (measured 1.5x faster than the inner loop over the width)."""
    rows = column.shape[0]
    p = 0
    while p < rows:
        end, k = lane_piece(first_row, p, rows, lane_rows, lanes)
        if lane < 0 or k == lane:
            _moments_column_run(
                column[p:end], ids[p:end], shift[k], shifted_sum[k], squares[k], counted[k]
            )
        p = end


@njit(**_JIT)
def _moments_run(column, ids, acc, n):  # type: ignore[no-untyped-def]
    """One lane's rows into its packed ``(n, 4)`` state (C-contiguous: a loop over such a
    slice measured 1.3x faster than one indexing the lanes' array)."""
    for r in range(ids.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        x = np.float64(column[r])
        seen = acc[g, 3]
        if seen == 0.0:
            acc[g, 0] = x
        d = x - acc[g, 0]
        acc[g, 1] += d
        acc[g, 2] += d * d
        acc[g, 3] = seen + 1.0


@njit(**_JIT)
def fold_moments_packed(column, ids, packed, n, first_row, lane_rows, lanes, lane):  # type: ignore[no-untyped-def]
    """:func:`fold_moments_column` into a packed state: ``packed[k, g]`` (C-contiguous, ``g``
    below ``n``; rows past it pad the lanes apart) holds lane ``k``'s shift, shifted sum, sum
    of squares and rows of segment ``g`` side by side (the rows in float64: exact to 2**53),
    so a row touches one cache line instead of five arrays. The same additions in the same
    order: the same bits."""
    rows = column.shape[0]
    p = 0
    while p < rows:
        end, k = lane_piece(first_row, p, rows, lane_rows, lanes)
        if lane < 0 or k == lane:
            _moments_run(column[p:end], ids[p:end], packed[k], n)
        p = end


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


_LN2 = math.log(2)
#: ``2.0 ** -d`` for ``d`` in ``[0, 1022]``: every such power is a normal float64, so a
#: product with it is ``ldexp`` (one rounding of the exact value), without ``ldexp``'s call.
_POWERS = np.ldexp(1.0, -np.arange(1023))


@njit(**_JIT)
def logsumexp_arguments(values, reduced, exponent, largest, lowest):  # type: ignore[no-untyped-def]
    """Each value's ``e = rint(x / ln 2)`` and ``exp`` argument ``x - e * ln 2`` (NumPy takes
    the ``exp`` next), by the NumPy engine's operations one by one; a value the scaled sum
    leaves out (not finite, or of magnitude ``largest`` or more) gets 0 and ``lowest``. (A
    scalar ``rint`` in the fold's loop, which cannot vectorise, measured 5x slower.)"""
    for i in range(values.shape[0]):
        x = np.float64(values[i])
        if np.isfinite(x) and abs(x) < largest:
            e = np.rint(x / _LN2)
            reduced[i] = x - e * _LN2
            exponent[i] = np.int64(e)
        else:
            reduced[i] = 0.0
            exponent[i] = lowest


@njit(**_JIT)
def fold_logsumexp(  # type: ignore[no-untyped-def]
    data, ids, mantissa, exponent, top, scale, sums, count, lowest
):
    """logsumexp's max, and its sum ``sum(m * 2**(e - scale))`` at the largest exponent so far,
    in row order (``mantissa`` and ``exponent`` per value of ``data``, flat). A sum moves to a
    larger scale by a power of two, exact."""
    n = count.shape[0]
    width = data.shape[1]
    for r in range(data.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        for j in range(width):
            k = g * width + j
            x = np.float64(data[r, j])
            m = top[k]
            if not (m > x or m != m):  # np.maximum: a NaN stays, a NaN arriving wins
                top[k] = x
            e = exponent[r * width + j]
            if e == lowest:
                continue
            s = scale[k]
            if e > s:
                sums[k] = math.ldexp(sums[k], max(s - e, -2000))
                scale[k] = e
                s = e
            if s - e < _POWERS.shape[0]:
                sums[k] += mantissa[r * width + j] * _POWERS[s - e]
            else:
                sums[k] += math.ldexp(mantissa[r * width + j], max(e - s, -2000))


@njit(**_JIT)
def fold_logsumexp_column(  # type: ignore[no-untyped-def]
    column, ids, mantissa, exponent, top, scale, sums, count, lowest
):
    """:func:`fold_logsumexp` for 1-D data, without the inner loop (measured 2x faster)."""
    n = count.shape[0]
    for r in range(column.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        x = np.float64(column[r])
        m = top[g]
        if not (m > x or m != m):
            top[g] = x
        e = exponent[r]
        if e == lowest:
            continue
        s = scale[g]
        if e > s:
            sums[g] = math.ldexp(sums[g], max(s - e, -2000))
            scale[g] = e
            s = e
        if s - e < _POWERS.shape[0]:
            sums[g] += mantissa[r] * _POWERS[s - e]
        else:
            sums[g] += math.ldexp(mantissa[r], max(e - s, -2000))


# 1-D data without the inner loop over the width: measured 1.5x to 2x faster.


@njit(**_JIT)
def fold_arg_column(column, ids, best, row, count, first_row, smallest):  # type: ignore[no-untyped-def]
    """:func:`fold_arg` for 1-D data."""
    n = count.shape[0]
    for r in range(column.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        v = column[r]
        cur = best[g]
        if row[g] < 0 or (cur == cur and (v != v or (v < cur if smallest else v > cur))):
            best[g] = v
            row[g] = first_row + r


@njit(**_JIT)
def fold_pick_column(column, ids, picked, row, count, first_row, latest):  # type: ignore[no-untyped-def]
    """:func:`fold_pick` for 1-D data."""
    n = count.shape[0]
    unset = np.iinfo(np.int64).max
    for r in range(column.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        if latest or row[g] == unset:
            picked[g] = column[r]
            row[g] = first_row + r


@njit(**_JIT)
def fold_logical_column(column, ids, acc, count, every):  # type: ignore[no-untyped-def]
    """:func:`fold_logical` for 1-D data."""
    n = count.shape[0]
    for r in range(column.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        if every:
            acc[g] = acc[g] and column[r] != 0
        else:
            acc[g] = acc[g] or column[r] != 0
