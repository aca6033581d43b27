"""A run's distinct values in a compiled hash table kept across blocks.

pyarrow keeps no hash table between calls: :class:`~segcli.keys.values.ValueIndex` looking a
block up with ``index_in`` hashes the run's whole dictionary (or the block's values) again for
every block, and appending copies the dictionary. With a million distinct keys that was most of
the encoder's time. :class:`HashedValues` keeps the table (:mod:`segcli.engines.numba_hash`)
and the values' bytes in growing NumPy buffers: each block costs one hash per value looked up,
and the values stay readable as an Arrow array without a copy.

Equality is ``index_in``'s: strings and binaries byte for byte, fixed-width values by their
bit patterns, floats too (``-0.0`` is not ``0.0``, and NaNs meet only NaNs of the same bits;
the encoder turns NaN into null and ``-0.0`` into ``0.0`` before it looks a value up).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.types as pt

from segcli.errors import InvalidInputError
from segcli.io import arrow_kernels as kernels
from segcli.io.columns import numpy_of

_FIRST_SLOTS = 1 << 12


def reads_bytes(type_: pa.DataType) -> bool:
    """Whether the table reads values of this type as they are (strings and binaries of
    either offset width)."""
    return _is_bytes(type_)


def _is_bytes(type_: pa.DataType) -> bool:
    return bool(
        pt.is_string(type_)
        or pt.is_large_string(type_)
        or pt.is_binary(type_)
        or pt.is_large_binary(type_)
    )


def _word_count(type_: pa.DataType) -> int:
    """How many 64-bit words a value of this fixed-width type is (0: not one the table takes)."""
    if pt.is_fixed_size_binary(type_) and not pt.is_decimal(type_):
        return type_.byte_width // 8 if type_.byte_width % 8 == 0 and type_.byte_width else 0
    if pt.is_integer(type_) or pt.is_floating(type_) or pt.is_temporal(type_):
        return 1 if type_.bit_width == 64 else 0
    return 0


def supports(type_: pa.DataType) -> bool:
    """Whether :class:`HashedValues` takes values of this (lookup) type."""
    return _is_bytes(type_) or _word_count(type_) > 0


class HashedValues:
    """Distinct values of one lookup type, numbered in the order they were added."""

    def __init__(self, type_: pa.DataType) -> None:
        self.type = type_
        self.count = 0
        self.null_at = -1
        self._table = np.zeros(_FIRST_SLOTS, np.uint64)  # entries: see numba_hash
        self._words = 0 if _is_bytes(type_) else _word_count(type_)
        self._stored: np.ndarray
        if self._words:
            self._stored = np.empty((_FIRST_SLOTS // 2, self._words), np.uint64)
        else:
            self._stored = np.empty(_FIRST_SLOTS * 8, np.uint8)
            self._offsets = np.zeros(_FIRST_SLOTS // 2 + 1, np.int64)

    @classmethod
    def of(cls, values: pa.Array) -> HashedValues:
        """A table holding ``values`` (distinct, in order; at most one null) at their
        positions."""
        table = cls(values.type)
        null = values.null_count > 0
        if null:
            null_at = int(np.flatnonzero(numpy_of(kernels.is_null(values)))[0])
            table.lookup(values.slice(0, null_at), add=True)
            table.append_null()
            table.lookup(values.slice(null_at + 1), add=True)
        else:
            table.lookup(values, add=True)
        return table

    def __len__(self) -> int:
        return self.count

    def lookup(self, values: pa.Array, *, add: bool) -> np.ndarray:
        """Each value's position; -1 where null or (not ``add``) absent; new values added."""
        if values.null_count == len(values):  # such an array may lack its value buffers
            return np.full(len(values), -1, np.int64)
        positions = np.empty(len(values), np.int64)
        hashes = np.empty(len(values), np.uint64)
        valid = numpy_of(values.is_valid()) if values.null_count else np.empty(0, np.bool_)
        kernels = _kernels()
        # The hashes first: the lookup then knows the entries of rows ahead, to prefetch them.
        if self._words:
            words = _words_of(values, self._words)
            kernels.hash_words(words, valid, 0, hashes)
            row = 0
            while row < len(values):
                row, self.count = kernels.find_words(
                    words, valid, hashes, row, positions, self._table, self._stored,
                    self.count, add,
                )  # fmt: skip
                if row < len(values):
                    self._make_room(0)
            return positions
        offsets, data = _bytes_of(values)
        kernels.hash_bytes(offsets, data, valid, 0, hashes)
        row = 0
        while row < len(values):
            row, self.count = kernels.find_bytes(
                offsets, data, valid, hashes, row, positions, self._table, self._offsets,
                self._stored, self.count, add,
            )  # fmt: skip
            if row < len(values):
                self._make_room(int(offsets[row + 1] - offsets[row]))
        return positions

    def append_null(self) -> int:
        """A null value at the next position (never found by a lookup)."""
        self._make_room(0, value=False)
        if self._words:
            self._stored[self.count] = 0
        else:
            self._offsets[self.count + 1] = self._offsets[self.count]
        self.null_at = self.count
        self.count += 1
        return self.null_at

    @property
    def values(self) -> pa.Array:
        """The distinct values as an Arrow array (a view of the stored bytes, not a copy)."""
        validity = None
        if self.null_at >= 0:
            valid = np.ones(self.count, np.bool_)
            valid[self.null_at] = False
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        nulls = 1 if self.null_at >= 0 else 0
        if self._words:
            data = pa.py_buffer(self._stored[: self.count])
            return pa.Array.from_buffers(self.type, self.count, [validity, data], nulls)
        offsets = self._offsets[: self.count + 1]
        used = int(offsets[-1])
        if pt.is_large_string(self.type) or pt.is_large_binary(self.type):
            buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(self._stored[:used])]
        else:
            narrow = offsets.astype(np.int32)
            buffers = [validity, pa.py_buffer(narrow), pa.py_buffer(self._stored[:used])]
        return pa.Array.from_buffers(self.type, self.count, buffers, nulls)

    # --- growth ---

    def _make_room(self, length: int, *, value: bool = True) -> None:
        """Room for one more value of ``length`` bytes: a larger table once it is half full
        (``value``: the value goes into it), larger stores once they are full."""
        if value and self.count >= len(self._table) // 2:
            kernels = _kernels()
            if self.count >= kernels.MAX_VALUES:
                raise InvalidInputError(
                    f"more than {kernels.MAX_VALUES:,} distinct values in one key column"
                )
            size = 2 * len(self._table)
            del self._table  # the values are hashed again, not read from the old entries
            larger = np.zeros(size, np.uint64)
            if self._words:
                kernels.rehash_words(self._stored, self.count, self.null_at, larger)
            else:
                kernels.rehash_bytes(self._offsets, self._stored, self.count, self.null_at, larger)
            self._table = larger
        if self._words:
            if self.count >= len(self._stored):
                self._stored = _grown(self._stored, 2 * len(self._stored))
            return
        if self.count + 2 > len(self._offsets):
            self._offsets = _grown(self._offsets, 2 * len(self._offsets))
        need = int(self._offsets[self.count]) + length
        if need > len(self._stored):
            self._stored = _grown(self._stored, max(2 * len(self._stored), need))


