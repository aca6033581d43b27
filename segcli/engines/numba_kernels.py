"""Compiled kernels of the numba engine (imported only by :mod:`segcli.engines.numba_engine`).

Every kernel combines each segment's values one after another in global row order within their
lane (see :mod:`segcli.ops`), exactly as the NumPy engine's ``ufunc.at`` does: float sums are
the same sequential float64 additions, so the results are the same bytes as the NumPy engine's,
whatever the block split or the thread a lane runs on.

Ids are read in their own dtype (no intp copy) and used as ``np.uint64(id) < n``: a negative
signed id wraps to a huge unsigned value, so one comparison skips the rows that validation let
through to be dropped on either side, and an unsigned index spares numba's negative-index wrap.

The folds that depend on the op come one per op kind (:data:`FOLD_FLAT`, :data:`FOLD_ROWS`,
:data:`FOLD_RUNS`, indexed by ``SUM``, ``PROD``, ``MIN``, ``MAX``), each with its kind a
compile-time constant: the op switch vanishes from the hot loops, and a run compiles the loops
of the ops it uses only. One kernel per dtype combination taking the kind at run time compiled
every op's loops for each combination (eight unrolled chains each, for sorted runs), most of
them for ops that never meet that accumulator dtype (a min of int8 folds into int8, a sum into
int64). The helpers below the entry points take the kind as their first argument: given a
literal, numba compiles a version of them for that kind alone. They are plain calls that LLVM
inlines, not numba's ``inline="always"``, whose copying of a large body cost more compile time
than the fold's loops.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

SUM, PROD, MIN, MAX = 0, 1, 2, 3
KINDS = (SUM, PROD, MIN, MAX)
#: Runs folded side by side by :func:`_fold_runs`; the unrolled loop there assumes eight.
#: Four left the sorted min bound by the latency of one step (one thread on W3: eight chains
#: measured 1.4x faster for min, the same for sum).
CHAINS = 8

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@njit(cache=True, nogil=True, inline="always")
def combine(kind: int, acc: Any, value: Any) -> Any:
    """One step of a fold."""
    if kind == SUM:
        return acc + value
    if kind == PROD:
        return acc * value
    # np.minimum's own rule, so results match the NumPy engine bit for bit: keep acc if it is
    # smaller or NaN, else take value. NaN propagates (the first NaN wins) and of two equal
    # values (0.0 and -0.0) the later one wins.
    if kind == MIN:
        return acc if (acc < value or acc != acc) else value
    return acc if (acc > value or acc != acc) else value


@njit(cache=True, nogil=True, inline="always")
def lane_piece(first_row, p, rows, lane_rows, lanes):  # type: ignore[no-untyped-def]
    """``(end, lane)``: the piece of rows from ``p`` that stays in one lane, and that lane.

    The lane rule of :mod:`segcli.ops` (``ops.lane_pieces``), compiled: global row ``r`` goes
    to lane ``(r // lane_rows) % lanes``.
    """
    if lanes == 1:
        return rows, 0
    row = first_row + p
    return min(rows, p + lane_rows - row % lane_rows), (row // lane_rows) % lanes


@njit(**_JIT)
def _flat_run(kind, data, ids, acc, count, with_count):  # type: ignore[no-untyped-def]
    """1-D rows into one lane: ``acc[ids[i]] = combine(acc[ids[i]], data[i])`` in row order.

    Called with a literal ``kind`` (one compiled version per kind), so its loops see a
    constant (a runtime one inside the piece loop ran 1.5x slower).
    """
    n = np.uint64(acc.shape[0])
    if with_count:
        for i in range(ids.shape[0]):
            g = np.uint64(ids[i])
            if g < n:
                acc[g] = combine(kind, acc[g], data[i])
                count[g] += 1
    else:
        for i in range(ids.shape[0]):
            g = np.uint64(ids[i])
            if g < n:
                acc[g] = combine(kind, acc[g], data[i])


@njit(**_JIT)
def _rows_run(kind, data, ids, acc, count, with_count):  # type: ignore[no-untyped-def]
    """2-D rows into one lane: each row combines into its segment's accumulator row."""
    n = np.uint64(acc.shape[0])
    # The full-width inner loop vectorises; a loop over a column range measured 2x slower.
    width = data.shape[1]
    for i in range(ids.shape[0]):
        g = np.uint64(ids[i])
        if g < n:
            for j in range(width):
                acc[g, j] = combine(kind, acc[g, j], data[i, j])
            if with_count:
                count[g] += 1


@njit(cache=True, nogil=True, inline="always")
def _fold_pieces(  # type: ignore[no-untyped-def]
    run, kind, data, ids, acc, count, with_count, first_row, lane_rows, lane
):
    """``run`` over each piece of rows that stays in one lane, into that lane's accumulator
    (``acc[k]``). ``lane >= 0`` folds that lane's rows only (one thread per lane); -1 all."""
    lanes = acc.shape[0]
    rows = ids.shape[0]
    p = 0
    while p < rows:
        end, k = lane_piece(first_row, p, rows, lane_rows, lanes)
        if lane < 0 or k == lane:
            run(kind, data[p:end], ids[p:end], acc[k], count, with_count)
        p = end


# The per-kind kernels are closures over the kind, an int, and nothing else: numba keys a
# closure's disk cache by a hash of what it closes over, and a closed-over jitted function
# hashes differently in every process (its cache would never hit).
def _fold_flat_for(kind: int) -> Any:
    @njit(**_JIT)
    def fold_flat(  # type: ignore[no-untyped-def]
        data, ids, acc, count, with_count, first_row, lane_rows, lane
    ):
        """1-D rows, each into its lane (``acc`` is ``(lanes, n)``; see ``segcli.ops``), in
        row order; ``lane`` as in :func:`_fold_pieces`."""
        _fold_pieces(_flat_run, kind, data, ids, acc, count, with_count, first_row, lane_rows, lane)

    return fold_flat


def _fold_rows_for(kind: int) -> Any:
    @njit(**_JIT)
    def fold_rows(  # type: ignore[no-untyped-def]
        data, ids, acc, count, with_count, first_row, lane_rows, lane
    ):
        """2-D rows (``acc`` is ``(lanes, n, width)``), each into its lane; as ``fold_flat``."""
        _fold_pieces(_rows_run, kind, data, ids, acc, count, with_count, first_row, lane_rows, lane)

    return fold_rows


#: ``FOLD_FLAT[kind](data, ids, acc, count, with_count, first_row, lane_rows, lane)``.
FOLD_FLAT = tuple(_fold_flat_for(kind) for kind in KINDS)
#: ``FOLD_ROWS[kind](...)``: the arguments of :data:`FOLD_FLAT`, for 2-D rows.
FOLD_ROWS = tuple(_fold_rows_for(kind) for kind in KINDS)
#: A kernel of this module, whose cache folder is the module's: the engine's test for a cold
#: cache looks there.
fold_flat = FOLD_FLAT[SUM]


@intrinsic
def _add_value_and_one(typingctx, pairs, g, value):  # type: ignore[no-untyped-def]
    """``pairs[g, 0] += value; pairs[g, 1] += 1.0`` as one two-double load, add and store.

    A float sum and its count side by side: LLVM does not pack the two scalar adds itself, and
    the packed form measured 1.2x faster. Each lane of the add is the same IEEE addition.
    """

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        array = context.make_array(signature.args[0])(context, builder, args[0])
        doubles = builder.bitcast(array.data, ir.DoubleType().as_pointer())
        at = builder.gep(doubles, [builder.mul(args[1], ir.Constant(args[1].type, 2))])
        pair_type = ir.VectorType(ir.DoubleType(), 2)
        pointer = builder.bitcast(at, pair_type.as_pointer())
        step = builder.insert_element(
            ir.Constant(pair_type, [0.0, 1.0]), args[2], ir.Constant(ir.IntType(32), 0)
        )
        builder.store(builder.fadd(builder.load(pointer, align=8), step), pointer, align=8)
        return context.get_dummy_value()

    return types.void(pairs, g, value), codegen


@njit(**_JIT)
def _sum_counted_run(data, ids, pairs):  # type: ignore[no-untyped-def]
    """1-D float rows into one lane's ``(n, 2)`` pairs of (sum, count), in row order."""
    n = np.uint64(pairs.shape[0])
    for i in range(ids.shape[0]):
        g = np.uint64(ids[i])
        if g < n:
            _add_value_and_one(pairs, g, np.float64(data[i]))  # type: ignore[call-arg]


@njit(**_JIT)
def fold_sum_counted(data, ids, pairs, first_row, lane_rows, lane):  # type: ignore[no-untyped-def]
    """Float sums of 1-D rows with their counts (``pairs`` is ``(lanes, n, 2)``, C order),
    each row into its lane; ``lane`` as in :func:`_fold_pieces`."""
    if pairs.strides[1] != 16 or pairs.strides[2] != 8:  # the intrinsic's address arithmetic
        raise ValueError("pairs must be C-contiguous float64 (lanes, n, 2)")
    lanes = pairs.shape[0]
    rows = ids.shape[0]
    p = 0
    while p < rows:
        end, k = lane_piece(first_row, p, rows, lane_rows, lanes)
        if lane < 0 or k == lane:
            _sum_counted_run(data[p:end], ids[p:end], pairs[k])
        p = end


@njit(**_JIT)
def count_ids(ids, count):  # type: ignore[no-untyped-def]
    """Rows per segment, skipping ids outside ``[0, n)``."""
    n = np.uint64(count.shape[0])
    for i in range(ids.shape[0]):
        g = np.uint64(ids[i])
        if g < n:
            count[g] += 1


@njit(**_JIT)
def sorted_bounds(ids, n):  # type: ignore[no-untyped-def]
    """``(lo, hi)``: the rows of non-decreasing ``ids`` whose id lies in ``[0, n)``."""
    lo, top = 0, ids.shape[0]
    while lo < top:  # first id >= 0 (always 0 for unsigned ids)
        mid = (lo + top) // 2
        if ids[mid] < 0:
            lo = mid + 1
        else:
            top = mid
    hi, top = lo, ids.shape[0]
    limit = np.uint64(n)
    while hi < top:  # first id >= n; ids from lo on are >= 0, so the unsigned view is monotone
        mid = (hi + top) // 2
        if np.uint64(ids[mid]) < limit:
            hi = mid + 1
        else:
            top = mid
    return lo, hi


@njit(**_JIT)
def run_start(ids, p, lo):  # type: ignore[no-untyped-def]
    """The first row at or after ``lo`` of the run of equal sorted ids that holds row ``p``."""
    value = ids[p]
    top = p
    while lo < top:
        mid = (lo + top) // 2
        if ids[mid] < value:
            lo = mid + 1
        else:
            top = mid
    return lo


@njit(**_JIT)
def run_end(ids, p, hi):  # type: ignore[no-untyped-def]
    """The row after the run of equal sorted ids that starts at ``p`` (galloping search).

    Costs O(log(run length)), so finding all runs never reads every id.
    """
    value = ids[p]
    inside = p  # ids[inside] == value
    step = 1
    while p + step < hi and ids[p + step] == value:
        inside = p + step
        step *= 2
    outside = min(p + step, hi)  # ids[outside] != value, or outside == hi
    while outside - inside > 1:
        mid = (inside + outside) // 2
        if ids[mid] == value:
            inside = mid
        else:
            outside = mid
    return outside


@njit(**_JIT)
def count_runs(ids, count, lo, hi):  # type: ignore[no-untyped-def]
    """Sorted ids: add each run's length to its segment's count."""
    p = lo
    while p < hi:
        end = run_end(ids, p, hi)
        count[np.int64(ids[p])] += end - p
        p = end


@njit(**_JIT)
def _claim(ids, acc, count, start, stop, seg, total, chain, p, hi):  # type: ignore[no-untyped-def]
    """Give ``chain`` the run starting at row ``p`` (or mark it idle); return the next row."""
    if p >= hi:
        seg[chain] = -1
        start[chain] = 0
        stop[chain] = 0
        return p
    end = run_end(ids, p, hi)
    g = np.int64(ids[p])
    seg[chain] = g
    start[chain] = p
    stop[chain] = end
    total[chain] = acc[g]
    count[g] += end - p
    return end


@njit(**_JIT)
def _lockstep(kind, data, start, total, step):  # type: ignore[no-untyped-def]
    """Advance all eight chains by ``step`` rows: eight independent chains of ``combine``."""
    d0 = data[start[0] : start[0] + step]
    d1 = data[start[1] : start[1] + step]
    d2 = data[start[2] : start[2] + step]
    d3 = data[start[3] : start[3] + step]
    d4 = data[start[4] : start[4] + step]
    d5 = data[start[5] : start[5] + step]
    d6 = data[start[6] : start[6] + step]
    d7 = data[start[7] : start[7] + step]
    t0, t1, t2, t3 = total[0], total[1], total[2], total[3]
    t4, t5, t6, t7 = total[4], total[5], total[6], total[7]
    for j in range(step):
        t0 = combine(kind, t0, d0[j])
        t1 = combine(kind, t1, d1[j])
        t2 = combine(kind, t2, d2[j])
        t3 = combine(kind, t3, d3[j])
        t4 = combine(kind, t4, d4[j])
        t5 = combine(kind, t5, d5[j])
        t6 = combine(kind, t6, d6[j])
        t7 = combine(kind, t7, d7[j])
    total[0], total[1], total[2], total[3] = t0, t1, t2, t3
    total[4], total[5], total[6], total[7] = t4, t5, t6, t7
    for chain in range(CHAINS):
        start[chain] += step


@njit(**_JIT)
def _runs_one_by_one(kind, data, ids, acc, count, lo, hi):  # type: ignore[no-untyped-def]
    """Sorted 1-D rows ``[lo, hi)``, one run after the other, each folded in a register."""
    i = lo
    while i < hi:
        g = ids[i]
        t = acc[g]
        j = i
        while j < hi and ids[j] == g:
            t = combine(kind, t, data[j])
            j += 1
        acc[g] = t
        count[g] += j - i
        i = j


@njit(**_JIT)
def _fold_runs(kind, data, ids, acc, count, lo, hi, short_run_rows):  # type: ignore[no-untyped-def]
    """Sorted 1-D rows ``[lo, hi)``: each run of equal ids folds in a register, in row order.

    One run's fold is a chain of dependent additions, as slow as the add's latency; eight runs
    (chains) fold side by side so eight chains are in flight. Counts come from the run lengths.
    Runs shorter than ``short_run_rows`` on average (rows over the ids they span) fold one
    after the other instead: there, handing runs to chains costs more than the chains save.
    """
    if hi > lo and hi - lo < short_run_rows * (np.int64(ids[hi - 1]) - np.int64(ids[lo]) + 1):
        _runs_one_by_one(kind, data, ids, acc, count, lo, hi)
        return
    start = np.zeros(CHAINS, np.int64)
    stop = np.zeros(CHAINS, np.int64)
    seg = np.zeros(CHAINS, np.int64)
    total = np.zeros(CHAINS, acc.dtype)
    p = lo
    for chain in range(CHAINS):
        p = _claim(ids, acc, count, start, stop, seg, total, chain, p, hi)
    while True:
        step = hi  # rows every busy chain can take before one of them finishes its run
        busy = 0
        for chain in range(CHAINS):
            left = stop[chain] - start[chain]
            if seg[chain] >= 0:
                busy += 1
                step = min(step, left)
        if busy == 0:
            break
        if busy == CHAINS:
            _lockstep(kind, data, start, total, step)
        else:
            for chain in range(CHAINS):
                if seg[chain] >= 0:
                    t = total[chain]
                    for j in range(start[chain], start[chain] + step):
                        t = combine(kind, t, data[j])
                    total[chain] = t
                    start[chain] += step
        for chain in range(CHAINS):
            if seg[chain] >= 0 and start[chain] == stop[chain]:
                acc[seg[chain]] = total[chain]
                p = _claim(ids, acc, count, start, stop, seg, total, chain, p, hi)


def _fold_runs_for(kind: int) -> Any:
    @njit(**_JIT)
    def fold_runs(data, ids, acc, count, lo, hi, short_run_rows):  # type: ignore[no-untyped-def]
        """Sorted 1-D rows ``[lo, hi)`` of one kind, as :func:`_fold_runs`."""
        _fold_runs(kind, data, ids, acc, count, lo, hi, short_run_rows)

    return fold_runs


#: ``FOLD_RUNS[kind](data, ids, acc, count, lo, hi, short_run_rows)``.
FOLD_RUNS = tuple(_fold_runs_for(kind) for kind in KINDS)


@njit(**_JIT)
def _first(ids, start, kind, limit):  # type: ignore[no-untyped-def]
    """The first position from ``start`` of a negative id (kind 0), an id >= limit (kind 1)
    or a decrease (kind 2); -1 if none."""
    for i in range(start, ids.shape[0]):
        v = ids[i]
        if kind == 0 and v < 0:
            return i
        if kind == 1 and v >= 0 and np.uint64(v) >= limit:
            return i
        if kind == 2 and i > 0 and v < ids[i - 1]:
            return i
    return -1


@njit(**_JIT)
def scan_ids(ids, n, sorted_ids):  # type: ignore[no-untyped-def]
    """What :class:`segcli.validate.IdScanner` needs from a non-empty block, in one pass.

    Returns ``(negatives, first negative, ids >= n, first such, max, decreases, first
    decrease)``; ``n < 0`` means no n to check against. Counting and the max are branch-free,
    so LLVM vectorises the pass; first positions are looked for only when something counted.
    """
    limit = np.uint64(max(n, 0))
    top = ids[0]
    negatives = 0
    too_big = 0
    decreases = 0
    if sorted_ids:
        for i in range(ids.shape[0]):
            v = ids[i]
            negatives += v < 0
            too_big += (v >= 0) & (np.uint64(v) >= limit)
            top = max(top, v)
            decreases += v < ids[max(i, 1) - 1]
    else:
        for i in range(ids.shape[0]):
            v = ids[i]
            negatives += v < 0
            too_big += (v >= 0) & (np.uint64(v) >= limit)
            top = max(top, v)
    if n < 0:
        too_big = 0
    return (
        negatives,
        _first(ids, 0, 0, limit) if negatives else -1,
        too_big,
        _first(ids, 0, 1, limit) if too_big else -1,
        top,
        decreases,
        _first(ids, 1, 2, limit) if decreases else -1,
    )
