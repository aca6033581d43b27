"""How many bytes an input takes once decoded, read from headers and metadata only.

Whether a run streams is decided on this size, never on the size on disk: a 1 MB ``.npz`` or
Parquet file of zeros can decode to gigabytes. Nothing here decompresses a body.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from segcli.errors import SegcliError
from segcli.io.formats import _COMPRESSED_SUFFIXES, TEXT_FORMATS, input_format, is_pipe

if TYPE_CHECKING:
    import pyarrow as pa

#: The size of an input whose decoded size cannot be known before reading it all (compressed
#: CSV): it always streams.
UNBOUNDED = 2**63 - 1

#: Parsed CSV numbers take up to 8 bytes where the text may hold 2 ("1,"): 4x the text.
_CSV_GROWTH = 4
#: A --memory-limit under which any run reads a text table whole, as a multiple of the file:
#: the data and the ids (or, with --by, the keys) each at _CSV_GROWTH, doubled for --by's
#: codes and dictionaries (drivers.choose).
WHOLE_TEXT_READ_FACTOR = 4 * _CSV_GROWTH


def whole_read_hint(path: str) -> str:
    """How to read the text table at ``path`` whole, where streaming it failed. A compressed
    one always streams (its decoded size is unknown), so it must be decompressed first, and
    one on a pipe is read in one pass, so it must be saved to a file first."""
    whole = (
        f"no --chunk-rows and a --memory-limit of {WHOLE_TEXT_READ_FACTOR} times its size or more"
    )
    if PurePath(path).suffix.lower() in _COMPRESSED_SUFFIXES:
        return f"decompress it first, as a compressed file always streams; then {whole}"
    if is_pipe(path):
        return f"save it to a file first, as a table on a pipe streams; then {whole}"
    return whole


# Bytes per value of Parquet's physical types, as NumPy holds them once read.
_PARQUET_WIDTHS = {
    "BOOLEAN": 1,
    "INT32": 4,
    "INT64": 8,
    "INT96": 12,
    "FLOAT": 4,
    "DOUBLE": 8,
}


def decoded_bytes(path: str, names: Collection[str] = ()) -> int | None:
    """Bytes ``path`` takes in memory once read: ``names`` (npz keys or table columns) if
    given, else everything in it. None if the file cannot be inspected: its reader will say
    why when the run opens it, or a pipe: it can be read only once, by the run (a reader
    opening it here would take its bytes, or wait for a writer that has gone)."""
    if is_pipe(path):
        return None
    try:
        fmt = input_format(path)
        if fmt == "npz":
            return _npz_bytes(path, names)
        if fmt == "parquet":
            return _parquet_bytes(path, names)
        if fmt == "arrow":
            return _arrow_bytes(path, names)
        if fmt == "npy":
            return _npy_bytes(path)
        size = os.path.getsize(path)
        if fmt in TEXT_FORMATS:
            compressed = PurePath(path).suffix.lower() in _COMPRESSED_SUFFIXES
            return UNBOUNDED if compressed else size * _CSV_GROWTH
        return size
    except (SegcliError, OSError, ValueError):
        return None
    except Exception as exc:  # pyarrow's errors are not all ValueError/OSError
        if type(exc).__module__.startswith("pyarrow"):
            return None
        raise


def _npy_bytes(path: str) -> int:
    """The array's bytes (shape x itemsize), as its header gives them: not the file's size,
    which counts the header too (and whatever a truncated or padded file holds)."""
    from segcli.io.npy import read_header

    with open(path, "rb") as f:
        return read_header(f, path).nbytes


def _npz_bytes(path: str, names: Collection[str]) -> int:
    from segcli.io.npy import npz_keys, open_npz, read_npz_header

    with open_npz(path) as archive:
        keys = [k for k in npz_keys(archive) if not names or k in names]
        return sum(read_npz_header(archive, k, f"{path}:{k}").nbytes for k in keys)


def _parquet_bytes(path: str, names: Collection[str]) -> int:
    import pyarrow.parquet as pq

    metadata = pq.ParquetFile(path).metadata
    total = 0
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            if names and chunk.path_in_schema.split(".")[0] not in names:
                continue
            width = _PARQUET_WIDTHS.get(chunk.physical_type)
            if width is None and chunk.physical_type == "FIXED_LEN_BYTE_ARRAY":
                width = metadata.schema.column(c).length
            # Variable-length values (strings): their unencoded bytes are the best we know.
            total += chunk.total_uncompressed_size if width is None else chunk.num_values * width
    return total


def _arrow_bytes(path: str, names: Collection[str]) -> int:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from segcli.io.ipc_rows import ipc_rows

    with pa.memory_map(path) as source:
        head = source.read(6)
        source.seek(0)
        if head != b"ARROW1":
            return os.path.getsize(path)  # an IPC stream has no footer to count rows from
        fields = [f for f in ipc.open_file(source).schema if not names or f.name in names]
    # The batches' headers alone, never a (compressed) body; read, not counted on the map,
    # which would keep the pages around every header resident (see ipc_rows).
    with open(path, "rb", buffering=0) as file:
        rows = ipc_rows(file)
    widths = [_arrow_width(f.type) for f in fields]
    if any(w is None for w in widths):
        return max(os.path.getsize(path), int(rows) * 8 * len(fields))
    return int(rows) * sum(w for w in widths if w is not None)


def _arrow_width(type_: pa.DataType) -> int | None:
    """Bytes per row of a fixed-width Arrow type (lists of fixed length included)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(type_):
        inner = _arrow_width(type_.value_type)
        return None if inner is None else inner * type_.list_size
    try:
        bits: Any = type_.bit_width
    except ValueError:
        return None
    return max(1, int(bits) // 8)
