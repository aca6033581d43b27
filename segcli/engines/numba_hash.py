"""Compiled kernels of the key encoder's hash table (:mod:`segcli.keys.hash_table`).

One open-addressing table (linear probing, a power-of-two number of entries) maps a value's
hash to its position among the run's distinct values. An entry is 8 bytes: the hash's upper
32 bits (a tag: values are compared only when the tags agree) and the position plus one
(0: an empty entry), so a table of a million values takes 16 MiB at most. Two kinds of values:

- byte strings (string, binary, in either offset width): an offsets array and a data buffer,
  compared byte for byte on a hash match;
- fixed-width values as rows of 64-bit words (int64, uint64, float64 bit patterns, 64-bit
  temporal types, fixed-size binary code tuples): compared word for word.

A lookup kernel walks a block's rows once, in row order: a value found gets its position, a new
one (``add``) the next position, so new values are numbered in order of first appearance. It
stops before a row it cannot add without room (the table half full, or the value store full)
and returns that row; the caller grows what is full and calls it again from there.

Imported only when a run's distinct values outgrow pyarrow's per-call hashing: loading numba
costs more than a small dictionary's whole lookup.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from segcli.engines import numba_cache
from segcli.engines.numba_prefetch import prefetcher

_JIT: dict[str, Any] = {"cache": True, "nogil": True}

EMPTY = -1  # the position an empty entry gives (it stores position + 1: 0)
#: Positions fit the entry's low 32 bits (as position + 1).
MAX_VALUES = (1 << 32) - 2
_TAG = np.uint64(0xFFFFFFFF00000000)
_POSITION = np.uint64(0xFFFFFFFF)
#: Rows ahead whose first table entry is asked for, then (nearer, so the entry is in by then)
#: whose stored value is (its offsets, or words), and for byte strings nearer still, whose
#: stored bytes are (the offsets are in by then): 16 and 4, without the bytes, measured 4x
#: faster than no prefetching with a million distinct strings (the table and the values far
#: outgrow the caches); the third stage, at 24, 12 and 4, took the lookup of a 512K-row block of
#: 12-byte strings from 205 to 184 ns a row (medians of four processes, alternating), and, with
#: the NumPy engine's unpacked sums (alone, they left the wall time as it was), a streamed
#: --by run over a million keys from 12.5 to 11.0 s.
TABLE_AHEAD = 24
VALUE_AHEAD = 12
BYTES_AHEAD = 4
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(**_JIT)
def _mix(h):  # type: ignore[no-untyped-def]
    """MurmurHash3's 64-bit finaliser: every input bit reaches every output bit."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h


def _word_loader() -> Any:
    """An intrinsic reading eight bytes of a uint8 array (typed Any, as numba's are)."""

    @intrinsic
    def _word_at(typingctx, array, offset):  # type: ignore[no-untyped-def]
        """The eight bytes of a uint8 array from ``offset`` as one uint64 in the machine's byte
        order (one unaligned load; the caller keeps them within the array)."""

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            data = context.make_array(signature.args[0])(context, builder, args[0])
            word = ir.IntType(64)
            address = builder.add(builder.ptrtoint(data.data, word), args[1])
            return builder.load(builder.inttoptr(address, word.as_pointer()), align=1)

        return types.uint64(array, types.int64), codegen

    return _word_at


_word_at = _word_loader()


@njit(**_JIT)
def _tail_word(data, start, end):  # type: ignore[no-untyped-def]
    """The last ``(end - start) % 8`` bytes of ``data[start:end]`` as a word (0 if none) for
    the hash (on a big-endian machine other bytes of the last eight: the same bytes still
    give the same word, which is all a hash needs)."""
    rest = (end - start) % 8
    if rest == 0:
        return np.uint64(0)
    if end - start >= 8:  # the last eight bytes, without those hashed already
        return _word_at(data, end - 8) >> np.uint64(8 * (8 - rest))
    word = np.uint64(0)
    for b in range(rest):
        word |= np.uint64(data[start + b]) << np.uint64(8 * b)
    return word


