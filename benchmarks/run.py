"""segcli's benchmark: workloads W1-W5 against the read limit and every peer that is installed.

    python benchmarks/run.py            # full sizes (20M rows), a few minutes on 2 cores
    python benchmarks/run.py --quick    # 1/20 of the sizes, well under a minute

In one run it builds the workloads (fixed seed), times ``np.sum(data)`` on each (the read
limit: one pass over the data), every segcli engine (the fold alone, and ``segment_reduce``
end to end in memory, validation included) and the peers that import (numpy-groupies, pandas,
polars, duckdb, pyarrow, NumPy's own ``ufunc.at`` / ``bincount`` / ``reduceat``, TensorFlow and
JAX if present), checks each answer against the NumPy engine, and records peak memory. Then it
times the CLI against a bare ``np.load`` of the same files, checks what ``segcli --help``
imports, and measures where ``--engine auto`` should switch to numba. It prints the report and
writes it to ``benchmarks/RESULTS.md``.

Timings are medians over several repeats after a warm-up; each ratio to the read limit divides
by ``np.sum(data)`` timed alternately with the call it judges (one of each per round), because
these machines are noisy. Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import segcli  # noqa: E402  (from this checkout)
from segcli import ops  # noqa: E402
from segcli.engines import get_engine  # noqa: E402
from segcli.errors import EngineUnavailableError  # noqa: E402

SEED = 20240601
#: Targets from issue 3: segcli's best engine over np.sum(data), per workload and op.
TARGETS = {
    "W1": {"sum": 1.5, "mean": 1.5, "min": 1.5},
    "W2": {"sum": 3.0, "mean": 3.0, "min": 3.0},
    "W3": {"sum": 1.5, "mean": 1.5, "min": 1.5},
    "W4": {"sum": 1.5, "mean": 1.5, "min": 3.0, "max": 3.0},
    "W5": {"sum": 1.5, "mean": 1.5, "min": 1.5},
}
ENGINES = ("numpy", "numba", "cupy")
#: --quick: fixed, few repeats (a smoke test of the harness, not a measurement).
QUICK = False

Fn = Callable[[], Any]


# --- workloads --------------------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    description: str
    data: np.ndarray
    ids: np.ndarray
    n: int
    sorted_ids: bool = False
    reference: dict[str, np.ndarray] = field(default_factory=dict)
    counts: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.ids.nbytes

    @property
    def ops(self) -> list[str]:
        return list(TARGETS[self.name])


def build_workloads(scale: float) -> list[Workload]:
    """W1-W5 of issue 3 (float32 unless stated, int32 ids), ``scale`` times the full size."""
    rng = np.random.default_rng(SEED)
    rows = int(20_000_000 * scale)
    data32 = rng.random(rows, dtype=np.float32)
    ids_1k = rng.integers(0, 1000, rows, dtype=np.int32)
    ids_1m = rng.integers(0, 1_000_000, rows, dtype=np.int32)
    wide_rows = int(1_000_000 * scale)
    wide = rng.random((wide_rows, 64), dtype=np.float32)
    wide_ids = rng.integers(0, 10_000, wide_rows, dtype=np.int32)
    return [
        Workload("W1", f"{rows:,} x f32, ids in [0, 1000)", data32, ids_1k, 1000),
        Workload("W2", f"{rows:,} x f32, ids in [0, 1M)", data32, ids_1m, 1_000_000),
        Workload("W3", "W1 with ids sorted, --sorted", data32, np.sort(ids_1k), 1000, True),
        Workload("W4", f"{wide_rows:,} x 64 f32, ids in [0, 10000)", wide, wide_ids, 10_000),
        Workload("W5", f"{rows:,} x f64, W1 ids", data32.astype(np.float64), ids_1k, 1000),
    ]


# --- measuring --------------------------------------------------------------------------------


def median_ms(fn: Fn, repeats: int) -> float:
    """Median wall time of ``fn`` after one warm-up call (which also compiles JIT peers)."""
    return paired_median_ms(fn, None, repeats)[0]


def paired_median_ms(fn: Fn, read: Fn | None, repeats: int) -> tuple[float, float]:
    """Median wall times of ``fn`` and of ``read``, timed alternately (one of each per round)
    after a warm-up of each, so that both see the same state of a noisy machine.

    Fast calls get more repeats (noise here comes in bursts), calls over half a second fewer.
    """
    started = time.perf_counter()
    fn()
    warm_up = time.perf_counter() - started
    if read is not None:
        read()
    if warm_up < 0.1 and not QUICK:
        fn()  # a second warm-up: the first call of a kind also faults in its memory
        repeats = max(repeats, 9)
    elif warm_up > 0.5:
        repeats = min(repeats, 3)
    times: list[float] = []
    read_times: list[float] = []
    for _ in range(repeats):
        for call, into in ((read, read_times), (fn, times)):
            if call is None:
                continue
            gc.collect()
            started = time.perf_counter()
            call()
            into.append(time.perf_counter() - started)
    read_ms = statistics.median(read_times) * 1e3 if read_times else float("nan")
    return statistics.median(times) * 1e3, read_ms


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_mb(fn: Fn) -> float:
    """Extra memory one call needs: NumPy's allocations (tracemalloc) or, for libraries that
    allocate natively, the rise of the resident set sampled while it runs; the larger."""
    gc.collect()
    if not os.path.exists("/proc/self/statm"):
        tracemalloc.start()
        fn()
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return traced / 2**20
    base = _rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_bytes())
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample, daemon=True)
    tracemalloc.start()
    sampler.start()
    try:
        fn()
    finally:
        done.set()
        sampler.join()
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return max(traced, peak[0] - base) / 2**20


def check(answer: np.ndarray, work: Workload, op: str) -> str:
    """Compare with the NumPy engine on the non-empty segments (peers omit empty groups)."""
    want = work.reference[op]
    assert work.counts is not None
    present = work.counts > 0
    try:
        got = np.asarray(answer).reshape(want.shape)[present].astype(np.float64)
    except ValueError as exc:
        return f"shape? {exc}"
    expected = want[present].astype(np.float64)
    if op in ("min", "max"):
        return "ok" if np.array_equal(got, expected, equal_nan=True) else "DIFFERS"
    scale = np.maximum(np.abs(expected), 1e-30)
    error = float(np.max(np.abs(got - expected) / scale)) if got.size else 0.0
    return "ok" if error <= 1e-3 else f"rel err {error:.1e}"


# --- segcli -----------------------------------------------------------------------------------


def segcli_compute(engine_name: str, work: Workload, op: str) -> Fn:
    """The engine alone: new state, fold, finalize (no validation, no engine choice)."""
    engine = get_engine(engine_name)
    op_def = ops.get_op(op)
    inner = work.data.shape[1:]
    rows = work.data.reshape(work.ids.size, -1)

    def run() -> np.ndarray:
        state = engine.new_state(op_def, work.n, inner, work.data.dtype, sorted_ids=work.sorted_ids)
        engine.fold(state, rows, work.ids, sorted_ids=work.sorted_ids)
        return ops.finalize(state.to_host())

    return run


def segcli_end_to_end(engine_name: str, work: Workload, op: str) -> Fn:
    return lambda: segcli.segment_reduce(
        work.data, work.ids, work.n, op, sorted=work.sorted_ids, engine=engine_name
    )


# --- peers: each returns a callable giving a dense (n,) + inner answer, or None if n/a -------


def _dense(work: Workload, keys: Any, values: Any) -> np.ndarray:
    """Scatter a group-by's (key, value) rows into an (n,) + inner array."""
    out = np.zeros((work.n, *work.data.shape[1:]), np.float64)
    values = np.asarray(values, dtype=np.float64)
    out[np.asarray(keys, dtype=np.int64)] = values.reshape(len(values), *work.data.shape[1:])
    return out


