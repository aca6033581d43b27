"""Ids, indices and weights as columns of one table on stdin (``-``), read in one pass.

``--indices-column`` and ``--weights-column`` without a file of their own name columns of the
IDS file (of DATA's when IDS is omitted). When that file is ``-``, stdin is read once, as a
table, and every column is taken from it: a second read would find the pipe empty.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli.drivers.base import RunSpec
from segcli.drivers.sparse_nulls import naming_nulls
from segcli.errors import UsageError
from segcli.io import peek
from segcli.io.columns import side_by_side
from segcli.io.formats import STDIN_LABEL, input_format
from segcli.io.read import (
    DATA_ROLE,
    IDS_ROLE,
    ArrayInput,
    Role,
    pair_from_table,
    read_column,
    read_one,
    read_stdin,
)

if TYPE_CHECKING:
    import pyarrow as pa

#: The inputs of a sparse run read whole: DATA, IDS, the indices and the weights (or None).
Inputs = tuple[ArrayInput, ArrayInput, ArrayInput | None, ArrayInput | None]


def home_of_columns(spec: RunSpec) -> str:
    """The file ``--indices-column`` / ``--weights-column`` name columns of, given no file."""
    return spec.ids if spec.ids is not None else spec.data


def columns_on_stdin(spec: RunSpec) -> list[str]:
    """The options (``--indices``, ``--weights``) whose columns are to come from stdin."""
    if home_of_columns(spec) != "-":
        return []
    named = (("--indices", spec.indices, spec.indices_column),
             ("--weights", spec.weights, spec.weights_column))  # fmt: skip
    return [option for option, path, column in named if path is None and column is not None]


def refuse_npy_stream(spec: RunSpec) -> None:
    """A .npy stream on stdin is one array: it has no columns for the indices or weights."""
    options = columns_on_stdin(spec)
    if options and spec.stdin is not None and peek.holds_npy(spec.stdin):
        raise UsageError(
            f"{options[0]}-column: {STDIN_LABEL} holds a .npy stream, one array with no "
            f"columns; give {options[0]} FILE, or an Arrow stream with the columns on stdin"
        )


def read_in_one_pass(spec: RunSpec) -> Inputs:
    """DATA, IDS, the indices and the weights, the columns on stdin read from one table."""
    got = read_stdin(spec.stdin)
    if isinstance(got, np.ndarray):  # the stream ended up .npy after all (no peek before)
        raise UsageError(
            f"{STDIN_LABEL} holds a .npy stream, one array with no columns for "
            f"{', '.join(option + '-column' for option in columns_on_stdin(spec))}"
        )
    table = got
    extras: list[Callable[[], Any]] = [
        partial(read_extra, spec, "indices", spec.indices, spec.indices_column, table),
        partial(read_extra, spec, "weights", spec.weights, spec.weights_column, table),
    ]
    # Of the nulls of the columns one a row, the earliest row's is named (see read_all).
    if spec.ids is None:
        pair: Callable[[], Any] = partial(
            pair_from_table,
            table,
            "-",
            spec.data_column,
            spec.ids_column,
            spec.data_key,
            spec.ids_key,
        )
        (data, ids), indices, weights = side_by_side([pair, *extras])
        return data, ids, indices, weights
    data = read_one(spec.data, DATA_ROLE, spec.data_column, spec.data_key, None, spec.csv)
    ids_read: Callable[[], Any] = partial(
        read_column, table, "-", IDS_ROLE, spec.ids_column, spec.ids_key
    )
    ids, indices, weights = side_by_side([ids_read, *extras])
    return data, ids, indices, weights


def read_extra(
    spec: RunSpec,
    name: str,
    path: str | None,
    column: str | None,
    stdin_table: pa.Table | None = None,
) -> ArrayInput | None:
    """``--indices`` / ``--weights`` (``name``): a .npy, an .npz array or a table column; with
    only the column option given, the column of the IDS file (else of DATA's), taken from
    ``stdin_table`` when that file is stdin, read already."""
    if path is None and column is None:
        return None
    option = f"--{name}-column"
    role = Role(option, option)
    with naming_nulls(f"--{name}"):
        if path is None and stdin_table is not None:
            return read_column(stdin_table, "-", role, column, None)
        if path is None:
            path = home_of_columns(spec)
        if path != "-" and input_format(path) == "npz":
            # In an archive the column option names the array.
            return read_one(path, role, None, column, spec.stdin, spec.csv)
        return read_one(path, role, column, None, spec.stdin, spec.csv)
