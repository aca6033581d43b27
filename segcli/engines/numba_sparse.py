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

import mmap
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from segcli.engines import numba_cache
from segcli.engines import numba_engine as engine
from segcli.engines.numba_prefetch import emit_prefetch, prefetcher

SUM, MEAN, SQRT_N = 0, 1, 2
MODES = {"sum": SUM, "mean": MEAN, "sqrt_n": SQRT_N}

_JIT: dict[str, Any] = {"cache": True, "nogil": True}
#: Rows ahead whose table row is prefetched: the gather's reads are random, so the hardware
#: cannot guess them (16 ahead measured 1.8x faster than none at half the issue's workload;
#: 8 to 32 alike).
PREFETCH_ROWS = 16
#: Rows ahead whose table row, already on its way to L2, is prefetched again into L1: a demand
#: load that finds its line in L2 still waits for it, and the fold's adds wait with it (at the
#: issue's full scale 0.65 CPU s against 0.69, one thread; 4, 6, 8 alike, 2 and 12 less).
NEAR_ROWS = 8
#: Bytes of a row prefetched: its lines up to this and its last byte (a large table's rows
#: start 16 bytes into a line, so a 256-byte row spans five); the hardware follows a wider row.
#: 512 against 256: float64 rows of 64 folded 8% faster, float32 ones alike.
PREFETCH_BYTES = 512
#: Columns one pass of :func:`_lanes` holds in registers: 8 vectors of 8 float64, the
#: whole row of the issue's 64-wide table, read once a row (16 or 32 a pass measured alike).
WIDE_LANES = 64
#: Columns of the narrow pass, for what is left of a row after the wide ones.
NARROW_LANES = 8
#: Outputs from this size on get pages of their own mapping (see :func:`_output_zeros`).
MAPPED_OUTPUT_BYTES = 32 << 20
#: Rows of a bag folded column chunk by column chunk: few enough that a wide row's lines read
#: by the first chunk are still in the L1 cache for the next.
RUN_ROWS = 64


_prefetch, _prefetch_for_write = prefetcher(), prefetcher(write=True)


@njit(cache=True, nogil=True, inline="always")
def _prefetch_row(table, row, row_bytes):  # type: ignore[no-untyped-def]
    for offset in range(0, min(row_bytes, PREFETCH_BYTES), 64):
        _prefetch(table, np.int64(row), np.int64(offset))
    _prefetch(table, np.int64(row), np.int64(row_bytes - 1))


