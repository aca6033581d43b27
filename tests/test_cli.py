"""The command line as a user meets it: exit codes, stdout and stderr apart, exact messages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"


def run(*args: str, input: bytes | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


def test_op_writes_npy_with_spec_dtype_and_shape(pair, tmp_path):
    out = tmp_path / "out.npy"
    result = run("mean", *pair, "-n", "4", "-o", out)
    assert result.exit_code == 0, result.stderr
    got = np.load(out)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [1.5, 0, 3.5, 0])
    assert result.stdout == ""


def test_default_output_is_text_lines_on_stdout(pair):
    result = run("sum", *pair, "-n", "4", "-q")
    assert result.exit_code == 0
    assert result.stdout == "0\t3.0\n1\t0.0\n2\t7.0\n3\t0.0\n"
    assert result.stderr == ""


def test_summary_goes_to_stderr_as_plain_text(pair):
    result = run("sum", *pair)
    assert result.exit_code == 0
    assert "segments" in result.stderr and "4 (inferred from ids)" not in result.stderr
    assert "3 (inferred from ids)" in result.stderr
    assert "empty segments" in result.stderr
    # Data only on stdout: every line a segment and its value, nothing of the summary.
    assert result.stdout == "0\t3.0\n1\t0.0\n2\t7.0\n"
    assert result.stderr.startswith("segcli sum")


def test_summary_json_range_of_integers_is_exact(tmp_path):
    """An int64 result's range is its own values, exact (a float rounds 2**63 - 1 up)."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([2**63 - 1, 2**53 + 1, 5], np.int64))
    np.save(ids, np.array([0, 1, 2]))
    for command in (["sum"], ["agg", "--op", "sum,max"]):
        facts_path = tmp_path / "s.json"
        assert run(*command, data, ids, "-q", "--summary-json", facts_path).exit_code == 0
        text = facts_path.read_text()
        assert "9223372036854775807" in text
        facts = json.loads(text)
        ranges = [facts] if command == ["sum"] else facts["results"]
        for got in ranges:
            assert (got["result_min"], got["result_max"]) == (5, 2**63 - 1)


def test_summary_json_schema(pair, tmp_path):
    path = tmp_path / "summary.json"
    result = run("max", *pair, "-n", "5", "-q", "--summary-json", path, "-o", tmp_path / "o.npy")
    assert result.exit_code == 0
    facts = json.loads(path.read_text())
    assert facts["schema_version"] == 1
    assert facts["op"] == "max" and facts["family"] == "unsorted"
    assert facts["num_segments"] == 5 and facts["num_segments_inferred"] is False
    assert facts["rows_total"] == 4 and facts["rows_used"] == 4
    assert facts["empty_segments"] == 3
    assert facts["output_shape"] == [5] and facts["output_dtype"] == "float32"
    assert facts["data"]["shape"] == [4] and facts["ids"]["dtype"] == "int32"
    assert set(facts["timings_s"]) >= {"read", "validate", "compute", "write", "total"}


@pytest.mark.parametrize("command", [["max"], ["agg", "--op", "sum,max"]])
def test_summary_json_names_its_command_whether_the_run_failed_or_not(pair, tmp_path, command):
    """CI reads ``command`` and ``exit_code`` from every JSON, not only from a failed run's."""
    ok, failed = tmp_path / "ok.json", tmp_path / "failed.json"
    assert run(*command, *pair, "-q", "--summary-json", ok, "-o", tmp_path / "o.csv").exit_code == 0
    result = run(*command, *pair, "-n", "1", "-q", "--summary-json", failed)
    assert result.exit_code == 1
    for path in (ok, failed):
        facts = json.loads(path.read_text())
        assert list(facts)[:2] == ["schema_version", "command"]
        assert facts["command"] == command[0]


def test_summary_json_to_stderr(pair):
    result = run("count", *pair, "--summary-json", "-")
    assert json.loads(result.stderr)["op"] == "count"


