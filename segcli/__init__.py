"""segcli: segment reductions with TensorFlow's semantics, from Python or the shell.

>>> import segcli
>>> segcli.segment_reduce([1.0, 2.0, 3.0, 4.0], [0, 0, 2, 2], 4, op="mean")
array([1.5, 0. , 3.5, 0. ])

The numeric parts load on first use, so that ``segcli --help`` starts without NumPy.
"""

from __future__ import annotations

from typing import Any

from segcli.errors import SegcliError

__version__ = "0.1.0"

_LAZY = {
    "segment_reduce": "segcli.core",
    "reduce_arrays": "segcli.core",
    "Reduction": "segcli.core",
    "OPS": "segcli.ops",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'segcli' has no attribute {name!r}")


def __dir__() -> list[str]:
    # Tab completion and help() list the names that load on first use too.
    return sorted({*globals(), *_LAZY})


__all__ = ["OPS", "Reduction", "SegcliError", "__version__", "reduce_arrays", "segment_reduce"]
