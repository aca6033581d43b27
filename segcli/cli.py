"""The ``segcli`` command line: parse, call the library, map errors, print.

No math here: every command builds a :class:`segcli.pipeline.RunRequest` and hands it over.
Heavy modules (NumPy, pyarrow, rich) are imported inside the commands, so ``segcli --help``
starts fast.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from segcli import __version__, notices
from segcli.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_WRITE,
    SegcliError,
    UsageError,
    WriteError,
)
from segcli.op_names import DDOF_OPS, HOLISTIC_OPS, OP_SUMMARIES, Q_OPS
from segcli.terminal import terminal_safe

if TYPE_CHECKING:
    from segcli.io import OutputSet

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("npy", "npz", "parquet", "arrow", "csv", "tsv", "json")
ENGINES = ("auto", "numpy", "numba", "cupy", "dask")


class StdoutClosed(Exception):
    """The reader of stdout went away; deliberately not an OSError, which click would turn
    into exit 1."""


def _stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reader has closed it (poll reports an error on it).

    NumPy's ``tofile`` reports a broken pipe without its errno, so the error alone cannot tell.
    """
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _is_broken_pipe(error: OSError) -> bool:
    return isinstance(error, BrokenPipeError) or error.errno == errno.EPIPE or _stdout_reader_gone()


class SegcliClickError(click.ClickException):
    """A :class:`SegcliError` on its way to the user, with its own exit code."""

    def __init__(self, error: SegcliError) -> None:
        super().__init__(terminal_safe(str(error)))
        # click declares exit_code a ClassVar; each instance here carries its error's own code.
        self.exit_code = error.exit_code  # type: ignore[misc]


def translate_errors(command: F) -> F:
    """Turn library errors into one-line click errors with the documented exit codes."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except UsageError as error:
            raise click.UsageError(terminal_safe(str(error))) from None
        except SegcliError as error:
            if isinstance(error, WriteError) and _stdout_reader_gone():
                raise StdoutClosed from None
            raise SegcliClickError(error) from None
        except OSError as error:
            if _is_broken_pipe(error):
                raise StdoutClosed from None
            raise
        except MemoryError:
            raise click.ClickException(
                "out of memory; try a smaller --num-segments or a machine with more memory"
            ) from None
        finally:
            # A pipe's bytes are one run's (a next run in this process may reuse its name);
            # none were kept where the formats module never loaded: no import for that.
            formats = sys.modules.get("segcli.io.formats")
            if formats is not None:
                formats.forget_pipes()

    return wrapper  # type: ignore[return-value]


def _complete_files(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a path: the shell lists the files (a plain string parameter would
    complete nothing, and click's completion script has no fallback to file names)."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type="file")]


def _complete_dirs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a directory (``--tmp-dir``)."""
    from click.shell_completion import CompletionItem

    return [CompletionItem(incomplete, type="dir")]


