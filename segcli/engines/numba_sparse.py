"""The numba engine's fused gather-and-reduce for the sparse family's sum, mean and sqrt_n.

With ``--indices`` the ids are sorted, so each bag (segment) is one run of rows. Each run
gathers its rows straight from the table into a float64 row buffer, in row order, and the
finished row is divided and written into the output in the output dtype: no float64
``n x inner`` state and no separate division pass (the blocked fold's memory and time). The
additions (float64, row order, ``w * x`` as one product then one sum) and the division (one
true division by the count, ``sqrt(count)``, ``sum(w)`` or ``sqrt(sum(w^2))``, 0 for a zero
divisor) are the blocked fold's, so the bytes are the NumPy engine's.

Rows split between threads at run starts, so every bag is folded by one thread and the result
does not depend on the number of threads. A stream's last bag may go on in the next block: it
stays open (:class:`BagFold` keeps its buffer) until a later id or the end closes it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from segcli.engines import numba_cache
from segcli.engines import numba_engine as engine

SUM, MEAN, SQRT_N = 0, 1, 2
MODES = {"sum": SUM, "mean": MEAN, "sqrt_n": SQRT_N}

_JIT: dict[str, Any] = {"cache": True, "nogil": True}
#: Rows ahead whose table row is prefetched: the gather's reads are random, so the hardware
#: cannot guess them (8 ahead measured 1.4x faster than none at half the issue's workload, 16
#: no better than 8).
PREFETCH_ROWS = 8
#: Bytes of a row prefetched: its first cache lines; the hardware follows a wider row itself.
PREFETCH_BYTES = 512


@intrinsic
def _prefetch(typingctx, table, row, offset):  # type: ignore[no-untyped-def]
    """Ask for the cache line ``offset`` bytes into ``table[row]`` (a hint: never faults)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, args[0])
        stride = builder.extract_value(array.strides, 0)
        start = builder.add(builder.mul(args[1], stride), args[2])
        address = builder.add(builder.ptrtoint(array.data, stride.type), start)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        hint = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        prefetch = builder.module.declare_intrinsic("llvm.prefetch", [byte_pointer], hint)
        # A read, kept in every cache level, of data (not instructions).
        flags = [i32(0), i32(3), i32(1)]
        builder.call(prefetch, [builder.inttoptr(address, byte_pointer), *flags])
        return context.get_dummy_value()

    return types.void(table, types.int64, types.int64), codegen


@njit(cache=True, nogil=True, inline="always")
def _prefetch_row(table, row, row_bytes):  # type: ignore[no-untyped-def]
    for offset in range(0, row_bytes, 64):
        _prefetch(table, np.int64(row), np.int64(offset))  # type: ignore[call-arg]


@njit(**_JIT)
def _write(out, counts, s, acc, rows, wsum, wsq, weighted, mode):  # type: ignore[no-untyped-def]
    """Bag ``s`` done: its row count, and its sums divided as the combiner says."""
    counts[s] = rows
    width = acc.shape[0]
    if mode == SUM:
        for j in range(width):
            out[s, j] = acc[j]
        return
    if weighted:
        divisor = wsum if mode == MEAN else np.sqrt(wsq)
        if divisor == 0.0:  # TF's div_no_nan
            for j in range(width):
                out[s, j] = 0
            return
    else:
        divisor = np.float64(rows) if mode == MEAN else np.sqrt(np.float64(rows))
    for j in range(width):
        out[s, j] = acc[j] / divisor


@njit(**_JIT)
def fold_bags(  # type: ignore[no-untyped-def]
    table, ids, indices, weights, weighted, mode, out, counts, carry, bag, sums, a, b
):
    """Rows ``a`` to ``b``: gather, fold and write every bag that ends before ``b``.

    The open bag is ``bag`` (``[id, rows]``, id -1 for none), ``sums`` (``[sum(w),
    sum(w^2)]``) and ``carry`` (its row of sums); a bag still open at ``b`` stays there.
    """
    # A buffer of the kernel's own: LLVM knows it aliases neither the table nor the output,
    # so the row loops vectorise (folding into ``carry`` measured 2x to 3x slower).
    acc = carry.copy()
    current, rows = bag[0], bag[1]
    wsum, wsq = sums[0], sums[1]
    ahead = min(PREFETCH_BYTES, acc.shape[0] * table.itemsize)
    for i in range(a, b):
        if i + PREFETCH_ROWS < b:
            _prefetch_row(table, indices[i + PREFETCH_ROWS], ahead)
        s = np.int64(ids[i])
        if s != current:
            if current >= 0:
                _write(out, counts, current, acc, rows, wsum, wsq, weighted, mode)
            current, rows, wsum, wsq = s, 0, 0.0, 0.0
            acc[:] = 0.0
        if weighted:
            w = np.float64(weights[i])
            _add_weighted(acc, table, indices[i], w)
            wsum += w
            wsq += w * w
        else:
            _add(acc, table, indices[i])
        rows += 1
    carry[:] = acc
    bag[0], bag[1] = current, rows
    sums[0], sums[1] = wsum, wsq


@njit(cache=True, nogil=True, inline="always")
def _add(acc, table, row):  # type: ignore[no-untyped-def]
    for j in range(acc.shape[0]):
        acc[j] += table[row, j]


@njit(cache=True, nogil=True, inline="always")
def _add_weighted(acc, table, row, w):  # type: ignore[no-untyped-def]
    for j in range(acc.shape[0]):
        acc[j] += np.float64(table[row, j]) * w


