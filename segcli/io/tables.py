"""Parquet, Arrow IPC, CSV/TSV and JSON-lines tables: schema, column choice and column reads.

pyarrow is imported inside the functions so that ``.npy`` work never loads it.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

import numpy as np

from segcli.errors import InvalidInputError, ReadError, UsageError
from segcli.io import json_lines
from segcli.io.column_names import listing, split_names
from segcli.io.columns import (
    ColumnRef,
    check_text_type,
    check_type,
    check_utf8,
    column_to_numpy,
    read_as_note,
    side_by_side,
    value_layout,
)
from segcli.io.formats import (
    ARROW_FILE_MAGIC,
    ARROW_STREAM_END,
    FEATHER_V1_MAGIC,
    INPUT_SUFFIXES,
    TEXT_FORMATS,
    PipeSource,
    check_readable,
    compression_of,
    elided,
    file_tail,
    is_pipe,
    library_errors,
    note_if_unended,
    one_line,
    pipe_bytes,
    pipe_source,
    shown,
    suffix_format,
)
from segcli.io.ipc_rows import IpcCounts, ipc_counts, ipc_rows
from segcli.io.reread import past_rows_given

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.ipc as ipc

_WHAT = {
    "parquet": "not a valid Parquet file",
    "arrow": "not a valid Arrow IPC file",
    "csv": "cannot parse CSV",
    "tsv": "cannot parse TSV",
    "jsonl": "cannot parse JSON lines",
}
#: pyarrow's word for a CSV line of another number of fields than the first line.
_RAGGED = re.compile(r"Expected (?P<expected>\d+) columns, got (?P<got>\d+): (?P<text>.*?)\)?$")
# Columns pandas adds for its index: never the column a user means.
_PANDAS_INDEX_PREFIX = "__index_level_"
#: Bytes of text a CSV or JSON-lines file's column types are inferred from (pyarrow's default
#: block size).
CSV_HEAD_BYTES = 1 << 20
# pyarrow's default CSV null spellings less the NaN ones, so that "nan", "NaN" and "-nan" (as
# NumPy and segcli's own CSV output write NaN) read as the float NaN; an empty cell stays null.
_CSV_NULLS = [
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "1.#IND", "1.#QNAN",
    "N/A", "NA", "NULL", "n/a", "null",
]  # fmt: skip
# An empty field of a string column is null (a missing --by key), a quoted "" the empty string:
# the way pyarrow's CSV writer, and segcli's own CSV output, tell them apart.
_CSV_STRING_NULLS = {"strings_can_be_null": True, "quoted_strings_can_be_null": False}
#: pyarrow's CSV block of text (1 MiB); a line longer than a block needs a larger one.
_CSV_BLOCK_BYTES = 1 << 20
#: The largest block tried (pyarrow's block size is a 32-bit count): a longer line is an error.
_CSV_LARGEST_BLOCK_BYTES = 1 << 30
#: What pyarrow says of a line longer than its block of text (the first line, a later one).
_CSV_LONG_LINE = ("Empty CSV file or block: cannot infer", "straddling object")
#: What pyarrow says when a block ends inside a quoted field that holds a line break (the
#: streaming reader, the whole read); a short line itself says the latter too, and fails again.
_CSV_QUOTED_LINE_BREAK = ("got out of sync with chunker", "CSV parse error: Expected ")

#: Whole numbers from this magnitude on do not fit int64: pyarrow's CSV reader reads a column
#: holding one as float64, rounded to 53 bits (pandas reads it as uint64, or as text).
_INT64_BOUND = 2.0**63
#: An integer of 19 digits or more: the text of a value that may lie beyond int64.
_LONG_INTEGER = r"^\s*[-+]?\d{19,}\s*$"
_NINETEEN_DIGITS = re.compile(rb"\d{19}")

_T = TypeVar("_T")


class _IntegerText(str):
    """An integer of a JSON line, kept as its text: Python's ``int`` refuses more than 4,300
    digits, and the text is what an error quotes."""


def beyond_int64(text: str) -> bool:
    """Whether ``text``, an integer, lies beyond int64 (its digits counted first: ``int``
    refuses more than 4,300 of them)."""
    stripped = text.strip()
    digits = stripped.lstrip("+-").lstrip("0")
    if len(digits) != 19:
        return len(digits) > 19
    return not -(2**63) <= int(stripped[0] + digits if stripped[0] == "-" else digits) < 2**63


@dataclass(frozen=True)
class CsvOptions:
    """How to split CSV/TSV input: the delimiter (default ``,``, a tab for TSV) and whether
    the first line is a header. Without one, columns are named by position from 1."""

    delimiter: str | None = None
    header: bool = True


def check_delimiter(delimiter: str | None) -> str | None:
    """One ASCII character (a tab may be given as the two characters backslash-t, or as
    'tab'), not a quote or a line break; else a UsageError. The CSV parser splits on one
    byte: a character UTF-8 spells in two or more would fail only once the file is read."""
    if delimiter is None:
        return None
    char = "\t" if delimiter in ("\\t", "tab") else delimiter
    if len(char) != 1 or char in '\r\n"':
        raise UsageError(
            f"--delimiter {delimiter!r}: need one character other than a quote or a line break "
            "(a tab: '\\t')"
        )
    if not char.isascii():
        raise UsageError(
            f"--delimiter {delimiter!r}: need an ASCII character (the CSV reader splits on one "
            f"byte); convert the file first, e.g. sed 's/{char}/;/g'"
        )
    return char


@dataclass(frozen=True)
class TableFile:
    """A table to read columns from: a file path, the bytes of an Arrow stream from stdin, or
    a pipe read in one pass."""

    label: str
    fmt: str
    source: str | bytes | PipeSource
    csv: CsvOptions = field(default_factory=CsvOptions)
    #: Columns whose text was searched for an integer beyond int64, and held none.
    _exact: set[str] = field(default_factory=set, compare=False, repr=False)

    def schema(self) -> pa.Schema:
        """The table's schema, read from metadata where the format has it."""
        with self.errors():
            if self.fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.ParquetFile(self.parquet_source()).schema_arrow
            if self.fmt == "arrow":
                return self.ipc_reader().schema
            return self._text_schema

    @cached_property
    def _text_schema(self) -> pa.Schema:
        # Types as inferred from the first block: what a streaming read of the file will use.
        schema = self.text_head(None, CSV_HEAD_BYTES).schema
        try:
            schema.names  # noqa: B018 -- pyarrow decodes the names only when asked
        except UnicodeDecodeError as exc:
            raise ReadError(
                f"{self.label}: the column name {shown(exc.object)} is not UTF-8; convert the file "
                "to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
            ) from None
        return schema

    @property
    def is_text(self) -> bool:
        """Whether the table is text (CSV/TSV, JSON lines): read a block at a time, each
        column's type inferred from its first block, the number of rows known at the end."""
        return self.fmt in TEXT_FORMATS

    def read(
        self,
        columns: list[str],
        csv_types: dict[str, pa.DataType] | None = None,
        *,
        as_is: bool = False,
    ) -> pa.Table:
        """Read only ``columns`` (all of them for Arrow IPC, which is memory-mapped anyway);
        ``csv_types``: types some CSV columns are read as, instead of inferred ones; ``as_is``:
        text read as pyarrow reads it (else an integer beyond int64, which it rounds to a
        float64, and CSV text that is not UTF-8, which it keeps as binary, are errors)."""
        with self.errors():
            if self.fmt == "parquet":
                import pyarrow.parquet as pq

                return pq.ParquetFile(self.parquet_source(), pre_buffer=False).read(columns=columns)
            if self.fmt == "arrow":
                table = self.ipc_reader().read_all().select(columns)
                self.note_if_unended_stream()
                return table
            if self.fmt == "jsonl":
                table = self._jsonl_table(columns)
                if not as_is:
                    self.check_not_rounded(table)
                return table
            import pyarrow as pa
            import pyarrow.csv as pcsv

            types = dict(csv_types or {})
            # The CSV reader converts no text to decimal256: such a column is read as text and
            # cast (a text that is no such decimal fails the read, as the reader's own would).
            wide = {name: type_ for name, type_ in types.items() if pa.types.is_decimal256(type_)}
            types.update({name: pa.string() for name in wide})
            convert = self.convert_options(columns, types or None)
            table = self._csv_retried(
                lambda read, parse: pcsv.read_csv(
                    self._input(), read_options=read, parse_options=parse, convert_options=convert
                )
            )
            for name, type_ in wide.items():
                index = table.schema.get_field_index(name)
                table = table.set_column(index, name, table.column(index).cast(type_))
            if not as_is:
                self.check_read_text(table, 0)
            return table

    def ipc_reader(self) -> ipc.RecordBatchFileReader | ipc.RecordBatchStreamReader:
        """Open the Arrow IPC file or stream (told apart by the file magic), memory-mapped:
        a whole read converts zero-copy from the map, and a batch's length or null count
        reads no column data."""
        return self._ipc_open(self._input(), None)

    def ipc_batches(self, columns: Sequence[str]) -> Iterator[pa.RecordBatch]:
        """The record batches of a streamed read, holding ``columns`` alone.

        Read from the file, not from a memory map: every page of a map that a read touched
        stays resident until the map is closed, so a streamed run's peak memory would grow
        with the columns read. Read this way a batch's memory is freed once its rows are
        done; a file's other columns are not read, a stream's are read past, not decoded.
        """
        schema = self.schema()
        # A name twice in the schema keeps both fields: the batch then fails to say which,
        # as it would holding every column.
        fields = sorted({i for name in columns for i in schema.get_all_field_indices(name)})
        yield from self.ipc_field_batches(fields)

    def ipc_field_batches(self, fields: Sequence[int]) -> Iterator[pa.RecordBatch]:
        """The record batches of a streamed read, holding the columns at positions ``fields``
        (ascending) alone; read as :meth:`ipc_batches` reads them."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        source = self.source
        if isinstance(source, bytes):
            stream: pa.NativeFile = pa.BufferReader(pa.py_buffer(source))
        elif isinstance(source, PipeSource):
            stream = pa.PythonFile(source.reader(passing=True), mode="r")
        else:
            stream = pa.OSFile(source)
        with stream:
            reader = self._ipc_open(stream, ipc.IpcReadOptions(included_fields=fields))
            if isinstance(reader, ipc.RecordBatchFileReader):
                for i in range(reader.num_record_batches):
                    yield reader.get_batch(i)
            else:
                yield from reader
                self.note_if_unended_stream()

    def ipc_rows(self) -> int:
        """The rows of an Arrow IPC file or stream, read from its batches' headers alone (not
        from the memory map, whose pages around each header would stay resident)."""
        if isinstance(self.source, bytes):
            return ipc_rows(io.BytesIO(self.source))
        if isinstance(self.source, PipeSource):
            return ipc_rows(cast(BinaryIO, self.source.reader()))
        # Unbuffered: a buffered read would fill 8 KiB for each header of a few hundred bytes.
        with open(self.source, "rb", buffering=0) as file:
            return ipc_rows(file)

    def ipc_counts(self) -> IpcCounts:
        """Rows, record batches and null counts of an Arrow IPC file or stream, read from its
        headers alone, as :meth:`ipc_rows` reads them; a ValueError if they are damaged."""
        if isinstance(self.source, bytes):
            return ipc_counts(io.BytesIO(self.source))
        if isinstance(self.source, PipeSource):
            return ipc_counts(cast(BinaryIO, self.source.reader()))
        with open(self.source, "rb", buffering=0) as file:
            return ipc_counts(file)

    def note_if_unended_stream(self) -> None:
        """A note when this Arrow IPC stream (not a file) ends without its end-of-stream
        marker, as one cut short between two batches does; once read, so that a read that
        fails says only why. A note only: a file that cannot be read again now says none."""
        if isinstance(self.source, bytes):
            head, tail = self.source[: len(ARROW_FILE_MAGIC)], self.source[-len(ARROW_STREAM_END) :]
        elif isinstance(self.source, PipeSource):
            head, tail = self.source.head(len(ARROW_FILE_MAGIC)), self.source.tail
        else:
            try:
                with open(self.source, "rb") as file:
                    head = file.read(len(ARROW_FILE_MAGIC))
                    tail = file_tail(file, len(ARROW_STREAM_END))
            except OSError:
                return
        if head != ARROW_FILE_MAGIC:
            note_if_unended(self.label, head, tail)

    def _ipc_open(
        self, source: pa.NativeFile, options: ipc.IpcReadOptions | None
    ) -> ipc.RecordBatchFileReader | ipc.RecordBatchStreamReader:
        import pyarrow.ipc as ipc

        head = source.read(len(ARROW_FILE_MAGIC))
        source.seek(0)
        if head == ARROW_FILE_MAGIC:
            return ipc.open_file(source, options=options)
        if head.startswith(FEATHER_V1_MAGIC):  # else "expected to read 826361158 bytes"
            raise ReadError(
                f"{self.label}: a Feather v1 file, which is not read: write it as Feather v2 "
                "(Arrow IPC), pyarrow.feather.write_feather's default"
            )
        return ipc.open_stream(source, options=options)

    def parse_options(self, line_breaks_quoted: bool = False) -> pcsv.ParseOptions:
        """CSV parse options: the delimiter given, else a tab for TSV and a comma for CSV;
        ``line_breaks_quoted``: quoted fields may hold line breaks (slower to split in blocks)."""
        import pyarrow.csv as pcsv

        default = "\t" if self.fmt == "tsv" else ","
        return pcsv.ParseOptions(
            delimiter=self.csv.delimiter or default, newlines_in_values=line_breaks_quoted
        )

    def _csv_retried(
        self,
        read: Callable[[pcsv.ReadOptions, pcsv.ParseOptions], _T],
        block_size: int | None = None,
    ) -> _T:
        """``read(read options, parse options)``, read again in larger blocks while a line is
        longer than a block, and with line breaks in quoted fields once a block ended in one
        (pyarrow splits its blocks at line breaks, and tells these apart only when it fails)."""
        import pyarrow as pa

        block_size = block_size or _CSV_BLOCK_BYTES
        line_breaks_quoted = False
        while True:
            try:
                return read(self.read_options(block_size), self.parse_options(line_breaks_quoted))
            except pa.ArrowInvalid as exc:
                block_size, line_breaks_quoted = _csv_retry(exc, block_size, line_breaks_quoted)

    def read_options(self, block_size: int | None = None) -> pcsv.ReadOptions:
        """CSV read options: positional column names when there is no header."""
        import pyarrow.csv as pcsv

        options = (
            pcsv.ReadOptions() if block_size is None else pcsv.ReadOptions(block_size=block_size)
        )
        if not self.csv.header:
            options.column_names = self._positional_names
        return options

    def _convert_all(self) -> pcsv.ConvertOptions:
        import pyarrow.csv as pcsv

        return pcsv.ConvertOptions(null_values=_CSV_NULLS, **_CSV_STRING_NULLS)

    def convert_options(
        self, columns: list[str], types: dict[str, pa.DataType] | None = None
    ) -> pcsv.ConvertOptions:
        """CSV conversion of ``columns`` only, with NaN spellings read as NaN, not null."""
        import pyarrow.csv as pcsv

        return pcsv.ConvertOptions(
            include_columns=columns,
            column_types=types,
            null_values=_CSV_NULLS,
            **_CSV_STRING_NULLS,
        )

    @cached_property
    def _positional_names(self) -> list[str]:
        """ "1", "2", ... for each field of the first line of a file without a header."""
        import pyarrow as pa
        import pyarrow.csv as pcsv

        with self.errors():
            first = self._csv_head(
                CSV_HEAD_BYTES,
                lambda head: pcsv.read_csv(
                    pa.BufferReader(head),
                    read_options=pcsv.ReadOptions(
                        autogenerate_column_names=True, block_size=_one_block(head)
                    ),
                    parse_options=self.parse_options(),
                ),
            )
        return [str(i) for i in range(1, first.num_columns + 1)]

    def note(self, column: str) -> str | None:
        """How ``column``'s values are converted on reading, for the summary (or None)."""
        return read_as_note(self.schema().field(column).type)

    def column_names(self) -> list[str]:
        """Column names a user may pick (pandas index columns left out)."""
        return [n for n in self.schema().names if not n.startswith(_PANDAS_INDEX_PREFIX)]

    def pick(self, column: str | None, option: str) -> str:
        """``column`` if the table has it, else the table's only column, else a UsageError."""
        names = self.column_names()
        shown = listing(names) if names else "none"
        if column is not None:
            if column not in self.schema().names:
                hint = ""
                if self.fmt == "jsonl":
                    hint = " (the fields of its first megabyte of lines)"
                elif self.is_text and not self.csv.header:
                    hint = " (no header: columns are numbered from 1)"
                elif self.is_text and column.isdigit():
                    hint = " (for a CSV without a header line: --no-input-header)"
                elif self.is_text:
                    hint = _csv_header_hint(column, names)
                if option == "--data-column":
                    hint = data_column_list_hint(column, names) or hint
                raise UsageError(f"{self.label}: no column '{column}' (columns: {shown}){hint}")
            self.check_unique([column])
            return column
        if len(names) == 1:
            return names[0]
        raise UsageError(
            f"{self.label}: has {len(names)} columns; pick one with {option} (columns: {shown})"
        )

    def arrays(self, columns: list[str]) -> list[np.ndarray[Any, Any]]:
        """Read ``columns`` and convert each to NumPy (checked for type and nulls): every
        column's type first, as a streamed read checks them on opening, then their nulls,
        the earliest row's named (:func:`side_by_side`)."""
        self.check_unique(columns)
        table = self.read(columns)
        self.check_text_types(table, columns)
        for name in columns:
            check_type(table.schema.field(name).type, ColumnRef(self.label, name))
        return side_by_side(
            partial(
                column_to_numpy,
                table.column(name),
                ColumnRef(self.label, name),
                layout=value_layout(table.schema, name, self.label),
            )
            for name in columns
        )

    def check_text_types(self, table: pa.Table, columns: Sequence[str]) -> None:
        """In a text table, a value column that is text names its first value that is not a
        number (the type alone would not say which)."""
        if self.is_text:
            for name in columns:
                check_text_type(table.column(name), ColumnRef(self.label, name))

    def check_unique(self, columns: Sequence[str], label: str | None = None) -> None:
        """A name the table uses for several columns cannot say which one is meant: a
        ReadError, prefixed with ``label`` (``--keys-from keys.csv``) or the table's own."""
        check_unique_names(self.schema().names, columns, label or self.label)

    def parquet_source(self) -> str | pa.NativeFile:
        # Parquet needs to seek: bytes from a pipe are read from memory, a path from the file.
        return self.source if isinstance(self.source, str) else self._input()

    def text_source(self) -> pa.NativeFile:
        """A text table's text, decompressed, from its start."""
        return self._input()

    def _input(self, passing: bool = False) -> pa.NativeFile:
        """The table's bytes from the start; ``passing``: for the run's pass over them (a
        pipe's pass keeps few of them, see :class:`PipeSource`)."""
        import pyarrow as pa

        if isinstance(self.source, bytes):
            return pa.BufferReader(pa.py_buffer(self.source))
        if isinstance(self.source, PipeSource):
            return pa.PythonFile(self.source.reader(passing=passing), mode="r")
        if self.fmt == "arrow":
            return pa.memory_map(self.source)  # batches then convert zero-copy from the map
        return pa.input_stream(self.source)  # decompresses .csv.gz, .jsonl.gz ... by name

    def _pass_input(self) -> pa.NativeFile:
        return self._input(passing=True)

    def text_head(self, columns: list[str] | None, size: int) -> pa.Table:
        """``columns`` (all if None) of the whole lines within the first ``size`` bytes of
        text, types inferred from them (pyarrow's streaming reader would read and hold many
        blocks ahead)."""
        import pyarrow as pa
        import pyarrow.csv as pcsv

        if self.fmt == "jsonl":
            return json_lines.read_head(self._head(size), columns)
        return self._csv_head(
            size,
            lambda head: pcsv.read_csv(
                pa.BufferReader(head),
                read_options=self.read_options(_one_block(head)),
                parse_options=self.parse_options(),
                convert_options=self._convert_all()
                if columns is None
                else self.convert_options(columns),
            ),
        )

    def _csv_head(self, size: int, parse: Callable[[bytes], _T]) -> _T:
        """``parse`` of the CSV's head; if that fails, of the head cut at a line break outside
        quoted fields instead (the last line break may lie inside one). Not always so: a quote
        inside a field that is not quoted (``12"``) is a plain character."""
        import pyarrow as pa

        head = self._head(size)
        try:
            return parse(head)
        except pa.ArrowInvalid:
            quoted = self._head(size, quoted_line_breaks=True)
            if quoted == head:
                raise
            return parse(quoted)

    def _head(self, size: int, quoted_line_breaks: bool = False) -> bytes:
        """The whole lines within the first ``size`` bytes of text (decompressed); with
        ``quoted_line_breaks``, a line break within quotes does not end a line."""
        with self._input() as stream:
            head: bytes = stream.read(size)
            header = self.fmt != "jsonl" and self.csv.header
            if len(head) == size and b"\n" not in head:
                head = _to_line_end(head, stream, size)
                if header:  # the types come from rows
                    head += stream.read(size)
            elif len(head) == size and header and b"\n" not in head[head.index(b"\n") + 1 :]:
                # The header fits, its first row does not: without a row every column would
                # be typed null, and the row refused as a value of another type.
                head = _to_line_end(head, stream, size)
        compressed = compression_of(head)
        if compressed is not None:  # pyarrow decompresses by the name only
            raise ReadError(
                f"{self.label}: this is {compressed[0]}-compressed, but its name does not say "
                "so; name it with the compression's suffix (.csv.gz, .jsonl.zst, ...)"
            )
        if len(head) >= size and b"\n" in head:
            head = head[: _last_line_end(head, quoted_line_breaks) + 1]
        return head

    def _jsonl_table(self, columns: list[str] | None) -> pa.Table:
        """``columns`` (all if None) of a JSON-lines file, read whole, their types inferred
        from every line. pyarrow converts every field of such a read, and a field whose JSON
        type changes fails it, even a field the run never reads; then the columns asked for
        are read alone, as a streamed run reads them (in the types of the first megabyte of
        lines, where the change must not fall). If that fails too, the first error stands."""
        import pyarrow as pa

        try:
            return json_lines.read_table(self._input, columns)
        except pa.ArrowInvalid as error:
            if columns is None:
                raise
            try:
                return self.text_batches(columns).read_all()
            except (pa.ArrowInvalid, KeyError, ReadError, UsageError):
                raise error from None

    def text_batches(
        self,
        columns: list[str] | None,
        block_size: int | None = None,
        types: dict[str, pa.DataType] | None = None,
        *,
        as_is: bool = False,
    ) -> pa.RecordBatchReader:
        """A streaming reader of a text table's ``columns`` (all if None), in blocks of about
        ``block_size`` bytes of text; column types are as ``types`` says, else inferred from
        the first block (the first ``CSV_HEAD_BYTES`` for JSON lines). ``as_is``: text as
        pyarrow reads it, unchecked (as :meth:`read` says)."""
        import pyarrow as pa
        import pyarrow.csv as pcsv

        if self.fmt == "jsonl":
            head = self._text_schema
            names = head.names if columns is None else columns
            given = types or {}
            schema = pa.schema([(name, given.get(name, head.field(name).type)) for name in names])
            return json_lines.open_batches(
                self._pass_input,
                schema,
                block_size,
                check=None if as_is else self.check_not_rounded,
            )

        convert = self._convert_all() if columns is None else self.convert_options(columns)
        if types:
            convert.column_types = types
        block_size = block_size or _CSV_BLOCK_BYTES
        reader = self._csv_retried(
            lambda read, parse: pcsv.open_csv(
                self._pass_input(),
                read_options=read,
                parse_options=parse,
                convert_options=convert,
            ),
            block_size,
        )
        check = (lambda batch, first_row: None) if as_is else self.check_read_text
        return pa.RecordBatchReader.from_batches(
            reader.schema, self._csv_batches(reader, convert, block_size, check)
        )

    def check_not_rounded(self, data: pa.Table | pa.RecordBatch) -> None:
        """A float64 column of a text table holding a value beyond int64 may hold an integer
        that pyarrow rounded (an integer beyond int64 makes its column float64): the file's
        text says, once per column, and such an integer is an error naming it."""
        import pyarrow.compute as pc
        import pyarrow.types as pt

        for name, column in zip(data.column_names, data.columns, strict=True):
            if not pt.is_float64(column.type) or name in self._exact:
                continue
            # An integer of over 308 digits reads as inf: rounded too (text such as "inf" or
            # "1e999" holds no integer, which the text then says).
            huge = pc.greater_equal(pc.abs(column), _INT64_BOUND)
            if not pc.any(huge).as_py():
                continue
            error = self.rounded_error(name)
            if error is not None:
                raise error
            self._exact.add(name)

    def rounded_error(self, column: str) -> InvalidInputError | None:
        """The error for a text table's ``column`` where its text holds an integer beyond
        int64 (read again, the error's path only): the first, its row and how many there
        are; None if it holds none."""
        found = self._integers_beyond_int64(column)
        if found is None:
            return None
        row, text, count = found
        noun = "such integer" if count == 1 else "such integers"
        return InvalidInputError(
            f"{self.label}: column '{column}' holds {elided(text.strip())} at row {row}, an "
            f"integer beyond int64, which would be read rounded, as a float64 ({count} {noun})"
        )

    def check_read_text(self, data: pa.Table | pa.RecordBatch, first_row: int) -> None:
        """The checks of CSV text as read (``first_row``: the rows before ``data``): UTF-8
        text, and no integer beyond int64."""
        for name, column in zip(data.column_names, data.columns, strict=True):
            check_utf8(column, ColumnRef(self.label, name), first_row)
        self.check_not_rounded(data)

    def _integers_beyond_int64(self, column: str) -> tuple[int, str, int] | None:
        """The first row of ``column`` written as an integer beyond int64, its text, and how
        many such integers there are."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.fmt == "jsonl":
            return self._json_integers_beyond_int64(column)
        rows, first, count = 0, None, 0
        for batch in self.text_batches([column], None, types={column: pa.string()}):
            texts = batch.column(0)
            long = pc.fill_null(pc.match_substring_regex(texts, _LONG_INTEGER), False)
            for row in np.flatnonzero(long.to_numpy(zero_copy_only=False)):
                text = texts[int(row)].as_py()
                if beyond_int64(text):
                    first = first or (rows + int(row), text)
                    count += 1
            rows += batch.num_rows
        return None if first is None else (*first, count)

    def _json_integers_beyond_int64(self, field: str) -> tuple[int, str, int] | None:
        """:meth:`_integers_beyond_int64` of JSON lines: the lines with 19 digits in a row
        parsed by Python's json, which keeps integers whole (pyarrow skips blank lines)."""
        rows, rest = 0, b""
        first, count = None, 0
        with self._input() as stream:
            while True:
                block = stream.read(_CSV_BLOCK_BYTES)
                lines = (rest + block).split(b"\n")
                rest = lines.pop() if block else b""
                for line in lines:
                    if not line.strip():
                        continue
                    if _NINETEEN_DIGITS.search(line):
                        value = json.loads(line, parse_int=_IntegerText).get(field)
                        if isinstance(value, _IntegerText) and beyond_int64(value):
                            first = first or (rows, str(value))
                            count += 1
                    rows += 1
                if not block:
                    return None if first is None else (*first, count)

    def first_row_holding(self, column: str, text: str) -> int | None:
        """The first row whose ``column`` field of a CSV/TSV file is ``text``, read again as
        text (the error path of a streamed read, whose message names no row); None if none,
        for JSON lines, or for a pipe whose bytes are no longer held."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.fmt == "jsonl":
            return None
        rows = 0
        try:
            for batch in self.text_batches([column], None, types={column: pa.string()}):
                # pyarrow's message shows the value without the blanks it trims first
                found = pc.index(pc.utf8_trim_whitespace(batch.column(0)), text.strip()).as_py()
                if found >= 0:
                    return rows + int(found)
                rows += batch.num_rows
        except ReadError:
            if not isinstance(self.source, PipeSource):
                raise
            # A pipe's pass went by the bytes it kept: the row is not known.
        return None

    def _csv_batches(
        self,
        reader: pcsv.CSVStreamingReader,
        convert: pcsv.ConvertOptions,
        block_size: int,
        check: Callable[[pa.RecordBatch, int], None],
    ) -> Iterator[pa.RecordBatch]:
        """The batches of ``reader``; where a later block needs larger blocks or quoted line
        breaks, the file is read again so, in the types already given, past the rows given."""
        schema = reader.schema
        options = [(block_size, False)]  # (block size, line breaks quoted) of the read under way

        def retry(exc: pa.ArrowInvalid, given: int) -> None:
            options.append(_csv_retry(exc, *options[-1]))
            convert.column_types = dict(zip(schema.names, schema.types, strict=True))

        return past_rows_given(
            iter(reader),
            lambda: self._csv_reopened(convert, *options[-1]),
            retry,
            check,
        )

    def _csv_reopened(
        self, convert: pcsv.ConvertOptions, block_size: int, line_breaks_quoted: bool
    ) -> Iterator[pa.RecordBatch]:
        """The batches of the CSV read again from its start (opened at the first batch asked
        for, so that an error on opening is met, and retried, where the batches are read)."""
        import pyarrow.csv as pcsv

        yield from pcsv.open_csv(
            self._pass_input(),
            read_options=self.read_options(block_size),
            parse_options=self.parse_options(line_breaks_quoted),
            convert_options=convert,
        )

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Context manager: library exceptions become one-line ReadErrors about this table; a
        CSV line of another number of fields than the first is named by its line number."""
        try:
            with library_errors(self.label, _WHAT[self.fmt]):
                yield
        except ReadError as exc:
            ragged = _RAGGED.search(str(exc))
            line = None if ragged is None else self._first_ragged_line()
            if ragged is None or line is None:
                raise
            first = "the header" if self.csv.header else "the first line"
            # The record whole, from pyarrow's own message: the ReadError holds its first line
            # only, which a quoted line break in the record cuts short.
            whole = _RAGGED.search(str(exc.__cause__ or exc).replace("\n", "\0"))
            text = ragged["text"] if whole is None else whole["text"].replace("\0", "\n")
            raise ReadError(
                f"{self.label}: line {line} has {ragged['got']} field"
                f"{'' if ragged['got'] == '1' else 's'}, {first} {ragged['expected']}: "
                f"{one_line(text)}"
            ) from exc

    def _first_ragged_line(self) -> int | None:
        """The physical line (as a text editor numbers it) that the first CSV record whose
        fields the first record's do not match starts on; None for a pipe, which cannot be
        read again. pyarrow counts records, and a quoted field may hold line breaks: the text
        is read again, up to that record, to count its lines."""
        from segcli.io.csv_lines import record_start_line  # the csv module: error paths only

        record = self._first_ragged_record()
        if record is None:
            return None
        with self._input() as stream:
            return record_start_line(stream, record, self.parse_options().delimiter)

    def _first_ragged_record(self) -> int | None:
        """pyarrow's number of the first CSV record whose fields the first record's do not
        match (from 1, the header counted, blank lines not), read again on one thread
        (pyarrow's threaded reader knows no record numbers); None for a pipe."""
        import pyarrow.csv as pcsv

        if (
            self.fmt not in ("csv", "tsv")
            or not isinstance(self.source, str)
            or is_pipe(self.source)
        ):
            return None
        records: list[int | None] = []

        def first_only(row: Any) -> str:
            records.append(row.number)
            return "error"

        parse = self.parse_options(line_breaks_quoted=True)
        parse.invalid_row_handler = first_only
        # Not read_options(): naming the columns of a headerless file reads it (and fails).
        # Latin-1: pyarrow decodes a ragged line as UTF-8 before the handler sees it, and a
        # line that is not UTF-8 would end in an "Exception ignored" traceback on stderr. Read
        # as Latin-1, every byte is one character, so lines and fields split as in UTF-8.
        read = pcsv.ReadOptions(
            use_threads=False,
            autogenerate_column_names=not self.csv.header,
            encoding="latin-1",
        )
        # One made-up column of nulls: every line is split, no field converted.
        convert = pcsv.ConvertOptions(include_columns=[" "], include_missing_columns=True)
        try:
            for _ in pcsv.open_csv(
                self._input(), read_options=read, parse_options=parse, convert_options=convert
            ):
                pass
        except Exception:  # the error being named: only the record it noted matters
            pass
        return records[0] if records else None


