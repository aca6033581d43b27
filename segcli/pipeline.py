"""One run of a command on files: pick a driver, reduce, check, write, summarise.

The CLI parses options into a :class:`RunRequest` and calls :func:`run` or :func:`check`. A
request becomes a driver-neutral :class:`~segcli.drivers.base.RunSpec`, and
:func:`segcli.drivers.choose.choose_driver` picks who carries it out (in memory, streamed, on
Dask); reading lives in :mod:`segcli.io`, the drivers in :mod:`segcli.drivers`, the math in
:mod:`segcli.core`. Here: the request's usage rules, the expected-result check, the writing
of the result and the summary.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO

import numpy as np

from segcli import core, io, ops, validate
from segcli.drivers.base import Progress, RunSpec
from segcli.drivers.choose import carry_out
from segcli.errors import ExpectationError, UsageError, WriteError
from segcli.expect import check_expected, check_expected_counts
from segcli.io import peek
from segcli.io.column_names import column_list
from segcli.io.columns import nulls_kept
from segcli.io.commit import refuse_binary_on_terminal, refuse_unfit_name
from segcli.io.formats import STDIN_LABEL, input_format, refuse_terminal
from segcli.io.key_names import refuse_clashing_keys
from segcli.io.keyed import (
    key_value_text,
    keyed_header,
    keyed_text_blocks,
    keys_go_first,
    keys_out_format,
    stage_keys,
)
from segcli.memory import available_bytes
from segcli.signals import checkpoint, streaming_out
from segcli.summary import (
    RunSummary,
    check_facts,
    check_rows,
    dropped_rows,
    empty_segments,
    missing_values,
    run_summary,
)

if TYPE_CHECKING:
    from segcli.drivers.check import CheckResult
    from segcli.keys.facts import KeyFacts

__all__ = ["Progress", "RunOutcome", "RunRequest", "Streams", "check", "run"]


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
    #: ``--ddof`` of var and std (None: not given).
    ddof: int | None = None
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
    no_input_header: bool = False
    #: ``--no-header``: text, csv and tsv outputs without their header line.
    no_output_header: bool = False
    #: ``--by``: key columns of DATA's table (comma-separated) that give the groups.
    by: str | None = None
    #: ``--null-keys``: "drop" (the default) or "group"; None when not given.
    null_keys: str | None = None
    #: ``--keys-from``: a table whose key columns fix the groups and their order.
    keys_from: str | None = None
    #: ``--keys-out``: where a .npy/.npz output's key table goes.
    keys_out: str | None = None
    #: ``--indices`` / ``--weights`` (TF's sparse family, weighted combiners) and their columns.
    indices: str | None = None
    indices_column: str | None = None
    weights: str | None = None
    weights_column: str | None = None
    #: ``--q`` of quantile (None: not given).
    q: float | None = None
    #: ``--skipna``: NaN and null values left out, element by element.
    skipna: bool = False
    #: ``--tmp-dir``: the directory of median/quantile/nunique's partition files.
    tmp_dir: str | None = None

    def key_columns(self) -> tuple[str, ...]:
        """The ``--by`` column names; the key options' usage errors (see :func:`_check_by`)."""
        _check_by(self)
        return _parse_by(self.by)

    def refuse_clashing_keys(self, results: tuple[str, ...] | list[str] = ("value",)) -> None:
        """A UsageError if a ``--by`` column has the name of an output column, before any
        input is read (see :mod:`segcli.io.key_names`); ``results``: the result columns."""
        refuse_clashing_keys(self.key_columns(), results)

    def csv_options(self) -> io.CsvOptions | None:
        """How to split CSV/TSV inputs; a UsageError if given and no input is CSV/TSV."""
        if self.delimiter is None and not self.no_input_header:
            return None
        delimiter = io.check_delimiter(self.delimiter)
        if not any(io.is_csv_path(p) for p in (self.data, self.ids) if p is not None):
            option = "--delimiter" if self.delimiter is not None else "--no-input-header"
            raise UsageError(f"{option} applies to CSV/TSV inputs only")
        return io.CsvOptions(delimiter, header=not self.no_input_header)

    def check_options(self) -> None:
        """The usage errors of options that cannot apply, found from the options alone: a run
        makes them before it touches any file, its outputs' folders included."""
        self.csv_options()
        _refuse_both_stdin(self)
        if self.fast_atomics and self.engine != "cupy":
            raise UsageError("--fast-atomics applies to --engine cupy only")
        if self.skipna and (self.weights is not None or self.weights_column is not None):
            raise UsageError("--skipna does not go with --weights yet")
        self.key_columns()
        if self.op in ops.OPS:  # agg checks its op list itself
            if self.q is not None:
                from segcli.holistic_runs import check_q  # the sorting ops' module: for --q

                check_q((self.op,), self.q)
            if self.ddof is not None:
                ops.with_ddof(self.op, self.ddof)

    def spec(self, stdin: BinaryIO | None = None) -> RunSpec:
        """The request as a driver-neutral spec; usage errors of options that cannot apply."""
        self.check_options()
        csv = self.csv_options()
        if "-" in (self.data, self.ids):
            stdin = peek.peekable(stdin)
            refuse_terminal(stdin, STDIN_LABEL)
        by = self.key_columns()
        _check_tmp_dir(self.tmp_dir)
        budget = memory_budget(self)
        return RunSpec(
            op=self.op if self.ddof is None else ops.with_ddof(self.op, self.ddof),
            data=self.data,
            ids=self.ids,
            data_column=self.data_column,
            ids_column=self.ids_column,
            data_key=self.data_key,
            ids_key=self.ids_key,
            csv=csv,
            stdin=stdin,
            num_segments=self.num_segments,
            sorted_ids=self.sorted_ids,
            engine=self.engine,
            fast_atomics=self.fast_atomics,
            fill=self.fill,
            memory_budget=budget,
            stream_above=self.memory_limit
            if self.memory_limit is not None
            else min(budget, STREAM_FROM_BYTES),
            block_rows=self.chunk_rows,
            scheduler=self.scheduler,
            by=by,
            null_keys=self.null_keys or "drop",
            keys_from=self.keys_from,
            indices=self.indices,
            indices_column=self.indices_column,
            weights=self.weights,
            weights_column=self.weights_column,
            q=self.q,
            skipna=self.skipna,
            tmp_dir=self.tmp_dir,
        )


