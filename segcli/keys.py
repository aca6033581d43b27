"""Group-by keys (``--by``): key columns in, dense int64 group ids out, block by block.

A :class:`KeyEncoder` is fed the key columns of a run one block at a time (a pyarrow Table or
RecordBatch; blocks may come from several files whose dictionaries differ). :meth:`encode`
returns one int64 id per row: a group id ``>= 0``, or :data:`MISSING` (``-1``) for a row whose
key is missing (a null or NaN in any key column) when such rows are dropped. The ids feed the
unsorted segment reduction like user ids; rows with id ``-1`` are dropped there.

Ids are dense and stable: a group keeps its id for the whole run, so a streamed reduction's state
only grows, and memory grows with the distinct keys, not the rows. :meth:`finish` returns the key
table in SPEC's order (ascending by key, lexicographic over the key columns, nulls last) and the
permutation ``order`` to apply to the results: ``result_sorted = result[order]`` (a gather; output
row ``r`` is encoder group ``order[r]``). The key table is the same, byte for byte, however the
rows were split into blocks.

How it works, and why it is fast: each column chunk is dictionary encoded by pyarrow (a dictionary
column already is: its codes and dictionary are used as they are), so per row there is one hash
probe in C and a NumPy take; only the chunk's distinct values are looked up in the run's growing
per-column dictionary. Several columns combine through a dense table indexed by the mixed-radix
code tuple while the product of the column cardinalities stays small, and by hashing the code
tuples (as fixed-size binary values) beyond that.

Value rules (each column separately):

- strings (string, large_string, string_view, and dictionaries of them) compare as strings,
  binaries likewise; integers of every width compare by value, so do floats (``-0.0 == 0.0``;
  NaN is a missing key and comes out as null), decimals and temporal types (timestamps compare
  the instants they store, whatever the unit or time zone).
- A later block may have another type of the same kind (``int32`` then ``int64``, ``string``
  then ``dictionary<string>``): its values are cast to the first block's type, and a value that
  does not fit is an error. The key table has the first block's types; a dictionary column keeps
  its dictionary type with the dictionary sorted by value (its index type widened when the
  distinct values outgrow it).
- Types without equality or order (list, struct, map, union, ...) are refused with an
  :class:`~segcli.errors.InvalidInputError` (exit 1, like a non-numeric data column): the command
  line is well formed, it is the data's column that cannot serve as a key.

``keys_from`` (SPEC ``--keys-from``): a table holding the key columns fixes the groups: ids are
its row positions and the key table is exactly its key columns, in its order. Its columns are
cast to the data's types at the first block by a value-preserving cast (so ``int64`` matches
``int32``, a string column matches a ``dictionary<string>`` one, an integer column matches a
float one where exact); a value of another kind (a string key against integer data) is an error.
A row whose key is not in it is an error naming the key and the row (0-based, counted across
every block encoded); a key present twice in it is an error naming both rows. With
``null_keys="drop"`` data rows with a null key are dropped (never matched); with ``"group"`` they
must match a row of ``keys_from`` whose key is null.

This module uses only NumPy and pyarrow; it never imports click or rich.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pt

from segcli.errors import InvalidInputError

NullKeys = Literal["drop", "group"]

MISSING = -1
"""The id of a row whose key is missing and dropped."""

_UNKNOWN = -2  # a per-column code or group id: the value is not among the keys_from keys
_NULL = -3  # a dictionary entry that is null (or NaN): resolved to a null code or MISSING
_ABSENT = -4  # in the dense combination table: no group has this combination yet
_SLICE_ROWS = 1 << 20  # rows encoded at a time
_DENSE_LIMIT = 1 << 22  # the largest dense combination table, in entries (32 MiB)

Block: TypeAlias = pa.Table | pa.RecordBatch


@dataclass(frozen=True)
class KeyTable:
    """The distinct keys of a run in output order, and how to reorder the results to match.

    ``keys``: one column per key column, with its name and type. ``order``: int64, output row
    ``r`` holds the group the encoder numbered ``order[r]``, so ``result_sorted = result[order]``.
    """

    keys: pa.Table
    order: np.ndarray


# --- types -------------------------------------------------------------------------------------


def _value_type(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pt.is_dictionary(type_) else type_


def _kind(type_: pa.DataType) -> str | None:
    """The equality domain of a key type (values of one kind compare by value), or None."""
    t = _value_type(type_)
    checks: list[tuple[str, Any]] = [
        ("string", lambda t: pt.is_string(t) or pt.is_large_string(t) or pt.is_string_view(t)),
        ("binary", lambda t: pt.is_binary(t) or pt.is_large_binary(t) or pt.is_binary_view(t)),
        ("fixed_size_binary", pt.is_fixed_size_binary),
        ("integer", pt.is_integer),
        ("float", pt.is_floating),
        ("boolean", pt.is_boolean),
        ("date", pt.is_date),
        ("time", pt.is_time),
        ("timestamp", pt.is_timestamp),
        ("duration", pt.is_duration),
        ("decimal", pt.is_decimal),
        ("null", pt.is_null),
    ]
    for name, check in checks:
        if check(t):
            return name
    return None


def check_key_type(name: str, type_: pa.DataType) -> None:
    """Refuse, by name and type, a key column whose values cannot be compared."""
    if _kind(type_) is None:
        raise InvalidInputError(
            f"key column '{name}' has type {type_}, which has no equality to group by; "
            "use a column of strings, binaries, integers, floats, booleans, decimals, dates, "
            "times or timestamps"
        )


def _hash_type(type_: pa.DataType) -> pa.DataType:
    """The type a column's distinct values are kept and looked up in: one per kind, where
    pyarrow's hashing kernels exist for it (not for views or float16)."""
    kind = _kind(type_)
    if kind == "string":
        return pa.large_string()
    if kind == "binary":
        return pa.large_binary()
    if kind == "float":
        return pa.float64()
    if kind == "integer":
        return pa.uint64() if type_ == pa.uint64() else pa.int64()
    return type_