def _note_fifo(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An output option's callback: a named FIFO it gives is noted as soon as it is parsed, so
    that its reader gets an end of file however the run stops (see _release_fifo_readers)."""
    if value and value != "-" and not ctx.resilient_parsing:
        from segcli.io.commit import note_fifo

        note_fifo(value)
    return value


def input_options(command: F, *, engines: bool = True) -> F:
    """DATA [IDS] and the options that say how to read them and which rules apply; ``engines``
    is False for check, which has no --engine to name."""
    per_partition = " (with --engine dask: rows per partition)" if engines else ""
    options = [
        click.argument("data", metavar="DATA", shell_complete=_complete_files),
        click.argument("ids", metavar="[IDS]", required=False, shell_complete=_complete_files),
        click.option(
            "-n",
            "--num-segments",
            type=click.IntRange(min=0),
            default=None,
            help="Number of segments (default: inferred from the ids).",
        ),
        click.option(
            "--sorted",
            "sorted_ids",
            is_flag=True,
            help="Sorted family (Segment*V2): ids 1-D, non-decreasing; ids >= n dropped.",
        ),
        click.option(
            "--data-column",
            metavar="NAME",
            help="Column of DATA in a table file [default: its only column; with --by, its "
            "only column besides the keys].",
        ),
        click.option(
            "--ids-column",
            metavar="NAME",
            help="Column of the ids in a table file [default: its only column].",
        ),
        click.option(
            "--data-key",
            metavar="KEY",
            help="Array of DATA in an .npz file [default: its only array].",
        ),
        click.option(
            "--ids-key",
            metavar="KEY",
            help="Array of the ids in an .npz file [default: its only array].",
        ),
        click.option(
            "--delimiter",
            metavar="CHAR",
            help="Field delimiter of CSV/TSV input ('\\t' for a tab) "
            "[default: ',', a tab for .tsv].",
        ),
        click.option(
            "--no-input-header",
            is_flag=True,
            help="CSV/TSV input has no header line: columns are named by position from 1 "
            "(--data-column 1 is the first field).",
        ),
        click.option(
            "--memory-limit",
            metavar="SIZE",
            help="Stream inputs larger than SIZE (e.g. 512MB, 2GB) in blocks "
            "[default: 32MiB, or a quarter of free memory if less].",
        ),
        click.option(
            "--chunk-rows",
            # Bounded so that every reader can take it as a C int64 row count.
            type=click.IntRange(min=1, max=2**62),
            metavar="N",
            help=f"Always stream, N rows per block{per_partition} "
            "[default: stream only inputs over --memory-limit].",
        ),
        click.option(
            "--by",
            metavar="COL[,COL...]",
            help="Group by these key columns of DATA's table (strings, categories, integers, "
            "dates, ...) instead of IDS; one output row per distinct key, sorted. A name "
            "holding a comma goes in double quotes: '\"city, state\",year'.",
        ),
        click.option(
            "--null-keys",
            type=click.Choice(("drop", "group")),
            help="With --by: drop rows with a null (or NaN) key, or keep them as a group whose "
            "key is null [default: drop].",
        ),
        click.option(
            "--keys-from",
            metavar="FILE",
            shell_complete=_complete_files,
            help="With --by: a table of the key columns that fixes the output keys and their "
            "order (empty groups included; a key not in it is an error) [default: the keys "
            "found in DATA].",
        ),
        click.option(
            "--skipna",
            is_flag=True,
            help="Leave out NaN and null values, element by element (count counts the present "
            "ones), and rows whose id is null; the summary says how many.",
        ),
        click.option("-q", "--quiet", is_flag=True, help="No summary on stderr."),
        click.option(
            "--summary-json",
            metavar="PATH",
            shell_complete=_complete_files,
            callback=_note_fifo,
            help="Write the summary as JSON to PATH ('-' for stderr, in place of the text "
            "summary).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _finite_non_negative(ctx: click.Context, param: click.Parameter, value: float) -> float:
    # click's FloatRange lets nan through (every comparison with nan is false).
    if not (math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value} is not a finite number >= 0")
    return value


def _typed(name: str) -> bool:
    """Whether option ``name`` was given on the command line (not by default or env)."""
    source = click.get_current_context().get_parameter_source(name)
    return source is click.core.ParameterSource.COMMANDLINE


#: Options the op commands and agg declare alike.
engine_option = click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_default=True,
    help="Compute engine; 'auto' picks the fastest one that pays off.",
)
scheduler_option = click.option(
    "--scheduler",
    metavar="ADDRESS",
    envvar="DASK_SCHEDULER_ADDRESS",
    help="Dask scheduler for --engine dask, refused with any other engine "
    "[env: DASK_SCHEDULER_ADDRESS; default: a local cluster].",
)
ddof_option = click.option(
    "--ddof",
    type=int,
    metavar="D",
    help="var and std: delta degrees of freedom, divide by count - D (default 0; 1: sample "
    "variance); a non-empty segment of D rows or fewer gives NaN.",
)


def indices_options(command: F) -> F:
    """``--indices`` and ``--indices-column``: TF's sparse family, for the op commands and agg."""
    command = click.option(
        "--indices-column",
        metavar="NAME",
        help="Column (or .npz array) of the indices, in IDX or else in the IDS file.",
    )(command)
    return click.option(
        "--indices",
        metavar="IDX",
        shell_complete=_complete_files,
        help="TF's sparse family: reduce DATA[IDX[i]] by ids[i] (ids 1-D, sorted; one "
        "index per id). .npy, or a table/.npz with --indices-column.",
    )(command)


def weights_options(command: F) -> F:
    """``--weights`` and ``--weights-column``: the weighted combiners, for the op commands and
    check."""
    command = click.option(
        "--weights-column",
        metavar="NAME",
        help="Column (or .npz array) of the weights, in W or else in the IDS file.",
    )(command)
    return click.option(
        "--weights",
        metavar="W",
        shell_complete=_complete_files,
        help="sum, mean, sqrt_n: one weight per id (per index with --indices); "
        "mean = sum(w*x)/sum(w), sqrt_n = sum(w*x)/sqrt(sum(w^2)).",
    )(command)


def no_header_option(command: F) -> F:
    """``--no-header`` (SPEC's name; ``--no-output-header`` too): the output's header line."""
    return click.option(
        "--no-header",
        "--no-output-header",
        "no_output_header",
        is_flag=True,
        help="No header line in csv and tsv output, nor in the text on stdout (agg's, a --by "
        "run's); --no-input-header is for CSV/TSV input.",
    )(command)


def tolerance_options(command: F) -> F:
    """``--rtol`` and ``--atol``: how close a result must be to the ``--expect`` golden file."""
    command = click.option(
        "--atol",
        type=float,
        callback=_finite_non_negative,
        default=1e-8,
        show_default=True,
        help="Absolute tolerance for --expect.",
    )(command)
    return click.option(
        "--rtol",
        type=float,
        callback=_finite_non_negative,
        default=1e-5,
        show_default=True,
        help="Relative tolerance for --expect.",
    )(command)


def _request(op: str, **options: Any) -> Any:
    """The command's options as a RunRequest. Every option a command does not consume itself
    must be a RunRequest field: an unknown one is a programming error (a TypeError), never
    silently dropped."""
    from segcli.memory import parse_size
    from segcli.pipeline import RunRequest

    if options.get("memory_limit") is not None:
        options["memory_limit"] = parse_size(options["memory_limit"])
    if options.get("by") and options.get("data") == "-" and os.path.exists("/dev/stdin"):
        # --by reads DATA as a table file by its path (a pipe's bytes kept as they are read),
        # where '-' takes one array or table whole: stdin is read there.
        options["data"] = "/dev/stdin"
    if op != "agg" and options.get("data_column") is not None:
        # One column: its name as it is, or in quotes as the column listings show it.
        from segcli.io.column_names import one_name

        options["data_column"] = one_name(options["data_column"])
    _refuse_tolerances_without_expect(options)
    unknown = sorted(set(options) - set(RunRequest.__dataclass_fields__))
    if unknown:
        raise TypeError(f"options that are no RunRequest field: {', '.join(unknown)}")
    return RunRequest(op=op, **options)


def _refuse_tolerances_without_expect(options: dict[str, Any]) -> None:
    """``--rtol``/``--atol`` given with nothing to compare would be silently ignored: a user
    who meant ``--expect`` learns it now, as ``--q`` without quantile does."""
    context = click.get_current_context(silent=True)
    if context is None or options.get("expect") is not None:
        return
    for name in ("rtol", "atol"):
        if name in options and context.get_parameter_source(name) is not ParameterSource.DEFAULT:
            raise UsageError(f"--{name} applies only with --expect (a golden file to compare)")


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

    if summary_json == "-":
        click.echo(summary_module.dumps(facts), err=True)
    if quiet or summary_json == "-":
        return
    if sys.stderr.isatty():
        from rich.console import Console

        Console(stderr=True).print(summary_module.render_table(title, rows, alert=alert))
    else:
        click.echo(summary_module.render_plain(title, rows), err=True)


@dataclass
class _SummaryPlan:
    """``--summary-json`` of a run whose outputs passed their checks (the path is no input), so
    that a run ended by a signal or a broken pipe can still say so there."""

    path: str
    command: str
    #: The facts staged for the run's own summary: a signal after the commit keeps them.
    facts: dict[str, Any] | None = None


@dataclass
class _Session:
    """What main() needs to know when a signal lands: whether the run's outputs were committed,
    and where the JSON summary goes."""

    outputs: OutputSet | None = None
    summary: _SummaryPlan | None = None

    @property
    def written(self) -> bool:
        return bool(self.outputs is not None and self.outputs.committed)


def _arm_summary(command: str, summary_json: str | None) -> None:
    """Called once the run's outputs are reserved and none of them is an input: from now on a
    signal or a broken pipe ends the run with ``--summary-json`` written (see main)."""
    session = click.get_current_context().find_object(_Session)
    if session is not None and summary_json is not None:
        session.summary = _SummaryPlan(summary_json, command)


def _summary_at_exit(session: _Session, exit_code: int, line: str | None) -> None:
    """Write ``--summary-json`` for a run that ends by a signal or a broken pipe: its staged facts
    if the commit went through, else the failed run's fields, with ``exit_code`` and ``error``
    (the line printed on stderr; none for a broken pipe, which prints nothing)."""
    plan = session.summary
    if plan is None:
        return
    facts = dict(plan.facts) if session.written and plan.facts else _failed_facts(plan.command)
    facts.update(exit_code=exit_code, error=line)
    _write_summary_alone(plan.path, facts)


def _failed_facts(command: str) -> dict[str, Any]:
    facts: dict[str, Any] = _command(command)
    if command == "check":
        facts["passed"] = False
    return facts


def _write_summary_alone(summary_json: str, facts: dict[str, Any]) -> None:
    """``--summary-json`` as a transaction of its own, the run's other outputs aborted; a
    summary that cannot be written leaves the run's own error the one reported."""
    from segcli import summary as summary_module
    from segcli.io import OutputSet

    if summary_json == "-":
        with contextlib.suppress(OSError, ValueError):
            click.echo(summary_module.dumps(facts), err=True)
        return
    with contextlib.suppress(SegcliError, OSError), OutputSet() as outputs:
        outputs.reserve(summary_json, "--summary-json")
        _stage_summary_json(outputs, summary_json, facts)


def _run_outputs(summary_json: str | None) -> OutputSet:
    """The run's :class:`segcli.io.OutputSet`, with ``--summary-json`` reserved (checked) now."""
    from segcli.io import OutputSet

    outputs = OutputSet()
    session = click.get_current_context().find_object(_Session)
    if session is not None:
        session.outputs = outputs
    if summary_json not in (None, "-"):
        outputs.reserve(summary_json, "--summary-json")
    return outputs


def _stage_summary_json(
    outputs: OutputSet, summary_json: str | None, facts: dict[str, Any]
) -> None:
    if summary_json in (None, "-"):
        return  # on stderr, with the rest of the summary
    from segcli import summary as summary_module

    context = click.get_current_context(silent=True)
    session = context.find_object(_Session) if context is not None else None
    if session is not None and session.summary is not None:
        session.summary.facts = facts
    with outputs.stage(summary_json) as handle:
        handle.write((summary_module.dumps(facts) + "\n").encode())


#: A short help as long as the first sentence of a command's help (click cuts it at the limit).
_WHOLE_SENTENCE = 400


class _OnceCommand(click.Command):
    """A command whose options each take one value: click keeps the last of ``--q 0.1 --q
    0.5`` without a word, so a second one is a usage error instead (flags may repeat). Its
    help ends with the exit codes."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_exit_codes(formatter)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not ctx.resilient_parsing:
            _refuse_repeated_options(self, ctx, args)
        return super().parse_args(ctx, args)


def _refuse_repeated_options(command: click.Command, ctx: click.Context, args: list[str]) -> None:
    # The parser alone (no callbacks, no conversion) lists each option once per use.
    _, _, order = command.make_parser(ctx).parse_args(args=list(args))
    seen: set[str | None] = set()
    for param in order:
        if not isinstance(param, click.Option) or param.is_flag or param.count or param.multiple:
            continue
        if param.name in seen:
            name = max(param.opts, key=len)
            given = _values_of(param, args)
            values = f" ({', '.join(given)})" if len(given) > 1 else ""
            joined = ",".join(given) if "," in (param.metavar or "") and given else ""
            hint = f" (several in one: {name} {joined})" if joined else ""
            raise click.UsageError(
                f"{name} was given more than once{values}; it takes one value{hint}", ctx=ctx
            )
        seen.add(param.name)


def _values_of(param: click.Option, args: list[str]) -> list[str]:
    """The values the command line gives ``param``, in order, for the error message."""
    return _option_values(param.opts, args)


def _option_values(opts: Sequence[str], args: list[str]) -> list[str]:
    """The values the words ``args`` give the options named ``opts`` (``--name VALUE``,
    ``--name=VALUE``, ``-o VALUE``, ``-oVALUE``), in order; read before click parses them."""
    values = []
    for k, arg in enumerate(args):
        if arg == "--":
            break
        for opt in opts:
            if arg == opt and k + 1 < len(args):
                values.append(args[k + 1])
            elif arg.startswith(opt + "=") and opt.startswith("--"):
                values.append(arg[len(opt) + 1 :])
            elif len(opt) == 2 and arg.startswith(opt) and len(arg) > 2 and arg[1] != "-":
                values.append(arg[2:])
    return values


def _format_exit_codes(formatter: click.HelpFormatter) -> None:
    """The exit codes after a command's help, each meaning wrapped beside its code within the
    help's width (click's own lists run a column or three past it when indented)."""
    import textwrap

    formatter.write_paragraph()
    with formatter.indentation():
        formatter.write_text("Exit codes:")
    indent = " " * (formatter.current_indent + 4)
    code_width = max(len(str(code)) for code, _ in EXIT_CODES) + 2
    width = max(formatter.width - len(indent) - code_width, 20)
    for code, meaning in EXIT_CODES:
        lines = textwrap.wrap(meaning, width, break_on_hyphens=False)
        formatter.write(f"{indent}{code!s:<{code_width}}{lines[0]}\n")
        for line in lines[1:]:
            formatter.write(f"{indent}{'':<{code_width}}{line}\n")


class _OpCommandsOnDemand(click.Group):
    """Builds an op's command when it is asked for: each carries some 35 options, and making
    all 19 cost about 4 ms of every run's start-up, for the one command it runs."""

    command_class = _OnceCommand

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with the whole first sentence of its help, wrapped beside its name:
        click's default cuts it to one line with '...', which left most of them cut."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=_WHOLE_SENTENCE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_exit_codes(formatter)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in OP_SUMMARIES and cmd_name not in self.commands:
            self.add_command(_make_op_command(cmd_name))
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *OP_SUMMARIES})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.list_commands(ctx):
            # An unknown name: click suggests the close ones among the commands built.
            for name in OP_SUMMARIES:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)


