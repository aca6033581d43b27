"""The rows of an Arrow IPC file or stream, and its columns' null counts, from its record
batches' headers alone.

Counted by pyarrow on a memory map, no body is read; but the kernel maps the cached pages around
each header touched (64 KiB of them by default), and they stay resident until the map is
closed: counting a file of small batches would hold most of it, and the peak of a streamed run
would grow with the file. Here each header is read with a read call of its own length, and
nothing else is read, decompressed or mapped.

The layout (the Arrow columnar format's IPC section): a message is a continuation marker
(0xFFFFFFFF; absent before Arrow 0.15), a little-endian int32 length, a flatbuffer ``Message``
of that length, then its body of ``bodyLength`` bytes. A stream is messages up to an end marker
(a length of 0) or the end of the file. A file is ``ARROW1`` and padding, such a stream, then a
flatbuffer ``Footer`` that lists the dictionary and record batches' blocks, its length (int32)
and ``ARROW1``.

A record batch's header holds one ``FieldNode`` (length, null count) per field of the schema,
depth-first: a column's own node, then its children's. A dictionary-encoded field has one node,
its indices'; its dictionary is a record batch of one column in a dictionary batch's header.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

from segcli.io.formats import ARROW_FILE_MAGIC, ARROW_STREAM_MARKER

#: The file's tail: the footer's length, then the magic.
_TAIL = struct.Struct(f"<i{len(ARROW_FILE_MAGIC)}s")
#: A footer's Block: offset, metaDataLength, padding, bodyLength.
_BLOCK = struct.Struct("<qi4xq")
#: A record batch's FieldNode (length, null count) and Buffer (offset, length).
_NODE = _BUFFER = struct.Struct("<qq")
_U8, _U16, _I32, _U32, _I64 = (struct.Struct(f"<{c}") for c in "BHiIq")
#: The MessageHeader union's tags of a schema, a dictionary batch and a record batch.
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
# Field slots: Message (version, header_type, header, bodyLength), Footer (version, schema,
# dictionaries, recordBatches), Schema (endianness, fields), Field (name, nullable, type_type,
# type, dictionary, children), DictionaryEncoding (id), RecordBatch (length, nodes, buffers)
# and DictionaryBatch (id, data).
_HEADER_TYPE, _HEADER, _BODY_LENGTH = 1, 2, 3
_FOOTER_SCHEMA, _DICTIONARIES, _RECORD_BATCHES = 1, 2, 3
_FIELDS = 1
_TYPE_TYPE, _DICTIONARY, _CHILDREN = 2, 4, 5
_ID = 0
_LENGTH, _NODES, _BUFFERS = 0, 1, 2
_DATA = 1
#: The Type union's tags of types whose arrays pyarrow gives a null count of their own, not
#: their node's: the null type (its length), unions and run-end encoded arrays (0).
_NULL_TYPE, _UNION_TYPE, _RUN_END_ENCODED = 1, 14, 22
_OWN_NULLS = (_NULL_TYPE, _UNION_TYPE, _RUN_END_ENCODED)
#: pyarrow's limit on nesting: deeper, a schema is damaged (or no reader would read it).
_MAX_DEPTH = 64
_NO_SCHEMA = "an Arrow IPC stream starts with its schema"


class _Message(NamedTuple):
    """A message's flatbuffer, its header's type and where the header lies, its body's length."""

    buf: bytes
    kind: int
    header: int
    body_length: int


@dataclass(frozen=True)
class _Column:
    """A top-level field: where its node lies among a batch's nodes, its dictionary's id (None
    if not dictionary-encoded) and its type's tag."""

    node: int
    dictionary: int | None
    type_type: int


@dataclass(frozen=True)
class _Schema:
    """A schema's top-level columns, the ids of every dictionary it uses, and how many nodes
    a record batch holds."""

    columns: list[_Column]
    dictionaries: set[int]
    nodes: int


@dataclass(frozen=True)
class IpcCounts:
    """What the headers of an Arrow IPC file or stream tell: its rows, record batches and,
    per top-level column, the null count of its rows in every batch."""

    rows: int
    batches: int
    nulls: tuple[int, ...]
    #: Columns (by position) whose null rows the headers cannot count: a dictionary column
    #: some of whose dictionaries hold nulls (a row pointing to one is null too), or a column
    #: of a type whose null count pyarrow does not take from its header, given another there.
    unsure: frozenset[int]


