"""``agg --expect GOLDEN``: a golden table (CSV, TSV, Parquet, Arrow, JSON, .npz or .npy, as
``agg`` writes them) read back and every result column of the run compared with it, the
segment numbers or a ``--by`` run's keys too; where the golden's layout is another one (a
single-op command's, a run with or without ``--skipna``), the error says which."""

from __future__ import annotations

import json
import os
import re
from io import BytesIO
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli.errors import ExpectationError, InvalidInputError, ReadError, UsageError
from segcli.expect import differing_segments
from segcli.io import agg_write
from segcli.io.columns import DTYPE_KEY
from segcli.io.csv_lines import not_utf8_message
from segcli.io.formats import (
    ARROW_FILE_MAGIC,
    OUTPUT_SUFFIXES,
    first_line,
    input_format,
    pipe_bytes,
    suffix_format,
)
from segcli.io.tables import check_unique_names

if TYPE_CHECKING:
    import pyarrow as pa


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
    golden, golden_names, textual = _read_golden(path, key_names, results)
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
        if textual:  # numbers written as text read back in the result's dtype
            from segcli.io.results import text_floats_as

            expected = text_floats_as(expected, values.dtype)
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
    from segcli.io import results as results_module

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
    elif results_module.looks_headerless(held):
        text += f"; {results_module.HEADERLESS_GOLDEN}"
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
) -> tuple[dict[str, np.ndarray], dict[str, str], bool]:
    """The golden file's columns; ``key_names``' as text (CSV's read as written, not parsed:
    a key "007" stays "007"); a .npy's one array as the run's one result column; a JSON's
    columns read with the run's ``results`` to tell complex ``[re, im]`` pairs apart. Beside
    them, each column's name as the file has it (a JSON's or an .npz's ``sum`` for
    ``sum_0``), for messages; and whether its numbers are text (CSV, TSV, JSON), with no
    dtype."""
    if not os.path.exists(path):
        raise _missing(path)
    fmt, body = None, b""  # as far as the read below got, for its error
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
            return (
                *_npy_golden(body, path, tuple(name for name in results if name != "rows")),
                False,
            )
        if fmt == "json":
            return (*_json_golden(body, results, path), True)
        if fmt == "npz":
            with np.load(BytesIO(body)) as archive:
                return (*_flattened({name: archive[name] for name in archive.files}), False)
        table = _golden_table(body, fmt, key_names)
    except (OSError, ValueError) as exc:
        said = not_utf8_message(f"--expect {path}", body) if fmt in ("csv", "tsv") else None
        raise ReadError(said or f"--expect {path}: cannot read ({first_line(exc)})") from None
    # Every column of the golden is compared (or is an error): none may be named twice.
    check_unique_names(table.column_names, table.column_names, f"--expect {path}")
    columns = {
        field.name: _key_texts(table.column(field.name))
        if field.name in key_names
        else _golden_column(table.column(field.name), field, path)
        for field in table.schema
    }
    return columns, {name: name for name in columns}, fmt in ("csv", "tsv")


def _golden_column(column: pa.ChunkedArray, field: pa.Field, path: str) -> np.ndarray:
    """A golden table's result column as NumPy; a complex one's (re, im) pairs (see
    :mod:`segcli.io.agg_write`) as the complex dtype its field names."""
    import pyarrow.types as pt

    recorded = (field.metadata or {}).get(DTYPE_KEY)
    if recorded is None or not pt.is_fixed_size_list(field.type) or field.type.list_size != 2:
        plain: np.ndarray = column.to_numpy()
        return plain
    try:
        dtype = np.dtype(recorded.decode())
    except (TypeError, UnicodeDecodeError):
        dtype = np.dtype(object)
    if dtype.kind != "c" or column.null_count or not pt.is_floating(field.type.value_type):
        raise ReadError(
            f"--expect {path}: column {field.name!r} holds pairs that are not the (re, im) "
            f"pairs of a complex column ({DTYPE_KEY.decode()} {recorded!r}, {field.type})"
        )
    pairs = column.combine_chunks().flatten().to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(pairs, np.finfo(dtype).dtype).view(dtype)


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
            column = _complex_pairs(column)
        if like is not None and not values:  # [] keeps no inner shape: the run's, with 0 rows
            column = np.zeros((0, *like.shape[1:]), like.dtype)
        arrays[name] = column
    segment = arrays.pop("segment", None)
    flat, names = _flattened(arrays)
    if segment is not None:  # compared as a table's segment column is, not renumbered
        flat["segment"], names["segment"] = segment, "segment"
    return flat, names


def _complex_pairs(column: np.ndarray) -> np.ndarray:
    """Complex values written as ``[re, im]`` pairs. Not ``re + 1j * im``: 1j times an
    infinite part is NaN in the real part (``1j * -inf`` is ``nan-infj``)."""
    pairs = np.ascontiguousarray(column, dtype=np.float64)
    return pairs.view(np.complex128)[..., 0]


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
