"""The table of segment reductions.

Each op is described as mergeable partial state, in the style of flox's chunk / combine /
finalize: a reduction keeps a per-segment row ``count`` and, except for ``count`` itself, an
accumulator ``acc`` of shape ``(n, inner_size)``. Every engine folds rows into that state, any
two states of the same op merge with :func:`combine`, and :func:`finalize` turns a state into the
result. The in-memory path, streaming chunks, GPU batches and Dask partitions therefore share
each op's definition; an engine only has to implement the fold.

The accumulator dtypes are chosen so that every fold is either exact or done in float64:
integers fold in 64 bits (two's complement wraps modulo 2**64, so the final cast to the data
dtype gives exactly TF's wrapped result), floats fold in float64, complex in complex128.

Float sums and products are the folds whose bits depend on the order of the operations. They
keep :data:`LANES` partial accumulators ("lanes"). Over unsorted ids the rows are dealt to the
lanes in runs of :data:`LANE_ROWS` by their global row number (row ``r`` goes to lane
``(r // LANE_ROWS) % LANES``); each lane folds its rows in row order, and :func:`finalize`
merges the lanes in lane order. The split depends only on row numbers, so results stay
deterministic and independent of how the rows were cut into blocks, while two cores can fold
one segment at once. Sorted ids (``--sorted``) keep one lane, folded in row order: their
segments are contiguous runs, which cores can already share out. (A state with lanes that is
given sorted rows folds them into lane 0; the other lanes keep the identity, which the merge
adds exactly.)
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from segcli.errors import InvalidInputError, UsageError
from segcli.op_names import OP_SUMMARIES


@dataclass(frozen=True)
class Op:
    """One reduction: how it folds, what it fills, which dtypes it takes and returns."""

    name: str
    #: The ufunc that folds a value into the accumulator and merges two accumulators.
    #: ``None`` for ``count``, which keeps no accumulator.
    ufunc: np.ufunc | None
    #: min and max order values, so complex data is refused.
    accepts_complex: bool
    #: mean and sqrt_n divide a sum by a function of the count.
    divides: bool

    @property
    def summary(self) -> str:
        return OP_SUMMARIES[self.name]

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Ops are compared by identity; an op sent to another process must come back as the
        # table's own entry, not a copy.
        return (get_op, (self.name,))

    def acc_dtype(self, data_dtype: np.dtype[Any]) -> np.dtype[Any] | None:
        """The dtype the op accumulates in for data of ``data_dtype``."""
        if self.ufunc is None:
            return None
        if self.ufunc in (np.minimum, np.maximum):
            return np.dtype(data_dtype)  # exact in the data's own type
        kind = data_dtype.kind
        if kind == "c":
            return np.dtype(np.complex128)
        if kind == "f":
            return np.dtype(np.float64)
        if self.divides and data_dtype.itemsize == 8:
            # SPEC: mean of 64-bit integers uses the sum without wraparound.
            return np.dtype(np.float64)
        return np.dtype(np.int64 if kind == "i" else np.uint64)

    def out_dtype(self, data_dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The result dtype, as SPEC's table gives it."""
        if self.ufunc is None:
            return np.dtype(np.int64)
        if not self.divides or data_dtype.kind in "fc":
            return np.dtype(data_dtype)
        return np.dtype(np.float32 if data_dtype.itemsize <= 2 else np.float64)

    def initial(self, acc_dtype: np.dtype[Any]) -> Any:
        """The accumulator's starting value: the identity of the fold."""
        if self.ufunc is np.multiply:
            return 1
        if self.ufunc is np.minimum:
            return np.inf if acc_dtype.kind == "f" else np.iinfo(acc_dtype).max
        if self.ufunc is np.maximum:
            return -np.inf if acc_dtype.kind == "f" else np.iinfo(acc_dtype).min
        return 0

    def empty_value(self, out_dtype: np.dtype[Any]) -> Any:
        """What an empty segment holds by default (SPEC: finite extremes for min and max)."""
        if self.ufunc is np.minimum:
            return np.finfo(out_dtype).max if out_dtype.kind == "f" else np.iinfo(out_dtype).max
        if self.ufunc is np.maximum:
            return np.finfo(out_dtype).min if out_dtype.kind == "f" else np.iinfo(out_dtype).min
        if self.ufunc is np.multiply:
            return 1
        return 0


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("sum", np.add, True, False),
        Op("mean", np.add, True, True),
        Op("min", np.minimum, False, False),
        Op("max", np.maximum, False, False),
        Op("prod", np.multiply, True, False),
        Op("sqrt_n", np.add, True, True),
        Op("count", None, True, False),
    )
}


def get_op(name: str | Op) -> Op:
    """Look an op up by name; an unknown name is a usage error listing the known ones."""
    if isinstance(name, Op):
        return name
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op {name!r} (ops: {', '.join(OPS)})") from None


