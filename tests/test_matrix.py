"""The default run's selection (tests/matrix.py, the hook in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFTEST = """
from tests.conftest import pytest_collection_modifyitems

def pytest_configure(config):
    config.addinivalue_line("markers", "default_run: see tests/matrix.py")
    config.addinivalue_line("markers", "full_matrix: see tests/matrix.py")
"""

CASES = """
import pytest
from tests.matrix import default_run

@default_run(lambda op, dtype: op == "sum" or dtype == "float32")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_kept_in_part(op, dtype):
    pass

@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_numba_rule(engine, dtype):
    pass

@pytest.fixture(params=["numpy", "numba"])
def engine(request):
    return request.param
"""


def _collect(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, full_matrix: bool, source: str
) -> pytest.RunResult:
    """Collect ``source`` in a fresh process (the repository importable), as CI's lines do."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("SEGCLI_FULL_MATRIX", "1" if full_matrix else "0")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cases=source)
    selection = ["-m", "full_matrix"] if full_matrix else []
    return pytester.runpytest_subprocess(
        "--collect-only", "-q", "-p", "no:cacheprovider", *selection
    )


def _collected(ran: pytest.RunResult) -> set[str]:
    return {line.split("::")[1] for line in ran.outlines if line.startswith("test_cases.py::")}


@pytest.mark.full_matrix  # two pytest processes: CI's second line runs them
def test_each_run_takes_its_own_cases(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default run: what default_run keeps and numba over float32 and int64; the full
    matrix (``-m full_matrix``): the rest and nothing else."""
    default = _collected(_collect(pytester, monkeypatch, False, CASES))
    full = _collected(_collect(pytester, monkeypatch, True, CASES))
    assert full == {"test_kept_in_part[max-float64]", "test_numba_rule[numba-float64]"}
    assert len(default) == 8 and not default & full


@pytest.mark.full_matrix  # a pytest process: CI's second line runs it
def test_a_default_run_that_keeps_nothing_is_an_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = CASES.replace('op == "sum" or dtype == "float32"', 'op == "min"')
    ran = _collect(pytester, monkeypatch, False, source)
    assert ran.ret == pytest.ExitCode.USAGE_ERROR
    assert "no case of test_cases.py::test_kept_in_part is in the default run" in ran.stderr.str()
