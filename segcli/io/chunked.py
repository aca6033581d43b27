"""Streaming readers: an input as consecutive row blocks, for files larger than memory.

Every source yields blocks of exactly ``rows`` rows except the last, whatever the file's own
batching (Parquet row groups, Arrow record batches), so that DATA and IDS read from different
files with the same ``rows`` line up block by block.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from segcli.errors import (
    InvalidInputError,
    NotStreamableError,
    ReadError,
    SegcliError,
    UsageError,
)
from segcli.io.column_names import listing
from segcli.io.columns import (
    ColumnRef,
    NullsError,
    NullTally,
    check_text_type,
    check_type,
    check_utf8,
    column_to_numpy,
    is_number_text,
    sample_to_numpy,
    shape_row,
    value_layout,
    widened_null_lists,
)
from segcli.io.formats import (
    TailKept,
    elided,
    input_format,
    is_pipe,
    library_errors,
    note_if_unended,
    one_line,
    open_binary,
)
from segcli.io.npy import (
    NpyHeader,
    Readable,
    SeekableReadable,
    allocate,
    arrived_rows,
    check_claim,
    check_supported_dtype,
    open_member,
    open_npz,
    pick_key,
    read_header,
    read_npy_rows,
    read_npy_rows_at,
    readinto_exact,
    to_native,
)
from segcli.io.read import DATA_ROLE, IDS_ROLE, Role, refuse_option
from segcli.io.sizes import whole_read_hint
from segcli.io.tables import (
    CSV_HEAD_BYTES,
    CsvOptions,
    TableFile,
    data_column_list_hint,
    open_table,
)

if TYPE_CHECKING:
    import pyarrow as pa

_Array = np.ndarray[Any, Any]
_Opener = Callable[[], contextlib.AbstractContextManager[Readable]]
#: Rows per batch when a column's nulls are only counted, not converted.
_COUNTED_ROWS = 65_536


class ChunkSource(Protocol):
    """An input read as consecutive blocks of rows along axis 0."""

    label: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    def chunks(self, rows: int) -> Iterator[_Array]:
        """Blocks of ``rows`` rows (the last may be shorter), ``shape[0]`` rows in all."""
        ...


def open_chunked(
    path: str,
    *,
    column: str | None = None,
    key: str | None = None,
    role: str | Role = "data",
    stdin: Readable | None = None,
    csv: CsvOptions | None = None,
) -> ChunkSource:
    """Open ``path`` for streaming; ``column`` picks a table column, ``key`` an npz array.

    ``role`` ("data", "ids" or another input's :class:`Role`, such as ``--indices``'s) only
    chooses the option names error messages suggest. The
    header or metadata is read now, so shape and dtype errors come before any data is read.
    Text tables (CSV/TSV split as ``csv`` says, JSON lines) are parsed block by block; their
    length is known only at their end. ``-`` streams a ``.npy`` from ``stdin`` (an Arrow
    stream on stdin is read whole by ``read_inputs``).
    """
    if path == "-":
        if stdin is None:
            raise UsageError("streaming from stdin ('-') needs the stream")
        return NpyStreamChunks("<stdin>", stdin)
    options = role if isinstance(role, Role) else IDS_ROLE if role == "ids" else DATA_ROLE
    fmt = input_format(path)
    if fmt in ("npy", "npz"):
        refuse_option(options.column_option, column, path)
    if fmt == "npy":
        refuse_option(options.key_option, key, path)
        if is_pipe(path):  # ``<(cat x.npy)``: one pass, like stdin
            return NpyStreamChunks(path, open_binary(path))
        return NpyChunks(path, lambda: open_binary(path), seekable=True)
    if fmt == "npz":
        with open_npz(path) as archive:
            chosen = pick_key(archive, key, path, options.key_option)
        return NpyChunks(f"{path}:{chosen}", lambda: _npz_member(path, chosen), seekable=False)
    refuse_option(options.key_option, key, path)
    table = open_table(path, fmt, csv)
    name = table.pick(column, options.column_option)
    if table.is_text:
        return TextChunks(table, name)
    return TableChunks(table, name)


def _check_rows(rows: int) -> None:
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")


class NpyChunks:
    """Row blocks of a ``.npy`` file or ``.npz`` member, read with ``readinto``.

    Only one block is allocated at a time, so memory stays bounded by the block size (plus
    whatever blocks the caller keeps). A block of a Fortran-order array is a piece of every
    column, read with a seek per column (:func:`read_npy_rows_at`), which only a plain file
    affords: a compressed archive member would be decompressed again from its start for every
    block.
    """

    def __init__(self, label: str, opener: _Opener, *, seekable: bool) -> None:
        self.label = label
        self._opener = opener
        with opener() as f:
            header = read_header(f, label)
            if seekable:  # a header's claim beyond the file is found before any block is read
                seekable_file = cast(SeekableReadable, f)
                body = seekable_file.tell()
                check_claim(header, seekable_file.seek(0, os.SEEK_END) - body, label)
        check_supported_dtype(header, label)
        if not header.shape:
            raise InvalidInputError(f"{label}: holds a scalar; need at least one axis to stream")
        self._by_columns = header.fortran_order and len(header.shape) > 1
        if self._by_columns and not seekable:
            raise NotStreamableError(
                f"{label}: cannot stream a Fortran-order array from an .npz archive "
                f"(shape {list(header.shape)}); save it in C order or as a .npy file"
            )
        self._header: NpyHeader = header
        self.shape: tuple[int, ...] = header.shape
        self.dtype: np.dtype[Any] = header.dtype.newbyteorder("=")

    def chunks(self, rows: int) -> Iterator[_Array]:
        """Blocks of ``rows`` rows, each freshly allocated (the caller may keep them)."""
        _check_rows(rows)
        total = self.shape[0]
        with self._opener() as f:
            read_header(f, self.label)  # positions the stream at the data
            if self._by_columns:  # a seek per column and block
                seekable = cast(SeekableReadable, f)
                body = seekable.tell()
                for start in range(0, total, rows):
                    count = min(rows, total - start)
                    yield read_npy_rows_at(seekable, self._header, body, start, count, self.label)
                return
            for start in range(0, total, rows):
                yield read_npy_rows(f, self._header, start, min(rows, total - start), self.label)


class NpyStreamChunks:
    """Row blocks of a ``.npy`` arriving on a one-shot stream (stdin): one pass only.

    The header is parsed when the source is opened; ``chunks`` then reads the body once.
    """

    def __init__(self, label: str, stream: Readable) -> None:
        header = read_header(stream, label)
        check_supported_dtype(header, label)
        if not header.shape:
            raise InvalidInputError(f"{label}: holds a scalar; need at least one axis to stream")
        if header.fortran_order and len(header.shape) > 1:
            # A block of rows is a piece of every column: only a file can seek to them.
            raise NotStreamableError(
                f"{label}: cannot stream a Fortran-order .npy from a pipe (shape "
                f"{list(header.shape)}); give its path, or save it in C order"
            )
        self.label = label
        self._stream = stream
        self._header = header
        self._consumed = False
        self.shape: tuple[int, ...] = header.shape
        self.dtype: np.dtype[Any] = header.dtype.newbyteorder("=")

    def chunks(self, rows: int) -> Iterator[_Array]:
        _check_rows(rows)
        if self._consumed:
            raise ReadError(f"{self.label}: a stream can be read only once")
        self._consumed = True
        total, row_shape = self.shape[0], self.shape[1:]
        for start in range(0, total, rows):
            block = allocate((min(rows, total - start), *row_shape), self._header, self.label)
            got = readinto_exact(self._stream, block)
            if got < block.nbytes:
                raise ReadError(
                    f"{self.label}: the .npy stream ended early: "
                    f"{arrived_rows(self._header, start, got)}"
                )
            yield to_native(block)


@contextlib.contextmanager
def _npz_member(path: str, key: str) -> Iterator[Readable]:
    # A damaged member fails as it is decompressed (a bad CRC-32 at its end, a cut deflate
    # stream): the reads happen in the caller's block loop, so the library's error is mapped
    # here, as the whole read maps it.
    with (
        open_npz(path) as archive,
        library_errors(f"{path}:{key}", "corrupt .npz member"),
        open_member(archive, key, f"{path}:{key}") as member,
    ):
        yield member


class TextChunks:
    """Row blocks of one column of a text table (CSV/TSV, JSON lines; plain or compressed),
    parsed a block of text at a time, so memory follows the block size and not the file.

    The column's type is inferred from the file's first block of text, as pyarrow's own
    streaming reader does, and then fixed: a later value that does not fit it (``1.5`` in a
    column of whole numbers) is a ReadError naming it.
    """

    _MIN_BLOCK_BYTES = 1 << 16
    _MAX_BLOCK_BYTES = 1 << 18  # pyarrow reads several blocks ahead; larger ones were no faster

    def __init__(self, table: TableFile, column: str) -> None:
        import pyarrow as pa

        self._table = table
        self._where = ColumnRef(table.label, column)
        self.label = self._where.label
        self.note = table.note(column)
        with table.errors():
            head = table.text_head([column], CSV_HEAD_BYTES)
        self._type = head.schema.field(column).type
        check_text_type(head.column(column), self._where, text_column_again(table, column))
        table.check_not_rounded(head)  # before a float64 type turns ids away with a hint
        self._row_bytes = max(1, CSV_HEAD_BYTES // max(head.num_rows, 1))
        # A list column's first row fixes the inner shape (JSON lines), as for Parquet.
        rows = head.column(column).combine_chunks()
        if head.num_rows and pa.types.is_nested(self._type):
            first = shape_row([rows], rows.slice(0, 1))
        else:
            first = pa.array([], type=self._type)
        sample = sample_to_numpy(first, self._where)
        self.shape: tuple[int, ...] = (UNKNOWN_ROWS, *sample.shape[1:])
        self.dtype: np.dtype[Any] = sample.dtype

    def chunks(self, rows: int) -> Iterator[_Array]:
        """Blocks of exactly ``rows`` rows but the last, checked for nulls."""
        import pyarrow as pa

        _check_rows(rows)
        block_bytes = min(max(rows * self._row_bytes, self._MIN_BLOCK_BYTES), self._MAX_BLOCK_BYTES)
        with self._table.errors(), self._type_kept():
            reader = self._table.text_batches(
                [self._where.column], block_bytes, types={self._where.column: self._type}
            )
            arrays = (batch.column(0) for batch in reader)
            yield from _same_inner_shape(
                _reblock(arrays, rows),
                self._where,
                self.shape,
                lambda piece, start: column_to_numpy(piece, self._where, first_row=start),
                recount=self._recount_as_float if pa.types.is_integer(self._type) else None,
            )

    def _recount_as_float(self) -> Iterator[pa.Array]:
        """The column again, as float64: the type a whole read gives a column of whole numbers
        that holds a fraction further on."""
        import pyarrow as pa

        column = self._where.column
        types = {column: pa.float64()}
        reader = self._table.text_batches([column], self._MAX_BLOCK_BYTES, types=types)
        return (batch.column(0) for batch in reader)

    def _type_kept(self) -> contextlib.AbstractContextManager[None]:
        return text_type_kept(self._table, self._where.column, self._type)


def text_column_again(table: TableFile, column: str) -> Callable[[], Iterator[pa.Array]]:
    """A read of a text table's ``column`` again, whole, as text (an error's path: the
    offenders a streamed read's first rows showed, counted over the file)."""

    def read() -> Iterator[pa.Array]:
        import pyarrow as pa

        with table.errors():
            for batch in table.text_batches([column], None, types={column: pa.string()}):
                yield batch.column(0)

    return read


