"""``segment_reduce``: validate once, pick the engine, fold, finalize.

Unsorted ids are checked by the fold's own counts (see :func:`report_from_counts`): in the
common case no separate pass over the ids (one for their largest when n is not given).

This module never imports click or rich: it is the library the CLI translates.
"""

from __future__ import annotations

import re
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from segcli import ops, validate
from segcli.engines import Engine, choose_engine
from segcli.errors import EngineUnavailableError, InvalidInputError, SegcliError, UsageError
from segcli.memory import available_bytes, human_bytes, writer_bytes
from segcli.multi import fold_rows

#: The output format this run will write (the pipeline sets it), so that the "does it fit"
#: check counts the writer's memory; None for a library call, which writes nothing.
OUTPUT_FORMAT: ContextVar[str | None] = ContextVar("segcli_output_format", default=None)


@dataclass
class Reduction:
    """A finished reduction and what the summary reports about it.

    ``result`` is the answer, shape ``(n,) + inner`` (what ``segment_reduce`` returns);
    ``counts`` the rows of each segment after the dropped ones, shape ``(n,)`` (with
    ``skipna`` too); ``id_report`` holds n, whether it was inferred, the rows and those dropped
    (``dropped_negative``, ``dropped_beyond``); ``engine`` and ``engine_reason`` say which
    engine ran and why; ``timings`` the seconds of ``"validate"`` and ``"compute"``.
    """

    result: np.ndarray
    counts: np.ndarray
    op: ops.Op
    sorted_ids: bool
    id_report: validate.IdReport
    engine: str
    engine_reason: str
    timings: dict[str, float] = field(default_factory=dict)
    #: ``--skipna``: the values left out (NaN or null) among the rows used; None without it.
    skipped_values: int | None = None
    #: ``--skipna``: the rows dropped for a null id (the id report counts them as negative).
    null_ids: int = 0

    @property
    def empty_segments(self) -> int:
        return int(np.count_nonzero(self.counts == 0))

    @classmethod
    def finish(
        cls,
        state: ops.State,
        report: validate.IdReport,
        *,
        sorted_ids: bool,
        engine: str,
        engine_reason: str,
        fill: Any,
        timings: dict[str, float],
    ) -> Reduction:
        """Finalize a (host) state into the result and wrap it with what the summary needs."""
        return cls(
            result=ops.finalize(state, fill),
            counts=np.asarray(state.count),
            op=state.op,
            sorted_ids=sorted_ids,
            id_report=report,
            engine=engine,
            engine_reason=engine_reason,
            timings=timings,
            skipped_values=None if state.op.skipna_of is None else ops.skipped_values(state),
        )


def output_bytes(
    op: ops.Op,
    num_segments: int,
    inner_shape: tuple[int, ...],
    data_dtype: np.dtype[Any],
    sorted_ids: bool,
    writer: str | None,
) -> int:
    """The peak memory of a run's last steps: the fold state, the merged lanes and the
    finished result beside it, the counts and their masks (up to 32 bytes a segment,
    measured), and what the writer of ``writer`` adds (see :func:`memory.writer_bytes`)."""
    needed = ops.state_bytes(op, num_segments, inner_shape, data_dtype, sorted_ids=sorted_ids)
    values = num_segments * ops.inner_size(inner_shape)
    itemsize = op.out_dtype(data_dtype).itemsize
    needed += values * (itemsize + 8) + num_segments * 32
    return needed + writer_bytes(writer, num_segments, values, itemsize)


def check_output_fits(
    op: ops.Op,
    num_segments: int,
    inner_shape: tuple[int, ...],
    data_dtype: np.dtype[Any],
    *,
    sorted_ids: bool = False,
    inferred: bool = False,
) -> None:
    """docs/semantics.md: n so large that the output would not fit in memory is an error, before any
    work. ``inferred``: n comes from the largest id (no -n given), which the message names."""
    writer = OUTPUT_FORMAT.get()
    needed = output_bytes(op, num_segments, inner_shape, data_dtype, sorted_ids, writer)
    available = available_bytes()
    if needed > available:
        writing = f" to write {writer}" if writer else ""
        source = f" (inferred: the largest id is {num_segments - 1})" if inferred else ""
        raise InvalidInputError(
            f"num_segments = {num_segments}{source}: the output needs {needed:,} bytes "
            f"({human_bytes(needed)}){writing}, more than the {human_bytes(available)} of "
            "memory available"
        )


