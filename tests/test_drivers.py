"""The drivers share one shape: the same spec gives the same facts and answer in every mode."""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import click
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from segcli import cli as cli_module
from segcli.drivers import check as checking
from segcli.drivers import memory, stream
from segcli.drivers.base import RunSpec
from segcli.drivers.choose import choose_driver
from segcli.errors import SegcliError


def write_table(tmp_path: Path, name: str) -> Path:
    """A two-column table (value, segment) under ``name``: Parquet, or gzipped CSV."""
    rng = np.random.default_rng(5)
    table = pa.table(
        {"value": rng.normal(size=500), "segment": rng.integers(-1, 9, 500).astype(np.int64)}
    )
    path = tmp_path / name
    if name.endswith(".csv.gz"):
        with pa.CompressedOutputStream(str(path), "gzip") as out:
            pacsv.write_csv(table, out)
    else:
        pq.write_table(table, path, row_group_size=100)
    return path


@pytest.mark.parametrize("name", ["t.pq", "t.parquet", "t.csv.gz"])
def test_memory_and_stream_give_the_same_facts(tmp_path: Path, name: str) -> None:
    """The format is io's (``parquet`` for ``.pq``, ``csv`` for ``.csv.gz``), in every mode."""
    path = write_table(tmp_path, name)
    spec = RunSpec(op="sum", data=str(path), data_column="value", ids_column="segment")
    whole = memory.run(spec)
    streamed = stream.run(dataclasses.replace(spec, block_rows=64))
    assert (whole.mode, streamed.mode) == ("in-memory", "streaming")
    assert streamed.data == whole.data and streamed.ids == whole.ids
    assert whole.data.format == ("csv" if name.endswith(".csv.gz") else "parquet")
    np.testing.assert_array_equal(streamed.reduction.result, whole.reduction.result)


@pytest.mark.parametrize("name", ["t.pq", "t.csv.gz"])
def test_check_facts_are_the_same_in_memory_and_streamed(tmp_path: Path, name: str) -> None:
    path = write_table(tmp_path, name)
    spec = RunSpec(op="min", data=str(path), data_column="value", ids_column="segment")
    whole = checking.check_in_memory(spec)
    streamed = checking.check_streamed(dataclasses.replace(spec, block_rows=64))
    assert (whole.mode, streamed.mode) == ("in-memory", "streaming")
    assert streamed.data == whole.data and streamed.ids == whole.ids
    assert streamed.id_report == whole.id_report
    np.testing.assert_array_equal(streamed.counts, whole.counts)


def test_streamed_check_finds_the_first_nan_across_blocks(tmp_path: Path) -> None:
    data = np.zeros((300, 2))
    data[130, 1] = data[250, 0] = np.nan
    np.save(tmp_path / "d.npy", data)
    np.save(tmp_path / "i.npy", np.arange(300) % 7)
    spec = RunSpec(op="sum", data=str(tmp_path / "d.npy"), ids=str(tmp_path / "i.npy"))
    whole = checking.check_in_memory(spec)
    streamed = checking.check_streamed(dataclasses.replace(spec, block_rows=50))
    assert (streamed.nan_values, streamed.first_nan) == (2, (130, 1))
    assert (whole.nan_values, whole.first_nan) == (2, (130, 1))


def test_choose_driver_says_why(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.arange(10.0))
    np.save(tmp_path / "i.npy", np.arange(10) % 3)
    spec = RunSpec(op="sum", data=str(tmp_path / "d.npy"), ids=str(tmp_path / "i.npy"))
    assert choose_driver(spec) == ("in-memory", "the inputs fit the memory budget")
    chunked = dataclasses.replace(spec, block_rows=4)
    assert choose_driver(chunked) == ("streaming", "rows per block given")
    small = dataclasses.replace(spec, stream_above=100)
    assert choose_driver(small) == ("streaming", "inputs over 100 bytes")
    assert choose_driver(dataclasses.replace(spec, engine="dask"))[0] == "distributed"
    np.save(tmp_path / "s.npy", np.float64(1.0))
    scalar = dataclasses.replace(spec, data=str(tmp_path / "s.npy"), engine="dask")
    assert choose_driver(scalar)[0] == "in-memory"


def _options_for_request(command: object) -> list[str]:
    """The options a command hands to ``_request``: its parameters, less those its own
    function names (it consumes them itself)."""
    consumed = set(inspect.signature(command.callback).parameters)  # type: ignore[attr-defined]
    return [p.name for p in command.params if p.name not in consumed]  # type: ignore[attr-defined]


def test_every_command_option_maps_to_a_request_field() -> None:
    checked = 0
    ctx = click.Context(cli_module.cli)
    names = cli_module.cli.list_commands(ctx)  # the op commands are built on demand
    for name in names:
        if name == "info":  # reads one file's metadata: no request
            continue
        options = _options_for_request(cli_module.cli.get_command(ctx, name))
        request = cli_module._request("sum", **dict.fromkeys(options))
        assert set(options) <= set(vars(request)), name
        checked += 1
    assert checked == len(names) - 1 == len(cli_module.cli.commands) - 1


def test_an_unknown_request_option_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="no RunRequest field: bogus"):
        cli_module._request("sum", data="d.npy", bogus=1)


def test_check_summary_json_keeps_its_schema(tmp_path: Path) -> None:
    """The check's facts come from summary.py now; keys and order are the documented ones."""
    path = write_table(tmp_path, "t.pq")
    args = ["check", str(path), "--data-column", "value", "--ids-column", "segment"]
    result = CliRunner().invoke(cli_module.cli, [*args, "--summary-json", "-", "--no-nan"])
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stderr)
    assert list(facts) == [
        "schema_version",
        "command",
        "data",
        "ids",
        "family",
        "mode",
        "num_segments",
        "num_segments_inferred",
        "rows_total",
        "rows_used",
        "rows_dropped_negative",
        "rows_dropped_beyond_n",
        "rows_dropped",
        "empty_segments",
        "nan_values",
        "passed",
        "failures",
        "exit_code",
        "error",
    ]
    assert facts["data"]["format"] == "parquet" and facts["mode"] == "in-memory"


@pytest.mark.parametrize(
    ("data", "n", "message"),
    [
        (np.ones(6, bool), -1, "bool data is not supported by sum"),
        (np.ones(6), -1, "num_segments = -1 must not be negative"),
    ],
    ids=["dtype-before-n", "n"],
)
def test_metadata_checks_say_the_same_in_memory_and_streamed(
    tmp_path: Path, data: np.ndarray, n: int, message: str
) -> None:
    np.save(tmp_path / "d.npy", data)
    np.save(tmp_path / "i.npy", np.arange(6) % 2)
    spec = RunSpec(
        op="sum", data=str(tmp_path / "d.npy"), ids=str(tmp_path / "i.npy"), num_segments=n
    )
    errors = []
    for run in (memory.run, stream.run):
        with pytest.raises(SegcliError) as caught:
            run(spec)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and message in errors[0]
