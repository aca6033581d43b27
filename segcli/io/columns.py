"""Turning one Arrow column into a NumPy array, with the checks a reduction needs.

Numeric columns convert zero-copy (the array is then read-only); list columns become extra
axes. The schema metadata that :func:`segcli.io.write.write_result` records for N-D and complex
results (``segcli.inner_shape``, ``segcli.dtype``) is applied to the ``value`` column so that
results read back with their full shape and dtype.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from segcli.errors import InvalidInputError, ReadError
from segcli.io.formats import shown

if TYPE_CHECKING:
    import pyarrow as pa

INNER_SHAPE_KEY = b"segcli.inner_shape"
DTYPE_KEY = b"segcli.dtype"
VALUE_COLUMN = "value"

_T = TypeVar("_T")

#: ``--skipna``: a null is a missing value, not an error (see :func:`nulls_kept`).
_KEEP_NULLS: ContextVar[bool] = ContextVar("segcli_keep_nulls", default=False)


@contextmanager
def nulls_kept(keep: bool = True) -> Iterator[None]:
    """Within: columns with nulls convert instead of failing, float nulls as NaN and the
    others as a NumPy masked array (values 0 where masked). A null list is a list of
    missing values, as long as the column's other lists."""
    token = _KEEP_NULLS.set(keep)
    try:
        yield
    finally:
        _KEEP_NULLS.reset(token)


def nulls_are_kept() -> bool:
    """Whether columns read here keep their nulls (within :func:`nulls_kept`)."""
    return _KEEP_NULLS.get()


class NullIdsError(InvalidInputError):
    """Sorted ids holding a null: ``first`` is its position, ``nulls`` how many there are (a
    streamed run adds those of its later blocks with :meth:`and_more`)."""

    def __init__(self, label: str | None, first: int, nulls: int) -> None:
        noun = "null id" if nulls == 1 else "null ids"
        where = f"{label}: " if label else ""  # a library call's ids have no file to name
        super().__init__(
            f"{where}segment_ids[{first}] is null ({nulls} {noun}); --sorted ids cannot be "
            "null, as they cannot be negative"
        )
        self.label, self.first, self.nulls = label, first, nulls

    def __reduce__(self) -> tuple[type[NullIdsError], tuple[str | None, int, int]]:
        # A Dask worker's error travels pickled: rebuilt from these, not from the message.
        return NullIdsError, (self.label, self.first, self.nulls)

    def and_more(self, nulls: int) -> NullIdsError:
        """The same error counting ``nulls`` more."""
        return NullIdsError(self.label, self.first, self.nulls + nulls)


def without_null_ids(
    ids: Any, *, sorted_ids: bool = False, label: str | None = "ids", first_row: int = 0
) -> tuple[np.ndarray[Any, Any], int]:
    """Ids with their nulls (masked values, see :func:`nulls_kept`) as -1, which drops their
    rows like a negative id, and how many there were. Unsigned ids widen to a signed dtype
    that holds them all. Sorted ids refuse a null, as they refuse a negative id; the error
    names the first (``first_row`` is the global position of the first id)."""
    if type(ids) is np.ndarray:  # no mask: numpy.ma (about 8 ms to import) stays unloaded
        return ids, 0
    mask = np.ma.getmask(ids)
    values = np.ma.getdata(ids)
    if mask is np.ma.nomask:
        return values, 0
    nulls = int(np.count_nonzero(mask))
    if sorted_ids and nulls:
        first = first_row + int(np.flatnonzero(mask.reshape(-1))[0])
        raise NullIdsError(label, first, nulls)
    if values.dtype.kind == "u":
        wide = np.dtype(f"i{min(8, 2 * values.dtype.itemsize)}")
        if values.size and values.dtype.itemsize == 8 and int(values.max()) > np.iinfo(wide).max:
            wide = np.dtype(np.float64)  # too large for any signed dtype: an error as float ids
        values = values.astype(wide)
    return np.where(mask, values.dtype.type(-1), values), nulls


