"""TF's sparse segment family and weighted combiners: ``--indices`` and ``--weights``.

``out[s] = reduce(data[indices[i]] for i with ids[i] == s)`` (``tf.sparse.segment_*``), and the
weighted sum / mean / sqrt_n of ``tf.nn.embedding_lookup_sparse``. The gathered rows are never
held whole: they are gathered and folded block by block through the engine's normal fold, so
memory grows with the block, not with ``len(indices) x inner``. Weighted runs fold
``w * x`` (in float64, complex128 for complex data) as a sum, and the divisors ``sum(w)`` and
``sum(w^2)`` as two more float64 sums, then divide with TF's ``div_no_nan``. On the numba
engine a gather's sum, mean and sqrt_n skip those states: :class:`FusedFold` folds each bag
into a row buffer and writes it, divided, into the output (the same bytes).

The sparse family's ids are 1-D, non-negative and non-decreasing (TF's rule); unlike
``--sorted``, an id >= n is an error, as in TF's ``...WithNumSegments``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from segcli import ops, validate
from segcli.core import Reduction, check_output_fits, validate_inputs
from segcli.engines import Engine, EngineChoice, choose_engine
from segcli.errors import InvalidInputError, SegcliError, UsageError
from segcli.io.chunked import UNKNOWN_ROWS, ChunkSource
from segcli.io.columns import NullsError, first_nulls
from segcli.multi import fold_rows


@dataclass(frozen=True)
class Combiner:
    """A weighted combiner of TF's ``embedding_lookup_sparse``: ``sum(w * x)`` divided by
    ``divisor(sum(per_row(w)))``, or not divided (no ``per_row``)."""

    per_row: Callable[[np.ndarray], np.ndarray] | None = None
    divisor: Callable[[np.ndarray], np.ndarray] | None = None


#: The ops that take ``--weights``, and how each divides.
COMBINERS: dict[str, Combiner] = {
    "sum": Combiner(),
    "mean": Combiner(per_row=np.asarray, divisor=np.asarray),
    "sqrt_n": Combiner(per_row=np.square, divisor=np.sqrt),
}
WEIGHTED_OPS = tuple(COMBINERS)

#: Bytes of gathered rows per block when no block size is given: small enough to stay in cache
#: and far below a gather of any real workload, large enough that NumPy's per-call cost vanishes.
BLOCK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Labeled:
    """An input array and the name errors give it."""

    array: np.ndarray
    label: str


def refuse_nulls(array: Any, label: str, first_row: int = 0) -> None:
    """Ids, indices and weights have no missing value to leave out (a null read under
    ``--skipna`` is a masked entry): a null among them is an error naming the first."""
    mask = np.ma.getmask(array)
    if mask is np.ma.nomask or not mask.any():
        return
    first = first_row + int(np.flatnonzero(np.ravel(mask))[0])
    raise InvalidInputError(
        f"{label}: null at position {first}: --skipna leaves out missing data values, but "
        "ids, indices and weights must all be present"
    )


def _kept_mask(data: Any) -> np.ndarray:
    """DATA as an array, keeping the mask of nulls read under ``--skipna`` (missing values)."""
    return data if isinstance(data, np.ma.MaskedArray) else np.asarray(data)


def check_weighted_op(op: str | ops.Op, weighted: bool) -> None:
    """Other ops than sum, mean and sqrt_n with ``--weights``: a usage error."""
    name = ops.get_op(op).name
    if weighted and name not in WEIGHTED_OPS:
        raise UsageError(f"--weights applies to {', '.join(WEIGHTED_OPS)} only, not {name}")


def check_rows_to_gather(data: np.ndarray, label: str) -> None:
    """The indices name rows of DATA: a 0-D DATA has none (the message names its file)."""
    if data.ndim == 0:
        raise InvalidInputError(
            f"{label}: --indices needs rows to gather from DATA, got a 0-D array"
        )


def check_ids_meta(dtype: np.dtype[Any], shape: tuple[int, ...], label: str) -> None:
    """The sparse family's ids: 1-D integers (float ids named, never cast)."""
    validate.check_ids_dtype(dtype, label)
    if len(shape) != 1:
        raise InvalidInputError(f"{label}: --indices needs 1-D segment_ids, got shape {shape}")


