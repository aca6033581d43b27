"""``--expect``: compare a result with a golden file, segment by segment."""

from __future__ import annotations

import numpy as np

from segcli.errors import ExpectationError

#: How many differing segments the error lists before it says "and N more".
_LISTED = 10
#: How many differing segments it shows with both values.
_SHOWN = 3


def compared_within_tolerance(result: np.ndarray, expected: np.ndarray) -> bool:
    """Whether the tolerances apply: floats (and complex) only; integers and booleans must be
    equal."""
    return result.dtype.kind in "fc" or expected.dtype.kind in "fc"


def differing_segments(
    result: np.ndarray, expected: np.ndarray, *, rtol: float, atol: float
) -> np.ndarray:
    """Indices of the segments whose values differ beyond the tolerance (NaN equals NaN)."""
    if compared_within_tolerance(result, expected):
        close = np.isclose(result, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = result == expected
    # Over the inner axes (none for a 1-D result); a reshape to (n, -1) fails for n = 0.
    per_segment = close.all(axis=tuple(range(1, close.ndim)))
    return np.flatnonzero(~per_segment)


def check_expected(
    result: np.ndarray, expected: np.ndarray, label: str, *, rtol: float, atol: float
) -> None:
    """Raise :class:`ExpectationError` naming the differing segments, if any."""
    if expected.shape != result.shape:
        # A table of only segment and count columns is an (n, 0) result's golden, and also
        # what agg --op count writes.
        agg_count = expected.shape[1:] == (0,) and result.ndim == 1
        hint = " (only segment and count columns: if agg --op count wrote it, check it with agg)"
        raise ExpectationError(
            f"{label}: expected shape {expected.shape}, the result has shape {result.shape}"
            f"{hint if agg_count else ''}"
        )
    bad = differing_segments(result, expected, rtol=rtol, atol=atol)
    if bad.size == 0:
        return
    listed = ", ".join(str(int(i)) for i in bad[:_LISTED])
    more = f" and {bad.size - _LISTED} more" if bad.size > _LISTED else ""
    # Naming tolerances that an exact compare did not use would suggest they let a bool or
    # integer result pass by a little.
    how = f"rtol={rtol}, atol={atol}" if compared_within_tolerance(result, expected) else "exactly"
    raise ExpectationError(
        f"{label}: {bad.size} of {result.shape[0]} segments differ ({how}): "
        f"{listed}{more}; {_got_vs_expected(result, expected, bad)}"
        f"{_largest_differences(result, expected, bad)}"
    )


def check_expected_counts(counts: np.ndarray, expected: np.ndarray | None, label: str) -> None:
    """Raise :class:`ExpectationError` where the golden's rows per segment (its ``count``
    column, when it has one) differ from the run's: numbers of rows, compared exactly."""
    if expected is None:
        return
    if expected.shape != counts.shape:
        raise ExpectationError(
            f"{label}: column count has {expected.shape[0]} rows, the result {counts.shape[0]}"
        )
    bad = np.flatnonzero(np.asarray(counts) != expected)
    if bad.size == 0:
        return
    first = int(bad[0])
    raise ExpectationError(
        f"{label}: column count differs in {bad.size:,} of {counts.shape[0]} segments, the "
        f"first segment {first}: {counts[first]} vs expected {expected[first]}"
    )


def _got_vs_expected(result: np.ndarray, expected: np.ndarray, bad: np.ndarray) -> str:
    return ", ".join(
        f"segment {int(i)} got {_show(result[i])} expected {_show(expected[i])}"
        for i in bad[:_SHOWN]
    )


def _largest_differences(result: np.ndarray, expected: np.ndarray, bad: np.ndarray) -> str:
    """``; largest difference: absolute A (segment i), relative R (segment j)``, over the
    differing segments whose difference is a number (a NaN against a value has none)."""
    # Booleans have no size of a difference: "relative inf" of True against False says nothing.
    if result.dtype.kind not in "iufc" or expected.dtype.kind not in "iufc":
        return ""
    kinds = (result.dtype.kind, expected.dtype.kind)
    # Integers as Python's (an object array), exact: in float64, int64 values 1,000 apart
    # near 2**62 are 1,024 apart, and uint64 values 1 apart near 2**64 are 0 apart.
    wide = object if set(kinds) <= set("iu") else np.complex128 if "c" in kinds else np.float64
    got = result[bad].astype(wide).reshape(bad.size, -1)
    want = expected[bad].astype(wide).reshape(bad.size, -1)
    with np.errstate(all="ignore"):
        absolute = np.abs(got - want)
        # Python's ints raise on a zero divisor where NumPy's floats give inf.
        relative = np.where(want != 0, absolute / np.where(want != 0, np.abs(want), 1), np.inf)
    parts = []
    for name, diffs in (("absolute", absolute), ("relative", relative)):
        measurable = ~np.isnan(diffs.astype(np.float64))
        if not measurable.any():
            continue
        flat = int(np.argmax(np.where(measurable, diffs, -np.inf)))
        segment = int(bad[flat // diffs.shape[1]])
        parts.append(f"{name} {_number(diffs.flat[flat])} (segment {segment})")
    return "; largest difference: " + ", ".join(parts) if parts else ""


def _number(value: float) -> str:
    return f"{value:.6g}"


def _show(value: np.ndarray) -> str:
    text = np.array2string(np.asarray(value), threshold=6, separator=", ")
    return text.replace("\n", " ")
