"""``--by`` runs: the key columns give the group ids, then the normal unsorted reduction runs.

The key encoder's ids are dense and stable, so they feed the in-memory and the streamed driver
as user ids do (an inferred n then grows with the distinct keys, not the rows); rows with a
missing key get id -1 and are dropped like negative ids. At the end the result and its counts
are permuted into the key table's order (ascending by key, nulls last, or ``--keys-from``'s).
Folding is in row order per group whatever a group's id, so every path gives the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import core, io
from segcli.drivers.base import (
    DriverResult,
    InputFacts,
    Progress,
    RunSpec,
    engine_of,
    input_facts,
    op_and_fill,
)
from segcli.drivers.key_setup import encoder_for, open_key_table
from segcli.io.column_set import TableBatches
from segcli.io.formats import PipeSource, input_format
from segcli.io.keys import (
    KeyIdsChunks,
    KeysRead,
    ParquetPass,
    PassColumn,
    read_data_and_keys,
)
from segcli.keys import KeyEncoder
from segcli.keys.facts import KeyFacts

if TYPE_CHECKING:
    import pyarrow as pa

    from segcli.drivers.check import CheckResult

#: Sees every block of DATA as it is read (``check`` counts NaN with it).
Watch = Callable[[np.ndarray], None]


def encode_whole_read(spec: RunSpec, keys: KeysRead, label: str) -> tuple[KeyEncoder, np.ndarray]:
    """The encoder of a run that read its key columns whole, and their ids. A CSV
    --keys-from is read in the key types of that read, not of DATA's first block."""
    encoder = encoder_for(spec, keys.schema)
    # The declared types first: the key table has them whichever encoding the columns came in.
    encoder.declare(keys.schema, label)
    return encoder, encoder.encode(keys.table, label)


def given_n(encoder: KeyEncoder) -> int | None:
    # --keys-from fixes n up front; otherwise n is the number of groups, found as ids come.
    return encoder.n_groups if encoder.keys_from is not None else None


def put_in_key_order(reduction: core.Reduction, encoder: KeyEncoder, spec: RunSpec) -> KeyFacts:
    """Put the result rows in the key table's order; the run's key facts."""
    keys = encoder.finish()
    reduction.result = reduction.result[keys.order]
    reduction.counts = reduction.counts[keys.order]
    return KeyFacts(
        list(spec.by),
        keys.keys,
        encoder.missing_rows,
        spec.null_keys,
        spec.keys_from,
        encoder.first_missing_row,
    )


def key_input_facts(
    path: str, label: str, keys: pa.Schema, rows: int, size: int, fmt: str | None = None
) -> InputFacts:
    """``fmt``: the input's format where ``path`` names several files (a Dask folder or glob)."""
    types = ", ".join(str(t) for t in keys.types)
    return InputFacts(path, label, fmt or input_format(path), [rows], types, size)


def run_in_memory(
    spec: RunSpec, progress: Progress | None = None, watch: Watch | None = None
) -> DriverResult:
    """Read the data column and the key columns whole, encode the keys, reduce."""
    started = time.perf_counter()
    table, column = open_key_table(spec)
    data, keys = read_data_and_keys(table, column, spec.by)
    encoder, ids = encode_whole_read(spec, keys, table.label)
    if watch is not None:
        watch(data)
    read_s = time.perf_counter() - started
    data_label = f"{table.label}:{column}"
    ids_label = f"{table.label}:{','.join(spec.by)}"
    op, fill = op_and_fill(spec, data.dtype, tuple(data.shape[1:]), data_label)
    reduction = core.reduce_with_option_words(
        data,
        ids,
        given_n(encoder),
        op,
        engine=engine_of(spec),
        fill=fill,
        data_label=data_label,
        ids_label=ids_label,
    )
    key_facts = put_in_key_order(reduction, encoder, spec)
    timings = {
        "read": read_s,
        "validate": reduction.timings["validate"],
        "compute": reduction.timings["compute"],
    }
    return DriverResult(
        reduction,
        input_facts(spec.data, data_label, table.fmt, data.shape, data.dtype, table.note(column)),
        key_input_facts(spec.data, ids_label, keys.schema, keys.table.num_rows, keys.nbytes),
        "in-memory",
        {},
        timings,
        key_facts,
    )


