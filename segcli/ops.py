"""The table of segment reductions: each op is data, and engines look it up.

Each op is described as mergeable partial state, in the style of flox's ``Aggregation`` (chunk /
combine / finalize): a reduction keeps a per-segment row ``count`` and its *intermediates*,
named arrays of shape ``(lanes, n, inner_size)`` (``sum`` for sum, mean and sqrt_n; ``prod``;
``min``; ``max``; none for ``count``). Each intermediate names a primitive :class:`Fold` (its
``kind``), which is what an engine implements: the NumPy engine maps a kind to a ufunc, the
numba engine to a compiled kernel constant, the CuPy engine to a kernel template. No engine
knows an op's name. Any two states of the same op merge with :func:`combine` (each intermediate
with its fold's ``merge``), and the op's ``finalize`` turns the merged intermediates into the
result (mean is ``sum / count``, sqrt_n ``sum / sqrt(count)``). The in-memory path, streaming
chunks, GPU batches and Dask partitions therefore share each op's definition. A :class:`State`
holds the arrays and is the one way to move them between array libraries, grow them (more
segments, when n is inferred) and trim them.

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

How to add an op (say a mergeable ``var``):

1. its name and one-line help in :mod:`segcli.op_names`;
2. one :class:`Op` entry in :data:`OPS`: the intermediates it keeps beside the ``count``
   every state keeps (for ``var``: ``sum`` of shifted values and ``m2``), each with a fold
   kind and an accumulator dtype rule; its ``finalize`` (``m2 / (count - ddof)``); its empty
   value; its output dtype rule; the data kinds it accepts;
3. for a fold kind no op used before (``m2``): a :class:`Fold` in :data:`FOLDS`, and the kind
   in each engine's one primitive table (``numpy_engine._UFUNCS``,
   ``numba_engine._KERNEL_KINDS``, ``cupy_fold.scatter_mode`` and ``_COMBINES``), or that
   engine's fallback to the NumPy engine;
4. its reference implementation in ``tests/reference.py``; the engine, spec and GPU tests take
   every op of the table by themselves.

An op whose intermediates are all folds the engines know needs step 2 and 4 only: engines fold
an op's intermediates one at a time (:meth:`State.per_intermediate`, through
``Engine.fold``), each by its kind (``tests/test_op_table.py`` adds a ``range`` op that way).
A fold that reads another intermediate as it goes is the one new primitive each engine needs:
a *joint* fold (:attr:`Op.joint`), whose intermediates (:data:`JOINT_FOLDS`) the engine folds
together, in row order in one lane, and :attr:`Op.merge` merges. A joint op may opt in to
lanes (:attr:`Op.joint_lanes`): its rows are then dealt to the lanes as the float sums' are,
each lane folded in row order, and :func:`finalize` merges the lanes in lane order with the
op's merge. var and std do: per lane, sums of values shifted by the segment's first value in
that lane, and the values counted there, merged by Chan's rule (a lane with no rows merges as
the identity). logsumexp does too: per lane, a sum scaled by a power of two, merged by
moving both sums to the larger scale (an empty lane, at the lowest scale with a zero sum,
merges exactly). argmin, argmax, first and last keep a value and its global row number, so
the row order, not the arrival order, decides a merge (one lane). The NumPy engine
implements every joint fold (``numpy_engine._JOINT_FOLDS``); the numba engine compiles each
(logsumexp's around NumPy's own ``exp``, so the bytes match); the CuPy engine
(``cupy_fold.has_kernel``) has a kernel for each and refuses an op it has none for.

median, quantile and nunique are *holistic* (:attr:`Op.holistic`): no partial state of theirs
merges, so they keep no intermediates and no engine folds them. The drivers route them to
:mod:`segcli.holistic` (one segmented sort in memory, segment by segment over sorted streams,
through partition files for larger unsorted inputs; see :mod:`segcli.holistic_runs`), folding
only the row counts (and, in ``agg``, the other ops) with the engine.
``--skipna`` needs nothing per op: :func:`skipna_op` derives from any op (a combined ``agg``
op too) one that keeps :data:`PRESENT`, the present values per element, and finalizes with
them as the count; :mod:`segcli.engines.skipping` folds it with each fold's identity in place
of a missing value, or, for joint folds, with the missing rows dropped by id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import decimal
import fractions
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from segcli.errors import DtypeRefusedError, UsageError
from segcli.op_names import DDOF_OPS, OP_SUMMARIES

# --- primitive folds -------------------------------------------------------------------------


def _sum_identity(acc_dtype: np.dtype[Any]) -> Any:
    return 0


def _prod_identity(acc_dtype: np.dtype[Any]) -> Any:
    return 1


def _min_identity(acc_dtype: np.dtype[Any]) -> Any:
    return np.inf if acc_dtype.kind == "f" else np.iinfo(acc_dtype).max


def _max_identity(acc_dtype: np.dtype[Any]) -> Any:
    return -np.inf if acc_dtype.kind == "f" else np.iinfo(acc_dtype).min


def _no_row(acc_dtype: np.dtype[Any]) -> Any:
    return -1


def _after_every_row(acc_dtype: np.dtype[Any]) -> Any:
    return np.iinfo(np.int64).max


#: logsumexp's scale before any finite value: far below every value's exponent (|x| < 2**59
#: gives exponents within +-2**60), and far from int64's end, so differences never wrap.
LOWEST_SCALE = -(1 << 62)


def _lowest_scale(acc_dtype: np.dtype[Any]) -> Any:
    return LOWEST_SCALE


@dataclass(frozen=True)
class Fold:
    """A primitive fold: the unit an engine implements, looked up by :attr:`kind`."""

    kind: str
    #: Merges two partial accumulators of this kind (lanes in lane order, partitions in row
    #: order), and folds one value into an accumulator.
    merge: np.ufunc
    #: The accumulator's starting value for a dtype: the identity of the fold.
    identity: Callable[[np.dtype[Any]], Any]
    #: Whether float results depend on the order of the fold (sums and products round):
    #: such folds keep lanes over unsorted ids and fold each lane in row order.
    rounds: bool

    def order_matters(self, acc_dtype: np.dtype[Any]) -> bool:
        """Whether folding in another order could change the bits for ``acc_dtype``."""
        return self.rounds and acc_dtype.kind in "fc"

    def merge_values(self, a: Any, b: Any) -> Any:
        """``merge(a, b)`` of two partial accumulators, ``b`` the later one.

        min and max break ties by NumPy's float32 rule, as every engine's fold does (see
        ``numba_kernels.combine``): the earlier NaN wins, and of 0.0 and -0.0 the later one.
        NumPy's float16 loops keep the earlier zero, so float16 merges in float32 (exact both
        ways, NaN payloads included).
        """
        if self.kind in ("min", "max") and a.dtype == np.float16:
            return self.merge(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
        if self.kind == "prod" and a.dtype.kind == "c":
            # A complex product times the identity of a lane (or partition) without rows is
            # not exact: (nan+infj) * (1+0j) is nan+nanj. Such a side leaves the other as is.
            xp = array_namespace(a)
            product = self.merge(a, b)
            return xp.where(_is_identity_one(b), a, xp.where(_is_identity_one(a), b, product))
        return self.merge(a, b)


def _is_identity_one(z: Any) -> Any:
    """Where a complex product is still ``1+0j``, the identity its fold starts from."""
    xp = array_namespace(z)
    return (z.real == 1) & (z.imag == 0) & ~xp.signbit(z.imag)


FOLDS: dict[str, Fold] = {
    fold.kind: fold
    for fold in (
        Fold("sum", np.add, _sum_identity, rounds=True),
        Fold("prod", np.multiply, _prod_identity, rounds=True),
        Fold("min", np.minimum, _min_identity, rounds=False),
        Fold("max", np.maximum, _max_identity, rounds=False),
    )
}

#: The intermediates of joint folds (see :attr:`Op.joint`): an engine folds them together,
#: in row order in one lane (in lanes for an op with :attr:`Op.joint_lanes`), whether they
#: round or not, and :attr:`Op.merge` merges them; their ``merge`` ufunc is used by no one.
JOINT_FOLDS: dict[str, Fold] = {
    fold.kind: fold
    for fold in (
        # var/std: per lane, the segment's first value there (its shift), the sums of the
        # shifted values and the values counted (which Chan's merge weighs the shifts by).
        Fold("shift", np.add, _sum_identity, rounds=False),
        Fold("shifted_sum", np.add, _sum_identity, rounds=True),
        Fold("shifted_squares", np.add, _sum_identity, rounds=True),
        Fold("shifted_count", np.add, _sum_identity, rounds=False),
        # argmin/argmax: the extreme so far and the first row holding it (-1: none yet).
        Fold("arg_min", np.minimum, _min_identity, rounds=False),
        Fold("arg_max", np.maximum, _max_identity, rounds=False),
        Fold("arg_row", np.maximum, _no_row, rounds=False),
        # first/last: the value picked and its row.
        Fold("picked", np.add, _sum_identity, rounds=False),
        Fold("first_row", np.minimum, _after_every_row, rounds=False),
        Fold("last_row", np.maximum, _no_row, rounds=False),
        # logsumexp: the max of the values left out of the sum (NaN, +-inf, huge), and
        # sum(exp(x)) as sum * 2**scale, the scale the largest of the values' scale_of so far.
        Fold("lse_max", np.maximum, _max_identity, rounds=False),
        Fold("lse_scale", np.maximum, _lowest_scale, rounds=False),
        Fold("lse_sum", np.add, _sum_identity, rounds=True),
    )
}

#: Logical folds: any and all, in bool accumulators (NaN is non-zero, so True).
FOLDS.update(
    {
        "any": Fold("any", np.logical_or, lambda dtype: False, rounds=False),
        "all": Fold("all", np.logical_and, lambda dtype: True, rounds=False),
    }
)


# --- dtype rules -----------------------------------------------------------------------------


def _own_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """min and max: exact in the data's own type."""
    return np.dtype(data_dtype)


