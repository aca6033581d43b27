"""``python -m segcli`` (and the ``segcli`` console script)."""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
from collections.abc import MutableMapping
from typing import NoReturn


def main() -> None:
    """Install the signal handlers before the heavy imports, so that an interrupt during
    start-up ends in one line and its exit code, not a traceback."""
    single_threaded_blas(os.environ)
    arrow_keeps_freed_memory(os.environ)
    try:
        from segcli.signals import checkpoint, install_handlers

        install_handlers()
        checkpoint("startup")
        from segcli.cli import main as cli_main
    except KeyboardInterrupt:  # before the handlers were in place
        _exit_interrupted(signal.SIGINT)
    except BaseException as error:
        from segcli.signals import Interrupted

        if not isinstance(error, Interrupted):
            raise
        _exit_interrupted(error.signum)
    try:
        cli_main()
        code: object = 0
    except SystemExit as leaving:
        code = leaving.code
    finally:
        no_collection_at_exit()
    leave(code)


def leave(code: object) -> NoReturn:
    """End the process with ``code`` (as ``sys.exit`` takes it) after Python's own exit work,
    the exit handlers and the streams' flush, but without the interpreter's teardown and the
    native libraries' static destructors.

    pyarrow's thread pools are torn down there while a streaming reader's worker may still be
    alive, which now and then ends a finished run in ``std::terminate`` (SIGABRT, exit -6;
    apache/arrow#34314): once seen here in a streamed JSON-lines run from a named pipe.
    """
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): said on stderr, exit 1
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()  # each runs once: the interpreter's exit below finds none left
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)  # a stream that cannot take its last bytes: the interpreter says so
    os._exit(code)


def single_threaded_blas(environ: MutableMapping[str, str]) -> None:
    """One OpenBLAS thread unless the user asked for more: segcli does no linear algebra, and
    NumPy's OpenBLAS starts a thread per core as it loads (some 50 ms of every run on two cores,
    more on many). Set before NumPy is imported, in the command's process only: library users
    keep their own setting."""
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def arrow_keeps_freed_memory(environ: MutableMapping[str, str]) -> None:
    """Arrow's allocator (mimalloc) keeps the memory a decoded block freed, for the next
    block, instead of handing it back to the system after 10 ms and faulting it in again: a
    streamed Parquet read reuses the same few block-sized buffers. ``--by`` over 30M rows
    took 0.54 s against 0.58 s (medians of 7 runs alternating), its system time a third less
    on the decoding alone. Peak memory is what the blocks held at once, as before. Set before
    pyarrow is loaded, in the command's process only."""
    environ.setdefault("MIMALLOC_PURGE_DELAY", "-1")


def no_collection_at_exit() -> None:
    """Leave every object alive now out of the collection the interpreter runs as it exits:
    once numba is imported it walks several hundred thousand objects that die with the process
    anyway (see ``benchmarks/STATS_RESULTS.md`` for what it saved). :func:`leave` then runs
    the exit handlers and flushes the standard streams; every output was closed before."""
    gc.freeze()


def _exit_interrupted(signum: int) -> None:
    from segcli.signals import exit_interrupted

    exit_interrupted(signum, written=False)


if __name__ == "__main__":
    main()