@njit(**_JIT)
def _hash_bytes(data, start, end):  # type: ignore[no-untyped-def]
    """A hash of ``data[start:end]``, eight bytes at a time."""
    h = np.uint64(end - start) * _GOLDEN
    i = np.int64(start)
    while i + 8 <= end:
        h = _mix(h ^ _word_at(data, i)) + _GOLDEN
        i += 8
    return _mix(h ^ _tail_word(data, start, end))


@njit(**_JIT)
def _hash_words(words, row):  # type: ignore[no-untyped-def]
    h = _GOLDEN
    for j in range(words.shape[1]):
        h = _mix(h ^ words[row, j]) + _GOLDEN
    return _mix(h)


@njit(**_JIT)
def _same_bytes(data, start, stored, stored_start, length):  # type: ignore[no-untyped-def]
    k = 0
    while k + 8 <= length:
        if _word_at(data, start + k) != _word_at(stored, stored_start + k):
            return False
        k += 8
    if k == length:
        return True
    if length >= 8:  # the last eight bytes, some compared already (in any byte order)
        return bool(
            _word_at(data, start + length - 8) == _word_at(stored, stored_start + length - 8)
        )
    # A loop, not all() of a generator: numba compiles generators poorly, if at all.
    for j in range(length):  # noqa: SIM110
        if data[start + j] != stored[stored_start + j]:
            return False
    return True


# Probed table entries and stored values are read at once: into every cache level.
_prefetch = prefetcher(near=True)


@njit(**_JIT)
def hash_bytes(offsets, data, valid, start, hashes):  # type: ignore[no-untyped-def]
    """The hash of every row from ``start`` (null rows: 0, never read)."""
    for r in range(start, len(offsets) - 1):
        if len(valid) and not valid[r]:
            hashes[r] = 0
        else:
            hashes[r] = _hash_bytes(data, offsets[r], offsets[r + 1])


@njit(**_JIT)
def hash_words(words, valid, start, hashes):  # type: ignore[no-untyped-def]
    for r in range(start, words.shape[0]):
        # Not `0 if ... else hash`: numba unifies int64 with uint64 as float64, losing bits.
        hashes[r] = np.uint64(0) if len(valid) and not valid[r] else _hash_words(words, r)


@njit(**_JIT)
def find_bytes(  # type: ignore[no-untyped-def]
    offsets, data, valid, hashes, start, positions, table, stored_offsets, stored, count, add
):
    """Positions of byte strings ``data[offsets[r]:offsets[r + 1]]`` (hashed: ``hashes[r]``)
    for rows ``r`` from ``start``; -1 for a null row (``valid`` empty: none is null) and,
    unless ``add``, for a value not in the table. Returns (the row it stopped before, or the
    row count; the new count of stored values)."""
    mask = np.uint64(len(table) - 1)
    limit = len(table) // 2
    rows = len(offsets) - 1
    used = stored_offsets[count]
    for r in range(start, rows):
        _ahead(table, hashes, mask, r, rows, stored_offsets)
        _bytes_ahead(table, hashes, mask, r, rows, stored_offsets, stored)
        if len(valid) and not valid[r]:
            positions[r] = -1
            continue
        a = offsets[r]
        length = offsets[r + 1] - a
        h = hashes[r]
        i = h & mask
        found = np.int64(-1)
        while True:
            entry = table[i]
            s = np.int64(entry & _POSITION) - 1
            if s == EMPTY:
                break
            if entry & _TAG == h & _TAG:
                sa = stored_offsets[s]
                if stored_offsets[s + 1] - sa == length and _same_bytes(
                    data, a, stored, sa, length
                ):
                    found = s
                    break
            i = (i + np.uint64(1)) & mask
        if found >= 0 or not add:
            positions[r] = found
            continue
        if count >= limit or used + length > len(stored) or count + 2 > len(stored_offsets):
            return r, count
        for k in range(length):
            stored[used + k] = data[a + k]
        used += length
        stored_offsets[count + 1] = used
        table[i] = (h & _TAG) | np.uint64(count + 1)
        positions[r] = count
        count += 1
    return rows, count


