"""``read_result_table``: read back any file ``write_result`` wrote (golden files for --expect)."""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from segcli.errors import ExpectationError, InvalidInputError, ReadError
from segcli.io.columns import VALUE_COLUMN
from segcli.io.csv_lines import not_utf8_message, numbered_records
from segcli.io.formats import (
    OUTPUT_SUFFIXES,
    first_line,
    input_format,
    library_errors,
    open_binary,
    shown,
    suffix_format,
)
from segcli.io.npy import npz_keys, open_npz, read_npy, read_npz_member
from segcli.io.tables import check_unique_names, open_table

_Array = np.ndarray[Any, Any]
_VALUE_N = re.compile(r"value_(\d+(?:_\d+)*)")
# Text is parsed as the first of these that accepts every value of a column.
_TEXT_DTYPES = (np.int64, np.uint64, np.float64, np.complex128)
_NUMERIC_KINDS = frozenset("biufc")


def read_result_table(path: str, *, dtype: DTypeLike | None = None) -> _Array:
    """Read a result written by :func:`segcli.io.write_result` back into its array.

    npy and json keep the dtype; npz uses key ``result``; Parquet/Arrow restore N-D and complex
    values from the schema metadata; CSV/TSV (which carry no dtype) come back as int64, uint64,
    float64 or complex128, whichever reads every value, unless ``dtype`` is given. Rows are put
    in ``segment`` order when a ``segment`` column is present.
    """
    array, _ = read_result_and_counts(path)
    return array if dtype is None else array.astype(dtype)


def read_result_and_counts(
    path: str, *, like: np.dtype[Any] | None = None
) -> tuple[_Array, _Array | None]:
    """The result, as :func:`read_result_table`, and the rows per segment written with it
    (a table's ``count`` column, npz's and JSON's ``counts``), None where the file holds none.
    One read of the file, which may be a pipe. ``like``: the dtype of the result it is
    compared with, in which a CSV's or TSV's floats are read (see :func:`text_floats_as`)."""
    fmt = suffix_format(path, OUTPUT_SUFFIXES) or input_format(path)
    values, counts = _READERS[fmt](path)
    if like is not None and fmt in TEXT_GOLDENS:
        values = text_floats_as(values, like)
    return values, counts


#: Golden formats whose numbers are text, which carries no dtype.
TEXT_GOLDENS = frozenset({"csv", "tsv"})


def text_floats_as(values: _Array, dtype: np.dtype[Any]) -> _Array:
    """Floats parsed from text (as float64 or complex128) in the narrower float ``dtype`` of
    the result they are compared with. segcli writes a float32 or float16 as the shortest
    text that reads back as that value (``1.1``), and float64 reads that text as another
    number: float16's 1.1 is 1.0996, 3.6e-4 away, beyond --expect's default rtol."""
    narrower = values.dtype.kind == dtype.kind and values.dtype.itemsize > dtype.itemsize
    if dtype.kind not in "fc" or not narrower:
        return values
    with np.errstate(over="ignore"):  # past float16's range is inf, as the result would be
        return values.astype(dtype)


def _read_npy(path: str) -> tuple[_Array, None]:
    return read_npy(path), None


def _read_npz(path: str) -> tuple[_Array, _Array | None]:
    with open_npz(path) as archive:
        keys = npz_keys(archive)
        if "result" not in keys and len(keys) != 1:
            _refuse_agg_golden(keys, path)
            raise ReadError(
                f"{path}: holds {len(keys)} arrays and none is named 'result' (keys: "
                f"{', '.join(keys) or 'none'}); a golden .npz needs a 'result' array or one array"
            )
        key = "result" if "result" in keys else keys[0]
        values = read_npz_member(archive, key, f"{path}:{key}")
        if key != "result" or "counts" not in keys:
            return values, None
        return values, read_npz_member(archive, "counts", f"{path}:counts")


def _read_arrow_table(path: str, fmt: str) -> tuple[_Array, _Array | None]:
    table = open_table(path, fmt)
    names = table.schema().names
    if VALUE_COLUMN in names:
        values = table.arrays([VALUE_COLUMN])[0]
    else:
        columns, inner = _value_columns(names, path)
        values = _stack(table.arrays(columns), inner, table.read([]).num_rows)
    counts = table.arrays([_COUNT_COLUMN])[0] if _COUNT_COLUMN in names else None
    if "segment" in names:
        segments = table.arrays(["segment"])[0]
        values, counts = _in_segment_order(values, counts, segments, path)
    return values, counts


def _read_text_table(path: str, fmt: str) -> tuple[_Array, _Array | None]:
    columns = _csv_columns(path, "\t" if fmt == "tsv" else ",")
    names = list(columns)
    if VALUE_COLUMN in columns:
        values = parse_numbers(columns[VALUE_COLUMN], path, VALUE_COLUMN)
    else:
        chosen, inner = _value_columns(names, path)
        rows = len(next(iter(columns.values()), []))
        values = _stack([parse_numbers(columns[n], path, n) for n in chosen], inner, rows)
    counts = None
    if _COUNT_COLUMN in columns:
        counts = parse_numbers(columns[_COUNT_COLUMN], path, _COUNT_COLUMN)
    if "segment" in columns:
        segments = parse_numbers(columns["segment"], path, "segment")
        values, counts = _in_segment_order(values, counts, segments, path)
    return values, counts