def _wrapping_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """Sums and products: 64-bit integers (wrapping like TF's), float64, complex128."""
    kind = data_dtype.kind
    if kind == "c":
        return np.dtype(np.complex128)
    if kind == "f":
        return np.dtype(np.float64)
    return np.dtype(np.int64 if kind == "i" else np.uint64)


def _exact_sum_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """Sums divided later: docs/semantics.md says mean of 64-bit integers uses the sum without
    wraparound."""
    if data_dtype.kind in "iu" and data_dtype.itemsize == 8:
        return np.dtype(np.float64)
    return _wrapping_dtype(data_dtype)


def _data_out_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(data_dtype)


def _mean_out_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The table of docs/semantics.md: floats keep their dtype; narrow integers give float32, wide
    float64."""
    if data_dtype.kind in "fc":
        return np.dtype(data_dtype)
    return np.dtype(np.float32 if data_dtype.itemsize <= 2 else np.float64)


def _count_out_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.int64)


def _bool_dtype(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.bool_)


def _int64(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.int64)


# --- empty values (docs/semantics.md: finite extremes for min and max) ----------------------------


def _zero(out_dtype: np.dtype[Any]) -> Any:
    return 0


def _one(out_dtype: np.dtype[Any]) -> Any:
    return 1


def _largest(out_dtype: np.dtype[Any]) -> Any:
    return np.finfo(out_dtype).max if out_dtype.kind == "f" else np.iinfo(out_dtype).max


def _lowest(out_dtype: np.dtype[Any]) -> Any:
    return np.finfo(out_dtype).min if out_dtype.kind == "f" else np.iinfo(out_dtype).min


def _false(out_dtype: np.dtype[Any]) -> Any:
    return False


def _true(out_dtype: np.dtype[Any]) -> Any:
    return True


def _minus_one(out_dtype: np.dtype[Any]) -> Any:
    return -1


def _minus_inf(out_dtype: np.dtype[Any]) -> Any:
    return -np.inf


# --- finalize functions ----------------------------------------------------------------------

#: ``finalize(parts, out_dtype, owned)``: ``parts`` maps ``count`` (shape ``(n,)``) and each
#: intermediate (merged lanes, ``(n, inner_size)``) to NumPy arrays; ``owned`` says the
#: intermediates are new arrays the function may write to. Returns ``(n, inner_size)`` values,
#: or ``(n,)`` for a per-row result (count).
Finalize = Callable[[Mapping[str, np.ndarray], np.dtype[Any], bool], np.ndarray]


def _count_rows(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
    return parts["count"].astype(np.int64, copy=True)


def _per_element(count: np.ndarray) -> np.ndarray:
    """A count against ``(n, inner_size)`` values: per row ``(n,)``, or per element under
    ``--skipna`` (``(n, inner_size)`` already)."""
    return count[:, None] if count.ndim == 1 else count


def _cast(name: str) -> Finalize:
    """The intermediate itself, cast to the output dtype."""

    def finalize(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
        # Casting the float64 accumulator down may overflow to inf, as TF's float32 fold would.
        return parts[name].astype(out_dtype, copy=not owned)

    return finalize


def quiet_nans(result: np.ndarray) -> np.ndarray:
    """``result`` with every NaN of a float or complex array written as NumPy's ``nan`` (a new
    array where one is NaN: ``result`` may be a state's own).

    Which NaN an addition of two NaNs returns (each may carry other payload bits and sign) is
    the hardware's and the compiler's choice: x86 keeps the first operand's, and a compiler
    may swap the operands of a commutative add, as numba's packed sum does to fold its load
    into the instruction; inf - inf gives the hardware's default NaN, and a GPU returns its
    own. The engines promise the same bytes, so the arithmetic ops say NaN in one way. The
    ops that pick a value (min, max, first, last) keep the data's own bits.
    """
    if result.dtype.kind not in "fc":
        return result
    floats = np.ascontiguousarray(result)
    if floats.dtype.kind == "c":  # the real and imaginary parts, side by side
        floats = floats.view(floats.real.dtype)
    nan = np.isnan(floats)
    if not nan.any():
        return result
    quieted = np.where(nan, floats.dtype.type(np.nan), floats)
    return quieted.view(result.dtype).reshape(result.shape)


def _quiet_nans(finalize: Finalize) -> Finalize:
    """``finalize``, its NaNs said as :func:`quiet_nans` says them."""

    def quiet(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
        return quiet_nans(finalize(parts, out_dtype, owned))

    return quiet


def _divided(name: str, divisor_of_count: Callable[[np.ndarray], np.ndarray]) -> Finalize:
    """The intermediate divided (a true division, in float64 or complex128) by a function of
    the count; an empty segment divides by 1 and gets its fill afterwards."""

    def finalize(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
        divisor = divisor_of_count(np.maximum(parts["count"], 1).astype(np.float64))
        acc = parts[name]
        wide = np.complex128 if acc.dtype.kind == "c" else np.float64
        values = acc.astype(wide, copy=not owned)
        np.divide(values, _per_element(divisor), out=values)
        return values.astype(out_dtype, copy=False)

    return finalize


def _as_is(count: np.ndarray) -> np.ndarray:
    return count


def _variance(ddof: int, root: bool) -> Finalize:
    """var (std with ``root``) from the sums of values shifted by the segment's first value:
    ``m2 = sum(d^2) - sum(d)^2 / count``, exact enough where a plain sum of squares cancels."""

    def finalize(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
        count = _per_element(parts["count"].astype(np.float64))
        shifted, squares = parts["shifted_sum"], parts["shifted_squares"]
        with np.errstate(over="ignore", invalid="ignore"):
            m2 = squares - shifted * (shifted / np.maximum(count, 1))
        m2 = np.maximum(m2, 0.0)  # rounding may leave -tiny; NaN stays NaN
        # Every engine adds ``x - x`` to a value's square term, so an inf or NaN value leaves
        # the sum of squares NaN (NumPy: var([1, inf]) is NaN). A +inf sum of squares is
        # then finite values whose deviations overflow (1e154 apart and more, or 1e308 ones
        # of both signs, whose shifted sum overflows too): +inf, as NumPy's var gives, not
        # the inf - inf of the formula.
        m2[np.isposinf(squares)] = np.inf
        var = np.where(count > ddof, m2 / np.maximum(count - ddof, 1), np.nan)
        # Of two NaN terms a sum keeps either one's sign bit, as the compiler orders the
        # operands (NumPy's add.at and a compiled loop differ): one NaN for every engine.
        var[np.isnan(var)] = np.nan
        return (np.sqrt(var) if root else var).astype(out_dtype)

    return finalize


def _logsumexp(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
    """``log(sum) + scale * ln 2``. ``lse_max`` holds the values the sum leaves out: NaN, +inf
    or a value of 2**59 or more among them (where adding log(count) <= 44 cannot change a
    float64) is the answer itself, and so is their max where the sum took no value."""
    top, sums = parts["lse_max"], parts["lse_sum"]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        values = np.log(sums) + parts["lse_scale"] * math.log(2)
        left_out = np.isnan(top) | (top >= LARGEST_SCALED) | ~(sums > 0)
    values = np.where(left_out, top, values)
    return values.astype(out_dtype)


#: Values from here on skip logsumexp's scaled sum (see :func:`_logsumexp`).
LARGEST_SCALED = float(1 << 59)

#: Values of magnitude below this join logsumexp's sum as ``exp(x)`` itself, at scale 0 (see
#: :func:`scale_of`): ``exp(x)`` is then a normal float64 (``exp(-640) > 2**-924``), and 2**63
#: terms below ``exp(640) < 2**924`` cannot overflow a float64 sum.
PLAIN_EXP = 640.0


def scale_of(x: Any, xp: Any = np) -> Any:
    """Each scaled value's exponent ``e``, its term being ``exp(x - e * ln 2) * 2**e``: 0 for
    ``|x| < PLAIN_EXP`` (the term is ``exp(x)``, one ``exp``), else ``rint(x / ln 2)``, so that
    the term's ``exp`` cannot overflow or underflow. ``e`` never decreases with ``x`` and is
    decided by ``x`` alone, never by the block it comes in."""
    return xp.where(xp.abs(x) < PLAIN_EXP, 0.0, xp.rint(x / math.log(2)))


def _merge_logsumexp(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Both sums moved to the larger scale (by powers of two: exact), then added."""
    xp = array_namespace(a["count"])
    scale = xp.maximum(a["lse_scale"], b["lse_scale"])
    return {
        "count": a["count"] + b["count"],
        "lse_max": xp.maximum(a["lse_max"], b["lse_max"]),
        "lse_scale": scale,
        "lse_sum": rescaled(a["lse_sum"], a["lse_scale"] - scale, xp)
        + rescaled(b["lse_sum"], b["lse_scale"] - scale, xp),
    }


