"""A ``--by`` key column may not be named like a column the output writes next to it.

The key columns come first in a ``--by`` run's output, with their own names, then the result
columns and ``count``. A key column named ``count`` (or ``value``, ``mean``, ...) would give a
table with two columns of one name, which Parquet and Arrow readers (pyarrow, pandas) refuse
to read back, and a CSV whose header no longer says which column is which. So such a run is a
usage error before any row is read. ``segment`` is refused too, though a keyed output has no
such column: a table's ``segment`` column is read back as segment numbers (``--expect``). The
names a result's inner dimensions flatten to (``value_0``) are refused for 1-D data too. The
rule holds for every output, ``.npy`` and ``.npz`` with ``--keys-out`` included, and every
data shape, so that one name is refused or taken whatever the format and the data; each
refusal says which of these reasons applies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from segcli.errors import UsageError
from segcli.io.columns import VALUE_COLUMN

#: Columns of every ``--by`` table output besides the results: the rows per group, and the
#: name read back as segment numbers.
ALWAYS = ("count", "segment")


def refuse_clashing_keys(by: Sequence[str], results: Iterable[str] = (VALUE_COLUMN,)) -> None:
    """A UsageError naming the first key column that has the name of an output column, where
    ``results`` are the run's result column names (a single op's: ``value``)."""
    results = tuple(results)
    names = (*results, *(name for name in ALWAYS if name not in results))
    for key in by:
        why = _clash(key, names)
        if why is not None:
            raise UsageError(f"--by: key column '{key}' {why}; rename the key column in the table")


def _clash(key: str, names: tuple[str, ...]) -> str | None:
    """Why ``key`` may not name a key column: it is one of ``names``, the name read back as
    segment numbers, or a name a result with inner dimensions flattens to (``value_0``,
    ``mean_1_2``), whatever the data's shape, so that the rule does not depend on the data."""
    if key == "segment":
        return (
            "has the name of the segment numbers' column, which a keyed output does not "
            "write but --expect reads back as segment numbers: an output holding it as keys "
            "could not be read back"
        )
    if key in names:
        return (
            f"has the name of the output column '{key}', which follows the key columns: an "
            "output holding both could not be read back"
        )
    for name in names:
        if name != "segment" and re.fullmatch(re.escape(name) + r"(?:_\d+)+", key):
            return (
                f"is named like the columns {name}'s inner dimensions flatten to ({name}_0, "
                f"{name}_1, ...), which follow the key columns when the data has inner "
                "dimensions: refused whatever the data's shape, so that a key name is taken or "
                "refused for every input"
            )
    return None
