"""``segcli --help`` and every command's ``--help`` as a new user reads them beside the README.

Every example a help text shows is a command line that runs as written (with files of those
names in place); every op is a command; the exit codes are the README's; every option the
README names exists, and every option of a command is named in the README.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

import segcli
from segcli.cli import cli
from segcli.errors import EXIT_CODES
from segcli.op_names import OP_SUMMARIES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
CONTEXT = click.Context(cli)
COMMANDS = cli.list_commands(CONTEXT)


def command(name: str) -> click.Command:
    found = cli.get_command(CONTEXT, name)
    assert found is not None, name
    return found


def help_text(args: list[str]) -> str:
    done = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert done.exit_code == 0, done.output
    return done.output


def help_examples() -> list[tuple[str, str]]:
    """(command, example line) for every ``segcli ...`` line of every help text; a line
    continued with a backslash is joined to the next."""
    examples = []
    for name in ["", *COMMANDS]:
        text = help_text([name] if name else []).replace("\\\n", " ")
        for line in text.splitlines():
            example = line.strip()
            if re.match(r"(cat \S+ \| )?segcli ", example):
                examples.append((name or "segcli", example))
    return examples


EXAMPLES = help_examples()


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the examples name: the sample data, under its own name and at the top."""
    folder = tmp_path_factory.mktemp("help_examples")
    shutil.copytree(ROOT / "sample_data", folder / "sample_data")
    names = ("data.npy", "ids.npy", "sorted_ids.npy", "table.parquet", "flights.parquet")
    for name in (*names, "carriers.csv"):
        shutil.copy(ROOT / "sample_data" / name, folder / name)
    rows = np.arange(12)
    (folder / "table.csv").write_text(
        "a,b,id\n" + "".join(f"{a},{a * 0.5},{a % 3}\n" for a in rows)
    )
    return folder


