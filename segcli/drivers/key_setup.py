"""The set-up every ``--by`` run shares: DATA's table with its key columns checked, and the
key encoder (with ``--keys-from``'s table read and checked), made before any row is read.

Apart from :mod:`segcli.drivers.keys` so that a driver of another kind (the streamed
driver's look at an input's metadata) can make the same checks without importing the runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from segcli.drivers.base import RunSpec
from segcli.errors import UsageError
from segcli.io.keys import check_key_columns, key_table_file, pick_data_column, read_keys_from
from segcli.keys import KeyEncoder
from segcli.keys.values import NullKeys

if TYPE_CHECKING:
    import pyarrow as pa

    from segcli.io.tables import TableFile


def encoder_for(spec: RunSpec, data: TableFile | pa.Schema | None = None) -> KeyEncoder:
    """The run's key encoder, with the ``--keys-from`` table when one is given (a CSV one read
    in the key types of ``data``: DATA's table or its key columns' schema)."""
    keys_from = None
    if spec.keys_from is not None:
        keys_from = read_keys_from(spec.keys_from, spec.by, data)
        if spec.null_keys == "drop":
            _refuse_unreachable_null_key(keys_from, spec.keys_from)
    return KeyEncoder(
        spec.by,
        null_keys=cast(NullKeys, spec.null_keys),
        keys_from=keys_from,
        keys_from_label=f"--keys-from {spec.keys_from}",
    )


def _refuse_unreachable_null_key(keys: pa.Table, path: str) -> None:
    """A --keys-from row with a null (or NaN) key names a group no row can reach while null
    keys are dropped: it would be empty in every run, and ``check --max-empty 0`` would fail
    on it whatever the data. A usage error naming the row, with both ways out."""
    from segcli.io import arrow_kernels as kernels
    from segcli.io.columns import numpy_of

    for name in keys.column_names:
        column = keys.column(name).combine_chunks()
        missing = numpy_of(kernels.is_null(column, nan_is_null=True))
        if missing.any():
            row = int(np.argmax(missing))
            what = "null" if column.is_null()[row].as_py() else "NaN"
            raise UsageError(
                f"--keys-from {path}: row {row} has a {what} key in column '{name}', which no "
                "row can reach while null keys are dropped; give --null-keys group to count "
                "the rows of null keys there, or remove the row"
            )


def open_key_table(spec: RunSpec, one_pass: bool = False) -> tuple[TableFile, str]:
    """DATA's table with its key columns checked, and the data column to reduce."""
    table = key_table_file(spec.data, spec.csv, one_pass=one_pass)
    check_key_columns(table, spec.by)
    return table, pick_data_column(table, spec.data_column, spec.by)
