"""Streaming execution: inputs larger than memory, folded block by block in one pass.

DATA and IDS are read in aligned blocks of rows along their first axis. Each block is validated
by the shared :class:`segcli.validate.IdScanner` (so errors name the global position) and folded
into the op's partial state by the chosen engine. Engines fold each segment's rows in global
row order within their lane (lanes follow global row numbers, see :mod:`segcli.ops`), so the
result has the same bytes as the in-memory path. Nothing is written until
the whole input has been read and found valid.

When the number of segments is not given it is only known at the end; the state then grows as
larger ids appear (segments not yet seen are empty, so growing loses nothing).
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from queue import Full, Queue
from typing import Any, NoReturn, Protocol, TypeVar, cast

import numpy as np

from segcli import io, ops, validate
from segcli.core import Reduction, check_before_rows, check_output_fits
from segcli.drivers.base import (
    DriverResult,
    InputFacts,
    Progress,
    RunSpec,
    engine_of,
    input_facts,
    op_and_fill,
)
from segcli.engines import Engine, EngineChoice, choose_engine
from segcli.errors import InvalidInputError, SegcliError, UsageError
from segcli.io.columns import NullIdsError, NullsError, first_nulls, without_null_ids
from segcli.io.formats import input_format, is_pipe
from segcli.io.npy import Readable
from segcli.io.read import DATA_ROLE, IDS_ROLE
from segcli.multi import fold_rows

_Item = TypeVar("_Item")

#: Bytes of DATA plus IDS per block when the caller names no block size: small enough for the
#: reading of one block to overlap the fold of the one before from early on (a 160 MB input
#: streamed in 62 ms with 8 MB blocks, 91 ms with 64 MB), large enough that a block's fixed
#: costs vanish.
DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024


class ChunkSource(Protocol):
    label: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    def chunks(self, rows: int) -> Iterator[np.ndarray]: ...


@dataclass(frozen=True)
class StreamPlan:
    """How a streaming run splits its input."""

    block_rows: int
    blocks: int


def plan_blocks(
    data: Sequence[ChunkSource],
    ids: ChunkSource,
    *,
    block_rows: int | None,
    memory_limit: int | None,
) -> StreamPlan:
    """Rows per block: as asked, or what fits an eighth of the memory budget (8 MB at most)
    with a row of every data column and of the ids."""
    rows = data[0].shape[0] if data[0].shape else 0
    if block_rows is None:
        row_bytes = max(1, sum(_row_bytes(source) for source in (*data, ids)))
        budget = (
            DEFAULT_BLOCK_BYTES
            if memory_limit is None
            else min(DEFAULT_BLOCK_BYTES, max(memory_limit // 8, 1))
        )
        block_rows = max(1, budget // row_bytes)
    blocks = max(1, -(-rows // block_rows))
    return StreamPlan(block_rows, blocks)


class _GrowingState:
    """A partial state whose segment count can grow when n is inferred."""

    def __init__(
        self,
        engine: Engine,
        op: ops.Op,
        n: int,
        inner: tuple[int, ...],
        dtype: np.dtype[Any],
        sorted_ids: bool,
    ) -> None:
        self.engine, self.op, self.inner, self.dtype = engine, op, inner, dtype
        self.sorted_ids = sorted_ids
        self.state = engine.new_state(op, n, inner, dtype, sorted_ids=sorted_ids)

    def ensure(self, needed: int) -> None:
        current = self.state.num_segments
        if needed <= current:
            return
        grown = max(needed, 2 * current)
        # Only an inferred n grows: the ids themselves asked for this many segments.
        check_output_fits(
            self.op, needed, self.inner, self.dtype, sorted_ids=self.sorted_ids, inferred=True
        )
        # The segments not seen yet start empty; the engine keeps its own state's layout.
        self.state = self.state.grown(grown)

    def trimmed(self, n: int) -> ops.State:
        return self.state.to_host().trimmed(n)


def reduce_stream(
    data: ChunkSource,
    ids: ChunkSource,
    num_segments: int | None,
    op: str | ops.Op,
    *,
    sorted_ids: bool = False,
    engine: str | Engine = "auto",
    fill: Any = None,
    block_rows: int | None = None,
    memory_limit: int | None = None,
    progress: Progress | None = None,
    on_block: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> tuple[Reduction, StreamPlan]:
    """Reduce two aligned chunked inputs in one pass with bounded memory. ``on_block`` sees
    each valid block after the fold, as ``(rows, inner_size)`` values and flat ids (dropped
    rows included): the holistic ops take the same read."""
    op_def = ops.get_op(op)
    n, ids_shape = check_sources(op_def, data, ids, num_segments, sorted_ids=sorted_ids, fill=fill)
    plan = plan_blocks([data], ids, block_rows=block_rows, memory_limit=memory_limit)
    (reduction,), blocks = fold_in_step(
        [FoldedColumn(data, op_def, fill)],
        ids,
        n=n,
        ids_shape=ids_shape,
        rows=plan.block_rows,
        sorted_ids=sorted_ids,
        engine=engine,
        skipna=op_def.skipna_of is not None,
        progress=progress,
        on_block=on_block,
    )
    return reduction, StreamPlan(plan.block_rows, blocks)


@dataclass(frozen=True)
class FoldedColumn:
    """A data column of a streamed pass and what it is reduced by."""

    source: ChunkSource
    op: ops.Op
    fill: Any


def fold_in_step(
    columns: list[FoldedColumn],
    ids: ChunkSource,
    *,
    n: int | None,
    ids_shape: tuple[int, ...],
    rows: int,
    sorted_ids: bool,
    engine: str | Engine,
    skipna: bool,
    progress: Progress | None = None,
    on_block: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> tuple[list[Reduction], int]:
    """Each column reduced by its op from one read of blocks of ``rows`` rows, read in step
    with the ids, which are validated once: the reductions, in order, and how many blocks
    there were. ``n`` and ``ids_shape`` are :func:`check_sources`'s."""
    total_rows = max(int(np.prod(ids.shape, dtype=np.int64)), 0)  # 0: not known yet
    sources = [column.source for column in columns]
    # Reading starts before the engine is loaded: numba's import and first kernel take a
    # third of a second of one core, in which the other opens the input and decodes the
    # first blocks. (A deeper queue, to decode more of the input meanwhile, measured slower:
    # blocks left waiting cost fresh memory and its page faults.)
    with ReadAhead(blocks_in_step(sources, ids, rows, sorted_ids=sorted_ids)) as read:
        folds = [
            _block_fold(column, ids, n, sorted_ids=sorted_ids, engine=engine, skipna=skipna)
            for column in columns
        ]
        scanner = validate.IdScanner(ids_shape, n, sorted_ids, ids.label)
        started = time.perf_counter()
        blocks, null_ids = _fold_blocks(
            read,
            folds,
            scanner,
            n=n,
            ids_label=ids.label,
            sorted_ids=sorted_ids,
            total_rows=total_rows,
            progress=progress,
            on_block=on_block,
        )
    report = scanner.finish()  # raises on the first invalid id, before anything is written
    compute_s = time.perf_counter() - started
    reductions = []
    for fold, column in zip(folds, columns, strict=True):
        reduction = fold.reduction(report, sorted_ids=sorted_ids, fill=column.fill)
        reduction.timings["compute"] = compute_s
        reduction.null_ids = null_ids
        compute_s = 0.0  # one pass for every column
        reductions.append(reduction)
    return reductions, blocks


