"""Options in combination: every path of a run (in memory, streamed, agg, --by, engines) gives
the same bytes, or the same one-line error with the same exit code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.entry import run_main

STREAMED = ["--chunk-rows", "2"]


def save_pair(tmp_path: Path, data: np.ndarray, ids: np.ndarray) -> tuple[Path, Path]:
    data_path, ids_path = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data_path, data)
    np.save(ids_path, ids)
    return data_path, ids_path


@pytest.mark.parametrize("streamed", [False, True])
def test_sorted_bad_fill_is_the_usage_error_before_the_ids_order(tmp_path, streamed):
    """A --fill the result cannot hold is known from the dtype alone: a streamed run refused it
    (exit 2) before reading a row, while the in-memory run reported the ids' order (exit 1)."""
    data, ids = save_pair(tmp_path, np.arange(4, dtype=np.int64), np.array([0, 2, 1, 1], np.int32))
    out = tmp_path / "out.npy"
    ran = run_main(
        "prod", data, ids, "--sorted", "--fill", "nan", "-q", "-o", out,
        *(STREAMED if streamed else []),
    )  # fmt: skip
    assert ran.exit_code == 2, ran.stderr
    assert ran.stderr.startswith("Error: --fill nan cannot be stored in the int64 result")
    assert not out.exists()


@pytest.mark.parametrize("op", ["median", "nunique", "quantile"])
@pytest.mark.parametrize("sparse", [False, True])
def test_sorted_stream_of_a_holistic_op_says_n_is_too_large(tmp_path, op, sparse):
    """A streamed sorted (or --indices) median with an n too large for memory said only "out of
    memory" (its reducer held the n results before the run's checks); now the in-memory run's
    line, with the bytes needed."""
    huge = str(10**15)
    data, ids = save_pair(tmp_path, np.arange(4, dtype=np.float32), np.array([0, 0, 1, 1]))
    gather = ["--indices", ids] if sparse else ["--sorted"]
    q = ["--q", "0.5"] if op == "quantile" else []
    out = tmp_path / "o.npy"
    lines = set()
    for path in ([], STREAMED):
        ran = run_main(op, data, ids, *gather, *q, "-n", huge, "-q", "-o", out, *path)
        assert ran.exit_code == 1, ran.stderr
        lines.add(ran.stderr)
    (line,) = lines
    assert line.startswith(f"Error: num_segments = {huge}: the output needs ")
    assert not out.exists()


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("command", [["max"], ["agg", "--op", "max"]])
def test_bad_fill_is_the_usage_error_before_n_too_large(tmp_path, streamed, command):
    """With -n too large for memory and a --fill the result cannot hold, the in-memory max said
    the n was too large (exit 1); streamed, and agg on both paths, refused the fill (exit 2)."""
    data, ids = save_pair(tmp_path, np.arange(4, dtype=np.int64), np.array([0, 0, 1, 1]))
    assert_nan_fill_refused(tmp_path, [*command, data, ids, "-n", str(10**15)], streamed, "max")


def assert_nan_fill_refused(tmp_path, argv, streamed: bool, op: str) -> None:
    """The run of ``argv`` with ``--fill nan`` fails on the fill alone: exit 2, nothing written."""
    out = tmp_path / "out.npy"
    extra = STREAMED if streamed else []
    ran = run_main(*argv, "--fill", "nan", "-q", "-o", out, *extra)
    assert ran.exit_code == 2, ran.stderr
    assert f"--fill nan cannot be stored in the int64 result of {op}" in ran.stderr
    assert not out.exists()


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("command", [["count"], ["agg", "--op", "count"]])
@pytest.mark.parametrize(
    ("ids", "family"),
    [
        (np.array([0, 1, 1]), []),  # one id short of DATA's rows
        (np.array([0, 1, 1]), ["--sorted"]),
        (np.array([0.0, 1.0, 1.0, 1.0]), []),  # float ids
    ],
)
def test_bad_fill_is_the_usage_error_before_the_ids_metadata(
    tmp_path, streamed, command, ids, family
):
    """A --fill the result cannot hold and ids whose length or dtype is wrong: the in-memory
    single-op run named the ids (exit 1), the streamed run and agg the fill (exit 2)."""
    data, ids_path = save_pair(tmp_path, np.arange(4, dtype=np.float32), ids)
    assert_nan_fill_refused(tmp_path, [*command, data, ids_path, *family], streamed, "count")


