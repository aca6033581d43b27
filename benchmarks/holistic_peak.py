"""Peak memory of ``segcli median`` through ``--tmp-dir`` on an input larger than memory's budget.

    python benchmarks/holistic_peak.py --dir /big/scratch              # 4 GB, minutes
    python benchmarks/holistic_peak.py --dir /tmp/x --rows 10000000    # a smoke test

Writes float32 values and int32 ids (1,000 segments, uniform) as two ``.npy`` files of
``rows * 4`` bytes each, block by block, then runs ``segcli median`` in a fresh process with
``--memory-limit`` and ``--tmp-dir`` and reports its peak resident memory (``VmHWM``, see
``tests/peak.py``), its time, and whether every partition file was removed. Prints one line of
Markdown for ``benchmarks/HOLISTIC_RESULTS.md``. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.peak import _MEASURE

BLOCK = 1 << 24


def write_inputs(folder: Path, rows: int) -> tuple[Path, Path]:
    data_path, ids_path = folder / "data.npy", folder / "ids.npy"
    if (
        data_path.exists()
        and ids_path.exists()
        and np.load(ids_path, mmap_mode="r").shape == (rows,)
    ):
        return data_path, ids_path
    rng = np.random.default_rng(0)
    data = open_memmap(data_path, "w+", np.float32, (rows,))
    ids = open_memmap(ids_path, "w+", np.int32, (rows,))
    for start in range(0, rows, BLOCK):
        stop = min(rows, start + BLOCK)
        data[start:stop] = rng.standard_normal(stop - start, np.float32)
        ids[start:stop] = rng.integers(0, 1000, stop - start, np.int32)
    data.flush()
    ids.flush()
    del data, ids
    return data_path, ids_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=500_000_000)
    parser.add_argument("--memory-limit", default="256MB")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    data, ids = write_inputs(args.dir, args.rows)
    scratch = args.dir / "scratch"
    scratch.mkdir(exist_ok=True)
    out = args.dir / "median.npy"
    started = time.perf_counter()
    # tests/peak.py's measurement, without its one-minute timeout.
    segcli = ["median", data, ids, "--memory-limit", args.memory_limit, "--tmp-dir", scratch]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *map(str, [*segcli, "-o", out])],
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    *lines, peak_kb = done.stderr.splitlines()
    mode = next((line for line in lines if line.strip().startswith("mode")), "").strip()
    left = sorted(p.name for p in scratch.iterdir())
    size = (data.stat().st_size + ids.stat().st_size) / 2**30
    print("\n".join(lines))
    print(
        f"| median, {args.rows:,} rows ({size:.1f} GiB), --memory-limit {args.memory_limit} "
        f"| exit {done.returncode} | {seconds:.0f} s | {int(peak_kb) / 1024:.0f} MiB "
        f"| {mode} | files left: {len(left)} |"
    )


if __name__ == "__main__":
    main()
