"""One test per rule and example of SPEC.md, on every engine that runs here (the numba engine
over its common dtypes by default, every dtype in the full matrix: tests/matrix.py)."""

from __future__ import annotations

import numpy as np
import pytest

import segcli
from segcli.errors import InvalidInputError, SegcliError
from tests.matrix import default_run, numba_takes

FLT_MAX = float(np.finfo(np.float32).max)


def reduce(data, ids, n=None, op="sum", engine="numpy", **kwargs):
    return segcli.segment_reduce(data, ids, n, op, engine=engine, **kwargs)


# --- the worked examples -------------------------------------------------------------------

EXAMPLE_DATA = np.array([1, 2, 3, 4], dtype=np.float32)
EXAMPLE_IDS = np.array([0, 0, 2, 2])


#: SPEC's worked example, op by op.
SPEC_EXAMPLES = {
    "sum": [3, 0, 7, 0],
    "mean": [1.5, 0, 3.5, 0],
    "min": [1, FLT_MAX, 3, FLT_MAX],
    "max": [2, -FLT_MAX, 4, -FLT_MAX],
    "prod": [2, 1, 12, 1],
    "sqrt_n": [3 / np.sqrt(2), 0, 7 / np.sqrt(2), 0],
    "count": [2, 0, 2, 0],
    "var": [0.25, 0, 0.25, 0],
    "std": [0.5, 0, 0.5, 0],
    "argmin": [0, -1, 2, -1],
    "argmax": [1, -1, 3, -1],
    "first": [1, 0, 3, 0],
    "last": [2, 0, 4, 0],
    "any": [True, False, True, False],
    "all": [True, True, True, True],
    "logsumexp": [np.logaddexp(1, 2), -np.inf, np.logaddexp(3, 4), -np.inf],
}


def test_every_op_of_the_table_has_its_worked_example():
    assert set(SPEC_EXAMPLES) == {name for name, op in segcli.OPS.items() if not op.holistic}


@pytest.mark.parametrize(("op", "expected"), list(SPEC_EXAMPLES.items()))
@pytest.mark.parametrize("sorted_ids", [False, True])
def test_spec_examples(engine, op, expected, sorted_ids):
    result = reduce(EXAMPLE_DATA, EXAMPLE_IDS, 4, op, engine, sorted=sorted_ids)
    want = np.array(expected, dtype=segcli.OPS[op].out_dtype(np.dtype(np.float32)))
    assert result.dtype == want.dtype
    if op == "logsumexp":  # a logarithm: to within the float32 result's rounding
        np.testing.assert_allclose(result, want, rtol=1e-7)
    else:
        np.testing.assert_array_equal(result, want)


def test_multidimensional_ids_drop_negative_rows(engine):
    data = np.arange(1, 13).reshape(2, 3, 2)
    ids = np.array([[0, 1, 0], [2, -1, 1]])
    result = reduce(data, ids, 4, "sum", engine)
    np.testing.assert_array_equal(result, [[6, 8], [14, 16], [7, 8], [0, 0]])
    assert result.dtype == data.dtype


@pytest.mark.parametrize(
    ("dtype", "values", "op", "expected"),
    [
        (np.int32, [2147483647, 1], "sum", -2147483648),
        (np.uint8, [200, 100], "sum", 44),
        (np.int8, [16, 9], "prod", -112),
        (np.int64, [2**62, 2**62], "sum", -(2**63)),
        (np.uint64, [2**63, 2**63], "sum", 0),
    ],
)
def test_integers_wrap(engine, dtype, values, op, expected):
    result = reduce(np.array(values, dtype=dtype), [0, 0], 1, op, engine)
    assert result.dtype == dtype
    assert int(result[0]) == expected


# --- output dtypes and fills --------------------------------------------------------------

MEAN_DTYPES = [
    (np.float16, np.float16),
    (np.float32, np.float32),
    (np.float64, np.float64),
    (np.complex64, np.complex64),
    (np.complex128, np.complex128),
    (np.int8, np.float32),
    (np.int16, np.float32),
    (np.uint8, np.float32),
    (np.uint16, np.float32),
    (np.int32, np.float64),
    (np.int64, np.float64),
    (np.uint32, np.float64),
    (np.uint64, np.float64),
]


@pytest.mark.parametrize(("data_dtype", "out_dtype"), MEAN_DTYPES)
@pytest.mark.parametrize("op", ["mean", "sqrt_n"])
def test_mean_and_sqrt_n_output_dtype(engine, data_dtype, out_dtype, op):
    result = reduce(np.array([2, 4, 6], dtype=data_dtype), [0, 0, 1], 3, op, engine)
    assert result.dtype == out_dtype
    divisor = [2, 1, 1] if op == "mean" else [np.sqrt(2), 1, 1]
    np.testing.assert_allclose(result, np.array([6, 6, 0]) / divisor, rtol=1e-3)


