"""The driver of runs with a holistic op (median, quantile, nunique), alone or in agg's list.

The inputs are read once. The engine folds what merges (the row counts, and agg's other ops),
validating the ids as every run does; the same rows go to :mod:`segcli.holistic_runs` for the
holistic ops. In memory when the inputs fit the memory budget; a ``--sorted`` stream segment by
segment wherever other runs would stream; an unsorted input only when it must stream (larger
than the budget, stdin, ``--chunk-rows``), through partition files under ``--tmp-dir``.

``--by`` runs encode their keys as the keyed driver does (:mod:`segcli.drivers.keys`); the
dense key ids take the place of IDS on both paths, and the result is put in key order at the
end. ``--indices`` runs check the sparse family's rules and count each bag with
:mod:`segcli.sparse`, then sort ``DATA[indices]`` per bag: whole, or block by block through the
sorted-stream reducers where the sparse driver streams its ids and indices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import core, ops, sparse
from segcli.drivers import memory
from segcli.drivers import sparse as sparse_driver
from segcli.drivers.base import (
    DriverResult,
    Progress,
    RunSpec,
    engine_of,
    input_facts,
    op_names,
)
from segcli.drivers.choose import must_stream, should_stream
from segcli.drivers.key_setup import encoder_for, open_key_table
from segcli.drivers.keys import (
    encode_whole_read,
    given_n,
    key_input_facts,
    put_in_key_order,
)
from segcli.drivers.stream import StreamPlan, open_inputs, read_ahead, reduce_stream, rows_of
from segcli.engines import Engine
from segcli.engines.skipping import missing_values
from segcli.errors import EngineUnavailableError, NotStreamableError, UsageError
from segcli.holistic_runs import (
    WHOLE_SORT_BYTES_PER_BYTE,
    HolisticJob,
    Partitions,
    SortedRows,
    check_q,
    is_holistic,
    partition_count,
    result_name,
)
from segcli.io.chunked import ChunkSource, open_chunked
from segcli.io.columns import without_null_ids
from segcli.io.keys import KeyIdsChunks, ParquetPass, PassColumn, read_data_and_keys
from segcli.multi import combined_op
from segcli.signals import checkpoint

if TYPE_CHECKING:
    pass


def refuse(spec: RunSpec) -> None:
    """What a holistic run cannot do, as usage errors before any input is read."""
    names = op_names(spec)
    first = next(name for name in names if is_holistic(name))
    engine = spec.engine.name if isinstance(spec.engine, Engine) else spec.engine
    if engine == "dask":
        raise UsageError(
            f"{first} cannot run on Dask: it needs each segment's values together, which "
            "partitions never hold; use --engine numpy (inputs larger than memory go through "
            "--tmp-dir)"
        )
    if engine == "cupy":
        raise EngineUnavailableError(
            f"engine 'cupy' has no kernel for {first} (it sorts on the CPU); use --engine "
            "numpy or numba"
        )
    if spec.sparse:
        # --weights with them, --by, stdin and DATA over the budget: as for every other op.
        sparse_driver.refuse_unsupported(dataclasses.replace(spec, op=first))
    check_q(names, spec.q)


def run(spec: RunSpec, progress: Progress | None = None) -> DriverResult:
    refuse(spec)
    if spec.sparse:
        return _run_gathered(spec, progress)
    if _streams(spec):
        try:
            return _run_streaming(spec, progress)
        except NotStreamableError:
            if must_stream(spec):
                raise
    return _run_in_memory(spec)


def _streams(spec: RunSpec) -> bool:
    # A sorted stream costs a block and a segment: stream where other runs do. Unsorted rows
    # stream through partition files, which costs a write and a read of the input: only when
    # they must (larger than the memory budget, stdin, rows per block given).
    if "-" in (spec.data, spec.ids) and not should_stream(spec):
        return False  # Parquet or an Arrow file on stdin is read whole, as for every other op
    if spec.sorted_ids:
        return should_stream(spec)
    # Sorted whole, the values take about four times their bytes (values, int64 ids, the
    # packed sort keys, the picks), as a partition does when it is finished.
    return must_stream(spec, held_per_byte=WHOLE_SORT_BYTES_PER_BYTE)


def _job(spec: RunSpec, data_dtype: np.dtype[Any], label: str) -> HolisticJob:
    return HolisticJob.of(
        op_names(spec), data_dtype, q=spec.q, skipna=spec.skipna, fill=spec.fill, label=label
    )


def _fold_op(
    spec: RunSpec, data_dtype: np.dtype[Any], inner: tuple[int, ...], label: str
) -> tuple[str | ops.Op, Any]:
    """What the engine folds, and its fill: agg's other ops, else only the row counts."""
    # agg's entries as given: var and std carry their --ddof.
    mergeable = tuple(op for op in spec.ops if not is_holistic(op))
    if not spec.ops or not mergeable:
        # Under --skipna the count keeps the present values too: the summary's skipped figure.
        return (ops.skipna_op("count") if spec.skipna else "count"), None
    op = combined_op(mergeable, data_dtype, inner, fill=spec.fill, label=label, skipna=spec.skipna)
    return (ops.skipna_op(op) if spec.skipna else op), None


