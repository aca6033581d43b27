"""One validation pass over the ids, shared by every engine, the streaming driver and Dask.

The id checks are built on a mergeable :class:`IdSummary`: :func:`summarize` describes one run
of consecutive ids (how many break each rule, the first offender's *global* flat position and
value, the largest, first and last id), :func:`merge` joins two runs in row order (and catches a
decrease across their boundary), and :func:`report` turns the summary of all the ids into an
:class:`IdReport` or raises the first error. The in-memory path (one block), streaming (many
blocks, :class:`IdScanner`) and Dask partitions therefore find the same first
offender at the same position and report the same totals. Nothing here looks at data values.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from segcli.engine_modules import loaded_id_scanner
from segcli.errors import InvalidInputError

#: Blocks from this many ids on use an engine's one-pass id scan (``Engine.scan_ids``) when
#: the registry offers one (:func:`segcli.engines.id_scanner`: an engine already imported, such
#: as numba; validation never imports one itself, since numba's start-up costs more than the
#: scan saves on small inputs). The NumPy path takes several passes.
ENGINE_SCAN_MIN_IDS = 1 << 16
#: Blocks from this many ids on are scanned a slice per core, on the scanning engine's threads
#: (a hand-off costs ~50 us).
CONCURRENT_SCAN_MIN_IDS = 1 << 20

#: Maps a global flat position to (label of the ids' file or None, ``segment_ids[...]`` there).
Locator = Callable[[int], tuple[str | None, str]]


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


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def index_text(shape: tuple[int, ...], flat_position: int) -> str:
    """``segment_ids[i]``, or ``segment_ids[i, j]`` for ids of more than one axis."""
    if len(shape) <= 1:
        return f"segment_ids[{flat_position}]"
    index = np.unravel_index(flat_position, shape)
    return "segment_ids[" + ", ".join(str(int(i)) for i in index) + "]"


def check_ids_dtype(
    ids_dtype: np.dtype[Any], label: str | None = None, ids: np.ndarray | None = None
) -> None:
    """Ids must be integers: float, bool or object ids are never cast silently.

    With the ``ids`` in hand, float ids get a message about what their values really are.
    """
    if ids_dtype.kind in "iu":
        return
    if ids is not None and ids_dtype.kind == "f":
        raise InvalidInputError(_prefix(label) + _float_ids_problem(ids, label or ""))
    # Streamed ids are checked before their values are read: the hint hedges, and names the
    # other way a text column comes out float64 (no values at all), as the in-memory check does.
    hint = ""
    if ids_dtype.kind == "f":
        hint = f"; if they hold whole numbers, {_cast_hint(label or '')}"
        if _is_text_label(label or ""):
            hint += "; a header-only table reads as float64 too"
    raise InvalidInputError(
        f"{_prefix(label)}segment_ids must be integers, got {ids_dtype} "
        f"(accepted: int8/16/32/64, uint8/16/32/64){hint}"
    )


def _float_ids_problem(ids: np.ndarray, label: str) -> str:
    flat = ids.reshape(-1)
    if flat.size == 0:
        # An empty or header-only table column has no type of its own and reads as float64.
        return (
            f"segment_ids has no values, so no type to tell (read as {ids.dtype}: a header-only "
            "table?); segment_ids must be integers"
        )
    finite = np.isfinite(flat)
    problems = [
        (int(np.argmax(bad)), bad, what)
        for bad, what in (
            (finite & (flat != np.floor(flat)), "is not a whole number"),
            (finite & (np.abs(flat) >= 2.0**63), "does not fit in int64"),
            (np.isinf(flat), "is infinite"),
            (np.isnan(flat), "is not a number"),
        )
        if bad.any()
    ]
    if not problems:
        return (
            f"segment_ids must be integers, got {ids.dtype} with whole values; {_cast_hint(label)}"
        )
    # The earliest offender is named, whatever its kind; the count is of its kind.
    first, bad, what = min(problems, key=lambda problem: problem[0])
    count = plural(int(np.count_nonzero(bad)), "such id")
    if np.isnan(flat[first]) and _is_table_label(label):
        # Where nulls are kept (--skipna) a table's null reads as NaN; the column is float
        # because its numbers are written with a decimal point.
        return (
            f"{index_text(ids.shape, first)} is NaN or null ({count}); segment_ids must be "
            f"integers, got {ids.dtype} with whole values otherwise; {_cast_hint(label)}"
        )
    return (
        f"{index_text(ids.shape, first)} = {flat[first]:.17g} {what} ({count}); segment_ids "
        "must be integers"
    )


def _cast_hint(label: str) -> str:
    if _is_text_label(label):
        return "write them as plain integers (1, not 1.0, 1e0 or +1)"
    if _is_table_label(label):
        return "cast the column to an integer type first"
    return "cast them to integers first, e.g. np.load(...).astype(np.int64)"


def _is_text_label(label: str) -> bool:
    return label.lower().split(":")[0].endswith((".csv", ".tsv", ".csv.gz", ".tsv.gz"))


def _is_table_label(label: str) -> bool:
    """Whether ``label`` names a table's column (``t.parquet:seg``): one that may hold nulls."""
    return ":" in label and not label.lower().split(":")[0].endswith((".npy", ".npz"))


