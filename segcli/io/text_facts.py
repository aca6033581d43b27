"""What ``segcli info`` says of a CSV/TSV or JSON-lines table: its rows, and each column's type
and null count as a whole read of the file gives them (types inferred over every row), read a
block of text at a time so that memory does not grow with the file."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from segcli.io import json_lines
from segcli.io.formats import read_up_to
from segcli.io.tables import CSV_HEAD_BYTES, TableFile

if TYPE_CHECKING:
    import pyarrow as pa

#: pyarrow's words for a CSV value its column's type cannot hold.
_NOT_CONVERTED = re.compile(
    r"^In CSV column #(?P<column>\d+): (?:Row #\d+: )?CSV conversion error to "
)
#: Bytes of CSV text a block (pyarrow's streaming reader holds several blocks ahead: with its
#: default of 1 MiB, the peak grew by 40 MiB from a 10 MB file to a 40 MB one).
_CSV_BLOCK_BYTES = 1 << 18
#: Bytes of JSON lines read as one block.
_JSON_BLOCK_BYTES = 1 << 18


class _Reads(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class TextFacts:
    rows: int
    schema: pa.Schema
    nulls: list[int]


def text_facts(table: TableFile) -> TextFacts:
    """Rows, schema and null counts of a CSV/TSV or JSON-lines table, read in blocks."""
    names = table.schema().names  # its checks first: names not UTF-8, a compression not named
    with table.errors():
        if table.fmt == "jsonl":
            with table.text_source() as source:
                return _jsonl_facts(names, source)
        return _csv_facts(table)


def jsonl_stream_facts(label: str, stream: _Reads) -> TextFacts:
    """:func:`text_facts` of JSON lines read once from ``stream`` (stdin, a pipe): only the
    first megabyte of lines, whose fields are the columns, is kept."""
    first = read_up_to(stream, CSV_HEAD_BYTES)
    if len(first) == CSV_HEAD_BYTES and b"\n" not in first:
        # As TableFile reads a head whose first line is longer: up to a block holding its end.
        pieces = [first]
        while piece := read_up_to(stream, CSV_HEAD_BYTES):
            pieces.append(piece)
            if b"\n" in piece:
                break
        first = b"".join(pieces)
    table = TableFile(label, "jsonl", first)
    names = table.schema().names
    with table.errors():
        return _jsonl_facts(names, stream, first)


def _csv_kinds() -> list[pa.DataType]:
    """The types pyarrow's CSV reader infers, in the order it tries them: a column gets the
    first that converts every value (a timestamp with a zone offset only converts to UTC)."""
    import pyarrow as pa

    return [
        pa.null(),
        pa.int64(),
        pa.bool_(),
        pa.date32(),
        pa.time32("s"),
        pa.timestamp("s"),
        pa.timestamp("ns"),
        pa.timestamp("s", "UTC"),
        pa.timestamp("ns", "UTC"),
        pa.float64(),
        pa.string(),
        pa.binary(),
    ]


def _csv_facts(table: TableFile) -> TextFacts:
    """pyarrow's streaming reader infers each column's type from the first block alone, and a
    later value that type cannot hold fails the read, where a whole read moves that column on
    to the next type of :func:`_csv_kinds`. Such a file is read again, every column as text,
    and each block's values give their column the type a whole read would."""
    import pyarrow as pa

    reader = table.text_batches(None, _CSV_BLOCK_BYTES, as_is=True)
    schema = reader.schema
    rows, nulls = 0, [0] * len(schema)
    try:
        for batch in reader:
            rows += batch.num_rows
            for i, column in enumerate(batch.columns):
                nulls[i] += column.null_count
    except pa.ArrowInvalid as exc:
        if _NOT_CONVERTED.match(str(exc)) is None:
            raise
        return _csv_facts_from_text(table, schema)
    return TextFacts(rows, schema, nulls)


