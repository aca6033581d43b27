"""GPU benchmark of the CuPy engine (issue 5's targets), in one run.

    python benchmarks/gpu_bench.py                 # 500M rows 1-D, 10M x 64 2-D, 200M rows e2e
    python benchmarks/gpu_bench.py --quick         # small sizes, a minute at most
    python benchmarks/gpu_bench.py --out report.md

Resident workloads keep data and ids on the device and time ``engine.fold`` with CUDA events
(the kernels plus the host round trips the fold makes); effective bandwidth is
``(data bytes + ids bytes) / time``, the issue's measure, with a target of 1 TB/s. Each is run
with the default (deterministic) engine and with ``fast_atomics``; a device-to-device copy of
the same bytes gives the memory's ceiling for context. Every result is checked against
``cupyx.scatter_add`` / ``scatter_min`` (floats within rounding).

The new mergeable ops (issue 14: var, std, argmin, argmax, first, last, any, all, logsumexp)
on W1 (float32 rows, int32 ids in [0, 1000)), resident, unsorted and ``--sorted``, each as a
ratio to ``sum`` on the same engine (the target: at most 2x); each is checked against the
NumPy engine on a prefix of the rows (the same bytes; logsumexp to the last bit, since
CUDA's ``exp`` is not NumPy's).

End to end: .npy files of float32 data and int32 ids, read through ``np.load(mmap_mode="r")``
and folded by the engine's pinned, double-buffered pipeline, against ``cupy.asarray`` of the
same bytes already in host memory (the target: within 1.25x). ``reduce_arrays`` (which also
validates the ids on the CPU, as the library is wired today) is timed beside it.

Prints a markdown report and writes it to ``--out`` (default ``benchmarks/GPU_RESULTS.md``).
Exits 0 with a message when CuPy or a CUDA device is missing.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from segcli import ops
from segcli.engines import get_engine
from segcli.errors import EngineUnavailableError

HERE = Path(__file__).resolve().parent
TARGET_TBS = 1.0
TARGET_E2E = 1.25

SIZES = {
    "full": {
        "rows_1d": 500_000_000,
        "rows_2d": 10_000_000,
        "rows_e2e": 200_000_000,
        "rows_ops": 100_000_000,
    },
    "quick": {
        "rows_1d": 20_000_000,
        "rows_2d": 1_000_000,
        "rows_e2e": 10_000_000,
        "rows_ops": 10_000_000,
    },
}
#: The ops of issue 14 that fold on the GPU, each timed against sum.
NEW_OPS = ("var", "std", "argmin", "argmax", "first", "last", "any", "all", "logsumexp")
TARGET_OP_RATIO = 2.0
#: Rows of the prefix each new op is checked on against the NumPy engine.
CHECK_ROWS = 1_000_000


def gpu_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of ``fn`` between two CUDA events on the current stream, after a warm-up
    (which compiles the kernels); returns the last result too."""
    import cupy

    result = fn()
    cupy.cuda.get_current_stream().synchronize()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        result = fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times), result


def wall_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Best wall-clock seconds of ``fn`` (which synchronizes itself), after a warm-up."""
    result = fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def fold_device(engine: Any, op: str, data: Any, ids: Any, n: int, sorted_ids: bool) -> Any:
    state = engine.new_state(
        ops.get_op(op), n, tuple(data.shape[1:]), np.dtype(data.dtype), sorted_ids=sorted_ids
    )
    engine.fold(state, data.reshape(ids.shape[0], -1), ids, sorted_ids=sorted_ids)
    if len(state.op.intermediates) != 1:
        return state.count  # a joint fold's state: timed, checked by new_op_rows
    return state.acc if state.acc is not None else state.count


def check(op: str, got: Any, data: Any, ids: Any, n: int) -> str:
    """Compare with CuPy's own scatter (atomics) on the device."""
    import cupy
    import cupyx

    width = int(np.prod(data.shape[1:], dtype=np.int64))
    flat = data.reshape(ids.shape[0], width)
    if op == "sum":
        want = cupy.zeros((n, width), cupy.float64)
        cupyx.scatter_add(want, ids.astype(cupy.int64), flat.astype(cupy.float64))
        ok = bool(cupy.allclose(got, want, rtol=1e-9, atol=1e-6))
    else:
        want = cupy.full((n, width), cupy.inf, flat.dtype)
        cupyx.scatter_min(want, ids.astype(cupy.int64), flat)
        ok = bool(cupy.array_equal(got, want))
    return "ok" if ok else "MISMATCH"


