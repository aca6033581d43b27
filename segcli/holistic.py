"""Holistic segment reductions: median, quantile and nunique (the project's contract for the ops
beyond TensorFlow's seven).

These ops need all of a segment's values at once, so they cannot fold block by block like the
mergeable ops. Every segment of every inner column is a *group* (``group = id * inner + col``);
one sort orders the values of all groups at once, and the answers are picked from each group's
sorted run with vectorised index arithmetic, never a Python loop over segments.

The sort packs ``(group, value)`` into one unsigned 64-bit key when both fit (a float32 value
and up to 2**32 groups do), so a single ``np.sort`` of integers does the work and values are
decoded only where they are picked. 64-bit values that do not fit are first squeezed (less the
smallest key, without the low bits all keys share); if still too wide, median and quantile sort
by (group, the keys' high bits) and settle ties among the few elements tied with each pick,
while nunique, which needs exact equality, ranks the keys (one ``argsort``). Only when not even
the ranks fit does ``np.lexsort`` run.

Results are NumPy's: ``np.median``, ``np.quantile(values, q)`` with a Python float ``q`` and the
default linear method, and ``len(np.unique(values))`` (NaN once, -0.0 equal to 0.0), each
replayed with the same arithmetic in the same dtypes, so the bytes match. One deliberate
difference: NumPy's quantile subtracts integer neighbours in the data's own dtype, which wraps
(int8 ``[-128, 127]`` at 0.5 gives 127.5); here the difference is exact, as in the median.
A NaN result is always the canonical quiet NaN, whatever the payload of the NaN in the data.

:class:`SortedHolisticReducer` runs the same code over a stream whose ids never decrease,
segment by segment, and gives the same bytes as :func:`reduce_holistic`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from segcli.errors import InvalidInputError, UsageError

HOLISTIC_OPS: tuple[str, ...] = ("median", "quantile", "nunique")

#: Width of the packed (group, value) sort key; tests lower it to exercise the fallbacks.
_PACK_BITS = 64

_REAL = "float16/32/64, signed and unsigned integers"


def holistic_out_dtype(op: str, data_dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The result dtype: nunique int64; median and quantile "as mean"."""
    if op == "nunique":
        return np.dtype(np.int64)
    if data_dtype.kind == "f":
        return data_dtype
    return np.dtype(np.float32 if data_dtype.itemsize <= 2 else np.float64)


