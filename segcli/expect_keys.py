"""``--expect`` with ``--by``: the golden file's key columns must be the run's keys, row by row.

The values alone are compared by position: a golden table of other keys, or of the same keys
in another order, would pass whenever its values agree. So the key columns are compared too,
before the values, by their values as the output writes them (the text of
:mod:`segcli.io.keyed`: ``2024-05-01``, ``12.50``, a dictionary's values, null apart from the
empty string), in whatever types the golden file reads back in: Parquet and Arrow keep theirs
(a time key in the run's unit where that loses nothing: Parquet writes seconds as milliseconds),
CSV/TSV is read in the data's key types where it can be (as ``--keys-from`` is, so that a key
``007`` stays a string and ``12.50`` a decimal), JSON holds its ``"keys"`` as JSON values.
``.npy`` and ``.npz`` goldens hold no keys (``--keys-out`` writes them apart): nothing to compare.

The single-op commands and ``agg`` call it, before they compare the values.
pyarrow is imported inside the functions: the module loads only for a ``--by`` run's ``--expect``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from segcli.errors import ExpectationError, InvalidInputError, ReadError

if TYPE_CHECKING:
    import pyarrow as pa

#: Golden formats whose key columns are read as a table.
_TABLES = ("parquet", "arrow", "csv", "tsv")


@dataclass(frozen=True)
class _Keys:
    """One side's key columns: each row's comparable values, and how an error shows a row."""

    rows: list[tuple[Any, ...]]
    show: Callable[[int], str]


def check_expected_keys(keys: pa.Table, path: str) -> None:
    """Raise :class:`ExpectationError` naming the first row whose key differs from the golden
    file's at ``path`` (or, when the keys agree as far as both go, the first group only one of
    them has); :class:`InvalidInputError` when the golden file lacks a key column."""
    from segcli.io.formats import OUTPUT_SUFFIXES, input_format, suffix_format

    fmt = suffix_format(path, OUTPUT_SUFFIXES) or input_format(path)
    if fmt in _TABLES:
        compared, golden = _in_common_units(keys, _golden_table(path, fmt, keys))
        got = _Keys(_table_keys(compared).rows, _table_keys(keys).show)
        want = _table_keys(golden)
    elif fmt == "json":
        from segcli.io.keyed import json_keys

        got = _Keys(_json_rows(json_keys(keys), keys.column_names), _table_keys(keys).show)
        want = _json_keys(_golden_json(path, keys.column_names), keys.column_names, path)
    else:
        return
    _compare(got, want, path)


def _compare(got: _Keys, want: _Keys, path: str) -> None:
    common = min(len(got.rows), len(want.rows))
    differ = [row for row in range(common) if got.rows[row] != want.rows[row]]
    if differ:
        row = differ[0]
        raise ExpectationError(
            f"--expect {path}: row {row} has key {got.show(row)}, the golden file "
            f"{want.show(row)} (the keys differ in {len(differ):,} of {common:,} rows)"
        )
    if len(got.rows) != len(want.rows):
        longer, whose = (got, "the result") if len(got.rows) > common else (want, "the golden file")
        raise ExpectationError(
            f"--expect {path}: the result has {len(got.rows):,} groups, the golden file "
            f"{len(want.rows):,}; the first only {whose} has: row {common}, key "
            f"{longer.show(common)}"
        )


def _table_keys(table: pa.Table) -> _Keys:
    """Key columns as the output writes them as text (null stays None)."""
    from segcli.io.keyed import key_strings, key_value_text

    texts = [key_strings(column).to_pylist() for column in table.columns]

    def show(row: int) -> str:
        return ", ".join(
            f"{name}={key_value_text(column, row)}"
            for name, column in zip(table.column_names, table.columns, strict=True)
        )

    return _Keys(list(zip(*texts, strict=True)) if texts else [], show)


def _golden_table(path: str, fmt: str, keys: pa.Table) -> pa.Table:
    """The golden table's key columns, CSV/TSV read in the data's key types where it can be."""
    from segcli.io.key_text import hex_as_text
    from segcli.io.keys import csv_readable_types
    from segcli.io.tables import open_table

    table = open_table(path, fmt)
    names = keys.column_names
    _require(names, table.schema().names, path)
    table.check_unique(names, f"--expect {path}")
    if fmt in ("csv", "tsv"):
        # The output writes binary keys as hex text: read that text, not its bytes.
        types = hex_as_text(csv_readable_types(keys.schema))
        try:
            return table.read(names, types).select(names)
        except ReadError:
            pass  # a key that does not read in the data's type: compared as read, so it differs
    return table.read(names).select(names)


def _in_common_units(keys: pa.Table, golden: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The run's keys and the golden's, each time key in one unit, to compare them by value.

    Parquet has no unit of seconds: a ``timestamp[s]`` or ``time32[s]`` key (a CSV's
    timestamps are read so) is written in milliseconds and reads back as ``12:00:00.000``,
    which would differ from the run's ``12:00:00``. So a golden time column is read in the
    key's unit where that loses nothing; where it would (a golden key with a fraction of a
    second), the run's keys are compared in the golden's finer unit instead, and differ."""
    import pyarrow as pa

    from segcli.io import arrow_kernels as kernels

    compared, read = list(keys.columns), list(golden.columns)
    for at, (key, column) in enumerate(zip(keys.columns, golden.columns, strict=True)):
        if key.type == column.type or not _same_time_kind(key.type, column.type):
            continue
        try:
            read[at] = kernels.cast(column, key.type)
        except pa.ArrowInvalid:
            compared[at] = kernels.cast(key, column.type)
    return (
        pa.Table.from_arrays(compared, names=keys.column_names),
        pa.Table.from_arrays(read, names=golden.column_names),
    )