def _lanes(vectors: int, weighted: bool) -> Any:
    """An intrinsic that folds ``8 * vectors`` columns of a run of gathered rows in registers.

    ``_fold(acc, table, indices, weights, start, stop, column, limit)`` adds ``table[indices[k],
    column:column + 8 * vectors]`` (times ``weights[k]`` if ``weighted``) for ``k`` from
    ``start`` to ``stop``, in row order, into ``acc[column:...]`` (float64): one product and
    one add of each converted value per row, as :func:`_add` and :func:`_add_weighted` do, so
    the bytes are the same. The sums stay in vector registers through the run (LLVM could not
    keep ``acc`` there: it might alias the table) and the row loop carries no alias checks.
    Each row prefetches row ``k + PREFETCH_ROWS`` into L2 and row ``k + NEAR_ROWS`` into L1
    while the first is below ``limit`` (0: none). The table's rows must be contiguous. (Not a
    fused multiply-add for the weighted product, though it rounds alike where the product is
    exact: where both the sum and the value are NaN it may keep either one's sign, where the
    NumPy engine's add keeps the sum's.)
    """

    @intrinsic
    def _fold(typingctx, acc, table, indices, weights, start, stop, column, limit):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            acc_type, table_type, indices_type, weights_type = signature.args[:4]
            sums_array = context.make_array(acc_type)(context, builder, args[0])
            rows_array = context.make_array(table_type)(context, builder, args[1])
            picks_array = context.make_array(indices_type)(context, builder, args[2])
            weights_array = context.make_array(weights_type)(context, builder, args[3])
            start, stop, column, limit = args[4:]
            i64 = ir.IntType(64)
            element = context.get_data_type(table_type.dtype)
            itemsize = context.get_abi_sizeof(element)
            wide = ir.VectorType(ir.DoubleType(), 8)
            narrow = ir.VectorType(element, 8)
            first = builder.bitcast(builder.gep(sums_array.data, [column]), wide.as_pointer())
            slots = [builder.gep(first, [i64(v)]) for v in range(vectors)]
            # Locals, not acc: LLVM promotes them to registers.
            sums = [cgutils.alloca_once(builder, wide) for _ in slots]  # type: ignore[no-untyped-call]
            for total, slot in zip(sums, slots, strict=True):
                builder.store(builder.load(slot, align=8), total)
            table_at = builder.ptrtoint(rows_array.data, i64)
            row_stride = builder.extract_value(rows_array.strides, 0)
            last_byte = builder.sub(
                builder.mul(builder.extract_value(rows_array.shape, 1), i64(itemsize)), i64(1)
            )
            columns_at = builder.add(table_at, builder.mul(column, i64(itemsize)))
            picks_at = builder.ptrtoint(picks_array.data, i64)
            pick_stride = builder.extract_value(picks_array.strides, 0)
            pick_type = context.get_data_type(indices_type.dtype).as_pointer()

            def row_of(k: ir.Value) -> ir.Value:
                at = builder.add(picks_at, builder.mul(k, pick_stride))
                pick = builder.load(builder.inttoptr(at, pick_type))
                return builder.mul(
                    context.cast(builder, pick, indices_type.dtype, types.int64), row_stride
                )

            def fold_row(k: ir.Value, prefetch: bool) -> None:
                if prefetch:
                    row_at = builder.add(table_at, row_of(builder.add(k, i64(PREFETCH_ROWS))))
                    # The lines this fold's columns alone fill need no test of the row's
                    # width: fewer instructions a row (0.72 s against 0.76 at full scale).
                    sure = min(8 * vectors * itemsize, PREFETCH_BYTES)
                    for line in range(0, sure, 64):
                        emit_prefetch(builder, builder.add(row_at, i64(line)))
                    for line in range(sure, PREFETCH_BYTES, 64):
                        # A branch the predictor learns (every row has the same width).
                        with builder.if_then(builder.icmp_signed("<", i64(line), last_byte)):
                            emit_prefetch(builder, builder.add(row_at, i64(line)))
                    emit_prefetch(builder, builder.add(row_at, last_byte))
                    # The same lines of a nearer row into L1: by now they are in L2 or close,
                    # so they hold L1's fill buffers briefly (16 rows ahead into L1 measured
                    # slower than into L2: see numba_prefetch.emit_prefetch).
                    near_at = builder.add(table_at, row_of(builder.add(k, i64(NEAR_ROWS))))
                    for line in range(0, sure, 64):
                        emit_prefetch(builder, builder.add(near_at, i64(line)), near=True)
                    emit_prefetch(builder, builder.add(near_at, last_byte), near=True)
                if weighted:
                    weight = _weight(context, builder, weights_array, weights_type, k)
                    weight = _splat(builder, weight, wide)
                values_at = builder.add(columns_at, row_of(k))
                values = builder.inttoptr(values_at, narrow.as_pointer())
                for v, total in enumerate(sums):
                    value = builder.load(builder.gep(values, [i64(v)]), align=itemsize)
                    converted = _widen(builder, value, table_type.dtype, wide)
                    if weighted:
                        converted = builder.fmul(converted, weight)
                    builder.store(builder.fadd(builder.load(total), converted), total)

            # Two loops, not a test a row: the rows whose row ahead is below ``limit``
            # prefetch it, the rest do not (0.70 s against 0.72 at full scale: a row's
            # instructions are what the fold has left to spend).
            last_ahead = builder.sub(limit, i64(PREFETCH_ROWS))
            split = _clamp(builder, last_ahead, start, stop)
            with cgutils.for_range(builder, builder.sub(split, start)) as loop:
                fold_row(builder.add(start, loop.index), True)
            with cgutils.for_range(builder, builder.sub(stop, split)) as loop:
                fold_row(builder.add(split, loop.index), False)
            for total, slot in zip(sums, slots, strict=True):
                builder.store(builder.load(total), slot, align=8)
            return context.get_dummy_value()

        index = types.int64
        return types.void(acc, table, indices, weights, index, index, index, index), codegen

    return _fold


