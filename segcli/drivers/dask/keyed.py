"""``--by`` on Dask: each partition encodes its own keys; partial results merge by key.

A partition task reads its rows of the data column and of the key columns, numbers its groups
with its own :class:`~segcli.keys.KeyEncoder` (rows with a missing key get -1 and are dropped
and counted) and folds its rows into a state over those local groups. Combine tasks merge
neighbours in partition order: the later encoder's groups are taken into the earlier's
(:meth:`KeyEncoder.merge`, which unifies dictionaries by value), the later state's segment
axis is scattered into the merged numbering (the remap is injective) and the two states
combine. Rows keep their global row numbers, so lanes match the single-machine run's.

Where the bits of a fold depend on its order (a float sum; see :mod:`.tasks`), partitions
fold in a chain instead: partition tasks read and encode in parallel
(:func:`read_keyed_partition`), and each fold task takes the partition's groups into the
encoder of the partitions before it and folds its rows on to their state
(:func:`fold_keyed`), in the single machine's order, so with its bytes.

With ``--keys-from`` every partition encodes against the same table, so ids are positions in
it and no remap is needed. An input error of a partition (an unknown key, a file that changed)
travels in its result instead of failing the task, so that the client reports the error of the
earliest partition whatever order the tasks finish in. At the end the client puts the result
rows in key-table order, as the single-machine run does.
"""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from segcli import ops
from segcli.core import Reduction, check_before_rows, check_output_fits
from segcli.drivers.base import DriverResult, Progress, RunSpec, op_and_fill
from segcli.drivers.dask.plan import Partition, Plan, expand, open_dataset, plan_partitions
from segcli.drivers.dask.tasks import cpu_engine, order_matters
from segcli.errors import SegcliError
from segcli.io.columns import NullsError, nulls_kept
from segcli.io.keys import check_key_columns, key_schema, key_table_file, pick_data_column
from segcli.io.rows import read_key_rows, read_rows
from segcli.keys import KeyEncoder
from segcli.keys.common_type import common_key_schema
from segcli.keys.values import NullKeys
from segcli.multi import fold_rows as fold_block
from segcli.validate import IdReport

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class KeyedJob:
    """What every partition task of one ``--by`` run shares."""

    #: An op name, or an op of the table with its options (var's --ddof, agg's ops).
    op: str | ops.Op
    by: tuple[str, ...]
    null_keys: str
    #: The ``--keys-from`` key columns (already checked on the client), or None.
    keys_from: pa.Table | None
    keys_from_label: str
    #: Data elements of the whole run: ``auto`` picks the engine as for a single machine.
    elements: int
    #: The key columns' types, which every partition's keys are cast to (the files' types
    #: may differ: partitions of an int32 file and of an int64 one merge as int64).
    key_types: pa.Schema

    def encoder(self) -> KeyEncoder:
        encoder = KeyEncoder(
            self.by,
            null_keys=cast(NullKeys, self.null_keys),
            keys_from=self.keys_from,
            keys_from_label=self.keys_from_label,
        )
        # A zero-row block fixes the types before the partition's own first block would.
        encoder.encode(self.key_types.empty_table(), "the run's key types")
        return encoder


@dataclass
class KeyedResult:
    """A partition's (or a merged run of partitions') groups and partial state over them."""

    encoder: KeyEncoder | None
    state: ops.State | None
    #: Bytes of key columns read, for the summary.
    key_bytes: int = 0
    engines: frozenset[str] = frozenset()
    #: The input error of the earliest failing partition; then the rest is None.
    error: SegcliError | None = None


# ---------------------------------------------------------------------------------------------
# The map step (on a worker)


def run_keyed_partition(part: Partition, job: KeyedJob) -> KeyedResult:
    """Read, encode and fold one partition; an input error comes back in the result."""
    try:
        return _fold_partition(part, job)
    except SegcliError as exc:
        return KeyedResult(None, None, error=exc)


@dataclass
class KeyedRows:
    """A partition read and encoded, its rows not folded yet (see :func:`fold_keyed`)."""

    encoder: KeyEncoder | None
    #: ``(rows, inner_size)`` data and the rows' ids in ``encoder``.
    data: np.ndarray | None
    ids: np.ndarray | None
    inner: tuple[int, ...] = ()
    row_offset: int = 0
    key_bytes: int = 0
    error: SegcliError | None = None


def read_keyed_partition(part: Partition, job: KeyedJob, *after: None) -> KeyedRows:
    """Read and encode one partition, for :func:`fold_keyed`; an input error comes back in
    the result. ``after``: tasks to wait for (see ``_fold_chain``), not used."""
    try:
        data, ids, encoder, key_bytes = _encoded_partition(part, job)
    except SegcliError as exc:
        return KeyedRows(None, None, None, error=exc)
    inner = tuple(data.shape[1:])
    rows = data.reshape(len(ids), ops.inner_size(inner))
    return KeyedRows(encoder, rows, ids, inner, part.row_offset, key_bytes)


