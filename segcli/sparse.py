"""TF's sparse segment family and weighted combiners: ``--indices`` and ``--weights``.

``out[s] = reduce(data[indices[i]] for i with ids[i] == s)`` (``tf.sparse.segment_*``), and the
weighted sum / mean / sqrt_n of ``tf.nn.embedding_lookup_sparse``. The gathered rows are never
held whole: they are gathered and folded block by block through the engine's normal fold, so
memory grows with the block, not with ``len(indices) x inner``. Weighted runs fold
``w * x`` (in float64, complex128 for complex data) as a sum, and the divisors ``sum(w)`` and
``sum(w^2)`` as two more float64 sums, then divide with TF's ``div_no_nan``.

The sparse family's ids are 1-D, non-negative and non-decreasing (TF's rule); unlike
``--sorted``, an id >= n is an error, as in TF's ``...WithNumSegments``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from segcli import ops, validate
from segcli.core import Reduction, check_output_fits, validate_inputs
from segcli.engines import Engine, choose_engine
from segcli.errors import InvalidInputError, UsageError

#: Ops that take ``--weights`` (TF's combiners).
WEIGHTED_OPS = ("sum", "mean", "sqrt_n")

#: Bytes of gathered rows per block when no block size is given: small enough to stay in cache
#: and far below a gather of any real workload, large enough that NumPy's per-call cost vanishes.
BLOCK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Labeled:
    """An input array and the name errors give it."""

    array: np.ndarray
    label: str


def check_weighted_op(op: str, weighted: bool) -> None:
    """Other ops than sum, mean and sqrt_n with ``--weights``: a usage error."""
    if weighted and op not in WEIGHTED_OPS:
        raise UsageError(f"--weights applies to {', '.join(WEIGHTED_OPS)} only, not {op}")


def check_sparse_ids(ids: Labeled, num_segments: int | None) -> validate.IdReport:
    """The sparse family's ids: 1-D integers, non-negative, non-decreasing, and < n when n is
    given; n defaults to ``ids[-1] + 1`` (0 for no ids)."""
    array, label = ids.array, ids.label
    validate.check_ids_dtype(array.dtype, label, array)
    if array.ndim != 1:
        raise InvalidInputError(
            f"{label}: --indices needs 1-D segment_ids, got shape {array.shape}"
        )
    n = validate.check_num_segments(num_segments)
    _refuse_first(array < 0, array, label, "is negative: --indices needs ids >= 0", "negative")
    decrease = array[1:] < array[:-1]
    if decrease.any():
        at = int(np.argmax(decrease)) + 1
        raise InvalidInputError(
            f"{label}: segment_ids[{at}] = {array[at]} < segment_ids[{at - 1}] = "
            f"{array[at - 1]}: --indices needs non-decreasing segment ids "
            f"({validate.plural(int(np.count_nonzero(decrease)), 'decrease')})"
        )
    if n is None:
        inferred = int(array[-1]) + 1 if array.size else 0
        return validate.IdReport(inferred, True, int(array.size), 0, 0)
    _refuse_first(array >= n, array, label, f"is out of range [0, {n})", "out of range")
    return validate.IdReport(n, False, int(array.size), 0, 0)


def _refuse_first(bad: np.ndarray, array: np.ndarray, label: str, what: str, kind: str) -> None:
    """The first id ``bad`` marks, and how many there are (``3 ids negative``)."""
    count = int(np.count_nonzero(bad))
    if count:
        first = int(np.argmax(bad))
        raise InvalidInputError(
            f"{label}: segment_ids[{first}] = {array[first]} {what} "
            f"({validate.plural(count, 'id')} {kind})"
        )


def check_indices(indices: Labeled, ids: Labeled, data_rows: int) -> None:
    """One integer index per id, each in ``[0, data_rows)``; float indices are never
    truncated."""
    array, label = indices.array, indices.label
    if array.dtype.kind not in "iu":
        raise InvalidInputError(
            f"{label}: indices must be integers, got {array.dtype} (never truncated)"
        )
    if array.ndim != 1:
        raise InvalidInputError(f"{label}: indices must be 1-D, got shape {array.shape}")
    if array.size != ids.array.size:
        raise InvalidInputError(
            f"{label}: {array.size:,} indices for {ids.array.size:,} segment ids in "
            f"{ids.label} (one index per id)"
        )
    bad = (array < 0) | (array >= data_rows) if array.dtype.kind == "i" else array >= data_rows
    count = int(np.count_nonzero(bad))
    if count:
        first = int(np.argmax(bad))
        raise InvalidInputError(
            f"{label}: indices[{first}] = {array[first]} is out of range [0, {data_rows}) "
            f"({count} {'index' if count == 1 else 'indices'} out of range)"
        )


def flat_weights(weights: Labeled, rows: int, ids_shape: tuple[int, ...], per: str) -> np.ndarray:
    """The weights as one per row: 1-D of ``rows`` values, or shaped like the ids."""
    array, label = weights.array, weights.label
    if array.dtype.kind not in "iuf":
        raise InvalidInputError(
            f"{label}: weights must be real numbers (integers or floats), got {array.dtype}"
        )
    if array.shape not in ((rows,), ids_shape):
        raise InvalidInputError(
            f"{label}: {array.size:,} weights (shape {array.shape}) for {rows:,} {per} "
            f"(shape {ids_shape}): need one weight per {per.rstrip('s')}"
        )
    return array.reshape(-1)


def _weighted_out_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The data's dtype for float (and complex) data, float64 for integers."""
    return np.dtype(data_dtype) if data_dtype.kind in "fc" else np.dtype(np.float64)