def check_metadata(
    op: ops.Op,
    data: tuple[tuple[int, ...], np.dtype[Any]],
    ids: tuple[tuple[int, ...], np.dtype[Any]],
    num_segments: int | None,
    *,
    sorted_ids: bool,
    data_label: str | None = None,
    ids_label: str | None = None,
    ids_values: np.ndarray | None = None,
    fill: Any = None,
) -> int | None:
    """The checks that need no id values, in the order a user would fix them: DATA's dtype for
    the op, the ``fill`` in the op's result dtype (as agg's ops and the holistic ops check
    theirs), the ids' dtype, the shapes, then n (returned). ``data`` and ``ids`` are
    ``(shape, dtype)``; every driver calls this before it reads a row (or, in memory, before it
    looks at the ids' values, which ``ids_values`` lends to the float-ids message).
    """
    data_shape, data_dtype = data
    ids_shape, ids_dtype = ids
    ops.check_data_dtype(op, data_dtype, data_label or "data")
    if fill is not None:
        ops.parse_fill(fill, op, data_dtype)
    validate.check_ids_dtype(ids_dtype, ids_label, ids_values)
    validate.check_shapes(
        data_shape, ids_shape, sorted_ids=sorted_ids, data_label=data_label, ids_label=ids_label
    )
    return validate.check_num_segments(num_segments)


def check_before_rows(
    op: ops.Op,
    data: tuple[tuple[int, ...], np.dtype[Any]],
    ids: tuple[tuple[int, ...], np.dtype[Any]],
    num_segments: int | None,
    *,
    sorted_ids: bool,
    fill: Any,
    data_label: str,
    ids_label: str,
) -> int | None:
    """Every check a run that reads its rows later (streamed, distributed) makes first:
    :func:`check_metadata` (the ``fill`` value too), and with n given, that the output fits."""
    n = check_metadata(
        op,
        data,
        ids,
        num_segments,
        sorted_ids=sorted_ids,
        data_label=data_label,
        ids_label=ids_label,
        fill=fill,
    )
    (data_shape, data_dtype), (ids_shape, _) = data, ids
    if n is not None:
        inner = tuple(data_shape[len(ids_shape) :])
        check_output_fits(op, n, inner, data_dtype, sorted_ids=sorted_ids)
    return n


def _check_before_ids(
    data: np.ndarray,
    ids: np.ndarray,
    num_segments: int | None,
    op: ops.Op,
    *,
    sorted_ids: bool,
    data_label: str | None,
    ids_label: str | None,
    fill: Any = None,
) -> int | None:
    """:func:`check_metadata` of two arrays in hand."""
    return check_metadata(
        op,
        (data.shape, data.dtype),
        (ids.shape, ids.dtype),
        num_segments,
        sorted_ids=sorted_ids,
        data_label=data_label,
        ids_label=ids_label,
        ids_values=ids,
        fill=fill,
    )


def validate_inputs(
    data: np.ndarray,
    ids: np.ndarray,
    num_segments: int | None,
    op: ops.Op,
    *,
    sorted_ids: bool,
    data_label: str | None = None,
    ids_label: str | None = None,
    fill: Any = None,
) -> validate.IdReport:
    """Every check of docs/semantics.md, in the order a user would fix them (a ``fill`` the
    result cannot hold among the metadata's, as in a streamed run); returns the id report."""
    n = _check_before_ids(
        data,
        ids,
        num_segments,
        op,
        sorted_ids=sorted_ids,
        data_label=data_label,
        ids_label=ids_label,
        fill=fill,
    )
    report = validate.check_ids(ids, n, sorted_ids=sorted_ids, label=ids_label)
    check_output_fits(
        op,
        report.num_segments,
        data.shape[ids.ndim :],
        data.dtype,
        sorted_ids=sorted_ids,
        inferred=report.inferred,
    )
    return report


