"""``segcli check``'s own pass: validate as a run would, count rows per segment, find NaN.

In memory, the core's ``count`` reduction validates the ids and counts; streamed, the blocks
are read once, the ids fed to the same :class:`segcli.validate.IdScanner` a streamed run uses
and counted here, and the data scanned for NaN. Either way the checks come in the order of a
run of ``spec.op`` (its dtype rule first), and nothing is folded but counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import core, ops, validate
from segcli.drivers import memory
from segcli.drivers.base import InputFacts, Progress, RunSpec
from segcli.drivers.choose import metadata_first, must_stream, should_stream
from segcli.drivers.stream import (
    aligned_blocks,
    check_sources,
    open_inputs,
    plan_blocks,
    read_ahead,
    rows_of,
    with_later_null_ids,
)
from segcli.errors import InvalidInputError, NotStreamableError
from segcli.io.columns import NullIdsError, without_null_ids

if TYPE_CHECKING:
    from segcli.keys.facts import KeyFacts


@dataclass
class CheckResult:
    """What the pass found; the data-quality rules are judged from it."""

    id_report: validate.IdReport
    #: Rows per segment, over the report's n segments.
    counts: np.ndarray
    nan_values: int
    #: Index in DATA of the first NaN, None when there is none.
    first_nan: tuple[int, ...] | None
    data: InputFacts
    ids: InputFacts
    #: "in-memory" or "streaming".
    mode: str
    #: A ``--by`` check's keys, in the order of ``counts``.
    keys: KeyFacts | None = None
    #: ``--skipna``: the nulls of an integer or bool DATA (a float column's read as NaN, and
    #: are among ``nan_values``); ``first_nan`` is then the first NaN or null.
    null_values: int = 0
    #: ``--skipna``: the rows dropped for a null id (the id report counts them as negative).
    null_ids: int = 0
    #: The family when not the plain one ``--sorted`` says (``sparse``: ``--indices``).
    family: str | None = None
    #: ``--indices``: the position among the indices of the one that gathers ``first_nan``
    #: (only the gathered rows are scanned, each as often as it is gathered, as a run folds).
    first_nan_index: int | None = None
    #: The first dropped row as a failed ``--max-dropped`` names it (``segment_ids[1] = -1``,
    #: ``segment_ids[4] is null``, ``row 7`` for a missing key); None when no row was dropped.
    first_dropped: str | None = None
    #: ``--weights``: their NaN values and where the first is (each weight multiplies its row,
    #: so a NaN weight makes its segment NaN as a NaN value does); None without weights.
    weights_nan: WeightsNan | None = None


@dataclass(frozen=True)
class WeightsNan:
    """The NaN weights a check found (``--no-nan`` refuses them)."""

    label: str
    count: int
    #: The position of the first NaN weight (None: there is none).
    first: int | None


def check_inputs(spec: RunSpec, progress: Progress | None = None) -> CheckResult:
    """Streamed where a run of ``spec`` would stream (``progress`` hears of its rows, as a
    streamed run's), else (or when the inputs turn out not streamable and streaming was not
    required) in memory."""
    if should_stream(spec):
        try:
            return check_streamed(spec, progress)
        except NotStreamableError:
            if must_stream(spec):
                raise
    with metadata_first(spec):
        return check_in_memory(spec)


def check_in_memory(spec: RunSpec) -> CheckResult:
    """Read the inputs whole; a ``count`` reduction validates the ids and counts the rows."""
    data, ids = memory.read(spec)
    ops.check_data_dtype(ops.get_op(spec.op), data.array.dtype, data.label)
    flat_ids, null_ids = without_null_ids(ids.array, sorted_ids=spec.sorted_ids, label=ids.label)
    reduction = core.reduce_with_option_words(
        data.array,
        flat_ids,
        spec.num_segments,
        "count",
        sorted=spec.sorted_ids,
        engine="numpy",
        data_label=data.label,
        ids_label=ids.label,
    )
    nan = NanScan()
    nan.feed(data.array)
    report = reduction.id_report
    first_dropped = None
    if report.dropped_negative or report.dropped_beyond:  # a pass only when there is one
        dropped = flat_ids >= report.num_segments if spec.sorted_ids else flat_ids < 0
        at = int(np.argmax(dropped.reshape(-1)))
        nulls = np.ma.getmaskarray(ids.array).reshape(-1) if null_ids else None
        first_dropped = dropped_row_text(
            ids.array.shape,
            at,
            int(flat_ids.reshape(-1)[at]),
            null=nulls is not None and bool(nulls[at]),
        )
    return CheckResult(
        report,
        reduction.result,
        nan.found,
        nan.first,
        memory.facts(data),
        memory.facts(ids),
        "in-memory",
        null_values=nan.nulls,
        null_ids=null_ids,
        first_dropped=first_dropped,
    )


def dropped_row_text(ids_shape: tuple[int, ...], position: int, value: int, *, null: bool) -> str:
    """A dropped row as errors name an id: ``segment_ids[1] = -1``, ``segment_ids[4] is null``
    (a null id reads as -1)."""
    where = validate.index_text(ids_shape, position)
    return f"{where} is null" if null else f"{where} = {value}"


def check_streamed(spec: RunSpec, progress: Progress | None = None) -> CheckResult:
    """Read the inputs once, block by block, with the memory of a streamed run; ``progress``
    hears of the rows read, after each block."""
    data, ids = open_inputs(spec)
    ops.check_data_dtype(ops.get_op(spec.op), data.source.dtype, data.source.label)
    n, ids_shape = check_sources(
        COUNT, data.source, ids.source, spec.num_segments, sorted_ids=spec.sorted_ids
    )
    plan = plan_blocks(
        [data.source], ids.source, block_rows=spec.block_rows, memory_limit=spec.memory_budget
    )
    scanner = validate.IdScanner(ids_shape, n, spec.sorted_ids, ids.source.label)
    inner = tuple(data.source.shape[len(ids.source.shape) :])
    counts = SegmentCounts(n, inner, data.source.dtype, spec.sorted_ids)
    nan = NanScan()
    too_large: InvalidInputError | None = None
    blocks = read_ahead(
        aligned_blocks(data.source, ids.source, plan.block_rows, sorted_ids=spec.sorted_ids)
    )
    null_ids = 0
    total_rows = max(int(np.prod(ids.source.shape, dtype=np.int64)), 0)  # 0: not known yet
    first_null: int | None = None  # global position of the first null id
    first_dropped: tuple[int, int] | None = None  # position and value of the first dropped row
    for data_block, ids_block in blocks:
        # A plain array has no nulls: numpy.ma (some 8 ms to import) stays unloaded for it.
        if first_null is None and type(ids_block) is not np.ndarray and np.ma.is_masked(ids_block):
            first_null = scanner.seen + int(np.argmax(np.ma.getmaskarray(ids_block).reshape(-1)))
        try:
            flat_ids, block_nulls = without_null_ids(
                ids_block.reshape(-1),
                sorted_ids=spec.sorted_ids,
                label=ids.source.label,
                first_row=scanner.seen,
            )
        except NullIdsError as error:
            raise with_later_null_ids(error, blocks) from None
        null_ids += block_nulls
        seen = scanner.feed(flat_ids)
        if progress is not None:
            progress(scanner.seen, total_rows)
        # The scan already found the block's first dropped row: a negative id, or one >= a
        # given n under --sorted (an inferred n drops none).
        offender = seen.too_big if spec.sorted_ids else seen.negative
        if first_dropped is None and offender.count:
            first_dropped = (offender.position, offender.value)
        nan.feed(data_block)
        # As in a streamed run: after a failing id, ids are only scanned, to count offenders.
        if not scanner.failed and too_large is None:
            try:
                if n is None and seen.max_id is not None:
                    counts.ensure(seen.max_id + 1)
            except InvalidInputError as error:
                if not spec.sorted_ids:
                    raise
                too_large = error  # a later decrease is the error, as in memory
                continue
            counts.add(flat_ids)
    report = scanner.finish()
    if too_large is not None:
        raise too_large
    rows = rows_of(report, ids.source)
    return CheckResult(
        report,
        counts.counts[: report.num_segments],
        nan.found,
        nan.first,
        data.facts(rows),
        ids.facts(rows),
        "streaming",
        null_values=nan.nulls,
        null_ids=null_ids,
        first_dropped=None
        if first_dropped is None
        else dropped_row_text(ids_shape, *first_dropped, null=first_dropped[0] == first_null),
    )


COUNT = ops.get_op("count")


class SegmentCounts:
    """Rows per segment, growing when n is inferred, checked to fit as a run's state is."""

    def __init__(
        self, n: int | None, inner: tuple[int, ...], dtype: np.dtype[Any], sorted_ids: bool
    ) -> None:
        self.n, self.inner, self.dtype, self.sorted_ids = n, inner, dtype, sorted_ids
        self.counts = np.zeros(n or 0, np.int64)

    def ensure(self, needed: int) -> None:
        current = len(self.counts)
        if needed <= current:
            return
        core.check_output_fits(
            COUNT, needed, self.inner, self.dtype, sorted_ids=self.sorted_ids, inferred=True
        )
        grown = np.zeros(max(needed, 2 * current), np.int64)
        grown[:current] = self.counts
        self.counts = grown

    def add(self, ids: np.ndarray) -> None:
        """Count the rows of ``ids`` in range; the rest are dropped rows (or already errors)."""
        limit = self.n if self.n is not None else len(self.counts)
        kept = ids[(ids >= 0) & (ids < limit)]
        np.add.at(self.counts, kept.astype(np.intp, copy=False), 1)


