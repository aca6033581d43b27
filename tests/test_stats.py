"""The mergeable statistics of SPEC Part 2: var, std, argmin, argmax, first, last, any, all,
logsumexp (numerics, ties, special values, --ddof, bool fills, streaming and Dask)."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import segcli
from segcli import ops
from segcli.engines import cupy_fold, get_engine
from segcli.errors import UsageError
from tests.entry import run_main
from tests.matrix import default_run
from tests.reference import reference_reduce

NEW_OPS = ["var", "std", "argmin", "argmax", "first", "last", "any", "all", "logsumexp"]
#: Results computed with arithmetic after the folds; the rest pick a value or a row.
ARITHMETIC = ("var", "std", "logsumexp")


def reduce(data: Any, ids: Any, n: int | None, op: str | ops.Op, **kwargs: Any) -> np.ndarray:
    result: np.ndarray = segcli.segment_reduce(data, ids, n, op, **kwargs)
    return result


invoke = run_main


def save(tmp_path: Path, data: np.ndarray, ids: np.ndarray) -> tuple[Path, Path]:
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "ids.npy", ids)
    return tmp_path / "data.npy", tmp_path / "ids.npy"


# --- var and std: the numerics rule ------------------------------------------------------------


@pytest.mark.parametrize("sorted_ids", [False, True])
def test_var_of_large_offsets_meets_1e_9_against_two_passes(engine: str, sorted_ids: bool) -> None:
    rng = np.random.default_rng(14)
    data = 1e9 + rng.random(200_000)
    ids = rng.integers(0, 50, data.size)
    if sorted_ids:
        ids = np.sort(ids)
    for ddof in (0, 1):
        got = reduce(data, ids, 50, ops.with_ddof("var", ddof), sorted=sorted_ids, engine=engine)
        two_pass = np.array([np.var(data[ids == s], ddof=ddof) for s in range(50)])
        np.testing.assert_allclose(got, two_pass, rtol=1e-9, atol=0)
        std = reduce(data, ids, 50, ops.with_ddof("std", ddof), sorted=sorted_ids, engine=engine)
        np.testing.assert_allclose(std, np.sqrt(two_pass), rtol=1e-9, atol=0)


def test_the_reference_sums_plus_and_minus_inf_to_nan_as_every_engine(engine: str) -> None:
    """The oracle's exact float sum (``math.fsum``) raised for +inf and -inf together."""
    data = np.array([[np.inf, 1.0], [-np.inf, 2.0], [3.0, np.inf]])
    ids = np.array([0, 0, 1])
    for op in ("sum", "mean", "sqrt_n"):
        want = reference_reduce(data, ids, 2, op)
        np.testing.assert_array_equal(reduce(data, ids, 2, op, engine=engine), want)
        assert np.isnan(want[0, 0]), op


def test_a_sum_of_squares_would_fail_the_rule() -> None:
    """The data of the rule is hard: the textbook formula misses it by far."""
    data = 1e9 + np.random.default_rng(14).random(10_000)
    naive = np.mean(data * data) - np.mean(data) ** 2
    assert abs(naive - np.var(data)) / np.var(data) > 1e-9


def test_var_bytes_do_not_depend_on_blocks_lanes_or_engines(engine: str) -> None:
    rng = np.random.default_rng(3)
    data = (1e6 + rng.standard_normal((5_000, 2))).astype(np.float64)
    ids = rng.integers(-1, 7, 5_000)
    want = reduce(data, ids, 7, "var", engine="numpy")
    assert reduce(data, ids, 7, "var", engine=engine).tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_var_std_nan_bits_do_not_depend_on_the_engine(
    tmp_path: Path, engine: str, dtype: type
) -> None:
    """inf - inf is x86's negative NaN and a NaN value is positive: which sign their sum keeps
    is the compiler's choice, so every engine gives the one NaN of NumPy's ``np.nan``."""
    data = np.array([np.inf, np.nan, -np.inf, 1.0, np.nan, 2.0, np.nan], dtype)
    ids = np.array([0, 0, 1, 1, 1, 2, 2])
    nan_bits = np.array([np.nan, np.nan, np.nan], dtype).tobytes()
    paths, out = save(tmp_path, data, ids), tmp_path / "out.npy"
    for op in ("var", "std"):
        assert reduce(data, ids, 3, op, engine=engine).tobytes() == nan_bits, op
        streamed = invoke(op, *paths, "--engine", engine, "--chunk-rows", 1, "-o", out, "-q")
        assert streamed.exit_code == 0, streamed.stderr
        assert np.load(out).tobytes() == nan_bits, op


