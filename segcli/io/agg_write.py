"""Writing a ``segcli agg`` result: several named result columns side by side.

Layouts:

- tables (``parquet``, ``arrow``, ``csv``, ``tsv``; text lines on stdout): one row per segment,
  ``segment`` (int64), then each result column, inner dimensions flattened in C order to
  ``<name>_<i>`` (``<name>_<i>_<j>``, ...), then ``count`` unless an op already counts.
  Text has a header line (tab-separated on stdout) unless it is turned off. Parquet and Arrow
  have no complex type: a complex column holds (re, im) pairs (a fixed-size list of 2 of
  its float type) and its field's metadata ``segcli.dtype`` names the complex dtype.
- ``json``: one object, ``{"segment": [...], "<name>": [...], ..., "count": [...]}``, values as
  the single-op JSON writes them (non-finite floats as strings, complex as ``[re, im]``),
  inner dimensions as nested lists.
- ``npz``: one array per result column, named as the columns are, plus ``counts``.
- ``npy``: one result column only (see :func:`check_layout`).

A ``--by`` run's key columns (their own names and Arrow types; as text, the fields of
:mod:`segcli.io.keyed`) take the place of ``segment``; in JSON they are ``"keys": {name:
[...]}``. ``.npy``/``.npz`` hold no keys (``--keys-out`` writes them apart).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from segcli.errors import UsageError
from segcli.io.columns import DTYPE_KEY, arrow_array
from segcli.io.npy import to_native
from segcli.io.text import _printf, header_names, value_strings
from segcli.io.write import json_values, nested_lists

if TYPE_CHECKING:
    import pyarrow as pa

_Array = np.ndarray[Any, Any]
SEPARATORS = {"csv": ",", "tsv": "\t", "text": "\t"}


def check_layout(fmt: str, results: dict[str, _Array]) -> None:
    """Refuse what a format cannot hold, before any input is read."""
    if fmt == "npy" and len(results) > 1:
        raise UsageError(
            f".npy holds one array, and this run gives {len(results)} result columns "
            f"({', '.join(results)}): write .npz (one array per column) or a table "
            "(.parquet, .arrow, .csv, .tsv, .json)"
        )


def flat_columns(
    results: dict[str, _Array], counts: _Array, *, counted: bool = False
) -> dict[str, _Array]:
    """``segment``, the result columns with inner dimensions flattened, then ``count``."""
    columns: dict[str, _Array] = {"segment": np.arange(counts.shape[0], dtype=np.int64)}
    for name, values in results.items():
        if values.ndim == 1:
            columns[name] = values
            continue
        for index in np.ndindex(*values.shape[1:]):
            columns[f"{name}_{'_'.join(map(str, index))}"] = values[(slice(None), *index)]
    if not counted:  # a count op's column is then the only count column
        columns["count"] = np.asarray(counts, dtype=np.int64)
    return columns


def _text_of(values: _Array, float_format: str | None) -> list[str]:
    if float_format is not None and values.dtype.kind == "f":
        return [float_format % v for v in values.tolist()]
    if float_format is not None and values.dtype.kind == "c":  # each part, as single-op text
        complex_texts: list[str] = _printf(values, float_format).tolist()
        return complex_texts
    texts: list[str] = value_strings(values).tolist()
    return texts


def text_lines(
    columns: dict[str, _Array],
    sep: str,
    *,
    header: bool,
    float_format: str | None = None,
    keys: pa.Table | None = None,
) -> Iterator[str]:
    """The lines of a text table, each with its newline; ``keys`` come first when given."""
    names = header_names(list(columns), sep)
    texts = [_text_of(values, float_format) for values in columns.values()]
    if keys is not None:
        from segcli.io.keyed import key_fields

        names = [*header_names(keys.column_names, sep), *names]
        texts = [key_fields(keys, sep), *texts]
    if header:
        yield sep.join(names) + "\n"
    for row in zip(*texts, strict=True):
        yield sep.join(row) + "\n"


def _arrow_table(columns: dict[str, _Array], keys: pa.Table | None = None) -> Any:
    import pyarrow as pa

    arrays = [_arrow_column(values) for values in columns.values()]
    fields = [
        pa.field(name, array.type, metadata=_complex_metadata(values))
        for (name, values), array in zip(columns.items(), arrays, strict=True)
    ]
    if keys is not None:
        # A key column may be named like a result column ("count"): the schema allows it.
        fields, arrays = [*keys.schema, *fields], [*keys.columns, *arrays]
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _arrow_column(values: _Array) -> Any:
    """A result column as Arrow holds it: complex values (Arrow has no complex type) as
    (re, im) pairs of their float type, as the single-op command stores them."""
    import pyarrow as pa

    values = to_native(values)
    if values.dtype.kind != "c":
        return arrow_array(values)
    pairs = np.ascontiguousarray(values).view(values.real.dtype)
    return pa.FixedSizeListArray.from_arrays(arrow_array(pairs), 2)


def _complex_metadata(values: _Array) -> dict[bytes, bytes] | None:
    """A complex column's field metadata: the complex dtype its pairs make."""
    return {DTYPE_KEY: values.dtype.name.encode()} if values.dtype.kind == "c" else None


