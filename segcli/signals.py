"""SIGINT, SIGTERM and SIGHUP end a command-line run the same way: unwinding, so every staged
output is removed, then exit 128 + the signal's number with one line on stderr.

Only the command line installs the handlers (:func:`install_handlers`); a library caller keeps
Python's own. Imports nothing heavy: it runs before the rest of segcli is imported.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

#: SIGHUP is POSIX only.
HANDLED = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

#: Test-only: the name of the :func:`checkpoint` at which the process says it is there (one byte
#: on the descriptor in :data:`CHECKPOINT_FD_ENV`) and, unless the name ends in ``+``, waits for a
#: signal. Tests use it to deliver a signal at a known point instead of sleeping and hoping.
CHECKPOINT_ENV = "SEGCLI_TEST_CHECKPOINT"
CHECKPOINT_FD_ENV = "SEGCLI_TEST_CHECKPOINT_FD"


class Interrupted(BaseException):
    """A handled signal arrived. A BaseException, so no ``except Exception`` swallows it; not a
    KeyboardInterrupt, so click does not turn it into an Abort with a blank line of its own."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_held = 0
_pending: list[int] = []


def install_handlers() -> None:
    """Make each handled signal raise :class:`Interrupted` in the main thread."""
    for signum in HANDLED:
        signal.signal(signum, _on_signal)


def ignore_further_signals() -> None:
    """While the process reports one interrupt and exits, a second one must not cut it short."""
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_IGN)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _held:
        _pending.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Defer handled signals until the block ends: a commit of several renames, or the removal
    of temporary files, is never cut in half. The first deferred signal is raised at the end."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending:
            signum = _pending[0]
            _pending.clear()
            raise Interrupted(signum)


def exit_interrupted(signum: int, *, written: bool) -> NoReturn:
    """Say in one line what the interrupt left behind, and exit 128 + ``signum`` at once.

    ``os._exit``, not ``sys.exit``: a read-ahead thread may sit in a read of stdin holding its
    lock, and the interpreter's shutdown would then die with "Fatal Python error". Every
    ``finally`` and ``with`` has run by now (staged files are gone), so nothing is skipped but
    the interpreter's own tidying. stdout is not flushed: a stalled reader would hang the exit,
    and every complete output was flushed when it was written.
    """
    ignore_further_signals()
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    said = "the output was written" if written else "nothing was written"
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"segcli: {what}; {said}\n")
        sys.stderr.flush()
    os._exit(128 + signum)


def checkpoint(name: str) -> None:
    """Test-only (see :data:`CHECKPOINT_ENV`); free when the variable is not set."""
    wanted = os.environ.get(CHECKPOINT_ENV)
    if wanted is None or wanted.rstrip("+") != name:
        return
    os.write(int(os.environ[CHECKPOINT_FD_ENV]), b"!")
    if wanted.endswith("+"):
        return
    while True:  # until a signal's handler raises
        time.sleep(1)
