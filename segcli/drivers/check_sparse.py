"""``segcli check`` with ``--indices`` / ``--weights``: every rule such a run checks, no fold.

The inputs are read as the sparse driver reads them whole (an Arrow stream on stdin in one
pass), the rules are the run's own (:mod:`segcli.sparse`: the sparse family's ids and indices,
or the plain family's with weights alone; the weights' nulls, dtype and shape), and the only
thing reduced is each segment's row count, which ``--max-empty`` judges.
"""

from __future__ import annotations

import numpy as np

from segcli import ops, sparse
from segcli.drivers import memory
from segcli.drivers import sparse as sparse_driver
from segcli.drivers.base import RunSpec
from segcli.drivers.check import CheckResult, NanScan, WeightsNan
from segcli.drivers.choose import metadata_first

#: Indices gathered at once by the NaN scan: the gathered rows are a copy, kept small.
_GATHER_ROWS = 1 << 16


def check_sparse(spec: RunSpec) -> CheckResult:
    """Validate DATA, IDS, the indices and the weights of ``spec`` as its run would."""
    sparse_driver.refuse_unsupported(spec)  # --weights with other ops, --by, dask, budget
    with metadata_first(spec):  # as a run: a null gives way to a dtype the op refuses
        data, ids, indices, weights = sparse_driver.read_all(spec)
    array = data.array
    ops.check_data_dtype(ops.get_op(spec.op), array.dtype, data.label)
    if weights is not None:  # as a run: a null among them is named before any id rule
        sparse.refuse_nulls(weights.array, weights.label)
    counted = sparse.sparse_reduce(
        sparse.Labeled(array, data.label),
        sparse.Labeled(ids.array, ids.label),
        spec.num_segments,
        "count",
        indices=None if indices is None else sparse.Labeled(indices.array, indices.label),
        sorted_ids=spec.sorted_ids,
        engine="numpy",
    )
    if weights is not None:
        sparse.check_weights_meta(weights.array.dtype, weights.label)
        per = "rows" if indices is None else "indices"
        sparse.check_weights_shape(weights.array.shape, ids.array.shape, weights.label, per)
    nan = NanScan()
    first_index = None
    if indices is None:
        nan.feed(array)
    else:
        first_index = _scan_gathered(nan, array, indices.array)
    return CheckResult(
        counted.id_report,
        np.asarray(counted.result),
        nan.found,
        nan.first,
        memory.facts(data),
        memory.facts(ids),
        "in-memory",
        null_values=nan.nulls,
        family=None if indices is None else "sparse",
        first_nan_index=first_index,
        weights_nan=None if weights is None else _nan_weights(weights.array, weights.label),
    )


def _nan_weights(weights: np.ndarray, label: str) -> WeightsNan:
    """The NaN weights, as NaN values are counted (real numbers only; integer weights hold
    none)."""
    flat = np.asarray(weights).reshape(-1)
    if flat.dtype.kind != "f":
        return WeightsNan(label, 0, None)
    nan = np.isnan(flat)
    count = int(np.count_nonzero(nan))
    return WeightsNan(label, count, int(np.argmax(nan)) if count else None)


def _scan_gathered(nan: NanScan, data: np.ndarray, indices: np.ndarray) -> int | None:
    """Scan the rows of ``data`` that ``indices`` gather, in blocks of indices, each row as
    often as it is gathered: a run reads no other row, and folds (or, under ``--skipna``,
    skips) a row's values once per index naming it. ``nan.first`` becomes the first missing
    value's position in DATA; the position of the index gathering it is returned."""
    flat = np.asarray(indices).reshape(-1)
    for start in range(0, len(flat), _GATHER_ROWS):
        nan.feed(data[flat[start : start + _GATHER_ROWS]])
    if nan.first is None:
        return None
    position, *inner = nan.first
    nan.first = (int(flat[position]), *inner)
    return position
