"""How every engine folds a ``--skipna`` op (:func:`segcli.ops.skipna_op`) with its own folds.

No engine kernel knows about missing values: a block folds through the engine's ordinary
paths, each fold a primitive the engine already has; one exception, optional, is below.

- An op whose intermediates fold alone (sum, min, any, ...; every ``agg`` op): each
  intermediate over the data with every missing value replaced by its fold's identity (0 for
  sum, 1 for prod, +inf for min, ...), which leaves the accumulator as it was; this fold
  counts the rows. Then the present values into ``present``: with one value per row, the
  rows counted less the missing ones (count, which has no intermediate, counts the rows
  alone); with several, a sum of ones and zeros.
- A float sum of one value per row (sum, mean, sqrt_n) with no masked value, where the
  engine's ``fold_sum_skipping_nan`` applies (the NumPy engine's packed sum and count): the
  engine leaves NaN out inside its fold, with the same bits, and builds no substitute block.
- A joint op (var, argmin, first, logsumexp, ...), where the identity trick would be wrong
  (the row of a tie, the first row, the shift): the rows whose value is missing dropped by
  id, one element column at a time, each column's present values the count its fold reads
  (and, with one value per row, counts); then the rows.

Missing means NaN (float and complex data) or masked (a null of a table column, read as a
NumPy masked array under ``--skipna``). The row numbers stay global, so argmin and first give
the same rows whatever the blocks.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from segcli import ops


class Engine(Protocol):
    """What skipping needs of an engine (:class:`segcli.engines.base.Engine`, which calls
    this module: named here by its methods, so that neither module imports the other)."""

    @property
    def xp(self) -> Any: ...

    def fold(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
    ) -> None: ...

    def fold_block(
        self,
        state: ops.State,
        data: np.ndarray,
        ids: np.ndarray,
        *,
        sorted_ids: bool,
        first_row: int,
    ) -> None: ...

    def fold_sum_skipping_nan(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
    ) -> np.ndarray | None: ...


def missing_values(data: np.ndarray) -> np.ndarray | None:
    """The mask of missing values of a block (NaN, or masked), or None when none is."""
    mask = np.ma.getmask(data)
    values = np.ma.getdata(data)
    missing = None if mask is np.ma.nomask else np.asarray(mask)
    if values.dtype.kind in "fc":
        nan = np.isnan(values)
        missing = nan if missing is None else (missing | nan)
    if missing is None or not missing.any():
        return None
    return missing


def fold_skipping(
    engine: Engine, state: ops.State, data: Any, ids: np.ndarray, sorted_ids: bool
) -> None:
    """Fold one block of rows (``data`` 2-D, maybe masked) into a ``--skipna`` state."""
    base = state.op.skipna_of
    assert base is not None
    first_row = state.next_row
    if _summed_without_nan(engine, state, base, data, ids, sorted_ids):
        state.next_row = first_row + int(ids.shape[0])
        return
    values = np.ma.getdata(data)
    missing = missing_values(data)
    if base.joint is None and values.shape[1] == 1:
        # The rows this block adds are the segments' present values but its missing ones.
        before = state.count.copy()
        if base.intermediates:
            _fold_alone(engine, state, base, values, ids, missing, sorted_ids)  # counts rows
        else:  # count: the rows alone
            _count_rows(engine, state, values, ids, sorted_ids)
        present = state.arrays["present"][0, :, 0]
        present += state.count - before
        if missing is not None:  # few: their positions, not a mask of every row
            _uncount(present, ids[np.flatnonzero(missing[:, 0])])
    elif base.joint is None:
        _fold_alone(engine, state, base, values, ids, missing, sorted_ids)
        _count_present(engine, state, values, ids, missing, sorted_ids, rows=not base.intermediates)
    elif values.shape[1] == 1:
        _fold_one_column(engine, state, base, values, ids, missing, sorted_ids)
    else:
        _fold_columns(engine, state, base, values, ids, missing)
        _count_present(engine, state, values, ids, missing, sorted_ids, rows=True)
    state.next_row = first_row + int(ids.shape[0])


def _summed_without_nan(
    engine: Engine, state: ops.State, base: ops.Op, data: Any, ids: np.ndarray, sorted_ids: bool
) -> bool:
    """A float sum of one value per row (sum, mean, sqrt_n), where NaN is the only missing
    value (no mask) and the engine leaves NaN out in its own fold (the NumPy engine's packed
    sum and count): no mask of the block, no substitute block, no second count. Whether it
    folded."""
    if (
        base.joint is not None
        or len(base.intermediates) != 1
        or base.intermediates[0].fold.kind != "sum"
        or type(data) is not np.ndarray  # a masked block (numpy.ma is not loaded otherwise)
    ):
        return False
    folded = _base_state(state, base, state.count)
    present = engine.fold_sum_skipping_nan(folded, data, ids, sorted_ids=sorted_ids)
    if present is None:
        return False
    (intermediate,) = base.intermediates
    state.arrays[intermediate.name] = folded.arrays[intermediate.name]
    state.count = folded.count
    state.arrays["present"][0, :, 0] += present
    return True


def _uncount(count: np.ndarray, ids: np.ndarray) -> None:
    """Take one from ``count`` per id in ``[0, len(count))`` (the others were never counted)."""
    n = count.shape[0]
    if ids.dtype.kind == "i":
        ids = ids.view(ids.dtype.str.replace("i", "u"))  # a negative id is huge: one test
    ids = ids[ids < n] if ids.size and int(ids.max()) >= n else ids
    if n <= 4 * ids.shape[0]:
        count -= np.bincount(ids.astype(np.intp), minlength=n)
    else:
        np.subtract.at(count, ids.astype(np.intp), 1)


def _dropping_missing(ids: np.ndarray, missing: np.ndarray | None) -> np.ndarray:
    """The ids with -1 where the (one-column) value is missing: the folds drop those rows."""
    if missing is None:
        return ids
    # int64 has room for -1; an id of 2**63 or more wraps negative, dropped as it is >= n.
    return np.where(missing[:, 0], -1, ids.astype(np.int64, copy=False))


def _count_present(
    engine: Engine,
    state: ops.State,
    values: np.ndarray,
    ids: np.ndarray,
    missing: np.ndarray | None,
    sorted_ids: bool,
    *,
    rows: bool,
) -> None:
    """The present values into ``present`` (and, with ``rows``, the rows into ``count``): one
    value per row is a count of the rows not dropped; several, a sum of ones and zeros."""
    present = state.arrays["present"]
    if rows:
        _count_rows(engine, state, values, ids, sorted_ids)
    if values.shape[1] == 1:
        kept = ops.State(ops.OPS["count"], state.data_dtype, (), {"count": present[0, :, 0]})
        engine.fold(kept, values, _dropping_missing(ids, missing), sorted_ids=False)
        present[0, :, 0] = kept.count
        return
    ones = np.ones(values.shape, np.int8) if missing is None else (~missing).view(np.int8)
    arrays = {"count": engine.xp.zeros_like(state.count), "sum": present}
    summed = ops.State(ops.OPS["sum"], np.dtype(np.int8), state.inner_shape, arrays)
    summed.next_row = state.next_row
    engine.fold(summed, ones, ids, sorted_ids=sorted_ids)
    state.arrays["present"] = summed.arrays["sum"]


def _base_state(state: ops.State, base: ops.Op, count: Any) -> ops.State:
    arrays = {"count": count}
    arrays.update({i.name: state.arrays[i.name] for i in base.intermediates})
    return ops.State(base, state.data_dtype, state.inner_shape, arrays, state.next_row)


def _fold_one_column(
    engine: Engine,
    state: ops.State,
    base: ops.Op,
    values: np.ndarray,
    ids: np.ndarray,
    missing: np.ndarray | None,
    sorted_ids: bool,
) -> None:
    """A joint op over one value per row: a row whose value is missing is dropped by its id,
    so the op's fold counts (and reads as its count) the present values; then the rows."""
    present = state.arrays["present"]
    folded = _base_state(state, base, present[0, :, 0])
    engine.fold(folded, values, _dropping_missing(ids, missing), sorted_ids=False)
    present[0, :, 0] = folded.count
    for intermediate in base.intermediates:  # the engine may have moved the arrays
        state.arrays[intermediate.name] = folded.arrays[intermediate.name]
    _count_rows(engine, state, values, ids, sorted_ids)