def lane_rule_var(data: np.ndarray, ids: np.ndarray, n: int, lane_rows: int) -> np.ndarray:
    """The documented rule, written out: row r folds into lane (r // lane_rows) % 2 in row
    order (per lane: the segment's first value there as its shift, the shifted sums and the
    count), lane 1 merges into lane 0 by Chan's rule, and var is m2 / count, in float64."""
    lanes = [{"shift": [0.0] * n, "s": [0.0] * n, "q": [0.0] * n, "c": [0] * n} for _ in "ab"]
    for row, (value, g) in enumerate(zip(data.tolist(), ids.tolist(), strict=True)):
        if 0 <= g < n:
            lane = lanes[(row // lane_rows) % 2]
            if lane["c"][g] == 0:
                lane["shift"][g] = value
            d = value - lane["shift"][g]
            lane["s"][g], lane["q"][g] = lane["s"][g] + d, lane["q"][g] + d * d
            lane["c"][g] += 1
    a, b = lanes
    result = []
    for g in range(n):
        s, q, c = a["s"][g], a["q"][g], a["c"][g] + b["c"][g]
        if a["c"][g] and b["c"][g]:
            delta, n_b = b["shift"][g] - a["shift"][g], float(b["c"][g])
            s = s + (b["s"][g] + n_b * delta)
            q = q + (b["q"][g] + 2.0 * delta * b["s"][g] + n_b * delta * delta)
        elif b["c"][g]:  # lane 0 saw none of the segment's rows: lane 1's sums as they are
            s, q = b["s"][g], b["q"][g]
        m2 = max(q - s * (s / max(c, 1)), 0.0)
        result.append(m2 / max(c, 1) if c else 0.0)
    return np.array(result)


@pytest.mark.usefixtures("short_lanes")
@pytest.mark.parametrize("op", ["var", "std"])
def test_var_std_follow_the_lane_rule_whatever_the_blocks(engine: str, op: str) -> None:
    """var/std keep two lanes like the float sums (rows dealt 5 at a time here): each engine
    gives the written-out rule's bytes, folded whole or in blocks that cut the lanes' runs
    mid-way; a segment all in one lane merges the other, empty one exactly (no NaN)."""
    rng = np.random.default_rng(21)
    data = 1e6 + rng.standard_normal(300) * rng.choice([1e-3, 1.0, 1e3], 300)
    ids = rng.integers(-1, 4, 300)
    ids[:5], ids[5:] = 4, np.where(ids[5:] == 4, 0, ids[5:])  # segment 4: lane 0's rows only
    want = lane_rule_var(data, ids, 6, 5)
    one_lane = lane_rule_var(data, ids, 6, len(data))  # every row in lane 0, in row order
    assert want[4] == one_lane[4] and want[5] == 0.0
    assert want.tobytes() != one_lane.tobytes()  # the case tells the lane rule apart
    np.testing.assert_allclose(want[:4], [np.var(data[ids == g]) for g in range(4)], rtol=1e-9)
    if op == "std":
        want = np.sqrt(want)
    impl = get_engine(engine)
    for cuts in ([], [3, 4, 7, 131, 299], list(range(7, 300, 7)), list(range(1, 300))):
        state = impl.new_state(ops.get_op(op), 6, (), data.dtype)
        for start, stop in zip([0, *cuts], [*cuts, 300], strict=True):
            impl.fold(state, data[start:stop, None], ids[start:stop], sorted_ids=False)
        got = ops.finalize(state.to_host())
        assert got.tobytes() == want.tobytes(), cuts


def test_count_at_most_ddof_gives_nan_and_empty_gives_the_fill(engine: str) -> None:
    data, ids = np.array([1.0, 2.0, 4.0, 7.0]), np.array([0, 0, 0, 1])
    got = reduce(data, ids, 3, ops.with_ddof("var", 1), engine=engine)
    np.testing.assert_array_equal(got, [7 / 3, np.nan, 0.0])
    got = reduce(data, ids, 3, ops.with_ddof("std", 3), engine=engine, fill=-1)
    np.testing.assert_array_equal(got, [np.nan, np.nan, -1.0])


def test_var_of_integers_is_a_float_and_nan_propagates(engine: str) -> None:
    got = reduce(np.array([1, 2, 3, 4], np.int16), [0, 0, 1, 1], 2, "var", engine=engine)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [0.25, 0.25])
    got = reduce(np.array([1.0, np.nan, np.inf, 1.0]), [0, 0, 1, 1], 2, "std", engine=engine)
    assert np.isnan(got).all()


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_whose_squares_overflow_is_inf_as_numpys(engine: str, op: str, tmp_path: Path) -> None:
    """Finite values 1e154 apart and more: the squared deviations overflow, +inf as NumPy's
    var gives (the formula's inf - inf gave NaN); an inf value stays NaN."""
    data = np.array([1e300, -1e300, 2e200, -2e200, 3.0, 5.0, 1.0, np.inf, -1e200, 1e200, 7.0])
    ids = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4])
    with np.errstate(over="ignore", invalid="ignore"):
        want = [getattr(np, op)(data[ids == k]) for k in range(5)]
    assert np.isinf(want[0]) and np.isnan(want[3])  # what the rule is about
    np.testing.assert_array_equal(reduce(data, ids, 5, op, engine=engine), want)
    paths, out = save(tmp_path, data, ids), tmp_path / "out.npy"
    for rows in ("1", "3"):  # streamed, merging blocks of the same segments
        ran = invoke(
            op, *paths, "-n", "5", "--chunk-rows", rows, "--engine", engine, "-q", "-o", out
        )
        assert ran.exit_code == 0, ran.stderr
        np.testing.assert_array_equal(np.load(out), want)