def _clamp(builder: ir.IRBuilder, value: ir.Value, low: ir.Value, high: ir.Value) -> ir.Value:
    """``value`` clamped to ``[low, high]`` (signed; ``low <= high``)."""
    above = builder.select(builder.icmp_signed("<", value, low), low, value)
    return builder.select(builder.icmp_signed(">", above, high), high, above)


def _widen(builder: ir.IRBuilder, value: ir.Value, dtype: Any, wide: ir.Type) -> ir.Value:
    """A vector of table values as float64: exact, as numba's own conversion."""
    if isinstance(dtype, types.Float):
        return value if dtype.bitwidth == 64 else builder.fpext(value, wide)
    if dtype.signed:
        return builder.sitofp(value, wide)
    return builder.uitofp(value, wide)


def _splat(builder: ir.IRBuilder, value: ir.Value, vector: ir.VectorType) -> ir.Value:
    """``value`` in every lane of ``vector``."""
    lanes = ir.Constant(vector, ir.Undefined)
    for lane in range(vector.count):
        lanes = builder.insert_element(lanes, value, ir.IntType(32)(lane))
    return lanes


def _weight(context: Any, builder: ir.IRBuilder, array: Any, array_type: Any, k: ir.Value) -> Any:
    """``weights[k]`` as float64."""
    stride = builder.extract_value(array.strides, 0)
    at = builder.add(builder.ptrtoint(array.data, stride.type), builder.mul(k, stride))
    pointer = builder.inttoptr(at, context.get_data_type(array_type.dtype).as_pointer())
    return context.cast(builder, builder.load(pointer), array_type.dtype, types.float64)


