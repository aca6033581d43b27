"""The numba engine: compiled single-pass folds, cached on disk, parallel where it pays.

It keeps the contract of :mod:`segcli.engines.base`: each segment's values combine in global
row order within their lane (see :mod:`segcli.ops`), so its results are the NumPy engine's
bytes and do not depend on the block split. What runs on which thread, each choice measured
on a 2-core machine (see ``benchmarks/``):

- float sums and products over unsorted ids: one thread per lane, each folding the rows dealt
  to its lane; a state that fits the cache counts in the same pass, a larger one counts after;
- min, max and integer folds, whose result cannot depend on the order: each thread folds a
  slice of the rows into private state, merged afterwards in row order (when the state fits a
  core's cache, or the rows are wide enough that reading them costs more than the private
  state; else one thread folds the values while another counts);
- sorted ids: the rows split at a run boundary, so each thread owns a range of segments; each
  run folds in a register, eight long runs side by side (W3), short ones one after another.
- the joint and logical folds (:mod:`segcli.engines.numba_stats`): argmin, argmax, first,
  last, any and all cannot depend on the order either, and fold like min (private states,
  merged by the op's own merge); var/std's shifted sums keep lanes like float sums, one
  thread per lane (a small state of 1-D rows packed per segment); so does logsumexp, each
  lane's thread copying its chunks and taking their ``exp`` (NumPy's own) before folding them
  (one lane: one thread folds while a second prepares the next chunk's ``exp``);
- ``agg``'s common lists over a float column (sum or mean, min, max, var or std, any two or
  more of them): one pass per lane for all of them (:mod:`segcli.engines.numba_fused`).

Complex sums fold as pairs of float columns (the same additions); complex products go to the
NumPy engine; float16 is widened to float32 a chunk at a time (exact). The engine also offers
validation a one-pass id scan (:meth:`NumbaEngine.scan_ids`), run a slice per thread. Importing
this module prints nothing and changes no other module: the notes of a first run (compiling,
an untrusted cache folder) go to :mod:`segcli.notices`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from glob import glob
from itertools import pairwise
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from segcli import notices, ops
from segcli.engines import numba_cache
from segcli.engines import numba_kernels as kernels
from segcli.engines.base import Engine
from segcli.engines.numpy_engine import ENGINE as NUMPY_ENGINE
from segcli.engines.numpy_engine import flat_intermediates

#: Threads the folds may use: the cores this process may run on.
THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
#: Below this many elements a block folds on the calling thread: a hand-off costs ~50 us.
PARALLEL_MIN_ELEMENTS = 1 << 18
#: A fold state up to this size stays in a core's cache (L2): private copies and a fused
#: count are cheap. Larger states take one random write per row per pass.
_CACHE_BYTES = 1 << 20
#: Padding between the lanes' accumulators of threads folding side by side: adjacent lanes
#: shared a cache line, and writes to it bounced between the cores (W1: 1.1x slower).
_LANE_GAP_BYTES = 128
#: Rows this narrow move counting to a second thread; wider rows dwarf the count.
_TASK_SPLIT_MAX_WIDTH = 4
#: Sorted runs shorter than this on average fold one after the other, not side by side: one
#: thread over 20M float32 rows, one by one measured 2.1x to 3.9x faster at 200 to 5 rows per
#: run, even at 1,000, and 1.8x to 3.6x slower at 5,000 to 20,000.
SHORT_RUN_ROWS = 1000
#: float16 blocks are widened to float32 this many elements at a time.
_HALF_CHUNK_ELEMENTS = 1 << 20

#: The engine's primitive table: each fold kind of :mod:`segcli.ops` as the kernels' constant
#: (an index into ``kernels.FOLD_FLAT``, ``FOLD_ROWS`` and ``FOLD_RUNS``).
_KERNEL_KINDS: dict[str, int] = {
    "sum": kernels.SUM,
    "prod": kernels.PROD,
    "min": kernels.MIN,
    "max": kernels.MAX,
}
#: How two private accumulators of a kernel kind merge: its fold's own ``merge``.
_MERGES: dict[int, np.ufunc] = {
    value: ops.FOLDS[kind].merge for kind, value in _KERNEL_KINDS.items()
}


def _has_kernel(fold: ops.Fold | None) -> bool:
    """Whether the kernels fold this primitive (count, which keeps no fold, is theirs too)."""
    return fold is None or fold.kind in _KERNEL_KINDS


def _fold_joint(
    state: ops.State, data: np.ndarray, ids: np.ndarray, first_row: int, sorted_ids: bool
) -> bool:
    """The compiled joint and logical folds (:mod:`segcli.engines.numba_stats`), in row order;
    False where none applies (float16, and the ops of the kernels).

    The order-free ones (all but var/std's sums and logsumexp's) fold a slice of the rows per
    thread into private states, merged in row order by the op's own merge.
    """
    op = state.op
    primitive = op.joint or (op.fold.kind if op.fold is not None else None)
    if primitive not in _STATS_KERNELS or data.dtype == np.float16:
        return False
    _announce_compilation()
    data, ids = _native(data), _native(ids)
    if primitive == "logsumexp":
        _fold_logsumexp(state, data, ids, first_row, sorted_ids)
        return True
    if primitive == "moments":
        _fold_moments(state, data, ids, first_row, sorted_ids)
        return True
    # A private state costs its size twice (made, merged): worth it for many rows per element.
    shared = state.count.size * data.shape[1] * 4 > data.size
    slices = _splits(ids.shape[0], 1 if shared else _parts_for(data.size))
    states = [state] + [
        ops.new_state(op, state.num_segments, state.inner_shape, state.data_dtype)
        for _ in slices[1:]
    ]
    _run(
        [
            partial(_fold_stats, primitive, part, data[a:b], ids[a:b], first_row + a)
            for (a, b), part in zip(slices, states, strict=True)
        ]
    )
    merged = state
    for part in states[1:]:
        merged = ops.combine(merged, part)
    if merged is not state:
        for name, array in state.arrays.items():
            array[...] = merged.arrays[name]
    return True


def _fold_stats(
    primitive: str, state: ops.State, data: np.ndarray, ids: np.ndarray, first_row: int
) -> None:
    """One compiled fold of :mod:`segcli.engines.numba_stats` on the calling thread."""
    numba_stats = _stats_kernels()

    flat = flat_intermediates(state)
    count = state.count
    column = data[:, 0] if data.shape[1] == 1 else None
    if primitive in ("argmin", "argmax"):
        extreme = state.op.intermediates[0].name
        fold = numba_stats.fold_arg if column is None else numba_stats.fold_arg_column
        values = data if column is None else column
        fold(values, ids, flat[extreme], flat["arg_row"], count, first_row, primitive == "argmin")
    elif primitive in ("first", "last"):
        row = state.op.intermediates[1].name
        fold = numba_stats.fold_pick if column is None else numba_stats.fold_pick_column
        values = data if column is None else column
        fold(values, ids, flat["picked"], flat[row], count, first_row, primitive == "last")
    else:
        fold = numba_stats.fold_logical if column is None else numba_stats.fold_logical_column
        fold(data if column is None else column, ids, flat[primitive], count, primitive == "all")


def _fold_moments(
    state: ops.State, data: np.ndarray, ids: np.ndarray, first_row: int, sorted_ids: bool
) -> None:
    """var/std's shifted sums: one thread per lane with rows in this block, each folding its
    lane's rows in row order (sorted ids: every row into lane 0, on this thread)."""
    numba_stats = _stats_kernels()

    if data.shape[1] == 0:  # rows without values: counted only
        kernels.count_ids(ids, state.count)
        return
    lanes = 1 if sorted_ids else state.lanes
    arrays = [_lanes_flat(state.arrays[name]) for name in _MOMENTS]
    head = min(ids.shape[0], lanes * ops.LANE_ROWS)
    present = sorted({lane for _, _, lane in ops.lane_pieces(first_row, head, lanes)})
    if len(present) < 2 or _parts_for(data.size) == 1:
        present = [-1]
    if data.shape[1] == 1 and state.num_segments * 32 <= _CACHE_BYTES:
        _fold_moments_packed(state, data[:, 0], ids, arrays, first_row, lanes, present)
        return
    # The rows each lane counts: its first column's (--skipna folds one column at a time).
    before = arrays[3][:, :: data.shape[1]].copy()
    column = data.shape[1] == 1
    fold = numba_stats.fold_moments_column if column else numba_stats.fold_moments
    values = data[:, 0] if column else data
    _run(
        [
            partial(fold, values, ids, *arrays, first_row, ops.LANE_ROWS, lanes, lane)
            for lane in present
        ]
    )
    state.count += (arrays[3][:, :: data.shape[1]] - before).sum(axis=0)


