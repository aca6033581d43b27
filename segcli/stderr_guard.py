"""A stderr whose failure cannot change a run's outcome.

The summary, warnings and error lines are reports about the run, not its result: when stderr
cannot take them (``2>/dev/full``, a closed pipe), the run keeps the exit code it earned, 0 or
its error's, without a traceback. The first failed write sends the descriptor to /dev/null, so
neither a later line nor the interpreter's flush at exit fails again (Python would exit 120).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO


class ForgivingStderr:
    """Wraps a text stream: writes and flushes that fail are dropped, and so is all later
    output. Everything else (``isatty``, ``fileno``, ``encoding``) is the stream's own, so
    click and rich treat it as the stream itself."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.failed = False

    def write(self, text: str) -> int:
        if not self.failed:
            try:
                self.stream.write(text)
            except OSError:
                self._give_up()
        return len(text)

    def flush(self) -> None:
        if not self.failed:
            try:
                self.stream.flush()
            except OSError:
                self._give_up()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    def _give_up(self) -> None:
        self.failed = True
        # What the stream still holds goes nowhere: the interpreter's last flush succeeds.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()


def guard_stderr() -> None:
    """Put a :class:`ForgivingStderr` in place of ``sys.stderr`` (once)."""
    if sys.stderr is not None and not isinstance(sys.stderr, ForgivingStderr):
        sys.stderr = ForgivingStderr(sys.stderr)