def _check_unsorted_before_fold(
    data: np.ndarray,
    ids: np.ndarray,
    num_segments: int | None,
    op: ops.Op,
    *,
    fill: Any,
    data_label: str | None,
    ids_label: str | None,
) -> tuple[int, bool]:
    """``(n, inferred)`` for unsorted ids, after every check but the ids' values, which
    :func:`report_from_counts` makes after the fold (a bad ``fill`` among the metadata's,
    before the output's size, as in a streamed run)."""
    given = _check_before_ids(
        data,
        ids,
        num_segments,
        op,
        sorted_ids=False,
        data_label=data_label,
        ids_label=ids_label,
        fill=fill,
    )
    n = validate.implied_num_segments(ids) if given is None else given
    try:
        check_output_fits(op, n, data.shape[ids.ndim :], data.dtype, inferred=given is None)
    except InvalidInputError:
        validate.check_ids(ids, given, sorted_ids=False, label=ids_label)  # ids come first
        raise
    return n, given is None


def report_from_counts(
    count: np.ndarray,
    ids: np.ndarray,
    num_segments: int,
    *,
    inferred: bool,
    label: str | None = None,
) -> validate.IdReport:
    """The report of unsorted ids already folded into ``num_segments`` segments.

    Every engine skips (and does not count) a row whose id lies outside ``[0, n)``, so the
    counts add up to the number of ids exactly when every id is in range: the common case needs
    no pass over the ids of its own. A row not counted has a negative id (dropped, as
    docs/semantics.md says) or one >= n: with n implied by the ids (their largest plus one)
    there is none of those, and with n given there is none when the negative ids account for
    every row not counted.
    Otherwise the full check runs and raises the first id out of range, as
    :func:`validate_inputs` would have before the fold.
    """
    dropped = int(ids.size) - int(count.sum())
    if dropped and not inferred and validate.count_negative(ids) != dropped:
        return validate.check_ids(ids, num_segments, sorted_ids=False, label=label)
    return validate.IdReport(num_segments, inferred, int(ids.size), dropped, 0)


def reduce_arrays(
    data: Any,
    segment_ids: Any,
    num_segments: int | None = None,
    op: str | ops.Op = "sum",
    *,
    sorted: bool = False,
    engine: str | Engine = "auto",
    fill: Any = None,
    data_label: str | None = None,
    ids_label: str | None = None,
    q: float | None = None,
    skipna: bool = False,
    ddof: int | None = None,
) -> Reduction:
    """Like :func:`segment_reduce`, returning a :class:`Reduction`: the result with the
    counts, the id report (``id_report.dropped_negative``, ``dropped_beyond``, ...), the engine
    that ran and why, and timings. ``data_label`` and ``ids_label`` name the inputs in error
    messages."""
    try:
        return reduce_with_option_words(
            data,
            segment_ids,
            num_segments,
            op,
            sorted=sorted,
            engine=engine,
            fill=fill,
            data_label=data_label,
            ids_label=ids_label,
            q=q,
            skipna=skipna,
            ddof=ddof,
        )
    except SegcliError as exc:
        exc.args = (in_parameter_words(str(exc)),)
        raise


