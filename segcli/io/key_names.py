"""A ``--by`` key column may not be named like a column the output writes next to it.

The key columns come first in a ``--by`` run's output, with their own names, then the result
columns and ``count``. A key column named ``count`` (or ``value``, ``mean``, ...) would give a
table with two columns of one name, which Parquet and Arrow readers (pyarrow, pandas) refuse
to read back, and a CSV whose header no longer says which column is which. So such a run is a
usage error before any row is read. ``segment`` is refused too: a table's ``segment`` column
is read back as segment numbers (``--expect``). The rule holds for every output, ``.npy`` and
``.npz`` with ``--keys-out`` included, so that one name is refused or taken whatever the format.
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
        clash = _clash(key, names)
        if clash is not None:
            raise UsageError(
                f"--by: key column '{key}' has the name of the output column {clash}, which "
                "follows the key columns: an output holding both could not be read back; "
                "rename the key column in the table"
            )


def _clash(key: str, names: tuple[str, ...]) -> str | None:
    """The output column ``key`` is named like, as the error names it: one of ``names``, or a
    column a result with inner dimensions flattens to (``value_0``, ``mean_1_2``), whatever the
    data's shape, so that the rule does not depend on the data."""
    if key in names:
        return f"'{key}'"
    for name in names:
        if name != "segment" and re.fullmatch(re.escape(name) + r"(?:_\d+)+", key):
            return f"'{key}' (of {name}'s inner dimensions)"
    return None
