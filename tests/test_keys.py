"""The key encoder behind ``--by``, checked against pandas groupby (the reference here).

Each case encodes a table block by block, reduces a value column with ``segment_reduce`` by the
ids, reorders by ``finish().order`` and compares keys, sums and counts with pandas'
``groupby(sort=True, dropna=...)`` on the same rows.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import segcli
from segcli.errors import InvalidInputError, ReadError, UsageError
from segcli.keys import MISSING, KeyEncoder, KeyTable
from segcli.keys.values import UNKNOWN

pd = pytest.importorskip("pandas")

ROWS = 40
BLOCK_SIZES = [1, 3, 7, None]  # None: the whole table as one block


@pytest.fixture(autouse=True, params=["grid", "per-row"])
def combining(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case twice: the small blocks here always take the grid of dictionary slots, so
    the per-row combination that large grids take is forced in the second run."""
    if request.param == "per-row":
        monkeypatch.setattr(segcli.keys, "_grid_pays", lambda sizes, rows: False)


# --- helpers -----------------------------------------------------------------------------------


def blocks_of(table: pa.Table, size: int | None) -> list[pa.Table]:
    if size is None:
        return [table]
    return [table.slice(start, size) for start in range(0, table.num_rows, size)]


def encode(encoder: KeyEncoder, blocks: list[Any]) -> np.ndarray:
    parts = [encoder.encode(block) for block in blocks]
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def reduce_by(ids: np.ndarray, values: np.ndarray, keys: KeyTable, n: int) -> tuple[Any, Any]:
    sums = segcli.segment_reduce(values, ids, n, op="sum", engine="numpy")
    counts = segcli.segment_reduce(values, ids, n, op="count", engine="numpy")
    return sums[keys.order], counts[keys.order]


def run(
    table: pa.Table, by: list[str], size: int | None, **options: Any
) -> tuple[KeyTable, np.ndarray, np.ndarray, KeyEncoder]:
    encoder = KeyEncoder(by, **options)
    ids = encode(encoder, blocks_of(table, size))
    keys = encoder.finish()
    sums, counts = reduce_by(ids, np.asarray(table.column("v")), keys, encoder.n_groups)
    return keys, sums, counts, encoder


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_dictionary(column.type):
        return column.cast(column.type.value_type)
    return column


def pandas_groups(
    table: pa.Table, by: list[str], dropna: bool
) -> list[tuple[tuple[Any, ...], float, int]]:
    """(key, sum, count) per group, sorted by key with nulls last: pandas forms the groups
    (floats stay floats so NaN is NaN), Python's sort orders them."""
    frame = {}
    objects = []
    for name in by:
        column = _plain(table.column(name))
        objects.append([_none_if_nan(v) for v in column.to_pylist()])
        if pa.types.is_floating(column.type):
            frame[name] = column.cast(pa.float64()).to_numpy()
        else:
            frame[name] = pd.Series(column.to_pylist(), dtype=object)
    number = pd.DataFrame(frame).groupby(by, sort=False, dropna=dropna).ngroup().to_numpy()
    kept = ~np.isnan(number.astype(np.float64))
    number = number[kept].astype(np.int64)
    values = np.asarray(table.column("v"))[kept]
    rows = np.flatnonzero(kept)
    groups = int(number.max()) + 1 if len(number) else 0
    sums = np.bincount(number, weights=values, minlength=groups)
    counts = np.bincount(number, minlength=groups)
    first = {int(g): int(rows[i]) for i, g in reversed(list(enumerate(number)))}
    found = [
        (tuple(column[first[g]] for column in objects), float(sums[g]), int(counts[g]))
        for g in range(groups)
    ]
    return sorted(found, key=lambda item: [(v is None, 0 if v is None else v) for v in item[0]])