def _block_fold(
    column: FoldedColumn,
    ids: ChunkSource,
    n: int | None,
    *,
    sorted_ids: bool,
    engine: str | Engine,
    skipna: bool,
) -> BlockFold:
    source = column.source
    # Each column picks its engine as a run of it alone would. An input of unknown length
    # (a stream) counts as small: auto then keeps to NumPy.
    choice = choose_engine(
        engine, elements=int(np.prod(source.shape, dtype=np.int64)), skipna=skipna
    )
    inner = tuple(source.shape[len(ids.shape) :])
    grow = _GrowingState(choice.engine, column.op, n or 0, inner, source.dtype, sorted_ids)
    return BlockFold(choice, grow, ops.inner_size(inner))


@dataclass
class BlockFold:
    """One data column's fold in a streamed pass: its engine, its partial state (grown as ids
    come when n is inferred) and the width of its rows."""

    choice: EngineChoice
    grow: _GrowingState
    width: int

    def reduction(self, report: validate.IdReport, *, sorted_ids: bool, fill: Any) -> Reduction:
        """The finished result, once every id was found valid."""
        return Reduction.finish(
            self.grow.trimmed(report.num_segments),
            report,
            sorted_ids=sorted_ids,
            engine=self.choice.engine.name,
            engine_reason=self.choice.reason,
            fill=fill,
            timings={"validate": 0.0},  # validation is folded into the read loop
        )


