"""Tables on a pipe given by its path (``/dev/stdin``, a named pipe, ``<(producer)``): an
Arrow IPC stream, JSON lines and CSV stream in one pass, as their files do and as an Arrow
stream on ``-`` does, with the bytes of the run that reads the file whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.ipc as ipc
import pytest

from segcli.io import formats
from tests.entry import Ran, run_main
from tests.pipes import fifo_fed_with

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")

ROWS = 40_000
#: Bytes a pipe's pass keeps here: the tables are longer, in every format.
KEPT = 1 << 16


@pytest.fixture(autouse=True)
def few_bytes_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formats, "KEEP_BYTES", KEPT, raising=False)


def ok(*args: object) -> Ran:
    result = run_main(*args)
    assert result.exit_code == 0, result.stderr
    return result


def write(path: Path, table: pa.Table) -> Path:
    """``table`` as an Arrow IPC stream, JSON lines or CSV, by the suffix."""
    if path.suffix == ".arrow":
        with ipc.new_stream(path, table.schema) as writer:
            writer.write_table(table, max_chunksize=10_000)
    elif path.suffix == ".jsonl":
        rows = table.to_pylist()
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        pcsv.write_csv(table, path)
    return path


def a_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table({"v": rng.random(rows).round(4), "s": rng.integers(0, 50, rows)})


def run(tmp_path: Path, source: Path, *args: object) -> tuple[bytes, str]:
    """``segcli sum SOURCE ARGS``: the result's bytes and the run's mode."""
    out, summary = tmp_path / "out.npy", tmp_path / "summary.json"
    ok("sum", source, *args, "-n", 50, "-q", "-o", out, "--summary-json", summary)
    return out.read_bytes(), json.loads(summary.read_text())["mode"]


@pytest.mark.parametrize("kind", ["arrow", "jsonl", "csv"])
def test_a_table_on_a_pipe_streams_with_the_bytes_of_a_whole_read(
    tmp_path: Path, kind: str
) -> None:
    # Read into memory whole, a pipe's run held the table and every column read from it.
    path = write(tmp_path / f"t.{kind}", a_table(ROWS))
    assert path.stat().st_size > 4 * KEPT  # the pass goes past the bytes kept
    columns = ["--data-column", "v", "--ids-column", "s"]
    want, mode = run(tmp_path, path, *columns)
    assert mode == "in-memory"
    name = "p.csv" if kind == "csv" else "pipe"  # CSV is read from a pipe whose name says so
    fifo = fifo_fed_with(tmp_path, path.read_bytes(), name)
    assert run(tmp_path, fifo, *columns) == (want, "streaming")


def test_ids_on_a_pipe_of_their_own_stream_too(tmp_path: Path) -> None:
    table = a_table(ROWS)
    data = tmp_path / "data.npy"
    np.save(data, table.column("v").to_numpy())
    ids = write(tmp_path / "ids.arrow", table.select(["s"]))
    want, _ = run(tmp_path, data, ids)
    fifo = fifo_fed_with(tmp_path, ids.read_bytes())
    assert run(tmp_path, data, fifo) == (want, "streaming")


def test_several_columns_of_a_table_on_a_pipe_stream(tmp_path: Path) -> None:
    table = a_table(ROWS).append_column("w", pa.array(np.arange(ROWS) % 7, pa.float64()))
    path = write(tmp_path / "t.jsonl", table)
    args = ["--data-column", "v,w", "--ids-column", "s", "--op", "sum,max", "-n", 50, "-q"]
    want = ok("agg", path, *args).stdout
    summary = tmp_path / "summary.json"
    fifo = fifo_fed_with(tmp_path, path.read_bytes())
    assert ok("agg", fifo, *args, "--summary-json", summary).stdout == want
    assert json.loads(summary.read_text())["mode"] == "streaming"


def test_an_arrow_file_on_a_pipe_is_read_whole(tmp_path: Path) -> None:
    # An Arrow file is read by seeking to its footer: a pipe's bytes are held to read it.
    path = tmp_path / "t.arrow"
    table = a_table(1000)
    with ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    columns = ["--data-column", "v", "--ids-column", "s"]
    want, _ = run(tmp_path, path, *columns)
    fifo = fifo_fed_with(tmp_path, path.read_bytes())
    assert run(tmp_path, fifo, *columns) == (want, "in-memory")


def test_a_type_change_past_the_head_says_to_save_the_pipe_to_a_file(tmp_path: Path) -> None:
    # A pipe's table streams: "read the file whole" alone would not read it so. Its row is
    # found by reading the file again, which a pipe's pass cannot.
    values = [str(i % 7) for i in range(250_000)] + ["2.5"]  # past the 1 MiB types come from
    lines = ["v,s", *(f"{v},{i % 50}" for i, v in enumerate(values))]
    path = tmp_path / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    args = ["--data-column", "v", "--ids-column", "s", "-n", 50, "--chunk-rows", 1000]
    assert "(first at row 250000)" in run_main("sum", path, *args).stderr
    fifo = fifo_fed_with(tmp_path, path.read_bytes(), "p.csv")
    from_pipe = run_main("sum", fifo, *args)
    assert from_pipe.exit_code == 3
    assert f"Error: {fifo}: column 'v' holds '2.5' after its first rows" in from_pipe.stderr
    assert "first at row" not in from_pipe.stderr
    assert "read the file whole: save it to a file first, as a table on a pipe" in from_pipe.stderr


@pytest.mark.parametrize("kind", ["arrow", "jsonl", "csv"])
@pytest.mark.parametrize("command", ["sum", "agg"])
def test_by_over_a_table_on_a_pipe_streams_its_keys_in_the_same_pass(
    tmp_path: Path, kind: str, command: str
) -> None:
    # Read whole, a pipe's --by run held the table; streamed, the keys and the data column
    # would each read the pipe.
    table = a_table(ROWS).append_column(
        "k", pa.array(np.array(["x", "y", "z"])[np.arange(ROWS) % 3])
    )
    path = write(tmp_path / f"t.{kind}", table)
    args = ["--data-column", "v", "--by", "k,s", "-q"] + (
        ["--op", "sum,count"] if command == "agg" else []
    )
    want = ok(command, path, *args).stdout
    summary = tmp_path / "summary.json"
    fifo = fifo_fed_with(tmp_path, path.read_bytes(), "p.csv" if kind == "csv" else "pipe")
    assert ok(command, fifo, *args, "--summary-json", summary).stdout == want
    assert json.loads(summary.read_text())["mode"] == "streaming"