def _columns(work: Workload) -> dict[str, np.ndarray]:
    if work.data.ndim == 1:
        return {"v": work.data}
    return {f"v{j}": work.data[:, j] for j in range(work.data.shape[1])}


def peer_numpy_at(work: Workload, op: str) -> Fn | None:
    """``ufunc.at`` with the accumulator in the data's dtype (its fast path)."""
    ufunc = {"sum": np.add, "mean": np.add, "min": np.minimum, "max": np.maximum}[op]
    fill = {"sum": 0, "mean": 0, "min": np.inf, "max": -np.inf}[op]

    def run() -> np.ndarray:
        acc = np.full((work.n, *work.data.shape[1:]), fill, work.data.dtype)
        ufunc.at(acc, work.ids, work.data)
        if op == "mean":
            counts = np.bincount(work.ids, minlength=work.n)
            acc = acc / np.maximum(counts, 1).reshape((-1,) + (1,) * (acc.ndim - 1))
        return acc

    return run


def peer_bincount(work: Workload, op: str) -> Fn | None:
    if op not in ("sum", "mean") or work.data.ndim != 1:
        return None

    def run() -> np.ndarray:
        total = np.bincount(work.ids, weights=work.data, minlength=work.n)
        if op == "mean":
            total = total / np.maximum(np.bincount(work.ids, minlength=work.n), 1)
        return total

    return run