def _kernels() -> ModuleType:
    """The kernels, loaded on first use (not held by a table: an encoder is copied and
    pickled, modules are not)."""
    from segcli.engines import numba_hash

    numba_hash.install()
    return numba_hash


def _grown(array: np.ndarray, rows: int) -> np.ndarray:
    # A fresh array: Arrow arrays handed out earlier keep viewing the old one.
    grown = np.empty((rows, *array.shape[1:]), array.dtype)
    grown[: len(array)] = array
    return grown


def _bytes_of(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The offsets (of this slice) and the whole data buffer of a string or binary array."""
    _, offsets_buffer, data_buffer = values.buffers()
    wide = pt.is_large_string(values.type) or pt.is_large_binary(values.type)
    assert offsets_buffer is not None
    offsets: Any = np.frombuffer(offsets_buffer, np.int64 if wide else np.int32)
    offsets = offsets[values.offset : values.offset + len(values) + 1]
    if data_buffer is None:  # every value empty or null
        return offsets, np.empty(0, np.uint8)
    return offsets, np.frombuffer(data_buffer, np.uint8)


def _words_of(values: pa.Array, width: int) -> np.ndarray:
    """Each value's bits as a row of ``width`` 64-bit words."""
    buffer = values.buffers()[1]
    assert buffer is not None
    raw = np.frombuffer(buffer, np.uint8)
    start = values.offset * width * 8
    words = raw[start : start + len(values) * width * 8]
    if words.ctypes.data % 8:  # numba reads aligned words only
        words = words.copy()
    return words.view(np.uint64).reshape(len(values), width)