@dataclass(frozen=True)
class ColumnRef:
    """Names a column in error messages: ``data.parquet: column 'value' ...``."""

    file: str
    column: str

    @property
    def label(self) -> str:
        """The ``file:column`` label of :class:`segcli.io.ArrayInput`."""
        return f"{self.file}:{self.column}"

    def fail(self, problem: str) -> InvalidInputError:
        """An InvalidInputError about this column."""
        return InvalidInputError(f"{self.file}: column '{self.column}' {problem}")


@dataclass(frozen=True)
class ValueLayout:
    """How segcli stored a result's value column: its full inner shape and its dtype."""

    inner_shape: tuple[int, ...]
    dtype: np.dtype[Any] | None

    def restore(self, array: np.ndarray[Any, Any], where: ColumnRef) -> np.ndarray[Any, Any]:
        """Rebuild ``(n, *inner_shape)`` (complex from re/im pairs) from the converted column."""
        rows = array.shape[0]
        try:
            if self.dtype is not None and self.dtype.kind == "c":
                # Complex values are stored as (re, im) pairs of the component float type.
                width = math.prod(array.shape[1:])
                component = np.zeros(0, self.dtype).real.dtype
                pairs = np.ascontiguousarray(array.reshape(rows, width), dtype=component)
                array = pairs.view(self.dtype)
            return array.reshape((rows, *self.inner_shape))
        except ValueError as exc:
            raise ReadError(
                f"{where.file}: column '{where.column}' does not match its recorded inner shape "
                f"{list(self.inner_shape)}"
            ) from exc


#: Far beyond any real inner shape, small enough that its product cannot overflow int64.
_MAX_INNER_DIMS = 32
_MAX_DIM = 2**31


def value_layout(schema: pa.Schema, column: str, file: str) -> ValueLayout | None:
    """The layout recorded in the schema metadata, if ``column`` is a segcli ``value`` column.

    The metadata comes from a file, so anything but what :func:`segcli.io.write_result` writes
    (a short JSON list of small non-negative integers, a numeric dtype name) is a ReadError.
    """
    meta = schema.metadata or {}
    if column != VALUE_COLUMN or (INNER_SHAPE_KEY not in meta and DTYPE_KEY not in meta):
        return None
    inner = _inner_shape(meta.get(INNER_SHAPE_KEY, b"[]"), file)
    dtype = _recorded_dtype(meta[DTYPE_KEY], file) if DTYPE_KEY in meta else None
    return ValueLayout(inner, dtype)


def _bad_metadata(file: str, key: bytes, raw: bytes, why: str) -> ReadError:
    shown = raw[:40].decode(errors="replace") + ("..." if len(raw) > 40 else "")
    return ReadError(f"{file}: bad {key.decode()} in the schema metadata ({shown!r}: {why})")


def _inner_shape(raw: bytes, file: str) -> tuple[int, ...]:
    why = f"need a list of at most {_MAX_INNER_DIMS} integers in [0, {_MAX_DIM}]"
    if len(raw) > 1024:  # also keeps json from recursing into deeply nested brackets
        raise _bad_metadata(file, INNER_SHAPE_KEY, raw, why)
    try:
        dims = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _bad_metadata(file, INNER_SHAPE_KEY, raw, "not JSON") from exc
    if not isinstance(dims, list) or len(dims) > _MAX_INNER_DIMS:
        raise _bad_metadata(file, INNER_SHAPE_KEY, raw, why)
    for dim in dims:
        if type(dim) is not int or not 0 <= dim <= _MAX_DIM:
            raise _bad_metadata(file, INNER_SHAPE_KEY, raw, why)
    return tuple(dims)


def _recorded_dtype(raw: bytes, file: str) -> np.dtype[Any]:
    try:
        dtype = np.dtype(raw.decode())
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise _bad_metadata(file, DTYPE_KEY, raw, "not a NumPy dtype") from exc
    if dtype.kind not in "biufc":
        raise _bad_metadata(file, DTYPE_KEY, raw, "not a numeric dtype")
    return dtype


