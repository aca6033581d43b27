"""Key columns (``--by``): read whole or block by block, and turned into group ids.

A :class:`KeyIdsChunks` is a :class:`~segcli.io.chunked.ChunkSource` of int64 group ids: it reads
the key columns of a table file in blocks aligned with the data column's blocks and feeds each
to a :class:`~segcli.keys.KeyEncoder`, so a streamed run folds group ids as it folds user ids.

pyarrow is imported inside the functions, as in the rest of :mod:`segcli.io`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from segcli.errors import ReadError, UsageError
from segcli.io.chunked import (
    UNKNOWN_ROWS,
    TableChunks,
    _check_rows,
    not_utf8_error,
    type_change_error,
)
from segcli.io.column_names import listing
from segcli.io.formats import PipeSource, input_format
from segcli.io.sizes import whole_read_hint
from segcli.io.tables import CsvOptions, TableFile, open_table

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from segcli.keys import KeyEncoder

#: Formats whose columns ``--by`` can read.
KEY_FORMATS = ("parquet", "arrow", "csv", "tsv", "jsonl")


def key_table_file(path: str, csv: CsvOptions | None, *, one_pass: bool = False) -> TableFile:
    """The table DATA's columns and the key columns are read from; other formats: a UsageError.
    ``one_pass``: a streamed run's, which reads a table on a pipe in one pass (open_table)."""
    fmt = input_format(path)
    if fmt not in KEY_FORMATS:
        raise UsageError(
            f"--by reads key columns of a table (Parquet, Arrow, CSV/TSV, JSON lines); {path} "
            f"is {fmt}: give the ids as IDS instead"
        )
    return open_table(path, fmt, csv, one_pass=one_pass)


def check_key_columns(table: TableFile, by: Sequence[str]) -> None:
    """Every key column exists (reported as a missing --data-column is) and is named once."""
    for name in by:
        table.pick(name, "--by")


def pick_data_column(table: TableFile, column: str | None, by: Sequence[str]) -> str:
    """``--data-column``, or the table's only column that is not a key column."""
    if column is not None:
        return table.pick(column, "--data-column")
    rest = [name for name in table.column_names() if name not in by]
    if len(rest) == 1:
        return rest[0]
    if not rest:
        # No column to offer: name the option that picks one (a key column may be the data).
        raise UsageError(
            f"{table.label}: has no column besides the key columns ({listing(by)}); name "
            "the column to reduce with --data-column"
        )
    raise UsageError(
        f"{table.label}: has {len(rest)} columns besides the key columns; pick one with "
        f"--data-column (columns: {listing(rest)})"
    )


@dataclass(frozen=True)
class KeysRead:
    """Key columns read whole. ``table`` may hold string and binary columns as dictionaries
    (Parquet's own encoding, read as is); ``schema`` and ``nbytes`` are those of the columns
    as the file declares them, which the encoder's key table and the run's facts use."""

    table: pa.Table
    schema: pa.Schema
    nbytes: int


def read_data_and_keys(
    table: TableFile, column: str, by: Sequence[str]
) -> tuple[np.ndarray, KeysRead]:
    """The data column as NumPy (checked as any data column) and the key columns, in one read
    of the file."""
    [data], keys = read_columns_and_keys(table, [column], by)
    return data, keys


def read_columns_and_keys(
    table: TableFile, columns: Sequence[str], by: Sequence[str]
) -> tuple[list[np.ndarray], KeysRead]:
    """Data ``columns`` as NumPy and the key columns, in one read of the file."""
    from segcli.io.columns import ColumnRef, column_to_numpy, value_layout

    names = list(dict.fromkeys([*columns, *by]))
    if table.fmt == "parquet":
        read, schema = _read_parquet(table, names, by)
    else:
        read = table.read(names)
        table.check_text_types(read, columns)
        schema = read.select(list(by)).schema
    data = [
        column_to_numpy(
            read.column(column),
            ColumnRef(table.label, column),
            layout=value_layout(read.schema, column, table.label),
        )
        for column in columns
    ]
    keys = read.select(list(by))
    return data, KeysRead(keys, schema, _declared_nbytes(keys, schema))


