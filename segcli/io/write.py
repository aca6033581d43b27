"""``write_result``: a result array to a file (atomically) or to stdout, in any output format.

Layouts (all read back by :func:`segcli.io.results.read_result_table`):

- ``npy``: the array. ``npz``: key ``result``, and ``counts`` when given.
- ``parquet`` / ``arrow``: columns ``segment`` (int64, 0..n-1), ``value`` and, with counts,
  ``count``. A 1-D result's ``value`` is a plain column of the result dtype (float16 is Arrow
  halffloat). An N-D result ``(n, *inner)`` stores ``value`` as a fixed-size list of the
  flattened inner values, and the schema metadata ``segcli.inner_shape`` (a JSON list) and
  ``segcli.dtype`` restore the shape. Arrow has no complex type: complex values are stored as
  (re, im) float pairs inside the list, and ``segcli.dtype`` says which complex dtype they make.
  Arrow output is the IPC file format for a path and the IPC stream format for stdout.
- ``csv`` / ``tsv``: a header ``segment,value`` (``value_i`` for 2-D results, ``value_i_j`` for
  3-D, ...) then one row per segment, values as NumPy prints them at full precision; complex
  values are written as ``(re+imj)`` (NumPy's str, e.g. ``(1.5-2j)``, ``(nan+infj)``), which
  NumPy parses back.
- ``json``: ``{"shape": [...], "dtype": "float32", "values": nested lists}``; non-finite floats
  are the strings ``"nan"``, ``"inf"``, ``"-inf"``; a complex value is a ``[re, im]`` pair.
"""

from __future__ import annotations

import io
import json
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np
import numpy.lib.format as npformat

from segcli.errors import UsageError, WriteError
from segcli.io.columns import DTYPE_KEY, INNER_SHAPE_KEY, VALUE_COLUMN, arrow_array
from segcli.io.commit import OutputSet, refuse_binary_on_terminal
from segcli.io.formats import output_format
from segcli.io.npy import to_native
from segcli.io.text import check_float_format, text_blocks, value_headers, value_strings
from segcli.signals import Interrupted, streaming_out

if TYPE_CHECKING:
    import pyarrow as pa

_Array = np.ndarray[Any, Any]
_Writer = Callable[[_Array, _Array | None, BinaryIO, bool], None]
STDOUT_LABEL = "<stdout>"


def write_result(
    result: _Array,
    path: str,
    fmt: str | None = None,
    *,
    stdout: BinaryIO | None = None,
    counts: _Array | None = None,
    outputs: OutputSet | None = None,
    float_format: str | None = None,
    keys: pa.Table | None = None,
    header: bool = True,
) -> str:
    """Write ``result`` (at least 1-D) to ``path`` (``-``: stdout); return the format used.

    ``fmt`` overrides the format the suffix of ``path`` implies (stdout defaults to npy).
    ``counts`` (rows per segment) is stored as the ``counts`` key of npz, a ``count`` column of
    tables and a ``counts`` list in JSON; npy has room for one array only and leaves it out.
    Files are replaced atomically; binary formats are refused on a terminal (stdout or a path).
    ``outputs``, where ``path`` is reserved, stages the file to be committed with the run's
    other outputs; without it the file is committed at once.
    ``float_format`` (printf style, csv and tsv only) formats float values.
    ``keys`` (a ``--by`` run's key table, row i for result row i) replaces ``segment`` in table,
    text and JSON outputs (see :mod:`segcli.io.keyed`); npy and npz leave it out.
    ``header``: False leaves csv and tsv without their header line.
    """
    chosen = output_format(path, fmt)
    check_text_output(chosen, float_format, header=header)
    result = np.asarray(result)
    if result.ndim == 0:
        raise ValueError("a result has at least one axis (the segments)")
    if counts is not None:
        counts = np.asarray(counts)
        if counts.shape != result.shape[:1]:
            raise ValueError(f"counts has shape {counts.shape}, need {result.shape[:1]}")
    writer = _WRITERS[chosen]
    if float_format is not None or not header:
        writer = _text_writer(_SEPS[chosen], float_format, header=header)
    if keys is not None and chosen not in ("npy", "npz"):
        writer = _keyed_writer(chosen, keys, float_format, header=header)
    if path != "-":
        if outputs is not None:
            refuse_binary_on_terminal(chosen, path, outputs)
            _stage(outputs, path, writer, result, counts)
            return chosen
        with OutputSet() as own:
            own.reserve(path)
            refuse_binary_on_terminal(chosen, path, own)
            _stage(own, path, writer, result, counts)
        return chosen
    out = stdout if stdout is not None else sys.stdout.buffer
    refuse_binary_on_terminal(chosen, path, stdout=out)
    try:
        with streaming_out():
            writer(result, counts, cast(BinaryIO, _Sequential(out)), True)
            out.flush()
    except BrokenPipeError:
        raise  # the reader went away: the CLI decides how quietly to stop
    except OSError as exc:
        raise WriteError(f"{STDOUT_LABEL}: cannot write ({exc.strerror or exc})") from exc
    return chosen


