"""docs/semantics.md names the test of each rule: every test it names must exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _defined_tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        names.update(re.findall(r"^def (test_\w+)", path.read_text(), flags=re.MULTILINE))
    return names


def test_every_test_the_semantics_cite_exists() -> None:
    text = (ROOT / "docs" / "semantics.md").read_text()
    cited = set(re.findall(r"`(?:tests/\w+\.py::)?(test_\w+)`", text))
    assert len(cited) > 20  # the parse found the citations
    assert sorted(cited - _defined_tests()) == []