def _none_if_nan(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def key_rows(keys: pa.Table) -> list[tuple[Any, ...]]:
    columns = [_plain(column).to_pylist() for column in keys.columns]
    return [tuple(_none_if_nan(v) for v in row) for row in zip(*columns, strict=True)]


def assert_like_pandas(table: pa.Table, by: list[str], null_keys: str = "drop", **kw: Any) -> None:
    expected = pandas_groups(table, by, dropna=null_keys == "drop")
    reference = None
    for size in BLOCK_SIZES:
        keys, sums, counts, _ = run(table, by, size, null_keys=null_keys, **kw)
        assert key_rows(keys.keys) == [key for key, _, _ in expected]
        assert sums.tolist() == [total for _, total, _ in expected]
        assert counts.tolist() == [count for _, _, count in expected]
        if reference is None:
            reference = (keys.keys, sums.tobytes(), counts.tobytes())
        else:  # same key table and same result bytes whatever the block size
            assert keys.keys.equals(reference[0])
            assert keys.keys.schema == reference[0].schema
            assert (sums.tobytes(), counts.tobytes()) == reference[1:]


def with_nulls(values: list[Any], rng: np.random.Generator) -> list[Any]:
    return [None if rng.random() < 0.15 else value for value in values]


def sample(pool: list[Any], rng: np.random.Generator, rows: int = ROWS) -> list[Any]:
    return with_nulls([pool[i] for i in rng.integers(0, len(pool), rows)], rng)


def table_with(column: pa.Array, rows: int = ROWS, seed: int = 0) -> pa.Table:
    values = np.random.default_rng(seed).integers(0, 100, rows).astype(np.float64)
    return pa.table({"k": column, "v": values})


# --- every key type ----------------------------------------------------------------------------

UTC = dt.timezone.utc
KEY_TYPES: list[tuple[pa.DataType, list[Any]]] = [
    (pa.string(), ["b", "a", "é", "ab", ""]),
    (pa.large_string(), ["b", "a", "zz", "ab"]),
    (pa.string_view(), ["b", "a", "a long string beyond twelve bytes", "ab"]),
    (pa.binary(), [b"\x00", b"a", b"\xff", b""]),
    (pa.large_binary(), [b"x", b"a", b"ab"]),
    (pa.binary_view(), [b"x", b"a", b"ab"]),
    (pa.binary(2), [b"ab", b"\x00\x01", b"zz"]),
    (pa.int8(), [-128, 5, 127, 0]),
    (pa.int16(), [-300, 5, 300]),
    (pa.int32(), [-(2**31), 7, 2**31 - 1]),
    (pa.int64(), [-(2**63), 7, 2**63 - 1]),
    (pa.uint8(), [0, 255, 3]),
    (pa.uint16(), [0, 65535, 3]),
    (pa.uint32(), [0, 2**32 - 1, 3]),
    (pa.uint64(), [0, 2**64 - 1, 2**63]),
    (pa.bool_(), [True, False]),
    (pa.date32(), [dt.date(2024, 1, 2), dt.date(1970, 1, 1), dt.date(1901, 5, 5)]),
    (pa.date64(), [dt.date(2024, 1, 2), dt.date(1970, 1, 1)]),
    (pa.timestamp("s"), [dt.datetime(2024, 1, 1, 5), dt.datetime(2000, 1, 1)]),
    (
        pa.timestamp("ms", "UTC"),
        [dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(1999, 1, 1, tzinfo=UTC)],
    ),
    (pa.timestamp("us"), [dt.datetime(2024, 1, 1, 0, 0, 0, 7), dt.datetime(2024, 1, 1)]),
    (
        pa.timestamp("ns", "UTC"),
        [dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2023, 1, 1, tzinfo=UTC)],
    ),
    (pa.time32("s"), [dt.time(1, 2, 3), dt.time(0, 0, 1)]),
    (pa.time64("us"), [dt.time(1, 2, 3, 4), dt.time(0, 0)]),
    (pa.duration("ms"), [dt.timedelta(seconds=1), dt.timedelta(0), dt.timedelta(days=-1)]),
    (pa.decimal128(9, 2), [Decimal("1.50"), Decimal("-3.25"), Decimal("0.00")]),
    (pa.decimal256(40, 3), [Decimal("12345678901234567890.125"), Decimal("-1.000")]),
    (pa.float16(), [1.5, -2.0, 0.0, -0.0, float("nan"), 65504.0]),
    (pa.float32(), [1.5, -2.0, 0.0, -0.0, float("nan"), float("inf"), float("-inf")]),
    (pa.float64(), [1.5, -2.0, 0.0, -0.0, float("nan"), 1e300]),
    (pa.null(), [None]),
]


@pytest.mark.parametrize("null_keys", ["drop", "group"])
@pytest.mark.parametrize(("type_", "pool"), KEY_TYPES, ids=[str(t) for t, _ in KEY_TYPES])
def test_every_key_type_like_pandas(type_: pa.DataType, pool: list[Any], null_keys: str) -> None:
    rng = np.random.default_rng(len(pool))
    values = sample(pool, rng)
    if pa.types.is_floating(type_):
        floats = np.array([np.nan if v is None else v for v in values], type_.to_pandas_dtype())
        column = pa.array(floats, type_, mask=np.array([v is None for v in values]))
    else:
        column = pa.array(values, type_)
    table = table_with(column)
    assert_like_pandas(table, ["k"], null_keys)
    keys, *_ = run(table, ["k"], 5, null_keys=null_keys)
    assert keys.keys.schema.field("k").type == type_


def test_float_keys_nan_is_missing_and_signed_zeros_meet() -> None:
    column = pa.array([0.0, -0.0, float("nan"), None, 2.0, -0.0], pa.float64())
    table = pa.table({"k": column, "v": np.arange(6.0)})
    keys, sums, counts, encoder = run(table, ["k"], 2)
    assert keys.keys.column("k").to_pylist() == [0.0, 2.0]
    assert math.copysign(1.0, keys.keys.column("k")[0].as_py()) == 1.0
    assert counts.tolist() == [3, 1]
    assert encoder.missing_rows == 2
    keys, sums, counts, encoder = run(table, ["k"], 4, null_keys="group")
    # NaN and null are one missing key: a single null group, last.
    assert keys.keys.column("k").to_pylist() == [0.0, 2.0, None]
    assert counts.tolist() == [3, 1, 2]
    assert sums.tolist() == [0.0 + 1.0 + 5.0, 4.0, 2.0 + 3.0]
    assert encoder.missing_rows == 0


# --- several key columns -----------------------------------------------------------------------


def multi_key_table(seed: int = 1, rows: int = 60) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "carrier": pa.array(sample(["AA", "UA", "DL", "WN", "B6"], rng, rows)),
            "origin": pa.array(sample([3, 1, 2], rng, rows), pa.int32()),
            "day": pa.array(sample([dt.date(2024, 1, d) for d in (3, 1, 2)], rng, rows)),
            "v": rng.integers(0, 1000, rows).astype(np.float64),
        }
    )


@pytest.mark.parametrize("dense_limit", [1 << 22, 1], ids=["dense", "hashed"])
@pytest.mark.parametrize("null_keys", ["drop", "group"])
def test_several_keys_like_pandas(null_keys: str, dense_limit: int) -> None:
    table = multi_key_table()
    assert_like_pandas(table, ["carrier", "origin"], null_keys, _dense_limit=dense_limit)
    assert_like_pandas(table, ["origin", "day", "carrier"], null_keys, _dense_limit=dense_limit)


def test_null_in_one_column_is_its_own_group_per_other_value() -> None:
    table = pa.table({"a": [None, None, "x", None], "b": ["x", "y", "x", "x"], "v": [1.0, 2, 4, 8]})
    keys, sums, _counts, _ = run(table, ["a", "b"], 1, null_keys="group")
    assert key_rows(keys.keys) == [("x", "x"), (None, "x"), (None, "y")]
    assert sums.tolist() == [4.0, 9.0, 2.0]
    keys, sums, _counts, encoder = run(table, ["a", "b"], None)
    assert key_rows(keys.keys) == [("x", "x")]
    assert encoder.missing_rows == 3


