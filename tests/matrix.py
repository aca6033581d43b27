"""The default run and the full matrix.

The README's ``pytest -n auto`` must finish in about three minutes on a cold clone with two
cores, and the numba engine compiles a kernel family for every dtype, ids width and layout a
test feeds it (most of a cold run's time). So a parametrised test may keep a representative
part of its cases in the default run and leave the rest to the full matrix, which CI runs as
well (``SEGCLI_FULL_MATRIX=1 pytest -n auto -m full_matrix``): ::

    @default_run(lambda op, sorted_ids: op == "sum" or not sorted_ids)
    @pytest.mark.parametrize("sorted_ids", [False, True])
    @pytest.mark.parametrize("op", ["sum", "mean", "prod"])
    def test_...(op, sorted_ids): ...

The predicate is called with the case's parameters it names; the cases it refuses are marked
``full_matrix`` (tests/conftest.py deselects those unless ``SEGCLI_FULL_MATRIX=1``). A file
that builds thousands of rare cases in a loop (tests/test_engines.py, tests/test_sparse.py)
marks them ``full_matrix`` itself and builds them only under :data:`FULL_MATRIX`: collecting
them only to deselect them would cost every default run a few seconds per worker. A test
that reads :data:`FULL_MATRIX` in its body to do more reaches no CI run: CI's second line
selects ``-m full_matrix``, which leaves unmarked tests out; the more is a case of its own.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

#: Whether this run collects the full matrix (CI's second test line).
FULL_MATRIX = os.environ.get("SEGCLI_FULL_MATRIX") == "1"


def default_run(keep: Callable[..., bool]) -> pytest.MarkDecorator:
    """Keep the cases ``keep`` accepts in the default run; the others join the full matrix."""
    # with_args: called with a lone function, a mark would decorate it instead of holding it.
    return pytest.mark.default_run.with_args(keep)


#: The names tests give a case's data dtype (read by the numba rule of :func:`in_default_run`).
DTYPE_PARAMS = ("dtype", "data_dtype")


def in_default_run(item: pytest.Item) -> bool:
    """Whether ``item`` runs without ``SEGCLI_FULL_MATRIX=1``: not marked ``full_matrix``,
    not a numba case of a rarer dtype (:func:`numba_takes`), and kept by its test's
    :func:`default_run`, if it has one."""
    if item.get_closest_marker("full_matrix") is not None:
        return False
    callspec = getattr(item, "callspec", None)
    params: dict[str, Any] = callspec.params if callspec is not None else {}
    engine = params.get("engine", params.get("engine_name"))
    if isinstance(engine, str):
        dtypes = [params[name] for name in DTYPE_PARAMS if name in params]
        if any(_is_dtype(dtype) and not numba_takes(engine, dtype) for dtype in dtypes):
            return False
    marker = item.get_closest_marker("default_run")
    if marker is None:
        return True
    keep = marker.args[0]
    wanted = [
        name
        for name, parameter in inspect.signature(keep).parameters.items()
        if parameter.default is inspect.Parameter.empty
    ]
    return bool(keep(**{name: params[name] for name in wanted}))


#: The data dtypes the default run hands the numba engine wherever a test goes through dtypes:
#: the kernel families the rest of the suite compiles anyway. Its cases of other dtypes are
#: the full matrix's (the NumPy engine takes every dtype in the default run).
NUMBA_DATA_DTYPES = ("float32", "int64")
#: The same for ids: the widths whose kernels the default run compiles.
NUMBA_IDS_DTYPES = ("uint8", "int32", "int64")


def numba_takes(engine: str, dtype: Any, *, ids: bool = False) -> bool:
    """Whether a case of ``dtype`` on ``engine`` is in the default run (see above)."""
    common = NUMBA_IDS_DTYPES if ids else NUMBA_DATA_DTYPES
    return engine != "numba" or np.dtype(dtype).name in common  # big-endian ones too


def _is_dtype(value: Any) -> bool:
    if value is None:  # np.dtype(None) is float64; a None case names no dtype
        return False
    try:
        np.dtype(value)
    except TypeError:
        return False
    return True