def rescaled(sums: Any, shift: Any, xp: Any = np) -> Any:
    """``sums * 2**shift`` for shifts <= 0 (exact, down to the subnormals)."""
    return xp.ldexp(sums, xp.maximum(shift, -2000).astype(np.int32))


def _merge_arg(extreme: str, better: Callable[[Any, Any], Any]) -> Callable[..., dict[str, Any]]:
    """argmin/argmax: ``b``'s value and row where it is strictly better (NaN beats a number),
    or where ``a`` holds none; ties keep ``a``'s row, the earlier."""

    def merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        xp = array_namespace(a["count"])
        va, vb = a[extreme], b[extreme]
        with np.errstate(invalid="ignore"):
            wins = better(vb, va)
            if va.dtype.kind in "fc":
                wins = wins | (xp.isnan(vb) & ~xp.isnan(va))
        take_b = (a["arg_row"] < 0) | ((b["arg_row"] >= 0) & wins)
        return {
            "count": a["count"] + b["count"],
            extreme: xp.where(take_b, vb, va),
            "arg_row": xp.where(take_b, b["arg_row"], a["arg_row"]),
        }

    return merge


def _merge_pick(row: str, later_wins: bool) -> Callable[..., dict[str, Any]]:
    """first/last: the value of the smaller (larger) row."""

    def merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        xp = array_namespace(a["count"])
        take_b = b[row] > a[row] if later_wins else b[row] < a[row]
        return {
            "count": a["count"] + b["count"],
            "picked": xp.where(take_b, b["picked"], a["picked"]),
            row: xp.where(take_b, b[row], a[row]),
        }

    return merge