def peer_reduceat(work: Workload, op: str) -> Fn | None:
    """Sorted ids only: reduce each run with ``reduceat`` on the run starts."""
    if not work.sorted_ids:
        return None
    ufunc = {"sum": np.add, "mean": np.add, "min": np.minimum, "max": np.maximum}[op]

    def run() -> np.ndarray:
        starts = np.flatnonzero(np.diff(work.ids, prepend=work.ids[0] - 1))
        values = ufunc.reduceat(work.data, starts, axis=0)
        if op == "mean":
            values = values / np.diff(starts, append=work.ids.size)
        return _dense(work, work.ids[starts], values)

    return run


def peer_npg(implementation: str) -> Callable[[Workload, str], Fn | None]:
    def make(work: Workload, op: str) -> Fn | None:
        npg = importlib.import_module("numpy_groupies")
        aggregate = getattr(npg, f"aggregate_{implementation}")
        return lambda: aggregate(work.ids, work.data, func=op, size=work.n, axis=0)

    return make


def peer_pandas(work: Workload, op: str) -> Fn | None:
    pd = importlib.import_module("pandas")

    def run() -> np.ndarray:
        frame = pd.DataFrame(_columns(work))
        result = getattr(frame.groupby(work.ids), op)()
        return _dense(work, result.index.to_numpy(), result.to_numpy())

    return run


def peer_polars(work: Workload, op: str) -> Fn | None:
    pl = importlib.import_module("polars")
    names = list(_columns(work))

    def run() -> np.ndarray:
        frame = pl.DataFrame({"id": work.ids, **_columns(work)})
        result = frame.group_by("id").agg([getattr(pl.col(c), op)() for c in names])
        return _dense(work, result["id"].to_numpy(), result.select(names).to_numpy())

    return run


def peer_duckdb(work: Workload, op: str) -> Fn | None:
    duckdb = importlib.import_module("duckdb")
    pa = importlib.import_module("pyarrow")
    names = list(_columns(work))
    function = {"sum": "sum", "mean": "avg", "min": "min", "max": "max"}[op]
    query = "SELECT id, " + ", ".join(f"{function}({c})" for c in names) + " FROM t GROUP BY id"

    def run() -> np.ndarray:
        connection = duckdb.connect()
        connection.register("t", pa.table({"id": work.ids, **_columns(work)}))
        result = connection.execute(query).fetchnumpy()
        connection.close()
        values = np.column_stack([result[k] for k in list(result)[1:]])
        return _dense(work, result["id"], values)

    return run


