"""Lists of column names on the command line (``--by a,b``, ``--data-column a,b``) and in
messages.

A name holding a comma, a double quote or spaces at its ends is written in double quotes,
CSV-style (a quote inside doubled): ``--by '"city, state",year'``. Unquoted names are
stripped of the spaces around them, so ``--by "a, b"`` is the columns ``a`` and ``b``.
"""

from __future__ import annotations

from collections.abc import Iterable

from segcli.errors import UsageError


def split_names(text: str) -> list[str]:
    """The names of a comma-separated list; a quote that is never closed is a ValueError."""
    names: list[str] = []
    position = 0
    while True:
        while text[position : position + 1] == " ":
            position += 1
        if text.startswith('"', position):
            name, position = _quoted(text, position + 1)
            while text[position : position + 1] == " ":
                position += 1
            if position < len(text) and text[position] != ",":
                raise ValueError(f"text after the quoted name {quoted(name)}")
        else:
            end = text.find(",", position)
            end = len(text) if end < 0 else end
            name, position = text[position:end].strip(), end
        names.append(name)
        if position >= len(text):
            return names
        position += 1  # the comma


def _quoted(text: str, position: int) -> tuple[str, int]:
    """The name of a quoted field whose text starts at ``position``, and the position after
    its closing quote."""
    parts = []
    while True:
        end = text.find('"', position)
        if end < 0:
            raise ValueError("a quote that is never closed")
        parts.append(text[position:end])
        if not text.startswith('""', end):
            return "".join(parts), end + 1
        parts.append('"')
        position = end + 2


def quoted(name: str) -> str:
    """``name`` as :func:`split_names` reads it back: in double quotes where it must be."""
    if "," in name or '"' in name or name != name.strip(" ") or not name:
        return '"' + name.replace('"', '""') + '"'
    return name


def listing(names: Iterable[str]) -> str:
    """Names for a message, ``a, "b, c"``: each one as it would be given back."""
    return ", ".join(quoted(name) for name in names)


def column_list(text: str, option: str) -> list[str]:
    """``option``'s list of column names; an empty name or an unclosed quote is a usage
    error."""
    try:
        names = split_names(text)
    except ValueError as error:
        raise UsageError(
            f"{option} {text!r}: {error}; a name holding a comma goes in double quotes, "
            f"e.g. {option} '\"city, state\",year'"
        ) from None
    if not all(names):
        raise UsageError(
            f"{option} {text!r}: need column names separated by commas, e.g. {option} a,b"
        )
    return names


def one_name(text: str) -> str:
    """A single column's name as given: as it is, or unquoted when it is wholly one quoted
    name (as :func:`listing` shows a name holding a comma)."""
    if not text.startswith('"'):
        return text
    try:
        names = split_names(text)
    except ValueError:
        return text
    return names[0] if len(names) == 1 else text