@contextlib.contextmanager
def text_type_kept(
    table: TableFile, column: str | None = None, column_type: Any = None
) -> Iterator[None]:
    """A value past a streamed text table's first block of a value column (DATA's or IDS',
    not a key) that does not fit the type its first rows gave the column: raised as
    :func:`type_change_error` says it, or, where a whole read refuses that value too, as
    that read does (:func:`_refuse_as_whole_read`)."""
    try:
        yield
    except ValueError as exc:
        not_utf8 = not_utf8_error(table, exc, column)
        if not_utf8 is not None:
            raise not_utf8 from None
        error = type_change_error(table, exc, column, column_type)
        if error is None:
            raise
        named = column or _csv_column_named(table, str(exc))
        found = _TEXT_CONVERSION.search(str(exc))  # type_change_error matched it
        if named is not None and found is not None:
            _refuse_as_whole_read(table, found, named)
        raise error from exc


def not_utf8_error(
    table: TableFile, exc: ValueError, column: str | None = None
) -> SegcliError | None:
    """Where pyarrow's ``exc`` is about CSV text that is not UTF-8 past a streamed table's first
    block (which fixed the column's type), the error a whole read gives: the first value that
    is not, by its row and bytes (:func:`check_utf8`, over the column read again as bytes, on
    this error's path only); None for another error, or where every value is UTF-8 (a number
    column's value holding U+FFFD itself)."""
    import pyarrow as pa

    if _NOT_UTF8.search(str(exc)) is None:
        return None
    named = column or _csv_column_named(table, str(exc))
    if named is None:
        return None
    where, first_row = ColumnRef(table.label, named), 0
    try:
        for batch in table.text_batches([named], None, types={named: pa.binary()}):
            check_utf8(batch.column(0), where, first_row)
            first_row += batch.num_rows
    except SegcliError as error:
        return error
    return None


