"""``read_inputs``: the DATA and IDS arrays of a reduction, from files or stdin."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from segcli.errors import ReadError, UsageError
from segcli.io.column_names import listing
from segcli.io.columns import side_by_side
from segcli.io.formats import (
    NPY_MAGIC,
    PARQUET_MAGIC,
    STDIN_LABEL,
    input_format,
    looks_like_json_lines,
    read_up_to,
    refuse_unreadable_stream,
)
from segcli.io.npy import (
    PrefixedReader,
    npz_keys,
    open_npz,
    pick_key,
    read_npy,
    read_npy_stream,
    read_npz_member,
    refuse_no_arrays,
)
from segcli.io.tables import CsvOptions, TableFile, open_table


@dataclass(frozen=True)
class ArrayInput:
    """One input array and the names errors should use for it."""

    array: np.ndarray[Any, Any]
    label: str  # what error messages call it: "data.npy", "table.parquet:value", "<stdin>"
    path: str  # the path as given, "-" for stdin
    fmt: str  # "npy", "npz", "parquet", "arrow", "csv" or "tsv"
    note: str | None = None  # how a table column was converted (decimals read as float64)


@dataclass(frozen=True)
class Role:
    """DATA or IDS, with the option names that pick a column or key for it."""

    column_option: str
    key_option: str


DATA_ROLE = Role("--data-column", "--data-key")
IDS_ROLE = Role("--ids-column", "--ids-key")


def read_inputs(
    data: str,
    ids: str | None,
    *,
    data_column: str | None = None,
    ids_column: str | None = None,
    data_key: str | None = None,
    ids_key: str | None = None,
    stdin: BinaryIO | None = None,
    csv: CsvOptions | None = None,
) -> tuple[ArrayInput, ArrayInput]:
    """Read DATA and IDS; ``ids=None`` takes both from one table (two columns) or one archive.

    A path of ``-`` reads stdin (``sys.stdin.buffer`` unless ``stdin`` is given): a ``.npy``
    stream or an Arrow IPC stream (or file), told apart by the first bytes. Columns are picked
    with ``data_column``/``ids_column`` and ``.npz`` arrays with ``data_key``/``ids_key``; a
    file holding a single column or array needs neither. Numeric table columns convert
    zero-copy, so those arrays may be read-only. ``csv`` says how to split CSV/TSV files.
    """
    if data == "-" and ids == "-":
        raise UsageError(
            "DATA and IDS cannot both be '-': stdin holds one input; for an Arrow stream "
            "holding both, give '-' once with --data-column and --ids-column"
        )
    if ids is None:
        return _read_pair(data, data_column, ids_column, data_key, ids_key, stdin, csv)
    # Both read even if DATA holds nulls: IDS' may come first, as a streamed run meets them.
    got_data, got_ids = side_by_side(
        (
            lambda: read_one(data, DATA_ROLE, data_column, data_key, stdin, csv),
            lambda: read_one(ids, IDS_ROLE, ids_column, ids_key, stdin, csv),
        )
    )
    return got_data, got_ids


def read_one(
    path: str,
    role: Role,
    column: str | None,
    key: str | None,
    stdin: BinaryIO | None,
    csv: CsvOptions | None = None,
) -> ArrayInput:
    """One input read whole; ``role`` names the options an error suggests (DATA's, the ids',
    or another input's such as ``--indices``)."""
    if path == "-":
        got = read_stdin(stdin)
        if isinstance(got, np.ndarray):
            refuse_option(role.column_option, column, STDIN_LABEL + " (.npy stream)")
            refuse_option(role.key_option, key, STDIN_LABEL + " (.npy stream)")
            return ArrayInput(got, STDIN_LABEL, path, "npy")
        table = got
    else:
        fmt = input_format(path)
        if fmt in ("npy", "npz"):
            refuse_option(role.column_option, column, path)
        if fmt == "npy":
            refuse_option(role.key_option, key, path)
            return ArrayInput(read_npy(path), path, path, fmt)
        if fmt == "npz":
            with open_npz(path) as archive:
                chosen = pick_key(archive, key, path, role.key_option)
                label = f"{path}:{chosen}"
                return ArrayInput(read_npz_member(archive, chosen, label), label, path, fmt)
        table = open_table(path, fmt, csv)
    return read_column(table, path, role, column, key)


def read_column(
    table: TableFile, path: str, role: Role, column: str | None, key: str | None
) -> ArrayInput:
    """One column of a table opened (or read from stdin) once, picked as ``role`` says."""
    refuse_option(role.key_option, key, table.label)
    name = table.pick(column, role.column_option)
    [array] = table.arrays([name])
    return ArrayInput(array, f"{table.label}:{name}", path, table.fmt, table.note(name))


def _read_pair(
    path: str,
    data_column: str | None,
    ids_column: str | None,
    data_key: str | None,
    ids_key: str | None,
    stdin: BinaryIO | None,
    csv: CsvOptions | None = None,
) -> tuple[ArrayInput, ArrayInput]:
    """DATA and IDS from one file: two columns of a table, or two arrays of an archive."""
    if path == "-":
        got = read_stdin(stdin)
        if isinstance(got, np.ndarray):
            raise UsageError(f"{STDIN_LABEL}: a .npy stream holds one array; give IDS as a file")
        return pair_from_table(got, path, data_column, ids_column, data_key, ids_key)
    fmt = input_format(path)
    if fmt == "npy":
        raise UsageError(f"{path}: a .npy file holds one array; give IDS as a second file")
    if fmt == "npz":
        refuse_option("--data-column", data_column, path)
        refuse_option("--ids-column", ids_column, path)
        return _pair_from_npz(path, data_key, ids_key)
    table = open_table(path, fmt, csv)
    return pair_from_table(table, path, data_column, ids_column, data_key, ids_key)


def _pair_from_npz(
    path: str, data_key: str | None, ids_key: str | None
) -> tuple[ArrayInput, ArrayInput]:
    with open_npz(path) as archive:
        refuse_no_arrays(npz_keys(archive), path)
        if data_key is None or ids_key is None:
            missing = _missing_options(("--data-key", data_key), ("--ids-key", ids_key))
            keys = ", ".join(npz_keys(archive))
            raise UsageError(f"{path}: DATA and IDS from one archive need {missing} (keys: {keys})")
        inputs = []
        for key, role in ((data_key, DATA_ROLE), (ids_key, IDS_ROLE)):
            pick_key(archive, key, path, role.key_option)  # a clear error for a missing key
            label = f"{path}:{key}"
            inputs.append(ArrayInput(read_npz_member(archive, key, label), label, path, "npz"))
    return inputs[0], inputs[1]


def pair_from_table(
    table: TableFile,
    path: str,
    data_column: str | None,
    ids_column: str | None,
    data_key: str | None,
    ids_key: str | None,
) -> tuple[ArrayInput, ArrayInput]:
    refuse_option("--data-key", data_key, table.label)
    refuse_option("--ids-key", ids_key, table.label)
    if data_column is None or ids_column is None:
        missing = _missing_options(("--data-column", data_column), ("--ids-column", ids_column))
        columns = listing(table.column_names()) or "none"
        raise UsageError(
            f"{table.label}: DATA and IDS from one table need {missing} (columns: {columns})"
        )
    names = [table.pick(data_column, "--data-column"), table.pick(ids_column, "--ids-column")]
    unique = list(dict.fromkeys(names))  # one read even if both options name the same column
    arrays = dict(zip(unique, table.arrays(unique), strict=True))
    data, ids = (
        ArrayInput(arrays[n], f"{table.label}:{n}", path, table.fmt, table.note(n)) for n in names
    )
    return data, ids


def read_stdin(stdin: BinaryIO | None) -> np.ndarray[Any, Any] | TableFile:
    """Read stdin whole: a ``.npy`` stream gives its array, anything else an Arrow table.

    Arrow IPC stream and file formats are both accepted (pyarrow tells them apart).
    """
    stream = stdin if stdin is not None else sys.stdin.buffer
    head = read_up_to(stream, len(NPY_MAGIC))
    if not head:
        raise ReadError(f"{STDIN_LABEL}: no input (expected a .npy or Arrow IPC stream)")
    if head == NPY_MAGIC:
        return read_npy_stream(PrefixedReader(head, stream), STDIN_LABEL)
    if looks_like_json_lines(head):
        raise ReadError(
            f"{STDIN_LABEL}: JSON lines are not read from '-' (a .npy or Arrow IPC stream, or "
            "a Parquet or Arrow file); give the path /dev/stdin instead"
        )
    refuse_unreadable_stream(head, STDIN_LABEL)
    # Parquet needs to seek, which a pipe cannot: it is read into memory, like an Arrow file.
    fmt = "parquet" if head.startswith(PARQUET_MAGIC) else "arrow"
    return TableFile(STDIN_LABEL, fmt, head + stream.read())


def refuse_option(option: str, value: str | None, label: str) -> None:
    """An option that does not apply to the file is an error rather than silently ignored."""
    if value is not None:
        kind = "table files (.parquet, .arrow, .csv, .tsv, .jsonl)"
        if option.endswith("-key"):
            kind = ".npz archives"
        raise UsageError(f"{option} applies only to {kind}, not {label}")


def _missing_options(*pairs: tuple[str, str | None]) -> str:
    return " and ".join(option for option, value in pairs if value is None)
