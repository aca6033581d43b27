"""Results as text: the lines printed without ``-o``, and the rows of CSV/TSV output.

Values are written as ``str()`` of the NumPy scalar of the result dtype: the shortest text that
reads back to the same value (``1.5``, ``3.4028235e+38``, ``nan``, ``inf``, ``-inf``, plain
integers, complex as ``(1+2j)``), unless a printf-style ``float_format`` (``%.6g``) is given
for float values.

NumPy's own ``astype(str)`` is exact but slow (about 2 µs a value), so integers and float32 /
float64 values go through Arrow's cast to string, which finds the same shortest digits, and
the few layout differences are patched up by :func:`_float_cells`. Values whose NumPy text
cannot be derived that way (and float16, bool, complex) still use ``astype(str)``.
"""

from __future__ import annotations

import io
import math
import os
import re
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli.errors import UsageError
from segcli.io.columns import arrow_array, numpy_of

if TYPE_CHECKING:
    import pyarrow as pa

BLOCK_ROWS = 1 << 18  # rows converted at once: bounds the temporary string arrays
_MAX_THREADS = 4  # blocks formatted at once; more gained little over 4 cores
ARROW_FROM_ROWS = 4096  # smaller results are formatted by NumPy alone: no pyarrow import

_Array = np.ndarray[Any, Any]

# NumPy prints a float positionally when 1e-4 <= |x| < this bound (or x == 0), else in
# scientific notation; the bound is 10**(digits the type holds), found in NumPy's scalar repr.
_POSITIONAL_BELOW = {np.dtype(np.float32): 1e6, np.dtype(np.float64): 1e16}
_POSITIONAL_FROM = 1e-4
# Exactly one float conversion (flags, width, precision), any other text with %% escaped.
_FLOAT_FORMAT = re.compile(r"(?:[^%]|%%)*%[-+ #0]*\d*(?:\.\d*)?[eEfFgG](?:[^%]|%%)*")


#: Characters that end or quote a cell of CSV, TSV or stdout text.
_CELL_BREAKERS = frozenset(',\t"\r\n')


def check_float_format(fmt: str) -> str:
    """``fmt`` if it is a printf format for one float (``%.6g``, ``%10.3f``), else a UsageError.
    Its other text may not hold a field separator, a quote or a line break: a cell holding one
    would split its row in CSV, TSV or text output."""
    if not _FLOAT_FORMAT.fullmatch(fmt):
        raise UsageError(
            f"--float-format {fmt!r}: need one printf float conversion such as %.6g, %.3f or %e"
        )
    splitting = sorted({char for char in fmt if char in _CELL_BREAKERS})
    if splitting:
        raise UsageError(
            f"--float-format {fmt!r}: holds {', '.join(map(repr, splitting))}, which would "
            "split the cells of text output; keep separators, quotes and line breaks out of it"
        )
    return fmt


def format_text_lines(result: _Array, *, float_format: str | None = None) -> Iterator[str]:
    """Yield one line per segment, ``segment<TAB>value<TAB>value...``, without the newline.

    Inner dimensions are flattened in C order, so a ``(n, 2, 3)`` result gives 6 values a line.
    """
    for block in text_blocks(result, "\t", float_format=float_format):
        yield from block.decode().splitlines()


def text_blocks(
    result: _Array,
    sep: str,
    counts: _Array | None = None,
    *,
    float_format: str | None = None,
) -> Iterator[bytes]:
    """Blocks of lines ``segment{sep}value{sep}...[{sep}count]\\n`` as bytes, for a result of
    one or more axes."""
    if result.ndim == 0:
        raise ValueError("a result has at least one axis (the segments)")
    rows = result.shape[0]
    flat = result.reshape(rows, math.prod(result.shape[1:]))
    if rows < ARROW_FROM_ROWS:
        yield from _small_blocks(flat, sep, counts, float_format)
        return
    import pyarrow.csv as pcsv

    # quoting "none": every cell is a number, and quotes would change today's bytes.
    options = pcsv.WriteOptions(include_header=False, delimiter=sep, quoting_style="none")

    def block(start: int) -> bytes:
        stop = min(start + BLOCK_ROWS, rows)
        columns = [_cells(np.arange(start, stop, dtype=np.int64), None)]
        columns += [_cells(flat[start:stop, j], float_format) for j in range(flat.shape[1])]
        if counts is not None:
            columns.append(_cells(np.asarray(counts[start:stop]), None))
        return _csv_bytes(columns, options)

    yield from _ordered_map(block, range(0, rows, BLOCK_ROWS))


