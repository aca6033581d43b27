"""One run of a command on files: read, reduce, check, write, summarise.

The CLI parses options into a :class:`RunRequest` and calls :func:`run` or :func:`check`; all
file handling lives here and in :mod:`segcli.io`, all math in :mod:`segcli.core`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from io import BufferedReader
from typing import Any, BinaryIO, TextIO

import numpy as np

from segcli import core, io, ops, validate
from segcli.drivers import memory
from segcli.engines import Engine
from segcli.errors import (
    ExpectationError,
    NotStreamableError,
    SegcliError,
    UsageError,
    WriteError,
)
from segcli.expect import check_expected
from segcli.io.formats import ARROW_FILE_MAGIC, NPY_MAGIC, PARQUET_MAGIC, open_binary
from segcli.io.sizes import decoded_bytes
from segcli.memory import available_bytes
from segcli.signals import checkpoint
from segcli.summary import InputFacts, Summary, build_summary


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
    #: printf-style format of float values in text outputs (stdout lines, csv, tsv).
    float_format: str | None = None
    #: CSV/TSV input: the field delimiter (default ``,``, a tab for .tsv) and no header line
    #: (columns then named "1", "2", ... by position).
    delimiter: str | None = None
    no_header: bool = False

    def csv_options(self) -> io.CsvOptions | None:
        """How to split CSV/TSV inputs; a UsageError if given and no input is CSV/TSV."""
        if self.delimiter is None and not self.no_header:
            return None
        delimiter = io.check_delimiter(self.delimiter)
        if not any(io.is_csv_path(p) for p in (self.data, self.ids) if p is not None):
            option = "--delimiter" if self.delimiter is not None else "--no-header"
            raise UsageError(f"{option} applies to CSV/TSV inputs only")
        return io.CsvOptions(delimiter, header=not self.no_header)

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


def _stdin_head(stdin: BinaryIO) -> bytes:
    return bytes(stdin.peek(6)[:6])  # type: ignore[attr-defined]


def _stdin_holds_npy(stdin: BinaryIO) -> bool:
    return _stdin_head(stdin) == NPY_MAGIC


def _stdin_holds_arrow_stream(stdin: BinaryIO) -> bool:
    """Neither .npy nor a file format (Parquet, Arrow file) that must be read whole to seek."""
    head = _stdin_head(stdin)
    return bool(head) and not head.startswith((NPY_MAGIC, PARQUET_MAGIC, ARROW_FILE_MAGIC))


def _refuse_both_stdin(request: RunRequest) -> None:
    if request.data == "-" and request.ids == "-":
        raise UsageError(
            "DATA and IDS cannot both be '-': stdin holds one input; for an Arrow stream "
            "holding both, give '-' once with --data-column and --ids-column"
        )


def _should_stream(request: RunRequest, streams: Streams) -> bool:
    """Stream when asked, for files over ``--memory-limit`` (by default over
    :data:`STREAM_FROM_BYTES`), or for a stream on stdin.

    A .npy on stdin, or an Arrow stream holding both DATA and IDS, always streams: its size is
    unknown until read, one pass is all a pipe allows, and streaming gives the same bytes as
    the in-memory path. An Arrow stream with the other input in a file is read whole.
    """
    if _holds_a_scalar(request, streams):
        return False
    if "-" in (request.data, request.ids):
        if streams.stdin is None:
            return False
        if request.ids is None:
            return _stdin_holds_arrow_stream(streams.stdin)
        return _stdin_holds_npy(streams.stdin)
    if request.chunk_rows is not None:
        return True
    size = _input_bytes(request)
    return size is not None and size > _stream_above(request)


def _holds_a_scalar(request: RunRequest, streams: Streams) -> bool:
    """A 0-D ``.npy`` (ids, or data with 0-D ids) is a single row that no block can split:
    such runs read their inputs whole on every path, and give the in-memory answer."""
    ids_path = request.ids if request.ids is not None else request.data
    return any(
        _npy_shape(path, key, streams.stdin) == ()
        for path, key in ((request.data, request.data_key), (ids_path, request.ids_key))
    )


#: Bytes of stdin a peek may show; a .npy header is far shorter (NumPy pads it to 64 bytes).
_HEADER_PEEK = 4096


def _npy_shape(path: str, key: str | None, stdin: BinaryIO | None) -> tuple[int, ...] | None:
    """The shape a ``.npy`` header (a file, an ``.npz`` member or stdin) declares; None for
    other formats, a pipe, or an input its reader will report as unreadable."""
    from io import BytesIO

    from segcli.io.formats import input_format, is_pipe
    from segcli.io.npy import open_npz, pick_key, read_header, read_npz_header

    try:
        if path == "-":
            head = bytes(stdin.peek(_HEADER_PEEK)) if stdin is not None else b""  # type: ignore[attr-defined]
            return read_header(BytesIO(head), path).shape if head.startswith(NPY_MAGIC) else None
        if is_pipe(path):
            return None  # a pipe is read once, by its reader
        fmt = input_format(path)
        if fmt == "npy":
            with open_binary(path) as f:
                return read_header(f, path).shape
        if fmt == "npz":
            with open_npz(path) as archive:
                chosen = pick_key(archive, key, path, "--data-key")
                return read_npz_header(archive, chosen, path).shape
    except SegcliError:
        return None
    return None


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
        from segcli.drivers.stream import reduce_request

        return reduce_request(
            request, streams, memory_budget(request), progress, on_data_block, data_checked_for
        )
    except NotStreamableError:
        if _must_stream(request):
            raise
        return None


def reserve_outputs(request: RunRequest, outputs: io.OutputSet) -> None:
    """Check the output path before any input is read; an output that is an input is refused."""
    if request.output is not None:
        io.output_format(request.output, request.output_format)  # a usage error, before any work
    if request.output not in (None, "-"):
        outputs.reserve(request.output, "-o")
    outputs.refuse_inputs({"DATA": request.data, "IDS": request.ids, "--expect": request.expect})


def run(
    request: RunRequest,
    streams: Streams | None = None,
    progress: Progress | None = None,
    outputs: io.OutputSet | None = None,
    warn: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Reduce the files of ``request``; write the result; return the summary (see _run)."""
    token = core.OUTPUT_FORMAT.set(_writer_format(request))
    try:
        return _run(request, streams, progress, outputs, warn)
    finally:
        core.OUTPUT_FORMAT.reset(token)


