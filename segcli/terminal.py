"""User text on its way to a terminal: printed literally, whatever it holds.

File names, column names, key values and the input an error quotes come from the user or
from a file, maybe a hostile one. Their control characters must neither break a one-line
message nor drive the terminal (colours, cursor moves, a carriage return that hides the start
of the line), and rich must not read their brackets as markup (``[bold]x.npy``). Every such
text goes through this module on its way to stderr or a human-readable stdout.

Imports nothing heavy: rich is loaded only when a rich text is asked for.
"""

from __future__ import annotations

from typing import Any


def terminal_safe(text: str) -> str:
    """``text`` with its control characters written as escapes (``\\x1b``, ``\\n``, ...);
    printable text, accents and symbols included, is kept whole."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escaped(char) for char in text)


def rich_literal(text: str, style: str | None = None) -> Any:
    """``text`` as a rich ``Text``: shown as it reads, never parsed as markup, its control
    characters escaped. For any table cell or line of rich output that holds user text."""
    from rich.text import Text

    return Text(terminal_safe(text), style=style or "")


def _escaped(char: str) -> str:
    # repr's own spelling of the character (\n, \x1b, \u2028), without its quotes.
    return repr(char)[1:-1]