def _check_tmp_dir(path: str | None) -> None:
    """A --tmp-dir that cannot take files fails before any input is read, with the exit code
    of a place segcli cannot write to (5), as a partition file that fails later does."""
    if path is None:
        return
    if not path:
        raise UsageError("--tmp-dir '': an empty path names no directory")
    if not os.path.isdir(path):
        what = "not a directory" if os.path.exists(path) else "no such directory"
        raise WriteError(f"--tmp-dir {path}: {what}")
    if not os.access(path, os.W_OK | os.X_OK):
        raise WriteError(f"--tmp-dir {path}: not writable")


@dataclass
class Streams:
    """Where data goes (stdout) and comes from (stdin); tests pass their own."""

    stdout_binary: BinaryIO | None = None
    stdout_text: TextIO | None = None
    stdin: BinaryIO | None = None


@dataclass
class RunOutcome:
    summary: RunSummary
    result: np.ndarray


#: Files larger than this stream even when they would fit in memory: the next block is read
#: while the engine folds this one, and no whole-file buffer has to be paged in. Side by side,
#: a 20M-row float32 sum (160 MB of .npy) took 307 ms streamed against 463 ms read whole, and
#: on 200M rows streaming ran at 114% of the in-memory throughput (benchmarks/STREAM_RESULTS.md).
STREAM_FROM_BYTES = 32 * 1024 * 1024


def memory_budget(request: RunRequest) -> int:
    """The memory a run may give its input: ``--memory-limit``, else a quarter of free memory.
    Streaming sizes its blocks from it."""
    return request.memory_limit if request.memory_limit is not None else available_bytes() // 4


def _refuse_both_stdin(request: RunRequest) -> None:
    if request.data == "-" and request.ids == "-":
        raise UsageError(
            "DATA and IDS cannot both be '-': stdin holds one input; for an Arrow stream "
            "holding both, give '-' once with --data-column and --ids-column"
        )


def _parse_by(by: str | None) -> tuple[str, ...]:
    if by is None:
        return ()
    names = tuple(column_list(by, "--by"))
    repeated = [name for name in names if names.count(name) > 1]
    if repeated:
        raise UsageError(f"--by: key column '{repeated[0]}' is given twice")
    return names