def test_bad_fill_is_the_usage_error_before_the_sparse_ids_on_every_path(tmp_path):
    """--indices with ids out of order, or float indices, and a --fill the result cannot hold:
    in memory the ids or indices were named (exit 1), streamed and in agg the fill (exit 2)."""
    data = tmp_path / "data.npy"
    np.save(data, np.arange(8, dtype=np.int64).reshape(4, 2))
    ids, indices, float_indices = tmp_path / "i.npy", tmp_path / "t.npy", tmp_path / "tf.npy"
    np.save(ids, np.array([0, 1, 0, 2]))
    np.save(indices, np.array([0, 1, 3, 2]))
    np.save(float_indices, np.array([0.0, 1.0, 3.0, 2.0]))
    for command in (["sum"], ["first"], ["agg", "--op", "sum"]):
        for idx in (indices, float_indices):
            for path in ([], STREAMED):
                ran = run_main(*command, data, ids, "--indices", idx, "--fill", "nan", "-q", *path)
                assert ran.exit_code == 2, (command, idx, path, ran.stderr)
                assert "--fill nan cannot be stored in the int64 result" in ran.stderr


@pytest.mark.parametrize("op", ["sum", "median"])
@pytest.mark.parametrize("streamed", [False, True])
def test_bad_fill_is_the_usage_error_before_nulls_in_a_by_run(tmp_path, op, streamed):
    """--by over a value column holding a null, with a --fill the result cannot hold: read
    whole, the null was named (exit 1); streamed, the fill (exit 2)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": pa.array([1, 2, None, 4]), "k": ["a", "b", "a", "c"]}), table)
    ran = run_main(
        op, table, "--data-column", "v", "--by", "k", "--fill", "1e400", "-q",
        *(STREAMED if streamed else []),
    )  # fmt: skip
    assert ran.exit_code == 2, ran.stderr
    assert ran.stderr.startswith("Error: --fill 1e400 cannot be stored in the ")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--sorted", "--by", "k"], "--by cannot be used with IDS"),
        (["--null-keys", "group"], "--null-keys applies to --by only"),
        (["--float-format", "%.3g"], "--float-format applies to text, csv and tsv output"),
        (["--fast-atomics"], "--fast-atomics applies to --engine cupy only"),
        (["--delimiter", ";"], "--delimiter applies to CSV/TSV inputs only"),
    ],
)
@pytest.mark.parametrize("command", [["mean"], ["agg", "--op", "mean"]])
def test_options_that_cannot_go_together_come_before_a_missing_output_folder(
    tmp_path, options, message, command
):
    """Single-op commands checked -o's folder (exit 5) before options that cannot go together
    (exit 2), which agg refused first; agg checked the folder before --delimiter."""
    if command[0] == "agg" and options == ["--fast-atomics"]:
        options, message = ["--keys-out", "k.parquet"], "--keys-out applies to --by only"
    data, ids = save_pair(tmp_path, np.arange(4, dtype=np.float32), np.array([0, 0, 1, 1]))
    ran = run_main(*command, data, ids, *options, "-q", "-o", tmp_path / "nodir" / "o.npy")
    assert ran.exit_code == 2, ran.stderr
    assert message in ran.stderr
    assert ran.stderr.count("\n") == 1


@pytest.mark.parametrize(("op", "option"), [("quantile", ["--q", "2"]), ("var", ["--ddof", "-1"])])
def test_a_bad_q_or_ddof_comes_before_a_missing_output_folder(tmp_path, op, option):
    data, ids = save_pair(tmp_path, np.arange(4, dtype=np.float32), np.array([0, 0, 1, 1]))
    for command in ([op], ["agg", "--op", op]):
        ran = run_main(*command, data, ids, *option, "-q", "-o", tmp_path / "nodir" / "o.npy")
        assert ran.exit_code == 2, (command, ran.stderr)


@pytest.mark.parametrize("command", [["sum"], ["median"], ["agg", "--op", "sum"]])
@pytest.mark.parametrize("streamed", [False, True])
def test_a_null_key_in_keys_from_comes_before_a_null_value(tmp_path, command, streamed):
    """A --keys-from row with a null key (refused while null keys drop, exit 2) and a null in
    DATA's value column: read whole, the null value was named (exit 1); streamed, the keys
    file (exit 2)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table, keys_from = tmp_path / "t.parquet", tmp_path / "keys.csv"
    pq.write_table(pa.table({"v": pa.array([1.0, None, 3.0]), "k": ["a", "b", "a"]}), table)
    keys_from.write_text("k\na\nNA\nb\n")
    ran = run_main(
        *command, table, "--data-column", "v", "--by", "k", "--keys-from", keys_from, "-q",
        *(STREAMED if streamed else []),
    )  # fmt: skip
    assert ran.exit_code == 2, ran.stderr
    assert ran.stderr.startswith(f"Error: --keys-from {keys_from}: row 1 has a null key")


