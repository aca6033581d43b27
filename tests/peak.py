"""Run segcli in a fresh process and measure its peak resident memory.

The child reports its own peak (``VmHWM``) on its last stderr line as it exits. Not
``ru_maxrss``: that one keeps the peak of the forked test process across exec, so a large test
run before it would be counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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


def run_measured(*args: object, stdin: Path | None = None, piped: bool = False) -> Measured:
    """``segcli ARGS`` in a fresh process (reading ``stdin``, a file, if given; ``piped``:
    through a pipe, as ``cat FILE | segcli ...`` gives it): its exit code, peak RSS and
    stderr."""
    command = [sys.executable, "-c", _MEASURE, *map(str, args)]
    if piped:
        assert stdin is not None
        command = ["sh", "-c", 'cat "$0" | "$@"', str(stdin), *command]
    with open(stdin if stdin is not None and not piped else os.devnull, "rb") as feed:
        done = subprocess.run(
            command,
            stdin=feed,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    *lines, peak = done.stderr.splitlines()
    return Measured(done.returncode, int(peak) * 1024, "\n".join(lines))
