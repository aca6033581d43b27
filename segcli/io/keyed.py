"""Results of a ``--by`` run: the key columns first, then the values, then ``count``.

- Parquet / Arrow: the key columns with their own names and Arrow types, then ``value`` (the
  layout of :func:`segcli.io.write.result_table` for inner dims and complex values), then
  ``count``; no ``segment`` column.
- CSV / TSV and the text lines on stdout: a header of the key names (quoted as fields are),
  the value headers (and ``count`` in files), then one row per group. A key field is the
  value as Arrow casts it to text (``2024-05-01``, ``2024-05-01 06:00:00``, ``12.50``,
  ``true``), binary keys of every kind (variable, fixed size, view) as lowercase hex; a null
  key is an empty field and an empty string is ``""``, as pyarrow's CSV writer and reader tell
  them apart; a field holding the separator, a quote or a line break, or a string that would
  read as null (``NA``, ``null``), is quoted CSV-style (quotes doubled).
- JSON: the usual document plus ``"keys": {name: [values...]}``, column by column; strings,
  integers, floats and booleans as JSON values, other types as the text above, null as null.
  An infinite float key is the string ``"inf"`` or ``"-inf"``, as infinite values are (JSON
  has no number for it).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np

from segcli.io.formats import elided, shown
from segcli.io.text import header_names, text_blocks, value_headers

if TYPE_CHECKING:
    import pyarrow as pa

    from segcli.io.commit import OutputSet

_Array = np.ndarray[Any, Any]


def keyed_table(result: _Array, counts: _Array | None, keys: pa.Table) -> pa.Table:
    """The key columns, then the result table's ``value`` (and ``count``) columns."""
    import pyarrow as pa

    from segcli.io.write import result_table

    values = result_table(result, counts)
    kept = [name for name in values.column_names if name != "segment"]
    # Table.from_arrays allows a key column named like "value" or "count": a pa.table dict not.
    table = pa.Table.from_arrays(
        [*keys.columns, *(values.column(name) for name in kept)],
        names=[*keys.column_names, *kept],
    )
    return table.replace_schema_metadata(values.schema.metadata)


def key_strings(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A key column's values as text (null stays null)."""
    import pyarrow as pa

    from segcli.io import arrow_kernels as kernels

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if isinstance(column, pa.ExtensionArray):  # a UUID, say: written as its stored value
        column = column.storage
    if pa.types.is_dictionary(column.type):
        column = kernels.dictionary_decode(column)
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return _hex_text(column)
    if pa.types.is_fixed_size_binary(column.type) or pa.types.is_binary_view(column.type):
        # Bytes as text only where they are UTF-8: hex, as a binary key, whatever they hold.
        return _hex_text(kernels.cast(column, pa.binary()))
    return kernels.cast(column, pa.string())


def key_value_text(column: pa.ChunkedArray | pa.Array, row: int) -> str:
    """One key value as an error message names it: strings, numbers and booleans as Python
    writes them (strings quoted), a missing key as ``null`` (the word Arrow and the JSON
    output use, not Python's ``None``), other types as the text output writes them
    (``2024-05-01``, ``12.50``), not as Python objects (``datetime.date(2024, 5, 1)``)."""
    value = column[row].as_py()
    if value is None:
        return "null"
    if isinstance(value, str | bytes):
        return shown(value)
    if isinstance(value, bool | int | float):
        return repr(value)
    return elided(str(key_strings(column.slice(row, 1))[0].as_py()))


#: The digits of lowercase hex, as bytes to gather from.
_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)


