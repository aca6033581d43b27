"""The sparse driver: ``--indices`` / ``--weights`` runs (see :mod:`segcli.sparse`).

DATA is read whole (the indices may point anywhere in it) and must fit the memory budget; a
DATA that would have to stream is refused. The ids, indices and weights are read whole too
(one integer or float a row); the gathered rows are folded block by block, so memory grows
with the block, not with ``len(indices) x inner``. Dask is refused: every partition would need
all of DATA.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from segcli import sparse
from segcli.drivers import sparse_stdin
from segcli.drivers.base import DriverResult, Progress, RunSpec, engine_of, op_and_fill
from segcli.drivers.choose import should_stream
from segcli.drivers.memory import facts, read
from segcli.drivers.sparse_nulls import NamedSource, naming_nulls
from segcli.drivers.stream import StreamInput
from segcli.errors import UsageError
from segcli.io.chunked import open_chunked
from segcli.io.columns import side_by_side
from segcli.io.formats import input_format
from segcli.io.npy import Readable
from segcli.io.read import DATA_ROLE, IDS_ROLE, ArrayInput, Role, read_one
from segcli.io.sizes import decoded_bytes
from segcli.memory import human_bytes, over_budget

#: How a run with --weights and no --indices reads its inputs, as its summary says.
WEIGHTED_WHOLE = "from inputs read whole (--weights without --indices does not stream)"


def run(spec: RunSpec, progress: Progress | None = None) -> DriverResult:
    """Gather/weight and fold in blocks: ids, indices and weights streamed when the run
    streams (and IDS is a file of its own), else read whole."""
    refuse_unsupported(spec)
    gathers = spec.indices is not None or spec.indices_column is not None
    if gathers and spec.ids is not None and should_stream(spec):
        return run_streamed(spec, progress)
    started = time.perf_counter()
    data, ids, indices, weights = read_all(spec)
    read_s = time.perf_counter() - started
    op, fill = _op_and_fill(spec, data, gathered=indices is not None, ids_ndim=ids.array.ndim)
    reduction = sparse.sparse_reduce(
        _labeled(data),
        _labeled(ids),
        spec.num_segments,
        op,
        indices=None if indices is None else _labeled(indices),
        weights=None if weights is None else _labeled(weights),
        sorted_ids=spec.sorted_ids,
        engine=engine_of(spec),
        fill=fill,
        block_rows=spec.block_rows,
    )
    timings = {
        "read": read_s,
        "validate": reduction.timings["validate"],
        "compute": reduction.timings["compute"],
    }
    # Weights alone never stream (DATA, IDS and the weights read whole): the summary says so.
    how = ("gathered", "in blocks") if indices is not None else ("weighted", WEIGHTED_WHOLE)
    mode_facts: dict[str, Any] = {how[0]: how[1], **_extra_labels(indices, weights)}
    if indices is None:  # weights alone keep the plain family's rules
        return DriverResult(reduction, facts(data), facts(ids), "in-memory", mode_facts, timings)
    mode_facts["index_rows"] = int(indices.array.size)
    return DriverResult(
        reduction, facts(data), facts(ids), "in-memory", mode_facts, timings, family="sparse"
    )


def _extra_labels(indices: Any, weights: Any) -> dict[str, str]:
    """What the summary says the indices and weights were read from (the inputs it names)."""
    named = {"indices": indices, "weights": weights}
    return {name: item.label for name, item in named.items() if item is not None}


def run_streamed(spec: RunSpec, progress: Progress | None = None) -> DriverResult:
    """DATA read whole; IDS, the indices and the weights read block by block."""
    assert spec.ids is not None
    data = read_one(spec.data, DATA_ROLE, spec.data_column, spec.data_key, spec.stdin, spec.csv)
    ids = _open(spec, spec.ids, spec.ids_column, spec.ids_key)
    indices = _open_extra(spec, spec.indices, spec.indices_column, "indices")
    weights = _open_extra(spec, spec.weights, spec.weights_column, "weights")
    assert indices is not None
    op, fill = _op_and_fill(spec, data, gathered=True, ids_ndim=1)
    reduction, blocks = sparse.reduce_streamed(
        _labeled(data),
        ids.source,
        indices.source,
        None if weights is None else weights.source,
        spec.num_segments,
        op,
        engine=engine_of(spec),
        fill=fill,
        block_rows=spec.block_rows,
        progress=progress,
    )
    return DriverResult(
        reduction,
        facts(data),
        ids.facts(reduction.id_report.rows),
        "streaming",
        {
            "chunks": blocks,
            **_extra_labels(indices.source, None if weights is None else weights.source),
            "index_rows": reduction.id_report.rows,  # one index per id
        },
        {"read+compute": reduction.timings["compute"]},
        family="sparse",
    )


def _op_and_fill(
    spec: RunSpec, data: ArrayInput, *, gathered: bool, ids_ndim: int
) -> tuple[Any, Any]:
    """The op to fold (agg's combined op, or the spec's own) and its fill: a gathered row is a
    row of DATA, else the ids' shape leads DATA's."""
    array = data.array
    inner = tuple(array.shape[1:] if gathered else array.shape[ids_ndim:])
    return op_and_fill(spec, array.dtype, inner, data.label)


def read_all(spec: RunSpec) -> sparse_stdin.Inputs:
    """DATA, IDS, the indices and the weights (None where not given), read whole; columns of
    a table on stdin are all read from it in one pass."""
    # Both '-' is refused by the plain read, with its hint.
    if sparse_stdin.columns_on_stdin(spec) and spec.data != spec.ids:
        return sparse_stdin.read_in_one_pass(spec)
    extras: list[Callable[[], Any]] = [
        partial(sparse_stdin.read_extra, spec, "indices", spec.indices, spec.indices_column),
        partial(sparse_stdin.read_extra, spec, "weights", spec.weights, spec.weights_column),
    ]
    gathers = spec.indices is not None or spec.indices_column is not None
    if not gathers or spec.ids is None or spec.ids == spec.data == "-":
        # The weights alone are one a row, beside DATA and IDS: of the nulls of all three,
        # the earliest row's is named (DATA's on a tie), as for DATA and IDS.
        pair: Callable[[], Any] = partial(read, spec)
        (data, ids), indices, weights = side_by_side([pair, *extras])
        return data, ids, indices, weights
    # A gather's DATA has no row of IDS: read first, as a streamed run reads it; then the
    # ids, the indices and the weights, one a row, the earliest null named (see
    # sparse.reduce_streamed, which meets them so).
    data = read_one(spec.data, DATA_ROLE, spec.data_column, spec.data_key, spec.stdin, spec.csv)
    ids_args = (spec.ids, IDS_ROLE, spec.ids_column, spec.ids_key, spec.stdin, spec.csv)
    ids_read: Callable[[], Any] = partial(read_one, *ids_args)
    ids, indices, weights = side_by_side([ids_read, *extras])
    return data, ids, indices, weights


def read_gather(spec: RunSpec) -> tuple[ArrayInput, ArrayInput, ArrayInput]:
    """DATA, IDS and ``--indices`` read whole (the sorting ops gather, then sort)."""
    data, ids, indices, _ = read_all(spec)
    assert indices is not None
    return data, ids, indices


def open_gather(spec: RunSpec) -> tuple[ArrayInput, StreamInput, StreamInput]:
    """DATA read whole; IDS and ``--indices`` opened to read block by block."""
    assert spec.ids is not None
    data = read_one(spec.data, DATA_ROLE, spec.data_column, spec.data_key, spec.stdin, spec.csv)
    ids = _open(spec, spec.ids, spec.ids_column, spec.ids_key)
    indices = _open_extra(spec, spec.indices, spec.indices_column, "indices")
    assert indices is not None
    return data, ids, indices


def _open(
    spec: RunSpec, path: str, column: str | None, key: str | None, role: str | Role = "ids"
) -> StreamInput:
    fmt = "npy" if path == "-" else input_format(path)
    stdin = cast(Readable | None, spec.stdin)
    source = open_chunked(path, column=column, key=key, role=role, stdin=stdin, csv=spec.csv)
    return StreamInput(path, source, fmt)


def _open_extra(
    spec: RunSpec, path: str | None, column: str | None, name: str
) -> StreamInput | None:
    """Like :func:`sparse_stdin.read_extra`, opened for streaming."""
    if path is None and column is None:
        return None
    if path is None:
        path = spec.ids if spec.ids is not None else spec.data
    # The errors of a streamed read name the option, as those of a read whole do.
    option = f"--{name}-column"
    role = Role(option, option)
    with naming_nulls(f"--{name}"):
        if input_format(path) == "npz":
            opened = _open(spec, path, None, column, role)
        else:
            opened = _open(spec, path, column, None, role)
    return StreamInput(opened.path, NamedSource(opened.source, f"--{name}"), opened.fmt)


def refuse_unsupported(spec: RunSpec) -> None:
    """Usage errors (exit 2) of runs this driver cannot carry out, before any row is read."""
    if not spec.ops:  # agg refuses --weights itself
        weighted = spec.weights is not None or spec.weights_column is not None
        sparse.check_weighted_op(spec.op, weighted)
    gathers = spec.indices is not None or spec.indices_column is not None
    if spec.engine == "dask":
        why = (
            "every partition would need all of DATA to gather from"
            if gathers
            else "the Dask engine folds no weights"
        )
        raise UsageError(
            f"--indices/--weights cannot run on --engine dask: {why}; use --engine numpy or numba"
        )
    if spec.by:
        raise UsageError("--indices/--weights cannot be used with --by (they need segment ids)")
    if not gathers and spec.block_rows is not None:
        raise UsageError(
            "--chunk-rows: --weights without --indices reads DATA, IDS and the weights whole, "
            "it does not stream; drop --chunk-rows (inputs over --memory-limit are refused)"
        )
    for option, path in (("--indices", spec.indices), ("--weights", spec.weights)):
        if path == "-":
            raise UsageError(f"{option} reads a file, not stdin")
    sparse_stdin.refuse_npy_stream(spec)
    _refuse_streamed_data(spec)


def _refuse_streamed_data(spec: RunSpec) -> None:
    """DATA over the memory budget would have to stream, which a gather from anywhere in it
    cannot: refused (the ids, indices and weights may be any size)."""
    if spec.memory_budget is None or spec.data == "-":
        return
    if spec.indices is None and spec.indices_column is None:
        _refuse_weighted_over_budget(spec, spec.memory_budget)
        return
    names = [n for n in (spec.data_key, spec.data_column) if n is not None]
    size = decoded_bytes(spec.data, names)
    if size is not None and size > spec.memory_budget:
        size_text, budget_text = over_budget(size, spec.memory_budget)
        raise UsageError(
            f"{spec.data}: {size_text} of DATA is over the memory budget of "
            f"{budget_text}; --indices/--weights gather rows from anywhere "
            "in DATA, which must fit in memory (raise --memory-limit)"
        )


def _refuse_weighted_over_budget(spec: RunSpec, budget: int) -> None:
    """Without ``--indices`` a weighted run reads DATA, IDS and the weights whole (it never
    streams): all three count against the budget, and the refusal names the weights."""
    weights_file = spec.weights if spec.weights is not None else sparse_stdin.home_of_columns(spec)
    keys: tuple[str | None, ...] = (spec.data_key, spec.data_column)
    if spec.ids is None:  # IDS is a column (or array) of DATA's file
        keys += (spec.ids_key, spec.ids_column)
    inputs: list[tuple[str, str, tuple[str | None, ...]]] = [("DATA", spec.data, keys)]
    if spec.ids is not None:
        inputs.append(("IDS", spec.ids, (spec.ids_key, spec.ids_column)))
    inputs.append(("weights", weights_file, (spec.weights_column,)))
    sizes = [
        (name, 0 if path == "-" else decoded_bytes(path, [k for k in keys if k is not None]))
        for name, path, keys in inputs
    ]
    total = sum(size or 0 for _, size in sizes)  # an input of unknown size counts 0
    if total <= budget:
        return
    label = weights_file if spec.weights_column is None else f"{weights_file}:{spec.weights_column}"
    parts = " + ".join(f"{human_bytes(size or 0)} of {name}" for name, size in sizes)
    total_text, budget_text = over_budget(total, budget)
    raise UsageError(
        f"{label}: --weights without --indices reads DATA, IDS and the weights whole: {parts} "
        f"= {total_text} is over the memory budget of {budget_text} (raise --memory-limit)"
    )


def _labeled(item: ArrayInput) -> sparse.Labeled:
    return sparse.Labeled(item.array, item.label)