@click.group(
    cls=_OpCommandsOnDemand,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="segcli")
def cli() -> None:
    """Segment reductions on array files, with TensorFlow's semantics.

    \b
    segcli sum data.npy ids.npy -n 4
    segcli mean table.parquet --data-column value --ids-column segment -o out.parquet
    segcli check data.npy ids.npy -n 4 --max-empty 0
    """
    notices.listen(_notice_printer())


def _notice_printer() -> Callable[[str], None]:
    """The run's printer of the library's notes (a first run compiling kernels, an Arrow
    stream without its end marker): on stderr, even with --quiet, each one once."""
    printed: set[str] = set()

    def print_notice(message: str) -> None:
        if message not in printed:
            printed.add(message)
            click.echo(message, err=True)

    return print_notice


def _verdict(error: SegcliError | None) -> dict[str, Any]:
    """The JSON summary's ``exit_code`` and ``error`` (the line printed on stderr, or null)."""
    if error is None:
        return {"exit_code": 0, "error": None}
    return {"exit_code": error.exit_code, "error": f"Error: {terminal_safe(str(error))}"}


def _command(command: str) -> dict[str, Any]:
    """The JSON summary's ``command``, first after ``schema_version``, as in a failed run's."""
    from segcli.summary import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "command": command}


@contextlib.contextmanager
def _summary_on_failure(command: str, summary_json: str | None) -> Iterator[None]:
    """On a failed run, ``--summary-json`` still gets written, saying why, so CI can read it.

    Not for usage errors: one of them is "--summary-json names an input", which writing the
    summary would destroy. The run's other outputs were aborted; this is a transaction of its own.
    """
    try:
        yield
    except SegcliError as error:
        if isinstance(error, WriteError) and _stdout_reader_gone():
            raise  # a broken pipe, exit 141: main writes the summary saying so
        if summary_json and not isinstance(error, UsageError):
            _write_summary_alone(summary_json, {**_failed_facts(command), **_verdict(error)})
        raise


