"""Numbers at the edges of their types: overflow, subnormals, signed zeros, on every engine
and path, against NumPy computed directly on the same segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import segcli
from tests.entry import run_main

PATHS = {
    "in memory": [],
    "sorted stream": ["--sorted", "--chunk-rows", "2"],
    "unsorted stream": ["--chunk-rows", "2", "--memory-limit", "1"],
}


def same_bytes(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def cli_result(tmp_path: Path, op: str, data: np.ndarray, ids: np.ndarray, *args: Any) -> Any:
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "out.npy"
    ran = run_main(op, tmp_path / "data.npy", tmp_path / "ids.npy", "-o", out, "-q", *args)
    assert ran.exit_code == 0, ran.stderr
    return np.load(out)


# --- median: NumPy's mean of the middle values, signed zeros and subnormals included --------

#: Segments whose two middle values halve to a zero: np.median sums from +0.0 and then
#: divides, so -5e-324 and 0.0 give -0.0 (half the smallest subnormal rounds to a zero that
#: keeps the sum's sign), while -0.0 and -0.0 give +0.0.
MEDIAN_SEGMENTS = [[-5e-324, 0.0], [-5e-324, -0.0], [-0.0, -0.0], [-0.0], [-5e-324, 5e-324]]


def median_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    values = np.array([v for segment in MEDIAN_SEGMENTS for v in segment])
    ids = np.repeat(np.arange(len(MEDIAN_SEGMENTS)), [len(s) for s in MEDIAN_SEGMENTS])
    want = np.array([np.median(np.array(s)) for s in MEDIAN_SEGMENTS])
    return values, ids, want


def test_median_of_subnormal_halves_keeps_numpys_sign(engine):
    values, ids, want = median_case()
    assert np.signbit(want).tolist() == [True, True, False, False, False]
    got = segcli.segment_reduce(values, ids, len(MEDIAN_SEGMENTS), "median", engine=engine)
    assert same_bytes(got, want)


@pytest.mark.parametrize("path", PATHS)
def test_median_of_subnormal_halves_on_every_path(tmp_path, path):
    values, ids, want = median_case()
    assert same_bytes(cli_result(tmp_path, "median", values, ids, *PATHS[path]), want)