def check_indices_meta(
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    label: str,
    blocks: Callable[[], Iterable[np.ndarray]] | None = None,
) -> None:
    """Indices are 1-D integers: float indices are refused, never truncated. ``blocks`` gives
    the values (whole or block by block), so that the message names the first non-integer."""
    if dtype.kind == "f" and blocks is not None:
        raise InvalidInputError(f"{label}: {_float_indices_problem(blocks(), dtype)}")
    if dtype.kind not in "iu":
        raise InvalidInputError(f"{label}: indices must be integers, got {dtype} (never truncated)")
    if len(shape) != 1:
        raise InvalidInputError(f"{label}: indices must be 1-D, got shape {shape}")


def _float_indices_problem(blocks: Iterable[np.ndarray], dtype: np.dtype[Any]) -> str:
    """The first index that is not a whole number (NaN and inf are not), and how many such."""
    seen, count = 0, 0
    first: tuple[int, Any] | None = None
    for block in blocks:
        flat = np.ravel(block)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(flat) | (flat != np.floor(flat))
        found = int(np.count_nonzero(bad))
        if found and first is None:
            at = int(np.argmax(bad))
            first = (seen + at, flat[at])
        count, seen = count + found, seen + flat.size
    if first is None:
        return (
            f"indices must be integers, got {dtype} with whole values (never truncated); cast "
            "them to integers first"
        )
    position, value = first
    such = "such index" if count == 1 else "such indices"
    return (
        f"indices[{position}] = {value:.17g} is not an integer ({count} {such}); indices must "
        "be integers (never truncated)"
    )


def check_weights_meta(dtype: np.dtype[Any], label: str) -> None:
    if dtype.kind not in "iuf":
        raise InvalidInputError(
            f"{label}: weights must be real numbers (integers or floats), got {dtype}"
        )


def check_lengths(indices: int, ids: int, indices_label: str, ids_label: str) -> None:
    """One index per id; a mismatch names both lengths."""
    if indices != ids:
        raise InvalidInputError(
            f"{indices_label}: {indices:,} indices for {ids:,} segment ids in {ids_label} "
            "(one index per id)"
        )


def check_weights_shape(
    shape: tuple[int, ...], ids_shape: tuple[int, ...], label: str, per: str
) -> None:
    """One weight per index (``per`` "indices") or per row of the flattened ids (``per``
    "rows"): 1-D of that length, or shaped like the ids."""
    rows = math.prod(ids_shape)
    if shape not in ((rows,), ids_shape):
        one = "index" if per == "indices" else "row"
        raise InvalidInputError(
            f"{label}: {math.prod(shape):,} weights (shape {shape}) for {rows:,} {per}: need "
            f"one weight per {one}, 1-D or shaped like the ids {ids_shape}"
        )


@dataclass
class _Offenders:
    """The first value a rule refuses (its global position) and how many it refuses."""

    count: int = 0
    position: int = -1
    value: Any = None
    before: Any = None

    def note(self, bad: np.ndarray, values: np.ndarray, start: int, before: Any = None) -> None:
        found = int(np.count_nonzero(bad))
        if found and not self.count:
            first = int(np.argmax(bad))
            self.position, self.value = start + first, values[first]
            self.before = None if before is None else before[first]
        self.count += found


