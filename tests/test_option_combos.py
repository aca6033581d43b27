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
    out = tmp_path / "out.npy"
    ran = run_main(
        *command, data, ids, "-n", str(10**15), "--fill", "nan", "-q", "-o", out,
        *(STREAMED if streamed else []),
    )  # fmt: skip
    assert ran.exit_code == 2, ran.stderr
    assert "--fill nan cannot be stored in the int64 result of max" in ran.stderr
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
    out = tmp_path / "out.npy"
    ran = run_main(
        *command, data, ids_path, *family, "--fill", "nan", "-q", "-o", out,
        *(STREAMED if streamed else []),
    )  # fmt: skip
    assert ran.exit_code == 2, ran.stderr
    assert "--fill nan cannot be stored in the int64 result of count" in ran.stderr
    assert not out.exists()
