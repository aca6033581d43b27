"""What Dask workers run: read one partition, validate it, fold it; merge partial results.

Where the bits of a fold depend on its order (float sums and products, var's shifted sums,
logsumexp's sum; :func:`order_matters`), partial results that merge would round otherwise
than the single machine, which folds each lane row after row. Such runs fold in a chain
instead: partition tasks read and validate in parallel (:func:`read_partition_rows`), and
each fold task continues the state of the partitions before it (:func:`fold_rows`), so every
lane sees its rows in the single machine's order and the result has its bytes.

Nothing here imports Dask: these are plain functions of picklable values, so they can be tested
without a cluster and run on any worker that has segcli installed. A worker reads its rows
itself (:mod:`segcli.io.rows`: ``.npy`` at a byte offset, Parquet by row group), so no data
passes through the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from segcli import ops
from segcli.core import check_output_fits
from segcli.drivers.dask.plan import Partition
from segcli.engines import Engine, choose_engine, get_engine
from segcli.errors import EngineUnavailableError, InvalidInputError, SegcliError
from segcli.io.columns import (
    ColumnRef,
    NullIdsError,
    NullsError,
    NullTally,
    nulls_kept,
    without_null_ids,
)
from segcli.io.rows import FileRef, read_key_rows, read_parquet_rows, read_rows
from segcli.multi import fold_rows as fold_block
from segcli.validate import IdSummary, merge, summarize

#: Engines that fold in this process's memory; a GPU engine per worker is out of scope here.
CPU_ENGINES = ("numba", "numpy")


@dataclass(frozen=True)
class Job:
    """What every partition task of one run shares."""

    op: str | ops.Op
    num_segments: int | None
    sorted_ids: bool
    #: Data elements of the whole run: ``auto`` picks the engine as for a single machine.
    elements: int


@dataclass
class PartResult:
    """A partition's (or a merged run of partitions') id summary and partial state."""

    id_summary: IdSummary
    #: None when no row was folded (empty, or invalid so the run will fail anyway).
    state: ops.State | None
    engines: frozenset[str] = frozenset()
    #: ``--skipna``: rows dropped for a null id.
    null_ids: int = 0
    #: ``--sorted`` with n inferred: why a state would not fit a worker's memory, held until
    #: the client has checked every id (a later decrease is the error to give, as in memory).
    too_large: str | None = None


# ---------------------------------------------------------------------------------------------
# Reading


def read_partition(part: Partition) -> tuple[np.ndarray, np.ndarray]:
    """DATA and IDS rows ``[start, stop)`` of the partition's file pair."""
    same_table = part.data.path == part.ids.path and part.data.fmt == "parquet"
    if same_table and part.data.column and part.ids.column:
        data, ids = read_parquet_rows(part.data, [part.data, part.ids], part.start, part.stop)
        return data, ids
    return read_rows(part.data, part.start, part.stop), read_rows(part.ids, part.start, part.stop)


# ---------------------------------------------------------------------------------------------
# The map step


def cpu_engine(elements: int) -> Engine:
    """``auto``'s choice among the engines that fold in a worker's own memory."""
    choice = choose_engine("auto", elements=elements)
    if choice.engine.name in CPU_ENGINES:
        return choice.engine
    try:
        return get_engine("numba")
    except EngineUnavailableError:
        return get_engine("numpy")


def run_partition(part: Partition, job: Job) -> PartResult:
    """Read, validate and fold one partition into the op's partial state."""
    skipna = ops.get_op(job.op).skipna_of is not None
    with nulls_kept(skipna):  # a worker's own context: the client's is not sent
        data, ids = read_partition(part)
    flat, null_ids = _ids_without_nulls(part, ids, job)
    first_row = part.row_offset * _per_row(part.ids)  # of the flattened ids, globally
    id_summary = summarize(flat, first_row, job.num_segments, sorted_ids=job.sorted_ids)
    if flat.size == 0 or id_summary.blocks_fold(sorted_ids=job.sorted_ids):
        return PartResult(id_summary, None, null_ids=null_ids)
    op = ops.get_op(job.op)
    inner = tuple(data.shape[ids.ndim :])
    size = job.num_segments
    if size is None:
        # n is inferred: the state covers this partition's ids only and grows on combine.
        size = max(id_summary.max_id + 1, 0) if id_summary.max_id is not None else 0
        # On this worker, before allocating.
        too_large = _fits_or_held(op, size, inner, data.dtype, job)
        if too_large is not None:
            return PartResult(id_summary, None, null_ids=null_ids, too_large=too_large)
    engine = cpu_engine(job.elements)
    state = engine.new_state(op, size, inner, data.dtype, sorted_ids=job.sorted_ids)
    state.next_row = first_row  # lanes follow global row numbers
    rows = data.reshape(flat.size, ops.inner_size(inner))
    fold_block(engine, state, rows, flat, sorted_ids=job.sorted_ids)
    return PartResult(id_summary, state.to_host(), frozenset({engine.name}), null_ids)