def peer_pyarrow(work: Workload, op: str) -> Fn | None:
    pa = importlib.import_module("pyarrow")
    names = list(_columns(work))

    def run() -> np.ndarray:
        table = pa.table({"id": work.ids, **_columns(work)})
        result = table.group_by("id").aggregate([(c, op) for c in names])
        values = np.column_stack([result[f"{c}_{op}"].to_numpy() for c in names])
        return _dense(work, result["id"].to_numpy(), values)

    return run


def peer_jax(work: Workload, op: str) -> Fn | None:
    jax_ops = importlib.import_module("jax.ops")
    function = {
        "sum": "segment_sum",
        "mean": "segment_sum",
        "min": "segment_min",
        "max": "segment_max",
    }[op]

    def run() -> np.ndarray:
        kwargs = {"num_segments": work.n, "indices_are_sorted": work.sorted_ids}
        result = np.asarray(getattr(jax_ops, function)(work.data, work.ids, **kwargs))
        if op == "mean":
            counts = np.bincount(work.ids, minlength=work.n)
            result = result / np.maximum(counts, 1).reshape((-1,) + (1,) * (result.ndim - 1))
        return result

    return run


def peer_tensorflow(work: Workload, op: str) -> Fn | None:
    tf = importlib.import_module("tensorflow")
    function = getattr(tf.math, f"unsorted_segment_{op}")
    return lambda: function(work.data, work.ids, work.n).numpy()


#: name, module that must import, factory
PEERS: list[tuple[str, str, Callable[[Workload, str], Fn | None]]] = [
    ("np.ufunc.at", "numpy", peer_numpy_at),
    ("np.bincount", "numpy", peer_bincount),
    ("np.reduceat (sorted)", "numpy", peer_reduceat),
    ("numpy-groupies (numba)", "numpy_groupies", peer_npg("nb")),
    ("numpy-groupies (numpy)", "numpy_groupies", peer_npg("np")),
    ("pandas", "pandas", peer_pandas),
    ("polars", "polars", peer_polars),
    ("duckdb", "duckdb", peer_duckdb),
    ("pyarrow", "pyarrow", peer_pyarrow),
    ("jax", "jax", peer_jax),
    ("tensorflow", "tensorflow", peer_tensorflow),
]


def installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except Exception:  # a broken install is as good as none here
        return False
    return True


# --- the runs ---------------------------------------------------------------------------------


@dataclass
class Result:
    workload: str
    op: str
    who: str
    what: str  # "engine", "end-to-end", "peer"
    ms: float
    gbps: float
    x_read: float
    peak: float
    check: str
    x_peer: float = float("nan")


def measure(work: Workload, op: str, who: str, what: str, fn: Fn, repeats: int) -> Result:
    try:
        answer = fn()
        verdict = check(answer, work, op)
        # The read limit is timed again, alternately with ``fn``: the ratio is side by side.
        ms, read_ms = paired_median_ms(fn, lambda: np.sum(work.data), repeats)
        peak = peak_mb(fn)
    except Exception as exc:  # a peer that cannot do this workload is reported, not fatal
        return Result(
            work.name,
            op,
            who,
            what,
            float("nan"),
            float("nan"),
            float("nan"),
            float("nan"),
            f"error: {type(exc).__name__}: {str(exc)[:60]}",
        )
    gbps = work.nbytes / (ms / 1e3) / 1e9
    return Result(work.name, op, who, what, ms, gbps, ms / read_ms, peak, verdict)


def one_thread_numba(work: Workload, op: str, repeats: int) -> Result:
    """The numba fold held to one thread: what its threading buys (or, under load, costs)."""
    from segcli.engines import numba_engine

    threads = numba_engine.THREADS
    numba_engine.THREADS = 1
    try:
        fn = segcli_compute("numba", work, op)
        return measure(work, op, "segcli numba", "engine, 1 thread", fn, repeats)
    finally:
        numba_engine.THREADS = threads


@functools.cache
def _touch_kernel() -> Callable[[np.ndarray, np.ndarray], float] | None:
    """A compiled loop that reads two arrays once and sums them (None without numba)."""
    try:
        from numba import njit
    except ImportError:
        return None

    @njit(nogil=True, fastmath=True)
    def touch(values, ids):  # type: ignore[no-untyped-def]
        total = 0.0
        for i in range(values.shape[0]):
            total += values[i]
        for i in range(ids.shape[0]):
            total += ids[i]
        return total

    return touch


