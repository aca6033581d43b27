"""Edge cases of the sparse family (``--indices``, ``--weights``): odd shapes and values, stdin,
streamed errors, the summary and ``segcli check``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from tests.entry import run_main


def run(*args: Any, stdin: bytes | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=stdin, catch_exceptions=False)


def save(tmp_path: Path, **arrays: Any) -> dict[str, Path]:
    paths = {}
    for name, array in arrays.items():
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], np.asarray(array))
    return paths


# --- 1. zero-width rows -----------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("op", ["sum", "mean", "min", "sqrt_n"])
@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "2"]], ids=["memory", "stream"])
def test_zero_width_rows_gather_to_an_empty_inner_axis(tmp_path, engine, op, blocks):
    paths = save(
        tmp_path,
        data=np.zeros((5, 0), np.float32),
        ids=np.array([0, 0, 1, 3]),
        idx=np.array([0, 4, 2, 1]),
        w=np.array([1.0, 2.0, 0.5, 1.0]),
    )
    out = tmp_path / "out.npy"
    weights = ["--weights", paths["w"]] if op != "min" else []
    args = [paths["data"], paths["ids"], "--indices", paths["idx"], *weights, *blocks]
    result = run(op, *args, "--engine", engine, "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    got = np.load(out)
    assert (got.shape, got.dtype) == ((4, 0), np.float32)


def test_zero_width_rows_weighted_without_indices(tmp_path):
    paths = save(tmp_path, data=np.zeros((4, 0)), ids=np.array([0, 2, 2, 1]), w=np.ones(4))
    out = tmp_path / "out.npy"
    result = run("mean", paths["data"], paths["ids"], "--weights", paths["w"], "-o", out, "-q")
    assert result.exit_code == 0, result.stderr
    assert np.load(out).shape == (3, 0)


# --- 2. inf and huge weights ------------------------------------------------------------------


def _ieee_weighted(data, ids, indices, weights, n, op):
    """The combiners in plain float64, IEEE's inf and NaN left as they come."""
    out = np.zeros((n, data.shape[1]))
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(n):
            rows = [i for i in range(len(ids)) if ids[i] == s]
            if not rows:
                continue
            w = weights[rows]
            total = (data[indices[rows]].astype(np.float64) * w[:, None]).sum(axis=0)
            divisor = {"sum": 1.0, "mean": w.sum(), "sqrt_n": np.sqrt((w * w).sum())}[op]
            out[s] = total / divisor if divisor != 0 else 0.0
        return out.astype(data.dtype)


@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inf_and_huge_weights_give_ieee_results_silently(engine, op, dtype):
    from segcli.sparse import Labeled, sparse_reduce

    data = np.array([[1, 0], [1, 2], [3, 4], [5, 6]], dtype)
    ids = np.array([0, 0, 1, 1, 2, 3, 3])
    indices = np.array([0, 1, 2, 3, 3, 1, 2])
    weights = np.array([np.inf, 1.0, 1e308, 1e308, 1e200, -np.inf, np.inf])
    expected = _ieee_weighted(data, ids, indices, weights, 4, op)
    # pytest turns warnings into errors here: an overflow warning would fail the call.
    got = sparse_reduce(
        Labeled(data, "data"), Labeled(ids, "ids"), None, op,
        indices=Labeled(indices, "idx"), weights=Labeled(weights, "w"), engine=engine,
    ).result  # fmt: skip
    np.testing.assert_array_equal(got, expected)
    assert not np.isfinite(got).all()


def test_inf_weights_without_indices_are_silent_on_the_cli(tmp_path):
    paths = save(
        tmp_path,
        data=np.array([1.0, 2.0, 3.0]),
        ids=np.array([0, 0, 1]),
        w=np.array([np.inf, 1e308, 1e300]),
    )
    result = run("mean", paths["data"], paths["ids"], "--weights", paths["w"], "-q")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert result.stdout == "0\tnan\n1\t3.0\n"  # inf / inf, then 3e300 / 1e300


# --- 7. float indices -------------------------------------------------------------------------


