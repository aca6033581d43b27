"""One exception hierarchy for segcli.

Every error a user can cause is a :class:`SegcliError`. The CLI maps each class to its exit code
in one place (``cli.py``); the library raises them unchanged, so Python callers can catch one
type. Messages are single lines that name the file or argument at fault and the first offending
value.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVALID_INPUT = 1
EXIT_USAGE = 2
EXIT_READ = 3
EXIT_CHECK_FAILED = 4
EXIT_WRITE = 5
EXIT_CLUSTER = 6
#: A bug in segcli (an exception no handler expected), as BSD's sysexits EX_SOFTWARE.
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
#: SIGHUP and SIGTERM end a run like Ctrl-C does, with 128 + the signal's number.
EXIT_HANGUP = 129
EXIT_TERMINATED = 143
#: The reader of stdout or of a FIFO output went away (``| head``): 128 + SIGPIPE, what a shell
#: shows for a tool killed by the signal, so ``set -o pipefail`` scripts see the usual code.
EXIT_BROKEN_PIPE = 141

#: Every exit code and its meaning: the single source of the README table and ``--help``.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "success"),
    (
        EXIT_INVALID_INPUT,
        "invalid input: the data breaks a rule (id out of range, order, shape, dtype, nulls, "
        "n too large for memory)",
    ),
    (EXIT_USAGE, "usage error: a bad option or argument, an engine that cannot run here"),
    (EXIT_READ, "a file is missing, unreadable or corrupt"),
    (
        EXIT_CHECK_FAILED,
        "a check failed: --expect mismatch, check --max-empty, --max-dropped or --no-nan",
    ),
    (
        EXIT_WRITE,
        "the output or --tmp-dir's files could not be written (disk full, folder missing, "
        "stdout full)",
    ),
    (EXIT_CLUSTER, "the Dask cluster failed: workers kept dying, or the scheduler went away"),
    (EXIT_INTERNAL, "internal error: a bug in segcli (SEGCLI_DEBUG=1 shows the traceback)"),
    (EXIT_HANGUP, "hung up (SIGHUP); no output is left half-written"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C); no output is left half-written"),
    (
        EXIT_BROKEN_PIPE,
        "stdout or a FIFO output was closed by its reader (e.g. piped into head); nothing "
        "more is printed",
    ),
    (EXIT_TERMINATED, "terminated (SIGTERM); no output is left half-written"),
)


class SegcliError(Exception):
    """Base class of every error segcli reports to a user."""

    exit_code = EXIT_INVALID_INPUT


class InvalidInputError(SegcliError, ValueError):
    """The inputs break a rule of docs/semantics.md: ids out of range, wrong shapes, bad dtypes,
    nulls."""

    exit_code = EXIT_INVALID_INPUT


class DtypeRefusedError(InvalidInputError):
    """DATA's dtype is not one the op takes (bool data for sum, complex data for var)."""

    def __init__(self, message: str, op: str | None = None) -> None:
        super().__init__(message)
        #: The op that refused it.
        self.op = op


class UsageError(SegcliError):
    """The command line or the call is wrong (conflicting options, unknown op or format)."""

    exit_code = EXIT_USAGE


class EngineUnavailableError(UsageError):
    """An engine was asked for by name but cannot run here (package or device missing)."""


class ReadError(SegcliError):
    """A file is missing, unreadable, corrupt or not in a supported format."""

    exit_code = EXIT_READ


class NotStreamableError(UsageError):
    """An input that can only be read whole (a Fortran-order array in an ``.npz``): raised
    when it is opened for streaming, before any block is read, so a run may read it whole
    instead. Where streaming is required (--chunk-rows, an explicit --memory-limit it exceeds,
    Dask) the file is valid but the options cannot be met: a usage error."""


class ExpectationError(SegcliError):
    """The data is valid but a check failed: --expect, --max-empty or --no-nan."""

    exit_code = EXIT_CHECK_FAILED


class WriteError(SegcliError):
    """The output could not be written (folder missing, disk full, binary to a terminal)."""

    exit_code = EXIT_WRITE


class ClusterError(SegcliError):
    """The cluster could not finish the run: workers kept dying, or the scheduler went away."""

    exit_code = EXIT_CLUSTER