def reduce_with_option_words(
    data: Any,
    segment_ids: Any,
    num_segments: int | None = None,
    op: str | ops.Op = "sum",
    *,
    sorted: bool = False,
    engine: str | Engine = "auto",
    fill: Any = None,
    data_label: str | None = None,
    ids_label: str | None = None,
    q: float | None = None,
    skipna: bool = False,
    ddof: int | None = None,
) -> Reduction:
    """:func:`reduce_arrays` for the command line's drivers: its errors name the command
    line's options (``--fill``, ``--sorted``), which the library's calls translate."""
    _check_library_engine(engine)
    if not isinstance(op, (str, ops.Op)):  # unhashable (a list): a TypeError in the lookup
        raise UsageError(f"unknown op {op!r} (ops: {', '.join(ops.OPS)})")
    op_def = ops.get_op(op) if ddof is None else ops.with_ddof(op, ddof)
    skipping = skipna or op_def.skipna_of is not None  # the CLI passes the --skipna op
    # count reads no values: a masked one is still a row (the check command counts so).
    data = _data_array(data, skipna=skipping or op_def.name == "count", label=data_label)
    segment_ids, null_ids = _ids_array(segment_ids, skipna=skipping, sorted=sorted, label=ids_label)
    labels = {"data_label": data_label, "ids_label": ids_label}
    reduction = _reduce(
        data, segment_ids, num_segments, op_def, sorted, engine, fill, q, skipna, labels
    )
    return replace(reduction, null_ids=null_ids) if null_ids else reduction


def _reduce(
    data: Any,
    segment_ids: Any,
    num_segments: int | None,
    op_def: ops.Op,
    sorted: bool,
    engine: str | Engine,
    fill: Any,
    q: float | None,
    skipna: bool,
    labels: dict[str, str | None],
) -> Reduction:
    """:func:`reduce_arrays` once the caller's arrays are plain (or masked under skipna)."""
    data_label, ids_label = labels["data_label"], labels["ids_label"]
    if op_def.holistic or q is not None:
        return _reduce_holistic(
            data,
            segment_ids,
            num_segments,
            op_def,
            sorted=sorted,
            engine=engine,
            fill=fill,
            q=q,
            skipna=skipna,
            data_label=data_label,
            ids_label=ids_label,
        )
    if skipna:
        op_def = ops.skipna_op(op_def)
    # A masked array (nulls read under --skipna) keeps its mask: the values it hides are missing.
    data = data if _is_masked(data) else _native(np.asarray(data))
    ids = np.asarray(segment_ids)
    started = time.perf_counter()
    inner_shape = tuple(data.shape[ids.ndim :])
    report: validate.IdReport | None = None  # unsorted ids: from the fold's counts
    if sorted:
        report = validate_inputs(
            data, ids, num_segments, op_def, sorted_ids=True, fill=fill, **labels
        )
        n, inferred = report.num_segments, report.inferred
    else:
        n, inferred = _check_unsorted_before_fold(
            data, ids, num_segments, op_def, fill=fill, **labels
        )
    width = ops.inner_size(inner_shape)
    choice = choose_engine(engine, elements=data.size, skipna=op_def.skipna_of is not None)
    validated = time.perf_counter()
    state = choice.engine.new_state(op_def, n, inner_shape, data.dtype, sorted_ids=sorted)
    data, flat_ids = data.reshape(ids.size, width), ids.reshape(-1)
    fold_rows(choice.engine, state, data, flat_ids, sorted_ids=sorted)
    host = state.to_host()
    if report is None:
        report = report_from_counts(host.count, ids, n, inferred=inferred, label=ids_label)
    reduction = Reduction.finish(
        host,
        report,
        sorted_ids=sorted,
        engine=choice.engine.name,
        engine_reason=choice.reason,
        fill=fill,
        timings={"validate": validated - started},
    )
    reduction.timings["compute"] = time.perf_counter() - validated
    return reduction


def _check_library_engine(engine: Any) -> None:
    """Dask runs the CLI's file inputs on a cluster; arrays already in memory have no use
    for it, so the library says where it lives rather than calling it an unknown engine."""
    if engine == "dask":
        raise EngineUnavailableError(
            "engine 'dask' reduces files on a Dask cluster from the command line "
            "(segcli ... --engine dask; install it with pip install 'segcli[dask]', or "
            "'.[dask]' in a segcli checkout); for arrays in memory use engine 'auto', 'numpy' "
            "or 'numba'"
        )


