"""Several ops in one pass (``segcli agg``): one combined state, one result per op.

The ops of a list are merged into one :class:`CombinedOp` for the data's dtype. Its
intermediates are the union of the ops' intermediates, an intermediate kept once when two ops
name it alike and fold it alike into the same accumulator dtype (mean and sqrt_n share
``sum``; every op shares ``count``). A joint op (var, std, argmin, first, logsumexp, ...: see
:attr:`segcli.ops.Op.joint`) reads its intermediates together as it folds, so its
intermediates are kept apart, under ``<joint>.<name>``, once per joint fold (var and std share
``moments``). The combined state is folded by :func:`fold_rows`: the intermediates that fold
alone in one call of the engine, each joint op's in one more, so each block of rows is read
once and each shared intermediate folded once. Its ``finalize`` gives each op the parts it asked
for, under the names it knows, and packs the results side by side in one structured array (a
field per op); :func:`split` unpacks them. Empty segments take each op's own empty value or
``--fill``, parsed in that op's output dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import ops
from segcli.errors import InvalidInputError, UsageError
from segcli.memory import human_bytes
from segcli.op_names import DDOF_OPS

if TYPE_CHECKING:
    from segcli.engines import Engine

#: The combined op's name, as the summary shows it.
AGG = "agg"


def parse_ops(text: str) -> tuple[str, ...]:
    """``--op sum,mean,max`` as op names; an empty list, an unknown or a repeated op is a
    usage error."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise UsageError(f"--op {text!r}: need op names separated by commas, e.g. --op sum,max")
    for name in names:
        ops.get_op(name)
    repeated = [name for name in names if names.count(name) > 1]
    if repeated:
        raise UsageError(f"--op: '{repeated[0]}' is given twice")
    return names


def with_ddof(names: tuple[str, ...], ddof: int | None) -> tuple[str | ops.Op, ...]:
    """The ops of ``names`` with ``--ddof`` applied to var and std; ``--ddof`` in a list
    without either is a usage error (SPEC: an option no op uses)."""
    if ddof is None:
        return names
    if not any(name in DDOF_OPS for name in names):
        raise UsageError(
            f"--ddof applies to {' and '.join(DDOF_OPS)} only, and --op {','.join(names)} "
            "has neither"
        )
    return tuple(ops.with_ddof(name, ddof) if name in DDOF_OPS else name for name in names)


@dataclass(frozen=True)
class _Source:
    """Where one op's intermediate lives in the combined state."""

    op: ops.Op
    #: The op's own name of each intermediate -> its name in the combined state.
    names: dict[str, str]


@dataclass(frozen=True, eq=False)
class Part:
    """What one call of the engine folds: the intermediates that fold alone (as one op of
    them), or one joint op's, under the op's own names."""

    op: ops.Op
    #: The part's own name of each intermediate -> its name in the combined state.
    names: dict[str, str]


# Compared and hashed as the table's ops are (by identity in effect): its parts hold dicts.
@dataclass(frozen=True, eq=False)
class CombinedOp(ops.Op):
    """The op of several ops; :attr:`parts` is empty when every intermediate folds alone (then
    an engine folds the state in one call, as any op)."""

    parts: tuple[Part, ...] = ()
    #: The arguments of :func:`combined_op` that built it (to rebuild it in another process).
    recipe: tuple[Any, ...] = ()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Ops are compared by identity: the same arguments give the same (cached) object.
        if self.skipna_of is not None:
            return (ops.skipna_op, (self.skipna_of,))
        return (_rebuilt, self.recipe)


def _rebuilt(
    names: tuple[str, ...],
    ddof: int | None,
    data_dtype: str,
    inner_shape: tuple[int, ...],
    fill: Any,
    skipna: bool,
) -> CombinedOp:
    return combined_op(
        with_ddof(names, ddof), np.dtype(data_dtype), inner_shape, fill=fill, skipna=skipna
    )


def _alone_fold(fold: ops.Fold) -> ops.Fold:
    # A joint fold keeps one lane, in row order (see ops.fold_lanes): in the combined state,
    # whose op is not joint, a fold that does not round gets one lane too (unless the joint op
    # keeps lanes: its intermediates are dealt, see _union).
    return dataclasses.replace(fold, rounds=False)