def _cast(values: pa.Array, type_: pa.DataType, what: str) -> pa.Array:
    if values.type == type_:
        return values
    try:
        return values.cast(type_, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInputError(f"{what}: {detail}") from exc


def _canonical_floats(values: pa.Array) -> pa.Array:
    """NaN becomes null (a missing key) and -0.0 becomes 0.0, so floats compare by value."""
    return pc.if_else(pc.is_nan(values), pa.scalar(None, values.type), pc.add(values, 0.0))


def _as_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _numpy_indices(indices: pa.Array, null_slot: int) -> np.ndarray:
    if indices.null_count:
        indices = indices.fill_null(null_slot)
    return np.asarray(indices.to_numpy(zero_copy_only=False))


# --- the distinct values of one domain ---------------------------------------------------------


class _ValueIndex:
    """Distinct values in the order they were added, looked up by pyarrow's hashing."""

    def __init__(self, type_: pa.DataType) -> None:
        self.values: pa.Array = pa.array([], type_)

    def __len__(self) -> int:
        return len(self.values)

    def find(self, values: pa.Array) -> np.ndarray:
        """Each value's position, -1 where absent or null."""
        if not len(self.values):
            return np.full(len(values), -1, np.int64)
        found = pc.index_in(values, value_set=self.values, skip_nulls=True)
        return np.asarray(found.fill_null(-1).to_numpy(), np.int64)

    def find_or_add(self, values: pa.Array, *, distinct: bool = False) -> np.ndarray:
        """Each non-null value's position, adding the values not seen before (``distinct``:
        the values are known to differ from each other, which saves hashing the new ones)."""
        positions = self.find(values)
        new = (positions < 0) & ~np.asarray(values.is_null().to_numpy(zero_copy_only=False))
        if new.any():
            fresh = values.filter(pa.array(new))
            start = len(self.values)
            if distinct:
                self.values = pa.concat_arrays([self.values, fresh])
                positions[new] = np.arange(start, start + len(fresh))
                return positions
            distinct = pc.unique(fresh)
            self.values = pa.concat_arrays([self.values, distinct])
            found = pc.index_in(fresh, value_set=distinct)
            positions[new] = np.asarray(found.to_numpy(), np.int64) + start
        return positions

    def append_null(self) -> int:
        self.values = pa.concat_arrays([self.values, pa.nulls(1, self.values.type)])
        return len(self.values) - 1


# --- one key column ----------------------------------------------------------------------------


class _Column:
    """One key column: its types (from the first block) and its distinct values so far."""

    def __init__(self, name: str, type_: pa.DataType, null_keys: NullKeys) -> None:
        check_key_type(name, type_)
        self.name = name
        self.dictionary_type = type_ if pt.is_dictionary(type_) else None
        self.value_type = _value_type(type_)
        self.kind = _kind(type_)
        self.index = _ValueIndex(_hash_type(self.value_type))
        self.null_keys = null_keys
        self.null_code = -1
        self.frozen = False

    def canonical(self, values: pa.Array, what: str) -> pa.Array:
        """Values (a chunk's dictionary, a keys table's column) in this column's lookup type."""
        if _kind(values.type) != self.kind and not (
            self.kind == "float" and _kind(values.type) == "integer"
        ):
            raise InvalidInputError(
                f"key column '{self.name}' has type {values.type} in {what}, "
                f"but {self.value_type} in the first block: values of another kind never match"
            )
        values = _cast(
            values,
            self.value_type,
            f"key column '{self.name}' in {what} does not fit {self.value_type}",
        )
        values = _cast(values, self.index.values.type, f"key column '{self.name}'")
        return _canonical_floats(values) if self.kind == "float" else values

    def codes(self, data: pa.Array | pa.ChunkedArray, what: str) -> np.ndarray:
        """One code per row: a distinct value's position, MISSING, or _UNKNOWN (frozen)."""
        chunks = data.chunks if isinstance(data, pa.ChunkedArray) else [data]
        if not chunks:
            return np.empty(0, np.int64)
        # One dictionary for the whole block, so the run's dictionary is probed once per block.
        if not pt.is_dictionary(chunks[0].type):
            encoded = pc.dictionary_encode(chunks[0] if len(chunks) == 1 else data)
            shared = [encoded] if isinstance(encoded, pa.Array) else encoded.chunks
            # Distinct values stay distinct in the lookup type, except floats (-0.0 and 0.0).
            return self._shared_codes(shared, what, distinct=self.kind != "float")
        if len(chunks) > 1:
            try:
                chunks = pa.chunked_array(chunks).unify_dictionaries().chunks
            except pa.ArrowInvalid:  # a null in a dictionary: pyarrow cannot unify those yet
                parts = [self._shared_codes([chunk], what) for chunk in chunks]
                return np.concatenate(parts)
        return self._shared_codes(chunks, what)

    def _shared_codes(
        self, chunks: list[pa.DictionaryArray], what: str, *, distinct: bool = False
    ) -> np.ndarray:
        """Codes for dictionary chunks that all have the first one's dictionary."""
        dictionary = chunks[0].dictionary
        indices = [chunk.indices for chunk in chunks]
        slot = len(dictionary)
        parts = [_numpy_indices(chunk, slot) for chunk in indices]
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
        used = None
        if slot > len(rows) // 4:
            # A stored dictionary may hold many values no row uses: keep them out of the run's.
            used = np.bincount(rows, minlength=slot + 1)[:slot] > 0
        entries = self._entry_codes(self.canonical(dictionary, what), used, distinct)
        null_rows = any(chunk.null_count for chunk in indices)
        null_used = (entries == _NULL) if used is None else (entries == _NULL) & used
        table = np.append(entries, _NULL)
        if null_rows or null_used.any():
            table[table == _NULL] = self._null_code()
        codes: np.ndarray = table[rows]
        return codes

    def _entry_codes(self, values: pa.Array, used: np.ndarray | None, distinct: bool) -> np.ndarray:
        if used is not None and not used.all():
            codes = np.full(len(values), _NULL, np.int64)
            codes[used] = self._entry_codes(values.filter(pa.array(used)), None, distinct)
            return codes
        if self.frozen:
            codes = self.index.find(values)
            codes[codes < 0] = _UNKNOWN
        else:
            codes = self.index.find_or_add(values, distinct=distinct)
        codes[np.asarray(values.is_null().to_numpy(zero_copy_only=False))] = _NULL
        return codes

    def _null_code(self) -> int:
        if self.null_keys == "drop":
            return MISSING
        if self.null_code < 0:
            if self.frozen:
                return _UNKNOWN
            self.null_code = self.index.append_null()
        return self.null_code

    def seed(self, values: pa.Array, what: str) -> np.ndarray:
        """Codes of a keys table's column (nulls get a code whatever null_keys says, so every
        keys row has a group); afterwards the column only looks values up."""
        canonical = self.canonical(values, what)
        codes = self.index.find_or_add(canonical)
        nulls = np.asarray(canonical.is_null().to_numpy(zero_copy_only=False))
        if nulls.any():
            self.null_code = self.index.append_null()
            codes[nulls] = self.null_code
        self.frozen = True
        return codes

    def output(self, codes: np.ndarray) -> pa.Array:
        """The column's values for these codes, in the type of the first block."""
        values = _cast(
            self.index.values.take(pa.array(codes)),
            self.value_type,
            f"key column '{self.name}' does not fit {self.value_type}",
        )
        if self.dictionary_type is None:
            return values
        # dictionary_encode of sorted values gives a dictionary sorted by value.
        encoded = pc.dictionary_encode(values)
        index_type = self.dictionary_type.index_type
        if len(encoded.dictionary) > np.iinfo(index_type.to_pandas_dtype()).max:
            index_type = pa.int32() if len(encoded.dictionary) < 2**31 - 1 else pa.int64()
        target = pa.dictionary(index_type, self.value_type, self.dictionary_type.ordered)
        return encoded.cast(target)


# --- combining several columns' codes into one id ----------------------------------------------


def _fixed_binary_rows(codes: Sequence[np.ndarray]) -> pa.Array:
    """Each row's code tuple as one fixed-size binary value (hashable by pyarrow)."""
    matrix = np.ascontiguousarray(np.stack(codes, axis=1), dtype=np.int64)
    width = 8 * len(codes)
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(width), len(matrix), [None, pa.py_buffer(matrix)]
    )


