"""``describe``: what ``segcli info FILE`` shows, read from headers and metadata where possible."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, BinaryIO

from segcli.errors import ReadError, UsageError
from segcli.io.formats import (
    ARROW_FILE_MAGIC,
    INPUT_SUFFIXES,
    NPY_MAGIC,
    PARQUET_MAGIC,
    STDIN_LABEL,
    TEXT_FORMATS,
    TailKept,
    file_size,
    input_format,
    is_pipe,
    library_errors,
    looks_like_json_lines,
    note_if_unended,
    open_binary,
    pipe_bytes,
    read_up_to,
    refuse_terminal,
    refuse_unreadable_stream,
    suffix_format,
)
from segcli.io.npy import (
    NpyHeader,
    PrefixedReader,
    Readable,
    arrived_rows,
    npz_keys,
    open_npz,
    read_header,
    read_npz_header,
)
from segcli.io.tables import CsvOptions, TableFile, is_csv_path, open_table
from segcli.io.text_facts import jsonl_stream_facts, text_facts

if TYPE_CHECKING:
    import pyarrow as pa

#: Bytes read at a time when a stream's body is only counted.
_COUNT_BLOCK = 1 << 20


def describe(
    path: str, stdin: BinaryIO | None = None, csv: CsvOptions | None = None
) -> dict[str, object]:
    """Format, size in bytes and the layout of ``path``, without reading array data.

    npy: ``shape``, ``dtype``, ``fortran_order``; npz: ``arrays`` (per key the same three);
    parquet: ``rows``, ``row_groups``, ``columns``; arrow: ``rows``, ``record_batches``,
    ``ipc`` ("file" or "stream"), ``columns``; csv/tsv/jsonl: ``rows``, ``columns`` (the file
    is parsed). ``columns`` is a list of ``{"name": ..., "type": ..., "nulls": ...}``.

    ``-`` describes stdin (``sys.stdin.buffer`` unless ``stdin`` is given): a ``.npy`` stream,
    a Parquet or Arrow IPC file or stream, or JSON lines. A stream is read through to its end
    (a ``.npy`` body, an Arrow stream and JSON lines a block at a time, a Parquet or Arrow file
    kept whole to read its footer), so a body that ends early is reported, as it is for a
    ``.npy`` file.

    ``csv`` (delimiter, header line) applies to a CSV/TSV file only, else a UsageError.
    """
    if csv is not None and not is_csv_path(path):
        option = "--delimiter" if csv.delimiter is not None else "--no-input-header"
        raise UsageError(f"{option} applies to CSV/TSV inputs only")
    if path == "-":
        return _describe_stream(stdin if stdin is not None else sys.stdin.buffer, "-", STDIN_LABEL)
    if is_pipe(path) and suffix_format(path, INPUT_SUFFIXES) not in TEXT_FORMATS:
        # ``<(cat x.npy)``: no size to ask for, and only one pass; a named pipe ``x.csv`` is
        # parsed as text tables are, as the commands read it
        with open_binary(path) as stream:
            return _describe_stream(stream, path, path)
    fmt = input_format(path)
    pipe = is_pipe(path)
    info: dict[str, object] = {"path": path, "format": fmt, "size": 0 if pipe else file_size(path)}
    if fmt in ("csv", "tsv"):
        info.update(_text_table(open_table(path, fmt, csv)))
    else:
        info.update(_DESCRIBERS[fmt](path, fmt))
    if pipe:  # read whole by now, and kept
        info["size"] = len(pipe_bytes(path))
    return info


def _describe_stream(stream: BinaryIO, path: str, label: str) -> dict[str, object]:
    refuse_terminal(stream, label)
    head = read_up_to(stream, len(NPY_MAGIC))
    if not head:
        raise ReadError(
            f"{label}: no input (expected a .npy, Parquet or Arrow IPC stream, or JSON lines)"
        )
    if head == NPY_MAGIC:
        counted = _CountingReader(PrefixedReader(head, stream))
        header = read_header(counted, label)
        _skip_body(counted, header, label)
        return {"path": path, "format": "npy", "size": counted.count, **header.as_dict()}
    if looks_like_json_lines(head):
        counted = _CountingReader(PrefixedReader(head, stream))
        facts = jsonl_stream_facts(label, counted)
        return {
            "path": path,
            "format": "jsonl",
            "size": counted.count,
            "rows": facts.rows,
            "columns": _columns(facts.schema, facts.nulls),
        }
    refuse_unreadable_stream(head, label)  # before reading the rest: /dev/zero never ends
    if not head.startswith(PARQUET_MAGIC) and head != ARROW_FILE_MAGIC:
        return _arrow_stream(PrefixedReader(head, stream), path, label)
    # Parquet and Arrow files are read from their footers: the whole stream is kept.
    body = head + stream.read()
    fmt = "parquet" if head.startswith(PARQUET_MAGIC) else "arrow"
    table = TableFile(label, fmt, body)
    tables = _parquet_table if fmt == "parquet" else _arrow_table
    return {"path": path, "format": fmt, "size": len(body), **tables(table)}


def _arrow_stream(stream: Readable, path: str, label: str) -> dict[str, object]:
    """An Arrow IPC stream read through a record batch at a time, keeping none (its rows and
    nulls as :func:`_arrow_table` counts them): a pipe's stream may be larger than memory."""
    import pyarrow.ipc as ipc

    counted = _CountingReader(stream)
    kept = TailKept(counted)  # its end marker, looked for once it ends
    with library_errors(label, "not a valid Arrow IPC file"):
        reader = ipc.open_stream(kept)
        rows, batches, nulls = _batch_counts(reader, len(reader.schema))
    while kept.read(_COUNT_BLOCK):  # bytes past the end marker count in the size too
        pass
    note_if_unended(label, kept.head, kept.tail)
    return {
        "path": path,
        "format": "arrow",
        "size": counted.count,
        "ipc": "stream",
        "rows": rows,
        "record_batches": batches,
        "columns": _columns(reader.schema, nulls),
    }