def _to_line_end(head: bytes, stream: pa.NativeFile, size: int) -> bytes:
    """``head`` and what follows it up to the end of its line: a first line longer than the
    head still gives the columns (its fields)."""
    pieces = [head]
    while piece := stream.read(size):
        pieces.append(piece)
        if b"\n" in piece:
            break
    return b"".join(pieces)


#: Delimiters other tools write, which a header read with another delimiter keeps whole.
_OTHER_DELIMITERS = (";", "|", "\t", ",", " ")


def data_column_list_hint(column: str, names: Sequence[str]) -> str:
    """A hint for agg's list syntax (``--data-column a,b``) given to a command that reads one
    data column: agg splits its list before it asks for each column, so it never needs this."""
    if "," not in column:
        return ""
    try:
        parts = split_names(column)  # as agg reads its list
    except ValueError:
        return ""
    if all(part in names for part in parts):
        return " (one column here; segcli agg --data-column a,b reads several)"
    return ""


def _csv_header_hint(column: str, names: list[str]) -> str:
    """Why a CSV header may lack ``column``: blanks around a name, or another delimiter."""
    spaced = [name for name in names if name.strip() == column]
    if spaced:
        return f" (the header names it {spaced[0]!r}, with blanks: ask for it so)"
    if len(names) == 1:
        for char in _OTHER_DELIMITERS:
            if char in names[0] and column in names[0].split(char):
                return f" (the header is one field: split with --delimiter {char!r}?)"
    return ""