# --- argmin and argmax --------------------------------------------------------------------------


def test_argmin_argmax_ties_take_the_first_row(engine: str) -> None:
    data = np.array([5.0, 1.0, 1.0, 9.0, 9.0, 3.0, 2.0])
    ids = np.array([0, 0, 0, 0, 0, -1, 2])
    assert reduce(data, ids, 4, "argmin", engine=engine).tolist() == [1, -1, 6, -1]
    assert reduce(data, ids, 4, "argmax", engine=engine).tolist() == [3, -1, 6, -1]


def test_argmin_argmax_the_first_nan_wins(engine: str) -> None:
    data = np.array([5.0, np.nan, -np.inf, np.nan, np.inf])
    ids = np.zeros(5, np.int64)
    assert reduce(data, ids, 1, "argmin", engine=engine).tolist() == [1]
    assert reduce(data, ids, 1, "argmax", engine=engine).tolist() == [1]
    # A segment of the fold's identity (+inf for argmin) still names its row.
    assert reduce(np.array([np.inf, np.inf]), [0, 0], 1, "argmin", engine=engine).tolist() == [0]
    assert reduce(np.array([255, 255], np.uint8), [1, 1], 2, "argmin").tolist() == [-1, 0]


def test_argmax_row_numbers_are_those_of_the_flattened_ids(engine: str) -> None:
    data = np.array([[1, 9], [9, 2], [9, 9]], dtype=np.int32)[:, :, None].repeat(2, axis=2)
    ids = np.array([[0, 1], [1, 0], [0, 1]])
    got = reduce(data, ids, 2, "argmax", engine=engine)
    assert got.shape == (2, 2)
    # Rows of the flattened ids: segment 0 holds rows 0, 3, 4 (values 1, 2, 9).
    assert got.tolist() == [[4, 4], [1, 1]]