def _warn(message: str) -> None:
    click.echo(f"Warning: {terminal_safe(message)}", err=True)


#: The last help example's pipeline where the default one ("the 3 largest") says nothing.
_EXAMPLE_PIPES = {
    "any": "grep -c True     # segments holding a non-zero value",
    "all": "grep -c False     # segments holding a zero",
    "argmin": "awk '$2 >= 0'     # leave out the empty segments (-1)",
    "argmax": "awk '$2 >= 0'     # leave out the empty segments (-1)",
}


def _make_op_command(op: str) -> click.Command:
    @input_options
    @click.option(
        "-o",
        "--output",
        metavar="PATH",
        shell_complete=_complete_files,
        callback=_note_fifo,
        help="Write the result to PATH (format from its suffix); '-' for stdout. "
        "Default: text lines 'segment<TAB>value' on stdout (with --by: a header line, then "
        "the key fields and the value).",
    )
    @click.option(
        "--format",
        "output_format",
        type=click.Choice(FORMATS),
        help="Output format (default: from the suffix of --output; npy for '-').",
    )
    @engine_option
    @click.option(
        "--fast-atomics",
        is_flag=True,
        help="GPU engine: float sums with atomics; faster, but the last bits may differ "
        "from run to run.",
    )
    @click.option(
        "--float-format",
        metavar="FMT",
        help="printf format of float values in text, csv and tsv output (e.g. %.6g) "
        "[default: the shortest text that reads back exactly].",
    )
    @no_header_option
    @click.option("--no-progress", is_flag=True, help="No progress bar on long runs.")
    @scheduler_option
    @click.option(
        "--fill",
        metavar="VALUE",
        help="Value for empty segments instead of the op's default (e.g. nan, 1+2j), read "
        "exactly in the result dtype; a value it cannot hold is a usage error (exit 2).",
    )
    @click.option(
        "--expect",
        metavar="FILE",
        shell_complete=_complete_files,
        help="Compare the result with a golden file; exit 4 and list the segments that differ.",
    )
    @click.option(
        "--keys-out",
        metavar="PATH",
        shell_complete=_complete_files,
        callback=_note_fifo,
        help="With --by and .npy/.npz output: write the key table (row i for result row i) "
        "to PATH (.parquet, .arrow, .csv or .tsv).",
    )
    @indices_options
    @weights_options
    @tolerance_options
    @translate_errors
    def command(
        quiet: bool,
        summary_json: str | None,
        no_progress: bool,
        **options: Any,
    ) -> None:
        from segcli import pipeline
        from segcli.progress import progress_bar
        from segcli.summary import summary_facts, summary_rows

        if options["output"] is None and options["output_format"]:
            raise UsageError("--format needs -o/--output (use -o - for stdout)")
        if options["engine"] != "dask" and _typed("scheduler"):
            # Only a typed option: DASK_SCHEDULER_ADDRESS may be set for other tools' runs.
            raise UsageError("--scheduler applies to --engine dask only; add --engine dask")
        # Every output is checked before any input is read, and committed together at the end;
        # a failed run still writes --summary-json, saying why.
        with _summary_on_failure(op, summary_json), _run_outputs(summary_json) as outputs:
            request = _request(op, **options)
            pipeline.check_request(request)
            pipeline.reserve_outputs(request, outputs)
            _arm_summary(op, summary_json)
            with progress_bar(enabled=not (quiet or no_progress)) as progress:
                outcome = pipeline.run(request, progress=progress, outputs=outputs, warn=_warn)
            facts = {**_command(op), **summary_facts(outcome.summary), **_verdict(None)}
            _stage_summary_json(outputs, summary_json, facts)

        summary = outcome.summary
        _emit_summary(
            f"segcli {op}",
            summary_rows(summary),
            {**_command(op), **summary_facts(summary), **_verdict(None)},
            quiet=quiet,
            summary_json=summary_json,
            alert=frozenset({"result"}) if summary.nan_count else frozenset(),
        )

    # quantile cannot run without --q: its examples must carry one to be copied as they are.
    q = " --q 0.9" if op in Q_OPS else ""
    # A pipeline that means something for the op's result: True/False and row numbers (-1 for
    # an empty segment) have no "3 largest" worth asking for.
    pipe = _EXAMPLE_PIPES.get(op, "sort -k2 -g | tail -3     # the 3 largest")
    command.__doc__ = f"""{OP_SUMMARIES[op]}

    DATA holds the values and IDS one segment id per row (IDS may be omitted when both are
    columns of one table file, or keys of one .npz). Use '-' to read .npy or an Arrow IPC
    stream from stdin (a Parquet or Arrow file there is read into memory).

    \b
    Examples:
      segcli {op} data.npy ids.npy -n 4{q}
      segcli {op} data.npy sorted_ids.npy --sorted -o result.npy{q}
      segcli {op} table.parquet --data-column value --ids-column segment -o out.parquet{q}
      segcli {op} flights.parquet --data-column arr_delay --by carrier,origin -o out.csv{q}
      segcli {op} data.npy ids.npy{q} -q | {pipe}
    """
    if op in DDOF_OPS:
        command = ddof_option(command)
    if op in Q_OPS:
        command = q_option(required=True)(command)
    if op in HOLISTIC_OPS:
        command = tmp_dir_option(command)
    return click.command(name=op, cls=_OnceCommand)(command)


