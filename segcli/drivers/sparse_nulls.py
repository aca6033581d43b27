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
from segcli.io.columns import NullsError

#: What each option needs on every row, as the message says it.
_NEEDS = {"--indices": "an index", "--weights": "a weight"}


@contextlib.contextmanager
def naming_nulls(option: str) -> Iterator[None]:
    """A :class:`NullsError` raised inside names ``option`` (``--indices`` or ``--weights``)."""
    try:
        yield
    except NullsError as error:
        raise NullsError(f"{error}: {option} needs {_NEEDS[option]} on every row") from None


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
        with naming_nulls(self.option):
            yield from self.source.chunks(rows)
