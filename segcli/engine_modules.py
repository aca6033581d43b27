"""Where each engine lives, with no imports of its own.

The registry (:mod:`segcli.engines`) loads engines from here, and validation finds an engine
that is already loaded, to use its compiled id scan, without importing the engine package:
validation sits below the engines and never imports them.
"""

from __future__ import annotations

import sys
from typing import Any

#: Engine name -> module, in the order ``auto`` tries them (``numpy`` always works, last).
ENGINE_MODULES: dict[str, str] = {
    "cupy": "segcli.engines.cupy_engine",
    "numba": "segcli.engines.numba_engine",
    "numpy": "segcli.engines.numpy_engine",
}


def loaded_id_scanner() -> Any:
    """The first engine already imported in this process that offers a one-pass id scan (its
    start-up is paid, so the scan costs nothing extra), or None. Never imports an engine."""
    for module_name in ENGINE_MODULES.values():
        engine = getattr(sys.modules.get(module_name), "ENGINE", None)
        if engine is not None and getattr(engine, "scans_ids", False):
            return engine
    return None
