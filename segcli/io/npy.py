"""Reading ``.npy`` files, ``.npz`` archives and ``.npy`` streams without ever unpickling.

The header is parsed with :mod:`numpy.lib.format`; the body is read with ``readinto`` into an
array allocated up front, so the same code serves files, zip members and stdin, and a truncated
body is reported with the byte counts instead of a numpy traceback.
"""

from __future__ import annotations

import io
import math
import os
import stat
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, Protocol, cast

import numpy as np
import numpy.lib.format as npformat

from segcli.errors import InvalidInputError, ReadError, UsageError
from segcli.io.formats import NPY_MAGIC, first_line, library_errors, open_binary, read_up_to
from segcli.memory import human_bytes

# Kinds a reduction can work on; bool passes so that the core can reject it with its own message.
_NUMERIC_KINDS = frozenset("biufc")
# The dtype list of docs/semantics.md stops at 64-bit floats: float128 would be folded in float64.
_WIDEST = {"b": 1, "i": 8, "u": 8, "f": 8, "c": 16}


class Readable(Protocol):
    """The part of a binary file the npy reader needs."""

    def read(self, size: int = -1, /) -> bytes: ...

    def readinto(self, buffer: memoryview, /) -> int | None: ...


class SeekableReadable(Readable, Protocol):
    """A readable file that can seek: what rows read at an offset need."""

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def tell(self) -> int: ...


@dataclass(frozen=True)
class NpyHeader:
    """What a ``.npy`` header says about the array that follows it."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fortran_order: bool

    @property
    def count(self) -> int:
        """Number of elements in the array."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size of the body in bytes."""
        return self.count * self.dtype.itemsize

    def as_dict(self) -> dict[str, object]:
        """The header as plain JSON-friendly values (for ``describe``)."""
        return {
            "shape": list(self.shape),
            "dtype": str(self.dtype),
            "fortran_order": self.fortran_order,
        }


def read_header(f: Readable, label: str) -> NpyHeader:
    """Parse the magic string and header of a ``.npy`` stream positioned at its start.

    Does not check the dtype (``describe`` reports any dtype); see :func:`check_supported_dtype`.
    """
    magic = read_up_to(f, len(NPY_MAGIC) + 2)
    if len(magic) < len(NPY_MAGIC) + 2 or not magic.startswith(NPY_MAGIC):
        raise ReadError(f"{label}: not a .npy file (bad magic)")
    major = magic[len(NPY_MAGIC)]
    if major == 1:
        reader = npformat.read_array_header_1_0
    elif major in (2, 3):
        # Version 3 differs from 2 only in allowing utf8 field names; the length field is equal.
        reader = npformat.read_array_header_2_0
    else:
        raise ReadError(f"{label}: unsupported .npy format version {major}")
    try:
        shape, fortran_order, dtype = reader(f)
    except Exception as exc:
        # The header is untrusted text that NumPy tokenizes and evaluates as a literal: a cut
        # or garbled one raises what the tokenizer or parser meets (TokenError,
        # RecursionError, ...), and every one of them means the same: corrupt.
        raise ReadError(f"{label}: corrupt .npy header ({first_line(exc)})") from exc
    if any(d < 0 for d in shape):
        # numpy's header parser takes any tuple of ints; a negative length would stream as an
        # empty array.
        raise ReadError(f"{label}: corrupt .npy header (negative dimension in shape {list(shape)})")
    if math.prod(d for d in shape if d) * np.dtype(dtype).itemsize >= 2**63:
        # Beyond what any file or int64 arithmetic holds: sizes computed later would overflow.
        # NumPy skips a zero dimension in this product and makes no array of such a shape,
        # not even an empty one (a block of its rows could not be allocated).
        claim = (
            "claims more bytes than any file holds"
            if math.prod(shape)
            else "is larger than any array can be, empty or not"
        )
        raise ReadError(
            f"{label}: corrupt .npy header (shape {list(shape)} of {np.dtype(dtype)} {claim})"
        )
    return NpyHeader(tuple(int(d) for d in shape), np.dtype(dtype), bool(fortran_order))


def check_supported_dtype(header: NpyHeader, label: str) -> None:
    """Refuse pickled object arrays and dtypes no reduction can use."""
    if header.dtype.hasobject:
        raise ReadError(f"{label}: holds Python objects (pickled data), which segcli never loads")
    if header.dtype.kind not in _NUMERIC_KINDS or header.dtype.fields is not None:
        raise InvalidInputError(
            f"{label}: dtype {header.dtype} is not numeric (need integers, floats or complex)"
        )
    if header.dtype.itemsize > _WIDEST[header.dtype.kind]:
        raise InvalidInputError(
            f"{label}: dtype {header.dtype} is wider than segcli supports "
            "(accepted: float16/32/64, signed and unsigned integers, complex64/128)"
        )