def _fold_blocks(
    read: Iterable[tuple[list[np.ndarray], np.ndarray]],
    folds: list[BlockFold],
    scanner: validate.IdScanner,
    *,
    n: int | None,
    ids_label: str,
    sorted_ids: bool,
    total_rows: int,
    progress: Progress | None = None,
    on_block: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> tuple[int, int]:
    """The streamed drivers' loop: each block's ids checked (null ids dropped), then each data
    column's block folded by its fold. Returns the blocks read and the null ids dropped.
    ``on_block`` sees the first column's valid blocks after the fold (see reduce_stream)."""
    done = blocks = null_ids = 0
    too_large: InvalidInputError | None = None
    rest = iter(read)
    for data_blocks, ids_block in rest:
        try:
            flat_ids, nulls = without_null_ids(
                ids_block.reshape(-1), sorted_ids=sorted_ids, label=ids_label, first_row=done
            )
        except NullIdsError as error:
            raise with_later_null_ids(error, rest) from None
        null_ids += nulls
        block_summary = scanner.feed(flat_ids)
        # Once an id makes the run fail, the rest is only scanned, so that the error counts
        # every offender; ids out of order must never reach a fold that assumes order.
        if not scanner.failed and too_large is None:
            try:
                _grow(folds, block_summary, n)
            except InvalidInputError as error:
                if not sorted_ids:
                    raise
                # Sorted ids may still decrease further on: that error comes first, as it
                # does in memory, where every id is checked before the output is sized.
                too_large = error
        if not scanner.failed and too_large is None:
            for fold, block in zip(folds, data_blocks, strict=True):
                rows = block.reshape(flat_ids.size, fold.width)
                fold_rows(
                    fold.choice.engine, fold.grow.state, rows, flat_ids, sorted_ids=sorted_ids
                )
            if on_block is not None:
                on_block(data_blocks[0].reshape(flat_ids.size, folds[0].width), flat_ids)
        done += flat_ids.size
        blocks += 1
        if progress is not None:
            progress(done, total_rows)
    if too_large is not None:
        scanner.finish()
        raise too_large
    return blocks, null_ids


def _grow(folds: list[BlockFold], block: validate.IdSummary, n: int | None) -> None:
    """Grow each fold's state, when n is inferred, to hold the block's largest id."""
    if n is None and block.max_id is not None:
        for fold in folds:
            fold.grow.ensure(block.max_id + 1)


def with_later_null_ids(
    error: NullIdsError, rest: Iterable[tuple[object, np.ndarray]]
) -> NullIdsError:
    """``error`` (a block's null sorted ids) counting those of the blocks still to come: they
    are only counted, not folded, so that the error gives the count a whole read gives."""
    later = sum(int(np.count_nonzero(np.ma.getmask(ids_block))) for _, ids_block in rest)
    return error.and_more(later)


def _row_bytes(source: ChunkSource) -> int:
    return source.dtype.itemsize * int(np.prod(source.shape[1:], dtype=np.int64))


def check_sources(
    op: ops.Op,
    data: ChunkSource,
    ids: ChunkSource,
    num_segments: int | None,
    *,
    sorted_ids: bool,
    fill: Any = None,
) -> tuple[int | None, tuple[int, ...]]:
    """Every check before the first block (:func:`segcli.core.check_before_rows`); returns
    n (None: inferred) and the ids' shape, whose length is the data's when a stream's is not
    known yet."""
    # A stream's length is known only at its end (shape[0] < 0): the block loop checks it.
    data_shape, ids_shape = _comparable_shapes(data.shape, ids.shape)
    n = check_before_rows(
        op,
        (data_shape, data.dtype),
        (ids_shape, ids.dtype),
        num_segments,
        sorted_ids=sorted_ids,
        fill=fill,
        data_label=data.label,
        ids_label=ids.label,
    )
    return n, ids_shape


def _comparable_shapes(
    data_shape: tuple[int, ...], ids_shape: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shapes for the up-front checks: an unknown length takes the other input's length."""
    if data_shape and ids_shape:
        rows = max(data_shape[0], ids_shape[0])
        return (rows, *data_shape[1:]), (rows, *ids_shape[1:])
    return data_shape, ids_shape


def read_ahead(blocks: Generator[_Item, None, None]) -> Iterator[_Item]:
    """``blocks``, each read on a background thread while the caller works on the one before.

    Reading (a system call, which releases the GIL) then overlaps the fold. The reader holds
    at most one block besides the one it is reading; an error it meets is raised here, in
    order, and closing this generator (the caller failed or stopped) stops the reader. The
    reader starts at the first block asked for; :class:`ReadAhead` starts it at once.
    """
    with ReadAhead(blocks) as ahead:
        yield from ahead


class ReadAhead(Iterator[_Item]):
    """The reader of :func:`read_ahead`, started as soon as it is made: the blocks are
    decoded while the caller still prepares its fold (imports its engine, say). Use it as a
    context manager, so that the reader stops whatever happens before the last block."""

    def __init__(self, blocks: Generator[_Item, None, None]) -> None:
        self._queue: Queue[tuple[bool, Any]] = Queue(maxsize=1)
        self._stop = threading.Event()
        self._ended = False  # the reader has handed over its last item and is closing blocks
        self._blocks = blocks
        # The reader converts in the caller's context (--skipna's nulls_kept, say).
        context = contextvars.copy_context()
        self._reader = threading.Thread(
            target=context.run, args=(self._produce,), name="segcli-read-ahead", daemon=True
        )
        self._reader.start()

    def _produce(self) -> None:
        queue, stop = self._queue, self._stop
        try:
            for block in self._blocks:
                if not _put(queue, (True, block), stop):
                    return
            _put(queue, (False, None), stop)
        except BaseException as error:  # handed to the consumer, raised there
            _put(queue, (False, error), stop)
        finally:
            self._blocks.close()

    def __next__(self) -> _Item:
        if self._ended:
            raise StopIteration
        more, item = self._queue.get()
        if more:
            return cast(_Item, item)
        self._ended = True
        self.close()
        if item is not None:
            raise item
        raise StopIteration

    def close(self) -> None:
        self._stop.set()
        if self._ended:
            self._reader.join()
        # Else the caller stopped early (an error, Ctrl-C): the reader stops at its next block,
        # but a read from a stalled pipe may never return, so nobody waits for it (a daemon).

    def __enter__(self) -> ReadAhead[_Item]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _put(queue: Queue[tuple[bool, Any]], item: tuple[bool, Any], stop: threading.Event) -> bool:
    """Put ``item`` unless the consumer stopped; False if it did."""
    while not stop.is_set():
        try:
            queue.put(item, timeout=0.05)
            return True
        except Full:
            continue
    return False


def aligned_blocks(
    data: ChunkSource, ids: ChunkSource, rows: int, *, sorted_ids: bool = False
) -> Generator[tuple[np.ndarray, np.ndarray], None, None]:
    """Pairs of blocks with the same rows; inputs of different lengths are an error."""
    for (data_block,), ids_block in blocks_in_step([data], ids, rows, sorted_ids=sorted_ids):
        yield data_block, ids_block


def blocks_in_step(
    data: Sequence[ChunkSource], ids: ChunkSource, rows: int, *, sorted_ids: bool
) -> Generator[tuple[list[np.ndarray], np.ndarray], None, None]:
    """Blocks of every data column and of the ids, the same rows each; inputs of different
    lengths are an error."""
    columns = [source.chunks(rows) for source in data]
    ids_blocks = ids.chunks(rows)
    done = 0
    while True:
        try:
            ids_block = next(ids_blocks, None)
        except NullsError as error:
            raise _first_nulls_of_rows(columns, error, ids_last=True) from None
        if ids_block is None:
            break
        blocks = []
        for k, (source, chunks) in enumerate(zip(data, columns, strict=True)):
            try:
                block = next(chunks, None)
            except NullsError as error:
                raise _first_nulls_of_rows(columns[k + 1 :], error) from None
            if block is None or block.shape[0] != ids_block.shape[0]:
                data_rows = done + rows_left(chunks, block)
                ids_rows = done + rows_left(ids_blocks, ids_block)
                refuse_lengths(source, ids, data_rows, ids_rows, sorted_ids=sorted_ids)
            blocks.append(block)
        done += ids_block.shape[0]
        yield blocks, ids_block
    for source, chunks in zip(data, columns, strict=True):
        more = next(chunks, None)
        if more is not None:
            data_rows = done + rows_left(chunks, more)
            refuse_lengths(source, ids, data_rows, done, sorted_ids=sorted_ids)


def _first_nulls_of_rows(
    columns: Sequence[Iterator[np.ndarray]], error: NullsError, *, ids_last: bool = False
) -> NullsError:
    """``error``, a column's null met in a block, or, where the same rows of ``columns`` (the
    data columns whose block of them is still to be read) hold an earlier one, that column's:
    a whole read names the first null row of the columns read side by side, DATA's first on a
    tie (``ids_last``: ``error`` is IDS')."""
    others = []
    for chunks in columns:
        try:
            next(chunks, None)
        except NullsError as other:
            others.append(other)
        except SegcliError:
            pass  # a null error is pending: the whole read raises that one
    return first_nulls([*others, error] if ids_last else [error, *others])


def rows_left(blocks: Iterator[np.ndarray], current: np.ndarray | None) -> int:
    """The rows of ``current`` and of every block still to come (read only to count them)."""
    return (0 if current is None else int(current.shape[0])) + sum(int(b.shape[0]) for b in blocks)


def refuse_lengths(
    data: ChunkSource, ids: ChunkSource, data_rows: int, ids_rows: int, *, sorted_ids: bool
) -> NoReturn:
    """Inputs found to differ in length only at their end (text, streams): the error a whole
    read gives, with both lengths, counted to the end."""
    validate.check_shapes(
        (data_rows, *data.shape[1:]),
        (ids_rows, *ids.shape[1:]),
        sorted_ids=sorted_ids,
        data_label=data.label,
        ids_label=ids.label,
    )
    raise AssertionError(f"{data_rows} rows of {data.label} are a prefix of {ids_rows} ids")


# ---------------------------------------------------------------------------------------------
# The driver


@dataclass(frozen=True)
class StreamInput:
    """One opened input and what its facts need: the path given and the format io found."""

    path: str
    source: ChunkSource
    fmt: str

    def facts(self, rows: int) -> InputFacts:
        """Its facts; ``rows`` is how many it had (a stream says only at its end)."""
        shape = self.source.shape
        if shape and shape[0] == io.UNKNOWN_ROWS:
            shape = (rows, *shape[1:])
        note = getattr(self.source, "note", None)
        return input_facts(self.path, self.source.label, self.fmt, shape, self.source.dtype, note)


def open_inputs(spec: RunSpec) -> tuple[StreamInput, StreamInput]:
    """DATA and IDS of ``spec``, opened for streaming (headers and metadata read, no rows)."""
    stdin = cast(Readable | None, spec.stdin)
    data_path, ids_path = spec.data, spec.ids
    if ids_path is None:
        ids_path = data_path  # two columns (or keys) of one file
    if data_path == "-" and ids_path == "-":
        if not (spec.data_column and spec.ids_column):
            raise UsageError(
                "an Arrow stream on stdin holding DATA and IDS needs --data-column and --ids-column"
            )
        assert stdin is not None
        data, ids = io.open_arrow_stream_columns(stdin, [spec.data_column, spec.ids_column])
        return StreamInput("-", data, "arrow"), StreamInput("-", ids, "arrow")
    from segcli.io.column_set import open_data_and_ids, open_pipe_column

    if spec.ids is None:
        both = open_data_and_ids(
            data_path,
            spec.data_column,
            spec.ids_column,
            data_key=spec.data_key,
            ids_key=spec.ids_key,
            csv=spec.csv,
        )
        if both is not None:
            fmt = input_format(data_path)
            return StreamInput(data_path, both[0], fmt), StreamInput(data_path, both[1], fmt)
    opened = []
    for path, column, key, role in (
        (data_path, spec.data_column, spec.data_key, "data"),
        (ids_path, spec.ids_column, spec.ids_key, "ids"),
    ):
        # Found before the reader opens it: a pipe is sniffed once, then read by the reader.
        fmt = "npy" if path == "-" else input_format(path)
        roles = IDS_ROLE if role == "ids" else DATA_ROLE
        source = open_pipe_column(path, column, key, roles, spec.csv) or io.open_chunked(
            path, column=column, key=key, role=role, stdin=stdin, csv=spec.csv
        )
        opened.append(StreamInput(path, source, fmt))
    return opened[0], opened[1]


def error_before_rows(
    spec: RunSpec, error: NullsError | NullIdsError, columns: Sequence[str | None] | None = None
) -> SegcliError:
    """The error of a run of ``spec`` that read its inputs whole and met ``error`` (a null)
    while reading, as a streamed run gives it: one of the checks that run makes before it
    reads a row (a --by run's --keys-from, DATA's dtype for each op, the ids' dtype, the
    shapes, n), run on the inputs' metadata, opened again, if one fails; else ``error``.
    ``columns``: DATA's columns (agg's several), else ``spec.data_column``. An input that
    cannot be opened twice (stdin, a pipe) or fails to open leaves ``error``."""
    paths = [path for path in (spec.data, spec.ids) if path is not None]
    if "-" in paths or any(is_pipe(path) for path in paths):
        return error
    names = [spec.data_column] if columns is None else list(columns)
    try:
        keyed = bool(spec.by) or spec.sparse  # no IDS to check: DATA's dtype only
        data = [
            open_inputs(replace(spec, data_column=name))[0].source
            if not keyed
            else io.open_chunked(spec.data, column=name, key=spec.data_key, csv=spec.csv)
            for name in names
        ]
        ids = None if keyed else open_inputs(spec)[1].source
    except SegcliError:
        return error
    try:
        if spec.by and spec.keys_from is not None:
            # A streamed --by run reads --keys-from (its refusals: a null key while null keys
            # drop, a key not in DATA's types) before DATA's dtype and any row.
            from segcli.drivers.key_setup import encoder_for, open_key_table

            encoder_for(spec, open_key_table(spec)[0])
        chosen = []
        for source in data:  # as reduce_columns: every column's ops, then its checks
            inner = tuple(source.shape[1 if ids is None else len(ids.shape) :])
            chosen.append(op_and_fill(spec, source.dtype, inner, source.label))
        for source, (op, fill) in zip(data, chosen, strict=True):
            if ids is None:
                ops.check_data_dtype(ops.get_op(op), source.dtype, source.label)
                if fill is not None:  # a streamed --by or --indices run checks it next
                    ops.parse_fill(fill, ops.get_op(op), source.dtype)
            else:
                check_sources(
                    ops.get_op(op),
                    source,
                    ids,
                    spec.num_segments,
                    sorted_ids=spec.sorted_ids,
                    fill=fill,
                )
    except SegcliError as found:
        return found
    return error


def rows_of(report: validate.IdReport, ids: ChunkSource) -> int:
    """How many rows the inputs had, from the ids counted."""
    return report.rows // max(int(np.prod(ids.shape[1:], dtype=np.int64)), 1)


def run(spec: RunSpec, progress: Progress | None = None) -> DriverResult:
    """Stream the inputs of ``spec`` in blocks; the mode's fact is the number of blocks."""
    data, ids = open_inputs(spec)
    inner = tuple(data.source.shape[len(ids.source.shape) :])
    op, fill = op_and_fill(spec, data.source.dtype, inner, data.source.label)
    reduction, plan = reduce_stream(
        data.source,
        ids.source,
        spec.num_segments,
        op,
        sorted_ids=spec.sorted_ids,
        engine=engine_of(spec),
        fill=fill,
        block_rows=spec.block_rows,
        memory_limit=spec.memory_budget,
        progress=progress,
    )
    rows = rows_of(reduction.id_report, ids.source)
    return DriverResult(
        reduction,
        data.facts(rows),
        ids.facts(rows),
        "streaming",
        {"chunks": plan.blocks},
        # Reading and folding overlap: one figure for both.
        {"read+compute": reduction.timings["compute"]},
    )
