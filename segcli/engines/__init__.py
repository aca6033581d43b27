"""The engine registry: engines load lazily, by name, and ``auto`` says why it chose one."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from segcli.engine_modules import ENGINE_MODULES, loaded_id_scanner
from segcli.engines.base import Engine
from segcli.errors import EngineUnavailableError, UsageError


@dataclass(frozen=True)
class EngineEntry:
    module: str
    #: What to install when the import fails.
    hint: str
    #: ``auto`` considers the engine only from this many data elements on, so that small inputs
    #: never pay for importing it (or for a transfer to a device).
    auto_min_elements: int | None


#: In the order ``auto`` tries them; ``numpy`` always works and comes last.
_REGISTRY: dict[str, EngineEntry] = {
    "cupy": EngineEntry(
        ENGINE_MODULES["cupy"],
        # The extra's two spellings: from an index, and from a source checkout (the README's).
        "pip install 'segcli[gpu]' (or '.[gpu]' in a segcli checkout; needs an NVIDIA GPU and "
        "CUDA 12)",
        50_000_000,
    ),
    "numba": EngineEntry(ENGINE_MODULES["numba"], "pip install numba", 100_000_000),
    "numpy": EngineEntry(ENGINE_MODULES["numpy"], "pip install numpy", 0),
}

ENGINE_NAMES = ("auto", *_REGISTRY)

#: ``auto``'s numba threshold once ``segcli.engines.numba_engine`` is already imported in this
#: process (its start-up, importing numba and loading the cached kernels, is then paid): from
#: here on its threaded folds beat NumPy (also where the numba engine starts using threads).
NUMBA_WARM_MIN_ELEMENTS = 1 << 18


@dataclass(frozen=True)
class EngineChoice:
    engine: Engine
    reason: str


def get_engine(name: str) -> Engine:
    """The engine called ``name``; an engine that cannot run here is an error with a hint."""
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown engine {name!r} (engines: {', '.join(ENGINE_NAMES)})") from None
    try:
        module = importlib.import_module(entry.module)
    except ImportError as exc:
        raise EngineUnavailableError(
            f"engine {name!r} is not available ({exc}); install it with: {entry.hint}"
        ) from None
    engine: Engine = module.ENGINE
    problem = engine.unavailable_reason()
    if problem:
        raise EngineUnavailableError(f"engine {name!r} cannot run here: {problem}")
    return engine


def id_scanner() -> Engine | None:
    """The engine whose id scan validation uses: see
    :func:`segcli.engine_modules.loaded_id_scanner`."""
    engine: Engine | None = loaded_id_scanner()
    return engine


def choose_engine(name: str | Engine, *, elements: int, skipna: bool = False) -> EngineChoice:
    """Resolve ``auto``; an engine asked for by name is used or is an error, never swapped.

    ``elements`` below 0: a stream whose length is not known yet, taken as small. An
    :class:`Engine` instance (say, one built with options) is used as it is. ``skipna``:
    the CuPy engine has no ``--skipna`` path yet; asked for, it is a usage error, and ``auto``
    passes it over.
    """
    if skipna and (name == "cupy" or (isinstance(name, Engine) and name.name == "cupy")):
        raise EngineUnavailableError(
            "--skipna is not supported by engine 'cupy' yet; use --engine numpy or numba"
        )
    if isinstance(name, Engine):
        return EngineChoice(name, "asked for")
    if name != "auto":
        return EngineChoice(get_engine(name), "asked for")
    passed_over: list[str] = []  # why each faster engine was not taken, for the summary
    for candidate, entry in _REGISTRY.items():
        if skipna and candidate == "cupy":
            passed_over.append("cupy not with --skipna")
            continue
        threshold = entry.auto_min_elements
        if candidate == "numba" and entry.module in sys.modules:
            threshold = NUMBA_WARM_MIN_ELEMENTS
        if threshold is None:
            continue
        if max(elements, 0) < threshold:
            passed_over.append(f"{candidate} from {threshold:,}")
            continue
        try:
            engine = get_engine(candidate)
        except EngineUnavailableError:
            passed_over.append(f"{candidate} not available")
            continue
        if candidate == "numpy":
            # A stream's length is not known before it is read: it counts as small.
            size = f"{elements:,} elements" if elements >= 0 else "a stream of unknown length"
            return EngineChoice(
                engine, f"auto: {size}; {', '.join(passed_over) or 'no other engine'}"
            )
        return EngineChoice(engine, f"auto: {elements:,} elements >= {threshold:,}")
    raise EngineUnavailableError("no engine can run here")  # numpy always can


__all__ = ["ENGINE_NAMES", "Engine", "EngineChoice", "choose_engine", "get_engine", "id_scanner"]
