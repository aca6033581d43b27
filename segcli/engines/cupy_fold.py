"""The CuPy engine's algorithms, written against an array namespace ``xp`` and a kernel table.

Nothing here imports CuPy: the engine passes ``xp=cupy`` and the CUDA kernels of
:mod:`segcli.engines.cupy_kernels`; the CPU tests pass ``xp=numpy`` and NumPy stand-ins for
the kernels, so every step of the orchestration (block plan, which path an op takes, the sort,
the piece levels and the min/max order-keys) runs and is checked on a
machine without a GPU.

How one block of rows folds into the state (:func:`fold_block`):

- ``count``, integer sums, min and max are order-independent, so they fold with integer
  atomics in one pass (``seg_scatter``): the bytes are the same whatever the order of the
  atomics. Floats for min/max go through order-keys (:func:`key_encode`), so NaN propagates
  and the result is exact; where it is zero or NaN, a scatter of row numbers then picks the
  rule's tied value (the later of 0.0 and -0.0, the first NaN), as on the other engines.
- Float sums and products, every product, and float64-accumulated means of 64-bit integers
  depend on the order of the fold. By default each segment folds strictly in row order,
  starting from the state's value: a stable sort groups the block's rows by segment (none is
  needed for ``--sorted`` ids) and one thread per (segment, column) folds them
  (:func:`fold_ordered` with ``piece_rows = 0``); over unsorted ids, float sums and products
  fold each lane (:mod:`segcli.ops`) as a segment of its own. That is the NumPy engine's
  sequence of float64 operations, so the bytes equal the NumPy engine's (NaN payloads aside)
  and do not depend on how the rows were split into blocks (``engines/base.py``'s contract;
  streaming relies on it). It is parallel only across segments, lanes and columns.
- ``tree_reduce`` folds fixed pieces of at most ``piece_rows`` positions in row order, level
  after level, then each segment's partial into the state: parallel within a segment too, and
  deterministic (the tree's shape depends only on the block's ids), but the rounding depends
  on the block plan, so the result can differ from the NumPy engine and from a differently
  blocked run by float rounding.
- ``fast_atomics`` folds float sums with float64 atomics instead: fastest, not deterministic.
- any and all fold each value's non-zero flag with the min/max atomics (all is the min of the
  flags, any the max): exact in any order.
- The joint folds (var, std, argmin, argmax, first, last, logsumexp; see :mod:`segcli.ops`)
  read one intermediate while folding another, so each segment folds in row order whatever
  the options (:func:`fold_joint`): the stable sort groups the rows, one thread per (segment,
  column) walks them with their global row numbers, then the rows are counted. var/std and
  logsumexp keep lanes (:attr:`segcli.ops.Op.joint_lanes`): lane k of segment g is grouped as
  the virtual segment ``k * n + g``, as the ordered float sums do (var/std's lanes count their
  own rows, which their kernel reads; logsumexp's read no count). That is the
  NumPy engine's sequence of operations; only logsumexp's ``exp`` is CUDA's own, which can
  round a term one bit away from NumPy's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from segcli import ops
from segcli.engines.cupy_kernels import JOINT_FOLDS, RAW_TYPES, c_type
from segcli.errors import EngineUnavailableError

#: The fold plan's block: rows of data + ids per block. The plan depends only on the input's
#: shape and dtypes (never on free memory or timing), so a float sum's rounding is the same on
#: every run, for host and device inputs alike.
BLOCK_BYTES = 1 << 30

#: Positions per piece of the deterministic fold's first level (and of every later level).
PIECE_ROWS = 64

#: Rows narrower than this are gathered into segment order before the ordered fold.
_GATHER_ROW_BYTES = 128

_SIGN = np.uint64(1 << 63)
_ALL_ONES = np.uint64((1 << 64) - 1)


@dataclass(frozen=True)
class FoldOptions:
    """How the engine folds order-dependent reductions; see the module docstring."""

    fast_atomics: bool = False
    tree_reduce: bool = False
    piece_rows: int = PIECE_ROWS

    def __post_init__(self) -> None:
        if self.fast_atomics and self.tree_reduce:
            raise ValueError("fast_atomics and tree_reduce exclude each other")
        if self.piece_rows < 2:
            raise ValueError("piece_rows must be at least 2")


class Kernels(Protocol):
    """The three device kernels (see :mod:`segcli.engines.cupy_kernels` for their contracts)."""

    def scatter(
        self, mode: str, ids: Any, vals: Any, slots: Any, count: Any, n: int, width: int
    ) -> None: ...

    def fold_pieces(
        self,
        combine: str,
        acc_kind: str,
        src: Any,
        order: Any,
        starts: Any,
        segs: Any,
        dst: Any,
        width: int,
        from_acc: bool,
    ) -> None: ...

    def joint(
        self,
        fold: str,
        value_type: str,
        src: Any,
        order: Any,
        gathered: bool,
        starts: Any,
        segs: Any,
        count: Any,
        arrays: tuple[Any, ...],
        width: int,
        first_row: int,
    ) -> None: ...


# --- the block plan --------------------------------------------------------------------------


def plan_blocks(rows: int, row_bytes: int, block_bytes: int = BLOCK_BYTES) -> list[tuple[int, int]]:
    """``(start, stop)`` row ranges of at most ``block_bytes`` each (at least one row)."""
    if rows < 0 or block_bytes < 1:
        raise ValueError("rows must be >= 0 and block_bytes >= 1")
    step = max(1, block_bytes // max(1, row_bytes))
    return [(start, min(rows, start + step)) for start in range(0, rows, step)]


# --- which path an op takes ------------------------------------------------------------------


def scatter_mode(op: ops.Op, acc_dtype: np.dtype[Any] | None, fast_atomics: bool) -> str | None:
    """The ``seg_scatter`` mode that folds ``op`` in one atomic pass, or None (ordered path).

    With :data:`_COMBINES`, the engine's primitive table: chosen by the fold kind of the op's
    intermediate, never by the op.
    """
    if op.joint is not None:
        return None
    fold = op.fold
    if fold is None:
        return "count"
    if fold.kind in ("min", "max"):
        return fold.kind
    if fold.kind in ("any", "all"):
        return _LOGICAL_MODES[fold.kind]
    if fold.kind == "sum" and acc_dtype is not None:
        if acc_dtype.kind in "iu":
            return "add_int"  # wraps modulo 2**64: exact in any order
        if fast_atomics:
            return "add_float"
    return None


#: The ordered fold's ``combine`` template argument for each order-dependent fold kind.
_COMBINES = {"sum": "add", "prod": "mul"}
#: any and all are the max and the min of the values' non-zero flags (0 or 1): the min/max
#: scatter folds them exactly, in any order.
_LOGICAL_MODES = {"any": "max", "all": "min"}
#: The fold kinds the kernels fold (scatter modes or the ordered fold).
_KERNEL_KINDS = ("sum", "prod", "min", "max", "any", "all")


def has_kernel(op: ops.Op) -> bool:
    """Whether the kernels fold ``op``: each of its intermediates alone, by a known kind, or
    all of them at once by a joint fold ``seg_joint`` implements."""
    if op.holistic:  # sorted on the CPU by segcli.holistic, never folded
        return False
    if op.joint is not None:
        return op.joint in JOINT_FOLDS
    return all(i.fold.kind in _KERNEL_KINDS for i in op.intermediates)


def refuse_without_kernel(op: ops.Op) -> None:
    """An op whose primitive has no CUDA kernel yet is refused before any row moves, never
    folded wrong."""
    if not has_kernel(op):
        raise EngineUnavailableError(
            f"engine 'cupy' has no kernel for {op.name} yet; use --engine numpy or numba"
        )


def kernel_values(data: Any, xp: Any) -> Any:
    """The block's values as the kernels read them: float16 widened to float32 (exact), complex
    as interleaved (real, imag) pairs of its real type, always C-contiguous."""
    data = xp.ascontiguousarray(data)
    if data.dtype == np.float16:
        return data.astype(np.float32)
    if data.dtype.kind == "c":
        return data.view(np.float32 if data.dtype == np.complex64 else np.float64)
    return data


def logical_flags(data: Any, xp: Any) -> Any:
    """Each value's non-zero flag as uint8 (NaN is non-zero; a complex value is non-zero when
    either part is), what any and all fold."""
    if data.dtype == np.bool_:
        return xp.ascontiguousarray(data).view(np.uint8)
    return xp.ascontiguousarray(data != 0).view(np.uint8)


def raw_values(data: Any, xp: Any) -> tuple[Any, str]:
    """The block's values as raw bits of their item size (first/last copy them, never compute),
    with the kernels' C type for them."""
    itemsize = data.dtype.itemsize
    data = xp.ascontiguousarray(data)
    unit = np.dtype(f"u{min(itemsize, 8)}")
    return data.view(unit), RAW_TYPES[itemsize]