def q_option(*, required: bool) -> Callable[[F], F]:
    return click.option(
        "--q",
        type=float,
        required=required,
        metavar="Q",
        help="The quantile, from 0 to 1 (0.5: the median), by NumPy's linear method.",
    )


def tmp_dir_option(command: F) -> F:
    return click.option(
        "--tmp-dir",
        metavar="DIR",
        shell_complete=_complete_dirs,
        help="Directory for the temporary partition files of median, quantile and nunique "
        "over unsorted inputs larger than --memory-limit [default: the system's].",
    )(command)


@cli.command()
@input_options
@click.option(
    "--op",
    "op_list",
    required=True,
    metavar="OP[,OP...]",
    help=f"The ops, comma-separated, folded in one pass ({', '.join(OP_SUMMARIES)}).",
)
@click.option(
    "-o",
    "--output",
    metavar="PATH",
    shell_complete=_complete_files,
    callback=_note_fifo,
    help="Write the table to PATH (format from its suffix); '-' for stdout. Default: a "
    "header line, then one tab-separated line per segment on stdout.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    help="Output format (default: from the suffix of --output; npy for '-').",
)
@engine_option
@scheduler_option
@click.option(
    "--keys-out",
    metavar="PATH",
    shell_complete=_complete_files,
    callback=_note_fifo,
    help="With --by and .npy or .npz output: write the key table (row i for result row i) to PATH "
    "(.parquet, .arrow, .csv or .tsv).",
)
@click.option(
    "--float-format",
    metavar="FMT",
    help="printf format of float values in text, csv and tsv output (e.g. %.6g) "
    "[default: the shortest text that reads back exactly].",
)
@no_header_option
@click.option("--no-progress", is_flag=True, help="No progress bar on long runs.")
@click.option(
    "--fill",
    metavar="VALUE",
    help="Value for empty segments in every result column, read in each op's result dtype "
    "[default: each op's own].",
)
@click.option(
    "--expect",
    metavar="FILE",
    shell_complete=_complete_files,
    help="Compare every result column with a golden table (.csv, .tsv, .json, .parquet, "
    ".arrow, .npz with the same columns; .npy for one result); exit 4 if one differs.",
)
@q_option(required=False)
@tmp_dir_option
@ddof_option
@indices_options
@tolerance_options
@translate_errors
def agg(
    quiet: bool,
    summary_json: str | None,
    no_progress: bool,
    op_list: str,
    **options: Any,
) -> None:
    """Several ops, over one or several data columns, in one pass: one row per segment.

    Columns: segment (with --by: the key columns), then <op> per op (quantile's is q<Q>, e.g.
    q0.9; <column>_<op> with several --data-column, read together in one read of the table; a
    name holding a comma in double quotes: '"price, USD",qty'), inner dimensions flattened to
    <name>_<i> (.json: a nested list per column), then count, the rows per segment (unless
    count is one of the ops; under --skipna that op counts present values, and rows follows
    it). .npz holds one array per result column and counts; .npy takes one result column only.

    \b
    Examples:
      segcli agg sample_data/table.parquet --data-column value --ids-column segment \\
          --op mean,min,max,count
      segcli agg data.npy ids.npy --op sum,mean -o out.parquet
      segcli agg table.csv --data-column a,b --ids-column id --op max -o out.npz
      segcli agg flights.parquet --data-column arr_delay --by carrier --op mean,std,argmax
    """
    from segcli import agg as agg_module
    from segcli import pipeline
    from segcli.multi import parse_ops
    from segcli.progress import progress_bar

    op_names = parse_ops(op_list)
    if options["output"] is None and options["output_format"]:
        raise UsageError("--format needs -o/--output (use -o - for stdout)")
    if options["engine"] != "dask" and _typed("scheduler"):
        raise UsageError("--scheduler applies to --engine dask only; add --engine dask")
    with _summary_on_failure("agg", summary_json), _run_outputs(summary_json) as outputs:
        request = _request("agg", **options)
        agg_module.check_request(request, op_names)
        pipeline.reserve_outputs(request, outputs)
        _arm_summary("agg", summary_json)
        with progress_bar(enabled=not (quiet or no_progress)) as progress:
            outcome = agg_module.run(request, op_names, outputs, progress=progress)
        facts = {**_command("agg"), **outcome.facts(), **_verdict(None)}
        _stage_summary_json(outputs, summary_json, facts)
    _emit_summary(
        "segcli agg",
        outcome.rows(),
        facts,
        quiet=quiet,
        summary_json=summary_json,
        alert=frozenset(),
    )