def _same_time_kind(one: pa.DataType, other: pa.DataType) -> bool:
    import pyarrow.types as pt

    if pt.is_timestamp(one) and pt.is_timestamp(other):
        return bool(one.tz == other.tz)
    return any(kind(one) and kind(other) for kind in (pt.is_time, pt.is_date))


def _golden_json(path: str, names: Sequence[str]) -> dict[str, list[Any]]:
    from segcli.io.formats import library_errors, open_binary

    with open_binary(path) as f, library_errors(path, "not a segcli result JSON"):
        doc = json.loads(f.read())
    held = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(held, dict):
        held = {}
    _require(names, list(held), path)
    columns = {name: held[name] for name in names}
    for name, values in columns.items():
        if not isinstance(values, list):
            raise ReadError(f"{path}: \"keys\" column '{name}' is not a list")
    return columns


def _json_rows(columns: dict[str, list[Any]], names: Sequence[str]) -> list[tuple[Any, ...]]:
    # bool is an int in Python: compared as (type, value), true is not the key 1.
    lists = [[(type(v) is bool, v) for v in columns[name]] for name in names]
    return list(zip(*lists, strict=False)) if lists else []


def _json_keys(columns: dict[str, list[Any]], names: Sequence[str], path: str) -> _Keys:
    lengths = sorted({len(values) for values in columns.values()})
    if len(lengths) > 1:
        raise ReadError(f'{path}: the "keys" columns differ in length ({lengths} values)')

    def show(row: int) -> str:
        # A null key reads null, as the other goldens' keys say it.
        return ", ".join(f"{name}={_shown(columns[name][row])}" for name in names)

    return _Keys(_json_rows(columns, names), show)


def _shown(value: Any) -> str:
    return "null" if value is None else repr(value)


def _require(names: Sequence[str], held: Sequence[str], path: str) -> None:
    missing = [name for name in names if name not in held]
    if missing:
        raise InvalidInputError(
            f"--expect {path}: no key column '{missing[0]}' to compare with (columns: "
            f"{', '.join(held) or 'none'})"
        )