def fold_keyed(before: KeyedResult | None, part: KeyedRows, job: KeyedJob) -> KeyedResult:
    """The partitions before (merged, or None for the first) with ``part`` folded on, in row
    order: the next link of the chain. The first error instead, if any."""
    if before is not None and before.error is not None:
        return before
    if part.error is not None:
        return KeyedResult(None, None, error=part.error)
    try:
        return _folded_on(before, part, job)
    except SegcliError as exc:
        return KeyedResult(None, None, error=exc)


def _folded_on(before: KeyedResult | None, part: KeyedRows, job: KeyedJob) -> KeyedResult:
    assert part.encoder is not None and part.data is not None and part.ids is not None
    # The result before is another task's (kept for a retry): taken in by copy.
    encoder = job.encoder() if before is None else copy.deepcopy(before.encoder)
    assert encoder is not None
    remap = encoder.merge(part.encoder)
    ids = part.ids
    if len(remap):  # else every row's key is missing (-1), which stays
        ids = np.where(ids >= 0, remap[np.maximum(ids, 0)], ids)
    op = ops.get_op(job.op)
    size = encoder.n_groups
    check_output_fits(op, size, part.inner, part.data.dtype, sorted_ids=False)
    engine = cpu_engine(job.elements)
    if before is None or before.state is None:
        state = engine.new_state(op, size, part.inner, part.data.dtype, sorted_ids=False)
        key_bytes, engines = part.key_bytes, frozenset({engine.name})
    else:
        state = before.state.grown(size).transferred(np.array)
        key_bytes = before.key_bytes + part.key_bytes
        engines = before.engines | {engine.name}
    state.next_row = part.row_offset  # lanes follow global row numbers
    if len(ids):
        fold_block(engine, state, part.data, ids, sorted_ids=False)
    return KeyedResult(encoder, state.to_host(), key_bytes, engines)


def _encoded_partition(
    part: Partition, job: KeyedJob
) -> tuple[np.ndarray, np.ndarray, KeyEncoder, int]:
    """The partition's data rows, its rows' ids in its own encoder, and its key bytes."""
    keys = read_key_rows(part.data, job.by, part.start, part.stop)
    with nulls_kept(ops.get_op(job.op).skipna_of is not None):  # the worker's own context
        data = read_rows(part.data, part.start, part.stop)
    encoder = job.encoder()
    # Errors name a row of the file, as a single-machine run over that file does.
    encoder.rows = part.start
    ids = encoder.encode(keys, part.data.shown_path)  # a zero-row block still fixes the key types
    encoder.rows -= part.start
    return data, ids, encoder, keys.nbytes


def _fold_partition(part: Partition, job: KeyedJob) -> KeyedResult:
    data, ids, encoder, key_bytes = _encoded_partition(part, job)
    op = ops.get_op(job.op)
    inner = tuple(data.shape[1:])
    check_output_fits(op, encoder.n_groups, inner, data.dtype, sorted_ids=False)
    engine = cpu_engine(job.elements)
    state = engine.new_state(op, encoder.n_groups, inner, data.dtype, sorted_ids=False)
    state.next_row = part.row_offset  # lanes follow global row numbers
    if len(ids):
        rows = data.reshape(len(ids), ops.inner_size(inner))
        fold_block(engine, state, rows, ids, sorted_ids=False)
    return KeyedResult(encoder, state.to_host(), key_bytes, frozenset({engine.name}))


# ---------------------------------------------------------------------------------------------
# The combine step


def combine_keyed(*parts: KeyedResult) -> KeyedResult:
    """Merge partial results given in partition order (earlier partitions first); the first
    error instead, if any (a merge that fails, on key types that differ, is one too)."""
    failed = [part for part in parts if part.error is not None]
    if failed:
        return failed[0]
    try:
        return _merged(parts)
    except SegcliError as exc:
        return KeyedResult(None, None, error=exc)


def _merged(parts: tuple[KeyedResult, ...]) -> KeyedResult:
    first = parts[0]
    assert first.encoder is not None and first.state is not None
    # The inputs are other tasks' results, which the scheduler may hand to another task or
    # keep for a retry: merging into them in place would corrupt those.
    encoder = copy.deepcopy(first.encoder)
    state, key_bytes, engines = first.state, first.key_bytes, first.engines
    for part in parts[1:]:
        assert part.encoder is not None and part.state is not None
        remap = encoder.merge(part.encoder)
        size = encoder.n_groups
        state = ops.combine(state.grown(size), scattered(part.state, remap, size))
        key_bytes += part.key_bytes
        engines |= part.engines
    return KeyedResult(encoder, state, key_bytes, engines)


def scattered(state: ops.State, remap: np.ndarray, size: int) -> ops.State:
    """``state`` over ``size`` segments, its segment ``j`` moved to ``remap[j]``; the others
    empty (the op's identity). ``remap`` must be injective."""
    if len(remap) == size and np.array_equal(remap, np.arange(size)):
        return state
    # An empty state of the new size: each array at its identity, however the op keeps it.
    moved = state.trimmed(0).grown(size)
    for name, array in state.arrays.items():
        target = moved.arrays[name]
        if array.ndim == 1:
            target[remap] = array
        else:  # intermediates: (lanes, segments, inner)
            target[:, remap] = array
    return moved