def _merge_moments(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Chan's merge of shifted sums: ``b``'s sums move to ``a``'s shift (its first row is the
    segment's first); an element that ``a`` has not seen takes ``b``'s as they are, and one
    that ``b`` has not seen (an empty lane: its shift unset) keeps ``a``'s exactly.

    Each side's own ``shifted_count`` weighs it (lanes share the state's row count)."""
    xp = array_namespace(a["count"])
    seen_a = a["shifted_count"] > 0
    seen_b = b["shifted_count"] > 0
    n_b = b["shifted_count"].astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        delta = xp.where(seen_a & seen_b, b["shift"] - a["shift"], 0.0)
        moved_sum = b["shifted_sum"] + n_b * delta
        moved_squares = b["shifted_squares"] + 2.0 * delta * b["shifted_sum"] + n_b * delta * delta
        squares = xp.where(seen_a, a["shifted_squares"] + moved_squares, b["shifted_squares"])
    # A NaN sum of squares means an inf or NaN value (see _variance). Two sides of finite
    # values only can still make one where the shifts are 1e154 apart or more (delta's
    # square overflows, and inf - inf or inf * 0 follows): their variance overflows, +inf.
    overflowed = xp.isnan(squares) & ~xp.isnan(a["shifted_squares"])
    overflowed &= ~xp.isnan(b["shifted_squares"])
    return {
        "count": a["count"] + b["count"],
        "shift": xp.where(seen_a, a["shift"], b["shift"]),
        "shifted_sum": xp.where(seen_a, a["shifted_sum"] + moved_sum, b["shifted_sum"]),
        "shifted_squares": xp.where(overflowed, xp.inf, squares),
        "shifted_count": a["shifted_count"] + b["shifted_count"],
    }


# --- the op table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Intermediate:
    """One named array of an op's state, folded by a primitive."""

    name: str
    fold: Fold
    #: The accumulator dtype for data of a given dtype.
    acc_dtype: Callable[[np.dtype[Any]], np.dtype[Any]]
    #: Kept in lanes over unsorted ids whatever its fold: a joint op's with
    #: :attr:`Op.joint_lanes`, once it sits in another op's state (``agg``'s combined op).
    dealt: bool = False


#: Data dtype kinds: real numbers, complex too, and bool too (any, all, count).
REAL, ANY_NUMBER, WITH_BOOL = "iuf", "iufc", "biufc"


@dataclass(frozen=True)
class Op:
    """One reduction: what it keeps, how it finishes, what it fills, which dtypes it takes."""

    name: str
    #: What the state keeps beside ``count`` (which every state keeps).
    intermediates: tuple[Intermediate, ...]
    finalize: Finalize = field(repr=False)
    #: An empty segment's value, for the output dtype.
    empty: Callable[[np.dtype[Any]], Any] = field(repr=False)
    #: The output dtype for a data dtype.
    output_dtype: Callable[[np.dtype[Any]], np.dtype[Any]] = field(repr=False)
    #: The data dtype kinds accepted (min and max order values, so refuse complex).
    data_kinds: str = ANY_NUMBER
    #: A joint fold: the name of the engine primitive that folds every intermediate at once
    #: (each reads the others as it goes); None: each intermediate folds alone, by its kind.
    joint: str | None = None
    #: How two states of a joint op merge (rows of the first come first): ``merge(a, b)``
    #: maps ``count`` and each intermediate of each state to the merged arrays.
    merge: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]] | None = field(
        default=None, repr=False
    )
    #: A joint op whose fold keeps :data:`LANES` lanes over unsorted ids, like float sums
    #: (rows dealt by global row number, each lane in row order; its intermediates of
    #: :data:`JOINT_FOLDS` get the lanes), merged in lane order by :attr:`merge` at the end.
    #: False: one lane, every row in row order.
    joint_lanes: bool = False
    #: ``--ddof`` of var and std (None: an op that takes none).
    ddof: int | None = None
    #: A holistic op (median, quantile, nunique): it needs a segment's values together, so no
    #: engine folds it; the drivers sort with :mod:`segcli.holistic` instead.
    holistic: bool = False
    #: Under ``--skipna``: the op whose missing values this one leaves out (see
    #: :func:`skipna_op`); None for the ops of the table.
    skipna_of: Op | None = field(default=None, repr=False)

    @property
    def summary(self) -> str:
        return OP_SUMMARIES[self.name]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Ops are compared by identity; an op sent to another process must come back as the
        # table's own entry (or the same ddof variant), not a copy.
        if self.skipna_of is not None:
            return (skipna_op, (self.skipna_of,))
        if self.ddof is not None and self.ddof != 0:
            return (with_ddof, (self.name, self.ddof))
        return (get_op, (self.name,))

    @property
    def fold(self) -> Fold | None:
        """The fold of the op's one intermediate (what the engines' tuned paths take), or
        None for an op that keeps only the count."""
        if not self.intermediates:
            return None
        (only,) = self.intermediates
        return only.fold

    @property
    def accepts_complex(self) -> bool:
        return "c" in self.data_kinds

    def acc_dtype(self, data_dtype: np.dtype[Any]) -> np.dtype[Any] | None:
        """The dtype of the op's one intermediate for data of ``data_dtype`` (None: count)."""
        if not self.intermediates:
            return None
        (only,) = self.intermediates
        return only.acc_dtype(np.dtype(data_dtype))

    def out_dtype(self, data_dtype: np.dtype[Any]) -> np.dtype[Any]:
        """The result dtype, as the table of docs/semantics.md gives it."""
        return self.output_dtype(np.dtype(data_dtype))

    def empty_value(self, out_dtype: np.dtype[Any]) -> Any:
        """What an empty segment holds by default."""
        return self.empty(out_dtype)