def _stage(
    outputs: OutputSet, path: str, writer: _Writer, result: _Array, counts: _Array | None
) -> None:
    direct = outputs.is_direct(path)
    with outputs.stage(path) as f:
        # A FIFO or device cannot seek: written like stdout, through plain write() calls.
        writer(result, counts, cast(BinaryIO, _Sequential(f)) if direct else f, False)


#: Bytes per write() to a pipe, FIFO or device: a write blocked on a stalled reader returns to
#: Python within one pipe's worth, so a signal's handler runs between writes (NumPy's
#: ``tofile`` would sit in C's ``fwrite`` until the reader drains the whole array).
SEQUENTIAL_CHUNK_BYTES = 1 << 16


class _Sequential(io.RawIOBase):
    """A write-only view of stdout, a FIFO or a device, that has no file position to ask for:
    NumPy then writes ``.npy`` data with write() calls instead of ``tofile``, which needs a
    position, and each call goes out in chunks of :data:`SEQUENTIAL_CHUNK_BYTES`."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw
        self._interrupted: Interrupted | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._interrupted is not None:
            # pyarrow answers a failed write by writing its footer: that write would block on
            # the stalled reader again, with the signal already spent.
            raise Interrupted(self._interrupted.signum)
        view = memoryview(data).cast("B")
        try:
            for start in range(0, len(view), SEQUENTIAL_CHUNK_BYTES):
                write_all(self._raw, view[start : start + SEQUENTIAL_CHUNK_BYTES])
        except Interrupted as interrupt:
            self._interrupted = interrupt
            raise
        return len(view)

    def flush(self) -> None:
        self._raw.flush()


def _write_npy(result: _Array, counts: _Array | None, out: BinaryIO, stream: bool) -> None:
    npformat.write_array(out, result, allow_pickle=False)


def _write_npz(result: _Array, counts: _Array | None, out: BinaryIO, stream: bool) -> None:
    arrays = {"result": result} if counts is None else {"result": result, "counts": counts}
    if not stream and out.seekable():
        np.savez(out, allow_pickle=False, **arrays)
        return
    # zipfile needs a seekable file; stdout or a FIFO is not, so build the archive in memory.
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    write_all(out, buffer.getbuffer())


def _write_parquet(result: _Array, counts: _Array | None, out: BinaryIO, stream: bool) -> None:
    import pyarrow.parquet as pq

    pq.write_table(result_table(result, counts), out)


def _write_arrow(result: _Array, counts: _Array | None, out: BinaryIO, stream: bool) -> None:
    import pyarrow.ipc as ipc

    table = result_table(result, counts)
    open_writer = ipc.new_stream if stream else ipc.new_file
    with open_writer(out, table.schema) as writer:
        writer.write_table(table)


_SEPS = {"csv": ",", "tsv": "\t"}


def check_text_output(fmt: str | None, float_format: str | None, *, header: bool = True) -> None:
    """A ``float_format``, and leaving out the header line (``header`` False), are for text
    outputs (stdout lines when ``fmt`` is None, csv, tsv)."""
    if not header and fmt is not None and fmt not in _SEPS:
        raise UsageError(f"--no-header applies to text, csv and tsv output, not {fmt}")
    if float_format is None:
        return
    if fmt is not None and fmt not in _SEPS:
        raise UsageError(f"--float-format applies to text, csv and tsv output, not {fmt}")
    check_float_format(float_format)


def _text_writer(sep: str, float_format: str | None = None, *, header: bool = True) -> _Writer:
    def write(result: _Array, counts: _Array | None, out: BinaryIO, stream: bool) -> None:
        names = ["segment", *value_headers(result.shape[1:])]
        if counts is not None:
            names.append("count")
        if header:
            out.write((sep.join(names) + "\n").encode())
        for block in text_blocks(result, sep, counts, float_format=float_format):
            out.write(block)

    return write


def _keyed_writer(
    fmt: str, keys: pa.Table, float_format: str | None, *, header: bool = True
) -> _Writer:
    from segcli.io import keyed

    def write(result: _Array, counts: _Array | None, out: BinaryIO, stream: bool) -> None:
        if fmt in _SEPS:
            sep = _SEPS[fmt]
            if header:
                out.write(keyed.keyed_header(keys, result, sep, count=counts is not None).encode())
            for block in keyed.keyed_text_blocks(
                result, keys, sep, counts, float_format=float_format
            ):
                out.write(block)
        elif fmt == "json":
            _write_json(result, counts, out, stream, keyed.json_keys(keys))
        else:
            _write_table(keyed.keyed_table(result, counts, keys), fmt, out, stream)

    return write


def _write_table(table: pa.Table, fmt: str, out: BinaryIO, stream: bool) -> None:
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    if fmt == "parquet":
        pq.write_table(table, out)
        return
    open_writer = ipc.new_stream if stream else ipc.new_file
    with open_writer(out, table.schema) as writer:
        writer.write_table(table)


def _write_json(
    result: _Array,
    counts: _Array | None,
    out: BinaryIO,
    stream: bool,
    keys: dict[str, list[Any]] | None = None,
) -> None:
    doc: dict[str, object] = {} if keys is None else {"keys": keys}
    doc |= {
        "shape": list(result.shape),
        "dtype": result.dtype.name,
        "values": nested_lists(json_values(result), result.shape),
    }
    if counts is not None:
        doc["counts"] = np.asarray(counts).tolist()
    write_all(out, json.dumps(doc, allow_nan=False).encode() + b"\n")


def write_all(out: BinaryIO, data: bytes | memoryview) -> None:
    """Write every byte: a buffered pipe returns a short count instead of raising when its
    reader leaves mid-write, so retry the rest, which then raises BrokenPipeError."""
    view = memoryview(data).cast("B")
    while view:
        written = out.write(view)
        if not written:
            raise OSError(f"wrote 0 of {len(view)} bytes")
        view = view[written:]


_WRITERS: dict[str, _Writer] = {
    "npy": _write_npy,
    "npz": _write_npz,
    "parquet": _write_parquet,
    "arrow": _write_arrow,
    "csv": _text_writer(","),
    "tsv": _text_writer("\t"),
    "json": _write_json,
}


def result_table(result: _Array, counts: _Array | None = None) -> pa.Table:
    """The Arrow table of a result: ``segment``, ``value`` (and ``count``), see the module doc."""
    import pyarrow as pa

    result = to_native(result)
    columns: dict[str, pa.Array] = {
        "segment": arrow_array(np.arange(result.shape[0], dtype=np.int64)),
        VALUE_COLUMN: _value_array(result),
    }
    if counts is not None:
        columns["count"] = arrow_array(to_native(np.asarray(counts)))
    table = pa.table(columns)
    if result.ndim == 1 and result.dtype.kind != "c":
        return table
    return table.replace_schema_metadata(
        {INNER_SHAPE_KEY: json.dumps(list(result.shape[1:])), DTYPE_KEY: result.dtype.name}
    )


def _value_array(result: _Array) -> pa.Array:
    """The ``value`` column: plain for 1-D real results, else a list of the flat inner values."""
    import pyarrow as pa

    if result.ndim == 1 and result.dtype.kind != "c":
        return arrow_array(result)
    rows = result.shape[0]
    flat = np.ascontiguousarray(result).reshape(rows, math.prod(result.shape[1:]))
    if result.dtype.kind == "c":
        flat = flat.view(flat.real.dtype)  # (re, im) pairs side by side
    values = arrow_array(flat.reshape(-1))
    if flat.shape[1] == 0:
        # Arrow has no fixed-size list of size 0; equal-length (empty) lists read back the same.
        return pa.ListArray.from_arrays(arrow_array(np.zeros(rows + 1, np.int32)), values)
    return pa.FixedSizeListArray.from_arrays(values, flat.shape[1])


def json_values(result: _Array) -> list[Any]:
    """The values of ``result`` in C order as JSON-ready scalars (see the module doc)."""
    flat = result.reshape(-1)
    if result.dtype.kind == "f":
        return [_json_float(s) for s in value_strings(flat).tolist()]
    if result.dtype.kind == "c":
        re = value_strings(flat.real).tolist()
        im = value_strings(flat.imag).tolist()
        return [[_json_float(r), _json_float(i)] for r, i in zip(re, im, strict=True)]
    return list(flat.tolist())


def _json_float(text: str) -> float | str:
    # Going through the dtype's own shortest text keeps float32 values short (0.1, not
    # 0.10000000149011612) while float() of that text still reads back to the same float32.
    return text if text in ("nan", "inf", "-inf") else float(text)


def nested_lists(flat: list[Any], shape: tuple[int, ...]) -> list[Any]:
    """Split a flat C-order list into nested lists of ``shape``."""
    if len(shape) <= 1:
        return flat
    step = math.prod(shape[1:])
    return [nested_lists(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
