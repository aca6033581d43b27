"""The driver of runs with a holistic op (median, quantile, nunique), alone or in agg's list.

The inputs are read once. The engine folds what merges (the row counts, and agg's other ops),
validating the ids as every run does; the same rows go to :mod:`segcli.holistic_runs` for the
holistic ops. In memory when the inputs fit the memory budget; a ``--sorted`` stream segment by
segment wherever other runs would stream; an unsorted input only when it must stream (larger
than the budget, stdin, ``--chunk-rows``), through partition files under ``--tmp-dir``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any

import numpy as np

from segcli import core, ops
from segcli.drivers import memory
from segcli.drivers.base import DriverResult, Progress, RunSpec, engine_of, op_names
from segcli.drivers.choose import must_stream, should_stream
from segcli.drivers.stream import open_inputs, reduce_stream, rows_of
from segcli.engines import Engine
from segcli.errors import EngineUnavailableError, NotStreamableError, UsageError
from segcli.holistic_runs import (
    HolisticJob,
    Partitions,
    SortedRows,
    check_q,
    is_holistic,
    partition_count,
    result_name,
)
from segcli.io.columns import without_null_ids
from segcli.signals import checkpoint


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
    if spec.by:
        raise UsageError(f"--by does not take {first} yet; give the segment ids as IDS")
    if spec.sparse:
        raise UsageError(f"--indices and --weights do not take {first} yet")
    check_q(names, spec.q)


def run(spec: RunSpec, progress: Progress | None = None) -> DriverResult:
    refuse(spec)
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
    return should_stream(spec) if spec.sorted_ids else must_stream(spec)


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
    from segcli.multi import combined_op

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
    started = time.perf_counter()
    data, ids = memory.read(spec)
    read_s = time.perf_counter() - started
    inner = tuple(data.array.shape[ids.array.ndim :])
    job = _job(spec, data.array.dtype, data.label)
    fold_op, fold_fill = _fold_op(spec, data.array.dtype, inner, data.label)
    ids_array, null_ids = without_null_ids(ids.array, sorted_ids=spec.sorted_ids, label=ids.label)
    reduction = core.reduce_arrays(
        data.array,
        ids_array,
        spec.num_segments,
        fold_op,
        sorted=spec.sorted_ids,
        engine=engine_of(spec),
        fill=fold_fill,
        data_label=data.label,
        ids_label=ids.label,
    )
    sorting = time.perf_counter()
    reduction.null_ids = null_ids
    results = job.reduce_arrays(data.array, ids_array, reduction.id_report.num_segments)
    timings = {
        "read": read_s,
        "validate": reduction.timings["validate"],
        "compute": reduction.timings["compute"] + time.perf_counter() - sorting,
    }
    finished = _finished(spec, reduction, job, results, inner)
    return DriverResult(finished, memory.facts(data), memory.facts(ids), "in-memory", {}, timings)


def _run_streaming(spec: RunSpec, progress: Progress | None) -> DriverResult:
    started = time.perf_counter()
    data, ids = open_inputs(spec)
    source = data.source
    inner = tuple(source.shape[len(ids.source.shape) :])
    width = ops.inner_size(inner)
    job = _job(spec, source.dtype, source.label)
    fold_op, fold_fill = _fold_op(spec, source.dtype, inner, source.label)
    sink: SortedRows | Partitions
    mode_facts: dict[str, Any] = {}
    if spec.sorted_ids:
        sink = SortedRows(job, spec.num_segments, width, source.dtype)
        context: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    else:
        rows = -1 if ids.source.shape[0] < 0 else int(np.prod(ids.source.shape, dtype=np.int64))
        parts = partition_count(rows, width * source.dtype.itemsize + 8, spec.memory_budget)
        sink = context = Partitions(
            job,
            parts,
            width,
            source.dtype,
            tmp_dir=spec.tmp_dir,
            num_segments=spec.num_segments,
        )
        mode_facts["partitions"] = parts
    with context:
        reduction, plan = reduce_stream(
            source,
            ids.source,
            spec.num_segments,
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
    rows_read = rows_of(reduction.id_report, ids.source)
    finished = _finished(spec, reduction, job, results, inner)
    return DriverResult(
        finished,
        data.facts(rows_read),
        ids.facts(rows_read),
        "streaming",
        {"chunks": plan.blocks, **mode_facts},
        {"read+compute": time.perf_counter() - started},
    )
