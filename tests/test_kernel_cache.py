"""The numba kernel cache holds pickles: it is used only from a folder nobody else can write,
and a cache file that does not load costs a recompile, never the run."""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="numba is not installed"
)

ROOT = Path(__file__).resolve().parent.parent


class _Planted:
    """An index entry that, once unpickled, creates the file it names."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    data, ids = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data, np.array([1.0, 2.0, 4.0]))
    np.save(ids, np.array([0, 1, 1]))
    return data, ids


def run_with_cache(command: list[str], cache: Path, **env: str) -> subprocess.CompletedProcess:
    """``command`` in a fresh process whose kernels cache in ``cache``."""
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    environ.update({"NUMBA_CACHE_DIR": str(cache), **env})
    return subprocess.run(
        command, capture_output=True, text=True, env=environ, cwd=ROOT, timeout=300
    )


def segcli_run(inputs: tuple[Path, Path], cache: Path, **env: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "segcli", "sum", *map(str, inputs), "--engine", "numba"]
    return run_with_cache([*command, "-q"], cache, **env)


def index_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.nbi"))


def test_a_folder_others_can_write_is_never_loaded(tmp_path, inputs):
    cache = tmp_path / "cache"
    assert segcli_run(inputs, cache).returncode == 0
    marker = tmp_path / "ran-foreign-code"
    for index in index_files(cache):
        index.write_bytes(pickle.dumps(_Planted(marker)))
    cache.chmod(0o777)
    done = segcli_run(inputs, cache)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\t1.0\n1\t6.0\n"
    assert not marker.exists()
    [note] = [line for line in done.stderr.splitlines() if "kernel cache" in line]
    assert note == (
        f"segcli: not using the kernel cache {cache} (writable by group or others "
        "(mode 777)); compiling into a private temporary folder"
    )


@pytest.mark.full_matrix  # a fresh numba cache compiles for seconds: CI's second line
def test_a_corrupt_cache_recovers_by_recompiling(tmp_path, inputs):
    cache = tmp_path / "cache"
    assert segcli_run(inputs, cache).returncode == 0
    indexes = index_files(cache)
    assert indexes
    for index in indexes:
        index.write_bytes(b"garbage, not a pickle")
    for _ in range(2):  # the second run finds the index the first one rewrote
        done = segcli_run(inputs, cache)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "0\t1.0\n1\t6.0\n"
        assert "Error" not in done.stderr
    assert all(index.read_bytes() != b"garbage, not a pickle" for index in index_files(cache))


def test_the_private_folder_is_removed_when_an_interrupt_ends_the_run(tmp_path, inputs):
    # An interrupt ends the process with os._exit, which runs no atexit function: the private
    # folder stayed in the system's temporary directory after every Ctrl-C.
    import select
    import signal

    from segcli.signals import CHECKPOINT_ENV, CHECKPOINT_FD_ENV

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    ready_read, ready_write = os.pipe()
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    environ |= {
        "NUMBA_CACHE_DIR": str(cache),
        "TMPDIR": str(system_tmp),
        CHECKPOINT_ENV: "staged",
        CHECKPOINT_FD_ENV: str(ready_write),
    }
    args = ["sum", *map(str, inputs), "--engine", "numba", "-q", "-o", str(tmp_path / "o.npy")]
    with subprocess.Popen(
        [sys.executable, "-m", "segcli", *args],
        env=environ,
        pass_fds=(ready_write,),
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        os.close(ready_write)
        try:
            readable, _, _ = select.select([ready_read], [], [], 300)
            assert readable and os.read(ready_read, 1) == b"!", process.communicate()[1]
        finally:
            os.close(ready_read)
        assert [p.name[:13] for p in system_tmp.iterdir()] == ["segcli-numba-"]
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert list(system_tmp.iterdir()) == []


def test_a_new_cache_folder_is_private(tmp_path, inputs):
    cache = tmp_path / "xdg" / "segcli" / "numba"
    environ = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = segcli_run(inputs, cache, **environ, NUMBA_CACHE_DIR="")
    assert done.returncode == 0, done.stderr
    assert cache.stat().st_mode & 0o777 == 0o700
    assert index_files(cache)


def test_importing_the_engine_sets_no_environment_and_prints_nothing():
    code = (
        "import os, segcli.engines.numba_engine as e; "
        "print('NUMBA_CACHE_DIR' in os.environ, e.numba_cache is not None)"
    )
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, cwd=ROOT
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "False True\n", "")


def test_folder_owned_by_someone_else_is_refused(tmp_path, monkeypatch):
    from segcli.engines import numba_cache

    monkeypatch.setattr(numba_cache.os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)
    reason = numba_cache.untrusted_because(str(tmp_path))
    assert reason == f"owned by user id {os.stat(tmp_path).st_uid}, not you"
    monkeypatch.undo()
    folder, note = numba_cache.choose_folder(str(tmp_path / "a-file"))
    assert note is None and Path(folder).is_dir()
    (tmp_path / "plain").write_text("")
    folder, note = numba_cache.choose_folder(str(tmp_path / "plain"))
    assert folder != str(tmp_path / "plain")
    assert note is not None and "cannot create it" in note
    assert os.stat(folder).st_mode & 0o777 == 0o700


def test_every_compiled_kernel_caches_in_segclis_folder():
    """numba's own default is the package's ``__pycache__``, which whoever installed segcli
    may write: every caching kernel of every numba module goes to the trusted folder."""
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    import segcli
    from segcli.engines import numba_engine, numba_hash, numba_kernels, numba_sparse

    numba_stats = numba_engine._stats_kernels()
    numba_sparse._install()
    numba_hash.install()
    package = Path(segcli.__file__).resolve().parent
    checked = 0
    for module in (numba_kernels, numba_stats, numba_sparse, numba_hash):
        for name, value in vars(module).items():
            for kernel in value if isinstance(value, tuple) else (value,):
                if isinstance(kernel, Dispatcher) and not isinstance(kernel._cache, NullCache):
                    where = Path(kernel.stats.cache_path).resolve()
                    assert not where.is_relative_to(package), f"{module.__name__}.{name}"
                    checked += 1
    assert checked > 40


def test_a_thread_asking_during_the_install_waits_for_it(monkeypatch):
    """Two lane threads make the first call at once: the second must not call a kernel before
    the first has pointed the kernels at segcli's folder (it would miss numba's default folder
    and compile, on every run)."""
    import threading
    import time

    from segcli.engines import numba_cache

    events: list[str] = []

    def slow_install(namespace, folder=None):
        events.append("install started")
        time.sleep(0.2)
        events.append("install done")
        return None

    monkeypatch.setattr(numba_cache, "install", slow_install)
    monkeypatch.setattr(numba_cache, "_installed_modules", set())
    namespace = {"__name__": "a_module_of_kernels"}
    results = []

    def ask():
        results.append(numba_cache.install_once(namespace))
        events.append("kernel called")

    first = threading.Thread(target=ask)
    first.start()
    while "install started" not in events:
        time.sleep(0.001)
    ask()  # the second thread, while the first installs
    first.join()
    assert events == ["install started", "install done", "kernel called", "kernel called"]
    assert sorted(results) == [(False, None), (True, None)]


#: Folds with the numba engine, counting numba's full context refreshes and the kernels each
#: dispatcher loaded from the cache and compiled: float64 first, then float32 (which the
#: warming process did not fold).
_COUNTED_FOLDS = """
import json, sys
import numpy as np
from numba.core import base
import segcli
refreshes = []
plain_refresh = base.BaseContext.refresh
def counted(self):
    refreshes.append(1)
    plain_refresh(self)