def _read_parquet(
    table: TableFile, names: list[str], by: Sequence[str]
) -> tuple[pa.Table, pa.Schema]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with table.errors():
        declared = table.schema()
        schema = pa.schema([declared.field(name) for name in by])
        source = table.parquet_source()
        coded = dictionary_columns(pq.ParquetFile(source), schema)
        # No pre-buffering: see ParquetPass._read.
        parquet = pq.ParquetFile(source, read_dictionary=coded, pre_buffer=False)
        return parquet.read(columns=names), schema


#: Stored bytes a row below which a text column holds dictionary indices only: a plain string
#: takes at least its 4-byte length.
_DICTIONARY_ROW_BYTES = 4


def dictionary_columns(parquet: pq.ParquetFile, keys: pa.Schema) -> list[str]:
    """The text key columns worth reading as dictionaries: hashed once per distinct value, not
    once per row. Not those whose writer gave up on its dictionary (too many distinct values):
    the reader would hash their plain pages itself, and more slowly than the encoder."""
    metadata = parquet.metadata
    paths = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    coded = []
    for field in keys:
        column = paths.get(field.name)
        if not _is_text(field.type) or column is None:
            continue
        groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
        if all(
            group.column(column).has_dictionary_page
            and group.column(column).total_uncompressed_size
            < _DICTIONARY_ROW_BYTES * max(group.num_rows, 1)
            for group in groups
        ):
            coded.append(field.name)
    return coded


def _is_text(type_: pa.DataType) -> bool:
    import pyarrow.types as pt

    return bool(
        pt.is_string(type_)
        or pt.is_large_string(type_)
        or pt.is_binary(type_)
        or pt.is_large_binary(type_)
    )


class DeclaredBytes:
    """The bytes key columns would take in their declared types, block after block: what
    reading them so would hold.

    A column declared a dictionary counts its indices for every row and a dictionary once
    for each run of chunks that repeat it (equal values, as a file's row groups usually do),
    so that the count does not depend on how the rows were cut into blocks."""

    def __init__(self, schema: pa.Schema) -> None:
        self._types = list(schema.types)
        self._dictionaries: list[pa.Array | None] = [None] * len(self._types)
        self.total = 0

    def add(self, keys: pa.Table) -> int:
        """Count a block's key columns (in the schema's order); returns the running total."""
        import pyarrow.types as pt

        for j, (column, type_) in enumerate(zip(keys.columns, self._types, strict=True)):
            if not pt.is_dictionary(column.type):
                self.total += column.nbytes
            elif not pt.is_dictionary(type_):
                self.total += _text_nbytes(column, type_)
            else:
                for chunk in column.chunks:
                    self.total += chunk.nbytes - chunk.dictionary.nbytes
                    self.total += self._dictionary_bytes(j, chunk.dictionary)
        return self.total

    def _dictionary_bytes(self, column: int, dictionary: pa.Array) -> int:
        previous = self._dictionaries[column]
        self._dictionaries[column] = dictionary
        if previous is not None and previous.equals(dictionary):
            return 0
        return int(dictionary.nbytes)


def _declared_nbytes(keys: pa.Table, schema: pa.Schema) -> int:
    """The bytes of key columns read whole, as :class:`DeclaredBytes` counts them."""
    return DeclaredBytes(schema).add(keys)


