"""median, quantile and nunique against NumPy itself, one segment and one column at a time."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcli import holistic
from segcli.errors import InvalidInputError, SegcliError, UsageError
from segcli.holistic import SortedHolisticReducer, reduce_holistic

REAL = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]
QS = [0.0, 0.25, 0.5, 0.9, 1.0]


def result_dtype(op: str, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """SPEC's table, written out again so the module's own rule is not its own oracle."""
    if op == "nunique":
        return np.dtype("int64")
    if dtype.kind == "f":
        return dtype
    return np.dtype("float32" if dtype.name in ("int8", "int16", "uint8", "uint16") else "float64")


def one_segment(op: str, values: np.ndarray, q: float | None, skipna: bool) -> Any:
    """NumPy on one segment's values of one column; None when the segment is empty for it."""
    missing = np.isnan(values) if values.dtype.kind in "fc" else np.zeros(len(values), bool)
    if values.size == 0 or (skipna and missing.all()):
        return None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # NumPy's "invalid value" for inf - inf
        if op == "nunique":
            return len(np.unique(values[~missing] if skipna else values))
        if op == "median":
            return np.nanmedian(values) if skipna else np.median(values)
        if values.dtype.kind == "i":
            # NumPy subtracts neighbours in the data's dtype and wraps (int8 127 - -128);
            # int64 holds the difference of every narrower integer exactly.
            values = values.astype(np.int64)
        return np.nanquantile(values, q) if skipna else np.quantile(values, q)


def oracle(
    op: str,
    values: np.ndarray,
    ids: np.ndarray,
    n: int,
    *,
    q: float | None = None,
    skipna: bool = False,
    fill: Any = None,
) -> np.ndarray:
    out = np.full((n, values.shape[1]), 0 if fill is None else fill, result_dtype(op, values.dtype))
    for segment in range(n):
        for column in range(values.shape[1]):
            got = one_segment(op, values[ids == segment, column], q, skipna)
            if got is not None:
                out[segment, column] = got
    return out


def same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype, shape and values (NaN equal to NaN, -0.0 to 0.0, as NumPy's partition may
    pick either zero where the sort picks -0.0)."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want, strict=True)