def _finished(
    spec: RunSpec,
    reduction: core.Reduction,
    job: HolisticJob,
    results: list[np.ndarray],
    inner: tuple[int, ...],
) -> core.Reduction:
    """The run's reduction: the holistic result, or agg's columns in the order of its list."""
    n = reduction.id_report.num_segments
    shaped = {op.name: r.reshape((n, *inner)) for op, r in zip(job.chosen, results, strict=True)}
    reason = f"{reduction.engine_reason}; {', '.join(shaped)} sorted by NumPy"
    if not spec.ops:
        (op,) = job.chosen
        return dataclasses.replace(reduction, result=shaped[op.name], op=op, engine_reason=reason)
    folded = reduction.result
    columns = [
        (result_name(name, spec.q), shaped[name] if name in shaped else folded[name])
        for name in op_names(spec)
    ]
    result = np.empty(n, np.dtype([(name, a.dtype, a.shape[1:]) for name, a in columns]))
    for name, values in columns:
        result[name] = values
    return dataclasses.replace(reduction, result=result, engine_reason=reason)


def _run_in_memory(spec: RunSpec) -> DriverResult:
    if spec.by:
        return _run_keyed_in_memory(spec)
    started = time.perf_counter()
    data, ids = memory.read(spec)
    read_s = time.perf_counter() - started
    ids_array, null_ids = without_null_ids(ids.array, sorted_ids=spec.sorted_ids, label=ids.label)
    finished, timings = _sort_in_memory(
        spec, data.array, ids_array, spec.num_segments, data.label, ids.label
    )
    finished.null_ids = null_ids
    timings = {"read": read_s, **timings}
    return DriverResult(finished, memory.facts(data), memory.facts(ids), "in-memory", {}, timings)


def _sort_in_memory(
    spec: RunSpec,
    data: np.ndarray,
    ids: np.ndarray,
    num_segments: int | None,
    data_label: str,
    ids_label: str,
) -> tuple[core.Reduction, dict[str, float]]:
    """Fold what merges and sort each segment, over arrays held whole: the run's reduction
    and its validate and compute seconds."""
    inner = tuple(data.shape[ids.ndim :])
    job = _job(spec, data.dtype, data_label)
    fold_op, fold_fill = _fold_op(spec, data.dtype, inner, data_label)
    reduction = core.reduce_with_option_words(
        data,
        ids,
        num_segments,
        fold_op,
        sorted=spec.sorted_ids,
        engine=engine_of(spec),
        fill=fold_fill,
        data_label=data_label,
        ids_label=ids_label,
    )
    sorting = time.perf_counter()
    results = job.reduce_arrays(data, ids, reduction.id_report.num_segments)
    timings = {
        "validate": reduction.timings["validate"],
        "compute": reduction.timings["compute"] + time.perf_counter() - sorting,
    }
    return _finished(spec, reduction, job, results, inner), timings


def _run_streaming(spec: RunSpec, progress: Progress | None) -> DriverResult:
    if spec.by:
        return _run_keyed_streaming(spec, progress)
    started = time.perf_counter()
    data, ids = open_inputs(spec)
    finished, plan, mode_facts = _sort_stream(
        spec, data.source, ids.source, spec.num_segments, progress
    )
    rows_read = rows_of(finished.id_report, ids.source)
    return DriverResult(
        finished,
        data.facts(rows_read),
        ids.facts(rows_read),
        "streaming",
        {"chunks": plan.blocks, **mode_facts},
        {"read+compute": time.perf_counter() - started},
    )