def test_row_order_decides_across_blocks_not_arrival(tmp_path: Path) -> None:
    """Each block's candidates are later rows: ties across blocks keep the earlier row."""
    rng = np.random.default_rng(2)
    data = rng.integers(0, 3, 500).astype(np.float32)
    ids = rng.integers(0, 4, 500)
    paths = save(tmp_path, data, ids)
    for op in ("argmin", "argmax", "first", "last"):
        want = reduce(data, ids, 4, op)
        expected = {
            "argmin": [np.flatnonzero(ids == s)[np.argmin(data[ids == s])] for s in range(4)],
            "argmax": [np.flatnonzero(ids == s)[np.argmax(data[ids == s])] for s in range(4)],
            "first": [data[ids == s][0] for s in range(4)],
            "last": [data[ids == s][-1] for s in range(4)],
        }[op]
        np.testing.assert_array_equal(want, expected)
        for rows in (1, 3, 64):
            out = tmp_path / f"{op}{rows}.npy"
            run = invoke(op, *paths, "-n", 4, "--chunk-rows", rows, "-q", "-o", out)
            assert run.exit_code == 0, run.stderr
            assert np.load(out).tobytes() == want.tobytes()


# --- first and last -----------------------------------------------------------------------------


def test_first_last_keep_the_data_dtype_and_fill_with_zero(engine: str) -> None:
    data = np.array([1 + 2j, 3j, 5, 7], np.complex64)
    ids = np.array([2, 0, 2, 0])
    first = reduce(data, ids, 3, "first", engine=engine)
    assert first.dtype == np.complex64
    np.testing.assert_array_equal(first, [3j, 0, 1 + 2j])
    np.testing.assert_array_equal(reduce(data, ids, 3, "last", engine=engine), [7, 0, 5])


# --- any and all --------------------------------------------------------------------------------


def test_any_all_nan_is_non_zero(engine: str) -> None:
    data = np.array([0.0, np.nan, 0.0, 0.0, np.nan, -0.0])
    ids = np.array([0, 0, 1, 1, 2, 2])
    assert reduce(data, ids, 4, "any", engine=engine).tolist() == [True, False, True, False]
    assert reduce(data, ids, 4, "all", engine=engine).tolist() == [False, False, False, True]


@pytest.mark.parametrize("sorted_ids", [False, True])
def test_any_all_of_bool_and_complex_data(engine: str, sorted_ids: bool) -> None:
    ids = np.array([0, 0, 1, 1, 3])
    flags = np.array([True, False, False, False, True])
    assert reduce(flags, ids, 4, "any", sorted=sorted_ids, engine=engine).dtype == np.bool_
    assert reduce(flags, ids, 4, "all", sorted=sorted_ids, engine=engine).tolist() == [
        False,
        False,
        True,
        True,
    ]
    numbers = np.array([0, 1j, 0, 0, 2], np.complex128)
    assert reduce(numbers, ids, 4, "any", sorted=sorted_ids, engine=engine).tolist() == [
        True,
        False,
        False,
        True,
    ]


# --- logsumexp ----------------------------------------------------------------------------------


def test_logsumexp_does_not_overflow(engine: str) -> None:
    data = np.array([1000.0, 1000.0, -1000.0, -1000.0, 1e300, -1e300, 0.0])
    ids = np.array([0, 0, 1, 1, 2, 2, 2])
    got = reduce(data, ids, 4, "logsumexp", engine=engine)
    np.testing.assert_allclose(got[:2], [1000 + np.log(2), -1000 + np.log(2)], rtol=1e-15)
    assert got[2] == 1e300
    assert got[3] == -np.inf
    got32 = reduce(np.array([88.0, 89.0], np.float32), [0, 0], 1, "logsumexp", engine=engine)
    assert got32.dtype == np.float32 and np.isfinite(got32[0])


def test_logsumexp_inf_and_nan(engine: str) -> None:
    data = np.array([np.inf, 1.0, np.nan, np.inf, -np.inf, -np.inf, -np.inf, 2.0])
    ids = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    got = reduce(data, ids, 5, "logsumexp", engine=engine)
    assert got[0] == np.inf
    assert np.isnan(got[1])
    assert got[2] == -np.inf
    assert got[3] == 2.0
    assert got[4] == -np.inf


