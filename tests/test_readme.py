"""The README's commands run as written, so the README cannot rot.

Every ``console`` block runs in a folder of its own holding ``sample_data/``, its ``$ segcli ...``
lines in order (a later line may read what an earlier one wrote, as ``--expect golden.npy``
does). Each line's exit code must match (``# exits N`` or 0), its stdout must be the lines shown
after it that are data (tab-separated), an ``Error:`` line shown must be its stderr exactly, a
summary line shown must be one of its summary's (the timings by their label only), and its
``-o`` file must exist after a run that succeeded and not after one that failed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

#: Summary lines whose values change from run to run: compared by their label.
TIMED_LABELS = ("time", "throughput")


def console_blocks() -> list[list[tuple[str, list[str]]]]:
    blocks = []
    for block in re.findall(r"```console\n(.*?)```", README, flags=re.S):
        commands: list[tuple[str, list[str]]] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append((line[2:], []))
            elif commands:
                commands[-1][1].append(line)
        blocks.append(commands)
    return blocks


BLOCKS = console_blocks()


def section(title: str) -> str:
    return README.split(f"\n## {title}\n")[1].split("\n## ")[0]


def setup_commands() -> list[str]:
    """The indented command lines of the Set-up section, in order."""
    return [line.strip() for line in section("Set-up").splitlines() if line.startswith("    ")]


def run_segcli(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    assert argv[0] == "segcli"
    return subprocess.run(
        [sys.executable, "-m", "segcli", *argv[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def check_shown(command: str, shown: list[str], done: subprocess.CompletedProcess[str]) -> None:
    # Data: tab-separated lines (``segment<TAB>value``, or --by's header and key rows).
    data_lines = [line for line in shown if "\t" in line and not line.startswith("  ")]
    assert done.stdout.splitlines() == data_lines, command
    errors = [line for line in shown if line.startswith("Error:")]
    if errors:
        assert done.stderr.splitlines() == errors, command
    stderr_lines = done.stderr.splitlines()
    for line in shown:
        if not line.startswith("  "):
            continue
        label = line.split()[0]
        if label in TIMED_LABELS:
            assert re.search(rf"^\s+{label}\s", done.stderr, flags=re.M), (command, label)
        else:
            assert line in stderr_lines, (command, line)


def output_path(argv: list[str]) -> str | None:
    for flag in ("-o", "--output"):
        if flag in argv:
            return argv[argv.index(flag) + 1]
    return None


@pytest.mark.parametrize("block", BLOCKS, ids=[b[0][0] for b in BLOCKS])
def test_readme_block(tmp_path: Path, block: list[tuple[str, list[str]]]):
    shutil.copytree(ROOT / "sample_data", tmp_path / "sample_data")
    for command, shown in block:
        text, _, comment = command.partition("#")
        expected_exit = int(re.search(r"exits (\d+)", comment)[1]) if "exits" in comment else 0
        argv = shlex.split(text)
        done = run_segcli(argv, tmp_path)
        assert done.returncode == expected_exit, (command, done.stderr)
        check_shown(command, shown, done)
        written = output_path(argv)
        if written is not None and written != "-":
            # A failed run writes nothing; a run that succeeded wrote what -o names.
            assert (tmp_path / written).exists() == (expected_exit == 0), command


def test_readme_has_the_two_setup_commands():
    assert setup_commands() == [
        "pip install . && segcli sum sample_data/data.npy sample_data/ids.npy -n 4",
        "pip install '.[test]' && pytest -n auto",
    ]


def test_setup_installs_the_segcli_command_and_runs_the_quick_start():
    """``pip install . && segcli ...``: the install gives a ``segcli`` command (the project's
    console script, installed beside this Python), and the command after it is the Quick
    start's first, whose output it prints."""
    install, run = setup_commands()[0].split(" && ")
    assert install == "pip install ."
    assert 'segcli = "segcli.__main__:main"' in (ROOT / "pyproject.toml").read_text()
    script = Path(sys.executable).with_name("segcli")
    assert script.exists(), "the segcli console script is not installed"
    first_command, first_shown = BLOCKS[0][0]
    assert run == first_command
    done = subprocess.run(
        [str(script), *shlex.split(run)[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    check_shown(run, first_shown, done)


def test_setup_test_extras_give_pytest_and_its_n_option():
    """``pip install '.[test]' && pytest -n auto``: the test extra holds pytest and
    pytest-xdist, which gives ``-n``."""
    install, run = setup_commands()[1].split(" && ")
    extra = re.fullmatch(r"pip install '\.\[(\w+)\]'", install)
    assert extra is not None
    pyproject = (ROOT / "pyproject.toml").read_text()
    listed = re.search(rf"^{extra[1]} = \[(.*)\]$", pyproject, flags=re.M)
    assert listed is not None, f"no extra {extra[1]!r} in pyproject.toml"
    packages = {re.split(r"[<>=\[ ]", p.strip().strip('"'))[0] for p in listed[1].split(",")}
    assert {"pytest", "pytest-xdist"} <= packages
    assert run == "pytest -n auto"


def test_library_use_runs_as_written():
    """The Library use block: its first call prints what its comment shows, the second runs
    on the sample data (``data``, ``ids``), and the signature and errors are the package's."""
    import inspect

    import numpy as np

    import segcli
    import segcli.errors

    text = section("Library use")
    code = re.search(r"```python\n(.*?)```", text, flags=re.S)
    assert code is not None
    lines = code[1].splitlines()
    call = next(i for i, line in enumerate(lines) if line.startswith("segcli.segment_reduce("))
    shown = lines[call + 1].removeprefix("# ")
    namespace = {
        "data": np.load(ROOT / "sample_data" / "accel.npy"),
        "ids": np.load(ROOT / "sample_data" / "sorted_ids.npy"),
    }
    exec("\n".join(lines[:call]), namespace)
    assert repr(eval(lines[call], namespace)) == shown
    exec("\n".join(lines[call + 2 :]), namespace)

    signature = re.search(r"`segment_reduce(\(.*?\)) -> numpy.ndarray`", " ".join(text.split()))
    assert signature is not None
    parameters = inspect.signature(segcli.segment_reduce).parameters.values()
    bare = inspect.Signature([p.replace(annotation=inspect.Parameter.empty) for p in parameters])
    assert signature[1] == str(bare).replace("'", '"')
    errors = re.search(r"`segcli.SegcliError` subclasses \((.*?)\)", " ".join(text.split()))
    assert errors is not None
    for name in re.findall(r"`(?:segcli\.errors\.)?(\w+)`", errors[1]):
        assert issubclass(getattr(segcli.errors, name), segcli.SegcliError), name


def test_every_extra_the_readme_installs_is_declared():
    pyproject = (ROOT / "pyproject.toml").read_text()
    declared = pyproject.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^(\w+) = \[", declared, flags=re.M))
    named = set(re.findall(r"pip install (?:-e )?'\.\[(\w+)\]'", README))
    assert named and named <= extras
    version = re.search(r"Python (3\.\d+) or newer", README)
    assert version is not None
    assert f'requires-python = ">={version[1]}"' in pyproject


#: A stand-in for the README's ``producer``: an Arrow IPC stream of columns x and seg.
PRODUCER = (
    f"{shlex.quote(sys.executable)} -c 'import sys, numpy as np, pyarrow as pa; "
    't = pa.table({"x": np.load("data.npy"), "seg": np.load("ids.npy")}); '
    "w = pa.ipc.new_stream(sys.stdout.buffer, t.schema); w.write_table(t); w.close()'"
)

#: The shell lines the README's prose shows, as written there, and the line run here (the
#: same, with the ``producer`` stand-in and the wait for a process substitution's gzip).
PROSE_COMMANDS = [
    ("segcli sum <(zcat data.npy.gz) ids.npy", "segcli sum <(zcat data.npy.gz) ids.npy"),
    (
        "cat data.npy | segcli sum /dev/stdin ids.npy",
        "cat data.npy | segcli sum /dev/stdin ids.npy",
    ),
    (
        "producer | segcli sum - --data-column x --ids-column seg",
        f"{PRODUCER} | segcli sum - --data-column x --ids-column seg",
    ),
    (
        "-o >(gzip > out.npy.gz) --format npy",
        "segcli sum data.npy ids.npy -o >(gzip > out.npy.gz) --format npy; wait $!; "
        "zcat out.npy.gz > out.npy && segcli sum data.npy ids.npy --expect out.npy",
    ),
]


@pytest.fixture
def shell_folder(tmp_path: Path) -> Path:
    for name in ("data.npy", "ids.npy"):
        shutil.copy(ROOT / "sample_data" / name, tmp_path / name)
    subprocess.run(["gzip", "-k", "data.npy"], cwd=tmp_path, check=True)
    return tmp_path


def run_shell(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The installed segcli command first on PATH, as after the set-up's ``pip install``.
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", line],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PATH": path},
    )


@pytest.mark.parametrize(("shown", "line"), PROSE_COMMANDS, ids=[s for s, _ in PROSE_COMMANDS])
def test_readme_shell_lines_run(shell_folder: Path, shown: str, line: str):
    assert shown in " ".join(README.split()), shown
    done = run_shell(line + " -q", shell_folder)
    assert done.returncode == 0, done.stderr
    plain = run_shell("segcli sum data.npy ids.npy -q", shell_folder)
    assert done.stdout == plain.stdout != ""


def test_readme_usage_error_example_is_the_program_s(shell_folder: Path):
    shown = re.search(r"`(Error: No such option '--fil'\..*?)`", " ".join(README.split()))
    assert shown is not None
    done = run_shell("segcli sum data.npy ids.npy --fil 0", shell_folder)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [shown[1]]