@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "1"]], ids=["memory", "stream"])
@pytest.mark.parametrize(
    ("indices", "named"),
    [
        ([0.0, 4.0, 2.5, 1.5], "indices[2] = 2.5 is not an integer (2 such indices)"),
        ([0.0, 4.0, 2.0, np.nan], "indices[3] = nan is not an integer (1 such index)"),
        ([0.0, 1.0, 2.0, 3.0], "indices must be integers, got float64 with whole values"),
    ],
)
def test_float_indices_name_the_first_non_integer(tmp_path, blocks, indices, named):
    paths = save(tmp_path, data=np.ones((5, 2)), ids=np.array([0, 0, 1, 3]), idx=indices)
    out = tmp_path / "out.npy"
    args = [paths["data"], paths["ids"], "--indices", paths["idx"], *blocks, "-o", out, "-q"]
    result = run("sum", *args)
    assert result.exit_code == 1
    assert result.stderr == f"Error: {paths['idx']}: {named}" + (
        "; indices must be integers (never truncated)\n"
        if "such" in named
        else " (never truncated); cast them to integers first\n"
    )
    assert not out.exists()


# --- 4. errors found while streaming name the option ------------------------------------------


@pytest.fixture
def bags_table(tmp_path: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"bag": [0, 0, 1, 3], "token": [0, 4, 2, 1], "weight": [1.0, 2.0, 0.5, 1.0]})
    pq.write_table(table, tmp_path / "bags.parquet", row_group_size=2)
    return tmp_path / "bags.parquet"


@pytest.mark.parametrize("option", ["--indices", "--weights"])
@pytest.mark.parametrize("archive", [False, True], ids=["table", "npz"])
def test_streamed_input_errors_name_the_option_as_in_memory(tmp_path, bags_table, option, archive):
    paths = save(tmp_path, data=np.ones((5, 2)), ids=np.array([0, 0, 1, 3]), idx=[0, 4, 2, 1])
    several = bags_table
    if archive:
        several = tmp_path / "several.npz"
        np.savez(several, a=np.array([0, 4, 2, 1]), b=np.array([1.0, 2.0, 0.5, 1.0]))
    given = {"--indices": paths["idx"], "--weights": paths["idx"]}
    given[option] = several  # a file of several columns (arrays), none picked
    args = [paths["data"], paths["ids"], *[a for o, p in given.items() for a in (o, p)], "-q"]
    whole = run("sum", *args)
    streamed = run("sum", *args, "--chunk-rows", "1", "--memory-limit", "1GB")
    assert whole.exit_code == streamed.exit_code == 2
    assert f"pick one with {option}-column" in whole.stderr
    assert streamed.stderr == whole.stderr


# --- 9. nulls in the indices and weights name the option and the row ---------------------------


@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "1"]], ids=["memory", "stream"])
@pytest.mark.parametrize("op", ["sum", "median"])
def test_nulls_in_indices_or_weights_name_the_option_and_row(tmp_path, blocks, op):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {"bag": [0, 0, 1, 1, 3], "token": [0, 1, None, 2, None], "weight": [1.0, 1, 1, None, 1]}
    )
    pq.write_table(table, tmp_path / "bags.parquet", row_group_size=2)
    np.save(tmp_path / "vocab.npy", np.ones((4, 2)))
    common = [tmp_path / "vocab.npy", tmp_path / "bags.parquet", "--ids-column", "bag", "-q"]
    out = tmp_path / "out.npy"
    result = run(op, *common, "--indices-column", "token", *blocks, "-o", out)
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {tmp_path / 'bags.parquet'}: column 'token' has 2 nulls (first at row 2): "
        "--indices needs an index on every row\n",
    )
    if op == "sum":
        weights = ["--indices-column", "bag", "--weights-column", "weight"]
        result = run(op, *common, *weights, *blocks, "-o", out)
        assert (result.exit_code, result.stderr) == (
            1,
            f"Error: {tmp_path / 'bags.parquet'}: column 'weight' has 1 null (first at row 3): "
            "--weights needs a weight on every row\n",
        )
    assert not out.exists()


# Rows of the null in IDS, the indices and the weights; the column named is the one whose null
# comes first (IDS', then the indices', on a tie), read whole, streamed across blocks or within
# one block, from a file or from stdin.
_NULL_ROWS = [
    ((2, 5, 8), "bag", 2),
    ((8, 2, 5), "token", 2),
    ((5, 8, 2), "weight", 2),
    ((5, 4, 6), "token", 4),
    ((6, 9, 5), "weight", 5),
    ((4, 4, 4), "bag", 4),
]


