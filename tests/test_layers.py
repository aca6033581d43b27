"""The core's layers: the op table, validation, the engines and the errors import nothing from
the CLI, the summary, the pipeline, the drivers or (engines) io, nor click or rich; and engines
do not import validation, which asks the engine registry for an id scan, never the reverse."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "segcli"
CORE = ["ops.py", "op_names.py", "validate.py", "errors.py", "notices.py"]
ENGINES = sorted(path.name for path in (PACKAGE / "engines").glob("*.py"))
#: What no core module imports, anywhere in it (function-level imports included).
FORBIDDEN = ("click", "rich", "segcli.cli", "segcli.summary", "segcli.pipeline", "segcli.drivers")


def imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _forbidden(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("name", CORE)
def test_core_modules_import_no_outer_layer(name: str) -> None:
    assert _forbidden(imported_names(PACKAGE / name), FORBIDDEN) == []


@pytest.mark.parametrize("name", ENGINES)
def test_engines_import_no_outer_layer_nor_io(name: str) -> None:
    names = imported_names(PACKAGE / "engines" / name)
    assert _forbidden(names, (*FORBIDDEN, "segcli.io", "segcli.validate")) == []
