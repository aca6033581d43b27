"""The in-memory driver: read DATA and IDS whole, then one call of the library's core."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from segcli import core, io
from segcli.summary import InputFacts, input_facts

if TYPE_CHECKING:
    from segcli.pipeline import RunRequest, Streams


def read(request: RunRequest, streams: Streams) -> tuple[io.ArrayInput, io.ArrayInput]:
    return io.read_inputs(
        request.data,
        request.ids,
        data_column=request.data_column,
        ids_column=request.ids_column,
        data_key=request.data_key,
        ids_key=request.ids_key,
        stdin=streams.stdin,
        csv=request.csv_options(),
    )


def facts(item: io.ArrayInput) -> InputFacts:
    found = input_facts(item.path, item.label, item.fmt, item.array)
    found.note = item.note
    return found


def reduce_request(
    request: RunRequest, streams: Streams
) -> tuple[core.Reduction, InputFacts, InputFacts, dict[str, float]]:
    timings = {}
    started = time.perf_counter()
    data, ids = read(request, streams)
    timings["read"] = time.perf_counter() - started
    reduction = core.reduce_arrays(
        data.array,
        ids.array,
        request.num_segments,
        request.op,
        sorted=request.sorted_ids,
        # A 0-D input is one row: no partitions to spread, so Dask runs take NumPy's path.
        engine="auto" if request.engine == "dask" else request.compute_engine(),
        fill=request.fill,
        data_label=data.label,
        ids_label=ids.label,
    )
    timings["validate"] = reduction.timings["validate"]
    timings["compute"] = reduction.timings["compute"]
    return reduction, facts(data), facts(ids), timings
