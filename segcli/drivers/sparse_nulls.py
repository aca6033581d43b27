"""A null among the ``--indices`` or ``--weights`` read names the option, and the reader's row.

The readers name the file, the column and the first null's row, as for any column; which of
the run's inputs that column is, only the sparse driver knows. It wraps each read, whole or
block by block, so that the message says which option has no value there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from segcli.io.chunked import ChunkSource
from segcli.io.columns import NullsError, nulls_are_kept, nulls_kept

#: What each option needs on every row, as the message says it.
_NEEDS = {"--indices": "an index", "--weights": "a weight"}


@contextlib.contextmanager
def naming_nulls(option: str) -> Iterator[None]:
    """A :class:`NullsError` raised inside names ``option`` (``--indices`` or ``--weights``).

    Within, a null is an error even under ``--skipna``: an index or a weight has no missing
    value to leave out, and kept, a float column's null would read as NaN and be named as a
    NaN (or, where a float value came first, not at all), where a block-by-block read names
    the null: one error, whole or streamed, counted over the column."""
    skipna = nulls_are_kept()
    try:
        with nulls_kept(False):
            yield
    except NullsError as error:
        why = " (--skipna leaves out missing data values only)" if skipna else ""
        message = f"{error}: {option} needs {_NEEDS[option]} on every row{why}"
        raise NullsError(message, error.row) from None


class NamedSource:
    """A :class:`ChunkSource` whose nulls, found block by block, name ``option``."""

    def __init__(self, source: ChunkSource, option: str) -> None:
        self.source, self.option = source, option
        self.label = source.label
        self.shape = source.shape
        self.dtype: np.dtype[Any] = source.dtype

    def __getattr__(self, name: str) -> Any:  # the source's other facts (a column's note)
        return getattr(self.source, name)

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        blocks = self.source.chunks(rows)
        while True:
            # Each block in the context, never across a yield: the caller's other inputs
            # (DATA's missing values) convert in between.
            with naming_nulls(self.option):
                block = next(blocks, None)
            if block is None:
                return
            yield block