@njit(**_JIT)
def find_words(words, valid, hashes, start, positions, table, stored, count, add):  # type: ignore[no-untyped-def]
    """As :func:`find_bytes`, for values that are rows of 64-bit words (``stored`` holds the
    distinct ones, a row each)."""
    mask = np.uint64(len(table) - 1)
    limit = len(table) // 2
    rows = words.shape[0]
    width = words.shape[1]
    for r in range(start, rows):
        _ahead(table, hashes, mask, r, rows, stored)
        if len(valid) and not valid[r]:
            positions[r] = -1
            continue
        h = hashes[r]
        i = h & mask
        found = np.int64(-1)
        while True:
            entry = table[i]
            s = np.int64(entry & _POSITION) - 1
            if s == EMPTY:
                break
            if entry & _TAG == h & _TAG:
                same = True
                for j in range(width):
                    if words[r, j] != stored[s, j]:
                        same = False
                        break
                if same:
                    found = s
                    break
            i = (i + np.uint64(1)) & mask
        if found >= 0 or not add:
            positions[r] = found
            continue
        if count >= limit or count >= stored.shape[0]:
            return r, count
        for j in range(width):
            stored[count, j] = words[r, j]
        table[i] = (h & _TAG) | np.uint64(count + 1)
        positions[r] = count
        count += 1
    return rows, count


@njit(**_JIT)
def _ahead(table, hashes, mask, r, rows, stored):  # type: ignore[no-untyped-def]
    """Ask for the lines later rows will probe: their first table entry, and for a row whose
    entry came in by now, the stored value it names (its offsets or words). Each lookup is a
    few cache misses in a row; asking ahead overlaps those of many rows."""
    if r + TABLE_AHEAD < rows:
        _prefetch(table, np.int64(hashes[r + TABLE_AHEAD] & mask), np.int64(0))
    if r + VALUE_AHEAD < rows:
        s = np.int64(table[hashes[r + VALUE_AHEAD] & mask] & _POSITION) - 1
        if s != EMPTY:
            _prefetch(stored, s, np.int64(0))


@njit(**_JIT)
def _bytes_ahead(table, hashes, mask, r, rows, stored_offsets, stored):  # type: ignore[no-untyped-def]
    """For a row nearer still, whose stored offsets came in by now, ask for its stored bytes:
    the third miss of a byte string's lookup."""
    if r + BYTES_AHEAD < rows:
        s = np.int64(table[hashes[r + BYTES_AHEAD] & mask] & _POSITION) - 1
        if s != EMPTY:
            _prefetch(stored, stored_offsets[s], np.int64(0))


@njit(**_JIT)
def rehash_bytes(stored_offsets, stored, count, null_at, larger):  # type: ignore[no-untyped-def]
    """Enter the stored values (all but the null one) into a larger, empty table: hashed
    again, as entries keep only 32 bits of the hash."""
    mask = np.uint64(len(larger) - 1)
    for s in range(count):
        if s != null_at:
            h = _hash_bytes(stored, stored_offsets[s], stored_offsets[s + 1])
            _place(larger, mask, h, s)


@njit(**_JIT)
def rehash_words(stored, count, null_at, larger):  # type: ignore[no-untyped-def]
    mask = np.uint64(len(larger) - 1)
    for s in range(count):
        if s != null_at:
            _place(larger, mask, _hash_words(stored, s), s)


@njit(**_JIT)
def _place(table, mask, h, s):  # type: ignore[no-untyped-def]
    i = h & mask
    while table[i] != 0:
        i = (i + np.uint64(1)) & mask
    table[i] = (h & _TAG) | np.uint64(s + 1)


def install() -> None:
    """Point the kernels at segcli's trusted cache folder before the first one loads."""
    _, note = numba_cache.install_once(globals())
    if note is not None:
        from segcli import notices

        notices.send(note)