class NanScan:
    """The NaN values of DATA, block by block: how many, and where the first one is; under
    ``--skipna`` also the nulls of a column that cannot hold NaN (masked values)."""

    def __init__(self) -> None:
        self.found = 0
        self.nulls = 0
        self.first: tuple[int, ...] | None = None
        self._rows = 0

    def feed(self, block: np.ndarray) -> None:
        found = _nan_count(block)
        nulls = _null_count(block)
        if (found or nulls) and self.first is None:
            self.first = _first_nan_index(block, self._rows)
        self.found += found
        self.nulls += nulls
        self._rows += block.shape[0] if block.ndim else 1


def _first_nan_index(block: np.ndarray, first_row: int) -> tuple[int, ...]:
    """Index in the whole input of the first NaN (or null) of ``block``, whose row 0 is
    ``first_row``."""
    if type(block) is np.ndarray:
        flat = int(np.argmax(np.isnan(block.reshape(-1))))
    else:  # masked: an integer or bool column's nulls under --skipna
        flat = int(np.argmax(np.ma.getmaskarray(block).reshape(-1)))
    if not block.ndim:
        return ()
    index = tuple(int(i) for i in np.unravel_index(flat, block.shape))
    return (first_row + index[0], *index[1:])


def _null_count(block: np.ndarray) -> int:
    if type(block) is np.ndarray:  # no mask: numpy.ma (about 8 ms to import) stays unloaded
        return 0
    return int(np.count_nonzero(np.ma.getmask(block)))


def _nan_count(data: np.ndarray) -> int:
    if data.dtype.kind not in "fc":
        return 0
    return int(np.count_nonzero(np.isnan(data)))
