"""Parquet, Arrow IPC and CSV/TSV tables: schema, column choice and column reads.

pyarrow is imported inside the functions so that ``.npy`` work never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli.errors import UsageError
from segcli.io.columns import ColumnRef, column_to_numpy, value_layout
from segcli.io.formats import (
    ARROW_FILE_MAGIC,
    check_readable,
    is_pipe,
    library_errors,
    open_binary,
)

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.ipc as ipc

_WHAT = {
    "parquet": "not a valid Parquet file",
    "arrow": "not a valid Arrow IPC file",
    "csv": "cannot parse CSV",
    "tsv": "cannot parse TSV",
}
# Columns pandas adds for its index: never the column a user means.
_PANDAS_INDEX_PREFIX = "__index_level_"


@dataclass(frozen=True)
class TableFile:
    """A table to read columns from: a file path, or the bytes of an Arrow stream from stdin."""

    label: str
    fmt: str
    source: str | bytes

    def schema(self) -> pa.Schema:
        """The table's schema, read from metadata where the format has it."""
        with self.errors():
            if self.fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.ParquetFile(self.parquet_source()).schema_arrow
            if self.fmt == "arrow":
                return self.ipc_reader().schema
            return self._csv_stream().schema

    def read(self, columns: list[str]) -> pa.Table:
        """Read only ``columns`` (all of them for Arrow IPC, which is memory-mapped anyway)."""
        with self.errors():
            if self.fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.ParquetFile(self.parquet_source()).read(columns=columns)
            if self.fmt == "arrow":
                return self.ipc_reader().read_all().select(columns)
            import pyarrow.csv as pcsv

            options = pcsv.ConvertOptions(include_columns=columns)
            return pcsv.read_csv(
                self._input(), parse_options=self.parse_options(), convert_options=options
            )

    def ipc_reader(self) -> ipc.RecordBatchFileReader | ipc.RecordBatchStreamReader:
        """Open the Arrow IPC file or stream (told apart by the file magic)."""
        import pyarrow.ipc as ipc

        source = self._input()
        head = source.read(len(ARROW_FILE_MAGIC))
        source.seek(0)
        if head == ARROW_FILE_MAGIC:
            return ipc.open_file(source)
        return ipc.open_stream(source)

    def parse_options(self) -> pcsv.ParseOptions:
        """CSV parse options: the delimiter is a tab for TSV."""
        import pyarrow.csv as pcsv

        return pcsv.ParseOptions(delimiter="\t" if self.fmt == "tsv" else ",")

    def column_names(self) -> list[str]:
        """Column names a user may pick (pandas index columns left out)."""
        return [n for n in self.schema().names if not n.startswith(_PANDAS_INDEX_PREFIX)]

    def pick(self, column: str | None, option: str) -> str:
        """``column`` if the table has it, else the table's only column, else a UsageError."""
        names = self.column_names()
        listing = ", ".join(names) if names else "none"
        if column is not None:
            if column not in self.schema().names:
                raise UsageError(f"{self.label}: no column '{column}' (columns: {listing})")
            return column
        if len(names) == 1:
            return names[0]
        raise UsageError(
            f"{self.label}: has {len(names)} columns; pick one with {option} (columns: {listing})"
        )

    def arrays(self, columns: list[str]) -> list[np.ndarray[Any, Any]]:
        """Read ``columns`` and convert each to NumPy (checked for type and nulls)."""
        table = self.read(columns)
        return [
            column_to_numpy(
                table.column(name),
                ColumnRef(self.label, name),
                layout=value_layout(table.schema, name, self.label),
            )
            for name in columns
        ]

    def parquet_source(self) -> str | pa.NativeFile:
        # Parquet needs to seek: bytes from a pipe are read from memory, a path from the file.
        return self._input() if isinstance(self.source, bytes) else self.source

    def _input(self) -> pa.NativeFile:
        import pyarrow as pa

        if isinstance(self.source, bytes):
            return pa.BufferReader(pa.py_buffer(self.source))
        if self.fmt == "arrow":
            return pa.memory_map(self.source)  # batches then convert zero-copy from the map
        return pa.input_stream(self.source)  # decompresses .csv.gz and friends by name

    def _csv_stream(self) -> pcsv.CSVStreamingReader:
        import pyarrow.csv as pcsv

        return pcsv.open_csv(self._input(), parse_options=self.parse_options())

    def errors(self) -> Any:
        """Context manager: library exceptions become one-line ReadErrors about this table."""
        return library_errors(self.label, _WHAT[self.fmt])


def open_table(path: str, fmt: str) -> TableFile:
    """A :class:`TableFile` for a path, failing early with 'no such file' if it is missing."""
    if is_pipe(path):  # read once, into memory, since Parquet and Arrow files need to seek
        with open_binary(path) as stream:
            return TableFile(path, fmt, stream.read())
    check_readable(path)
    return TableFile(path, fmt, path)