def test_dense_table_switches_to_hashing_midway() -> None:
    table = multi_key_table(seed=5, rows=200)
    expected = run(table, ["carrier", "origin", "day"], None)
    switching = run(table, ["carrier", "origin", "day"], 7, _dense_limit=12)
    assert switching[0].keys.equals(expected[0].keys)
    assert switching[1].tobytes() == expected[1].tobytes()


# --- dictionaries ------------------------------------------------------------------------------


def dictionary_block(rows: list[str | None], dictionary: list[str | None]) -> pa.DictionaryArray:
    codes = [None if row is None else dictionary.index(row) for row in rows]
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), pa.array(dictionary))


def test_dictionaries_that_differ_between_blocks_unify_by_value() -> None:
    # Unused entries, a reordered dictionary and a null entry in a dictionary.
    parts = [
        dictionary_block(["q", "p", None, "q"], ["q", "unused", "p"]),
        dictionary_block(["r", "p"], ["p", "r", None]),
        pa.DictionaryArray.from_arrays(pa.array([2, 0, 1], pa.int8()), pa.array(["s", "q", None])),
    ]
    column = pa.chunked_array(parts)
    table = pa.table({"k": column, "v": np.arange(9.0)})
    for null_keys in ("drop", "group"):
        assert_like_pandas(table, ["k"], null_keys)
    keys, _sums, counts, _encoder = run(table, ["k"], None, null_keys="group")
    out = keys.keys.column("k")
    assert out.type == pa.dictionary(pa.int8(), pa.string())
    assert out.chunk(0).dictionary.to_pylist() == ["p", "q", "r", "s"]  # sorted by value
    assert out.to_pylist() == ["p", "q", "r", "s", None]
    assert counts.tolist() == [2, 3, 1, 1, 2]
    keys, *_ = run(table, ["k"], None)
    assert "unused" not in keys.keys.column("k").to_pylist()


def test_row_groups_with_their_own_dictionaries_in_one_block() -> None:
    rng = np.random.default_rng(4)
    words = [f"w{i}" for i in range(12)]
    parts = []
    for _ in range(4):
        dictionary = list(rng.permutation(words)[: rng.integers(3, 12)])
        rows = [dictionary[i] for i in rng.integers(0, len(dictionary), 25)]
        parts.append(dictionary_block(with_nulls(rows, rng), dictionary))
    table = pa.table({"k": pa.chunked_array(parts), "v": np.arange(100.0)})
    for null_keys in ("drop", "group"):
        assert_like_pandas(table, ["k"], null_keys)


def test_dictionary_and_plain_strings_mix_across_files() -> None:
    encoder = KeyEncoder(["k"])
    first = encoder.encode(pa.table({"k": pa.array(["b", "a", "b"]).dictionary_encode()}))
    second = encoder.encode(pa.table({"k": pa.array(["c", "a"], pa.large_string())}))
    keys = encoder.finish()
    assert keys.keys.column("k").to_pylist() == ["a", "b", "c"]
    assert pa.types.is_dictionary(keys.keys.column("k").type)
    assert first[1] == second[1]


def test_dictionary_index_type_widens_when_outgrown() -> None:
    encoder = KeyEncoder(["k"])
    for start in range(0, 300, 100):
        words = [f"w{i:03d}" for i in range(start, start + 100)]
        encoder.encode(
            pa.table(
                {
                    "k": pa.array(words)
                    .dictionary_encode()
                    .cast(pa.dictionary(pa.int8(), pa.string()))
                }
            )
        )
    out = encoder.finish().keys.column("k")
    assert out.type == pa.dictionary(pa.int32(), pa.string())
    assert len(out) == 300


def test_ordered_dictionary_keeps_its_type() -> None:
    column = (
        pa.array(["lo", "hi", "lo"])
        .dictionary_encode()
        .cast(pa.dictionary(pa.int16(), pa.string(), ordered=True))
    )
    keys, *_ = run(pa.table({"k": column, "v": [1.0, 2, 3]}), ["k"], 1)
    assert keys.keys.column("k").type == pa.dictionary(pa.int16(), pa.string(), ordered=True)


# --- block and type changes between blocks -----------------------------------------------------


def test_record_batches_and_chunked_columns_give_the_same_ids() -> None:
    table = multi_key_table(seed=3)
    chunked = pa.concat_tables(blocks_of(table, 11))
    assert chunked.column("carrier").num_chunks > 1
    batches = table.to_batches(max_chunksize=9)
    expected = run(table, ["carrier", "origin"], None)
    via_chunks = run(chunked, ["carrier", "origin"], None)
    encoder = KeyEncoder(["carrier", "origin"])
    ids = encode(encoder, batches)
    keys = encoder.finish()
    assert via_chunks[0].keys.equals(expected[0].keys)
    assert keys.keys.equals(expected[0].keys)
    assert reduce_by(ids, np.asarray(table.column("v")), keys, encoder.n_groups)[0].tolist() == (
        expected[1].tolist()
    )


def test_a_later_block_of_a_wider_integer_type_is_cast_by_value() -> None:
    encoder = KeyEncoder(["k"])
    encoder.encode(pa.table({"k": pa.array([1, 2], pa.int8())}))
    assert encoder.encode(pa.table({"k": pa.array([2, 1, 3], pa.int64())})).tolist()[:2] == [1, 0]
    assert encoder.finish().keys.column("k").type == pa.int8()
    with pytest.raises(InvalidInputError, match=r"key column 'k'.*int8") as err:
        encoder.encode(pa.table({"k": pa.array([1000], pa.int64())}), source="b.parquet")
    assert "1000" in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_a_later_block_of_another_kind_is_an_error() -> None:
    encoder = KeyEncoder(["k"])
    encoder.encode(pa.table({"k": pa.array([1, 2])}))
    with pytest.raises(InvalidInputError, match=r"key column 'k' has type string in b\.parquet"):
        encoder.encode(pa.table({"k": pa.array(["1"])}), source="b.parquet")