def read_floor(work: Workload, repeats: int) -> Result | None:
    """Two threads reading DATA and IDS once each, half per thread, and doing nothing else: no
    fold that reads both can be faster on this machine. ``np.sum(data)`` reads DATA alone."""
    touch = _touch_kernel()
    if touch is None:
        return None
    from concurrent.futures import ThreadPoolExecutor

    values, ids = work.data.reshape(-1), work.ids.reshape(-1)
    half_values, half_ids = values.size // 2, ids.size // 2
    halves = [
        (values[:half_values], ids[:half_ids]),
        (values[half_values:], ids[half_ids:]),
    ]
    with ThreadPoolExecutor(2) as pool:

        def run() -> None:
            list(pool.map(lambda pair: touch(*pair), halves))

        ms, read_ms = paired_median_ms(run, lambda: np.sum(work.data), repeats)
    gbps = work.nbytes / (ms / 1e3) / 1e9
    return Result(
        work.name,
        "-",
        "2 threads reading data + ids",
        "read floor",
        ms,
        gbps,
        ms / read_ms,
        0.0,
        "-",
    )


def available_engines() -> list[str]:
    names = []
    for name in ENGINES:
        try:
            get_engine(name)
        except EngineUnavailableError:
            continue
        names.append(name)
    return names


def run_workload(work: Workload, repeats: int, peers: list[tuple[str, Any]]) -> list[Result]:
    read_ms = median_ms(lambda: np.sum(work.data), repeats)
    results = [
        Result(
            work.name,
            "-",
            "np.sum(data)",
            "read limit",
            read_ms,
            work.data.nbytes / (read_ms / 1e3) / 1e9,
            1.0,
            0.0,
            "-",
        )
    ]
    floor = read_floor(work, repeats)
    if floor is not None:
        results.append(floor)
    for op in work.ops:
        reduction = segcli.reduce_arrays(
            work.data, work.ids, work.n, op, sorted=work.sorted_ids, engine="numpy"
        )
        work.reference[op], work.counts = reduction.result, reduction.counts
        rows: list[Result] = []
        for engine in available_engines():
            rows.append(
                measure(
                    work,
                    op,
                    f"segcli {engine}",
                    "engine",
                    segcli_compute(engine, work, op),
                    repeats,
                )
            )
            rows.append(
                measure(
                    work,
                    op,
                    f"segcli {engine}",
                    "end-to-end",
                    segcli_end_to_end(engine, work, op),
                    repeats,
                )
            )
        if "numba" in available_engines():
            rows.append(one_thread_numba(work, op, repeats))
        for name, factory in peers:
            fn = factory(work, op)
            if fn is not None:
                rows.append(measure(work, op, name, "peer", fn, repeats))
        best_peer = min(
            (r.ms for r in rows if r.what == "peer" and r.check == "ok"), default=float("nan")
        )
        for row in rows:
            row.x_peer = row.ms / best_peer
        results.extend(rows)
        print(
            f"  {work.name} {op}: "
            + ", ".join(
                f"{r.who}{'' if r.what == 'peer' else ' ' + r.what} {r.ms:.1f}" for r in rows
            ),
            flush=True,
        )
    return results


# --- start-up, CLI end to end, auto threshold -------------------------------------------------


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        check=False,
    )


def imported_modules(*args: str) -> tuple[set[str], float, str]:
    """Top-level modules a command imports, its total import time (s), and any error."""
    done = _python("-X", "importtime", *args)
    modules, total = set(), 0.0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = line.split("|")
            name = parts[-1].strip()
            modules.add(name)
            if not parts[-1].startswith("  ") and parts[1].strip().isdigit():
                total += int(parts[1]) / 1e6  # cumulative us of a top-level import
    error = "" if done.returncode == 0 else done.stderr.strip().splitlines()[-1][:100]
    return modules, total, error


