"""``segcli agg``: several ops, and several data columns, in one run.

Every op is folded in the same pass (see :mod:`segcli.multi`); several data columns of one
table are read together, once, with the ids (see :mod:`segcli.drivers.columns`). The results
are written side by side (see :mod:`segcli.io.agg_write`; a ``--by`` run's key columns first),
compared with ``--expect`` column by column, and summarised with one range per result column.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from io import BytesIO
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import core, io, ops
from segcli.drivers.base import DriverResult, InputFacts, Progress
from segcli.drivers.choose import carry_out
from segcli.errors import (
    ExpectationError,
    InvalidInputError,
    ReadError,
    UsageError,
    WriteError,
)
from segcli.expect import differing_segments
from segcli.io import agg_write
from segcli.io.commit import refuse_binary_on_terminal, refuse_unfit_name
from segcli.io.formats import (
    ARROW_FILE_MAGIC,
    OUTPUT_SUFFIXES,
    first_line,
    input_format,
    is_pipe,
    pipe_bytes,
    suffix_format,
)
from segcli.io.keyed import stage_keys
from segcli.io.tables import check_unique_names
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
    import pyarrow as pa


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
    names = [name.strip() for name in request.data_column.split(",")]
    if not all(names):
        raise UsageError(f"--data-column {request.data_column!r}: need names separated by commas")
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
    _write(body, request, fmt, outputs, streams)
    if request.keys_out is not None and keys is not None:
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


def check_expected_columns(
    results: dict[str, np.ndarray],
    counts: np.ndarray,
    path: str,
    *,
    rtol: float,
    atol: float,
    keys: pa.Table | None = None,
    rows: bool = False,
) -> None:
    """Compare every result column with the golden table at ``path`` (a table or .npz with the
    same columns); exit 4 naming the first column and segment that differ. A golden table's
    ``segment`` column is compared too (a ``--by`` run's key columns, by
    :mod:`segcli.expect_keys` as for a single op), so that rows of other segments or keys, or
    in another order, fail rather than pass on equal values; a golden result column this run
    does not give is an error, not a column left unchecked. ``rows``: a table of this run
    holds a ``rows`` column (``--skipna`` with the count op), which a golden may lack."""
    key_names = () if keys is None else tuple(keys.column_names)
    golden, golden_names = _read_golden(path, key_names, results)
    flat = agg_write.flat_columns(results, counts, counted=True)
    if keys is not None or "segment" not in golden:
        del flat["segment"]
    if "rows" not in golden:  # rows per segment, like the count column: where the golden has it
        flat.pop("rows", None)
    flat.update(_golden_counts(golden, results, counts))
    if keys is not None:
        from segcli.expect_keys import check_expected_keys  # a --by run's --expect only

        check_expected_keys(keys, path)
    missing = [name for name in flat if name not in golden]
    if missing:
        raise InvalidInputError(
            _missing_column(path, missing[0], flat, golden_names, results, key_names, rows=rows)
        )
    unchecked = [name for name in golden if name not in flat and name not in (*key_names, *_ROWS)]
    if unchecked:
        raise InvalidInputError(
            f"--expect {path}: column {unchecked[0]!r} is not a result of this run "
            f"(results: {', '.join(results)})"
        )
    for name, values in flat.items():
        expected = _golden_numbers(np.asarray(golden[name]), path, name)
        if expected.shape != values.shape:
            raise ExpectationError(
                f"--expect {path}: column {golden_names[name]} has {expected.shape[0]} rows, "
                f"the result {values.shape[0]}"
            )
        exact = name in _ROWS  # numbers of segments and of rows, not measured: no tolerance
        # As for one op: the tolerances apply to floats; integers (argmax's row numbers, an
        # integer sum) and booleans must be equal.
        bad = differing_segments(
            values, expected, rtol=0 if exact else rtol, atol=0 if exact else atol
        )
        if bad.size:
            raise ExpectationError(
                f"--expect {path}: column {name} differs in {bad.size:,} segment(s), the first "
                f"segment {int(bad[0])}: {values[bad[0]]} vs expected {expected[bad[0]]}"
            )


def _missing_column(
    path: str,
    name: str,
    flat: dict[str, np.ndarray],
    golden_names: dict[str, str],
    results: dict[str, np.ndarray],
    key_names: tuple[str, ...],
    *,
    rows: bool,
) -> str:
    """Why the golden has no column ``name`` of this run: the golden's columns that differ
    (as the file names them: a JSON's or an .npz's ``sum``, not ``sum_0``), and the layout it
    comes from where its columns tell: a single-op command's, or a run with(out) --skipna."""
    held = list(dict.fromkeys(golden_names.values()))  # the file's own column names
    others = list(
        dict.fromkeys(
            golden_names[column]
            for column in golden_names
            if column not in flat and column not in key_names
        )
    )
    run_names = _flat_names(results)
    wanted = run_names.get(name, name)  # sum_0 of the run's result sum
    if wanted in held:
        # The golden's column of that name has another inner shape (a count per element, not
        # per row): the run's sum_0, sum_1 against a 1-D sum, or its count against a JSON's
        # nested one.
        have = sum(1 for column in golden_names.values() if column == wanted)
        gives = [column for column, of in run_names.items() if of == wanted]
        text = (
            f"column {wanted!r} holds {have} value{'' if have == 1 else 's'} per segment, "
            f"the result {len(gives)}" + (f" ({', '.join(gives)})" if len(gives) > 1 else "")
        )
        others = [column for column in others if column != wanted]
        if others:
            text += f"; the golden also has {', '.join(others)}"
    elif others:
        text = f"no column {name!r} to compare with; the golden has {', '.join(others)} instead"
    else:
        text = f"no column {name!r} to compare with (the golden's columns: {', '.join(held)})"
    # A single-op table's value (value_0, value_1 for inner dimensions), an .npz's result: no
    # agg column is so named (an op's, or <data column>_<op>).
    single = [
        column
        for column in held
        if re.fullmatch(r"value(_\d+)*|result", column) and column not in key_names
    ]
    if single:
        text += (
            "; it is a single-op command's golden: write it with agg, or check it with the "
            "single-op command"
        )
    elif "rows" in held and "rows" not in key_names and not rows:
        text += "; it is a --skipna run's golden (a rows column)"
    elif rows and "rows" not in held and "counts" not in held:
        text += "; it is the golden of a run without --skipna (no rows column)"
    return f"--expect {path}: {text}"


