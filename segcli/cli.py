"""The ``segcli`` command line: parse, call the library, map errors, print.

No math here: every command builds a :class:`segcli.pipeline.RunRequest` and hands it over.
Heavy modules (NumPy, pyarrow, rich) are imported inside the commands, so ``segcli --help``
starts fast.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from segcli import __version__
from segcli.errors import EXIT_INTERRUPTED, SegcliError, UsageError
from segcli.op_names import OP_SUMMARIES

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("npy", "npz", "parquet", "arrow", "csv", "tsv", "json")
ENGINES = ("auto", "numpy", "numba", "cupy", "dask")

EXIT_CODES_HELP = """\b
Exit codes:
  0  success
  1  invalid input (breaks the segment-reduction rules: ids out of range, bad dtype, ...)
  2  usage error (bad option or argument)
  3  a file is missing, unreadable or corrupt
  4  a check failed (--expect, --max-empty, --no-nan)
  5  the output could not be written
  6  the Dask cluster failed (workers kept dying, scheduler lost)
  130 interrupted (Ctrl-C); nothing is written
"""


class SegcliClickError(click.ClickException):
    """A :class:`SegcliError` on its way to the user, with its own exit code."""

    def __init__(self, error: SegcliError) -> None:
        super().__init__(str(error))
        self.exit_code = error.exit_code


def translate_errors(command: F) -> F:
    """Turn library errors into one-line click errors with the documented exit codes."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except UsageError as error:
            raise click.UsageError(str(error)) from None
        except SegcliError as error:
            raise SegcliClickError(error) from None
        except MemoryError:
            raise click.ClickException(
                "out of memory; try a smaller --num-segments or a machine with more memory"
            ) from None

    return wrapper  # type: ignore[return-value]