def _as_array(value: Any, label: str) -> np.ndarray:
    """``np.asarray(value)``; a value NumPy cannot make into an array (ragged lists) is an
    input error, as a bad dtype is."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(f"{label}: not an array ({exc})") from None


def _nulls_masked(value: Any) -> Any:
    """A pyarrow array or a pandas Series of a nullable dtype holding nulls, as a masked array
    of its own dtype (NumPy's conversion would turn the nulls into NaN and integers into
    floats), so that its nulls follow the rules of a table column's; any other value as it
    is."""
    package = type(value).__module__.partition(".")[0]
    if package == "pyarrow":
        value = _dictionary_decoded(value)
    try:
        if package == "pyarrow" and hasattr(value, "is_null") and value.null_count:
            import pyarrow.types

            mask = np.asarray(value.is_null())
            zero = False if pyarrow.types.is_boolean(value.type) else 0
            values = np.asarray(value.fill_null(zero))
        elif package == "pandas" and hasattr(getattr(value, "dtype", None), "numpy_dtype"):
            mask = np.asarray(value.isna())
            if not mask.any():
                return value
            values = value.to_numpy(dtype=value.dtype.numpy_dtype, na_value=0)
        elif (
            package == "pandas" and getattr(getattr(value, "dtype", None), "name", "") == "category"
        ):
            mask, values = _categorical_parts(value)
            if not mask.any():
                return value
        else:
            return value
    except (TypeError, ValueError, AttributeError, NotImplementedError):
        return value  # a type without a zero (strings): NumPy's conversion and its error
    import numpy.ma

    return numpy.ma.MaskedArray(values, mask=mask)


def _categorical_parts(value: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, values)`` of a pandas categorical: its missing rows (code -1, which NumPy's
    conversion makes NaN, integers floats) and its values, the first category there."""
    codes = np.asarray(getattr(value, "cat", value).codes)
    categories = np.asarray(value.dtype.categories)
    mask = codes < 0
    if not categories.size:  # every row missing: no value of the categories' type to show
        raise TypeError("no categories")
    return mask, categories[np.where(mask, 0, codes)]


def _dictionary_decoded(value: Any) -> Any:
    """A pyarrow dictionary array as its values, as the command line reads a dictionary
    column: a row on a null entry is null (``null_count`` counts null indices only, and
    NumPy's conversion would make it NaN, integers floats); any other value as it is."""
    import pyarrow.types as pt

    type_ = getattr(value, "type", None)
    if type_ is None or not pt.is_dictionary(type_):
        return value
    return value.cast(type_.value_type)


def _refuse_arrow_objects(value: Any, label: str, *, ids: bool = False) -> None:
    """A pyarrow array that NumPy would make object data (lists, decimals, strings) is an
    error naming its type and what to do, as the command line reads such a column: lists as
    an axis more, decimals as float64 (ids: cast to integers), text not at all."""
    if type(value).__module__.partition(".")[0] != "pyarrow" or not hasattr(value, "type"):
        return
    import pyarrow.types as pt

    type_ = value.type
    plain = type_.value_type if pt.is_dictionary(type_) else type_
    if pt.is_list(plain) or pt.is_large_list(plain) or pt.is_fixed_size_list(plain):
        raise InvalidInputError(
            f"{label}: a pyarrow array of lists ({type_}), which NumPy makes object data; "
            "give the lists as an axis of the array instead (numpy.array of its to_pylist(), "
            "for lists of one length), as the command line reads a list column"
        )
    if pt.is_decimal(plain):
        cast = (
            "cast it to integers first (.cast(pyarrow.int64()))"
            if ids
            else "cast it first (.cast(pyarrow.float64())), as the command line reads a "
            "decimal column as float64"
        )
        raise InvalidInputError(
            f"{label}: a pyarrow decimal array ({type_}), which NumPy makes object data; {cast}"
        )
    if not (
        pt.is_integer(plain)
        or pt.is_floating(plain)
        or pt.is_boolean(plain)
        or pt.is_null(plain)
        or pt.is_temporal(plain)
    ):
        raise InvalidInputError(f"{label}: a pyarrow array of type {type_}, not a numeric type")