def _flat_names(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    """Each flattened column's name (``sum_0``) -> the name of its array (``sum``)."""
    return {
        column: name
        for name, values in arrays.items()
        for column in agg_write.flat_columns({name: values}, values[:0], counted=True)
        if column != "segment"
    }


def _flattened(arrays: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A JSON's, an .npz's or a .npy's arrays as a table's columns (inner dimensions
    flattened, no ``segment``), and each column's name as the file has it."""
    flat: dict[str, np.ndarray] = {}
    for name, values in arrays.items():
        columns = agg_write.flat_columns({name: values}, values[:0], counted=True)
        del columns["segment"]  # flat_columns' own numbers (a JSON's segment list goes too)
        flat.update(columns)
    return flat, _flat_names(arrays)


def _key_texts(column: Any) -> np.ndarray:
    """A key column as the text a table shows (a null key: the empty field)."""
    from segcli.io.keyed import key_strings

    return np.array([text or "" for text in key_strings(column).to_pylist()], dtype=object)


#: A golden table's columns of rows per segment (and segment numbers), which no op gives.
_ROWS = ("segment", "count", "counts", "rows")


def _golden_counts(
    golden: dict[str, np.ndarray], results: dict[str, np.ndarray], counts: np.ndarray
) -> dict[str, np.ndarray]:
    """The rows per segment to compare, under each name the golden holds them by: a table's
    trailing ``count`` (unless the count op's column has that name), an .npz's ``counts``."""
    names = [name for name in ("count", "counts") if name in golden and name not in results]
    return dict.fromkeys(names, np.asarray(counts, dtype=np.int64))


def _golden_numbers(expected: np.ndarray, path: str, name: str) -> np.ndarray:
    """A golden column as numbers. A CSV reader leaves text where no number type fits (complex
    values as ``(1+2j)``, or a stray word): parse it as the single-op ``--expect`` does, and name
    the first value that is not a number rather than fail inside the comparison."""
    if expected.dtype.kind in "biufc":
        return expected
    from segcli.io.results import parse_numbers

    return parse_numbers([str(value) for value in expected.tolist()], f"--expect {path}", name)


def _read_golden(
    path: str, key_names: tuple[str, ...], results: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The golden file's columns; ``key_names``' as text (CSV's read as written, not parsed:
    a key "007" stays "007"); a .npy's one array as the run's one result column; a JSON's
    columns read with the run's ``results`` to tell complex ``[re, im]`` pairs apart. Beside
    them, each column's name as the file has it (a JSON's or an .npz's ``sum`` for
    ``sum_0``), for messages."""
    if not os.path.exists(path):
        raise _missing(path)
    try:
        # By suffix, else by its first bytes (a pipe, kept for the read), as for one op.
        fmt = suffix_format(path, OUTPUT_SUFFIXES) or input_format(path)
        if fmt not in ("npy", "npz", "parquet", "arrow", "csv", "tsv", "json"):
            raise UsageError(
                f"--expect {path}: agg compares with .npy (one result), .npz, .parquet, "
                ".arrow, .csv, .tsv, .json"
            )
        body = pipe_bytes(path)  # a golden is small; read once, a pipe included
        if fmt == "npy":
            return _npy_golden(body, path, tuple(name for name in results if name != "rows"))
        if fmt == "json":
            return _json_golden(body, results, path)
        if fmt == "npz":
            with np.load(BytesIO(body)) as archive:
                return _flattened({name: archive[name] for name in archive.files})
        table = _golden_table(body, fmt, key_names)
    except (OSError, ValueError) as exc:
        raise ReadError(f"--expect {path}: cannot read ({first_line(exc)})") from None
    # Every column of the golden is compared (or is an error): none may be named twice.
    check_unique_names(table.column_names, table.column_names, f"--expect {path}")
    columns = {
        name: _key_texts(table.column(name)) if name in key_names else table.column(name).to_numpy()
        for name in table.column_names
    }
    return columns, {name: name for name in columns}


def _golden_table(body: bytes, fmt: str, key_names: tuple[str, ...]) -> pa.Table:
    """A golden table from its bytes; CSV columns as text, an Arrow file or stream alike."""
    import pyarrow as pa

    source = pa.BufferReader(body)
    if fmt in ("csv", "tsv"):
        import pyarrow.csv as pacsv

        options = pacsv.ParseOptions(delimiter=agg_write.SEPARATORS[fmt])
        # Every column as text: keys as written, and values parsed by :func:`_golden_numbers`
        # as the single-op --expect parses them. pyarrow's own inference has no uint64 and
        # reads a uint64 result past int64 as float64, where 2**64 - 2 and 2**64 - 3 are equal.
        header = pacsv.open_csv(pa.BufferReader(body), parse_options=options).schema.names
        as_text = pacsv.ConvertOptions(column_types=dict.fromkeys(header, pa.string()))
        return pacsv.read_csv(source, parse_options=options, convert_options=as_text)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        # Not pq.read_table: its dataset reader refuses a name used twice with a message that
        # names no file; the check after the read names the column.
        return pq.ParquetFile(source).read()
    # ``-o - --format arrow`` writes the IPC stream format, a file the IPC file format.
    if body.startswith(ARROW_FILE_MAGIC):
        return pa.ipc.open_file(source).read_all()
    return pa.ipc.open_stream(source).read_all()


def _json_golden(
    body: bytes, results: dict[str, np.ndarray], path: str
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The columns of the JSON agg writes (``{"segment": [...], "<name>": [...], "count":
    [...]}``), inner dimensions flattened as a table's, and their names in the file; a
    ``--by`` run's ``keys`` are compared by :mod:`segcli.expect_keys`. ValueError where it is
    not such a document; ReadError naming the single-op layout where it is that."""
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError(f"not an object of columns but a {type(doc).__name__}")
    if {"shape", "dtype", "values"} <= doc.keys() <= {"keys", "shape", "dtype", "values", "counts"}:
        raise ReadError(
            f"--expect {path}: a single-op command's result (shape, dtype and values), not "
            f"agg's columns (results: {', '.join(results)}): write the golden with agg, or "
            "check it with the single-op command"
        )
    arrays: dict[str, np.ndarray] = {}
    for name, values in doc.items():
        if name == "keys":
            continue
        if not isinstance(values, list):
            raise ValueError(f"column {name!r} is not a list")
        like = results.get(name)
        column = _json_column(_json_numbers(values))
        if like is not None and like.dtype.kind == "c" and column.size:
            column = column[..., 0] + 1j * column[..., 1]  # written as [re, im] pairs
        if like is not None and not values:  # [] keeps no inner shape: the run's, with 0 rows
            column = np.zeros((0, *like.shape[1:]), like.dtype)
        arrays[name] = column
    return _flattened(arrays)


def _json_column(numbers: list[Any]) -> np.ndarray:
    """A JSON column as an array. NumPy makes integers past int64 beside smaller ones (a
    uint64 result) float64, which rounds them: such a column is read as uint64."""
    column = np.asarray(numbers)
    if column.dtype.kind == "f" and _only_integers(numbers):
        try:
            return np.asarray(numbers, dtype=np.uint64)
        except OverflowError:  # negative integers too: no integer dtype holds them all
            pass
    return column


def _only_integers(values: Any) -> bool:
    if isinstance(values, list):
        return all(_only_integers(value) for value in values)
    return isinstance(values, int)


def _json_numbers(values: Any) -> Any:
    """Nested lists with the strings JSON writes for non-finite floats ("nan", "inf",
    "-inf") as floats."""
    if isinstance(values, list):
        return [_json_numbers(value) for value in values]
    if isinstance(values, str):
        return float(values)
    return values


def _npy_golden(
    body: bytes, path: str, results: tuple[str, ...]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """A golden .npy holds one result column, as ``agg -o x.npy`` writes it."""
    if len(results) != 1:
        raise UsageError(
            f"--expect {path}: .npy holds one array, and this run gives {len(results)} result "
            f"columns ({', '.join(results)}): compare with .npz or a table"
        )
    values = np.atleast_1d(np.load(BytesIO(body), allow_pickle=False))
    return _flattened({results[0]: values})


def _missing(path: str) -> Exception:
    return ReadError(f"--expect {path}: no such file")
