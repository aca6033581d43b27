"""The NumPy engine: the reference every other engine is tested against, and the fallback.

Vectorised, no Python loop over rows or segments. Folds whose result depends on the order (float
sums and products) and every fold over unsorted ids go through ``ufunc.at``, which applies rows
in index order (deterministic) and is fast only when the accumulator and the values share a
dtype; they run a chunk of rows at a time through reused buffers, so memory does not grow with
the input. Each lane (see :mod:`segcli.ops`) folds its rows in row order, so that a segment
split across streaming blocks gives the same bytes as one in memory. Sorted ids use
``reduceat`` on run starts where the result cannot depend on the order (integers, min, max;
float min and max then pick the tied zero or NaN that their rule picks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from typing import ClassVar

import numpy as np

from segcli import ops
from segcli.engines.base import Engine

#: Elements per block when building the flat index of 2-D rows: bounds the index's memory.
_BLOCK_ELEMENTS = 1 << 20
#: Elements per chunk of an unsorted fold: the reused intp and value buffers hold this many.
_CHUNK_ELEMENTS = 1 << 16
#: var/std's sums are watched for NaN after each chunk (copied before it) while a chunk holds
#: at least this many values per sum: the copy and the look stay small beside the chunk.
_WATCHED_SUMS_PER_CHUNK = 16
#: Rows a block must fold per float sum of its state (lanes x segments) for the packed sum and
#: count (:class:`_PackedSumFolder`) to pay for copying every sum in and out. 512K-row blocks
#: of a --skipna mean, alone: packed faster up to 250K segments (25.8 against 37.3 ns a row),
#: unpacked at a million (61.4 against 66.3); in a streamed --by run over a million keys,
#: where each block's packed copy is fresh memory, unpacked saved 11% of the run's CPU.
_PACKED_ROWS_PER_SUM = 1


def _kept_rows(ids: np.ndarray, num_segments: int) -> np.ndarray | None:
    """The mask of rows to fold (validation let the others through to be dropped); None when
    every row folds.

    Signed ids are compared as their unsigned view, where a negative id is huge: one pass
    over the ids finds both kinds of dropped row.
    """
    if ids.dtype.kind == "i":
        ids = ids.view(ids.dtype.str.replace("i", "u"))
    if ids.size == 0 or int(ids.max()) < num_segments:
        return None
    return ids < num_segments  # some id is >= n here, so n fits the ids' dtype


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


#: The engine's primitive table: each fold kind of :mod:`segcli.ops` as the ufunc whose
#: ``at`` and ``reduceat`` fold it.
_UFUNCS: dict[str, np.ufunc] = {
    "sum": np.add,
    "prod": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
    "any": np.logical_or,
    "all": np.logical_and,
}


def _primitive(state: ops.State) -> np.ufunc | None:
    """The ufunc of the op's one intermediate; None for an op that keeps only the count."""
    fold = state.op.fold
    return None if fold is None else _UFUNCS[fold.kind]


def _exact_under_reordering(state: ops.State) -> bool:
    fold, acc = state.op.fold, state.acc
    return fold is not None and not fold.order_matters(acc.dtype)


def _canonical(array: np.ndarray) -> np.ndarray:
    """The array viewed with NumPy's own descriptor of its dtype.

    ``ufunc.at`` takes its fast path only when the arrays' descriptors are the very objects its
    loop resolved; an equal dtype built another way (``newbyteorder("=")``, as the streaming
    readers build theirs) sent a streamed float32 min through the slow path, 27x slower.
    """
    dtype = array.dtype
    if dtype.kind in "biufc" and dtype.isnative:
        own = np.dtype(dtype.type)
        if own is not dtype:
            return array.view(own)
    return array


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
        if state.op.joint is not None:
            _fold_joint(state, data, ids, first_row, sorted_ids)
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

    def fold_sum_skipping_nan(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
    ) -> np.ndarray | None:
        """``--skipna``'s float sum of 1-D rows (:mod:`segcli.engines.skipping`), NaN left out
        in the packed fold itself: ``state.acc`` gets the present values' sums (the bits of
        folding 0 in each NaN's place), ``state.count`` every row. Returns the present values
        per segment; None, folding nothing, where the packed fold does not apply."""
        if not _packs_count(state, data):
            return None
        present = np.zeros(state.count.shape, np.int64)
        lanes = ops.lane_pieces(state.next_row, ids.size, state.lanes)
        drops = True
        if sorted_ids:  # as fold_block: the kept range, every row in lane 0
            kept = _kept_range_sorted(ids, state.num_segments)
            data, ids = data[kept], ids[kept]
            lanes, drops = [(0, ids.size, 0)] if ids.size else [], False
        _PackedSumFolder(state, data, ids, drops).fold(lanes, present)
        return present

    def _fold_in_chunks(
        self,
        state: ops.State,
        data: np.ndarray,
        ids: np.ndarray,
        lanes: list[tuple[int, int, int]],
        *,
        drops: bool = True,
    ) -> None:
        """Each lane piece (``ops.lane_pieces``) a chunk of rows at a time, into its lane.

        The chunks go through reused buffers small enough to stay in the cache (64K elements
        measured 1.5x faster than 1M): the ids as intp (``ufunc.at`` with int32 indices
        measured 2.5x slower) and the values in the accumulator's dtype (``ufunc.at`` is fast
        only when they share it). Whole-array copies cost more than the fold, and their size
        grew with the input. ``drops=False``: every id is known to lie in ``[0, n)``.
        """
        if state.op.fold is None or data.shape[1] == 0:
            _ChunkFolder(state, data, ids, drops).count_only(lanes)
        elif state.op.fold.kind in _LOGICAL:
            _LogicalFolder(state, data, ids, drops).fold(lanes)
        elif _packs_count(state, data):
            _PackedSumFolder(state, data, ids, drops).fold(lanes)
        else:
            _ChunkFolder(state, data, ids, drops).fold(lanes)

    def _fold_sorted(self, state: ops.State, data: np.ndarray, ids: np.ndarray) -> None:
        """Sorted ids where the order cannot matter (counts, integers, min, max): ``reduceat``
        on the run starts, one update per segment."""
        starts = _run_starts(ids)
        segments = ids[starts].astype(np.intp)  # unique: each fancy-index update hits once
        state.count[segments] += np.diff(starts, append=ids.size)
        primitive = _primitive(state)
        if primitive is None or data.shape[1] == 0:
            return
        acc = state.acc[0]
        with np.errstate(invalid="ignore", over="ignore"):
            values = data.astype(acc.dtype, copy=False)
            partial = primitive.reduceat(values, starts, axis=0)
            if acc.dtype.kind != "f":
                acc[segments] = primitive(acc[segments], partial)
                return
            # Float min and max: the rule's pick of tied values, then the rule's merge.
            _pick_ties_by_rule(values, starts, partial)
            fold = state.op.fold
            assert fold is not None
            acc[segments] = fold.merge_values(acc[segments], partial)