def _text_nbytes(column: pa.ChunkedArray, type_: pa.DataType) -> int:
    """A dictionary column's bytes as one plain text column: validity, offsets and values."""
    import pyarrow.types as pt

    from segcli.io import arrow_kernels as kernels

    offsets = 8 if pt.is_large_string(type_) or pt.is_large_binary(type_) else 4
    total = offsets * len(column)
    for chunk in column.chunks:
        total += (len(chunk) + 7) // 8 if chunk.null_count else 0
        # The lengths in their own width (sum widens them): half the bytes of int64 to gather.
        lengths = kernels.binary_length(chunk.dictionary)
        shortest, longest = kernels.min_max(lengths).values()
        if not lengths.null_count and shortest.as_py() == longest.as_py():
            # Codes of one length (carriers, airports, ...): no row's length to gather.
            total += (shortest.as_py() or 0) * (len(chunk) - chunk.null_count)
            continue
        # A null row's index may be anything, so only a null-free chunk's gather is unchecked.
        gathered = kernels.take(lengths, chunk.indices, boundscheck=bool(chunk.null_count))
        total += int(kernels.total(gathered).as_py() or 0)
    return total


def read_keys_from(
    path: str,
    by: Sequence[str],
    data: TableFile | pa.Schema | None = None,
) -> pa.Table:
    """The ``--keys-from`` table: a table file holding at least the key columns, each once.

    A CSV/TSV keys file is read with its own format's defaults (``,``, a tab for ``.tsv``, a
    header line), as ``--keys-out`` writes it, whatever DATA's ``--delimiter`` and
    ``--no-input-header`` say. ``data`` (DATA's table, or its key columns' schema) gives the
    data's key types: a CSV/TSV keys file is read in them where it can be, since inferred
    types would turn sensor ids like ``007`` into the integer 7, and decimals into doubles,
    neither of which matches the data."""
    try:
        return _read_keys_table(path, by, data)
    except ReadError as error:
        # A missing or corrupt file names the option it was given to, as the other errors do.
        said = str(error)
        if not said.startswith("--keys-from "):
            error.args = (f"--keys-from {said}",)
        raise


def _read_keys_table(path: str, by: Sequence[str], data: TableFile | pa.Schema | None) -> pa.Table:
    fmt = input_format(path)
    if fmt not in KEY_FORMATS:
        raise UsageError(
            f"--keys-from {path}: need a Parquet, Arrow, CSV/TSV or JSON-lines table, not {fmt}"
        )
    table = open_table(path, fmt)
    names = table.schema().names
    missing = [name for name in by if name not in names]
    if missing:
        raise UsageError(
            f"--keys-from {path}: no column '{missing[0]}' (columns: {', '.join(names)})"
        )
    table.check_unique(by, f"--keys-from {path}")
    if fmt in ("csv", "tsv") and data is not None:
        from segcli.io.key_text import binary_from_hex, hex_as_text, unreadable_key

        schema = key_schema(data, by) if isinstance(data, TableFile) else data
        types = csv_readable_types(schema)
        # Binary keys are hex text, as the output writes them: read that text, then decode it.
        text_types = hex_as_text(types)
        try:
            keys = table.read(list(by), text_types)
        except ReadError:
            # A key that does not read as the data's type: name it, its column and its row.
            error = unreadable_key(path, table, text_types)
            if error is not None:
                raise error from None
        else:
            return binary_from_hex(path, keys, types)
    return table.read(list(by))


def csv_readable_types(schema: pa.Schema) -> dict[str, pa.DataType]:
    """The types of ``schema``'s columns that pyarrow's CSV reader converts text to."""
    import pyarrow as pa
    import pyarrow.types as pt

    types = {}
    for field in schema:
        type_ = (
            field.type.storage_type if isinstance(field.type, pa.BaseExtensionType) else field.type
        )
        type_ = type_.value_type if pt.is_dictionary(type_) else type_
        if pt.is_string_view(type_):
            type_ = pa.string()
        elif pt.is_binary_view(type_):
            type_ = pa.binary()
        # A column of nulls alone gives no type to read keys in: their own types are read.
        if not (pt.is_float16(type_) or pt.is_null(type_)):
            types[field.name] = type_
    return types


def key_schema(table: TableFile, by: Sequence[str]) -> pa.Schema:
    """The key columns' types as a streamed read gives them (text: inferred from its head,
    as the table's schema is: the head parsed once, not again for the key columns)."""
    import pyarrow as pa

    schema = table.schema()
    return pa.schema([schema.field(name) for name in by])