#: The rows per segment that a table result carries after its values.
_COUNT_COLUMN = "count"


def _in_segment_order(
    values: _Array, counts: _Array | None, segments: _Array, path: str
) -> tuple[_Array, _Array | None]:
    values = _segment_order(values, segments, path)
    return values, None if counts is None else _segment_order(counts, segments, path)


def _csv_columns(path: str, sep: str) -> dict[str, list[str]]:
    """The columns of a delimited text file with a header row, as lists of strings."""
    with open_binary(path) as raw, library_errors(path, "cannot parse the text table"):
        data = raw.read()
        said = not_utf8_message(path, data)
        if said is not None:
            raise ReadError(said)
        # utf-8-sig: a golden saved by a spreadsheet starts with a byte-order mark. newline="":
        # only CSV's own line breaks end a row, not a form feed or U+2028 inside a key field.
        text = io.StringIO(data.decode("utf-8-sig"), newline="")
        # Each row with the line it starts on: a quoted key field may hold a line break.
        rows = list(numbered_records(text, sep))
    if not rows:
        raise ReadError(f"{path}: empty file (expected a header row)")
    header, body = rows[0][1], rows[1:]
    # The columns a golden table's values are read from: as a Parquet or Arrow golden, a name
    # among them used twice cannot say which is meant (a dict would keep the last).
    read = [
        name
        for name in header
        if name in (VALUE_COLUMN, _COUNT_COLUMN, "segment") or _VALUE_N.fullmatch(name)
    ]
    check_unique_names(header, read, path)
    for line, row in body:
        if len(row) != len(header):
            raise ReadError(f"{path}: line {line} has {len(row)} fields, the header {len(header)}")
    return {name: [row[i] for _, row in body] for i, name in enumerate(header)}


def parse_numbers(texts: list[str], path: str, column: str) -> _Array:
    """Parse a column of text as bool (``True``/``False``, as any and all print), or the
    narrowest of int64, uint64, float64, complex128; a ReadError names the first value that
    is not a number (``path`` prefixes it)."""
    words = [text.strip().lower() for text in texts]
    if words and set(words) <= {"true", "false"}:
        return np.array([word == "true" for word in words], dtype=np.bool_)
    strings = np.array(texts, dtype=str)
    for dtype in _TEXT_DTYPES:
        try:
            return strings.astype(dtype)
        except (ValueError, OverflowError):
            continue
    bad = next(i for i, t in enumerate(texts) if not _is_number(t))
    raise ReadError(f"{path}: column '{column}' row {bad}: {shown(texts[bad])} is not a number")


#: Why a text golden's columns are numbers: it was written with --no-header, and its first
#: row was read as the header.
HEADERLESS_GOLDEN = "its first line holds numbers: a golden needs the header line --no-header drops"


def looks_headerless(names: list[str]) -> bool:
    """Whether a table's column names are all numbers: a CSV/TSV without its header line."""
    return bool(names) and all(_is_number(name) for name in names)


def _is_number(text: str) -> bool:
    try:
        complex(text.strip())
    except ValueError:
        return False
    return True


def _value_columns(names: list[str], path: str) -> tuple[list[str], tuple[int, ...]]:
    """The ``value_i_j`` columns in C order and the inner shape they span."""
    indexed = {}
    for name in names:
        match = _VALUE_N.fullmatch(name)
        if match:
            indexed[tuple(int(i) for i in match.group(1).split("_"))] = name
    if not indexed and "segment" in names and set(names) <= {"segment", "count"}:
        return [], (0,)  # a (n, 0) result: the header names no value columns at all
    if not indexed:
        _refuse_agg_golden(names, path)
        hint = f"; {HEADERLESS_GOLDEN}" if looks_headerless(names) else ""
        raise ReadError(
            f"{path}: no 'value' or 'value_*' columns (columns: {', '.join(names)}){hint}"
        )
    ranks = {len(index) for index in indexed}
    inner = tuple(max(index[d] for index in indexed) + 1 for d in range(max(ranks)))
    grid = list(np.ndindex(*inner))
    if len(ranks) != 1 or set(grid) != set(indexed):
        raise ReadError(f"{path}: the value_* columns do not form a full grid of {list(inner)}")
    return [indexed[index] for index in grid], inner


def _refuse_agg_golden(names: list[str], path: str) -> None:
    """A golden without a single-op result whose columns (or .npz arrays, or JSON keys) are
    named as agg names its results (``<op>``, ``<column>_<op>``; ``count`` aside, which a
    single-op golden holds too) is agg's: an error saying so. Layout, not damage: exit 1,
    as agg gives for a single-op command's golden."""
    from segcli.op_names import OP_SUMMARIES

    agg_ops = [
        name
        for name in names
        if name != "count" and any(name == op or name.endswith(f"_{op}") for op in OP_SUMMARIES)
    ]
    if agg_ops:
        raise InvalidInputError(
            f"{path}: no single result but a column per op ({', '.join(agg_ops)}): it is "
            "agg's golden; check it with agg, or write the golden with this command"
        )