def _writer_format(request: RunRequest) -> str | None:
    """The output format, for the memory estimate ("text" for lines on stdout)."""
    if request.output is None:
        return "text"
    try:
        return io.output_format(request.output, request.output_format)
    except UsageError:
        return None  # the writer reports it, in its turn


def _run(
    request: RunRequest,
    streams: Streams | None,
    progress: Progress | None,
    outputs: io.OutputSet | None,
    warn: Callable[[str], None] | None,
) -> RunOutcome:
    """Reduce the files of ``request``; write the result; return the summary.

    Files over ``--memory-limit`` (by default over :data:`STREAM_FROM_BYTES`), stdin and any
    input with ``chunk_rows`` stream in blocks; inputs that can only be read whole (2-D
    Fortran-order ``.npy``) are, when they fit the memory budget.
    Nothing is written unless every check passes: the output goes to a temporary file that is
    renamed only on success. ``outputs`` (where :func:`reserve_outputs` was called) leaves the
    commit to the caller, so the run's other outputs are committed with it. ``warn`` hears
    about suspicious but valid input, before the output is written.
    """
    if outputs is None:
        with io.OutputSet() as own:
            reserve_outputs(request, own)
            return _run(request, streams, progress, own, warn)
    checkpoint("reduce")
    streams = streams or Streams()
    _check_output_options(request)
    request.csv_options()
    _refuse_both_stdin(request)
    if "-" in (request.data, request.ids):
        streams.stdin = _peekable_stdin(streams)
    if request.engine == "dask" and not _holds_a_scalar(request, streams):
        from segcli.drivers.dask import reduce_distributed

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
        from segcli.drivers.memory import reduce_request

        reduction, data_facts, ids_facts, timings = reduce_request(request, streams)
        mode = ("in-memory", {})
    if warn is not None:
        _warn_of_huge_inferred_n(reduction.ids, warn)
    if request.expect:
        expected = io.read_result_table(request.expect)
        check_expected(
            reduction.result, expected, request.expect, rtol=request.rtol, atol=request.atol
        )
    started = time.perf_counter()
    output_format = _write(reduction, request, streams, outputs)
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


#: An inferred n above both this and :data:`SPARSE_IDS_RATIO` times the ids is worth a warning.
HUGE_INFERRED_N = 1_000_000
SPARSE_IDS_RATIO = 10


def _warn_of_huge_inferred_n(report: validate.IdReport, warn: Callable[[str], None]) -> None:
    """A stray large id with -n inferred gives a result of mostly empty segments (a 20,000,000
    id makes 20M output lines): valid, but rarely meant."""
    n = report.num_segments
    if report.inferred and n > HUGE_INFERRED_N and n > SPARSE_IDS_RATIO * report.rows:
        warn(
            f"n = {n:,} was inferred from the largest id, for only "
            f"{validate.plural(report.rows, 'id')}: most segments will be empty "
            "(give -n to silence this, or check the ids for a stray value)"
        )


def _check_output_options(request: RunRequest) -> None:
    """Output options that cannot apply fail before any input is read."""
    if request.float_format is None:
        return
    fmt = None
    if request.output is not None:
        fmt = io.output_format(request.output, request.output_format)
    io.check_text_output(fmt, request.float_format)