def _check_by(request: RunRequest) -> None:
    """The key options' usage errors, before any input is read."""
    if request.by is None:
        for option, value in (
            ("--null-keys", request.null_keys),
            ("--keys-from", request.keys_from),
            ("--keys-out", request.keys_out),
        ):
            if value is not None:
                raise UsageError(f"{option} applies to --by only")
        return
    conflicts = (
        ("IDS", request.ids is not None),
        ("--ids-column", request.ids_column is not None),
        ("-n/--num-segments", request.num_segments is not None),
        ("--sorted", request.sorted_ids),
    )
    for option, given in conflicts:
        if given:
            raise UsageError(f"--by cannot be used with {option} (the key columns give the groups)")
    if request.data == "-":
        # The command line reads '-' as /dev/stdin (cli._request); a system without that path
        # has no name to read a pipe by.
        raise UsageError(
            "--by reads key columns of a table file by its path, and stdin has none here "
            "(no /dev/stdin); save the table to a file"
        )
    if request.keys_from == "-":
        raise UsageError("--keys-from reads a table file, not stdin")
    if input_format(_first_file(request)) in ("npy", "npz"):
        raise UsageError(
            "--by reads key columns of a table (Parquet, Arrow, CSV/TSV, JSON lines); "
            f"{request.data} is .npy/.npz: give the segment ids as IDS instead"
        )
    if request.null_keys is not None and request.null_keys not in ("drop", "group"):
        raise UsageError(f"--null-keys {request.null_keys!r}: need drop or group")
    _check_keys_out(request)


def _first_file(request: RunRequest) -> str:
    """DATA's file, or on Dask the first file of its folder or glob (whose name has no format)."""
    if request.engine == "dask":
        from segcli.drivers.dask.plan import expand  # no Dask import: only globs and folders

        return expand(request.data)[0]
    return request.data


def _check_keys_out(request: RunRequest) -> None:
    fmt = None
    if request.output is not None:
        fmt = io.output_format(request.output, request.output_format)
    arrays_only = fmt in ("npy", "npz")
    if arrays_only and request.keys_out is None:
        raise UsageError(
            f"{fmt} output holds no key columns: add --keys-out PATH (.parquet, .arrow, .csv or "
            ".tsv) for the key table, or write a table (-o out.parquet, .csv, ...)"
        )
    if request.keys_out is not None and not arrays_only:
        raise UsageError(
            "--keys-out applies to .npy/.npz output; other outputs hold the key columns already"
        )
    if request.keys_out is not None:
        keys_out_format(request.keys_out)


# ---------------------------------------------------------------------------------------------
# A run


