"""One run of a command on files: read, reduce, check, write, summarise.

The CLI parses options into a :class:`RunRequest` and calls :func:`run` or :func:`check`; all
file handling lives here and in :mod:`segcli.io`, all math in :mod:`segcli.core`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from io import BufferedReader
from typing import Any, BinaryIO, TextIO, cast

import numpy as np

from segcli import core, io, ops, validate
from segcli.engines import Engine
from segcli.errors import ExpectationError, NotStreamableError, UsageError
from segcli.expect import check_expected
from segcli.io.formats import output_format
from segcli.io.sizes import decoded_bytes
from segcli.memory import available_bytes
from segcli.summary import InputFacts, Summary, build_summary, input_facts


@dataclass
class RunRequest:
    """What the user asked for, as the CLI parsed it."""

    op: str
    data: str
    ids: str | None = None
    num_segments: int | None = None
    sorted_ids: bool = False
    engine: str = "auto"
    fill: str | None = None
    data_column: str | None = None
    ids_column: str | None = None
    data_key: str | None = None
    ids_key: str | None = None
    output: str | None = None
    output_format: str | None = None
    expect: str | None = None
    rtol: float = 1e-5
    atol: float = 1e-8
    #: Inputs larger than this many bytes stream in blocks (default: a quarter of free memory).
    memory_limit: int | None = None
    #: Stream in blocks of this many rows, whatever the input size.
    chunk_rows: int | None = None
    #: Address of a Dask scheduler, for ``engine="dask"``.
    scheduler: str | None = None
    #: GPU engine: float sums with atomics (faster; the last bits may vary from run to run).
    fast_atomics: bool = False

    def compute_engine(self) -> str | Engine:
        """The engine to pass to the core: a name, or the GPU engine built with its options."""
        if not self.fast_atomics:
            return self.engine
        if self.engine != "cupy":
            raise UsageError("--fast-atomics applies to --engine cupy only")
        from segcli.engines import get_engine

        gpu: Any = get_engine("cupy")
        engine: Engine = gpu.with_options(fast_atomics=True)
        return engine


@dataclass
class Streams:
    """Where data goes (stdout) and comes from (stdin); tests pass their own."""

    stdout_binary: BinaryIO | None = None
    stdout_text: TextIO | None = None
    stdin: BinaryIO | None = None


@dataclass
class RunOutcome:
    summary: Summary
    result: np.ndarray


#: Called with (rows done, rows in all) while a long run works.
Progress = Callable[[int, int], None]


#: Files larger than this stream even when they would fit in memory: the next block is read
#: while the engine folds this one, and no whole-file buffer has to be paged in. Side by side,
#: a 20M-row float32 sum (160 MB of .npy) took 307 ms streamed against 463 ms read whole, and
#: on 200M rows streaming ran at 114% of the in-memory throughput (benchmarks/STREAM_RESULTS.md).
STREAM_FROM_BYTES = 32 * 1024 * 1024


def _stream_above(request: RunRequest) -> int:
    """Input bytes above which files stream: ``--memory-limit`` when given, else the smaller
    of :data:`STREAM_FROM_BYTES` and the default memory budget."""
    if request.memory_limit is not None:
        return request.memory_limit
    return min(memory_budget(request), STREAM_FROM_BYTES)


def memory_budget(request: RunRequest) -> int:
    """The memory a run may give its input: ``--memory-limit``, else a quarter of free memory.
    Streaming sizes its blocks from it."""
    return request.memory_limit if request.memory_limit is not None else available_bytes() // 4


def _peekable_stdin(streams: Streams) -> BinaryIO:
    """Stdin that can show its first bytes without consuming them."""
    stdin = streams.stdin or sys.stdin.buffer
    if not hasattr(stdin, "peek"):
        stdin = BufferedReader(stdin)
    return stdin


def _stdin_holds_npy(stdin: BinaryIO) -> bool:
    return bytes(stdin.peek(6)[:6]) == b"\x93NUMPY"  # type: ignore[attr-defined]


def _should_stream(request: RunRequest, streams: Streams) -> bool:
    """Stream when asked, for files over ``--memory-limit`` (by default over
    :data:`STREAM_FROM_BYTES`), or for a stream on stdin.

    A .npy on stdin, or an Arrow stream holding both DATA and IDS, always streams: its size is
    unknown until read, one pass is all a pipe allows, and streaming gives the same bytes as
    the in-memory path. An Arrow stream with the other input in a file is read whole.
    """
    if "-" in (request.data, request.ids):
        if streams.stdin is None:
            return False
        if request.ids is None:
            return not _stdin_holds_npy(streams.stdin)
        return _stdin_holds_npy(streams.stdin)
    if request.chunk_rows is not None:
        return True
    size = _input_bytes(request)
    return size is not None and size > _stream_above(request)


def _must_stream(request: RunRequest) -> bool:
    """Streaming is required, not just the faster way: asked for, from stdin, or the inputs
    exceed the memory budget."""
    if "-" in (request.data, request.ids) or request.chunk_rows is not None:
        return True
    size = _input_bytes(request)
    return size is not None and size > memory_budget(request)


def _input_bytes(request: RunRequest) -> int | None:
    """The decoded size of the inputs (from headers and metadata: a small compressed file may
    hold gigabytes); None if one cannot be read (its reader says why)."""
    if request.ids is None:
        both = (request.data_key, request.ids_key, request.data_column, request.ids_column)
        roles = [(request.data, [n for n in both if n is not None])]
    else:
        roles = [
            (request.data, [n for n in (request.data_key, request.data_column) if n is not None]),
            (request.ids, [n for n in (request.ids_key, request.ids_column) if n is not None]),
        ]
    sizes = [decoded_bytes(path, names) for path, names in roles]
    return None if None in sizes else sum(s for s in sizes if s is not None)


def _stream_if_possible(
    request: RunRequest,
    streams: Streams,
    progress: Progress | None,
    on_data_block: Callable[[np.ndarray], None] | None = None,
    data_checked_for: ops.Op | None = None,
) -> tuple[core.Reduction, InputFacts, InputFacts, int] | None:
    """:func:`_reduce_streaming`, or None for inputs that can only be read whole (found
    before any block is read) when reading them whole is allowed."""
    try:
        return _reduce_streaming(request, streams, progress, on_data_block, data_checked_for)
    except NotStreamableError:
        if _must_stream(request):
            raise
        return None


def _read(request: RunRequest, streams: Streams) -> tuple[io.ArrayInput, io.ArrayInput]:
    return io.read_inputs(
        request.data,
        request.ids,
        data_column=request.data_column,
        ids_column=request.ids_column,
        data_key=request.data_key,
        ids_key=request.ids_key,
        stdin=streams.stdin,
    )


def _facts(item: io.ArrayInput) -> InputFacts:
    return input_facts(item.path, item.label, item.fmt, item.array)


def run(
    request: RunRequest, streams: Streams | None = None, progress: Progress | None = None
) -> RunOutcome:
    """Reduce the files of ``request``; write the result; return the summary (see _run)."""
    token = core.OUTPUT_FORMAT.set(_writer_format(request))
    try:
        return _run(request, streams, progress)
    finally:
        core.OUTPUT_FORMAT.reset(token)


def _writer_format(request: RunRequest) -> str | None:
    """The output format, for the memory estimate ("text" for lines on stdout)."""
    if request.output is None:
        return "text"
    try:
        return output_format(request.output, request.output_format)
    except UsageError:
        return None  # the writer reports it, in its turn


def _run(
    request: RunRequest, streams: Streams | None = None, progress: Progress | None = None
) -> RunOutcome:
    """Reduce the files of ``request``; write the result; return the summary.

    Files over ``--memory-limit`` (by default over :data:`STREAM_FROM_BYTES`), stdin and any
    input with ``chunk_rows`` stream in blocks; inputs that can only be read whole (2-D
    Fortran-order ``.npy``) are, when they fit the memory budget.
    Nothing is written unless every check passes: the output goes to a temporary file that is
    renamed only on success.
    """
    streams = streams or Streams()
    if "-" in (request.data, request.ids):
        streams.stdin = _peekable_stdin(streams)
    if request.engine == "dask":
        from segcli.distributed import reduce_distributed

        reduction, data_facts, ids_facts, extra = reduce_distributed(request, progress)
        timings = dict(reduction.timings)  # cluster start-up (or connect) and compute
        mode = ("distributed", extra)
    elif _should_stream(request, streams) and (
        streamed := _stream_if_possible(request, streams, progress)
    ):
        reduction, data_facts, ids_facts, chunks = streamed
        timings = {"read+compute": reduction.timings["compute"]}
        mode = ("streaming", {"chunks": chunks})
    else:
        timings = {}
        started = time.perf_counter()
        data, ids = _read(request, streams)
        timings["read"] = time.perf_counter() - started
        reduction = core.reduce_arrays(
            data.array,
            ids.array,
            request.num_segments,
            request.op,
            sorted=request.sorted_ids,
            engine=request.compute_engine(),
            fill=request.fill,
            data_label=data.label,
            ids_label=ids.label,
        )
        timings["validate"] = reduction.timings["validate"]
        timings["compute"] = reduction.timings["compute"]
        data_facts, ids_facts = _facts(data), _facts(ids)
        mode = ("in-memory", {})
    if request.expect:
        expected = io.read_result_table(request.expect)
        check_expected(
            reduction.result, expected, request.expect, rtol=request.rtol, atol=request.atol
        )
    started = time.perf_counter()
    output_format = _write(reduction, request, streams)
    timings["write"] = time.perf_counter() - started
    summary = build_summary(
        reduction,
        data_facts,
        ids_facts,
        output_path=request.output,
        output_format=output_format,
        timings_s=timings,
    )
    summary.mode, summary.extra = mode
    return RunOutcome(summary, reduction.result)


def _reduce_streaming(
    request: RunRequest,
    streams: Streams,
    progress: Progress | None,
    on_data_block: Callable[[np.ndarray], None] | None = None,
    data_checked_for: ops.Op | None = None,
) -> tuple[core.Reduction, InputFacts, InputFacts, int]:
    """Stream the inputs of ``request``; ``data_checked_for`` also checks DATA's dtype against
    another op than the one run (``check --op min`` runs a ``count``), before any block is read.
    """
    from segcli.io.npy import Readable
    from segcli.stream import reduce_stream

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
        data = io.open_chunked(
            data_path, column=request.data_column, key=request.data_key, stdin=stdin
        )
        ids = io.open_chunked(
            ids_path, column=request.ids_column, key=request.ids_key, role="ids", stdin=stdin
        )
    if data_checked_for is not None:
        ops.check_dtype(data_checked_for, data.dtype, data.label)
    reduction, plan = reduce_stream(
        data,
        ids,
        request.num_segments,
        request.op,
        sorted_ids=request.sorted_ids,
        engine=request.compute_engine(),
        fill=request.fill,
        block_rows=request.chunk_rows,
        memory_limit=memory_budget(request),
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
    return InputFacts(path, source.label, fmt, shape, str(source.dtype), size)


def _write(reduction: core.Reduction, request: RunRequest, streams: Streams) -> str | None:
    if request.output is None:
        text = streams.stdout_text or sys.stdout
        for line in io.format_text_lines(reduction.result):
            text.write(line + "\n")
        text.flush()
        return None
    return io.write_result(
        reduction.result,
        request.output,
        request.output_format,
        stdout=streams.stdout_binary,
        counts=reduction.counts,
    )


@dataclass
class CheckOutcome:
    """What ``segcli check`` found; ``failures`` is empty when the data passes."""

    rows: list[tuple[str, str]]
    facts: dict[str, Any]
    failures: list[str] = field(default_factory=list)


def check(
    request: RunRequest,
    *,
    max_empty: int | None = None,
    no_nan: bool = False,
    streams: Streams | None = None,
) -> CheckOutcome:
    """Validate the inputs as ``request.op`` would, then the data-quality rules.

    SPEC violations raise (exit 1); ``--max-empty`` and ``--no-nan`` failures are collected and
    raised together as an :class:`ExpectationError` by :func:`enforce`.
    """
    streams = streams or Streams()
    if "-" in (request.data, request.ids):
        streams.stdin = _peekable_stdin(streams)
    op = ops.get_op(request.op)
    # Large inputs: a streamed ``count`` reduction validates the ids and counts the rows of
    # each segment in one pass, while the data blocks are scanned for NaN.
    nan_seen = [0]

    def count_nan(block: np.ndarray) -> None:
        nan_seen[0] += _nan_count(block)

    streamed = None
    if _should_stream(request, streams):
        count_request = replace(request, op="count", fill=None)
        streamed = _stream_if_possible(count_request, streams, None, count_nan, op)
    streaming = streamed is not None
    if streamed is not None:
        reduction, data_facts, ids_facts, _ = streamed
        report, counts, nan_rows = reduction.ids, reduction.result, nan_seen[0]
    else:
        data, ids = _read(request, streams)
        ops.check_dtype(op, data.array.dtype, data.label)
        # A ``count`` reduction runs the same validation and counts each segment's rows.
        reduction = core.reduce_arrays(
            data.array,
            ids.array,
            request.num_segments,
            "count",
            sorted=request.sorted_ids,
            engine="numpy",
            data_label=data.label,
            ids_label=ids.label,
        )
        report, counts = reduction.ids, reduction.result
        nan_rows = _nan_count(data.array)
        data_facts, ids_facts = _facts(data), _facts(ids)
    empty = int(np.count_nonzero(counts == 0))
    failures = []
    if max_empty is not None and empty > max_empty:
        first = int(np.argmax(counts == 0))
        failures.append(
            f"{ids_facts.label}: {validate.plural(empty, 'empty segment')}, more than --max-empty "
            f"{max_empty} (first empty: segment {first})"
        )
    if no_nan and nan_rows:
        failures.append(f"{data_facts.label}: {validate.plural(nan_rows, 'NaN value')} (--no-nan)")
    facts: dict[str, Any] = {
        "schema_version": 1,
        "command": "check",
        "data": vars(data_facts),
        "ids": vars(ids_facts),
        "family": "sorted" if request.sorted_ids else "unsorted",
        "mode": "streaming" if streaming else "in-memory",
        "num_segments": report.num_segments,
        "num_segments_inferred": report.inferred,
        "rows_total": report.rows,
        "rows_used": report.rows_used,
        "rows_dropped_negative": report.dropped_negative,
        "rows_dropped_beyond_n": report.dropped_beyond,
        "empty_segments": empty,
        "nan_values": nan_rows,
        "passed": not failures,
        "failures": failures,
    }
    rows = [
        ("data", f"{data_facts.label}  {tuple(data_facts.shape)} {data_facts.dtype}"),
        ("ids", f"{ids_facts.label}  {tuple(ids_facts.shape)} {ids_facts.dtype}"),
        ("family", facts["family"]),
        (
            "segments",
            f"{report.num_segments:,} " + ("(inferred from ids)" if report.inferred else "(given)"),
        ),
        ("rows", f"{report.rows_used:,} used of {report.rows:,}"),
        ("empty segments", f"{empty:,}"),
        ("NaN values", f"{nan_rows:,}"),
        ("verdict", "ok" if not failures else "FAILED: " + "; ".join(failures)),
    ]
    return CheckOutcome(rows, facts, failures)


def enforce(outcome: CheckOutcome) -> None:
    if outcome.failures:
        raise ExpectationError("; ".join(outcome.failures))


def _nan_count(data: np.ndarray) -> int:
    if data.dtype.kind not in "fc":
        return 0
    return int(np.count_nonzero(np.isnan(data)))
