"""The values of one key column: kinds of types, lookup types, and a run's distinct values.

Codes: a distinct value's position in the run's :class:`ValueIndex` of its column (``>= 0``),
or one of the negative markers below.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.types as pt

from segcli.errors import InvalidInputError
from segcli.io import arrow_kernels as kernels
from segcli.io.columns import arrow_array, numpy_of
from segcli.keys import hash_table

NullKeys = Literal["drop", "group"]

MISSING = -1
"""The id (and column code) of a row whose key is missing and dropped."""

UNKNOWN = -2  # a code or group id: the value is not among the keys_from keys
_REUSED_DICTIONARY = 1 << 14  # a dictionary this large is coded whole and kept for later blocks
NULL = -3  # a dictionary entry that is null (or NaN): resolved to a null code or MISSING
ABSENT = -4  # in the dense combination table: no group has this combination yet
#: Distinct values (the run's and a block's together) from which a column's values are kept in
#: a compiled hash table across blocks. Blocks of 512K rows measured: with 32K distinct
#: strings pyarrow's dictionary encoding and index_in were faster (32 against 47 ms a block),
#: with 128K the table (47 against 52 to 125 ms), with a million twice as fast; loading numba
#: costs about half a second and 150 MB of resident memory, paid only from here on.
HASH_FROM = 1 << 17

# --- types -------------------------------------------------------------------------------------


def _value_type(type_: pa.DataType) -> pa.DataType:
    return type_.value_type if pt.is_dictionary(type_) else type_


def storage_type(type_: pa.DataType) -> pa.DataType:
    """The type an extension type (``arrow.uuid``, ``arrow.json``, ...) stores its values in;
    other types as they are. Keys of an extension type compare as their stored values."""
    return type_.storage_type if isinstance(type_, pa.BaseExtensionType) else type_


def _storage(values: pa.Array) -> pa.Array:
    return values.storage if isinstance(values, pa.ExtensionArray) else values


def key_kind(type_: pa.DataType) -> str | None:
    """The equality domain of a key type (values of one kind compare by value), or None."""
    t = _value_type(storage_type(type_))
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


def check_key_type(name: str, type_: pa.DataType, source: str | None = None) -> None:
    """Refuse, by name and type, a key column whose values cannot be compared; ``source``
    (the file) prefixes the message."""
    if key_kind(type_) is None:
        where = f"{source}: " if source else ""
        raise InvalidInputError(
            f"{where}key column '{name}' has type {type_}, which has no equality to group by; "
            "use a column of strings, binaries, integers, floats, booleans, decimals, dates, "
            "times or timestamps"
        )


def _without_view_dictionary(type_: pa.DataType) -> pa.DataType:
    """A dictionary of string or binary views as a dictionary of strings or binaries: pyarrow
    has no take or cast for dictionaries of views, so such keys come out in the plain type."""
    if not pt.is_dictionary(type_):
        return type_
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}.get(type_.value_type)
    if plain is None:
        return type_
    return pa.dictionary(type_.index_type, plain, type_.ordered)


def _hashable(values: pa.Array) -> pa.Array:
    """decimal32/64 values as decimal128 (exact): pyarrow's hashing kernels take only those."""
    type_ = values.type
    if pt.is_decimal32(type_) or pt.is_decimal64(type_):
        return kernels.cast(values, pa.decimal128(type_.precision, type_.scale))
    return values


def _hash_type(type_: pa.DataType) -> pa.DataType:
    """The type a column's distinct values are kept and looked up in: one per kind, where
    pyarrow's hashing kernels exist for it (not for views or float16)."""
    kind = key_kind(type_)
    if kind == "string":
        return pa.large_string()
    if kind == "binary":
        return pa.large_binary()
    if kind == "float":
        return pa.float64()
    if kind == "integer":
        return pa.uint64() if type_ == pa.uint64() else pa.int64()
    if pt.is_decimal32(type_) or pt.is_decimal64(type_):  # as _hashable widens them
        return pa.decimal128(type_.precision, type_.scale)
    return type_


