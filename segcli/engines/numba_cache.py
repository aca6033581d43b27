"""Where the numba engine keeps its compiled kernels, and when that folder is trusted.

numba's cache files are pickles: whoever can write the folder runs code as the user the next
time a kernel loads. So the kernels go to a folder of segcli's own (``$NUMBA_CACHE_DIR`` if the
user set one, else ``$XDG_CACHE_HOME/segcli/numba``), created 0700 and used only while the
user owns it and neither group nor others may write to it; otherwise they compile into a
private temporary folder, removed at exit. A cache file that does not load (corrupt,
truncated, from another numba) is dropped and the kernel compiled again.

Nothing happens at import: :func:`install` is called before the first kernel runs, and
never touches ``os.environ`` or numba's configuration (each kernel gets its own cache object).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import tempfile
import threading
from typing import Any

from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    NullCache,
    _CacheLocator,
    _SourceFileBackedLocatorMixin,
)
from numba.core.dispatcher import Dispatcher
from numba.core.runtime.nrt import rtsys

from segcli.signals import at_exit


def default_folder() -> str:
    """The user's choice (``NUMBA_CACHE_DIR``), else segcli's folder in the user's cache."""
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "segcli", "numba")


def untrusted_because(folder: str) -> str | None:
    """Why ``folder`` must not hold pickled kernels, or None if it may (made 0700 if new)."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder)
    except OSError as exc:
        return f"cannot create it: {exc.strerror or exc}"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if info.st_uid != os.getuid():
        return f"owned by user id {info.st_uid}, not you"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def choose_folder(folder: str) -> tuple[str, str | None]:
    """The folder kernels are cached in, and a one-line note when ``folder`` was refused."""
    reason = untrusted_because(folder)
    if reason is None:
        return folder, None
    private = tempfile.mkdtemp(prefix="segcli-numba-")  # 0700, ours alone
    at_exit(functools.partial(shutil.rmtree, private, True))
    note = (
        f"segcli: not using the kernel cache {folder} ({reason}); "
        "compiling into a private temporary folder"
    )
    return private, note


class _FolderLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """numba's user-provided locator, with the folder a class attribute, not numba's config."""

    folder = ""

    def __init__(self, py_func: Any, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        subpath = self.get_suitable_cache_subpath(py_file)  # type: ignore[no-untyped-call]
        self._cache_path = os.path.join(self.folder, subpath)

    def get_cache_path(self) -> str:
        return self._cache_path


class _RecoveringCache(FunctionCache):
    """A function cache that treats a file it cannot load as a miss, never as a failure, and
    loads a kernel with only the runtime it needs to link.

    numba's own ``load_overload`` first refreshes the whole target context: it imports and
    installs every lowering registry (``numba.cpython``, ``numba.np``, the typed containers,
    ...) and refreshes the typing context, what a compile needs. Before the first kernel of a
    run, that cost 0.28 s of one core here (0.37 s against 0.09 s for the first id scan of a
    run), on the critical path of every numba run. A cached kernel links against the runtime's
    symbols (NRT), set up here once a process, and the math and helper symbols, added when
    the context was made; what else it needs, its cache entry brings (its pickled
    objects import their modules, ``reload_init`` re-runs what a feature must set up). A miss
    still compiles through numba's compiler, which refreshes the context itself.
    """

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            rtsys.initialize(target_context)  # the runtime only; a no-op once done
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)  # type: ignore[no-untyped-call]
        except Exception:  # unpickling garbage raises anything (EOFError, KeyError, ...)
            # The save after the recompile rereads the index: it must not find the bad one.
            with contextlib.suppress(OSError):
                os.unlink(self._cache_file._index_path)
            return None

    def save_overload(self, sig: Any, data: Any) -> None:
        # A cache that cannot be written costs a compile next time, never this run.
        with contextlib.suppress(Exception):
            super().save_overload(sig, data)  # type: ignore[no-untyped-call]


def _cache_class(folder: str) -> type[FunctionCache]:
    locator = type("SegcliLocator", (_FolderLocator,), {"folder": folder})
    impl = type("SegcliCacheImpl", (CompileResultCacheImpl,), {"_locator_classes": [locator]})
    cache: type[FunctionCache] = type("SegcliCache", (_RecoveringCache,), {"_impl_class": impl})
    return cache


def install(namespace: dict[str, Any], folder: str | None = None) -> str | None:
    """Give every caching kernel in ``namespace`` (a module's globals, and the tuples of
    kernels there, such as one kernel per op kind) a cache in a trusted folder, before any of
    them has loaded from numba's default one, the package's own folder. Returns the note to
    show the user, if the folder was refused."""
    chosen, note = choose_folder(folder or default_folder())
    cache_class = _cache_class(chosen)
    for kernel in _kernels(namespace):
        if not isinstance(getattr(kernel, "_cache", None), NullCache):
            try:
                cache: Any = cache_class(kernel.py_func)
            except (OSError, RuntimeError):
                cache = NullCache()  # no usable folder: compile every run
            kernel._cache = cache  # type: ignore[attr-defined]  # read at each compile
    return note


_installed_modules: set[str] = set()
_installing = threading.Lock()


def install_once(namespace: dict[str, Any]) -> tuple[bool, str | None]:
    """:func:`install` for a module's kernels the first time any thread asks: whether this
    call installed them, and :func:`install`'s note. A thread that asks while another
    installs waits for it. (Marked done before the caches were in place, a second lane
    thread would call a kernel in between: it looked in numba's default folder, missed and
    compiled, half a second on every run, and saved into segcli's folder.)"""
    module = namespace["__name__"]
    if module in _installed_modules:
        return False, None
    with _installing:
        if module in _installed_modules:
            return False, None
        note = install(namespace)
        _installed_modules.add(module)
        return True, note


def _kernels(namespace: dict[str, Any]) -> list[Dispatcher]:
    """The kernels of a namespace: its values and the members of its tuples."""
    found = []
    for value in namespace.values():
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, Dispatcher):
                found.append(item)
    return found