def _refuse_as_whole_read(table: TableFile, found: re.Match[str], column: str) -> None:
    """Where the value of a type error (``found``, in pyarrow's words) is one a whole read
    refuses as well, raise that read's error, with the first such value and their count (the
    column read again, on this error's path only): reading the file whole, as the type error's
    hint says, would not give a result. A CSV value that is no number (``abc`` in a column of
    numbers) makes the column text; an integer beyond int64 would be read rounded."""
    import pyarrow as pa

    value = found["value"][1:-1] if found["value"] else found["json"]
    if found["value"] and not is_number_text(value):
        empty = pa.array([], pa.string())
        check_text_type(empty, ColumnRef(table.label, column), text_column_again(table, column))
    elif re.fullmatch(r"\s*[-+]?\d{19,}\s*", value) and not -(2**63) <= int(value) < 2**63:
        error = table.rounded_error(column)
        if error is not None:
            raise error from None


def type_change_error(
    table: TableFile,
    exc: ValueError,
    column: str | None = None,
    column_type: Any = None,
    types: Mapping[str, Any] | None = None,
) -> ReadError | None:
    """The error for pyarrow's ``exc`` about a value that does not fit the type a streamed
    text table's first rows gave its column (``column``, else the one pyarrow names; its type
    ``column_type``, else looked up in ``types``): say so, where, and how to get the widened
    column a whole read gives. None if ``exc`` is not such an error."""
    found = _TEXT_CONVERSION.search(str(exc))
    if found is None:
        return None
    value = elided(one_line(found["value"] or f"'{found['json'].strip()}'"))
    if column is None:
        column = _csv_column_named(table, str(exc))
    if column is None and types is not None:
        # JSON's message names the type only: the column, where one alone has it.
        said = found["json_type"] or found["csv_type"]
        typed = [name for name, type_ in types.items() if str(type_) == said]
        column = typed[0] if len(typed) == 1 else None
    if column_type is None and types is not None and column is not None:
        column_type = types.get(column)
    where = f"{table.label}:" if column is None else f"{table.label}: column '{column}'"
    made = (
        ", in a column those rows made another type"
        if column_type is None
        else f", which made it {column_type}"
    )
    row = None
    if column is not None and found["value"]:
        row = table.first_row_holding(column, found["value"][1:-1])
    at = "" if row is None else f" (first at row {row})"
    return ReadError(
        f"{where} holds {value} after its first rows{made}{at}; a streamed CSV or "
        "JSON-lines file keeps that type (write the early values in the wider type, or "
        f"read the file whole: {whole_read_hint(table.label)})"
    )