def max_axes() -> int:
    """The most axes a NumPy array has (NPY_MAXDIMS: 32 before NumPy 2, 64 since)."""
    return 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32


def check_type(type_: pa.DataType, where: ColumnRef) -> None:
    """Accept numeric, bool and (fixed-size) lists of those; refuse anything else by name."""
    import pyarrow.types as pt

    leaf, depth = _plain_type(type_), 0
    while _is_list(leaf):
        leaf = _plain_type(leaf.value_type)
        depth += 1
    if depth >= max_axes():  # JSON lines nest lists as deep as their brackets go
        raise where.fail(
            f"holds lists nested {depth:,} deep: with its rows, more axes than the "
            f"{max_axes()} of a NumPy array"
        )
    if pt.is_integer(leaf) or pt.is_floating(leaf) or pt.is_boolean(leaf):
        return
    if pt.is_null(leaf):
        return  # an all-null column: reported as nulls, with their count
    raise where.fail(f"has type {type_}, not a numeric type")


# A number as pyarrow's CSV reader reads one (blanks around it are trimmed).
_NUMBER = r"^\s*[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?i:inf|infinity|nan))\s*$"
# A number written with thousands separators or a decimal comma: "1,000", "2,5", "1.234,5".
_LOCALE_NUMBER = re.compile(r"\s*[-+]?\d[\d.,' ]*,[\d.,' ]*\d\s*|\s*[-+]?\d+,\d+\s*")
_UTF8_SCAN_ROWS = 1 << 16  # rows decoded at once when looking for the first non-UTF-8 value


def is_number_text(text: str) -> bool:
    """Whether a text value reads as a number (the rule by which a text column's values that
    are not numbers are found and counted)."""
    return re.match(_NUMBER, text) is not None


def check_text_type(
    values: pa.Array | pa.ChunkedArray,
    where: ColumnRef,
    whole: Callable[[], Iterable[pa.Array]] | None = None,
) -> None:
    """:func:`check_type` for a column read from text (CSV/TSV, JSON lines), whose first rows
    are ``values``: a column that is text names its first value that is not a number, and how
    many there are. ``whole``: the whole column again as text, where ``values`` are only its
    first rows (a streamed read), read on this error's path only, so that the error is the one
    a whole read gives."""
    check_utf8(values, where)
    try:
        check_type(values.type, where)
    except InvalidInputError as exc:
        found = _first_non_number(values, whole)
        if found is None:
            raise
        raise InvalidInputError(f"{exc}: {found}") from None


def _first_non_number(
    values: pa.Array | pa.ChunkedArray, whole: Callable[[], Iterable[pa.Array]] | None
) -> str | None:
    """Where the first value of a text column that is not a number is, what it holds and how
    many such values there are; read from ``whole()`` when given (else ``values``, the whole
    column), and from ``values`` if that read fails."""
    import pyarrow as pa
    import pyarrow.types as pt

    type_ = values.type
    if not (pt.is_string(type_) or pt.is_large_string(type_)):
        return None
    if whole is not None:
        try:
            return _text_offenders(whole())
        except (pa.ArrowException, InvalidInputError, ReadError):
            pass  # the whole column is not text throughout: as its first rows say
    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    return _text_offenders(chunks)


