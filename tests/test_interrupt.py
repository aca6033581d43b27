"""Ctrl-C mid-run: exit 130, a one-line message, and nothing left behind."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np

from tests.test_signals import start, stop

OUT = ("-o", "out.npy")


def test_interrupt_exits_130_and_leaves_no_file(tmp_path: Path):
    rows = 10_000
    np.save(tmp_path / "data.npy", np.ones(rows, np.float32))
    np.save(tmp_path / "ids.npy", np.zeros(rows, np.int32))
    (tmp_path / "out.npy").write_bytes(b"old")
    # The run waits at the "reduce" checkpoint (its output reserved, streaming about to start)
    # until the signal comes: no sleeping and hoping it got that far.
    process = start(
        ["sum", "data.npy", "ids.npy", "--engine", "numpy", "--chunk-rows", "20", "-q", *OUT],
        "reduce",
        tmp_path,
    )
    stderr = stop(process, signal.SIGINT)
    assert process.returncode == 130
    assert stderr == "segcli: interrupted; nothing was written\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npy", "ids.npy", "out.npy"]
    assert (tmp_path / "out.npy").read_bytes() == b"old"
