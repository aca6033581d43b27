"""``describe``: what ``segcli info FILE`` shows, read from headers and metadata where possible."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from segcli.io.formats import file_size, input_format, open_binary
from segcli.io.npy import npz_keys, open_npz, read_header, read_npz_header
from segcli.io.tables import TableFile, open_table

if TYPE_CHECKING:
    import pyarrow as pa


def describe(path: str) -> dict[str, object]:
    """Format, size in bytes and the layout of ``path``, without reading array data.

    npy: ``shape``, ``dtype``, ``fortran_order``; npz: ``arrays`` (per key the same three);
    parquet: ``rows``, ``row_groups``, ``columns``; arrow: ``rows``, ``record_batches``,
    ``ipc`` ("file" or "stream"), ``columns``; csv/tsv: ``rows``, ``columns`` (the file is
    parsed). ``columns`` is a list of ``{"name": ..., "type": ...}``.
    """
    fmt = input_format(path)
    info: dict[str, object] = {"path": path, "format": fmt, "size": file_size(path)}
    info.update(_DESCRIBERS[fmt](path, fmt))
    return info


def _npy(path: str, fmt: str) -> dict[str, object]:
    with open_binary(path) as f:
        return read_header(f, path).as_dict()


def _npz(path: str, fmt: str) -> dict[str, object]:
    with open_npz(path) as archive:
        arrays = {
            key: read_npz_header(archive, key, f"{path}:{key}").as_dict()
            for key in npz_keys(archive)
        }
    return {"arrays": arrays}


def _parquet(path: str, fmt: str) -> dict[str, object]:
    import pyarrow.parquet as pq

    table = open_table(path, fmt)
    with table.errors():
        parquet = pq.ParquetFile(path)
        meta = parquet.metadata
        return {
            "rows": meta.num_rows,
            "row_groups": meta.num_row_groups,
            "columns": _columns(parquet.schema_arrow),
        }


def _arrow(path: str, fmt: str) -> dict[str, object]:
    import pyarrow.ipc as ipc

    table = open_table(path, fmt)
    with table.errors():
        reader = table.ipc_reader()
        if isinstance(reader, ipc.RecordBatchFileReader):
            # The file is memory-mapped: a batch's row count costs no data read.
            batches = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
            kind = "file"
        else:
            batches = [batch.num_rows for batch in reader]
            kind = "stream"
        return {
            "ipc": kind,
            "rows": sum(batches),
            "record_batches": len(batches),
            "columns": _columns(reader.schema),
        }


def _csv(path: str, fmt: str) -> dict[str, object]:
    table: TableFile = open_table(path, fmt)
    data = table.read(table.schema().names)
    return {"rows": data.num_rows, "columns": _columns(data.schema)}


def _columns(schema: pa.Schema) -> list[dict[str, str]]:
    return [{"name": field.name, "type": str(field.type)} for field in schema]


_DESCRIBERS: dict[str, Callable[[str, str], dict[str, object]]] = {
    "npy": _npy,
    "npz": _npz,
    "parquet": _parquet,
    "arrow": _arrow,
    "csv": _csv,
    "tsv": _csv,
}
