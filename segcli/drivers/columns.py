"""Several data columns of one table in one read (``segcli agg --data-column a,b``).

The table is read once, whole or as one stream of blocks holding every data column (and the
ids, when they are a column of it); the ids are read once and validated once, and each column's
combined op (:func:`segcli.drivers.base.op_and_fill`) is folded from the same read, column by
column, with the same engine paths as a one-column run, so that each column's result has the
bytes of that run. The result is one :class:`DriverResult` per column, in order.

``--by`` runs read the data columns and the key columns together (in memory), or the data
columns as one stream beside the key columns' (streamed, as a one-column run reads its data
and its keys); the keys are encoded once. Dask partitions read their own rows, column by
column: a Dask run carries out one run per column (:func:`run`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import cast

import numpy as np

from segcli import core, io, ops
from segcli.core import Reduction
from segcli.drivers.base import (
    DriverResult,
    Progress,
    RunSpec,
    engine_of,
    has_holistic,
    input_facts,
    op_and_fill,
)
from segcli.drivers.choose import carry_out, metadata_first, pipe_streams, should_stream
from segcli.drivers.memory import facts
from segcli.drivers.stream import (
    ChunkSource,
    FoldedColumn,
    StreamInput,
    check_sources,
    fold_in_step,
    plan_blocks,
    rows_of,
)
from segcli.errors import UsageError
from segcli.io.column_names import listing
from segcli.io.column_set import TableBatches, open_pipe_column, read_columns
from segcli.io.columns import nulls_kept, side_by_side, without_null_ids
from segcli.io.formats import PipeSource, input_format, is_pipe
from segcli.io.npy import Readable
from segcli.io.read import IDS_ROLE, read_one, read_stdin, refuse_option
from segcli.io.sizes import decoded_bytes
from segcli.io.tables import TableFile, open_table


def run(spec: RunSpec, columns: list[str], progress: Progress | None = None) -> list[DriverResult]:
    """Reduce each of DATA's ``columns`` by ``spec``'s ops (``spec.data_column`` is not used)."""
    if has_holistic(spec):
        # The sorting ops have a driver of their own (which refuses Dask): each column is a run
        # of its own (DATA read once per column).
        return [carry_out(dataclasses.replace(spec, data_column=c), progress) for c in columns]
    if spec.engine == "dask":
        # Dask partitions read their own rows: each column is a run of its own, on one cluster.
        from segcli.drivers.dask import run_columns

        return run_columns(spec, columns, progress)
    with nulls_kept(spec.skipna), metadata_first(spec, columns):  # --skipna: a null is missing
        return _run(spec, columns, progress)


def _run(spec: RunSpec, columns: list[str], progress: Progress | None) -> list[DriverResult]:
    streams = _streams(spec, columns)
    if spec.by:
        return _run_keyed(spec, columns, progress, streams=streams)
    _refuse_arrays(spec, columns)
    if streams:
        return _run_streaming(spec, columns, progress)
    return _run_in_memory(spec, columns)


def _refuse_arrays(spec: RunSpec, columns: list[str]) -> None:
    """Several data columns need a table: .npy and .npz hold arrays."""
    if spec.data != "-" and input_format(spec.data) in ("npy", "npz"):
        refuse_option("--data-column", ",".join(columns), spec.data)


def _streams(spec: RunSpec, columns: list[str]) -> bool:
    """As :func:`segcli.drivers.choose.should_stream` decides, over every column's bytes."""
    if "-" in (spec.data, spec.ids) or spec.block_rows is not None:
        return should_stream(dataclasses.replace(spec, data_column=columns[0]))
    if pipe_streams(spec):
        return True
    if any(is_pipe(path) for path in (spec.data, spec.ids) if path is not None):
        # A pipe is read into memory whole (it cannot seek); probing its metadata would read
        # it a first time.
        return False
    in_table = [*columns, *spec.by]
    if spec.ids is None and spec.ids_column:
        in_table.append(spec.ids_column)
    sizes = [decoded_bytes(spec.data, in_table)]
    if spec.ids is not None:
        sizes.append(decoded_bytes(spec.ids, [n for n in (spec.ids_column, spec.ids_key) if n]))
    above = spec.stream_above if spec.stream_above is not None else spec.memory_budget
    if above is None or any(size is None for size in sizes):
        return False
    return sum(size for size in sizes if size is not None) > above


def _table(spec: RunSpec, one_pass: bool = False) -> TableFile:
    """DATA's table; from stdin, a .npy stream is refused (it holds one array)."""
    if spec.data == "-":
        got = read_stdin(spec.stdin)
        if isinstance(got, np.ndarray):
            raise UsageError(
                "<stdin>: a .npy stream holds one array; several --data-column need "
                "a table (Parquet, Arrow IPC)"
            )
        return got
    return open_table(spec.data, input_format(spec.data), spec.csv, one_pass=one_pass)