def _keeps(name: str, dtype_rule: Callable[[np.dtype[Any]], np.dtype[Any]]) -> Intermediate:
    """An intermediate named after the primitive fold that builds it."""
    return Intermediate(name, FOLDS.get(name) or JOINT_FOLDS[name], dtype_rule)


def _float64(data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(np.float64)


_MOMENTS = (
    _keeps("shift", _float64),
    _keeps("shifted_sum", _float64),
    _keeps("shifted_squares", _float64),
    _keeps("shifted_count", _int64),
)


def _arg_op(
    name: str,
    extreme: str,
    dtype_rule: Callable[[np.dtype[Any]], np.dtype[Any]],
    better: Callable[[Any, Any], Any],
) -> Op:
    return Op(
        name,
        (_keeps(extreme, dtype_rule), _keeps("arg_row", _int64)),
        finalize=_cast("arg_row"),
        empty=_minus_one,
        output_dtype=_int64,
        data_kinds=REAL,
        joint=name,
        merge=_merge_arg(extreme, better),
    )


def _pick_op(name: str, row: str) -> Op:
    return Op(
        name,
        (_keeps("picked", _own_dtype), _keeps(row, _int64)),
        finalize=_cast("picked"),
        empty=_zero,
        output_dtype=_data_out_dtype,
        joint=name,
        merge=_merge_pick(row, later_wins=name == "last"),
    )


def _moments_op(name: str, ddof: int) -> Op:
    return Op(
        name,
        _MOMENTS,
        finalize=_quiet_nans(_variance(ddof, root=name == "std")),
        empty=_zero,
        output_dtype=_mean_out_dtype,
        data_kinds=REAL,
        joint="moments",
        merge=_merge_moments,
        joint_lanes=True,
        ddof=ddof,
    )


def _not_folded(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
    raise TypeError("a holistic op is sorted by segcli.holistic, never folded by an engine")


def _holistic_op(name: str, dtype_rule: Callable[[np.dtype[Any]], np.dtype[Any]], kinds: str) -> Op:
    """median, quantile or nunique: an entry without intermediates, which engines never see."""
    return Op(
        name,
        (),
        finalize=_not_folded,
        empty=_zero,
        output_dtype=dtype_rule,
        data_kinds=kinds,
        holistic=True,
    )


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op(
            "sum",
            (_keeps("sum", _wrapping_dtype),),
            finalize=_quiet_nans(_cast("sum")),
            empty=_zero,
            output_dtype=_data_out_dtype,
        ),
        Op(
            "mean",
            (_keeps("sum", _exact_sum_dtype),),
            finalize=_quiet_nans(_divided("sum", _as_is)),
            empty=_zero,
            output_dtype=_mean_out_dtype,
        ),
        Op(
            "min",
            (_keeps("min", _own_dtype),),
            finalize=_cast("min"),
            empty=_largest,
            output_dtype=_data_out_dtype,
            data_kinds=REAL,
        ),
        Op(
            "max",
            (_keeps("max", _own_dtype),),
            finalize=_cast("max"),
            empty=_lowest,
            output_dtype=_data_out_dtype,
            data_kinds=REAL,
        ),
        Op(
            "prod",
            (_keeps("prod", _wrapping_dtype),),
            finalize=_quiet_nans(_cast("prod")),
            empty=_one,
            output_dtype=_data_out_dtype,
        ),
        Op(
            "sqrt_n",
            (_keeps("sum", _exact_sum_dtype),),
            finalize=_quiet_nans(_divided("sum", np.sqrt)),
            empty=_zero,
            output_dtype=_mean_out_dtype,
        ),
        Op(
            "count",
            (),
            finalize=_count_rows,
            empty=_zero,
            output_dtype=_count_out_dtype,
            data_kinds=WITH_BOOL,
        ),
        _moments_op("var", 0),
        _moments_op("std", 0),
        _arg_op("argmin", "arg_min", _own_dtype, np.less),
        _arg_op("argmax", "arg_max", _own_dtype, np.greater),
        _pick_op("first", "first_row"),
        _pick_op("last", "last_row"),
        Op(
            "any",
            (_keeps("any", _bool_dtype),),
            finalize=_cast("any"),
            empty=_false,
            output_dtype=_bool_dtype,
            data_kinds=WITH_BOOL,
        ),
        Op(
            "all",
            (_keeps("all", _bool_dtype),),
            finalize=_cast("all"),
            empty=_true,
            output_dtype=_bool_dtype,
            data_kinds=WITH_BOOL,
        ),
        Op(
            "logsumexp",
            (
                _keeps("lse_max", _float64),
                _keeps("lse_scale", _int64),
                _keeps("lse_sum", _float64),
            ),
            finalize=_quiet_nans(_logsumexp),
            empty=_minus_inf,
            output_dtype=_mean_out_dtype,
            data_kinds=REAL,
            joint="logsumexp",
            merge=_merge_logsumexp,
            joint_lanes=True,
        ),
        _holistic_op("median", _mean_out_dtype, REAL),
        _holistic_op("quantile", _mean_out_dtype, REAL),
        _holistic_op("nunique", _int64, WITH_BOOL),
    )
}

_DDOF_VARIANTS: dict[tuple[str, int], Op] = {}


def with_ddof(name: str | Op, ddof: int) -> Op:
    """var or std with ``--ddof ddof``: the table's entry for 0, else one op per ddof (the same
    object each time, since ops are compared by identity)."""
    op = get_op(name)
    if op.name not in DDOF_OPS:
        raise UsageError(f"--ddof applies to {' and '.join(DDOF_OPS)} only, not {op.name}")
    if isinstance(ddof, bool) or not isinstance(ddof, (int, np.integer)) or ddof < 0:
        raise UsageError(f"--ddof {ddof!r} is not a non-negative integer")
    if ddof == 0:
        return OPS[op.name]
    key = (op.name, int(ddof))
    if key not in _DDOF_VARIANTS:
        _DDOF_VARIANTS[key] = _moments_op(op.name, int(ddof))
    return _DDOF_VARIANTS[key]