def reserve_outputs(
    request: RunRequest,
    outputs: io.OutputSet,
    stdout: BinaryIO | None = None,
    *,
    prints_result: bool = True,
) -> None:
    """Check the output paths before any input is read: an output that is an input is refused,
    and so is a binary format bound for a terminal (``stdout``, else ``sys.stdout``, for
    ``-o -``), and an output that is the stdout the result goes to (``-o -``, or no ``-o``
    where the command ``prints_result``)."""
    if request.expect == "-":
        raise UsageError("--expect reads a file, not stdin")
    if request.output is not None:
        refuse_unfit_name(request.output, "-o")
        fmt = io.output_format(request.output, request.output_format)  # a usage error, now
        if request.output != "-":
            outputs.reserve(request.output, "-o")
        refuse_binary_on_terminal(fmt, request.output, outputs, stdout=stdout)
    if request.keys_out is not None:
        request.key_columns()  # its usage errors come before any file is touched
        outputs.reserve(request.keys_out, "--keys-out")
        refuse_binary_on_terminal(keys_out_format(request.keys_out), request.keys_out, outputs)
    if request.output == "-":
        outputs.refuse_stdout("-o -", stdout)
    elif request.output is None and prints_result:
        outputs.refuse_stdout("the result (on stdout without -o)", stdout)
    inputs = {
        "DATA": request.data,
        "IDS": request.ids,
        "--expect": request.expect,
        "--keys-from": request.keys_from,
        "--indices": request.indices,
        "--weights": request.weights,
    }
    outputs.refuse_inputs(inputs)
    if request.engine == "dask":
        # DATA and IDS may be a folder or a glob there: an output that is one of its files
        # would replace a shard the run reads.
        from segcli.drivers.dask.plan import shard_paths

        for option in ("DATA", "IDS"):
            for path in shard_paths(inputs[option]):
                outputs.refuse_inputs({option: path})


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
    about suspicious but valid input, before the output is written. A caller that passes
    ``outputs`` made :func:`check_request` before it reserved them, as the command line does.
    """
    if outputs is None:
        check_request(request)
        with io.OutputSet() as own:
            reserve_outputs(request, own, (streams or Streams()).stdout_binary)
            return _run(request, streams, progress, own, warn)
    checkpoint("reduce")
    streams = streams or Streams()
    spec = request.spec(streams.stdin)
    streams.stdin = spec.stdin
    done = carry_out(spec, progress)
    reduction = done.reduction
    if warn is not None:
        _warn_of_huge_inferred_n(reduction.id_report, warn)
    if request.expect:
        if done.keys is not None:
            from segcli.expect_keys import check_expected_keys

            check_expected_keys(done.keys.table, request.expect)
        expected, expected_counts = io.read_result_and_counts(
            request.expect, like=reduction.result.dtype
        )
        check_expected(
            reduction.result, expected, request.expect, rtol=request.rtol, atol=request.atol
        )
        check_expected_counts(reduction.counts, expected_counts, request.expect)
    started = time.perf_counter()
    keys_first = keys_go_first(request.output, request.keys_out, outputs)
    if keys_first:
        _stage_keys_out(request, done.keys, outputs)
    output_format = _write(reduction, request, streams, outputs, done.keys)
    if not keys_first:
        _stage_keys_out(request, done.keys, outputs)
    summary = run_summary(
        done,
        output_path=request.output,
        output_format=output_format,
        write_s=time.perf_counter() - started,
        keys_out=request.keys_out,
    )
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
            f"{report.rows:,} {'id' if report.rows == 1 else 'ids'}: most segments will be empty "
            "(give -n to silence this, or check the ids for a stray value)"
        )


def check_request(request: RunRequest) -> None:
    """A single-op run's usage errors that need no file, before its outputs are reserved (as
    :func:`segcli.agg.check_request` for agg): a missing output folder (exit 5) must not hide
    options that cannot go together (exit 2)."""
    request.check_options()
    _check_output_options(request)
    request.refuse_clashing_keys()


def _check_output_options(request: RunRequest) -> None:
    """Output options that cannot apply fail before any input is read."""
    if request.float_format is None and not request.no_output_header:
        return
    fmt = None
    if request.output is not None:
        fmt = io.output_format(request.output, request.output_format)
    io.check_text_output(fmt, request.float_format, header=not request.no_output_header)


def _write(
    reduction: core.Reduction,
    request: RunRequest,
    streams: Streams,
    outputs: io.OutputSet,
    keys: KeyFacts | None = None,
) -> str | None:
    if request.output is None:
        text = streams.stdout_text or sys.stdout
        try:
            header = not request.no_output_header
            with streaming_out():
                for block in _text_lines(reduction.result, keys, request.float_format, header):
                    _write_text(text, block)
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
        keys=None if keys is None else keys.table,
        header=not request.no_output_header,
    )


def _write_text(text: TextIO, block: bytes) -> None:
    """Write a block of text lines whole: a pipe whose reader leaves mid-write takes part of
    it without an error, and only the binary layer reports the short count (then retried, so
    that the broken pipe is raised)."""
    from segcli.io.write import write_all

    binary = getattr(text, "buffer", None)
    if binary is None:
        text.write(block.decode())
        return
    text.flush()
    write_all(binary, block)


def _text_lines(
    result: np.ndarray, keys: KeyFacts | None, float_format: str | None, header: bool
) -> Iterator[bytes]:
    """The lines on stdout: ``segment<TAB>value``, or with --by a header (unless ``header`` is
    False) and key fields."""
    if keys is None:
        yield from io.text_blocks(result, "\t", float_format=float_format)
        return
    if header:
        yield keyed_header(keys.table, result, "\t", count=False).encode()
    yield from keyed_text_blocks(result, keys.table, "\t", float_format=float_format)


def _stage_keys_out(request: RunRequest, keys: KeyFacts | None, outputs: io.OutputSet) -> None:
    if request.keys_out is not None and keys is not None:
        stage_keys(keys.table, request.keys_out, outputs)


# ---------------------------------------------------------------------------------------------
# segcli check


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
    also_ops: tuple[str, ...] = (),
    progress: Progress | None = None,
) -> CheckOutcome:
    """Validate the inputs as ``request.op`` would, then the data-quality rules. ``progress``
    hears of the rows of a streamed check of DATA and IDS (not of --by or --indices).

    Rule violations (docs/semantics.md) raise (exit 1); ``--max-empty`` and ``--no-nan`` failures
    are collected and raised together as an :class:`ExpectationError` by :func:`enforce`.
    """
    from segcli.drivers.check import check_inputs

    streams = streams or Streams()
    spec = request.spec(streams.stdin)
    with nulls_kept(spec.skipna):  # --skipna: null values are missing, null ids drop rows
        if spec.sparse:  # first: --by with --indices or --weights is refused there
            from segcli.drivers.check_sparse import check_sparse

            found = check_sparse(spec)
        elif spec.by:
            from segcli.drivers.keys import check_by

            found = check_by(spec)
        else:
            found = check_inputs(spec, progress)
    for name in also_ops:  # check --op a,b: the data's dtype must suit every op
        ops.check_data_dtype(ops.get_op(name), np.dtype(found.data.dtype), found.data.label)
        if spec.weights is not None or spec.weights_column is not None:
            from segcli.sparse import check_weighted_op

            check_weighted_op(name, True)
    failures = _check_failures(
        found, max_empty=max_empty, no_nan=no_nan, max_dropped=max_dropped, skipna=spec.skipna
    )
    rows = check_rows(found, sorted_ids=request.sorted_ids, failures=failures, skipna=spec.skipna)
    facts = check_facts(found, sorted_ids=request.sorted_ids, failures=failures, skipna=spec.skipna)
    return CheckOutcome(rows, facts, failures)


def _check_failures(
    found: CheckResult,
    *,
    max_empty: int | None,
    no_nan: bool,
    max_dropped: int | None,
    skipna: bool = False,
) -> list[str]:
    """The data-quality rules the inputs break, each as one line."""
    counts, report = found.counts, found.id_report
    empty = empty_segments(found)
    failures = []
    if max_empty is not None and empty > max_empty:
        first = int(np.argmax(counts == 0))
        if found.keys is not None:
            failures.append(_empty_groups_failure(found.keys, empty, max_empty, first))
        else:
            failures.append(
                f"{found.ids.label}: {validate.plural(empty, 'empty segment')}, more than "
                f"--max-empty {max_empty} (first empty: segment {first})"
            )
    dropped = dropped_rows(report)
    if max_dropped is not None and dropped > max_dropped:
        failures.append(
            f"{found.ids.label}: {validate.plural(dropped, 'dropped row')}, more than "
            f"--max-dropped {max_dropped} ({_dropped_causes(report, found.keys, found.null_ids)}"
            f"{_first_dropped(found)})"
        )
    missing = missing_values(found) if skipna else found.nan_values
    if no_nan and missing:
        assert found.first_nan is not None
        where = ", ".join(str(i) for i in found.first_nan)
        what = (
            f"{validate.plural(missing, 'missing value')} (NaN or null)"
            if skipna
            else validate.plural(missing, "NaN value")
        )
        first_at = f"the first at [{where}]"
        if found.first_nan_index is not None:  # --indices: rows no index gathers are not read
            what = f"{what} in the rows the indices gather"
            first_at = f"{first_at} (gathered by index {found.first_nan_index})"
        failures.append(f"{found.data.label}: {what} (--no-nan), {first_at}")
    weights = found.weights_nan
    if no_nan and weights is not None and weights.count:
        failures.append(
            f"{weights.label}: {validate.plural(weights.count, 'NaN weight')} (--no-nan), the "
            f"first at [{weights.first}]"
        )
    return failures


def _empty_groups_failure(keys: KeyFacts, empty: int, max_empty: int, first: int) -> str:
    key = ", ".join(
        f"{name}={key_value_text(keys.table.column(name), first)}"
        for name in keys.table.column_names
    )
    where = f" of --keys-from {keys.keys_from}" if keys.keys_from else ""
    return (
        f"{validate.plural(empty, 'empty group')}{where}, more than --max-empty {max_empty} "
        f"(first empty: {key})"
    )


def _first_dropped(found: CheckResult) -> str:
    return "" if found.first_dropped is None else f"; first dropped: {found.first_dropped}"


def _dropped_causes(
    report: validate.IdReport, keys: KeyFacts | None = None, null_ids: int = 0
) -> str:
    if keys is not None:
        return f"{report.dropped_negative:,} with a missing key"
    causes = []
    # --skipna: the report counts a null id's row as a negative id's; they are told apart.
    if report.dropped_negative - null_ids:
        causes.append(f"{report.dropped_negative - null_ids:,} with a negative id")
    if null_ids:
        causes.append(f"{null_ids:,} with a null id")
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