def _product_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.complex128 if data_dtype.kind == "c" else np.float64)


def block_rows_for(inner: int, block_rows: int | None) -> int:
    """Rows gathered per block: ``block_rows``, else :data:`BLOCK_BYTES` of float64 rows."""
    if block_rows is not None:
        return block_rows
    return max(1024, BLOCK_BYTES // (8 * max(inner, 1)))


@dataclass
class _Folds:
    """The states a run folds into: the op's (or the weighted sum's), and the weight sums."""

    values: ops.State
    weights: ops.State | None = None
    squares: ops.State | None = None


def _new_folds(
    engine: Engine,
    op: ops.Op,
    n: int,
    inner_shape: tuple[int, ...],
    data_dtype: np.dtype[Any],
    weighted: bool,
    sorted_ids: bool,
) -> _Folds:
    if not weighted:
        return _Folds(engine.new_state(op, n, inner_shape, data_dtype, sorted_ids=sorted_ids))
    total = ops.get_op("sum")
    f64 = np.dtype(np.float64)
    product = _product_dtype(data_dtype)
    return _Folds(
        engine.new_state(total, n, inner_shape, product, sorted_ids=sorted_ids),
        engine.new_state(total, n, (), f64, sorted_ids=sorted_ids) if op.name == "mean" else None,
        engine.new_state(total, n, (), f64, sorted_ids=sorted_ids) if op.name == "sqrt_n" else None,
    )


def _fold_blocks(
    engine: Engine,
    folds: _Folds,
    data2d: np.ndarray,
    ids: np.ndarray,
    indices: np.ndarray | None,
    weights: np.ndarray | None,
    *,
    sorted_ids: bool,
    block_rows: int,
) -> None:
    """Gather, weight and fold the rows block by block, in row order (deterministic lanes)."""
    product = _product_dtype(data2d.dtype)
    for start in range(0, int(ids.size), block_rows):
        stop = min(start + block_rows, int(ids.size))
        rows = data2d[indices[start:stop]] if indices is not None else data2d[start:stop]
        block_ids = ids[start:stop]
        if weights is None:
            engine.fold(folds.values, rows, block_ids, sorted_ids=sorted_ids)
            continue
        w = weights[start:stop].astype(np.float64)
        engine.fold(
            folds.values, rows.astype(product) * w[:, None], block_ids, sorted_ids=sorted_ids
        )
        if folds.weights is not None:
            engine.fold(folds.weights, w[:, None], block_ids, sorted_ids=sorted_ids)
        if folds.squares is not None:
            engine.fold(folds.squares, (w * w)[:, None], block_ids, sorted_ids=sorted_ids)


def _weighted_result(folds: _Folds, op: ops.Op, data_dtype: np.dtype[Any], fill: Any) -> np.ndarray:
    """``sum(w*x)``, divided by ``sum(w)`` (mean) or ``sqrt(sum(w^2))`` (sqrt_n); a zero divisor
    gives 0 (TF's div_no_nan); empty segments get the fill (default 0)."""
    values = folds.values.to_host()
    total = ops.finalize(values)
    divisor_state = folds.weights or folds.squares
    if divisor_state is not None:
        divisor = ops.finalize(divisor_state.to_host())
        if folds.squares is not None:
            divisor = np.sqrt(divisor)
        divisor = divisor.reshape((-1,) + (1,) * (total.ndim - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            total = np.where(divisor != 0, total / np.where(divisor != 0, divisor, 1), 0)
    out_dtype = _weighted_out_dtype(data_dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        result = np.asarray(total).astype(out_dtype)
    empty = np.asarray(values.count) == 0
    if empty.any():
        result[empty] = 0 if fill is None else ops.parse_fill(fill, ops.get_op("sum"), out_dtype)
    return result


def sparse_reduce(
    data: Labeled,
    ids: Labeled,
    num_segments: int | None,
    op: str,
    *,
    indices: Labeled | None = None,
    weights: Labeled | None = None,
    sorted_ids: bool = False,
    engine: str | Engine = "auto",
    fill: Any = None,
    block_rows: int | None = None,
) -> Reduction:
    """Reduce gathered (``indices``) and/or weighted (``weights``) rows; see the module doc.

    Without ``indices`` the weights apply to the plain unsorted / sorted family (its id rules).
    """
    op_def = ops.get_op(op)
    check_weighted_op(op_def.name, weights is not None)
    started = time.perf_counter()
    array = np.asarray(data.array)
    ops.check_data_dtype(op_def, array.dtype, data.label)
    if indices is not None:
        if array.ndim == 0:
            raise InvalidInputError(
                f"{data.label}: --indices needs rows to gather, got a 0-D array"
            )
        report = check_sparse_ids(ids, num_segments)
        check_indices(indices, ids, int(array.shape[0]))
        inner_shape = tuple(array.shape[1:])
        fold_sorted = True
        per = "indices"
    else:
        report = validate_inputs(
            array, ids.array, num_segments, op_def, sorted_ids=sorted_ids,
            data_label=data.label, ids_label=ids.label,
        )  # fmt: skip
        inner_shape = tuple(array.shape[ids.array.ndim :])
        fold_sorted = sorted_ids
        per = "rows"
    flat_ids = ids.array.reshape(-1)
    flat_w = (
        None
        if weights is None
        else flat_weights(weights, int(flat_ids.size), tuple(ids.array.shape), per)
    )
    n = report.num_segments
    out_dtype = array.dtype if weights is None else _product_dtype(array.dtype)
    check_output_fits(op_def, n, inner_shape, out_dtype, sorted_ids=fold_sorted)
    if fill is not None and weights is None:
        ops.parse_fill(fill, op_def, array.dtype)
    elif fill is not None:
        ops.parse_fill(fill, ops.get_op("sum"), _weighted_out_dtype(array.dtype))
    width = ops.inner_size(inner_shape)
    data2d = array.reshape(-1 if indices is not None else flat_ids.size, width)
    choice = choose_engine(engine, elements=int(flat_ids.size) * width)
    validated = time.perf_counter()
    folds = _new_folds(
        choice.engine, op_def, n, inner_shape, array.dtype, weights is not None, fold_sorted
    )
    _fold_blocks(
        choice.engine,
        folds,
        data2d,
        flat_ids,
        None if indices is None else indices.array,
        flat_w,
        sorted_ids=fold_sorted,
        block_rows=block_rows_for(width, block_rows),
    )
    host = folds.values.to_host()
    if weights is None:
        reduction = Reduction.finish(
            host,
            report,
            sorted_ids=fold_sorted,
            engine=choice.engine.name,
            engine_reason=choice.reason,
            fill=fill,
            timings={"validate": validated - started},
        )
    else:
        reduction = Reduction(
            result=_weighted_result(folds, op_def, array.dtype, fill),
            counts=np.asarray(host.count),
            op=op_def,
            sorted_ids=fold_sorted,
            id_report=report,
            engine=choice.engine.name,
            engine_reason=choice.reason,
            timings={"validate": validated - started},
        )
    reduction.timings["compute"] = time.perf_counter() - validated
    return reduction
