"""The declared bytes of dictionary key columns (the run's input facts), on the shortcut for
a dictionary of values of one length and on the general gather of each row's length."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from segcli.io.keys import _declared_nbytes


def plain_bytes(column: pa.DictionaryArray) -> int:
    """Offsets (4 bytes a row), validity where a row is null, and each present row's text."""
    rows = column.to_pylist()
    validity = (len(rows) + 7) // 8 if column.null_count else 0
    return 4 * len(rows) + validity + sum(len(v.encode()) for v in rows if v is not None)


def declared(column: pa.DictionaryArray) -> int:
    keys = pa.table({"k": column})
    return _declared_nbytes(keys, pa.schema([pa.field("k", pa.string())]))


@pytest.mark.parametrize(
    "dictionary",
    [["JFK", "LAX", "ORD"], ["JFK", "LA", "ORDX"], ["é", "a"], ["", ""], []],
    ids=["one-length", "lengths", "utf8", "empty-strings", "no-values"],
)
@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
def test_declared_bytes_are_the_plain_columns(dictionary: list[str], nulls: bool) -> None:
    rng = np.random.default_rng(0)
    rows = 1000
    if dictionary:
        indices = rng.integers(0, len(dictionary), rows).astype(np.int32)
        mask = rng.random(rows) < 0.2 if nulls else None
    else:
        indices, mask = np.zeros(rows, np.int32), np.ones(rows, np.bool_)
    column = pa.DictionaryArray.from_arrays(
        pa.array(indices, mask=mask), pa.array(dictionary, pa.string())
    )
    assert declared(column) == plain_bytes(column)


def test_a_null_in_the_dictionary_takes_the_general_path() -> None:
    # Rows pointing at a null dictionary value hold no text, though their index is valid.
    column = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 1, 0], pa.int32()), pa.array(["abc", None], pa.string())
    )
    assert declared(column) == 4 * 4 + 2 * 3


def test_values_of_one_length_need_no_gather_of_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.compute as pc

    def no_gather(*args: object, **kwargs: object) -> None:
        raise AssertionError("gathered a length per row")

    monkeypatch.setattr(pc, "take", no_gather)
    column = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, None, 2], pa.int32()), pa.array(["C01", "C02", "C03"], pa.string())
    )
    assert declared(column) == 4 * 4 + 1 + 3 * 3
