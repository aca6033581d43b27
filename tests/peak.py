"""Run segcli in a fresh process and measure its peak resident memory.

The child reports its own peak (``VmHWM``) on its last stderr line as it exits. Not
``ru_maxrss``: that one keeps the peak of the forked test process across exec, so a large test
run before it would be counted.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

_MEASURE = """
import atexit, sys
def peak():
    with open("/proc/self/status") as status:
        kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    print(kb, file=sys.stderr)
atexit.register(peak)
sys.argv = ["segcli", *sys.argv[1:]]
from segcli.cli import main
main()
"""


@dataclass
class Measured:
    returncode: int
    peak_bytes: int
    stderr: str  # without the peak line


def run_measured(*args: object) -> Measured:
    """``segcli ARGS`` in a fresh process: its exit code, peak RSS and stderr."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    *lines, peak = done.stderr.splitlines()
    return Measured(done.returncode, int(peak) * 1024, "\n".join(lines))