def _data_array(data: Any, *, skipna: bool, label: str | None) -> np.ndarray:
    """The caller's data as an array. Nulls and a masked array's hidden values are missing:
    an error without ``skipna`` (as nulls in a table column are), left out with it; float ones
    become NaN, which every op (median and quantile too) then leaves out element by element."""
    _refuse_arrow_objects(data, label or "data")
    data = _nulls_masked(data)
    if not _is_masked(data):
        return data if isinstance(data, np.ndarray) else _as_array(data, label or "data")
    mask = np.ma.getmaskarray(data)
    if not mask.any():
        return np.ma.getdata(data)
    if not skipna:
        first = int(np.argmax(mask.reshape(-1)))
        where = np.unravel_index(first, mask.shape) if mask.ndim > 1 else (first,)
        raise InvalidInputError(
            f"{label or 'data'}[{', '.join(str(int(k)) for k in where)}] is null or masked "
            f"({validate.plural(int(np.count_nonzero(mask)), 'missing value')}); pass "
            "skipna=True to leave missing values out"
        )
    if data.dtype.kind == "f":
        return np.ma.filled(data, np.nan)
    return _native(data)  # masked, so the caller does not convert it


def _ids_array(
    segment_ids: Any, *, skipna: bool, sorted: bool, label: str | None
) -> tuple[np.ndarray, int]:
    """The caller's ids as an array, and how many were masked. Under ``skipna`` a masked id
    drops its row, as a null id in a table column does (an error for sorted ids); without it,
    an error. An empty list has no dtype of its own: it holds no id that is not an integer."""
    if isinstance(segment_ids, (list, tuple)) and len(segment_ids) == 0:
        return np.zeros(0, np.int64), 0
    _refuse_arrow_objects(segment_ids, label or "segment_ids", ids=True)
    segment_ids = _nulls_masked(segment_ids)
    if not _is_masked(segment_ids):
        return _as_array(segment_ids, label or "segment_ids"), 0
    mask = np.ma.getmaskarray(segment_ids)
    if mask.any() and not skipna:
        first = int(np.argmax(mask.reshape(-1)))
        raise InvalidInputError(
            f"{validate.index_text(mask.shape, first)} is null or masked "
            f"({validate.plural(int(np.count_nonzero(mask)), 'missing id')}); pass skipna=True "
            "to drop their rows"
        )
    from segcli.io.columns import without_null_ids

    return without_null_ids(segment_ids, sorted_ids=sorted, label=label)


def _native(data: np.ndarray) -> np.ndarray:
    """Big-endian data in native byte order, as the file readers give it: the engines' state
    takes the data's dtype, and compiled kernels read native byte order only."""
    return data if data.dtype.isnative else data.astype(data.dtype.newbyteorder("="))


def _is_masked(data: Any) -> bool:
    """Whether ``data`` is a NumPy masked array, without importing numpy.ma (about 8 ms of
    start-up): no masked array can exist before that module is loaded."""
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(data, ma.MaskedArray)


def _reduce_holistic(
    data: Any,
    segment_ids: Any,
    num_segments: int | None,
    op: ops.Op,
    *,
    sorted: bool,
    engine: Any,
    fill: Any,
    q: float | None,
    skipna: bool,
    data_label: str | None,
    ids_label: str | None,
) -> Reduction:
    """:func:`reduce_arrays` of a holistic op: the engine validates and counts the rows,
    :mod:`segcli.holistic` sorts them."""
    from segcli.holistic_runs import HolisticJob, check_q

    if getattr(engine, "name", engine) in ("cupy", "dask"):
        raise EngineUnavailableError(
            f"engine {getattr(engine, 'name', engine)!r} has no kernel for {op.name} (it sorts "
            "on the CPU); use engine numpy or numba"
        )
    # A masked array (nulls read under --skipna) keeps its mask: its rows are left out.
    data = data if _is_masked(data) else _native(np.asarray(data))
    ids = np.asarray(segment_ids)
    job = HolisticJob.of(
        (op.name,), data.dtype, q=q, skipna=skipna, fill=fill, label=data_label or "data"
    )
    job = replace(job, q=check_q((op.name,), q))
    counted = reduce_with_option_words(
        data,
        ids,
        num_segments,
        "count",
        skipna=skipna,
        sorted=sorted,
        engine=engine,
        data_label=data_label,
        ids_label=ids_label,
    )
    started = time.perf_counter()
    result = _holistic_result(job, data, ids, counted.id_report.num_segments)
    counted.timings["compute"] += time.perf_counter() - started
    return replace(counted, result=result, op=op)