#: Partial accumulators of an order-dependent fold (float sums and products).
LANES = 2
#: Consecutive rows dealt to one lane before the next lane takes over.
LANE_ROWS = 1 << 16


def lane_count(op: Op, acc_dtype: np.dtype[Any] | None, *, sorted_ids: bool = False) -> int:
    """How many lanes the op's accumulator keeps: :data:`LANES` where the order matters over
    unsorted ids; one otherwise."""
    order_matters = op.ufunc in (np.add, np.multiply)
    if not sorted_ids and acc_dtype is not None and acc_dtype.kind in "fc" and order_matters:
        return LANES
    return 1


def lane_pieces(first_row: int, rows: int, lanes: int) -> list[tuple[int, int, int]]:
    """``(start, stop, lane)`` for the runs of a block of ``rows`` rows starting at global row
    ``first_row``: block-local ranges, in row order, each within one lane."""
    if lanes == 1:
        return [(0, rows, 0)] if rows else []
    pieces = []
    start = 0
    while start < rows:
        row = first_row + start
        stop = min(rows, start + LANE_ROWS - row % LANE_ROWS)
        pieces.append((start, stop, (row // LANE_ROWS) % lanes))
        start = stop
    return pieces


def row_lanes(first_row: int, rows: int, lanes: int, xp: Any = np) -> Any:
    """The lane of each row of a block starting at global row ``first_row`` (int64)."""
    positions = xp.arange(first_row, first_row + rows, dtype=np.int64)
    return (positions // LANE_ROWS) % lanes


@dataclass
class State:
    """Partial state of one reduction over some rows; engines fold rows into it in place.

    ``count`` has shape ``(n,)``; ``acc`` has shape ``(lanes, n, inner_size)`` (see
    :func:`lane_count`). ``next_row`` is the global row number of the next row to fold, which
    decides its lane. Arrays may belong to another array library (CuPy) while an engine works;
    :func:`finalize` takes NumPy arrays.
    """

    op: Op
    data_dtype: np.dtype[Any]
    inner_shape: tuple[int, ...]
    count: Any
    acc: Any
    next_row: int = 0

    @property
    def lanes(self) -> int:
        return 1 if self.acc is None else int(self.acc.shape[0])

    @property
    def num_segments(self) -> int:
        return int(self.count.shape[0])


def inner_size(inner_shape: tuple[int, ...]) -> int:
    return int(np.prod(inner_shape, dtype=np.int64))


def state_bytes(
    op: Op,
    num_segments: int,
    inner_shape: tuple[int, ...],
    data_dtype: np.dtype[Any],
    *,
    sorted_ids: bool = False,
) -> int:
    """Memory for the state plus the finished result, for the "does it fit" check."""
    per_segment = 8 + op.out_dtype(data_dtype).itemsize * inner_size(inner_shape)
    acc_dtype = op.acc_dtype(data_dtype)
    if acc_dtype is not None:
        lanes = lane_count(op, acc_dtype, sorted_ids=sorted_ids)
        per_segment += lanes * acc_dtype.itemsize * inner_size(inner_shape)
    return num_segments * per_segment


def new_state(
    op: Op,
    num_segments: int,
    inner_shape: tuple[int, ...],
    data_dtype: np.dtype[Any],
    xp: Any = np,
    *,
    first_row: int = 0,
    sorted_ids: bool = False,
    lanes: int | None = None,
) -> State:
    """An empty state (no rows folded yet) for ``num_segments`` segments; its first row will be
    global row ``first_row``. ``lanes`` overrides :func:`lane_count` (to copy a state)."""
    count = xp.zeros(num_segments, dtype=np.int64)
    acc = None
    acc_dtype = op.acc_dtype(data_dtype)
    if acc_dtype is not None:
        if lanes is None:
            lanes = lane_count(op, acc_dtype, sorted_ids=sorted_ids)
        shape = (lanes, num_segments, inner_size(inner_shape))
        acc = xp.full(shape, op.initial(acc_dtype), acc_dtype)
    return State(op, np.dtype(data_dtype), tuple(inner_shape), count, acc, first_row)


def grown(state: State, num_segments: int) -> State:
    """A (NumPy) state over ``num_segments`` >= its own segments; the added ones are empty."""
    bigger = new_state(
        state.op,
        num_segments,
        state.inner_shape,
        state.data_dtype,
        first_row=state.next_row,
        lanes=state.lanes,
    )
    # Copy the segments seen so far; the rest keep the op's initial value (empty).
    bigger.count[: state.num_segments] = state.count
    if state.acc is not None:
        bigger.acc[:, : state.num_segments] = state.acc
    return bigger


def combine(a: State, b: State) -> State:
    """Merge two partial states of the same reduction (rows of ``a`` come before ``b``).

    Lanes merge lane by lane; the result is for finalizing, not for folding more rows into.
    """
    if a.op is not b.op or a.count.shape != b.count.shape:
        raise ValueError("cannot combine states of different reductions")
    acc = None if a.op.ufunc is None else a.op.ufunc(a.acc, b.acc)
    next_row = max(a.next_row, b.next_row)
    return State(a.op, a.data_dtype, a.inner_shape, a.count + b.count, acc, next_row)


def merged_lanes(state: State) -> np.ndarray:
    """The accumulator with its lanes merged in lane order: shape ``(n, inner_size)``."""
    acc: np.ndarray = np.asarray(state.acc)
    merged: np.ndarray = acc[0]
    ufunc = state.op.ufunc
    assert ufunc is not None, "count keeps no accumulator"
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, as a row-order fold gives
        for lane in acc[1:]:
            merged = np.asarray(ufunc(merged, lane))
    return merged


def parse_fill(fill: Any, op: Op, data_dtype: np.dtype[Any]) -> Any:
    """``--fill`` as a scalar of the result dtype, parsed exactly (never through a float for
    integer results); a value the dtype cannot hold is a usage error naming it."""
    out_dtype = op.out_dtype(data_dtype)
    if out_dtype.kind in "iu":
        return _integer_fill(fill, out_dtype, op)
    try:
        value = complex(fill) if out_dtype.kind == "c" else float(fill)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"--fill {fill!r} is not a number") from None
    with np.errstate(over="ignore"):
        stored = out_dtype.type(value)
    if _overflowed(fill, stored):
        raise UsageError(
            f"--fill {fill} cannot be stored in the {out_dtype} result of {op.name} "
            f"(largest magnitude {np.finfo(out_dtype).max})"
        )
    return stored


def _integer_fill(fill: Any, out_dtype: np.dtype[Any], op: Op) -> Any:
    # Decimal holds every integer literal exactly ("9007199254740993", "1e3", "255.0"), where
    # float() would round above 2**53.
    try:
        if isinstance(fill, (int, np.integer)) and not isinstance(fill, bool):
            value = decimal.Decimal(int(fill))
        else:
            value = decimal.Decimal(fill if isinstance(fill, (str, float)) else str(fill))
        integral = value.is_finite() and value == value.to_integral_value()
    except (TypeError, ValueError, ArithmeticError):
        raise UsageError(f"--fill {fill!r} is not a number") from None
    info = np.iinfo(out_dtype)
    if not integral or not info.min <= value <= info.max:
        raise UsageError(
            f"--fill {fill} cannot be stored in the {out_dtype} result of {op.name} "
            f"(integers from {info.min} to {info.max})"
        )
    return out_dtype.type(int(value))


def _overflowed(fill: Any, stored: Any) -> bool:
    """An infinite result from a fill that did not ask for infinity (1e300 in float32)."""
    if "inf" in str(fill).lower():
        return False
    return math.isinf(float(np.real(stored))) or math.isinf(float(np.imag(stored)))


def finalize(state: State, fill: Any = None) -> np.ndarray:
    """Turn a (NumPy) state into the result of shape ``(n,) + inner``.

    ``fill`` replaces the op's default value in empty segments.
    """
    op = state.op
    out_dtype = op.out_dtype(state.data_dtype)
    count = np.asarray(state.count)
    empty = count == 0
    if op.ufunc is None:
        result = count.astype(np.int64, copy=True)
    else:
        acc = merged_lanes(state)
        # Merged lanes are a new array; a single lane is the state's own, never written to.
        owned = state.lanes > 1
        # Casting the float64 accumulator down may overflow to inf, as TF's float32 fold would.
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if op.divides:
                divisor = np.maximum(count, 1).astype(np.float64)
                if op.name == "sqrt_n":
                    divisor = np.sqrt(divisor)
                wide = np.complex128 if acc.dtype.kind == "c" else np.float64
                values = acc.astype(wide, copy=not owned)
                np.divide(values, divisor[:, None], out=values)
                result = values.astype(out_dtype, copy=False)
            else:
                result = acc.astype(out_dtype, copy=not owned)
        result = result.reshape((state.num_segments, *state.inner_shape))
    fill_value = (
        op.empty_value(out_dtype) if fill is None else parse_fill(fill, op, state.data_dtype)
    )
    if empty.any():
        result[empty] = fill_value
    return result


def check_dtype(op: Op, data_dtype: np.dtype[Any], label: str) -> None:
    """Refuse data dtypes the op does not take (bool, object, complex for min/max)."""
    kind = data_dtype.kind
    accepted = "float16/32/64, signed and unsigned integers"
    if op.accepts_complex:
        accepted += ", complex64/128"
    if kind in "iuf" or (kind == "c" and op.accepts_complex):
        if data_dtype.itemsize > (16 if kind == "c" else 8):  # float128, complex256
            raise InvalidInputError(
                f"{label}: {data_dtype} data is not supported by {op.name} (accepted: {accepted})"
            )
        return
    raise InvalidInputError(
        f"{label}: {data_dtype} data is not supported by {op.name} (accepted: {accepted})"
    )