class KeyPass(Protocol):
    """A read of a table shared by its key columns and its data columns: its key columns'
    batches (a :class:`ParquetPass`, or a table on a pipe's
    :class:`~segcli.io.column_set.TableBatches`)."""

    def keys(self, rows: int) -> Iterator[pa.RecordBatch]: ...


#: Wraps an iterator of batches (the streaming driver reads them ahead on a thread).
Prefetch = Callable[[Generator["pa.RecordBatch", None, None]], Iterator["pa.RecordBatch"]]


class ParquetPass:
    """One read of a Parquet file's data column and key columns, shared by the two sources
    a streamed ``--by`` run reads in step (:class:`PassColumn` and :class:`KeyIdsChunks`).

    Each row group is opened and decoded once, the key columns in their dictionary encoding
    where that pays (:func:`dictionary_columns`), instead of once per source. A batch read
    for one source waits in the other's queue until it takes it: in step, about one batch.
    ``prefetch`` wraps the batches as they are read (the driver decodes them on a thread of
    their own, so that decoding overlaps encoding and folding)."""

    def __init__(
        self, table: TableFile, column: str, by: Sequence[str], prefetch: Prefetch | None = None
    ) -> None:
        self._table = table
        self.column = column
        self.by = list(by)
        self._prefetch = prefetch
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._rows = 0
        self._queues: dict[str, deque[Any]] = {"data": deque(), "keys": deque()}

    def data(self, rows: int) -> Iterator[pa.Array]:
        """The data column, batch by batch."""
        return self._take("data", rows)

    def keys(self, rows: int) -> Iterator[pa.RecordBatch]:
        """The key columns, batch by batch."""
        return self._take("keys", rows)

    def _take(self, which: str, rows: int) -> Iterator[Any]:
        queue = self._queues[which]
        while queue or self._pull(rows):
            yield queue.popleft()

    def _pull(self, rows: int) -> bool:
        if self._batches is None:
            self._rows = rows
            self._batches = self._read(rows)
            if self._prefetch is not None:
                self._batches = self._prefetch(self._batches)
        elif rows != self._rows:
            raise ValueError(f"both sources read {self._rows} rows a batch, not {rows}")
        batch = next(self._batches, None)
        if batch is None:
            return False
        self._queues["data"].append(batch.column(self.column))
        self._queues["keys"].append(batch.select(self.by))
        return True

    def _read(self, rows: int) -> Generator[pa.RecordBatch, None, None]:
        import pyarrow.parquet as pq

        schema = key_schema(self._table, self.by)
        source = self._table.parquet_source()
        coded = dictionary_columns(pq.ParquetFile(source), schema)
        # Pre-buffering reads every row group's column chunks ahead into fresh buffers: about
        # the file's size in resident memory, and more system time than decoding takes.
        parquet = pq.ParquetFile(source, read_dictionary=coded, pre_buffer=False)
        # A key column that is the data column too is read once, under both roles.
        names = list(dict.fromkeys([self.column, *self.by]))
        # One decoding thread: this read already runs on a thread of its own beside the
        # encoder and the fold, and Arrow's pool, handed a few small column chunks a batch,
        # spent up to 40% more CPU on them for no shorter wall time.
        yield from parquet.iter_batches(batch_size=rows, columns=names, use_threads=False)


class PassColumn(TableChunks):
    """The data column of a :class:`ParquetPass`: a ChunkSource like :class:`TableChunks`
    (the same checks and conversion), whose batches come from the shared read."""

    def __init__(self, table: TableFile, column: str, shared: ParquetPass) -> None:
        super().__init__(table, column)  # reads the first row on its own, for the dtype
        self._shared = shared

    def _batches(self, rows: int) -> Iterator[pa.Array]:
        shared = getattr(self, "_shared", None)
        if shared is None:  # the constructor's look at the first row
            yield from super()._batches(rows)
            return
        yield from shared.data(rows)