def _text_offenders(pieces: Iterable[pa.Array]) -> str | None:
    """The first value of a text column's ``pieces`` (in order) that is not a number, with the
    count of such values; where each is a number, written as text (quoted in JSON lines), the
    first value and the count of values."""
    import pyarrow.compute as pc  # the error's path only

    other: tuple[int, str, int] | None = None  # (first row, its text, how many)
    text: tuple[int, str, int] | None = None  # the same of any value (not null)
    start = 0
    for piece in pieces:
        valid = numpy_of(pc.is_valid(piece))
        bad = ~numpy_of(pc.fill_null(pc.match_substring_regex(piece, _NUMBER), True))
        if bad.any():
            row = int(np.argmax(bad))
            first = other or (start + row, piece[row].as_py(), 0)
            other = (first[0], first[1], first[2] + int(np.count_nonzero(bad)))
        if valid.any():
            row = int(np.argmax(valid))
            first = text or (start + row, piece[row].as_py(), 0)
            text = (first[0], first[1], first[2] + int(np.count_nonzero(valid)))
        start += len(piece)
    if other is not None:
        row, value, count = other
        noun = "value that is not a number" if count == 1 else "values that are not numbers"
        hint = ""
        if _LOCALE_NUMBER.fullmatch(value):
            hint = "; thousands separators and decimal commas are not read: write 1234.5"
        return f"row {row} holds {shown(value)} ({count} {noun}{hint})"
    if text is not None:  # numbers, each as text: quoted in JSON lines
        row, value, count = text
        noun = "value" if count == 1 else "values"
        quotes = "a number in quotes is text"
        return f"row {row} holds the text {shown(value)} ({count} {noun} of text; {quotes})"
    return None


def check_utf8(values: pa.Array | pa.ChunkedArray, where: ColumnRef, first_row: int = 0) -> None:
    """pyarrow's CSV reader makes a column binary when its text is not all UTF-8: a ReadError
    naming the first value that is not, rather than keys shown as hex or a type error."""
    import pyarrow.types as pt

    if not (pt.is_binary(values.type) or pt.is_large_binary(values.type)):
        return
    for start in range(0, len(values), _UTF8_SCAN_ROWS):
        for row, value in enumerate(values[start : start + _UTF8_SCAN_ROWS].to_pylist(), start):
            try:
                if value is not None:
                    value.decode()
            except UnicodeDecodeError:
                raise ReadError(
                    f"{where.file}: column '{where.column}' row {first_row + row} holds "
                    f"{shown(value)}, which is not UTF-8; convert the file to UTF-8 "
                    "(e.g. iconv -f latin1 -t utf-8)"
                ) from None


def numpy_dtype(type_: pa.DataType) -> np.dtype[Any]:
    """The NumPy dtype the leaf values of an accepted Arrow type convert to."""
    import pyarrow.types as pt

    type_ = _plain_type(type_)
    while _is_list(type_):
        type_ = _plain_type(type_.value_type)
    if pt.is_null(type_):
        return np.dtype(np.float64)  # matches what an empty all-null column converts to
    dtype: np.dtype[Any] = np.dtype(type_.to_pandas_dtype())
    return dtype


def column_to_numpy(
    column: pa.Array | pa.ChunkedArray,
    where: ColumnRef,
    *,
    first_row: int = 0,
    layout: ValueLayout | None = None,
) -> np.ndarray[Any, Any]:
    """Convert one column to NumPy; list columns add axes, nulls and bad types are errors.

    ``first_row`` is the global row of the column's first element, so that chunked readers can
    report the row a null sits at in the whole file.
    """
    import pyarrow as pa

    check_type(column.type, where)
    column = _decoded(column)
    if isinstance(column, pa.ChunkedArray):
        # One chunk converts zero-copy; several must be joined (one copy) to be one array.
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    try:
        array = _convert(column, where, first_row, 1)
    except _NullMet:
        # Named as a read of the column in pieces names it: every null, at every depth.
        tally = NullTally(where)
        tally.add(column, first_row)
        raise tally.error() from None
    return layout.restore(array, where) if layout is not None else array


def _plain_type(type_: pa.DataType) -> pa.DataType:
    """The type a column of ``type_`` is read as: dictionaries by their values, decimals as
    float64."""
    import pyarrow as pa
    import pyarrow.types as pt

    if pt.is_dictionary(type_):
        type_ = type_.value_type
    if pt.is_decimal(type_):
        return pa.float64()
    return type_