_fold_wide, _fold_wide_weighted = _lanes(WIDE_LANES // 8, False), _lanes(WIDE_LANES // 8, True)
_fold_narrow = _lanes(NARROW_LANES // 8, False)
_fold_narrow_weighted = _lanes(NARROW_LANES // 8, True)


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
    """Rows ``a`` to ``b``: gather, fold and write every bag that ends before ``b``; False,
    and nothing more folded, at the first row that breaks a rule.

    The open bag is ``bag`` (``[id, rows]``, id -1 for none), ``sums`` (``[sum(w),
    sum(w^2)]``) and ``carry`` (its row of sums); a bag still open at ``b`` stays there.
    The rules are :func:`_rows_are_clean`'s, with the output's rows as ``n``: checked here,
    on the ids and indices the fold reads anyway, rather than in a pass of their own before
    it (that pass read 320 MB more at the issue's full scale).
    """
    # A buffer of the kernel's own: LLVM knows it aliases neither the table nor the output,
    # so the row loops vectorise (folding into ``carry`` measured 2x to 3x slower).
    acc = carry.copy()
    current, rows = bag[0], bag[1]
    wsum, wsq = sums[0], sums[1]
    in_registers = _rows_are_dense(table)
    previous = np.int64(ids[a - 1]) if a > 0 else max(current, np.int64(0))
    i = a
    while i < b:
        s = np.int64(ids[i])
        if s < previous or s >= out.shape[0] or not _picks_in_range(indices, i, table.shape[0]):
            return False
        end = i + 1
        while end < b and ids[end] == s:
            if not _picks_in_range(indices, end, table.shape[0]):
                return False
            end += 1
        previous = s
        if end < b:
            _own_row(out, ids[end])
        if s != current:
            if current >= 0:
                _write(out, counts, current, acc, rows, wsum, wsq, weighted, mode)
            current, rows, wsum, wsq = s, 0, 0.0, 0.0
            acc[:] = 0.0
        if in_registers:
            _fold_run(acc, table, indices, weights, weighted, i, end, b)
            if weighted and mode != SUM:  # a weighted sum divides by neither
                for k in range(i, end):
                    w = np.float64(weights[k])
                    wsum += w
                    wsq += w * w
        else:
            wsum, wsq = _fold_rows(acc, table, indices, weights, weighted, i, end, b, wsum, wsq)
        rows += end - i
        i = end
    # An element loop, not ``carry[:] = acc``: numba's array-to-array assignment brings its
    # shape-mismatch message, whose string formatting took 4 of the kernel's 5 s to compile.
    for k in range(acc.shape[0]):
        carry[k] = acc[k]
    bag[0], bag[1] = current, rows
    sums[0], sums[1] = wsum, wsq
    return True


@njit(cache=True, nogil=True, inline="always")
def _picks_in_range(indices, k, rows):  # type: ignore[no-untyped-def]
    """Whether ``indices[k]`` names a table row (a value beyond int64 reads as negative)."""
    pick = np.int64(indices[k])
    return 0 <= pick < rows


@njit(cache=True, nogil=True, inline="always")
def _own_row(out, s):  # type: ignore[no-untyped-def]
    """Fetch output row ``s`` (the next bag's) to write: the rows are written a bag at a time,
    too far apart for the hardware to fetch them ahead, and a store that misses held up the
    stores behind it (a third of the fold's time at half the issue's workload)."""
    row_bytes = out.shape[1] * out.itemsize
    for offset in range(0, min(row_bytes, PREFETCH_BYTES), 64):
        _prefetch_for_write(out, np.int64(s), np.int64(offset))
    _prefetch_for_write(out, np.int64(s), np.int64(row_bytes - 1))


@njit(cache=True, nogil=True, inline="always")
def _rows_are_dense(table):  # type: ignore[no-untyped-def]
    """Whether :func:`_lanes` may read the table: rows of contiguous values, 8 or more."""
    return table.shape[1] >= NARROW_LANES and table.strides[1] == table.itemsize


@njit(cache=True, nogil=True)
def _fold_run(acc, table, indices, weights, weighted, i, end, b):  # type: ignore[no-untyped-def]
    """One bag's rows ``i`` to ``end`` (of ``b``) into ``acc``, a column chunk at a time, in
    pieces of :data:`RUN_ROWS` rows; the first chunk prefetches the rows ahead."""
    width = acc.shape[0]
    for piece in range(i, end, RUN_ROWS):
        stop = min(piece + RUN_ROWS, end)
        limit = b
        column = 0
        while column + WIDE_LANES <= width:
            if weighted:
                _fold_wide_weighted(acc, table, indices, weights, piece, stop, column, limit)
            else:
                _fold_wide(acc, table, indices, weights, piece, stop, column, limit)
            column, limit = column + WIDE_LANES, 0
        while column + NARROW_LANES <= width:
            if weighted:
                _fold_narrow_weighted(acc, table, indices, weights, piece, stop, column, limit)
            else:
                _fold_narrow(acc, table, indices, weights, piece, stop, column, limit)
            column, limit = column + NARROW_LANES, 0
        for j in range(column, width):
            total = acc[j]
            for k in range(piece, stop):
                if weighted:
                    total += np.float64(table[indices[k], j]) * np.float64(weights[k])
                else:
                    total += table[indices[k], j]
            acc[j] = total


@njit(cache=True, nogil=True)
def _fold_rows(acc, table, indices, weights, weighted, i, end, b, wsum, wsq):  # type: ignore[no-untyped-def]
    """One bag's rows ``i`` to ``end`` (of ``b``) into ``acc``, a row at a time (rows too
    narrow or strided for :func:`_fold_run`); its weight sums go on."""
    ahead = acc.shape[0] * table.itemsize
    for k in range(i, end):
        if k + PREFETCH_ROWS < b:
            _prefetch_row(table, indices[k + PREFETCH_ROWS], ahead)
        if weighted:
            w = np.float64(weights[k])
            _add_weighted(acc, table, indices[k], w)
            wsum += w
            wsq += w * w
        else:
            _add(acc, table, indices[k])
    return wsum, wsq


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
    ids, indices = _as_read(ids), _as_read(indices)
    n = -1 if num_segments is None else num_segments
    parts = engine._splits(ids.shape[0], engine._parts_for(ids.shape[0]))
    checks: list[Callable[[], Any]] = [
        partial(_rows_are_clean, ids, indices, n, data_rows, a, b) for a, b in parts
    ]
    return all(engine._run(checks))


def _as_read(ids_or_indices: np.ndarray) -> np.ndarray:
    """Ids or indices as the kernels read them: native byte order, and uint64 as int64 (the
    same bits). The kernels read every id and index as int64, where a value beyond int64 is
    negative and so refused, so uint64 needs no kernel of its own (each is seconds to compile)."""
    native = engine._native(ids_or_indices)
    return native.view(np.int64) if native.dtype == np.uint64 else native


def _install() -> None:
    """This module's kernels cache where the engine's do (once, before the first call)."""
    engine._announce_compilation()
    numba_cache.install_once(globals())


def _output_zeros(shape: tuple[int, int], dtype: np.dtype[Any]) -> np.ndarray:
    """Zeros for the output; a large one in an anonymous mapping of its own, its pages
    faulted in when it is made (``MAP_POPULATE``, where the system has it).

    NumPy asks for huge pages for a large array (``madvise``), and where the kernel's THP
    defrag setting is ``madvise`` (a common default) the array's first touch then waits while
    memory is compacted to find them: at the issue's full scale, a quarter of the fold's time
    on a busy machine, and most of its run-to-run spread. A plain mapping takes huge pages
    only when they are free (or none), as torch's output does; populated in one call, its
    62,500 page faults stop interrupting the fold (0.78 CPU s against 0.91, alternating)."""
    nbytes = shape[0] * shape[1] * dtype.itemsize
    if nbytes == 0 or nbytes < MAPPED_OUTPUT_BYTES:
        return np.zeros(shape, dtype)
    return np.frombuffer(_mapping(nbytes), dtype).reshape(shape)


def _mapping(nbytes: int) -> mmap.mmap:
    """``nbytes`` of zeroed anonymous memory, populated where the system can. A mapping the
    system refuses is a MemoryError, as ``np.zeros`` of the same size would be (the command
    line's "out of memory" line, not an internal error)."""
    populate = getattr(mmap, "MAP_POPULATE", 0)
    try:
        if not populate:
            return mmap.mmap(-1, nbytes)
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    except OSError as error:
        raise MemoryError(f"cannot map {nbytes:,} bytes for the output: {error}") from error


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
        self.out = _output_zeros((num_segments, width), np.dtype(out_dtype))
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
        if not self.out.flags.owndata:  # a mapped output: resized as an array of its own
            self.out = self.out.copy()
        self.out.resize((grown, self.out.shape[1]), refcheck=False)  # new rows are zeros
        self.counts.resize(grown, refcheck=False)

    def fold(self, ids: np.ndarray, indices: np.ndarray, weights: np.ndarray | None) -> bool:
        """The next rows: every bag closed in them written, the last one left open. False
        when a row breaks a rule (see :func:`fold_bags`): the output is then partial, to be
        thrown away, and the rows are left to a checker that names the rule."""
        if ids.shape[0] == 0:
            return True
        ids, indices = _as_read(ids), _as_read(indices)
        w = np.zeros(0, np.float64) if weights is None else engine._native(weights)
        width = max(1, self.table.shape[1])
        parts = engine._sorted_parts(ids, 0, ids.shape[0], engine._parts_for(ids.size * width))
        # The first part goes on with the open bag; the others start at a run, so each of
        # them ends where the next begins: every part's last bag but the final one is whole.
        bags = [self.open] + [_OpenBag(self.table.shape[1]) for _ in parts[1:]]
        common = (self.table, ids, indices, w, self.weighted, self.mode, self.out, self.counts)
        clean = engine._run(
            [
                partial(fold_bags, *common, bag.acc, bag.bag, bag.sums, a, b)
                for (a, b), bag in zip(parts, bags, strict=True)
            ]
        )
        if not all(clean):
            return False
        for bag in bags[:-1]:
            self._close(bag)
        self.open = bags[-1]
        return True

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