@pytest.mark.parametrize("sorted_flag", [[], ["--sorted"]])
def test_invalid_ids_exit_1_name_the_id_and_write_nothing(tmp_path, sorted_flag, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data, ids = Path("d.npy"), Path("ids.npy")
    np.save(data, np.ones(4, np.float32))
    np.save(ids, np.array([0, 3, 1, 9]) if not sorted_flag else np.array([0, 3, 1, 2]))
    out = Path("out.npy")
    result = run("sum", data, ids, "-n", "4", *sorted_flag, "-o", out)
    assert result.exit_code == 1
    if sorted_flag:
        assert result.stderr == (
            "Error: ids.npy: segment_ids[2] = 1 < segment_ids[1] = 3: --sorted ids must be "
            "non-decreasing (1 decrease)\n"
        )
    else:
        assert result.stderr == (
            "Error: ids.npy: segment_ids[3] = 9 is out of range [0, 4) (1 id out of range)\n"
        )
    assert not out.exists()  # and no temporary file left over:
    assert {p.name for p in tmp_path.iterdir()} == {"d.npy", "ids.npy"}


def test_failed_run_does_not_clobber_existing_output(tmp_path, pair):
    out = tmp_path / "out.npy"
    out.write_bytes(b"precious")
    result = run("sum", *pair, "-n", "1", "-o", out)
    assert result.exit_code == 1
    assert out.read_bytes() == b"precious"


def test_missing_file_exits_3(tmp_path, pair):
    result = run("sum", tmp_path / "nope.npy", pair[1])
    assert result.exit_code == 3
    assert "nope.npy" in result.stderr and result.stderr.count("\n") == 1


def test_usage_error_exits_2(pair):
    result = run("sum", *pair, "--engine", "quantum")
    assert result.exit_code == 2
    result = run("sum", *pair, "--format", "npy")
    assert result.exit_code == 2 and "--format needs -o" in result.stderr


def test_engine_not_installed_is_an_error_not_a_fallback(pair):
    from segcli.engines import get_engine
    from segcli.errors import EngineUnavailableError

    try:
        get_engine("cupy")
    except EngineUnavailableError:
        result = run("sum", *pair, "--engine", "cupy")
        assert result.exit_code == 2
        assert "engine 'cupy'" in result.stderr and "segcli[gpu]" in result.stderr
    else:
        pytest.skip("cupy and a GPU are present here")


def test_negative_n_is_a_usage_error_naming_the_option(pair):
    result = run("sum", *pair, "-n", "-2")
    assert result.exit_code == 2
    assert "Invalid value for '-n' / '--num-segments': -2" in result.stderr


def test_sorted_family_and_dropped_counts_in_summary(tmp_path):
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.arange(5, dtype=np.float64))
    np.save(ids, np.array([0, 0, 1, 3, 3]))
    result = run("sum", data, ids, "--sorted", "-n", "2")
    assert result.exit_code == 0
    assert result.stdout == "0\t1.0\n1\t2.0\n"
    assert "dropped: 2 rows with an id >= n" in result.stderr
    assert "sum (sorted)" in result.stderr


def test_fill_option(pair):
    result = run("min", *pair, "-n", "4", "--fill", "nan", "-q")
    assert result.stdout.splitlines()[1] == "1\tnan"


def test_expect_matches_and_mismatches(pair, tmp_path):
    golden = tmp_path / "golden.npy"
    np.save(golden, np.array([3, 0, 7, 0], np.float32))
    assert run("sum", *pair, "-n", "4", "-q", "--expect", golden).exit_code == 0
    np.save(golden, np.array([3, 1, 7, 5], np.float32))
    out = tmp_path / "o.npy"
    result = run("sum", *pair, "-n", "4", "-q", "--expect", golden, "-o", out)
    assert result.exit_code == 4
    assert "2 of 4 segments differ" in result.stderr and ": 1, 3;" in result.stderr
    assert not out.exists()


def test_expect_says_integer_and_bool_results_are_compared_exactly(pair, tmp_path):
    """The tolerances apply to floats only: a count or any mismatch names none."""
    golden = tmp_path / "golden.npy"
    np.save(golden, np.array([2, 0, 2, 1], np.int64))
    result = run("count", *pair, "-n", "4", "-q", "--expect", golden)
    assert result.exit_code == 4
    assert "1 of 4 segments differ (exactly): 3;" in result.stderr
    np.save(golden, np.array([True, False, True, True]))
    result = run("any", *pair, "-n", "4", "-q", "--expect", golden)
    assert result.exit_code == 4
    assert "1 of 4 segments differ (exactly): 3;" in result.stderr
    # A bool has no size of a difference (True against False was "relative inf").
    assert "segment 3 got False expected True\n" in result.stderr
    assert "largest difference" not in result.stderr
    np.save(golden, np.array([3, 1, 7, 0], np.float32))
    result = run("sum", *pair, "-n", "4", "-q", "--expect", golden)
    assert "1 of 4 segments differ (rtol=1e-05, atol=1e-08): 1;" in result.stderr


