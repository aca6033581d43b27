"""The Parquet reader that decodes stripes of row groups on two threads (io.parquet_batches)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segcli.io import parquet_batches as reading
from segcli.io.parquet_batches import parquet_batches

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, group_sizes: list[int]) -> Path:
    """A file with row groups of the given sizes: an id column, a float and a string key."""
    rows = sum(group_sizes)
    table = pa.table(
        {
            "row": np.arange(rows),
            "v": np.random.default_rng(0).normal(size=rows),
            "k": pa.array([f"k{i % 5}" for i in range(rows)]),
        }
    )
    with pq.ParquetWriter(path, table.schema) as writer:
        start = 0
        for size in group_sizes:
            writer.write_table(table.slice(start, size))
            start += size
    return path


def readers_left() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "segcli-parquet"]


@pytest.mark.parametrize("rows", [1, 3, 5, 7, 20, 100])
@pytest.mark.parametrize("dictionary", [False, True])
def test_batches_come_in_file_order_as_one_reader_gives_them(
    tmp_path: Path, rows: int, dictionary: bool
) -> None:
    path = write(tmp_path / "t.parquet", [7, 7, 7, 3, 10, 1, 9])
    coded = ["k"] if dictionary else []

    def open_file() -> pq.ParquetFile:
        return pq.ParquetFile(path, read_dictionary=coded)

    batches = list(parquet_batches(open_file, ["row", "v", "k"], rows))
    assert all(0 < batch.num_rows <= rows for batch in batches)
    assert pa.Table.from_batches(batches).equals(open_file().read(columns=["row", "v", "k"]))
    assert not readers_left()


def test_stripes_hold_whole_row_groups_of_at_least_two_batches() -> None:
    assert reading._stripes([7, 7, 7, 3, 10, 1, 9], 5) == [[0, 1], [2, 3], [4], [5, 6]]
    assert reading._stripes([100, 100], 5) == [[0], [1]]
    assert reading._stripes([3, 3, 3], 100) == [[0, 1, 2]]


@pytest.mark.parametrize(("groups", "rows"), [([4, 4], 100), ([30, 30, 30, 30], 10)])
def test_one_stripe_or_large_row_groups_are_read_without_threads(
    tmp_path: Path, groups: list[int], rows: int
) -> None:
    # Arrow's reader holds a row group's column chunks whole: two at once only if small.
    path = write(tmp_path / "t.parquet", groups)
    batches = parquet_batches(lambda: pq.ParquetFile(path), ["v"], rows)
    assert next(batches).num_rows == min(rows, sum(groups))
    assert not readers_left()
    assert sum(batch.num_rows for batch in batches) == sum(groups) - min(rows, sum(groups))


def test_a_readers_error_is_raised_to_the_consumer(tmp_path: Path) -> None:
    path = write(tmp_path / "t.parquet", [5] * 10)
    opened = 0

    def open_file() -> pq.ParquetFile:
        nonlocal opened
        opened += 1
        if opened == 3:  # the second reader's own
            raise OSError("disk gone")
        return pq.ParquetFile(path)

    with pytest.raises(OSError, match="disk gone"):
        list(parquet_batches(open_file, ["v"], 5))
    assert not readers_left()


def test_closing_early_stops_both_readers(tmp_path: Path) -> None:
    path = write(tmp_path / "t.parquet", [50] * 40)
    batches = parquet_batches(lambda: pq.ParquetFile(path), ["v", "k"], 25)
    assert next(batches).num_rows == 25
    assert readers_left()
    batches.close()
    assert not readers_left()


_EXIT_AFTER_READING = """
import sys
import pyarrow.parquet as pq
from segcli.io.parquet_batches import parquet_batches
path, whole = sys.argv[1], sys.argv[2] == "whole"
batches = parquet_batches(lambda: pq.ParquetFile(path), ["v", "k"], 20_000)
if whole:
    rows = sum(batch.num_rows for batch in batches)
else:
    rows = next(batches).num_rows  # the readers are left decoding ahead
sys.exit(3 if rows else 1)
"""


@pytest.mark.parametrize("whole", ["whole", "first batch"])
def test_a_process_ending_right_after_its_read_keeps_its_exit_code(
    tmp_path: Path, whole: str
) -> None:
    # A reader thread ending as the interpreter ends aborted the process (exit 134).
    path = write(tmp_path / "t.parquet", [10_000] * 40)
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _EXIT_AFTER_READING, str(path), whole],
            cwd=ROOT,
            capture_output=True,
            check=False,
        )
        assert (done.returncode, done.stderr) == (3, b"")