def input_options(command: F) -> F:
    """DATA [IDS] and the options that say how to read them and which rules apply."""
    options = [
        click.argument("data", metavar="DATA"),
        click.argument("ids", metavar="[IDS]", required=False),
        click.option(
            "-n",
            "--num-segments",
            type=int,
            default=None,
            help="Number of segments (default: inferred from the ids).",
        ),
        click.option(
            "--sorted",
            "sorted_ids",
            is_flag=True,
            help="Sorted family (Segment*V2): ids 1-D, non-decreasing; ids >= n dropped.",
        ),
        click.option("--data-column", metavar="NAME", help="Column of DATA in a table file."),
        click.option("--ids-column", metavar="NAME", help="Column of the ids in a table file."),
        click.option("--data-key", metavar="KEY", help="Array of DATA in an .npz file."),
        click.option("--ids-key", metavar="KEY", help="Array of the ids in an .npz file."),
        click.option(
            "--memory-limit",
            metavar="SIZE",
            help="Stream inputs larger than SIZE (e.g. 512MB, 2GB) in blocks "
            "[default: 32MB, or a quarter of free memory if less].",
        ),
        click.option(
            "--chunk-rows",
            type=click.IntRange(min=1),
            metavar="N",
            help="Always stream, N rows per block (with --engine dask: rows per partition).",
        ),
        click.option("-q", "--quiet", is_flag=True, help="No summary on stderr."),
        click.option(
            "--summary-json",
            metavar="PATH",
            help="Write the summary as JSON to PATH ('-' for stderr).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _typed(name: str) -> bool:
    """Whether option ``name`` was given on the command line (not by default or env)."""
    source = click.get_current_context().get_parameter_source(name)
    return source is click.core.ParameterSource.COMMANDLINE


def _request(op: str, **options: Any) -> Any:
    from segcli.memory import parse_size
    from segcli.pipeline import RunRequest

    if options.get("memory_limit") is not None:
        options["memory_limit"] = parse_size(options["memory_limit"])
    fields = RunRequest.__dataclass_fields__
    return RunRequest(op=op, **{k: v for k, v in options.items() if k in fields})


def _emit_summary(
    title: str,
    rows: list[tuple[str, str]],
    facts: dict[str, Any],
    *,
    quiet: bool,
    summary_json: str | None,
    alert: frozenset[str],
) -> None:
    """The summary on stderr (a table on a terminal, plain text otherwise) and/or as JSON."""
    from segcli import summary as summary_module

    if summary_json:
        text = summary_module.dumps(facts)
        if summary_json == "-":
            click.echo(text, err=True)
        else:
            from segcli.io import atomic_output

            with atomic_output(summary_json) as handle:
                handle.write((text + "\n").encode())
    if quiet or summary_json == "-":
        return
    if sys.stderr.isatty():
        from rich.console import Console

        Console(stderr=True).print(summary_module.render_table(title, rows, alert=alert))
    else:
        click.echo(summary_module.render_plain(title, rows), err=True)


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(__version__, prog_name="segcli")
def cli() -> None:
    """Segment reductions on array files, with TensorFlow's semantics.

    \b
    segcli sum data.npy ids.npy -n 4
    segcli mean table.parquet --data-column value --ids-column segment -o out.parquet
    segcli check data.npy ids.npy -n 4 --max-empty 0
    """


def _make_op_command(op: str) -> click.Command:
    @input_options
    @click.option(
        "-o",
        "--output",
        metavar="PATH",
        help="Write the result to PATH (format from its suffix); '-' for stdout. "
        "Default: text lines 'segment<TAB>value' on stdout.",
    )
    @click.option(
        "--format",
        "output_format",
        type=click.Choice(FORMATS),
        help="Output format (default: from the suffix of --output; npy for '-').",
    )
    @click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="auto",
        show_default=True,
        help="Compute engine; 'auto' picks the fastest one that pays off.",
    )
    @click.option(
        "--fast-atomics",
        is_flag=True,
        help="GPU engine: float sums with atomics; faster, but the last bits may differ "
        "from run to run.",
    )
    @click.option("--no-progress", is_flag=True, help="No progress bar on long runs.")
    @click.option(
        "--scheduler",
        metavar="ADDRESS",
        envvar="DASK_SCHEDULER_ADDRESS",
        help="Dask scheduler for --engine dask, refused with any other engine "
        "[env: DASK_SCHEDULER_ADDRESS; "
        "default: a local cluster].",
    )
    @click.option(
        "--fill",
        metavar="VALUE",
        help="Value for empty segments instead of the op's default (e.g. nan, 1+2j), read "
        "exactly in the result dtype; a value it cannot hold is a usage error (exit 2).",
    )
    @click.option(
        "--expect",
        metavar="FILE",
        help="Compare the result with a golden file; exit 4 and list the segments that differ.",
    )
    @click.option(
        "--rtol",
        type=float,
        default=1e-5,
        show_default=True,
        help="Relative tolerance for --expect.",
    )
    @click.option(
        "--atol",
        type=float,
        default=1e-8,
        show_default=True,
        help="Absolute tolerance for --expect.",
    )
    @translate_errors
    def command(
        quiet: bool,
        summary_json: str | None,
        no_progress: bool,
        **options: Any,
    ) -> None:
        from segcli import pipeline
        from segcli.progress import progress_bar
        from segcli.summary import summary_rows

        if options["output"] is None and options["output_format"]:
            raise UsageError("--format needs -o/--output (use -o - for stdout)")
        if options["engine"] != "dask" and _typed("scheduler"):
            # Only a typed option: DASK_SCHEDULER_ADDRESS may be set for other tools' runs.
            raise UsageError("--scheduler applies to --engine dask only; add --engine dask")
        with progress_bar(enabled=not (quiet or no_progress)) as progress:
            outcome = pipeline.run(_request(op, **options), progress=progress)

        summary = outcome.summary
        _emit_summary(
            f"segcli {op}",
            summary_rows(summary),
            summary.to_json(),
            quiet=quiet,
            summary_json=summary_json,
            alert=frozenset({"result"}) if summary.nan_count else frozenset(),
        )

    command.__doc__ = f"""{OP_SUMMARIES[op]}

    DATA holds the values and IDS one segment id per row (IDS may be omitted when both are
    columns of one table file, or keys of one .npz). Use '-' to read .npy or an Arrow IPC
    stream from stdin.

    \b
    Examples:
      segcli {op} data.npy ids.npy -n 4
      segcli {op} data.npy ids.npy --sorted -o result.npy
      segcli {op} table.parquet --data-column value --ids-column segment -o out.parquet
      segcli {op} data.npy ids.npy -q | sort -k2 -g | tail -3     # the 3 largest
    """
    return click.command(name=op, epilog=EXIT_CODES_HELP)(command)


for _op in OP_SUMMARIES:
    cli.add_command(_make_op_command(_op))


@cli.command(epilog=EXIT_CODES_HELP)
@input_options
@click.option(
    "--op",
    "op",
    type=click.Choice(tuple(OP_SUMMARIES)),
    default="sum",
    show_default=True,
    help="Validate the dtypes for this op.",
)
@click.option(
    "--max-empty",
    type=click.IntRange(min=0),
    metavar="K",
    help="Fail (exit 4) if more than K segments are empty.",
)
@click.option("--no-nan", is_flag=True, help="Fail (exit 4) if DATA holds any NaN.")
@translate_errors
def check(
    quiet: bool,
    summary_json: str | None,
    max_empty: int | None,
    no_nan: bool,
    op: str,
    **options: Any,
) -> None:
    """Validate DATA and IDS without writing anything: exit 0 if they pass, non-zero if not.

    Runs the same validation as the ops (ids in range, order for --sorted, shapes, dtypes),
    then the optional data-quality rules, so a CI job can fail on data that is valid but wrong.

    \b
    Examples:
      segcli check data.npy ids.npy -n 4
      segcli check data.npy ids.npy -n 1000 --max-empty 0 --no-nan
      segcli check table.parquet --data-column value --ids-column segment --sorted
    """
    from segcli import pipeline

    outcome = pipeline.check(_request(op, **options), max_empty=max_empty, no_nan=no_nan)
    _emit_summary(
        "segcli check",
        outcome.rows,
        outcome.facts,
        quiet=quiet,
        summary_json=summary_json,
        alert=frozenset({"verdict"}) if outcome.failures else frozenset(),
    )
    pipeline.enforce(outcome)


@cli.command(epilog=EXIT_CODES_HELP)
@click.argument("path", metavar="FILE")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON on stdout.")
@translate_errors
def info(path: str, as_json: bool) -> None:
    """Show what FILE holds (shape, dtype, columns, row groups, size) without reading its data.

    \b
    Examples:
      segcli info sample_data/data.npy
      segcli info sample_data/readings.parquet --json
    """
    import json

    from segcli.io import describe

    facts = describe(path)
    if as_json:
        click.echo(json.dumps(facts, indent=2, default=str))
        return
    for line in _describe_lines(facts):
        click.echo(line)


def _describe_lines(facts: dict[str, Any], indent: str = "") -> list[str]:
    """``key: value`` lines; nested facts (npz arrays, table columns) indented below their key."""
    lines = []
    for key, value in facts.items():
        if isinstance(value, dict):
            lines.append(f"{indent}{key}:")
            lines.extend(_describe_lines(value, indent + "  "))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{indent}{key}:")
            for item in value:
                named = dict(item)
                name = named.pop("name", "")
                details = ", ".join(f"{v}" if k == "type" else f"{k} {v}" for k, v in named.items())
                lines.append(f"{indent}  {name}: {details}")
        elif key == "size" and isinstance(value, int):
            lines.append(f"{indent}{key}: {value:,} bytes")
        else:
            lines.append(f"{indent}{key}: {value}")
    return lines


def main(argv: list[str] | None = None) -> None:
    """Console entry point: click's own handling, plus Ctrl-C (130) and broken pipes."""
    try:
        code = cli.main(args=argv, prog_name="segcli", standalone_mode=False)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("segcli: interrupted; nothing was written", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # The reader of stdout went away (``| head``): not an error worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(141)
    except Exception as error:  # a bug: say so in one line, traceback only on request
        if os.environ.get("SEGCLI_DEBUG"):
            raise
        click.echo(
            f"segcli: internal error: {type(error).__name__}: {error} "
            "(set SEGCLI_DEBUG=1 for the traceback, and please report it)",
            err=True,
        )
        sys.exit(70)
    sys.exit(code if isinstance(code, int) else 0)
