"""A streamed Parquet run whose data and ids are columns of one file: one read, batches of the
run's blocks, the bytes of the in-memory run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.io import chunked, column_set

ROWS = 61


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def table(tmp_path: Path) -> Path:
    rng = np.random.default_rng(11)
    path = tmp_path / "t.parquet"
    columns = {
        "v": rng.normal(size=ROWS).astype(np.float32),
        "id": rng.integers(-1, 9, ROWS).astype(np.int32),
    }
    pq.write_table(pa.table(columns), path, row_group_size=7)  # groups across the blocks
    return path


@pytest.fixture
def reads(monkeypatch) -> dict[str, list[int]]:
    """How often each reader opened the file, and the rows per batch of the shared one."""
    seen: dict[str, list[int]] = {"batches": [], "one column": []}
    opened = column_set.TableBatches._open

    def counted_open(self):
        seen["batches"].append(self._batch_rows)
        return opened(self)

    one_column = chunked.TableChunks.__init__

    def counted_one_column(self, table, column):
        seen["one column"].append(1)
        one_column(self, table, column)

    monkeypatch.setattr(column_set.TableBatches, "_open", counted_open)
    monkeypatch.setattr(chunked.TableChunks, "__init__", counted_one_column)
    return seen


COLUMNS = ("--data-column", "v", "--ids-column", "id")


@pytest.mark.parametrize("chunk", [1, 5, 7, 64])
@pytest.mark.parametrize("command", [("sum",), ("agg", "--op", "sum,mean,max,std,count")])
def test_data_and_ids_of_one_parquet_file_stream_in_one_read(
    table, tmp_path, reads, chunk, command
):
    whole, streamed = tmp_path / "whole.npz", tmp_path / "streamed.npz"
    first = run(*command, table, *COLUMNS, "-n", 9, "-q", "-o", whole)
    assert first.exit_code == 0, first.stderr
    assert reads == {"batches": [], "one column": []}  # read whole
    result = run(*command, table, *COLUMNS, "-n", 9, "-q", "-o", streamed, "--chunk-rows", chunk)
    assert result.exit_code == 0, result.stderr
    assert reads == {"batches": [chunk], "one column": []}
    with np.load(whole) as a, np.load(streamed) as b:
        assert a.files == b.files
        assert all(a[name].tobytes() == b[name].tobytes() for name in a.files)


def test_a_parquet_file_of_one_column_for_each_input_still_streams_per_file(table, tmp_path, reads):
    ids = tmp_path / "ids.parquet"
    pq.write_table(pq.read_table(table, columns=["id"]), ids)
    out = tmp_path / "o.npy"
    args = ("--data-column", "v", "-n", 9, "-q", "-o", out, "--chunk-rows", 4)
    result = run("sum", table, ids, *args)
    assert result.exit_code == 0, result.stderr
    assert reads == {"batches": [], "one column": [1, 1]}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("--data-column", "v", "--ids-column", "nope"), "t.parquet: no column 'nope'"),
        (("--data-column", "nope", "--ids-column", "id"), "t.parquet: no column 'nope'"),
        (("--data-column", "v"), "pick one with --ids-column"),
        (("--data-column", "v", "--ids-column", "id", "--data-key", "a"), "--data-key applies"),
        (("--data-column", "v", "--ids-column", "id", "--ids-key", "a"), "--ids-key applies"),
    ],
)
def test_a_streamed_table_names_the_option_at_fault(table, tmp_path, options, message):
    out = tmp_path / "o.npy"
    result = run("sum", table, *options, "-q", "-o", out, "--chunk-rows", 4)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0]
    assert not out.exists()