class SparseChecker:
    """The sparse family's value rules, fed block by block (one block in memory): ids
    non-negative, non-decreasing (across blocks too), < n when n is given; indices in
    ``[0, data_rows)``. :meth:`finish` raises the first broken rule, in the order a user would
    fix them, with the first offender's global position and the number of offenders."""

    def __init__(
        self,
        num_segments: int | None,
        data_rows: int,
        ids_label: str,
        indices_label: str,
    ) -> None:
        self.num_segments, self.data_rows = num_segments, data_rows
        self.ids_label, self.indices_label = ids_label, indices_label
        self.negative, self.decrease = _Offenders(), _Offenders()
        self.too_big, self.out_of_range = _Offenders(), _Offenders()
        self.seen = 0
        self.last: Any = None

    @property
    def failed(self) -> bool:
        """Some rule is broken already: later blocks are only checked, never folded."""
        rules = (self.negative, self.decrease, self.too_big, self.out_of_range)
        return any(rule.count for rule in rules)

    def feed(self, ids: np.ndarray, indices: np.ndarray) -> None:
        start = self.seen
        self.negative.note(ids < 0, ids, start)
        if ids.size:
            previous = ids[:-1] if self.last is None else np.concatenate(([self.last], ids[:-1]))
            offset = 1 if self.last is None else 0
            self.decrease.note(ids[offset:] < previous, ids[offset:], start + offset, previous)
            self.last = ids[-1]
        if self.num_segments is not None:
            self.too_big.note(ids >= self.num_segments, ids, start)
        bad = indices >= self.data_rows
        if indices.dtype.kind == "i":
            bad |= indices < 0
        self.out_of_range.note(bad, indices, start)
        self.seen += int(ids.size)

    def finish(self) -> validate.IdReport:
        """The ids' report (n given, else the last id + 1), or the first broken rule."""
        ids, rule = self.ids_label, self.negative
        if rule.count:
            raise InvalidInputError(
                f"{ids}: segment_ids[{rule.position}] = {rule.value} is negative: --indices "
                f"needs ids >= 0 ({validate.plural(rule.count, 'negative id')})"
            )
        rule = self.decrease
        if rule.count:
            raise InvalidInputError(
                f"{ids}: segment_ids[{rule.position}] = {rule.value} < segment_ids"
                f"[{rule.position - 1}] = {rule.before}: --indices needs non-decreasing "
                f"segment ids ({validate.plural(rule.count, 'decrease')})"
            )
        rule = self.too_big
        if rule.count:
            raise InvalidInputError(
                f"{ids}: segment_ids[{rule.position}] = {rule.value} is out of range "
                f"[0, {self.num_segments}) ({validate.plural(rule.count, 'id')} out of range)"
            )
        rule = self.out_of_range
        if rule.count:
            many = "index" if rule.count == 1 else "indices"
            raise InvalidInputError(
                f"{self.indices_label}: indices[{rule.position}] = {rule.value} is out of range "
                f"[0, {self.data_rows}) ({rule.count} {many} out of range)"
            )
        return clean_report(self.num_segments, self.seen, self.last)


def clean_report(num_segments: int | None, rows: int, last: Any) -> validate.IdReport:
    """The report of ids that broke no rule: n given, else the last id + 1 (0 for none)."""
    if num_segments is not None:
        return validate.IdReport(num_segments, False, rows, 0, 0)
    inferred = 0 if last is None else int(last) + 1
    return validate.IdReport(inferred, True, rows, 0, 0)


def _weighted_out_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The data's dtype for float (and complex) data, float64 for integers."""
    return np.dtype(data_dtype) if data_dtype.kind in "fc" else np.dtype(np.float64)


def _product_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.complex128 if data_dtype.kind == "c" else np.float64)


def check_gather_fits(
    op: ops.Op,
    num_segments: int,
    inner_shape: tuple[int, ...],
    data_dtype: np.dtype[Any],
    weighted: bool,
    *,
    inferred: bool = True,
) -> None:
    """A gather's output judged as :func:`sparse_reduce` judges it in memory: the fold's
    dtype (weighted, float64), sorted ids. A streamed run infers n block by block; judged
    otherwise, it refused an n that the same run in memory writes."""
    fold_dtype = _product_dtype(data_dtype) if weighted else data_dtype
    check_output_fits(op, num_segments, inner_shape, fold_dtype, sorted_ids=True, inferred=inferred)


