"""``--expect``: compare a result with a golden file, segment by segment."""

from __future__ import annotations

import numpy as np

from segcli.errors import ExpectationError

#: How many differing segments the error lists before it says "and N more".
_LISTED = 10


def differing_segments(
    result: np.ndarray, expected: np.ndarray, *, rtol: float, atol: float
) -> np.ndarray:
    """Indices of the segments whose values differ beyond the tolerance (NaN equals NaN)."""
    if result.dtype.kind in "fc" or expected.dtype.kind in "fc":
        close = np.isclose(result, expected, rtol=rtol, atol=atol, equal_nan=True)
    else:
        close = result == expected
    per_segment = close.reshape(close.shape[0], -1).all(axis=1) if close.ndim else close
    return np.flatnonzero(~per_segment)


def check_expected(
    result: np.ndarray, expected: np.ndarray, label: str, *, rtol: float, atol: float
) -> None:
    """Raise :class:`ExpectationError` naming the differing segments, if any."""
    if expected.shape != result.shape:
        raise ExpectationError(
            f"{label}: expected shape {expected.shape}, the result has shape {result.shape}"
        )
    bad = differing_segments(result, expected, rtol=rtol, atol=atol)
    if bad.size == 0:
        return
    listed = ", ".join(str(int(i)) for i in bad[:_LISTED])
    more = f" and {bad.size - _LISTED} more" if bad.size > _LISTED else ""
    first = int(bad[0])
    raise ExpectationError(
        f"{label}: {bad.size} of {result.shape[0]} segments differ (rtol={rtol}, atol={atol}): "
        f"{listed}{more}; segment {first} is {_show(result[first])}, expected "
        f"{_show(expected[first])}"
    )


def _show(value: np.ndarray) -> str:
    text = np.array2string(np.asarray(value), threshold=6, separator=", ")
    return text.replace("\n", " ")