def test_logsumexp_matches_a_shifted_two_pass_answer(engine: str) -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal(20_000) * 300
    ids = rng.integers(0, 9, data.size)
    got = reduce(data, ids, 9, "logsumexp", engine=engine)
    want = [np.logaddexp.reduce(data[ids == s]) for s in range(9)]
    np.testing.assert_allclose(got, want, rtol=1e-13)


# --- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["var", "--ddof", "-1"], "Error: --ddof -1 is not a non-negative integer"),
        (["std", "--ddof", "1.5"], "Error: Invalid value for '--ddof'"),
        (["sum", "--ddof", "1"], "Error: No such option '--ddof'"),
    ],
)
def test_ddof_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    paths = save(tmp_path, np.ones(3), np.zeros(3, np.int64))
    out = tmp_path / "out.npy"
    run = invoke(args[0], *paths, *args[1:], "-o", out)
    assert run.exit_code == 2
    assert run.stderr.startswith(message)
    assert len(run.stderr.splitlines()) == 1
    assert not out.exists()


def test_ddof_in_the_library() -> None:
    with pytest.raises(UsageError, match="--ddof applies to var and std only, not mean"):
        ops.with_ddof("mean", 1)
    assert ops.with_ddof("var", 2) is ops.with_ddof("var", 2)
    assert ops.with_ddof("std", 0) is ops.OPS["std"]
    data, ids = np.array([1.0, 2.0, 4.0, 5.0]), np.array([0, 0, 1, 1])
    got = segcli.segment_reduce(data, ids, 2, "var", ddof=1)
    np.testing.assert_array_equal(got, [np.var([1.0, 2.0], ddof=1), np.var([4.0, 5.0], ddof=1)])
    with pytest.raises(UsageError, match="not mean"):
        segcli.segment_reduce(data, ids, 2, "mean", ddof=1)


def test_ddof_on_the_command_line(tmp_path: Path) -> None:
    paths = save(tmp_path, np.array([1.0, 2.0, 4.0, 5.0]), np.array([0, 0, 1, 1]))
    run = invoke("std", *paths, "--ddof", "1", "-q")
    assert run.exit_code == 0
    assert run.stdout == f"0\t{float(np.sqrt(0.5))!r}\n1\t{float(np.sqrt(0.5))!r}\n"


@pytest.mark.parametrize(
    ("fill", "value"), [("true", True), ("FALSE", False), ("1", True), ("0", False)]
)
def test_bool_fill(fill: str, value: bool) -> None:
    got = reduce(np.array([0.0]), [0], 2, "any", fill=fill)
    assert got.dtype == np.bool_
    assert got.tolist() == [False, value]


def test_bool_fill_refuses_other_words(tmp_path: Path) -> None:
    paths = save(tmp_path, np.array([0.0]), np.array([0]))
    run = invoke("all", *paths, "-n", 2, "--fill", "2")
    assert run.exit_code == 2
    assert run.stderr.splitlines() == [
        "Error: --fill 2 cannot be stored in the bool result of all (true, false, 1 or 0) "
        "(see 'segcli all --help')"
    ]


@pytest.mark.parametrize("op", ["var", "argmax", "logsumexp"])
def test_complex_data_is_refused_naming_the_op(tmp_path: Path, op: str) -> None:
    paths = save(tmp_path, np.ones(2, np.complex64), np.zeros(2, np.int64))
    run = invoke(op, *paths)
    assert run.exit_code == 1
    assert f"complex64 data is not supported by {op}" in run.stderr
    assert len(run.stderr.splitlines()) == 1


@pytest.mark.parametrize("op", NEW_OPS)
def test_cupy_has_a_kernel_for_every_new_op(op: str) -> None:
    # The kernels themselves are checked in tests/test_gpu.py (on the CPU through C++).
    assert cupy_fold.has_kernel(ops.OPS[op])
    cupy_fold.refuse_without_kernel(ops.OPS[op])