def block_rows_for(inner: int, block_rows: int | None) -> int:
    """Rows gathered per block: ``block_rows``, else :data:`BLOCK_BYTES` of float64 rows."""
    if block_rows is not None:
        return block_rows
    return max(1024, BLOCK_BYTES // (8 * max(inner, 1)))


class SparseFold:
    """The states a run folds into: the op's (or, weighted, the sum of ``w * x``), and the
    weight sums a weighted mean / sqrt_n divides by; grown as ids arrive when n is inferred."""

    def __init__(
        self,
        engine: Engine,
        op: ops.Op,
        num_segments: int,
        data: np.ndarray,
        *,
        weighted: bool,
        sorted_ids: bool,
        inner_shape: tuple[int, ...],
    ) -> None:
        self.engine, self.op, self.sorted_ids = engine, op, sorted_ids
        self.data_dtype = data.dtype
        self.inner_shape = inner_shape
        # The rows are counted from the leading axes: -1 cannot infer them for zero-width rows.
        rows = math.prod(data.shape[: data.ndim - len(inner_shape)])
        self.data2d = data.reshape(rows, ops.inner_size(inner_shape))
        self.weighted = weighted
        self.states: dict[str, ops.State] = {}
        new = engine.new_state
        if not weighted:
            self.states["values"] = new(op, num_segments, inner_shape, data.dtype, **self._lanes)
            return
        total, f64 = ops.get_op("sum"), np.dtype(np.float64)
        product = _product_dtype(data.dtype)
        self.states["values"] = new(total, num_segments, inner_shape, product, **self._lanes)
        self.combiner = COMBINERS[op.name]
        if self.combiner.per_row is not None:
            self.states["divisor"] = new(total, num_segments, (), f64, **self._lanes)

    @property
    def _lanes(self) -> dict[str, bool]:
        return {"sorted_ids": self.sorted_ids}

    def grow(self, num_segments: int) -> None:
        """At least ``num_segments`` segments (doubling, so growth costs amortised O(n))."""
        current = self.states["values"].num_segments
        if num_segments <= current:
            return
        grown = max(num_segments, 2 * current)
        # Only a run without -n grows: n comes from the largest id so far.
        check_gather_fits(self.op, num_segments, self.inner_shape, self.data_dtype, self.weighted)
        self.states = {name: state.grown(grown) for name, state in self.states.items()}

    def fold(self, ids: np.ndarray, indices: np.ndarray | None, weights: np.ndarray | None) -> None:
        """Gather the block's rows (``indices``; else the next rows of DATA), weight them in
        float64 and fold them, in row order."""
        states = self.states
        if indices is not None:
            rows = self.data2d[indices]
            if self.engine.name == "numpy" and ids.size:
                states, ids = self._window(ids)
        else:
            start = states["values"].next_row
            rows = self.data2d[start : start + ids.size]
        fold = self.engine.fold
        if weights is None:
            # agg's combined op folds part by part (segcli.multi); any other op in one call.
            fold_rows(self.engine, states["values"], rows, ids, sorted_ids=self.sorted_ids)
        else:
            w = weights.astype(np.float64)
            # inf or huge weights overflow to inf and inf * 0 is NaN: IEEE results, silent as
            # the dense ops' sums are (a warning would be a traceback under -W error).
            with np.errstate(over="ignore", invalid="ignore"):
                product = rows.astype(_product_dtype(self.data_dtype)) * w[:, None]
                fold(states["values"], product, ids, sorted_ids=self.sorted_ids)
                if self.combiner.per_row is not None:
                    per_row = self.combiner.per_row(w)[:, None]
                    fold(states["divisor"], per_row, ids, sorted_ids=self.sorted_ids)
        for name, state in states.items():
            self.states[name].next_row = state.next_row

    def _window(self, ids: np.ndarray) -> tuple[dict[str, ops.State], np.ndarray]:
        """A gather's block of sorted ids touches the bags from its first id to its last:
        states over that window (views, folded in place) and the ids shifted into it. Some of
        the NumPy engine's folds cost O(n) a call (a 1-D float sum builds an n-long buffer):
        over the whole state, a million bags made a weighted mean 6x slower."""
        lo, hi = int(ids[0]), int(ids[-1]) + 1
        windows = {}
        for name, state in self.states.items():
            arrays = {"count": state.count[lo:hi]}
            for intermediate in state.op.intermediates:
                arrays[intermediate.name] = state.arrays[intermediate.name][:, lo:hi]
            windows[name] = ops.State(
                state.op, state.data_dtype, state.inner_shape, arrays, state.next_row
            )
        return windows, ids - ids.dtype.type(lo)

    def finish(
        self, report: validate.IdReport, choice: EngineChoice, fill: Any, started: float
    ) -> Reduction:
        """The result over ``report.num_segments`` segments."""
        n = report.num_segments
        hosts = {name: state.to_host().trimmed(n) for name, state in self.states.items()}
        values = hosts["values"]
        timings = {"validate": 0.0, "compute": time.perf_counter() - started}
        if not self.weighted:
            return Reduction.finish(
                values,
                report,
                sorted_ids=self.sorted_ids,
                engine=choice.engine.name,
                engine_reason=choice.reason,
                fill=fill,
                timings=timings,
            )
        return Reduction(
            result=_weighted_result(hosts, self.combiner, self.data_dtype, fill),
            counts=np.asarray(values.count),
            op=self.op,
            sorted_ids=self.sorted_ids,
            id_report=report,
            engine=choice.engine.name,
            engine_reason=choice.reason,
            timings=timings,
        )


class FusedFold:
    """The numba engine's fused gather-and-reduce (:mod:`segcli.engines.numba_sparse`)
    behind :class:`SparseFold`'s methods: the same bytes, without the float64 state."""

    def __init__(
        self,
        op: ops.Op,
        num_segments: int,
        data: np.ndarray,
        *,
        weighted: bool,
        inner_shape: tuple[int, ...],
    ) -> None:
        from segcli.engines.numba_sparse import BagFold

        self.op, self.weighted, self.inner_shape = op, weighted, inner_shape
        self.data_dtype = data.dtype
        self.out_dtype = _weighted_out_dtype(data.dtype) if weighted else op.out_dtype(data.dtype)
        table = data.reshape(data.shape[0], ops.inner_size(inner_shape))
        self.bags = BagFold(table, op.name, num_segments, self.out_dtype, weighted=weighted)

    def grow(self, num_segments: int) -> None:
        check_gather_fits(self.op, num_segments, self.inner_shape, self.data_dtype, self.weighted)
        self.bags.grow(num_segments)

    def fold(self, ids: np.ndarray, indices: np.ndarray | None, weights: np.ndarray | None) -> bool:
        """False when a row breaks a rule (nothing more folded)."""
        assert indices is not None
        return self.bags.fold(ids, indices, weights)

    def finish(
        self, report: validate.IdReport, choice: EngineChoice, fill: Any, started: float
    ) -> Reduction:
        n = report.num_segments
        fill_op = ops.get_op("sum") if self.weighted else self.op
        fill_dtype = self.out_dtype if self.weighted else self.data_dtype
        fill_value = None if fill is None else ops.parse_fill(fill, fill_op, fill_dtype)
        result, counts = self.bags.result(n, fill_value)
        return Reduction(
            # The fused kernel finishes sums and means itself: its NaNs, as ops' finalize says.
            result=ops.quiet_nans(result).reshape((n, *self.inner_shape)),
            counts=counts,
            op=self.op,
            sorted_ids=True,
            id_report=report,
            engine=choice.engine.name,
            engine_reason=choice.reason,
            timings={"validate": 0.0, "compute": time.perf_counter() - started},
        )


def fuses(
    engine: Engine,
    op: ops.Op,
    data_dtype: np.dtype[Any],
    inner_shape: tuple[int, ...],
    weights_dtype: np.dtype[Any] | None,
) -> bool:
    """Whether a gather runs :class:`FusedFold`: on the numba engine, for sum, mean and
    sqrt_n of float32/float64 data (weighted: of integer data too) with non-empty rows."""
    if engine.name != "numba" or op.name not in WEIGHTED_OPS or ops.inner_size(inner_shape) == 0:
        return False
    if op.skipna_of is not None:  # the fused kernel has no missing values to leave out
        return False
    floats = data_dtype.kind == "f" and data_dtype.itemsize in (4, 8)
    if weights_dtype is None:
        return floats
    weights_ok = weights_dtype.kind in "iu" or weights_dtype in (np.float32, np.float64)
    return weights_ok and (floats or data_dtype.kind in "iu")


def _gather_folds(
    choice: EngineChoice,
    op: ops.Op,
    num_segments: int,
    data: np.ndarray,
    weights_dtype: np.dtype[Any] | None,
    inner_shape: tuple[int, ...],
) -> SparseFold | FusedFold:
    """The fold of a gather (sorted ids): fused where :func:`fuses`, else blocked."""
    weighted = weights_dtype is not None
    if fuses(choice.engine, op, data.dtype, inner_shape, weights_dtype):
        return FusedFold(op, num_segments, data, weighted=weighted, inner_shape=inner_shape)
    return SparseFold(
        choice.engine, op, num_segments, data, weighted=weighted, sorted_ids=True,
        inner_shape=inner_shape,
    )  # fmt: skip


def _weighted_result(
    hosts: dict[str, ops.State], combiner: Combiner, data_dtype: np.dtype[Any], fill: Any
) -> np.ndarray:
    """``sum(w*x)``, divided as the combiner says (``sum(w)``, ``sqrt(sum(w^2))``); a zero
    divisor gives 0 (TF's div_no_nan); empty segments get the fill (default 0)."""
    values = hosts["values"]
    total = ops.finalize(values)
    # inf / inf is NaN and a float64 sum past float32's range casts to inf, silently (IEEE).
    with np.errstate(over="ignore", invalid="ignore"):
        if combiner.divisor is not None:
            divisor = combiner.divisor(ops.finalize(hosts["divisor"]))
            divisor = divisor.reshape((-1,) + (1,) * (total.ndim - 1))
            nonzero = divisor != 0
            total = np.where(nonzero, total / np.where(nonzero, divisor, 1), 0)
        out_dtype = _weighted_out_dtype(data_dtype)
        result = ops.quiet_nans(np.asarray(total).astype(out_dtype))  # inf / inf's NaN too
    empty = np.asarray(values.count) == 0
    if empty.any():
        result[empty] = 0 if fill is None else ops.parse_fill(fill, ops.get_op("sum"), out_dtype)
    return result


def check_fill(fill: Any, op: ops.Op, data_dtype: np.dtype[Any], weighted: bool) -> None:
    """A bad ``--fill`` fails right after DATA's dtype, before any check of the ids, indices
    and weights (as in the dense family); weighted results are float64 or the data's."""
    if fill is None:
        return
    if weighted:
        ops.parse_fill(fill, op, data_dtype, _weighted_out_dtype(data_dtype))
    else:
        ops.parse_fill(fill, op, data_dtype)


def sparse_reduce(
    data: Labeled,
    ids: Labeled,
    num_segments: int | None,
    op: str | ops.Op,
    *,
    indices: Labeled | None = None,
    weights: Labeled | None = None,
    sorted_ids: bool = False,
    engine: str | Engine = "auto",
    fill: Any = None,
    block_rows: int | None = None,
) -> Reduction:
    """Reduce gathered (``indices``) and/or weighted (``weights``) rows held in memory; see
    the module doc. Without ``indices`` the weights apply to the plain unsorted / sorted family
    (its id rules)."""
    op_def = ops.get_op(op)
    check_weighted_op(op_def, weights is not None)
    started = time.perf_counter()
    array = _kept_mask(data.array)
    ops.check_data_dtype(op_def, array.dtype, data.label)
    check_fill(fill, op_def, array.dtype, weights is not None)
    for extra in (ids, indices, weights):
        if extra is not None:
            refuse_nulls(extra.array, extra.label)
    flat_ids = np.asarray(ids.array).reshape(-1)
    choice = None
    deferred = False
    if indices is not None:
        check_rows_to_gather(array, data.label)
        # Chosen first: the numba engine checks a gather in one pass of its own, or while
        # the fused fold reads the rows.
        elements = int(flat_ids.size) * ops.inner_size(tuple(array.shape[1:]))
        choice = choose_engine(engine, elements=elements)
        check = _gather_check(choice, op_def, array, weights)
        report, inner_shape = _check_gather(array, ids, num_segments, indices, check)
        per, fold_sorted, deferred = "indices", True, check == "fold"
    else:
        report = validate_inputs(
            array, ids.array, num_segments, op_def, sorted_ids=sorted_ids,
            data_label=data.label, ids_label=ids.label,
        )  # fmt: skip
        inner_shape = tuple(array.shape[ids.array.ndim :])
        per, fold_sorted = "rows", sorted_ids
    flat_w = None
    n = report.num_segments
    try:
        if weights is not None:
            check_weights_meta(weights.array.dtype, weights.label)
            check_weights_shape(weights.array.shape, ids.array.shape, weights.label, per)
            flat_w = weights.array.reshape(-1)
        fold_dtype = array.dtype if weights is None else _product_dtype(array.dtype)
        check_output_fits(
            op_def, n, inner_shape, fold_dtype, sorted_ids=fold_sorted, inferred=report.inferred
        )
    except SegcliError:
        if deferred and indices is not None:  # a broken id or index is named first, as before
            _refuse_broken_rows(array, ids, num_segments, indices)
        raise
    width = ops.inner_size(inner_shape)
    if choice is None:
        choice = choose_engine(engine, elements=int(flat_ids.size) * width)
    validated = time.perf_counter()
    folds: SparseFold | FusedFold
    if indices is not None:
        w_dtype = None if flat_w is None else flat_w.dtype
        folds = _gather_folds(choice, op_def, n, array, w_dtype, inner_shape)
    else:
        folds = SparseFold(
            choice.engine, op_def, n, array, weighted=flat_w is not None, sorted_ids=fold_sorted,
            inner_shape=inner_shape,
        )  # fmt: skip
    step = block_rows_for(width, block_rows)
    if isinstance(folds, FusedFold) and block_rows is None:
        step = max(1, int(flat_ids.size))  # the fused fold holds no block-sized state
    for start in range(0, int(flat_ids.size), step):
        block = slice(start, start + step)
        clean = folds.fold(
            flat_ids[block],
            None if indices is None else indices.array[block],
            None if flat_w is None else flat_w[block],
        )
        if clean is False and indices is not None:
            _refuse_broken_rows(array, ids, num_segments, indices)
            raise AssertionError("the fused fold refused rows the checker let through")
    reduction = folds.finish(report, choice, fill, validated)
    reduction.timings["validate"] = validated - started
    return reduction


def _gather_check(
    choice: EngineChoice, op: ops.Op, data: np.ndarray, weights: Labeled | None
) -> str:
    """How a gather's ids and indices are checked: ``"fold"`` by the fused fold as it reads
    them, ``"scan"`` in the numba engine's one pass before the fold, else ``"numpy"``."""
    if choice.engine.name != "numba":
        return "numpy"
    w_dtype = None if weights is None else weights.array.dtype
    if data.ndim and fuses(choice.engine, op, data.dtype, tuple(data.shape[1:]), w_dtype):
        return "fold"
    return "scan"


def _check_gather(
    data: np.ndarray, ids: Labeled, num_segments: int | None, indices: Labeled, check: str
) -> tuple[validate.IdReport, tuple[int, ...]]:
    """Every rule of a gather held in memory: the ids' report and the inner shape. ``check``
    (see :func:`_gather_check`): ``"scan"``, the numba engine's one-pass check first (the
    NumPy checker only names what it finds); ``"fold"``, the values' rules left to the fused
    fold, and n, when not given, taken from the last id as if they held."""
    validate.check_ids_dtype(ids.array.dtype, ids.label, ids.array)
    check_ids_meta(ids.array.dtype, ids.array.shape, ids.label)
    n = validate.check_num_segments(num_segments)
    check_indices_meta(
        indices.array.dtype, indices.array.shape, indices.label, lambda: [indices.array]
    )
    check_lengths(indices.array.size, ids.array.size, indices.label, ids.label)
    last = ids.array[-1] if ids.array.size else None
    if check == "fold" and (last is None or last >= 0):
        return clean_report(n, int(ids.array.size), last), tuple(data.shape[1:])
    if check == "scan" and _clean_gather(ids.array, indices.array, n, int(data.shape[0])):
        return clean_report(n, int(ids.array.size), last), tuple(data.shape[1:])
    checker = SparseChecker(n, int(data.shape[0]), ids.label, indices.label)
    checker.feed(ids.array, indices.array)
    return checker.finish(), tuple(data.shape[1:])


def _refuse_broken_rows(
    data: np.ndarray, ids: Labeled, num_segments: int | None, indices: Labeled
) -> None:
    """The NumPy checker over a gather's ids and indices: raises the first broken rule."""
    checker = SparseChecker(num_segments, int(data.shape[0]), ids.label, indices.label)
    checker.feed(ids.array, indices.array)
    checker.finish()


def _clean_gather(ids: np.ndarray, indices: np.ndarray, n: int | None, data_rows: int) -> bool:
    from segcli.engines.numba_sparse import gather_is_clean

    return gather_is_clean(ids, indices, n, data_rows)


def reduce_streamed(
    data: Labeled,
    ids: ChunkSource,
    indices: ChunkSource,
    weights: ChunkSource | None,
    num_segments: int | None,
    op: str | ops.Op,
    *,
    engine: str | Engine = "auto",
    fill: Any = None,
    block_rows: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_block: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> tuple[Reduction, int]:
    """A gather from ``data`` (in memory) by ids, indices and weights read block by block:
    the same checks, the same fold and the same bytes as :func:`sparse_reduce`; also returns
    the number of blocks. n, when not given, grows with the ids seen. ``on_block`` sees each
    block's ids and indices after the fold, while no rule is broken (the sorting ops gather
    the same blocks)."""
    op_def = ops.get_op(op)
    check_weighted_op(op_def, weights is not None)
    started = time.perf_counter()
    array = _kept_mask(data.array)
    ops.check_data_dtype(op_def, array.dtype, data.label)
    check_fill(fill, op_def, array.dtype, weights is not None)
    check_rows_to_gather(array, data.label)
    check_ids_meta(ids.dtype, ids.shape, ids.label)
    n = validate.check_num_segments(num_segments)
    # Float indices are refused before the run: their values are read only to name the first
    # that is not an integer.
    step = block_rows_for(1, block_rows)
    check_indices_meta(indices.dtype, indices.shape, indices.label, lambda: indices.chunks(step))
    lengths = [ids.shape[0], indices.shape[0]]
    if UNKNOWN_ROWS not in lengths:
        check_lengths(indices.shape[0], ids.shape[0], indices.label, ids.label)
    if weights is not None:
        check_weights_meta(weights.dtype, weights.label)
        if UNKNOWN_ROWS not in (ids.shape[0], weights.shape[0]):
            check_weights_shape(weights.shape, ids.shape, weights.label, "indices")
    inner_shape = tuple(array.shape[1:])
    if n is not None:
        check_gather_fits(op_def, n, inner_shape, array.dtype, weights is not None, inferred=False)
    width = ops.inner_size(inner_shape)
    # A stream of ids of unknown length (UNKNOWN_ROWS) counts as small, and says so.
    choice = choose_engine(engine, elements=ids.shape[0] * width if ids.shape[0] >= 0 else -1)
    validated = time.perf_counter()
    w_dtype = None if weights is None else weights.dtype
    folds = _gather_folds(choice, op_def, n or 0, array, w_dtype, inner_shape)
    checker = SparseChecker(n, int(array.shape[0]), ids.label, indices.label)
    step = block_rows_for(width, block_rows)
    sources = [ids, indices] + ([] if weights is None else [weights])
    blocks = 0
    for parts in _aligned_blocks(sources, step):
        for part, source in zip(parts, sources, strict=True):
            refuse_nulls(part, source.label, checker.seen)
        block_ids, block_indices = parts[0], parts[1]
        checker.feed(block_ids, block_indices)
        blocks += 1
        if checker.failed:
            continue  # the rest is scanned only, so the error can count every offender
        if n is None and block_ids.size:
            folds.grow(int(block_ids[-1]) + 1)
        folds.fold(block_ids, block_indices, parts[2] if weights is not None else None)
        if on_block is not None:
            on_block(block_ids, block_indices)
        if progress is not None and ids.shape[0] != UNKNOWN_ROWS:
            progress(checker.seen, ids.shape[0])
    report = checker.finish()
    reduction = folds.finish(report, choice, fill, validated)
    reduction.timings["validate"] = validated - started
    return reduction, blocks


def _aligned_blocks(sources: list[ChunkSource], rows: int) -> Iterator[list[np.ndarray]]:
    """Blocks of ``rows`` rows of every source in step; sources of different lengths (found
    only at the end of a CSV) are the length error, with both lengths counted. A null is
    named as a whole read names it: of the sources' nulls in the same rows, the earliest
    (the first source's on a tie; see :func:`first_nulls`), before any length error."""
    streams = [iter(source.chunks(rows)) for source in sources]
    seen = [0] * len(sources)
    while True:
        parts = _next_in_step(streams)
        if all(part is None for part in parts):
            return
        if len({None if part is None else part.shape[0] for part in parts}) > 1:
            left = _next_in_step(streams, _rows_left)
            totals = [
                done + (part.shape[0] if part is not None else 0) + more
                for done, part, more in zip(seen, parts, left, strict=True)
            ]
            _refuse_lengths(sources, totals)
        yield list(parts)
        seen = [done + part.shape[0] for done, part in zip(seen, parts, strict=True)]


def _next_in_step(
    streams: list[Iterator[np.ndarray]],
    take: Callable[[Iterator[np.ndarray]], Any] = lambda stream: next(stream, None),
) -> list[Any]:
    """``take`` of each stream (its next block, by default), every stream's taken even where
    one fails on a null, the same rows of another may hold an earlier one: the earliest null
    is raised; once one is pending, another stream's other errors are not looked at."""
    taken: list[Any] = []
    nulls: list[NullsError] = []
    for stream in streams:
        try:
            taken.append(take(stream))
        except NullsError as error:
            nulls.append(error)
        except SegcliError:
            if not nulls:
                raise
    if nulls:
        raise first_nulls(nulls)
    return taken


def _rows_left(stream: Iterator[np.ndarray]) -> int:
    return sum(int(block.shape[0]) for block in stream)


def _refuse_lengths(sources: list[ChunkSource], totals: list[int]) -> None:
    ids, indices = sources[0], sources[1]
    check_lengths(totals[1], totals[0], indices.label, ids.label)
    weights = sources[2]
    check_weights_shape((totals[2],), (totals[0],), weights.label, "indices")