def _csv_column_named(table: TableFile, said: str) -> str | None:
    """The column of pyarrow's CSV error (``In CSV column #2``: the file's third column)."""
    found = _CSV_COLUMN.search(said)
    names = table.schema().names
    return names[int(found[1])] if found and int(found[1]) < len(names) else None


class TableChunks:
    """Row blocks of one column of a Parquet or Arrow IPC file, re-blocked to ``rows``."""

    def __init__(self, table: TableFile, column: str) -> None:
        schema = table.schema()
        self._where = ColumnRef(table.label, column)
        check_type(schema.field(column).type, self._where)
        self._table = table
        self._layout = value_layout(schema, column, table.label)
        self.label = self._where.label
        self.note = table.note(column)
        with table.errors():
            total = self._count_rows()
            first = next(_reblock(self._batches(1), 1), None)
            if first is not None:
                first = shape_row(self._batches(_COUNTED_ROWS), first)
        if first is None:
            import pyarrow as pa

            first = pa.array([], type=schema.field(column).type)
        # The first row (the first list not null) fixes the inner shape (variable-size lists)
        # and the dtype (metadata); a null in it is the blocks' to name, as in any other row.
        sample = sample_to_numpy(first, self._where, self._layout)
        self.shape: tuple[int, ...] = (total, *sample.shape[1:])
        self.dtype: np.dtype[Any] = sample.dtype

    def chunks(self, rows: int) -> Iterator[_Array]:
        """Blocks of exactly ``rows`` rows but the last, checked for nulls and inner shape."""
        _check_rows(rows)
        with self._table.errors():
            yield from _same_inner_shape(
                _reblock(self._batches(rows), rows),
                self._where,
                self.shape,
                lambda piece, start: column_to_numpy(
                    piece, self._where, first_row=start, layout=self._layout
                ),
            )

    def _batches(self, rows: int) -> Iterator[pa.Array]:
        name = self._where.column
        if self._table.fmt == "parquet":
            import pyarrow.parquet as pq

            parquet = pq.ParquetFile(self._table.parquet_source(), pre_buffer=False)
            for batch in parquet.iter_batches(batch_size=rows, columns=[name]):
                yield batch.column(0)
            return
        for batch in self._table.ipc_batches([name]):
            yield batch.column(name)

    def _count_rows(self) -> int:
        if self._table.fmt == "parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(self._table.parquet_source()).metadata.num_rows)
        return self._table.ipc_rows()