def check_shapes(
    data_shape: tuple[int, ...],
    ids_shape: tuple[int, ...],
    *,
    sorted_ids: bool,
    data_label: str | None = None,
    ids_label: str | None = None,
) -> None:
    """The ids' shape must be a prefix of the data's (1-D and full length when sorted)."""
    where = _prefix(ids_label)
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
    count: int | None = None
    if not isinstance(num_segments, (bool, np.bool_)):
        # Any integer, a 0-d integer array too (``np.array(4)``, another framework's scalar).
        with contextlib.suppress(TypeError):
            count = operator.index(num_segments)
    if count is None:
        raise InvalidInputError(f"num_segments must be an integer, got {num_segments!r}")
    if count < 0:
        raise InvalidInputError(f"num_segments = {count} must not be negative")
    return count


# --- the mergeable summary ---------------------------------------------------------------------


@dataclass(frozen=True)
class Offender:
    """How many ids broke one rule, and the first of them (global position and value)."""

    count: int = 0
    position: int = -1
    value: int = 0
    #: For a decrease: the id just before it.
    previous: int = 0


def _first(a: Offender, b: Offender) -> Offender:
    """``a`` comes from earlier rows than ``b``: its first offender wins, counts add."""
    if not b.count:
        return a
    winner = a if a.count else b
    return Offender(a.count + b.count, winner.position, winner.value, winner.previous)


@dataclass(frozen=True)
class IdSummary:
    """What one run of consecutive ids holds: enough to validate and to size the state."""

    #: Global flat position of the first id, and how many ids there are.
    start: int
    size: int
    negative: Offender = field(default_factory=Offender)
    #: Ids >= n (only when n is given).
    too_big: Offender = field(default_factory=Offender)
    #: Sorted family only: positions where an id is smaller than the one before.
    decrease: Offender = field(default_factory=Offender)
    max_id: int | None = None
    first_id: int | None = None
    last_id: int | None = None

    def blocks_fold(self, *, sorted_ids: bool) -> bool:
        """Ids that make the run fail: folding them would be wasted work."""
        if sorted_ids:
            return bool(self.negative.count or self.decrease.count)
        return bool(self.too_big.count)


def _id_scanner() -> Any:
    """The engine whose one-pass scan validation uses, or None (see engines/base.py)."""
    return loaded_id_scanner()


def _scans_with_engine(flat: np.ndarray) -> bool:
    """Whether an engine's scan takes this block (one compiled pass instead of NumPy's
    several)."""
    return flat.size >= ENGINE_SCAN_MIN_IDS and flat.dtype.isnative and _id_scanner() is not None


def implied_num_segments(flat: np.ndarray) -> int:
    """The n that unsorted ids imply (docs/semantics.md): the largest id plus one, or 0 if none is
    >= 0.

    Only the largest id is needed, so NumPy takes one pass (the full scan takes two).
    """
    flat = flat.reshape(-1)
    if flat.size == 0:
        return 0
    if _scans_with_engine(flat):
        largest = summarize(flat, 0, None, sorted_ids=False).max_id
    else:
        largest = flat.max()
    return int(largest) + 1 if largest is not None and largest >= 0 else 0


