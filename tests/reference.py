"""A small, obviously-correct loop implementation of SPEC: the oracle every engine must match.

It walks rows in order with Python numbers, so it shares no code path with the engines.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _wrap(value: int, dtype: np.dtype[Any]) -> int:
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    if dtype.kind == "i" and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def reference_reduce(
    data: np.ndarray,
    ids: np.ndarray,
    n: int,
    op: str,
    *,
    sorted_ids: bool = False,
    ddof: int = 0,
    q: float | None = None,
) -> np.ndarray:
    data = np.asarray(data)
    ids = np.asarray(ids)
    inner = data.shape[ids.ndim :]
    rows = (
        data.reshape((ids.size, *inner)).reshape(ids.size, -1)
        if ids.size
        else np.zeros((0, int(np.prod(inner, dtype=int))), data.dtype)
    )
    width = rows.shape[1]
    flat_ids = [int(i) for i in ids.reshape(-1)]
    members: list[list[int]] = [[] for _ in range(n)]
    for row, segment in enumerate(flat_ids):
        if 0 <= segment < n:
            members[segment].append(row)
    dtype = data.dtype
    if op == "count":
        return np.array([len(m) for m in members], dtype=np.int64)
    if op in MEAN_LIKE:
        out_dtype = (
            dtype
            if dtype.kind in "fc"
            else np.dtype(np.float32 if dtype.itemsize <= 2 else np.float64)
        )
    elif op in ("argmin", "argmax", "nunique"):
        out_dtype = np.dtype(np.int64)
    elif op in ("any", "all"):
        out_dtype = np.dtype(np.bool_)
    else:
        out_dtype = dtype
    out = np.zeros((n, width), dtype=out_dtype)
    if op in HOLISTIC:
        for segment, rows_in in enumerate(members):
            for column in range(width):
                if rows_in:
                    out[segment, column] = _holistic(rows[rows_in, column], op, q)
        return out.reshape((n, *inner))
    for segment, rows_in in enumerate(members):
        for column in range(width):
            values = [rows[r, column].item() for r in rows_in]
            # A product past the dtype's range is +-inf there, as in TF: no warning.
            with np.errstate(over="ignore"):
                value = _one(values, op, dtype, out_dtype, ddof)
                if op in ("argmin", "argmax") and value >= 0:
                    value = rows_in[value]  # the row number of the flattened ids
                out[segment, column] = value
    return out.reshape((n, *inner))


#: The ops whose result dtype is mean's.
MEAN_LIKE = ("mean", "sqrt_n", "var", "std", "logsumexp", "median", "quantile")
#: The ops NumPy itself answers, one segment and one column at a time.
HOLISTIC = ("median", "quantile", "nunique")


def _holistic(values: np.ndarray, op: str, q: float | None) -> Any:
    with np.errstate(all="ignore"):  # inf - inf is NaN, as in NumPy
        if op == "nunique":
            return len(np.unique(values))
        if op == "median":
            return np.median(values)
        if values.dtype.kind == "i":  # NumPy's neighbours' difference would wrap
            return _integer_quantile(sorted(int(v) for v in values), 0.5 if q is None else q)
        return np.quantile(values, 0.5 if q is None else q)


def _integer_quantile(values: list[int], q: float) -> float:
    """NumPy's linear method on sorted integers, their difference taken exactly (in int64 it
    wraps: 3 - (-2**63) is negative)."""
    virtual = (len(values) - 1) * q
    low = min(math.floor(virtual), len(values) - 1)
    high = min(low + 1, len(values) - 1)
    t = virtual - low
    a, b, diff = float(values[low]), float(values[high]), float(values[high] - values[low])
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def _one(
    values: list[Any], op: str, dtype: np.dtype[Any], out_dtype: np.dtype[Any], ddof: int
) -> Any:
    integer = dtype.kind in "iu"
    if op in ("var", "std"):
        return _variance(values, ddof, op == "std")
    if op in ("argmin", "argmax"):
        return _arg(values, op == "argmin")
    if op in ("first", "last"):
        return (values[0] if op == "first" else values[-1]) if values else 0
    if op == "any":
        return any(bool(v) for v in values)
    if op == "all":
        return all(bool(v) for v in values)
    if op == "logsumexp":
        return _logsumexp([float(v) for v in values])
    if op == "sum":
        return (
            _wrap(sum(values), dtype)
            if integer
            else _fsum(values)
            if dtype.kind == "f"
            else sum(values)
        )
    if op == "prod":
        product: Any = 1
        for value in values:
            product *= value
        return _wrap(product, dtype) if integer else product
    if op in ("min", "max"):
        if not values:
            info = np.iinfo(dtype) if integer else np.finfo(dtype)
            return info.max if op == "min" else info.min
        if any(isinstance(v, float) and math.isnan(v) for v in values):
            return math.nan
        return _extreme(values, op == "min")
    if op in ("mean", "sqrt_n"):
        if not values:
            return 0
        total = sum(values) if dtype.kind == "c" else (sum(values) if integer else _fsum(values))
        divisor = len(values) if op == "mean" else math.sqrt(len(values))
        return total / divisor
    raise ValueError(op)


def _extreme(values: list[Any], smallest: bool) -> Any:
    """The least (greatest) value, the later one of equal values (0.0 and -0.0): each step
    keeps the extreme so far only if it is strictly beyond the value. Python's ``min`` keeps
    the earlier one."""
    best = values[0]
    for value in values[1:]:
        if not (best < value if smallest else best > value):
            best = value
    return best


def _fsum(values: list[Any]) -> float:
    """``math.fsum``, but NaN where it raises for +inf and -inf together (IEEE's sum)."""
    try:
        return math.fsum(values)
    except ValueError:
        return math.nan


def _arg(values: list[Any], smallest: bool) -> int:
    """The first row of the extreme; the first NaN is the extreme; -1 for none."""
    best = -1
    for k, value in enumerate(values):
        if isinstance(value, float) and math.isnan(value):
            return k
        if best < 0 or (value < values[best] if smallest else value > values[best]):
            best = k
    return best


def _logsumexp(values: list[float]) -> float:
    if not values:
        return -math.inf
    if any(math.isnan(v) for v in values):
        return math.nan
    top = max(values)
    if math.isinf(top):
        return top
    return top + math.log(math.fsum(math.exp(v - top) for v in values))


def _variance(values: list[Any], ddof: int, root: bool) -> float:
    """Two passes in exactly rounded sums: the mean, then the squared deviations from it."""
    if not values:
        return 0.0
    if len(values) <= ddof:
        return math.nan
    floats = [float(v) for v in values]
    if any(math.isnan(v) or math.isinf(v) for v in floats):
        return math.nan
    mean = math.fsum(floats) / len(floats)
    var = math.fsum((v - mean) ** 2 for v in floats) / (len(floats) - ddof)
    return math.sqrt(var) if root else var


def reference_reduce_skipna(
    data: np.ndarray,
    ids: np.ndarray,
    n: int,
    op: str,
    *,
    missing: np.ndarray | None = None,
    ddof: int = 0,
) -> np.ndarray:
    """SPEC's ``--skipna``: each element of each segment reduced over its present values
    (not NaN, not flagged in ``missing``) alone, as NumPy's nan-functions do; an element with
    none gets the op's empty value; count counts present values, element by element."""
    data = np.asarray(data)
    ids = np.asarray(ids)
    inner = data.shape[ids.ndim :]
    rows = data.reshape(ids.size, -1)
    width = rows.shape[1]
    absent = np.zeros(rows.shape, bool) if missing is None else np.asarray(missing)
    absent = absent.reshape(rows.shape)
    if data.dtype.kind in "fc":
        absent = absent | np.isnan(rows)
    flat_ids = [int(i) for i in ids.reshape(-1)]
    like = reference_reduce(data[:0], ids[:0], n, op, ddof=ddof)  # dtype and empty values
    out_dtype = like.dtype
    out = np.zeros((n, width), dtype=out_dtype)
    for segment in range(n):
        for column in range(width):
            kept = [
                row for row, s in enumerate(flat_ids) if s == segment and not absent[row, column]
            ]
            values = [rows[r, column].item() for r in kept]
            if op == "count":
                out[segment, column] = len(values)
                continue
            with np.errstate(over="ignore"):
                value = _one(values, op, data.dtype, out_dtype, ddof)
            if op in ("argmin", "argmax") and value >= 0:
                value = kept[value]
            out[segment, column] = value
    return out.reshape((n, *inner))
