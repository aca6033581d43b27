"""Several columns of one table read together, in one read of the file (``segcli agg
--data-column a,b``): whole (:func:`read_columns`), or as row blocks in step
(:class:`TableBatches`).

A streamed table is one stream of record batches holding every column the run needs (the data
columns and, from the same table, the ids); each column is a
:class:`~segcli.io.chunked.ChunkSource` that takes its arrays from those batches. A batch is
kept for each column until that column takes it, so a caller that reads the columns' blocks in
step holds about one batch at a time. Blocks are converted, checked and re-blocked exactly as
the one-column readers of :mod:`segcli.io.chunked` do, so that they hold the same rows.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli.io.chunked import (
    UNKNOWN_ROWS,
    ChunkSource,
    LaterNulls,
    _reblock,
    _same_inner_shape,
    text_column_again,
    text_type_kept,
)
from segcli.io.columns import (
    ColumnRef,
    NullTally,
    check_text_type,
    check_type,
    column_to_numpy,
    sample_to_numpy,
    shape_row,
    value_layout,
)
from segcli.io.formats import input_format, is_pipe
from segcli.io.read import DATA_ROLE, IDS_ROLE, ArrayInput, Role, refuse_option
from segcli.io.tables import CSV_HEAD_BYTES, CsvOptions, TableFile, open_table, streams_from_pipe

if TYPE_CHECKING:
    import pyarrow as pa

_Array = np.ndarray[Any, Any]

#: Rows per Parquet batch until a column asks for its blocks (then the block's rows), and bytes
#: of text per CSV block: the shared stream's own batching (each column re-blocks to the rows
#: a run asks for).
_PARQUET_BATCH_ROWS = 1 << 16
_CSV_BLOCK_BYTES = 1 << 18


def read_columns(table: TableFile, path: str, names: list[str]) -> list[ArrayInput]:
    """``names`` of ``table`` (read from ``path``, ``-`` for stdin) in one read; a name given
    twice is read once."""
    unique = list(dict.fromkeys(names))
    arrays = dict(zip(unique, table.arrays(unique), strict=True))
    return [
        ArrayInput(arrays[name], f"{table.label}:{name}", path, table.fmt, table.note(name))
        for name in names
    ]


def open_data_and_ids(
    path: str,
    data_column: str | None,
    ids_column: str | None,
    *,
    data_key: str | None = None,
    ids_key: str | None = None,
    csv: CsvOptions | None = None,
) -> list[ChunkSource] | None:
    """DATA and IDS as two columns of one Parquet file streamed together (one read of each
    row group, the two columns decoded side by side, in batches of the run's blocks), or of
    one table on a pipe that streams (:func:`~segcli.io.tables.streams_from_pipe`: read once,
    for both); None for any other input: the one-column readers of :mod:`segcli.io.chunked`
    take those."""
    if path == "-":
        return None
    fmt = input_format(path)
    if not (streams_from_pipe(path, fmt) if is_pipe(path) else fmt == "parquet"):
        return None
    table = open_table(path, fmt, csv, one_pass=True)
    # The options are checked as the one-column readers check them: DATA's first.
    refuse_option(DATA_ROLE.key_option, data_key, path)
    data = table.pick(data_column, DATA_ROLE.column_option)
    refuse_option(IDS_ROLE.key_option, ids_key, path)
    ids = table.pick(ids_column, IDS_ROLE.column_option)
    return TableBatches(table, [data, ids]).sources


def open_pipe_column(
    path: str, column: str | None, key: str | None, role: Role, csv: CsvOptions | None
) -> ChunkSource | None:
    """One column of a table on a pipe that streams, read in one pass (the one-column reader
    of an Arrow file counts its rows first, a pass of its own); None for any other input."""
    if path == "-" or not is_pipe(path):
        return None
    fmt = input_format(path)
    if not streams_from_pipe(path, fmt):
        return None
    table = open_table(path, fmt, csv, one_pass=True)
    refuse_option(role.key_option, key, path)
    return TableBatches(table, [table.pick(column, role.column_option)]).sources[0]


class TableBatches:
    """The record batches of a Parquet, Arrow IPC or text (CSV/TSV, JSON lines) file holding
    ``names``, read once; :attr:`sources` has one ChunkSource per name, in order (a name may
    come twice). ``keys``: key columns (``--by``) read in the same pass, unchecked, for
    :meth:`keys` (a table on a pipe, which gives its bytes once)."""

    def __init__(self, table: TableFile, names: list[str], keys: Sequence[str] = ()) -> None:
        self._table = table
        self._columns = list(dict.fromkeys(names))
        self._keys = list(keys)
        self._read_names = list(dict.fromkeys([*self._columns, *self._keys]))
        self._key_queue: deque[pa.RecordBatch] = deque()
        self._keys_fed = bool(self._keys)
        schema = table.schema()
        with table.errors():
            self._types = self._column_types(schema)
        for name in self._columns:
            check_type(self._types[name], ColumnRef(table.label, name))
        self._queues: list[tuple[str, list[pa.Array]]] = [(name, []) for name in names]
        self._all = list(self._queues)
        self._rows_read = 0
        self._later: LaterNulls | None = None
        self._batches: Iterator[Any] | None = None
        self._batch_rows = _PARQUET_BATCH_ROWS
        with table.errors():
            rows = self._count_rows()
            first = self._first_rows()  # they fix each column's inner shape and dtype
        self.sources: list[ChunkSource] = [
            _BatchColumn(self, name, queue, schema, rows, first.get(name))
            for name, queue in self._queues
        ]

    def _first_rows(self) -> dict[str, pa.Array]:
        """Each column's first rows where its type leaves its inner shape open (a list's first
        row has the length of every row); none for a Parquet file of plain columns, whose
        types say it all. That file's shared stream then opens at the first block, in batches
        of the block's rows (a block joined from smaller batches is one more copy, and 16
        batches per block cost as much CPU as decoding it)."""
        import pyarrow.types as pt

        lists = (pt.is_list, pt.is_large_list, pt.is_fixed_size_list)
        if self._table.fmt == "parquet" and not any(
            is_list(type_) for type_ in self._types.values() for is_list in lists
        ):
            return {}
        self._pull()
        return {name: queue[0] for name, queue in self._queues if queue}

    def asked_rows(self, rows: int) -> None:
        """A column asks for blocks of ``rows``: a Parquet stream not open yet reads batches of
        that size."""
        if self._batches is None:
            self._batch_rows = rows

    def _column_types(self, schema: pa.Schema) -> dict[str, pa.DataType]:
        if self._table.is_text:
            # Inferred from the first block of text and then kept, as a one-column stream does.
            head = self._table.text_head(self._read_names, CSV_HEAD_BYTES)
            for name in self._columns:
                check_text_type(
                    head.column(name),
                    ColumnRef(self._table.label, name),
                    text_column_again(self._table, name),
                )
            self._table.check_not_rounded(head)
            return {name: head.schema.field(name).type for name in self._read_names}
        return {name: schema.field(name).type for name in self._read_names}

    def _count_rows(self) -> int:
        fmt = self._table.fmt
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(self._table.parquet_source()).metadata.num_rows)
        if fmt == "arrow":
            import pyarrow.ipc as ipc

            if isinstance(self._table.ipc_reader(), ipc.RecordBatchFileReader):
                return self._table.ipc_rows()
        return UNKNOWN_ROWS

    def _open(self) -> Iterator[Any]:
        fmt = self._table.fmt
        if fmt == "parquet":
            import pyarrow.parquet as pq

            parquet = pq.ParquetFile(self._table.parquet_source(), pre_buffer=False)
            return iter(parquet.iter_batches(batch_size=self._batch_rows, columns=self._read_names))
        if fmt == "arrow":
            return self._table.ipc_batches(self._read_names)
        return iter(self._table.text_batches(self._read_names, _CSV_BLOCK_BYTES, types=self._types))

    def _pull(self) -> bool:
        """Read the next batch into every column's queue; False at the end of the file."""
        if self._batches is None:
            self._batches = self._open()
        with self._type_kept():
            batch = next(self._batches, None)
        if batch is None:
            return False
        for name, queue in self._queues:
            queue.append(batch.column(name))
        if self._keys_fed:
            self._key_queue.append(batch.select(self._keys))
        if self._later is not None:
            self._later.add(batch)
        self._rows_read += batch.num_rows
        return True

    def arrays(self, queue: list[pa.Array]) -> Iterator[pa.Array]:
        while queue or self._pull():
            yield queue.pop(0)

    def keys(self, rows: int) -> Iterator[pa.RecordBatch]:
        """The key columns, batch by batch (``rows``: the blocks' rows)."""
        self.asked_rows(rows)
        while self._key_queue or self._pull():
            if self._key_queue:
                yield self._key_queue.popleft()

    def feed_only(self, queue: list[pa.Array]) -> NullTally | None:
        """Batches read from now on go to ``queue`` alone: its column met a null, which fails
        the run, and counts the rest of the file; the other columns' queues must not grow to
        the rest of the file meanwhile, but their nulls are counted (:class:`LaterNulls`), for
        one whose queued block holds an earlier null. Returns those counted for ``queue``'s
        column, if another column failed first."""
        if self._later is None:
            others = [
                (name, kept, ColumnRef(self._table.label, name))
                for name, kept in self._queues
                if kept is not queue
            ]
            self._later = LaterNulls(others, self._rows_read)
        self._queues = [(name, kept) for name, kept in self._all if kept is queue]
        self._keys_fed = False  # the run fails: its keys are not encoded further
        self._key_queue.clear()
        return self._later.take(queue)

    def _type_kept(self) -> contextlib.AbstractContextManager[None]:
        return text_type_kept(self._table)