REAL_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int64, np.uint8, np.uint64]


@pytest.mark.parametrize(
    ("dtype", "op"),
    [(d, op) for d in REAL_DTYPES for op in ("sum", "prod", "min", "max")]
    + [(np.complex64, "sum"), (np.complex64, "prod")],
)
def test_output_dtype_is_data_dtype(engine, dtype, op):
    assert reduce(np.ones(3, dtype=dtype), [0, 1, 1], 3, op, engine).dtype == dtype


@pytest.mark.parametrize(
    ("dtype", "min_fill", "max_fill"),
    [
        (np.float32, FLT_MAX, -FLT_MAX),
        (np.float16, 65504.0, -65504.0),
        (np.float64, np.finfo(np.float64).max, np.finfo(np.float64).min),
        (np.uint8, 255, 0),
        (np.int8, 127, -128),
        (np.int64, 2**63 - 1, -(2**63)),
        (np.uint64, 2**64 - 1, 0),
    ],
)
def test_min_max_fill_empty_segments_with_finite_extremes(engine, dtype, min_fill, max_fill):
    data = np.array([1], dtype=dtype)
    assert reduce(data, [0], 2, "min", engine)[1] == min_fill
    assert reduce(data, [0], 2, "max", engine)[1] == max_fill


def test_count_is_int64_rows_per_segment(engine):
    result = reduce(np.zeros((5, 3), np.float32), [1, 1, 0, 3, 1], 5, "count", engine)
    assert result.dtype == np.int64
    np.testing.assert_array_equal(result, [1, 3, 0, 1, 0])


def test_fill_overrides_empty_segments(engine):
    result = reduce(EXAMPLE_DATA, EXAMPLE_IDS, 4, "mean", engine, fill="nan")
    np.testing.assert_array_equal(result, [1.5, np.nan, 3.5, np.nan])


def test_fill_that_does_not_fit_the_dtype_is_an_error():
    with pytest.raises(SegcliError, match="cannot be stored in the int32 result"):
        reduce(np.array([1], np.int32), [0], 2, "sum", fill="nan")


# --- numerics --------------------------------------------------------------------------


def test_nan_propagates_in_min_and_max_whatever_the_order(engine):
    for values in ([1, np.nan, 3], [1, 3, np.nan], [np.nan, 1, 3]):
        data = np.array(values, dtype=np.float32)
        assert np.isnan(reduce(data, [0, 0, 0], 1, "min", engine)[0])
        assert np.isnan(reduce(data, [0, 0, 0], 1, "max", engine)[0])


def test_min_of_only_inf_is_inf_not_the_fill(engine):
    result = reduce(np.array([np.inf, np.inf], np.float32), [0, 0], 2, "min", engine)
    assert result[0] == np.inf and result[1] == FLT_MAX
    result = reduce(np.array([-np.inf], np.float32), [0], 2, "max", engine)
    assert result[0] == -np.inf and result[1] == -FLT_MAX


def test_integer_mean_does_not_wrap(engine):
    result = reduce(np.array([100, 100], np.int8), [0, 0], 1, "mean", engine)
    assert result.dtype == np.float32 and result[0] == 100
    big = np.array([2**62, 2**62, 2**62], np.int64)
    assert reduce(big, [0, 0, 0], 1, "mean", engine)[0] == float(2**62)


def test_float16_sum_accumulates_wide(engine):
    result = reduce(np.ones(3000, np.float16), np.zeros(3000, np.int32), 1, "sum", engine)
    assert result.dtype == np.float16 and result[0] == 3000


def test_results_are_deterministic(engine):
    rng = np.random.default_rng(0)
    data = rng.normal(size=20_000).astype(np.float32)
    ids = rng.integers(0, 50, 20_000)
    first = reduce(data, ids, 50, "sum", engine)
    assert first.tobytes() == reduce(data, ids, 50, "sum", engine).tobytes()


def test_complex_mean_and_sqrt_n(engine):
    data = np.array([1 + 1j, 3 - 1j, 2j], np.complex64)
    np.testing.assert_allclose(reduce(data, [0, 0, 1], 2, "mean", engine), [2 + 0j, 2j])
    np.testing.assert_allclose(
        reduce(data, [0, 0, 1], 2, "sqrt_n", engine), [(4 + 0j) / np.sqrt(2), 2j], rtol=1e-6
    )


# --- families ----------------------------------------------------------------------------


