"""Id validation split across partitions: a mergeable summary per partition, one verdict.

Each partition task summarises its own ids (:func:`summarize`): the number of offenders of each
kind with the first one's *global* flat position, the largest id, and its first and last id.
Summaries merge in row order (:func:`merge`), which also catches a decrease across a partition
boundary, so the merged summary holds exactly what :class:`segcli.validate.IdScanner` would have
found reading every id in one pass: the same counts, the same first offender. :func:`report`
turns it into the same :class:`~segcli.validate.IdReport`, or raises the same error, naming the
file and the position inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from segcli.errors import InvalidInputError
from segcli.validate import IdReport

#: Maps a global flat position to (label of its IDS file, ``segment_ids[...]`` in that file).
Locator = Callable[[int], tuple[str, str]]


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
    """What one run of consecutive ids holds, enough to validate and to size the state."""

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
        """Ids that make the run fail: folding this partition would be wasted work."""
        if sorted_ids:
            return bool(self.negative.count or self.decrease.count)
        return bool(self.too_big.count)


def _count_first(mask: np.ndarray, flat: np.ndarray, start: int) -> Offender:
    count = int(np.count_nonzero(mask))
    if not count:
        return Offender()
    at = int(np.argmax(mask))
    return Offender(count, start + at, int(flat[at]))


def summarize(
    flat: np.ndarray, start: int, num_segments: int | None, *, sorted_ids: bool
) -> IdSummary:
    """Summarise the flat ids of one partition whose first id sits at global ``start``."""
    if flat.size == 0:
        return IdSummary(start, 0)
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
        start,
        int(flat.size),
        negative,
        too_big,
        decrease,
        high,
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
    assert a.last_id is not None and b.first_id is not None and b.max_id is not None
    assert a.max_id is not None
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


def index_text(shape: tuple[int, ...], flat_position: int) -> str:
    """``segment_ids[i]``, or ``segment_ids[i, j]`` for ids of more than one axis."""
    if len(shape) <= 1:
        return f"segment_ids[{flat_position}]"
    index = np.unravel_index(flat_position, shape)
    return "segment_ids[" + ", ".join(str(int(i)) for i in index) + "]"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def report(
    summary: IdSummary, num_segments: int | None, *, sorted_ids: bool, locate: Locator
) -> IdReport:
    """The run's IdReport, or the first error, worded as :class:`IdScanner` words it."""
    n = num_segments
    if sorted_ids:
        if summary.negative.count:
            raise _error(
                summary.negative,
                locate,
                "is negative; --sorted ids must be >= 0 "
                f"({_plural(summary.negative.count, 'negative id')})",
            )
        if summary.decrease.count:
            first = summary.decrease
            label, where = locate(first.position)
            before_label, before = locate(first.position - 1)
            before = f"{before} = {first.previous}"
            if before_label != label:
                before += f" in {before_label}"  # the decrease crosses two files
            raise InvalidInputError(
                f"{label}: {where} = {first.value} < {before}: --sorted ids must be "
                f"non-decreasing ({_plural(first.count, 'decrease')})"
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
            f"is out of range [0, {n}) ({_plural(summary.too_big.count, 'id')} out of range)",
        )
    inferred = n is None
    if n is None:
        n = summary.max_id + 1 if summary.max_id is not None and summary.max_id >= 0 else 0
    return IdReport(n, inferred, summary.size, summary.negative.count, 0)


def _error(first: Offender, locate: Locator, message: str) -> InvalidInputError:
    label, where = locate(first.position)
    return InvalidInputError(f"{label}: {where} = {first.value} {message}")
