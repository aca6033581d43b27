"""Planning a distributed run: which files, how DATA and IDS shards pair up, which partitions.

Everything here runs on the client and reads only metadata (``.npy`` headers, Parquet footers,
the first row of a table), never the rows themselves: workers read their own partitions. Paths
must therefore name the same files on the client and on every worker (a shared file system).

An input is a directory of Parquet files, a glob (``'shards/data-*.npy'``, matched in natural
order so that ``data-10`` follows ``data-9``) or a single file. Each file pair is split into
partitions of about :data:`DEFAULT_PARTITION_BYTES`: runs of Parquet row groups, or row ranges
of a ``.npy`` file read at an offset. Other formats make one partition per file.
"""

from __future__ import annotations

import bisect
import fnmatch
import glob
import os
import re
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from segcli.errors import InvalidInputError, ReadError, SegcliError, UsageError
from segcli.io import rows
from segcli.io.formats import input_format
from segcli.io.rows import FileRef

#: DATA plus IDS bytes per partition when the caller names no row count.
DEFAULT_PARTITION_BYTES = 64 * 1024 * 1024

#: Formats a worker can read a row range of without reading the rows before it.
_SPLITTABLE = frozenset({"npy", "parquet"})
#: Formats whose metadata the client reads without loading the file (CSV would be parsed whole).
_DISTRIBUTABLE = frozenset({"npy", "npz", "parquet", "arrow"})
_PARQUET_SUFFIXES = (".parquet", ".pq")
#: Names a folder's reader passes over (Hive's and Spark's convention).
_HIDDEN = ("_", ".")


@dataclass(frozen=True)
class Dataset:
    """All files of DATA (or of IDS), in order, and what they add up to."""

    pattern: str
    files: tuple[FileRef, ...]
    label: str
    fmt: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class Partition:
    """Rows ``[start, stop)`` of one DATA/IDS file pair; ``row_offset`` is ``start`` globally."""

    index: int
    data: FileRef
    ids: FileRef
    start: int
    stop: int
    row_offset: int

    @property
    def rows(self) -> int:
        return self.stop - self.start

    def describe(self) -> str:
        return f"partition {self.index} ({self.ids.label} rows {self.start}-{self.stop})"


@dataclass(frozen=True)
class Plan:
    """A distributed run's inputs and partitions, and the map from global to file positions."""

    data: Dataset
    ids: Dataset
    partitions: tuple[Partition, ...]

    @property
    def ids_per_row(self) -> int:
        return int(np.prod(self.ids.shape[1:], dtype=np.int64))

    def locate(self, flat_position: int) -> tuple[FileRef, int]:
        """The IDS file holding global flat position ``flat_position`` and the position in it."""
        per_row = max(self.ids_per_row, 1)
        starts = _row_starts(self.ids.files)
        row = flat_position // per_row
        index = max(bisect.bisect_right(starts, row) - 1, 0)
        return self.ids.files[index], flat_position - starts[index] * per_row


def _row_starts(files: tuple[FileRef, ...]) -> list[int]:
    starts, total = [], 0
    for ref in files:
        starts.append(total)
        total += ref.rows
    return starts


# ---------------------------------------------------------------------------------------------
# Finding the files


