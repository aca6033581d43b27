"""``segcli agg``: several ops, and several data columns, in one run.

Every op is folded in the same pass (see :mod:`segcli.multi`); several data columns of one
table are read together, once, with the ids (see :mod:`segcli.drivers.columns`). The results
are written side by side (see :mod:`segcli.io.agg_write`; a ``--by`` run's key columns first),
compared with ``--expect`` column by column (see :mod:`segcli.agg_expect`), and summarised with
one range per result column.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import core, io, ops
from segcli.agg_expect import check_expected_columns
from segcli.drivers.base import DriverResult, InputFacts, Progress
from segcli.drivers.choose import carry_out
from segcli.errors import (
    UsageError,
    WriteError,
)
from segcli.io import agg_write
from segcli.io.column_names import column_list
from segcli.io.commit import refuse_binary_on_terminal, refuse_unfit_name
from segcli.io.formats import (
    is_pipe,
)
from segcli.io.keyed import keys_go_first, stage_keys
from segcli.io.write import write_all
from segcli.multi import split, with_ddof
from segcli.op_names import HOLISTIC_OPS, Q_OPS
from segcli.pipeline import RunRequest, Streams
from segcli.signals import checkpoint, streaming_out
from segcli.summary import (
    RunSummary,
    fill_note,
    json_number,
    range_text,
    result_range,
    run_summary,
    summary_facts,
    summary_rows,
)

if TYPE_CHECKING:
    pass


@dataclass
class AggOutcome:
    summary: RunSummary
    #: Result column name -> values, in output order.
    results: dict[str, np.ndarray]
    counts: np.ndarray
    columns: list[dict[str, Any]] = field(default_factory=list)

    def facts(self) -> dict[str, Any]:
        """The ``--summary-json`` facts, with one entry per result column."""
        results = [
            {
                **column,
                "result_min": json_number(column["result_min"]),
                "result_max": json_number(column["result_max"]),
            }
            for column in self.columns
        ]
        return {**summary_facts(self.summary), "results": results}

    def rows(self) -> list[tuple[str, str]]:
        """The summary rows, the single ``result`` row replaced by one per result column."""
        rows = []
        for label, value in summary_rows(self.summary):
            if label != "result":
                rows.append((label, value))
                continue
            for column in self.columns:
                low, high = column["result_min"], column["result_max"]
                # --skipna's rows per segment are counted, never filled: an empty segment's 0
                # is its number of rows (every op's column, count's too, takes --fill).
                note = "" if column["name"] == "rows" else fill_note(self.summary)
                rows.append(
                    (
                        f"result {column['name']}",
                        f"{range_text(column['dtype'], low, high)}, "
                        f"{column['nan_count']:,} NaN{note}",
                    )
                )
        return rows


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.6g}"


def data_columns(request: RunRequest) -> list[str | None]:
    """``--data-column a,b`` as names (one None: the data is not a table column)."""
    if request.data_column is None:
        return [None]
    names = column_list(request.data_column, "--data-column")
    repeated = [name for name in names if names.count(name) > 1]
    if repeated:
        raise UsageError(f"--data-column: '{repeated[0]}' is given twice")
    return list(names)


def check_request(request: RunRequest, op_names: tuple[str, ...]) -> str:
    """Usage errors of options agg does not take, before any input is read; the output
    format ("text" for lines on stdout)."""
    gathers = request.indices is not None or request.indices_column is not None
    holistic = any(ops.get_op(name).holistic for name in op_names)
    refused = (
        ("--weights", request.weights is not None or request.weights_column is not None),
        ("--indices with median, quantile or nunique", gathers and holistic),
    )
    for option, given in refused:
        if given:
            raise UsageError(f"agg does not take {option} yet; run one op at a time for it")
    if request.tmp_dir is not None and not holistic:  # as a single-op command has no --tmp-dir
        sorting = f"{', '.join(HOLISTIC_OPS[:-1])} and {HOLISTIC_OPS[-1]}"
        raise UsageError(f"--tmp-dir applies to {sorting} only, not {', '.join(op_names)}")
    request.csv_options()
    if request.output is not None:
        refuse_unfit_name(request.output, "-o")
    fmt = (
        "text"
        if request.output is None
        else io.output_format(request.output, request.output_format)
    )
    header = not request.no_output_header
    io.check_text_output(None if fmt == "text" else fmt, request.float_format, header=header)
    with_ddof(op_names, request.ddof)
    request.key_columns()
    columns = data_columns(request)
    once = request.data == "-" or is_pipe(request.data)  # a second read finds nothing, or hangs
    if len(columns) > 1 and once and request.engine == "dask":
        raise UsageError("several --data-column on Dask read DATA once each: give files")
    if len(columns) > 1 and once and holistic:
        raise UsageError(
            "several --data-column with median, quantile or nunique read DATA once each: "
            "give a file, not a pipe"
        )
    names = column_names(_result_names(op_names, request.q), columns)
    names += ["rows"] if _rows_column(request, op_names, fmt) else []
    agg_write.check_layout(fmt, dict.fromkeys(names, np.empty(0)))
    request.refuse_clashing_keys(names)
    return fmt


def _result_names(op_names: tuple[str, ...], q: float | None) -> tuple[str, ...]:
    """Each op's result column name, ``--q`` checked. The sorting ops' module loads only for
    ``--q`` or quantile (some 20 ms of every run's start-up)."""
    if q is None and not any(name in Q_OPS for name in op_names):
        return op_names
    from segcli.holistic_runs import check_q, result_name

    check_q(op_names, q)
    return tuple(result_name(op, q) for op in op_names)


def _rows_column(request: RunRequest, op_names: tuple[str, ...], fmt: str) -> bool:
    """SPEC: under --skipna the count op counts present values, so a ``rows`` column (rows
    per segment) takes the place of the trailing count; .npy, which holds no count column,
    holds no ``rows`` either (``agg --op count --skipna`` writes what ``count --skipna`` does),
    and .npz holds the rows per segment as ``counts``, whatever the ops."""
    return request.skipna and "count" in op_names and fmt not in ("npy", "npz")


def column_names(op_names: tuple[str, ...], columns: list[str | None]) -> list[str]:
    """``<op>`` for one data column, ``<column>_<op>`` for several."""
    if len(columns) == 1:
        return list(op_names)
    return [f"{column}_{op}" for column in columns for op in op_names]


def run(
    request: RunRequest,
    op_names: tuple[str, ...],
    outputs: io.OutputSet,
    *,
    streams: Streams | None = None,
    progress: Progress | None = None,
) -> AggOutcome:
    """Reduce every data column by every op; check ``--expect``; stage the output."""
    token = core.OUTPUT_FORMAT.set(None)
    try:
        return _run(request, op_names, outputs, streams or Streams(), progress)
    finally:
        core.OUTPUT_FORMAT.reset(token)


def _run(
    request: RunRequest,
    op_names: tuple[str, ...],
    outputs: io.OutputSet,
    streams: Streams,
    progress: Progress | None,
) -> AggOutcome:
    checkpoint("reduce")
    fmt = check_request(request, op_names)
    columns = data_columns(request)
    spec = dataclasses.replace(
        dataclasses.replace(request, data_column=columns[0], ddof=None).spec(streams.stdin),
        ops=with_ddof(op_names, request.ddof),
    )
    streams.stdin = spec.stdin
    if len(columns) == 1:
        runs = [carry_out(spec, progress)]
    else:
        from segcli.drivers.columns import run as several_columns

        runs = several_columns(spec, [str(c) for c in columns], progress)
    results: dict[str, np.ndarray] = {}
    for column, done in zip(columns, runs, strict=True):
        for op, values in split(done.reduction.result).items():
            name = op if len(columns) == 1 else f"{column}_{op}"
            results[name] = values
    counts = np.asarray(runs[0].reduction.counts)
    if _rows_column(request, op_names, fmt):
        results["rows"] = counts
    keys = runs[0].keys
    if request.expect:
        check_expected_columns(
            results,
            counts,
            request.expect,
            rtol=request.rtol,
            atol=request.atol,
            keys=None if keys is None else keys.table,
            rows=request.skipna and "count" in op_names,
        )
    started = time.perf_counter()
    body = agg_write.render(
        fmt,
        results,
        counts,
        header=not request.no_output_header,
        counted="count" in op_names,
        float_format=request.float_format,
        to_stream=request.output == "-",
        keys=None if keys is None else keys.table,
    )
    keys_first = keys_go_first(request.output, request.keys_out, outputs)
    if keys_first and request.keys_out is not None and keys is not None:
        stage_keys(keys.table, request.keys_out, outputs)
    _write(body, request, fmt, outputs, streams)
    if not keys_first and request.keys_out is not None and keys is not None:
        stage_keys(keys.table, request.keys_out, outputs)
    written = time.perf_counter() - started
    return _outcome(runs, op_names, results, counts, request, fmt, written)


def _write(
    body: bytes, request: RunRequest, fmt: str, outputs: io.OutputSet, streams: Streams
) -> None:
    if request.output not in (None, "-"):
        with outputs.stage(request.output) as handle:
            handle.write(body)
        return
    out = streams.stdout_binary
    if out is None:
        out = sys.stdout.buffer
    refuse_binary_on_terminal(fmt, "-", stdout=out)
    try:
        with streaming_out():
            write_all(out, body)  # a pipe's reader leaving mid-write shows as a short count
            out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise WriteError(f"<stdout>: cannot write ({exc.strerror or exc})") from exc


def _outcome(
    runs: list[DriverResult],
    op_names: tuple[str, ...],
    results: dict[str, np.ndarray],
    counts: np.ndarray,
    request: RunRequest,
    fmt: str,
    write_s: float,
) -> AggOutcome:
    # One step's seconds over every column's run (a shared read counts once: its own run).
    timings: dict[str, float] = {}
    for done in runs:
        for step, seconds in done.timings.items():
            timings[step] = timings.get(step, 0.0) + seconds
    first = dataclasses.replace(runs[0], data=_data_facts(runs), timings=timings)
    one = next(iter(results.values()))
    shown = dataclasses.replace(first.reduction, result=one, skipped_values=_skipped(runs))
    summary = run_summary(
        dataclasses.replace(first, reduction=shown),
        output_path=request.output,
        output_format=None if fmt == "text" else fmt,
        write_s=write_s,
        keys_out=request.keys_out,
    )
    # The ops asked for: the columns (a_sum, the rows count) are in ``results``.
    summary.op = ",".join(op_names)
    summary.output_shape = [int(counts.shape[0]), len(results)]
    summary.output_dtype = "columns"
    # One range per column (``results``); the run's own NaN count adds up every column.
    summary.result_min = summary.result_max = None
    summary.nan_count = 0
    facts = []
    for name, values in results.items():
        nan_count, low, high = result_range(values)
        summary.nan_count += nan_count
        facts.append(
            {
                "name": name,
                "dtype": str(values.dtype),
                "shape": list(values.shape),
                "nan_count": nan_count,
                "result_min": low,
                "result_max": high,
            }
        )
    return AggOutcome(summary, results, counts, facts)


def _data_facts(runs: list[DriverResult]) -> InputFacts:
    """DATA as every column read: each one's label and dtype, and their bytes together."""
    if len(runs) == 1:
        return runs[0].data
    dtypes = dict.fromkeys(done.data.dtype for done in runs)  # each once, in column order
    return dataclasses.replace(
        runs[0].data,
        label=", ".join(done.data.label for done in runs),
        dtype=",".join(dtypes),
        bytes=sum(done.data.bytes for done in runs),
    )


def _skipped(runs: list[DriverResult]) -> int | None:
    """``--skipna``: the values left out over every data column (each column's run counts its
    own; the rows with a null id are the same rows for all)."""
    counts = [done.reduction.skipped_values for done in runs]
    return None if counts[0] is None else sum(count or 0 for count in counts)