def _same_inner_shape(
    pieces: Iterator[pa.Array],
    where: ColumnRef,
    shape: tuple[int, ...],
    to_numpy: Callable[[pa.Array, int], np.ndarray],
    on_nulls: Callable[[], NullTally | None] | None = None,
    recount: Callable[[], Iterator[pa.Array]] | None = None,
) -> Iterator[np.ndarray]:
    """Each Arrow piece as NumPy rows (``to_numpy(piece, first_row)``); a piece whose rows have
    another inner shape than ``shape`` (a list column's lengths changing) is an error. A null
    fails the run: ``on_nulls`` is called, then the rest is only counted (see _null_error);
    it returns the column's nulls a shared stream counted further on, if any (see
    :class:`LaterNulls`)."""
    start = 0
    for piece in pieces:
        try:
            block = to_numpy(piece, start)
        except NullsError:
            later = on_nulls() if on_nulls is not None else None
            raise _null_error(where, piece, start, pieces, recount, later) from None
        block = widened_null_lists(block, piece, shape[1:])
        if block.shape[1:] != shape[1:]:
            raise where.fail(
                f"rows from {start} have inner shape {list(block.shape[1:])}, "
                f"earlier rows {list(shape[1:])}"
            )
        start += len(block)
        yield block


def _null_error(
    where: ColumnRef,
    piece: pa.Array,
    start: int,
    rest: Iterator[pa.Array],
    recount: Callable[[], Iterator[pa.Array]] | None = None,
    later: NullTally | None = None,
) -> InvalidInputError:
    """The error for a column whose ``piece`` (from row ``start``) holds a null: the rest of
    the input is read and its nulls counted, unconverted and unfolded, so that the error gives
    the count and the first row that a whole read of the column gives. ``later``: the nulls
    of the rows past ``rest`` that a shared stream counted already (:class:`LaterNulls`).

    A streamed text column whose later value does not fit the type its first rows gave it
    (``3.5`` among whole numbers) is, read whole, of the wider type, and its nulls are still
    its error: ``recount`` reads the whole column again in that type to count them."""
    tally = NullTally(where)
    tally.add(piece, start)
    start += len(piece)
    try:
        for more in rest:
            tally.add(more, start)
            start += len(more)
    except ValueError as exc:
        if recount is None or _TEXT_CONVERSION.search(str(exc)) is None:
            raise
        try:
            return _tally(where, recount()).error()
        except ValueError:
            raise exc from None  # not even the wider type holds it: the value is the error
    if later is not None:
        tally.add_tally(later)
    return tally.error()