def _ids_without_nulls(part: Partition, ids: np.ndarray, job: Job) -> tuple[np.ndarray, int]:
    """The partition's flat ids with nulls dropped as on one machine: ``--sorted`` refuses a
    null, named by its row in its own file."""
    return without_null_ids(
        ids.reshape(-1),
        sorted_ids=job.sorted_ids,
        label=part.ids.label,
        first_row=part.start * _per_row(part.ids),
    )


def _per_row(ref: FileRef) -> int:
    return int(np.prod(ref.shape[1:], dtype=np.int64))


def order_matters(op: str | ops.Op, data_dtype: np.dtype[Any]) -> bool:
    """Whether folding ``op`` over ``data_dtype`` in another order could change its bits."""
    op = ops.get_op(op)
    # agg's combined op holds a joint op's intermediates (var's shifted sums, logsumexp's sum)
    # as folds that keep no lanes of their own; the joint op's own say whether they round.
    parts = getattr(op.skipna_of or op, "parts", ())
    folded = [i for part in parts for i in part.op.intermediates] or op.intermediates
    return any(i.fold.order_matters(i.acc_dtype(np.dtype(data_dtype))) for i in folded)


@dataclass
class PartRows:
    """A partition read and validated, its rows not folded yet (see :func:`fold_rows`)."""

    id_summary: IdSummary
    #: ``(rows, inner_size)`` data and flat ids; None when the rows cannot fold (as above).
    data: np.ndarray | None
    ids: np.ndarray | None
    #: Global row number of the first flat id.
    first_row: int
    inner: tuple[int, ...]
    #: ``--skipna``: rows dropped for a null id.
    null_ids: int = 0


def read_partition_rows(part: Partition, job: Job, *after: None) -> PartRows:
    """Read and validate one partition, for :func:`fold_rows`. ``after``: tasks to wait for
    (the fold chain bounds how far reads run ahead of it), not used."""
    skipna = ops.get_op(job.op).skipna_of is not None
    with nulls_kept(skipna):  # a worker's own context: the client's is not sent
        data, ids = read_partition(part)
    flat, null_ids = _ids_without_nulls(part, ids, job)
    first_row = part.row_offset * _per_row(part.ids)
    id_summary = summarize(flat, first_row, job.num_segments, sorted_ids=job.sorted_ids)
    inner = tuple(data.shape[ids.ndim :])
    if flat.size == 0 or id_summary.blocks_fold(sorted_ids=job.sorted_ids):
        return PartRows(id_summary, None, None, first_row, inner, null_ids)
    rows = data.reshape(flat.size, ops.inner_size(inner))
    return PartRows(id_summary, rows, flat, first_row, inner, null_ids)


def fold_rows(before: PartResult | None, rows: PartRows, job: Job) -> PartResult:
    """The partitions before (merged, or None for the first) with ``rows`` folded on, in
    row order: the next link of the chain."""
    summary = rows.id_summary if before is None else merge(before.id_summary, rows.id_summary)
    state = None if before is None else before.state
    engines = frozenset() if before is None else before.engines
    null_ids = rows.null_ids + (0 if before is None else before.null_ids)
    too_large = None if before is None else before.too_large
    if rows.data is None or rows.ids is None or too_large is not None:
        return PartResult(summary, state, engines, null_ids, too_large)
    op = ops.get_op(job.op)
    size = job.num_segments
    if size is None:
        assert rows.id_summary.max_id is not None
        size = max(rows.id_summary.max_id + 1, 0 if state is None else state.num_segments)
        too_large = _fits_or_held(op, size, rows.inner, rows.data.dtype, job)
        if too_large is not None:
            return PartResult(summary, state, engines, null_ids, too_large)
    engine = cpu_engine(job.elements)
    if state is None:
        state = engine.new_state(op, size, rows.inner, rows.data.dtype, sorted_ids=job.sorted_ids)
    else:
        # The state before is another task's result (kept for a retry): fold into a copy.
        state = state.grown(size).transferred(np.array)
    state.next_row = rows.first_row
    fold_block(engine, state, rows.data, rows.ids, sorted_ids=job.sorted_ids)
    return PartResult(summary, state.to_host(), engines | {engine.name}, null_ids)