def count_negative(flat: np.ndarray) -> int:
    """How many ids are negative (rows the unsorted family drops)."""
    flat = flat.reshape(-1)
    if flat.dtype.kind == "u" or flat.size == 0:
        return 0
    if _scans_with_engine(flat):
        return summarize(flat, 0, None, sorted_ids=False).negative.count
    return int(np.count_nonzero(flat < 0))


def _count_first(mask: np.ndarray, flat: np.ndarray, start: int) -> Offender:
    count = int(np.count_nonzero(mask))
    if not count:
        return Offender()
    at = int(np.argmax(mask))
    return Offender(count, start + at, int(flat[at]))


def summarize(
    flat: np.ndarray, start: int, num_segments: int | None, *, sorted_ids: bool
) -> IdSummary:
    """Summarise flat ids whose first sits at global flat position ``start``."""
    flat = flat.reshape(-1)
    if flat.size == 0:
        return IdSummary(start, 0)
    if _scans_with_engine(flat) and (num_segments is None or num_segments < 2**62):
        return _summarize_scanned(flat, start, num_segments, sorted_ids=sorted_ids)
    low, high = int(flat.min()), int(flat.max())
    # The masks cost a pass each: built only when the extremes say there is an offender.
    negative = _count_first(flat < 0, flat, start) if low < 0 else Offender()
    too_big = Offender()
    if num_segments is not None and high >= num_segments:
        # Compared by value: a uint64 id of 2**64 - 1 is out of range, never -1.
        too_big = _count_first(flat >= num_segments, flat, start)
    decrease = Offender()
    if sorted_ids and flat.size > 1:
        falls = flat[1:] < flat[:-1]
        count = int(np.count_nonzero(falls))
        if count:
            at = int(np.argmax(falls)) + 1
            decrease = Offender(count, start + at, int(flat[at]), int(flat[at - 1]))
    return IdSummary(
        start, int(flat.size), negative, too_big, decrease, high, int(flat[0]), int(flat[-1])
    )


def _summarize_scanned(
    flat: np.ndarray, start: int, num_segments: int | None, *, sorted_ids: bool
) -> IdSummary:
    """:func:`summarize` from one compiled pass (an engine's ``scan_ids``): the same fields.

    A large block is scanned in two slices at once; their summaries merge like any two.
    """
    scanner = _id_scanner()
    if flat.size >= CONCURRENT_SCAN_MIN_IDS:
        half = flat.size // 2
        first, second = scanner.run_concurrently(
            [
                partial(_scan_slice, scanner, flat[:half], start, num_segments, sorted_ids),
                partial(_scan_slice, scanner, flat[half:], start + half, num_segments, sorted_ids),
            ]
        )
        return merge(first, second)
    return _scan_slice(scanner, flat, start, num_segments, sorted_ids)


def _scan_slice(
    scanner: Any, flat: np.ndarray, start: int, num_segments: int | None, sorted_ids: bool
) -> IdSummary:
    scan = scanner.scan_ids(flat, -1 if num_segments is None else num_segments, sorted_ids)
    negatives, first_negative, too_big, first_too_big, block_max, falls, first_fall = scan
    negative = (
        Offender(negatives, start + first_negative, int(flat[first_negative]))
        if negatives
        else Offender()
    )
    beyond = (
        Offender(too_big, start + first_too_big, int(flat[first_too_big]))
        if too_big
        else Offender()
    )
    decrease = (
        Offender(falls, start + first_fall, int(flat[first_fall]), int(flat[first_fall - 1]))
        if sorted_ids and falls
        else Offender()
    )
    return IdSummary(
        start,
        int(flat.size),
        negative,
        beyond,
        decrease,
        int(block_max),
        int(flat[0]),
        int(flat[-1]),
    )


def merge(a: IdSummary, b: IdSummary) -> IdSummary:
    """The summary of ``a``'s ids followed by ``b``'s (``b`` starts where ``a`` ends)."""
    if not a.size:
        return IdSummary(
            a.start, b.size, b.negative, b.too_big, b.decrease, b.max_id, b.first_id, b.last_id
        )
    if not b.size:
        return a
    assert a.last_id is not None and b.first_id is not None
    assert a.max_id is not None and b.max_id is not None
    decrease = a.decrease
    if b.first_id < a.last_id:  # the boundary between the two runs
        decrease = _first(decrease, Offender(1, b.start, b.first_id, a.last_id))
    return IdSummary(
        a.start,
        a.size + b.size,
        _first(a.negative, b.negative),
        _first(a.too_big, b.too_big),
        _first(decrease, b.decrease),
        max(a.max_id, b.max_id),
        a.first_id,
        b.last_id,
    )