def _union(
    chosen: tuple[ops.Op, ...], data_dtype: np.dtype[Any]
) -> tuple[tuple[ops.Intermediate, ...], list[_Source], tuple[Part, ...]]:
    """The combined intermediates, where each op finds its own, and the joint parts."""
    kept: dict[tuple[str, ...], str] = {}
    intermediates: list[ops.Intermediate] = []
    sources = []
    joint_parts: dict[tuple[str, ...], Part] = {}
    for op in chosen:
        names = {}
        if op.joint is not None:
            accs = tuple(i.acc_dtype(data_dtype).str for i in op.intermediates)
            key = (op.joint, *accs)
            if key not in joint_parts:
                own = {i.name: f"{op.joint}.{i.name}" for i in op.intermediates}
                joint_parts[key] = Part(op, own)
                intermediates.extend(
                    ops.Intermediate(
                        own[i.name], _alone_fold(i.fold), i.acc_dtype, dealt=op.joint_lanes
                    )
                    for i in op.intermediates
                )
            sources.append(_Source(op, dict(joint_parts[key].names)))
            continue
        for intermediate in op.intermediates:
            acc = intermediate.acc_dtype(data_dtype)
            key = (intermediate.name, intermediate.fold.kind, acc.str)
            if key not in kept:
                # Same name, another accumulator (sum wraps int64, mean sums exactly): two.
                taken = {i.name for i in intermediates}
                name = intermediate.name
                if name in taken or name == "count":
                    name = f"{intermediate.name}.{op.name}"
                kept[key] = name
                intermediates.append(
                    ops.Intermediate(name, intermediate.fold, intermediate.acc_dtype)
                )
            names[intermediate.name] = kept[key]
        sources.append(_Source(op, names))
    return tuple(intermediates), sources, tuple(joint_parts.values())


def _field_shape(op: ops.Op, inner_shape: tuple[int, ...], skipna: bool) -> tuple[int, ...]:
    # An op that keeps only the count gives one value per row, like the single-op count;
    # under --skipna it counts present values, element by element.
    return () if not op.intermediates and not skipna else inner_shape


def _result_dtype(
    chosen: tuple[ops.Op, ...],
    data_dtype: np.dtype[Any],
    inner_shape: tuple[int, ...],
    skipna: bool,
    label: str,
) -> np.dtype[Any]:
    """One result row: a field per op. NumPy holds a structured row in under 2 GiB (its
    size, and each dimension, a C int): wider rows, such as a header's claim on a pipe
    that no size check can test, are refused naming DATA and its row shape."""
    fields = [
        (op.name, op.out_dtype(data_dtype), _field_shape(op, inner_shape, skipna)) for op in chosen
    ]
    row_bytes = sum(dtype.itemsize * math.prod(shape) for _, dtype, shape in fields)
    if row_bytes >= 2**31 or any(d >= 2**31 for _, _, shape in fields for d in shape):
        raise InvalidInputError(
            f"{label}: rows of shape {list(inner_shape)} give result rows of "
            f"{human_bytes(row_bytes)} for {', '.join(op.name for op in chosen)}, more than "
            "the 2 GiB a result row of several ops can hold; run each op on its own"
        )
    return np.dtype(fields)


_CACHE: dict[tuple[Any, ...], CombinedOp] = {}


def combined_op(
    names: tuple[str | ops.Op, ...],
    data_dtype: np.dtype[Any],
    inner_shape: tuple[int, ...],
    *,
    fill: Any = None,
    label: str = "data",
    skipna: bool = False,
) -> CombinedOp:
    """The one op that folds every op of ``names`` (names, or ops of the table with their
    options, as :func:`with_ddof` gives) for data of ``data_dtype``; under ``skipna`` count
    gives a value per element (the caller folds the op through :func:`segcli.ops.skipna_op`).

    Each op checks the data dtype and parses ``fill`` first, so that its errors name it. The
    same arguments give the same object (ops are compared by identity)."""
    data_dtype = np.dtype(data_dtype)
    chosen = tuple(ops.get_op(name) for name in names)
    for op in chosen:
        ops.check_data_dtype(op, data_dtype, label)
    fills = [
        op.empty_value(op.out_dtype(data_dtype))
        if fill is None
        else _parsed_fill(fill, op, data_dtype, label)
        for op in chosen
    ]
    ddof = next((op.ddof for op in chosen if op.ddof), None)
    recipe = (
        tuple(op.name for op in chosen),
        ddof,
        data_dtype.str,
        tuple(inner_shape),
        fill,
        skipna,
    )
    if recipe not in _CACHE:
        _CACHE[recipe] = _build(
            chosen, fills, data_dtype, tuple(inner_shape), recipe, skipna, label
        )
    return _CACHE[recipe]


def _parsed_fill(fill: Any, op: ops.Op, data_dtype: np.dtype[Any], label: str) -> Any:
    """``fill`` in ``op``'s output dtype; a value that does not fit names the data column
    too, since agg's columns may hold different dtypes."""
    try:
        return ops.parse_fill(fill, op, data_dtype)
    except UsageError as error:
        raise UsageError(f"{label}: {error}") from None