def _stack(columns: list[_Array], inner: tuple[int, ...], rows: int) -> _Array:
    if not columns:
        return np.zeros((rows, *inner))
    return np.stack(columns, axis=1).reshape((rows, *inner))


def _segment_order(values: _Array, segments: _Array, path: str) -> _Array:
    """Rows in segment order; the segments must be 0..n-1 in some order."""
    expected = np.arange(len(values))
    if np.array_equal(segments, expected):
        return values
    order = np.argsort(segments, kind="stable")
    if not np.array_equal(segments[order], expected):
        raise _other_segments(segments, expected, path)
    return values[order]


def _other_segments(segments: _Array, expected: _Array, path: str) -> ExpectationError:
    """A golden whose segments are not the result's 0..n-1 differs from it (as agg's and
    --by's goldens do): name the first row whose segment is out of range or repeated."""
    _, first_rows = np.unique(segments, return_index=True)
    repeated = np.ones(len(segments), dtype=bool)
    repeated[first_rows] = False
    stray = ~np.isin(segments, expected)
    bad = stray | repeated
    row = int(np.argmax(bad))
    count = int(bad.sum())
    rows = f"({count} row{'s' if count != 1 else ''} differ{'s' if count == 1 else ''})"
    last = len(expected) - 1
    if stray[row]:
        return ExpectationError(
            f"{path}: row {row} has segment {segments[row]}, not one of the result's segments "
            f"0..{last} {rows}"
        )
    first = int(np.flatnonzero(segments == segments[row])[0])
    return ExpectationError(
        f"{path}: row {row} has segment {segments[row]} again (first at row {first}); the "
        f"result has each of segments 0..{last} once {rows}"
    )


def _read_json(path: str) -> tuple[_Array, _Array | None]:
    with open_binary(path) as f, library_errors(path, "not a segcli result JSON"):
        doc = json.loads(f.read(), parse_float=partial(_finite_float, path))
        try:
            return _json_result(doc, path), _json_counts(doc, path)
        except KeyError as exc:
            if isinstance(doc, dict):
                _refuse_agg_golden([str(key) for key in doc], path)
            raise ReadError(f"{path}: not a segcli result JSON (no {exc} key)") from exc
        except (TypeError, OverflowError) as exc:
            raise ReadError(f"{path}: not a segcli result JSON ({first_line(exc)})") from exc


def _finite_float(path: str, text: str) -> float:
    # Python reads 1e400 as inf; segcli writes infinities as the string "inf", never so.
    value = float(text)
    if math.isinf(value):
        raise ReadError(f"{path}: number {text} is out of the float64 range")
    return value


def _json_result(doc: Any, path: str) -> _Array:
    if not isinstance(doc, dict):
        raise ReadError(
            f"{path}: not a segcli result JSON (expected an object with shape, dtype and values, "
            f"got a {type(doc).__name__})"
        )
    shape = tuple(int(d) for d in doc["shape"])
    dtype = np.dtype(doc["dtype"])
    if dtype.kind not in _NUMERIC_KINDS:
        raise ReadError(f"{path}: dtype {dtype} is not numeric")
    flat = _flatten(doc["values"], len(shape))
    if len(flat) != math.prod(shape):
        raise ReadError(f"{path}: {len(flat)} values do not fill shape {list(shape)}")
    return _json_array(flat, dtype).reshape(shape)


def _json_counts(doc: dict[str, Any], path: str) -> _Array | None:
    counts = doc.get("counts")
    if counts is None:
        return None
    if not isinstance(counts, list):
        raise ReadError(f"{path}: 'counts' is not a list of numbers")
    return parse_numbers([str(count) for count in counts], path, "counts")


def _json_array(flat: list[Any], dtype: np.dtype[Any]) -> _Array:
    if dtype.kind == "c":
        return np.array([complex(float(re), float(im)) for re, im in flat], dtype=dtype)
    if dtype.kind == "f":
        # float() also reads the "nan", "inf" and "-inf" strings non-finite values are written as.
        return np.array([float(v) for v in flat], dtype=dtype)
    return np.array(flat, dtype=dtype)


def _flatten(values: list[Any], depth: int) -> list[Any]:
    for _ in range(depth - 1):
        values = [item for sub in values for item in sub]
    return values


_READERS: dict[str, Callable[[str], tuple[_Array, _Array | None]]] = {
    "npy": _read_npy,
    "npz": _read_npz,
    "parquet": partial(_read_arrow_table, fmt="parquet"),
    "arrow": partial(_read_arrow_table, fmt="arrow"),
    "csv": partial(_read_text_table, fmt="csv"),
    "tsv": partial(_read_text_table, fmt="tsv"),
    "json": _read_json,
}
