"""The holistic ops (median, quantile, nunique) inside a run: what the drivers hand to
:mod:`segcli.holistic`.

No engine folds a holistic op (:attr:`segcli.ops.Op.holistic`). A run folds, with its engine,
only what merges: the row counts (every run reports them), or in ``agg`` the list's other ops;
the same rows, read once, go to :mod:`segcli.holistic` beside the fold:

- in memory, after validation, to :func:`~segcli.holistic.reduce_holistic` (one segmented sort);
- over a ``--sorted`` stream, block by block, to a
  :class:`~segcli.holistic.SortedHolisticReducer` per op (memory: a block plus the largest
  segment);
- over an unsorted stream, to partition files in a temporary directory (:class:`Partitions`):
  the rows of segment ``k`` go to the partition a multiplicative hash of ``k`` picks, each
  partition small enough to finish in memory afterwards. A hash, not ranges of ids: it needs
  no ``n`` up front (an inferred ``n`` is known only at the end), and it spreads a run of busy
  neighbouring segments over every partition. Nor plain residues ``k % parts``: ids with a
  stride (multiples of 1024, say) would all land in one partition, which then holds the whole
  input. The directory goes when the run ends, however it ends.

Each path gives the bytes of the in-memory one: a segment's answer depends only on its values.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from segcli import ops
from segcli.errors import UsageError, WriteError
from segcli.holistic import SortedHolisticReducer, check_holistic, reduce_holistic
from segcli.op_names import Q_OPS
from segcli.signals import held

#: At most this many partitions (two open files each, while the rows are dealt out), and no
#: more than the open-file limit leaves room for.
MAX_PARTITIONS = 1024
#: Bytes of partition file per partition, as a share of the memory budget: finishing one takes
#: about four times its bytes (the values, int64 ids, the packed sort keys and the picks).
PARTITION_SHARE = 8
#: Bytes a holistic op holds at its peak per byte of the values it sorts (the four above).
WHOLE_SORT_BYTES_PER_BYTE = 4
#: The memory-limit the partitions assume when the run names none.
_DEFAULT_PARTITION_BYTES = 32 * 1024 * 1024


def is_holistic(name: str | ops.Op) -> bool:
    return ops.get_op(name).holistic


def check_q(names: Sequence[str], q: float | None) -> float | None:
    """``--q``: needed by quantile, refused where no op of ``names`` uses it; in [0, 1]."""
    if "quantile" not in names:
        if q is not None:
            raise UsageError(f"--q applies to quantile only, not {', '.join(names)}")
        return None
    if q is None:
        raise UsageError("quantile needs --q Q (a number from 0 to 1)")
    return check_holistic("quantile", np.dtype(np.float64), q)


def result_name(name: str, q: float | None) -> str:
    """An op's result column in ``agg``: its name, but ``q0.9`` for quantile."""
    # + 0.0: --q -0 is the quantile 0, named q0.0 (not q-0.0)
    return f"q{float(q) + 0.0!r}" if name in Q_OPS and q is not None else name


