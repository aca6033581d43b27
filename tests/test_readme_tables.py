"""The README's tables, row by row, against what the program does.

Each expectation is read from the README's own text (a table cell, a list of keys), so a row
that goes stale fails here: the JSON summary's keys, the ops' empty-segment values and dtypes,
the formats' written columns, the engines' thresholds and ``info --json``'s facts.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

import segcli
from segcli.cli import cli
from segcli.engines import _REGISTRY, NUMBA_WARM_MIN_ELEMENTS
from segcli.op_names import OP_SUMMARIES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    return README.split(f"\n## {title}\n")[1].split("\n## ")[0]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every body row of the markdown tables in ``text``."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"\|[-:|]+\|$", line):
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return [row for row in rows if row[0] not in ("field", "op", "format", "engine", "code")]


def backquoted(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@pytest.fixture
def in_sample_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(ROOT / "sample_data", tmp_path / "sample_data")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def segcli_run(*args: str, exit_code: int = 0) -> Result:
    done = CliRunner().invoke(cli, list(args))
    assert done.exit_code == exit_code, done.output
    return done


def summary_of(*args: str, exit_code: int = 0) -> dict[str, Any]:
    segcli_run(*args, "-q", "--summary-json", "summary.json", exit_code=exit_code)
    facts: dict[str, Any] = json.loads(Path("summary.json").read_text())
    Path("summary.json").unlink()
    return facts


# --- JSON summary ---------------------------------------------------------------------------

JSON_SECTION = section("JSON summary")
RUN_TABLE, _, AFTER_RUN = JSON_SECTION.partition("A failed run still writes")
CHECK_TABLE = AFTER_RUN.partition("`segcli check --summary-json` writes:")[2]


def documented_fields(table: str) -> set[str]:
    return {name for row in table_rows(table) for name in backquoted(row[0])}


def sub_keys(table: str, field: str) -> set[str]:
    """The ``{a, b, c}`` a field's row gives as its object's keys."""
    row = next(row for row in table_rows(table) if f"`{field}`" in row[0])
    found = re.search(r"`\{([^}]*)\}`", row[1])
    assert found is not None, field
    return {key.strip() for key in found[1].split(",")}


SAMPLE = ("sample_data/data.npy", "sample_data/ids.npy")
RUNS = {
    "plain": ["sum", *SAMPLE, "-n", "4"],
    "streamed": ["sum", *SAMPLE, "--chunk-rows", "100"],
    "by": ["mean", "sample_data/flights.parquet", "--data-column", "arr_delay", "--by", "carrier"],
    "skipna": [
        "mean",
        "sample_data/gaps.parquet",
        "--data-column",
        "temp",
        "--ids-column",
        "sensor",
        "--skipna",
    ],
    "agg": ["agg", *SAMPLE, "--op", "mean,std"],
    "indices": [
        "mean",
        "sample_data/vocab.npy",
        "sample_data/bags.parquet",
        "--ids-column",
        "bag",
        "--indices-column",
        "token",
    ],
}


def test_the_json_summary_of_runs_has_the_documented_fields(in_sample_folder: Path) -> None:
    documented = documented_fields(RUN_TABLE)
    seen: set[str] = set()
    for name, args in RUNS.items():
        facts = summary_of(*args)
        assert set(facts) <= documented, (name, set(facts) - documented)
        seen |= set(facts)
        for field in ("data", "ids"):
            assert set(facts[field]) == sub_keys(RUN_TABLE, field), (name, field)
        for field in ("keys", "skipped"):
            assert (field in facts) == (name == {"keys": "by", "skipped": "skipna"}[field])
            if field in facts:
                assert set(facts[field]) == sub_keys(RUN_TABLE, field), name
        assert ("results" in facts) == (name == "agg")
        phases = {"read+compute", "write"} if name == "streamed" else None
        assert set(facts["timings_s"]) == (phases or {"read", "validate", "compute", "write"}) | {
            "total"
        }
        assert (facts["exit_code"], facts["error"]) == (0, None)
    assert seen == documented


def test_an_agg_summary_describes_each_result_column(in_sample_folder: Path) -> None:
    facts = summary_of(*RUNS["agg"])
    row = next(row for row in table_rows(RUN_TABLE) if "`results`" in row[0])
    keys = re.search(r"`\{([^}]*)\}`", row[1])
    assert keys is not None
    for result in facts["results"]:
        assert set(result) == {key.strip() for key in keys[1].split(",")}
    assert (facts["result_min"], facts["result_max"], facts["output_dtype"]) == (
        None,
        None,
        "columns",
    )
    assert facts["output_shape"] == [facts["num_segments"], len(facts["results"])]


def test_a_failed_run_writes_the_documented_fields(in_sample_folder: Path) -> None:
    fields = re.search(r"JSON, so CI can read why: `\{([^}]*)\}`", JSON_SECTION)
    assert fields is not None
    documented = {key.strip() for key in fields[1].split(",")}
    failed = summary_of("sum", *SAMPLE, "-n", "2", exit_code=1)
    assert set(failed) == documented
    assert failed["error"].startswith("Error: ")
    failed_check = summary_of("check", *SAMPLE, "-n", "2", exit_code=1)
    assert set(failed_check) == documented | {"passed"}
    assert failed_check["passed"] is False
    # A usage error writes none.
    segcli_run("sum", *SAMPLE, "--rtol", "1", "--summary-json", "s.json", exit_code=2)
    assert not Path("s.json").exists()


def test_the_json_summary_of_checks_has_the_documented_fields(in_sample_folder: Path) -> None:
    documented = documented_fields(CHECK_TABLE)
    seen: set[str] = set()
    checks = {
        "plain": ["check", *SAMPLE, "-n", "4"],
        "by": ["check", *RUNS["by"][1:]],
        "skipna": ["check", *RUNS["skipna"][1:]],
    }
    for name, args in checks.items():
        facts = summary_of(*args)
        assert set(facts) <= documented, (name, set(facts) - documented)
        seen |= set(facts)
    failed = summary_of("check", *SAMPLE, "-n", "4", "--max-empty", "0", exit_code=4)
    assert (failed["exit_code"], failed["passed"]) == (4, False)
    assert failed["error"].startswith("Error: ")
    assert seen == documented


# --- ops --------------------------------------------------------------------------------------

BEYOND_TABLE = section("Commands").split("Beyond TF's seven ops")[1].split("\n\n")[1]


def beyond_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    for cells in table_rows(BEYOND_TABLE):
        names = backquoted(cells[0])
        fills = [cells[1]] * len(names)
        if "/" in cells[1]:
            fills = [backquoted(part)[0] for part in cells[1].split("/")]
        rows.extend(
            zip(names, fills, [cells[2]] * len(names), [cells[3]] * len(names), strict=True)
        )
    return rows


def reduce(data: np.ndarray, op: str) -> np.ndarray:
    ids = np.array([0, 0, 2, 2])
    q = 0.5 if op == "quantile" else None
    return segcli.segment_reduce(data, ids, 4, op=op, q=q)


def test_the_commands_are_the_seven_ops_the_table_and_agg_check_info() -> None:
    seven = re.search(r"`segcli (\S+) DATA \[IDS\]`", section("Commands"))
    assert seven is not None
    names = [*seven[1].split("\\|"), *(name for name, *_ in beyond_rows())]
    assert sorted(names) == sorted(OP_SUMMARIES)


@pytest.mark.parametrize(("op", "fill", "dtype", "rule"), beyond_rows())
@pytest.mark.parametrize("data_dtype", ["float32", "int32"])
def test_an_op_row_gives_its_empty_segment_value_and_dtype(
    op: str, fill: str, dtype: str, rule: str, data_dtype: str
) -> None:
    data = np.array([1, 2, 3, 4], dtype=data_dtype)
    result = reduce(data, op)
    expected_dtype = {
        "as `mean`": reduce(data, "mean").dtype,
        "the data's": data.dtype,
    }.get(dtype, np.dtype(dtype) if dtype in ("int64", "bool") else None)
    assert result.dtype == expected_dtype, (op, dtype)
    expected_fill = {"false": False, "true": True}.get(fill, fill)
    assert result[1] == np.array(expected_fill).astype(result.dtype), (op, fill)
    assert result[3] == result[1]


@pytest.mark.parametrize("op", [op for op, _, _, rule in beyond_rows() if "real data only" in rule])
def test_an_op_of_real_data_only_refuses_complex_data(op: str) -> None:
    with pytest.raises(segcli.SegcliError, match=op):
        reduce(np.array([1, 2, 3, 4], dtype=np.complex64), op)


def test_the_seven_ops_empty_segments_are_the_readme_s() -> None:
    rule = re.search(r"Empty segments: (.*?) `--fill` overrides", README, flags=re.S)
    assert rule is not None
    text = " ".join(rule[1].split())
    zero_ops = backquoted(text.split(" give 0")[0])
    one_op = backquoted(text.split(" give 0")[1].split(" 1,")[0])
    data = np.array([1, 2, 3, 4], dtype=np.float32)
    for op in zero_ops:
        assert reduce(data, op)[1] == 0, op
    for op in one_op:
        assert reduce(data, op)[1] == 1, op
    assert "`FLT_MAX` for float32, 255 for uint8" in text
    assert reduce(data, "min")[1] == np.finfo(np.float32).max
    assert reduce(data.astype(np.uint8), "min")[1] == 255
    assert "`-FLT_MAX`, 0 for unsigned" in text
    assert reduce(data, "max")[1] == -np.finfo(np.float32).max
    assert reduce(data.astype(np.uint8), "max")[1] == 0


# --- formats ----------------------------------------------------------------------------------

FORMATS = {row[0]: row for row in table_rows(section("Formats"))}


def test_the_formats_write_what_the_table_says(in_sample_folder: Path) -> None:
    for suffix in ("npz", "parquet", "arrow", "csv", "json"):
        segcli_run("sum", *SAMPLE, "-n", "4", "-q", "-o", f"out.{suffix}")
    assert sorted(np.load("out.npz")) == sorted(backquoted(FORMATS["`.npz`"][2]))
    columns = backquoted(FORMATS["Parquet"][2])
    assert pq.read_table("out.parquet").column_names == columns
    assert FORMATS["Arrow IPC / Feather v2"][2].startswith("as Parquet")
    assert feather.read_table("out.arrow").column_names == columns
    csv_columns = [name for name in backquoted(FORMATS["CSV / TSV"][2]) if "_" not in name]
    assert Path("out.csv").read_text().splitlines()[0].split(",") == csv_columns
    json_keys = re.findall(r'"(\w+)"', backquoted(FORMATS["JSON"][2])[0])
    assert list(json.loads(Path("out.json").read_text())) == json_keys


def test_a_json_lines_output_is_refused_as_the_table_says(in_sample_folder: Path) -> None:
    assert FORMATS["JSON lines (`.jsonl`, `.ndjson`)"][2].startswith("no")
    for name in ("out.jsonl", "out.ndjson"):
        done = segcli_run("sum", *SAMPLE, "-o", name, exit_code=2)
        # Named as what it is, not as a name whose format cannot be told.
        message = " ".join(done.output.split())
        assert "JSON lines (.jsonl, .ndjson) is an input format, not an output" in message
        assert ".json (one document)" in message
        assert not Path(name).exists()


# --- engines and info -----------------------------------------------------------------------


def test_the_engines_table_thresholds_are_auto_s() -> None:
    engines = {backquoted(row[0])[0]: row[1] for row in table_rows(section("Engines"))}
    assert set(engines) == {*_REGISTRY, "dask"}

    def figures(cell: str) -> list[int]:
        return [int(figure.replace(",", "")) for figure in re.findall(r"\d[\d,]{4,}", cell)]

    assert figures(engines["numba"]) == [
        _REGISTRY["numba"].auto_min_elements,
        NUMBA_WARM_MIN_ELEMENTS,
    ]
    assert figures(engines["cupy"]) == [_REGISTRY["cupy"].auto_min_elements]


def test_info_json_gives_the_documented_facts(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(README.split("`segcli info FILE --json` prints")[1].split("\n\n")[0].split())
    common = backquoted(text.split(", then")[0])
    npy = backquoted(text.split("for `.npy`")[1].split(";")[0])
    parquet = backquoted(text.split("for Parquet")[1].split(";")[0])
    column = re.search(r"Each column is `\{([^}]*)\}`", text)
    assert column is not None
    for path, facts in (("data.npy", npy), ("table.parquet", parquet)):
        done = CliRunner().invoke(cli, ["info", str(ROOT / "sample_data" / path), "--json"])
        assert done.exit_code == 0, done.output
        described = json.loads(done.output)
        assert list(described) == [*common, *facts], path
    columns = json.loads(
        CliRunner()
        .invoke(cli, ["info", str(ROOT / "sample_data" / "table.parquet"), "--json"])
        .output
    )["columns"]
    assert all(list(c) == [k.strip() for k in column[1].split(",")] for c in columns)