def _tally(where: ColumnRef, pieces: Iterator[pa.Array]) -> NullTally:
    tally, start = NullTally(where), 0
    for piece in pieces:
        tally.add(piece, start)
        start += len(piece)
    return tally


class LaterNulls:
    """The columns of a stream of batches read once for all of them, once one column failed
    on a null and counts the rest of the stream alone, each batch going to it only: the other
    columns' nulls in the batches read meanwhile. Another column's block still queued may hold
    an earlier null (columns are read side by side, block by block): its error then counts
    these too, every null of its column (see :func:`segcli.io.columns.first_nulls`)."""

    def __init__(self, others: list[tuple[str, list[pa.Array], ColumnRef]], first_row: int) -> None:
        self._others = [(name, queue, NullTally(where)) for name, queue, where in others]
        self._row = first_row

    def add(self, batch: Any) -> None:
        """Count the other columns' nulls in ``batch``, the stream's next."""
        for name, _, tally in self._others:
            tally.add(batch.column(name), self._row)
        self._row += batch.num_rows

    def take(self, queue: list[pa.Array]) -> NullTally | None:
        """The nulls counted for the column of ``queue``, which now fails too and counts the
        rest itself (None if it is the first column that failed)."""
        for i, (_, kept, tally) in enumerate(self._others):
            if kept is queue:
                del self._others[i]
                return tally
        return None


def _reblock(arrays: Iterator[pa.Array], rows: int) -> Iterator[pa.Array]:
    """Regroup arrays of any lengths into arrays of exactly ``rows`` elements but the last."""
    import pyarrow as pa

    pending: list[pa.Array] = []
    have = 0
    for array in arrays:
        offset = 0
        while offset < len(array):
            take = min(rows - have, len(array) - offset)
            pending.append(array.slice(offset, take))
            have += take
            offset += take
            if have == rows:
                yield pending[0] if len(pending) == 1 else pa.concat_arrays(pending)
                pending, have = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_arrays(pending)


# pyarrow's messages for a value its streaming CSV or JSON reader cannot convert to the type
# the first block gave its column.
_TEXT_CONVERSION = re.compile(
    # The type may hold brackets, commas and colons: timestamp[s, tz=+01:00]. A quoted CSV
    # value may hold line breaks (?s: the value runs to the message's last quote).
    r"CSV conversion error to (?P<csv_type>.+?): invalid value (?P<value>'(?s:.*)')"
    r"|Failed to convert JSON to (?P<json_type>.+?), couldn't parse:(?P<json>.*)"
)

_CSV_COLUMN = re.compile(r"^In CSV column #(\d+):")
# Text that is not UTF-8, as pyarrow meets it: in a text column, or (shown with U+FFFD for the
# bytes) as a value of a number column.
_NOT_UTF8 = re.compile(r"CSV conversion error to [^:]+: invalid (?:UTF8 data|value '[^']*\ufffd)")

#: ``shape[0]`` of a source whose length is known only once it has been read (a stream).
UNKNOWN_ROWS = -1

