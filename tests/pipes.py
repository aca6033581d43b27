"""Named pipes for tests: a path a thread writes once, as a shell's ``<(...)`` would."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def fifo_fed_with(tmp_path: Path, payload: bytes, name: str = "pipe") -> Path:
    """A named pipe ``name`` (made again if one is there) that a thread writes ``payload``
    into once, when a reader opens it."""
    fifo = tmp_path / name
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as pipe:
            pipe.write(payload)

    threading.Thread(target=feed, daemon=True).start()
    return fifo
