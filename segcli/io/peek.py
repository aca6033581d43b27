"""What an input holds, from its first bytes or its header, without consuming it.

A run decides how to read its inputs (whole, streamed) before it reads them: these answer
from a ``.npy`` header or the first bytes of stdin, which stays readable from its start.
"""

from __future__ import annotations

import sys
from io import BufferedReader, BytesIO
from typing import BinaryIO

from segcli.errors import SegcliError
from segcli.io.formats import (
    ARROW_FILE_MAGIC,
    NPY_MAGIC,
    PARQUET_MAGIC,
    input_format,
    is_pipe,
    looks_like_json_lines,
    open_binary,
    unreadable_stream,
)
from segcli.io.npy import open_npz, pick_key, read_header, read_npz_header

#: Bytes of stdin a peek may show; a .npy header is far shorter (NumPy pads it to 64 bytes).
_HEADER_PEEK = 4096


def peekable(stdin: BinaryIO | None) -> BinaryIO:
    """Stdin (``sys.stdin.buffer`` unless given) that can show its first bytes without
    consuming them."""
    stream = stdin or sys.stdin.buffer
    if not hasattr(stream, "peek"):
        stream = BufferedReader(stream)
    return stream


def _head(stdin: BinaryIO) -> bytes:
    return bytes(stdin.peek(6)[:6])  # type: ignore[attr-defined]


def holds_npy(stdin: BinaryIO) -> bool:
    return _head(stdin) == NPY_MAGIC


def holds_arrow_stream(stdin: BinaryIO) -> bool:
    """Neither .npy nor a file format (Parquet, Arrow file) that must be read whole to seek."""
    head = _head(stdin)
    # JSON lines, CSV/TSV text and compressed bytes on stdin are refused by name, when stdin
    # is read whole.
    binary = not looks_like_json_lines(head) and unreadable_stream(head) is None
    return (
        bool(head) and binary and not head.startswith((NPY_MAGIC, PARQUET_MAGIC, ARROW_FILE_MAGIC))
    )


def npy_shape(path: str, key: str | None, stdin: BinaryIO | None) -> tuple[int, ...] | None:
    """The shape a ``.npy`` header (a file, an ``.npz`` member or stdin) declares; None for
    other formats, a pipe, or an input its reader will report as unreadable."""
    try:
        if path == "-":
            head = bytes(stdin.peek(_HEADER_PEEK)) if stdin is not None else b""  # type: ignore[attr-defined]
            return read_header(BytesIO(head), path).shape if head.startswith(NPY_MAGIC) else None
        if is_pipe(path):
            return None  # a pipe is read once, by its reader
        fmt = input_format(path)
        if fmt == "npy":
            with open_binary(path) as f:
                return read_header(f, path).shape
        if fmt == "npz":
            with open_npz(path) as archive:
                chosen = pick_key(archive, key, path, "--data-key")
                return read_npz_header(archive, chosen, path).shape
    except SegcliError:
        return None
    return None


def pipe_streams(path: str | None) -> bool:
    """Whether ``path`` is a pipe holding a table read in one pass, a block at a time (an
    Arrow IPC stream, CSV/TSV text or JSON lines), as an Arrow stream on stdin is: its size is
    unknown until read, and one pass is all a pipe allows."""
    if path is None or path == "-" or not is_pipe(path):
        return False
    from segcli.io.tables import streams_from_pipe

    try:
        return streams_from_pipe(path, input_format(path))
    except SegcliError:
        return False  # its reader says why
