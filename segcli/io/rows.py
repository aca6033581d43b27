"""Row ranges of one input file, read without the rows before them where the format allows.

A :class:`FileRef` is what a reader needs to find one array again (in another process, such as
a Dask worker): its path, format, column or key, and the shape and dtype its metadata declared
when it was opened (:func:`open_file`, which reads no rows). :func:`read_rows` then reads rows
``[start, stop)``: ``.npy`` at a byte offset, Parquet by row group, other formats by streaming
the file and keeping the range. A file that no longer matches its metadata is a ReadError.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli.errors import ReadError, SegcliError
from segcli.io.chunked import open_chunked
from segcli.io.columns import ColumnRef, column_to_numpy, value_layout, widened_null_lists
from segcli.io.formats import input_format, library_errors, open_binary
from segcli.io.npy import read_header, read_npy_rows_at

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class FileRef:
    """One input file as a reader needs it: where it is, which array, its shape and dtype."""

    path: str
    fmt: str
    #: What error messages call it: ``ids-003.npy``, ``part-3.parquet:seg``.
    label: str
    column: str | None
    key: str | None
    role: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    #: Parquet only: the rows of each row group, in order.
    row_groups: tuple[int, ...] = ()
    #: How the values are converted on reading, e.g. "decimal128(10, 2) read as float64".
    note: str | None = None
    #: The path as the user gave it, where ``path`` was made absolute for other machines (a
    #: Dask worker's working directory is its own); errors name this one.
    typed_path: str | None = None

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def shown_path(self) -> str:
        """The path error messages give: as the user typed it."""
        return self.typed_path or self.path


@contextlib.contextmanager
def typed_errors(ref: FileRef) -> Iterator[None]:
    """An error of reading ``ref`` names its path as typed, not the absolute path read."""
    try:
        yield
    except SegcliError as error:
        if ref.typed_path and error.args and isinstance(error.args[0], str):
            error.args = (error.args[0].replace(ref.path, ref.typed_path), *error.args[1:])
        raise


def open_file(path: str, *, column: str | None, key: str | None, role: str) -> FileRef:
    """Read one file's metadata (shape, dtype, row groups) without reading its rows."""
    fmt = input_format(path)
    source = open_chunked(path, column=column, key=key, role=role)
    row_groups: tuple[int, ...] = ()
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with library_errors(path, "not a valid Parquet file"):
            meta = pq.ParquetFile(path).metadata
            row_groups = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    # The reader's label is ``path:column`` (or ``path:key``): what it picked, said once.
    picked = source.label[len(path) + 1 :] if source.label.startswith(f"{path}:") else None
    return FileRef(
        path=path,
        fmt=fmt,
        label=source.label,
        column=picked if fmt in ("parquet", "arrow") else None,
        key=picked if fmt == "npz" else None,
        role=role,
        shape=tuple(source.shape),
        dtype=np.dtype(source.dtype),
        row_groups=row_groups,
        note=getattr(source, "note", None),
    )