def read_as_note(type_: pa.DataType) -> str | None:
    """A note for the summary when values are converted on reading (decimals to float64)."""
    import pyarrow.types as pt

    if pt.is_dictionary(type_):
        type_ = type_.value_type
    if pt.is_decimal(type_):
        return f"{type_} read as float64"
    return None


def _decoded(column: Any) -> Any:
    """Dictionary-encoded and decimal columns (not inside lists) cast to their plain type."""
    import pyarrow as pa
    import pyarrow.types as pt

    plain = _plain_type(column.type)
    if plain == column.type:
        return column
    if pt.is_dictionary(column.type) and pt.is_nested(plain):
        # pyarrow casts no dictionary of lists to its values: each row's value is looked up.
        kernels = _kernels()
        if isinstance(column, pa.ChunkedArray):
            pieces = [kernels.dictionary_decode(chunk) for chunk in column.chunks]
            return pa.chunked_array(pieces, type=plain)
        return kernels.dictionary_decode(column)
    return _kernels().cast(column, plain)


def _is_list(type_: pa.DataType) -> bool:
    import pyarrow.types as pt

    return bool(pt.is_fixed_size_list(type_) or pt.is_list(type_) or pt.is_large_list(type_))


def _convert(
    array: pa.Array, where: ColumnRef, first_row: int, per_row: int
) -> np.ndarray[Any, Any]:
    """Convert ``array``; each top-level row owns ``per_row`` consecutive elements of it."""
    import pyarrow.types as pt

    if array.null_count and _KEEP_NULLS.get():
        if _is_list(array.type):
            return _with_null_lists(array, where, first_row, per_row)
        return _with_nulls(array)
    if array.null_count:
        raise _NullMet
    if pt.is_null(array.type):
        return np.zeros(0)  # only reached when empty: a non-empty null column failed above
    if not _is_list(array.type):
        plain = _decoded(array)
        fixed = _fixed_width_view(plain)
        return fixed if fixed is not None else np.asarray(plain.to_numpy(zero_copy_only=False))
    if pt.is_fixed_size_list(array.type):
        width = array.type.list_size
    else:
        width = _common_length(array, where, first_row, per_row)
    # flatten() honours the array's slice offset, unlike .values.
    inner = _convert(array.flatten(), where, first_row, per_row * max(width, 1))
    return inner.reshape((len(array), width, *inner.shape[1:]))


def _with_nulls(array: pa.Array) -> np.ndarray[Any, Any]:
    """A column holding nulls under ``--skipna``: NaN for float nulls, else masked (0 where
    null). Read from the buffers: pyarrow's ``fill_null`` imports pandas for its scalar."""
    import pyarrow.types as pt

    plain = _decoded(array)
    if pt.is_null(plain.type):
        return np.full(len(plain), np.nan)
    filled = _nan_filled(plain)
    if filled is not None:
        return filled
    validity, data = plain.buffers()[:2]
    null = ~_bits(validity, plain.offset, len(plain))
    if pt.is_boolean(plain.type):
        values = _bits(data, plain.offset, len(plain))
    else:
        dtype = numpy_dtype(plain.type)
        view = np.frombuffer(data, dtype, count=len(plain), offset=plain.offset * dtype.itemsize)
        values = view.copy()
    if pt.is_floating(plain.type):
        values[null] = np.nan
        return values
    values[null] = 0
    return np.ma.MaskedArray(values, mask=null)