def sample(dtype: str, rows: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Values with many ties, and for floats NaN, +-inf and both zeros."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random((rows, width)) < 0.5
    if kind in "iu":
        info = np.iinfo(dtype)
        pool = np.array(
            [info.min, info.min + 1, info.max - 1, info.max, 0, 1, 2, 3, 7, 100 % info.max],
            dtype=dtype,
        )
        if dtype == "int64":
            # np.quantile's int64 difference would wrap between the extremes (see above).
            pool = np.array([-(2**61), 2**53 + 1, 2**53 + 2, 2**62, 0, 1, -1, 5], dtype)
        return rng.choice(pool, size=(rows, width))
    pool = np.array([0.0, -0.0, 1.0, -2.5, 3.25, 1e4, -7.0, 0.5], dtype="float64")
    values = rng.choice(pool, size=(rows, width)) + rng.integers(0, 3, size=(rows, width))
    # Values whose sums and interpolations round, so the dtype of every step shows.
    rounding = rng.random((rows, width)) < 0.3
    values[rounding] = rng.standard_normal(rounding.sum()) * 10.0 ** rng.integers(-3, 6)
    special = rng.random((rows, width))
    values[special < 0.04] = np.nan
    values[(special >= 0.04) & (special < 0.06)] = np.inf
    values[(special >= 0.06) & (special < 0.08)] = -np.inf
    values[(special >= 0.08) & (special < 0.12)] = -0.0
    if kind == "c":
        imag = rng.choice(np.array([0.0, -0.0, 1.0, np.nan]), size=(rows, width))
        return (values + 1j * imag).astype(dtype)
    with np.errstate(over="ignore"):  # float16: large values become inf, also good data
        return values.astype(dtype)


def make(dtype: str, seed: int, rows: int = 80, width: int = 3, n: int = 9):
    rng = np.random.default_rng(seed)
    values = sample(dtype, rows, width, rng)
    # Segments 4 and n - 1 stay empty; the others get from one row to many.
    ids = rng.choice(np.array([0, 1, 1, 2, 2, 2, 3, 5, 5, 6, 7, 7, 7]), size=rows)
    ids[:3] = [0, 3, 6]
    return values, ids.astype(np.int64), n


@pytest.mark.parametrize("skipna", [False, True])
@pytest.mark.parametrize("dtype", REAL)
def test_median_is_numpys(dtype, skipna):
    values, ids, n = make(dtype, seed=1)
    got = reduce_holistic("median", values, ids, n, skipna=skipna)
    same(got, oracle("median", values, ids, n, skipna=skipna))


@pytest.mark.parametrize("skipna", [False, True])
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("dtype", REAL)
def test_quantile_is_numpys(dtype, q, skipna):
    values, ids, n = make(dtype, seed=2)
    got = reduce_holistic("quantile", values, ids, n, q=q, skipna=skipna)
    same(got, oracle("quantile", values, ids, n, q=q, skipna=skipna))


@pytest.mark.parametrize("skipna", [False, True])
@pytest.mark.parametrize("dtype", [*REAL, "bool", "complex64", "complex128"])
def test_nunique_is_numpys(dtype, skipna):
    values, ids, n = make(dtype, seed=3)
    got = reduce_holistic("nunique", values, ids, n, skipna=skipna)
    same(got, oracle("nunique", values, ids, n, skipna=skipna))


def test_nunique_counts_nan_once_and_signed_zeros_as_one():
    values = np.array([[np.nan], [-0.0], [0.0], [np.nan], [1.0], [-np.nan]])
    ids = np.zeros(6, np.int64)
    assert reduce_holistic("nunique", values, ids, 1)[0, 0] == 3
    assert reduce_holistic("nunique", values, ids, 1, skipna=True)[0, 0] == 2
    # Complex: any NaN part is the one NaN value, as in np.unique.
    z = np.array([[complex(np.nan, 1)], [complex(1, np.nan)], [complex(0, -0.0)], [0j]])
    assert reduce_holistic("nunique", z, np.zeros(4, np.int64), 1)[0, 0] == 2


def test_large_integers_follow_numpy_float64_math():
    big = np.array([[2**53 + 1], [2**53 + 2], [2**63 - 1], [2**63 - 2]], np.int64)
    ids = np.array([0, 0, 1, 1], np.int64)
    got = reduce_holistic("median", big, ids, 2)
    assert got.tolist() == [[np.median(big[:2])], [np.median(big[2:])]]
    top = np.array([[2**64 - 1], [2**64 - 3], [2**63 + 1]], np.uint64)
    for q in QS:
        got = reduce_holistic("quantile", top, np.zeros(3, np.int64), 1, q=q)
        assert got[0, 0] == np.quantile(top[:, 0], q)


def test_integer_quantile_does_not_wrap_where_numpy_does():
    # NumPy computes 127 - (-128) in int8 (-1) and gives 127.5; the exact answer is -0.5.
    values = np.array([[-128], [127]], np.int8)
    got = reduce_holistic("quantile", values, np.zeros(2, np.int64), 1, q=0.5)
    assert got.dtype == np.float32 and got[0, 0] == -0.5
    extremes = np.array([[-(2**63)], [2**63 - 1]], np.int64)
    assert reduce_holistic("quantile", extremes, np.zeros(2, np.int64), 1, q=0.5)[0, 0] == 0.0


def test_nan_propagates_without_skipna_and_is_left_out_with_it():
    values = np.array([[1.0], [np.nan], [3.0], [np.nan], [np.nan]], np.float32)
    ids = np.array([0, 0, 0, 1, 1], np.int64)
    plain = reduce_holistic("median", values, ids, 3)
    assert np.isnan(plain[0, 0]) and np.isnan(plain[1, 0]) and plain[2, 0] == 0
    skipped = reduce_holistic("median", values, ids, 3, skipna=True, fill=np.float32(-1))
    assert skipped.tolist() == [[2.0], [-1.0], [-1.0]]


@pytest.mark.parametrize(("op", "fill"), [("median", -9.5), ("quantile", 4.0), ("nunique", 7)])
def test_fill_goes_to_empty_segments_only(op, fill):
    values, ids, n = make("float64", seed=4)
    q = 0.25 if op == "quantile" else None
    fill_value = result_dtype(op, values.dtype).type(fill)
    got = reduce_holistic(op, values, ids, n, q=q, skipna=True, fill=fill_value)
    same(got, oracle(op, values, ids, n, q=q, skipna=True, fill=fill_value))
    assert (got[4] == fill).all() and (got[n - 1] == fill).all()


def test_no_rows_gives_the_fill_in_the_result_dtype():
    got = reduce_holistic("median", np.zeros((0, 2), np.int16), np.zeros(0, np.int64), 3)
    assert got.dtype == np.float32 and got.shape == (3, 2) and not got.any()
    got = reduce_holistic("nunique", np.zeros((0, 1), bool), np.zeros(0, np.int64), 0)
    assert got.shape == (0, 1) and got.dtype == np.int64


@pytest.mark.parametrize(("op", "q"), [("median", None), ("quantile", 0.9), ("nunique", None)])
def test_few_long_segments(op, q):
    # Far fewer groups than values: group sizes come from a search of the sorted keys.
    values, ids, n = make("float32", seed=8, rows=3000, width=2)
    same(reduce_holistic(op, values, ids, n, q=q), oracle(op, values, ids, n, q=q))


@pytest.mark.parametrize("pack_bits", [34, 24, 20, 8])
@pytest.mark.parametrize("op", ["median", "quantile", "nunique"])
def test_fallback_sorts_give_the_same_bytes(monkeypatch, op, pack_bits):
    # float32 keys and 27 groups need 37 bits. 34 and 24: median and quantile sort by the
    # keys' high bits and resolve ties when picking (nunique ranks); 20: ranks fit;
    # 8: nothing fits (lexsort).
    for dtype in ("float32", "int64", "complex128"):
        if dtype == "complex128" and op != "nunique":
            continue
        values, ids, n = make(dtype, seed=5)
        q = 0.9 if op == "quantile" else None
        packed = reduce_holistic(op, values, ids, n, q=q)
        monkeypatch.setattr(holistic, "_PACK_BITS", pack_bits)
        fallback = reduce_holistic(op, values, ids, n, q=q)
        monkeypatch.undo()
        assert fallback.tobytes() == packed.tobytes()


@pytest.mark.parametrize("op", ["median", "quantile", "nunique"])
def test_64_bit_values_in_a_narrow_range_pack_without_ranks(monkeypatch, op):
    def no_ranks(keys):
        raise AssertionError("ranked, not squeezed")

    monkeypatch.setattr(holistic, "_dense_ranks", no_ranks)
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 40, size=500)
    q = 0.9 if op == "quantile" else None
    # float64 values that were float32: the low 29 bits of every key are the same.
    values = rng.random((500, 2), dtype=np.float32).astype(np.float64)
    values[::7] = np.inf
    same(reduce_holistic(op, values, ids, 41, q=q), oracle(op, values, ids, 41, q=q))
    # Integers far from zero but close to each other.
    values = 10**15 + rng.integers(-(10**6), 10**6, size=(500, 2))
    same(reduce_holistic(op, values, ids, 41, q=q), oracle(op, values, ids, 41, q=q))