@pytest.mark.parametrize("op", ["mean", "median"])
@pytest.mark.parametrize("streamed", [False, True])
def test_sorted_null_ids_come_after_a_dtype_the_op_refuses(tmp_path, op, streamed):
    """--sorted --skipna over bool data whose ids hold a null: read whole, the run named the
    null id; streamed, in agg and in check, the bool dtype (a check of the metadata, which
    comes before any row)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    ids = pa.array([0, None, 1, 1])
    pq.write_table(pa.table({"v": [True, False, True, True], "seg": ids}), table)
    ran = run_main(
        op, table, "--data-column", "v", "--ids-column", "seg", "--sorted", "--skipna", "-q",
        *(STREAMED if streamed else []),
    )  # fmt: skip
    assert ran.exit_code == 1, ran.stderr
    assert ran.stderr.startswith(f"Error: {table}:v: bool data is not supported by {op}")


@pytest.mark.parametrize("streamed", [False, True])
def test_check_by_names_what_the_run_names(tmp_path, streamed):
    """check --by read DATA with a count run and checked --op's dtype after: over a bool column
    holding a null it named the null, where 'segcli sum' names the bool dtype; and read whole,
    a null value came before --keys-from's null key (exit 1), which the streamed check and
    the run refuse first (exit 2)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "t.parquet"
    columns = {
        "v": pa.array([True, None, False, True]),
        "f": pa.array([1.0, None, 2.0, 3.0]),
        "k": pa.array(["a", None, "b", "a"]),
    }
    pq.write_table(pa.table(columns), table)
    path = STREAMED if streamed else []
    cases = [
        (["--data-column", "v"], 1, f"Error: {table}:v: bool data is not supported by sum"),
        (["--data-column", "f", "--keys-from", table], 2, f"Error: --keys-from {table}: row 1"),
    ]
    for options, code, start in cases:
        for command in (["sum"], ["check", "--op", "sum"]):
            ran = run_main(*command, table, "--by", "k", *options, "-q", *path)
            assert ran.exit_code == code, (command, ran.stderr)
            assert ran.stderr.startswith(start), (command, ran.stderr)


def test_check_indices_names_the_dtype_the_run_names(tmp_path):
    """check --indices named a null index (or a null value) where 'segcli sum' names the bool
    dtype it refuses."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data, bags = tmp_path / "x.npy", tmp_path / "bags.parquet"
    np.save(data, np.array([[True, False], [False, True]]))
    pq.write_table(pa.table({"bag": [0, 0, 1], "tok": pa.array([0, None, 1])}), bags)
    for command in (["sum"], ["check", "--op", "sum"]):
        ran = run_main(*command, data, bags, "--ids-column", "bag", "--indices-column", "tok")
        assert ran.exit_code == 1, (command, ran.stderr)
        assert ran.stderr.startswith(f"Error: {data}: bool data is not supported by sum")