# --- streaming and Dask ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", NEW_OPS)
@pytest.mark.parametrize("sorted_ids", [False, True])
def test_streamed_and_inferred_n_equal_in_memory(tmp_path: Path, op: str, sorted_ids: bool) -> None:
    rng = np.random.default_rng(NEW_OPS.index(op))
    data = rng.standard_normal((300, 2)).round(1).astype(np.float32)
    ids = np.sort(rng.integers(0, 9, 300)) if sorted_ids else rng.integers(-1, 9, 300)
    paths = save(tmp_path, data, ids)
    family = ["--sorted"] if sorted_ids else []
    want = reduce(data, ids, None, op, sorted=sorted_ids)
    for rows in (1, 17, 1000):
        out = tmp_path / f"{rows}.npy"
        run = invoke(op, *paths, *family, "--chunk-rows", rows, "-q", "-o", out)
        assert run.exit_code == 0, run.stderr
        assert np.load(out).tobytes() == want.tobytes()


@pytest.fixture(scope="module")
def dask_client() -> Any:
    distributed = pytest.importorskip("distributed")
    from segcli.drivers import dask as seg_dask

    cluster = seg_dask.local_cluster(2, silence_logs=logging.CRITICAL)
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


def test_dask_partitions_merge_like_memory(dask_client: Any, tmp_path: Path) -> None:
    from segcli.drivers import dask as seg_dask
    from segcli.drivers.base import RunSpec

    rng = np.random.default_rng(8)
    data = (1e6 + rng.integers(0, 5, (400, 2))).astype(np.float64)
    data[17, 0] = np.nan
    ids = rng.integers(-1, 6, 400)
    paths = save(tmp_path, data, ids)
    runs: list[str | ops.Op] = [*NEW_OPS, ops.with_ddof("var", 1)]
    for op in runs:
        name = op if isinstance(op, str) else op.name
        spec = RunSpec(op=op, data=str(paths[0]), ids=str(paths[1]), block_rows=37)
        done = seg_dask.run(spec, None, client=dask_client)
        want = reduce(data, ids, None, op)
        got = done.reduction.result
        assert got.dtype == want.dtype
        if name in ARITHMETIC:  # partitions merge their sums in another order
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        else:
            assert got.tobytes() == want.tobytes(), name


# Each width compiles every fold of the test again: int16 and uint64 are the full matrix's.
@default_run(lambda ids_dtype: ids_dtype in ("uint8", ">i4"))
@pytest.mark.parametrize("ids_dtype", ["uint8", "int16", "uint64", ">i4"])
def test_compiled_folds_read_ids_of_every_width(ids_dtype: str) -> None:
    pytest.importorskip("numba")
    rng = np.random.default_rng(11)
    data = rng.integers(0, 4, (500, 2)).astype(np.float64)
    ids = rng.integers(0, 9, 500).astype(ids_dtype)
    if np.dtype(ids_dtype).kind == "i":
        ids[::13] = -1
    in_order = np.sort(ids[ids >= 0]).astype(ids_dtype)
    for op in ("var", "argmin", "argmax", "first", "last", "any", "all"):
        want = reduce(data, ids, 9, op, engine="numpy")
        assert reduce(data, ids, 9, op, engine="numba").tobytes() == want.tobytes(), op
        # Sorted ids >= n (8 here) drop their rows.
        rows = data[: in_order.size]
        want = reduce(rows, in_order, 8, op, sorted=True, engine="numpy")
        got = reduce(rows, in_order, 8, op, sorted=True, engine="numba")
        assert got.tobytes() == want.tobytes(), op