def ipc_rows(source: BinaryIO) -> int:
    """The rows of the Arrow IPC file or stream that ``source`` (seekable) holds; a ValueError
    if its headers are not those of one."""
    size = source.seek(0, os.SEEK_END)
    if _is_file(source):
        footer = _footer(source, size)
        batches = _blocks(source, size, footer, _RECORD_BATCHES, _RECORD_BATCH)
    else:
        batches = _stream(source, size)
    return sum(_rows(m) for m in batches if m.kind == _RECORD_BATCH)


def ipc_counts(source: BinaryIO) -> IpcCounts:
    """Rows, record batches and null counts of the Arrow IPC file or stream that ``source``
    (seekable) holds, from its headers; a ValueError if they are not those of one, or not
    those a reader would take (a stream's dictionaries after its first record batch)."""
    size = source.seek(0, os.SEEK_END)
    messages: Iterator[_Message]
    if _is_file(source):
        footer = _footer(source, size)
        at = _field(footer.buf, footer.header, _FOOTER_SCHEMA)
        if at is None:
            raise ValueError("an Arrow IPC file's footer without its schema")
        schema = _schema(footer.buf, _table(footer.buf, at))
        messages = itertools.chain(
            _blocks(source, size, footer, _DICTIONARIES, _DICTIONARY_BATCH),
            _blocks(source, size, footer, _RECORD_BATCHES, _RECORD_BATCH),
        )
    else:
        messages = _stream(source, size)
        first = next(messages)
        schema = _schema(first.buf, first.header)
    return _count(schema, messages)


def _count(schema: _Schema, messages: Iterator[_Message]) -> IpcCounts:
    """Sum the record batches' nodes of each column, and note which dictionaries hold nulls."""
    columns, ids = schema.columns, schema.dictionaries
    rows = batches = 0
    nulls = [0] * len(columns)
    lengths = [0] * len(columns)
    seen: set[int] = set()
    null_dictionaries: set[int] = set()
    for message in messages:
        batch = _batch(message)
        if message.kind == _DICTIONARY_BATCH:
            at = _field(message.buf, message.header, _ID)
            id_ = 0 if at is None else _get(_I64, message.buf, at)
            if id_ not in ids:
                raise ValueError(f"a dictionary batch of no field of the schema (id {id_})")
            seen.add(id_)
            if _nodes(message, batch, 1)[0][1]:
                null_dictionaries.add(id_)
            continue
        if message.kind != _RECORD_BATCH:
            raise ValueError("a message that is neither a record nor a dictionary batch")
        if seen != ids:  # a reader refuses a record batch before every dictionary
            raise ValueError("a record batch before its dictionaries")
        batches += 1
        rows += _rows(message)
        found = _nodes(message, batch, schema.nodes)
        for i, column in enumerate(columns):
            length, count = found[column.node]
            lengths[i] += length
            nulls[i] += count
    unsure = set()
    for i, column in enumerate(columns):
        if column.dictionary is None:
            if nulls[i] != _own_nulls(column.type_type, lengths[i], nulls[i]):
                unsure.add(i)
        # A dictionary of a type with a null count of its own might hold nulls its node omits.
        elif column.dictionary in null_dictionaries or column.type_type in _OWN_NULLS:
            unsure.add(i)
    return IpcCounts(rows, batches, tuple(nulls), frozenset(unsure))


def _own_nulls(type_type: int, length: int, nulls: int) -> int:
    """The null count pyarrow gives an array of this type, whatever its node says."""
    if type_type == _NULL_TYPE:
        return length
    return 0 if type_type in _OWN_NULLS else nulls


def _schema(buf: bytes, schema: int) -> _Schema:
    at = _field(buf, schema, _FIELDS)
    fields = [] if at is None else _tables(buf, at)
    columns = []
    ids: set[int] = set()
    node = 0
    for field in fields:
        at = _field(buf, field, _DICTIONARY)
        dictionary = None if at is None else _dictionary_id(buf, _table(buf, at))
        at = _field(buf, field, _TYPE_TYPE)
        columns.append(_Column(node, dictionary, 0 if at is None else _get(_U8, buf, at)))
        node += _field_nodes(buf, field, ids, 0)
    return _Schema(columns, ids, node)