@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "4"]], ids=["memory", "stream"])
@pytest.mark.parametrize(("rows", "named", "first"), _NULL_ROWS)
def test_the_earliest_null_of_ids_indices_and_weights_is_named(
    tmp_path, blocks, rows, named, first
):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    columns = {"bag": list(range(10)), "token": [i % 4 for i in range(10)], "weight": [1.0] * 10}
    for values, row in zip(columns.values(), rows, strict=True):
        values[row] = None
    pq.write_table(pa.table(columns), tmp_path / "bags.parquet", row_group_size=3)
    np.save(tmp_path / "vocab.npy", np.ones((4, 2)))
    options = ["--ids-column", "bag", "--indices-column", "token", "--weights-column", "weight"]
    result = run("sum", tmp_path / "vocab.npy", tmp_path / "bags.parquet", *options, *blocks)
    why = {
        "token": ": --indices needs an index on every row",
        "weight": ": --weights needs a weight on every row",
    }
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {tmp_path / 'bags.parquet'}: column '{named}' has 1 null (first at row {first})"
        f"{why.get(named, '')}\n",
    )
    if not blocks:
        piped = run("sum", tmp_path / "vocab.npy", "-", *options, stdin=_arrow_stream(**columns))
        assert piped.stderr == result.stderr.replace(str(tmp_path / "bags.parquet"), "<stdin>")


# --- 3. ids, indices and weights as columns of one Arrow stream on stdin ----------------------


def _arrow_stream(**columns: Any) -> bytes:
    pa = pytest.importorskip("pyarrow")
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    return bytes(sink.getvalue())


@pytest.mark.parametrize("op", ["mean", "median"])
def test_ids_indices_and_weights_from_one_arrow_stream_on_stdin(tmp_path, op):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    columns = {"bag": [0, 0, 1, 3, 3], "token": [0, 4, 2, 1, 4], "weight": [1.0, 2, 0.5, 1, 3]}
    vocab = np.arange(10, dtype=np.float64).reshape(5, 2)
    np.save(tmp_path / "vocab.npy", vocab)
    pq.write_table(pa.table(columns), tmp_path / "bags.parquet")
    weights = ["--weights-column", "weight"] if op == "mean" else []
    options = ["--ids-column", "bag", "--indices-column", "token", *weights, "-q"]
    piped = run(op, tmp_path / "vocab.npy", "-", *options, stdin=_arrow_stream(**columns))
    from_file = run(op, tmp_path / "vocab.npy", tmp_path / "bags.parquet", *options)
    assert piped.exit_code == from_file.exit_code == 0, piped.stderr
    assert piped.stdout == from_file.stdout
    assert piped.stdout.startswith("0\t5.333333333333333\t6.333333333333333\n" if weights else "0")


def test_weights_in_an_npz_beside_ids_and_indices_on_stdin(tmp_path):
    # The weights' own file is an archive (its column option names the array) while the ids
    # and indices are columns of the Arrow stream on stdin.
    columns = {"bag": [0, 0, 1, 3, 3], "token": [0, 4, 2, 1, 4]}
    np.save(tmp_path / "vocab.npy", np.arange(10, dtype=np.float64).reshape(5, 2))
    np.savez(tmp_path / "w.npz", w=np.array([1.0, 2, 0.5, 1, 3]))
    options = ["--ids-column", "bag", "--indices-column", "token", "-q"]
    options += ["--weights", tmp_path / "w.npz", "--weights-column", "w"]
    piped = run("mean", tmp_path / "vocab.npy", "-", *options, stdin=_arrow_stream(**columns))
    assert piped.exit_code == 0, piped.stderr
    assert piped.stdout.startswith("0\t5.333333333333333\t6.333333333333333\n")


def test_indices_column_on_a_npy_stream_is_a_usage_error(tmp_path):
    paths = save(tmp_path, data=np.ones((5, 2)), ids=np.array([0, 0, 1]))
    args = [paths["data"], "-", "--indices-column", "token", "-q"]
    result = run("sum", *args, stdin=paths["ids"].read_bytes())
    assert result.exit_code == 2
    assert (
        "Error: --indices-column: <stdin> holds a .npy stream, one array with no columns; give "
        "--indices FILE"
    ) in result.stderr


# --- 6. a weights-only run counts the weights against the memory budget -----------------------