def _csv_retry(exc: Exception, block_size: int, line_breaks_quoted: bool) -> tuple[int, bool]:
    """The block size and line-break option to read a CSV again with after ``exc``; ``exc``
    itself when neither would help."""
    said = str(exc)
    if any(long in said for long in _CSV_LONG_LINE) and block_size < _CSV_LARGEST_BLOCK_BYTES:
        return block_size * 4, line_breaks_quoted
    if any(cut in said for cut in _CSV_QUOTED_LINE_BREAK) and not line_breaks_quoted:
        return block_size, True
    raise exc


def _one_block(head: bytes) -> int:
    """A block size that holds all of ``head``: a first line longer than pyarrow's default
    block still parses."""
    return max(_CSV_BLOCK_BYTES, len(head) + 1)


def _last_line_end(head: bytes, quoted_line_breaks: bool) -> int:
    """The index of ``head``'s last line break; with ``quoted_line_breaks``, the last outside
    a quoted field (CSV quotes, a doubled quote escaping one: an odd count of quotes before a
    line break puts it inside a field), or the last if there is none such."""
    end = head.rindex(b"\n")
    if not quoted_line_breaks:
        return end
    quotes = head.count(b'"', 0, end)
    candidate = end
    while quotes % 2:
        before = head.rfind(b"\n", 0, candidate)
        if before < 0:
            return end
        quotes -= head.count(b'"', before, candidate)
        candidate = before
    return candidate