#: var/std's intermediates, in the order the moments kernels take them.
_MOMENTS = ("shift", "shifted_sum", "shifted_squares", "shifted_count")


def _fold_moments_packed(
    state: ops.State,
    column: np.ndarray,
    ids: np.ndarray,
    arrays: list[np.ndarray],
    first_row: int,
    lanes: int,
    present: list[int],
) -> None:
    """1-D rows into a small state: each lane's four intermediates packed side by side per
    segment (the lanes apart, so two threads never share a cache line), folded, unpacked."""
    numba_stats = _stats_kernels()

    n = state.num_segments
    packed = _apart((arrays[0].shape[0], n, 4))
    for k, array in enumerate(arrays):
        packed[..., k] = array
    whole = packed.base  # C-contiguous, lanes apart: the kernel's own layout
    assert whole is not None and whole.flags.c_contiguous
    _run(
        [
            partial(
                numba_stats.fold_moments_packed,
                column,
                ids,
                whole,
                n,
                first_row,
                ops.LANE_ROWS,
                lanes,
                lane,
            )
            for lane in present
        ]
    )
    rows = packed[..., 3].astype(np.int64)
    state.count += (rows - arrays[3]).sum(axis=0)
    for k, array in enumerate(arrays):
        array[...] = rows if k == 3 else packed[..., k]