def _hex_text(column: pa.Array) -> pa.Array:
    """Binary values as lowercase hex text (null stays null), built from the buffers: two
    digits a byte, each value's offsets doubled (``pa.array`` of Python strings would import
    pandas, 0.4 s of CPU)."""
    import pyarrow as pa

    from segcli.io import arrow_kernels as kernels

    large = pa.types.is_large_binary(column.type)
    width = np.dtype(np.int64 if large else np.int32)
    text_type = pa.large_string() if large else pa.string()
    validity, offsets_buffer, data_buffer = column.buffers()
    if offsets_buffer is None:  # no values to read (an empty array)
        return kernels.cast(column, pa.string())
    offsets = np.frombuffer(offsets_buffer, width, count=column.offset + len(column) + 1)
    start, stop = int(offsets[column.offset]), int(offsets[-1])
    data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else _HEX_DIGITS[:0]
    raw = data[start:stop]
    digits = np.empty((raw.size, 2), np.uint8)
    digits[:, 0] = _HEX_DIGITS[raw >> 4]
    digits[:, 1] = _HEX_DIGITS[raw & 15]
    # Offsets before the array's own are kept (at 0): the validity bitmap shares the offset.
    doubled = np.zeros(offsets.size, width)
    doubled[column.offset :] = (offsets[column.offset :] - start) * 2
    buffers = [validity, pa.py_buffer(doubled), pa.py_buffer(digits)]
    text = pa.Array.from_buffers(
        text_type, len(column), buffers, column.null_count, offset=column.offset
    )
    # Every key's text type is string.
    return text if text_type == pa.string() else kernels.cast(text, pa.string())


def key_fields(keys: pa.Table, sep: str) -> list[str]:
    """Each row's key fields joined by ``sep``, quoted where needed (see the module doc)."""
    from segcli.io import arrow_kernels as kernels

    if keys.num_columns == 0:
        return [""] * keys.num_rows
    pattern = "[" + "".join("\\" + c if c in "\\]^-[" else c for c in sep + '"\r\n') + "]"
    empty, quote, separator = (_text_scalar(text) for text in ("", '"', sep))
    fields = []
    for column in keys.columns:
        text = key_strings(column)
        needs = kernels.or_(
            kernels.match_substring_regex(text, pattern), kernels.equal(text, empty)
        )
        # Unquoted, a key "NA" or "null" would read back as a null key.
        needs = kernels.or_(needs, kernels.match_substring_regex(text, _null_spelling()))
        doubled = kernels.replace_substring(text, '"', '""')
        quoted = kernels.binary_join_element_wise(quote, doubled, quote, empty)
        fields.append(kernels.fill_null(kernels.if_else(needs, quoted, text), empty))
    joined: pa.Array = kernels.binary_join_element_wise(*fields, separator)
    return [str(v) for v in joined.to_pylist()]


@cache
def _null_spelling() -> str:
    """A regex matching exactly the texts that segcli's CSV reader reads as null unquoted."""
    from segcli.io.tables import _CSV_NULLS

    escaped = ("".join("\\" + c if c in ".\\^$|?*+()[]{}" else c for c in t) for t in _CSV_NULLS)
    return "^(?:" + "|".join(text for text in escaped if text) + ")$"


def _text_scalar(text: str) -> pa.Scalar:
    """``text`` as an Arrow string scalar, built from buffers: pyarrow turns a Python string
    argument of a compute function into a scalar through pandas (0.4 s of CPU to import)."""
    import pyarrow as pa

    data = text.encode()
    offsets = pa.py_buffer(np.array([0, len(data)], np.int32))
    return pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)])[0]


def keyed_header(keys: pa.Table, result: _Array, sep: str, *, count: bool) -> str:
    names = [*header_names(keys.column_names, sep), *value_headers(result.shape[1:])]
    return sep.join([*names, "count"] if count else names) + "\n"


def keyed_text_blocks(
    result: _Array,
    keys: pa.Table,
    sep: str,
    counts: _Array | None = None,
    *,
    float_format: str | None = None,
) -> Iterator[bytes]:
    """Lines ``key{sep}...{sep}value...[{sep}count]\\n``, in blocks, without the header."""
    fields = key_fields(keys, sep)
    row = 0
    for block in text_blocks(result, sep, counts, float_format=float_format):
        lines = []
        # The numeric lines hold no quotes or line breaks: splitting them is safe.
        for line in block.decode().splitlines():
            lines.append(fields[row] + sep + line.split(sep, 1)[1] + "\n")
            row += 1
        yield "".join(lines).encode()