#: Rows a tied run's pick looks at from its end (last zero) or start (first NaN) before a pass
#: over every row: a tie is usually a few rows away.
_TIE_STEPS = 16


def _pick_ties_by_rule(values: np.ndarray, starts: np.ndarray, partial: np.ndarray) -> None:
    """Give float min/max ``partial`` (``reduceat`` of ``values`` on ``starts``) the bits the
    rule picks among tied values: a run's last zero and its first NaN (see
    ``ops.Fold.merge_values``).

    NumPy's SIMD ``reduceat`` may return either of 0.0 and -0.0, and any NaN, of a long run,
    and its float16 loop keeps the earliest zero. Runs whose result is neither zero nor NaN
    cost one look at ``partial``: no pass over the rows.
    """
    for tied, last in ((partial == 0, True), (np.isnan(partial), False)):
        if tied.any():
            runs, columns = np.nonzero(tied)
            rows = _tied_rows(values, starts, runs, columns, last)
            partial[runs, columns] = values[rows, columns]


def _tied_rows(
    values: np.ndarray, starts: np.ndarray, runs: np.ndarray, columns: np.ndarray, last: bool
) -> np.ndarray:
    """The row of the last zero (``last``) or the first NaN of each run's column: each such
    run holds one. Stepped from the run's end or start, the few left after a few steps from
    a reduction of row numbers over every row."""
    ends = np.append(starts[1:], values.shape[0])
    rows: np.ndarray = ends[runs] - 1 if last else starts[runs].astype(np.intp)
    pending = np.arange(runs.size)
    for _ in range(_TIE_STEPS):
        at = values[rows[pending], columns[pending]]
        pending = pending[~(at == 0 if last else np.isnan(at))]
        if pending.size == 0:
            return rows
        rows[pending] += -1 if last else 1
    # Each row's number where it holds a tied value, else one that loses the reduction.
    tie = values == 0 if last else np.isnan(values)
    numbers = np.arange(values.shape[0], dtype=np.intp)[:, None]
    marks = np.where(tie, numbers, -1 if last else values.shape[0])
    picked = (np.maximum if last else np.minimum).reduceat(marks, starts, axis=0)
    rows[pending] = picked[runs[pending], columns[pending]]
    return rows


def _packs_count(state: ops.State, data: np.ndarray) -> bool:
    """A float sum of 1-D rows: each sum and its count can fold as the parts of one complex."""
    fold = state.op.fold
    return (
        fold is not None
        and fold.kind == "sum"
        and state.acc.dtype == np.float64
        and data.shape[1] == 1
    )


