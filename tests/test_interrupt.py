"""Ctrl-C: exit 130, a one-line message, and nothing left behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def test_interrupt_exits_130_and_leaves_no_file(tmp_path: Path):
    rows = 8_000_000
    np.save(tmp_path / "data.npy", np.ones(rows, np.float32))
    np.save(tmp_path / "ids.npy", np.zeros(rows, np.int32))
    out = tmp_path / "out.npy"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "segcli",
            "sum",
            "data.npy",
            "ids.npy",
            "--engine",
            "numpy",
            "--chunk-rows",
            "20",
            "-q",
            "-o",
            str(out),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)  # imports done, streaming under way (400,000 blocks take far longer)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert stderr.strip() == "segcli: interrupted; nothing was written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npy", "ids.npy"]
