"""JSON lines tables (``.jsonl``, ``.ndjson``: one JSON object a line), read with pyarrow.

Read whole, each column's type is inferred over the whole file (integers that meet a
fraction become doubles); streamed, the types inferred from the first block of text are
kept, as for CSV. A field a line lacks is null; fields not asked for are never converted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.json as pjson


#: pyarrow's word for a file of no lines (an empty table here, whose columns are none).
_EMPTY = "Empty JSON file"


def read_table(source: pa.NativeFile, columns: list[str] | None) -> pa.Table:
    """The whole file's ``columns`` (all if None); an empty file is a table of no columns."""
    import pyarrow as pa
    import pyarrow.json as pjson

    try:
        table = pjson.read_json(source)
    except pa.ArrowInvalid as exc:
        if str(exc) != _EMPTY:
            raise
        table = pa.table({})
    return table if columns is None else table.select(columns)


def read_head(text: bytes, columns: list[str] | None) -> pa.Table:
    """``columns`` (all if None) of the whole lines in ``text``, types inferred from them."""
    import pyarrow as pa

    return read_table(pa.BufferReader(text), columns)


def open_batches(
    source: pa.NativeFile, schema: pa.Schema, block_size: int | None
) -> pjson.JSONStreamingReader:
    """A streaming reader of ``schema``'s columns in ``schema``'s types, about ``block_size``
    bytes of text a batch; other fields are skipped unconverted."""
    import pyarrow.json as pjson

    read = pjson.ReadOptions() if block_size is None else pjson.ReadOptions(block_size=block_size)
    parse = pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    return pjson.open_json(source, read_options=read, parse_options=parse)