def check_holistic(
    op: str, data_dtype: np.dtype[Any], q: float | None = None, *, label: str = "data"
) -> float | None:
    """Refuse an unknown op, a dtype the op does not take, and a missing or bad ``--q``.

    Returns ``q`` as a Python float (quantile) or None (the other ops).
    """
    if op not in HOLISTIC_OPS:
        raise UsageError(f"{op!r} is not a holistic op (one of {', '.join(HOLISTIC_OPS)})")
    _check_dtype(op, data_dtype, label)
    if op != "quantile":
        if q is not None:
            raise UsageError(f"--q is only used by quantile, not by {op}")
        return None
    if q is None:
        raise UsageError("quantile needs --q (a number from 0 to 1)")
    try:
        value = float(q)
    except (TypeError, ValueError):
        raise UsageError(f"--q {q!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # also refuses NaN
        raise UsageError(f"--q {q} is outside [0, 1]")
    return value


def _check_dtype(op: str, data_dtype: np.dtype[Any], label: str) -> None:
    kind, size = data_dtype.kind, data_dtype.itemsize
    real = (kind == "f" and size <= 8) or kind in "iu"
    if op == "nunique":
        if real or kind == "b" or (kind == "c" and size <= 16):
            return
        accepted = _REAL + ", complex64/128, bool"
    elif real:
        return
    else:
        accepted = _REAL
    raise InvalidInputError(
        f"{label}: {data_dtype} data is not supported by {op} (accepted: {accepted})"
    )


def reduce_holistic(
    op: str,
    values: np.ndarray,
    ids: np.ndarray,
    num_segments: int,
    *,
    q: float | None = None,
    skipna: bool = False,
    fill: Any = None,
) -> np.ndarray:
    """``op`` of each segment, column by column.

    ``values`` is ``(rows, inner_size)``, a masked array where integer or bool values are
    null; ``ids`` holds one id in ``[0, num_segments)`` per row (validated, dropped rows
    removed). Returns ``(num_segments, inner_size)`` in :func:`holistic_out_dtype`; a segment
    with no (present, under ``skipna``: neither NaN nor masked) value gets ``fill``, a value of
    that dtype, or 0.
    """
    values, missing = _unmasked(values)
    ids = np.asarray(ids)
    quantile = check_holistic(op, values.dtype, q)
    if values.ndim != 2 or ids.ndim != 1 or len(ids) != len(values):
        raise InvalidInputError(
            f"holistic {op}: values must be (rows, inner) and ids (rows,), "
            f"got {values.shape} and {ids.shape}"
        )
    return _reduce(
        op, values, _checked_ids(ids, num_segments), num_segments, quantile, skipna, fill, missing
    )


def _unmasked(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The values' data, and where they are null (a masked array's mask) or None."""
    if np.ma.isMaskedArray(values) and np.ma.getmask(values) is not np.ma.nomask:
        return np.asarray(np.ma.getdata(values)), np.ma.getmaskarray(values)
    return np.asarray(np.ma.getdata(values)), None


def _check_num_segments(num_segments: int) -> None:
    if num_segments < 0:
        raise InvalidInputError(f"num_segments = {num_segments} is negative")


def _checked_ids(ids: np.ndarray, num_segments: int, first_row: int = 0) -> np.ndarray:
    """ids as int64, after a check that costs two passes: an id out of range would otherwise
    land silently in another segment's packed keys."""
    _check_num_segments(num_segments)
    if ids.dtype.kind not in "iu":
        raise InvalidInputError(f"segment_ids: {ids.dtype} ids are not integers")
    if len(ids) and (ids.min() < 0 or ids.max() >= num_segments):
        bad = np.flatnonzero((ids < 0) | (ids >= num_segments))
        raise InvalidInputError(
            f"segment_ids[{first_row + int(bad[0])}] = {ids[bad[0]]} is out of range "
            f"[0, {num_segments}) ({len(bad)} ids out of range)"
        )
    return ids.astype(np.int64, copy=False)


def _reduce(
    op: str,
    values: np.ndarray,
    ids: np.ndarray,
    num_segments: int,
    q: float | None,
    skipna: bool,
    fill: Any,
    missing: np.ndarray | None = None,
) -> np.ndarray:
    width = values.shape[1]
    out_dtype = holistic_out_dtype(op, values.dtype)
    num_groups = num_segments * width
    out = np.full(num_groups, 0 if fill is None else fill, dtype=out_dtype)
    flat, groups = _elements(values, ids, width)
    if skipna and (flat.dtype.kind in "fc" or missing is not None):
        # Element by element: a null inside an integer or bool list is masked, a float's NaN.
        present = ~np.isnan(flat) if flat.dtype.kind in "fc" else np.ones(flat.size, bool)
        if missing is not None:
            present &= ~missing.reshape(-1)
        if not present.all():
            flat, groups = flat[present], groups[present]
    if flat.size:
        keys, key_bits = _order_keys(flat, equality=op == "nunique")
        runs = _sort_within_groups(keys, key_bits, groups, num_groups, exact=op == "nunique")
        filled = np.flatnonzero(runs.counts)
        if op == "nunique":
            out[filled] = _distinct(runs, filled)
        else:
            # NaN sorts last: a group holding one ends on it (unless skipna removed them).
            nan_last = flat.dtype.kind == "f" and bool(np.isnan(flat).any())
            out[filled] = _pick(runs, filled, flat.dtype, q, nan_last).astype(out_dtype)
    return out.reshape(num_segments, width)


def _elements(values: np.ndarray, ids: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Every value as one element with its group, in row-major order."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if width == 1:
        return flat, ids
    groups = ids[:, None] * width + np.arange(width, dtype=np.int64)
    return flat, groups.reshape(-1)


# --- order-preserving integer keys -----------------------------------------------------------


def _order_keys(flat: np.ndarray, *, equality: bool) -> tuple[np.ndarray, int]:
    """Unsigned keys whose order is the values' order, and how many bits they use.

    NaN becomes one canonical NaN that sorts last (as NumPy's sort puts it). With ``equality``
    -0.0 becomes 0.0 too, so equal keys mean equal values (complex: both parts).
    """
    kind = flat.dtype.kind
    if kind == "b":
        return flat.view(np.uint8), 8
    if kind == "u":
        return flat, flat.dtype.itemsize * 8
    if kind == "i":
        unsigned = flat.view(f"u{flat.dtype.itemsize}")
        return unsigned ^ _sign_bit(unsigned.dtype), flat.dtype.itemsize * 8
    if kind == "f":
        return _float_keys(flat, zero=equality), flat.dtype.itemsize * 8
    return _complex_keys(flat)


def _sign_bit(unsigned: np.dtype[Any]) -> Any:
    return unsigned.type(1 << (unsigned.itemsize * 8 - 1))


def _float_keys(flat: np.ndarray, *, zero: bool) -> np.ndarray:
    if zero:
        flat = flat + flat.dtype.type(0)  # -0.0 + 0.0 is 0.0; every other value is kept
    size = flat.dtype.itemsize
    unsigned, signed = np.dtype(f"u{size}"), np.dtype(f"i{size}")
    bits = np.ascontiguousarray(flat).view(signed)
    # Negative floats reverse their order as integers: flip all their bits; set the sign of the
    # others, so that every negative sorts below every positive. In place: each new array of
    # this size costs as much in page faults as a pass over it.
    flip = bits >> (size * 8 - 1)
    flip |= signed.type(np.iinfo(signed).min)
    flip ^= bits
    keys: np.ndarray = flip.view(unsigned)
    nan = np.isnan(flat)
    if nan.any():
        keys[nan] = np.array(np.nan, flat.dtype).view(unsigned) | _sign_bit(unsigned)
    return keys


def _float_values(keys: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """The inverse of :func:`_float_keys` (a NaN comes back as the canonical NaN)."""
    unsigned = np.dtype(f"u{dtype.itemsize}")
    keys = keys.astype(unsigned)
    sign = _sign_bit(unsigned)
    bits = np.where(keys & sign, keys ^ sign, ~keys)
    return bits.view(dtype)


def _complex_keys(flat: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ranks of (real, imag) pairs, NaN in either part being one value (NumPy's unique)."""
    nan = np.isnan(flat)
    real, imag = flat.real.copy(), flat.imag.copy()
    real[nan] = np.nan
    imag[nan] = np.nan
    real_keys, imag_keys = _float_keys(real, zero=True), _float_keys(imag, zero=True)
    order = np.lexsort((imag_keys, real_keys))
    real_keys, imag_keys = real_keys[order], imag_keys[order]
    new = np.empty(len(order), dtype=bool)
    new[0] = True
    new[1:] = (real_keys[1:] != real_keys[:-1]) | (imag_keys[1:] != imag_keys[:-1])
    ranks = np.empty(len(order), dtype=np.uint64)
    ranks[order] = np.cumsum(new) - 1
    return ranks, int(ranks.max()).bit_length()


# --- the segmented sort ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Runs:
    """Each group's keys, ascending, groups one after another in group order."""

    codes: np.ndarray  # uint64: the keys in the bits under ``mask``, or indices into ``table``
    counts: np.ndarray  # elements per group
    mask: int = (1 << 64) - 1
    table: np.ndarray | None = None
    # Squeezed keys: key = (code << shift) + low.
    low: int = 0
    shift: int = 0

    @property
    def starts(self) -> np.ndarray:
        return np.asarray(np.cumsum(self.counts) - self.counts)

    def keys_at(self, positions: np.ndarray) -> np.ndarray:
        """The keys at ``positions``, at most one position per group."""
        codes = self._codes_at(positions)
        if self.table is not None:
            return np.asarray(self.table[codes])
        return np.asarray((codes << np.uint64(self.shift)) + np.uint64(self.low))

    def _codes_at(self, positions: np.ndarray) -> np.ndarray:
        return np.asarray(self.codes[positions] & np.uint64(self.mask))


@dataclass(frozen=True)
class _TruncatedRuns(_Runs):
    """Runs sorted by (group, the keys' high bits) alone, the ``dropped`` low bits making no
    room for the group: a picked key's low bits are found again among the few elements tied
    with it (same group, same high bits), sorted by their low bits."""

    truncated: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    keys: np.ndarray = field(default_factory=lambda: np.empty(0, np.uint64))
    groups: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    dropped: int = 0

    def _codes_at(self, positions: np.ndarray) -> np.ndarray:
        kept = self.mask.bit_length()
        picked = self.codes[positions]
        group = picked >> np.uint64(kept)
        rank = positions - np.searchsorted(self.codes, picked)  # its place among its ties
        # One target per group; the others get one their elements never have (the next
        # group's first code; for the last group that may wrap to 0, which it never has).
        target = np.arange(1, len(self.counts) + 1, dtype=np.uint64) << np.uint64(kept)
        target[group] = picked
        tied = np.flatnonzero(self.truncated == target[self.groups])
        low_mask = np.uint64((1 << self.dropped) - 1)
        by_low = self.groups[tied].view(np.uint64) << np.uint64(self.dropped)
        by_low |= self.keys[tied] & low_mask
        by_low.sort()
        first = np.searchsorted(by_low, group << np.uint64(self.dropped))
        low = by_low[first + rank] & low_mask
        return np.asarray(((picked & np.uint64(self.mask)) << np.uint64(self.dropped)) | low)


def _sort_within_groups(
    keys: np.ndarray, key_bits: int, groups: np.ndarray, num_groups: int, *, exact: bool = True
) -> _Runs:
    """Sort ``keys`` by (group, key). ``groups`` is int64 in ``[0, num_groups)``.

    Without ``exact`` the runs need only give the keys at picked positions (median, quantile),
    not codes that compare equal exactly when keys do (nunique).
    """
    group_bits = (num_groups - 1).bit_length()
    if group_bits == 0:
        return _Runs(np.sort(keys.astype(np.uint64)), np.array([len(keys)]))
    if key_bits + group_bits <= _PACK_BITS:
        # The group stays in the high bits, so codes compare equal only within one group.
        packed = groups.view(np.uint64) << np.uint64(key_bits)
        packed |= keys
        packed.sort()
        counts = _group_sizes(packed, key_bits, groups, num_groups)
        return _Runs(packed, counts, (1 << key_bits) - 1)
    squeezed, squeezed_bits, low, shift = _squeeze(keys)
    if squeezed_bits + group_bits <= _PACK_BITS:
        runs = _sort_within_groups(squeezed, squeezed_bits, groups, num_groups)
        return _Runs(runs.codes, runs.counts, runs.mask, low=low, shift=shift)
    kept = _PACK_BITS - group_bits
    if not exact and squeezed_bits <= 2 * kept:
        runs = _truncated_runs(squeezed, squeezed_bits - kept, groups, num_groups)
        return replace(runs, low=low, shift=shift)
    table, ranks = _dense_ranks(keys)
    rank_bits = (len(table) - 1).bit_length()
    if rank_bits + group_bits <= _PACK_BITS:
        ranked = _sort_within_groups(ranks.astype(np.uint64), rank_bits, groups, num_groups)
        return _Runs(ranked.codes, ranked.counts, ranked.mask, table)
    order = np.lexsort((keys, groups))
    return _Runs(keys[order].astype(np.uint64), np.bincount(groups, minlength=num_groups))


def _truncated_runs(
    keys: np.ndarray, dropped: int, groups: np.ndarray, num_groups: int
) -> _TruncatedRuns:
    kept = _PACK_BITS - (num_groups - 1).bit_length()
    keys = keys.astype(np.uint64, copy=False)
    truncated = groups.view(np.uint64) << np.uint64(kept)
    truncated |= keys >> np.uint64(dropped)
    codes = np.sort(truncated)
    return _TruncatedRuns(
        codes,
        _group_sizes(codes, kept, groups, num_groups),
        (1 << kept) - 1,
        truncated=truncated,
        keys=keys,
        groups=groups,
        dropped=dropped,
    )


def _squeeze(keys: np.ndarray) -> tuple[np.ndarray, int, int, int]:
    """Keys less the smallest, without the low bits they all share: ``(codes, bits, low,
    shift)`` with ``key = (code << shift) + low``.

    Cheap, and often enough to pack 64-bit keys: non-negative float64 data that was float32 (29
    zero bits), integers or timestamps in a narrow range. (Negative floats' keys have those
    bits flipped, so data of both signs keeps them all.)
    """
    keys = keys.astype(np.uint64, copy=False)
    low, high = int(keys.min()), int(keys.max())
    spread = int(np.bitwise_or.reduce(keys ^ np.uint64(low)))
    shift = (spread & -spread).bit_length() - 1 if spread else 0
    codes = keys - np.uint64(low)
    codes >>= np.uint64(shift)
    return codes, ((high - low) >> shift).bit_length(), low, shift


def _dense_ranks(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys, ascending, and each key's index among them.

    np.unique(return_inverse=True) does the same at twice the cost: it sorts twice.
    """
    order = np.argsort(keys)
    ordered = keys[order]
    new = np.empty(len(keys), dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    ranks = np.empty(len(keys), dtype=np.uint64)
    ranks[order] = np.cumsum(new) - 1
    return ordered[new], ranks


def _group_sizes(
    packed: np.ndarray, key_bits: int, groups: np.ndarray, num_groups: int
) -> np.ndarray:
    if num_groups > len(packed) // 64:
        return np.bincount(groups, minlength=num_groups)
    # Few groups: a binary search for where each starts beats a pass over the elements.
    # (Not up to num_groups << key_bits, which may be 2**64 and wrap to 0.)
    bounds = np.arange(1, num_groups, dtype=np.uint64) << np.uint64(key_bits)
    return np.diff(np.searchsorted(packed, bounds), prepend=0, append=len(packed))


# --- answers from the sorted runs ------------------------------------------------------------


def _distinct(runs: _Runs, filled: np.ndarray) -> np.ndarray:
    codes = runs.codes
    new = np.empty(len(codes), dtype=bool)
    new[0] = True
    np.not_equal(codes[1:], codes[:-1], out=new[1:])
    starts = runs.starts[filled]
    new[starts] = True  # a group's first value is new even if the previous group ended on it
    # The filled groups' runs tile the array, so each sum ends where the next group starts.
    return np.asarray(np.add.reduceat(new, starts, dtype=np.int64))


def _pick(
    runs: _Runs, filled: np.ndarray, dtype: np.dtype[Any], q: float | None, nan_last: bool
) -> np.ndarray:
    """Median or quantile of each filled group, in NumPy's result dtype."""
    count = runs.counts[filled]
    start = runs.starts[filled]

    def value_at(offset: np.ndarray) -> np.ndarray:
        return _values(runs.keys_at(start + offset), dtype)

    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf is NaN, as in NumPy
        if q is None:
            result = _median(value_at((count - 1) // 2), value_at(count // 2), count % 2 == 1)
        else:
            result = _quantile(value_at, count, q)
    if nan_last:
        # NumPy's nancheck: a group holding a NaN gives NaN.
        result[np.isnan(value_at(count - 1))] = np.nan
    return result


def _values(keys: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    if dtype.kind == "f":
        return _float_values(keys, dtype)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    keys = keys.astype(unsigned)
    if dtype.kind == "i":
        keys ^= _sign_bit(unsigned)
    return keys.view(dtype)


def _median(low: np.ndarray, high: np.ndarray, odd: np.ndarray) -> np.ndarray:
    # np.median is np.mean of the one or two middle values: summed in float32 for float16 and
    # float32, float64 otherwise, then divided; float16 rounds back at the end.
    dtype = low.dtype
    wide = np.float32 if dtype.kind == "f" and dtype.itemsize <= 4 else np.float64
    low, high = low.astype(wide), high.astype(wide)
    # np.mean adds to a +0.0 start and then divides, so a zero median is +0.0 whatever the
    # middle zeros' signs, but half of a negative subnormal sum rounds to -0.0 as NumPy's does.
    result = np.where(odd, low + wide(0), (low + high + wide(0)) / wide(2))
    return result.astype(dtype) if dtype.kind == "f" else result


def _quantile(
    value_at: Callable[[np.ndarray], np.ndarray], count: np.ndarray, q: float
) -> np.ndarray:
    # NumPy's linear method: virtual index (n - 1) * q; at or past the last index both
    # neighbours are the last value and gamma is index + 1 (NumPy's -1 "previous index").
    virtual = (count - 1).astype(np.float64) * q
    previous = np.floor(virtual)
    gamma = virtual - previous
    low = previous.astype(np.int64)
    high = low + 1
    past = virtual >= count - 1
    low[past] = high[past] = count[past] - 1
    gamma[past] = virtual[past] + 1
    a, b = value_at(low), value_at(high)
    if a.dtype.kind == "f":
        # q is a Python float, so NumPy's weak promotion does the lerp in the data's dtype.
        t, t_rest = gamma.astype(a.dtype), (1 - gamma).astype(a.dtype)
        diff = b - a
    else:
        t, t_rest = gamma, 1 - gamma
        diff = _exact_difference(a, b)
        a, b = a.astype(np.float64), b.astype(np.float64)
    return np.asarray(np.where(gamma >= 0.5, b - diff * t_rest, a + diff * t))


def _exact_difference(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``high - low`` (high >= low) as float64, without wrapping in the integer dtype."""
    if low.dtype.kind == "i":
        low, high = low.astype(np.int64).view(np.uint64), high.astype(np.int64).view(np.uint64)
    return (high.astype(np.uint64) - low.astype(np.uint64)).astype(np.float64)


# --- sorted streams --------------------------------------------------------------------------


class SortedHolisticReducer:
    """``op`` over blocks whose ids never decrease from one block to the next.

    Every segment that ends inside a block is finished there; the block's last segment (which
    the next block may continue) is carried over. Memory: one block plus the largest segment.
    :meth:`finish` returns the same bytes as :func:`reduce_holistic` on the whole input.
    ``num_segments`` None: not known before the end (inferred from the last id); the result
    grows as ids appear, and :meth:`finish` takes the final count.
    """

    def __init__(
        self,
        op: str,
        num_segments: int | None,
        inner_size: int,
        dtype: np.dtype[Any],
        *,
        q: float | None = None,
        skipna: bool = False,
        fill: Any = None,
    ) -> None:
        self._q = check_holistic(op, np.dtype(dtype), q)
        if num_segments is not None:
            _check_num_segments(num_segments)
        self._op, self._skipna, self._fill = op, skipna, fill
        self._dtype = np.dtype(dtype)
        self._num_segments, self._width = num_segments, inner_size
        # Made at the first finished segment, not here: a driver makes its checks before the
        # first block (an n too large for memory among them) after it made this reducer.
        self._out = self._empty(0)
        self._carry_values: list[np.ndarray] = []
        self._carry_ids: list[np.ndarray] = []
        self._last_id = -1
        self._rows_seen = 0

    def push(self, values: np.ndarray, ids: np.ndarray) -> None:
        """Take the next block: ``values`` ``(rows, inner_size)`` (masked where null),
        ``ids`` ``(rows,)``."""
        values = np.asanyarray(values)
        bound = np.iinfo(np.int64).max if self._num_segments is None else self._num_segments
        ids = _checked_ids(np.asarray(ids), bound, self._rows_seen)
        if values.shape != (len(ids), self._width):
            raise InvalidInputError(
                f"holistic {self._op}: a block of {len(ids)} ids needs values of shape "
                f"{(len(ids), self._width)}, got {values.shape}"
            )
        if len(ids) == 0:
            return
        if ids[0] < self._last_id:
            raise InvalidInputError(
                f"segment_ids[{self._rows_seen}] = {ids[0]} < "
                f"segment_ids[{self._rows_seen - 1}] = {self._last_id} (ids must not decrease)"
            )
        if (ids[1:] < ids[:-1]).any():
            first = int(np.flatnonzero(ids[1:] < ids[:-1])[0]) + 1
            raise InvalidInputError(
                f"segment_ids[{self._rows_seen + first}] = {ids[first]} < "
                f"segment_ids[{self._rows_seen + first - 1}] = {ids[first - 1]} "
                f"(ids must not decrease)"
            )
        self._rows_seen += len(ids)
        last = int(ids[-1])
        cut = int(np.searchsorted(ids, last, side="left"))
        if cut:
            self._finish_rows(
                _joined([*self._carry_values, values[:cut]]),
                np.concatenate([*self._carry_ids, ids[:cut]]),
            )
            self._carry_values, self._carry_ids = [], []
        # A copy: the caller may reuse the block's buffer for the next read.
        self._carry_values.append(values[cut:].copy())
        self._carry_ids.append(ids[cut:].copy())
        self._last_id = last

    def finish(self, num_segments: int | None = None) -> np.ndarray:
        """The result, ``(num_segments, inner_size)``, after the last block; ``num_segments``
        is the final count when the constructor was given None."""
        if self._carry_ids:
            self._finish_rows(_joined(self._carry_values), np.concatenate(self._carry_ids))
            self._carry_values, self._carry_ids = [], []
        final = self._num_segments
        if final is None:
            final = len(self._out) if num_segments is None else num_segments
        self._grow(final)
        return self._out[:final]

    def _empty(self, num_segments: int) -> np.ndarray:
        out_dtype = holistic_out_dtype(self._op, self._dtype)
        fill = 0 if self._fill is None else self._fill
        return np.full((num_segments, self._width), fill, dtype=out_dtype)

    def _grow(self, num_segments: int) -> None:
        if num_segments <= len(self._out):
            return
        # Doubling: a stream of many short segments grows the result a logarithmic number of times.
        grown = self._empty(max(num_segments, 2 * len(self._out)))
        grown[: len(self._out)] = self._out
        self._out = grown

    def _finish_rows(self, values: np.ndarray, ids: np.ndarray) -> None:
        # ids are sorted: each run of one id is one segment, numbered in order.
        new = np.empty(len(ids), dtype=bool)
        new[0] = True
        np.not_equal(ids[1:], ids[:-1], out=new[1:])
        segments = ids[new]
        local = np.cumsum(new) - 1
        data, missing = _unmasked(values.reshape(len(ids), self._width))
        result = _reduce(
            self._op, data, local, len(segments), self._q, self._skipna, self._fill, missing
        )
        self._grow(int(segments[-1]) + 1 if self._num_segments is None else self._num_segments)
        self._out[segments] = result


def _joined(blocks: list[np.ndarray]) -> np.ndarray:
    """Blocks end to end, their masks too (``np.concatenate`` drops a masked array's mask;
    ``np.ma.concatenate`` is untyped, and makes plain blocks masked)."""
    if any(np.ma.isMaskedArray(block) for block in blocks):
        data = np.concatenate([np.ma.getdata(block) for block in blocks])
        mask = np.concatenate([np.ma.getmaskarray(block) for block in blocks])
        return np.ma.MaskedArray(data, mask)
    return np.concatenate(blocks)


__all__ = [
    "HOLISTIC_OPS",
    "SortedHolisticReducer",
    "check_holistic",
    "holistic_out_dtype",
    "reduce_holistic",
]