def startup_report() -> list[str]:
    heavy = ["numpy", "numba", "pyarrow", "rich.console"]
    lines = [
        "| command | import time | imports numpy | numba | pyarrow | rich.console |",
        "|---|---|---|---|---|---|",
    ]
    for label, args in (
        ("import segcli.cli", ("-c", "import segcli.cli")),
        ("segcli --help", ("-m", "segcli", "--help")),
    ):
        modules, total, error = imported_modules(*args)
        flags = ["yes" if name in modules else "no" for name in heavy]
        note = f" (error: {error})" if error else ""
        lines.append(f"| `{label}`{note} | {total * 1e3:.0f} ms | " + " | ".join(flags) + " |")
    return lines


def _walls(commands: dict[str, list[str]], repeats: int) -> dict[str, tuple[float, str]]:
    """Median wall time of each command, one run of each per round (so a burst of noise on
    the machine falls on all of them), and the last line of a failure's stderr."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    errors = dict.fromkeys(commands, "")
    # As after a pip install, which compiles every module's bytecode: a first, untimed round
    # writes it where a development checkout's environment says not to.
    installed = {**os.environ}
    installed.pop("PYTHONDONTWRITEBYTECODE", None)
    for round_ in range(repeats + 1):
        for name, args in commands.items():
            if errors[name]:
                continue
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=installed
            )
            if round_:
                times[name].append(time.perf_counter() - started)
            if done.returncode != 0:
                errors[name] = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {name: (statistics.median(times[name]), errors[name]) for name in commands}


def cli_report(rows: int, repeats: int) -> list[str]:
    """``segcli sum`` on a .npy pair against a bare ``np.load`` of the same two files."""
    rng = np.random.default_rng(SEED)
    lines = [
        f"{rows:,}-row float32 data + int32 ids (.npy), wall time of a fresh process, "
        f"median of {repeats} rounds (each round runs every command once, so all see the same "
        "noise):",
        "",
        "| command | wall | x np.load | status |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as folder:
        a, b, out = (os.path.join(folder, f) for f in ("data.npy", "ids.npy", "out.npy"))
        np.save(a, rng.random(rows, dtype=np.float32))
        np.save(b, rng.integers(0, 1000, rows, dtype=np.int32))
        engines = ("auto", "numpy", "numba")
        commands = {"load": ["-c", f"import numpy as np; np.load({a!r}); np.load({b!r})"]}
        for engine in engines:
            commands[engine] = ["-m", "segcli", "sum", a, b, "-o", out, "-q", "--engine", engine]
        walls = _walls(commands, repeats)
        load = walls["load"][0]
        lines.append(f"| `np.load` both files | {load * 1e3:.0f} ms | 1.00 | |")
        for engine in engines:
            wall, error = walls[engine]
            status = f"pending: {error[:80]}" if error else "ok"
            lines.append(
                f"| `segcli sum A B -o out.npy -q --engine {engine}` | "
                f"{wall * 1e3:.0f} ms | {wall / load:.2f} | {status} |"
            )
        modules, _, error = imported_modules("-m", "segcli", "sum", a, b, "-o", out, "-q")
        lines += [
            "",
            f"A .npy run imports pyarrow: {'yes' if 'pyarrow' in modules else 'no'}"
            + (f" (error: {error})" if error else ""),
        ]
    return lines


AUTO_CODE = """
import sys, time
if sys.argv[4] == "hide-scipy":
    sys.modules["scipy"] = None  # numba's start-up imports scipy when it is there