def _csv_facts_from_text(table: TableFile, first: pa.Schema) -> TextFacts:
    """:func:`_csv_facts` of a file whose columns take other types past its first block
    (``first``: their types there, which a whole read can only loosen): every column is read
    as text (as bytes where it is not UTF-8: types are given by name, so a name the header
    gives twice is read as bytes in both columns), in one read, and gets the first type that
    holds all of its values. A value that is null as text is null in any type (the same
    spellings, unquoted)."""
    import pyarrow as pa

    kinds = _csv_kinds()
    texts = dict.fromkeys(first.names, pa.string())
    while True:
        # Each column's types that hold every value read so far. Not only the first of them:
        # a type further on need not hold the values the first holds (a time of day is no
        # number), and a whole read gives the first type that holds them all.
        holding = [set(range(kinds.index(type_), len(kinds))) for type_ in first.types]
        rows, nulls = 0, [0] * len(first)
        try:
            for batch in table.text_batches(None, _CSV_BLOCK_BYTES, types=texts, as_is=True):
                rows += batch.num_rows
                for i, column in enumerate(batch.columns):
                    nulls[i] += column.null_count
                _drop_kinds_failing(table, batch, holding)
        except pa.ArrowInvalid as exc:
            # Text that is not UTF-8 in a column: read again, that column as bytes (binary
            # its type, unless every value is UTF-8 after all, as where a column's name is
            # another's too).
            not_text = _NOT_CONVERTED.match(str(exc))
            if not_text is None or texts[first.names[int(not_text["column"])]] != pa.string():
                raise
            texts[first.names[int(not_text["column"])]] = pa.binary()
            continue
        types = [kinds[min(held)] for held in holding]
        return TextFacts(rows, pa.schema(list(zip(first.names, types, strict=True))), nulls)