def test_weights_without_indices_count_the_weights_against_the_budget(tmp_path):
    rows = 20_000
    paths = save(
        tmp_path,
        data=np.ones(rows, np.float32),  # 80 KB
        ids=np.arange(rows, dtype=np.int32) % 7,  # 80 KB
        w=np.ones(rows),  # 160 KB
    )
    args = [paths["data"], paths["ids"], "--weights", paths["w"], "-q", "-o", tmp_path / "o.npy"]
    fits = run("sum", *args, "--memory-limit", "400KB")
    assert fits.exit_code == 0, fits.stderr
    # DATA and IDS alone fit 200 KB; with the weights they do not (data bytes, no headers).
    refused = run("sum", *args, "--memory-limit", "200KB")
    assert refused.exit_code == 2
    assert (
        f"Error: {paths['w']}: --weights without --indices reads DATA, IDS and the weights "
        "whole: 78.1 KiB of DATA + 78.1 KiB of IDS + 156.2 KiB of weights = 312.5 KiB is over "
        "the memory budget of 195.3 KiB (raise --memory-limit)"
    ) in refused.stderr


def test_weights_without_indices_refuse_chunk_rows_and_say_why_they_ran_whole(tmp_path):
    """Weights alone read DATA, IDS and the weights whole: --chunk-rows, which asks for a
    stream, is a usage error (nothing written), and the summary's mode says why it is whole."""
    paths = save(tmp_path, data=np.ones(10), ids=np.arange(10) % 3, w=np.ones(10))
    out = tmp_path / "o.npy"
    args = [paths["data"], paths["ids"], "--weights", paths["w"]]
    for command in (["sum", *args, "-o", out], ["check", *args]):
        refused = run_main(*command, "--chunk-rows", "4", "-q")
        assert refused.exit_code == 2
        assert refused.stderr == (
            "Error: --chunk-rows: --weights without --indices reads DATA, IDS and the weights "
            "whole, it does not stream; drop --chunk-rows (inputs over --memory-limit are "
            f"refused) (see 'segcli {command[0]} --help')\n"
        )
    assert not out.exists()
    ran = run("sum", *args, "-o", out)
    assert ran.exit_code == 0, ran.stderr
    assert (
        "in-memory, weighted from inputs read whole (--weights without --indices does not "
        "stream), weights "
    ) in ran.stderr


# --- 5. the JSON summary of a sparse run ------------------------------------------------------


@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "2"]], ids=["memory", "stream"])
@pytest.mark.parametrize("command", [["sum"], ["median"], ["agg", "--op", "sum,max"]])
def test_summary_says_family_sparse_and_counts_the_index_rows(tmp_path, blocks, command):
    import json

    paths = save(tmp_path, data=np.ones((5, 2)), ids=np.array([0, 0, 1, 3]), idx=[0, 4, 2, 1])
    args = [paths["data"], paths["ids"], "--indices", paths["idx"], *blocks]
    result = run(*command, *args, "-o", tmp_path / "out.npz", "--summary-json", "-")
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stderr[result.stderr.index("{") :])
    assert facts["family"] == "sparse"
    assert facts["extra"]["index_rows"] == 4
    assert facts["extra"]["indices"] == str(paths["idx"])
    shown = run(*command, *args, "-o", tmp_path / "out.npz").stderr
    assert "(sparse)" in shown and "4 index rows" in shown


def test_summary_of_weights_alone_keeps_the_plain_family(tmp_path):
    import json

    paths = save(tmp_path, data=np.ones(4), ids=np.array([1, 0, 1, -1]), w=np.ones(4))
    args = [paths["data"], paths["ids"], "--weights", paths["w"], "--summary-json", "-", "-q"]
    result = run("sum", *args)
    facts = json.loads(result.stderr)
    assert facts["family"] == "unsorted" and "index_rows" not in facts["extra"]


# --- 8. segcli check takes --indices and --weights --------------------------------------------


