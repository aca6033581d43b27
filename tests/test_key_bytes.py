"""The declared bytes of dictionary key columns (the run's input facts), on the shortcut for
a dictionary of values of one length and on the general gather of each row's length, and the
same count in memory and streamed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.io.keys import _declared_nbytes


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


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


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_declared_dictionary_keys_count_the_same_bytes_in_any_blocks(
    tmp_path: Path, suffix: str
) -> None:
    """A key column the file declares a dictionary counts its indices for every row and its
    dictionary once while it repeats (row groups, record batches): the run's facts say the
    same bytes in memory and streamed in blocks of any size."""
    rng = np.random.default_rng(0)
    rows, dictionary = 20_000, pa.array(["a", "bb", "ccc", "dddd"])
    keys = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 4, rows), pa.int32()), dictionary
    )
    table = pa.table({"k": keys, "x": rng.random(rows)})
    path = tmp_path / f"t{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, path, row_group_size=2_000, store_schema=True)
    else:
        with pa.ipc.new_file(path, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=2_000):
                writer.write_batch(batch)
    counted = set()
    for blocks in (
        [],
        ["--chunk-rows", "700"],
        ["--chunk-rows", "5000"],
        ["--chunk-rows", "20000"],
    ):
        facts, out = tmp_path / "facts.json", tmp_path / "out.parquet"
        args = ["--data-column", "x", "--by", "k", "-q", "-o", out, "--summary-json", facts]
        done = run("sum", path, *args, *blocks)
        assert done.exit_code == 0, done.stderr
        summary = json.loads(facts.read_text())
        assert summary["mode"] == ("in-memory" if not blocks else "streaming"), blocks
        counted.add(summary["ids"]["bytes"])
    assert counted == {4 * rows + dictionary.nbytes}