def _write(
    reduction: core.Reduction, request: RunRequest, streams: Streams, outputs: io.OutputSet
) -> str | None:
    if request.output is None:
        text = streams.stdout_text or sys.stdout
        try:
            for block in io.text_blocks(reduction.result, "\t", float_format=request.float_format):
                text.write(block.decode())
            text.flush()
        except BrokenPipeError:
            raise  # the reader went away: the CLI decides how quietly to stop
        except OSError as exc:
            raise WriteError(f"<stdout>: cannot write ({exc.strerror or exc})") from exc
        return None
    return io.write_result(
        reduction.result,
        request.output,
        request.output_format,
        stdout=streams.stdout_binary,
        counts=reduction.counts,
        outputs=outputs,
        float_format=request.float_format,
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
    max_dropped: int | None = None,
    streams: Streams | None = None,
) -> CheckOutcome:
    """Validate the inputs as ``request.op`` would, then the data-quality rules.

    SPEC violations raise (exit 1); ``--max-empty`` and ``--no-nan`` failures are collected and
    raised together as an :class:`ExpectationError` by :func:`enforce`.
    """
    streams = streams or Streams()
    _refuse_both_stdin(request)
    if "-" in (request.data, request.ids):
        streams.stdin = _peekable_stdin(streams)
    op = ops.get_op(request.op)
    # Large inputs: a streamed ``count`` reduction validates the ids and counts the rows of
    # each segment in one pass, while the data blocks are scanned for NaN.
    nan_seen = [0]
    rows_seen = [0]
    first_nan: list[tuple[int, ...]] = []

    def count_nan(block: np.ndarray) -> None:
        found = _nan_count(block)
        if found and not first_nan:
            first_nan.append(_first_nan_index(block, rows_seen[0]))
        nan_seen[0] += found
        rows_seen[0] += block.shape[0] if block.ndim else 1

    streamed = None
    if _should_stream(request, streams):
        count_request = replace(request, op="count", fill=None)
        streamed = _stream_if_possible(count_request, streams, None, count_nan, op)
    streaming = streamed is not None
    if streamed is not None:
        reduction, data_facts, ids_facts, _ = streamed
        report, counts, nan_rows = reduction.ids, reduction.result, nan_seen[0]
    else:
        data, ids = memory.read(request, streams)
        ops.check_data_dtype(op, data.array.dtype, data.label)
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
        if nan_rows:
            first_nan.append(_first_nan_index(data.array, 0))
        data_facts, ids_facts = memory.facts(data), memory.facts(ids)
    empty = int(np.count_nonzero(counts == 0))
    failures = []
    if max_empty is not None and empty > max_empty:
        first = int(np.argmax(counts == 0))
        failures.append(
            f"{ids_facts.label}: {validate.plural(empty, 'empty segment')}, more than --max-empty "
            f"{max_empty} (first empty: segment {first})"
        )
    dropped = report.dropped_negative + report.dropped_beyond
    if max_dropped is not None and dropped > max_dropped:
        failures.append(
            f"{ids_facts.label}: {validate.plural(dropped, 'dropped row')}, more than "
            f"--max-dropped {max_dropped} ({_dropped_causes(report)})"
        )
    if no_nan and nan_rows:
        where = ", ".join(str(i) for i in first_nan[0])
        failures.append(
            f"{data_facts.label}: {validate.plural(nan_rows, 'NaN value')} (--no-nan), "
            f"the first at [{where}]"
        )
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
        "rows_dropped": dropped,
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
        ("dropped rows", f"{dropped:,}"),
        ("NaN values", f"{nan_rows:,}"),
        ("verdict", "ok" if not failures else "FAILED: " + "; ".join(failures)),
    ]
    return CheckOutcome(rows, facts, failures)


def _dropped_causes(report: validate.IdReport) -> str:
    causes = []
    if report.dropped_negative:
        causes.append(f"{report.dropped_negative:,} with a negative id")
    if report.dropped_beyond:
        causes.append(f"{report.dropped_beyond:,} with an id >= n under --sorted")
    return ", ".join(causes)


def failure(outcome: CheckOutcome) -> ExpectationError | None:
    """The error a failed check exits with (exit 4), or None when the data passed."""
    return ExpectationError("; ".join(outcome.failures)) if outcome.failures else None


def enforce(outcome: CheckOutcome) -> None:
    error = failure(outcome)
    if error is not None:
        raise error


def _first_nan_index(block: np.ndarray, first_row: int) -> tuple[int, ...]:
    """Index in the whole input of the first NaN of ``block``, whose row 0 is ``first_row``."""
    flat = int(np.argmax(np.isnan(block.reshape(-1))))
    if not block.ndim:
        return ()
    index = tuple(int(i) for i in np.unravel_index(flat, block.shape))
    return (first_row + index[0], *index[1:])


def _nan_count(data: np.ndarray) -> int:
    if data.dtype.kind not in "fc":
        return 0
    return int(np.count_nonzero(np.isnan(data)))
