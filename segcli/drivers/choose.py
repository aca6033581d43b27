"""Which driver carries out a spec, and why: :func:`choose_driver` over :data:`DRIVERS`.

Every input small enough is read whole; larger files, stdin and runs with rows per block given
stream; ``engine="dask"`` runs on a cluster. A 0-D ``.npy`` is one row, read whole on every
path. Only headers and metadata are read to decide.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Sequence
from typing import cast

from segcli.drivers.base import Driver, DriverResult, Progress, RunSpec, has_holistic
from segcli.errors import NotStreamableError
from segcli.io import peek
from segcli.io.columns import NullIdsError, NullsError, nulls_kept
from segcli.io.sizes import decoded_bytes

#: The drivers by name, as ``module:function`` that carries out a spec (loaded when chosen).
DRIVERS = {
    "in-memory": "segcli.drivers.memory:run",
    "streaming": "segcli.drivers.stream:run",
    "distributed": "segcli.drivers.dask:run",
    "keyed in-memory": "segcli.drivers.keys:run_in_memory",
    "keyed streaming": "segcli.drivers.keys:run_streaming",
    "sparse": "segcli.drivers.sparse:run",
    "holistic": "segcli.drivers.holistic:run",
}
#: Where a driver that finds its inputs cannot stream (before any block is read) hands over.
_READ_WHOLE_INSTEAD = {"streaming": "in-memory", "keyed streaming": "keyed in-memory"}


def driver(name: str) -> Driver:
    module, function = DRIVERS[name].split(":")
    return cast(Driver, getattr(importlib.import_module(module), function))


def choose_driver(spec: RunSpec) -> tuple[str, str]:
    """The driver for ``spec`` (a key of :data:`DRIVERS`) and why it was chosen."""
    if has_holistic(spec):
        return "holistic", "median, quantile and nunique sort each segment's values"
    if spec.sparse:
        return "sparse", "--indices/--weights gather and weight rows of DATA held in memory"
    if _holds_a_scalar(spec):
        return "in-memory", "a 0-D input is one row, which no block or partition can split"
    if spec.engine == "dask":
        return "distributed", "engine dask"
    keyed = "keyed " if spec.by else ""
    if should_stream(spec):
        return f"{keyed}streaming", _why_stream(spec)
    return f"{keyed}in-memory", "the inputs fit the memory budget"


def should_stream(spec: RunSpec) -> bool:
    """Stream when asked, for files over ``spec.stream_above``, or for a stream on stdin.

    A .npy on stdin, or an Arrow stream holding both DATA and IDS, always streams: its size is
    unknown until read, one pass is all a pipe allows, and streaming gives the same bytes as
    the in-memory path. An Arrow stream with the other input in a file is read whole.
    """
    if _holds_a_scalar(spec):
        return False
    if "-" in (spec.data, spec.ids):
        if spec.stdin is None:
            return False
        if spec.ids is None:
            return peek.holds_arrow_stream(spec.stdin)
        return peek.holds_npy(spec.stdin)
    if spec.block_rows is not None or pipe_streams(spec):
        return True
    size, above = _input_bytes(spec), _stream_above(spec)
    return size is not None and above is not None and size > above


def _why_stream(spec: RunSpec) -> str:
    if "-" in (spec.data, spec.ids):
        return "a stream on stdin"
    if spec.block_rows is not None:
        return "rows per block given"
    if pipe_streams(spec):
        return "a stream on a pipe"
    return f"inputs over {_stream_above(spec) or 0:,} bytes"


def pipe_streams(spec: RunSpec) -> bool:
    """A table on a pipe given by path that streams (peek.pipe_streams)."""
    return peek.pipe_streams(spec.data) or peek.pipe_streams(spec.ids)


def _stream_above(spec: RunSpec) -> int | None:
    return spec.stream_above if spec.stream_above is not None else spec.memory_budget


def _holds_a_scalar(spec: RunSpec) -> bool:
    """A 0-D ``.npy`` (ids, or data with 0-D ids) is a single row that no block can split:
    such runs read their inputs whole on every path, and give the in-memory answer."""
    ids_path = spec.ids if spec.ids is not None else spec.data
    return any(
        peek.npy_shape(path, key, spec.stdin) == ()
        for path, key in ((spec.data, spec.data_key), (ids_path, spec.ids_key))
    )


def must_stream(spec: RunSpec, held_per_byte: int = 1) -> bool:
    """Streaming is required, not just the faster way: asked for, from stdin, or the inputs
    (``held_per_byte`` times their bytes, what a whole read holds at its peak) exceed the
    memory budget; never for a 0-D input, which every path reads whole."""
    if _holds_a_scalar(spec):
        return False
    if "-" in (spec.data, spec.ids) or spec.block_rows is not None:
        return True
    size = _input_bytes(spec)
    budget = spec.memory_budget
    return size is not None and budget is not None and size * held_per_byte > budget


def _input_bytes(spec: RunSpec) -> int | None:
    """The decoded size of the inputs (from headers and metadata: a small compressed file may
    hold gigabytes); None if one cannot be read (its reader says why)."""
    if spec.ids is None:
        both = (spec.data_key, spec.ids_key, spec.data_column, spec.ids_column, *spec.by)
        roles = [(spec.data, [n for n in both if n is not None])]
    else:
        roles = [
            (spec.data, [n for n in (spec.data_key, spec.data_column) if n is not None]),
            (spec.ids, [n for n in (spec.ids_key, spec.ids_column) if n is not None]),
        ]
    # --indices and --weights are held too: a file of their own, or a column of IDS's table
    # (DATA's, without IDS), which that table's size then counts.
    for path, column in ((spec.indices, spec.indices_column), (spec.weights, spec.weights_column)):
        if path is not None:
            roles.append((path, [column] if column is not None else []))
        elif column is not None and roles[-1][1]:
            roles[-1][1].append(column)
    sizes = [decoded_bytes(path, names) for path, names in roles]
    if None in sizes:
        return None
    total = sum(s for s in sizes if s is not None)
    if spec.by:
        # Read whole, a --by run also holds each key column's encoding (indices and a
        # dictionary about as large as the column when keys are distinct) and an int64 id
        # per row: a 10M-row table of 1M distinct keys (240 MB decoded) peaked at 781 MB.
        keys = decoded_bytes(spec.data, list(spec.by)) or 0
        total = 2 * total + 2 * keys
    return total


def carry_out(spec: RunSpec, progress: Progress | None = None) -> DriverResult:
    """Run the chosen driver; inputs that turn out not streamable (found before any block is
    read) are read whole instead, when streaming was not required."""
    name, _ = choose_driver(spec)
    with nulls_kept(spec.skipna), metadata_first(spec):  # under --skipna a null is missing
        try:
            return driver(name)(spec, progress)
        except NotStreamableError:
            if name not in _READ_WHOLE_INSTEAD or must_stream(spec):
                raise
        return driver(_READ_WHOLE_INSTEAD[name])(spec, progress)


@contextlib.contextmanager
def metadata_first(spec: RunSpec, columns: Sequence[str | None] | None = None) -> Iterator[None]:
    """A null met within, while reading the inputs whole (or a null id that ``--sorted``
    refuses), gives way to an error of the inputs' metadata (a dtype the op refuses, float
    ids, lengths that differ), which a streamed run finds before it reads a row (see
    :func:`segcli.drivers.stream.error_before_rows`)."""
    try:
        yield
    except (NullsError, NullIdsError) as error:
        from segcli.drivers.stream import error_before_rows

        raise error_before_rows(spec, error, columns) from None
