"""``import segcli`` as a notebook or a pipeline calls it: the inputs a Python user passes
(lists, masked arrays, odd layouts), the errors they get, and what the package promises to
type checkers."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import segcli
from segcli.errors import EngineUnavailableError, InvalidInputError, UsageError

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_ships_py_typed_for_type_checkers() -> None:
    assert resources.files("segcli").joinpath("py.typed").is_file()
    assert 'segcli = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_reduce_arrays_takes_ddof_as_segment_reduce_does() -> None:
    data, ids = [1.0, 2.0, 4.0, 5.0], [0, 0, 0, 1]
    got = segcli.reduce_arrays(data, ids, op="var", ddof=1)
    np.testing.assert_allclose(got.result, [np.var([1, 2, 4], ddof=1), np.nan])
    assert got.result.tobytes() == segcli.segment_reduce(data, ids, op="var", ddof=1).tobytes()


def test_engine_dask_says_where_it_runs() -> None:
    with pytest.raises(EngineUnavailableError, match=r"--engine dask.*segcli\[dask\]"):
        segcli.segment_reduce([1.0], [0], engine="dask")


def test_a_ragged_list_is_an_input_error() -> None:
    with pytest.raises(InvalidInputError, match=r"^data: not an array"):
        segcli.segment_reduce([[1.0, 2.0], [3.0]], [0, 1])
    with pytest.raises(InvalidInputError, match=r"^segment_ids: not an array"):
        segcli.segment_reduce([1.0, 2.0], [[0, 1], [1]])


@pytest.mark.parametrize("ids", [[], ()], ids=["list", "tuple"])
def test_empty_python_ids_are_integers(ids: list[int]) -> None:
    got = segcli.segment_reduce(np.zeros(0, np.float32), ids, 3)
    assert got.dtype == np.float32 and got.tolist() == [0.0, 0.0, 0.0]
    assert segcli.segment_reduce([], ids).shape == (0,)


def test_masked_data_without_skipna_is_an_error_naming_the_first() -> None:
    data = np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[0, 0], [1, 0]])
    with pytest.raises(InvalidInputError) as caught:
        segcli.segment_reduce(data, [0, 1])
    assert str(caught.value) == (
        "data[1, 0] is null or masked (1 missing value); pass skipna=True to leave missing "
        "values out"
    )


@pytest.mark.parametrize("op", ["sum", "median", "quantile", "nunique", "max"])
def test_masked_floats_under_skipna_are_left_out_element_by_element(op: str) -> None:
    values = np.array([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0], [8.0, 80.0]])
    mask = np.array([[0, 1], [1, 0], [0, 0], [0, 0]], bool)
    ids = [0, 0, 0, 1]
    kw = {"q": 0.25} if op == "quantile" else {}
    got = segcli.segment_reduce(
        np.ma.masked_array(values, mask=mask), ids, op=op, skipna=True, **kw
    )
    as_nan = np.where(mask, np.nan, values)
    assert got.tobytes() == segcli.segment_reduce(as_nan, ids, op=op, skipna=True, **kw).tobytes()


def test_a_mask_hiding_nothing_is_plain_data() -> None:
    data = np.ma.masked_array([1.0, 2.0, 3.0])
    assert segcli.segment_reduce(data, [0, 0, 1]).tolist() == [3.0, 3.0]


def test_masked_ids_are_an_error_without_skipna() -> None:
    ids = np.ma.masked_array([0, 1, 1], mask=[0, 1, 0])
    with pytest.raises(InvalidInputError) as caught:
        segcli.segment_reduce([1.0, 2.0, 3.0], ids)
    assert str(caught.value) == (
        "segment_ids[1] is null or masked (1 missing id); pass skipna=True to drop their rows"
    )


@pytest.mark.parametrize("op", ["sum", "median"])
def test_masked_ids_under_skipna_drop_their_rows_as_null_ids(op: str) -> None:
    ids = np.ma.masked_array(np.array([0, 1, 1, 2], np.uint8), mask=[0, 1, 0, 0])
    got = segcli.reduce_arrays([1.0, 2.0, 3.0, 4.0], ids, op=op, skipna=True)
    assert got.result.tolist() == [1.0, 3.0, 4.0]
    assert got.null_ids == 1 and got.id_report.dropped_negative == 1
    assert got.counts.tolist() == [1, 1, 1]


def test_masked_sorted_ids_are_an_error_even_under_skipna() -> None:
    ids = np.ma.masked_array([0, 1, 1], mask=[0, 1, 0])
    with pytest.raises(InvalidInputError) as raised:
        segcli.segment_reduce([1.0, 2.0, 3.0], ids, sorted=True, skipna=True)
    assert str(raised.value) == (  # no file to name: not "segment_ids: segment_ids[1]"
        "segment_ids[1] is null (1 null id); ids under sorted=True cannot be null, as they "
        "cannot be negative"
    )


@pytest.mark.parametrize("n", [np.array(4), np.uint8(4), 4], ids=["0-d array", "uint8", "int"])
def test_num_segments_is_any_integer_scalar(n: object) -> None:
    assert segcli.segment_reduce([1.0, 2.0], [0, 1], n).tolist() == [1.0, 2.0, 0.0, 0.0]


@pytest.mark.parametrize("n", [np.array(True), np.array(4.0), np.array([4]), 4.0, True])
def test_num_segments_not_an_integer_is_an_error(n: object) -> None:
    with pytest.raises(InvalidInputError, match=r"^num_segments must be an integer, got "):
        segcli.segment_reduce([1.0, 2.0], [0, 1], n)


def test_an_op_that_is_no_name_lists_the_ops() -> None:
    with pytest.raises(UsageError, match=r"^unknown op \['sum'\] \(ops: sum, mean, "):
        segcli.segment_reduce([1.0], [0], op=["sum"])


def test_reduction_fields_are_as_documented() -> None:
    data = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, 4.0], [5.0, 6.0]])
    got = segcli.reduce_arrays(data, [0, 0, -1, 2], 4, "mean", skipna=True, engine="numpy")
    assert got.result.shape == (4, 2) and got.counts.tolist() == [2, 0, 1, 0]
    report = got.id_report
    assert (report.num_segments, report.inferred, report.rows) == (4, False, 4)
    assert (report.dropped_negative, report.dropped_beyond) == (1, 0)
    assert (got.engine, got.engine_reason) == ("numpy", "asked for")
    assert set(got.timings) == {"validate", "compute"} and got.empty_segments == 2
    for name in ("result", "counts", "id_report", "engine_reason", "timings"):
        assert f"``{name}``" in (segcli.Reduction.__doc__ or "")


@pytest.mark.parametrize("op", ["min", "argmax", "first", "sum"])
@pytest.mark.parametrize("engine", ["numpy", "numba"])
def test_big_endian_masked_ints_under_skipna(op: str, engine: str) -> None:
    values = np.arange(6)
    mask = [0, 1, 0, 0, 1, 0]
    ids = [0, 0, 1, 1, 2, 2]
    native = np.ma.masked_array(values.astype("<i4"), mask=mask)
    swapped = np.ma.masked_array(values.astype(">i4"), mask=mask)
    want = segcli.segment_reduce(native, ids, op=op, skipna=True, engine=engine)
    got = segcli.segment_reduce(swapped, ids, op=op, skipna=True, engine=engine)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_pyarrow_lists_and_decimals_are_named_with_what_to_do() -> None:
    """NumPy makes these object data; the error names what was given, as the CLI reads it."""
    import decimal

    import pyarrow as pa

    lists = "a pyarrow array of lists ({}), which NumPy makes object data; give the lists as an"
    for column in (
        pa.array([[1.0, 2.0], [3.0, 4.0]]),
        pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float64(), 2)),
        pa.chunked_array([pa.array([[1, 2]]), pa.array([[3, 4]])]),
    ):
        with pytest.raises(InvalidInputError) as raised:
            segcli.segment_reduce(column, [0, 1])
        assert str(raised.value).startswith("data: " + lists.format(column.type))
        assert segcli.segment_reduce(np.array(column.to_pylist()), [0, 1]).shape == (2, 2)
    decimals = pa.array([decimal.Decimal("1.5"), decimal.Decimal("2.5")])
    with pytest.raises(InvalidInputError) as raised:
        segcli.segment_reduce(decimals, [0, 1])
    assert str(raised.value) == (
        "data: a pyarrow decimal array (decimal128(2, 1)), which NumPy makes object data; "
        "cast it first (.cast(pyarrow.float64())), as the command line reads a decimal column "
        "as float64"
    )
    assert segcli.segment_reduce(decimals.cast(pa.float64()), [0, 1]).tolist() == [1.5, 2.5]
    with pytest.raises(InvalidInputError, match=r"^segment_ids: a pyarrow decimal array .*int64"):
        segcli.segment_reduce([1.0, 2.0], pa.array([decimal.Decimal("1"), decimal.Decimal("0")]))
    with pytest.raises(InvalidInputError, match=r"^data: a pyarrow array of type string, not a"):
        segcli.segment_reduce(pa.array(["a", "b"]), [0, 1])


def nullable_columns() -> list[tuple[str, object, object]]:
    """(name, int column [1, null, 3], ids [0, null, 1]) in each library a user holds them."""
    import pyarrow as pa

    def on_a_null_entry(values: list[int | None]) -> pa.DictionaryArray:
        # Row 1 points at the dictionary's null entry: its index is valid, its value null.
        return pa.DictionaryArray.from_arrays(pa.array([0, 1, 2]), pa.array(values))

    columns = [
        ("pyarrow", pa.array([1, None, 3]), pa.array([0, None, 1])),
        ("pyarrow chunked", pa.chunked_array([[1, None], [3]]), pa.chunked_array([[0], [None, 1]])),
        ("dictionary", pa.array([1, None, 3]).dictionary_encode(), pa.array([0, None, 1])),
        ("null entry", on_a_null_entry([1, None, 3]), on_a_null_entry([0, None, 1])),
    ]
    pd = pytest.importorskip("pandas")
    columns.append(
        (
            "pandas Int64",
            pd.Series([1, None, 3], dtype="Int64"),
            pd.Series([0, None, 1], dtype="Int64"),
        )
    )
    columns.append(  # a missing category's code is -1, which NumPy made NaN
        ("pandas category", pd.Categorical([1, None, 3]), pd.Series(pd.Categorical([0, None, 1])))
    )
    return columns


@pytest.mark.parametrize(
    "kind",
    range(6),
    ids=["pyarrow", "chunked", "dictionary", "null-entry", "pandas", "pandas-category"],
)
def test_nulls_of_pyarrow_and_pandas_are_missing_values(kind: int) -> None:
    """A dictionary array's row on a null entry is null too, as in a table column, and a
    pandas categorical's missing row (NumPy made either NaN, and the integers floats)."""
    name, data, ids = nullable_columns()[kind]
    with pytest.raises(InvalidInputError, match=r"^data\[1\] is null or masked \(1 missing"):
        segcli.segment_reduce(data, [0, 0, 1])
    with pytest.raises(InvalidInputError, match=r"^segment_ids\[1\] is null or masked"):
        segcli.segment_reduce([1.0, 2.0, 3.0], ids)
    for op in ("sum", "median"):
        got = segcli.segment_reduce(data, [0, 0, 1], op=op, skipna=True)
        want = segcli.segment_reduce(np.array([1, 3]), [0, 1], op=op)
        assert got.dtype == want.dtype and got.tolist() == want.tolist(), name
    dropped = segcli.reduce_arrays([1.0, 2.0, 3.0], ids, skipna=True)
    assert dropped.result.tolist() == [1.0, 3.0] and dropped.null_ids == 1