base.BaseContext.refresh = counted
ids = np.array([0, 1, 1, 2, 0])
dtypes = sys.argv[1].split(",")
found = {}
for dtype in dtypes:
    data = np.array([1.5, -2.0, 4.25, 8.0, 0.5], dtype)
    got = segcli.segment_reduce(data, ids, op="mean", engine="numba")
    found[dtype] = [got.tolist(), len(refreshes)]
from segcli.engines import numba_kernels
from numba.core.dispatcher import Dispatcher
hits = misses = 0
for value in vars(numba_kernels).values():
    for kernel in value if isinstance(value, tuple) else (value,):
        if isinstance(kernel, Dispatcher):
            hits += sum(kernel.stats.cache_hits.values())
            misses += sum(kernel.stats.cache_misses.values())
print(json.dumps({"found": found, "hits": hits, "misses": misses}))
"""


def _counted_folds(cache: Path, dtypes: str) -> dict:
    done = run_with_cache([sys.executable, "-c", _COUNTED_FOLDS, dtypes], cache)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.full_matrix  # a fresh numba cache compiles for seconds: CI's second line
def test_a_cached_kernel_loads_without_numbas_full_context_refresh(tmp_path):
    """numba refreshes its whole target context (every lowering registry, the typing context)
    before it loads a cached kernel, a third of a second of one core at the start of every
    run; segcli's cache links a cached kernel with the runtime alone. A kernel that misses
    still compiles (numba's compiler refreshes the context itself), after the loaded ones."""
    cache = tmp_path / "cache"
    warming = _counted_folds(cache, "float64")
    assert warming["misses"] > 0 and warming["found"]["float64"][1] > 0  # compiled: refreshed
    warm = _counted_folds(cache, "float64,float32")
    expected = [1.0, 1.125, 8.0]
    assert warm["found"]["float64"] == [expected, 0]  # loaded, never refreshed
    assert warm["hits"] > 0
    float32_means, refreshes = warm["found"]["float32"]
    assert float32_means == expected and refreshes > 0  # the float32 kernels compiled