def resident_rows(sizes: dict[str, int], repeats: int) -> list[list[str]]:
    import cupy

    from segcli.engines import cupy_engine

    rng = cupy.random.default_rng(0)
    engines = {
        "": cupy_engine.ENGINE,
        " tree_reduce": cupy_engine.ENGINE.with_options(tree_reduce=True),
        " fast_atomics": cupy_engine.ENGINE.with_options(fast_atomics=True),
    }
    table = []

    def measure(name: str, engine: Any, op: str, data: Any, ids: Any, n: int, srt: bool) -> None:
        seconds, got = gpu_time(lambda: fold_device(engine, op, data, ids, n, srt), repeats)
        tbs = (data.nbytes + ids.nbytes) / seconds / 1e12
        verdict = "yes" if tbs >= TARGET_TBS else "no"
        table.append(
            [name, f"{seconds * 1e3:.2f}", f"{tbs:.3f}", verdict, check(op, got, data, ids, n)]
        )
        print(" | ".join(table[-1]), flush=True)
        del got

    def measure_all(label: str, data: Any, ids: Any, n: int, srt: bool) -> None:
        flag = " --sorted" if srt else ""
        for option, engine in engines.items():
            if not (srt and option == " fast_atomics"):
                measure(f"sum{flag}{option}, {label}", engine, "sum", data, ids, n, srt)
        measure(f"min{flag}, {label}", engines[""], "min", data, ids, n, srt)

    rows = sizes["rows_1d"]
    data = rng.random(rows, dtype=cupy.float32)
    ids = rng.integers(0, 1000, rows, dtype=cupy.int32)
    copy_s, _ = gpu_time(data.copy, repeats)
    table.append(
        [
            f"reference: device copy of {rows:,} float32 (read + write)",
            f"{copy_s * 1e3:.2f}",
            f"{2 * data.nbytes / copy_s / 1e12:.3f}",
            "",
            "",
        ]
    )
    label = f"{rows:,} rows 1-D float32, int32 ids in [0, 1000)"
    measure_all(label, data.reshape(rows, 1), ids, 1000, False)
    measure_all(label, data.reshape(rows, 1), cupy.sort(ids), 1000, True)
    del data, ids
    cupy.get_default_memory_pool().free_all_blocks()

    rows = sizes["rows_2d"]
    data = rng.random((rows, 64), dtype=cupy.float32)
    ids = rng.integers(0, 10_000, rows, dtype=cupy.int32)
    measure_all(f"{rows:,} x 64 float32, int32 ids in [0, 10000)", data, ids, 10_000, False)
    del data, ids
    cupy.get_default_memory_pool().free_all_blocks()
    return table


def same_as_numpy_engine(op: str, data: Any, ids: Any, sorted_ids: bool) -> str:
    """The CuPy engine against the NumPy engine on host copies of a prefix of the rows."""
    import segcli

    host_data = data[:CHECK_ROWS].get()
    host_ids = ids[:CHECK_ROWS].get()
    want = segcli.segment_reduce(host_data, host_ids, 1000, op, sorted=sorted_ids, engine="numpy")
    got = segcli.segment_reduce(host_data, host_ids, 1000, op, sorted=sorted_ids, engine="cupy")
    if op == "logsumexp":
        ok = bool(np.all(np.abs(got - want) <= np.spacing(np.abs(want))))
    else:
        ok = got.tobytes() == want.tobytes()
    return "ok" if ok else "MISMATCH"


def new_op_rows(sizes: dict[str, int], repeats: int) -> list[list[str]]:
    import cupy

    from segcli.engines import cupy_engine

    rows = sizes["rows_ops"]
    rng = cupy.random.default_rng(1)
    data = rng.random(rows, dtype=cupy.float32).reshape(rows, 1)
    unsorted_ids = rng.integers(0, 1000, rows, dtype=cupy.int32)
    table = []
    for sorted_ids, ids in ((False, unsorted_ids), (True, cupy.sort(unsorted_ids))):
        flag = " --sorted" if sorted_ids else ""
        args = (data, ids, 1000, sorted_ids)
        sum_s, _ = gpu_time(
            functools.partial(fold_device, cupy_engine.ENGINE, "sum", *args), repeats
        )
        table.append([f"sum{flag}", f"{sum_s * 1e3:.2f}", "1.00", "", ""])
        print(" | ".join(table[-1]), flush=True)
        for op in NEW_OPS:
            seconds, _ = gpu_time(
                functools.partial(fold_device, cupy_engine.ENGINE, op, *args), repeats
            )
            ratio = seconds / sum_s
            table.append(
                [
                    f"{op}{flag}",
                    f"{seconds * 1e3:.2f}",
                    f"{ratio:.2f}",
                    "yes" if ratio <= TARGET_OP_RATIO else "no",
                    same_as_numpy_engine(op, data, ids, sorted_ids),
                ]
            )
            print(" | ".join(table[-1]), flush=True)
    del data, unsorted_ids
    cupy.get_default_memory_pool().free_all_blocks()
    return table


