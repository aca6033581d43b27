"""Format names, detection by suffix or magic bytes, and the error wrapping every reader shares.

Format names are the canonical strings used everywhere in ``segcli.io``: ``npy``, ``npz``,
``parquet``, ``arrow``, ``csv``, ``tsv``, ``jsonl`` (JSON lines; inputs only) and ``json``
(outputs only).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Iterator
from io import BufferedReader
from pathlib import PurePath
from typing import BinaryIO, Protocol

from segcli.errors import ReadError, SegcliError, UsageError, WriteError

#: What a damaged file or archive member makes the libraries raise (a deflated or
#: LZMA-compressed .npz member fails as it is decompressed).
_LIBRARY_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
)
try:
    from lzma import LZMAError
except ImportError:  # pragma: no cover - a Python built without lzma reads no such member
    pass
else:
    _LIBRARY_ERRORS += (LZMAError,)

STDIN_LABEL = "<stdin>"

#: Suffixes of the formats both read and written.
_SHARED_SUFFIXES: dict[str, str] = {
    ".npy": "npy",
    ".npz": "npz",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".csv": "csv",
    ".tsv": "tsv",
}
# JSON lines are read only; ``.json`` is written only (one document: shape, dtype, values).
INPUT_SUFFIXES: dict[str, str] = {**_SHARED_SUFFIXES, ".jsonl": "jsonl", ".ndjson": "jsonl"}
OUTPUT_SUFFIXES: dict[str, str] = {**_SHARED_SUFFIXES, ".json": "json"}
# Names accepted for an explicit output format (e.g. ``--format pq``), mapped to the canonical one.
OUTPUT_FORMAT_NAMES: dict[str, str] = {s[1:]: f for s, f in OUTPUT_SUFFIXES.items()}
OUTPUT_FORMATS = ("npy", "npz", "parquet", "arrow", "csv", "tsv", "json")
BINARY_FORMATS = frozenset({"npy", "npz", "parquet", "arrow"})
TABLE_FORMATS = frozenset({"parquet", "arrow", "csv", "tsv", "jsonl"})
#: Table formats read as text, a block at a time, column types inferred from the first block.
TEXT_FORMATS = frozenset({"csv", "tsv", "jsonl"})
# pyarrow.csv decompresses these itself, chosen by the file name.
_COMPRESSED_SUFFIXES = frozenset({".gz", ".bz2", ".zst", ".lz4"})

SUPPORTED_INPUTS = ".npy, .npz, .parquet/.pq, .arrow/.feather/.ipc, .csv, .tsv, .jsonl/.ndjson"

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"
#: An Arrow IPC stream opens with a message's continuation marker (since Arrow 0.15).
ARROW_STREAM_MARKER = b"\xff\xff\xff\xff"
FEATHER_V1_MAGIC = b"FEA1"
#: What an Arrow IPC stream's writer ends it with: the continuation marker, then a length of
#: 0. The format lets a stream end without it, so a stream cut short between two batches (its
#: writer stopped early) reads as a shorter one; only the missing marker tells.
ARROW_STREAM_END = ARROW_STREAM_MARKER + b"\x00\x00\x00\x00"
SNIFF_BYTES = 8


def sniff(head: bytes) -> str | None:
    """Name the input format the first bytes of a file belong to, or None if unknown."""
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head.startswith(ZIP_MAGICS):
        return "npz"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    if head.startswith((ARROW_FILE_MAGIC, ARROW_STREAM_MARKER)):
        return "arrow"
    if looks_like_json_lines(head):
        return "jsonl"
    return None


def looks_like_json_lines(head: bytes) -> bool:
    """Whether the first bytes open a JSON object (after a byte order mark or blanks): no
    binary format starts so, and a CSV header rarely does."""
    return head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"{")


#: Compressed streams: pyarrow decompresses a CSV or JSON-lines file by its suffix only.
_COMPRESSED_MAGICS = {
    b"\x1f\x8b": ("gzip", "zcat"),
    b"BZh": ("bzip2", "bzcat"),
    b"\x28\xb5\x2f\xfd": ("zstd", "zstdcat"),
    b"\x04\x22\x4d\x18": ("lz4", "lz4cat"),
}


def compression_of(head: bytes) -> tuple[str, str] | None:
    """The compression (its name and decompressing tool) that ``head`` opens with, or None."""
    for magic, named in _COMPRESSED_MAGICS.items():
        if head.startswith(magic):
            # "BZh" may open a CSV header: bzip2 goes on with a level and a block or end magic.
            if magic == b"BZh" and not _BZIP2_REST.match(head[len(magic) :]):
                return None
            return named
    return None


_BZIP2_REST = re.compile(rb"[1-9](?:1AY&SY|\x17rE8P\x90)")


def refuse_unreadable_stream(head: bytes, label: str) -> None:
    """Refuse by name what stdin or a pipe (``head``: its first bytes) cannot hold: an .npz
    archive, CSV/TSV text or a compressed stream, which need a file; otherwise they would be
    reported as a broken Arrow stream, a broken zip or an unknown format."""
    problem = unreadable_stream(head)
    if problem is not None:
        raise ReadError(f"{label}: {problem}")


def unreadable_stream(head: bytes) -> str | None:
    """Why a stream opening with ``head`` cannot be read from stdin or a pipe, or None."""
    if not head:  # its writer closed it at once: a producer that failed, say
        return "no input (it gave no bytes; expected a .npy, Parquet or Arrow IPC stream)"
    if head.startswith(ZIP_MAGICS):
        return (
            "this is an .npz archive, which is read from a file only (a zip archive is read "
            "by seeking), not from stdin or a pipe; save it to a file first"
        )
    for magic, (name, tool) in _COMPRESSED_MAGICS.items():
        if head.startswith(magic):
            return (
                f"this is {name}-compressed, which is read only from a path whose suffix says "
                f"so (.csv.gz, .jsonl.gz, ...), not from stdin or <(...); decompress it first, "
                f"e.g. <({tool} FILE)"
            )
    if sniff(head) is None and _looks_like_text(head):
        return (
            "this looks like CSV/TSV text, which is read only from a path ending in .csv or "
            ".tsv (a file, or a named pipe), not from stdin or <(...); save it to such a file"
        )
    if sniff(head) is None:
        # Said from the first bytes: read whole in the hope of an Arrow stream, the output of
        # /dev/zero would fill memory before pyarrow could say it is none.
        return (
            f"not a .npy, Parquet or Arrow IPC stream (it opens with bytes {head.hex(' ')}; an "
            "Arrow stream opens with ff ff ff ff)"
        )
    return None


def _looks_like_text(head: bytes) -> bool:
    try:
        text = head.decode()
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data":  # else a character cut off by the head
            return False
        text = head[: exc.start].decode()
    return bool(text) and all(c.isprintable() or c in "\t\r\n" for c in text)


def suffix_format(path: str, table: dict[str, str]) -> str | None:
    """Format named by the file suffix (case-insensitive), or None; ``x.csv.gz`` counts as csv
    (a text format, which pyarrow decompresses by the name)."""
    suffixes = [s.lower() for s in PurePath(path).suffixes]
    if len(suffixes) >= 2 and suffixes[-1] in _COMPRESSED_SUFFIXES:
        inner = table.get(suffixes[-2])
        return inner if inner in TEXT_FORMATS else None
    return table.get(suffixes[-1]) if suffixes else None


def input_format(path: str) -> str:
    """Detect the format of input file ``path``: by suffix, else by its magic bytes.

    A pipe (``<(cat x.npy)``, ``/dev/stdin``) can be read only once, so the bytes read to sniff
    it are kept and replayed by the next :func:`open_binary` of the same path.
    """
    fmt = suffix_format(path, INPUT_SUFFIXES)
    if fmt is not None:
        refuse_misnamed(path, fmt)
        return fmt
    if suffix_format(path, OUTPUT_SUFFIXES) == "json":
        raise ReadError(
            f"{path}: .json is an output format (one document), not an input; "
            "JSON lines (one object a line) are read from .jsonl or .ndjson"
        )
    pipe = _pipe_identity(path)
    if pipe in _PIPE_FORMATS:
        return _PIPE_FORMATS[pipe]
    if pipe is not None:
        head = _sniff_pipe(path)
    else:
        with open_binary(path) as f:
            head = f.read(SNIFF_BYTES)
    if pipe is not None:
        refuse_unreadable_stream(head, path)
    sniffed = sniff(head)
    if sniffed is None:
        hint = "; text: if it is CSV or TSV, name it .csv or .tsv" if _looks_like_text(head) else ""
        raise ReadError(f"{path}: unknown file format (supported: {SUPPORTED_INPUTS}){hint}")
    if pipe is not None:
        _PIPE_FORMATS[pipe] = sniffed
    return sniffed


#: What a misnamed file's bytes say it is, and what to do, by the binary format they open.
_MISNAMED = {
    "npy": ("a .npy file", "name it .npy"),
    "npz": ("a zip archive", "if it is an .npz of NumPy arrays, name it .npz"),
    "parquet": ("a Parquet file", "name it .parquet"),
    "arrow": ("an Arrow IPC file", "name it .arrow"),
}


def refuse_misnamed(path: str, fmt: str) -> None:
    """Refuse a regular file whose name says ``fmt`` but whose bytes are another binary
    format (a .npy saved as ``x.csv``): read as its name says, it would fail with the CSV
    parser's complaint about binary bytes, or the .npy reader's "bad magic", neither of which
    says what the file is. Pipes are not peeked at (their bytes are read once); a file that
    cannot be opened is left to its reader, which says why."""
    if is_pipe(path):
        return
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
            tail = file_tail(f, len(PARQUET_MAGIC)) if head.startswith(PARQUET_MAGIC) else b""
    except (OSError, ValueError):
        return
    found = sniff(head)
    if found not in _MISNAMED or found == fmt:
        return
    if found == "parquet" and tail != PARQUET_MAGIC:  # a CSV header may open with "PAR1"
        return
    if found == "arrow" and head.startswith(ARROW_STREAM_MARKER) and not _stream_opens(head):
        return  # bytes ff ff ff ff open text in Latin-1 ("ÿÿÿÿ") too
    what, hint = _MISNAMED[found]
    raise ReadError(
        f"{path}: this is {what}, but its name ends in {PurePath(path).suffix} (the suffix "
        f"says the format); {hint}"
    )


def _stream_opens(head: bytes) -> bool:
    """Whether ``head``, which opens with the continuation marker, goes on as an Arrow IPC
    stream does: with the length of its first message's metadata, above 0 and padded to a
    multiple of 8 bytes."""
    length = int.from_bytes(head[4:8], "little", signed=True)
    return len(head) >= 8 and length > 0 and length % 8 == 0


def file_tail(f: BinaryIO, size: int) -> bytes:
    """The last ``size`` bytes of the seekable file ``f``; none if it is shorter."""
    f.seek(0, os.SEEK_END)
    if f.tell() < size:
        return b""
    f.seek(-size, os.SEEK_END)
    return f.read(size)


# A pipe's format, by the pipe: asked again once its bytes are read (the run's summary), it
# has none left to sniff.
_PIPE_FORMATS: dict[tuple[str, int, int], str] = {}
_PIPE_BYTES: dict[tuple[str, int, int], bytes] = {}
_PIPE_SOURCES: dict[tuple[str, int, int], PipeSource] = {}


def forget_pipes() -> None:
    """Drop what was kept of the run's pipes: the next run's pipe may have the same name and
    inode (a named pipe made again)."""
    _PIPE_FORMATS.clear()
    _PIPE_BYTES.clear()
    for source in _PIPE_SOURCES.values():
        source.close()
    _PIPE_SOURCES.clear()


def pipe_bytes(path: str) -> bytes:
    """All the bytes of the pipe ``path``, read once: a run that opens its table again (the
    key columns, then the data column) gets them again instead of an empty pipe."""
    pipe = _pipe_identity(path)
    if pipe not in _PIPE_BYTES:
        if pipe in _PIPE_SOURCES:  # its first bytes were read by a PipeSource
            body = _PIPE_SOURCES[pipe].reader().read()
        else:
            with open_binary(path) as stream:
                body = stream.read()
        if pipe is None:
            return body
        _PIPE_BYTES[pipe] = body
    return _PIPE_BYTES[pipe]


def _pipe_identity(path: str) -> tuple[str, int, int] | None:
    """The path and the pipe it names now (one ``/dev/fd/63`` path names many pipes in
    turn), or None for a file that is not a pipe."""
    if not is_pipe(path):
        return None
    found = os.stat(path)
    return path, found.st_dev, found.st_ino


def output_format(path: str, fmt: str | None) -> str:
    """Resolve the output format from an explicit name or the suffix of ``path`` (npy for '-')."""
    if fmt is not None:
        canonical = OUTPUT_FORMAT_NAMES.get(fmt.lower())
        if canonical is None:
            raise UsageError(
                f"unknown output format '{fmt}' (supported: {', '.join(OUTPUT_FORMATS)})"
            )
        return canonical
    if path == "-":
        return "npy"
    found = suffix_format(path, OUTPUT_SUFFIXES)
    if found is None and os.path.isdir(path):
        # What -o's own check says with --format given: a folder is the fault, not its name.
        raise WriteError(f"-o {path}: is a directory")
    if found is None and suffix_format(path, INPUT_SUFFIXES) == "jsonl":
        # The mirror of input_format's word on .json: the format is known, and not written.
        raise UsageError(
            f"{path}: JSON lines (.jsonl, .ndjson) is an input format, not an output; write "
            ".json (one document) or a table (.csv, .tsv, .parquet, .arrow)"
        )
    if found is None:
        raise UsageError(
            f"{path}: cannot tell the output format from the file name; give a format "
            f"({', '.join(OUTPUT_FORMATS)})"
        )
    return found


def is_pipe(path: str) -> bool:
    """True for a FIFO, character device or socket: a path that can be read only once."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISBLK(mode))