def test_expect_of_a_golden_written_without_its_header_says_so(pair, tmp_path):
    golden = tmp_path / "golden.csv"
    assert run("sum", *pair, "-n", "4", "-q", "-o", golden, "--no-header").exit_code == 0
    result = run("sum", *pair, "-n", "4", "-q", "--expect", golden)
    assert result.exit_code == 3
    assert "no 'value' or 'value_*' columns (columns: 0, 3.0, 2)" in result.stderr
    assert "a golden needs the header line --no-header drops" in result.stderr
    agg = ("agg", *pair, "-n", "4", "--op", "sum", "-q")
    assert run(*agg, "-o", golden, "--no-header").exit_code == 0
    result = run(*agg, "--expect", golden)
    assert result.exit_code == 1  # as for every golden without the run's columns
    assert "no column 'sum' to compare with; the golden has 0, 3.0, 2 instead" in result.stderr
    assert "a golden needs the header line --no-header drops" in result.stderr


def test_expect_tolerance(pair, tmp_path):
    golden = tmp_path / "golden.npy"
    np.save(golden, np.array([3.001, 0, 7, 0], np.float32))
    assert run("sum", *pair, "-n", "4", "-q", "--expect", golden).exit_code == 4
    assert run("sum", *pair, "-n", "4", "-q", "--expect", golden, "--atol", "0.01").exit_code == 0