def lane_rule_logsumexp(data: np.ndarray, ids: np.ndarray, n: int, lane_rows: int) -> np.ndarray:
    """The documented rule, written out: row r folds into lane (r // lane_rows) % 2 in row
    order, each value as ``exp(x - e * ln 2) * 2**e`` (``e`` 0 for a plain value, else
    ``rint(x / ln 2)``) into a sum kept at the largest ``e`` so far (moved by powers of two);
    lane 1 merges into lane 0 at the larger scale (an empty lane adds nothing), and the result
    is ``log(sum) + scale * ln 2``. NumPy's own ``exp`` and ``log`` take the terms' bits."""
    ln2 = math.log(2)
    exponents = np.where(np.abs(data) < ops.PLAIN_EXP, 0.0, np.rint(data / ln2))
    terms = np.exp(data - exponents * ln2).tolist()
    lanes: list[dict[int, tuple[float, int]]] = [{}, {}]
    rows = zip(terms, exponents.astype(int).tolist(), ids.tolist(), strict=True)
    for row, (term, e, g) in enumerate(rows):
        if 0 <= g < n:
            lane = lanes[(row // lane_rows) % 2]
            total, scale = lane.get(g, (0.0, e))
            if e > scale:
                total, scale = math.ldexp(total, scale - e), e
            lane[g] = (total + math.ldexp(term, e - scale), scale)
    sums, scales = np.zeros(n), np.zeros(n, np.int64)
    for g in range(n):
        parts = [lane[g] for lane in lanes if g in lane]
        top = max((scale for _, scale in parts), default=0)
        sums[g], scales[g] = sum(math.ldexp(total, scale - top) for total, scale in parts), top
    with np.errstate(divide="ignore"):
        result: np.ndarray = np.log(sums) + scales * ln2
    return result


@pytest.mark.usefixtures("short_lanes")
@pytest.mark.parametrize("width", [1, 2])
def test_logsumexp_follows_the_lane_rule_whatever_the_blocks(
    engine: str, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """logsumexp keeps two lanes like var/std (rows dealt 5 at a time here): each engine gives
    the written-out rule's bytes, folded whole or in blocks that cut the lanes' runs mid-way
    (numba: one thread per lane even for these few rows); a segment all in one lane merges
    the other, empty one exactly."""
    from segcli.engines import numba_engine

    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    rng = np.random.default_rng(22)
    ids = rng.integers(-1, 4, 300)
    ids[:5], ids[5:] = 4, np.where(ids[5:] == 4, 0, ids[5:])  # segment 4: lane 0's rows only
    ids[7] = 9  # past n: dropped
    # Sums near 1 (results near 0, where a sum's last bit shows); in segments 2 and 3 some
    # scaled values too (exponents near 940): every sum moved between scales stays a normal
    # float64, so the rule's moves are exact as the engines' are.
    data = rng.uniform(-4.5, -3.0, (300, width))
    scaled = (ids[:, None] >= 2) & (rng.random((300, width)) < 0.1)
    data += np.where(scaled, 650.0, 0.0)
    want = np.stack([lane_rule_logsumexp(data[:, c], ids, 6, 5) for c in range(width)], 1)
    one_lane = np.stack([lane_rule_logsumexp(data[:, c], ids, 6, 300) for c in range(width)], 1)
    assert (want[4] == one_lane[4]).all() and (want[5] == -np.inf).all()
    assert want.tobytes() != one_lane.tobytes()  # the case tells the lane rule apart
    reference = [[np.logaddexp.reduce(data[ids == g, c]) for c in range(width)] for g in range(4)]
    np.testing.assert_allclose(want[:4], reference, rtol=1e-14)
    impl = get_engine(engine)
    for cuts in ([], [3, 4, 7, 131, 299], list(range(7, 300, 7)), list(range(1, 300))):
        state = impl.new_state(ops.get_op("logsumexp"), 6, (width,), data.dtype)
        for start, stop in zip([0, *cuts], [*cuts, 300], strict=True):
            impl.fold(state, data[start:stop], ids[start:stop], sorted_ids=False)
        got = ops.finalize(state.to_host())
        assert got.tobytes() == want.tobytes(), cuts


def test_logsumexp_bytes_do_not_depend_on_where_blocks_cut(tmp_path: Path) -> None:
    """Values whose maxima arrive late, so the sums move scale many times, at every cut."""
    rng = np.random.default_rng(6)
    data = np.sort(rng.standard_normal(120) * 400)  # rising: each block moves the scale up
    data[::9] = -1e300
    ids = rng.integers(0, 3, 120)
    paths = save(tmp_path, data, ids)
    want = reduce(data, ids, 3, "logsumexp")
    np.testing.assert_allclose(
        want, [np.logaddexp.reduce(data[ids == s]) for s in range(3)], rtol=1e-14
    )
    for rows in (1, 5, 64):
        out = tmp_path / f"{rows}.npy"
        run = invoke("logsumexp", *paths, "-n", 3, "--chunk-rows", rows, "-q", "-o", out)
        assert run.exit_code == 0, run.stderr
        assert np.load(out).tobytes() == want.tobytes()
