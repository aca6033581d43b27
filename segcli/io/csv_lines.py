"""Physical line numbers of CSV records, as a text editor shows them.

A quoted field may hold line breaks, so a record can span several lines: pyarrow's record
count (and an enumerate over records) is not a line number. These helpers run on error paths
only, and stream the text up to the record asked for.
"""

from __future__ import annotations

import contextlib
import csv
import io
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from segcli.io.formats import shown

#: A field as long as pyarrow reads (its largest block is 1 GiB): the csv module's own limit
#: (128 KiB) would stop the count at a long quoted field that pyarrow read.
_ANY_FIELD = (1 << 31) - 1


def record_start_line(stream: BinaryIO, record: int, delimiter: str) -> int | None:
    """The physical line (from 1) that record ``record`` starts on in the CSV text of
    ``stream``, numbered as pyarrow numbers records: from 1, the header counted, blank lines
    not (pyarrow skips them). None if the text holds fewer records.

    The text is read as Latin-1, where every byte is one character: line breaks, quotes and
    delimiters are ASCII, so they split as in UTF-8, and a byte that is not UTF-8 cannot fail.
    """
    # newline="": the csv module sees "\r\n", "\r" and "\n" untranslated and ends a line at
    # each, as pyarrow does, while one inside quotes stays in its field.
    text = io.TextIOWrapper(stream, encoding="latin-1", newline="")
    with _fields_of_any_size():
        starts = (start for start, fields in numbered_records(text, delimiter) if fields)
        for number, start in enumerate(starts, start=1):
            if number == record:
                return start
    return None


def numbered_records(text: Iterable[str], delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """Each record of the CSV ``text`` (opened with ``newline=""``) with the physical line it
    starts on, from 1; a blank line is a record of no fields."""
    # pyarrow's defaults: '"' quotes a field, a doubled quote escapes one, no escape character.
    reader = csv.reader(text, delimiter=delimiter, quotechar='"', doublequote=True)
    ended = 0  # the line the last record read ends on
    for fields in reader:
        yield ended + 1, fields
        ended = reader.line_num


@contextlib.contextmanager
def _fields_of_any_size() -> Iterator[None]:
    """The csv module's field size limit lifted for the block (it is process-wide: restored)."""
    before = csv.field_size_limit(_ANY_FIELD)
    try:
        yield
    finally:
        csv.field_size_limit(before)


def not_utf8_line(text: bytes) -> tuple[int, bytes] | None:
    """The physical line (from 1) of the first bytes of ``text`` that are not UTF-8, and that
    line's bytes; None if all of it is UTF-8 (a leading byte-order mark is allowed)."""
    try:
        text.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = text.rfind(b"\n", 0, exc.start) + 1
        end = text.find(b"\n", exc.start)
        line = text[start : len(text) if end < 0 else end].rstrip(b"\r")
        return text.count(b"\n", 0, exc.start) + 1, line
    return None


def not_utf8_message(label: str, text: bytes) -> str | None:
    """``label: line N holds b'...', which is not UTF-8; ...`` for ``text``, or None."""
    found = not_utf8_line(text)
    if found is None:
        return None
    line, held = found
    return (
        f"{label}: line {line} holds {shown(held)}, which is not UTF-8; convert the file to UTF-8 "
        "(e.g. iconv -f latin1 -t utf-8)"
    )