def _field_nodes(buf: bytes, field: int, ids: set[int], depth: int) -> int:
    """How many nodes of a record batch a Field holds (its own and its children's), noting its
    dictionaries' ids in ``ids``. A dictionary-encoded field holds its indices' node alone:
    the children listed are its dictionary's."""
    if depth > _MAX_DEPTH:
        raise ValueError("a schema nested too deep")
    at = _field(buf, field, _CHILDREN)
    children = [] if at is None else _tables(buf, at)
    nodes = 1 + sum(_field_nodes(buf, child, ids, depth + 1) for child in children)
    at = _field(buf, field, _DICTIONARY)
    if at is None:
        return nodes
    ids.add(_dictionary_id(buf, _table(buf, at)))
    return 1


def _dictionary_id(buf: bytes, encoding: int) -> int:
    at = _field(buf, encoding, _ID)
    return 0 if at is None else _get(_I64, buf, at)


def _batch(message: _Message) -> int:
    """Where a record batch's header lies (a dictionary batch's own record batch)."""
    if message.kind != _DICTIONARY_BATCH:
        return message.header
    at = _field(message.buf, message.header, _DATA)
    if at is None:
        raise ValueError("a dictionary batch without its data")
    return _table(message.buf, at)


def _nodes(message: _Message, batch: int, count: int) -> list[tuple[int, int]]:
    """The first ``count`` nodes (length, null count) of a record batch's header, once its
    buffers are found within its body."""
    buf = message.buf
    at = _field(buf, batch, _BUFFERS)
    buffers = [] if at is None else _structs(buf, at, _BUFFER)
    for offset, length in buffers:
        if min(offset, length) < 0 or offset + length > message.body_length:
            raise ValueError("a buffer lies beyond its message's body")
    at = _field(buf, batch, _NODES)
    nodes = [] if at is None else _structs(buf, at, _NODE, count)
    if len(nodes) < count:
        raise ValueError("a record batch with fewer field nodes than its schema has fields")
    if any(min(node) < 0 for node in nodes):
        raise ValueError("a field node of a negative length or null count")
    return [(node[0], node[1]) for node in nodes]


def _is_file(source: BinaryIO) -> bool:
    """Whether ``source`` holds an IPC file (else a stream); read from its start."""
    source.seek(0)
    if source.read(len(ARROW_FILE_MAGIC)) == ARROW_FILE_MAGIC:
        return True
    source.seek(0)
    return False


def _footer(source: BinaryIO, size: int) -> _Message:
    """A file's footer, as a message of no body whose header is the Footer table."""
    if size < len(ARROW_FILE_MAGIC) + _TAIL.size:
        raise ValueError("too short for an Arrow IPC file")
    source.seek(size - _TAIL.size)
    length, magic = _TAIL.unpack(_read(source, _TAIL.size))
    if magic != ARROW_FILE_MAGIC or not 0 < length <= size - _TAIL.size:
        raise ValueError("no Arrow IPC file footer")
    source.seek(size - _TAIL.size - length)
    footer = _read(source, length)
    return _Message(footer, 0, _root(footer), 0)


def _blocks(
    source: BinaryIO, size: int, footer: _Message, slot: int, kind: int
) -> Iterator[_Message]:
    """The messages of the blocks a file's footer lists in ``slot``, each of ``kind``."""
    what = "record batch" if kind == _RECORD_BATCH else "dictionary batch"
    buf = footer.buf
    at = _field(buf, footer.header, slot)
    if at is None:
        return
    blocks = _vector(buf, at) + 4
    for i in range(_vector_length(buf, at)):
        offset, header_length, body_length = _unpack(_BLOCK, buf, blocks + i * _BLOCK.size)
        if min(offset, header_length, body_length) < 0 or offset + header_length > size:
            raise ValueError(f"{what} {i} lies beyond the end of the file")
        source.seek(offset)
        head = _read(source, header_length)
        start = 8 if head.startswith(ARROW_STREAM_MARKER) else 4
        message = _message(head[start : start + _get(_I32, head, start - 4)])
        if message.kind != kind:
            raise ValueError(f"{what} {i} of the footer is another message")
        if message.body_length > size - offset - header_length:
            raise ValueError(f"{what} {i} lies beyond the end of the file")
        yield message