@dataclass(frozen=True)
class HolisticJob:
    """The holistic ops of a run and their options, checked for the data's dtype."""

    chosen: tuple[ops.Op, ...]
    q: float | None = None
    skipna: bool = False
    #: Each op's ``--fill`` parsed in its result dtype (None: 0).
    fills: tuple[Any, ...] = ()

    @classmethod
    def of(
        cls,
        names: Sequence[str],
        data_dtype: np.dtype[Any],
        *,
        q: float | None,
        skipna: bool,
        fill: Any,
        label: str,
    ) -> HolisticJob:
        """The job for the holistic ops among ``names``; a dtype an op refuses and a ``fill``
        its result cannot hold are errors naming the op, before any row is read."""
        chosen = tuple(ops.get_op(name) for name in names if is_holistic(name))
        for op in chosen:
            ops.check_data_dtype(op, np.dtype(data_dtype), label)
        fills = tuple(
            None if fill is None else ops.parse_fill(fill, op, data_dtype) for op in chosen
        )
        return cls(chosen, q, skipna, fills)

    def reduce(self, values: np.ndarray, ids: np.ndarray, num_segments: int) -> list[np.ndarray]:
        """Each op over validated rows (ids in ``[0, num_segments)``): ``(n, width)`` each."""
        return [
            reduce_holistic(op.name, values, ids, num_segments, **self._options(op, k))
            for k, op in enumerate(self.chosen)
        ]

    def reduce_arrays(
        self, data: np.ndarray, ids: np.ndarray, num_segments: int
    ) -> list[np.ndarray]:
        """Each op over validated arrays (``data`` of shape ``ids.shape + inner``): each
        result ``(num_segments,) + inner``."""
        inner = data.shape[ids.ndim :]
        values, kept = kept_rows(
            data.reshape(ids.size, ops.inner_size(inner)), ids.reshape(-1), num_segments
        )
        return [r.reshape((num_segments, *inner)) for r in self.reduce(values, kept, num_segments)]

    def _options(self, op: ops.Op, k: int) -> dict[str, Any]:
        return {
            "q": self.q if op.name in Q_OPS else None,
            "skipna": self.skipna,
            "fill": self.fills[k],
        }

    def sorted_reducers(
        self, num_segments: int | None, width: int, dtype: np.dtype[Any]
    ) -> list[SortedHolisticReducer]:
        return [
            SortedHolisticReducer(op.name, num_segments, width, dtype, **self._options(op, k))
            for k, op in enumerate(self.chosen)
        ]


