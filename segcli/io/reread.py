"""Streamed text read again from its start when pyarrow fails on a block it could read with
other options (a line longer than its block, a line break inside a quoted field): the rows
already given are skipped, so the caller sees each row once, in order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


def past_rows_given(
    first: Iterator[pa.RecordBatch],
    reopen: Callable[[], Iterator[pa.RecordBatch]],
    retry: Callable[[pa.ArrowInvalid, int], None],
    check: Callable[[pa.RecordBatch, int], None],
) -> Iterator[pa.RecordBatch]:
    """The batches of ``first``. When reading one fails, ``retry(error, rows given)`` raises
    the error the reader should see or sets the options of the next read, and ``reopen()``
    reads from the start again. ``check(batch, its first row)`` sees each batch given."""
    import pyarrow as pa

    batches, given = first, 0
    while True:
        skip = given
        try:
            for batch in batches:
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                batch, skip = batch.slice(skip), 0
                check(batch, given)
                given += batch.num_rows
                yield batch
            return
        except pa.ArrowInvalid as exc:
            retry(exc, given)
        batches = reopen()
