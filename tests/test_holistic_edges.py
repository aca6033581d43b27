"""Edges of median, quantile and nunique: signed zeros, --tmp-dir, nulls in int and bool list
columns under --skipna, --indices with int nulls, and repeated single-valued options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli


def run(*args: object) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def error_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


# --- median of signed zeros ------------------------------------------------------------------

#: Each segment's middle values are zeros of both signs (or only -0.0): np.median gives +0.0.
ZERO_SEGMENTS = [[-0.0, 0.0], [0.0, -0.0], [-0.0], [-0.0, -0.0], [-1.0, -0.0, 0.0, 1.0]]

PATHS = {
    "numpy": ["--engine", "numpy"],
    "numba": ["--engine", "numba"],
    "sorted stream": ["--sorted", "--chunk-rows", "2"],
    "partitioned": ["--chunk-rows", "2", "--tmp-dir", "{scratch}"],
}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("path", list(PATHS))
def test_median_of_signed_zeros_is_numpys(tmp_path: Path, dtype: str, path: str) -> None:
    data = np.concatenate([np.array(seg, dtype) for seg in ZERO_SEGMENTS])
    ids = np.repeat(np.arange(len(ZERO_SEGMENTS)), [len(seg) for seg in ZERO_SEGMENTS])
    np.save(tmp_path / "data.npy", data)
    np.save(tmp_path / "ids.npy", ids)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    options = [a.format(scratch=scratch) for a in PATHS[path]]
    out = tmp_path / "out.npy"
    result = run("median", tmp_path / "data.npy", tmp_path / "ids.npy", *options, "-o", out)
    assert result.exit_code == 0, result.stderr
    want = np.array([np.median(np.array(seg, dtype)) for seg in ZERO_SEGMENTS], dtype)
    got = np.load(out)
    assert got.tobytes() == want.tobytes()
    assert not np.signbit(got).any()