class _Replay(io.RawIOBase):
    """A one-shot stream whose first bytes, already read to sniff its format, come first."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix = prefix
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._prefix:
            count = min(len(buffer), len(self._prefix))
            buffer[:count] = self._prefix[:count]
            self._prefix = self._prefix[count:]
            return count
        return self._stream.readinto(buffer)  # type: ignore[attr-defined, no-any-return]

    def close(self) -> None:
        self._stream.close()
        super().close()


class _Reads(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


#: Pipes whose first bytes were read by :func:`input_format`, waiting for their reader.
_SNIFFED_PIPES: dict[str, BufferedReader] = {}


def read_up_to(f: _Reads, size: int) -> bytes:
    """Read ``size`` bytes, fewer only at end of file (pipes may return short reads)."""
    data = b""
    while len(data) < size:
        part = f.read(size - len(data))
        if not part:
            break
        data += part
    return data


def refuse_terminal(stream: BinaryIO, label: str) -> None:
    """A ReadError when an input would be read from a terminal (``-`` or ``/dev/stdin`` with
    nothing redirected): no one types a .npy or an Arrow stream, and the run would wait in
    silence for bytes that never come."""
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError, OSError):
        return
    if terminal:
        raise ReadError(
            f"{label}: is a terminal; redirect the input from a file or a pipe "
            "(e.g. '< data.npy' or 'producer |')"
        )


def _sniff_pipe(path: str) -> bytes:
    stream = _SNIFFED_PIPES.pop(path, None) or _open(path)
    refuse_terminal(stream, path)
    head = read_up_to(stream, SNIFF_BYTES)
    _SNIFFED_PIPES[path] = BufferedReader(_Replay(head, stream))
    return head


def open_binary(path: str) -> BufferedReader:
    """Open ``path`` for reading, turning OS errors into one-line ReadErrors.

    A pipe that :func:`input_format` sniffed is handed over with its first bytes intact.
    """
    sniffed = _SNIFFED_PIPES.pop(path, None)
    if sniffed is not None:
        return sniffed
    return _open(path)


def _open(path: str) -> BufferedReader:
    try:
        return open(path, "rb")  # the caller owns and closes the file
    except FileNotFoundError as exc:
        if not path:
            raise ReadError("'': an empty path names no file") from exc
        raise ReadError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise ReadError(f"{path}: is a directory, not a file") from exc
    except PermissionError as exc:
        raise ReadError(f"{path}: permission denied") from exc
    except OSError as exc:
        raise ReadError(f"{path}: cannot open ({exc.strerror or exc})") from exc


def check_readable(path: str) -> None:
    """Fail with the same messages as :func:`open_binary` before a library opens ``path``."""
    if path not in _SNIFFED_PIPES:  # opened already, and a pipe cannot be opened twice
        _open(path).close()


def file_size(path: str) -> int:
    """Size of ``path`` in bytes, as a ReadError if it cannot be stat-ed."""
    check_readable(path)
    return os.path.getsize(path)


def one_line(text: str) -> str:
    """``text`` with its line breaks written as escapes, so that an error quoting it (a CSV
    value or record holding a quoted line break) stays one line."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