def natural_key(path: str) -> tuple[list[Any], str]:
    """Sort key that orders ``data-9`` before ``data-10``; names whose numbers are equal
    (``part-2``, ``part-02``) by their text, not by the order the directory lists them in."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)], path


def expand(pattern: str) -> list[str]:
    """The files an input names: itself, a glob's matches, or a directory's Parquet files.

    A file that exists is that file, even where its name holds ``*``, ``?`` or ``[`` (which
    as a glob would match other names, or none)."""
    if pattern == "-":
        raise UsageError("--engine dask reads files; stdin ('-') cannot be distributed")
    if os.path.isfile(pattern):
        return [pattern]
    if glob.has_magic(pattern):
        matches = [
            path
            for path in glob.glob(pattern, recursive=True)
            if os.path.isfile(path) and not _in_hidden_folder(path, pattern)
        ]
        if not matches:
            raise ReadError(f"{pattern}: no files match")
        return sorted(matches, key=natural_key)
    if os.path.isdir(pattern):
        found = []
        for root, dirs, names in os.walk(pattern):
            # Spark and friends leave _SUCCESS, _metadata and .crc files next to the data, and
            # the attempts of unfinished writes in _temporary/ (hidden, as Parquet readers
            # take them: a folder's file or subfolder whose name starts with _ or .).
            dirs[:] = [name for name in dirs if not name.startswith(_HIDDEN)]
            found += [
                os.path.join(root, name)
                for name in names
                if name.lower().endswith(_PARQUET_SUFFIXES) and not name.startswith(_HIDDEN)
            ]
        if not found:
            raise ReadError(
                f"{pattern}: the directory holds no .parquet files (for other formats use a "
                f"glob such as '{os.path.join(pattern, '*.npy')}')"
            )
        return sorted(found, key=natural_key)
    return [pattern]


def _in_hidden_folder(path: str, pattern: str) -> bool:
    """Whether a glob's match lies in a folder whose name starts with ``_`` that the pattern
    does not name (``out/**/*.parquet`` reaching ``out/_temporary/0/``): as a folder read
    leaves it out, so does a glob, or an unfinished write's attempts would be read twice.
    (The glob itself passes over names that start with ``.``.)"""
    named = [part for part in pattern.split(os.sep) if part.startswith("_")]  # "_old", "_t*"
    folders = path.split(os.sep)[:-1]
    return any(
        part.startswith("_") and not any(fnmatch.fnmatchcase(part, name) for name in named)
        for part in folders
    )


def shard_paths(pattern: str | None) -> list[str]:
    """The files a folder or glob names, or none (no such input yet, or nothing matches: the
    run reports that in its turn); a plain file is left to the caller."""
    if pattern is None or pattern == "-" or os.path.isfile(pattern):
        return []
    try:
        return expand(pattern)
    except SegcliError:
        return []


# ---------------------------------------------------------------------------------------------
# Reading metadata


def open_file(path: str, *, column: str | None, key: str | None, role: str) -> FileRef:
    """Read one file's metadata (shape, dtype, row groups) without reading its rows."""
    fmt = input_format(path)
    if fmt not in _DISTRIBUTABLE:
        raise UsageError(
            f"{path}: --engine dask reads .npy, .npz, Parquet and Arrow files, not {fmt} "
            "(convert it, or drop --engine dask)"
        )
    ref = rows.open_file(path, column=column, key=key, role=role)
    # Workers resolve a relative path against their own working directory: send an absolute
    # one. Labels and errors keep the path as typed.
    absolute = os.path.abspath(path)
    return ref if absolute == path else replace(ref, path=absolute, typed_path=path)


def open_dataset(
    pattern: str, *, column: str | None, key: str | None, role: str, paths: list[str] | None = None
) -> Dataset:
    """Every file of one input, checked to share an inner shape and a dtype."""
    files = tuple(
        open_file(path, column=column, key=key, role=role) for path in paths or expand(pattern)
    )
    first = files[0]
    for ref in files[1:]:
        if ref.shape[1:] != first.shape[1:] or not _dtypes_agree(ref.dtype, first.dtype, role):
            raise InvalidInputError(
                f"{ref.label}: rows of shape {list(ref.shape[1:])} and dtype {ref.dtype} differ "
                f"from {first.label} ({list(first.shape[1:])}, {first.dtype}); all files of "
                f"{pattern} must agree"
            )
    fmts = {ref.fmt for ref in files}
    label = first.label
    if len(files) > 1:
        label = f"{_suffix_label(pattern, first)} ({len(files)} files)"
    shape = (sum(ref.rows for ref in files), *first.shape[1:])
    return Dataset(
        pattern, files, label, fmts.pop() if len(fmts) == 1 else "mixed", shape, _widest(files)
    )


def _dtypes_agree(dtype: np.dtype[Any], first: np.dtype[Any], role: str) -> bool:
    """Data shards share one dtype (it decides the result's). Ids are compared by value, so
    their shards may mix integer widths: writers type each file's column on their own
    (int32 in one Parquet file, int64 in the next)."""
    if role == "ids":
        return (dtype.kind in "iu" and first.kind in "iu") or dtype == first
    return dtype == first


def _widest(files: tuple[FileRef, ...]) -> np.dtype[Any]:
    """The dtype the files share, or (ids of mixed integer widths) the widest of them, which
    the summary shows; every partition keeps its own file's dtype."""
    return max((ref.dtype for ref in files), key=lambda dtype: dtype.itemsize)


def _suffix_label(pattern: str, first: FileRef) -> str:
    """``data/*.parquet:value``: the pattern plus the column or key every file was read with."""
    pick = first.column or first.key
    return f"{pattern}:{pick}" if pick else pattern


def check_pairs(data: Dataset, ids: Dataset) -> None:
    """DATA and IDS shards pair up one to one, with the same rows in each pair."""
    if len(data.files) != len(ids.files):
        shorter = min(len(data.files), len(ids.files))
        unpaired = (data.files if len(data.files) > shorter else ids.files)[shorter]
        raise InvalidInputError(
            f"{data.pattern} matches {len(data.files)} files but {ids.pattern} matches "
            f"{len(ids.files)}: DATA and IDS shards must pair up (first unpaired: "
            f"{unpaired.shown_path})"
        )
    if data.shape[0] != ids.shape[0]:
        return  # not a shape prefix: the check every engine makes names both shapes, next
    for number, (d, i) in enumerate(zip(data.files, ids.files, strict=True)):
        if d.rows != i.rows:
            raise InvalidInputError(
                f"{d.label} and {i.label} do not pair up: {d.rows:,} rows vs {i.rows:,} rows "
                f"(pair {number + 1} of {len(data.files)})"
            )


# ---------------------------------------------------------------------------------------------
# Partitions


def plan_partitions(
    data: Dataset,
    ids: Dataset,
    *,
    rows_per_partition: int | None,
    partition_bytes: int = DEFAULT_PARTITION_BYTES,
) -> tuple[Partition, ...]:
    """Split every file pair into partitions; every pair gets at least one (maybe empty)."""
    row_bytes = max(1, _row_bytes(data) + _row_bytes(ids))
    partitions: list[Partition] = []
    offset = 0
    for d, i in zip(data.files, ids.files, strict=True):
        for start, stop in _ranges(d, i, rows_per_partition, partition_bytes, row_bytes):
            partitions.append(Partition(len(partitions), d, i, start, stop, offset + start))
        offset += d.rows
    return tuple(partitions)


def _row_bytes(dataset: Dataset) -> int:
    return int(np.prod(dataset.shape[1:], dtype=np.int64)) * dataset.dtype.itemsize


def _ranges(
    data: FileRef,
    ids: FileRef,
    rows_per_partition: int | None,
    partition_bytes: int,
    row_bytes: int,
) -> list[tuple[int, int]]:
    rows = data.rows
    if rows == 0 or data.fmt not in _SPLITTABLE or ids.fmt not in _SPLITTABLE:
        return [(0, rows)]
    if rows_per_partition is None and data.fmt == "parquet":
        return _row_group_runs(data.row_groups, max(1, partition_bytes // row_bytes))
    step = rows_per_partition or max(1, partition_bytes // row_bytes)
    return [(start, min(start + step, rows)) for start in range(0, rows, step)]


def _row_group_runs(groups: tuple[int, ...], target_rows: int) -> list[tuple[int, int]]:
    """Consecutive row groups joined until a run holds ``target_rows`` (one group at least)."""
    runs: list[tuple[int, int]] = []
    start = stop = 0
    for size in groups:
        stop += size
        if stop - start >= target_rows:
            runs.append((start, stop))
            start = stop
    if stop > start or not runs:
        runs.append((start, stop))
    return runs
