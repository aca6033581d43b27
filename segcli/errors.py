"""One exception hierarchy for segcli.

Every error a user can cause is a :class:`SegcliError`. The CLI maps each class to its exit code
in one place (``cli.py``); the library raises them unchanged, so Python callers can catch one
type. Messages are single lines that name the file or argument at fault and the first offending
value.
"""

from __future__ import annotations


class SegcliError(Exception):
    """Base class of every error segcli reports to a user."""

    exit_code = 1


class InvalidInputError(SegcliError, ValueError):
    """The inputs break a rule of SPEC: ids out of range, wrong shapes, bad dtypes, nulls."""

    exit_code = 1


class UsageError(SegcliError):
    """The command line or the call is wrong (conflicting options, unknown op or format)."""

    exit_code = 2


class EngineUnavailableError(UsageError):
    """An engine was asked for by name but cannot run here (package or device missing)."""


class ReadError(SegcliError):
    """A file is missing, unreadable, corrupt or not in a supported format."""

    exit_code = 3


class NotStreamableError(ReadError):
    """An input that can only be read whole (a 2-D Fortran-order ``.npy``): raised when it is
    opened for streaming, before any block is read, so a run may read it whole instead."""


class ExpectationError(SegcliError):
    """The data is valid but a check failed: --expect, --max-empty or --no-nan."""

    exit_code = 4


class WriteError(SegcliError):
    """The output could not be written (folder missing, disk full, binary to a terminal)."""

    exit_code = 5


class ClusterError(SegcliError):
    """The cluster could not finish the run: workers kept dying, or the scheduler went away."""

    exit_code = 6


EXIT_INTERRUPTED = 130