@cli.command()
@functools.partial(input_options, engines=False)
@click.option(
    "--op",
    "op",
    default="sum",
    show_default=True,
    metavar="OP[,OP...]",
    help=f"Validate the dtypes for these ops ({', '.join(OP_SUMMARIES)}).",
)
@click.option(
    "--max-empty",
    type=click.IntRange(min=0),
    metavar="K",
    help="Fail (exit 4) if more than K segments are empty [default: no limit].",
)
@click.option(
    "--max-dropped",
    type=click.IntRange(min=0),
    metavar="K",
    help="Fail (exit 4) if more than K rows were dropped (negative ids; ids >= n under --sorted; "
    "null ids under --skipna; missing keys under --by) [default: no limit].",
)
@click.option(
    "--no-nan",
    is_flag=True,
    help="Fail (exit 4) if DATA holds any NaN (with --skipna: or null), or --weights any NaN.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar on long runs.")
@ddof_option
@q_option(required=False)
@indices_options
@weights_options
@translate_errors
def check(
    quiet: bool,
    summary_json: str | None,
    max_empty: int | None,
    max_dropped: int | None,
    no_nan: bool,
    no_progress: bool,
    op: str,
    ddof: int | None,
    q: float | None,
    **options: Any,
) -> None:
    """Validate DATA and IDS without writing anything: exit 0 if they pass, non-zero if not.

    Runs the same validation as the ops (ids in range, order for --sorted, shapes, dtypes),
    then the optional data-quality rules, so a CI job can fail on data that is valid but wrong.

    \b
    Examples:
      segcli check data.npy ids.npy -n 4
      segcli check data.npy ids.npy -n 1000 --max-empty 0 --no-nan
      segcli check data.npy ids.npy --max-dropped 0 --summary-json check.json
      segcli check data.npy sorted_ids.npy --sorted --max-dropped 0
      segcli check flights.parquet --data-column arr_delay --by carrier \\
          --keys-from carriers.csv --max-empty 0
      segcli check sample_data/vocab.npy sample_data/bags.parquet --ids-column bag \\
          --indices-column token --weights-column weight --op mean
    """
    from segcli import pipeline
    from segcli.progress import progress_bar

    with _summary_on_failure("check", summary_json), _run_outputs(summary_json) as outputs:
        from segcli.multi import parse_ops

        op_names = parse_ops(op)
        _check_op_options(op_names, ddof, q)
        request = _request(op_names[0], **options)
        pipeline.reserve_outputs(request, outputs, prints_result=False)
        _arm_summary("check", summary_json)
        with (
            _default_op_named(op_names),
            progress_bar(enabled=not (quiet or no_progress)) as progress,
        ):
            outcome = pipeline.check(
                request,
                max_empty=max_empty,
                no_nan=no_nan,
                max_dropped=max_dropped,
                also_ops=op_names[1:],
                progress=progress,
            )
        failure = pipeline.failure(outcome)
        # A failed check still writes its JSON summary: it says why, for CI to read.
        _stage_summary_json(outputs, summary_json, {**outcome.facts, **_verdict(failure)})
    _emit_summary(
        "segcli check",
        outcome.rows,
        {**outcome.facts, **_verdict(failure)},
        quiet=quiet,
        summary_json=summary_json,
        alert=frozenset({"verdict"}) if outcome.failures else frozenset(),
    )
    if failure is not None:
        raise failure