STDIN_LABEL = "<stdin>"


class ArrowStreamColumns:
    """Columns of one Arrow IPC stream (stdin), read once, record batch by record batch.

    Each column is a :class:`ChunkSource` of unknown length; the columns share the reader, so a
    batch read for one column is kept for the others until they take it. A caller that reads
    the columns' blocks in step (the streaming driver does) holds about one batch at a time.
    """

    def __init__(self, stream: Readable, names: list[str]) -> None:
        import pyarrow.ipc as ipc

        self._stream = TailKept(stream)  # its end marker, looked for once it ends
        with library_errors(STDIN_LABEL, "not a .npy or Arrow IPC stream"):
            self._reader = ipc.open_stream(self._stream)
        schema = self._reader.schema
        for index, name in enumerate(names):
            if name not in schema.names:
                # The ids column comes last; those before it are data columns.
                last = index == len(names) - 1
                hint = "" if last else data_column_list_hint(name, schema.names)
                shown = listing(schema.names)
                raise UsageError(f"{STDIN_LABEL}: no column '{name}' (columns: {shown}){hint}")
        self._pending: dict[str, list[pa.Array]] = {name: [] for name in names}
        self._all = dict(self._pending)
        self._rows_read = 0
        self._later: LaterNulls | None = None
        self.sources = [_StreamColumn(self, name, schema.field(name).type) for name in names]
        self._pull()  # the first batch fixes each column's inner shape and dtype

    def _pull(self) -> bool:
        """Read the next batch into every column's queue; False at the end of the stream."""
        with library_errors(STDIN_LABEL, "not a valid Arrow IPC stream"):
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                note_if_unended(STDIN_LABEL, self._stream.head, self._stream.tail)
                return False
        for name, queue in self._pending.items():
            queue.append(batch.column(name))
        if self._later is not None:
            self._later.add(batch)
        self._rows_read += batch.num_rows
        return True

    def arrays(self, name: str) -> Iterator[pa.Array]:
        queue = self._all[name]
        while queue or self._pull():
            yield queue.pop(0)

    def feed_only(self, name: str) -> NullTally | None:
        """Batches read from now on go to ``name`` alone (see TableBatches.feed_only)."""
        queue = self._all[name]
        if self._later is None:
            others = [
                (other, kept, ColumnRef(STDIN_LABEL, other))
                for other, kept in self._pending.items()
                if kept is not queue
            ]
            self._later = LaterNulls(others, self._rows_read)
        self._pending = {name: queue}
        return self._later.take(queue)


class _StreamColumn:
    """One column of an :class:`ArrowStreamColumns`, as a ChunkSource of unknown length."""

    def __init__(self, owner: ArrowStreamColumns, name: str, type_: pa.DataType) -> None:
        import pyarrow as pa

        self._owner = owner
        self._where = ColumnRef(STDIN_LABEL, name)
        check_type(type_, self._where)
        self.label = self._where.label
        queued = owner._pending[name]
        first = shape_row(queued[:1], queued[0].slice(0, 1)) if queued else pa.array([], type=type_)
        sample = sample_to_numpy(first, self._where)
        self.shape: tuple[int, ...] = (UNKNOWN_ROWS, *sample.shape[1:])
        self.dtype: np.dtype[Any] = sample.dtype

    def chunks(self, rows: int) -> Iterator[_Array]:
        _check_rows(rows)
        with library_errors(STDIN_LABEL, "not a valid Arrow IPC stream"):
            yield from _same_inner_shape(
                _reblock(self._owner.arrays(self._where.column), rows),
                self._where,
                self.shape,
                lambda piece, start: column_to_numpy(piece, self._where, first_row=start),
                on_nulls=lambda: self._owner.feed_only(self._where.column),
            )


def open_arrow_stream_columns(stream: Readable, names: list[str]) -> list[ChunkSource]:
    """Columns ``names`` of an Arrow IPC stream, for streaming them in step, in one pass."""
    return list(ArrowStreamColumns(stream, names).sources)
