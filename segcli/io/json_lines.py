"""JSON lines tables (``.jsonl``, ``.ndjson``: one JSON object a line), read with pyarrow.

Read whole, each column's type is inferred over the whole file (integers that meet a
fraction become doubles); streamed, the types inferred from the first block of text are
kept, as for CSV. A field a line lacks is null; fields not asked for are never converted.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from segcli.io.reread import past_rows_given

if TYPE_CHECKING:
    import pyarrow as pa


#: pyarrow's word for a file of no lines (an empty table here, whose columns are none).
_EMPTY = "Empty JSON file"
#: Bytes read at a time when a failed read looks for a line longer than its block.
_SCAN_BYTES = 1 << 24
#: pyarrow's default block of text (1 MiB); a longer line needs a larger block.
_BLOCK_BYTES = 1 << 20
#: The largest block tried (pyarrow's block size is a 32-bit count): a longer line is an error.
_LARGEST_BLOCK_BYTES = 1 << 30

#: pyarrow's parse errors; their row counts from the start of the block of text.
_PARSE_ERROR = re.compile(r"^JSON parse error: (?P<what>.*?)\.? in row (?P<row>\d+)$")
_CHANGED = re.compile(r"^Column\((?P<path>[^)]*)\) changed from (?P<old>\w+) to (?P<new>\w+)$")
_CHANGED_FIELD = re.compile(r"Column\([^)]*\) changed from \w+ to \w+")
_ROW = re.compile(r" in row \d+$")
_FIELD = re.compile(r"Column\(/?([^)]*)\)")

Opener = Callable[[], "pa.NativeFile"]


def read_table(open_source: Opener, columns: list[str] | None) -> pa.Table:
    """The whole file's ``columns`` (all if None); an empty file is a table of no columns.

    Read as one block of pyarrow's reader where the file fits one (up to 1 GiB): in several,
    pyarrow merges the blocks' inferred types, and where a field's JSON type changes from one
    block to the next that merge fails with an odd message, or crashes the process (about one
    run in four, measured)."""
    with open_source() as source:
        text = source.read(_LARGEST_BLOCK_BYTES)
    if len(text) < _LARGEST_BLOCK_BYTES:
        table = read_block(text, 0)
    else:
        del text  # read again in blocks: not held twice
        table = _read_all(open_source)
        if _lists_lost_items(table if columns is None else table.select(columns)):
            # pyarrow's type inference drops a list's null items met before the list's item
            # type is known (``[null, 2.0]`` on the first line): the list's offsets then run
            # past its values. The types it inferred, given as the schema, read every item.
            table = _read_all(open_source, table.schema)
    if columns is None:
        return table  # the schema: only columns asked for are checked
    table = table.select(columns)
    check_utf8(table, 0)
    return table


def _lists_lost_items(table: pa.Table) -> bool:
    """Whether a nested column's offsets do not fit its values (structure only: text is
    checked where a column is read). By position: a name that is not UTF-8 is named later."""
    import pyarrow as pa
    import pyarrow.types as pt

    for position, type_ in enumerate(table.schema.types):
        if pt.is_nested(type_):
            try:
                table.column(position).validate()
            except pa.ArrowInvalid:
                return True
            except UnicodeDecodeError:
                return False
    return False


def _read_all(
    open_source: Opener,
    schema: pa.Schema | None = None,
    block_size: int = _BLOCK_BYTES,
    offset: int = 0,
) -> pa.Table:
    """The whole file, its types inferred (or ``schema``'s); ``offset``: the rows before it,
    counted in the rows its errors name."""
    import pyarrow as pa
    import pyarrow.json as pjson

    parse = pjson.ParseOptions(explicit_schema=schema)
    while True:
        try:
            with open_source() as source:
                read = pjson.ReadOptions(block_size=block_size)
                return pjson.read_json(source, read_options=read, parse_options=parse)
        except pa.ArrowInvalid as exc:
            if str(exc) == _EMPTY:
                return pa.table({})
            larger = _block_for_long_lines(open_source, block_size, exc)
            if larger is None:
                before = _rows_before(open_source, block_size, str(exc))
                raise _said(exc, before, open_source, offset) from exc
            block_size = larger  # pyarrow needs each line within a block: read again


def read_block(text: bytes, first_row: int) -> pa.Table:
    """The whole lines ``text`` as one block of pyarrow's reader: their types inferred from
    them alone (read whole in several blocks, pyarrow's merge of the blocks' types may crash
    where a field's JSON type changes). ``first_row``: the rows before ``text``, counted in the
    rows its errors name. A block of no lines is a table of no columns."""
    import pyarrow as pa

    def open_source() -> pa.NativeFile:
        return pa.BufferReader(text)

    block_size = min(max(len(text) + 1, _BLOCK_BYTES), _LARGEST_BLOCK_BYTES)
    table = _read_all(open_source, None, block_size, first_row)
    if _lists_lost_items(table):  # as read_table reads them again
        table = _read_all(open_source, table.schema, block_size, first_row)
    if _lists_lost_items(table):
        # Lists of nulls only (list<null>) lose items however they are read: their items are
        # all null, so the lists' offsets alone give them back.
        columns = [
            pa.chunked_array([_null_items_restored(chunk) for chunk in column.chunks], column.type)
            for column in table.columns
        ]
        table = pa.table(columns, names=table.column_names)
    return table


def _null_items_restored(array: pa.Array) -> pa.Array:
    """``array`` (as a read gives it, at offset 0) with the items of every list<null> within
    it as many as its offsets say."""
    import pyarrow as pa
    import pyarrow.types as pt

    type_ = array.type
    if pt.is_list(type_):
        offsets = array.offsets
        if pt.is_null(type_.value_type):
            items: pa.Array = pa.nulls(offsets[-1].as_py())
        else:
            items = _null_items_restored(array.values)
        return pa.ListArray.from_arrays(offsets, items, type_, mask=array.is_null())
    if pt.is_struct(type_):
        fields = [_null_items_restored(array.field(i)) for i in range(type_.num_fields)]
        return pa.StructArray.from_arrays(fields, fields=list(type_), mask=array.is_null())
    return array


def changed_message(field: str, old: str, new: str, row: int | None) -> str:
    """A field whose JSON type changes (``old`` and ``new``: JSON's words, ``number``,
    ``string``, ...), said plainly, at ``row`` (None: unknown)."""
    at = "" if row is None else f" at row {row}"
    said = f"field '{field}' changes from {old} to {new}{at}"
    if old == "null":  # streamed, after a first block of nulls only
        return said
    return f"{said}; a field needs one JSON type in every line (null aside)"


def read_head(text: bytes, columns: list[str] | None) -> pa.Table:
    """``columns`` (all if None) of the whole lines in ``text``, types inferred from them."""
    import pyarrow as pa

    return read_table(lambda: pa.BufferReader(text), columns)


def open_batches(
    open_source: Opener,
    schema: pa.Schema,
    block_size: int | None,
    check: Callable[[pa.RecordBatch], None] | None = None,
) -> pa.RecordBatchReader:
    """A streaming reader of ``schema``'s columns in ``schema``'s types, about ``block_size``
    bytes of text a batch; other fields are skipped unconverted; ``check`` sees each batch."""
    import pyarrow as pa

    return pa.RecordBatchReader.from_batches(
        schema, _batches(open_source, schema, block_size or _BLOCK_BYTES, check)
    )


def _batches(
    open_source: Opener,
    schema: pa.Schema,
    block_size: int,
    check: Callable[[pa.RecordBatch], None] | None,
) -> Iterator[pa.RecordBatch]:
    """Batches of the file; a line longer than a block starts the file again in larger blocks,
    past the rows already given (a line's length is known only once it is met)."""
    import pyarrow.json as pjson

    parse = pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    sizes = [block_size]  # the block of the read under way

    def read() -> Iterator[pa.RecordBatch]:
        with open_source() as source:
            options = pjson.ReadOptions(block_size=sizes[-1])
            yield from pjson.open_json(source, read_options=options, parse_options=parse)

    def retry(exc: pa.ArrowInvalid, given: int) -> None:
        larger = _block_for_long_lines(open_source, sizes[-1], exc)
        if larger is None:
            raise _said(exc, given, open_source) from exc
        sizes.append(larger)

    def checked(batch: pa.RecordBatch, first_row: int) -> None:
        check_utf8(batch, first_row)
        if check is not None:
            check(batch)

    return past_rows_given(read(), read, retry, checked)


def _block_for_long_lines(open_source: Opener, block_size: int, exc: Exception) -> int | None:
    """The larger block that reads the file again, when pyarrow failed on a line longer than
    ``block_size``; None when the text itself is at fault (or no block can hold the line).

    The file is looked at, not pyarrow's message: its threads parse the blocks of a long line
    out of order and say "straddling object", "The document is empty" or "Invalid value",
    depending on where a block starts inside the line (the last one seen in one of four
    runs of the test suite on a loaded machine). Only a failed read looks, and it stops at
    the first such line."""
    if block_size >= _LARGEST_BLOCK_BYTES or _CHANGED_FIELD.search(str(exc)):
        return None  # a field's type changed: the text, whatever the lines' lengths
    longest = _first_line_longer_than(open_source, block_size)
    if longest is None:
        return None
    while block_size <= longest and block_size < _LARGEST_BLOCK_BYTES:
        block_size *= 4
    return block_size


def _first_line_longer_than(open_source: Opener, limit: int) -> int | None:
    """The length of the first line of more than ``limit`` bytes (its newline left out), or
    None."""
    import numpy as np

    current = 0  # bytes of the line read so far
    with open_source() as source:
        while chunk := source.read(_SCAN_BYTES):
            ends = np.flatnonzero(np.frombuffer(chunk, np.uint8) == ord("\n"))
            if not ends.size:
                current += len(chunk)
                continue
            lengths = np.diff(ends, prepend=-1) - 1  # of the lines this chunk ends
            lengths[0] += current
            over = np.flatnonzero(lengths > limit)
            if over.size:
                return int(lengths[over[0]])
            current = len(chunk) - int(ends[-1]) - 1
    return current if current > limit else None


def _said(
    exc: pa.ArrowInvalid,
    first_row: int | None,
    open_source: Opener | None = None,
    offset: int = 0,
) -> pa.ArrowInvalid:
    """pyarrow's parse error at the file's row (``first_row``: the rows before its block of
    text; None: unknown, and the row left out; ``offset``: rows before the text read); a field
    whose JSON type changes, or a line that is not an object, said plainly. A message that
    names no row (a line holding more than one JSON value, as ``{...},``) gets the row of the
    first such line, looked for in the text from ``first_row`` on."""
    import pyarrow as pa

    found = _PARSE_ERROR.match(str(exc))
    if found is None:
        bad = None
        if open_source is not None and first_row is not None and str(exc).startswith("JSON"):
            bad = _first_line_not_one_value(open_source, first_row)
        if bad is None:
            return exc
        bad_row, text = bad
        shown = text if len(text) <= 60 else text[:57] + "..."
        return pa.ArrowInvalid(f"row {offset + bad_row} is not one JSON value: {shown!r}")
    row = None if first_row is None else offset + first_row + int(found["row"])
    at = "" if row is None else f" at row {row}"
    changed = _CHANGED.match(found["what"])
    if changed is None:
        return pa.ArrowInvalid(_FIELD.sub(r"field '\1'", found["what"]) + at)
    if not changed["path"]:
        return pa.ArrowInvalid(f"a line{at} is a JSON {changed['new']}, not an object")
    field = changed["path"].lstrip("/")
    return pa.ArrowInvalid(changed_message(field, changed["old"], changed["new"], row))


def _first_line_not_one_value(open_source: Opener, first_row: int) -> tuple[int, str] | None:
    """The first line from row ``first_row`` on (blank lines aside, as pyarrow skips them)
    that does not parse as one JSON value, and its text; None if none does within
    :data:`_LINES_LOOKED_AT` lines (the error path: the rows before it are only counted)."""
    import json

    with open_source() as source:
        text = io.TextIOWrapper(io.BufferedReader(source), encoding="utf-8", errors="replace")
        row = 0
        for line in text:
            if not line.strip():
                continue
            if row >= first_row:
                try:
                    json.loads(line)
                except ValueError:
                    return row, line.rstrip("\r\n")
                if row - first_row > _LINES_LOOKED_AT:
                    return None
            row += 1
    return None


#: Lines a failed read's row is looked for in, past the rows before its block.
_LINES_LOOKED_AT = 1 << 20


def _rows_before(open_source: Opener, block_size: int, message: str) -> int | None:
    """The rows before the block a whole read failed in (its blocks are parsed out of order):
    a streamed read of the same blocks that fails the same way counts them. None if it does
    not (it keeps the first block's types, and may fail earlier on another error)."""
    import pyarrow as pa
    import pyarrow.json as pjson

    given = 0
    try:
        with open_source() as source:
            read = pjson.ReadOptions(block_size=block_size)
            for batch in pjson.open_json(source, read_options=read):
                given += batch.num_rows
    except pa.ArrowInvalid as exc:
        if _ROW.sub("", str(exc)) == _ROW.sub("", message):
            return given
    return None


def check_utf8(table: pa.Table | pa.RecordBatch, first_row: int) -> None:
    """pyarrow's JSON reader does not check that strings are UTF-8 (JSON text must be): a
    string that is not would reach the output as it is, or fail later on decoding."""
    import pyarrow as pa

    try:
        table.validate(full=True)
    except pa.ArrowInvalid:
        for name in table.column_names:
            column = table.column(name)
            try:
                column.validate(full=True)
            except pa.ArrowInvalid:
                raise pa.ArrowInvalid(
                    f"column '{name}'{_first_invalid(column, first_row)} not UTF-8"
                ) from None
        raise


def _first_invalid(column: pa.ChunkedArray | pa.Array, first_row: int) -> str:
    """Where the first string that is not UTF-8 is: its row and bytes in a string column (a
    Python pass, on the error path only), none for a nested column."""
    import pyarrow as pa
    import pyarrow.types as pt

    if not (pt.is_string(column.type) or pt.is_large_string(column.type)):
        return " holds a string that is"
    for row, value in enumerate(column.cast(pa.large_binary()).to_pylist()):
        try:
            if value is not None:
                value.decode()
        except UnicodeDecodeError:
            return f" row {first_row + row} holds {value!r}, which is"
    return " holds a string that is"
