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
                squares[k, e] += d * d + (x - x)  # NaN for an inf or NaN value: see ops
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
        squares[g] += d * d + (x - x)


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
    slice measured 1.3x faster than one indexing the lanes' array; an unsigned ``g``, which
    numba indexes without testing for a negative, about 1.5x faster again)."""
    segments = np.uint64(n)
    for r in range(ids.shape[0]):
        g = np.uint64(ids[r])
        if g >= segments:
            continue
        x = np.float64(column[r])
        seen = acc[g, 3]
        if seen == 0.0:
            acc[g, 0] = x
        d = x - acc[g, 0]
        acc[g, 1] += d
        acc[g, 2] += d * d + (x - x)
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
def widened_if_plain(values, out, plain):  # type: ignore[no-untyped-def]
    """``values`` into ``out`` as float64; whether every one is plain (magnitude below
    ``plain``; NaN is not). One pass for the copy and the test (two NumPy passes before the
    copy measured as long as the copy)."""
    every = True
    for i in range(values.shape[0]):
        x = np.float64(values[i])
        out[i] = x
        every &= abs(x) < plain
    return every


@njit(**_JIT)
def logsumexp_arguments(values, reduced, exponent, largest, plain, lowest):  # type: ignore[no-untyped-def]
    """Each value's exponent ``e`` (``ops.scale_of``) and ``exp`` argument ``x - e * ln 2``
    (NumPy takes the ``exp`` next), by the NumPy engine's operations one by one: a plain value
    (magnitude below ``plain``) is its own argument at exponent 0; a value the scaled sum
    leaves out (not finite, or of magnitude ``largest`` or more) gets 0 and ``lowest``. (A
    scalar ``rint`` in the fold's loop, which cannot vectorise, measured 5x slower.)"""
    for i in range(values.shape[0]):
        x = np.float64(values[i])
        if abs(x) < plain:
            reduced[i] = x
            exponent[i] = 0
        elif np.isfinite(x) and abs(x) < largest:
            e = np.rint(x / _LN2)
            reduced[i] = x - e * _LN2
            exponent[i] = np.int64(e)
        else:
            reduced[i] = 0.0
            exponent[i] = lowest


@njit(**_JIT)
def _with_term(total, s, term, e):  # type: ignore[no-untyped-def]
    """``total * 2**s`` plus ``term * 2**e``, as a sum and a scale: the sum first moves to
    ``e`` if larger (a power of two, exact). Scalars only: a helper taking arrays measured 10x
    slower."""
    if e > s:
        total = math.ldexp(total, max(s - e, -2000))
        s = e
    if s - e < _POWERS.shape[0]:
        return total + term * _POWERS[s - e], s
    return total + math.ldexp(term, max(e - s, -2000)), s


@njit(**_JIT)
def _left_out_max(m, x):  # type: ignore[no-untyped-def]
    """np.maximum: a NaN stays, a NaN arriving wins."""
    return m if (m > x or m != m) else x


@njit(**_JIT)
def fold_logsumexp(  # type: ignore[no-untyped-def]
    data, ids, mantissa, exponent, top, scale, sums, count, lowest
):
    """logsumexp's sum ``sum(m * 2**(e - scale))`` at the largest exponent so far, and the max
    of the values it leaves out, in row order (``mantissa`` and ``exponent`` per value of
    ``data``, flat)."""
    n = count.shape[0]
    width = data.shape[1]
    for r in range(data.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        for j in range(width):
            k = g * width + j
            e = exponent[r * width + j]
            if e == lowest:
                top[k] = _left_out_max(top[k], np.float64(data[r, j]))
            elif e == scale[k]:  # the common case: plain values at scale 0
                sums[k] += mantissa[r * width + j]
            else:
                sums[k], scale[k] = _with_term(sums[k], scale[k], mantissa[r * width + j], e)


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
        e = exponent[r]
        if e == lowest:
            top[g] = _left_out_max(top[g], np.float64(column[r]))
        elif e == scale[g]:
            sums[g] += mantissa[r]
        else:
            sums[g], scale[g] = _with_term(sums[g], scale[g], mantissa[r], e)


@njit(**_JIT)
def fold_plain_exps(ids, terms, scale, sums, count, width):  # type: ignore[no-untyped-def]
    """:func:`fold_logsumexp` for a chunk of plain values only: each term ``exp(x)`` (flat, as
    NumPy took it) is at exponent 0, and no value is left out."""
    n = count.shape[0]
    for r in range(ids.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        for j in range(width):
            k = g * width + j
            if scale[k] == 0:
                sums[k] += terms[r * width + j]
            else:
                sums[k], scale[k] = _with_term(sums[k], scale[k], terms[r * width + j], 0)


@njit(**_JIT)
def fold_plain_exps_column(ids, terms, scale, sums, count, width):  # type: ignore[no-untyped-def]
    """:func:`fold_plain_exps` for 1-D data (``width`` 1)."""
    n = count.shape[0]
    for r in range(ids.shape[0]):
        g = ids[r]
        if np.uint64(g) >= np.uint64(n):
            continue
        count[g] += 1
        if scale[g] == 0:
            sums[g] += terms[r]
        else:
            sums[g], scale[g] = _with_term(sums[g], scale[g], terms[r], 0)


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