def _sort_stream(
    spec: RunSpec,
    source: ChunkSource,
    ids: ChunkSource,
    num_segments: int | None,
    progress: Progress | None,
) -> tuple[core.Reduction, StreamPlan, dict[str, Any]]:
    """Fold what merges block by block; the same blocks go segment by segment to the sorting
    ops (``--sorted``) or to partition files. The run's reduction, plan and mode facts."""
    inner = tuple(source.shape[len(ids.shape) :])
    width = ops.inner_size(inner)
    job = _job(spec, source.dtype, source.label)
    fold_op, fold_fill = _fold_op(spec, source.dtype, inner, source.label)
    sink: SortedRows | Partitions
    mode_facts: dict[str, Any] = {}
    if spec.sorted_ids:
        sink = SortedRows(job, num_segments, width, source.dtype)
        context: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    else:
        rows = -1 if ids.shape[0] < 0 else int(np.prod(ids.shape, dtype=np.int64))
        # A partition row holds the values, an id, and under --skipna an integer's nulls.
        nulls = width if spec.skipna and source.dtype.kind in "iub" else 0
        row_bytes = width * source.dtype.itemsize + 8 + nulls
        parts = partition_count(rows, row_bytes, spec.memory_budget)
        sink = context = Partitions(
            job,
            parts,
            width,
            source.dtype,
            tmp_dir=spec.tmp_dir,
            num_segments=num_segments,
        )
        mode_facts["partitions"] = parts
    with context:
        reduction, plan = reduce_stream(
            source,
            ids,
            num_segments,
            fold_op,
            sorted_ids=spec.sorted_ids,
            engine=engine_of(spec),
            fill=fold_fill,
            block_rows=spec.block_rows,
            memory_limit=spec.memory_budget,
            progress=progress,
            on_block=sink.push,
        )
        checkpoint("holistic-finish")
        results = sink.finish(reduction.id_report.num_segments)
    return _finished(spec, reduction, job, results, inner), plan, mode_facts


# ---------------------------------------------------------------------------------------------
# Grouped by key columns (--by): the keyed driver's dense key ids take the place of IDS


def _run_keyed_in_memory(spec: RunSpec) -> DriverResult:
    started = time.perf_counter()
    table, column = open_key_table(spec)
    data, keys = read_data_and_keys(table, column, spec.by)
    encoder, ids = encode_whole_read(spec, keys, table.label)
    read_s = time.perf_counter() - started
    data_label = f"{table.label}:{column}"
    ids_label = f"{table.label}:{','.join(spec.by)}"
    finished, timings = _sort_in_memory(spec, data, ids, given_n(encoder), data_label, ids_label)
    key_facts = put_in_key_order(finished, encoder, spec)
    return DriverResult(
        finished,
        input_facts(spec.data, data_label, table.fmt, data.shape, data.dtype, table.note(column)),
        key_input_facts(spec.data, ids_label, keys.schema, keys.table.num_rows, keys.nbytes),
        "in-memory",
        {},
        {"read": read_s, **timings},
        key_facts,
    )


def _run_keyed_streaming(spec: RunSpec, progress: Progress | None) -> DriverResult:
    started = time.perf_counter()
    table, column = open_key_table(spec)
    encoder = encoder_for(spec, table)
    source: ChunkSource
    if table.fmt == "parquet":
        shared = ParquetPass(table, column, spec.by, prefetch=read_ahead)
        source = PassColumn(table, column, shared)
        ids = KeyIdsChunks(table, spec.by, encoder, shared)
    else:
        source = open_chunked(spec.data, column=column, role="data", csv=spec.csv)
        ids = KeyIdsChunks(table, spec.by, encoder)
    finished, plan, mode_facts = _sort_stream(spec, source, ids, given_n(encoder), progress)
    key_facts = put_in_key_order(finished, encoder, spec)
    rows = rows_of(finished.id_report, ids)
    note = getattr(source, "note", None)
    return DriverResult(
        finished,
        input_facts(
            spec.data, source.label, table.fmt, (rows, *source.shape[1:]), source.dtype, note
        ),
        key_input_facts(spec.data, ids.label, ids.schema, rows, ids.bytes_read),
        "streaming",
        {"chunks": plan.blocks, **mode_facts},
        {"read+compute": time.perf_counter() - started},
        key_facts,
    )


