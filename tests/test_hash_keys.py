"""The compiled hash table behind ``--by`` with many distinct keys (``segcli.keys.hash_table``).

Small inputs are forced onto it (``HASH_FROM`` lowered to 0, a first table of two entries so
that probes collide and the table grows many times) and compared with pyarrow's path (the
oracle: the code before the table existed) and with a plain Python dict: the same positions,
the same distinct values in the same order, and the same bytes out of the command line.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from segcli.errors import InvalidInputError
from segcli.keys import MISSING, KeyEncoder, hash_table, values
from segcli.keys.values import ValueIndex
from tests.entry import run_main

pd = pytest.importorskip("pandas")


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every lookup on the compiled table, from a table of two entries."""
    monkeypatch.setattr(values, "HASH_FROM", 0)
    monkeypatch.setattr(hash_table, "_FIRST_SLOTS", 2)


def strings(rng: np.random.Generator, rows: int, distinct: int) -> list[str | None]:
    """Keys that share their first 8 bytes, empty strings, non-ASCII ones and nulls."""
    pool = ["", "é", "€uro", "user-000", "user-0000", "user-00000001", "user-00000002"]
    # Lengths around the 8-byte words the table hashes and compares, equal up to the last byte.
    pool += ["abcdefg", "abcdefgh", "abcdefgi", "abcdefgh\0", "abcdefghi", "abcdefghabcdefgh"]
    pool += ["abcdefghabcdefgi", "abcdefghabcdefghX", "\0", "\0\0"]
    pool += [f"user-0000{i:04d}-ü" for i in range(distinct)]
    picks = rng.integers(-1, len(pool), rows)
    return [None if p < 0 else pool[p] for p in picks]


def dict_positions(blocks: list[list[Any]]) -> tuple[list[np.ndarray], list[Any]]:
    """The oracle: positions in order of first appearance, -1 for None."""
    seen: dict[Any, int] = {}
    out = []
    for block in blocks:
        out.append(np.array([-1 if v is None else seen.setdefault(v, len(seen)) for v in block]))
    return out, list(seen)


@pytest.mark.parametrize("type_", [pa.large_string(), pa.string(), pa.large_binary()])
def test_byte_strings_are_numbered_in_order_of_first_appearance(
    hashed: None, type_: pa.DataType
) -> None:
    rng = np.random.default_rng(0)
    blocks: list[list[Any]] = [strings(rng, rows, 40) for rows in (0, 1, 5, 50, 300, 7)]
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        blocks = [[None if v is None else v.encode() for v in block] for block in blocks]
    expected, distinct = dict_positions(blocks)
    table = hash_table.HashedValues(type_)
    for block, want in zip(blocks, expected, strict=True):
        # Sliced, so that the array's offset is not 0.
        array = pa.array([None, *block], type_).slice(1)
        assert table.lookup(array, add=True).tolist() == want.tolist()
    assert table.values.to_pylist() == distinct
    assert len(table._table) > 2  # it grew
    probe = pa.array([*distinct, None, "user-0000zzzz-ü".encode() if distinct else ""], type_)
    found = table.lookup(probe, add=False)
    assert found.tolist() == [*range(len(distinct)), -1, -1]


def test_fixed_width_values_compare_as_index_in_does(hashed: None) -> None:
    cases: list[tuple[pa.DataType, list[Any]]] = [
        (pa.int64(), [0, -1, 2**63 - 1, -(2**63), 0, None, 7, -1]),
        (pa.uint64(), [2**64 - 1, 0, 2**63, 2**64 - 1, None]),
        # index_in compares bit patterns: -0.0 is not 0.0, nor NaN a NaN of the other sign.
        (pa.float64(), [0.0, -0.0, float("nan"), 1.5, -float("nan"), -0.0, None, float("inf")]),
        (pa.timestamp("us", "UTC"), [5, 6, 5, None, -1]),
        (pa.binary(16), [b"a" * 16, b"a" * 15 + b"b", b"a" * 16, None, b"\0" * 16]),
    ]
    for type_, pool in cases:
        array = pa.array(pool, type_)
        table = hash_table.HashedValues(type_)
        positions = table.lookup(array, add=True)
        # The oracle: pyarrow's unique (first appearance) and index_in against it.
        unique = pc.unique(array.drop_null())
        stored, oracle = table.values, unique
        if pa.types.is_floating(type_):  # NaN equals nothing: compare bits
            stored, oracle = stored.view(pa.uint64()), unique.view(pa.uint64())
        assert stored.equals(oracle), type_
        want = pc.index_in(array, value_set=unique).to_numpy(zero_copy_only=False)
        assert positions.tolist() == [-1 if np.isnan(w) else int(w) for w in want], type_