class _Watched:
    """A ChunkSource whose blocks are shown to ``watch`` on their way to the fold."""

    def __init__(self, source: io.ChunkSource, watch: Watch) -> None:
        self._source, self._watch = source, watch
        self.label, self.shape, self.dtype = source.label, source.shape, source.dtype

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        for block in self._source.chunks(rows):
            self._watch(block)
            yield block


def run_streaming(
    spec: RunSpec, progress: Progress | None = None, watch: Watch | None = None
) -> DriverResult:
    """Stream the data column and the key columns in aligned blocks, encoding as they come."""
    from segcli.drivers.stream import read_ahead, reduce_stream, rows_of

    table, column = open_key_table(spec, one_pass=True)
    encoder = encoder_for(spec, table)
    source: io.ChunkSource
    if isinstance(table.source, PipeSource):  # read once: the keys from the data's pass
        batches = TableBatches(table, [column], keys=spec.by)
        source = batches.sources[0]
        ids = KeyIdsChunks(table, spec.by, encoder, batches)
    elif table.fmt == "parquet":
        shared = ParquetPass(table, column, spec.by, prefetch=read_ahead)
        source = PassColumn(table, column, shared)
        ids = KeyIdsChunks(table, spec.by, encoder, shared)
    else:
        source = io.open_chunked(spec.data, column=column, role="data", csv=spec.csv)
        ids = KeyIdsChunks(table, spec.by, encoder)
    data: Any = source if watch is None else _Watched(source, watch)
    op, fill = op_and_fill(spec, source.dtype, tuple(source.shape[1:]), source.label)
    reduction, plan = reduce_stream(
        data,
        ids,
        given_n(encoder),
        op,
        engine=engine_of(spec),
        fill=fill,
        block_rows=spec.block_rows,
        memory_limit=spec.memory_budget,
        progress=progress,
    )
    key_facts = put_in_key_order(reduction, encoder, spec)
    rows = rows_of(reduction.id_report, ids)
    shape = (rows, *source.shape[1:])
    note = getattr(source, "note", None)
    return DriverResult(
        reduction,
        input_facts(spec.data, source.label, table.fmt, shape, source.dtype, note),
        key_input_facts(spec.data, ids.label, ids.schema, rows, ids.bytes_read),
        "streaming",
        {"chunks": plan.blocks},
        {"read+compute": reduction.timings["compute"]},
        key_facts,
    )


def check_by(spec: RunSpec) -> CheckResult:
    """``segcli check --by``: the groups' row counts (a ``count`` run) and DATA's NaN."""
    from segcli import ops
    from segcli.drivers.check import CheckResult, NanScan
    from segcli.drivers.choose import metadata_first, should_stream

    nan = NanScan()
    counting = replace(spec, op="count", engine="numpy", fill=None, fast_atomics=False)
    run = run_streaming if should_stream(spec) else run_in_memory
    with metadata_first(spec):  # a null gives way to --keys-from and DATA's dtype for the op
        done = run(counting, None, nan.feed)
    ops.check_data_dtype(ops.get_op(spec.op), np.dtype(done.data.dtype), done.data.label)
    return CheckResult(
        done.reduction.id_report,
        done.reduction.counts,
        nan.found,
        nan.first,
        done.data,
        done.ids,
        done.mode,
        done.keys,
        null_values=nan.nulls,
        first_dropped=_missing_key_text(done.keys),
    )


def _missing_key_text(keys: KeyFacts | None) -> str | None:
    if keys is None or keys.first_missing_row is None:
        return None
    return f"row {keys.first_missing_row}"