def _ordered_map(function: Callable[[int], bytes], items: range) -> Iterator[bytes]:
    """``function`` of each item, in order, computed by a few threads (Arrow's casts release
    the GIL), with at most two blocks per thread in flight to bound memory."""
    workers = min(_MAX_THREADS, os.cpu_count() or 1)
    if workers == 1 or len(items) == 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[Future[bytes]] = deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _small_blocks(
    flat: _Array, sep: str, counts: _Array | None, float_format: str | None
) -> Iterator[bytes]:
    """The lines of a small result with NumPy alone (loading pyarrow would take longer)."""
    columns = [np.arange(len(flat)).astype(str)]
    columns += [_numpy_cells(flat[:, j], float_format) for j in range(flat.shape[1])]
    if counts is not None:
        columns.append(value_strings(np.asarray(counts)))
    lines = map(sep.join, zip(*(column.tolist() for column in columns), strict=True))
    text = "".join(line + "\n" for line in lines)
    if text:
        yield text.encode()


def _numpy_cells(values: _Array, float_format: str | None) -> _Array:
    if float_format is not None and values.dtype.kind in "fc":
        return _printf(values, float_format)
    return value_strings(values)


def _csv_bytes(columns: list[pa.Array], options: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.csv as pcsv

    table = pa.table({str(i): column for i, column in enumerate(columns)})
    buffer = io.BytesIO()
    pcsv.write_csv(table, buffer, options)
    return buffer.getvalue()


def _cells(values: _Array, float_format: str | None) -> pa.Array:
    """The text of a 1-D column of values, as an Arrow string array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = values.astype(values.dtype.newbyteorder("="), copy=False)  # Arrow: native only
    kind = values.dtype.kind
    if kind in "iu":
        return pc.cast(arrow_array(values), pa.string())
    if values.dtype in _POSITIONAL_BELOW and float_format is None:
        return _float_cells(values)
    return pa.array(_numpy_cells(values, float_format).tolist(), pa.string())


def _float_cells(values: _Array) -> pa.Array:
    """NumPy's ``str`` of each float32/float64 value, built from Arrow's shortest digits.

    Arrow and NumPy agree on the digits and on ``nan``/``inf``; they differ in layout: NumPy
    writes ``1.0`` where Arrow writes ``1``, pads exponents to two digits (``1e-05``), and
    switches between positional and scientific notation at other magnitudes. Rows where the
    two notations differ are left to NumPy.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    values = np.ascontiguousarray(values)
    cells = pc.cast(arrow_array(values), pa.string())
    with np.errstate(invalid="ignore"):  # NaN payloads: compared, never computed with
        magnitude = np.abs(values.astype(np.float64))
        finite = np.isfinite(magnitude)
        positional = (magnitude == 0) | (
            (magnitude >= _POSITIONAL_FROM) & (magnitude < _POSITIONAL_BELOW[values.dtype])
        )
        integral = values == np.trunc(values)
    arrow_scientific = numpy_of(pc.match_substring(cells, "e"))
    whole = positional & ~arrow_scientific & integral
    cells = _patch(cells, whole, lambda part: pc.binary_join_element_wise(part, ".0", ""))
    padded = finite & ~positional & arrow_scientific
    cells = _patch(
        cells, padded, lambda part: pc.replace_substring_regex(part, r"e([+-])(\d)$", r"e\10\2")
    )
    large = finite & ~positional & ~arrow_scientific & (magnitude >= 1)
    cells = _patch(cells, large, _large_to_scientific)
    small = finite & ~positional & ~arrow_scientific & (magnitude < 1)
    cells = _patch(cells, small, _small_to_scientific)
    # Left: values NumPy prints positionally that Arrow gave in scientific notation.
    numpy_only = finite & positional & arrow_scientific
    if numpy_only.any():
        strings = pa.array(value_strings(values[numpy_only]).tolist(), pa.string())
        cells = pc.replace_with_mask(cells, arrow_array(numpy_only), strings)
    return cells


def _large_to_scientific(cells: pa.Array) -> pa.Array:
    """``-1234567.5`` -> ``-1.2345675e+06``: Arrow's positional text of |x| >= 1 as NumPy's
    scientific one (trailing zeros dropped, exponent of at least two digits)."""
    import pyarrow.compute as pc

    parts = pc.extract_regex(cells, r"^(?P<sign>-?)(?P<lead>\d)(?P<rest>\d*)(?:\.(?P<frac>\d*))?$")
    rest = parts.field("rest")
    digits = pc.binary_join_element_wise(rest, parts.field("frac"), "")
    exponent = pc.utf8_lpad(pc.cast(pc.utf8_length(rest), "string"), 2, "0")
    return _scientific(parts.field("sign"), parts.field("lead"), digits, "e+", exponent)


def _small_to_scientific(cells: pa.Array) -> pa.Array:
    """``-0.0000125`` -> ``-1.25e-05``: Arrow's positional text of |x| < 1 as NumPy's."""
    import pyarrow.compute as pc

    parts = pc.extract_regex(cells, r"^(?P<sign>-?)0\.(?P<zeros>0*)(?P<lead>\d)(?P<rest>\d*)$")
    places = pc.add(pc.utf8_length(parts.field("zeros")), 1)
    exponent = pc.utf8_lpad(pc.cast(places, "string"), 2, "0")
    return _scientific(
        parts.field("sign"), parts.field("lead"), parts.field("rest"), "e-", exponent
    )


def _scientific(sign: Any, lead: Any, digits: Any, e: str, exponent: Any) -> pa.Array:
    """``{sign}{lead}[.{digits less trailing zeros}]{e}{exponent}``."""
    import pyarrow.compute as pc

    digits = pc.replace_substring_regex(digits, "0+$", "")
    dotted = pc.if_else(pc.equal(digits, ""), "", pc.binary_join_element_wise(".", digits, ""))
    return pc.binary_join_element_wise(sign, lead, dotted, e, exponent, "")


def _patch(cells: pa.Array, mask: _Array, change: Any) -> pa.Array:
    """``cells`` with the cells under ``mask`` replaced by ``change`` of them."""
    import pyarrow.compute as pc

    if not mask.any():
        return cells
    arrow_mask = arrow_array(mask)
    return pc.replace_with_mask(cells, arrow_mask, change(cells.filter(arrow_mask)))


def _printf(values: _Array, fmt: str) -> _Array:
    """``fmt % value`` for every value; complex values as ``(re+imj)`` with each part formatted."""
    if values.dtype.kind != "c":
        return _printf_floats(values.astype(np.float64), fmt)
    # Each part without a field width's padding: "(   1.00+   -1.00j)" reads back as no
    # complex number, "(1.00-1.00j)" does.
    real = np.char.strip(_printf_floats(values.real.astype(np.float64), fmt))
    imag = np.char.strip(_printf_floats(values.imag.astype(np.float64), fmt))
    signed = np.where(np.char.startswith(imag, "-"), imag, np.char.add("+", imag))
    return np.char.add(np.char.add(np.char.add("(", real), signed), "j)")


def _printf_floats(values: _Array, fmt: str) -> _Array:
    """``fmt % value`` as C's printf gives it: the 0 flag pads nan and inf with spaces, where
    Python's ``%`` pads them with zeros (``0000000nan``, which reads back as no number)."""
    cells = np.char.mod(fmt, values)
    spaced = _CONVERSION.sub(_without_zero_flag, fmt)
    if spaced == fmt:
        return cells
    finite = np.isfinite(values)
    if finite.all():
        return cells
    return np.where(finite, cells, np.char.mod(spaced, values))


# The one float conversion of a --float-format, its flags apart; ``%%`` is matched (and kept)
# first, so that the text ``%0.5f`` after an escaped percent sign is not taken for one.
_CONVERSION = re.compile(r"%%|%(?P<flags>[-+ #0]*)(?P<rest>\d*(?:\.\d*)?[eEfFgG])")


def _without_zero_flag(match: re.Match[str]) -> str:
    if match.group("flags") is None:
        return match.group(0)
    return "%" + match.group("flags").replace("0", "") + match.group("rest")


def value_strings(values: _Array) -> _Array:
    """The text of every value, as a str array of the same shape (numpy's own scalar str)."""
    return values.astype(str)


def header_names(names: list[str], sep: str) -> list[str]:
    """Column names for a text header, quoted as text fields are where one holds the
    separator, a quote or a line break, so that the header reads back as these names (a data
    column's name reaches agg's ``<column>_<op>`` headers as it is)."""
    special = (sep, '"', "\r", "\n")
    return [
        '"' + name.replace('"', '""') + '"' if any(c in name for c in special) else name
        for name in names
    ]


def value_headers(inner_shape: tuple[int, ...]) -> list[str]:
    """Column names for the values: ``value`` (1-D), ``value_i`` (2-D), ``value_i_j`` (3-D)..."""
    if not inner_shape:
        return ["value"]
    return ["value_" + "_".join(map(str, index)) for index in np.ndindex(*inner_shape)]