def kept_rows(
    values: np.ndarray, ids: np.ndarray, num_segments: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The rows a validated run keeps: negative ids and (sorted family) ids >= n dropped, and
    under ``--skipna`` rows whose values are all null (a masked array: integer and bool
    columns; float nulls arrive as NaN, which the sort leaves out itself). Rows with some
    values null stay masked there, and the sort leaves those values out one by one."""
    keep = ids >= 0
    if num_segments is not None:
        keep &= ids < num_segments
    mask = np.ma.getmask(values)
    if mask is not np.ma.nomask:
        row_mask = mask.reshape(len(ids), -1)
        keep &= ~row_mask.all(axis=1)
        if not (row_mask.any(axis=1) & keep).any():  # no row left with a null: plain values
            values = np.ma.getdata(values)
    if keep.all():
        return values, ids
    return values[keep], ids[keep]


class SortedRows:
    """Blocks of a ``--sorted`` stream, segment by segment, to one reducer per op."""

    def __init__(
        self, job: HolisticJob, num_segments: int | None, width: int, dtype: np.dtype[Any]
    ) -> None:
        self._n = num_segments
        self._reducers = job.sorted_reducers(num_segments, width, dtype)

    def push(self, values: np.ndarray, ids: np.ndarray) -> None:
        values, ids = kept_rows(values, ids, self._n)
        for reducer in self._reducers:
            reducer.push(values, ids)

    def finish(self, num_segments: int) -> list[np.ndarray]:
        return [reducer.finish(num_segments) for reducer in self._reducers]


#: Knuth's multiplicative hash constant (2**64 / the golden ratio): its product with an id
#: mixes every bit of the id into the high bits, whatever stride the ids have.
_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)


def partition_of(ids: np.ndarray, parts: int) -> np.ndarray:
    """The partition of each (non-negative) id: the fraction ``id / golden ratio mod 1`` (the
    top 32 bits of the wrapping product with :data:`_FIBONACCI`) scaled to ``[0, parts)``.
    Those fractions of consecutive ids, or of ids with any stride, spread about evenly over
    [0, 1) (Fibonacci hashing): 1,000 dense ids fall 5 or 6 to each of 188 partitions (1 to 8
    with the same bits taken modulo ``parts``), and a partition's size decides the peak."""
    part = ids.astype(np.uint64)  # in place from here: one array of a block's length
    part *= _FIBONACCI
    part >>= np.uint64(32)
    part *= np.uint64(parts)
    part >>= np.uint64(32)
    return part.view(np.int64)


def partition_count(rows: int, row_bytes: int, memory_limit: int | None) -> int:
    """How many partitions make each small enough to finish within the memory budget (an
    input of unknown length, a stream, gets the most)."""
    most = _most_partitions()
    if rows < 0:
        return most
    share = (memory_limit or _DEFAULT_PARTITION_BYTES) // PARTITION_SHARE
    wanted = math.ceil(rows * row_bytes / max(share, 1))
    return max(1, min(most, wanted))


def _most_partitions() -> int:
    """:data:`MAX_PARTITIONS`, or fewer when the open-file limit is low (64 left for the rest)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 64
    if soft == resource.RLIM_INFINITY:
        return MAX_PARTITIONS
    return max(1, min(MAX_PARTITIONS, (soft - 64) // 2))


class Partitions:
    """Rows of an unsorted stream dealt to partition files by segment (:func:`partition_of`),
    then each partition finished in memory. A context manager: the directory is removed on exit,
    after success, an error or a signal."""

    def __init__(
        self,
        job: HolisticJob,
        parts: int,
        width: int,
        dtype: np.dtype[Any],
        *,
        tmp_dir: str | None,
        num_segments: int | None,
    ) -> None:
        self._job, self._parts, self._width = job, parts, width
        self._dtype = np.dtype(dtype)
        self._n = num_segments
        self._tmp_dir = tmp_dir
        self.directory: str | None = None
        #: The open files of each partition that has rows (values, ids), by partition.
        self._files: dict[int, tuple[IO[bytes], IO[bytes]]] = {}
        # A row of values and their nulls, when nulls may stay inside rows (--skipna over an
        # integer or bool list column): each partition file keeps the mask beside its values.
        self._record = (
            np.dtype([("values", self._dtype, (width,)), ("missing", bool, (width,))])
            if job.skipna and self._dtype.kind in "iub"
            else None
        )

    def __enter__(self) -> Partitions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close and remove every partition file (a signal waits until they are gone)."""
        with held():
            self._close_files()
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
                self.directory = None

    def _close_files(self) -> None:
        for files in self._files.values():
            for handle in files:
                with contextlib.suppress(OSError):
                    handle.close()
        self._files = {}

    def _flush_files(self) -> None:
        """Close every partition file, its last buffered bytes written, before it is read."""
        try:
            for files in self._files.values():
                for handle in files:
                    handle.close()
        except OSError as exc:
            raise self._write_error(exc) from None
        self._files = {}

    def _paths(self, part: int) -> tuple[str, str]:
        assert self.directory is not None
        base = os.path.join(self.directory, f"part{part:04d}")
        return base + ".values", base + ".ids"

    def _open(self, part: int) -> tuple[IO[bytes], IO[bytes]]:
        """The files of ``part``, made with its first row: a run that keeps no row touches no
        disk, and a small stream (whose length is not known, so it gets the most partitions)
        makes only the files its segments reach, not two for each of 1,024 partitions."""
        try:
            if self.directory is None:
                self.directory = tempfile.mkdtemp(prefix="segcli-partitions-", dir=self._tmp_dir)
            values_path, ids_path = self._paths(part)
            # Kept open until _flush_files or _close_files; both files or neither.
            values_file = open(values_path, "wb")  # noqa: SIM115
            try:
                ids_file = open(ids_path, "wb")  # noqa: SIM115
            except OSError:
                values_file.close()
                raise
            self._files[part] = (values_file, ids_file)
        except OSError as exc:
            raise self._write_error(exc, "create") from None
        return self._files[part]

    def push(self, values: np.ndarray, ids: np.ndarray) -> None:
        """Append a validated block's kept rows to their partitions."""
        values, ids = kept_rows(values, ids, self._n)
        if not len(ids):
            return
        ids = ids.astype(np.int64, copy=False)
        part = partition_of(ids, self._parts)
        # One stable sort by partition (a radix sort on narrow integers), then a slice each.
        order = np.argsort(part.astype(np.uint16), kind="stable")  # parts <= MAX_PARTITIONS
        bounds = np.searchsorted(part[order], np.arange(self._parts + 1))
        values, ids = values[order], ids[order]
        for k in np.flatnonzero(np.diff(bounds)):
            start, stop = bounds[k], bounds[k + 1]
            self._write(int(k), values[start:stop], ids[start:stop])

    def _write(self, part: int, values: np.ndarray, ids: np.ndarray) -> None:
        values_file, ids_file = self._files.get(part) or self._open(part)
        if self._record is not None:
            rows = np.empty(len(ids), self._record)
            rows["values"] = np.ma.getdata(values)
            rows["missing"] = np.ma.getmaskarray(values)
            values = rows
        try:
            values_file.write(np.ascontiguousarray(values).data)
            ids_file.write(np.ascontiguousarray(ids).data)
        except OSError as exc:
            raise self._write_error(exc) from None

    def _write_error(self, exc: OSError, verb: str = "write") -> WriteError:
        # Exit 5: the run cannot finish, so its output is not written (disk full, say).
        return WriteError(
            f"--tmp-dir {self._tmp_dir or tempfile.gettempdir()}: cannot {verb} partition "
            f"files ({exc.strerror or exc})"
        )

    def finish(self, num_segments: int) -> list[np.ndarray]:
        """Each op's ``(num_segments, width)`` result, one partition at a time."""
        # Every segment starts as empty (the fill); partitions overwrite theirs.
        results = self._job.reduce(
            np.empty((0, self._width), self._dtype), np.empty(0, np.int64), num_segments
        )
        parts_with_rows = sorted(self._files)
        self._flush_files()
        if not parts_with_rows:
            return results
        numbering = _LocalNumbering(num_segments)
        for part in parts_with_rows:
            values_path, ids_path = self._paths(part)
            ids = np.fromfile(ids_path, np.int64)
            values = self._read_values(values_path, len(ids))
            os.remove(values_path)
            os.remove(ids_path)
            if not len(ids):
                continue
            # A partition holds scattered segments: reduce them numbered 0, 1, ... in id order,
            # then put each result at its segment.
            segments, local_ids = numbering.of(ids)
            del ids
            for result, got in zip(
                results, self._job.reduce(values, local_ids, len(segments)), strict=True
            ):
                result[segments] = got
        return results

    def _read_values(self, path: str, rows: int) -> np.ndarray:
        """The partition's ``rows`` rows of values (their count from its ids: rows of no
        values, an inner size of 0, leave a file of no bytes)."""
        if self._width == 0:
            return np.zeros((rows, 0), self._dtype)
        if self._record is None:
            return np.fromfile(path, self._dtype).reshape(rows, self._width)
        records = np.fromfile(path, self._record)
        return np.ma.MaskedArray(records["values"], records["missing"])


class _LocalNumbering:
    """The segments a partition holds, and each row's segment numbered among them from 0 in
    id order. Two arrays of ``num_segments`` made once and reused by every partition: the
    ``np.unique`` that gives the same numbers sorts a copy of the partition's ids and keeps
    three more arrays of its length (a 4 GB input's median peaked 185 MiB higher with it)."""

    def __init__(self, num_segments: int) -> None:
        self._present = np.zeros(num_segments, bool)
        self._number = np.empty(num_segments, np.int64)

    def of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._present[ids] = True
        segments = np.flatnonzero(self._present)
        self._present[segments] = False  # clean for the next partition
        self._number[segments] = np.arange(len(segments))
        return segments, self._number[ids]