def _stream(source: BinaryIO, size: int) -> Iterator[_Message]:
    """A stream's messages, from its schema on; their bodies are skipped, not read."""
    messages = 0
    while len(prefix := source.read(4)) == 4:
        if prefix == ARROW_STREAM_MARKER and len(prefix := source.read(4)) < 4:
            break
        length = _get(_I32, prefix, 0)
        if length == 0:  # the end marker
            break
        message = _message(_read(source, length))
        if messages == 0 and message.kind != _SCHEMA:
            raise ValueError(_NO_SCHEMA)
        messages += 1
        if not 0 <= message.body_length <= size - source.tell():
            raise ValueError("a message's body lies beyond the end of the file")
        source.seek(message.body_length, os.SEEK_CUR)
        yield message
    if messages == 0:
        raise ValueError(_NO_SCHEMA)


def _message(buf: bytes) -> _Message:
    """A Message flatbuffer's header type, header and body length."""
    message = _root(buf)
    at = _field(buf, message, _HEADER_TYPE)
    kind = 0 if at is None else _get(_U8, buf, at)
    at = _field(buf, message, _BODY_LENGTH)
    body_length = 0 if at is None else _get(_I64, buf, at)
    at = _field(buf, message, _HEADER)
    if at is None:
        if kind in (_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH):
            raise ValueError("a message without its header")
        return _Message(buf, kind, 0, body_length)
    return _Message(buf, kind, _table(buf, at), body_length)


def _rows(message: _Message) -> int:
    """A record batch's rows."""
    at = _field(message.buf, message.header, _LENGTH)
    return 0 if at is None else _get(_I64, message.buf, at)


def _root(buf: bytes) -> int:
    """Where a flatbuffer's root table lies."""
    return _get(_U32, buf, 0)


def _table(buf: bytes, at: int) -> int:
    """Where the table lies that the offset at ``at`` points to."""
    return at + _get(_U32, buf, at)


def _vector(buf: bytes, at: int) -> int:
    """Where the vector lies that the offset at ``at`` points to (its length, then items)."""
    return at + _get(_U32, buf, at)


def _vector_length(buf: bytes, at: int) -> int:
    return _get(_U32, buf, _vector(buf, at))


def _structs(
    buf: bytes, at: int, layout: struct.Struct, most: int | None = None
) -> list[tuple[int, ...]]:
    """The structs (the first ``most`` of them) of the vector the offset at ``at`` points to."""
    vector = _vector(buf, at)
    count = _get(_U32, buf, vector)
    count = count if most is None else min(count, most)
    return [_unpack(layout, buf, vector + 4 + i * layout.size) for i in range(count)]


def _tables(buf: bytes, at: int) -> list[int]:
    """Where the tables lie of the vector of tables the offset at ``at`` points to."""
    vector = _vector(buf, at)
    return [_table(buf, vector + 4 + 4 * i) for i in range(_get(_U32, buf, vector))]


def _field(buf: bytes, table: int, slot: int) -> int | None:
    """Where field ``slot`` of the flatbuffer table at ``table`` lies; None when it is absent
    (it then has its default)."""
    vtable = table - _get(_I32, buf, table)
    entry = 4 + 2 * slot
    if entry + 2 > _get(_U16, buf, vtable):  # the vtable's own size: later fields are absent
        return None
    offset = _get(_U16, buf, vtable + entry)
    return table + offset if offset else None


def _get(layout: struct.Struct, buf: bytes, at: int) -> int:
    return int(_unpack(layout, buf, at)[0])


def _unpack(layout: struct.Struct, buf: bytes, at: int) -> tuple[int, ...]:
    # unpack_from reads a negative offset from the end: a corrupt offset must fail instead.
    if not 0 <= at <= len(buf) - layout.size:
        raise ValueError("a header's offset lies outside it")
    return layout.unpack_from(buf, at)


def _read(source: BinaryIO, size: int) -> bytes:
    data = source.read(size) if size > 0 else b""
    if len(data) != size:
        raise ValueError("the file ends inside a header")
    return data