def _on_a_pipe(table: TableFile) -> bool:
    """A table on a pipe read in one pass (see open_table)."""
    return isinstance(table.source, PipeSource)


def _names(table: TableFile, spec: RunSpec, columns: list[str]) -> tuple[list[str], str | None]:
    """The data columns as the table names them, and the ids column when IDS is in it."""
    refuse_option("--data-key", spec.data_key, table.label)
    names = [table.pick(column, "--data-column") for column in columns]
    if spec.ids is not None:
        return names, None
    refuse_option("--ids-key", spec.ids_key, table.label)
    if spec.ids_column is None:
        names_given = listing(table.column_names()) or "none"
        raise UsageError(
            f"{table.label}: DATA and IDS from one table need --ids-column (columns: {names_given})"
        )
    return names, table.pick(spec.ids_column, "--ids-column")


# ---------------------------------------------------------------------------------------------
# In memory


def _run_in_memory(spec: RunSpec, columns: list[str]) -> list[DriverResult]:
    started = time.perf_counter()
    table = _table(spec)
    names, ids_name = _names(table, spec, columns)
    if ids_name is None:
        assert spec.ids is not None
        ids_path = spec.ids
        # Both read even if DATA holds nulls: IDS' may come first, as a streamed run meets them.
        data, [ids] = side_by_side(
            (
                lambda: read_columns(table, spec.data, names),
                lambda: [
                    read_one(
                        ids_path, IDS_ROLE, spec.ids_column, spec.ids_key, spec.stdin, spec.csv
                    )
                ],
            )
        )
    else:
        *data, ids = read_columns(table, spec.data, [*names, ids_name])
    read_s = time.perf_counter() - started
    ids_array, null_ids = without_null_ids(ids.array, sorted_ids=spec.sorted_ids, label=ids.label)
    done = []
    for column in data:
        inner = tuple(column.array.shape[ids.array.ndim :])
        op, fill = op_and_fill(spec, column.array.dtype, inner, column.label)
        reduction = core.reduce_with_option_words(
            column.array,
            ids_array,
            spec.num_segments,
            op,
            sorted=spec.sorted_ids,
            engine=engine_of(spec),
            fill=fill,
            data_label=column.label,
            ids_label=ids.label,
        )
        timings = {
            "read": read_s,
            "validate": reduction.timings["validate"],
            "compute": reduction.timings["compute"],
        }
        read_s = 0.0  # one read for every column
        reduction.null_ids = null_ids
        done.append(DriverResult(reduction, facts(column), facts(ids), "in-memory", {}, timings))
    return done


# ---------------------------------------------------------------------------------------------
# Grouped by key columns


def _run_keyed(
    spec: RunSpec, columns: list[str], progress: Progress | None, *, streams: bool
) -> list[DriverResult]:
    from segcli.drivers.key_setup import encoder_for
    from segcli.drivers.keys import (
        encode_whole_read,
        given_n,
        key_input_facts,
        put_in_key_order,
    )
    from segcli.io.keys import (
        KeyIdsChunks,
        check_key_columns,
        key_table_file,
        pick_data_column,
        read_columns_and_keys,
    )

    started = time.perf_counter()
    table = key_table_file(spec.data, spec.csv, one_pass=streams)
    check_key_columns(table, spec.by)
    names = [pick_data_column(table, column, spec.by) for column in columns]
    labels = [f"{table.label}:{name}" for name in names]
    if streams:
        encoder = encoder_for(spec, table)
        # A table on a pipe gives its bytes once: its keys come from the data's pass.
        batches = TableBatches(table, names, keys=spec.by if _on_a_pipe(table) else ())
        ids = KeyIdsChunks(table, spec.by, encoder, batches if _on_a_pipe(table) else None)
        sources = batches.sources
        keyed = dataclasses.replace(spec, num_segments=given_n(encoder))
        reductions, blocks = reduce_columns(sources, ids, keyed, progress=progress)
        rows = rows_of(reductions[0].id_report, ids)
        keys_facts = key_input_facts(spec.data, ids.label, ids.schema, rows, ids.bytes_read)
        data_facts = [
            input_facts(
                spec.data, s.label, table.fmt, (rows, *s.shape[1:]), s.dtype, table.note(name)
            )
            for s, name in zip(sources, names, strict=True)
        ]
        mode, mode_facts = "streaming", {"chunks": blocks}
        timings = [{"read+compute": r.timings["compute"]} for r in reductions]
    else:
        arrays, keys = read_columns_and_keys(table, names, spec.by)
        encoder, flat_ids = encode_whole_read(spec, keys, table.label)
        read_s = time.perf_counter() - started
        ids_label = f"{table.label}:{','.join(spec.by)}"
        reductions = []
        for array, label in zip(arrays, labels, strict=True):
            op, fill = op_and_fill(spec, array.dtype, tuple(array.shape[1:]), label)
            reductions.append(
                core.reduce_with_option_words(
                    array,
                    flat_ids,
                    given_n(encoder),
                    op,
                    engine=engine_of(spec),
                    fill=fill,
                    data_label=label,
                    ids_label=ids_label,
                )
            )
        rows = keys.table.num_rows
        keys_facts = key_input_facts(spec.data, ids_label, keys.schema, rows, keys.nbytes)
        data_facts = [
            input_facts(spec.data, label, table.fmt, a.shape, a.dtype, table.note(name))
            for a, label, name in zip(arrays, labels, names, strict=True)
        ]
        mode, mode_facts = "in-memory", {}
        timings = []
        for reduction in reductions:
            timings.append({"read": read_s, **reduction.timings})
            read_s = 0.0  # one read for every column
    return [
        DriverResult(
            reduction,
            data,
            keys_facts,
            mode,
            dict(mode_facts),
            steps,
            put_in_key_order(reduction, encoder, spec),
        )
        for reduction, data, steps in zip(reductions, data_facts, timings, strict=True)
    ]


