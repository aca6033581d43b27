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

import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from queue import Full, Queue
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import numpy as np

from segcli import io, ops, validate
from segcli.core import Reduction, check_output_fits
from segcli.engines import Engine, choose_engine
from segcli.errors import InvalidInputError, UsageError
from segcli.summary import InputFacts

if TYPE_CHECKING:
    from segcli.pipeline import Progress, RunRequest, Streams

_Item = TypeVar("_Item")

#: Called after each block with (rows done, rows in all).
ProgressCallback = Callable[[int, int], None]

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
    data: ChunkSource, ids: ChunkSource, *, block_rows: int | None, memory_limit: int | None
) -> StreamPlan:
    """Rows per block: as asked, or what fits an eighth of the memory budget (8 MB at most)."""
    rows = data.shape[0] if data.shape else 0
    if block_rows is None:
        row_bytes = max(
            1,
            data.dtype.itemsize * int(np.prod(data.shape[1:], dtype=np.int64))
            + ids.dtype.itemsize * int(np.prod(ids.shape[1:], dtype=np.int64)),
        )
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
        check_output_fits(self.op, needed, self.inner, self.dtype, sorted_ids=self.sorted_ids)
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
    progress: ProgressCallback | None = None,
    on_data_block: Callable[[np.ndarray], None] | None = None,
) -> tuple[Reduction, StreamPlan]:
    """Reduce two aligned chunked inputs in one pass with bounded memory.

    ``on_data_block`` sees every block of DATA as it passes (``segcli check`` counts NaN there).
    """
    op_def = ops.get_op(op)
    ops.check_data_dtype(op_def, data.dtype, data.label)
    validate.check_ids_dtype(ids.dtype, ids.label)
    # A stream's length is known only at its end (shape[0] < 0): the block loop checks it.
    data_shape, ids_shape = _comparable_shapes(data.shape, ids.shape)
    validate.check_shapes(
        data_shape, ids_shape, sorted_ids=sorted_ids, data_label=data.label, ids_label=ids.label
    )
    n = validate.check_num_segments(num_segments)
    if fill is not None:
        ops.parse_fill(fill, op_def, data.dtype)
    inner = tuple(data.shape[len(ids.shape) :])
    width = ops.inner_size(inner)
    if n is not None:
        check_output_fits(op_def, n, inner, data.dtype, sorted_ids=sorted_ids)
    plan = plan_blocks(data, ids, block_rows=block_rows, memory_limit=memory_limit)
    total_rows = max(int(np.prod(ids.shape, dtype=np.int64)), 0)  # 0: not known yet
    # An input of unknown length (a stream) counts as small: auto then keeps to NumPy.
    choice = choose_engine(engine, elements=max(int(np.prod(data.shape, dtype=np.int64)), 0))
    scanner = validate.IdScanner(ids_shape, n, sorted_ids, ids.label)
    grow = _GrowingState(
        choice.engine, op_def, n if n is not None else 0, inner, data.dtype, sorted_ids
    )
    started = time.perf_counter()
    done = 0
    blocks = 0
    for data_block, ids_block in read_ahead(_aligned(data, ids, plan.block_rows)):
        flat_ids = ids_block.reshape(-1)
        block_summary = scanner.feed(flat_ids)
        if on_data_block is not None:
            on_data_block(data_block)
        # Once an id makes the run fail, the rest is only scanned, so that the error counts
        # every offender; ids out of order must never reach a fold that assumes order.
        if not scanner.failed:
            if n is None and block_summary.max_id is not None:
                grow.ensure(block_summary.max_id + 1)
            choice.engine.fold(
                grow.state,
                data_block.reshape(flat_ids.size, width),
                flat_ids,
                sorted_ids=sorted_ids,
            )
        done += flat_ids.size
        blocks += 1
        if progress is not None:
            progress(done, total_rows)
    report = scanner.finish()  # raises on the first invalid id, before anything is written
    reduction = Reduction.finish(
        grow.trimmed(report.num_segments),
        report,
        sorted_ids=sorted_ids,
        engine=choice.engine.name,
        engine_reason=choice.reason,
        fill=fill,
        timings={"validate": 0.0},  # validation is folded into the read loop
    )
    reduction.timings["compute"] = time.perf_counter() - started
    return reduction, StreamPlan(plan.block_rows, blocks)


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
    order, and closing this generator (the caller failed or stopped) stops the reader.
    """
    queue: Queue[tuple[bool, Any]] = Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for block in blocks:
                if not _put(queue, (True, block), stop):
                    return
            _put(queue, (False, None), stop)
        except BaseException as error:  # handed to the consumer, raised there
            _put(queue, (False, error), stop)
        finally:
            blocks.close()

    reader = threading.Thread(target=produce, name="segcli-read-ahead", daemon=True)
    reader.start()
    ended = False  # the reader has handed over its last item and is closing the source
    try:
        while True:
            more, item = queue.get()
            if not more:
                ended = True
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()
        if ended:
            reader.join()
        # Else the caller stopped early (an error, Ctrl-C): the reader stops at its next block,
        # but a read from a stalled pipe may never return, so nobody waits for it (a daemon).


def _put(queue: Queue[tuple[bool, Any]], item: tuple[bool, Any], stop: threading.Event) -> bool:
    """Put ``item`` unless the consumer stopped; False if it did."""
    while not stop.is_set():
        try:
            queue.put(item, timeout=0.05)
            return True
        except Full:
            continue
    return False


def _aligned(
    data: ChunkSource, ids: ChunkSource, rows: int
) -> Generator[tuple[np.ndarray, np.ndarray], None, None]:
    """Pairs of blocks with the same rows; inputs of different lengths are an error."""
    data_blocks = data.chunks(rows)
    for ids_block in ids.chunks(rows):
        data_block = next(data_blocks, None)
        if data_block is None or data_block.shape[0] != ids_block.shape[0]:
            raise InvalidInputError(
                f"{data.label}: ended before {ids.label} (the two inputs differ in length)"
            )
        yield data_block, ids_block
    if next(data_blocks, None) is not None:
        raise InvalidInputError(
            f"{ids.label}: ended before {data.label} (the two inputs differ in length)"
        )


# ---------------------------------------------------------------------------------------------
# A run's inputs, streamed


def reduce_request(
    request: RunRequest,
    streams: Streams,
    memory_budget: int,
    progress: Progress | None,
    on_data_block: Callable[[np.ndarray], None] | None = None,
    data_checked_for: ops.Op | None = None,
) -> tuple[Reduction, InputFacts, InputFacts, int]:
    """Stream the inputs of ``request``; ``data_checked_for`` also checks DATA's dtype against
    another op than the one run (``check --op min`` runs a ``count``), before any block is read.
    """
    from segcli.io.npy import Readable

    stdin = cast(Readable | None, streams.stdin)
    data_path, ids_path = request.data, request.ids
    if ids_path is None:
        ids_path = data_path  # two columns (or keys) of one file
    if data_path == "-" and ids_path == "-":
        if not (request.data_column and request.ids_column):
            raise UsageError(
                "an Arrow stream on stdin holding DATA and IDS needs --data-column and --ids-column"
            )
        assert stdin is not None
        data, ids = io.open_arrow_stream_columns(stdin, [request.data_column, request.ids_column])
    else:
        csv = request.csv_options()
        data = io.open_chunked(
            data_path, column=request.data_column, key=request.data_key, stdin=stdin, csv=csv
        )
        ids = io.open_chunked(
            ids_path,
            column=request.ids_column,
            key=request.ids_key,
            role="ids",
            stdin=stdin,
            csv=csv,
        )
    if data_checked_for is not None:
        ops.check_data_dtype(data_checked_for, data.dtype, data.label)
    reduction, plan = reduce_stream(
        data,
        ids,
        request.num_segments,
        request.op,
        sorted_ids=request.sorted_ids,
        engine=request.compute_engine(),
        fill=request.fill,
        block_rows=request.chunk_rows,
        memory_limit=memory_budget,
        progress=progress,
        on_data_block=on_data_block,
    )
    rows = reduction.ids.rows // max(int(np.prod(ids.shape[1:], dtype=np.int64)), 1)
    return (
        reduction,
        _chunked_facts(data_path, data, rows),
        _chunked_facts(ids_path, ids, rows),
        plan.blocks,
    )


def _chunked_facts(path: str, source: io.ChunkSource, rows: int) -> InputFacts:
    """Facts of a streamed input; ``rows`` is how many it had (a stream says only at its end)."""
    streamed = bool(source.shape) and source.shape[0] == io.UNKNOWN_ROWS
    shape = [rows, *source.shape[1:]] if streamed else list(source.shape)
    size = int(np.prod(shape, dtype=np.int64)) * source.dtype.itemsize
    if path == "-":
        fmt = "arrow" if streamed else "npy"
    else:
        fmt = os.path.splitext(path)[1].lstrip(".").lower() or "?"
    note = getattr(source, "note", None)
    return InputFacts(path, source.label, fmt, shape, str(source.dtype), size, note)