def end_to_end_rows(sizes: dict[str, int], repeats: int, folder: Path) -> list[list[str]]:
    import cupy

    from segcli.core import reduce_arrays
    from segcli.engines import cupy_engine

    rows = sizes["rows_e2e"]
    rng = np.random.default_rng(0)
    data_path, ids_path = folder / "data.npy", folder / "ids.npy"
    np.save(data_path, rng.random(rows, dtype=np.float32))
    np.save(ids_path, rng.integers(0, 1000, rows, dtype=np.int32))
    total = data_path.stat().st_size + ids_path.stat().st_size

    def copy_in_memory(host_data: np.ndarray, host_ids: np.ndarray) -> None:
        cupy.asarray(host_data)
        cupy.asarray(host_ids)
        cupy.cuda.Device().synchronize()

    def engine_from_file(engine: Any, op: str) -> np.ndarray:
        data = np.load(data_path, mmap_mode="r").reshape(rows, 1)
        ids = np.load(ids_path, mmap_mode="r")
        state = engine.new_state(ops.get_op(op), 1000, (), data.dtype)
        engine.fold(state, data, ids, sorted_ids=False)
        return ops.finalize(state.to_host())

    def core_from_file() -> np.ndarray:
        data = np.load(data_path, mmap_mode="r")
        ids = np.load(ids_path, mmap_mode="r")
        return reduce_arrays(data, ids, 1000, "sum", engine="cupy").result

    copy_s, _ = wall_time(
        functools.partial(copy_in_memory, np.load(data_path), np.load(ids_path)), repeats
    )
    core_s, got_core = wall_time(core_from_file, repeats)
    table = [
        [
            f"cupy.asarray of the same bytes in host memory ({total / 1e9:.2f} GB)",
            f"{copy_s * 1e3:.1f}",
            f"{total / copy_s / 1e9:.1f}",
            "1.00",
            "",
        ]
    ]
    fast = cupy_engine.ENGINE.with_options(fast_atomics=True)
    runs = [
        ("reduce_arrays sum (CPU validation + default engine)", core_s, got_core, got_core),
    ]
    for name, engine, op in (
        ("engine fold sum, default", cupy_engine.ENGINE, "sum"),
        ("engine fold sum, fast_atomics", fast, "sum"),
        ("engine fold min, default", cupy_engine.ENGINE, "min"),
        ("engine fold count, default (ids only cross)", cupy_engine.ENGINE, "count"),
    ):
        seconds, got = wall_time(functools.partial(engine_from_file, engine, op), repeats)
        want = got_core if op == "sum" else got
        runs.append((f"{name}, from the .npy files", seconds, got, want))
    for name, seconds, got, want in runs:
        ratio = seconds / copy_s
        same = "ok" if np.allclose(got, want, rtol=1e-6) else "MISMATCH"
        table.append(
            [
                name,
                f"{seconds * 1e3:.1f}",
                f"{total / seconds / 1e9:.1f}",
                f"{ratio:.2f}",
                ("yes" if ratio <= TARGET_E2E else "no") + f", {same}",
            ]
        )
    for row in table:
        print(" | ".join(row), flush=True)
    return table


def markdown(title: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "GPU_RESULTS.md")
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the .npy files")
    args = parser.parse_args(argv)
    try:
        get_engine("cupy")
    except EngineUnavailableError as exc:
        print(f"gpu_bench: skipped, {exc}")
        return 0
    import cupy

    sizes = SIZES["quick" if args.quick else "full"]
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    head = (
        f"## CuPy engine benchmark ({'quick' if args.quick else 'full'})\n\n"
        f"Device: {device}, CuPy {cupy.__version__}, CUDA runtime "
        f"{cupy.cuda.runtime.runtimeGetVersion()}; median of {args.repeats} after a warm-up.\n"
    )
    print(head, flush=True)
    resident = resident_rows(sizes, args.repeats)
    new_ops = new_op_rows(sizes, args.repeats)
    with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
        e2e = end_to_end_rows(sizes, args.repeats, Path(folder))
    report = "\n".join(
        [
            head,
            markdown(
                f"Resident on the device (target >= {TARGET_TBS} TB/s)",
                ["workload", "ms", "TB/s", "target met", "check"],
                resident,
            ),
            markdown(
                f"New ops on W1, {sizes['rows_ops']:,} rows, resident "
                f"(target <= {TARGET_OP_RATIO}x sum)",
                ["op", "ms", "x sum", "target met", "NumPy engine's bytes"],
                new_ops,
            ),
            markdown(
                f"End to end from .npy (target <= {TARGET_E2E}x the copy)",
                ["path", "ms", "GB/s", "x copy", "target met, same result"],
                e2e,
            ),
        ]
    )
    args.out.write_text(report)
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