@pytest.fixture
def bag_files(tmp_path: Path) -> dict[str, Path]:
    return save(
        tmp_path,
        data=np.array([[1.0, 2.0], [np.nan, 0.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]),
        ids=np.array([0, 0, 1, 3]),
        idx=np.array([0, 4, 2, 3]),
        bad_idx=np.array([0, 4, 9, 5]),
        w=np.array([1.0, 2.0, 0.5, 1.0]),
        w3=np.array([1.0, 2.0, 0.5]),
    )


def test_check_validates_a_sparse_run_and_counts_its_bags(bag_files):
    import json

    f = bag_files
    args = [f["data"], f["ids"], "--indices", f["idx"], "--weights", f["w"], "--op", "mean"]
    result = run("check", *args, "--summary-json", "-", "-q")
    assert result.exit_code == 0, result.stderr
    facts = json.loads(result.stderr)
    assert facts["family"] == "sparse" and facts["passed"]
    assert (facts["num_segments"], facts["empty_segments"], facts["rows_used"]) == (4, 1, 4)
    failed = run("check", *args, "--max-empty", "0", "-q")
    assert failed.exit_code == 4
    assert "1 empty segment, more than --max-empty 0 (first empty: segment 2)" in failed.stderr


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--indices", "bad_idx"], 1, "bad_idx.npy: indices[2] = 9 is out of range [0, 5) (2 "),
        (["--indices", "idx", "--weights", "w3"], 1, "w3.npy: 3 weights (shape (3,)) for 4 "),
        (["--indices", "idx", "--weights", "w", "--op", "max"], 2, "--weights applies to sum"),
        (["--weights", "w"], 1, "ids.npy: segment_ids shape (4,) is not a prefix of "),
    ],
)
def test_check_refuses_what_a_sparse_run_refuses(bag_files, extra, code, message):
    args = [bag_files.get(a, a) for a in extra]
    checked = run("check", bag_files["data"], bag_files["ids"], *args, "-q")
    ran = run(
        "max" if "max" in extra else "sum",
        bag_files["data"], bag_files["ids"], *[a for a in args if a not in ("--op", "max")], "-q",
    )  # fmt: skip
    assert checked.exit_code == ran.exit_code == code
    assert message in checked.stderr and message in ran.stderr


@pytest.mark.parametrize("skipna", [[], ["--skipna"]])
def test_check_no_nan_scans_only_the_gathered_rows(tmp_path, skipna):
    """A NaN in a row no index gathers is never read by the run: the check passes. One the
    indices gather fails it, counted once per gathering index and named in DATA and among the
    indices, as the run's summary counts the values it skips."""
    data = np.array([[1.0, np.nan], [2.0, 3.0], [np.nan, 5.0], [7.0, 8.0], [np.nan, np.nan]])
    paths = save(tmp_path, data=data, ids=np.array([0, 0, 1, 2]), unused=np.array([1, 3, 3, 1]))
    args = [paths["data"], paths["ids"], "--no-nan", *skipna, "-q"]
    passed = run("check", *args, "--indices", paths["unused"])
    assert passed.exit_code == 0, passed.stderr
    paths |= save(tmp_path, used=np.array([1, 2, 2, 3]))
    failed = run("check", *args, "--indices", paths["used"])
    assert failed.exit_code == 4
    what = "2 missing values (NaN or null)" if skipna else "2 NaN values"
    assert failed.stderr == (
        f"Error: {paths['data']}: {what} in the rows the indices gather (--no-nan), "
        "the first at [2, 0] (gathered by index 1)\n"
    )


@pytest.mark.parametrize("indices", [False, True], ids=["weights", "indices-and-weights"])
def test_check_no_nan_refuses_nan_weights(tmp_path, indices):
    """A NaN weight makes its segment NaN as a NaN value does: --no-nan names the weights too."""
    paths = save(
        tmp_path,
        data=np.arange(6.0),
        ids=np.array([0, 0, 1, 1, 2, 2]),
        idx=np.array([5, 4, 3, 2, 1, 0]),
        w=np.array([1.0, 1.0, np.nan, 1.0, 2.0, np.nan]),
    )
    args = [paths["data"], paths["ids"], "--weights", paths["w"], "-q"]
    args += ["--indices", paths["idx"]] if indices else []
    assert run("check", *args).exit_code == 0  # the rule is asked for
    failed = run("check", *args, "--no-nan")
    assert failed.exit_code == 4
    assert failed.stderr == f"Error: {paths['w']}: 2 NaN weights (--no-nan), the first at [2]\n"
    paths |= save(tmp_path, w=np.array([1.0, 1.0, 0.5, 1.0, 2.0, 3.0]))
    assert run("check", *args, "--no-nan").exit_code == 0


def test_check_help_lists_indices_and_weights():
    shown = run("check", "--help").stdout
    for option in ("--indices IDX", "--indices-column NAME", "--weights W", "--weights-column"):
        assert option in shown


