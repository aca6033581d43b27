"""The engines a test can be parametrised over: each one that cannot run here is skipped with
the reason, CuPy's cases marked ``gpu`` (the ``engine`` fixture of tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from segcli.engines import get_engine
from segcli.errors import EngineUnavailableError


def _engine_param(name: str) -> Any:
    marks = [pytest.mark.gpu] if name == "cupy" else []
    try:
        get_engine(name)
    except EngineUnavailableError as exc:
        marks.append(pytest.mark.skip(reason=str(exc)))
    return pytest.param(name, marks=marks, id=name)


ENGINES = [_engine_param(name) for name in ("numpy", "numba", "cupy")]
