"""Results as text: the lines printed without ``-o``, and the rows of CSV/TSV output.

Values are written as ``str()`` of the NumPy scalar of the result dtype: the shortest text that
reads back to the same value (``1.5``, ``3.4028235e+38``, ``nan``, ``inf``, ``-inf``, plain
integers, complex as ``(1+2j)``). Conversion is vectorised per block of rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

BLOCK_ROWS = 65536  # rows converted at once: bounds the temporary string arrays


def format_text_lines(result: np.ndarray[Any, Any]) -> Iterator[str]:
    """Yield one line per segment, ``segment<TAB>value<TAB>value...``, without the newline.

    Inner dimensions are flattened in C order, so a ``(n, 2, 3)`` result gives 6 values a line.
    """
    for block in text_blocks(result, "\t"):
        yield from block


def text_blocks(
    result: np.ndarray[Any, Any], sep: str, counts: np.ndarray[Any, Any] | None = None
) -> Iterator[list[str]]:
    """Blocks of rows ``segment{sep}value{sep}...[{sep}count]`` for a result of 1 or more axes."""
    if result.ndim == 0:
        raise ValueError("a result has at least one axis (the segments)")
    rows = result.shape[0]
    flat = result.reshape(rows, math.prod(result.shape[1:]))
    for start in range(0, rows, BLOCK_ROWS):
        block = value_strings(flat[start : start + BLOCK_ROWS])
        if counts is not None:
            block = np.concatenate(
                [block, value_strings(counts[start : start + BLOCK_ROWS, None])], 1
            )
        segments = np.arange(start, start + len(block)).astype(str)
        yield join_cells(segments, block, sep)


def value_strings(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The text of every value, as a str array of the same shape (numpy's own scalar str)."""
    return values.astype(str)


def join_cells(first: np.ndarray[Any, Any], rest: np.ndarray[Any, Any], sep: str) -> list[str]:
    """Join a column of strings and a (rows, k) block of strings into one string per row."""
    columns = [first.tolist(), *(rest[:, j].tolist() for j in range(rest.shape[1]))]
    # str.join over zipped lists beat np.strings.add (one pass per column) when measured.
    return list(map(sep.join, zip(*columns, strict=True)))


def value_headers(inner_shape: tuple[int, ...]) -> list[str]:
    """Column names for the values: ``value`` (1-D), ``value_i`` (2-D), ``value_i_j`` (3-D)..."""
    if not inner_shape:
        return ["value"]
    return ["value_" + "_".join(map(str, index)) for index in np.ndindex(*inner_shape)]