# --- --skipna: missing values left out, element by element ---------------------------------

#: What a ``--skipna`` state keeps beside its op's intermediates: the present (non-NaN,
#: non-null) values of each segment element. Counts are exact in any order: one lane.
PRESENT = Intermediate("present", FOLDS["sum"], _int64)

_SKIPNA_VARIANTS: dict[int, tuple[Op, Op]] = {}


def skipna_op(name: str | Op) -> Op:
    """The op that leaves missing values out (the same object each time: ops are compared by
    identity). It keeps :data:`PRESENT` beside the op's own intermediates and finalizes with
    the present values as the count, element by element: mean divides by them, count is
    them, and an element with none is empty. How the engines fold it is
    :mod:`segcli.engines.skipping`."""
    op = get_op(name)
    if op.skipna_of is not None:
        return op
    known = _SKIPNA_VARIANTS.get(id(op))
    if known is not None and known[0] is op:
        return known[1]
    variant = dataclasses.replace(
        op,
        intermediates=(*op.intermediates, PRESENT),
        finalize=_finalize_present(op.finalize),
        merge=None if op.merge is None else _merge_present(op.merge),
        skipna_of=op,
    )
    _SKIPNA_VARIANTS[id(op)] = (op, variant)
    return variant


def _finalize_present(finalize: Finalize) -> Finalize:
    """The op's finalize with the present values as its count (the rows stay as ``rows``)."""

    def with_present(parts: Mapping[str, np.ndarray], out_dtype: np.dtype[Any], owned: bool) -> Any:
        own = {**parts, "count": parts["present"], "rows": parts["count"]}
        return finalize(own, out_dtype, owned)

    return with_present