def _with_null_lists(
    array: pa.Array, where: ColumnRef, first_row: int, per_row: int
) -> np.ndarray[Any, Any]:
    """A list column holding null lists under ``--skipna``: a null list is a list of missing
    values as long as the column's other lists (NaN for floats, else masked), so that every
    op skips each of its elements, as it skips a null inside a list."""
    import pyarrow.types as pt

    valid = numpy_of(_kernels().is_valid(array))
    rows = np.flatnonzero(valid)
    if not pt.is_fixed_size_list(array.type):
        # The offsets, not list_value_length: a null list has no length, and its rows must
        # not be renumbered before the error names them.
        lengths = np.diff(numpy_of(array.offsets))[rows]
        differ = np.flatnonzero(lengths != lengths[0]) if len(rows) else rows
        if len(differ):
            first, other = int(rows[0]), int(rows[differ[0]])
            raise where.fail(
                f"has lists of different lengths ({int(lengths[0])} at row "
                f"{first_row + first // per_row}, {int(lengths[differ[0]])} at row "
                f"{first_row + other // per_row}); need one length to make an array"
            )
    present = _convert(_kernels().drop_null(array), where, first_row, per_row)
    shape = (len(array), *present.shape[1:])
    if present.dtype.kind == "f":
        filled = np.full(shape, np.nan, present.dtype)
        filled[rows] = present
        return filled
    values = np.zeros(shape, present.dtype)
    values[rows] = np.ma.getdata(present)
    missing = np.ones(shape, np.bool_)
    missing[rows] = np.ma.getmaskarray(present)
    return np.ma.MaskedArray(values, mask=missing)


def sample_to_numpy(
    first: pa.Array, where: ColumnRef, layout: ValueLayout | None = None
) -> np.ndarray[Any, Any]:
    """A streamed column's first row (see :func:`shape_row`) converted to fix its inner shape
    and dtype; its nulls are kept, for the blocks to name with every null of the column
    counted (the first row alone would say "1 null")."""
    with nulls_kept():
        return column_to_numpy(first, where, layout=layout)


def shape_row(pieces: Iterable[pa.Array], first: pa.Array) -> pa.Array:
    """The row of a list column that fixes its inner shape when read in blocks: ``first`` (its
    first row), unless that is a null list, which has no length (a row of missing values under
    ``--skipna``): then the first list of ``pieces`` that is not null, else ``first``."""
    if not (len(first) and first.null_count and _is_list(first.type)):
        return first
    for piece in pieces:
        if piece.null_count < len(piece):
            row = int(np.argmax(numpy_of(_kernels().is_valid(piece))))
            return piece.slice(row, 1)
    return first