def streamed(op, values, ids, n, cuts, **kwargs) -> np.ndarray:
    reducer = SortedHolisticReducer(op, n, values.shape[1], values.dtype, **kwargs)
    for start, stop in zip([0, *cuts], [*cuts, len(ids)], strict=True):
        reducer.push(values[start:stop], ids[start:stop])
    return reducer.finish()


@pytest.mark.parametrize(
    ("op", "dtype", "kwargs"),
    [
        ("median", "float32", {}),
        ("median", "float16", {"skipna": True}),
        ("quantile", "int64", {"q": 0.9}),
        ("quantile", "float64", {"q": 0.25, "skipna": True, "fill": np.float64(-1)}),
        ("nunique", "complex64", {}),
        ("nunique", "float64", {"skipna": True}),
    ],
)
def test_sorted_stream_gives_the_in_memory_bytes(op, dtype, kwargs):
    values, ids, n = make(dtype, seed=6, rows=120)
    order = np.argsort(ids, kind="stable")
    values, ids = values[order], ids[order]
    want = reduce_holistic(op, values, ids, n, **kwargs)
    rng = np.random.default_rng(7)
    for _ in range(20):
        cuts = sorted(rng.choice(np.arange(1, len(ids)), size=rng.integers(0, 12), replace=False))
        got = streamed(op, values, ids, n, list(cuts), **kwargs)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    # One row per block, and one segment spanning every block.
    one = streamed(op, values, ids, n, list(range(1, len(ids))), **kwargs)
    assert one.tobytes() == want.tobytes()
    flat = streamed(op, values, np.full_like(ids, 2), n, [10, 50, 51], **kwargs)
    assert (
        flat.tobytes() == reduce_holistic(op, values, np.full_like(ids, 2), n, **kwargs).tobytes()
    )


def test_stream_refuses_a_block_of_the_wrong_shape():
    reducer = SortedHolisticReducer("nunique", 3, 2, np.dtype("int8"))
    with pytest.raises(InvalidInputError, match=r"needs values of shape \(3, 2\), got \(3, 1\)"):
        reducer.push(np.zeros((3, 1), np.int8), np.array([0, 1, 2]))