@pytest.mark.parametrize("op", ["mean", "sqrt_n"])
def test_a_weighted_fill_too_large_names_the_op_asked(tmp_path, op):
    paths = save(
        tmp_path,
        data=np.arange(10, dtype=np.float32).reshape(5, 2),
        ids=np.array([0, 0, 2, 2]),
        idx=np.array([0, 1, 2, 4]),
        w=np.ones(4, np.float32),
    )
    args = [paths["data"], paths["ids"], "--indices", paths["idx"], "--weights", paths["w"]]
    result = run(op, *args, "--fill", "1e300", "-q")
    assert result.exit_code == 2
    assert f"--fill 1e300 cannot be stored in the float32 result of {op} " in result.stderr


@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "1"]], ids=["memory", "stream"])
def test_an_inferred_n_too_large_says_where_it_came_from(tmp_path, blocks):
    """As the dense run says it: n from the largest id, so the user can look for a stray id."""
    paths = save(
        tmp_path,
        data=np.ones((3, 2), np.float32),
        ids=np.array([0, 10**12]),
        idx=np.array([0, 1]),
    )
    result = run("sum", paths["data"], paths["ids"], "--indices", paths["idx"], *blocks, "-q")
    assert result.exit_code == 1
    assert "num_segments = 1000000000001 (inferred: the largest id is 1000000000000)" in (
        result.stderr
    )


@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "4"]], ids=["memory", "stream"])
def test_the_earliest_null_is_named_before_lengths_found_at_the_end(tmp_path, blocks):
    # The indices end two rows early; IDS' null (row 11) and the weights' (row 10) lie past
    # their end, met only once a stream ends: the earliest is named, not the lengths.
    (tmp_path / "ids.csv").write_text("b\n" + "".join(f"{i // 2}\n" for i in range(11)) + "NA\n")
    (tmp_path / "idx.csv").write_text("t\n" + "".join(f"{i % 4}\n" for i in range(10)))
    (tmp_path / "w.csv").write_text("w\n" + "1\n" * 10 + "NA\n1\n")
    np.save(tmp_path / "vocab.npy", np.ones((4, 2)))
    extras = ["--indices", tmp_path / "idx.csv", "--weights", tmp_path / "w.csv"]
    result = run("sum", tmp_path / "vocab.npy", tmp_path / "ids.csv", *extras, *blocks)
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {tmp_path / 'w.csv'}: column 'w' has 1 null (first at row 10): "
        "--weights needs a weight on every row\n",
    )


@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("weights", [False, True], ids=["plain", "weighted"])
def test_a_streamed_inferred_n_fits_where_it_fits_in_memory(tmp_path, monkeypatch, engine, weights):
    """A streamed gather infers n as its ids arrive; the output must be judged as the run in
    memory judges it (the fold's dtype, sorted ids), not refused where that run passes."""
    from segcli import core, ops

    n = 1000
    paths = save(
        tmp_path,
        data=np.ones((3, 2), np.float32),
        ids=np.array([0, n - 1]),
        idx=np.array([0, 1]),
        w=np.ones(2),
    )
    fold_dtype = np.dtype(np.float64 if weights else np.float32)
    needed = core.output_bytes(ops.get_op("mean"), n, (2,), fold_dtype, True, "npy")
    monkeypatch.setattr(core, "available_bytes", lambda: needed)
    args = [paths["data"], paths["ids"], "--indices", paths["idx"], "--engine", engine, "-q"]
    args += ["--weights", paths["w"]] if weights else []
    for blocks in ([], ["--chunk-rows", "1"]):
        out = tmp_path / "out.npy"
        result = run("mean", *args, *blocks, "-o", out)
        assert result.exit_code == 0, (blocks, result.stderr)
        assert np.load(out).shape == (n, 2)


@pytest.mark.parametrize("blocks", [[], ["--chunk-rows", "1"]], ids=["memory", "stream"])
def test_a_zero_d_data_names_its_file(tmp_path, blocks):
    paths = save(tmp_path, data=np.float32(3), ids=np.array([0, 0]), idx=np.array([0, 0]))
    result = run("sum", paths["data"], paths["ids"], "--indices", paths["idx"], *blocks, "-q")
    assert (result.exit_code, result.stderr) == (
        1,
        f"Error: {paths['data']}: --indices needs rows to gather from DATA, got a 0-D array\n",
    )