def test_parts_of_another_kind_or_unit_name_both_files_when_merged() -> None:
    # Dask merges each file's encoder into the run's: the error names the files, as a block
    # of a single-machine run does.
    def part(values: pa.Array, source: str) -> KeyEncoder:
        encoder = KeyEncoder(["k"])
        encoder.encode(pa.table({"k": values}), source=source)
        return encoder

    first = part(pa.array(["x"]), "a.parquet")
    with pytest.raises(
        InvalidInputError,
        match=r"^key column 'k' has type int64 in b\.parquet, but string in a\.parquet: ",
    ):
        first.merge(part(pa.array([1]), "b.parquet"))
    merged = KeyEncoder(["k"])
    merged.merge(part(pa.array([1_000], pa.timestamp("ms")), "a.parquet"))
    with pytest.raises(InvalidInputError, match=r"^key column 'k' in b\.parquet does not fit"):
        merged.merge(part(pa.array([1_000_001], pa.timestamp("us")), "b.parquet"))


def test_extension_keys_group_by_their_storage_and_keep_their_type() -> None:
    ids = [uuid.UUID(int=n).bytes for n in (9, 2**127, 9, 3)]
    keys = pa.array([*ids, None], pa.uuid())
    encoder = KeyEncoder(["u"], null_keys="group")
    for block in blocks_of(pa.table({"u": keys}), 2):
        encoder.encode(block)
    table = encoder.finish().keys
    assert table.schema.field("u").type == pa.uuid()
    assert table.column("u").to_pylist() == [uuid.UUID(int=n) for n in (3, 9, 2**127)] + [None]
    merged = KeyEncoder(["u"], null_keys="group")  # as Dask merges the partitions
    merged.merge(encoder)
    assert merged.finish().keys == table
    # A keys table of the stored values matches, and the keys come out in the data's type.
    plain = pa.table({"u": pa.array([ids[3], ids[0]], pa.binary(16))})
    fixed = KeyEncoder(["u"], keys_from=plain)
    assert fixed.encode(pa.table({"u": keys.slice(0, 3)})).tolist() == [1, UNKNOWN, 1]
    with pytest.raises(InvalidInputError, match="row 1 has key u=80000000000000000000000000000000"):
        fixed.finish()


def test_a_block_without_the_key_column_lists_the_columns() -> None:
    with pytest.raises(InvalidInputError, match=r"a.parquet has no column 'c' \(columns: k, v\)"):
        KeyEncoder(["c"]).encode(pa.table({"k": [1], "v": [2.0]}), source="a.parquet")


# --- refused types -----------------------------------------------------------------------------

REFUSED = [
    pa.array([[1], [2]]),
    pa.array([{"x": 1}, {"x": 2}]),
    pa.array([[("a", 1)], []], pa.map_(pa.string(), pa.int64())),
    pa.UnionArray.from_sparse(pa.array([0, 0], pa.int8()), [pa.array([1, 2])]),
    pa.array([[1.0], [2.0]], pa.list_(pa.float64(), 1)),
]


@pytest.mark.parametrize("column", REFUSED, ids=lambda c: str(c.type).split("<")[0])
def test_types_without_equality_are_refused_by_name(column: pa.Array) -> None:
    with pytest.raises(InvalidInputError) as err:
        KeyEncoder(["tags"]).encode(pa.table({"tags": column}))
    message = str(err.value)
    assert message.startswith(f"key column 'tags' has type {column.type}, which has no equality")
    assert len(message.splitlines()) == 1
    with pytest.raises(InvalidInputError, match="key column 'tags'"):
        KeyEncoder(["tags"], keys_from=pa.table({"tags": column}))


# --- keys_from ---------------------------------------------------------------------------------


def test_keys_from_fixes_the_groups_and_their_order() -> None:
    keys_table = pa.table({"carrier": ["WN", "AA", "ZZ", "DL", "UA", "B6"]})
    table = multi_key_table(seed=7)
    for size in BLOCK_SIZES:
        keys, sums, counts, encoder = run(table, ["carrier"], size, keys_from=keys_table)
        assert keys.keys.equals(keys_table)
        assert keys.order.tolist() == list(range(6))
        expected = {
            key[0]: (total, count)
            for key, total, count in pandas_groups(table, ["carrier"], dropna=True)
        }
        for row, carrier in enumerate(keys_table.column("carrier").to_pylist()):
            assert (sums[row], counts[row]) == expected.get(carrier, (0.0, 0))
        assert counts[2] == 0  # ZZ: an empty group
        assert encoder.missing_rows == table.column("carrier").null_count


def test_keys_from_on_several_columns_with_other_types() -> None:
    keys_table = pa.table(
        {"origin": pa.array([2, 1, 9], pa.int64()), "carrier": ["AA", "UA", "AA"], "x": [0, 0, 0]}
    )
    data = pa.table(
        {
            "carrier": pa.array(["UA", "AA", "AA", None]).dictionary_encode(),
            "origin": pa.array([1, 2, 2, 1], pa.int32()),
            "v": [1.0, 2.0, 4.0, 8.0],
        }
    )
    keys, sums, counts, _ = run(data, ["carrier", "origin"], 2, keys_from=keys_table)
    assert keys.keys.column_names == ["carrier", "origin"]
    assert key_rows(keys.keys) == [("AA", 2), ("UA", 1), ("AA", 9)]
    assert sums.tolist() == [6.0, 1.0, 0.0]
    assert counts.tolist() == [2, 1, 0]


