"""Shared fixtures: every engine-parametrised test runs on each engine that can run here."""

from __future__ import annotations

import importlib.util

import pytest

from segcli.engines import get_engine
from segcli.errors import EngineUnavailableError


def _engine_param(name: str) -> object:
    marks = [pytest.mark.gpu] if name == "cupy" else []
    try:
        get_engine(name)
    except EngineUnavailableError as exc:
        marks.append(pytest.mark.skip(reason=str(exc)))
    return pytest.param(name, marks=marks, id=name)


ENGINES = [_engine_param(name) for name in ("numpy", "numba", "cupy")]


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