class _CountingReader:
    """Counts the bytes read through it (a stream has no size to ask for). A read returns
    fewer bytes than asked for only at the end (pyarrow's reader takes a short read for a
    damaged stream, and a pipe, or the head read ahead, gives short reads)."""

    def __init__(self, stream: Readable) -> None:
        self._stream = stream
        self.count = 0

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size) if size < 0 else read_up_to(self._stream, size)
        self.count += len(data)
        return data

    def readinto(self, buffer: memoryview, /) -> int:
        got = self._stream.readinto(buffer) or 0
        self.count += got
        return got


def _skip_body(stream: _CountingReader, header: NpyHeader, label: str) -> None:
    """Read the body through, keeping nothing, and fail if it ends early."""
    start = stream.count
    buffer = memoryview(bytearray(_COUNT_BLOCK))
    while (got := stream.count - start) < header.nbytes:
        if not stream.readinto(buffer[: min(_COUNT_BLOCK, header.nbytes - got)]):
            raise ReadError(f"{label}: truncated .npy: {arrived_rows(header, 0, got)}")


def _npy(path: str, fmt: str) -> dict[str, object]:
    with open_binary(path) as f:
        header = read_header(f, path)
        body_starts = f.tell()
    # The header promises a shape; the file's size says whether the rows are really there.
    got = file_size(path) - body_starts
    if got < header.nbytes:
        raise ReadError(f"{path}: truncated .npy: {arrived_rows(header, 0, max(got, 0))}")
    return header.as_dict()


def _npz(path: str, fmt: str) -> dict[str, object]:
    with open_npz(path) as archive:
        arrays = {
            key: read_npz_header(archive, key, f"{path}:{key}").as_dict()
            for key in npz_keys(archive)
        }
    return {"arrays": arrays}


def _parquet(path: str, fmt: str) -> dict[str, object]:
    return _parquet_table(open_table(path, fmt))


def _parquet_table(table: TableFile) -> dict[str, object]:
    import pyarrow.parquet as pq

    with table.errors():
        parquet = pq.ParquetFile(table.parquet_source())
        meta = parquet.metadata
        schema = parquet.schema_arrow
        nulls = _parquet_nulls(parquet, schema)
        return {
            "rows": meta.num_rows,
            "row_groups": meta.num_row_groups,
            "columns": _columns(schema, nulls),
        }


def _parquet_nulls(parquet: object, schema: pa.Schema) -> list[int]:
    """Nulls of each top-level column: a flat column's from its row groups' statistics (its
    one leaf, found by position: a name may hold dots), else by reading the column. A nested
    column's leaves count null elements and empty lists, not null rows."""
    import pyarrow.types as pt

    meta = parquet.metadata  # type: ignore[attr-defined]
    nulls = []
    leaf = 0
    for field in schema:
        leaves = range(leaf, leaf + _leaves(field.type))
        counted = None if pt.is_nested(field.type) else _leaf_nulls(meta, leaf)
        if counted is None:
            counted = _read_nulls(parquet, leaves)
        nulls.append(counted)
        leaf = leaves.stop
    return nulls


def _read_nulls(parquet: Any, leaves: range) -> int:
    """Null rows of the top-level column stored as Parquet leaf columns ``leaves``, read a
    row group at a time (info keeps one row group of one column in memory, not the column)
    and by position (a name may be another column's too)."""
    total = 0
    for group in range(parquet.metadata.num_row_groups):
        part = parquet.reader.read_row_group(group, column_indices=list(leaves))
        total += int(part.column(0).null_count)
    return total