def is_csv_path(path: str) -> bool:
    """Whether ``path`` names a CSV/TSV file (plain or compressed), by its suffix (the
    CSV options apply to those only)."""
    return suffix_format(path, INPUT_SUFFIXES) in ("csv", "tsv")


def check_unique_names(names: Sequence[str], columns: Sequence[str], label: str) -> None:
    """A ReadError naming the first of ``columns`` that ``names`` (a table's column names)
    holds more than once: which of those columns is meant cannot be told."""
    for column in columns:
        count = list(names).count(column)
        if count > 1:
            raise ReadError(
                f"{label}: {count} columns are named '{column}'; "
                "cannot tell which one to read (rename them)"
            )


def open_table(
    path: str, fmt: str, csv: CsvOptions | None = None, *, one_pass: bool = False
) -> TableFile:
    """A :class:`TableFile` for a path, failing early with 'no such file' if it is missing.

    ``csv`` applies to CSV/TSV files only. A pipe is read once, into memory (Parquet and Arrow
    files need to seek, and a run reading whole may read the table more than once); with
    ``one_pass`` (a streamed run that reads it in one pass), an Arrow IPC stream, CSV/TSV text
    or JSON lines is read as a file is, a block at a time (:class:`PipeSource`).
    """
    if csv is None or fmt not in ("csv", "tsv"):
        csv = CsvOptions()
    if is_pipe(path):
        if one_pass and streams_from_pipe(path, fmt):
            return TableFile(path, fmt, pipe_source(path), csv)
        return TableFile(path, fmt, _decompressed(path, pipe_bytes(path)), csv)
    check_readable(path)
    return TableFile(path, fmt, path, csv)


def streams_from_pipe(path: str, fmt: str) -> bool:
    """Whether the table on the pipe ``path`` (in format ``fmt``) is read in one pass, a block
    at a time: an Arrow IPC stream, or uncompressed CSV/TSV text or JSON lines."""
    if fmt in TEXT_FORMATS:
        return PurePath(path).suffix.lower() not in _CODECS
    if fmt != "arrow":
        return False
    head = pipe_source(path).head(len(ARROW_FILE_MAGIC))
    return head != ARROW_FILE_MAGIC and not head.startswith(FEATHER_V1_MAGIC)


#: pyarrow's codecs by suffix: it decompresses a file by its name, but not bytes in memory.
_CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".lz4": "lz4"}


def _decompressed(path: str, body: bytes) -> bytes:
    """The bytes of a named pipe (``x.csv.gz``), decompressed as its suffix says."""
    codec = _CODECS.get(PurePath(path).suffix.lower())
    if codec is None:
        return body
    import pyarrow as pa

    with (
        library_errors(path, f"not valid {codec} data"),
        pa.CompressedInputStream(pa.BufferReader(body), codec) as stream,
    ):
        return bytes(stream.read())