def test_keys_from_unknown_key_names_the_key_and_its_global_row() -> None:
    keys_table = pa.table({"a": ["x", "y"], "b": [1, 2]})
    data = pa.table({"a": ["x", "y", "y", "x", "x"], "b": [1, 2, 2, 1, 2]})
    encoder = KeyEncoder(["a", "b"], keys_from=keys_table, keys_from_label="--keys-from k.csv")
    encoder.encode(data.slice(0, 3))
    encoder.encode(data.slice(3), source="d.parquet")
    with pytest.raises(InvalidInputError) as err:
        encoder.finish()
    assert str(err.value) == (
        "d.parquet: row 4 has key (a='x', b=2), which is not in --keys-from k.csv "
        "(1 row with a key not in it)"
    )


def test_keys_from_unknown_keys_are_counted_across_blocks_and_merges() -> None:
    """Like ids >= n, every offending row is counted, and the first one named: the error
    comes from finish(), once every block (or merged part) is in."""
    keys_table = pa.table({"a": ["x"]})
    first = KeyEncoder(["a"], keys_from=keys_table)
    first.encode(pa.table({"a": ["x", "q", "x"]}), source="one.parquet")
    first.encode(pa.table({"a": ["r", "x"]}), source="one.parquet")
    second = KeyEncoder(["a"], keys_from=keys_table)
    second.encode(pa.table({"a": ["s", "s"]}), source="two.parquet")
    first.merge(second)
    with pytest.raises(InvalidInputError) as err:
        first.finish()
    assert str(err.value) == (
        "one.parquet: row 1 has key a='q', which is not in the keys table "
        "(4 rows with a key not in it)"
    )


def test_keys_from_value_absent_from_a_column() -> None:
    encoder = KeyEncoder(["a"], keys_from=pa.table({"a": ["x"]}))
    encoder.encode(pa.table({"a": ["x", None, "q", "r"]}))
    with pytest.raises(InvalidInputError, match=r"row 2 has key a='q', .* table \(2 rows"):
        encoder.finish()


@pytest.mark.parametrize("size", BLOCK_SIZES)
def test_keys_from_drops_a_row_with_a_missing_key_whatever_its_other_keys(
    size: int | None,
) -> None:
    # -3 is in no keys row, but its row's other key is null: dropped, as without --keys-from.
    keys_table = pa.table({"a": [True], "b": pa.array([1], pa.int16())})
    data = pa.table({"a": [None, True, None], "b": pa.array([-3, 1, None], pa.int16())})
    encoder = KeyEncoder(["a", "b"], keys_from=keys_table)
    assert encode(encoder, blocks_of(data, size)).tolist() == [MISSING, 0, MISSING]
    assert encoder.finish().keys == keys_table
    assert (encoder.missing_rows, encoder.unknown_rows) == (2, 0)


def test_keys_from_null_keys() -> None:
    keys_table = pa.table({"a": ["x", None]})
    data = pa.table({"a": ["x", None, None], "v": [1.0, 2.0, 4.0]})
    _keys, sums, _counts, encoder = run(data, ["a"], 1, keys_from=keys_table, null_keys="group")
    assert sums.tolist() == [1.0, 6.0]
    _keys, sums, _counts, encoder = run(data, ["a"], 1, keys_from=keys_table)
    assert sums.tolist() == [1.0, 0.0]  # dropped rows never match the null row
    assert encoder.missing_rows == 2
    with pytest.raises(InvalidInputError, match="row 1 has key a=null, which is not in"):
        run(data, ["a"], 1, keys_from=pa.table({"a": ["x"]}), null_keys="group")


def test_keys_from_duplicates_are_an_error_naming_both_rows() -> None:
    keys_table = pa.table({"a": ["x", "y", "z", "y", "x"], "b": [1, 1, 1, 1, 2]})
    encoder = KeyEncoder(["a", "b"], keys_from=keys_table)
    with pytest.raises(InvalidInputError) as err:
        encoder.encode(pa.table({"a": ["x"], "b": [1]}))
    assert str(err.value) == "the keys table has key (a='y', b=1) twice (rows 1 and 3)"


def test_keys_from_of_another_kind_is_an_error() -> None:
    encoder = KeyEncoder(["a"], keys_from=pa.table({"a": ["1", "2"]}))
    with pytest.raises(InvalidInputError, match="key column 'a' has type string in the keys table"):
        encoder.encode(pa.table({"a": [1, 2]}))
    named = KeyEncoder(["a"], keys_from=pa.table({"a": ["1"]}), keys_from_label="k.csv")
    with pytest.raises(InvalidInputError, match=r"in k\.csv, but int64 in d\.parquet: values"):
        named.encode(pa.table({"a": [1, 2]}), source="d.parquet")


def test_keys_from_matches_a_data_key_column_of_nulls_alone() -> None:
    # A CSV key column whose every field is empty reads as type null: its rows are null keys,
    # not values of another kind than the keys table's.
    keys_table = pa.table({"a": ["x", "y"], "b": [1, 2]})
    data = pa.table({"a": pa.nulls(3), "b": [1, 2, 1], "v": [1.0, 2.0, 4.0]})
    keys, sums, counts, encoder = run(data, ["a", "b"], 2, keys_from=keys_table)
    assert keys.keys.equals(keys_table)
    assert (sums.tolist(), counts.tolist(), encoder.missing_rows) == ([0.0, 0.0], [0, 0], 3)
    with pytest.raises(InvalidInputError, match=r"row 0 has key \(a=null, b=1\), which is not in"):
        run(data, ["a", "b"], 2, keys_from=keys_table, null_keys="group")


def test_keys_from_missing_column_lists_its_columns() -> None:
    with pytest.raises(InvalidInputError, match=r"k.csv has no column 'b' \(columns: a\)"):
        KeyEncoder(["a", "b"], keys_from=pa.table({"a": [1]}), keys_from_label="k.csv")


