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
