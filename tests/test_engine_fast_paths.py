"""The NumPy engine's fast paths: what they rely on, and that they give the reference's bytes.

Speed itself is measured in ``benchmarks/``, never asserted here; these tests pin the
conditions the fast paths need and compare them with the plain ``ufunc.at`` folds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import segcli
from segcli import ops
from segcli.engines import numpy_engine
from segcli.engines.base import Engine
from tests.reference import reference_reduce

#: An equal float32 dtype that is not NumPy's own descriptor object, as the streaming readers
#: build theirs (``header.dtype.newbyteorder("=")``).
ODD_FLOAT32 = np.dtype("<f4").newbyteorder("=")


def test_the_odd_dtype_is_a_distinct_descriptor() -> None:
    assert np.dtype(np.float32) == ODD_FLOAT32
    assert ODD_FLOAT32 is not np.dtype(np.float32)


def test_canonical_views_with_numpys_own_descriptor() -> None:
    array = np.zeros(4, ODD_FLOAT32)
    view = numpy_engine._canonical(array)
    assert view.dtype is np.dtype(np.float32)
    view[1] = 5
    assert array[1] == 5  # a view: the fold's writes land in the state


def test_states_of_odd_descriptors_fold_through_own_ones() -> None:
    """A streamed float32 block's state (odd descriptors) folds as any other, and the joint
    folds see NumPy's own descriptors."""
    state = ops.new_state(ops.OPS["min"], 3, (), ODD_FLOAT32)
    assert state.acc.dtype is not np.dtype(np.float32)
    data = np.array([[3.0], [1.0], [2.0], [-1.0]], ODD_FLOAT32)
    numpy_engine.ENGINE.fold(state, data, np.array([0, 1, 1, 2]), sorted_ids=False)
    np.testing.assert_array_equal(ops.finalize(state), [3.0, 1.0, -1.0])
    views = numpy_engine.flat_intermediates(ops.new_state(ops.OPS["argmin"], 3, (), ODD_FLOAT32))
    assert all(view.dtype is np.dtype(view.dtype.type) for view in views.values())


def _numba_available() -> bool:
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


needs_numba = pytest.mark.skipif(not _numba_available(), reason="numba is not installed")


def _reference_bytes(data: np.ndarray, ids: np.ndarray, n: int, op: str) -> bytes:
    return bytes(segcli.segment_reduce(data, ids, n, op, engine="numpy").tobytes())


@needs_numba
def test_numba_folds_logsumexp_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """logsumexp has compiled kernels (it took the NumPy engine's fold before), with the
    NumPy engine's bytes, also over values far apart and values left out of the scaled sum."""
    from segcli.engines import numba_engine

    rng = np.random.default_rng(2)
    data = rng.choice([0.0, -1.0, 700.0, -745.0, -1000.0, 2.0**59, np.inf, -np.inf], 3000)
    data[::7] = rng.standard_normal(data[::7].size) * 30
    ids = rng.integers(-1, 9, 3000)
    want = _reference_bytes(data, ids, 9, "logsumexp")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the NumPy engine's fold ran")

    monkeypatch.setattr(numpy_engine.ENGINE, "fold_block", refuse)
    monkeypatch.setattr(numba_engine, "_EXP_CHUNK_ELEMENTS", 256)  # many chunks, both buffers
    monkeypatch.setattr(numba_engine, "THREADS", 2)
    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    got = segcli.segment_reduce(data, ids, 9, "logsumexp", engine="numba")
    assert got.tobytes() == want