# ---------------------------------------------------------------------------------------------
# Counting nulls, once a partition failed on one


@dataclass
class PartNulls:
    """The nulls of one partition's columns, counted as a whole read of each column counts
    them, so that the client can give the error a single machine gives (:func:`nulls_error`)."""

    data: NullTally
    ids: NullTally | None
    #: Null ``--sorted`` ids kept by ``--skipna``: the partition's first and their count.
    null_ids: NullIdsError | None


def count_partition_nulls(part: Partition, skipna: bool, sorted_ids: bool) -> PartNulls:
    """Count the nulls of the partition's DATA and IDS columns, converting nothing but the ids
    of a ``--sorted --skipna`` run. Only run after a partition (or the planning) failed on a
    null: the normal path counts nothing."""
    with nulls_kept(skipna):
        data = _column_nulls(part.data, part)
        ids = _column_nulls(part.ids, part) if part.ids != part.data else None  # not --by
        null_ids = _null_sorted_ids(part) if sorted_ids and ids is not None else None
    return PartNulls(data, ids, null_ids)


def _column_nulls(ref: FileRef, part: Partition) -> NullTally:
    tally = NullTally(ColumnRef(ref.shown_path, ref.column or ""))
    if ref.column is not None and part.stop > part.start:  # .npy and .npz hold no nulls
        tally.add(read_key_rows(ref, [ref.column], part.start, part.stop).column(0), part.start)
    return tally


def _null_sorted_ids(part: Partition) -> NullIdsError | None:
    if part.ids.column is None or part.stop == part.start:
        return None
    try:
        ids = read_rows(part.ids, part.start, part.stop)
        without_null_ids(
            ids.reshape(-1),
            sorted_ids=True,
            label=part.ids.label,
            first_row=part.start * _per_row(part.ids),
        )
    except NullsError:
        return None  # null lists: the ids' tally names those
    except NullIdsError as error:
        return error
    return None


def nulls_error(counts: list[PartNulls]) -> SegcliError | None:
    """The error a single machine gives for the nulls counted, in partition order: of DATA's
    and IDS', the column whose first null comes first (DATA's on a tie), counting every null
    of it and naming the first."""
    ids_first = _ids_first(counts)  # before the tallies merge, which moves their rows
    data, ids, null_ids = counts[0].data, counts[0].ids, counts[0].null_ids
    for later in counts[1:]:
        data.add_tally(later.data)
        if ids is not None and later.ids is not None:
            ids.add_tally(later.ids)
        if later.null_ids is not None:
            more = later.null_ids
            null_ids = more if null_ids is None else null_ids.and_more(more.nulls)
    if ids is not None and ids_first:
        return ids.error()
    if data.counted:
        return data.error()
    return null_ids


def _ids_first(counts: list[PartNulls]) -> bool:
    """Whether IDS' first null comes before DATA's: in the first partition holding one, whose
    rows (of one file) both columns share."""
    for part in counts:
        ids_row = None if part.ids is None else part.ids.row
        if part.data.row is not None or ids_row is not None:
            return ids_row is not None and (part.data.row is None or ids_row < part.data.row)
    return False


# ---------------------------------------------------------------------------------------------
# The combine step


def combine_results(*parts: PartResult) -> PartResult:
    """Merge partial results given in row order (earlier partitions first)."""
    merged = parts[0]
    for part in parts[1:]:
        merged = PartResult(
            merge(merged.id_summary, part.id_summary),
            combine_states(merged.state, part.state),
            merged.engines | part.engines,
            merged.null_ids + part.null_ids,
            merged.too_large or part.too_large,
        )
    return merged


def _fits_or_held(
    op: ops.Op, size: int, inner: tuple[int, ...], dtype: np.dtype[Any], job: Job
) -> str | None:
    """:func:`check_output_fits` on this worker; under ``--sorted`` its error is returned for
    the client to raise once the ids are known valid (see :attr:`PartResult.too_large`)."""
    try:
        check_output_fits(op, size, inner, dtype, sorted_ids=job.sorted_ids, inferred=True)
    except InvalidInputError as error:
        if not job.sorted_ids:
            raise
        return str(error)
    return None


def combine_states(a: ops.State | None, b: ops.State | None) -> ops.State | None:
    """:func:`segcli.ops.combine`, padding the smaller state when n is inferred."""
    if a is None or b is None:
        return b if a is None else a
    size = max(a.num_segments, b.num_segments)
    return ops.combine(a.grown(size), b.grown(size))


def id_summary_of(result: PartResult) -> IdSummary:
    """Only the id summary: the client validates before it fetches the state."""
    return result.id_summary