import numpy as np
size, engine, op = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = np.random.default_rng(0)
data = rng.random(size, dtype=np.float32)
ids = rng.integers(0, 1000, size, dtype=np.int32)
import segcli
started = time.perf_counter()
segcli.segment_reduce(data, ids, 1000, op, engine=engine)
print(time.perf_counter() - started)
"""


def _first_call_ms(size: int, engine: str, op: str, scipy: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        done = _python("-c", AUTO_CODE, str(size), engine, op, scipy)
        times.append(float(done.stdout or "nan"))
    return statistics.median(times) * 1e3


def auto_report(sizes: list[int], repeats: int) -> list[str]:
    """First call of each engine in a fresh process (numba: import + cached-kernel load + run).

    numba's start-up imports scipy when scipy is installed (for BLAS); segcli does not depend on
    scipy, so the column without it is what a plain ``pip install segcli`` sees.
    """
    lines = [
        "First `segment_reduce` call in a fresh process (1-D float32 data, int32 ids, 1000 "
        "segments). numba's time includes importing numba and loading its cached kernels; "
        "numba's start-up also imports scipy when scipy is installed, so it is measured with "
        f"scipy hidden too (a plain `pip install segcli` has no scipy). Median of {repeats}:",
        "",
        "| elements | op | numpy | numba | numba, no scipy | faster |",
        "|---|---|---|---|---|---|",
    ]
    _python("-c", AUTO_CODE, "1000", "numba", "sum", "keep")  # the kernel cache is warm
    for op in ("sum", "min"):
        for size in sizes:
            numpy_ms = _first_call_ms(size, "numpy", op, "keep", repeats)
            numba_ms = _first_call_ms(size, "numba", op, "keep", repeats)
            bare_ms = _first_call_ms(size, "numba", op, "hide-scipy", repeats)
            faster = "numba" if numba_ms < numpy_ms else "numpy"
            if faster == "numpy" and bare_ms < numpy_ms:
                faster = "numba without scipy"
            lines.append(
                f"| {size:,} | {op} | {numpy_ms:.0f} ms | {numba_ms:.0f} ms | {bare_ms:.0f} ms "
                f"| {faster} |"
            )
    return lines


# --- the report -------------------------------------------------------------------------------


def _fmt(value: float, spec: str) -> str:
    return "-" if value != value else format(value, spec)  # NaN -> "-"


def targets_table(results: list[Result]) -> list[str]:
    lines = [
        "| workload | op | target | read floor | best engine (fold) | x read | met | "
        "best end-to-end | x read | met | best peer | x read |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload, per_op in TARGETS.items():
        floor = next(
            (r for r in results if r.workload == workload and r.what == "read floor"), None
        )
        floor_cell = f"{floor.x_read:.2f}x" if floor else "-"
        for op, target in per_op.items():
            rows = [r for r in results if r.workload == workload and r.op == op and r.check == "ok"]
            if not rows:
                continue
            cells = []
            for what in ("engine", "end-to-end"):
                best = min((r for r in rows if r.what == what), key=lambda r: r.ms, default=None)
                if best is None:
                    cells += ["-", "-", "-"]
                    continue
                met = "yes" if best.x_read <= target else "no"
                cells += [f"{best.who.split()[-1]} {best.ms:.1f} ms", f"{best.x_read:.2f}x", met]
            peer = min((r for r in rows if r.what == "peer"), key=lambda r: r.ms, default=None)
            cells += [f"{peer.who} {peer.ms:.1f} ms", f"{peer.x_read:.2f}x"] if peer else ["-", "-"]
            lines.append(
                f"| {workload} | {op} | <= {target}x | {floor_cell} | " + " | ".join(cells) + " |"
            )
    return lines


def detail_table(results: list[Result]) -> list[str]:
    lines = [
        "| workload | op | who | what | median ms | GB/s | x read | x best peer | "
        "peak MB | check |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.workload} | {r.op} | {r.who} | {r.what} | {_fmt(r.ms, '.1f')} | "
            f"{_fmt(r.gbps, '.1f')} | {_fmt(r.x_read, '.2f')} | {_fmt(r.x_peer, '.2f')} | "
            f"{_fmt(r.peak, '.0f')} | {r.check} |"
        )
    return lines


def machine_line() -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    versions = []
    for module in ("numpy", "numba", "numpy_groupies", "pandas", "polars", "duckdb", "pyarrow"):
        try:
            versions.append(f"{module} {importlib.import_module(module).__version__}")
        except Exception:
            continue
    return (
        f"{platform.processor() or platform.machine()}, {cores} cores, Python "
        f"{platform.python_version()}; " + ", ".join(versions)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1/20 of the sizes, fewer repeats")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = parser.parse_args(argv)
    scale, repeats = (0.05, 3) if args.quick else (1.0, 5)
    global QUICK
    QUICK = args.quick

    peers = [(name, factory) for name, module, factory in PEERS if installed(module)]
    missing = [name for name, module, _ in PEERS if not installed(module)]
    print(
        f"engines: {', '.join(available_engines())}; peers: {', '.join(n for n, _ in peers)}"
        + (f"; not installed: {', '.join(missing)}" if missing else ""),
        flush=True,
    )
    load_start = os.getloadavg()[0]
    results: list[Result] = []
    for work in build_workloads(scale):
        print(f"{work.name}: {work.description}", flush=True)
        results.extend(run_workload(work, repeats, peers))
        work.reference.clear()

    print("start-up, CLI and auto checks ...", flush=True)
    rows = int(20_000_000 * scale)
    sizes = [1_000_000] if args.quick else [20_000_000, 50_000_000, 100_000_000]
    cli_rounds = 3 if args.quick else 7
    startup, cli, auto = startup_report(), cli_report(rows, cli_rounds), auto_report(sizes, 3)
    report = [
        "# segcli benchmark results",
        "",
        f"`python benchmarks/run.py{' --quick' if args.quick else ''}` on {machine_line()}. "
        f"Load average (1 min): {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
        "end; other work on the machine shows up as noise, above all in two-thread runs.",
        "",
        "Times are medians of 3 to 9 runs (more for fast calls) after a warm-up; `x read` is the "
        "time over that of `np.sum(data)` on the same array (the read limit), timed alternately "
        "with it, one of each per round, so both see the same state of the machine. `engine` "
        "times the fold alone (state, fold, finalize); `end-to-end` is `segcli.segment_reduce` "
        "in memory, validation included; `engine, 1 thread` is the numba fold held to one "
        "thread. GB/s counts the bytes of data and ids (the read limit: data only). Peak MB is "
        "the extra memory of one call. Every answer "
        "is checked against the NumPy engine on the non-empty segments. `read floor` is two "
        "threads doing nothing but read data and ids once (half each), over the same `np.sum`: "
        "every fold reads both, so on this machine none can beat it.",
        "",
        "## Targets (issue 3)",
        "",
        *targets_table(results),
        "",
        "## Start-up (`python -X importtime`)",
        "",
        *startup,
        "",
        "## CLI end to end",
        "",
        *cli,
        "",
        "## Where `--engine auto` switches to numba",
        "",
        *auto,
        "",
        "## All measurements",
        "",
        *detail_table(results),
        "",
        f"Not installed here: {', '.join(missing) or 'none'}.",
        "",
    ]
    text = "\n".join(report) + companion_sections()
    args.out.write_text(text)
    print(text)
    return 0


#: Results of the other harnesses, each run on its own (they take minutes and big files).
COMPANIONS = {
    "STREAM_RESULTS.md": "Streaming (`python benchmarks/stream_bench.py`)",
    "DASK_RESULTS.md": "Dask (`python benchmarks/dask_bench.py`)",
    "STATS_RESULTS.md": (
        "The new ops and agg (`python benchmarks/stats_bench.py`, `benchmarks/agg_bench.py`)"
    ),
}


def companion_sections() -> str:
    """The latest streaming, Dask and statistics results, copied in so RESULTS.md holds every
    figure."""
    sections = []
    for name, title in COMPANIONS.items():
        path = ROOT / "benchmarks" / name
        if not path.exists():
            continue
        body = path.read_text().split("\n", 1)[1]  # drop the file's own title
        body = body.replace("\n## ", "\n### ")
        sections.append(f"\n## {title}, from {name}\n{body.rstrip()}\n")
    return "".join(sections)


if __name__ == "__main__":
    raise SystemExit(main())