def test_completion_and_help_list_the_public_api() -> None:
    import pydoc

    assert set(segcli.__all__) <= set(dir(segcli))
    text = pydoc.render_doc(segcli, renderer=pydoc.plaintext)
    for name in ("segment_reduce(", "reduce_arrays(", "class Reduction"):
        assert name in text


@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("op", ["median", "quantile", "nunique"])
def test_masked_ints_with_inner_axes_under_skipna_for_sorting_ops(
    op: str, sorted_ids: bool
) -> None:
    """Each element's masked values are left out, as the NaN of float data are."""
    rng = np.random.default_rng(5)
    values = rng.integers(-9, 9, (40, 2, 3)).astype(np.int16)
    mask = rng.random(values.shape) < 0.3
    ids = rng.integers(0 if sorted_ids else -1, 7, 40)
    ids = np.sort(ids) if sorted_ids else ids
    kw = {"q": 0.3} if op == "quantile" else {}
    masked = np.ma.masked_array(values, mask=mask)
    got = segcli.segment_reduce(masked, ids, 8, op, sorted=sorted_ids, skipna=True, **kw)
    as_nan = np.where(mask, np.nan, values.astype(np.float64))
    want = segcli.segment_reduce(as_nan, ids, 8, op, sorted=sorted_ids, skipna=True, **kw)
    assert got.shape == (8, 2, 3)
    np.testing.assert_array_equal(got, want.astype(got.dtype))


