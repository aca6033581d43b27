"""Record batches of a Parquet file, in file order, decoded by two readers at once.

Decoding is most of a streamed Parquet run's work (a float column and two dictionary-coded
keys: about 0.55 s of CPU for 30M rows, against 0.2 s for the fold), and one Arrow reader
decodes one row group after the other. Arrow decodes without the GIL, so two threads, each
with a reader of its own, take turns over stripes of consecutive row groups; the consumer
takes the stripes back in the file's order, so every later step sees the rows exactly as a
single reader gives them.

Each reader decodes batch by batch, with one batch waiting in its queue: two readers hold
about twice the batches of one. But Arrow's reader holds a row group's column chunks whole as
it decodes them, so files whose row groups are large next to the run's blocks (a block is an
eighth of ``--memory-limit`` at most) are read by one reader, as before.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from queue import Empty, Full, Queue
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

#: Readers at once: one per core of the machines segcli is built on (two).
READERS = 2
#: A stripe holds at least this many batches of rows (consecutive row groups): a reader's
#: start on a stripe costs about as much as decoding a few thousand rows.
STRIPE_BATCHES = 2
#: The largest row group, in batches, that two readers decode at once.
GROUP_BATCHES = 2

OpenFile = Callable[[], "pq.ParquetFile"]
#: What a reader's queue carries: (True, a batch or the end of a stripe) or (False, an error).
_Item = tuple[bool, Any]
_END_OF_STRIPE = None


def parquet_batches(
    open_file: OpenFile, columns: Sequence[str], rows: int, *, arrow_threads: bool = False
) -> Generator[pa.RecordBatch, None, None]:
    """Batches of at most ``rows`` rows of ``columns``; ``open_file`` opens a new reader of
    the file (each thread has its own). A file of one stripe, or of large row groups, is read
    by one reader, on Arrow's own threads with ``arrow_threads``."""
    parquet = open_file()
    metadata = parquet.metadata
    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    stripes = _stripes(sizes, rows)
    if len(stripes) < 2 or max(sizes) > GROUP_BATCHES * rows:
        yield from parquet.iter_batches(
            batch_size=rows, columns=list(columns), use_threads=arrow_threads
        )
        return
    readers = [
        _Reader(open_file, list(columns), rows, stripes[turn::READERS]) for turn in range(READERS)
    ]
    try:
        for stripe in range(len(stripes)):
            yield from readers[stripe % READERS].stripe()
    finally:
        for reader in readers:
            reader.stop()


def _stripes(groups: list[int], rows: int) -> list[list[int]]:
    """Consecutive row groups in stripes of at least ``STRIPE_BATCHES * rows`` rows (the last
    may hold fewer)."""
    stripes: list[list[int]] = []
    current: list[int] = []
    held = 0
    for group, size in enumerate(groups):
        current.append(group)
        held += size
        if held >= STRIPE_BATCHES * rows:
            stripes.append(current)
            current, held = [], 0
    if current:
        stripes.append(current)
    return stripes


class _Reader:
    """One thread decoding its stripes in turn, each as batches then an end marker."""

    def __init__(
        self, open_file: OpenFile, columns: list[str], rows: int, stripes: list[list[int]]
    ) -> None:
        self._queue: Queue[_Item] = Queue(maxsize=1)
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run,
            args=(open_file, columns, rows, stripes),
            name="segcli-parquet",
            daemon=True,
        )
        with _live_lock:
            _live.add(self)
        self._thread.start()

    def _run(
        self, open_file: OpenFile, columns: list[str], rows: int, stripes: list[list[int]]
    ) -> None:
        try:
            parquet = open_file()
            for groups in stripes:
                batches: Iterator[pa.RecordBatch] = parquet.iter_batches(
                    batch_size=rows, row_groups=groups, columns=columns, use_threads=False
                )
                for batch in batches:
                    if not self._put((True, batch)):
                        return
                if not self._put((True, _END_OF_STRIPE)):
                    return
        except BaseException as error:  # handed to the consumer, raised there
            self._put((False, error))
        finally:
            with _live_lock:
                _live.discard(self)

    def _put(self, item: _Item) -> bool:
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except Full:
                continue
        return False

    def stripe(self) -> Iterator[pa.RecordBatch]:
        """The batches of this reader's next stripe."""
        while True:
            ok, item = self._queue.get()
            if not ok:
                raise item
            if item is _END_OF_STRIPE:
                return
            yield item

    def stop(self) -> None:
        """Stop after the batch being decoded, and wait for that (a few milliseconds)."""
        self._stopped.set()
        with contextlib.suppress(Empty):  # a reader waiting to put takes the stop at once
            self._queue.get_nowait()
        if threading.current_thread() is not self._thread:
            self._thread.join()


#: Readers whose thread has not ended. A thread still in Arrow's decoder as the interpreter
#: ends aborts the process (its C++ is torn down under it), whatever the exit code chosen, so
#: the readers of a run that ended early without closing its batches are stopped at exit.
_live: set[_Reader] = set()
_live_lock = threading.Lock()


@atexit.register
def _stop_live_readers() -> None:
    with _live_lock:
        readers = list(_live)
    for reader in readers:
        reader.stop()