def check_claim(header: NpyHeader, body_bytes: int | None, label: str) -> None:
    """Refuse a header that claims more data than the file holds, before anything is
    allocated (a 10**12-element header on a small file); ``body_bytes`` None: unknown."""
    if body_bytes is None or body_bytes >= header.nbytes:
        return
    raise ReadError(f"{label}: truncated .npy: {arrived_rows(header, 0, body_bytes)}")


def read_body(f: Readable, header: NpyHeader, label: str) -> np.ndarray[Any, Any]:
    """Read the array body that follows ``header``; the result is native-endian and writable."""
    flat = allocate((header.count,), header, label)
    got = readinto_exact(f, flat)
    if got < header.nbytes:
        raise ReadError(f"{label}: truncated .npy: {arrived_rows(header, 0, got)}")
    order: Literal["C", "F"] = "F" if header.fortran_order else "C"
    return to_native(flat.reshape(header.shape, order=order))


def allocate(shape: tuple[int, ...], header: NpyHeader, label: str) -> np.ndarray[Any, Any]:
    """An empty array of ``shape`` for (part of) the body ``header`` describes; one that
    memory cannot hold (a header's claim on a pipe, which no file size tests) is an error
    naming the claim, not the out-of-memory of a run."""
    try:
        return np.empty(shape, dtype=header.dtype)
    except (MemoryError, ValueError):
        raise ReadError(
            f"{label}: the header claims shape {list(header.shape)} "
            f"({human_bytes(header.nbytes)} of data), more than this machine can hold"
        ) from None


def read_npy_rows(
    f: Readable, header: NpyHeader, start: int, rows: int, label: str
) -> np.ndarray[Any, Any]:
    """The next ``rows`` rows of a C-order ``.npy`` whose stream ``f`` stands at row ``start``,
    native-endian; a short read is an error naming where the file ends early."""
    block = allocate((rows, *header.shape[1:]), header, label)
    got = readinto_exact(f, block)
    if got < block.nbytes:
        raise ReadError(f"{label}: truncated .npy: {arrived_rows(header, start, got)}")
    return to_native(block)


def read_npy_rows_at(
    f: SeekableReadable, header: NpyHeader, body: int, start: int, rows: int, label: str
) -> np.ndarray[Any, Any]:
    """Rows ``[start, start + rows)`` of the ``.npy`` body at offset ``body`` of the seekable
    file ``f``, in C order and native-endian, whatever the file's order.

    A Fortran-order array (``np.save`` of a transposed array, or of a pandas frame's values)
    stores each column whole: the rows are one piece of every column, each read after a seek
    into a row of a (columns, rows) buffer whose transpose is the block.
    """
    if not header.fortran_order or len(header.shape) < 2:
        row_bytes = math.prod(header.shape[1:]) * header.dtype.itemsize
        f.seek(body + start * row_bytes)
        return read_npy_rows(f, header, start, rows, label)
    total, inner = header.shape[0], header.shape[1:]
    pieces = allocate((math.prod(inner), rows), header, label)
    for column, piece in enumerate(pieces):
        f.seek(body + (column * total + start) * header.dtype.itemsize)
        if readinto_exact(f, piece) < piece.nbytes:  # the file shrank after it was opened
            arrived = f.seek(0, os.SEEK_END) - body
            raise ReadError(f"{label}: truncated .npy: {arrived_rows(header, 0, arrived)}")
    # The transpose's columns are the inner elements in Fortran order: reshaping it in that
    # order puts each element in its place.
    return to_native(np.ascontiguousarray(pieces.T.reshape((rows, *inner), order="F")))