class _ChunkFolder:
    """Walks a block's lane pieces a chunk of rows at a time, with the ids as intp in a
    reused buffer and the rows to drop found per chunk."""

    def __init__(self, state: ops.State, data: np.ndarray, ids: np.ndarray, drops: bool):
        self.state, self.data, self.ids, self.drops = state, data, ids, drops
        rows, width = data.shape
        self.step = max(1, _CHUNK_ELEMENTS // max(1, width))
        self.index_buffer = np.empty(min(rows, self.step), np.intp)

    def chunks(
        self, lanes: list[tuple[int, int, int]]
    ) -> Iterator[tuple[slice, int, np.ndarray, np.ndarray | None]]:
        """``(rows, lane, ids as intp, mask of the rows to keep or None)`` per chunk."""
        for a, b, lane in lanes:
            for start in range(a, b, self.step):
                rows = slice(start, min(b, start + self.step))
                index = self.index_buffer[: rows.stop - start]
                ids = self.ids[rows]
                np.copyto(index, ids, casting="unsafe")
                keep = _kept_rows(ids, self.state.num_segments) if self.drops else None
                yield rows, lane, index, keep

    def count_only(self, lanes: list[tuple[int, int, int]]) -> None:
        for _, _, index, keep in self.chunks(lanes):
            _count_into(self.state.count, index if keep is None else index[keep])

    def fold(self, lanes: list[tuple[int, int, int]]) -> None:
        state = self.state
        primitive = _primitive(state)
        assert state.acc is not None and primitive is not None
        acc = state.acc
        if acc.dtype == np.float16:
            # float16 min/max: NumPy's float16 loops keep the earlier of 0.0 and -0.0, its
            # float32 loops the later one, the rule of every engine. The widening is exact.
            acc = acc.astype(np.float32)
        value_buffer = None
        if self.data.dtype != acc.dtype:
            value_buffer = np.empty((self.index_buffer.size, self.data.shape[1]), acc.dtype)
        for rows, lane, index, keep in self.chunks(lanes):
            values = self.data[rows]
            if value_buffer is not None:
                values = value_buffer[: index.size]
                np.copyto(values, self.data[rows], casting="unsafe")
            if keep is not None:
                index, values = index[keep], values[keep]
            _count_into(state.count, index)
            _fold_in_order(primitive, acc[lane], values, index)
        if acc is not state.acc:
            state.acc[...] = acc  # float16 values (or the identity's +-inf): exact


class _PackedSumFolder(_ChunkFolder):
    """Float sums of 1-D rows with their counts in one ``np.add.at``: the sum is the real part
    and the count the imaginary part of a complex128 accumulator, each value ``x + 1j``.

    A complex add is two independent float64 adds, so the sums are the same bits as a plain
    float64 fold, and counts are exact to 2**53 rows. One pass instead of two measured 1.3x
    faster than ``np.add.at`` plus ``np.bincount``.

    With ``present`` (``--skipna``), a NaN value folds as ``0 + 0j``: the imaginary parts
    count the present values into ``present``, and the NaN rows are counted apart, so that
    ``state.count`` still gets every row. No mask or substitute of the whole block is built.
    """

    def chunks(
        self, lanes: list[tuple[int, int, int]]
    ) -> Iterator[tuple[slice, int, np.ndarray, np.ndarray | None]]:
        """As :meth:`_ChunkFolder.chunks`, but ids that are intp already (the ids of a ``--by``
        run) are read in place: the copy into the reused buffer pays only for other dtypes."""
        if self.ids.dtype != np.intp:
            yield from super().chunks(lanes)
            return
        for a, b, lane in lanes:
            for start in range(a, b, self.step):
                rows = slice(start, min(b, start + self.step))
                ids = self.ids[rows]
                keep = _kept_rows(ids, self.state.num_segments) if self.drops else None
                yield rows, lane, ids, keep

    def fold(self, lanes: list[tuple[int, int, int]], present: np.ndarray | None = None) -> None:
        state = self.state
        assert state.acc is not None
        folded_rows = sum(b - a for a, b, _ in lanes)
        if state.acc.shape[0] * state.acc.shape[1] * _PACKED_ROWS_PER_SUM > folded_rows:
            # More sums than the rows can pay for: packing copies every sum in and out (and
            # counts NaN rows in an array of n), a cost that grows with n, not with the rows.
            self._fold_unpacked(lanes, present)
            return
        pairs = np.empty(state.acc.shape[:2], np.complex128)
        pairs.real = state.acc[:, :, 0]
        pairs.imag = 0.0
        value_buffer = np.empty(self.index_buffer.size, np.complex128)
        value_buffer.imag = 1.0  # the chunks below write only the real parts
        column = self.data[:, 0]
        # Only --skipna counts its NaN rows apart; a plain fold must not pay n counters more.
        nan_rows = np.zeros_like(state.count) if present is not None else None
        for rows, lane, index, keep in self.chunks(lanes):
            values = value_buffer[: index.size]
            np.copyto(values.real, column[rows], casting="unsafe")
            nan = _nan_positions(column[rows]) if present is not None else None
            if nan is not None:
                assert nan_rows is not None
                values[nan] = 0
                counted = nan if keep is None else nan[keep[nan]]
                _count_into(nan_rows, index[counted])
            if keep is not None:
                index, values = index[keep], values[keep]
            with np.errstate(invalid="ignore", over="ignore"):
                np.add.at(pairs[lane], index, values)
            if nan is not None:
                value_buffer[nan] = 1j  # the parts the next chunk expects
        state.acc[:, :, 0] = pairs.real
        counted_rows = pairs.imag.sum(axis=0).astype(np.int64)
        state.count += counted_rows
        if present is not None and nan_rows is not None:
            state.count += nan_rows
            present += counted_rows

    def _fold_unpacked(self, lanes: list[tuple[int, int, int]], present: np.ndarray | None) -> None:
        """:meth:`fold` for few rows among many segments: the float64 sums and the counts in
        place, each updated only where a row falls (the bits of the packed fold: the real part
        of a complex add is the same float add)."""
        state = self.state
        assert state.acc is not None
        value_buffer = np.empty(self.index_buffer.size)
        column = self.data[:, 0]
        for rows, lane, index, keep in self.chunks(lanes):
            values = value_buffer[: index.size]
            np.copyto(values, column[rows], casting="unsafe")
            nan = _nan_positions(column[rows]) if present is not None else None
            if nan is not None:
                values[nan] = 0  # --skipna: a NaN adds nothing, and is not a present value
                assert present is not None
                np.subtract.at(present, index[nan if keep is None else nan[keep[nan]]], 1)
            if keep is not None:
                index, values = index[keep], values[keep]
            with np.errstate(invalid="ignore", over="ignore"):
                np.add.at(state.acc[lane, :, 0], index, values)
            np.add.at(state.count, index, 1)
            if present is not None:
                np.add.at(present, index, 1)


def _nan_positions(values: np.ndarray) -> np.ndarray | None:
    """Where ``values`` (1-D) hold NaN, or None where none does (the positions, not a mask:
    missing values are few, and the packed values are set by these alone)."""
    if values.dtype.kind not in "fc":
        return None
    nan = np.isnan(values)
    return np.flatnonzero(nan) if nan.any() else None


#: Logical folds: the value each one's first flipping element sets, and what flips it.
_LOGICAL = {"any": True, "all": False}


class _LogicalFolder(_ChunkFolder):
    """any/all: an element's flag flips at its first non-zero (any) or zero (all) value, and
    stays; the order cannot matter, so the flipping elements are set at once, no ``ufunc.at``
    (``logical_or.at`` measured 4x slower than a float ``add.at``). NaN is non-zero."""

    def fold(self, lanes: list[tuple[int, int, int]]) -> None:
        state = self.state
        assert state.op.fold is not None
        flipped = _LOGICAL[state.op.fold.kind]
        flags = state.acc[0].reshape(-1)
        width = self.data.shape[1]
        columns = np.arange(width, dtype=np.intp)
        for rows, _, index, keep in self.chunks(lanes):
            values = self.data[rows]
            if keep is not None:
                values = values[keep]
                index = index[keep]
            _count_into(state.count, index)
            flips = values != 0 if flipped else values == 0
            if width == 1:
                flags[index[flips[:, 0]]] = flipped
            else:
                flags[(index[:, None] * width + columns)[flips]] = flipped


def _count_into(count: np.ndarray, index: np.ndarray) -> None:
    """Add each segment's rows in ``index`` (intp, within ``[0, len(count))``) to ``count``."""
    if count.shape[0] <= 4 * index.shape[0]:
        count += np.bincount(index, minlength=count.shape[0])
    else:  # few rows for many segments: bincount's O(n) result would cost more than the rows
        np.add.at(count, index, 1)


def _fold_in_order(ufunc: np.ufunc, acc: np.ndarray, values: np.ndarray, index: np.ndarray) -> None:
    """``ufunc.at`` in row order into ``acc`` (2-D); ``values`` have the accumulator's dtype."""
    acc, values = _canonical(acc), _canonical(values)
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


# --- joint folds: every intermediate of the op at once, in row order (per lane) ------------


@dataclass
class _Chunk:
    """Some consecutive rows of a block, those to drop left out."""

    #: The block-local position of the chunk's first row.
    start: int
    #: The ids of the kept rows, as intp.
    index: np.ndarray
    #: Which of the chunk's rows are kept (None: all).
    keep: np.ndarray | None
    #: The kept rows, 2-D ``(rows, inner_size)``.
    values: np.ndarray

    def positions(self) -> np.ndarray:
        """The block-local position of each kept row (int64)."""
        rows = np.arange(self.start, self.start + self.size_before_keep, dtype=np.int64)
        return rows if self.keep is None else rows[self.keep]

    @property
    def size_before_keep(self) -> int:
        return self.index.size if self.keep is None else self.keep.size


@dataclass
class _JointBlock:
    """A block of rows for a joint fold: its state, rows and first global row."""

    state: ops.State
    data: np.ndarray
    ids: np.ndarray
    first_row: int
    #: Sorted ids fold every row into lane 0 (see segcli.ops).
    sorted_ids: bool = False
    #: The block-local row ranges a fold walks, in row order (one lane's runs of rows);
    #: None: every row.
    ranges: list[tuple[int, int]] | None = None

    @property
    def width(self) -> int:
        return int(self.data.shape[1])

    def lane_pieces(self) -> list[tuple[int, int, int]]:
        """``(start, stop, lane)`` of the block's runs of rows, each within one lane of the
        state (:attr:`segcli.ops.Op.joint_lanes`); one piece into lane 0 for one lane."""
        lanes = 1 if self.sorted_ids else self.state.lanes
        return ops.lane_pieces(self.first_row, int(self.ids.size), lanes)

    def lane_runs(self) -> list[tuple[int, list[tuple[int, int]]]]:
        """Each lane the block reaches, in lane order, with its runs of rows in row order."""
        pieces = self.lane_pieces()
        lanes = sorted({lane for _, _, lane in pieces})
        return [(lane, [(a, b) for a, b, k in pieces if k == lane]) for lane in lanes]

    def chunks(
        self, *, reverse: bool = False, rows: tuple[int, int] | None = None
    ) -> Iterator[_Chunk]:
        """The block (or its ``rows``, a range; else its :attr:`ranges`) a chunk at a time
        (last chunk first with ``reverse``)."""
        if rows is None and self.ranges is not None:
            for piece in reversed(self.ranges) if reverse else self.ranges:
                yield from self.chunks(reverse=reverse, rows=piece)
            return
        step = max(1, _CHUNK_ELEMENTS // max(1, self.width))
        low, high = (0, self.ids.size) if rows is None else rows
        starts = range(low, high, step)
        for start in reversed(starts) if reverse else starts:
            stop = min(high, start + step)
            chunk_ids = self.ids[start:stop]
            keep = _kept_rows(chunk_ids, self.state.num_segments) if self.drops else None
            index = chunk_ids.astype(np.intp, copy=False)  # read only: int64 ids as they are
            values = _canonical(self.data[start:stop])
            if keep is not None:
                index, values = index[keep], values[keep]
            yield _Chunk(start, index, keep, values)

    def walked(self) -> list[tuple[int, int]]:
        """The row ranges the block's folds walk: its :attr:`ranges`, or all its rows."""
        return [(0, int(self.ids.size))] if self.ranges is None else self.ranges

    def walked_rows(self) -> np.ndarray:
        """Which rows of the block its folds walk (a mask)."""
        mask = np.zeros(self.ids.size, np.bool_)
        for start, stop in self.walked():
            mask[start:stop] = True
        return mask

    @cached_property
    def drops(self) -> bool:
        """Whether any row is to be dropped: one pass over the ids the block walks says
        whether any chunk needs a mask."""
        n = self.state.num_segments
        ids = [self.ids[start:stop] for start, stop in self.walked() if stop > start]
        return any(int(_unsigned(run).max()) >= n for run in ids)

    @cached_property
    def finite(self) -> bool:
        """Whether every value of the block is finite (once per block, not per lane)."""
        return _finite(self.data)

    def elements(self, index: np.ndarray) -> np.ndarray:
        """The flat state element of each value of rows with ids ``index``."""
        width = self.width
        if width == 1:
            return index
        return (index[:, None] * width + np.arange(width, dtype=np.intp)).reshape(-1)


#: ``fold(block)``: folds every row of the block into its state, counts included.
JointFold = Callable[[_JointBlock], None]


def _count_block(block: _JointBlock) -> None:
    for chunk in block.chunks():
        _count_into(block.state.count, chunk.index)


def _fold_moments(block: _JointBlock) -> None:
    """Per lane, sums of values shifted by the lane's first value of the segment (in row
    order within the lane, so neither the shift nor the sums depend on how rows were cut into
    blocks), and the rows it counted; lanes fold one after the other."""
    state = block.state
    if block.width == 0:
        _count_block(block)
        return
    for lane, rows in block.lane_runs():
        state.count += _fold_moments_lane(block, lane, rows)


def _fold_moments_lane(block: _JointBlock, lane: int, pieces: list[tuple[int, int]]) -> np.ndarray:
    """One lane's rows (``pieces``, block-local ranges in row order) into its shifted sums;
    returns the rows it counted per segment.

    Both sums fold in one ``np.add.at`` as the parts of a complex128 (two independent float64
    additions each: the bits of two separate folds), each value ``d + 1j * d * d``.
    """
    state, width = block.state, block.width
    arrays = flat_intermediates(state, lane)
    shift, counted = arrays["shift"], arrays["shifted_count"]
    # Columns are counted alike (--skipna folds one column at a time): column 0 tells.
    before = counted[::width].copy()
    rows = before.copy()
    pairs = np.empty(shift.size, np.complex128)
    pairs.real, pairs.imag = arrays["shifted_sum"], arrays["shifted_squares"]
    terms_buffer = np.empty(0, np.complex128)
    widened_buffer = np.empty(0, np.float64)
    unseen = int(np.count_nonzero(rows == 0))
    finite_shifts = bool(np.isfinite(shift).all())
    # Few sums are looked at after each chunk instead of the values before it: an inf or NaN
    # value leaves its sum inf or NaN (NaN plus anything is NaN), so finite sums after a
    # chunk's complex add.at prove the chunk held none. That spares finite data the pass over
    # the block that proves it finite. The first sum that is not finite rolls the chunk back
    # and ends the watch.
    watched = pairs.size * _WATCHED_SUMS_PER_CHUNK <= _CHUNK_ELEMENTS
    watched = watched and bool(np.isfinite(pairs.real).all())
    chunks = (chunk for piece in pieces for chunk in block.chunks(rows=piece))
    for chunk in chunks:
        flat = block.elements(chunk.index)
        x = chunk.values.reshape(-1)
        if x.dtype != np.float64:
            # Widened apart into a reused buffer: a subtraction of two dtypes casts through
            # NumPy's buffered loop, measured twice the time of this copy and a plain one.
            if widened_buffer.size < x.size:
                widened_buffer = np.empty(x.size, np.float64)
            x = widened_buffer[: x.size]
            np.copyto(x, chunk.values.reshape(-1), casting="unsafe")
        if unseen:
            fresh = _set_shifts(shift, rows[chunk.index] == 0, flat, x, width)
            unseen -= fresh.size // width
            finite_shifts = finite_shifts and bool(np.isfinite(shift[fresh]).all())
        if terms_buffer.size < x.size:
            terms_buffer = np.empty(x.size, np.complex128)
        terms = terms_buffer[: x.size]
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, as NumPy's var
            np.subtract(x, shift.take(flat), out=terms.real)
            np.square(terms.real, out=terms.imag)  # x * x's bits; measured 1.2x faster
            if watched:
                before_chunk = pairs.copy()
                np.add.at(pairs, flat, terms)
                # An inf or NaN value leaves its real sum inf or NaN (so, rarely, does an
                # overflow of finite values): the chunk is rolled back and folded unwatched.
                watched = bool(np.isfinite(pairs.real).all())
                if not watched:
                    pairs[...] = before_chunk
            if not watched:
                if not block.finite:
                    # An inf or NaN value's square term is NaN (x - x), as every engine's: the
                    # sum of squares tells such values from finite ones whose squares
                    # overflow. For finite values x - x adds +0.0: the same bits.
                    np.add(terms.imag, x - x, out=terms.imag)
                _add_terms(pairs, flat, terms, finite_shifts and block.finite)
        _count_into(rows, chunk.index)
    arrays["shifted_sum"][...] = pairs.real
    arrays["shifted_squares"][...] = pairs.imag
    added: np.ndarray = rows - before
    counted += np.repeat(added, width)
    return added


def _add_terms(pairs: np.ndarray, flat: np.ndarray, terms: np.ndarray, finite: bool) -> None:
    """Add each of ``terms`` (complex128) to its element of ``pairs``, in order: in one
    complex ``add.at`` where no term is NaN (sure when the values and shifts are ``finite``),
    else part by part."""
    if _no_nan(terms.real, finite):
        np.add.at(pairs, flat, terms)
    else:
        # A complex add.at adds the imaginary parts the other way round: of two NaNs the sum
        # would keep the value's sign, where a float fold keeps the sum's.
        np.add.at(pairs.real, flat, terms.real)
        np.add.at(pairs.imag, flat, terms.imag)


def _first_occurrences(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``keys`` (each in ``[0, size)``), ascending, and the position
    of each one's first occurrence.

    Where ``size`` is small beside the keys, a ``minimum.at`` of the positions into a scratch
    of ``size``: the first chunk of a 64K-row block spent as long in ``np.unique``'s sort as
    in the rest of its fold.
    """
    if size > 4 * keys.size:
        distinct, first = np.unique(keys, return_index=True)
        return distinct, first
    scratch = np.full(size, keys.size, np.intp)
    np.minimum.at(scratch, keys, np.arange(keys.size, dtype=np.intp))
    distinct = np.flatnonzero(scratch < keys.size)
    return distinct, scratch[distinct]


def _set_shifts(
    shift: np.ndarray, fresh_rows: np.ndarray, flat: np.ndarray, x: np.ndarray, width: int
) -> np.ndarray:
    """Each fresh segment's shift: its earliest row's values. Returns the elements set."""
    if not fresh_rows.any():
        return np.empty(0, np.intp)
    fresh = np.repeat(fresh_rows, width)
    elements, first = _first_occurrences(flat[fresh], shift.size)
    shift[elements] = x[fresh][first]
    return elements


def _no_nan(shifted: np.ndarray, finite: bool) -> bool:
    """Whether no shifted value is NaN: sure when values and shifts are finite."""
    return finite or not shifted.size or not np.isnan(shifted.min())


def _finite(values: np.ndarray) -> bool:
    """Whether every value is finite (two reductions: cheaper than a mask)."""
    if values.dtype.kind != "f" or not values.size:
        return True
    return bool(np.isfinite(values.min()) and np.isfinite(values.max()))


def _fold_arg(block: _JointBlock) -> None:
    """argmin/argmax in two passes over the block: each element's extreme by ``ufunc.at``
    (order-free: NaN propagates, so it wins), then the first row holding it (NaN holds NaN);
    the block's (extreme, row) then merges into the state by the op's own merge (an earlier
    row wins a tie)."""
    state, width = block.state, block.width
    extreme = state.op.intermediates[0]
    arrays = flat_intermediates(state)
    kept = arrays[extreme.name]
    best = np.full(kept.size, extreme.fold.identity(kept.dtype), kept.dtype)
    counted = np.zeros_like(state.count)
    with np.errstate(invalid="ignore"):
        for chunk in block.chunks():
            if width and chunk.index.size:
                extreme.fold.merge.at(best, block.elements(chunk.index), chunk.values.reshape(-1))
            _count_into(counted, chunk.index)
    rows = np.full(kept.size, np.iinfo(np.int64).max, np.int64)
    reached = np.repeat(counted > 0, width)
    if reached.any():
        smallest = extreme.fold.merge is np.minimum
        _first_rows_of(block, best, reached, smallest, rows)
    rows[rows == np.iinfo(np.int64).max] = -1
    mine = {"count": state.count, extreme.name: kept, "arg_row": arrays["arg_row"]}
    assert state.op.merge is not None
    merged = state.op.merge(mine, {"count": counted, extreme.name: best, "arg_row": rows})
    kept[...] = merged[extreme.name]
    arrays["arg_row"][...] = merged["arg_row"]
    state.count += counted


def _first_rows_of(
    block: _JointBlock, best: np.ndarray, reached: np.ndarray, smallest: bool, rows: np.ndarray
) -> None:
    """The first global row of each element's extreme ``best`` into ``rows``.

    Only values at or beyond the least extreme of the elements' extremes can be one: one
    comparison finds those candidates (a few rows per segment for random data), and only
    they are looked up by id.
    """
    width, num_segments = block.width, block.state.num_segments
    extremes = best[reached]
    nan = extremes.dtype.kind == "f" and bool(np.isnan(extremes).any())
    if nan:
        extremes = extremes[~np.isnan(extremes)]
    if extremes.size:
        limit = extremes.max() if smallest else extremes.min()
    else:  # every extreme is NaN: only NaN values are candidates
        limit = extremes.dtype.type(-np.inf if smallest else np.inf)
    step = max(1, _CHUNK_ELEMENTS // width)
    for start in range(0, block.ids.size, step):
        values = _canonical(block.data[start : start + step]).reshape(-1)
        with np.errstate(invalid="ignore"):
            near = values <= limit if smallest else values >= limit
        if nan:
            near |= np.isnan(values)
        candidates = np.flatnonzero(near)
        if not candidates.size:
            continue
        local = candidates // width
        ids = block.ids[start + local]
        kept = np.flatnonzero(_unsigned(ids) < num_segments)
        flat = ids[kept].astype(np.intp) * width + candidates[kept] % width
        found = values[candidates[kept]]
        hit = np.flatnonzero(_same(found, best[flat]) if nan else found == best[flat])
        np.minimum.at(rows, flat[hit], block.first_row + start + local[kept[hit]])


def _unsigned(ids: np.ndarray) -> np.ndarray:
    """Signed ids as their unsigned view, where a negative id is huge."""
    return ids.view(ids.dtype.str.replace("i", "u")) if ids.dtype.kind == "i" else ids


def _fold_first(block: _JointBlock) -> None:
    """first: only a segment no row has reached yet takes a row, its earliest in the block."""
    state, width = block.state, block.width
    arrays = flat_intermediates(state)
    unseen = int(np.count_nonzero(state.count == 0)) if width else 0
    for chunk in block.chunks():
        if unseen:
            fresh = state.count[chunk.index] == 0
            if fresh.any():
                segments, first = _first_occurrences(chunk.index[fresh], state.num_segments)
                _pick(block, arrays, "first_row", segments, chunk.positions()[fresh][first])
                unseen -= segments.size
        _count_into(state.count, chunk.index)


def _fold_last(block: _JointBlock) -> None:
    """last: every segment of the block takes its latest row there, found walking the chunks
    from the end until each segment of the block has been met."""
    state, width = block.state, block.width
    counted = np.zeros_like(state.count)
    for chunk in block.chunks():
        _count_into(counted, chunk.index)
    state.count += counted
    left = int(np.count_nonzero(counted)) if width else 0
    if not left:
        return
    arrays = flat_intermediates(state)
    met = np.zeros(state.num_segments, np.bool_)
    for chunk in block.chunks(reverse=True):
        new = ~met[chunk.index]
        if new.any():
            latest_first = chunk.index[new][::-1]
            segments, at = _first_occurrences(latest_first, state.num_segments)
            _pick(block, arrays, "last_row", segments, chunk.positions()[new][::-1][at])
            met[segments] = True
            left -= segments.size
            if not left:
                return


def _pick(
    block: _JointBlock,
    arrays: dict[str, np.ndarray],
    row_name: str,
    segments: np.ndarray,
    positions: np.ndarray,
) -> None:
    """Segments take the values and row numbers of the block-local rows ``positions``."""
    width = block.width
    elements = block.elements(segments)
    arrays[row_name][elements] = np.repeat(block.first_row + positions, width)
    arrays["picked"][elements] = block.data[positions].reshape(-1)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Equal, or both NaN."""
    if a.dtype.kind != "f":
        return np.asarray(a == b)
    return np.asarray((a == b) | (np.isnan(a) & np.isnan(b)))


def _fold_logsumexp(block: _JointBlock) -> None:
    """logsumexp's sum ``sum(exp(x))`` as ``sum * 2**scale``, the scale the largest of the
    values' ``ops.scale_of`` so far; values left out of the sum (not finite, or of magnitude
    ``ops.LARGEST_SCALED`` or more) reach only ``lse_max``, in row order (of several NaNs the
    first stays). Moving a sum to a larger scale is a power of two, exact, so the bytes do not
    depend on where the blocks were cut.

    Each lane's runs of rows (:meth:`_JointBlock.lane_pieces`) fold into that lane's arrays
    in row order (the block seen through the lane's :attr:`_JointBlock.ranges`): a lane's
    bytes do not depend on the cuts either.
    """
    if block.width == 0:
        _count_block(block)
        return
    for lane, ranges in block.lane_runs():
        _fold_logsumexp_lane(replace(block, ranges=ranges), flat_intermediates(block.state, lane))


def _fold_logsumexp_lane(block: _JointBlock, arrays: dict[str, np.ndarray]) -> None:
    """The rows a block walks (one lane's) into that lane's ``arrays``, counted in the state.

    Plain values only (magnitude below ``ops.PLAIN_EXP``) add ``exp(x)`` itself in one pass
    to the segments at scale 0 or with no scaled value yet; the rows of other segments, and
    all rows where one value is not plain, take two passes (:func:`_fold_scaled`).
    """
    state = block.state
    if not all(_all_plain(block.data[start:stop]) for start, stop in block.walked()):
        _fold_scaled(block, arrays)
        return
    off_scale_0 = _segments_off_scale_0(arrays["lse_scale"], block.width)
    if off_scale_0 is None:
        _fold_plain(block, arrays)
        return
    # Disjoint segments, each still in row order (the sub-blocks' first_row is unused here).
    walked = block.walked_rows()
    rows = _rows_of_segments(block, off_scale_0)
    plain, scaled = walked & ~rows, walked & rows
    _fold_plain(_JointBlock(state, block.data[plain], block.ids[plain], block.first_row), arrays)
    _fold_scaled(_JointBlock(state, block.data[scaled], block.ids[scaled], block.first_row), arrays)


def _fold_plain(block: _JointBlock, arrays: dict[str, np.ndarray]) -> None:
    """One pass: ``exp(x)`` added at scale 0 in row order; 1-D rows count in the imaginary
    part of the same complex128 ``add.at`` (as :class:`_PackedSumFolder` does), and a segment
    reached for the first time takes scale 0 (its sum was 0, so nothing moves)."""
    state, width = block.state, block.width
    scale, sums = arrays["lse_scale"], arrays["lse_sum"]
    # The pairs cost the state's size twice (made, written back): not for a few rows.
    packed = width == 1 and sums.size <= 4 * block.ids.size
    counted = np.zeros_like(state.count)
    step = max(1, _CHUNK_ELEMENTS // width)
    x = np.empty(min(block.ids.size, step) * width)
    if packed:
        pairs = np.empty(sums.size, np.complex128)
        pairs.real, pairs.imag = sums, 0.0
        terms = np.empty(x.size, np.complex128)
        terms.imag = 1.0  # the chunks below write only the real parts
    for chunk in block.chunks():
        values = x[: chunk.values.size]
        np.copyto(values, chunk.values.reshape(-1), casting="unsafe")
        if packed:
            np.exp(values, out=terms.real[: values.size])
            np.add.at(pairs, chunk.index, terms[: values.size])
        else:
            np.exp(values, out=values)
            np.add.at(sums, block.elements(chunk.index), values)
            _count_into(counted, chunk.index)
    if packed:
        sums[...] = pairs.real
        counted = pairs.imag.astype(np.int64)
    state.count += counted
    scale[np.repeat(counted > 0, width)] = 0


def _all_plain(data: np.ndarray) -> bool:
    """Whether every value of a block is plain (magnitude below ``ops.PLAIN_EXP``; NaN is not):
    two reductions."""
    if not data.size or (data.dtype.kind in "iu" and data.dtype.itemsize == 1):
        return True
    low, high = float(data.min()), float(data.max())
    return low > -ops.PLAIN_EXP and high < ops.PLAIN_EXP


def _segments_off_scale_0(scale: np.ndarray, width: int) -> np.ndarray | None:
    """The segments with an element at a scale other than 0 that has a scaled value (where a
    plain value's term ``exp(x)`` cannot add as it is); None when there are none."""
    off = (scale != 0) & (scale != ops.LOWEST_SCALE)
    if not off.any():
        return None
    return np.asarray(off.reshape(-1, width).any(axis=1))


def _rows_of_segments(block: _JointBlock, segments: np.ndarray) -> np.ndarray:
    """Which rows of the block have an id in ``segments`` (a mask over ids; dropped rows:
    no)."""
    inside = _unsigned(block.ids) < segments.size
    rows = np.zeros(block.ids.size, np.bool_)
    rows[inside] = segments[block.ids[inside]]
    return rows


def _fold_scaled(block: _JointBlock, arrays: dict[str, np.ndarray]) -> None:
    """Two passes: the first finds each element's largest scaled value (``ops.scale_of`` never
    decreases with ``x``, so its scale is the block's) and the max of the values left out; the
    second adds each term ``exp(x - e * ln 2) * 2**(e - scale)`` at that scale, in row order."""
    state = block.state
    top, scale, sums = arrays["lse_max"], arrays["lse_scale"], arrays["lse_sum"]
    largest = np.full(top.size, -np.inf)
    every_scaled = _all_scaled(block.data)
    with np.errstate(invalid="ignore"):
        for chunk in block.chunks():
            x, flat, scaled = _scaled_values(block, chunk, every_scaled)
            if scaled is not None:
                # In row order into the max itself: of several NaNs the first stays.
                np.maximum.at(top, flat[~scaled], x[~scaled])
                x, flat = x[scaled], flat[scaled]
            np.maximum.at(largest, flat, x)
            _count_into(state.count, chunk.index)
    reached = np.flatnonzero(largest > -np.inf)
    final = scale.copy()
    final[reached] = np.maximum(scale[reached], ops.scale_of(largest[reached]))
    moved = final != scale
    sums[moved] = ops.rescaled(sums[moved], scale[moved] - final[moved])
    scale[...] = final
    # Exponents are float64 values (rint's), so the scales are too, exactly; two of them
    # within 2000 of each other subtract exactly, and farther ones only need to stay below
    # -2000, where ops.rescaled stops.
    scales = scale.astype(np.float64)
    for chunk in block.chunks():
        x, flat, scaled = _scaled_values(block, chunk, every_scaled)
        if scaled is not None:
            x, flat = x[scaled], flat[scaled]
        exponent = ops.scale_of(x)
        mantissa = np.exp(x - exponent * math.log(2))
        shifts = np.maximum(exponent - scales.take(flat), -2000.0)
        # ops.rescaled's own ldexp and int32 shifts (its SIMD loop: int64 ones measured 15x
        # slower), without its int64 steps.
        np.add.at(sums, flat, np.ldexp(mantissa, shifts.astype(np.int32)))


def _all_scaled(data: np.ndarray) -> bool:
    """Whether every value of a block joins logsumexp's scaled sum (finite, and of magnitude
    below ``ops.LARGEST_SCALED``): two reductions, then no chunk needs a mask."""
    if not data.size or (data.dtype.kind in "iu" and data.dtype.itemsize < 8):
        return True
    low, high = float(data.min()), float(data.max())
    return math.isfinite(low) and math.isfinite(high) and max(-low, high) < ops.LARGEST_SCALED


def _scaled_values(
    block: _JointBlock, chunk: _Chunk, every_scaled: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """A chunk's values in float64, their elements, and which of them the scaled sum takes
    (None: all)."""
    x = chunk.values.reshape(-1).astype(np.float64, copy=False)
    flat = block.elements(chunk.index)
    if every_scaled:
        return x, flat, None
    return x, flat, np.isfinite(x) & (np.abs(x) < ops.LARGEST_SCALED)


_JOINT_FOLDS: dict[str, JointFold] = {
    "moments": _fold_moments,
    "argmin": _fold_arg,
    "argmax": _fold_arg,
    "first": _fold_first,
    "last": _fold_last,
    "logsumexp": _fold_logsumexp,
}


def flat_intermediates(state: ops.State, lane: int = 0) -> dict[str, np.ndarray]:
    """Each intermediate's lane ``lane`` as a flat ``(n * inner_size,)`` view, written in
    place."""
    views = {}
    for intermediate in state.op.intermediates:
        array = state.arrays[intermediate.name]
        view = array[lane].reshape(-1)
        if view.size and not np.shares_memory(view, array):  # a copy would lose the writes
            raise ValueError(f"{intermediate.name} is not contiguous")
        views[intermediate.name] = _canonical(view)
    return views


def _fold_joint(
    state: ops.State, data: np.ndarray, ids: np.ndarray, first_row: int, sorted_ids: bool = False
) -> None:
    """A joint fold, in row order (within each lane, for an op that keeps lanes)."""
    assert state.op.joint is not None
    _JOINT_FOLDS[state.op.joint](_JointBlock(state, data, ids, first_row, sorted_ids))


ENGINE = NumpyEngine()