def read_rows(ref: FileRef, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of one file."""
    with typed_errors(ref):
        return _read_rows(ref, start, stop)


def _read_rows(ref: FileRef, start: int, stop: int) -> np.ndarray:
    if start == stop:
        return np.empty((0, *ref.shape[1:]), ref.dtype)
    if ref.fmt == "npy":
        return _read_npy(ref, start, stop)
    if ref.fmt == "parquet":
        [array] = _read_parquet_rows(ref, [ref], start, stop)
        return array
    return _read_whole(ref, start, stop)


def _changed(ref: FileRef, what: str) -> ReadError:
    return ReadError(f"{ref.label}: changed since the run was planned ({what})")


def _read_npy(ref: FileRef, start: int, stop: int) -> np.ndarray:
    """A row range of a ``.npy`` file: seeks past the header and earlier rows."""
    with open_binary(ref.path) as f:
        header = read_header(f, ref.label)
        if header.shape != ref.shape:
            raise _changed(ref, f"shape {list(header.shape)}, was {list(ref.shape)}")
        return read_npy_rows_at(f, header, f.tell(), start, stop - start, ref.label)


def read_parquet_rows(
    file: FileRef, columns: list[FileRef], start: int, stop: int
) -> list[np.ndarray]:
    """A row range of some columns of one Parquet file, reading only the row groups it spans."""
    with typed_errors(file):
        return _read_parquet_rows(file, columns, start, stop)


def _read_parquet_rows(
    file: FileRef, columns: list[FileRef], start: int, stop: int
) -> list[np.ndarray]:
    import pyarrow.parquet as pq

    groups, skip = _covering_groups(file.row_groups, start, stop)
    with library_errors(file.path, "not a valid Parquet file"):
        table = pq.ParquetFile(file.path, pre_buffer=False).read_row_groups(
            groups,
            columns=list(dict.fromkeys(ref.column for ref in columns)),
            use_threads=False,
        )
        table = table.slice(skip, stop - start)
        arrays = []
        for ref in columns:
            assert ref.column is not None
            where = ColumnRef(file.path, ref.column)
            array = column_to_numpy(
                table.column(ref.column),
                where,
                first_row=start,
                layout=value_layout(table.schema, ref.column, file.path),
            )
            array = widened_null_lists(array, table.column(ref.column), ref.shape[1:])
            if array.shape[1:] != ref.shape[1:]:
                raise where.fail(
                    f"rows from {start} have inner shape {list(array.shape[1:])}, "
                    f"earlier rows {list(ref.shape[1:])}"
                )
            arrays.append(array)
    if len(arrays[0]) != stop - start:
        raise _changed(file, f"{start + len(arrays[0])} rows, was {file.rows}")
    return arrays


def read_key_rows(ref: FileRef, by: Sequence[str], start: int, stop: int) -> pa.Table:
    """Rows ``[start, stop)`` of the key columns ``by`` of a table file, as Arrow (``--by``):
    Parquet by row group, other tables read whole and sliced."""
    with typed_errors(ref):
        return _read_key_rows(ref, by, start, stop)


def _read_key_rows(ref: FileRef, by: Sequence[str], start: int, stop: int) -> pa.Table:
    if ref.fmt == "parquet":
        import pyarrow.parquet as pq

        groups, skip = _covering_groups(ref.row_groups, start, stop)
        with library_errors(ref.path, "not a valid Parquet file"):
            table = pq.ParquetFile(ref.path, pre_buffer=False).read_row_groups(
                groups, columns=list(by), use_threads=False
            )
    else:
        from segcli.io.tables import open_table

        table, skip = open_table(ref.path, ref.fmt).read(list(by)).select(list(by)), start
    keys = table.slice(skip, stop - start)
    if keys.num_rows != stop - start:
        raise _changed(ref, f"{start + keys.num_rows} rows, was {ref.rows}")
    return keys


def _covering_groups(groups: tuple[int, ...], start: int, stop: int) -> tuple[list[int], int]:
    """The row groups that hold rows ``[start, stop)``, and the rows to skip in the first."""
    chosen: list[int] = []
    first_row = skip = 0
    for index, size in enumerate(groups):
        end = first_row + size
        if end > start and first_row < stop:
            if not chosen:
                skip = start - first_row
            chosen.append(index)
        first_row = end
    return chosen, skip


def _read_whole(ref: FileRef, start: int, stop: int) -> np.ndarray:
    """Formats without random access (``.npz``, Arrow): stream the file, keep the range."""
    source = open_chunked(ref.path, column=ref.column, key=ref.key, role=ref.role)
    blocks, seen = [], 0
    for block in source.chunks(max(ref.rows, 1)):
        lo, hi = max(start - seen, 0), min(stop - seen, len(block))
        if lo < hi:
            blocks.append(block[lo:hi])
        seen += len(block)
    if seen != ref.rows:
        raise _changed(ref, f"{seen} rows, was {ref.rows}")
    return np.concatenate(blocks) if len(blocks) != 1 else blocks[0]