def _one_count_more(golden: Path, segment: int) -> None:
    """Add one to the golden's rows per segment of ``segment``, values kept as written."""
    suffix = golden.suffix
    if suffix == ".npz":
        arrays = dict(np.load(golden))
        arrays["counts"][segment] += 1
        np.savez(golden, **arrays)
    elif suffix == ".json":
        doc = json.loads(golden.read_text())
        doc["counts"][segment] += 1
        golden.write_text(json.dumps(doc))
    elif suffix == ".csv":
        lines = golden.read_text().splitlines()
        fields = lines[segment + 1].split(",")
        fields[-1] = str(int(fields[-1]) + 1)
        lines[segment + 1] = ",".join(fields)
        golden.write_text("\n".join(lines) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(golden)
        counts = table.column("count").to_numpy().copy()
        counts[segment] += 1
        pq.write_table(
            table.set_column(table.column_names.index("count"), "count", pa.array(counts)), golden
        )


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz", ".json"])
def test_expect_compares_the_count_the_golden_holds(pair, tmp_path, suffix):
    """A golden written with its rows per segment is checked on them too: equal values with
    another count fail (exit 4, one line naming the column and the first segment)."""
    golden, out = tmp_path / f"golden{suffix}", tmp_path / "o.npy"
    assert run("sum", *pair, "-n", "4", "-q", "-o", golden).exit_code == 0
    assert run("sum", *pair, "-n", "4", "-q", "--expect", golden).exit_code == 0
    _one_count_more(golden, 1)
    result = run("sum", *pair, "-n", "4", "-q", "--expect", golden, "-o", out)
    assert result.exit_code == 4, result.stderr
    assert result.stderr == (
        f"Error: {golden}: column count differs in 1 of 4 segments, the first segment 1: "
        "0 vs expected 1\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
@pytest.mark.parametrize("op", ["any", "all"])
def test_expect_reads_its_own_bool_text(tmp_path, op, suffix):
    """any/all print True and False: their text golden reads back, and a flipped word fails."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([1.0, 0.0, 0.0, 2.0]))
    np.save(ids, np.array([0, 1, 1, 2]))
    golden = tmp_path / f"golden{suffix}"
    assert run(op, data, ids, "-n", "4", "-q", "-o", golden).exit_code == 0
    assert run(op, data, ids, "-n", "4", "-q", "--expect", golden).exit_code == 0
    lines = golden.read_text().splitlines()
    sep = "\t" if suffix == ".tsv" else ","
    assert lines[2].split(sep)[1] == "False"
    lines[2] = lines[2].replace("False", "True")
    golden.write_text("\n".join(lines) + "\n")
    failed = run(op, data, ids, "-n", "4", "-q", "--expect", golden)
    assert failed.exit_code == 4, failed.stderr
    assert "segment 1 got False expected True" in failed.stderr


def test_expect_reads_a_golden_with_a_byte_order_mark(tmp_path):
    """A spreadsheet saves CSV with a UTF-8 byte-order mark: the header still names segment,
    so rows are matched by segment, not by position."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([1.5, 2.5, 3.0]))
    np.save(ids, np.array([0, 1, 0]))
    golden = tmp_path / "golden.csv"
    golden.write_bytes(b"\xef\xbb\xbfsegment,value,count\n1,2.5,1\n0,4.5,2\n")
    passed = run("sum", data, ids, "-q", "--expect", golden)
    assert passed.exit_code == 0, passed.stderr


def test_expect_splits_text_rows_at_csv_line_breaks_only(tmp_path):
    """Keys holding a form feed or U+2028 are written unquoted (no CSV line break in them):
    the golden read back keeps each on its row."""
    path = tmp_path / "k.csv"
    path.write_text("k,x\nc\x0cd,2\ne\u2028f,3\nc\x0cd,1\n", encoding="utf-8")
    golden = tmp_path / "golden.csv"
    common = [path, "--data-column", "x", "--by", "k", "-q"]
    assert run("sum", *common, "-o", golden).exit_code == 0
    passed = run("sum", *common, "--expect", golden)
    assert passed.exit_code == 0, passed.stderr


@pytest.mark.parametrize("command", [["median"], ["agg", "--op", "sum,argmin"]])
@pytest.mark.parametrize("suffix", [".npy", ".npz", ".csv", ".json"])
def test_expect_of_a_result_with_no_segments(tmp_path, command, suffix):
    """No rows and no segments (n = 0), with inner dimensions: the golden written matches."""
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.zeros((0, 2), np.float32))
    np.save(ids, np.zeros(0, np.int64))
    if suffix == ".npy" and command[0] == "agg":
        command = ["agg", "--op", "sum"]
    golden = tmp_path / f"golden{suffix}"
    assert run(*command, data, ids, "-q", "-o", golden).exit_code == 0
    passed = run(*command, data, ids, "-q", "--expect", golden)
    assert passed.exit_code == 0, passed.stderr
    assert passed.stdout.splitlines()[1:] == []


@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,max"]])
@pytest.mark.parametrize("tolerance", ["--rtol", "--atol"])
def test_a_tolerance_without_expect_is_a_usage_error(pair, tmp_path, command, tolerance):
    out = tmp_path / "out.npz"
    result = run(*command, *pair, "-q", tolerance, "0.1", "-o", out)
    assert result.exit_code == 2
    assert f"--{tolerance[2:]} applies only with --expect" in result.stderr
    assert not out.exists()


def test_no_header_drops_the_header_of_single_op_text_outputs(pair, tmp_path):
    """As ``agg --no-header`` does (SPEC: a single-op command is agg with one op)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"k": ["b", "a", "b"], "x": [1.0, 2.0, 4.0]}), table)
    by = ["sum", table, "--data-column", "x", "--by", "k", "-q"]
    assert run(*by).stdout.splitlines() == ["k\tvalue", "a\t2.0", "b\t5.0"]
    assert run(*by, "--no-header").stdout.splitlines() == ["a\t2.0", "b\t5.0"]
    keyed = run(*by, "--no-output-header", "-o", tmp_path / "keyed.csv")
    assert keyed.exit_code == 0, keyed.stderr
    assert (tmp_path / "keyed.csv").read_text().splitlines() == ["a,2.0,1", "b,5.0,2"]
    plain = run("sum", *pair, "-q", "--no-header", "-o", tmp_path / "plain.tsv")
    assert plain.exit_code == 0, plain.stderr
    assert (tmp_path / "plain.tsv").read_text().splitlines()[0] == "0\t3.0\t2"
    refused = run(*by, "--no-header", "-o", tmp_path / "out.parquet")
    assert refused.exit_code == 2
    assert "--no-header applies to text, csv and tsv output, not parquet" in refused.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_output_to_stdout_as_npy(pair):
    result = run("sum", *pair, "-n", "4", "-q", "-o", "-")
    import io

    assert np.load(io.BytesIO(result.stdout_bytes)).tolist() == [3, 0, 7, 0]


def test_stdin_npy_data(pair, tmp_path):
    buffer = __import__("io").BytesIO()
    np.save(buffer, np.array([1.0, 2.0, 5.0]))
    ids = tmp_path / "ids3.npy"
    np.save(ids, np.array([1, 1, 0]))
    result = run("sum", "-", ids, "-q", input=buffer.getvalue())
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t5.0\n1\t3.0\n"


def test_check_passes_and_fails(pair):
    assert run("check", *pair, "-n", "4", "-q").exit_code == 0
    result = run("check", *pair, "-n", "4", "--max-empty", "1")
    assert result.exit_code == 4
    assert "2 empty segments, more than --max-empty 1 (first empty: segment 1)" in result.stderr
    assert run("check", *pair, "-n", "2", "-q").exit_code == 1


def test_check_no_nan(tmp_path, pair):
    data = tmp_path / "nan.npy"
    np.save(data, np.array([1, np.nan, 3, 4], np.float32))
    result = run("check", data, pair[1], "--no-nan", "--summary-json", "-")
    assert result.exit_code == 4
    assert "1 NaN value (--no-nan)" in result.stderr


def test_table_input_two_columns_of_one_file(tmp_path):
    result = run(
        "mean",
        SAMPLES / "table.parquet",
        "--data-column",
        "value",
        "--ids-column",
        "segment",
        "-n",
        "4",
        "-q",
        "-o",
        tmp_path / "out.parquet",
    )
    assert result.exit_code == 0, result.stderr
    from segcli.io import read_result_table

    expected = run(
        "mean",
        SAMPLES / "data.npy",
        SAMPLES / "ids.npy",
        "-n",
        "4",
        "-q",
        "-o",
        tmp_path / "same.npy",
    )
    assert expected.exit_code == 0
    np.testing.assert_array_equal(
        read_result_table(str(tmp_path / "out.parquet")), np.load(tmp_path / "same.npy")
    )


def test_info(tmp_path):
    result = run("info", SAMPLES / "data.npy")
    assert result.exit_code == 0 and "float32" in result.stdout
    facts = json.loads(run("info", SAMPLES / "table.parquet", "--json").stdout)
    assert facts["format"] == "parquet"


def test_help_has_examples():
    result = run("sum", "--help")
    assert "Examples:" in result.stdout and "segcli sum data.npy ids.npy -n 4" in result.stdout


def test_fast_atomics_needs_the_gpu_engine(pair):
    result = run("sum", *pair, "--fast-atomics")
    assert result.exit_code == 2
    assert "--fast-atomics applies to --engine cupy only" in result.stderr


def test_error_lines_write_control_characters_from_the_data_as_escapes(tmp_path: Path) -> None:
    """The first offending value of a corrupt file may hold an escape sequence or a carriage
    return: the error line shows them escaped, so that they neither drive the terminal nor
    hide the start of the line."""
    import subprocess
    import sys

    table = tmp_path / "t.csv"
    table.write_bytes(b"v,id\n1.5,0\n\x1b[31mred\x08,2,3\n")
    out = tmp_path / "out.npy"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "segcli",
            "sum",
            str(table),
            "--data-column",
            "v",
            "--ids-column",
            "id",
            "-o",
            str(out),
        ],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 3
    line = done.stderr.decode()
    assert line.count("\n") == 1 and line.startswith("Error: ")
    assert "\\x1b[31mred\\x08" in line
    assert not any(ord(char) < 32 for char in line.rstrip("\n"))
    assert not out.exists()


def test_terminal_safe_keeps_printable_text_whole() -> None:
    from segcli.terminal import terminal_safe

    assert terminal_safe("ids.npy: ids[3] = -1 é ☃") == "ids.npy: ids[3] = -1 é ☃"
    assert terminal_safe("a\tb\x7f\u2028\x85") == "a\\tb\\x7f\\u2028\\x85"


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["sum", "", "IDS"], 3, "Error: '': an empty path names no file"),
        (["info", ""], 3, "Error: '': an empty path names no file"),
        (["median", "DATA", "IDS", "--tmp-dir", ""], 2, "Error: --tmp-dir '': an empty path"),
    ],
)
def test_an_empty_path_is_said_so(pair, args, code, said):
    argv = [str(pair[0]) if a == "DATA" else str(pair[1]) if a == "IDS" else a for a in args]
    result = run(*argv, "-q") if args[0] != "info" else run(*argv)
    assert result.exit_code == code, result.stderr
    assert said in result.stderr


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("a,b", ["a", "b"]),
        (" a , b ", ["a", "b"]),
        ('"city, state",year', ["city, state", "year"]),
        ('x, " padded " ,"say ""hi"""', ["x", " padded ", 'say "hi"']),
        ('c"d,e', ['c"d', "e"]),  # a quote inside an unquoted name is part of it
    ],
)
def test_column_lists_read_names_in_quotes_csv_style(text: str, names: list[str]) -> None:
    from segcli.io.column_names import listing, split_names

    assert split_names(text) == names
    assert split_names(listing(names)) == names


@pytest.mark.parametrize("text", ['"a', '"a"b', 'x,"y'])
def test_column_lists_refuse_unclosed_or_trailing_quotes(text: str) -> None:
    from segcli.io.column_names import split_names

    with pytest.raises(ValueError):
        split_names(text)