#: The characters of a value an error quotes whole; a longer one (a field of megabytes) is
#: cut, and its length said, so that the error stays a line one can read.
SHOWN_CHARS = 80


def elided(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text``, or its first ``limit`` characters and how long it is, for an error message."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def shown(value: str | bytes, limit: int = SHOWN_CHARS) -> str:
    """``value`` as Python writes it (quoted), or its first ``limit`` characters so written
    and how long it is, for an error message (bytes: a quarter as many, which may take four
    characters each, ``\xff``)."""
    cut = limit // 4 if isinstance(value, bytes) else limit
    if len(value) <= cut:
        return repr(value)
    unit = "bytes" if isinstance(value, bytes) else "characters"
    return f"{value[:cut]!r}... ({len(value):,} {unit})"


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (library messages can be long)."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


@contextlib.contextmanager
def library_errors(label: str, what: str) -> Iterator[None]:
    """Turn exceptions from numpy, pyarrow or zipfile into a one-line ReadError about ``label``.

    segcli's own errors pass through unchanged (InvalidInputError is also a ValueError).
    ``what`` says what the file was expected to be, e.g. "not a valid Parquet file".
    """
    try:
        yield
    except SegcliError:
        raise
    except _LIBRARY_ERRORS as exc:
        raise ReadError(f"{label}: {what} ({first_line(exc)})") from exc
    except Exception as exc:
        # pyarrow.lib.ArrowException subclasses are not all ValueError/OSError.
        if type(exc).__module__.startswith("pyarrow"):
            raise ReadError(f"{label}: {what} ({first_line(exc)})") from exc
        raise


def note_if_unended(label: str, head: bytes, tail: bytes) -> None:
    """A note (not an error: a stream may end so) when the last bytes of an Arrow IPC stream,
    ``tail``, are not its end-of-stream marker (by ``head``, its first bytes: a stream of the
    format before Arrow 0.15 ends with a length of 0 alone). A run opens a file more than
    once: the command line prints a note once."""
    end = ARROW_STREAM_END if head.startswith(ARROW_STREAM_MARKER) else ARROW_STREAM_END[4:]
    if tail.endswith(end):
        return
    from segcli import notices

    notices.send(
        f"segcli: note: {label} ends without the Arrow stream's end-of-stream marker; if its "
        "writer stopped early, the rows it did not write are missing"
    )


class TailKept:
    """A binary stream read through, keeping its first and last bytes (:attr:`head`,
    :attr:`tail`): whether an Arrow IPC stream read from a pipe ended with its end-of-stream
    marker."""

    def __init__(self, stream: _Reads) -> None:
        self._stream = stream
        self.head = b""
        self.tail = b""

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        if len(self.head) < len(ARROW_STREAM_MARKER):
            self.head = (self.head + data)[: len(ARROW_STREAM_MARKER)]
        self.tail = (self.tail + data)[-len(ARROW_STREAM_END) :]
        return data

    @property
    def closed(self) -> bool:
        return bool(getattr(self._stream, "closed", False))

    def readable(self) -> bool:
        return True


def pipe_source(path: str) -> PipeSource:
    """The :class:`PipeSource` of the pipe ``path``: one a run, however often it opens it."""
    pipe = _pipe_identity(path)
    if pipe is None:
        raise ValueError(f"{path}: not a pipe")
    if pipe not in _PIPE_SOURCES:
        _PIPE_SOURCES[pipe] = PipeSource(path)
    return _PIPE_SOURCES[pipe]


#: Bytes of a pipe kept past its head as its pass reads them: a pipe no longer than this is
#: kept whole, so that an error's path may read it again.
KEEP_BYTES = 4 << 20


class PipeSource:
    """A table on a pipe given by its path (``/dev/stdin``, a named pipe, ``<(producer)``),
    read in one pass as a file is (an Arrow IPC stream, CSV/TSV text, JSON lines). A run reads
    a table's head more than once before its pass (the schema, the types of the first lines,
    the first rows), and a pipe gives its bytes once: what a read of its head takes is kept,
    and read again by the next read (and the start of the pass); the pass goes on from the
    pipe a block at a time, keeping no more than :data:`KEEP_BYTES` in all. A read that needs
    bytes the pass has gone by (an error's path counting over the input again) is a
    ReadError."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._pipe: BufferedReader | None = None
        self._kept = bytearray()
        self._read = 0  # bytes taken from the pipe
        self._tail = b""
        self._ended = False

    def head(self, size: int) -> bytes:
        """The first ``size`` bytes (fewer if the pipe is shorter)."""
        return read_up_to(self.reader(), size)

    @property
    def tail(self) -> bytes:
        """The last bytes taken from the pipe (its end, once it has been read through)."""
        return self._tail

    def reader(self, *, passing: bool = False) -> _PipeReader:
        """A reader from the first byte: of the head, or (``passing``) the run's pass."""
        return _PipeReader(self, passing)

    def read_at(self, position: int, size: int, passing: bool = False) -> bytes:
        """``size`` bytes from ``position`` (fewer at the end of the pipe): the kept ones,
        then the pipe's next ones (``passing``: a pass's, kept only up to KEEP_BYTES)."""
        kept = bytes(self._kept[position : position + size])
        position += len(kept)
        size -= len(kept)
        if size <= 0:
            return kept
        if position != self._read:
            raise ReadError(
                f"{self.path}: a pipe is read once, and this needs its bytes again; save it "
                "to a file to have it read so"
            )
        if self._ended:
            return kept
        if self._pipe is None:
            self._pipe = open_binary(self.path)
        data = self._pipe.read(size)
        if len(data) < size:  # its end: the pipe is closed, the bytes it gave kept as said
            self._ended = True
            self.close()
        if len(self._kept) == self._read:  # the kept bytes run on
            self._kept += data[: max(KEEP_BYTES - len(self._kept), 0)] if passing else data
        self._read += len(data)
        self._tail = (self._tail + data)[-len(ARROW_STREAM_END) :]
        return kept + data if kept else data

    def close(self) -> None:
        """Close the pipe (a run's end: its bytes are another run's)."""
        if self._pipe is not None:
            self._pipe.close()


class _PipeReader(io.RawIOBase):
    """One read of a :class:`PipeSource` from its start; it seeks within the kept bytes."""

    def __init__(self, source: PipeSource, passing: bool) -> None:
        self._source = source
        self._passing = passing
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self._position + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < 0:
            raise OSError(f"{self._source.path}: a pipe cannot seek")
        if target != self._position:
            self._source.read_at(target, 0)  # a ReadError where those bytes are gone
            self._position = target
        return target

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._source.read_at(self._position, len(buffer), self._passing)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            parts = []
            while part := self.read(1 << 20):
                parts.append(part)
            return b"".join(parts)
        data = self._source.read_at(self._position, size, self._passing)
        self._position += len(data)
        return data
