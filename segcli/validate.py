"""One validation pass over the inputs, shared by every engine and by the streaming driver.

The id checks are written as a scanner fed in consecutive blocks of the flattened ids, so the
in-memory path (one block) and the streaming path (many) find the same first offender at the
same global position, and report the same totals. Nothing here looks at data values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from segcli.errors import InvalidInputError

#: An optional one-pass scan of a block of ids: ``numba_scan(block, n or -1, sorted_ids)`` gives
#: (negatives, first negative, ids >= n, first such, max, decreases, first decrease). The numba
#: engine installs it when it is imported; validation never imports numba itself (its start-up
#: costs more than the scan saves on small inputs). The NumPy path takes several passes.
numba_scan: Callable[[np.ndarray, int, bool], tuple[int, ...]] | None = None
#: Blocks from this many ids on use ``numba_scan`` when it is installed.
NUMBA_SCAN_MIN_IDS = 1 << 16


@dataclass(frozen=True)
class IdReport:
    """What validation learned about the ids: the segment count and the dropped rows."""

    num_segments: int
    inferred: bool
    rows: int
    #: unsorted family: rows with a negative id, dropped as TF does.
    dropped_negative: int
    #: sorted family: rows with an id >= n, dropped as trailing segments.
    dropped_beyond: int

    @property
    def rows_used(self) -> int:
        return self.rows - self.dropped_negative - self.dropped_beyond


def _where(shape: tuple[int, ...], flat_position: int) -> str:
    """``segment_ids[i, j]`` for a flat position in ids of ``shape``."""
    if len(shape) <= 1:
        return f"segment_ids[{flat_position}]"
    index = np.unravel_index(flat_position, shape)
    return "segment_ids[" + ", ".join(str(int(i)) for i in index) + "]"


def _prefix(label: str | None) -> str:
    return f"{label}: " if label else ""


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def check_ids_dtype(ids_dtype: np.dtype[Any], label: str | None = None) -> None:
    """Ids must be integers: float, bool or object ids are never cast silently."""
    if ids_dtype.kind not in "iu":
        raise InvalidInputError(
            f"{_prefix(label)}segment_ids must be integers, got {ids_dtype} "
            "(accepted: int8/16/32/64, uint8/16/32/64)"
        )


def check_shapes(
    data_shape: tuple[int, ...],
    ids_shape: tuple[int, ...],
    *,
    sorted_ids: bool,
    data_label: str | None = None,
    ids_label: str | None = None,
) -> None:
    """The ids' shape must be a prefix of the data's (1-D and full length when sorted)."""
    where = f"{ids_label}: " if ids_label else ""
    if sorted_ids and len(ids_shape) != 1:
        raise InvalidInputError(f"{where}--sorted needs 1-D segment_ids, got shape {ids_shape}")
    if data_shape[: len(ids_shape)] != tuple(ids_shape):
        data_name = data_label or "data"
        if sorted_ids:
            raise InvalidInputError(
                f"{where}--sorted needs len(segment_ids) == data.shape[0]: segment_ids has "
                f"{ids_shape[0]} rows, {data_name} has shape {data_shape}"
            )
        raise InvalidInputError(
            f"{where}segment_ids shape {ids_shape} is not a prefix of {data_name} shape "
            f"{data_shape}"
        )


def check_num_segments(num_segments: Any) -> int | None:
    """n must be a non-negative integer (or None to infer it)."""
    if num_segments is None:
        return None
    if isinstance(num_segments, (bool, np.bool_)) or not isinstance(
        num_segments, (int, np.integer)
    ):
        raise InvalidInputError(f"num_segments must be an integer, got {num_segments!r}")
    if num_segments < 0:
        raise InvalidInputError(f"num_segments = {num_segments} must not be negative")
    return int(num_segments)


@dataclass
class _First:
    """The first offender of one kind: its global flat position and what to say about it."""

    count: int = 0
    position: int = -1
    detail: str = ""

    def note(self, count: int, position: int, detail: str) -> None:
        if count and self.count == 0:
            self.position, self.detail = position, detail
        self.count += count


@dataclass
class IdScanner:
    """Validates ids fed in consecutive blocks of their flattened (row-major) order.

    ``feed`` every block, then ``finish`` returns the report or raises the first error.
    """

    ids_shape: tuple[int, ...]
    num_segments: int | None
    sorted_ids: bool
    label: str | None = None
    _seen: int = 0
    _max: int = -1
    _last: int | None = None
    _negative: _First = field(default_factory=_First)
    _too_big: _First = field(default_factory=_First)
    _decrease: _First = field(default_factory=_First)

    def feed(self, block: np.ndarray) -> None:
        block = block.reshape(-1)
        offset = self._seen
        self._seen += block.size
        if block.size == 0:
            return
        n = self.num_segments
        if (
            numba_scan is not None
            and block.size >= NUMBA_SCAN_MIN_IDS
            and block.dtype.isnative
            and (n is None or n < 2**62)
        ):
            scan = numba_scan(block, -1 if n is None else n, self.sorted_ids)
            self._feed_scanned(block, offset, scan)
            return
        if block.dtype.kind == "i":
            negative = block < 0
            count = int(np.count_nonzero(negative))
            if count:
                at = int(np.argmax(negative))
                self._negative.note(count, offset + at, f"{int(block[at])}")
        if n is not None:
            # Compared by value: a uint64 id of 2**64 - 1 is out of range, never -1.
            too_big = block >= n
            count = int(np.count_nonzero(too_big))
            if count:
                at = int(np.argmax(too_big))
                self._too_big.note(count, offset + at, f"{int(block[at])}")
        block_max = int(block.max())
        self._max = max(self._max, block_max)
        if self.sorted_ids:
            self._check_order(block, offset)
        self._last = int(block[-1])

    def _feed_scanned(self, block: np.ndarray, offset: int, scan: tuple[int, ...]) -> None:
        """``feed``'s bookkeeping from a ``numba_scan`` result: same counts, positions, text."""
        negatives, first_negative, too_big, first_too_big, block_max, falls, first_fall = scan
        if negatives:
            self._negative.note(negatives, offset + first_negative, f"{int(block[first_negative])}")
        if too_big:
            self._too_big.note(too_big, offset + first_too_big, f"{int(block[first_too_big])}")
        self._max = max(self._max, int(block_max))
        if self.sorted_ids:
            self._check_boundary(block, offset)
            self._note_falls(block, offset, falls, first_fall)
        self._last = int(block[-1])

    def _check_order(self, block: np.ndarray, offset: int) -> None:
        self._check_boundary(block, offset)
        if block.size > 1:
            # Compare as Python-width values: uint64 and int64 blocks never mix here.
            falls = block[1:] < block[:-1]
            count = int(np.count_nonzero(falls))
            if count:
                self._note_falls(block, offset, count, int(np.argmax(falls)) + 1)

    def _check_boundary(self, block: np.ndarray, offset: int) -> None:
        if self._last is not None and int(block[0]) < self._last:
            self._decrease.note(
                1, offset, f"{int(block[0])} < {_where(self.ids_shape, offset - 1)} = {self._last}"
            )

    def _note_falls(self, block: np.ndarray, offset: int, count: int, at: int) -> None:
        """``count`` decreases inside the block, the first at ``block[at] < block[at - 1]``."""
        if count:
            self._decrease.note(
                count,
                offset + at,
                f"{int(block[at])} < {_where(self.ids_shape, offset + at - 1)} = "
                f"{int(block[at - 1])}",
            )

    def _error(self, first: _First, message: str) -> InvalidInputError:
        where = _where(self.ids_shape, first.position)
        return InvalidInputError(f"{_prefix(self.label)}{where} = {first.detail} {message}")

    def finish(self) -> IdReport:
        n = self.num_segments
        if self.sorted_ids:
            if self._negative.count:
                raise self._error(
                    self._negative,
                    f"is negative; --sorted ids must be >= 0 "
                    f"({plural(self._negative.count, 'negative id')})",
                )
            if self._decrease.count:
                first = self._decrease
                raise InvalidInputError(
                    f"{_prefix(self.label)}{_where(self.ids_shape, first.position)} = "
                    f"{first.detail}: --sorted ids must be non-decreasing "
                    f"({plural(first.count, 'decrease')})"
                )
            inferred = n is None
            if n is None:
                n = 0 if self._last is None else self._last + 1
            dropped_beyond = 0 if inferred else self._too_big.count
            return IdReport(n, inferred, self._seen, 0, dropped_beyond)
        if n is not None and self._too_big.count:
            raise self._error(
                self._too_big,
                f"is out of range [0, {n}) ({plural(self._too_big.count, 'id')} out of range)",
            )
        inferred = n is None
        if n is None:
            n = self._max + 1 if self._max >= 0 else 0
        return IdReport(n, inferred, self._seen, self._negative.count, 0)


def check_ids(
    ids: np.ndarray,
    num_segments: int | None,
    *,
    sorted_ids: bool,
    label: str | None = None,
) -> IdReport:
    """Validate in-memory ids in one pass."""
    scanner = IdScanner(tuple(ids.shape), num_segments, sorted_ids, label)
    scanner.feed(ids)
    return scanner.finish()