def render(
    fmt: str,
    results: dict[str, _Array],
    counts: _Array,
    *,
    header: bool = True,
    counted: bool = False,
    float_format: str | None = None,
    to_stream: bool = False,
    keys: pa.Table | None = None,
) -> bytes:
    """The bytes of the output in ``fmt``; ``counted``: an op counts, so no ``count`` column
    is added; ``to_stream``: Arrow as an IPC stream; ``keys``: a ``--by`` run's key table (row
    i for result row i)."""
    out = io.BytesIO()
    if fmt == "npy":
        (only,) = results.values()
        np.save(out, to_native(only))
    elif fmt == "npz":
        arrays = {name: to_native(values) for name, values in results.items()}
        arrays["counts"] = np.asarray(counts, dtype=np.int64)
        np.savez(out, **arrays)  # type: ignore[arg-type]
    elif fmt == "json":
        doc: dict[str, Any] = {"segment": list(range(counts.shape[0]))}
        if keys is not None:
            from segcli.io.keyed import json_keys

            doc = {"keys": json_keys(keys)}
        for name, values in results.items():
            doc[name] = _nested(values)
        if not counted:
            doc["count"] = np.asarray(counts).tolist()
        out.write((json.dumps(doc, allow_nan=False) + "\n").encode())
    elif fmt in ("parquet", "arrow"):
        table = _arrow_table(_result_columns(results, counts, counted, keys), keys)
        _write_arrow_table(table, fmt, out, to_stream)
    else:
        columns = _result_columns(results, counts, counted, keys)
        sep = SEPARATORS[fmt]
        lines = text_lines(columns, sep, header=header, float_format=float_format, keys=keys)
        for line in lines:
            out.write(line.encode())
    return out.getvalue()


def _result_columns(
    results: dict[str, _Array], counts: _Array, counted: bool, keys: pa.Table | None
) -> dict[str, _Array]:
    columns = flat_columns(results, counts, counted=counted)
    if keys is not None:
        del columns["segment"]  # the key columns name the rows
    return columns


def _nested(values: _Array) -> list[Any]:
    # Nested in Python, not through an object array: a complex value's [re, im] pair would
    # be taken for one more axis.
    return nested_lists(json_values(values), values.shape)


def _write_arrow_table(table: Any, fmt: str, out: BinaryIO, to_stream: bool) -> None:
    import pyarrow as pa

    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, out)
        return
    opener = pa.ipc.new_stream if to_stream else pa.ipc.new_file
    with opener(out, table.schema) as writer:
        writer.write_table(table)