def _leaf_nulls(meta: Any, leaf: int) -> int | None:
    """The null count of Parquet leaf column ``leaf`` over every row group; None if a row
    group has no statistics for it."""
    total = 0
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(leaf).statistics
        if stats is None or not stats.has_null_count:
            return None
        total += stats.null_count
    return total


def _leaves(type_: pa.DataType) -> int:
    """How many Parquet leaf columns an Arrow type is stored as."""
    import pyarrow.types as pt

    if pt.is_struct(type_):
        return sum(_leaves(type_.field(i).type) for i in range(type_.num_fields))
    if pt.is_map(type_):
        return _leaves(type_.key_type) + _leaves(type_.item_type)
    if pt.is_list(type_) or pt.is_large_list(type_) or pt.is_fixed_size_list(type_):
        return _leaves(type_.value_type)
    return 1


def _arrow(path: str, fmt: str) -> dict[str, object]:
    return _arrow_table(open_table(path, fmt))


def _arrow_table(table: TableFile) -> dict[str, object]:
    import pyarrow.ipc as ipc

    with table.errors():
        reader = table.ipc_reader()
        try:
            # From the headers alone: batches read through a memory map keep the pages around
            # their headers resident, and compressed ones would be decompressed.
            counts = table.ipc_counts()
        except ValueError:
            counts = None
        if counts is None or len(counts.nulls) != len(reader.schema):
            # Damaged: pyarrow's read says what is wrong (or reads what it can), as it did.
            return _arrow_batches(table)
        nulls = list(counts.nulls)
        if counts.unsure:
            # Rows on a null dictionary entry are found in the data: only those columns
            # are read, a batch at a time.
            fields = sorted(counts.unsure)
            for i in fields:
                nulls[i] = 0
            for batch in table.ipc_field_batches(fields):
                for i, column in zip(fields, batch.columns, strict=True):
                    nulls[i] += _nulls(column)
        table.note_if_unended_stream()
        return {
            "ipc": "file" if isinstance(reader, ipc.RecordBatchFileReader) else "stream",
            "rows": counts.rows,
            "record_batches": counts.batches,
            "columns": _columns(reader.schema, nulls),
        }


def _arrow_batches(table: TableFile) -> dict[str, object]:
    """:func:`_arrow_table` read by pyarrow, every record batch held."""
    import pyarrow.ipc as ipc

    with table.errors():
        reader = table.ipc_reader()
        if isinstance(reader, ipc.RecordBatchFileReader):
            # The file is memory-mapped: row and null counts cost no data read.
            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            rows, count, nulls = _batch_counts(batches, len(reader.schema))
            kind = "file"
        else:
            rows, count, nulls = _batch_counts(reader, len(reader.schema))
            kind = "stream"
            table.note_if_unended_stream()
        return {
            "ipc": kind,
            "rows": rows,
            "record_batches": count,
            "columns": _columns(reader.schema, nulls),
        }


def _batch_counts(batches: Iterable[pa.RecordBatch], width: int) -> tuple[int, int, list[int]]:
    """The rows, the record batches and each of ``width`` columns' nulls (:func:`_nulls`) of
    ``batches``, read one at a time and none kept."""
    rows = count = 0
    nulls = [0] * width
    for batch in batches:
        rows += batch.num_rows
        count += 1
        for i, column in enumerate(batch.columns):
            nulls[i] += _nulls(column)
    return rows, count, nulls


def _nulls(array: pa.Array) -> int:
    """Rows of ``array`` that are null: a dictionary's null entries count too where rows use
    them, as ``--by`` drops such rows (``null_count`` counts null indices only)."""
    import pyarrow.types as pt

    from segcli.io import arrow_kernels as kernels

    if not pt.is_dictionary(array.type) or not array.dictionary.null_count:
        return int(array.null_count)
    if pt.is_null(array.type.value_type):  # every row is null; and is_null crashes on it
        return len(array)
    # The sum of no rows is null, not 0.
    return int(kernels.total(kernels.is_null(array)).as_py() or 0)


def _text(path: str, fmt: str) -> dict[str, object]:
    return _text_table(open_table(path, fmt))


def _text_table(table: TableFile) -> dict[str, object]:
    """Rows, types and nulls as a whole read gives them (described as read, not used), read
    a block at a time."""
    facts = text_facts(table)
    return {"rows": facts.rows, "columns": _columns(facts.schema, facts.nulls)}


def _columns(schema: pa.Schema, nulls: list[int]) -> list[dict[str, object]]:
    return [
        {"name": field.name, "type": str(field.type), "nulls": int(count)}
        for field, count in zip(schema, nulls, strict=True)
    ]


_DESCRIBERS: dict[str, Callable[[str, str], dict[str, object]]] = {
    "npy": _npy,
    "npz": _npz,
    "parquet": _parquet,
    "arrow": _arrow,
    "csv": _text,
    "tsv": _text,
    "jsonl": _text,
}