def _lanes_flat(array: np.ndarray) -> np.ndarray:
    """An intermediate ``(lanes, n, width)`` as a ``(lanes, n * width)`` view, written in
    place."""
    view = array.reshape(array.shape[0], -1)
    if view.size and not np.shares_memory(view, array):  # a copy would lose the writes
        raise ValueError("an intermediate is not contiguous")
    return view


#: The primitives :func:`_fold_joint` compiles (joint folds and logical folds).
_STATS_KERNELS = ("argmin", "argmax", "first", "last", "moments", "any", "all", "logsumexp")
#: Values per chunk of logsumexp's ``exp`` pass: its float64 buffer stays in a core's cache,
#: so that the fold after it reads only the data and ids from memory.
_EXP_CHUNK_ELEMENTS = 1 << 16


def _fold_logsumexp(
    state: ops.State, data: np.ndarray, ids: np.ndarray, first_row: int, sorted_ids: bool
) -> None:
    """logsumexp's lanes (sorted ids: every row into lane 0): with rows of two lanes in the
    block and two threads, one thread per lane, each copying its own chunks, taking NumPy's
    ``exp`` of them (which releases the GIL) and folding them, so both threads share the
    ``exp`` and the fold alike; else the lanes one after the other on this thread, the next
    chunk's ``exp`` prepared on a second one (:func:`_fold_logsumexp_rows`)."""
    if data.shape[1] == 0:  # rows without values: counted only
        kernels.count_ids(ids, state.count)
        return
    lanes = 1 if sorted_ids else state.lanes
    pieces = ops.lane_pieces(first_row, ids.shape[0], lanes)
    present = sorted({lane for _, _, lane in pieces})
    together = _parts_for(data.size) > 1

    def rows_of(lane: int) -> list[tuple[int, int]]:
        return [(a, b) for a, b, k in pieces if k == lane]

    if len(present) < 2 or not together:
        for lane in present:
            lane_state = flat_intermediates(state, lane)
            rows = rows_of(lane)
            _fold_logsumexp_rows(data, ids, rows, lane_state, state.count, together=together)
        return
    # Lanes fold side by side, so each counts into its own array (the first into the state's).
    counts = [state.count] + [np.zeros_like(state.count) for _ in present[1:]]
    _run(
        [
            partial(
                _fold_logsumexp_rows,
                data,
                ids,
                rows_of(lane),
                flat_intermediates(state, lane),
                count,
                together=False,
            )
            for lane, count in zip(present, counts, strict=True)
        ]
    )
    for count in counts[1:]:
        state.count += count