def _rows_codes(values: pa.Array, columns: int) -> np.ndarray:
    """The inverse of :func:`_fixed_binary_rows`: a (rows, columns) int64 matrix."""
    buffer = values.buffers()[1]
    assert buffer is not None
    width = 8 * columns
    raw = np.frombuffer(buffer, np.uint8)[
        values.offset * width : (values.offset + len(values)) * width
    ]
    return raw.view(np.int64).reshape(len(values), columns)


class _Groups:
    """Dense group ids for tuples of per-column codes, in the order groups were first met."""

    def __init__(self, columns: int, dense_limit: int) -> None:
        self.codes: list[np.ndarray] = [np.empty(0, np.int64) for _ in range(columns)]
        self.dense_limit = dense_limit
        self.caps = [1] * columns
        self.table: np.ndarray | None = self._empty_table(1)
        self.hashed: _ValueIndex | None = None

    def __len__(self) -> int:
        return len(self.codes[0])

    def ids(self, codes: list[np.ndarray], sizes: list[int], *, add: bool) -> np.ndarray:
        """Group ids for rows of codes (< sizes); MISSING where a code is negative; for a new
        combination a new id when ``add``, else _UNKNOWN."""
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
            self.hashed = _ValueIndex(pa.binary(8 * len(codes)))
            self.hashed.find_or_add(_fixed_binary_rows(codes))

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
            self.hashed = _ValueIndex(pa.binary(8 * len(self.codes)))
            self.hashed.find_or_add(_fixed_binary_rows(self.codes))

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
        new = ids == _ABSENT
        if not new.any():
            return ids
        if not add:
            ids[new] = _UNKNOWN
            return ids
        if len(composite) * 8 > len(table):
            # Many rows (a first block): one scatter beats sorting the new rows.
            seen = np.zeros(len(table), bool)
            seen[composite] = True
            distinct = np.flatnonzero(seen & (table == _ABSENT))
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
        table = np.full(size + 1, _ABSENT, np.int64)
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
        rows = _fixed_binary_rows(codes if all_valid else [c[valid] for c in codes])
        encoded = pc.dictionary_encode(rows)
        before = len(self.hashed)
        if add:
            entries = self.hashed.find_or_add(encoded.dictionary)
            if len(self.hashed) > before:
                added = _rows_codes(self.hashed.values.slice(before), len(codes))
                self._append([added[:, j] for j in range(len(codes))])
        else:
            entries = self.hashed.find(encoded.dictionary)
            entries[entries < 0] = _UNKNOWN
        block_ids: np.ndarray = entries[np.asarray(encoded.indices.to_numpy())]
        if all_valid:
            return block_ids
        ids[valid] = block_ids
        return ids

    def _append(self, codes: Sequence[np.ndarray]) -> None:
        self.codes = [
            np.concatenate([old, new]) for old, new in zip(self.codes, codes, strict=True)
        ]