def _as_pairs(acc: Any) -> Any:
    """A complex128 accumulator seen as float64 pairs (a view: writes land in ``acc``)."""
    return acc.view(np.float64) if acc.dtype.kind == "c" else acc


# --- order-keys for min and max --------------------------------------------------------------


def key_encode(values: Any, for_min: bool, xp: Any) -> Any:
    """uint64 keys whose unsigned order is the values' order (the kernels' ``key_of``).

    Floats: IEEE bits with the sign bit flipped for positives and every bit flipped for
    negatives (so -0.0 sorts just below +0.0). NaN becomes 0 for min and 2**64 - 1 for max, so
    it wins either fold. Signed integers: the sign bit flipped. Unsigned: themselves.
    """
    kind = values.dtype.kind
    if kind == "f":
        wide = values.astype(np.float64)
        bits = wide.view(np.uint64)
        negative = (bits & _SIGN) != 0
        keys = xp.where(negative, ~bits, bits | _SIGN)
        nan_key = np.uint64(0) if for_min else _ALL_ONES
        return xp.ascontiguousarray(xp.where(xp.isnan(wide), nan_key, keys))
    if kind == "i":
        return xp.ascontiguousarray(values.astype(np.int64).view(np.uint64) ^ _SIGN)
    if kind == "u":
        return xp.ascontiguousarray(values.astype(np.uint64))
    raise ValueError(f"no order-keys for {values.dtype}")