def test_keys_from_with_a_key_column_twice_is_a_read_error() -> None:
    keys_table = pa.Table.from_arrays(
        [pa.array([1]), pa.array([2]), pa.array([3])], ["a", "a", "b"]
    )
    with pytest.raises(ReadError) as err:
        KeyEncoder(["b", "a"], keys_from=keys_table, keys_from_label="--keys-from k.parquet")
    assert str(err.value) == (
        "--keys-from k.parquet: 2 columns are named 'a'; cannot tell which one to read "
        "(rename them)"
    )
    # A name used twice that is not a key column is never read: no error.
    assert KeyEncoder(["b"], keys_from=keys_table).n_groups == 1


def test_keys_from_without_blocks_is_the_keys_table() -> None:
    keys_table = pa.table({"a": [3, 1]})
    keys = KeyEncoder(["a"], keys_from=keys_table).finish()
    assert keys.keys.equals(keys_table)
    assert keys.order.tolist() == [0, 1]


# --- runs with no rows, and merging parts ------------------------------------------------------


def test_a_zero_row_block_fixes_the_types() -> None:
    encoder = KeyEncoder(["k"])
    assert encoder.encode(pa.table({"k": pa.array([], pa.int16())})).tolist() == []
    keys = encoder.finish()
    assert keys.keys.schema.field("k").type == pa.int16()
    assert keys.keys.num_rows == 0


@pytest.mark.parametrize("null_keys", ["drop", "group"])
@pytest.mark.parametrize("dense_limit", [1 << 22, 1], ids=["dense", "hashed"])
def test_merging_parts_equals_one_run(null_keys: str, dense_limit: int) -> None:
    table = multi_key_table(seed=11, rows=90)
    by = ["carrier", "origin"]
    whole = run(table, by, None, null_keys=null_keys)
    parts = [table.slice(0, 30), table.slice(30, 25), table.slice(55)]
    encoders = [KeyEncoder(by, null_keys=null_keys, _dense_limit=dense_limit) for _ in parts]
    part_ids = [encoder.encode(part) for encoder, part in zip(encoders, parts, strict=True)]
    merged = KeyEncoder(by, null_keys=null_keys, _dense_limit=dense_limit)  # saw no block
    ids = []
    for encoder, own in zip(encoders, part_ids, strict=True):
        remap = merged.merge(encoder)
        ids.append(np.where(own >= 0, remap[np.maximum(own, 0)], MISSING))
    keys = merged.finish()
    sums, _counts = reduce_by(
        np.concatenate(ids), np.asarray(table.column("v")), keys, merged.n_groups
    )
    assert keys.keys.equals(whole[0].keys)
    assert sums.tobytes() == whole[1].tobytes()
    assert merged.rows == table.num_rows
    assert merged.missing_rows == whole[3].missing_rows


def test_a_big_block_is_encoded_in_slices_with_the_same_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import segcli.keys

    table = multi_key_table(seed=13, rows=50)
    expected = run(table, ["carrier", "origin"], None)
    monkeypatch.setattr(segcli.keys, "_SLICE_ROWS", 4)
    sliced = run(table, ["carrier", "origin"], 23)
    assert sliced[0].keys.equals(expected[0].keys)
    assert sliced[1].tobytes() == expected[1].tobytes()
    assert sliced[3].missing_rows == expected[3].missing_rows
    encoder = KeyEncoder(["a"], keys_from=pa.table({"a": ["x"]}))
    encoder.encode(pa.table({"a": ["x"] * 9 + ["y", "z", "x", "y"]}))
    with pytest.raises(InvalidInputError, match=r"row 9 has key a='y', .* \(3 rows with a key"):
        encoder.finish()


def test_a_key_column_given_twice_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="key column 'a' is given twice"):
        KeyEncoder(["a", "b", "a"])


def test_keys_from_integers_match_float_keys_by_value() -> None:
    data = pa.table({"k": [2.0, 1.0, 2.0, -0.0], "v": [1.0, 2.0, 4.0, 8.0]})
    keys, sums, _, _ = run(data, ["k"], 3, keys_from=pa.table({"k": [0, 2, 1]}))
    assert keys.keys.column("k").type == pa.float64()  # the data's, as without keys_from
    assert sums.tolist() == [8.0, 5.0, 2.0]
    with pytest.raises(InvalidInputError, match="has type double in the keys table"):
        KeyEncoder(["k"], keys_from=pa.table({"k": [1.5]})).encode(pa.table({"k": [1]}))


def test_timestamps_of_another_unit_in_a_later_block() -> None:
    encoder = KeyEncoder(["t"])
    first = pa.array([dt.datetime(2024, 1, 1, 0, 0, 1)], pa.timestamp("s"))
    encoder.encode(pa.table({"t": first}))
    assert encoder.encode(pa.table({"t": first.cast(pa.timestamp("ms"))})).tolist() == [0]
    finer = pa.array([dt.datetime(2024, 1, 1, 0, 0, 1, 500000)], pa.timestamp("ms"))
    with pytest.raises(InvalidInputError, match="key column 't' in this block does not fit"):
        encoder.encode(pa.table({"t": finer}))


def test_merging_parts_with_keys_from_keeps_row_positions() -> None:
    keys_table = pa.table({"a": ["y", "x"]})
    first, second = (KeyEncoder(["a"], keys_from=keys_table) for _ in range(2))
    first.encode(pa.table({"a": ["x"]}))
    second.encode(pa.table({"a": ["y", None]}))
    assert first.merge(second).tolist() == [0, 1]
    assert (first.rows, first.missing_rows) == (3, 1)
    with pytest.raises(ValueError, match="both have keys_from"):
        first.merge(KeyEncoder(["a"]))


