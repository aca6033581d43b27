"""The rows of an Arrow IPC file or stream, counted from its record batches' headers alone.

Counted by pyarrow on a memory map, no body is read; but the kernel maps the cached pages around
each header touched (64 KiB of them by default), and they stay resident until the map is
closed: counting a file of small batches would hold most of it, and the peak of a streamed run
would grow with the file. Here each header is read with a read call of its own length, and
nothing else is read, decompressed or mapped.

The layout (the Arrow columnar format's IPC section): a message is a continuation marker
(0xFFFFFFFF; absent before Arrow 0.15), a little-endian int32 length, a flatbuffer ``Message``
of that length, then its body of ``bodyLength`` bytes. A stream is messages up to an end marker
(a length of 0) or the end of the file. A file is ``ARROW1`` and padding, such a stream, then a
flatbuffer ``Footer`` that lists the record batches' blocks, its length (int32) and ``ARROW1``.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

from segcli.io.formats import ARROW_FILE_MAGIC, ARROW_STREAM_MARKER

#: The file's tail: the footer's length, then the magic.
_TAIL = struct.Struct(f"<i{len(ARROW_FILE_MAGIC)}s")
#: A footer's Block: offset, metaDataLength, padding, bodyLength.
_BLOCK = struct.Struct("<qi4xq")
_U8, _U16, _I32, _U32, _I64 = (struct.Struct(f"<{c}") for c in "BHiIq")
#: The MessageHeader union's tags of a schema and a record batch (2 is a dictionary batch).
_SCHEMA, _RECORD_BATCH = 1, 3
# Field slots: Message (version, header_type, header, bodyLength), Footer (version, schema,
# dictionaries, recordBatches) and RecordBatch (length).
_HEADER_TYPE, _HEADER, _BODY_LENGTH = 1, 2, 3
_RECORD_BATCHES = 3
_LENGTH = 0
_NO_SCHEMA = "an Arrow IPC stream starts with its schema"


def ipc_rows(source: BinaryIO) -> int:
    """The rows of the Arrow IPC file or stream that ``source`` (seekable) holds; a ValueError
    if its headers are not those of one."""
    size = source.seek(0, os.SEEK_END)
    source.seek(0)
    if source.read(len(ARROW_FILE_MAGIC)) == ARROW_FILE_MAGIC:
        return _file_rows(source, size)
    source.seek(0)
    return _stream_rows(source, size)


def _file_rows(source: BinaryIO, size: int) -> int:
    if size < len(ARROW_FILE_MAGIC) + _TAIL.size:
        raise ValueError("too short for an Arrow IPC file")
    source.seek(size - _TAIL.size)
    length, magic = _TAIL.unpack(_read(source, _TAIL.size))
    if magic != ARROW_FILE_MAGIC or not 0 < length <= size - _TAIL.size:
        raise ValueError("no Arrow IPC file footer")
    source.seek(size - _TAIL.size - length)
    footer = _read(source, length)
    blocks = _field(footer, _root(footer), _RECORD_BATCHES)
    if blocks is None:
        return 0
    vector = blocks + _get(_U32, footer, blocks)
    rows = 0
    for i in range(_get(_U32, footer, vector)):
        offset, header_length, body_length = _unpack(_BLOCK, footer, vector + 4 + i * _BLOCK.size)
        if min(offset, header_length, body_length) < 0 or offset + header_length > size:
            raise ValueError(f"record batch {i} lies beyond the end of the file")
        source.seek(offset)
        head = _read(source, header_length)
        start = 8 if head.startswith(ARROW_STREAM_MARKER) else 4
        kind, batch_rows, _ = _message(head[start : start + _get(_I32, head, start - 4)])
        if kind != _RECORD_BATCH:
            raise ValueError(f"record batch {i} of the footer is another message")
        rows += batch_rows
    return rows


def _stream_rows(source: BinaryIO, size: int) -> int:
    rows = 0
    messages = 0
    while len(prefix := source.read(4)) == 4:
        if prefix == ARROW_STREAM_MARKER and len(prefix := source.read(4)) < 4:
            break
        length = _get(_I32, prefix, 0)
        if length == 0:  # the end marker
            break
        kind, batch_rows, body_length = _message(_read(source, length))
        if messages == 0 and kind != _SCHEMA:
            raise ValueError(_NO_SCHEMA)
        messages += 1
        if not 0 <= body_length <= size - source.tell():
            raise ValueError("a message's body lies beyond the end of the file")
        source.seek(body_length, os.SEEK_CUR)
        if kind == _RECORD_BATCH:
            rows += batch_rows
    if messages == 0:
        raise ValueError(_NO_SCHEMA)
    return rows


def _message(buf: bytes) -> tuple[int, int, int]:
    """A Message flatbuffer's header type, rows (of a record batch; else 0) and body length."""
    message = _root(buf)
    at = _field(buf, message, _HEADER_TYPE)
    kind = 0 if at is None else _get(_U8, buf, at)
    at = _field(buf, message, _BODY_LENGTH)
    body_length = 0 if at is None else _get(_I64, buf, at)
    if kind != _RECORD_BATCH:
        return kind, 0, body_length
    at = _field(buf, message, _HEADER)
    if at is None:
        raise ValueError("a record batch message without its header")
    batch = at + _get(_U32, buf, at)
    at = _field(buf, batch, _LENGTH)
    return kind, 0 if at is None else _get(_I64, buf, at), body_length


def _root(buf: bytes) -> int:
    """Where a flatbuffer's root table lies."""
    return _get(_U32, buf, 0)


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
