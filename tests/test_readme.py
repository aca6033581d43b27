"""The README's commands run as written, so the README cannot rot.

Every ``$ segcli ...`` line of a ``console`` block runs in a folder holding ``sample_data/``;
its exit code must match (``# exits N`` or 0), its stdout must be the lines shown after it that
are data (tab-separated), and an ``Error:`` line shown must be its stderr exactly.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def console_commands() -> list[tuple[str, list[str]]]:
    commands: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            elif commands:
                commands[-1][1].append(line)
    return commands


COMMANDS = console_commands()


def test_readme_has_the_two_setup_commands():
    assert "    pip install . && segcli sum sample_data/data.npy sample_data/ids.npy -n 4" in README
    assert "    pip install '.[test]' && pytest -n auto" in README


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "sample_data", folder / "sample_data")
    return folder


@pytest.mark.parametrize(("command", "shown"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_readme_command(workdir: Path, command: str, shown: list[str]):
    text, _, comment = command.partition("#")
    expected_exit = int(re.search(r"exits (\d+)", comment)[1]) if "exits" in comment else 0
    argv = shlex.split(text)
    assert argv[0] == "segcli"
    done = subprocess.run(
        [sys.executable, "-m", "segcli", *argv[1:]],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == expected_exit, done.stderr
    # Data: tab-separated lines (``segment<TAB>value``, or --by's header and key rows).
    data_lines = [line for line in shown if "\t" in line and not line.startswith("  ")]
    assert done.stdout.splitlines() == data_lines
    errors = [line for line in shown if line.startswith("Error:")]
    if errors:
        assert done.stderr.splitlines() == errors
    summary_labels = [line.split()[0] for line in shown if line.startswith("  ")]
    for label in summary_labels:
        assert re.search(rf"^\s+{re.escape(label)}\s", done.stderr, flags=re.M), label