def cast_values(values: pa.Array, type_: pa.DataType, what: str) -> pa.Array:
    if values.type == type_:
        return values
    try:
        return kernels.cast(values, type_, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInputError(f"{what}: {detail}") from exc


def _canonical_floats(values: pa.Array) -> pa.Array:
    """NaN becomes null (a missing key) and -0.0 becomes 0.0, so floats compare by value."""
    # A double zero made from NumPy: pyarrow turns a Python 0.0 into a scalar through pandas.
    zero = arrow_array(np.zeros(1, np.float64))[0]
    return kernels.if_else(
        kernels.is_nan(values), pa.nulls(1, values.type)[0], kernels.add(values, zero)
    )


def _positions(found: pa.Array) -> np.ndarray:
    """index_in's answer as int64, -1 where it is null (not found)."""
    if not found.null_count:
        return numpy_of(found).astype(np.int64)
    positions = np.full(len(found), -1, np.int64)
    # The data buffer holds any value under a null: only the valid slots are read.
    positions[numpy_of(kernels.is_valid(found))] = numpy_of(kernels.drop_null(found))
    return positions


def as_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _numpy_indices(indices: pa.Array, null_slot: int) -> np.ndarray:
    if not indices.null_count:
        return numpy_of(indices)
    rows = np.full(len(indices), null_slot, np.int64)
    rows[numpy_of(kernels.is_valid(indices))] = numpy_of(kernels.drop_null(indices))
    return rows


# --- the distinct values of one domain ---------------------------------------------------------


class ValueIndex:
    """Distinct values in the order they were added, looked up by pyarrow's hashing; from
    :data:`HASH_FROM` of them on, by a compiled hash table kept across blocks
    (:class:`~segcli.keys.hash_table.HashedValues`), where the type allows."""

    def __init__(self, type_: pa.DataType) -> None:
        self._values: pa.Array = pa.nulls(0, type_)
        self.hashed: hash_table.HashedValues | None = None

    def __len__(self) -> int:
        return len(self.hashed) if self.hashed is not None else len(self._values)

    @property
    def type(self) -> pa.DataType:
        return self._values.type

    @property
    def values(self) -> pa.Array:
        return self.hashed.values if self.hashed is not None else self._values

    def find(self, values: pa.Array, *, distinct: bool = False) -> np.ndarray:
        """Each value's position, -1 where absent or null (``distinct``: as in find_or_add)."""
        if self._hashes(values):
            assert self.hashed is not None
            return self.hashed.lookup(values, add=False)
        if not len(self._values):
            return np.full(len(values), -1, np.int64)
        if distinct and len(values) < len(self._values):
            # index_in hashes its value set on every call: hash the smaller side and invert.
            where = kernels.index_in(self._values, value_set=values, skip_nulls=True)
            where_np = _positions(where)
            known = np.flatnonzero(where_np >= 0)
            positions = np.full(len(values), -1, np.int64)
            positions[where_np[known]] = known
            return positions
        found = kernels.index_in(values, value_set=self._values, skip_nulls=True)
        return _positions(found)

    def find_or_add(self, values: pa.Array, *, distinct: bool = False) -> np.ndarray:
        """Each non-null value's position, adding the values not seen before (``distinct``:
        the values are known to differ from each other, which saves hashing the new ones)."""
        if self._hashes(values):
            assert self.hashed is not None
            return self.hashed.lookup(values, add=True)
        positions = self.find(values, distinct=distinct)
        new = (positions < 0) & ~numpy_of(kernels.is_null(values))
        if new.any():
            fresh = kernels.filter_by(values, arrow_array(new))
            start = len(self._values)
            if distinct:
                self._values = pa.concat_arrays([self._values, fresh])
                positions[new] = np.arange(start, start + len(fresh))
                return positions
            added = kernels.unique(fresh)
            self._values = pa.concat_arrays([self._values, added])
            found = kernels.index_in(fresh, value_set=added)
            positions[new] = numpy_of(found).astype(np.int64) + start
        return positions

    def append_null(self) -> int:
        if self.hashed is not None:
            return self.hashed.append_null()
        self._values = pa.concat_arrays([self._values, pa.nulls(1, self._values.type)])
        return len(self._values) - 1

    def _hashes(self, values: pa.Array) -> bool:
        """Whether the compiled table answers this lookup: it does once the run's values and
        the block's reach HASH_FROM (a small dictionary never loads numba)."""
        if self.hashed is not None:
            return True
        if len(self._values) + len(values) < HASH_FROM or not hash_table.supports(self.type):
            return False
        self.hashed = hash_table.HashedValues.of(self._values)
        self._values = self._values.slice(0, 0)  # the table holds them now
        return True


def _used(rows: np.ndarray, slots: int) -> np.ndarray:
    """Which of a dictionary's slots some row uses (rows may hold the null slot, ``slots``)."""
    used: np.ndarray = np.bincount(rows, minlength=slots + 1)[:slots] > 0
    return used


def _same(one: pa.Array, other: pa.Array) -> bool:
    """Whether two arrays are views of the same buffers (so the same values, without looking)."""
    if one is other:
        return True
    if len(one) != len(other) or one.offset != other.offset or one.type != other.type:
        return False
    return [b and b.address for b in one.buffers()] == [b and b.address for b in other.buffers()]


def _stacked(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Several chunks' (table, rows) as one: the tables end to end, rows shifted to match."""
    starts = np.cumsum([0] + [len(table) for table, _ in parts[:-1]])
    table = np.concatenate([table for table, _ in parts])
    rows = np.concatenate([rows + start for (_, rows), start in zip(parts, starts, strict=True)])
    return table, rows


# --- one key column ----------------------------------------------------------------------------


class KeyColumn:
    """One key column: its types (from the first block) and its distinct values so far."""

    def __init__(
        self, name: str, type_: pa.DataType, null_keys: NullKeys, source: str | None = None
    ) -> None:
        check_key_type(name, type_, source)
        self.name = name
        self._set_type(type_, source)
        self.null_keys = null_keys
        self.null_code = -1
        self.frozen = False
        #: The table of :meth:`_row_table`, and where its two last slots are now.
        self._identity = np.arange(0, dtype=np.int64)
        self._identity_end = 0
        #: The last large dictionary coded and its entry codes (held, so its buffers stay).
        self._last_dictionary: tuple[pa.Array, np.ndarray] | None = None

    def _set_type(self, type_: pa.DataType, source: str | None) -> None:
        #: The file the column's type came from (None: not known), for errors.
        self.source = source
        #: The column's type as declared; an extension type's values are its storage's.
        self.type = type_
        self.extension_type = type_ if isinstance(type_, pa.BaseExtensionType) else None
        type_ = _without_view_dictionary(storage_type(type_))
        self.dictionary_type = type_ if pt.is_dictionary(type_) else None
        self.value_type = _value_type(type_)
        self.kind = key_kind(type_)
        self.index = ValueIndex(_hash_type(self.value_type))

    def take_type_of(self, type_: pa.DataType, what: str) -> None:
        """A column whose blocks so far held nulls alone (type null: a shard whose key column
        has no value) takes the type of the first block that holds values, so that shards
        of such a column merge; its null key, if any, keeps its code."""
        if self.kind != "null" or self.frozen or key_kind(type_) in ("null", None):
            return
        had_null = len(self.index) > 0  # the null key is the only value of a null column
        self._set_type(type_, what)
        if had_null:
            self.null_code = self.index.append_null()

    def canonical(self, values: pa.Array, what: str, *, any_offsets: bool = False) -> pa.Array:
        """Values (a chunk's dictionary, a keys table's column) in this column's lookup type
        (``any_offsets``: strings and binaries of either offset width, as the hash table
        reads both, to save widening a block's offsets)."""
        values = _storage(values)
        kind = key_kind(values.type)
        # Nulls alone (a null-typed column) are missing keys of any kind.
        if kind not in (self.kind, "null") and not (self.kind == "float" and kind == "integer"):
            raise InvalidInputError(
                f"key column '{self.name}' has type {values.type} in {what}, "
                f"but {self.value_type} in {self.source or 'the first block'}: "
                "values of another kind never match"
            )
        values = cast_values(
            values,
            self.value_type,
            f"key column '{self.name}' in {what} does not fit {self.value_type}",
        )
        if any_offsets and hash_table.reads_bytes(values.type):
            return values
        values = cast_values(values, self.index.type, f"key column '{self.name}'")
        return _canonical_floats(values) if self.kind == "float" else values

    def codes(self, data: pa.Array | pa.ChunkedArray, what: str) -> np.ndarray:
        """One code per row: a distinct value's position, MISSING, or UNKNOWN (frozen)."""
        table, rows = self.coded(data, what)
        codes: np.ndarray = table[rows]
        return codes

    def coded(self, data: pa.Array | pa.ChunkedArray, what: str) -> tuple[np.ndarray, np.ndarray]:
        """The codes as ``table[rows]``: ``table`` holds a code per slot of the block's
        dictionary (and one for null), ``rows`` each row's slot; ``table`` is small when the
        block has few distinct values, so the codes need not be gathered row by row."""
        self.take_type_of(data.type, what)
        chunks = [
            _hashable(_storage(chunk))
            for chunk in (data.chunks if isinstance(data, pa.ChunkedArray) else [data])
        ]
        if not chunks:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if isinstance(data, pa.ChunkedArray) and data.type != chunks[0].type:  # an extension
            data = pa.chunked_array(chunks, chunks[0].type)
        # One dictionary for the whole block, so the run's dictionary is probed once per block.
        if not pt.is_dictionary(chunks[0].type):
            if self.index.hashed is not None:
                return self._row_table(chunks, what)
            encoded = kernels.dictionary_encode(chunks[0] if len(chunks) == 1 else data)
            shared = [encoded] if isinstance(encoded, pa.Array) else encoded.chunks
            # Distinct values stay distinct in the lookup type, except floats (-0.0 and 0.0).
            return self._shared_table(shared, what, distinct=self.kind != "float")
        if len(chunks) > 1 and not all(
            _same(chunk.dictionary, chunks[0].dictionary) for chunk in chunks
        ):
            if sum(len(chunk.dictionary) for chunk in chunks) > len(data) // 4:
                # Large dictionaries (Parquet row groups of many distinct values, streamed in
                # several blocks each): unifying would hash them again for every block.
                return _stacked([self._shared_table([chunk], what) for chunk in chunks])
            try:
                chunks = pa.chunked_array(chunks).unify_dictionaries().chunks
            except pa.ArrowInvalid:  # a null in a dictionary: pyarrow cannot unify those yet
                return _stacked([self._shared_table([chunk], what) for chunk in chunks])
        return self._shared_table(chunks, what)

    def _shared_table(
        self, chunks: list[pa.DictionaryArray], what: str, *, distinct: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Codes (as in :meth:`coded`) for dictionary chunks that all have the first one's
        dictionary."""
        dictionary = chunks[0].dictionary
        indices = [chunk.indices for chunk in chunks]
        slot = len(dictionary)
        parts = [_numpy_indices(chunk, slot) for chunk in indices]
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
        entries, used = self._dictionary_entries(dictionary, rows, what, distinct)
        null_rows = any(chunk.null_count for chunk in indices)
        null_used = entries == NULL
        if null_used.any() and len(entries) > len(rows) // 4:
            # NULL also marks entries no row uses: only a used null entry is a null key.
            null_used &= used if used is not None else _used(rows, len(entries))
        table = np.append(entries, NULL)
        if null_rows or null_used.any():
            table[table == NULL] = self._null_code()
        return table, rows

    def _row_table(self, chunks: list[pa.Array], what: str) -> tuple[np.ndarray, np.ndarray]:
        """Codes (as in :meth:`coded`) of plain values looked up row by row in the run's hash
        table: one hash a row, where dictionary encoding the block would hash each row and
        then each of its distinct values again. ``table`` is the identity on the run's
        values, then the null code and UNKNOWN."""
        parts = []
        null_rows = False
        for chunk in chunks:
            values = self.canonical(chunk, what, any_offsets=True)
            if self.frozen:
                positions = self.index.find(values)
                positions[positions < 0] = UNKNOWN
            else:
                positions = self.index.find_or_add(values)
            if values.null_count:
                positions[numpy_of(kernels.is_null(values))] = NULL
                null_rows = True
            parts.append(positions)
        null_code = self._null_code() if null_rows else NULL
        size = len(self.index)
        rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
        rows[rows == NULL] = size
        rows[rows == UNKNOWN] = size + 1
        return self._identity_table(size, null_code), rows

    def _identity_table(self, size: int, null_code: int) -> np.ndarray:
        """``arange(size)`` then the null code and UNKNOWN: a view of one array kept across
        blocks (its two last slots restored for the next), not 8 bytes a value each block."""
        table = self._identity
        if len(table) < size + 2:
            table = self._identity = np.arange(max(size + 2, 2 * len(table)), dtype=np.int64)
        else:
            table[self._identity_end : self._identity_end + 2] = (
                self._identity_end,
                self._identity_end + 1,
            )
        table[size : size + 2] = (null_code, UNKNOWN)
        self._identity_end = size
        return table[: size + 2]

    def _dictionary_entries(
        self, dictionary: pa.Array, rows: np.ndarray, what: str, distinct: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Codes of a block's dictionary entries (NULL for null entries and, where the mask
        of used entries comes with them, for unused ones)."""
        slot = len(dictionary)
        if slot <= len(rows) // 4:
            return self._entry_codes(self.canonical(dictionary, what), None, distinct), None
        cached = self._last_dictionary
        if cached is not None and _same(cached[0], dictionary):
            return cached[1], None
        if slot > _REUSED_DICTIONARY:
            # A row group's dictionary comes back with each block streamed from it: coded
            # whole once, then reused while the blocks come from the same buffers.
            entries = self._entry_codes(self.canonical(dictionary, what), None, distinct)
            self._last_dictionary = (dictionary, entries)
            return entries, None
        # A stored dictionary may hold many values no row uses: keep them out of the run's.
        used = _used(rows, slot)
        return self._entry_codes(self.canonical(dictionary, what), used, distinct), used

    def _entry_codes(self, values: pa.Array, used: np.ndarray | None, distinct: bool) -> np.ndarray:
        if used is not None and not used.all():
            codes = np.full(len(values), NULL, np.int64)
            codes[used] = self._entry_codes(
                kernels.filter_by(values, arrow_array(used)), None, distinct
            )
            return codes
        if self.frozen:
            codes = self.index.find(values)
            codes[codes < 0] = UNKNOWN
        else:
            codes = self.index.find_or_add(values, distinct=distinct)
        codes[numpy_of(kernels.is_null(values))] = NULL
        return codes

    def _null_code(self) -> int:
        if self.null_keys == "drop":
            return MISSING
        if self.null_code < 0:
            if self.frozen:
                return UNKNOWN
            self.null_code = self.index.append_null()
        return self.null_code

    def seed(self, values: pa.Array, what: str) -> np.ndarray:
        """Codes of a keys table's column (nulls get a code whatever null_keys says, so every
        keys row has a group); afterwards the column only looks values up."""
        self._refuse_unfit_keys(values, what)
        canonical = self.canonical(values, what)
        codes = self.index.find_or_add(canonical)
        nulls = numpy_of(kernels.is_null(canonical))
        if nulls.any():
            self.null_code = self.index.append_null()
            codes[nulls] = self.null_code
        self.frozen = True
        return codes

    def _refuse_unfit_keys(self, values: pa.Array, what: str) -> None:
        """A keys table's value that the data's key type cannot hold (300 against int8 keys, a
        fraction of a second against timestamp[s] ones), named with its row and as the output
        writes it: pyarrow's refusal names neither, and a timestamp by its raw integer."""
        values = _storage(values)
        kind = key_kind(values.type)
        if values.type == self.value_type or (
            kind != self.kind and not (self.kind == "float" and kind == "integer")
        ):
            return  # another kind: canonical() refuses it
        try:
            kernels.cast(values, self.value_type, safe=True)
            return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        try:
            back = kernels.cast(kernels.cast(values, self.value_type, safe=False), values.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return  # no unsafe cast either: canonical() gives pyarrow's words
        changed = kernels.fill_null(kernels.equal(back, values), True)
        rows = np.flatnonzero(~numpy_of(changed))
        if not len(rows):
            return
        from segcli.io.keyed import key_value_text

        count = f"{len(rows):,} row{'s' if len(rows) != 1 else ''}"
        raise InvalidInputError(
            f"{what}: key column '{self.name}' holds {key_value_text(values, int(rows[0]))} at "
            f"row {int(rows[0])}, which does not fit {self.value_type}, the key's type in the "
            f"data ({count} with such a key)"
        )

    def output(self, codes: np.ndarray) -> pa.Array:
        """The column's values for these codes, in the type of the first block."""
        values = cast_values(
            kernels.take(self.index.values, arrow_array(codes)),
            self.value_type,
            f"key column '{self.name}' does not fit {self.value_type}",
        )
        if self.extension_type is not None:
            return pa.ExtensionArray.from_storage(self.extension_type, values)
        if self.dictionary_type is None:
            return values
        # dictionary_encode of sorted values gives a dictionary sorted by value.
        encoded = kernels.dictionary_encode(_hashable(values))
        index_type = self.dictionary_type.index_type
        if len(encoded.dictionary) > np.iinfo(index_type.to_pandas_dtype()).max:
            index_type = pa.int32() if len(encoded.dictionary) < 2**31 - 1 else pa.int64()
        target = pa.dictionary(index_type, self.value_type, self.dictionary_type.ordered)
        return kernels.cast(encoded, target)
