"""Readers and writers for segcli: ``.npy``, ``.npz``, Parquet, Arrow IPC, CSV/TSV and JSON.

pyarrow is imported only when a table format is used, so ``.npy`` work never loads it. The
names below load their module on first use: a run imports only the readers and writers it
uses (the streamed readers, the result reader and the atomic writer cost some 6 ms of every
start-up).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Bound now: the name is also its module's, which importing the module would put here instead.
from segcli.io.describe import describe

if TYPE_CHECKING:
    from segcli.io.atomic import atomic_output
    from segcli.io.chunked import UNKNOWN_ROWS, ChunkSource, open_arrow_stream_columns, open_chunked
    from segcli.io.commit import OutputSet
    from segcli.io.formats import output_format
    from segcli.io.read import ArrayInput, read_inputs
    from segcli.io.results import read_result_and_counts, read_result_table
    from segcli.io.tables import CsvOptions, check_delimiter, is_csv_path
    from segcli.io.text import format_text_lines, text_blocks
    from segcli.io.write import check_text_output, write_result

#: Each public name -> the module that defines it.
_HOMES = {
    "atomic_output": "atomic",
    "UNKNOWN_ROWS": "chunked",
    "ChunkSource": "chunked",
    "open_arrow_stream_columns": "chunked",
    "open_chunked": "chunked",
    "OutputSet": "commit",
    "output_format": "formats",
    "ArrayInput": "read",
    "read_inputs": "read",
    "read_result_and_counts": "results",
    "read_result_table": "results",
    "CsvOptions": "tables",
    "check_delimiter": "tables",
    "is_csv_path": "tables",
    "format_text_lines": "text",
    "text_blocks": "text",
    "check_text_output": "write",
    "write_result": "write",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value  # later uses are plain attribute lookups
    return value


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
    "read_result_and_counts",
    "read_result_table",
    "text_blocks",
    "write_result",
]