# ---------------------------------------------------------------------------------------------
# Streamed


def _open_streams(spec: RunSpec, columns: list[str]) -> tuple[list[StreamInput], StreamInput]:
    """The data columns and the ids as sources read in step, DATA's table in one stream."""
    if spec.data == "-":
        if spec.ids is None and spec.ids_column is not None:
            stdin = cast(Readable, spec.stdin)
            *data, ids = io.open_arrow_stream_columns(stdin, [*columns, spec.ids_column])
            return [StreamInput("-", s, "arrow") for s in data], StreamInput("-", ids, "arrow")
        raise UsageError(
            "several --data-column from stdin need an Arrow stream holding them and the ids "
            "(--ids-column)"
        )
    table = _table(spec, one_pass=True)
    names, ids_name = _names(table, spec, columns)
    fmt = table.fmt
    if ids_name is not None:
        *data, ids = TableBatches(table, [*names, ids_name]).sources
        return [StreamInput(spec.data, s, fmt) for s in data], StreamInput(spec.data, ids, fmt)
    assert spec.ids is not None
    sources = TableBatches(table, names).sources
    ids_fmt = "npy" if spec.ids == "-" else input_format(spec.ids)
    ids_source = open_pipe_column(
        spec.ids, spec.ids_column, spec.ids_key, IDS_ROLE, spec.csv
    ) or io.open_chunked(
        spec.ids,
        column=spec.ids_column,
        key=spec.ids_key,
        role="ids",
        stdin=cast(Readable | None, spec.stdin),
        csv=spec.csv,
    )
    return [StreamInput(spec.data, s, fmt) for s in sources], StreamInput(
        spec.ids, ids_source, ids_fmt
    )


def _run_streaming(
    spec: RunSpec, columns: list[str], progress: Progress | None
) -> list[DriverResult]:
    data, ids = _open_streams(spec, columns)
    reductions, blocks = reduce_columns(
        [d.source for d in data], ids.source, spec, progress=progress
    )
    rows = rows_of(reductions[0].id_report, ids.source)
    return [
        DriverResult(
            reduction,
            column.facts(rows),
            ids.facts(rows),
            "streaming",
            {"chunks": blocks},
            {"read+compute": reduction.timings["compute"]},
        )
        for column, reduction in zip(data, reductions, strict=True)
    ]


def reduce_columns(
    data: list[ChunkSource],
    ids: ChunkSource,
    spec: RunSpec,
    *,
    progress: Progress | None = None,
) -> tuple[list[Reduction], int]:
    """Each data column reduced by ``spec``'s ops in one pass over blocks read in step: the
    reductions, in order, and how many blocks there were. The ids are validated once; each
    column folds as :func:`segcli.drivers.stream.reduce_stream` folds one."""
    sorted_ids = spec.sorted_ids
    columns = []
    for source in data:
        inner = tuple(source.shape[len(ids.shape) :])
        op, fill = op_and_fill(spec, source.dtype, inner, source.label)
        columns.append(FoldedColumn(source, ops.get_op(op), fill))
    n, ids_shape = None, ids.shape
    for column in columns:
        n, ids_shape = check_sources(
            column.op,
            column.source,
            ids,
            spec.num_segments,
            sorted_ids=sorted_ids,
            fill=column.fill,
        )
    plan = plan_blocks(data, ids, block_rows=spec.block_rows, memory_limit=spec.memory_budget)
    return fold_in_step(
        columns,
        ids,
        n=n,
        ids_shape=ids_shape,
        rows=plan.block_rows,
        sorted_ids=sorted_ids,
        engine=engine_of(spec),
        skipna=spec.skipna,
        progress=progress,
    )