@contextlib.contextmanager
def _default_op_named(op_names: tuple[str, ...]) -> Iterator[None]:
    """A dtype refused by check's default op says that the op was the default: a user who
    gave no --op did not ask for a sum (bool data, say, is refused by sum but taken by count,
    any and all)."""
    from click.core import ParameterSource

    from segcli.errors import DtypeRefusedError

    defaulted = click.get_current_context().get_parameter_source("op") == ParameterSource.DEFAULT
    try:
        yield
    except DtypeRefusedError as error:
        if not defaulted or error.op != op_names[0]:
            raise
        raise DtypeRefusedError(
            f"{error}; check validates for --op {error.op} unless --op names the run's ops",
            error.op,
        ) from None


def _check_op_options(op_names: tuple[str, ...], ddof: int | None, q: float | None) -> None:
    """``check`` takes a run's --ddof and --q, so that a CI line can copy the run's, and
    refuses them as the run would (an op that does not use them, a q outside [0, 1])."""
    if ddof is not None:
        from segcli.multi import with_ddof

        with_ddof(op_names, ddof)
    from segcli.holistic_runs import check_q

    check_q(op_names, q)  # also: quantile without --q, a usage error of the run


@cli.command(short_help="Show what FILE holds: shape, dtype, columns, types, nulls, size.")
@click.argument("path", metavar="FILE", shell_complete=_complete_files)
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON on stdout.")
@click.option(
    "--delimiter",
    metavar="CHAR",
    help="Field delimiter of a CSV/TSV FILE ('\\t' for a tab) [default: ',', a tab for .tsv].",
)
@click.option(
    "--no-input-header",
    is_flag=True,
    help="A CSV/TSV FILE without a header line: columns are named by position from 1.",
)
@translate_errors
def info(path: str, as_json: bool, delimiter: str | None, no_input_header: bool) -> None:
    """Show what FILE holds (shape, dtype, columns with their types and nulls, row groups,
    size) from its metadata; a CSV/TSV or JSON-lines file is read through, a block at a time, to
    count its rows and nulls and infer its types over every row. FILE '-' reads stdin (.npy,
    Parquet, Arrow IPC or JSON lines) through.

    \b
    Examples:
      segcli info sample_data/data.npy
      segcli info sample_data/table.parquet --json
      cat sample_data/ids.npy | segcli info -
    """
    import json

    from segcli.io import CsvOptions, check_delimiter, describe

    csv = None
    if delimiter is not None or no_input_header:
        csv = CsvOptions(check_delimiter(delimiter), header=not no_input_header)
    facts = describe(path, csv=csv)
    if as_json:
        _print_stdout([json.dumps(facts, indent=2, default=str)])
        return
    # Column and array names come from the file: literal, one line each, even on a terminal.
    _print_stdout([terminal_safe(line) for line in _describe_lines(facts)])


def _print_stdout(lines: list[str]) -> None:
    """Lines on stdout; a full or closed stdout is a write error (exit 5), not a bug."""
    try:
        for line in lines:
            click.echo(line)
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # the reader went away: main() stops quietly
    except OSError as error:
        raise WriteError(f"<stdout>: cannot write ({error.strerror or error})") from error


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


#: click 8.2 raises this for a group called without a command (its message is the help).
_NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)


def usage_error_line(error: click.UsageError, argv: list[str] | None = None) -> str:
    """click's usage error as one line, its hint folded in: ``Error: No such option '--foo'.
    Did you mean '--fill'? (see 'segcli sum --help')``. ``argv`` names the command where
    click's parser gives no context (an option missing its value)."""
    message = terminal_safe(" ".join(error.format_message().split()))
    if error.ctx is not None:
        command = error.ctx.command_path
    else:
        named = argv[0] if argv else None
        command = f"segcli {named}" if named in cli.commands else "segcli"
    return f"Error: {message} (see '{command} --help')"