def test_a_fresh_encoder_merging_keys_from_parts_gives_the_data_key_types() -> None:
    # Dask folds each partition into a fresh encoder that never saw a block itself.
    keys_table = pa.table({"a": pa.array([8, 7], pa.int64())})
    merged, part = (KeyEncoder(["a"], keys_from=keys_table) for _ in range(2))
    part.encode(pa.table({"a": pa.array([7], pa.int16())}))
    assert merged.merge(part).tolist() == [0, 1]
    assert merged.finish().keys.schema.field("a").type == pa.int16()


@pytest.mark.parametrize("null_keys", ["drop", "group"])
def test_parts_whose_key_column_holds_nulls_alone_merge_with_typed_parts(null_keys: str) -> None:
    # A Dask shard whose key column has no value is of type null: it was "values of another
    # kind" than the next shard's strings. Its rows are null keys; the keys are the strings.
    nulls = pa.table({"k": pa.nulls(2, pa.null())})
    strings = pa.table({"k": pa.array(["b", "a", None]).dictionary_encode()})
    first, second = (KeyEncoder(["k"], null_keys=null_keys) for _ in range(2))
    first.encode(nulls)
    second_ids = second.encode(strings)
    remap = first.merge(second)
    keys = first.finish()
    assert keys.keys.schema.field("k").type == strings.schema.field("k").type
    key_of = {group: keys.keys.column("k")[row].as_py() for row, group in enumerate(keys.order)}
    assert [key_of[remap[i]] if i >= 0 else "dropped" for i in second_ids] == [
        "b", "a", None if null_keys == "group" else "dropped"
    ]  # fmt: skip
    # Blocks of one run likewise, in either order.
    for blocks in ([nulls, strings], [strings, nulls]):
        encoder = KeyEncoder(["k"], null_keys=null_keys)
        ids = np.concatenate([encoder.encode(block) for block in blocks])
        assert (ids == MISSING).sum() == (0 if null_keys == "group" else 3)
        assert encoder.finish().keys.column("k").to_pylist()[:2] == ["a", "b"]


# --- Arrow <-> NumPy without pandas ------------------------------------------------------------


BUFFER_ARRAYS = [
    pa.array([1.5, -2.0, 3.25, 0.0]).slice(1),
    pa.array([1, -2, 3, 127], pa.int8()).slice(2, 1),
    pa.array([2**64 - 1, 0], pa.uint64()),
    pa.array([True, False, True] * 7).slice(3, 11),
    pa.array([1, None, 3], pa.int32()),  # nulls: read through to_numpy
    pa.array([], pa.float32()),
]


@pytest.mark.parametrize("array", BUFFER_ARRAYS, ids=lambda a: f"{a.type}-{a.offset}-{len(a)}")
def test_numpy_of_reads_what_to_numpy_reads(array: pa.Array) -> None:
    from segcli.io.columns import numpy_of

    got = numpy_of(array)
    want = array.to_numpy(zero_copy_only=False)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "values",
    [
        np.array([True, False, True, True, False, False, False, True, True]),
        np.arange(10, dtype=np.float16)[::3],
        np.array([5, -1, 2], np.int64),
        np.array([], np.uint32),
    ],
    ids=lambda v: str(v.dtype),
)
def test_arrow_array_is_what_pa_array_makes(values: np.ndarray) -> None:
    from segcli.io.columns import arrow_array

    assert arrow_array(values).equals(pa.array(values))


def test_value_index_finds_positions_and_misses() -> None:
    from segcli.keys.values import ValueIndex

    index = ValueIndex(pa.string())
    assert index.find_or_add(pa.array(["b", "a", None, "b"])).tolist()[:2] == [0, 1]
    # Position 0 is a hit, not a miss; a null and an unknown value are misses (-1).
    assert index.find(pa.array(["b", None, "z", "a"])).tolist() == [0, -1, -1, 1]
    assert index.find(pa.array(["a"]), distinct=True).tolist() == [1]


def row_keys(encoder: KeyEncoder, ids: np.ndarray) -> list[Any]:
    """Each row's key value (None for a dropped row), whatever the encoder numbered its group."""
    keys = encoder.finish()
    row_of_group = np.argsort(keys.order)
    values = keys.keys.column(0).to_pylist()
    return [None if i == MISSING else values[row_of_group[i]] for i in ids]


@pytest.mark.parametrize("null_keys", ["drop", "group"])
def test_blocks_sharing_a_large_dictionary_code_it_once(null_keys: str) -> None:
    # A Parquet row group's dictionary comes back with every block streamed from it: large
    # ones are coded once and reused, and must give what the plain strings give.
    rng = np.random.default_rng(3)
    dictionary = pa.array([f"v{i:05d}" for i in range(20_000)] + [None])
    indices = pa.array(rng.integers(0, len(dictionary), 3_000), pa.int32())
    column = pa.DictionaryArray.from_arrays(indices, dictionary)
    blocks = [pa.table({"k": column.slice(start, 500)}) for start in range(0, 3_000, 500)]
    shared = KeyEncoder(["k"], null_keys=null_keys)  # type: ignore[arg-type]
    shared_ids = encode(shared, blocks)
    plain = KeyEncoder(["k"], null_keys=null_keys)  # type: ignore[arg-type]
    plain_ids = encode(plain, [pa.table({"k": column.dictionary_decode()})])
    assert row_keys(shared, shared_ids) == row_keys(plain, plain_ids)
    assert shared.missing_rows == plain.missing_rows
    assert shared.finish().keys.column(0).to_pylist() == plain.finish().keys.column(0).to_pylist()


def key_tuples(encoder: KeyEncoder, ids: np.ndarray) -> list[Any]:
    """Each row's key tuple (None for a dropped row), whatever the encoder numbered its group."""
    keys = encoder.finish()
    row_of_group = np.argsort(keys.order)
    rows = list(zip(*(column.to_pylist() for column in keys.keys.columns), strict=True))
    return [None if i == MISSING else rows[row_of_group[i]] for i in ids]


