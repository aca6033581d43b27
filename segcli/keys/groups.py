"""Several key columns' codes combined into one dense group id."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from segcli.io import arrow_kernels as kernels
from segcli.io.columns import numpy_of
from segcli.keys.values import ABSENT, MISSING, UNKNOWN, ValueIndex

# --- combining several columns' codes into one id ----------------------------------------------


def fixed_binary_rows(codes: Sequence[np.ndarray]) -> pa.Array:
    """Each row's code tuple as one fixed-size binary value (hashable by pyarrow)."""
    matrix = np.ascontiguousarray(np.stack(codes, axis=1), dtype=np.int64)
    width = 8 * len(codes)
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(matrix), [None, pa.py_buffer(matrix)]
    )


def rows_codes(values: pa.Array, columns: int) -> np.ndarray:
    """The inverse of :func:`fixed_binary_rows`: a (rows, columns) int64 matrix."""
    buffer = values.buffers()[1]
    assert buffer is not None
    width = 8 * columns
    raw = np.frombuffer(buffer, np.uint8)[
        values.offset * width : (values.offset + len(values)) * width
    ]
    return raw.view(np.int64).reshape(len(values), columns)


class Groups:
    """Dense, stable group ids for tuples of per-column codes: a group keeps its id, and the
    new groups of a block are numbered after the existing ones.

    Tuples index a dense table (mixed radix, each column's radix a power of two) while the
    product of the radixes stays within ``dense_limit``; beyond it they are hashed as
    fixed-size binary values."""

    def __init__(self, columns: int, dense_limit: int) -> None:
        self.codes: list[np.ndarray] = [np.empty(0, np.int64) for _ in range(columns)]
        self.dense_limit = dense_limit
        self.caps = [1] * columns
        self.table: np.ndarray | None = self._empty_table(1)
        self.hashed: ValueIndex | None = None

    def __len__(self) -> int:
        return len(self.codes[0])

    def ids(self, codes: list[np.ndarray], sizes: list[int], *, add: bool) -> np.ndarray:
        """Group ids for rows of codes (< sizes); MISSING where a code is negative; for a new
        combination a new id when ``add``, else UNKNOWN."""
        self._fit(sizes)
        valid = codes[0] >= 0
        for column in codes[1:]:
            valid &= column >= 0
        if self.table is not None:
            return self._dense_ids(codes, valid, add)
        return self._hashed_ids(codes, valid, add)

    def seed(self, codes: list[np.ndarray], sizes: list[int]) -> None:
        """Make row ``i`` of these codes group ``i`` (the keys table; no duplicates)."""
        self._fit(sizes)
        self._append(codes)
        if self.table is not None:
            self.table[self._composite(codes)] = np.arange(len(self), dtype=np.int64)
        else:
            self.hashed = ValueIndex(pa.binary(8 * len(codes)))
            self.hashed.find_or_add(fixed_binary_rows(codes))

    def _fit(self, sizes: list[int]) -> None:
        if all(size <= cap for size, cap in zip(sizes, self.caps, strict=True)):
            return
        self.caps = [
            max(cap, 1 << max(size - 1, 0).bit_length())
            for size, cap in zip(sizes, self.caps, strict=True)
        ]
        if self.table is not None and int(np.prod(self.caps, dtype=object)) <= self.dense_limit:
            self.table = self._empty_table(int(np.prod(self.caps)))
            self.table[self._composite(self.codes)] = np.arange(len(self), dtype=np.int64)
        elif self.table is not None:
            self.table = None
            self.hashed = ValueIndex(pa.binary(8 * len(self.codes)))
            self.hashed.find_or_add(fixed_binary_rows(self.codes))

    def _composite(self, codes: Sequence[np.ndarray]) -> np.ndarray:
        composite = codes[0].astype(np.int64, copy=True)
        for cap, column in zip(self.caps[1:], codes[1:], strict=True):
            composite *= cap
            composite += column
        return composite

    def _dense_ids(self, codes: list[np.ndarray], valid: np.ndarray, add: bool) -> np.ndarray:
        table = self.table
        assert table is not None
        composite = self._composite(codes)
        if not valid.all():
            composite[~valid] = len(table) - 1  # the slot that holds MISSING
        ids: np.ndarray = table[composite]
        new = ids == ABSENT
        if not new.any():
            return ids
        if not add:
            ids[new] = UNKNOWN
            return ids
        if len(composite) * 8 > len(table):
            # Many rows (a first block): one scatter beats sorting the new rows.
            seen = np.zeros(len(table), bool)
            seen[composite] = True
            distinct = np.flatnonzero(seen & (table == ABSENT))
            table[distinct] = np.arange(len(self), len(self) + len(distinct))
            ids = table[composite]
        else:
            fresh = composite[new]
            distinct = np.unique(fresh)
            table[distinct] = np.arange(len(self), len(self) + len(distinct))
            ids[new] = table[fresh]
        self._append(self._decompose(distinct))
        return ids

    def _empty_table(self, size: int) -> np.ndarray:
        table = np.full(size + 1, ABSENT, np.int64)
        table[size] = MISSING  # the slot of rows with a missing key
        return table

    def _decompose(self, composite: np.ndarray) -> list[np.ndarray]:
        parts = []
        rest = composite.copy()
        for cap in reversed(self.caps[1:]):
            parts.append(rest % cap)
            rest //= cap
        parts.append(rest)
        return parts[::-1]

    def _hashed_ids(self, codes: list[np.ndarray], valid: np.ndarray, add: bool) -> np.ndarray:
        assert self.hashed is not None
        ids = np.full(len(valid), MISSING, np.int64)
        all_valid = bool(valid.all())
        rows = fixed_binary_rows(codes if all_valid else [c[valid] for c in codes])
        slots: np.ndarray | None = None
        if self.hashed.hashed is None:
            encoded = kernels.dictionary_encode(rows)
            rows, slots = encoded.dictionary, numpy_of(encoded.indices)
        # else the compiled table kept across blocks: one hash a row, no dictionary first.
        before = len(self.hashed)
        if add:
            entries = self.hashed.find_or_add(rows, distinct=slots is not None)
            if len(self.hashed) > before:
                added = rows_codes(self.hashed.values.slice(before), len(codes))
                self._append([added[:, j] for j in range(len(codes))])
        else:
            entries = self.hashed.find(rows)
            entries[entries < 0] = UNKNOWN
        block_ids: np.ndarray = entries if slots is None else entries[slots]
        if all_valid:
            return block_ids
        ids[valid] = block_ids
        return ids

    def _append(self, codes: Sequence[np.ndarray]) -> None:
        self.codes = [
            np.concatenate([old, new]) for old, new in zip(self.codes, codes, strict=True)
        ]
