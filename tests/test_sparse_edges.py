"""Edge cases of the sparse family (``--indices``, ``--weights``): odd shapes and values, stdin,
streamed errors, the summary and ``segcli check``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli


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