# ---------------------------------------------------------------------------------------------
# Gathered (--indices): DATA[indices] sorted per segment; the ids are non-decreasing


def _run_gathered(spec: RunSpec, progress: Progress | None) -> DriverResult:
    """In memory, or where the sparse driver streams its ids and indices (DATA is held whole
    either way), block by block through the sorted-stream reducers."""
    if spec.ids is not None and should_stream(spec):
        return _run_gathered_streaming(spec, progress)
    started = time.perf_counter()
    data, ids, indices = sparse_driver.read_gather(spec)
    read_s = time.perf_counter() - started
    # Masked where an integer or bool value is null (--skipna): the gather keeps the mask.
    array = np.asanyarray(data.array)
    job = _job(spec, array.dtype, data.label)
    # The sparse family's rules and the row counts, as every --indices run checks them.
    counted = sparse.sparse_reduce(
        sparse.Labeled(np.ma.getdata(array), data.label),
        sparse.Labeled(ids.array, ids.label),
        spec.num_segments,
        "count",
        indices=sparse.Labeled(indices.array, indices.label),
        engine=engine_of(spec),
        block_rows=spec.block_rows,
    )
    sorting = time.perf_counter()
    inner = tuple(array.shape[1:])
    gathered = array[indices.array]
    if spec.skipna:
        counted.skipped_values = _missing(gathered)
    results = job.reduce_arrays(gathered, ids.array.reshape(-1), counted.id_report.num_segments)
    timings = {
        "read": read_s,
        "validate": counted.timings["validate"],
        "compute": counted.timings["compute"] + time.perf_counter() - sorting,
    }
    finished = _finished(spec, counted, job, results, inner)
    return DriverResult(
        finished,
        memory.facts(data),
        memory.facts(ids),
        "in-memory",
        {"gathered": "in memory", "indices": indices.label, "index_rows": int(indices.array.size)},
        timings,
        family="sparse",
    )


def _run_gathered_streaming(spec: RunSpec, progress: Progress | None) -> DriverResult:
    started = time.perf_counter()
    data, ids, indices = sparse_driver.open_gather(spec)
    array = np.asanyarray(data.array)  # masked where null, as in _run_gathered
    job = _job(spec, array.dtype, data.label)
    inner = tuple(array.shape[1:])
    width = ops.inner_size(inner)
    sink = SortedRows(job, spec.num_segments, width, array.dtype)
    skipped = 0

    def gather(block_ids: np.ndarray, block_indices: np.ndarray) -> None:
        nonlocal skipped
        rows = array[block_indices].reshape(len(block_ids), width)
        if spec.skipna:
            skipped += _missing(rows)
        sink.push(rows, block_ids)

    counted, blocks = sparse.reduce_streamed(
        sparse.Labeled(np.ma.getdata(array), data.label),
        ids.source,
        indices.source,
        None,
        spec.num_segments,
        "count",
        engine=engine_of(spec),
        block_rows=spec.block_rows,
        progress=progress,
        on_block=gather,
    )
    checkpoint("holistic-finish")
    results = sink.finish(counted.id_report.num_segments)
    if spec.skipna:
        counted.skipped_values = skipped
    finished = _finished(spec, counted, job, results, inner)
    return DriverResult(
        finished,
        memory.facts(data),
        ids.facts(counted.id_report.rows),
        "streaming",
        {"chunks": blocks, "indices": indices.source.label, "index_rows": counted.id_report.rows},
        {"read+compute": time.perf_counter() - started},
        family="sparse",
    )


def _missing(gathered: np.ndarray) -> int:
    """Values --skipna leaves out of gathered rows (every one is kept: the sparse family
    refuses ids it would drop): nulls (masked) and NaN."""
    missing = missing_values(gathered)
    return 0 if missing is None else int(missing.sum())