def test_unsorted_negative_ids_are_dropped(engine):
    reduction = segcli.reduce_arrays([1.0, 2.0, 3.0], [-1, 0, -5], 1, "sum", engine=engine)
    assert reduction.result.tolist() == [2.0]
    assert reduction.id_report.dropped_negative == 2


def test_sorted_ids_beyond_n_are_dropped(engine):
    reduction = segcli.reduce_arrays(
        [1.0, 2.0, 3.0, 4.0], [0, 1, 2, 5], 2, "sum", sorted=True, engine=engine
    )
    assert reduction.result.tolist() == [1.0, 2.0]
    assert reduction.id_report.dropped_beyond == 2


def test_n_inferred_unsorted_is_max_nonnegative_plus_one():
    reduction = segcli.reduce_arrays([1.0, 2.0, 3.0], [-1, 4, 2])
    assert reduction.id_report.num_segments == 5 and reduction.id_report.inferred
    assert segcli.segment_reduce([1.0], [-3]).shape == (0,)


def test_n_inferred_sorted_is_last_id_plus_one():
    assert segcli.segment_reduce([1.0, 2.0], [0, 3], sorted=True).shape == (4,)
    assert segcli.segment_reduce(np.zeros(0), np.zeros(0, np.int32), sorted=True).shape == (0,)


def test_output_shape_keeps_inner_dimensions(engine):
    data = np.ones((4, 2, 3), np.float32)
    assert reduce(data, [0, 1, 1, 0], 3, "max", engine).shape == (3, 2, 3)
    assert reduce(np.ones((4, 0)), [0, 1, 1, 0], 3, "sum", engine).shape == (3, 0)


# --- errors ------------------------------------------------------------------------------


def error_of(*args, **kwargs) -> str:
    with pytest.raises(InvalidInputError) as caught:
        segcli.segment_reduce(*args, **kwargs)
    return str(caught.value)


def test_unsorted_id_out_of_range_names_first_position_and_count(engine):
    message = error_of([1.0] * 5, [0, 1, 5, 7, 4], 4, "sum", engine=engine)
    assert message == "segment_ids[2] = 5 is out of range [0, 4) (3 ids out of range)"


def test_out_of_range_among_dropped_negative_ids_is_still_found(engine):
    message = error_of([1.0] * 6, [-1, 0, 9, -2, 4, 4], 4, "sum", engine=engine)
    assert message == "segment_ids[2] = 9 is out of range [0, 4) (3 ids out of range)"


def test_out_of_range_in_multidimensional_ids_gives_the_index():
    message = error_of(np.ones((2, 3)), [[0, 1, 2], [9, 0, 0]], 3)
    assert message == "segment_ids[1, 0] = 9 is out of range [0, 3) (1 id out of range)"


def test_sorted_decrease_is_an_error():
    message = error_of([1.0] * 5, [0, 1, 2, 1, 0], 4, "sum", sorted=True)
    assert message == (
        "segment_ids[3] = 1 < segment_ids[2] = 2: ids under sorted=True must be non-decreasing "
        "(2 decreases)"
    )


def test_sorted_negative_id_is_an_error():
    message = error_of([1.0] * 3, [-1, 0, 0], 4, sorted=True)
    assert (
        message
        == "segment_ids[0] = -1 is negative; ids under sorted=True must be >= 0 (1 negative id)"
    )


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        (
            [0, 2, 1, -1, 3],
            "segment_ids[2] = 1 < segment_ids[1] = 2: ids under sorted=True must be "
            "non-decreasing (2 decreases)",
        ),
        (
            [0, 2, -1, 1, 0],
            "segment_ids[2] = -1 is negative; ids under sorted=True must be >= 0 (1 negative id)",
        ),
    ],
)
def test_sorted_error_names_the_first_offending_position(engine, ids, expected):
    # A decrease before the first negative id is the first offender, whichever rule it breaks.
    assert error_of([1.0] * 5, ids, None, "sum", engine=engine, sorted=True) == expected


def test_sorted_needs_one_dimensional_ids_of_full_length():
    assert "sorted=True needs 1-D segment_ids" in error_of(
        np.ones((2, 2)), [[0, 0], [1, 1]], sorted=True
    )
    assert "sorted=True needs len(segment_ids) == data.shape[0]" in error_of(
        np.ones(3), [0, 0], sorted=True
    )


def test_ids_shape_must_be_a_prefix_of_data_shape():
    message = error_of(np.ones((3, 2)), [[0, 1], [0, 1], [0, 1], [0, 1]])
    assert message == "segment_ids shape (4, 2) is not a prefix of data shape (3, 2)"