def _build(
    chosen: tuple[ops.Op, ...],
    fills: list[Any],
    data_dtype: np.dtype[Any],
    inner_shape: tuple[int, ...],
    recipe: tuple[Any, ...],
    skipna: bool,
    label: str,
) -> CombinedOp:
    out_dtype = _result_dtype(chosen, data_dtype, inner_shape, skipna, label)
    intermediates, sources, joint_parts = _union(chosen, data_dtype)
    width = ops.inner_size(inner_shape)

    def finalize(parts: Mapping[str, np.ndarray], _: np.dtype[Any], owned: bool) -> Any:
        count = parts["count"]
        result = np.empty(count.shape[0], out_dtype)
        for source in sources:
            own = {"count": count}
            own.update({mine: parts[theirs] for mine, theirs in source.names.items()})
            op = source.op
            # A shared intermediate is another op's input too: never let one write to it.
            values = op.finalize(own, op.out_dtype(data_dtype), owned and _alone(source, sources))
            if values.ndim == 2:
                values = values.reshape((count.shape[0], width))
            result[op.name] = values.reshape(result[op.name].shape)
        return result

    def empty(_: np.dtype[Any]) -> Any:
        value = np.zeros((), out_dtype)
        for op, fill_value in zip(chosen, fills, strict=True):
            value[op.name] = fill_value
        return value

    def output_dtype(_: np.dtype[Any]) -> np.dtype[Any]:
        return out_dtype

    data_kinds = "".join(k for k in ops.WITH_BOOL if all(k in op.data_kinds for op in chosen))
    parts: tuple[Part, ...] = ()
    if joint_parts:
        joint_names = {name for part in joint_parts for name in part.names.values()}
        alone = tuple(i for i in intermediates if i.name not in joint_names)
        parts = joint_parts
        if alone:
            plain = ops.Op(AGG, alone, finalize=finalize, empty=empty, output_dtype=output_dtype)
            parts = (Part(plain, {i.name: i.name for i in alone}), *joint_parts)
    return CombinedOp(
        AGG,
        intermediates,
        finalize=finalize,
        empty=empty,
        output_dtype=output_dtype,
        data_kinds=data_kinds,
        merge=_merge_parts(parts) if parts else None,
        parts=parts,
        recipe=recipe,
    )


def _merge_parts(parts: tuple[Part, ...]) -> Any:
    """Two combined states merged part by part: intermediates that fold alone by their fold's
    merge (lane by lane), a joint op's by its own merge."""

    def merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {"count": a["count"] + b["count"]}
        for part in parts:
            if part.op.merge is None:
                for intermediate in part.op.intermediates:
                    name = intermediate.name
                    merged[name] = intermediate.fold.merge_values(a[name], b[name])
                continue
            own_a, own_b = _own_arrays(part, a), _own_arrays(part, b)
            own = part.op.merge(own_a, own_b)
            merged.update({theirs: own[mine] for mine, theirs in part.names.items()})
        return merged

    return merge


def _own_arrays(part: Part, arrays: Mapping[str, Any]) -> dict[str, Any]:
    own = {"count": arrays["count"]}
    own.update({mine: arrays[theirs] for mine, theirs in part.names.items()})
    return own


def fold_rows(
    engine: Engine, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
) -> None:
    """``engine.fold`` for any state: a combined op's parts one call each, over the same rows
    (or every part in one pass, where the engine has one: :meth:`Engine.fold_at_once`).

    A joint fold tells a segment's first row by its count before the block, so every part
    but the first counts into a copy of that count; the first keeps the state's own. Under
    ``--skipna`` (:func:`segcli.ops.skipna_op` of a combined op) each part folds as its own
    skipna op, and the present values are kept the same way as the count."""
    if isinstance(state.op, CombinedOp) and engine.fold_at_once(
        state, data, ids, sorted_ids=sorted_ids
    ):
        state.next_row += int(ids.shape[0])
        return
    combined = state.op.skipna_of or state.op
    parts: tuple[Part, ...] = getattr(combined, "parts", ())
    if not parts:
        engine.fold(state, data, ids, sorted_ids=sorted_ids)
        return
    skipna = state.op.skipna_of is not None
    kept = ("count", "present") if skipna else ("count",)
    before = {name: _copy(state, name) for name in kept} if len(parts) > 1 else {}
    for k, part in enumerate(parts):
        arrays = _own_arrays(part, state.arrays)
        if skipna:
            arrays["present"] = state.arrays["present"]
        if k:
            arrays.update({name: value.copy() for name, value in before.items()})
        op = ops.skipna_op(part.op) if skipna else part.op
        view = ops.State(op, state.data_dtype, state.inner_shape, arrays, state.next_row)
        engine.fold(view, data, ids, sorted_ids=sorted_ids)
        # An engine may have moved the arrays (to its device): keep what it folded.
        state.arrays.update({theirs: view.arrays[mine] for mine, theirs in part.names.items()})
        if k == 0:
            state.count = view.count
            if skipna:
                state.arrays["present"] = view.arrays["present"]
    state.next_row += int(ids.shape[0])


def _copy(state: ops.State, name: str) -> Any:
    return (state.count if name == "count" else state.arrays[name]).copy()


def _alone(source: _Source, sources: list[_Source]) -> bool:
    """Whether no other op reads any of ``source``'s intermediates."""
    mine = set(source.names.values())
    return not any(mine & set(other.names.values()) for other in sources if other is not source)


def split(result: np.ndarray) -> dict[str, np.ndarray]:
    """The combined result as one array per op, in the order of the list."""
    assert result.dtype.names is not None
    return {name: np.ascontiguousarray(result[name]) for name in result.dtype.names}