# --- the encoder -------------------------------------------------------------------------------


class KeyEncoder:
    """Turns blocks of key columns into stable, dense int64 group ids; see the module text.

    ``by``: the key column names. ``null_keys``: ``"drop"`` (a row with a null or NaN in any key
    column gets :data:`MISSING`) or ``"group"`` (such a row belongs to a group whose key is null
    in those columns). ``keys_from``: a table holding the ``by`` columns that fixes the groups;
    ``keys_from_label`` names it in errors (``--keys-from sensors.csv``, say).

    Encode a zero-row block to fix the key types when a run has no rows: without any block, the
    key table of :meth:`finish` has null-typed columns.
    """

    def __init__(
        self,
        by: Sequence[str],
        *,
        null_keys: NullKeys = "drop",
        keys_from: pa.Table | None = None,
        keys_from_label: str = "the keys table",
        _dense_limit: int = _DENSE_LIMIT,
    ) -> None:
        if not by:
            raise ValueError("at least one key column is needed")
        if null_keys not in ("drop", "group"):
            raise ValueError(f"null_keys must be 'drop' or 'group', not {null_keys!r}")
        self.by = list(by)
        self.null_keys: NullKeys = null_keys
        self.keys_from = None if keys_from is None else self._keys_table(keys_from, keys_from_label)
        self.keys_from_label = keys_from_label
        self.rows = 0
        self.missing_rows = 0
        self._columns: list[_Column] | None = None
        self._groups = _Groups(len(self.by), _dense_limit)

    @property
    def n_groups(self) -> int:
        """The number of groups: the length of the reduction's output axis."""
        if self.keys_from is not None:
            return int(self.keys_from.num_rows)
        return len(self._groups)

    def encode(self, block: Block, source: str | None = None) -> np.ndarray:
        """One int64 id per row of ``block``; ``source`` (a file name) prefixes errors."""
        what = f"{source}" if source else "this block"
        parts = []
        # Slices that fit in cache: a 30M-row block as one piece is three times slower.
        for start in range(0, max(block.num_rows, 1), _SLICE_ROWS):
            part = block.slice(start, _SLICE_ROWS)
            ids = self._ids(part, what, add=self.keys_from is None)
            if self.keys_from is not None:
                unknown = np.flatnonzero(ids == _UNKNOWN)
                if len(unknown):
                    raise self._unknown_key(part, int(unknown[0]), source)
            self.missing_rows += int(np.count_nonzero(ids == MISSING))
            self.rows += part.num_rows
            parts.append(ids)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def finish(self) -> KeyTable:
        """The key table in output order and the permutation of the results to match it."""
        if self.keys_from is not None:
            return KeyTable(self.keys_from, np.arange(self.keys_from.num_rows, dtype=np.int64))
        if self._columns is None:
            empty = pa.table({name: pa.nulls(0) for name in self.by})
            return KeyTable(empty, np.empty(0, np.int64))
        stored = [
            column.index.values.take(pa.array(codes))
            for column, codes in zip(self._columns, self._groups.codes, strict=True)
        ]
        names = [f"k{j}" for j in range(len(stored))]  # key names may repeat or be odd
        order = pc.sort_indices(
            pa.table(stored, names=names), sort_keys=[(name, "ascending") for name in names]
        )
        order_np = np.asarray(order.to_numpy(), np.int64)
        columns = [
            column.output(codes[order_np])
            for column, codes in zip(self._columns, self._groups.codes, strict=True)
        ]
        return KeyTable(pa.table(columns, names=self.by), order_np)

    def merge(self, other: KeyEncoder) -> np.ndarray:
        """Take in the groups of ``other`` (an encoder of another part of the same run, with the
        same ``by``, ``null_keys`` and ``keys_from``); returns where its ids went:
        ``remap[other_id]`` is the id in this encoder. Counts of rows add up."""
        if other.by != self.by or other.null_keys != self.null_keys:
            raise ValueError("only encoders with the same by and null_keys merge")
        if (other.keys_from is None) != (self.keys_from is None):
            raise ValueError("only encoders that both have keys_from, or both not, merge")
        self.rows += other.rows
        self.missing_rows += other.missing_rows
        if other.keys_from is not None or other._columns is None:
            return np.arange(other.n_groups, dtype=np.int64)
        if self._columns is None:
            self._columns = [
                _Column(column.name, column.dictionary_type or column.value_type, self.null_keys)
                for column in other._columns
            ]
        block = pa.table(
            [
                column.index.values.take(pa.array(codes)).cast(column.value_type)
                for column, codes in zip(other._columns, other._groups.codes, strict=True)
            ],
            names=self.by,
        )
        return self._ids(block, "a merged part", add=True)

    # --- internals ---

    def _keys_table(self, table: pa.Table, label: str) -> pa.Table:
        missing = [name for name in self.by if name not in table.column_names]
        if missing:
            raise InvalidInputError(
                f"{label} has no column '{missing[0]}' (columns: {', '.join(table.column_names)})"
            )
        keys = table.select(self.by)
        for name, type_ in zip(keys.column_names, keys.schema.types, strict=True):
            check_key_type(name, type_)
        return keys

    def _start(self, block: Block) -> list[_Column]:
        if self._columns is None:
            schema = block.schema
            self._columns = [
                _Column(name, schema.field(name).type, self.null_keys) for name in self.by
            ]
            if self.keys_from is not None:
                self._seed(self._columns, self.keys_from)
        return self._columns

    def _seed(self, columns: list[_Column], keys: pa.Table) -> None:
        codes = [
            column.seed(_decoded(_as_array(keys.column(column.name))), self.keys_from_label)
            for column in columns
        ]
        rows = pc.dictionary_encode(_fixed_binary_rows(codes))
        first = np.asarray(rows.indices.to_numpy(), np.int64)
        if len(rows.dictionary) < len(first):
            earlier = np.maximum.accumulate(first)
            second = int(np.flatnonzero(first[1:] <= earlier[:-1])[0]) + 1
            original = int(np.flatnonzero(first == first[second])[0])
            raise InvalidInputError(
                f"{self.keys_from_label} has key {_key_text(keys, second)} twice "
                f"(rows {original} and {second})"
            )
        self._groups.seed(codes, [len(column.index) for column in columns])

    def _ids(self, block: Block, what: str, *, add: bool) -> np.ndarray:
        names = block.schema.names
        for name in self.by:
            if name not in names:
                raise InvalidInputError(
                    f"{what} has no column '{name}' (columns: {', '.join(names)})"
                )
        columns = self._start(block)
        codes = [column.codes(block.column(column.name), what) for column in columns]
        if self.keys_from is not None and any(bool((c == _UNKNOWN).any()) for c in codes):
            # A value unknown in one column: the whole row is unknown, whatever the others say.
            unknown = np.zeros(block.num_rows, np.bool_)
            for column_codes in codes:
                unknown |= column_codes == _UNKNOWN
            ids = np.full(block.num_rows, _UNKNOWN, np.int64)
            known = ~unknown
            ids[known] = self._groups.ids(
                [c[known] for c in codes], [len(c.index) for c in columns], add=add
            )
            return ids
        return self._groups.ids(codes, [len(column.index) for column in columns], add=add)

    def _unknown_key(self, block: Block, row: int, source: str | None) -> InvalidInputError:
        where = f"{source}: " if source else ""
        return InvalidInputError(
            f"{where}row {self.rows + row} has key {_key_text(block, row, self.by)}, "
            f"which is not in {self.keys_from_label}"
        )


def _decoded(values: pa.Array) -> pa.Array:
    return values.dictionary_decode() if pt.is_dictionary(values.type) else values


def _key_text(table: Block, row: int, names: Sequence[str] | None = None) -> str:
    names = list(table.schema.names) if names is None else list(names)
    parts = [f"{name}={table.column(name)[row].as_py()!r}" for name in names]
    return "(" + ", ".join(parts) + ")" if len(parts) > 1 else parts[0]