def _fill_closed_std_fds() -> None:
    """Put /dev/null on a closed stdin, stdout or stderr (``<&-``, ``>&-``, ``2>&-``).

    Otherwise the next file opened would take the free descriptor, and Python leaves
    ``sys.stdin`` etc. None. stdout gets a read-only /dev/null so that writing the result fails
    with an error instead of vanishing.
    """
    for fd, name, flags, mode in (
        (0, "stdin", os.O_RDONLY, "r"),
        (1, "stdout", os.O_RDONLY, "w"),
        (2, "stderr", os.O_WRONLY, "w"),
    ):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, flags)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
            setattr(sys, name, open(fd, mode, closefd=False))  # noqa: SIM115 (lives as long as sys)


def _silence_stdout() -> None:
    # Python flushes stdout once more at exit; a closed pipe would print "Exception ignored".
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _raised_echoing_to_stdout(error: BaseException) -> bool:
    """Whether ``error`` came out of ``click.echo`` writing to stdout: the commands turn their
    own write errors into WriteErrors, but click prints --help and --version itself."""
    trace = error.__traceback__
    while trace is not None:
        frame = trace.tb_frame
        if frame.f_code is click.utils.echo.__code__ and not frame.f_locals.get("err"):
            return True
        trace = trace.tb_next
    return False


def main(argv: list[str] | None = None) -> None:
    """Console entry point: click's own handling, plus signals (128 + signal), broken pipes
    (141) and one-line usage errors."""
    import signal

    from segcli.signals import (
        Interrupted,
        exit_interrupted,
        ignore_further_signals,
        install_handlers,
        interrupt_line,
    )
    from segcli.stderr_guard import guard_stderr

    _fill_closed_std_fds()
    guard_stderr()
    install_handlers()
    # NumPy reports floating-point events as RuntimeWarnings (a float32 signalling NaN widened
    # to float64 is "invalid value encountered in cast"): the results already carry them as
    # NaN, and a warning with a source line is not a message for a shell user.
    warnings.simplefilter("ignore", RuntimeWarning)
    session = _Session()
    try:
        code = cli.main(args=argv, prog_name="segcli", standalone_mode=False, obj=session)
    except click.UsageError as error:
        # The run has chosen its exit code: a Ctrl-C while it reports must not change it.
        ignore_further_signals()
        _note_output_fifos(sys.argv[1:] if argv is None else argv)
        if isinstance(error, _NO_ARGS_IS_HELP):
            error.show()  # plain ``segcli``: the help itself, not an error line
        else:
            click.echo(usage_error_line(error, sys.argv[1:] if argv is None else argv), err=True)
        sys.exit(error.exit_code)
    except click.ClickException as error:
        ignore_further_signals()
        error.show()
        if error.exit_code == EXIT_WRITE:
            _silence_stdout()  # what stdout could not take must not fail again at exit
        sys.exit(error.exit_code)
    except (Interrupted, KeyboardInterrupt, click.exceptions.Abort) as interrupt:
        # A second signal must not cut the summary short with a traceback.
        ignore_further_signals()
        signum = interrupt.signum if isinstance(interrupt, Interrupted) else signal.SIGINT
        written = session.written
        _summary_at_exit(session, 128 + signum, interrupt_line(signum, written=written))
        _release_fifo_readers()  # exit_interrupted leaves at once, running no finally
        exit_interrupted(signum, written=written)
    except (StdoutClosed, BrokenPipeError):
        ignore_further_signals()
        _silence_stdout()
        _summary_at_exit(session, EXIT_BROKEN_PIPE, None)
        sys.exit(EXIT_BROKEN_PIPE)
    except Exception as error:  # a bug: say so in one line, traceback only on request
        ignore_further_signals()
        if isinstance(error, OSError) and _raised_echoing_to_stdout(error):
            # click's own output (--help, --version) met a full or closed stdout
            click.echo(f"Error: <stdout>: cannot write ({error.strerror or error})", err=True)
            _silence_stdout()
            sys.exit(EXIT_WRITE)
        if os.environ.get("SEGCLI_DEBUG"):
            raise
        click.echo(
            f"segcli: internal error: {type(error).__name__}: {terminal_safe(str(error))} "
            "(set SEGCLI_DEBUG=1 for the traceback, and please report it)",
            err=True,
        )
        sys.exit(EXIT_INTERNAL)
    finally:
        _release_fifo_readers()
    sys.exit(code if isinstance(code, int) else 0)


#: The options that name an output: a FIFO among their values has a reader to release.
_OUTPUT_OPTIONS = ("-o", "--output", "--keys-out", "--summary-json")


def _note_output_fifos(args: list[str]) -> None:
    """The FIFOs the command line names as outputs, found in its words: a parse error (an
    unknown option) stops click before any option's callback notes them (_note_fifo)."""
    from segcli.io.commit import note_fifo

    for value in _option_values(_OUTPUT_OPTIONS, args):
        note_fifo(value)


def _release_fifo_readers() -> None:
    # Only a run that planned its outputs has loaded the module, and so may have a FIFO to
    # release (see segcli.io.commit.release_fifo_readers).
    commit = sys.modules.get("segcli.io.commit")
    if commit is not None:
        commit.release_fifo_readers()