def test_any_and_all_set_flags_without_ufunc_at(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    data = rng.choice([0.0, 1.0, np.nan], (500, 2))
    ids = rng.integers(-1, 6, 500)
    want = {op: _reference_bytes(data, ids, 6, op) for op in ("any", "all")}

    def refuse(*args: object) -> None:
        raise AssertionError("ufunc.at folded a logical op")

    monkeypatch.setattr(numpy_engine, "_fold_in_order", refuse)
    for op in ("any", "all"):
        got = segcli.segment_reduce(data, ids, 6, op, engine="numpy")
        assert got.tobytes() == want[op]
        np.testing.assert_array_equal(got, reference_reduce(data, ids, 6, op))


def test_first_and_last_stop_once_every_segment_is_met(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three segments over 100 chunks: the picks are looked up in the first (last) chunks
    only, not once per chunk."""
    monkeypatch.setattr(numpy_engine, "_CHUNK_ELEMENTS", 100)
    calls = []
    first_occurrences = numpy_engine._first_occurrences

    def counted(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        calls.append(keys.size)
        return first_occurrences(keys, size)

    monkeypatch.setattr(numpy_engine, "_first_occurrences", counted)
    data = np.arange(10_000, dtype=np.float32)
    ids = np.arange(10_000) % 3
    for op in ("first", "last"):
        calls.clear()
        got = segcli.segment_reduce(data, ids, 3, op, engine="numpy")
        np.testing.assert_array_equal(got, reference_reduce(data, ids, 3, op))
        assert len(calls) == 1, op


def test_argmin_looks_up_only_the_candidate_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second pass compares each value with the least extreme of the extremes and looks
    up the ids of the few rows at or beyond it, not of every row."""
    looked_up = []
    minimum_at = np.minimum.at

    class Spy:
        @staticmethod
        def at(target: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
            if target.dtype == np.int64:
                looked_up.append(index.size)
            minimum_at(target, index, values)

    rng = np.random.default_rng(4)
    data = rng.standard_normal(20_000).astype(np.float32)
    ids = rng.integers(0, 10, 20_000)
    want = reference_reduce(data, ids, 10, "argmin")
    monkeypatch.setattr(np, "minimum", Spy)  # the engine's second pass calls np.minimum.at
    try:
        got = segcli.segment_reduce(data, ids, 10, "argmin", engine="numpy")
    finally:
        monkeypatch.undo()
    np.testing.assert_array_equal(got, want)
    assert sum(looked_up) <= 100


def test_shifted_sums_keep_a_float_folds_nan() -> None:
    """Of two NaNs the float fold keeps the sum's (its first operand); a complex ``add.at``
    keeps the value's in the imaginary part, so chunks with NaN fold the two sums apart."""
    negative_nan = -np.abs(np.float64(np.nan))
    data = np.array([[1.0], [np.nan], [negative_nan], [2.0]])
    ids = np.zeros(4, np.int64)
    state = ops.new_state(ops.OPS["var"], 1, (), data.dtype)
    numpy_engine.ENGINE.fold(state, data, ids, sorted_ids=False)
    shifted = data[:, 0] - data[0, 0]
    squares = np.zeros(1)
    np.add.at(squares, ids, shifted * shifted)  # the float fold, in row order
    assert state.arrays["shifted_squares"][0].tobytes() == squares.tobytes()
    assert np.signbit(squares[0]) != np.signbit(shifted[2] * shifted[2])  # the case that differs


def test_watched_shifted_sums_give_the_bits_of_checked_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With few sums, a chunk folds in one complex ``add.at`` and the sums are looked at after
    it, not the values before it: a NaN met in a later chunk rolls that chunk back, and the
    lane folds on part by part. The bits are those of checking every chunk's values first:
    lane 0 meets a NaN, then (past the watch) a negative NaN in the same segment, whose
    squares a complex add would sum the other way; lane 1 sums inf and -inf to NaN."""
    rows = 4 * ops.LANE_ROWS + 100  # lane 0: rows 0-65535, 131072-196607 and the last 100
    rng = np.random.default_rng(5)
    data = rng.standard_normal((rows, 1))
    ids = rng.integers(0, 8, rows)
    nan_rows, inf_rows = [140_000, 262_200], [70_000, 200_000]
    data[nan_rows, 0] = [np.nan, -np.abs(np.float64(np.nan))]
    data[inf_rows, 0] = [np.inf, -np.inf]
    ids[nan_rows], ids[inf_rows] = 3, 5
    calls: list[int] = []
    add_terms = numpy_engine._add_terms

    def counted_add_terms(*args: object) -> None:
        calls.append(1)
        add_terms(*args)  # type: ignore[arg-type]

    def folded() -> tuple[bytes, bytes]:
        calls.clear()
        state = ops.new_state(ops.OPS["var"], 8, (), data.dtype)
        numpy_engine.ENGINE.fold(state, data, ids, sorted_ids=False)
        return state.arrays["shifted_sum"].tobytes(), state.arrays["shifted_squares"].tobytes()

    monkeypatch.setattr(numpy_engine, "_add_terms", counted_add_terms)
    watched, watched_calls = folded(), len(calls)
    monkeypatch.setattr(numpy_engine, "_WATCHED_SUMS_PER_CHUNK", rows)  # never watched
    checked = folded()
    assert watched == checked
    assert 0 < watched_calls < len(calls)  # the watch ended in both lanes, not at the start
    squares = np.frombuffer(checked[1]).reshape(2, 8)
    assert np.isnan(squares[0, 3]) and not np.signbit(squares[0, 3])  # the sum's NaN kept
    assert np.isnan(np.frombuffer(checked[0]).reshape(2, 8)[1, 5])


# --- logsumexp: plain values (|x| < ops.PLAIN_EXP) as exp(x) at scale 0 ------------------------


def _across_the_plain_limit(width: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose segments mix plain values with values just past the limit on either side,
    far past it, and left out of the sum; some segments hold one kind only."""
    limit = ops.PLAIN_EXP
    near = [np.nextafter(limit, 0), limit, -limit, np.nextafter(-limit, 0)]
    kinds = [
        [0.5, -2.0, 3.25, 639.0],  # plain only
        [1.0, -1.0, *near, 700.0, 1000.0],  # plain and past the limit, up
        [-700.0, -1000.0, -limit],  # past the limit, down only
        [-1000.0, -1.0, 2.0, 800.0],  # a scale below 0, then 0, then above
        [*near, -745.5, np.nan, np.inf, -np.inf, 2.0**60],  # and values left out
        [-np.inf, -(2.0**60)],  # left out only: the max is the answer
    ]
    rng = np.random.default_rng(12)
    ids = rng.integers(-1, len(kinds), 80)
    data = np.zeros((ids.size, width))
    for s, values in enumerate(kinds):
        rows = np.flatnonzero(ids == s)
        data[rows] = rng.choice(values, (rows.size, width))
    data[:24] = rng.choice(kinds[0], (24, width))  # a plain start: every state at scale 0
    data[24:][ids[24:] == -1] = 1e6  # dropped rows, never folded
    return data, ids


def _fold_in_blocks(engine: Engine, data: np.ndarray, ids: np.ndarray, size: int) -> bytes:
    state = ops.new_state(ops.OPS["logsumexp"], 6, data.shape[1:], data.dtype)
    for start in range(0, ids.size, size):
        block = slice(start, start + size)
        engine.fold(state, data[block], ids[block], sorted_ids=False)
    return bytes(ops.finalize(state).tobytes())


@pytest.mark.parametrize("width", [1, 2])
def test_logsumexp_bytes_across_the_plain_limit_whatever_the_blocks(width: int) -> None:
    data, ids = _across_the_plain_limit(width)
    want = _fold_in_blocks(numpy_engine.ENGINE, data, ids, ids.size)
    for size in range(1, ids.size):
        assert _fold_in_blocks(numpy_engine.ENGINE, data, ids, size) == want, size
    got = np.frombuffer(want).reshape(6, width)
    reference = reference_reduce(data, ids, 6, "logsumexp")
    np.testing.assert_allclose(got, reference, rtol=1e-14)


@pytest.mark.parametrize("width", [1, 2])
def test_logsumexp_plain_blocks_take_one_pass_with_the_two_pass_bytes(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """A block of plain values into a state at scale 0 adds exp(x) in one pass: the very
    terms the two passes add, in the same order."""
    rng = np.random.default_rng(4)
    data = (rng.standard_normal((5000, width)) * 200).clip(-639, 639)
    ids = rng.integers(-1, 6, 5000)
    with monkeypatch.context() as forced:
        forced.setattr(numpy_engine, "_all_plain", lambda data: False)
        two_passes = _fold_in_blocks(numpy_engine.ENGINE, data, ids, 1000)

    def refuse(*args: object) -> None:
        raise AssertionError("a plain block took two passes")

    monkeypatch.setattr(numpy_engine, "_fold_scaled", refuse)
    assert _fold_in_blocks(numpy_engine.ENGINE, data, ids, 1000) == two_passes


@needs_numba
@pytest.mark.parametrize("lane_rows", [ops.LANE_ROWS, 5], ids=["one-lane", "short-lanes"])
@pytest.mark.parametrize("width", [1, 2])
def test_numba_logsumexp_across_the_plain_limit(
    monkeypatch: pytest.MonkeyPatch, width: int, lane_rows: int
) -> None:
    """Plain chunks and others, folded on two threads, in blocks of every size: the NumPy
    engine's bytes. With rows of both lanes in a block, one thread per lane, each taking the
    exp of its own chunks (no second thread preparing them)."""
    from segcli.engines import numba_engine

    monkeypatch.setattr(ops, "LANE_ROWS", lane_rows)
    data, ids = _across_the_plain_limit(width)
    want = _fold_in_blocks(numpy_engine.ENGINE, data, ids, ids.size)
    monkeypatch.setattr(numba_engine, "THREADS", 2)
    monkeypatch.setattr(numba_engine, "PARALLEL_MIN_ELEMENTS", 1)
    prepared_aside = []
    fold_rows = numba_engine._fold_logsumexp_rows

    def spy(*args: Any, together: bool) -> None:
        prepared_aside.append(together)
        fold_rows(*args, together=together)

    monkeypatch.setattr(numba_engine, "_fold_logsumexp_rows", spy)
    for chunk in (1, 4, 16):
        monkeypatch.setattr(numba_engine, "_EXP_CHUNK_ELEMENTS", chunk)
        for size in (1, 3, 7, ids.size):
            assert _fold_in_blocks(numba_engine.ENGINE, data, ids, size) == want, (chunk, size)
    # One lane: the next chunk prepared aside; two lanes in a block: never.
    assert all(prepared_aside) == (lane_rows > ids.size)
    assert any(prepared_aside)


def test_logsumexp_a_segment_off_scale_0_keeps_the_others_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a value past the limit, only its segment's rows of a plain block take two passes."""
    rng = np.random.default_rng(6)
    data = rng.standard_normal((3000, 1))
    data[0] = 1000.0
    ids = rng.integers(-1, 5, 3000)
    ids[0] = 3
    want = _fold_in_blocks(numpy_engine.ENGINE, data, ids, ids.size)
    seen: list[np.ndarray] = []
    two_passes = numpy_engine._fold_scaled

    def spy(block: numpy_engine._JointBlock, arrays: dict[str, np.ndarray]) -> None:
        seen.append(block.ids)
        two_passes(block, arrays)

    monkeypatch.setattr(numpy_engine, "_fold_scaled", spy)
    assert _fold_in_blocks(numpy_engine.ENGINE, data, ids, 1000) == want
    assert len(seen) == 3 and seen[0].size == 1000  # the first block holds the 1000.0
    assert all((later == 3).all() and later.size for later in seen[1:])
