"""The in-memory driver: read DATA and IDS whole, then one call of the library's core."""

from __future__ import annotations

import time

from segcli import core, io
from segcli.drivers.base import (
    DriverResult,
    InputFacts,
    Progress,
    RunSpec,
    engine_of,
    input_facts,
    op_and_fill,
)
from segcli.io.columns import without_null_ids


def read(spec: RunSpec) -> tuple[io.ArrayInput, io.ArrayInput]:
    """DATA and IDS of ``spec``, read whole."""
    return io.read_inputs(
        spec.data,
        spec.ids,
        data_column=spec.data_column,
        ids_column=spec.ids_column,
        data_key=spec.data_key,
        ids_key=spec.ids_key,
        stdin=spec.stdin,
        csv=spec.csv,
    )


def facts(item: io.ArrayInput) -> InputFacts:
    array = item.array
    return input_facts(item.path, item.label, item.fmt, array.shape, array.dtype, item.note)


def run(spec: RunSpec, progress: Progress | None = None) -> DriverResult:
    """Read the inputs whole and reduce them; ``progress`` is not called (one step)."""
    started = time.perf_counter()
    data, ids = read(spec)
    read_s = time.perf_counter() - started
    inner = tuple(data.array.shape[ids.array.ndim :])
    op, fill = op_and_fill(spec, data.array.dtype, inner, data.label)
    ids_array, null_ids = without_null_ids(ids.array, sorted_ids=spec.sorted_ids, label=ids.label)
    reduction = core.reduce_with_option_words(
        data.array,
        ids_array,
        spec.num_segments,
        op,
        sorted=spec.sorted_ids,
        # A 0-D input is one row: no partitions to spread, so Dask runs take NumPy's path.
        engine="auto" if spec.engine == "dask" else engine_of(spec),
        fill=fill,
        data_label=data.label,
        ids_label=ids.label,
    )
    reduction.null_ids = null_ids
    timings = {
        "read": read_s,
        "validate": reduction.timings["validate"],
        "compute": reduction.timings["compute"],
    }
    return DriverResult(reduction, facts(data), facts(ids), "in-memory", {}, timings)