def widened_null_lists(
    block: np.ndarray[Any, Any], piece: pa.Array | pa.ChunkedArray, inner: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """``block`` as converted from ``piece``, or, when the piece holds only null lists (kept as
    missing values under ``--skipna``), which convert with no length, missing values of the
    column's ``inner`` shape."""
    if block.shape[1:] == inner or not _is_list(piece.type) or piece.null_count < len(piece):
        return block
    shape = (len(piece), *inner)
    if block.dtype.kind == "f":
        return np.full(shape, np.nan, block.dtype)
    return np.ma.MaskedArray(np.zeros(shape, block.dtype), mask=np.ones(shape, np.bool_))


def _nan_filled(array: pa.Array) -> np.ndarray[Any, Any] | None:
    """A float32 or float64 array with its nulls as NaN, by pyarrow's ``fill_null``: one pass,
    into memory its allocator hands back still warm (a 512K-row block of a streamed run: 0.55
    ms against 0.9 for a NumPy copy and a masked store). The NaN scalar comes from an array:
    given a Python float, pyarrow builds its scalar through pandas. None for other types."""
    import pyarrow.types as pt

    if not (pt.is_float32(array.type) or pt.is_float64(array.type)):
        return None
    dtype = numpy_dtype(array.type)
    filled = _kernels().fill_null(array, arrow_array(np.array([np.nan], dtype))[0])
    data = filled.buffers()[1]
    return np.frombuffer(data, dtype, count=len(filled), offset=filled.offset * dtype.itemsize)


def _bits(buffer: pa.Buffer, offset: int, length: int) -> np.ndarray[Any, Any]:
    """An Arrow bitmap (validity, or bool values) as a new bool array."""
    packed = np.frombuffer(buffer, np.uint8)
    bits = np.unpackbits(packed, count=offset + length, bitorder="little")[offset:]
    return bits.view(np.bool_)


def _fixed_width_view(array: pa.Array) -> np.ndarray[Any, Any] | None:
    """A read-only view of a null-free integer or float array's data buffer, else None.

    pyarrow's to_numpy imports pandas when it is installed (a fifth of a second of start-up
    for a one-off command): the buffer is all a fixed-width primitive array holds."""
    import pyarrow.types as pt

    if array.null_count or not (pt.is_integer(array.type) or pt.is_floating(array.type)):
        return None
    buffer = array.buffers()[1]
    if buffer is None or not buffer.is_cpu:
        return None
    dtype = numpy_dtype(array.type)
    view = np.frombuffer(buffer, dtype, count=len(array), offset=array.offset * dtype.itemsize)
    view.flags.writeable = False  # as to_numpy's zero-copy arrays: the buffer is Arrow's
    return view


def _common_length(array: pa.Array, where: ColumnRef, first_row: int, per_row: int) -> int:
    """The one length all lists of a variable-size list array share, else an error."""
    lengths = numpy_of(_kernels().list_value_length(array))
    if len(lengths) == 0:
        return 0
    differ = np.flatnonzero(lengths != lengths[0])
    if len(differ):
        k = int(differ[0])
        raise where.fail(
            f"has lists of different lengths ({int(lengths[0])} at row "
            f"{first_row}, {int(lengths[k])} at row {first_row + k // per_row}); "
            "need one length to make an array"
        )
    return int(lengths[0])


class _NullMet(Exception):
    """A null where none may be, met while converting: :func:`column_to_numpy` then counts
    the column's nulls for its error."""


class NullsError(InvalidInputError):
    """A column holds nulls where it may not: a streamed reader then counts the rest of them
    (:class:`NullTally`). ``row`` is the first row holding one (None if not known), so that of
    the errors of columns read side by side the earliest is raised (:func:`first_nulls`)."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row

    def __reduce__(self) -> tuple[type[NullsError], tuple[str, int | None]]:
        # A Dask worker's error travels pickled: rebuilt from these, its row kept.
        return NullsError, (str(self), self.row)


def first_nulls(errors: Iterable[NullsError]) -> NullsError:
    """Of the null errors of columns read side by side (DATA's, then IDS'), the one naming the
    earliest row, as a read of both row by row meets it; on a tie, the first given."""
    found = list(errors)
    rows = [math.inf if error.row is None else error.row for error in found]
    return found[rows.index(min(rows))]


def side_by_side(reads: Iterable[Callable[[], _T]]) -> list[_T]:
    """What each of ``reads`` (of columns read side by side: DATA's, then IDS') gives, in
    order. A read that fails on nulls does not stop the others: of their null errors, the one
    naming the earliest row is raised (see :func:`first_nulls`), as a streamed read of the
    columns block by block meets it; once one is pending, another read's other errors are
    not looked at."""
    results: list[_T] = []
    nulls: list[NullsError] = []
    for read in reads:
        try:
            results.append(read())
        except NullsError as error:
            nulls.append(error)
        except InvalidInputError:
            if not nulls:
                raise
    if nulls:
        raise first_nulls(nulls)
    return results


def _nulls_error(where: ColumnRef, whole: int, inside: int, row: int, lists: bool) -> NullsError:
    counts = []
    if whole:
        noun = "null list" if lists else "null"
        counts.append(f"{whole} {noun}{'s' if whole > 1 else ''}")
    if inside:
        counts.append(f"{inside} null{'s' if inside > 1 else ''} inside its lists")
    # The words of ColumnRef.fail, in the class a streamed reader recognises.
    return NullsError(
        f"{where.file}: column '{where.column}' has {' and '.join(counts)} (first at row {row})",
        row,
    )


def _nulls_in(array: pa.Array) -> tuple[int, int, int | None]:
    """The nulls of ``array``: its own (null rows, or null lists), those inside its lists
    (values of lists that are not null, at any depth), and the index of the first row holding
    either (None if there is none)."""
    whole, inside = array.null_count, 0
    first = int(np.argmax(numpy_of(_kernels().is_null(array)))) if whole else None
    level, rows = array, None  # rows: the row of each value of ``level`` (None: the identity)
    while _is_list(level.type) and len(level):
        parents = numpy_of(_kernels().list_parent_indices(level))
        rows = parents if rows is None else rows[parents]
        level = level.flatten()  # the values of the lists that are not null
        if level.null_count:
            inside += level.null_count
            # Given a Python True, pyarrow's index builds its scalar through pandas (0.2 s).
            row = int(rows[int(np.argmax(numpy_of(_kernels().is_null(level))))])
            first = row if first is None else min(first, row)
    return whole, inside, first


class NullTally:
    """The nulls of a column read in pieces, counted as :func:`column_to_numpy` names them
    when it converts the whole column: the null rows (null lists in a list column), the nulls
    inside its lists, and the first row holding either.

    A streamed reader whose block fails on a null counts that block and the rest of its input
    here, without converting them, so that its error is the one a whole read gives."""

    def __init__(self, where: ColumnRef) -> None:
        self._where = where
        self._whole = self._inside = 0
        self._row: int | None = None
        self._lists = False

    def add(self, column: pa.Array | pa.ChunkedArray, first_row: int) -> None:
        """Count the nulls of the piece ``column``, whose first row is ``first_row``."""
        import pyarrow as pa

        if _KEEP_NULLS.get():
            return  # --skipna: a null, a null list too, is a missing value, never an error
        column = _decoded(column)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        self._lists = self._lists or _is_list(column.type)
        whole, inside, first = _nulls_in(column)
        if first is not None and self._row is None:
            self._row = first_row + first
        self._whole += whole
        self._inside += inside

    @property
    def counted(self) -> bool:
        """Whether any null was counted."""
        return self._row is not None

    @property
    def row(self) -> int | None:
        """The first row holding a null (None if none was counted)."""
        return self._row

    def add_tally(self, later: NullTally) -> None:
        """Count the nulls ``later`` counted in pieces after this tally's (a Dask partition's
        further on, perhaps of a later file, which the error then names)."""
        if not later.counted:
            return
        if not self.counted:
            self._where, self._row = later._where, later._row
        self._whole += later._whole
        self._inside += later._inside
        self._lists = self._lists or later._lists

    def error(self) -> NullsError:
        """The error naming the nulls counted (at least one)."""
        assert self._row is not None, "no null was counted"
        return _nulls_error(self._where, self._whole, self._inside, self._row, self._lists)


def _kernels() -> Any:
    """pyarrow's kernels called by name (:mod:`segcli.io.arrow_kernels`), loaded on the first
    conversion that needs one: a plain numeric column needs none."""
    from segcli.io import arrow_kernels

    return arrow_kernels


def arrow_array(values: np.ndarray) -> pa.Array:
    """A 1-D bool or numeric NumPy array as Arrow, sharing its memory where the layout allows.

    ``pa.array`` imports pandas (when installed) to check for its types: a fifth of a second
    of every command's start-up that a NumPy array never needs."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    type_ = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def numpy_of(array: pa.Array) -> np.ndarray[Any, Any]:
    """A null-free bool or numeric Arrow array as NumPy, read from its buffers (a view where the
    layout allows, read-only then); other arrays through ``to_numpy``, which imports pandas."""
    import pyarrow.types as pt

    if pt.is_boolean(array.type) and not array.null_count and array.buffers()[1] is not None:
        bits = np.frombuffer(array.buffers()[1], np.uint8)
        unpacked = np.unpackbits(bits, count=array.offset + len(array), bitorder="little")
        return unpacked[array.offset :].view(np.bool_)
    view = _fixed_width_view(array)
    return view if view is not None else np.asarray(array.to_numpy(zero_copy_only=False))
