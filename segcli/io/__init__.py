"""Readers and writers for segcli: ``.npy``, ``.npz``, Parquet, Arrow IPC, CSV/TSV and JSON.

pyarrow is imported only when a table format is used, so ``.npy`` work never loads it.
"""

from __future__ import annotations

from segcli.io.atomic import atomic_output
from segcli.io.chunked import UNKNOWN_ROWS, ChunkSource, open_arrow_stream_columns, open_chunked
from segcli.io.commit import OutputSet
from segcli.io.describe import describe
from segcli.io.formats import output_format
from segcli.io.read import ArrayInput, read_inputs
from segcli.io.results import read_result_table
from segcli.io.tables import CsvOptions, check_delimiter, is_csv_path
from segcli.io.text import format_text_lines, text_blocks
from segcli.io.write import check_text_output, write_result

__all__ = [
    "UNKNOWN_ROWS",
    "ArrayInput",
    "ChunkSource",
    "CsvOptions",
    "OutputSet",
    "atomic_output",
    "check_delimiter",
    "check_text_output",
    "describe",
    "format_text_lines",
    "is_csv_path",
    "open_arrow_stream_columns",
    "open_chunked",
    "output_format",
    "read_inputs",
    "read_result_table",
    "text_blocks",
    "write_result",
]