@njit(**_JIT)
def close_bag(out, counts, acc, bag, sums, weighted, mode):  # type: ignore[no-untyped-def]
    """Write the open bag, if any: no more of its rows follow."""
    if bag[0] >= 0:
        _write(out, counts, bag[0], acc, bag[1], sums[0], sums[1], weighted, mode)
        bag[0], bag[1] = -1, 0


@njit(**_JIT)
def _rows_are_clean(ids, indices, num_segments, data_rows, a, b):  # type: ignore[no-untyped-def]
    """Whether rows ``a`` to ``b`` break no rule: ids non-decreasing from the one before ``a``
    (from 0 at row 0, so none is negative) and below ``num_segments`` (-1: none given),
    indices in ``[0, data_rows)``. A value beyond int64 reads as negative: refused too."""
    previous = np.int64(ids[a - 1]) if a > 0 else np.int64(0)
    for i in range(a, b):
        s = np.int64(ids[i])
        x = np.int64(indices[i])
        if s < previous or (num_segments >= 0 and s >= num_segments) or x < 0 or x >= data_rows:
            return False
        previous = s
    return True


def gather_is_clean(
    ids: np.ndarray, indices: np.ndarray, num_segments: int | None, data_rows: int
) -> bool:
    """One pass (a slice per thread) over a gather's ids and indices: True when no rule is
    broken. Five NumPy passes and their masks took a fifth of a fused gather's time; a broken
    rule is left to the NumPy checker, which names it."""
    _install()
    ids, indices = engine._native(ids), engine._native(indices)
    n = -1 if num_segments is None else num_segments
    parts = engine._splits(ids.shape[0], engine._parts_for(ids.shape[0]))
    checks: list[Callable[[], Any]] = [
        partial(_rows_are_clean, ids, indices, n, data_rows, a, b) for a, b in parts
    ]
    return all(engine._run(checks))


_installed = False


def _install() -> None:
    """This module's kernels cache where the engine's do (once, before the first call)."""
    global _installed
    engine._announce_compilation()
    if not _installed:
        _installed = True
        numba_cache.install(globals())


class _OpenBag:
    """One thread's open bag: its id and rows, its weight sums and its row of sums."""

    def __init__(self, width: int) -> None:
        self.bag = np.array([-1, 0], np.int64)
        self.sums = np.zeros(2, np.float64)
        self.acc = np.zeros(width, np.float64)


class BagFold:
    """Sum, mean or sqrt_n of gathered (and maybe weighted) rows over sorted ids, fused.

    :meth:`fold` takes blocks in row order; :meth:`result` closes the last bag.
    """

    def __init__(
        self,
        table: np.ndarray,
        op: str,
        num_segments: int,
        out_dtype: np.dtype[Any],
        *,
        weighted: bool,
    ) -> None:
        _install()
        self.table = engine._native(table)
        self.mode, self.weighted = MODES[op], weighted
        width = table.shape[1]
        self.out = np.zeros((num_segments, width), out_dtype)
        self.counts = np.zeros(num_segments, np.int64)
        self.open = _OpenBag(width)

    def grow(self, num_segments: int) -> None:
        """At least ``num_segments`` bags, new ones empty; by a quarter at least, so growth
        costs amortised O(n).

        Resized in place (``realloc`` moves a large block's pages without copying them; a
        copy held the old output beside the new one), by a quarter, not doubled: NumPy zeroes
        the added rows, so all of them are resident. Nothing else refers to the arrays while
        bags are folded.
        """
        current = self.counts.shape[0]
        if num_segments <= current:
            return
        grown = max(num_segments, current + current // 4)
        self.out.resize((grown, self.out.shape[1]), refcheck=False)  # new rows are zeros
        self.counts.resize(grown, refcheck=False)

    def fold(self, ids: np.ndarray, indices: np.ndarray, weights: np.ndarray | None) -> None:
        """The next rows: every bag closed in them written, the last one left open."""
        if ids.shape[0] == 0:
            return
        ids, indices = engine._native(ids), engine._native(indices)
        w = np.zeros(0, np.float64) if weights is None else engine._native(weights)
        width = max(1, self.table.shape[1])
        parts = engine._sorted_parts(ids, 0, ids.shape[0], engine._parts_for(ids.size * width))
        # The first part goes on with the open bag; the others start at a run, so each of
        # them ends where the next begins: every part's last bag but the final one is whole.
        bags = [self.open] + [_OpenBag(self.table.shape[1]) for _ in parts[1:]]
        common = (self.table, ids, indices, w, self.weighted, self.mode, self.out, self.counts)
        engine._run(
            [
                partial(fold_bags, *common, bag.acc, bag.bag, bag.sums, a, b)
                for (a, b), bag in zip(parts, bags, strict=True)
            ]
        )
        for bag in bags[:-1]:
            self._close(bag)
        self.open = bags[-1]

    def _close(self, bag: _OpenBag) -> None:
        close_bag(self.out, self.counts, bag.acc, bag.bag, bag.sums, self.weighted, self.mode)

    def result(self, num_segments: int, fill: Any) -> tuple[np.ndarray, np.ndarray]:
        """The first ``num_segments`` bags' values (``(n, width)``) and row counts; empty
        bags get ``fill`` (None: 0)."""
        self._close(self.open)
        out, counts = self.out[:num_segments], self.counts[:num_segments]
        if fill is not None:
            empty = counts == 0
            if empty.any():
                out[empty] = fill
        return out, counts
