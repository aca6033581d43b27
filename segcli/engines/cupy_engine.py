"""The CuPy engine: segment reductions on an NVIDIA GPU, with the CPU engines' semantics.

Importing this module imports CuPy; without CuPy the import fails and the registry says
``pip install 'segcli[gpu]'``. With CuPy but no usable device, :meth:`unavailable_reason` says
so and ``get_engine("cupy")`` refuses, never falling back in silence.

The state lives on the device between folds (``ops.State`` with CuPy arrays); its
``to_host`` brings it back for ``ops.finalize``. A fold takes NumPy or CuPy arrays. Host rows
travel in fixed blocks (:data:`segcli.engines.cupy_fold.BLOCK_BYTES`): a producer thread copies each
block through two pinned buffers of :data:`CHUNK_BYTES` into one of two device buffers on a
copy stream, while the compute stream folds the previous block. The algorithms, and why they
are deterministic, are in :mod:`segcli.engines.cupy_fold`; the kernels in
:mod:`segcli.engines.cupy_kernels`.

By default every op gives the NumPy engine's bytes: order-independent ops exactly, and float
sums and products by folding each segment (each lane of it, see :mod:`segcli.ops`) strictly in
row order (parallel across segments, lanes and columns only). The joint folds (var, std,
argmin, argmax, first, last, logsumexp) always fold each segment in row order, whatever the
options; logsumexp's ``exp`` is CUDA's, which may differ from NumPy's in the last bit of a
term, so its results agree to rounding, not to the byte. NaN payloads aside: CUDA
arithmetic returns its canonical NaN, where x86 may keep an operand's payload or sign (min and
max copy the first NaN's bits, as the other engines do).

Options (``CupyEngine(...)`` or ``ENGINE.with_options(...)``):

- ``fast_atomics=True``: float sums, means and sqrt_n fold with float64 ``atomicAdd``; fastest,
  but the rounding then depends on the order the hardware applies the atomics, so two runs may
  differ in the last bits. Integers, min, max and count are exact either way.
- ``tree_reduce=True``: float sums and products fold in a fixed tree of pieces, parallel within
  each segment too; the same input and blocking give the same bytes, but they can differ from
  the NumPy engine (and from another blocking, as in streaming) by float rounding.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any, ClassVar

import cupy  # ImportError without CuPy: the registry turns it into the install hint
import cupyx
import numpy as np

from segcli import ops
from segcli.engines import cupy_kernels as K
from segcli.engines.base import Engine
from segcli.engines.cupy_fold import (
    BLOCK_BYTES,
    FoldOptions,
    fold_block,
    plan_blocks,
    refuse_without_kernel,
)

#: Host-to-device transfers go through two pinned buffers of this many bytes (data + ids).
CHUNK_BYTES = 64 << 20

#: What the engine needs, said when it cannot run.
_NEEDS = "; segcli[gpu] needs an NVIDIA GPU and its CUDA driver"

#: Host copies into pinned memory larger than this are split across threads.
_PARALLEL_COPY_BYTES = 8 << 20


# --- kernels ---------------------------------------------------------------------------------


@cache
def _kernel(source: str, name: str) -> cupy.RawKernel:
    """Compiled once per source per process (CuPy also caches the binary on disk)."""
    return cupy.RawKernel(source, name, options=K.OPTIONS)


def _grid(total: int, cap: int) -> int:
    return max(1, min(cap, -(-total // K.THREADS)))


@cache
def _multiprocessors(device: int) -> int:
    return int(cupy.cuda.Device(device).attributes["MultiProcessorCount"])


class CudaKernels:
    """The kernel table of :class:`segcli.engines.cupy_fold.Kernels`, launched on the current
    stream of the current device."""

    def scatter(
        self, mode: str, ids: Any, vals: Any, slots: Any, count: Any, n: int, width: int
    ) -> None:
        rows = int(ids.shape[0])
        has_acc = mode != "count"
        shared_slots = n * (width + 1) if has_acc else n
        shared = shared_slots <= K.SHARED_SLOTS
        value_type = K.c_type(vals.dtype) if has_acc else None
        kernel = _kernel(
            K.scatter_source(mode, K.c_type(ids.dtype), value_type, shared), "seg_scatter"
        )
        total = rows * width if has_acc else rows
        if total == 0:
            return
        # A privatised block pays for initialising and publishing its slots: a few blocks per
        # multiprocessor. Global atomics: enough blocks to cover the rows, grid-stride beyond.
        cap = 4 * _multiprocessors(cupy.cuda.Device().id) if shared else 1 << 20
        kernel(
            (_grid(total, cap),),
            (K.THREADS,),
            (
                ids,
                vals if has_acc else ids,  # unread when counting only
                slots if has_acc else count,
                count,
                np.int64(rows),
                np.int64(width),
                np.int64(n),
            ),
            shared_mem=8 * shared_slots if shared else 0,
        )

    def fold_pieces(
        self,
        combine: str,
        acc_kind: str,
        src: Any,
        order: Any,
        starts: Any,
        segs: Any,
        dst: Any,
        width: int,
        from_acc: bool,
    ) -> None:
        pieces = int(starts.shape[0]) - 1
        source = K.fold_pieces_source(
            combine, acc_kind, K.c_type(src.dtype), order is not None, from_acc
        )
        total = pieces * width
        if total == 0:
            return
        _kernel(source, "seg_fold_pieces")(
            (_grid(total, 1 << 20),),
            (K.THREADS,),
            (
                src,
                starts if order is None else order,  # unread when not ordered
                starts,
                starts if segs is None else segs,  # unread when not folding into dst
                dst,
                np.int64(pieces),
                np.int64(width),
            ),
        )

    def joint(
        self,
        fold: str,
        value_type: str,
        src: Any,
        order: Any,
        gathered: bool,
        starts: Any,
        segs: Any,
        count: Any,
        arrays: tuple[Any, ...],
        width: int,
        first_row: int,
    ) -> None:
        pieces = int(starts.shape[0]) - 1
        total = pieces * width
        if total == 0:
            return
        source = K.joint_source(fold, value_type, order is not None, gathered)
        _kernel(source, "seg_joint")(
            (_grid(total, 1 << 20),),
            (K.THREADS,),
            (
                src,
                starts if order is None else order,  # unread when not ordered
                starts,
                segs,
                count,
                *arrays,
                np.int64(pieces),
                np.int64(width),
                np.int64(first_row),
            ),
        )


# --- host-to-device transfer -----------------------------------------------------------------


def _native(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """CuPy arrays are native-endian; a big-endian .npy is swapped on the host copy."""
    return np.dtype(dtype).newbyteorder("=")


def _on_device(array: Any) -> Any:
    """A CuPy array as is; a host array copied over whole (native byte order)."""
    if isinstance(array, cupy.ndarray):
        return array
    host = np.asarray(array)
    return cupy.asarray(np.ascontiguousarray(host, dtype=_native(host.dtype)))


class _Uploader:
    """Moves host blocks to the device while the caller folds the previous block.

    A producer thread, per block: take a free device slot (two slots, each one block of data
    and ids), make the copy stream wait until the compute stream has finished with that slot,
    then copy the block chunk by chunk: host rows into one of two pinned buffers (threads split
    large copies), an asynchronous copy from it to the slot, an event that says when the pinned
    buffer may be refilled. The consumer makes the compute stream wait for the slot's last copy,
    folds, records that the slot is consumed, and gives it back.
    """

    def __init__(
        self,
        data: np.ndarray,
        ids: np.ndarray,
        plan: list[tuple[int, int]],
        pool: ThreadPoolExecutor,
        workers: int,
    ) -> None:
        self._data, self._ids, self._plan = data, ids, plan
        self._pool, self._workers = pool, workers
        width = int(data.shape[1])
        data_dtype, ids_dtype = _native(data.dtype), _native(ids.dtype)
        block_rows = max(stop - start for start, stop in plan)
        row_bytes = width * data_dtype.itemsize + ids_dtype.itemsize
        self._chunk_rows = max(1, min(block_rows, CHUNK_BYTES // row_bytes))
        self._device = cupy.cuda.Device().id
        self._dev = [
            (cupy.empty((block_rows, width), data_dtype), cupy.empty(block_rows, ids_dtype))
            for _ in range(2)
        ]
        self._pinned = [
            (
                cupyx.empty_pinned((self._chunk_rows, width), data_dtype),
                cupyx.empty_pinned(self._chunk_rows, ids_dtype),
            )
            for _ in range(2)
        ]
        self._pinned_free = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]
        self._copied = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]
        self._consumed = [cupy.cuda.Event(disable_timing=True) for _ in range(2)]
        self._copy_stream = cupy.cuda.Stream(non_blocking=True)
        self._free_slots: queue.Queue[int] = queue.Queue()
        self._ready: queue.Queue[tuple[int, int] | BaseException] = queue.Queue()
        self._stop = threading.Event()
        for slot in range(2):
            self._free_slots.put(slot)
        self._thread = threading.Thread(target=self._produce, name="segcli-upload", daemon=True)

    def __enter__(self) -> _Uploader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for slot in range(2):
            self._free_slots.put(slot)  # unblock a producer waiting for a slot
        self._thread.join()
        self._copy_stream.synchronize()

    def blocks(self, compute: cupy.cuda.Stream) -> Iterator[tuple[Any, Any]]:
        """The blocks on the device, in plan order, ready on ``compute``."""
        for _ in self._plan:
            item = self._ready.get()
            if isinstance(item, BaseException):
                raise item
            slot, rows = item
            compute.wait_event(self._copied[slot])
            data, ids = self._dev[slot]
            yield data[:rows], ids[:rows]
            self._consumed[slot].record(compute)
            self._free_slots.put(slot)

    def _produce(self) -> None:
        try:
            with cupy.cuda.Device(self._device):
                chunk = 0
                for start, stop in self._plan:
                    slot = self._free_slots.get()
                    if self._stop.is_set():
                        return
                    self._copy_stream.wait_event(self._consumed[slot])
                    for at in range(start, stop, self._chunk_rows):
                        end = min(stop, at + self._chunk_rows)
                        self._upload(slot, at - start, at, end, chunk % 2)
                        chunk += 1
                    self._copied[slot].record(self._copy_stream)
                    self._ready.put((slot, stop - start))
        except BaseException as exc:  # handed to the consumer, which raises it
            self._ready.put(exc)

    def _upload(self, slot: int, offset: int, start: int, stop: int, buffer: int) -> None:
        rows = stop - start
        pinned_data, pinned_ids = self._pinned[buffer]
        self._pinned_free[buffer].synchronize()  # its previous copy to the device is done
        _host_copy(pinned_data[:rows], self._data[start:stop], self._pool, self._workers)
        _host_copy(pinned_ids[:rows], self._ids[start:stop], self._pool, self._workers)
        dev_data, dev_ids = self._dev[slot]
        dev_data[offset : offset + rows].set(pinned_data[:rows], stream=self._copy_stream)
        dev_ids[offset : offset + rows].set(pinned_ids[:rows], stream=self._copy_stream)
        self._pinned_free[buffer].record(self._copy_stream)


def _host_copy(dst: np.ndarray, src: np.ndarray, pool: ThreadPoolExecutor, workers: int) -> None:
    """``dst[...] = src`` (any strides or byte order), split across threads when large: NumPy
    releases the GIL while it copies, and reading a memory-mapped file gains the most."""
    parts = min(workers, dst.shape[0], max(1, dst.nbytes // _PARALLEL_COPY_BYTES))
    if parts <= 1:
        np.copyto(dst, src, casting="equiv")
        return
    bounds = np.linspace(0, dst.shape[0], parts + 1).astype(int)
    futures = [
        pool.submit(np.copyto, dst[a:b], src[a:b], casting="equiv")
        for a, b in itertools.pairwise(bounds)
    ]
    for future in futures:
        future.result()


# --- the engine ------------------------------------------------------------------------------


class CupyEngine(Engine):
    """Segment reductions on a CUDA device with CuPy; see the module docstring for options."""

    name: ClassVar[str] = "cupy"
    xp: ClassVar[Any] = cupy

    def __init__(
        self,
        *,
        fast_atomics: bool = False,
        tree_reduce: bool = False,
        block_bytes: int = BLOCK_BYTES,
    ) -> None:
        self.options = FoldOptions(fast_atomics=fast_atomics, tree_reduce=tree_reduce)
        self.block_bytes = block_bytes
        self._kernels = CudaKernels()
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def with_options(self, **options: Any) -> CupyEngine:
        """A copy with other options, e.g. ``ENGINE.with_options(fast_atomics=True)``."""
        current = {
            "fast_atomics": self.options.fast_atomics,
            "tree_reduce": self.options.tree_reduce,
            "block_bytes": self.block_bytes,
        }
        return CupyEngine(**{**current, **options})

    def unavailable_reason(self) -> str | None:
        try:
            devices = cupy.cuda.runtime.getDeviceCount()
        except Exception as exc:  # CUDARuntimeError, or a driver that cannot even load
            return f"CuPy {cupy.__version__} finds no usable CUDA device ({exc}){_NEEDS}"
        if devices < 1:
            return f"CuPy {cupy.__version__} finds no CUDA device{_NEEDS}"
        return None

    def fold_block(
        self, state: ops.State, data: Any, ids: Any, *, sorted_ids: bool, first_row: int
    ) -> None:
        """Fold rows (``data`` 2-D, ``ids`` 1-D; NumPy or CuPy) into the device state."""
        refuse_without_kernel(state.op)
        self._to_device(state)
        rows = int(ids.shape[0])
        if rows == 0 or state.num_segments == 0:
            return
        data_dtype, ids_dtype = np.dtype(data.dtype), np.dtype(ids.dtype)
        row_bytes = int(data.shape[1]) * data_dtype.itemsize + ids_dtype.itemsize
        plan = plan_blocks(rows, row_bytes, self.block_bytes)
        if not state.op.intermediates or data.shape[1] == 0:
            # Counting needs only the ids: no data crosses the bus.
            data = cupy.empty((rows, 0), _native(data_dtype))
        resident = isinstance(data, cupy.ndarray) or isinstance(ids, cupy.ndarray)
        with self._lock:
            if resident or rows * row_bytes <= CHUNK_BYTES:
                # On the device already, or too small to pay for the pipeline: one plain copy.
                data, ids = _on_device(data), _on_device(ids)
                for start, stop in plan:
                    block = (data[start:stop], ids[start:stop])
                    self._fold_resident(state, *block, sorted_ids, first_row + start)
                return
            compute = cupy.cuda.get_current_stream()
            uploader = _Uploader(np.asarray(data), np.asarray(ids), plan, *self._threads())
            with uploader as up:
                for (start, _), (block_data, block_ids) in zip(
                    plan, up.blocks(compute), strict=True
                ):
                    self._fold_resident(state, block_data, block_ids, sorted_ids, first_row + start)

    def _fold_resident(
        self, state: ops.State, data: Any, ids: Any, sorted_ids: bool, first_row: int
    ) -> None:
        fold_block(
            state,
            data,
            cupy.ascontiguousarray(ids),
            sorted_ids=sorted_ids,
            kernels=self._kernels,
            xp=cupy,
            options=self.options,
            first_row=first_row,
        )

    def _to_device(self, state: ops.State) -> None:
        """A state made elsewhere (``ops.new_state`` on the host) moves to the device."""
        if state.xp is not cupy:
            state.arrays = state.transferred(cupy.asarray).arrays

    def _threads(self) -> tuple[ThreadPoolExecutor, int]:
        """The host-copy threads, made on first use (a process that never folds host rows on
        a GPU starts none)."""
        workers = max(1, min(8, os.cpu_count() or 1))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="segcli-copy")
        return self._pool, workers


ENGINE = CupyEngine()