class KeyIdsChunks:
    """Group ids of a table's key columns, block by block: a ChunkSource of int64 ids.

    The first call of :meth:`chunks` encodes an empty block, so that a table without rows
    still fixes the key types; the encoder holds the groups once every block was read.
    ``shared``: the key columns come from that read of the file (and its data column).
    """

    def __init__(
        self,
        table: TableFile,
        by: Sequence[str],
        encoder: KeyEncoder,
        shared: KeyPass | None = None,
    ) -> None:
        self._table = table
        self._by = list(by)
        self.encoder = encoder
        self._shared = shared
        self.schema = key_schema(table, by)
        self.label = f"{table.label}:{','.join(self._by)}"
        self.dtype: np.dtype[Any] = np.dtype(np.int64)
        self.shape: tuple[int, ...] = (self._count_rows(),)
        #: Bytes of key columns read so far, for the run's input facts.
        self.bytes_read = 0

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        _check_rows(rows)
        self.encoder.declare(self.schema, self._table.label)
        declared = DeclaredBytes(self.schema)
        with self._table.errors():
            for block in _reblock_tables(self._batches(rows), rows):
                self.bytes_read = declared.add(block)
                yield self.encoder.encode(block, self._table.label)

    def _count_rows(self) -> int:
        if self._table.fmt == "parquet":
            import pyarrow.parquet as pq

            with self._table.errors():
                return int(pq.ParquetFile(self._table.parquet_source()).metadata.num_rows)
        if self._table.fmt == "arrow" and not isinstance(self._table.source, PipeSource):
            with self._table.errors():
                return self._table.ipc_rows()
        return UNKNOWN_ROWS  # text, or a stream on a pipe (counted, it would be read twice)

    def _batches(self, rows: int) -> Iterator[pa.RecordBatch]:
        if self._shared is not None:
            yield from self._shared.keys(rows)
        elif self._table.fmt == "parquet":
            import pyarrow.parquet as pq

            source = self._table.parquet_source()
            coded = dictionary_columns(pq.ParquetFile(source), self.schema)
            parquet = pq.ParquetFile(source, read_dictionary=coded, pre_buffer=False)
            yield from parquet.iter_batches(batch_size=rows, columns=self._by)
        elif self._table.fmt == "arrow":
            for batch in self._table.ipc_batches(self._by):
                yield batch.select(self._by)
        else:
            types = dict(zip(self.schema.names, self.schema.types, strict=True))
            try:
                yield from self._table.text_batches(self._by, None, types=types)
            except ValueError as exc:
                not_utf8 = not_utf8_error(self._table, exc)
                if not_utf8 is not None:
                    raise not_utf8 from None
                if _WIDENED_WHOLE.search(str(exc)) is None:
                    raise  # bad text, not a type: a whole read fails the same way
                named = type_change_error(self._table, exc, types=types)
                if named is not None:  # pyarrow's message named the value: its column and row
                    raise named from exc
                raise ReadError(
                    f"{self._table.label}: a key column holds a value its first rows' type "
                    f"cannot take ({str(exc).splitlines()[0]}); read the file whole "
                    f"({whole_read_hint(self._table.label)})"
                ) from exc


# A streamed text value that the type of its column's first block cannot take, where a whole
# read widens the column (whole numbers, then a fraction; nulls, then strings).
_WIDENED_WHOLE = re.compile(r"CSV conversion error|Failed to convert JSON|changes from null to")


def _reblock_tables(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Regroup record batches into tables of exactly ``rows`` rows but the last, so that key
    blocks line up with the data column's blocks."""
    import pyarrow as pa

    pending: list[pa.RecordBatch] = []
    have = 0
    for batch in batches:
        offset = 0
        while offset < batch.num_rows:
            take = min(rows - have, batch.num_rows - offset)
            pending.append(batch.slice(offset, take))
            have += take
            offset += take
            if have == rows:
                yield pa.Table.from_batches(pending)
                pending, have = [], 0
    if pending:
        yield pa.Table.from_batches(pending)
