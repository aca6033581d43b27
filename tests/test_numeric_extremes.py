"""Numbers at the edges of their types: overflow, subnormals, signed zeros, on every engine
and path, against NumPy computed directly on the same segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import segcli
from tests.entry import run_main
from tests.matrix import default_run

PATHS = {
    "in memory": [],
    "sorted stream": ["--sorted", "--chunk-rows", "2"],
    "unsorted stream": ["--chunk-rows", "2", "--memory-limit", "1"],
}


def same_bytes(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def same_values(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal values and zero signs, NaN equal to NaN whatever its bits (a NaN that arithmetic
    makes is NumPy's own ``nan``), for real and complex arrays part by part."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    parts = [(got.real, want.real), (got.imag, want.imag)] if got.dtype.kind == "c" else []
    for a, b in parts or [(got, want)]:
        nan = np.isnan(a)
        if not (nan == np.isnan(b)).all() or not (a[~nan] == b[~nan]).all():
            return False
        if (np.signbit(a[~nan]) != np.signbit(b[~nan])).any():
            return False
    return True


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


# --- var and std: finite values whose deviations overflow give +inf, an inf value NaN -------

BIG = 1e308
INF = np.inf
#: (values, NumPy's population variance). Finite values 1e308 apart overflow the shifted sum
#: itself (x - shift is inf), not only the squares; an inf or NaN value gives NaN.
VAR_SEGMENTS: list[tuple[list[float], float]] = [
    ([BIG, -BIG], INF),
    ([-BIG, BIG, 5.0], INF),
    ([1e300, -1e300], INF),
    ([BIG, BIG], 0.0),
    ([1.0, INF], np.nan),
    ([BIG, INF], np.nan),
    ([-INF, BIG], np.nan),
    ([BIG, -BIG, INF], np.nan),
    ([INF], np.nan),
    ([1.0, np.nan, -BIG], np.nan),
]


def var_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    values = np.array([v for segment, _ in VAR_SEGMENTS for v in segment])
    ids = np.repeat(np.arange(len(VAR_SEGMENTS)), [len(s) for s, _ in VAR_SEGMENTS])
    want = np.array([expected for _, expected in VAR_SEGMENTS])
    return values, ids, want


def test_var_cases_are_numpys():
    # Except 1e308 twice: NumPy's mean overflows there (var inf); the shifted sums give 0.
    cases = [(segment, expected) for segment, expected in VAR_SEGMENTS if segment != [BIG, BIG]]
    with np.errstate(all="ignore"):
        numpy_var = [np.var(np.array(segment)) for segment, _ in cases]
    np.testing.assert_array_equal(numpy_var, [expected for _, expected in cases])


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_of_finite_values_overflows_to_inf(engine, op):
    values, ids, want = var_case()
    got = segcli.segment_reduce(values, ids, len(VAR_SEGMENTS), op, engine=engine)
    assert same_bytes(got, np.sqrt(want) if op == "std" else want)


# numba's float64 kernels of the streamed and --skipna paths are compiled for these cases
# alone (10 s on a cold cache): the default run keeps numba's in-memory case.
@default_run(lambda engine, args: engine != "numba" or not args)
@pytest.mark.parametrize(
    "args",
    [[], ["--chunk-rows", "1"], ["--sorted", "--chunk-rows", "1"], ["--skipna"]],
    ids=["in memory", "unsorted stream", "sorted stream", "skipna"],
)
def test_var_overflow_on_every_path(tmp_path, engine, args):
    values, ids, want = var_case()
    args = [*args, "--engine", engine]
    if "--skipna" in args:
        want[-1] = INF  # the NaN left out: 1.0 and -1e308 remain
    assert same_bytes(cli_result(tmp_path, "var", values, ids, *args), want)
    # With sum, min and max beside them, the numba engine folds var and std in its fused
    # kernel.
    data, ids_path, out = tmp_path / "data.npy", tmp_path / "ids.npy", tmp_path / "agg.npz"
    ran = run_main("agg", data, ids_path, "--op", "sum,min,max,var,std", "-q", "-o", out, *args)
    assert ran.exit_code == 0, ran.stderr
    with np.load(tmp_path / "agg.npz") as columns:
        assert same_bytes(columns["var"], want)
        assert same_bytes(columns["std"], np.sqrt(want))


def test_var_merges_lanes_whose_shifts_are_far_apart(engine, short_lanes):
    # Lanes of 5 rows: segment 0's lanes are shifted by 1e308 and -1e308 (their difference
    # overflows in Chan's merge); segment 1's second lane holds an inf.
    values = np.array([BIG] * 5 + [-BIG] * 5 + [2.0] * 5 + [2.0, 2.0, INF, 2.0, 2.0])
    ids = np.repeat([0, 1], 10)
    for op, want in (("var", [INF, np.nan]), ("std", [INF, np.nan])):
        got = segcli.segment_reduce(values, ids, 2, op, engine=engine)
        assert same_bytes(got, np.array(want))


# --- complex prod: a lane without rows leaves the product as it is --------------------------

HUGE = complex(1e308, 1e308)


def complex_prod_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # HUGE * HUGE is nan+infj (NumPy's naive product: 1e616 - 1e616, 2e616); times the empty
    # lane's 1+0j it would become nan+nanj.
    values = np.array([HUGE, HUGE, complex(np.inf, 1.0), 2 + 0j, 1 + 1j, 1 - 1j])
    ids = np.array([0, 0, 1, 1, 2, 2])
    with np.errstate(all="ignore"):
        want = np.array([np.prod(values[ids == k]) for k in range(3)])
    return values, ids, want


def test_complex_prod_beyond_the_range_is_numpys(engine):
    values, ids, want = complex_prod_case()
    assert repr(want[0]) == "np.complex128(nan+infj)"
    assert same_values(segcli.segment_reduce(values, ids, 3, "prod", engine=engine), want)


@pytest.mark.parametrize("path", PATHS)
def test_complex_prod_beyond_the_range_on_every_path(tmp_path, path):
    values, ids, want = complex_prod_case()
    assert same_values(cli_result(tmp_path, "prod", values, ids, *PATHS[path]), want)
