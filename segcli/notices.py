"""Notes the library has for the user ("compiling kernels, first run only"), handed to one
listener: the CLI installs one that prints them on stderr. The library itself prints nothing,
and a library caller sees the notes only if it listens.

Free of NumPy, so that the CLI can listen before it imports anything heavy.
"""

from __future__ import annotations

from collections.abc import Callable

_listener: Callable[[str], None] | None = None


def listen(listener: Callable[[str], None] | None) -> None:
    """Send every later note to ``listener`` (None: drop them)."""
    global _listener
    _listener = listener


def send(message: str) -> None:
    """Hand a note to the listener, if there is one."""
    if _listener is not None:
        _listener(message)