# ---------------------------------------------------------------------------------------------
# The client


def plan_keyed(spec: RunSpec) -> tuple[Plan, pa.Schema]:
    """The files of the data column and their partitions, and the key columns' types (each
    the type every file's keys fit: :mod:`segcli.keys.common_type`), checked from metadata."""
    paths = expand(spec.data)
    first = key_table_file(paths[0], None)
    check_key_columns(first, spec.by)
    column = pick_data_column(first, spec.data_column, spec.by)
    data = open_dataset(spec.data, column=column, key=None, role="data", paths=paths)
    schemas = [key_schema(first, spec.by)]
    for ref in data.files[1:]:
        table = key_table_file(ref.shown_path, None)
        check_key_columns(table, spec.by)
        schemas.append(key_schema(table, spec.by))
    partitions = plan_partitions(data, data, rows_per_partition=spec.block_rows)
    return Plan(data, data, partitions), common_key_schema(schemas)


def run(spec: RunSpec, progress: Progress | None = None, *, client: Any = None) -> DriverResult:
    """``--by`` on a Dask cluster; see :func:`segcli.drivers.dask.run` for ``client``."""
    from segcli.drivers.dask import _cluster, _facts, counted_nulls, planned_nulls
    from segcli.drivers.key_setup import encoder_for
    from segcli.drivers.keys import key_input_facts, put_in_key_order

    try:
        plan, schema = plan_keyed(spec)
    except NullsError as error:
        raise planned_nulls(lambda: plan_keyed(spec)[0].partitions, False, error) from None
    data = plan.data
    chosen, fill = op_and_fill(spec, data.dtype, tuple(data.shape[1:]), data.label)
    op = ops.get_op(chosen)
    check_before_rows(
        op,
        (data.shape, data.dtype),
        ((data.shape[0],), np.dtype(np.int64)),
        None,
        sorted_ids=False,
        fill=fill,
        data_label=data.label,
        ids_label=_ids_label(spec),
    )
    seed = encoder_for(spec, schema)
    # A zero-row block: the key types are checked and --keys-from is matched to them now,
    # before any worker reads a row.
    seed.encode(schema.empty_table(), data.files[0].shown_path)
    job = KeyedJob(
        op,
        tuple(spec.by),
        spec.null_keys,
        seed.keys_from,
        seed.keys_from_label,
        int(np.prod(data.shape, dtype=np.int64)),
        schema,
    )
    started = time.perf_counter()
    with _cluster(spec, client) as (client, where):
        workers = len(client.nthreads())
        connected = time.perf_counter()
        merged = _map_reduce(client, plan, job, progress)
        if isinstance(merged.error, NullsError):
            raise counted_nulls(client, plan.partitions, op, False, merged.error) from None
        if merged.error is not None:
            raise merged.error
        assert merged.encoder is not None and merged.state is not None
        encoder = merged.encoder
        n = encoder.n_groups
        inner = tuple(data.shape[1:])
        check_output_fits(op, n, inner, data.dtype, sorted_ids=False)
        report = IdReport(n, encoder.keys_from is None, data.shape[0], encoder.missing_rows, 0)
        engines = ", ".join(sorted(merged.engines)) or "no engine"
        reduction = Reduction.finish(
            merged.state.grown(n),
            report,
            sorted_ids=False,
            engine="dask",
            engine_reason=f"{where}; partitions on {engines}",
            fill=fill,
            timings={"cluster": connected - started},
        )
        reduction.timings["compute"] = time.perf_counter() - connected
    key_facts = put_in_key_order(reduction, encoder, spec)
    ids_label = _ids_label(spec)
    return DriverResult(
        reduction,
        _facts(data),
        key_input_facts(spec.data, ids_label, schema, data.shape[0], merged.key_bytes, data.fmt),
        "distributed",
        {"partitions": len(plan.partitions), "workers": workers},
        dict(reduction.timings),
        key_facts,
    )


def _map_reduce(client: Any, plan: Plan, job: KeyedJob, progress: Progress | None) -> KeyedResult:
    """Run the partition tasks and the combine tree; the merged result (or the first error)."""
    from segcli.drivers.dask import _follow, _outcome, submit_partitions

    token = uuid.uuid4().hex[:12]  # task keys unique per run on a shared scheduler
    tasks, root = submit_partitions(
        client,
        plan,
        job,
        token,
        chained=order_matters(job.op, plan.data.dtype),
        each=(run_keyed_partition, combine_keyed),
        chain=(read_keyed_partition, fold_keyed),
    )
    try:
        _follow(client, tasks, 1, plan.data.shape[0], progress)
        return cast(KeyedResult, _outcome(root, "combining the partitions"))
    finally:
        for future in (*tasks, root):
            future.release()


def _ids_label(spec: RunSpec) -> str:
    return f"{spec.data}:{','.join(spec.by)}"
