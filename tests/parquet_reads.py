"""Which row groups of which Parquet columns a run decoded, seen through ``iter_batches``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow.parquet as pq
import pytest

#: (columns read, row group) -> times decoded.
Decoded = Counter[tuple[tuple[str, ...], int]]


def spy_on_decoding(monkeypatch: pytest.MonkeyPatch) -> Decoded:
    """Count, from now on, every row group each ``iter_batches`` call decodes."""
    decoded: Decoded = Counter()
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        columns = tuple(kwargs.get("columns") or self.schema_arrow.names)
        groups = kwargs.get("row_groups")
        for group in range(self.metadata.num_row_groups) if groups is None else groups:
            decoded[(columns, group)] += 1
        return iter_batches(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    return decoded


def each_group_once(decoded: Decoded, columns: tuple[str, ...], groups: int) -> bool:
    """Whether every row group of the file was decoded exactly once with ``columns``."""
    return all(decoded[(columns, group)] == 1 for group in range(groups)) and all(
        times == 1 for (read, _), times in decoded.items() if read == columns
    )