@pytest.mark.parametrize(("name", "example"), EXAMPLES, ids=[e for _, e in EXAMPLES])
def test_help_example_runs_as_written(
    name: str, example: str, example_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user copies it and it runs: no invalid input (1), usage error (2), missing file (3)
    or bug (70); exit 4 is a check's verdict on the sample data (sensor 3 is silent)."""
    monkeypatch.chdir(example_dir)
    line = example.split("#")[0]
    stdin = None
    if line.startswith("cat "):
        source, _, line = line.partition("|")
        stdin = (example_dir / source.split()[1]).read_bytes()
    argv = shlex.split(line.split("|")[0])
    assert argv[0] == "segcli"
    done = CliRunner().invoke(cli, argv[1:], input=stdin)
    assert done.exit_code in (0, 4), f"{example}: exit {done.exit_code}: {done.output}"
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception


def test_every_op_is_a_command_with_examples() -> None:
    top = help_text([])
    for op in OP_SUMMARIES:
        assert re.search(rf"^  {op}\s", top, flags=re.M), op
        assert f"segcli {op} " in help_text([op]), op
    assert {"agg", "check", "info"} <= set(COMMANDS)


def readme_exit_codes() -> list[tuple[int, str]]:
    table = README.split("## Exit codes")[1].split("\n\n")[1]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    return [(int(code), meaning.strip()) for code, meaning in rows]


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_help_lists_the_readme_exit_codes(name: str) -> None:
    text = help_text([name] if name else [])
    assert [(code, meaning) for code, meaning in EXIT_CODES] == readme_exit_codes()
    for code, meaning in readme_exit_codes():
        assert re.search(rf"^\s+{code}\s+{re.escape(meaning)}$", text, flags=re.M), code


def test_version_is_the_package_version() -> None:
    done = CliRunner().invoke(cli, ["--version"])
    assert done.exit_code == 0
    assert done.output == f"segcli, version {segcli.__version__}\n"
    assert "segcli --version" in README


def options_of_commands() -> set[str]:
    names = {"--version"}
    for name in COMMANDS:
        for param in command(name).get_params(CONTEXT):
            if isinstance(param, click.Option):
                names.update(param.opts + param.secondary_opts)
    return names


def test_every_option_is_in_the_readme_and_every_readme_option_exists() -> None:
    options = options_of_commands()
    readme_options = set(re.findall(r"`[^`\n]*?(?<![\w-])(--[a-z][\w-]*)", README))
    # The usage error's example misspells --fill on purpose; --quick is benchmarks/run.py's.
    assert sorted(readme_options - options - {"--fil", "--quick"}) == []
    assert sorted(o for o in options if not re.search(rf"{o}(?![\w-])", README)) == []


def test_the_readme_options_table_covers_the_reductions_options() -> None:
    """The table under "The options of the reductions" names every option of ``segcli sum``,
    ``agg`` and a holistic op."""
    table = README.split("The options of the reductions:")[1].split("\n## ")[0]
    named = set(
        re.findall(
            r"(?<![\w-])(--?[a-z][\w-]*)",
            " ".join(line.split("|")[1] for line in table.splitlines() if line.startswith("| `")),
        )
    )
    for name in ("sum", "agg", "quantile", "var"):
        for param in command(name).get_params(CONTEXT):
            if isinstance(param, click.Option) and "--help" not in param.opts:
                assert set(param.opts) & named, (name, param.opts)


#: Options that do nothing unless given: no default to state.
OFF_UNLESS_GIVEN = {
    "--by",
    "--expect",
    "--indices",
    "--indices-column",
    "--keys-out",
    "--q",
    "--summary-json",
    "--weights",
    "--weights-column",
}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_with_a_default_states_it(name: str) -> None:
    for param in command(name).get_params(CONTEXT):
        if not isinstance(param, click.Option) or param.is_flag or param.required:
            continue
        if set(param.opts) & OFF_UNLESS_GIVEN:
            continue
        stated = param.show_default or "default" in (param.help or "").lower()
        assert stated, (name, param.opts)


def complete(words: str, shell: str = "bash") -> subprocess.CompletedProcess[str]:
    """What the completion script's function gets back for the command line ``words``."""
    env = {
        **os.environ,
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
        "_SEGCLI_COMPLETE": f"{shell}_complete",
    }
    return subprocess.run(
        [sys.executable, "-m", "segcli"], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("segcli s", ["plain,sqrt_n", "plain,std", "plain,sum"]),
        (
            "segcli sum d.npy --engine ",
            [f"plain,{e}" for e in ("auto", "numpy", "numba", "cupy", "dask")],
        ),
        ("segcli sum sample_data/d", ["file,sample_data/d"]),
        ("segcli agg d.npy i.npy --op sum -o ou", ["file,ou"]),
        ("segcli check d.npy --summary-json s", ["file,s"]),
        ("segcli mean d.npy i.npy --expect g", ["file,g"]),
        ("segcli median d.npy i.npy --tmp-dir /t", ["dir,/t"]),
        ("segcli info sam", ["file,sam"]),
    ],
)
def test_the_readme_s_shell_completion_completes_commands_choices_and_paths(
    words: str, expected: list[str]
) -> None:
    """The Commands table's completion line: a path completes as a file name (a plain string
    parameter would complete nothing, and the script has no fallback to file names)."""
    done = complete(words)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_readme_s_completion_scripts_are_given(shell: str) -> None:
    assert f"_SEGCLI_COMPLETE={shell}_source segcli" in README
    source = subprocess.run(
        [sys.executable, "-m", "segcli"],
        env={**os.environ, "_SEGCLI_COMPLETE": f"{shell}_source"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert source.returncode == 0, source.stderr
    assert "_segcli_completion" in source.stdout


def test_info_help_says_text_tables_are_read_a_block_at_a_time() -> None:
    """info reads a CSV/TSV or JSON-lines file through a block at a time (its help said the
    file was parsed whole), as the README's commands table says."""
    text = " ".join(help_text(["info"]).split())
    assert "parsed whole" not in text
    assert "a CSV/TSV or JSON-lines file is read through, a block at a time" in text


def test_help_fits_an_80_column_terminal_without_cutting_a_word() -> None:
    """On an 80-column terminal, each command's first sentence is listed whole (click's
    default cut most of them to one line ending in '...'), and the help's lines, exit codes
    included, wrap within 80 columns instead of running past them."""
    for args in ([], ["sum"], ["info"]):
        done = CliRunner().invoke(cli, [*args, "--help"], terminal_width=80)
        assert done.exit_code == 0, done.output
        lines = done.output.splitlines()
        exit_codes = lines[lines.index("  Exit codes:") :]
        assert max(len(line) for line in exit_codes) <= 80, args
        joined = " ".join(" ".join(exit_codes).split())
        for code, meaning in EXIT_CODES:
            assert f" {code} {meaning}" in joined, (args, code)
    top = CliRunner().invoke(cli, ["--help"], terminal_width=80).output
    commands = top[top.index("Commands:") : top.index("  Exit codes:")]
    assert "..." not in commands
    assert max(len(line) for line in commands.splitlines()) <= 80
    listed = " ".join(commands.split())
    assert "var Variance of each segment, sum((x - mean)^2) / (count - ddof); --ddof D" in listed
    assert "check Validate DATA and IDS without writing anything: exit 0 if they pass" in listed