def _fold_logsumexp_rows(
    data: np.ndarray,
    ids: np.ndarray,
    ranges: list[tuple[int, int]],
    flat: dict[str, np.ndarray],
    count: np.ndarray,
    *,
    together: bool,
) -> None:
    """One lane's rows (``ranges``, in row order) into its intermediates ``flat``, a chunk at
    a time: a chunk of plain values (magnitude below ``ops.PLAIN_EXP``) takes NumPy's ``exp``
    of each value as it is; any other chunk, a kernel first prepares each value's ``exp``
    argument and exponent. NumPy's ``exp`` is the NumPy engine's own, so the bits are the
    same; a kernel then folds the rows in order (:class:`_PlainPairs` for plain 1-D chunks).
    ``together``: a second thread prepares the next chunk while this one folds (two buffers,
    taken in turn; one otherwise, which the fold reads from the cache the ``exp`` left it
    in)."""
    numba_stats = _stats_kernels()

    step = max(1, _EXP_CHUNK_ELEMENTS // max(1, data.shape[1]))
    chunks = [(a, min(high, a + step)) for low, high in ranges for a in range(low, high, step)]
    rows_in_lane = sum(b - a for a, b in ranges)
    size = min(rows_in_lane, step) * data.shape[1]
    turns = 2 if together else 1
    buffers = [(np.empty(size), np.empty(size, np.int64)) for _ in range(turns)]
    plain = [False] * turns
    state = (flat["lse_max"], flat["lse_scale"], flat["lse_sum"], count, ops.LOWEST_SCALE)
    # The pairs cost the state's size twice (made, written back): not for a few rows.
    paired = data.shape[1] == 1 and count.size <= 4 * rows_in_lane
    pairs = _PlainPairs(flat["lse_scale"], flat["lse_sum"], count) if paired else None

    def prepare(k: int) -> None:
        a, b = chunks[k]
        rows = np.ascontiguousarray(data[a:b]).reshape(-1)
        reduced, exponent = (buffer[: rows.size] for buffer in buffers[k % turns])
        plain[k % turns] = numba_stats.widened_if_plain(rows, reduced, ops.PLAIN_EXP)
        if not plain[k % turns]:
            numba_stats.logsumexp_arguments(
                rows, reduced, exponent, ops.LARGEST_SCALED, ops.PLAIN_EXP, ops.LOWEST_SCALE
            )
        np.exp(reduced, out=reduced)

    def fold(k: int) -> None:
        a, b = chunks[k]
        rows = np.ascontiguousarray(data[a:b])
        terms, exponent = (buffer[: rows.size] for buffer in buffers[k % turns])
        chunk_ids = ids[a:b]
        if plain[k % turns] and pairs is not None and pairs.fold(terms, chunk_ids):
            return
        if pairs is not None:
            pairs.close()
        if plain[k % turns]:
            column = numba_stats.fold_plain_exps_column if rows.shape[1] == 1 else None
            fold_plain = column or numba_stats.fold_plain_exps
            fold_plain(chunk_ids, terms, *state[1:4], rows.shape[1])
        elif rows.shape[1] == 1:
            numba_stats.fold_logsumexp_column(rows[:, 0], chunk_ids, terms, exponent, *state)
        else:
            numba_stats.fold_logsumexp(rows, chunk_ids, terms, exponent, *state)

    if chunks:
        prepare(0)
    for k in range(len(chunks)):
        if together and k + 1 < len(chunks):
            _run([partial(fold, k), partial(prepare, k + 1)])
        else:
            fold(k)
            if k + 1 < len(chunks):
                prepare(k + 1)
    if pairs is not None:
        pairs.close()


class _PlainPairs:
    """Plain 1-D chunks folded as float sums are (``numba_kernels.fold_sum_counted``: each
    term and a count of one in one two-double add, measured 1.45x faster than a kernel that
    checks each segment's scale), into ``(sum, count)`` pairs opened on a block's first plain
    chunk, while every segment is at scale 0 or has no scaled value yet; closed (written back,
    segments reached taking scale 0) before any other chunk folds, and at the block's end."""

    def __init__(self, scale: np.ndarray, sums: np.ndarray, count: np.ndarray) -> None:
        self.scale, self.sums, self.count = scale, sums, count
        self.pairs: np.ndarray | None = None
        self.usable = True

    def fold(self, terms: np.ndarray, ids: np.ndarray) -> bool:
        """Folds a plain chunk's terms; False where the pairs cannot take it."""
        if self.pairs is None:
            scale = self.scale
            self.usable = self.usable and bool(np.all((scale == 0) | (scale == ops.LOWEST_SCALE)))
            if not self.usable:
                return False
            self.pairs = np.zeros((1, scale.size, 2))
            self.pairs[0, :, 0] = self.sums
        kernels.fold_sum_counted(terms, ids, self.pairs, 0, 1, -1)
        return True

    def close(self) -> None:
        if self.pairs is None:
            return
        self.sums[...] = self.pairs[0, :, 0]
        counted = self.pairs[0, :, 1].astype(np.int64)
        self.count += counted
        self.scale[counted > 0] = 0
        self.pairs = None
        self.usable = False  # the block's other chunks fold as they come


_pool: ThreadPoolExecutor | None = None


def _kernel_cache_is_cold() -> bool:
    """True when this machine has no compiled kernels cached yet (so the first call compiles)."""
    cache_path = getattr(getattr(kernels.fold_flat, "stats", None), "cache_path", None)
    if not cache_path:
        return False  # caching unavailable: nothing honest to say
    return not glob(os.path.join(cache_path, f"{kernels.__name__.rsplit('.', 1)[-1]}.*.nbi"))


def _announce_compilation() -> None:
    """Before the first kernel runs: point the kernels at a trusted cache folder (saying so if
    the usual one was refused), and say once per machine why the first run is slow."""
    first, note = numba_cache.install_once(vars(kernels))
    if note is not None:
        notices.send(note)
    if first and _kernel_cache_is_cold():
        notices.send("segcli: compiling kernels, first run only")


def _stats_kernels() -> ModuleType:
    """:mod:`segcli.engines.numba_stats`, imported when a joint fold first runs, its kernels
    cached in the engine's trusted folder (numba's default is the package's own folder)."""
    from segcli.engines import numba_stats

    _announce_compilation()
    numba_cache.install_once(vars(numba_stats))
    return numba_stats


#: What :mod:`segcli.engines.numba_fused` folds together: a combined state's intermediates by
#: name, each with its fold kind.
_FUSED_KINDS = {
    "sum": "sum",
    "min": "min",
    "max": "max",
    "moments.shift": "shift",
    "moments.shifted_sum": "shifted_sum",
    "moments.shifted_squares": "shifted_squares",
    "moments.shifted_count": "shifted_count",
}
_MOMENTS_NAMES = tuple(name for name in _FUSED_KINDS if name.startswith("moments."))
#: One segment's fused state in one lane, at most: its record, two extremes and their rows.
_FUSED_SEGMENT_BYTES = 5 * 8 + 2 * 8 + 2 * 8


def _fusable(state: ops.State, data: np.ndarray, sorted_ids: bool) -> bool:
    """Whether the fused pass applies: a float column over unsorted ids, a combined state of
    nothing but sum, min, max and the moments (all four or none), at least two of those
    groups (one alone has its own kernel), lanes as the part folds keep them, and a state
    that fits a core's cache."""
    names = {i.name: i.fold.kind for i in state.op.intermediates}
    if (
        sorted_ids
        or state.op.skipna_of is not None
        or data.ndim != 2
        or data.shape[1] != 1
        or data.dtype not in (np.float32, np.float64)
        or any(_FUSED_KINDS.get(name) != kind for name, kind in names.items())
    ):
        return False
    moments = [name in names for name in _MOMENTS_NAMES]
    if any(moments) and not all(moments):
        return False
    groups = sum(name in names for name in ("sum", "min", "max")) + all(moments)
    dealt = [name for name in names if name == "sum" or name.startswith("moments.")]
    return (
        groups >= 2
        and all(state.arrays[name].shape[0] == ops.LANES for name in dealt)
        and all(state.arrays[name].shape[0] == 1 for name in ("min", "max") if name in names)
        and state.num_segments * _FUSED_SEGMENT_BYTES <= _CACHE_BYTES
    )


def _fold_fused(state: ops.State, data: np.ndarray, ids: np.ndarray, first_row: int) -> None:
    """:mod:`segcli.engines.numba_fused`'s one pass: the lanes' sums, moments and extreme
    candidates, one thread per lane; then the candidates into min and max in row order."""
    from segcli.engines import numba_fused as fused

    _announce_compilation()
    numba_cache.install_once(vars(fused))
    n = state.num_segments
    column, ids = _native(data[:, 0]), _native(ids)
    arrays = state.arrays
    with_moments = _MOMENTS_NAMES[0] in arrays
    with_extremes = "min" in arrays or "max" in arrays
    records = _apart((ops.LANES, n, fused.RECORD))
    if "sum" in arrays:
        records[..., fused.SUM] = arrays["sum"][..., 0]
    if with_moments:
        for column_of, name in zip(
            (fused.SHIFT, fused.SHIFTED_SUM, fused.SQUARES, fused.ROWS), _MOMENTS_NAMES, strict=True
        ):
            records[..., column_of] = arrays[name][..., 0]
    rows_before = records[..., fused.ROWS].copy()
    extremes = _apart((ops.LANES, n, 2), column.dtype)
    extremes[..., 0] = np.inf
    extremes[..., 1] = -np.inf
    rows = _apart((ops.LANES, n, 2), np.int64)
    rows[...] = -1
    head = min(ids.shape[0], ops.LANES * ops.LANE_ROWS)
    present = sorted({lane for _, _, lane in ops.lane_pieces(first_row, head, ops.LANES)})
    if len(present) < 2 or _parts_for(column.size) == 1:
        present = [-1]
    _run(
        [
            partial(
                fused.fold_fused,
                column,
                ids,
                records.base,
                extremes.base,
                rows.base,
                n,
                first_row,
                ops.LANE_ROWS,
                ops.LANES,
                lane,
                with_moments,
                with_extremes,
            )
            for lane in present
        ]
    )
    state.count += (records[..., fused.ROWS] - rows_before).sum(axis=0).astype(np.int64)
    if "sum" in arrays:
        arrays["sum"][..., 0] = records[..., fused.SUM]
    if with_moments:
        for column_of, name in zip(
            (fused.SHIFT, fused.SHIFTED_SUM, fused.SQUARES), _MOMENTS_NAMES[:3], strict=True
        ):
            arrays[name][..., 0] = records[..., column_of]
        arrays[_MOMENTS_NAMES[3]][..., 0] = records[..., fused.ROWS].astype(np.int64)
    for which, name in enumerate(("min", "max")):
        if name in arrays:
            state_of = _lanes_flat(arrays[name])[0]  # one lane: (n,), written in place
            fused.fold_candidates(state_of, extremes.base, rows.base, which, name == "min")


def _run(tasks: list[Callable[[], Any]]) -> list[Any]:
    """Run the tasks, the first on this thread and the rest on the pool; wait for all and
    return their results in order."""
    global _pool
    if len(tasks) <= 1 or THREADS < 2:
        return [task() for task in tasks]
    if _pool is None:
        _pool = ThreadPoolExecutor(max(1, THREADS - 1), thread_name_prefix="segcli-numba")
    futures = [_pool.submit(task) for task in tasks[1:]]
    try:
        first = tasks[0]()
    finally:
        rest = [future.result() for future in futures]
    return [first, *rest]


def _native(array: np.ndarray) -> np.ndarray:
    """numba reads native byte order only."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def _splits(rows: int, parts: int) -> list[tuple[int, int]]:
    edges = [rows * k // parts for k in range(parts + 1)]
    return [(a, b) for a, b in pairwise(edges) if b > a]


def _parts_for(elements: int) -> int:
    return THREADS if elements >= PARALLEL_MIN_ELEMENTS and THREADS > 1 else 1


def _fold_values(
    kind: int,
    data: np.ndarray,
    ids: np.ndarray,
    acc: np.ndarray,
    count: np.ndarray,
    with_count: bool,
    first_row: int,
    lane: int = -1,
) -> None:
    """One thread, rows in order: the 1-D kernel for one column, else the row kernel.

    ``acc`` is ``(lanes, n, width)``; ``lane`` >= 0 folds only that lane's rows.
    """
    if data.shape[1] == 1:
        flat_acc = acc.reshape(acc.shape[0], acc.shape[1])
        kernels.FOLD_FLAT[kind](
            data[:, 0], ids, flat_acc, count, with_count, first_row, ops.LANE_ROWS, lane
        )
    else:
        kernels.FOLD_ROWS[kind](data, ids, acc, count, with_count, first_row, ops.LANE_ROWS, lane)


def _fold_private(
    kind: int,
    initial: Any,
    data: np.ndarray,
    ids: np.ndarray,
    acc: np.ndarray,
    count: np.ndarray,
    parts: int,
) -> None:
    """Order-free folds (one lane): each thread takes a slice of rows into private state,
    merged in order.

    The first slice folds straight into the state; merging the others after it in row order
    gives the sequential fold's bits, even for min/max of 0.0 and -0.0 or NaNs.
    """
    slices = _splits(ids.shape[0], parts)
    accs = [acc] + [np.full_like(acc, initial) for _ in slices[1:]]
    counts = [count] + [np.zeros_like(count) for _ in slices[1:]]
    _run(
        [
            partial(_fold_values, kind, data[a:b], ids[a:b], acc_k, count_k, True, 0)
            for (a, b), acc_k, count_k in zip(slices, accs, counts, strict=True)
        ]
    )
    merge = _MERGES[kind]
    with np.errstate(invalid="ignore", over="ignore"):  # NaN compares by design
        for acc_k, count_k in zip(accs[1:], counts[1:], strict=True):
            merge(acc, acc_k, out=acc)
            count += count_k


def _apart(shape: tuple[int, int, int], dtype: Any = np.float64) -> np.ndarray:
    """Zeros of ``shape`` (lanes, n, width), each lane C-contiguous and the lanes
    :data:`_LANE_GAP_BYTES` apart, so that two threads never write to one cache line."""
    lanes, n, width = shape
    gap = -(-_LANE_GAP_BYTES // (np.dtype(dtype).itemsize * width))  # whole rows of padding
    return np.zeros((lanes, n + gap, width), dtype)[:, :n]


def _fold_sum_counted(
    data: np.ndarray,
    ids: np.ndarray,
    acc: np.ndarray,
    count: np.ndarray,
    first_row: int,
    lanes: list[int],
) -> None:
    """Float sums of 1-D rows into a small state: each sum and its count sit side by side as
    a pair of float64, added with one two-wide add (counts are exact in float64 to 2**53).
    ``lanes``: one task per lane listed, or ``[-1]`` for all lanes on this thread."""
    pairs = _apart((acc.shape[0], acc.shape[1], 2))
    pairs[..., 0] = acc[..., 0]
    pairs[..., 1] = 0.0
    _run(
        [
            partial(kernels.fold_sum_counted, data[:, 0], ids, pairs, first_row, ops.LANE_ROWS, k)
            for k in lanes
        ]
    )
    acc[..., 0] = pairs[..., 0]
    count += pairs[..., 1].sum(axis=0).astype(np.int64)


def _fold_lanes(
    kind: int,
    data: np.ndarray,
    ids: np.ndarray,
    acc: np.ndarray,
    count: np.ndarray,
    first_row: int,
    small_state: bool,
) -> None:
    """Float sums and products: one thread per lane, each folding its lane's rows in order.

    A state that fits the cache counts in the same pass (a private count per extra thread);
    a bigger one counts afterwards, since two random writes per row into it measured slower.
    """
    # The lanes with rows in this block: those of its first pieces (one per lane at most).
    lanes = acc.shape[0]
    head = min(ids.shape[0], lanes * ops.LANE_ROWS)
    present = sorted({lane for _, _, lane in ops.lane_pieces(first_row, head, lanes)})
    if small_state and kind == kernels.SUM and data.shape[1] == 1:
        _fold_sum_counted(data, ids, acc, count, first_row, present)
        return
    # A small state's lanes are hit often enough for a cache line shared between two of
    # them to matter: fold into a copy with the lanes apart.
    work = _apart(acc.shape, acc.dtype) if small_state else acc
    if work is not acc:
        work[...] = acc
    counts = [count] + [np.zeros_like(count) for _ in present[1:]]
    _run(
        [
            partial(_fold_values, kind, data, ids, work, count_k, small_state, first_row, lane)
            for lane, count_k in zip(present, counts, strict=True)
        ]
    )
    if work is not acc:
        acc[...] = work
    for count_k in counts[1:]:
        count += count_k
    if not small_state:
        _count_in_slices(count, ids)


def _fold_unsorted(
    kind: int,
    initial: Any,
    data: np.ndarray,
    ids: np.ndarray,
    acc: np.ndarray,
    count: np.ndarray,
    first_row: int,
) -> None:
    parts = _parts_for(data.size)
    # A lane's state and a count: what one thread's random writes go to.
    small_state = acc[0].nbytes + count.nbytes <= _CACHE_BYTES
    if parts > 1 and acc.shape[0] > 1:
        _fold_lanes(kind, data, ids, acc, count, first_row, small_state)
    elif parts > 1 and (small_state or data.shape[1] > _TASK_SPLIT_MAX_WIDTH):
        _fold_private(kind, initial, data, ids, acc, count, parts)
    elif parts > 1 and data.shape[1] <= _TASK_SPLIT_MAX_WIDTH:
        # A large order-free state: one thread folds the values while another counts.
        _run(
            [
                partial(_fold_values, kind, data, ids, acc, count, False, first_row),
                partial(_count_in_slices, count, ids, 1),
            ]
        )
    elif small_state and kind == kernels.SUM and acc.dtype.kind == "f" and data.shape[1] == 1:
        _fold_sum_counted(data, ids, acc, count, first_row, [-1])
    elif small_state:
        _fold_values(kind, data, ids, acc, count, True, first_row)
    else:
        # Two random writes per row into a state larger than the cache measured 3x slower
        # than two passes with one each.
        _fold_values(kind, data, ids, acc, count, False, first_row)
        kernels.count_ids(ids, count)


def _sorted_parts(ids: np.ndarray, lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """Row ranges cut at run starts, so no segment is shared between two of them."""
    cuts = [lo]
    for a, _ in _splits(hi - lo, parts)[1:]:
        cut = kernels.run_start(ids, lo + a, cuts[-1])
        if cut > cuts[-1]:
            cuts.append(cut)
    cuts.append(hi)
    return [(a, b) for a, b in pairwise(cuts) if b > a]


def _fold_sorted(
    kind: int, data: np.ndarray, ids: np.ndarray, acc: np.ndarray, count: np.ndarray
) -> None:
    """Threads own ranges of segments (cut at run starts); every row folds into lane 0."""
    lo, hi = kernels.sorted_bounds(ids, acc.shape[1])
    parts = _sorted_parts(ids, lo, hi, _parts_for(data[lo:hi].size))
    lane0 = acc[:1]

    def fold_part(a: int, b: int) -> None:
        if data.shape[1] == 1:
            fold_runs = kernels.FOLD_RUNS[kind]
            fold_runs(data[:, 0], ids, lane0.reshape(-1), count, a, b, SHORT_RUN_ROWS)
        else:
            _fold_values(kind, data[a:b], ids[a:b], lane0, count, True, 0)

    _run([partial(fold_part, a, b) for a, b in parts])


def _count(count: np.ndarray, ids: np.ndarray, sorted_ids: bool) -> None:
    """The count op (or rows of inner size 0): rows per segment only."""
    if sorted_ids:
        lo, hi = kernels.sorted_bounds(ids, count.shape[0])
        kernels.count_runs(ids, count, lo, hi)
    elif _parts_for(ids.shape[0]) == 1:
        kernels.count_ids(ids, count)
    else:
        _count_in_slices(count, ids)


def _count_in_slices(count: np.ndarray, ids: np.ndarray, parts: int | None = None) -> None:
    """Count on ``parts`` threads (default: all), a slice of the rows each into a private
    count, then sum.

    The private counts are int32 while a slice has fewer than 2**31 rows: half the cache
    footprint of int64, which measured 1.3x to 1.7x faster into a million segments.
    """
    slices = _splits(ids.shape[0], parts or _parts_for(ids.shape[0]))
    narrow = max(b - a for a, b in slices) < 2**31
    counts = [np.zeros(count.shape, np.int32 if narrow else np.int64) for _ in slices]
    _run(
        [partial(kernels.count_ids, ids[a:b], c) for (a, b), c in zip(slices, counts, strict=True)]
    )
    for c in counts:
        count += c


def _fold_native(
    state: ops.State,
    kind: int,
    data: np.ndarray,
    ids: np.ndarray,
    acc: np.ndarray,
    sorted_ids: bool,
    first_row: int,
) -> None:
    """Fold a block of a dtype the kernels take (ints, float32/64) into ``acc``."""
    if sorted_ids:
        _fold_sorted(kind, data, ids, acc, state.count)
    else:
        fold = state.op.fold
        assert fold is not None
        initial = fold.identity(acc.dtype)
        _fold_unsorted(kind, initial, data, ids, acc, state.count, first_row)


def _fold_half(
    state: ops.State,
    kind: int,
    data: np.ndarray,
    ids: np.ndarray,
    sorted_ids: bool,
    first_row: int,
) -> None:
    """float16: widen a chunk at a time to float32 (exact); min/max fold in float32 too."""
    acc = state.acc
    work = acc.astype(np.float32) if acc.dtype == np.float16 else acc
    step = max(1, _HALF_CHUNK_ELEMENTS // max(1, data.shape[1]))
    for a in range(0, ids.shape[0], step):
        chunk = data[a : a + step].astype(np.float32)
        _fold_native(state, kind, chunk, ids[a : a + step], work, sorted_ids, first_row + a)
    if work is not acc:
        acc[...] = work  # every value is a float16 value (or the initial +-inf): exact


class NumbaEngine(Engine):
    name: ClassVar[str] = "numba"
    #: Once numba has been paid for, validation of large blocks uses it too, on every core.
    scans_ids: ClassVar[bool] = True

    def scan_ids(self, flat: np.ndarray, num_segments: int, sorted_ids: bool) -> tuple[int, ...]:
        """Validation's one-pass id scan: 10x fewer passes than NumPy's."""
        _announce_compilation()
        return tuple(kernels.scan_ids(flat, num_segments, sorted_ids))

    def run_concurrently(self, calls: list[Callable[[], Any]]) -> list[Any]:
        return _run(calls)

    def fold_at_once(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
    ) -> bool:
        if ids.shape[0] == 0 or state.num_segments == 0 or not _fusable(state, data, sorted_ids):
            return False
        _fold_fused(state, data, ids, state.next_row)
        return True

    def fold_block(
        self,
        state: ops.State,
        data: np.ndarray,
        ids: np.ndarray,
        *,
        sorted_ids: bool,
        first_row: int,
    ) -> None:
        if ids.shape[0] == 0 or state.num_segments == 0:
            return
        if _fold_joint(state, data, ids, first_row, sorted_ids):
            return
        if state.op.joint is not None or not _has_kernel(state.op.fold):
            # No compiled kernel for this primitive (yet): the NumPy engine's fold, which
            # gives the same bytes.
            NUMPY_ENGINE.fold_block(state, data, ids, sorted_ids=sorted_ids, first_row=first_row)
            return
        _announce_compilation()
        ids = _native(ids)
        if state.acc is None or data.shape[1] == 0:
            _count(state.count, ids, sorted_ids)
            return
        fold = state.op.fold
        assert fold is not None
        kind = _KERNEL_KINDS[fold.kind]
        data = _native(data)
        acc = state.acc
        if data.dtype.kind == "c":
            if kind != kernels.SUM:
                # A complex product is not a per-component fold; it is rare enough for NumPy.
                NUMPY_ENGINE.fold_block(
                    state, data, ids, sorted_ids=sorted_ids, first_row=first_row
                )
                return
            # A complex sum is two float sums: fold the real and imaginary parts as columns.
            data = np.ascontiguousarray(data).view(data.real.dtype)
            acc = acc.view(np.float64)
        if data.dtype == np.float16:
            _fold_half(state, kind, data, ids, sorted_ids, first_row)
        else:
            _fold_native(state, kind, data, ids, acc, sorted_ids, first_row)


ENGINE = NumbaEngine()