def key_decode(keys: Any, dtype: np.dtype[Any], xp: Any) -> Any:
    """The values of ``key_encode``'s keys, as ``dtype``; every NaN comes back as the canonical
    quiet NaN (NumPy's ``np.nan``)."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        bits = xp.where((keys & _SIGN) != 0, keys & ~_SIGN, ~keys)
        wide = xp.ascontiguousarray(bits).view(np.float64)
        wide = xp.where(xp.isnan(wide), np.float64(np.nan), wide)
        return wide.astype(dtype)
    if kind == "i":
        return (keys ^ _SIGN).view(np.int64).astype(dtype)
    return keys.astype(dtype)


# --- the ordered (deterministic) path --------------------------------------------------------


def valid_rows(ids: Any, num_segments: int, xp: Any) -> Any:
    """Which rows fold: ``0 <= id < n``, compared by value for every integer dtype."""
    if ids.dtype == np.uint64:
        return ids < np.uint64(num_segments)
    wide = ids.astype(np.int64)
    return (wide >= 0) & (wide < np.int64(num_segments))


def stable_argsort(keys: Any, xp: Any) -> Any:
    # CuPy's argsort is always stable and takes no other kind; NumPy's must be asked.
    if xp is np:
        return np.argsort(keys, kind="stable")
    return xp.argsort(keys)


def sort_rows(ids: Any, num_segments: int, sorted_ids: bool, xp: Any) -> tuple[Any, Any]:
    """``(order, segs)``: position k of the segment-grouped block is row ``order[k]`` (None:
    row k) and belongs to segment ``segs[k]`` (int64, non-decreasing). Dropped rows are gone.

    Sorted ids are validated non-negative and non-decreasing, so the rows to drop (id >= n)
    are a suffix and the rows are already grouped. Unsorted ids are grouped by a stable sort,
    which keeps each segment's rows in row order.
    """
    valid = valid_rows(ids, num_segments, xp)
    if sorted_ids:
        stop = int(xp.count_nonzero(valid))
        return None, ids[:stop].astype(np.int64)
    key_dtype = np.int32 if num_segments < 2**31 - 1 else np.int64
    keys = xp.where(valid, ids.astype(key_dtype), key_dtype(num_segments))
    order = stable_argsort(keys, xp)
    kept = int(xp.count_nonzero(valid))
    order = order[:kept].astype(np.int64)
    return order, keys[order].astype(np.int64)


def piece_starts(segs: Any, piece_rows: int, xp: Any) -> tuple[Any, int]:
    """Start positions of the pieces, and the number of runs (segments present).

    A piece starts where the segment changes and, when ``piece_rows`` is not 0, at every
    multiple of ``piece_rows``: a fixed cut that depends only on the positions.
    """
    heads = xp.ones(segs.shape[0], dtype=bool)
    heads[1:] = segs[1:] != segs[:-1]
    runs = int(xp.count_nonzero(heads))
    if piece_rows:
        heads[::piece_rows] = True
    return xp.flatnonzero(heads).astype(np.int64), runs


def fold_ordered(
    kernels: Kernels,
    xp: Any,
    combine: str,
    acc_kind: str,
    src: Any,
    order: Any,
    segs: Any,
    dst: Any,
    width: int,
    piece_rows: int,
) -> int:
    """Fold grouped positions into ``dst`` (the accumulator) in levels; returns the level count.

    Each level folds pieces of at most ``piece_rows`` positions into partials, in position
    order; the partials of one segment are consecutive again, so the next level is the same
    problem, ``piece_rows`` times shorter. When every piece is a whole segment the level folds
    into ``dst`` from its current value. ``piece_rows = 0``: one level, strict row order.
    The loop ends: a level that does not finish has fewer pieces than positions.
    """
    levels = 0
    while True:
        levels += 1
        starts, runs = piece_starts(segs, piece_rows, xp)
        bounds = xp.concatenate((starts, xp.asarray([segs.shape[0]], dtype=np.int64)))
        if starts.shape[0] == runs:
            kernels.fold_pieces(
                combine, acc_kind, src, order, bounds, segs[starts], dst, width, True
            )
            return levels
        out = xp.empty((starts.shape[0], dst.shape[1]), dtype=dst.dtype)
        kernels.fold_pieces(combine, acc_kind, src, order, bounds, None, out, width, False)
        src, order, segs = out, None, segs[starts]


def fold_block(
    state: ops.State,
    data: Any,
    ids: Any,
    *,
    sorted_ids: bool,
    kernels: Kernels,
    xp: Any,
    options: FoldOptions,
    first_row: int = 0,
) -> None:
    """Fold one block (``data`` 2-D rows x width, ``ids`` 1-D, both resident in ``xp``) whose
    first row is global row ``first_row``."""
    n = state.num_segments
    rows = int(ids.shape[0])
    if rows == 0 or n == 0:
        return
    width = int(data.shape[1])
    if state.op.joint is not None:
        if width:
            fold_joint(
                state, data, ids, sorted_ids=sorted_ids, kernels=kernels, xp=xp, first_row=first_row
            )
        # After the joint fold, which reads the counts before this block.
        kernels.scatter("count", ids, None, None, state.count, n, width)
        return
    mode = scatter_mode(
        state.op, None if state.acc is None else state.acc.dtype, options.fast_atomics
    )
    if mode == "count" or width == 0:
        kernels.scatter("count", ids, None, None, state.count, n, width)
        return
    acc = state.acc[0]  # the atomic paths keep one lane
    if mode is not None and state.op.fold is not None and state.op.fold.kind in _LOGICAL_MODES:
        flags = logical_flags(data, xp)
        keys = xp.ascontiguousarray(acc.astype(np.uint64))
        kernels.scatter(mode, ids, flags, keys, state.count, n, width)
        acc[...] = keys != 0
        return
    vals = kernel_values(data, xp)
    if mode in ("min", "max"):
        keys = key_encode(acc, mode == "min", xp)
        kernels.scatter(mode, ids, vals, keys, state.count, n, width)
        extremes = key_decode(keys, acc.dtype, xp)
        if acc.dtype.kind == "f":
            _pick_ties_by_rule(extremes, acc, vals, ids, kernels, xp)
        acc[...] = extremes
        return
    if mode == "add_int":
        kernels.scatter(mode, ids, vals, acc.view(np.uint64), state.count, n, width)
        return
    if mode == "add_float":
        # Not deterministic anyway: every row goes to lane 0 (lane 1 stays +0.0, which the
        # final merge adds exactly).
        pairs = _as_pairs(acc)
        kernels.scatter(mode, ids, vals, pairs, state.count, n, pairs.shape[1])
        return
    # Order-dependent: count with an atomic pass, fold values in row order.
    kernels.scatter("count", ids, None, None, state.count, n, width)
    lanes = state.lanes
    # Lane k of segment g is row k * n + g of the accumulator seen as (lanes * n, width).
    acc = state.acc.reshape(lanes * n, -1)
    segments = n  # sorted ids fold into lane 0: rows 0..n-1
    if lanes > 1 and not sorted_ids:
        # Grouping by that virtual segment folds each lane's rows in row order.
        lane_of = ops.row_lanes(first_row, rows, lanes, xp)
        virtual = ids.astype(np.int64) + lane_of * n
        segments = lanes * n
        ids = xp.where(valid_rows(ids, n, xp), virtual, np.int64(segments))
    order, segs = sort_rows(ids, segments, sorted_ids, xp)
    if segs.shape[0] == 0:
        return
    if order is not None and vals.shape[1] * vals.dtype.itemsize < _GATHER_ROW_BYTES:
        # Narrow rows: gather them into segment order once (a fully parallel pass), so each
        # thread of the fold then reads a contiguous run instead of one scattered row per step.
        # The values and their order are unchanged, and so is every result bit.
        vals, order = vals[order], None
    fold = state.op.fold
    assert fold is not None
    combine = _COMBINES[fold.kind]
    if acc.dtype.kind in "iu":
        acc_kind, dst, kernel_width = "u64", acc.view(np.uint64), width
    elif acc.dtype.kind == "c" and combine == "mul":
        acc_kind, dst, kernel_width = "c128", _as_pairs(acc), width  # width in complex values
    else:  # float64, or complex sums as independent real and imaginary columns
        acc_kind, dst = "f64", _as_pairs(acc)
        kernel_width = dst.shape[1]
    piece_rows = options.piece_rows if options.tree_reduce else 0
    fold_ordered(kernels, xp, combine, acc_kind, vals, order, segs, dst, kernel_width, piece_rows)


def _pick_ties_by_rule(
    extremes: Any, acc: Any, vals: Any, ids: Any, kernels: Kernels, xp: Any
) -> None:
    """Give float min/max ``extremes`` (``acc`` and this block folded by order-keys) the bits
    every engine's rule picks among tied values (``ops.Fold.merge_values``): of 0.0 and -0.0
    the later row's, of NaNs the first one's.

    The keys order -0.0 below 0.0 and give every NaN one key, whatever the rows' order. Only
    where a result is zero or NaN does the block take one more scatter, of row numbers: the
    last row holding a zero, or the first holding a NaN, of each such element.
    """
    n, width = extremes.shape
    for tied, tie_of, last in (
        (extremes == 0, vals == 0, True),
        (xp.isnan(extremes), xp.isnan(vals), False),
    ):
        if not bool(tied.any()):
            continue
        if not last:  # a NaN already in the state came from an earlier row: it stays
            earlier = xp.isnan(acc)
            extremes[earlier] = acc[earlier]
            tied = tied & ~earlier
        # A zero in the state is earlier than the block's: kept (exact through the keys) where
        # the block holds no zero there.
        none = np.int64(-1 if last else np.iinfo(np.int64).max)
        rows = xp.arange(vals.shape[0], dtype=np.int64)[:, None]
        marks = xp.ascontiguousarray(xp.where(tie_of, rows, none))
        keys = key_encode(xp.full((n, width), none, np.int64), not last, xp)
        scratch_count = xp.zeros(n, np.int64)
        kernels.scatter("max" if last else "min", ids, marks, keys, scratch_count, n, width)
        picked = key_decode(keys, np.dtype(np.int64), xp)
        segs, columns = xp.nonzero(tied & (picked != none))
        extremes[segs, columns] = vals[picked[segs, columns], columns].astype(extremes.dtype)


# --- the joint folds -------------------------------------------------------------------------


def fold_joint(
    state: ops.State,
    data: Any,
    ids: Any,
    *,
    sorted_ids: bool,
    kernels: Kernels,
    xp: Any,
    first_row: int,
) -> None:
    """A joint fold (:attr:`ops.Op.joint`) of one block, without the count (the caller counts
    after it: ``moments`` reads the counts before the block).

    Every op's row order decides here (a shift is the segment's first value, argmin's tie goes
    to the first row, a scaled sum rounds in row order), so each segment's rows fold in row
    order, one thread per (segment, column), after the stable sort that groups them: the
    NumPy engine's steps, whatever the options (tree_reduce and fast_atomics change only
    float sums and products).
    """
    fold = state.op.joint
    assert fold is not None
    n, width = state.num_segments, int(data.shape[1])
    lanes = 1 if sorted_ids else state.lanes
    segments = n
    if lanes > 1:
        # Lane k of segment g is the virtual segment k * n + g, as in fold_block's ordered
        # path: grouping by it folds each lane's rows in row order.
        lane_of = ops.row_lanes(first_row, int(ids.shape[0]), lanes, xp)
        segments = lanes * n
        ids = xp.where(valid_rows(ids, n, xp), ids.astype(np.int64) + lane_of * n, segments)
    order, segs = sort_rows(ids, segments, sorted_ids, xp)
    if segs.shape[0] == 0:
        return
    if fold in ("first", "last"):
        vals, value_type = raw_values(data, xp)  # one position per segment: no gather
    else:
        vals = kernel_values(data, xp)
        value_type = c_type(vals.dtype)
    gathered = order is not None and fold not in ("first", "last")
    gathered = gathered and vals.shape[1] * vals.dtype.itemsize < _GATHER_ROW_BYTES
    if gathered:
        vals = vals[order]  # as in fold_block: narrow rows read contiguously, same bits
    starts, _ = piece_starts(segs, 0, xp)
    bounds = xp.concatenate((starts, xp.asarray([segs.shape[0]], dtype=np.int64)))
    names = [i.name for i in state.op.intermediates if i.name != _LANE_COUNT]
    # Every lane as (lanes * n, width) rows, contiguous; sorted ids fold into lane 0's rows.
    arrays = [_lanes_as_rows(state.arrays[name], width) for name in names]
    kernel_arrays = [
        _joint_view(name, array, vals) for name, array in zip(names, arrays, strict=True)
    ]
    # Read by moments only (seg_joint's other folds never index it with a virtual segment).
    counted = state.count
    if _LANE_COUNT in state.arrays:
        # Each lane's own rows before this block: a lane with none takes its first value as
        # the shift. Columns are counted alike (--skipna folds one column at a time).
        counted = xp.ascontiguousarray(state.arrays[_LANE_COUNT].reshape(-1, width)[:, 0])
    kernels.joint(
        fold,
        value_type,
        vals,
        order,
        gathered,
        bounds,
        segs[starts],
        counted,
        (*kernel_arrays, kernel_arrays[-1])[:3],  # two-intermediate folds leave a2 unread
        width,
        first_row,
    )
    if _LANE_COUNT in state.arrays:
        added = xp.zeros_like(counted)
        kernels.scatter("count", ids, None, None, added, segments, width)
        lane_counts = _lanes_as_rows(state.arrays[_LANE_COUNT], width)
        lane_counts[: added.shape[0]] += added[:, None]
    for name, array, seen in zip(names, arrays, kernel_arrays, strict=True):
        if _widened(name, array, vals):
            array[...] = seen.astype(array.dtype)  # float16's best, back from float32: exact


def _lanes_as_rows(array: Any, width: int) -> Any:
    """An intermediate ``(lanes, n, width)`` as ``(lanes * n, width)`` rows, a view the
    kernels write in place (a reshaped copy would lose the writes)."""
    if not array.flags.c_contiguous:
        raise ValueError("an intermediate is not contiguous")
    return array.reshape(-1, width)


#: var/std's rows per lane, which the kernel reads (as ``count``) but folds in no pass of its
#: own: an atomic count after it.
_LANE_COUNT = "shifted_count"


def _joint_view(name: str, array: Any, vals: Any) -> Any:
    """An intermediate as the kernel reads it: first/last's value as raw bits (a view, written
    in place), argmin/argmax's in the kernel's value type (a float32 copy of float16), the
    others as they are."""
    if name == "picked":
        return array.view(vals.dtype)
    if _widened(name, array, vals):
        return array.astype(vals.dtype)
    return array


def _widened(name: str, array: Any, vals: Any) -> bool:
    """argmin/argmax's best value of float16 data, which the kernel holds as float32."""
    return name in ("arg_min", "arg_max") and array.dtype != vals.dtype