def test_stream_refuses_decreasing_ids():
    reducer = SortedHolisticReducer("median", 9, 1, np.dtype("float64"))
    reducer.push(np.ones((2, 1)), np.array([1, 3]))
    with pytest.raises(InvalidInputError, match=r"segment_ids\[2\] = 2 < segment_ids\[1\] = 3"):
        reducer.push(np.ones((1, 1)), np.array([2]))
    with pytest.raises(InvalidInputError, match=r"segment_ids\[4\] = 4 < segment_ids\[3\] = 5"):
        reducer.push(np.ones((3, 1)), np.array([3, 5, 4]))


@pytest.mark.parametrize(
    ("ids", "n", "message"),
    [
        ([0, 3, 1, 3], 3, r"segment_ids\[1\] = 3 is out of range \[0, 3\) \(2 ids out of range\)"),
        ([0, -1], 3, r"segment_ids\[1\] = -1 is out of range"),
        (np.array([2**64 - 1], np.uint64), 3, r"segment_ids\[0\] = 18446744073709551615 is out"),
        ([0.0], 3, "float64 ids are not integers"),
        ([], -1, "num_segments = -1 is negative"),
    ],
)
def test_ids_out_of_range_are_refused_not_misfiled(ids, n, message):
    ids = np.asarray(ids)
    values = np.ones((len(ids), 1))
    with pytest.raises(InvalidInputError, match=message):
        reduce_holistic("median", values, ids, n)
    with pytest.raises(InvalidInputError, match=message):
        SortedHolisticReducer("median", n, 1, values.dtype).push(values, ids)


@pytest.mark.parametrize(
    ("op", "dtype", "q", "error", "message"),
    [
        (
            "median",
            "complex64",
            None,
            InvalidInputError,
            "complex64 data is not supported by median",
        ),
        ("quantile", "complex128", 0.5, InvalidInputError, "not supported by quantile"),
        ("median", "bool", None, InvalidInputError, "bool data is not supported by median"),
        ("nunique", "object", None, InvalidInputError, "object data is not supported by nunique"),
        ("quantile", "float32", None, UsageError, "quantile needs --q"),
        ("quantile", "float32", 1.5, UsageError, r"--q 1.5 is outside \[0, 1\]"),
        ("quantile", "float32", -0.1, UsageError, r"--q -0.1 is outside"),
        ("quantile", "float32", float("nan"), UsageError, "--q nan is outside"),
        ("quantile", "float32", "half", UsageError, "--q 'half' is not a number"),
        ("median", "float32", 0.5, UsageError, "--q is only used by quantile"),
        ("mode", "float32", None, UsageError, "'mode' is not a holistic op"),
    ],
)
def test_refusals_name_the_op_or_the_option(op, dtype, q, error, message):
    values = np.zeros((2, 1), dtype)
    with pytest.raises(error, match=message) as caught:
        reduce_holistic(op, values, np.zeros(2, np.int64), 1, q=q)
    assert isinstance(caught.value, SegcliError)
    assert "\n" not in str(caught.value)
    with pytest.raises(error, match=message):
        SortedHolisticReducer(op, 1, 1, np.dtype(dtype), q=q)


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(["median", "quantile", "nunique"]),
    dtype=st.sampled_from(["float16", "float32", "float64", "int16", "uint64"]),
    q=st.sampled_from([*QS, 0.3, 0.77]),
    skipna=st.booleans(),
    rows=st.integers(0, 30),
    width=st.integers(1, 3),
    n=st.integers(0, 6),
    seed=st.integers(0, 2**32 - 1),
    cut_count=st.integers(0, 5),
)
def test_property_memory_and_stream_match_numpy(
    op, dtype, q, skipna, rows, width, n, seed, cut_count
):
    rng = np.random.default_rng(seed)
    values = sample(dtype, rows, width, rng)
    ids = np.sort(rng.integers(0, max(n, 1), size=rows if n else 0)).astype(np.int64)
    values = values[: len(ids)]
    kwargs: dict[str, Any] = {"skipna": skipna}
    if op == "quantile":
        kwargs["q"] = q
    before = values.copy()
    got = reduce_holistic(op, values, ids, n, **kwargs)
    np.testing.assert_array_equal(values, before, strict=True)  # the input is left alone
    same(got, oracle(op, values, ids, n, **kwargs))
    cuts = sorted(set(rng.integers(0, len(ids) + 1, size=cut_count).tolist()))
    assert streamed(op, values, ids, n, cuts, **kwargs).tobytes() == got.tobytes()