def arrived_rows(header: NpyHeader, start: int, got: int) -> str:
    """``3 of 10 rows arrived (96 of 320 bytes)``: how far a body that ended early got, when
    ``got`` bytes were read after row ``start``."""
    if not header.shape or (header.fortran_order and len(header.shape) > 1):
        return f"{got} of {header.nbytes} bytes arrived"  # Fortran order: no whole rows
    row_bytes = header.nbytes // header.shape[0] if header.shape[0] else 0
    done = start * row_bytes + got
    rows = start + (got // row_bytes if row_bytes else 0)
    return f"{rows} of {header.shape[0]} rows arrived ({done} of {header.nbytes} bytes)"


def readinto_exact(f: Readable, buffer: np.ndarray[Any, Any]) -> int:
    """Fill the contiguous array ``buffer`` from ``f``; return the bytes read (short at EOF)."""
    view = buffer.reshape(-1).view(np.uint8).data
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def to_native(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Byte-swap big-endian data once here, so no engine ever sees a non-native dtype."""
    if array.dtype.isnative:
        return array
    return array.astype(array.dtype.newbyteorder("="))


def read_npy(path: str) -> np.ndarray[Any, Any]:
    """Read a whole ``.npy`` file."""
    with open_binary(path) as f:
        return read_npy_stream(f, path, _regular_file_size(f))


def _regular_file_size(f: BinaryIO) -> int | None:
    """The size of a regular file; None for a pipe (a sniffed one has no descriptor of its own
    to ask, and its size says nothing until it is read)."""
    try:
        info = os.fstat(f.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def read_npy_stream(
    f: Readable, label: str, total_bytes: int | None = None
) -> np.ndarray[Any, Any]:
    """Read one ``.npy`` array from a stream positioned at its magic string; ``total_bytes``
    (header included), when known, is checked against the header's claim first."""
    header = read_header(f, label)
    check_supported_dtype(header, label)
    if total_bytes is not None:
        check_claim(header, total_bytes - cast(Any, f).tell(), label)
    with library_errors(label, "unreadable .npy data"):
        return read_body(f, header, label)


class PrefixedReader:
    """A stream whose first bytes were already consumed (to sniff the format) and are replayed."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix = prefix
        self._stream = stream

    def read(self, size: int = -1, /) -> bytes:
        """Read from the replayed prefix first, then from the stream."""
        if size < 0:
            data, self._prefix = self._prefix + self._stream.read(), b""
            return data
        if self._prefix:
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        return self._stream.read(size)

    def readinto(self, buffer: memoryview, /) -> int:
        """Fill part of ``buffer``; like ``io.RawIOBase.readinto`` it may return a short count."""
        if self._prefix:
            data = self.read(len(buffer))
            buffer[: len(data)] = data
            return len(data)
        readinto = getattr(self._stream, "readinto", None)
        if readinto is not None:
            return int(readinto(buffer) or 0)
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


# ---------------------------------------------------------------------------------------------
# .npz archives


@contextmanager
def open_npz(path: str) -> Iterator[zipfile.ZipFile]:
    """Open an ``.npz`` archive, with one-line errors for a missing or corrupt file."""
    f = open_binary(path)
    try:
        with library_errors(path, "not a valid .npz archive"):
            archive = zipfile.ZipFile(f)
        with archive:
            yield archive
    finally:
        f.close()


def npz_keys(archive: zipfile.ZipFile) -> list[str]:
    """Array names in an archive, as ``numpy.savez`` writes them (``key.npy`` members)."""
    return [n[: -len(".npy")] for n in archive.namelist() if n.endswith(".npy")]


def refuse_no_arrays(keys: list[str], path: str) -> None:
    """An archive without a ``.npy`` member holds nothing to read: a file problem, whatever
    the options say."""
    if not keys:
        raise ReadError(f"{path}: holds no arrays (an .npz holds a KEY.npy member per array)")


def pick_key(archive: zipfile.ZipFile, key: str | None, path: str, option: str) -> str:
    """The key to read: ``key`` if given (and present), else the archive's only array."""
    keys = npz_keys(archive)
    refuse_no_arrays(keys, path)
    listing = ", ".join(keys)
    if key is not None:
        if key not in keys:
            raise UsageError(f"{path}: no key '{key}' (keys: {listing})")
        return key
    if len(keys) == 1:
        return keys[0]
    raise UsageError(f"{path}: holds {len(keys)} arrays; pick one with {option} (keys: {listing})")


def read_npz_member(archive: zipfile.ZipFile, key: str, label: str) -> np.ndarray[Any, Any]:
    """Read array ``key`` of an open archive; ``label`` is what errors call it."""
    size = archive.getinfo(f"{key}.npy").file_size
    with library_errors(label, "corrupt .npz member"), open_member(archive, key, label) as member:
        return read_npy_stream(member, label, size)


def read_npz_header(archive: zipfile.ZipFile, key: str, label: str) -> NpyHeader:
    """Parse only the header of array ``key`` (decompresses a few bytes at most)."""
    with library_errors(label, "corrupt .npz member"), open_member(archive, key, label) as member:
        return read_header(member, label)


@contextmanager
def open_member(archive: zipfile.ZipFile, key: str, label: str) -> Iterator[Readable]:
    """Open array ``key`` of an archive as a stream (decompressed on the fly if deflated)."""
    try:
        opened = archive.open(f"{key}.npy")
    except (NotImplementedError, RuntimeError) as exc:
        # What zipfile raises for a member it cannot extract: a compression method it lacks,
        # or encryption (it wants a password). The archive is not corrupt; segcli cannot
        # read it.
        raise ReadError(f"{label}: cannot read this .npz member ({first_line(exc)})") from exc
    with opened as member:
        # ZipExtFile has readinto; typeshed only calls it IO[bytes].
        yield cast(Readable, member)