def _drop_kinds_failing(table: TableFile, batch: pa.RecordBatch, holding: list[set[int]]) -> None:
    """Takes out of each column's ``holding`` (positions in :func:`_csv_kinds`) the types
    that do not convert every value of the column's text in ``batch`` as the CSV reader
    converts them. The text is written again as CSV, a value quoted (never null) or a null
    left empty (null in every type), and read with a type for each column; each read that
    fails names the column and type that failed. Text holds any value, bytes any bytes."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    kinds = _csv_kinds()
    loose = {kinds.index(pa.string()), kinds.index(pa.binary())}
    texts = list(batch.columns)
    for i, column in enumerate(batch.columns):
        if pa.types.is_binary(column.type):
            try:
                texts[i] = column.cast(pa.string())
            except pa.ArrowInvalid:  # not UTF-8
                holding[i] &= {kinds.index(pa.binary())}
    # The types each column still has to be tried in, in order.
    untried = {i: sorted(left - loose) for i, left in enumerate(holding) if left - loose}
    if not untried:
        return
    columns = list(untried)  # text (UTF-8) all: a column of bytes has no type to try
    names = [str(i) for i in columns]
    sink = pa.BufferOutputStream()
    written = pcsv.WriteOptions(include_header=False, quoting_style="all_valid")
    pcsv.write_csv(pa.table([texts[i] for i in columns], names=names), sink, written)
    text = sink.getvalue()
    read = pcsv.ReadOptions(column_names=names, block_size=len(text) + 1, use_threads=False)
    parse = pcsv.ParseOptions(newlines_in_values=True)
    while untried:
        types = {str(i): kinds[tried[0]] for i, tried in untried.items()}
        convert = table.convert_options(list(types), types)
        try:
            pcsv.read_csv(pa.BufferReader(text), read, parse, convert)
        except pa.ArrowInvalid as exc:
            failed = _NOT_CONVERTED.match(str(exc))
            if failed is None:
                raise
            i = columns[int(failed["column"])]
            holding[i].discard(untried[i].pop(0))
        else:
            for tried in untried.values():
                tried.pop(0)
        untried = {i: tried for i, tried in untried.items() if tried}


def _jsonl_facts(names: list[str], source: _Reads, first: bytes = b"") -> TextFacts:
    """Each block of lines is read alone, its types inferred, and merged into the file's as a
    whole read merges them: a field of nulls takes the other block's type, integers meeting
    a fraction become doubles, timestamps meeting other text become strings, lists merge
    their items and objects their fields. Another change of a field's JSON type is an error
    naming its first row, as one within a block is. The columns are ``names``, those of the
    file's first megabyte (:meth:`TableFile.schema`), as a whole read of them shows. The text
    is ``first`` (read already), then ``source``."""
    import pyarrow as pa

    merged: dict[str, pa.DataType] = {}
    nulls = dict.fromkeys(names, 0)
    not_utf8: dict[str, pa.ArrowInvalid] = {}
    rows = 0
    for text in _line_blocks(source, first):
        block = json_lines.read_block(text, rows)
        block_rows = np.arange(rows, rows + block.num_rows)
        for name, column in zip(block.column_names, block.columns, strict=True):
            values = column.combine_chunks()
            merged[name] = _merged_type(merged.get(name), values, [name], block_rows)
        present = set(block.column_names)
        for name in names:
            if name not in present:
                nulls[name] += block.num_rows
                continue
            nulls[name] += block.column(name).null_count
            if name not in not_utf8:
                try:
                    json_lines.check_utf8(block.select([name]), rows)
                except pa.ArrowInvalid as exc:
                    not_utf8[name] = exc
        rows += block.num_rows
    # A whole read names the first column holding text that is not UTF-8, wherever its row.
    for name in names:
        if name in not_utf8:
            raise not_utf8[name]
    schema = pa.schema([(name, merged.get(name, pa.null())) for name in names])
    return TextFacts(rows, schema, [nulls[name] for name in names])


def _line_blocks(source: _Reads, first: bytes) -> Iterator[bytes]:
    """The text ``first``, then ``source``'s, in blocks of whole lines, about
    :data:`_JSON_BLOCK_BYTES` each (a longer line whole); the last may lack its line break."""
    pending = [first]
    while piece := source.read(_JSON_BLOCK_BYTES):
        end = piece.rfind(b"\n")
        if end < 0:
            pending.append(piece)
            continue
        yield b"".join([*pending, piece[: end + 1]])
        pending = [piece[end + 1 :]]
    rest = b"".join(pending)
    if rest.strip():
        yield rest


def _merged_type(
    before: pa.DataType | None, values: pa.Array, path: list[str], rows: np.ndarray[Any, Any]
) -> pa.DataType:
    """The type of a field read so far as ``before`` (None: not met yet) that ``values`` (its
    values in a block, ``rows``: the file's row of each) continue; an ArrowInvalid naming the
    field and the first row where its JSON type changes."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.types as pt

    after = values.type
    if before is None or pt.is_null(before):
        return after
    if before == after or pt.is_null(after):
        return before
    pair = {before, after}
    if pair == {pa.int64(), pa.float64()}:
        return pa.float64()
    if pair == {pa.timestamp("s"), pa.string()}:
        return pa.string()
    if pt.is_list(before) and pt.is_list(after):
        items_rows = rows[pc.list_parent_indices(values).to_numpy()]
        item = _merged_type(before.value_type, values.flatten(), path, items_rows)
        return pa.list_(pa.field(before.value_field.name, item))
    if pt.is_struct(before) and pt.is_struct(after):
        fields = {field.name: field.type for field in before}
        for i, field in enumerate(after):
            child = values.field(i)
            fields[field.name] = _merged_type(
                fields.get(field.name), child, [*path, field.name], rows
            )
        return pa.struct(list(fields.items()))
    present = np.flatnonzero(values.is_valid().to_numpy(zero_copy_only=False))
    row = int(rows[present[0]]) if present.size else None
    message = json_lines.changed_message("/".join(path), _kind(before), _kind(after), row)
    raise pa.ArrowInvalid(message)


def _kind(type_: pa.DataType) -> str:
    """JSON's word for the values a type is inferred from, as pyarrow's messages say it."""
    import pyarrow.types as pt

    if pt.is_boolean(type_):
        return "boolean"
    if pt.is_integer(type_) or pt.is_floating(type_):
        return "number"
    if pt.is_string(type_) or pt.is_timestamp(type_):
        return "string"
    if pt.is_list(type_):
        return "array"
    if pt.is_struct(type_):
        return "object"
    return str(type_)
