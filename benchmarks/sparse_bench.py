"""Embedding-bag benchmark: per-bag mean of gathered rows (``--indices``), one run.

    python benchmarks/sparse_bench.py [--scale 0.1]   # writes benchmarks/SPARSE_RESULTS.md

The workload of issue 16: a 1M x 64 float32 table, 20M indices in 1M bags (sorted bag ids,
bag sizes uniform around 20), per-bag mean. Each contender runs in its own process, so its peak
RSS (``VmHWM``) is its own: segcli's blocked fold (numpy and numba engines) against a NumPy
gather of all rows + ``np.add.reduceat``, and ``torch.nn.functional.embedding_bag`` (CPU) only
if torch is importable. Nothing here is a test; no time is asserted.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def make_inputs(folder: Path, scale: float) -> dict[str, int]:
    rng = np.random.default_rng(16)
    rows, width = int(1_000_000 * scale), 64
    picks, bags = int(20_000_000 * scale), int(1_000_000 * scale)
    np.save(folder / "table.npy", rng.random((rows, width), dtype=np.float32))
    np.save(folder / "ids.npy", np.sort(rng.integers(0, bags, picks)))
    np.save(folder / "indices.npy", rng.integers(0, rows, picks))
    return {"rows": rows, "width": width, "indices": picks, "bags": bags}


def _peak_bytes() -> int:
    with open("/proc/self/status") as status:
        kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    return int(kb) * 1024


def contender(name: str, folder: Path, bags: int) -> tuple[float, np.ndarray]:
    """Run one contender on the saved inputs: (seconds, per-bag means)."""
    table = np.load(folder / "table.npy")
    ids = np.load(folder / "ids.npy")
    indices = np.load(folder / "indices.npy")
    started = time.perf_counter()
    if name.startswith("segcli"):
        from segcli.sparse import Labeled, sparse_reduce

        engine = name.split()[1]
        result = sparse_reduce(
            Labeled(table, "table"),
            Labeled(ids, "ids"),
            bags,
            "mean",
            indices=Labeled(indices, "indices"),
            engine=engine,
        ).result
    elif name == "numpy gather + reduceat":
        gathered = table[indices]
        starts = np.searchsorted(ids, np.arange(bags))
        counts = np.diff(np.append(starts, ids.size))
        nonempty = counts > 0
        sums = np.zeros((bags, table.shape[1]), np.float32)
        sums[nonempty] = np.add.reduceat(gathered, starts[nonempty], axis=0)
        result = sums / np.maximum(counts, 1)[:, None]
    else:  # torch
        import torch

        offsets = np.searchsorted(ids, np.arange(bags))
        result = torch.nn.functional.embedding_bag(
            torch.from_numpy(indices),
            torch.from_numpy(table),
            torch.from_numpy(offsets),
            mode="mean",
        ).numpy()
    return time.perf_counter() - started, result


def child(name: str, folder: str, bags: int) -> None:
    seconds, result = contender(name, Path(folder), bags)
    np.save(Path(folder) / f"{name.replace(' ', '_')}.npy", result)
    print(f"{seconds} {_peak_bytes()}")


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def contenders() -> list[str]:
    names = ["segcli numpy", "segcli numba", "numpy gather + reduceat"]
    try:
        import torch  # noqa: F401

        names.append("torch embedding_bag")
    except ImportError:
        pass
    return names


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--child", nargs=3, metavar=("NAME", "FOLDER", "BAGS"))
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sizes = make_inputs(folder, args.scale)
        rows = []
        for name in contenders():
            done = subprocess.run(
                [sys.executable, __file__, "--child", name, tmp, str(sizes["bags"])],
                capture_output=True,
                text=True,
                check=True,
            )
            seconds, peak = done.stdout.split()
            rows.append((name, float(seconds), int(peak)))
        reference = np.load(folder / "numpy_gather_+_reduceat.npy")
        for name, *_ in rows:
            got = np.load(folder / f"{name.replace(' ', '_')}.npy")
            np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-6)
    (HERE / "SPARSE_RESULTS.md").write_text(report(sizes, rows, args.scale))
    print(report(sizes, rows, args.scale))


def report(sizes: dict[str, int], rows: list[tuple[str, float, int]], scale: float) -> str:
    table_bytes = sizes["rows"] * sizes["width"] * 4
    out_bytes = sizes["bags"] * sizes["width"] * 4
    numpy_s = next(s for n, s, _ in rows if n.startswith("numpy"))
    lines = [
        "# Embedding-bag benchmark (`--indices`, per-bag mean)",
        "",
        f"Machine: 2 shared cores. Scale {scale}: a {sizes['rows']:,} x {sizes['width']} "
        f"float32 table ({table_bytes / 2**20:.0f} MiB), {sizes['indices']:,} int64 indices "
        f"in {sizes['bags']:,} sorted bags; output {out_bytes / 2**20:.0f} MiB. Inputs are "
        "loaded before the clock starts; peak RSS is the whole process's (inputs included).",
        "The reference is a NumPy gather of every row + `np.add.reduceat`"
        + (
            f"; torch {_torch_version()} (CPU) was installed for this run."
            if any(n.startswith("torch") for n, _, _ in rows)
            else "; torch was not installed (TensorFlow is never run here)."
        ),
        "",
        "| contender | seconds | vs NumPy gather | peak RSS |",
        "|---|---:|---:|---:|",
    ]
    for name, seconds, peak in rows:
        lines.append(
            f"| {name} | {seconds:.2f} | {seconds / numpy_s:.2f}x | {peak / 2**20:,.0f} MiB |"
        )
    lines += [
        "",
        "Where segcli's memory goes: the inputs (table, ids and indices, as loaded), the fold's "
        "float64 sums (2x the float32 output), the division's float64 result and the float32 "
        "output; the gathered rows are folded in blocks of about 4 MiB and never held whole, "
        "which is the NumPy gather's extra `indices x 64 x 4` bytes. The issue's target "
        "(peak under 2x the output plus the table) is not met when the int64 ids and indices "
        "and the float64 accumulators are counted: they come from the op table's "
        "float64 accumulation (`segcli.ops`), which this change does not touch.",
        "The full-size run (20M indices) was not made on this shared 2-core machine: the NumPy "
        "reference alone needs a 5 GB gather; rerun with `--scale 1` where there is room.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
