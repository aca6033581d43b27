"""min and max break ties by one rule on every engine, dtype and path.

The rule is NumPy's float32 ``np.minimum``: keep the accumulator if it is smaller or NaN, else
take the value. NaN propagates (the first NaN wins) and of two equal values (0.0 and -0.0) the
later row wins. NumPy itself follows it for float32/float64 ``ufunc.at`` and elementwise calls
only: its float16 loops keep the earlier of two equal values, and its SIMD ``reduceat`` may
pick either zero and either NaN of a long run. So the bytes are checked (``np.signbit`` and
NaN bits included), not the values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import segcli
from segcli import ops
from segcli.cli import cli
from tests.matrix import default_run
from tests.reference import reference_reduce
from tests.test_engines import fold_in_blocks, needs_numba

FLOATS = ["float16", "float32", "float64"]
N = 5


def rule_reduce(data: np.ndarray, ids: np.ndarray, n: int, op: str) -> np.ndarray:
    """The rule, one row after another, in the data's dtype; every segment must have rows."""
    rows = data.reshape(ids.size, -1)
    out = np.full((n, rows.shape[1]), np.inf if op == "min" else -np.inf, data.dtype)
    for row, segment in enumerate(ids.tolist()):
        for column in range(rows.shape[1]):
            acc, value = out[segment, column], rows[row, column]
            better = acc < value if op == "min" else acc > value
            if not (better or np.isnan(acc)):
                out[segment, column] = value
    return out.reshape((n, *data.shape[1:]))


def _negative_nan(dtype: np.dtype[Any]) -> Any:
    """A NaN with its sign bit set and a payload: only a copy of the value keeps these bits."""
    bits = {2: 0xFE01, 4: 0xFFC0_0123, 8: 0xFFF8_0000_0000_0123}[dtype.itemsize]
    return np.array(bits, f"u{dtype.itemsize}").view(dtype)


