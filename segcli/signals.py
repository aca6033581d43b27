"""SIGINT, SIGTERM and SIGHUP end a command-line run the same way: unwinding, so every staged
output is removed, then exit 128 + the signal's number with one line on stderr.

Only the command line installs the handlers (:func:`install_handlers`); a library caller keeps
Python's own. Imports nothing heavy: it runs before the rest of segcli is imported.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

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
#: True once the run failed and chose its exit code (see :func:`closing_after_error`).
_closing = False
#: Signals the handler has seen, raised or not: a test checkpoint waits for the next one.
_arrived = 0
#: True from the first byte sent to stdout or a FIFO until the whole output went: bytes a
#: reader may hold cannot be taken back, so an interrupt meanwhile says the output was cut off.
_cut_off = False
#: True once the test checkpoint has been passed (see :func:`checkpoint`).
_checkpoint_passed = False
#: True while :class:`_RaiseAgain` runs (in the main thread, inside a finalizer): a signal
#: that comes meanwhile is left to the thread that sends the lost one again, since what the
#: handler raised there would be lost too (Python prints an exception raised in the hook).
_in_unraisable_hook = False
#: Set by the handler each time it raises :class:`Interrupted`: a signal sent again was taken.
_raised = threading.Event()
#: What :func:`at_exit` was given, for :func:`exit_interrupted`, which runs no atexit function.
_exit_cleanups: list[Callable[[], None]] = []


def at_exit(cleanup: Callable[[], None]) -> None:
    """Run ``cleanup`` when the process ends, also when an interrupt ends it at once
    (:func:`exit_interrupted`): a temporary folder must not outlive a Ctrl-C."""
    atexit.register(cleanup)
    _exit_cleanups.append(cleanup)


def install_handlers() -> None:
    """Make each handled signal raise :class:`Interrupted` in the main thread, but leave one
    the process was started ignoring ignored: ``nohup`` ignores SIGHUP, and a shell script's
    ``cmd &`` ignores SIGINT, so that the run outlives a hang-up or a Ctrl-C, as every Unix
    tool's does."""
    global _closing, _cut_off
    _closing = _cut_off = False
    _pending.clear()
    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _on_signal)
    if not isinstance(sys.unraisablehook, _RaiseAgain):
        sys.unraisablehook = _RaiseAgain(sys.unraisablehook)


#: How long a signal lost in a finalizer waits before it is sent again: long enough for the
#: main thread to have left the finalizer, short beside a person's patience.
_RESEND_DELAY_S = 0.01
#: How long the signal sent again may take to be raised before it is sent once more (the
#: handler left it alone), and how many times it is sent at most.
_RAISE_WAIT_S = 1.0
_RESEND_TRIES = 10


class _RaiseAgain:
    """An ``unraisablehook`` that sends again a signal whose :class:`Interrupted` was raised
    in a finalizer. The main thread runs finalizers wherever an object dies (a Dask future's
    ``__del__`` tells its client's event loop, many times a run), and Python only prints what
    one raises and carries on: the run would go on to its end as if no signal had come. Every
    other unraisable exception goes to the hook this one replaced."""

    def __init__(self, previous: Callable[[Any], Any]) -> None:
        self.previous = previous

    def __call__(self, unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            self.previous(unraisable)
            return
        # From another thread, once this finalizer is over: the handler always runs in the main
        # thread, and raising here would be lost again. Under load that thread may send it
        # before this hook returns (starting a thread waits for it): the handler leaves it
        # alone then, and the thread sends it again until it is raised.
        global _in_unraisable_hook
        _in_unraisable_hook = True
        try:
            args = (os.getpid(), unraisable.exc_value.signum)
            threading.Thread(target=_send_until_raised, args=args, daemon=True).start()
        finally:
            _in_unraisable_hook = False


def _send_until_raised(pid: int, signum: int) -> None:
    """Send ``signum`` again, from a thread of its own, until the handler raises it (or, while
    the run closes after an error, ignores it: then every try goes unanswered)."""
    time.sleep(_RESEND_DELAY_S)
    for _ in range(_RESEND_TRIES):
        _raised.clear()
        os.kill(pid, signum)
        if _raised.wait(_RAISE_WAIT_S):
            return


def closing_after_error() -> None:
    """The run failed and has chosen its exit code (its error's): from now on a signal, an
    impatient second Ctrl-C say, is ignored instead of turning the error into a 130 while the
    run removes its temporary files and reports. Only signals, not the cleanup, are skipped."""
    global _closing
    _closing = True
    _pending.clear()


def ignore_further_signals() -> None:
    """While the process reports one interrupt and exits, a second one must not cut it short."""
    for signum in HANDLED:
        signal.signal(signum, signal.SIG_IGN)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _arrived
    _arrived += 1
    if _closing:
        return
    if _held:
        _pending.append(signum)
        return
    if _in_unraisable_hook:
        return
    _raised.set()
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
        if not _held and _pending and not _closing:
            signum = _pending[0]
            _pending.clear()
            raise Interrupted(signum)


@contextlib.contextmanager
def streaming_out() -> Iterator[None]:
    """Around the writing of an output to stdout, a FIFO or a device, which is not staged: if
    the block does not finish, an interrupt says the output was cut off."""
    global _cut_off
    _cut_off = True
    yield
    _cut_off = False  # on success only: a failed block leaves it said


def exit_interrupted(signum: int, *, written: bool) -> NoReturn:
    """Say in one line what the interrupt left behind, and exit 128 + ``signum`` at once.

    ``os._exit``, not ``sys.exit``: a read-ahead thread may sit in a read of stdin holding its
    lock, and the interpreter's shutdown would then die with "Fatal Python error". Every
    ``finally`` and ``with`` has run by now (staged files are gone), so nothing is skipped but
    the interpreter's own tidying. stdout is not flushed: a stalled reader would hang the exit,
    and every complete output was flushed when it was written.
    """
    ignore_further_signals()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(interrupt_line(signum, written=written) + "\n")
        sys.stderr.flush()
    for cleanup in _exit_cleanups:
        with contextlib.suppress(Exception):
            cleanup()
    os._exit(128 + signum)


def interrupt_line(signum: int, *, written: bool) -> str:
    """The line an interrupt ends the run with (``--summary-json`` records it too)."""
    what = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    said = "the output was written" if written else "nothing was written"
    if _cut_off:
        said = "the output was cut off"
    return f"segcli: {what}; {said}"


def checkpoint(name: str) -> None:
    """Test-only (see :data:`CHECKPOINT_ENV`); free when the variable is not set. Stops once a
    process: the summary an interrupted run still writes passes the same points again."""
    global _checkpoint_passed
    wanted = os.environ.get(CHECKPOINT_ENV)
    if wanted is None or wanted.rstrip("+") != name or _checkpoint_passed:
        return
    _checkpoint_passed = True
    seen = _arrived  # before saying so: the signal may come at once
    os.write(int(os.environ[CHECKPOINT_FD_ENV]), b"!")
    if wanted.endswith("+"):
        return
    while _arrived == seen:  # until a signal comes: its handler raises, or it is ignored
        time.sleep(0.05)