def _count_rows(
    engine: Engine, state: ops.State, values: np.ndarray, ids: np.ndarray, sorted_ids: bool
) -> None:
    """The block's rows into the state's row ``count`` (every row, present or not)."""
    counted = ops.State(ops.OPS["count"], state.data_dtype, (), {"count": state.count})
    counted.next_row = state.next_row
    engine.fold(counted, values, ids, sorted_ids=sorted_ids)
    state.count = counted.count


def _fold_alone(
    engine: Engine,
    state: ops.State,
    base: ops.Op,
    values: np.ndarray,
    ids: np.ndarray,
    missing: np.ndarray | None,
    sorted_ids: bool,
) -> None:
    """Each intermediate over the values with the missing ones replaced by its identity; the
    first counts the rows."""
    if not base.intermediates:
        return
    whole = _base_state(state, base, state.count)
    views = [whole] if missing is None else whole.per_intermediate()
    for view in views:
        block = values
        if missing is not None:
            (intermediate,) = view.op.intermediates
            identity = values.dtype.type(intermediate.fold.identity(values.dtype))
            block = np.where(missing, identity, values)
        engine.fold(view, block, ids, sorted_ids=sorted_ids)
        for intermediate in view.op.intermediates:  # the engine may have moved the arrays
            state.arrays[intermediate.name] = view.arrays[intermediate.name]
    state.count = views[0].count


def _fold_columns(
    engine: Engine,
    state: ops.State,
    base: ops.Op,
    values: np.ndarray,
    ids: np.ndarray,
    missing: np.ndarray | None,
) -> None:
    """A joint fold, one element column at a time, the rows missing there dropped by id."""
    width = values.shape[1]
    present = np.asarray(state.arrays["present"])
    wide_ids = ids.astype(np.int64, copy=False)  # room for -1 (an id of 2**63 or more is >= n)
    for j in range(width):
        column_missing = None if missing is None else missing[:, j]
        column_ids = wide_ids
        if column_missing is not None and column_missing.any():
            column_ids = np.where(column_missing, -1, wide_ids)
        arrays = {"count": present[0, :, j].copy()}
        for intermediate in base.intermediates:
            arrays[intermediate.name] = np.ascontiguousarray(
                state.arrays[intermediate.name][:, :, j : j + 1]
            )
        column = ops.State(base, state.data_dtype, (), arrays, state.next_row)
        engine.fold_block(
            column,
            np.ascontiguousarray(values[:, j : j + 1]),
            column_ids,
            sorted_ids=False,
            first_row=state.next_row,
        )
        for intermediate in base.intermediates:
            state.arrays[intermediate.name][:, :, j] = column.arrays[intermediate.name][:, :, 0]
