"""How every engine folds a ``--skipna`` op (:func:`segcli.ops.skipna_op`) with its own folds.

No engine kernel knows about missing values. A block is folded in three steps, each through
the engine's ordinary path:

1. the present values: ``(rows, inner_size)`` ones and zeros, summed into the state's
   ``present`` by the engine's integer sum; this fold also counts the rows (``count``);
2. an op whose intermediates fold alone (sum, min, any, ...; every ``agg`` op): each
   intermediate over the data with every missing value replaced by its fold's identity (0 for
   sum, 1 for prod, +inf for min, ...), which leaves the accumulator as it was;
3. a joint op (var, argmin, first, logsumexp, ...), whose identity trick would be wrong (the
   row of a tie, the first row, the shift): one element column at a time, with the rows whose
   value is missing given an id outside ``[0, n)``, so that the fold drops them as it drops
   a negative id, and the column's present values as the count its fold reads.

Missing means NaN (float and complex data) or masked (a null of a table column, read as a
NumPy masked array under ``--skipna``). The row numbers stay global, so argmin and first give
the same rows whatever the blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import ops

if TYPE_CHECKING:
    from segcli.engines.base import Engine


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
    values = np.ma.getdata(data)
    missing = missing_values(data)
    if base.joint is None:
        _fold_alone(engine, state, base, values, ids, missing, sorted_ids)
    else:
        _fold_columns(engine, state, base, values, ids, missing)
    present = np.ones(values.shape, np.int8) if missing is None else (~missing).view(np.int8)
    counted = ops.State(
        ops.OPS["sum"],
        np.dtype(np.int8),
        state.inner_shape,
        {"count": state.count, "sum": state.arrays["present"]},
        first_row,
    )
    engine.fold(counted, present, ids, sorted_ids=sorted_ids)
    state.count = counted.count
    state.arrays["present"] = counted.arrays["sum"]
    state.next_row = first_row + int(ids.shape[0])


def _base_state(state: ops.State, base: ops.Op, count: Any) -> ops.State:
    arrays = {"count": count}
    arrays.update({i.name: state.arrays[i.name] for i in base.intermediates})
    return ops.State(base, state.data_dtype, state.inner_shape, arrays, state.next_row)


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
    rows are counted by the present fold, so these count into scratch."""
    if not base.intermediates:
        return
    whole = _base_state(state, base, engine.xp.zeros_like(state.count))
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