@pytest.mark.parametrize(
    ("call", "said"),
    [
        ({"op": "quantile"}, "quantile needs q (a number from 0 to 1)"),
        ({"op": "sum", "q": 0.5}, "q applies to quantile only, not sum"),
        ({"op": "sum", "ddof": 1}, "ddof applies to var and std only, not sum"),
        ({"op": "sum", "fill": "x"}, "fill 'x' is not a number"),
        (
            {"op": "sum", "sorted": True, "ids": [1, 0]},
            "ids under sorted=True must be non-decreasing",
        ),
    ],
)
@pytest.mark.parametrize("function", [segcli.segment_reduce, segcli.reduce_arrays])
def test_library_errors_name_its_parameters_not_the_command_lines_options(call, said, function):
    """The checks are the CLI's; a library caller reads its own parameters' names, from
    reduce_arrays too."""
    call = dict(call)
    ids = call.pop("ids", [0, 1])
    with pytest.raises(segcli.SegcliError) as raised:
        function(np.array([1.0, 2.0]), np.array(ids), 2, **call)
    assert said in str(raised.value)
    assert "--" not in str(raised.value)


def test_the_engine_refusing_skipna_names_the_engine_parameter() -> None:
    with pytest.raises(EngineUnavailableError) as raised:
        segcli.segment_reduce([1.0], [0], engine="cupy", skipna=True)
    assert str(raised.value) == (
        "skipna=True is not supported by engine 'cupy' yet; use engine numpy or numba"
    )