def test_a_null_value_is_kept_at_its_position_and_never_found(hashed: None) -> None:
    index = ValueIndex(pa.large_string())
    index.find_or_add(pa.array(["a", ""], pa.large_string()))
    assert index.append_null() == 2
    assert index.find_or_add(pa.array(["b", None, ""], pa.large_string())).tolist() == [3, -1, 1]
    assert index.values.to_pylist() == ["a", "", None, "b"]
    assert index.values.null_count == 1


def test_value_index_hands_over_to_the_table_midway(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below HASH_FROM pyarrow answers; the values it holds (a null among them) move into the
    table when the run passes it, at the same positions."""
    monkeypatch.setattr(values, "HASH_FROM", 30)
    monkeypatch.setattr(hash_table, "_FIRST_SLOTS", 2)
    rng = np.random.default_rng(1)
    blocks = [strings(rng, rows, 60) for rows in (8, 8, 40, 40, 40)]
    index, oracle = ValueIndex(pa.large_string()), ValueIndex(pa.large_string())
    monkeypatch.setattr(oracle, "_hashes", lambda values: False)
    for k, block in enumerate(blocks):
        array = pa.array(block, pa.large_string())
        if k == 1:
            assert index.append_null() == oracle.append_null()
        assert index.find_or_add(array).tolist() == oracle.find_or_add(array).tolist()
        assert index.values.equals(oracle.values)
    assert index.hashed is not None and oracle.hashed is None
    probe = pa.array(["nobody", *blocks[-1]], pa.large_string())
    assert index.find(probe).tolist() == oracle.find(probe).tolist()


def test_an_encoder_on_the_table_copies_and_pickles(hashed: None) -> None:
    """Dask copies encoders and ships them between processes."""
    encoder = KeyEncoder(["k"])
    encoder.encode(pa.table({"k": ["a", "b", None, "a"]}))
    for other in (copy.deepcopy(encoder), pickle.loads(pickle.dumps(encoder))):
        assert other.encode(pa.table({"k": ["b", "c"]})).tolist() == [1, 2]
        assert other.finish().keys.column(0).to_pylist() == ["a", "b", "c"]
    assert encoder.finish().keys.column(0).to_pylist() == ["a", "b"]


def test_small_dictionaries_never_load_numba() -> None:
    """The 60-group case keeps pyarrow's path: numba's import alone costs more than it."""
    code = (
        "import sys, pyarrow as pa; from segcli.keys import KeyEncoder; "
        "e = KeyEncoder(['c', 'o']); "
        "e.encode(pa.table({'c': [f'C{i % 20}' for i in range(90000)], "
        "'o': [str(i % 3) for i in range(90000)]})); e.finish(); "
        "assert 'numba' not in sys.modules, 'numba loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the encoder, old path against new ---------------------------------------------------------


def key_table(rng: np.random.Generator, rows: int) -> pa.Table:
    floats = rng.choice([0.0, -0.0, np.nan, 1.5, 2.5, -3.0], rows)
    float_mask = rng.random(rows) < 0.1
    return pa.table(
        {
            "s": pa.array(strings(rng, rows, 30)),
            "i": pa.array(rng.integers(-5, 5, rows), mask=rng.random(rows) < 0.1),
            "f": pa.array(floats, mask=float_mask),
            "v": rng.normal(size=rows),
        }
    )


def encoded(table: pa.Table, by: list[str], sizes: int, **options: Any) -> tuple[Any, ...]:
    """Each row's output row (-1: dropped) and the key table: what the output is made of.
    (Group ids themselves may be numbered otherwise: the grid of a block's slots numbers
    combinations in slot order, and the table's slots are the run's codes.)"""
    encoder = KeyEncoder(by, **options)
    parts = [encoder.encode(table.slice(at, sizes)) for at in range(0, table.num_rows, sizes)]
    ids = np.concatenate(parts)
    keys = encoder.finish()
    output_row = np.argsort(keys.order)
    rows = np.where(ids == MISSING, -1, output_row[np.maximum(ids, 0)])
    return rows.tolist(), keys.keys, encoder.n_groups, encoder.missing_rows


@pytest.mark.parametrize("by", [["s"], ["i"], ["f"], ["s", "i", "f"]])
@pytest.mark.parametrize("null_keys", ["drop", "group"])
@pytest.mark.parametrize("sizes", [1, 7, 1000])
def test_encoder_gives_the_ids_and_keys_of_pyarrows_path(
    monkeypatch: pytest.MonkeyPatch, by: list[str], null_keys: str, sizes: int
) -> None:
    table = key_table(np.random.default_rng(2), 200)
    # A tiny dense limit: several columns' code tuples go through the table too.
    options = {"null_keys": null_keys, "_dense_limit": 4}
    before = encoded(table, by, sizes, **options)
    monkeypatch.setattr(values, "HASH_FROM", 0)
    monkeypatch.setattr(hash_table, "_FIRST_SLOTS", 2)
    assert encoded(table, by, sizes, **options) == before


def test_encoder_on_the_table_matches_pandas(hashed: None) -> None:
    table = key_table(np.random.default_rng(3), 300)
    rows, keys, groups, _ = encoded(table, ["s", "i"], 13, null_keys="drop", _dense_limit=4)
    frame = table.to_pandas()
    want = frame.groupby(["s", "i"], sort=True)["v"].sum()
    assert [tuple(row.values()) for row in keys.to_pylist()] == list(want.index)
    kept = np.array(rows) >= 0
    sums = np.zeros(groups)
    np.add.at(sums, np.array(rows)[kept], frame["v"].to_numpy()[kept])
    assert np.allclose(sums, want.to_numpy())


def test_keys_from_looks_keys_up_in_the_table(hashed: None) -> None:
    keys = pa.table({"s": ["b", "", "é", None], "i": [1, 2, 3, 4]})
    data = pa.table({"s": ["é", "b", None, "", "b"], "i": [3, 1, 4, 2, 1]})
    encoder = KeyEncoder(["s", "i"], null_keys="group", keys_from=keys, _dense_limit=1)
    assert encoder.encode(data).tolist() == [2, 0, 3, 1, 0]
    encoder.encode(pa.table({"s": ["zz"], "i": [1]}))
    with pytest.raises(InvalidInputError, match=r"row 5 has key \(s='zz', i=1\)"):
        encoder.finish()


# --- the command line, bytes against pyarrow's path --------------------------------------------


@pytest.mark.parametrize("extra", [[], ["--chunk-rows", "9"], ["--null-keys", "group"]])
def test_command_line_bytes_are_those_of_pyarrows_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str]
) -> None:
    rng = np.random.default_rng(4)
    path = tmp_path / "t.parquet"
    pq.write_table(key_table(rng, 120), path, row_group_size=25)
    outputs = []
    for hash_from in (1 << 30, 0):
        monkeypatch.setattr(values, "HASH_FROM", hash_from)
        out = tmp_path / f"{hash_from}.parquet"
        ran = run_main("mean", path, "--data-column", "v", "--by", "s,f", "-q", "-o", out, *extra)
        assert ran.exit_code == 0, ran.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
