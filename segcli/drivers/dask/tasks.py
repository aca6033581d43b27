"""What Dask workers run: read one partition, validate it, fold it; merge partial results.

Nothing here imports Dask: these are plain functions of picklable values, so they can be tested
without a cluster and run on any worker that has segcli installed. A worker reads its rows
itself (:mod:`segcli.io.rows`: ``.npy`` at a byte offset, Parquet by row group), so no data
passes through the client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from segcli import ops
from segcli.core import check_output_fits
from segcli.drivers.dask.plan import Partition
from segcli.engines import Engine, choose_engine, get_engine
from segcli.errors import EngineUnavailableError
from segcli.io.rows import FileRef, read_parquet_rows, read_rows
from segcli.multi import fold_rows
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
    data, ids = read_partition(part)
    flat = ids.reshape(-1)
    first_row = part.row_offset * _per_row(part.ids)  # of the flattened ids, globally
    id_summary = summarize(flat, first_row, job.num_segments, sorted_ids=job.sorted_ids)
    if flat.size == 0 or id_summary.blocks_fold(sorted_ids=job.sorted_ids):
        return PartResult(id_summary, None)
    op = ops.get_op(job.op)
    inner = tuple(data.shape[ids.ndim :])
    size = job.num_segments
    if size is None:
        # n is inferred: the state covers this partition's ids only and grows on combine.
        size = max(id_summary.max_id + 1, 0) if id_summary.max_id is not None else 0
        # On this worker, before allocating.
        check_output_fits(op, size, inner, data.dtype, sorted_ids=job.sorted_ids)
    engine = cpu_engine(job.elements)
    state = engine.new_state(op, size, inner, data.dtype, sorted_ids=job.sorted_ids)
    state.next_row = first_row  # lanes follow global row numbers
    rows = data.reshape(flat.size, ops.inner_size(inner))
    fold_rows(engine, state, rows, flat, sorted_ids=job.sorted_ids)
    return PartResult(id_summary, state.to_host(), frozenset({engine.name}))


def _per_row(ref: FileRef) -> int:
    return int(np.prod(ref.shape[1:], dtype=np.int64))


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
        )
    return merged


def combine_states(a: ops.State | None, b: ops.State | None) -> ops.State | None:
    """:func:`segcli.ops.combine`, padding the smaller state when n is inferred."""
    if a is None or b is None:
        return b if a is None else a
    size = max(a.num_segments, b.num_segments)
    return ops.combine(a.grown(size), b.grown(size))


def id_summary_of(result: PartResult) -> IdSummary:
    """Only the id summary: the client validates before it fetches the state."""
    return result.id_summary