@pytest.mark.parametrize("null_keys", ["drop", "group"])
@pytest.mark.parametrize("keys_from", [False, True])
def test_later_blocks_of_known_keys_skip_finding_the_cells_used(
    monkeypatch: pytest.MonkeyPatch, null_keys: str, keys_from: bool
) -> None:
    # Once every cell of a block's grid of dictionary slots is a group, the block needs no
    # pass over its rows to find the cells they use; a new combination (c, y) still does.
    columns = {
        "a": ["a", "a", "b", "b", None, None, "b", "a", None, "a", "c", "a"],
        "b": ["x", "y", "x", "y", "x", "y", "y", "x", "y", "y", "y", "x"],
    }
    blocks = [
        pa.table(
            {
                name: pa.array(values[start:stop]).dictionary_encode()
                for name, values in columns.items()
            }
        )
        for start, stop in [(0, 6), (6, 10), (10, 12)]
    ]
    options: dict[str, Any] = {"null_keys": null_keys}
    if keys_from:
        pairs = [(a, b) for a in ("c", "b", "a", None) for b in ("y", "x")]
        options["keys_from"] = pa.table({"a": [a for a, _ in pairs], "b": [b for _, b in pairs]})
    encoder = KeyEncoder(["a", "b"], **options)
    ids = [encoder.encode(blocks[0])]
    finding: list[int] = []
    cells_used = segcli.keys._cells_used

    def spy(flat: np.ndarray, cells: int) -> np.ndarray:
        finding.append(cells)
        return cells_used(flat, cells)

    monkeypatch.setattr(segcli.keys, "_cells_used", spy)
    ids.append(encoder.encode(blocks[1]))
    assert not finding
    ids.append(encoder.encode(blocks[2]))
    # keys_from knows (c, y) from the start; the per-row path finds no cells at all.
    assert bool(finding) == (not keys_from and segcli.keys._grid_pays([3, 3], 2))
    reference = KeyEncoder(["a", "b"], **options)
    want = reference.encode(pa.table(columns))
    assert key_tuples(encoder, np.concatenate(ids)) == key_tuples(reference, want)


@pytest.mark.parametrize("slice_rows", [4, 1 << 20])
def test_grid_ids_are_writable_int64_on_every_path(
    monkeypatch: pytest.MonkeyPatch, slice_rows: int
) -> None:
    # The gather of the grid gives ids through pyarrow's take (or into the caller's array when a
    # block is encoded in slices): the folds get int64 ids they may write, row for row right.
    monkeypatch.setattr(segcli.keys, "_SLICE_ROWS", slice_rows)
    columns = {"a": ["x", "y", None, "x", "z", "y"] * 2, "b": ["p", "q", "p", "q", "p", "p"] * 2}
    table = pa.table(
        {name: pa.array(values).dictionary_encode() for name, values in columns.items()}
    )
    encoder = KeyEncoder(["a", "b"])
    ids = [encoder.encode(table.slice(0, 6)), encoder.encode(table.slice(6))]  # new, then known
    for block_ids in ids:
        assert block_ids.dtype == np.int64
        assert block_ids.flags.writeable
    reference = KeyEncoder(["a", "b"])
    want = reference.encode(pa.table(columns))
    assert key_tuples(encoder, np.concatenate(ids)) == key_tuples(reference, want)
    assert np.concatenate(ids)[2] == MISSING


def test_declared_bytes_of_a_dictionary_column_ignore_the_index_under_a_null() -> None:
    # Arrow leaves the index of a null row undefined (here 99, past the dictionary): the
    # gather of lengths must not read it, and the bytes are those of the plain column.
    from segcli.io.keys import _declared_nbytes

    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little"))
    indices = pa.Array.from_buffers(
        pa.int32(), 3, [validity, pa.py_buffer(np.array([0, 99, 1], np.int32))], null_count=1
    )
    column = pa.DictionaryArray.from_arrays(indices, pa.array(["ab", "cde"]))
    keys = pa.table({"k": column})
    schema = pa.schema([pa.field("k", pa.string())])
    # offsets (4 bytes a row), one byte of validity, the 5 bytes of text
    assert _declared_nbytes(keys, schema) == 3 * 4 + 1 + 5


@pytest.mark.parametrize(
    ("types", "common"),
    [
        ([pa.int32(), pa.int64()], pa.int64()),
        ([pa.uint8(), pa.int8()], pa.int16()),
        ([pa.uint16(), pa.uint32()], pa.uint32()),
        ([pa.int64(), pa.uint64()], pa.int64()),  # none holds both: the first file's
        ([pa.int16(), pa.float32()], pa.float64()),
        ([pa.float32(), pa.float64()], pa.float64()),
        ([pa.null(), pa.int8(), pa.int16()], pa.int16()),
        ([pa.timestamp("s", "UTC"), pa.timestamp("us", "UTC")], pa.timestamp("us", "UTC")),
        ([pa.timestamp("s"), pa.timestamp("us", "UTC")], pa.timestamp("s")),
        ([pa.duration("ms"), pa.duration("s")], pa.duration("ms")),
        ([pa.decimal128(5, 2), pa.decimal128(10, 0)], pa.decimal128(12, 2)),
        ([pa.decimal128(38, 0), pa.decimal128(38, 10)], pa.decimal256(48, 10)),
        ([pa.string(), pa.large_string()], pa.string()),  # cast as blocks are
        ([pa.int32(), pa.string()], pa.int32()),  # another kind: refused as before
    ],
)
def test_the_common_key_type_of_several_files(
    types: list[pa.DataType], common: pa.DataType
) -> None:
    from segcli.keys.common_type import common_key_type

    assert common_key_type(types) == common
