"""Shared fixtures: every engine-parametrised test runs on each engine that can run here."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.engine_params import ENGINES
from tests.matrix import FULL_MATRIX, in_default_run

# The suite starts some hundreds of Python processes (the CLI as users run it, pipes, signals),
# and each xdist worker imports the checkout's segcli and rewrites the test modules' asserts.
# Where PYTHONDONTWRITEBYTECODE is set, every one of them compiles segcli's source again (a
# `segcli sum` measured 0.23 s of its 0.47 s of imports in segcli's own modules, 0.07 s with
# bytecode). The suite caches bytecode whatever the setting: here, and (through the
# environment) in the workers and processes it starts, which this file's loading precedes.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Dask's nannies start each worker process (and restart each one a test kills) by spawning a
# fresh interpreter that imports distributed, NumPy and segcli again: about a second of CPU
# each. A fork server pays those imports once; the Dask tests (and the clusters the CLI
# starts under them, through the environment) measured 70 s of CPU spawned, 28 s forked.
# Set before anything imports dask, whose configuration reads the environment once.
os.environ.setdefault("DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD", "forkserver")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The name of an engine that can run on this machine."""
    return str(request.param)


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@pytest.fixture
def short_lanes(monkeypatch: pytest.MonkeyPatch) -> int:
    """Deal rows to the lanes of float sums and products every 5 rows (65,536 in use), so
    small inputs cross many lane boundaries."""
    from segcli import ops

    monkeypatch.setattr(ops, "LANE_ROWS", 5)
    return 5


pytest_plugins = ("pytester",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Cases outside their test's default run (tests/matrix.py) are marked ``full_matrix``
    (before ``-m`` selects), and left out unless ``SEGCLI_FULL_MATRIX=1``."""
    left_out = []
    chooses: set[str] = set()  # the tests with a default_run mark
    keeps: set[str] = set()  # the tests with a case in the default run
    for item in items:
        test = item.nodeid.split("[")[0]
        if item.get_closest_marker("default_run") is not None:
            chooses.add(test)
        if in_default_run(item):
            keeps.add(test)
        else:
            item.add_marker(pytest.mark.full_matrix)
            if not FULL_MATRIX:
                left_out.append(item)
    # A predicate that keeps nothing (a renamed parameter, a value spelled differently) would
    # drop a whole test from the default run without a word.
    emptied = sorted(chooses - keeps)
    if emptied and not FULL_MATRIX:
        raise pytest.UsageError(
            f"no case of {', '.join(emptied)} is in the default run (its default_run keeps"
            " none of those collected; SEGCLI_FULL_MATRIX=1 runs the others)"
        )
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        chosen = set(map(id, left_out))
        items[:] = [item for item in items if id(item) not in chosen]


def fold_skip_reasons(reasons: list[str]) -> str:
    """``skipped 30: 28 engine 'cupy' is not available (...); 2 needs /dev/full``: every skip
    of a run in one line, identical reasons counted once, the most common first."""
    counts = Counter(reasons)
    folded = "; ".join(f"{count} {reason}" for reason, count in counts.most_common())
    return f"skipped {len(reasons)}: {folded}"


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line for all skips (``-ra`` printed one per test location: ~30 lines of the same
    CuPy reason on a machine without a GPU); addopts leave skips out of the ``-r`` summary."""
    skipped = terminalreporter.stats.get("skipped", [])
    if skipped:
        terminalreporter.write_line(fold_skip_reasons([_skip_reason(r) for r in skipped]))


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """The worked example's inputs (docs/semantics.md): float32 ``[1, 2, 3, 4]``, ids
    ``[0, 0, 2, 2]``."""
    data, ids = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data, np.array([1, 2, 3, 4], np.float32))
    np.save(ids, np.array([0, 0, 2, 2], np.int32))
    return data, ids
