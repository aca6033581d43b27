"""What a ``--by`` run learned about its keys, for the writer and the summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class KeyFacts:
    """The key table in output order (row ``r`` is result row ``r``) and the rows dropped."""

    columns: list[str]
    table: pa.Table
    #: Rows dropped because a key column held a null (or NaN) and null keys were dropped.
    missing_rows: int
    null_keys: str
    keys_from: str | None = None
    #: The first row dropped for a missing key, None if none was.
    first_missing_row: int | None = None

    @property
    def distinct(self) -> int:
        return int(self.table.num_rows)

    def summary(self) -> dict[str, Any]:
        """The facts the JSON summary reports under ``keys``."""
        return {
            "columns": list(self.columns),
            "types": [str(t) for t in self.table.schema.types],
            "distinct": self.distinct,
            "rows_dropped_missing_key": self.missing_rows,
            "null_keys": self.null_keys,
            "keys_from": self.keys_from,
        }
