"""What Dask workers run: read one partition, validate it, fold it; merge partial results.

Nothing here imports Dask: these are plain functions of picklable values, so they can be tested
without a cluster and run on any worker that has segcli installed. A worker reads its rows
itself (``.npy`` at a byte offset, Parquet by row group), so no data passes through the client.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from segcli import ops
from segcli.core import check_output_fits
from segcli.drivers.dask.plan import FileRef, Partition
from segcli.engines import Engine, choose_engine, get_engine
from segcli.errors import EngineUnavailableError, ReadError
from segcli.io import open_chunked
from segcli.io.columns import ColumnRef, column_to_numpy, value_layout
from segcli.io.formats import library_errors, open_binary
from segcli.io.npy import read_header, read_npy_rows
from segcli.validate import IdSummary, merge, summarize

#: Engines that fold in this process's memory; a GPU engine per worker is out of scope here.
CPU_ENGINES = ("numba", "numpy")


@dataclass(frozen=True)
class Job:
    """What every partition task of one run shares."""

    op: str
    num_segments: int | None
    sorted_ids: bool
    #: Data elements of the whole run: ``auto`` picks the engine as for a single machine.
    elements: int


@dataclass
class PartResult:
    """A partition's (or a merged run of partitions') id summary and partial state."""

    ids: IdSummary
    #: None when no row was folded (empty, or invalid so the run will fail anyway).
    state: ops.State | None
    engines: frozenset[str] = frozenset()


# ---------------------------------------------------------------------------------------------
# Reading


def read_partition(part: Partition) -> tuple[np.ndarray, np.ndarray]:
    """DATA and IDS rows ``[start, stop)`` of the partition's file pair."""
    same_table = part.data.path == part.ids.path and part.data.fmt == "parquet"
    if same_table and part.data.column and part.ids.column:
        data, ids = _read_parquet(part.data, [part.data, part.ids], part.start, part.stop)
        return data, ids
    return read_rows(part.data, part.start, part.stop), read_rows(part.ids, part.start, part.stop)


def read_rows(ref: FileRef, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of one file."""
    if start == stop:
        return np.empty((0, *ref.shape[1:]), ref.dtype)
    if ref.fmt == "npy":
        return _read_npy(ref, start, stop)
    if ref.fmt == "parquet":
        [array] = _read_parquet(ref, [ref], start, stop)
        return array
    return _read_whole(ref, start, stop)


def _changed(ref: FileRef, what: str) -> ReadError:
    return ReadError(f"{ref.label}: changed since the run was planned ({what})")


def _read_npy(ref: FileRef, start: int, stop: int) -> np.ndarray:
    """A row range of a C-order ``.npy`` file: seek past the header and earlier rows."""
    with open_binary(ref.path) as f:
        header = read_header(f, ref.label)
        if header.shape != ref.shape:
            raise _changed(ref, f"shape {list(header.shape)}, was {list(ref.shape)}")
        row_bytes = int(np.prod(header.shape[1:], dtype=np.int64)) * header.dtype.itemsize
        f.seek(f.tell() + start * row_bytes)
        return read_npy_rows(f, header, start, stop - start, ref.label)


def _read_parquet(file: FileRef, columns: list[FileRef], start: int, stop: int) -> list[np.ndarray]:
    """A row range of some columns of one Parquet file, reading only the row groups it spans."""
    import pyarrow.parquet as pq

    groups, skip = _covering_groups(file.row_groups, start, stop)
    with library_errors(file.path, "not a valid Parquet file"):
        table = pq.ParquetFile(file.path).read_row_groups(
            groups,
            columns=list(dict.fromkeys(ref.column for ref in columns)),
            use_threads=False,
        )
        table = table.slice(skip, stop - start)
        arrays = []
        for ref in columns:
            assert ref.column is not None
            where = ColumnRef(file.path, ref.column)
            array = column_to_numpy(
                table.column(ref.column),
                where,
                first_row=start,
                layout=value_layout(table.schema, ref.column, file.path),
            )
            if array.shape[1:] != ref.shape[1:]:
                raise where.fail(
                    f"rows from {start} have inner shape {list(array.shape[1:])}, "
                    f"earlier rows {list(ref.shape[1:])}"
                )
            arrays.append(array)
    if len(arrays[0]) != stop - start:
        raise _changed(file, f"{start + len(arrays[0])} rows, was {file.rows}")
    return arrays


def _covering_groups(groups: tuple[int, ...], start: int, stop: int) -> tuple[list[int], int]:
    """The row groups that hold rows ``[start, stop)``, and the rows to skip in the first."""
    chosen: list[int] = []
    first_row = skip = 0
    for index, size in enumerate(groups):
        end = first_row + size
        if end > start and first_row < stop:
            if not chosen:
                skip = start - first_row
            chosen.append(index)
        first_row = end
    return chosen, skip


def _read_whole(ref: FileRef, start: int, stop: int) -> np.ndarray:
    """Formats without random access (``.npz``, Arrow): stream the file, keep the range."""
    source = open_chunked(ref.path, column=ref.column, key=ref.key, role=ref.role)
    blocks, seen = [], 0
    for block in source.chunks(max(ref.rows, 1)):
        lo, hi = max(start - seen, 0), min(stop - seen, len(block))
        if lo < hi:
            blocks.append(block[lo:hi])
        seen += len(block)
    if seen != ref.rows:
        raise _changed(ref, f"{seen} rows, was {ref.rows}")
    return np.concatenate(blocks) if len(blocks) != 1 else blocks[0]


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
    summary = summarize(flat, first_row, job.num_segments, sorted_ids=job.sorted_ids)
    if flat.size == 0 or summary.blocks_fold(sorted_ids=job.sorted_ids):
        return PartResult(summary, None)
    op = ops.get_op(job.op)
    inner = tuple(data.shape[ids.ndim :])
    size = job.num_segments
    if size is None:
        # n is inferred: the state covers this partition's ids only and grows on combine.
        size = max(summary.max_id + 1, 0) if summary.max_id is not None else 0
        # On this worker, before allocating.
        check_output_fits(op, size, inner, data.dtype, sorted_ids=job.sorted_ids)
    engine = cpu_engine(job.elements)
    state = engine.new_state(op, size, inner, data.dtype, sorted_ids=job.sorted_ids)
    state.next_row = first_row  # lanes follow global row numbers
    engine.fold(
        state, data.reshape(flat.size, ops.inner_size(inner)), flat, sorted_ids=job.sorted_ids
    )
    return PartResult(summary, state.to_host(), frozenset({engine.name}))


def _per_row(ref: FileRef) -> int:
    return int(np.prod(ref.shape[1:], dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# The combine step


def combine_results(*parts: PartResult) -> PartResult:
    """Merge partial results given in row order (earlier partitions first)."""
    merged = parts[0]
    for part in parts[1:]:
        merged = PartResult(
            merge(merged.ids, part.ids),
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


def summary_of(result: PartResult) -> IdSummary:
    """Only the id summary: the client validates before it fetches the state."""
    return result.ids
