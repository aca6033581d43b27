"""Atomic file output: readers of the target see the old file or the complete new one."""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import BinaryIO, cast

from segcli.errors import SegcliError, WriteError

TEMP_PREFIX = ".segcli-"


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces ``path`` only if the ``with`` block succeeds.

    The data goes to a temporary file in the target's folder (same file system, so
    ``os.replace`` is atomic). On any exception, KeyboardInterrupt included, the temporary
    file is removed and an existing ``path`` is left untouched. OS errors become WriteErrors.
    A target that exists but is not a regular file (``/dev/null``, a FIFO) is written directly,
    since replacing it would be wrong.
    """
    existing = _stat(path)
    if existing is not None and stat.S_ISDIR(existing.st_mode):
        raise WriteError(f"{path}: is a directory")
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with _direct_output(path) as f:
            yield f
        return
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise WriteError(f"{path}: folder {folder} does not exist")
    try:
        tmp = tempfile.NamedTemporaryFile(dir=folder, prefix=TEMP_PREFIX, delete=False)  # noqa: SIM115
    except OSError as exc:
        raise WriteError(f"{path}: cannot create a file in {folder} ({_reason(exc)})") from exc
    try:
        with tmp:
            yield cast(BinaryIO, tmp.file)
        # mkstemp makes the file 0600; give it the mode a plain open() would have.
        mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o666 & ~_umask()
        os.chmod(tmp.name, mode)
        os.replace(tmp.name, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp.name)
        if isinstance(exc, OSError) and not isinstance(exc, SegcliError):
            raise WriteError(f"{path}: cannot write ({_reason(exc)})") from exc
        raise


@contextlib.contextmanager
def _direct_output(path: str) -> Iterator[BinaryIO]:
    try:
        with open(path, "wb") as f:
            yield f
    except OSError as exc:
        raise WriteError(f"{path}: cannot write ({_reason(exc)})") from exc


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise WriteError(f"{path}: cannot write ({_reason(exc)})") from exc


@functools.cache
def _umask() -> int:
    # The only portable way to read the umask is to set it and put it back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