def report(
    summary: IdSummary, num_segments: int | None, *, sorted_ids: bool, locate: Locator
) -> IdReport:
    """The ids' report, or the first error with its position and the number of offenders."""
    n = num_segments
    if sorted_ids:
        if summary.negative.count and not _decreases_first(summary):
            raise _error(
                summary.negative,
                locate,
                "is negative; --sorted ids must be >= 0 "
                f"({plural(summary.negative.count, 'negative id')})",
            )
        if summary.decrease.count:
            first = summary.decrease
            label, where = locate(first.position)
            before_label, before = locate(first.position - 1)
            before = f"{before} = {first.previous}"
            if before_label != label:
                before += f" in {before_label}"  # the decrease crosses two files
            raise InvalidInputError(
                f"{_prefix(label)}{where} = {first.value} < {before}: --sorted ids must be "
                f"non-decreasing ({plural(first.count, 'decrease')})"
            )
        inferred = n is None
        if n is None:
            n = 0 if summary.last_id is None else summary.last_id + 1
        dropped_beyond = 0 if inferred else summary.too_big.count
        return IdReport(n, inferred, summary.size, 0, dropped_beyond)
    if n is not None and summary.too_big.count:
        raise _error(
            summary.too_big,
            locate,
            f"is out of range [0, {n}) ({plural(summary.too_big.count, 'id')} out of range)",
        )
    inferred = n is None
    if n is None:
        n = summary.max_id + 1 if summary.max_id is not None and summary.max_id >= 0 else 0
    return IdReport(n, inferred, summary.size, summary.negative.count, 0)


def _decreases_first(summary: IdSummary) -> bool:
    """Whether sorted ids decrease before their first negative id: the error names the first
    offending position (a negative id after a larger one is both; its message says negative)."""
    decrease, negative = summary.decrease, summary.negative
    return bool(decrease.count) and decrease.position < negative.position


def _prefix(label: str | None) -> str:
    return f"{label}: " if label else ""


def _error(first: Offender, locate: Locator, message: str) -> InvalidInputError:
    label, where = locate(first.position)
    return InvalidInputError(f"{_prefix(label)}{where} = {first.value} {message}")


# --- one input, block by block -----------------------------------------------------------------


@dataclass
class IdScanner:
    """Validates the ids of one input fed in consecutive blocks of their flattened order.

    ``feed`` every block (or ``feed_summary`` a block summarised elsewhere), then
    ``finish`` returns the report or raises the first error.
    """

    ids_shape: tuple[int, ...]
    num_segments: int | None
    sorted_ids: bool
    label: str | None = None
    _summary: IdSummary = field(default_factory=lambda: IdSummary(0, 0))

    @property
    def seen(self) -> int:
        """Ids fed so far: the global position of the next block's first id."""
        return self._summary.size

    @property
    def failed(self) -> bool:
        """Some id fed so far makes the run fail (:meth:`finish` will raise): later blocks
        need no fold, and a block of unsorted ids must not reach a fold that assumes order."""
        return self._summary.blocks_fold(sorted_ids=self.sorted_ids)

    def feed(self, block: np.ndarray) -> IdSummary:
        """Add the next block; returns its summary (its largest id sizes a growing state)."""
        summary = summarize(block, self.seen, self.num_segments, sorted_ids=self.sorted_ids)
        self.feed_summary(summary)
        return summary

    def feed_summary(self, summary: IdSummary) -> None:
        """Add the summary of the next block (its ``start`` must be :attr:`seen`)."""
        if summary.start != self.seen:
            raise ValueError(f"block starts at {summary.start}, expected {self.seen}")
        self._summary = merge(self._summary, summary)

    def finish(self) -> IdReport:
        return report(
            self._summary, self.num_segments, sorted_ids=self.sorted_ids, locate=self._locate
        )

    def _locate(self, position: int) -> tuple[str | None, str]:
        return self.label, index_text(self.ids_shape, position)


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