@pytest.mark.parametrize("op", [name for name, op in segcli.OPS.items() if op.holistic])
def test_big_endian_data_gives_the_native_result_for_holistic_ops(op):
    # As for the folded ops (tests/test_engines.py): the result of the values read from a file.
    data = np.array([3.0, 1.0, 2.0], ">f8")
    want = reduce(data.astype(np.float64), [0, 1, 1], 2, op, q=0.5 if op == "quantile" else None)
    got = reduce(data, [0, 1, 1], 2, op, q=0.5 if op == "quantile" else None)
    assert got.dtype == want.dtype and got.dtype.isnative
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("op", list(segcli.OPS))
@pytest.mark.parametrize("dtype", [bool, object])
def test_bool_and_object_data_are_errors(dtype, op):
    if dtype is bool and op in ("any", "all", "count", "nunique"):
        pytest.skip("any, all, count and nunique take bool data (test_any_all_count_take_bool)")
    message = error_of(np.array([1, 0], dtype=dtype), [0, 0], op=op)
    assert f"{np.dtype(dtype)} data is not supported by {op} (accepted:" in message


def test_any_all_count_take_bool(engine):
    data, ids = np.array([True, False, False, False, True]), [0, 0, 1, 1, 2]
    np.testing.assert_array_equal(reduce(data, ids, 4, "any", engine), [1, 0, 1, 0])
    np.testing.assert_array_equal(reduce(data, ids, 4, "all", engine), [0, 0, 1, 1])
    np.testing.assert_array_equal(reduce(data, ids, 4, "count", engine), [2, 2, 1, 0])


def test_ops_that_order_or_take_logs_refuse_complex():
    refusing = [name for name, op in segcli.OPS.items() if not op.accepts_complex]
    holistic = ["median", "quantile"]
    assert refusing == ["min", "max", "var", "std", "argmin", "argmax", "logsumexp", *holistic]


@pytest.mark.parametrize("op", ["min", "max", "var", "std", "argmin", "argmax", "logsumexp"])
def test_min_max_refuse_complex(op):
    message = error_of(np.ones(2, np.complex64), [0, 0], op=op)
    assert "complex64 data is not supported by " + op in message
    assert "complex" not in message.split("accepted:")[1]


@pytest.mark.parametrize("ids", [[0.0, 1.0], [True, False]])
def test_float_and_bool_ids_are_errors(ids):
    assert "segment_ids must be integers" in error_of([1.0, 2.0], np.array(ids))


@pytest.mark.parametrize(
    ("ids", "said"),
    [
        ([0, np.nan, np.inf], "segment_ids[1] = nan is not a number (1 such id)"),
        ([0, np.inf, -np.inf, np.nan], "segment_ids[1] = inf is infinite (2 such ids)"),
        ([0, 2.0**70, 1.5, 2.5], "segment_ids[1] = 1.1805916207174113e+21 does not fit in int64"),
        ([0, 1.5, 2.0**70], "segment_ids[1] = 1.5 is not a whole number (1 such id)"),
    ],
)
def test_float_ids_name_the_first_offender_of_any_kind(ids, said):
    """The earliest offending id is named (its kind counted), whichever kind it is."""
    assert said in error_of(np.ones(len(ids)), np.array(ids))


@default_run(lambda engine, ids_dtype: numba_takes(engine, ids_dtype, ids=True))
@pytest.mark.parametrize(
    "ids_dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.int64, np.uint64]
)
def test_ids_of_any_integer_width(engine, ids_dtype):
    ids = np.array([0, 2, 2], dtype=ids_dtype)
    result = reduce(np.array([1.0, 2.0, 4.0]), ids, 3, "sum", engine)
    np.testing.assert_array_equal(result, [1, 0, 6])


def test_uint64_ids_compare_by_value_never_wrap():
    message = error_of([1.0], np.array([2**64 - 1], np.uint64), 4)
    assert message == (f"segment_ids[0] = {2**64 - 1} is out of range [0, 4) (1 id out of range)")


def test_negative_n_is_an_error():
    assert error_of([1.0], [0], -1) == "num_segments = -1 must not be negative"


def test_n_too_large_for_memory_says_the_bytes():
    message = error_of([1.0], [0], 10**15)
    assert message.startswith("num_segments = 1000000000000000: the output needs ")
    assert "bytes" in message and "memory available" in message


def test_an_invalid_id_is_reported_before_n_too_large_for_memory():
    message = error_of([1.0], np.array([2**64 - 1], np.uint64), 10**15)
    assert message.startswith(f"segment_ids[0] = {2**64 - 1} is out of range")


def test_validation_runs_even_when_data_is_empty(engine):
    # TF skips the id check for zero-element data; SPEC does not.
    message = error_of(np.zeros((2, 0)), [0, 7], 4, engine=engine)
    assert "segment_ids[1] = 7 is out of range" in message