class _BatchColumn:
    """One column of a :class:`TableBatches`, as a ChunkSource."""

    def __init__(
        self,
        owner: TableBatches,
        name: str,
        queue: list[pa.Array],
        schema: pa.Schema,
        rows: int,
        first_rows: pa.Array | None,
    ) -> None:
        import pyarrow as pa

        table = owner._table
        self._owner, self._queue = owner, queue
        self._where = ColumnRef(table.label, name)
        self._layout = None if table.is_text else value_layout(schema, name, table.label)
        self.label = self._where.label
        self.note = table.note(name)
        # pa.nulls, not pa.array([]): the latter imports pandas (0.2 s) to look at a list.
        first = (
            pa.nulls(0, type=owner._types[name])
            if first_rows is None
            else shape_row([first_rows], first_rows.slice(0, 1))
        )
        sample = sample_to_numpy(first, self._where, self._layout)
        self.shape: tuple[int, ...] = (rows, *sample.shape[1:])
        self.dtype: np.dtype[Any] = sample.dtype

    def chunks(self, rows: int) -> Iterator[_Array]:
        """Blocks of exactly ``rows`` rows but the last, checked for nulls and inner shape."""
        if rows < 1:
            raise ValueError(f"rows must be at least 1, got {rows}")
        self._owner.asked_rows(rows)
        with self._owner._table.errors():
            yield from _same_inner_shape(
                _reblock(self._owner.arrays(self._queue), rows),
                self._where,
                self.shape,
                lambda piece, start: column_to_numpy(
                    piece, self._where, first_row=start, layout=self._layout
                ),
                on_nulls=lambda: self._owner.feed_only(self._queue),
            )