def json_keys(keys: pa.Table) -> dict[str, list[Any]]:
    """The key columns for the JSON output (see the module doc)."""
    import pyarrow as pa

    out: dict[str, list[Any]] = {}
    for name, column in zip(keys.column_names, keys.columns, strict=True):
        type_ = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        native = (
            pa.types.is_integer(type_)
            or pa.types.is_floating(type_)
            or pa.types.is_boolean(type_)
            or pa.types.is_string(type_)
            or pa.types.is_large_string(type_)
        )
        values = column.to_pylist() if native else key_strings(column).to_pylist()
        if pa.types.is_floating(type_):
            values = [_finite_or_text(value) for value in values]
        out[name] = values
    return out


def _finite_or_text(value: float | None) -> float | str | None:
    """A float key for JSON: ``"inf"``/``"-inf"`` where it is infinite (a NaN key is null)."""
    if value is None or math.isfinite(value):
        return value
    return "inf" if value > 0 else "-inf"


#: A null key alone on a line of a one-column key file (see :func:`stage_keys`).
_ONE_COLUMN_NULL = "NA"

#: Formats ``--keys-out`` writes: tables that keep the key types, or CSV/TSV text.
KEYS_OUT_FORMATS = ("parquet", "arrow", "csv", "tsv")


def keys_out_format(path: str) -> str:
    """The format of a ``--keys-out`` path, from its suffix; else a UsageError."""
    from segcli.errors import UsageError
    from segcli.io.commit import refuse_unfit_name
    from segcli.io.formats import OUTPUT_SUFFIXES, suffix_format

    refuse_unfit_name(path, "--keys-out")  # '' is no file, whatever its suffix would say
    fmt = suffix_format(path, OUTPUT_SUFFIXES)
    if fmt not in KEYS_OUT_FORMATS:
        raise UsageError(
            f"--keys-out {path}: need a .parquet, .arrow, .csv or .tsv file name for the key table"
        )
    return fmt


def keys_go_first(output: str | None, keys_out: str | None, outputs: OutputSet) -> bool:
    """Whether the key table at ``keys_out`` is staged before the result goes to ``output``:
    a result sent to stdout (``-``), a FIFO or a device cannot be taken back, so a key table
    bound for a file gets its bytes first, and failing to write it (a full disk) leaves the
    result unsent rather than sent without its keys."""
    if keys_out is None or output is None or outputs.is_direct(keys_out):
        return False
    return output == "-" or outputs.is_direct(output)


def stage_keys(keys: pa.Table, path: str, outputs: OutputSet) -> None:
    """Stage the key table at ``path`` (reserved in ``outputs``), committed with the run."""
    from segcli.io.write import _SEPS, _Sequential, _write_table

    fmt = keys_out_format(path)
    direct = outputs.is_direct(path)
    with outputs.stage(path) as staged:
        # A FIFO or device takes the bytes as -o's writer gives them: an Arrow file's, not a
        # stream's, and in chunked write() calls, so that a Ctrl-C reaches a write blocked on a
        # stalled reader (pyarrow would answer the failed write by blocking on its footer).
        out = cast(BinaryIO, _Sequential(staged)) if direct else staged
        if fmt in _SEPS:
            sep = _SEPS[fmt]
            out.write((sep.join(header_names(keys.column_names, sep)) + "\n").encode())
            lines = key_fields(keys, sep)
            if keys.num_columns == 1:
                # A null key's empty field would be an empty line, which CSV readers skip:
                # row i would no longer be result row i. NA reads as null (an "NA" string key
                # is quoted).
                lines = [line or _ONE_COLUMN_NULL for line in lines]
            out.write("".join(line + "\n" for line in lines).encode())
        else:
            _write_table(keys, fmt, out, stream=False)
