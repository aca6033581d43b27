"""Compiled kernels of the key encoder's hash table (:mod:`segcli.keys.hash_table`).

One open-addressing table (linear probing, a power-of-two number of slots) maps a value's hash
to its position among the run's distinct values; each slot keeps the full 64-bit hash next to
the position, so a probe compares values only when the hashes agree. Two kinds of values:

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
from numba import njit

from segcli.engines import numba_cache

_JIT: dict[str, Any] = {"cache": True, "nogil": True}

EMPTY = -1  # a slot that holds no value
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


@njit(**_JIT)
def _hash_bytes(data, start, end):  # type: ignore[no-untyped-def]
    """A hash of ``data[start:end]``, eight bytes at a time (little-endian words)."""
    h = np.uint64(end - start) * _GOLDEN
    i = start
    while i + 8 <= end:
        word = np.uint64(0)
        for b in range(8):
            word |= np.uint64(data[i + b]) << np.uint64(8 * b)
        h = _mix(h ^ word) + _GOLDEN
        i += 8
    word = np.uint64(0)
    shift = np.uint64(0)
    while i < end:
        word |= np.uint64(data[i]) << shift
        shift += np.uint64(8)
        i += 1
    return _mix(h ^ word)


@njit(**_JIT)
def _hash_words(words, row):  # type: ignore[no-untyped-def]
    h = _GOLDEN
    for j in range(words.shape[1]):
        h = _mix(h ^ words[row, j]) + _GOLDEN
    return _mix(h)


@njit(**_JIT)
def _same_bytes(data, start, stored, stored_start, length):  # type: ignore[no-untyped-def]
    # A loop, not all() of a generator: numba compiles generators poorly, if at all.
    for k in range(length):  # noqa: SIM110
        if data[start + k] != stored[stored_start + k]:
            return False
    return True


@njit(**_JIT)
def find_bytes(  # type: ignore[no-untyped-def]
    offsets, data, valid, start, positions, slots, hashes, stored_offsets, stored, count, add
):
    """Positions of byte strings ``data[offsets[r]:offsets[r + 1]]`` for rows ``r`` from
    ``start``; -1 for a null row (``valid`` empty: none is null) and, unless ``add``, for a
    value not in the table. Returns (the row it stopped before, or the row count; the new
    count of stored values)."""
    mask = np.uint64(len(slots) - 1)
    limit = len(slots) // 2
    rows = len(offsets) - 1
    used = stored_offsets[count]
    for r in range(start, rows):
        if len(valid) and not valid[r]:
            positions[r] = -1
            continue
        a = offsets[r]
        length = offsets[r + 1] - a
        h = _hash_bytes(data, a, a + length)
        i = h & mask
        found = -1
        while True:
            s = slots[i]
            if s == EMPTY:
                break
            if hashes[i] == h:
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
        slots[i] = count
        hashes[i] = h
        positions[r] = count
        count += 1
    return rows, count


@njit(**_JIT)
def find_words(words, valid, start, positions, slots, hashes, stored, count, add):  # type: ignore[no-untyped-def]
    """As :func:`find_bytes`, for values that are rows of 64-bit words (``stored`` holds the
    distinct ones, a row each)."""
    mask = np.uint64(len(slots) - 1)
    limit = len(slots) // 2
    rows = words.shape[0]
    width = words.shape[1]
    for r in range(start, rows):
        if len(valid) and not valid[r]:
            positions[r] = -1
            continue
        h = _hash_words(words, r)
        i = h & mask
        found = -1
        while True:
            s = slots[i]
            if s == EMPTY:
                break
            if hashes[i] == h:
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
        slots[i] = count
        hashes[i] = h
        positions[r] = count
        count += 1
    return rows, count


@njit(**_JIT)
def rehash(slots, hashes, new_slots, new_hashes):  # type: ignore[no-untyped-def]
    """Move every occupied slot into a larger table (its hash kept, so no value is read)."""
    mask = np.uint64(len(new_slots) - 1)
    for k in range(len(slots)):
        s = slots[k]
        if s == EMPTY:
            continue
        h = hashes[k]
        i = h & mask
        while new_slots[i] != EMPTY:
            i = (i + np.uint64(1)) & mask
        new_slots[i] = s
        new_hashes[i] = h


_installed = False


def install() -> None:
    """Point the kernels at segcli's trusted cache folder before the first one loads."""
    global _installed
    if not _installed:
        _installed = True
        note = numba_cache.install(globals())
        if note is not None:
            from segcli import notices

            notices.send(note)