def tied_data(
    dtype: str, op: str, shape: tuple[int, ...], *, nan: bool, sorted_ids: bool, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Mostly 0.0 and -0.0 (so most results are a tie of zeros), long runs for SIMD loops,
    every segment non-empty; with ``nan``, a few NaNs of both signs."""
    rng = np.random.default_rng([seed, FLOATS.index(dtype), len(shape), nan, sorted_ids])
    dt = np.dtype(dtype)
    beyond = 1.0 if op == "min" else -1.0  # never the extreme
    pool = np.array([0.0, -0.0, 0.0, -0.0, beyond], dt)
    data = rng.choice(pool, shape)
    if nan:
        flat = data.reshape(-1)
        flat[rng.choice(flat.size, 6, replace=False)] = np.nan
        flat[rng.choice(flat.size, 3, replace=False)] = _negative_nan(dt)
    ids = np.r_[np.arange(N), rng.integers(0, N, shape[0] - N)].astype(np.int64)
    if sorted_ids:
        ids.sort()
    return data, ids


@pytest.mark.parametrize("nan", [False, True], ids=["zeros", "zeros-nan"])
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("shape", [(600,), (300, 3)], ids=["1d", "inner"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_follow_the_rule_in_memory_and_in_blocks(
    engine: str, op: str, dtype: str, shape: tuple[int, ...], sorted_ids: bool, nan: bool
) -> None:
    data, ids = tied_data(dtype, op, shape, nan=nan, sorted_ids=sorted_ids)
    want = rule_reduce(data, ids, N, op)
    got = segcli.segment_reduce(data, ids, N, op, sorted=sorted_ids, engine=engine)
    assert got.dtype == want.dtype
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert got.tobytes() == want.tobytes()
    for cuts in ([1, 2, 250], list(range(7, shape[0], 7))):
        streamed = fold_in_blocks(engine, data, ids, N, op, cuts, sorted_ids=sorted_ids)
        assert streamed == want.tobytes()


@needs_numba
@default_run(lambda dtype: dtype != "float64")  # float64's kernels: the full matrix
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_numba_threads_merge_private_states_by_the_rule(
    dtype: str, sorted_ids: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from segcli.engines import numba_engine

    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    monkeypatch.setattr(numba_engine, "THREADS", 2)
    for op in ("min", "max"):
        for shape in ((4000,), (2000, 3)):
            data, ids = tied_data(dtype, op, shape, nan=True, sorted_ids=sorted_ids, seed=1)
            got = segcli.segment_reduce(data, ids, N, op, sorted=sorted_ids, engine="numba")
            assert got.tobytes() == rule_reduce(data, ids, N, op).tobytes()


@pytest.mark.parametrize("dtype", FLOATS)
def test_merged_states_keep_the_later_zero(dtype: str) -> None:
    """Partial states (Dask partitions, agg's parts) merge by the rule: the later state's
    zero wins a tie, the earlier state's NaN wins."""
    dt = np.dtype(dtype)
    earlier = np.array([0.0, -0.0, np.nan, 0.0], dt)
    later = np.array([-0.0, 0.0, _negative_nan(dt), np.nan], dt)
    for kind in ("min", "max"):
        merged = np.asarray(ops.FOLDS[kind].merge_values(earlier, later))
        want = np.array([-0.0, 0.0, np.nan, np.nan], dt)
        assert merged.tobytes() == want.tobytes()


def _save(tmp_path: Any, data: np.ndarray, ids: np.ndarray) -> list[str]:
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "ids.npy", ids)
    return [str(tmp_path / "data.npy"), str(tmp_path / "ids.npy")]


@needs_numba
@pytest.mark.parametrize("dtype", FLOATS)
def test_cli_min_max_same_bytes_on_each_engine_streamed_agg_and_skipna(
    tmp_path: Any, dtype: str
) -> None:
    data, ids = tied_data(dtype, "min", (400, 2), nan=True, sorted_ids=False, seed=2)
    paths = _save(tmp_path, data, ids)
    runs = {
        "reduce": ["min", *paths, "-n", str(N)],
        "streamed": ["min", *paths, "-n", str(N), "--chunk-rows", "13"],
        "agg": ["agg", *paths, "-n", str(N), "--op", "min,max", "--chunk-rows", "13"],
        "skipna": ["min", *paths, "-n", str(N), "--skipna", "--chunk-rows", "13"],
    }
    for name, args in runs.items():
        outputs = []
        for engine in ("numpy", "numba"):
            out = tmp_path / f"{name}-{engine}.npz"
            result = CliRunner().invoke(cli, [*args, "--engine", engine, "-q", "-o", str(out)])
            assert result.exit_code == 0, result.stderr
            with np.load(out) as arrays:
                outputs.append({key: arrays[key].tobytes() for key in arrays.files})
        assert outputs[0] == outputs[1], name
    with np.load(tmp_path / "reduce-numpy.npz") as arrays:
        result = arrays["result"]
    assert result.tobytes() == rule_reduce(data, ids, N, "min").tobytes()


@pytest.mark.parametrize("dtype", FLOATS)
def test_reference_keeps_the_later_zero(dtype: str) -> None:
    """The oracle of every engine test follows the rule too (Python's min keeps the earlier
    of 0.0 and -0.0)."""
    for op in ("min", "max"):
        data, ids = tied_data(dtype, op, (60, 2), nan=False, sorted_ids=False, seed=3)
        want = rule_reduce(data, ids, N, op)
        assert reference_reduce(data, ids, N, op).tobytes() == want.tobytes()


@pytest.mark.parametrize("tie_steps", [0, 1, 16])
@pytest.mark.parametrize("dtype", FLOATS)
def test_numpy_sorted_ties_far_from_the_run_ends(
    dtype: str, tie_steps: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sorted path looks for a run's last zero from its end and its first NaN from its
    start, then over every row: ties at any distance from the ends, through either way."""
    from segcli.engines import numpy_engine

    monkeypatch.setattr(numpy_engine, "_TIE_STEPS", tie_steps)
    dt = np.dtype(dtype)
    run = np.ones(200, dt)
    zeros = run.copy()
    zeros[[3, 50, 120]] = [0.0, -0.0, 0.0]  # the last zero 80 rows from the end
    nans = zeros.copy()
    nans[[90, 150, 199]] = [_negative_nan(dt), np.nan, np.nan]  # the first NaN 90 rows in
    data = np.concatenate([zeros, nans, -zeros, zeros[::-1]])[:, None].repeat(2, axis=1)
    data[:, 1] = -data[:, 1]  # both signs of every zero in the other column
    ids = np.repeat(np.arange(4), 200)
    for op in ("min", "max"):
        got = segcli.segment_reduce(data, ids, 4, op, sorted=True, engine="numpy")
        assert got.tobytes() == rule_reduce(data, ids, 4, op).tobytes()