def _merge_present(
    merge: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]],
) -> Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]:
    """A joint op's merge, seeing the present values (one lane) as its count."""

    def with_present(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        merged = merge({**a, "count": a["present"][0]}, {**b, "count": b["present"][0]})
        merged["count"] = a["count"] + b["count"]
        merged["present"] = a["present"] + b["present"]
        return merged

    return with_present


def skipped_values(state: State) -> int:
    """Values a ``--skipna`` state left out among the rows it counted (0 for other ops)."""
    if state.op.skipna_of is None:
        return 0
    present = np.asarray(state.arrays["present"])
    return int(np.asarray(state.count).sum()) * inner_size(state.inner_shape) - int(present.sum())


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


def fold_lanes(
    fold: Fold | None, acc_dtype: np.dtype[Any] | None, *, sorted_ids: bool, joint: bool = False
) -> int:
    """How many lanes an intermediate keeps: :data:`LANES` where the order of its fold
    matters over unsorted ids; one otherwise, and always one in a joint fold (row order)."""
    if not sorted_ids and not joint and acc_dtype is not None and fold is not None:
        return LANES if fold.order_matters(acc_dtype) else 1
    return 1


def intermediate_lanes(
    op: Op, intermediate: Intermediate, acc_dtype: np.dtype[Any], *, sorted_ids: bool
) -> int:
    """How many lanes ``op`` keeps of ``intermediate``: a joint op's own intermediates keep
    :data:`LANES` over unsorted ids where it opts in (:attr:`Op.joint_lanes`), else one;
    the others as :func:`fold_lanes` says."""
    if sorted_ids:
        return 1
    if intermediate.dealt or (op.joint_lanes and intermediate.fold.kind in JOINT_FOLDS):
        return LANES
    return fold_lanes(intermediate.fold, acc_dtype, sorted_ids=False, joint=op.joint is not None)


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


def array_namespace(array: Any) -> Any:
    """The array library an array belongs to (NumPy, or CuPy for a device array)."""
    if isinstance(array, np.ndarray):
        return np
    return importlib.import_module(type(array).__module__.partition(".")[0])


def _host_array(array: Any) -> np.ndarray:
    return array if isinstance(array, np.ndarray) else array.get()


@dataclass
class State:
    """Partial state of one reduction over some rows; engines fold rows into it in place.

    ``arrays`` holds ``count``, shape ``(n,)``, and each of the op's intermediates by name,
    shape ``(lanes, n, inner_size)`` (see :func:`fold_lanes`). ``next_row`` is the global row
    number of the next row to fold, which decides its lane. The arrays may belong to another
    array library (CuPy) while an engine works; :meth:`to_host` brings them back, and
    :func:`finalize` takes a host state. Its methods are the one way to move
    (:meth:`transferred`, :meth:`to_host`), grow (:meth:`grown`) and trim (:meth:`trimmed`)
    a state; each returns a new state and leaves this one as it is.
    """

    op: Op
    data_dtype: np.dtype[Any]
    inner_shape: tuple[int, ...]
    arrays: dict[str, Any]
    next_row: int = 0

    @property
    def count(self) -> Any:
        return self.arrays["count"]

    @count.setter
    def count(self, value: Any) -> None:
        self.arrays["count"] = value

    @property
    def acc(self) -> Any:
        """The op's one intermediate (what the engines' tuned folds take), or None."""
        if not self.op.intermediates:
            return None
        (only,) = self.op.intermediates
        return self.arrays[only.name]

    @property
    def lanes(self) -> int:
        """Lanes of the op's intermediates (the most any keeps; 1 for count alone)."""
        return max((int(self.arrays[i.name].shape[0]) for i in self.op.intermediates), default=1)

    @property
    def num_segments(self) -> int:
        return int(self.count.shape[0])

    @property
    def xp(self) -> Any:
        """The array library the state's arrays belong to."""
        return array_namespace(self.count)

    def _with_arrays(self, arrays: dict[str, Any]) -> State:
        return State(self.op, self.data_dtype, self.inner_shape, arrays, self.next_row)

    def transferred(self, convert: Callable[[Any], Any]) -> State:
        """The state with every array passed through ``convert`` (``cupy.asarray``, say)."""
        return self._with_arrays({name: convert(array) for name, array in self.arrays.items()})

    def to_host(self) -> State:
        """The state with NumPy arrays (itself when they are already)."""
        if all(isinstance(array, np.ndarray) for array in self.arrays.values()):
            return self
        return self.transferred(_host_array)

    def grown(self, num_segments: int) -> State:
        """The state over ``num_segments`` segments, in its own array library; the added ones
        are empty (each intermediate's identity), so growing loses nothing. Itself when it
        already has that many."""
        if num_segments <= self.num_segments:
            return self
        xp, seen = self.xp, self.num_segments
        arrays = {"count": xp.zeros(num_segments, dtype=np.int64)}
        arrays["count"][:seen] = self.count
        for intermediate in self.op.intermediates:
            old = self.arrays[intermediate.name]
            lanes, _, width = old.shape
            identity = intermediate.fold.identity(old.dtype)
            # The segments seen so far are copied; the rest keep the identity (empty).
            arrays[intermediate.name] = xp.full((lanes, num_segments, width), identity, old.dtype)
            arrays[intermediate.name][:, :seen] = old
        return self._with_arrays(arrays)

    def per_intermediate(self) -> list[State]:
        """One state per intermediate, each an op of that intermediate alone, sharing this
        state's arrays: what an engine's tuned folds take. The first shares the count; the
        others count into scratch arrays, so that the rows are counted once."""
        views = []
        for k, intermediate in enumerate(self.op.intermediates):
            count = self.count if k == 0 else self.xp.zeros_like(self.count)
            alone = dataclasses.replace(self.op, intermediates=(intermediate,))
            arrays = {"count": count, intermediate.name: self.arrays[intermediate.name]}
            views.append(State(alone, self.data_dtype, self.inner_shape, arrays, self.next_row))
        return views

    def trimmed(self, num_segments: int) -> State:
        """The state over its first ``num_segments`` segments (views, not copies)."""
        arrays = {"count": self.count[:num_segments]}
        for intermediate in self.op.intermediates:
            arrays[intermediate.name] = self.arrays[intermediate.name][:, :num_segments]
        return self._with_arrays(arrays)


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
    for intermediate in op.intermediates:
        acc_dtype = intermediate.acc_dtype(np.dtype(data_dtype))
        lanes = intermediate_lanes(op, intermediate, acc_dtype, sorted_ids=sorted_ids)
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
    global row ``first_row``. ``lanes`` overrides :func:`fold_lanes` for every intermediate."""
    arrays = {"count": xp.zeros(num_segments, dtype=np.int64)}
    for intermediate in op.intermediates:
        acc_dtype = intermediate.acc_dtype(np.dtype(data_dtype))
        if lanes is None:
            kept = intermediate_lanes(op, intermediate, acc_dtype, sorted_ids=sorted_ids)
        else:
            kept = lanes
        shape = (kept, num_segments, inner_size(inner_shape))
        arrays[intermediate.name] = xp.full(shape, intermediate.fold.identity(acc_dtype), acc_dtype)
    return State(op, np.dtype(data_dtype), tuple(inner_shape), arrays, first_row)


def combine(a: State, b: State) -> State:
    """Merge two partial states of the same reduction (rows of ``a`` come before ``b``).

    Lanes merge lane by lane; the result is for finalizing, not for folding more rows into.
    """
    if a.op is not b.op or a.count.shape != b.count.shape:
        raise ValueError("cannot combine states of different reductions")
    if a.op.merge is not None:
        return State(
            a.op,
            a.data_dtype,
            a.inner_shape,
            a.op.merge(a.arrays, b.arrays),
            max(a.next_row, b.next_row),
        )
    arrays = {"count": a.count + b.count}
    for intermediate in a.op.intermediates:
        name = intermediate.name
        arrays[name] = intermediate.fold.merge_values(a.arrays[name], b.arrays[name])
    next_row = max(a.next_row, b.next_row)
    return State(a.op, a.data_dtype, a.inner_shape, arrays, next_row)


def merged_lanes(state: State, intermediate: Intermediate | None = None) -> np.ndarray:
    """An intermediate (default: the op's one) with its lanes merged in lane order: shape
    ``(n, inner_size)``."""
    if intermediate is None:
        assert state.op.intermediates, "count keeps no accumulator"
        (intermediate,) = state.op.intermediates
    acc: np.ndarray = np.asarray(state.arrays[intermediate.name])
    merged: np.ndarray = acc[0]
    merge = intermediate.fold.merge_values
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, as a row-order fold gives
        for lane in acc[1:]:
            merged = np.asarray(merge(merged, lane))
    return merged


def parse_fill(
    fill: Any, op: Op, data_dtype: np.dtype[Any], out_dtype: np.dtype[Any] | None = None
) -> Any:
    """``--fill`` as a scalar of the result dtype (``out_dtype``, where the op's own result
    type is not the run's: a weighted sparse mean is float), parsed exactly (never through a
    float for integer results); a value the dtype cannot hold is a usage error naming it."""
    out_dtype = op.out_dtype(data_dtype) if out_dtype is None else out_dtype
    if out_dtype.kind == "b":
        return _bool_fill(fill, op)
    if out_dtype.kind in "iu":
        return _integer_fill(fill, out_dtype, op)
    if isinstance(fill, (bool, np.bool_)):
        # float(True) is 1.0, but a bool fills bool results only: refused here as the integer
        # results refuse it, and as the command line refuses `--fill true` for a number.
        raise UsageError(f"--fill {fill!r} is not a number")
    try:
        value = complex(fill) if out_dtype.kind == "c" else float(fill)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"--fill {fill!r} is not a number") from None
    with np.errstate(over="ignore"):
        stored = out_dtype.type(value)
    if isinstance(value, float) and isinstance(fill, str):
        stored = _rounded_once(fill, value, stored)
    if _overflowed(fill, stored):
        raise UsageError(
            f"--fill {fill} cannot be stored in the {out_dtype} result of {op.name} "
            f"(largest magnitude {np.finfo(out_dtype).max})"
        )
    if _underflowed(fill, value, stored):
        raise UsageError(
            f"--fill {fill} cannot be stored in the {out_dtype} result of {op.name}: it would "
            f"be 0 (smallest magnitude {np.finfo(out_dtype).smallest_subnormal!s})"
        )
    return stored


_BOOL_FILLS = {"true": True, "1": True, "false": False, "0": False}


def _bool_fill(fill: Any, op: Op) -> Any:
    """bool results take true/false/1/0 (any case), or a Python bool."""
    if isinstance(fill, (bool, np.bool_)):
        return np.bool_(fill)
    value = _BOOL_FILLS.get(str(fill).strip().lower())
    if value is None:
        raise UsageError(
            f"--fill {fill} cannot be stored in the bool result of {op.name} (true, false, 1 or 0)"
        )
    return np.bool_(value)


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


def _rounded_once(text: str, value: float, stored: Any) -> Any:
    """``text`` rounded once to ``stored``'s dtype, not twice (to float64, then to it).

    Rounding to float64 first goes wrong only where it lands exactly halfway between two
    values of the narrower dtype (ties to even may then pick the far one):
    "1.0000000596046448" for float32 is above the tie 1 + 2**-24, so 1 + 2**-23, not 1."""
    if not math.isfinite(value) or float(stored) == value:
        return stored
    kind = type(stored)
    with np.errstate(over="ignore"):  # the neighbour of the largest finite value is inf
        if float(stored) > value:
            low, high = np.nextafter(stored, kind(-np.inf)), stored
        else:
            low, high = stored, np.nextafter(stored, kind(np.inf))
    # Beyond the largest finite value, the tie with inf is half the last spacing beyond it.
    if math.isinf(float(high)):
        halfway = float(low) + (float(low) - float(np.nextafter(low, kind(0)))) / 2
    elif math.isinf(float(low)):
        halfway = float(high) - (float(np.nextafter(high, kind(0))) - float(high)) / 2
    else:
        halfway = (float(low) + float(high)) / 2
    if value != halfway:
        return stored
    try:
        exact = fractions.Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return stored
    if exact == fractions.Fraction(value):
        return stored  # a true tie: ties to even, as the cast did
    return high if exact > fractions.Fraction(value) else low


def _underflowed(fill: Any, value: float | complex, stored: Any) -> bool:
    """A zero result (or part) from a fill that is not zero (1e-50 in float32; 1e-400, which
    a Python float already holds as 0)."""
    asked: list[float | decimal.Decimal] = (
        [value.real, value.imag] if isinstance(value, complex) else [value]
    )
    if isinstance(fill, str) and not isinstance(value, complex):
        with contextlib.suppress(ArithmeticError, ValueError):
            asked = [decimal.Decimal(fill.strip())]
    got = [np.real(stored), np.imag(stored)] if isinstance(value, complex) else [stored]
    return any(want != 0 and part == 0 for want, part in zip(asked, got, strict=True))


def _overflowed(fill: Any, stored: Any) -> bool:
    """An infinite result from a fill that did not ask for infinity (1e300 in float32)."""
    if "inf" in str(fill).lower():
        return False
    return math.isinf(float(np.real(stored))) or math.isinf(float(np.imag(stored)))


def finalize(state: State, fill: Any = None) -> np.ndarray:
    """Turn a (NumPy) state into the result of shape ``(n,) + inner`` with the op's
    ``finalize``.

    ``fill`` replaces the op's default value in empty segments.
    """
    op = state.op
    out_dtype = op.out_dtype(state.data_dtype)
    count = np.asarray(state.count)
    empty = count == 0
    parts: dict[str, np.ndarray] = {"count": count}
    parts.update(_merged_intermediates(state))
    if op.skipna_of is not None:  # an element with no present value is empty
        empty = (parts["present"] == 0).reshape((state.num_segments, *state.inner_shape))
    # Merged lanes are new arrays; a single lane is the state's own, never written to.
    owned = all(state.arrays[i.name].shape[0] > 1 for i in op.intermediates)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        result = op.finalize(parts, out_dtype, owned)
    if result.ndim == 2:
        result = result.reshape((state.num_segments, *state.inner_shape))
    fill_value = (
        op.empty_value(out_dtype) if fill is None else parse_fill(fill, op, state.data_dtype)
    )
    if empty.any():
        fill_empty(result, empty, fill_value)
    return result


def _merged_intermediates(state: State) -> dict[str, np.ndarray]:
    """Each intermediate with its lanes merged in lane order, ``(n, inner_size)``: by its
    fold's merge, or, where a joint op keeps lanes (:attr:`Op.joint_lanes`), by the op's own
    merge, lane after lane (an intermediate of one lane meets its identity there)."""
    op = state.op
    laned = op.joint_lanes or any(i.dealt for i in op.intermediates)
    if op.merge is None or not laned or state.lanes == 1:
        return {i.name: merged_lanes(state, i) for i in op.intermediates}
    merged = _lane_arrays(state, 0)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, as a row-order fold gives
        for lane in range(1, state.lanes):
            merged = op.merge(merged, _lane_arrays(state, lane))
    return {i.name: np.asarray(merged[i.name])[0] for i in op.intermediates}


def _lane_arrays(state: State, lane: int) -> dict[str, Any]:
    """Lane ``lane`` of a host state as the arrays of a state of its own (one lane each); the
    rows are all counted in lane 0's."""
    count = np.asarray(state.count)
    arrays: dict[str, Any] = {"count": count if lane == 0 else np.zeros_like(count)}
    for intermediate in state.op.intermediates:
        array = np.asarray(state.arrays[intermediate.name])
        if array.shape[0] > 1 or lane == 0:
            arrays[intermediate.name] = array[lane : lane + 1]
        else:
            identity = intermediate.fold.identity(array.dtype)
            arrays[intermediate.name] = np.full_like(array, identity)
    return arrays


def fill_empty(result: np.ndarray, empty: np.ndarray, fill_value: Any) -> None:
    """``result[empty] = fill_value``; for several ops' fields (``agg``) under ``--skipna``,
    whose mask is per element, field by field (a per-row field keeps its own)."""
    if result.dtype.names is None or empty.ndim == 1:
        result[empty] = fill_value
        return
    for name in result.dtype.names:
        column = result[name]
        if column.shape == empty.shape and column.size:
            column[empty] = np.asarray(fill_value[name]).reshape(-1)[0]


def check_data_dtype(op: Op, data_dtype: np.dtype[Any], label: str) -> None:
    """Refuse data dtypes the op does not take (bool, object, complex for min/max)."""
    kind = data_dtype.kind
    accepted = "float16/32/64, signed and unsigned integers"
    if op.accepts_complex:
        accepted += ", complex64/128"
    if "b" in op.data_kinds:
        accepted += ", bool"
    if kind in op.data_kinds:
        if data_dtype.itemsize > (16 if kind == "c" else 8):  # float128, complex256
            raise DtypeRefusedError(
                f"{label}: {data_dtype} data is not supported by {op.name} (accepted: {accepted})",
                op.name,
            )
        return
    raise DtypeRefusedError(
        f"{label}: {data_dtype} data is not supported by {op.name} (accepted: {accepted})",
        op.name,
    )