def _holistic_result(job: Any, data: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """The job's one result. A masked array with inner axes goes a column at a time: the
    sort leaves out a masked row, and a column's masked values are whole rows of it."""
    inner = data.shape[ids.ndim :]
    if not _is_masked(data) or ops.inner_size(inner) <= 1:
        (result,) = job.reduce_arrays(data, ids, n)
        return np.asarray(result)
    columns = data.reshape((*ids.shape, -1))
    parts = [job.reduce_arrays(columns[..., k], ids, n)[0] for k in range(columns.shape[-1])]
    return np.stack(parts, axis=-1).reshape((n, *inner))


def segment_reduce(
    data: Any,
    segment_ids: Any,
    num_segments: int | None = None,
    op: str = "sum",
    *,
    sorted: bool = False,
    engine: str = "auto",
    fill: Any = None,
    q: float | None = None,
    skipna: bool = False,
    ddof: int | None = None,
) -> np.ndarray:
    """Reduce the rows of ``data`` per segment, with TensorFlow's segment-reduction semantics.

    ``data`` has shape ``segment_ids.shape + inner``; the result has shape ``(n,) + inner``.
    ``op`` names an op of :data:`segcli.OPS`: TensorFlow's ``sum, mean, min, max, prod,
    sqrt_n`` and ``count``, then ``var, std, argmin, argmax, first, last, any, all, logsumexp,
    median, quantile, nunique``; ``ddof`` is var's and std's (default 0). With ``sorted=False``
    (``unsorted_segment_*``) negative ids drop their rows and ids ``>= n`` are an error; with
    ``sorted=True`` (``Segment*V2``) ids must be 1-D, non-negative and non-decreasing, and ids
    ``>= n`` drop their rows. ``num_segments`` defaults to the number the ids imply.
    ``fill`` replaces the op's value for empty segments. ``q`` is quantile's (0 to 1; median,
    quantile and nunique sort each segment's values). ``skipna`` leaves NaN values out, element
    by element (an element with none present is empty; count counts them), and the nulls of
    a pandas or pyarrow column or the masked values of a masked array; a null or masked id
    drops its row (without ``skipna``, either is an error).
    Raises :class:`segcli.SegcliError`.

    >>> segment_reduce([1.0, 2.0, 3.0, 4.0], [0, 0, 2, 2], 4, "sum")
    array([3., 0., 7., 0.])
    """
    return reduce_arrays(
        data,
        segment_ids,
        num_segments,
        op,
        sorted=sorted,
        engine=engine,
        fill=fill,
        q=q,
        skipna=skipna,
        ddof=ddof,
    ).result


#: The command line's options as this function's parameters: the checks that raise are
#: shared with the CLI, whose words they use.
_PARAMETER_WORDS = (
    (re.compile(r"--q Q\b|--q\b"), "q"),
    (re.compile(r"--(fill|ddof)\b"), r"\1"),
    (re.compile(r"--sorted ids\b"), "ids under sorted=True"),
    (re.compile(r"--(sorted|skipna)\b"), r"\1=True"),
    (re.compile(r"\buse --engine\b"), "use engine"),
)


def in_parameter_words(message: str) -> str:
    """``message`` with the command line's options spelled as :func:`reduce_arrays`'
    parameters (``--fill 1e-50`` as ``fill 1e-50``, ``--sorted`` as ``sorted=True``)."""
    for pattern, words in _PARAMETER_WORDS:
        message = pattern.sub(words, message)
    return message
