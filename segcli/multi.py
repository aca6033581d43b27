"""Several ops in one pass (``segcli agg``): one combined state, one result per op.

The ops of a list are merged into one combined :class:`~segcli.ops.Op` for the data's dtype:
its intermediates are the union of the ops' intermediates, an intermediate kept once when two
ops name it alike and fold it alike into the same accumulator dtype (mean and sqrt_n share
``sum``; every op shares ``count``). The drivers fold the combined op like any other, so each
block of rows is read once and each shared intermediate folded once. Its ``finalize`` gives
each op the parts it asked for, under the names it knows, and packs the results side by side
in one structured array (a field per op); :func:`split` unpacks them. Empty segments take each
op's own empty value or ``--fill``, parsed in that op's output dtype.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from segcli import ops
from segcli.errors import UsageError

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


@dataclass(frozen=True)
class _Source:
    """Where one op's intermediate lives in the combined state."""

    op: ops.Op
    #: The op's own name of each intermediate -> its name in the combined state.
    names: dict[str, str]


def _union(
    chosen: tuple[ops.Op, ...], data_dtype: np.dtype[Any]
) -> tuple[tuple[ops.Intermediate, ...], list[_Source]]:
    """The combined intermediates and where each op finds its own."""
    kept: dict[tuple[str, str, str], str] = {}
    intermediates: list[ops.Intermediate] = []
    sources = []
    for op in chosen:
        names = {}
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
    return tuple(intermediates), sources


def _field_shape(op: ops.Op, inner_shape: tuple[int, ...], skipna: bool) -> tuple[int, ...]:
    # An op that keeps only the count gives one value per row, like the single-op count;
    # under --skipna it counts present values, element by element.
    return () if not op.intermediates and not skipna else inner_shape


def combined_op(
    names: tuple[str, ...],
    data_dtype: np.dtype[Any],
    inner_shape: tuple[int, ...],
    *,
    fill: Any = None,
    label: str = "data",
    skipna: bool = False,
) -> ops.Op:
    """The one op that folds every op of ``names`` for data of ``data_dtype``.

    Each op checks the data dtype and parses ``fill`` first, so that its errors name it."""
    data_dtype = np.dtype(data_dtype)
    chosen = tuple(ops.get_op(name) for name in names)
    for op in chosen:
        if op.joint is not None:
            # A joint fold reads its intermediates together, in row order; the combined state
            # folds one intermediate at a time, which would give such an op wrong numbers.
            raise UsageError(
                f"segcli agg cannot fold {op.name} with other ops yet (its intermediates fold "
                f"together); run 'segcli {op.name}' on its own"
            )
        ops.check_data_dtype(op, data_dtype, label)
    fills = [
        op.empty_value(op.out_dtype(data_dtype))
        if fill is None
        else ops.parse_fill(fill, op, data_dtype)
        for op in chosen
    ]
    out_dtype = np.dtype(
        [
            (op.name, op.out_dtype(data_dtype), _field_shape(op, inner_shape, skipna))
            for op in chosen
        ]
    )
    intermediates, sources = _union(chosen, data_dtype)
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

    return ops.Op(
        AGG,
        intermediates,
        finalize=finalize,
        empty=empty,
        output_dtype=lambda _: out_dtype,
        data_kinds="".join(k for k in ops.ANY_NUMBER if all(k in op.data_kinds for op in chosen)),
    )


def _alone(source: _Source, sources: list[_Source]) -> bool:
    """Whether no other op reads any of ``source``'s intermediates."""
    mine = set(source.names.values())
    return not any(mine & set(other.names.values()) for other in sources if other is not source)


def split(result: np.ndarray) -> dict[str, np.ndarray]:
    """The combined result as one array per op, in the order of the list."""
    assert result.dtype.names is not None
    return {name: np.ascontiguousarray(result[name]) for name in result.dtype.names}
