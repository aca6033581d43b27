"""What every driver takes and returns: a :class:`RunSpec` in, a :class:`DriverResult` out.

A driver is a function ``run(spec, progress) -> DriverResult``. The spec says what to reduce
and with which limits, in the library's terms (no option names, no output); the result holds
the reduction, the facts about each input, built the same way by every driver
(:func:`input_facts`), and the facts of the mode that ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import numpy as np

from segcli import ops
from segcli.core import Reduction
from segcli.engines import Engine
from segcli.io import CsvOptions

if TYPE_CHECKING:
    from segcli.keys.facts import KeyFacts

#: Called with (rows done, rows in all) while a long run works.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class RunSpec:
    """What to reduce: the inputs, the op and its rules, the engine and the memory limits."""

    #: An op name, or an op of the table with its options (``ops.with_ddof``).
    op: str | ops.Op
    #: DATA's location: a path, a glob or directory (Dask), or ``-`` for :attr:`stdin`.
    data: str
    #: IDS' location; None takes both from one table (two columns) or one archive (two keys).
    ids: str | None = None
    data_column: str | None = None
    ids_column: str | None = None
    data_key: str | None = None
    ids_key: str | None = None
    #: How to split CSV/TSV inputs (None: the defaults).
    csv: CsvOptions | None = None
    #: What ``-`` reads; it must be able to ``peek``.
    stdin: BinaryIO | None = None
    num_segments: int | None = None
    sorted_ids: bool = False
    #: An engine name, or an engine built with its options.
    engine: str | Engine = "auto"
    #: GPU engine: float sums with atomics (faster; the last bits may vary from run to run).
    fast_atomics: bool = False
    fill: Any = None
    #: Bytes of input a run may hold; streaming sizes its blocks from it.
    memory_budget: int | None = None
    #: Inputs of more bytes stream even when they fit the budget (None: the budget).
    stream_above: int | None = None
    #: Rows per streamed block, or per Dask partition (None: sized from the budget).
    block_rows: int | None = None
    #: Address of a Dask scheduler (None: ``$DASK_SCHEDULER_ADDRESS``, else a local cluster).
    scheduler: str | None = None
    #: Key columns of DATA's table that give the groups (``--by``), instead of ids.
    by: tuple[str, ...] = ()
    #: ``--null-keys``: "drop" rows with a missing key, or "group" them.
    null_keys: str = "drop"
    #: ``--keys-from``: a table whose key columns fix the groups and their order.
    keys_from: str | None = None
    #: ``--indices``: gather DATA's rows by these (TF's sparse segment family); a path, with
    #: ``indices_column`` for a table (None path: the IDS file, else DATA's).
    indices: str | None = None
    indices_column: str | None = None
    #: ``--weights``: one weight per id (sum, mean and sqrt_n), like ``indices``.
    weights: str | None = None
    weights_column: str | None = None
    #: ``segcli agg``: the ops folded together in one pass (``op`` is then ignored); names, or
    #: ops of the table with their options (``ops.with_ddof``).
    ops: tuple[str | ops.Op, ...] = ()
    #: ``--q`` of quantile (None: not given).
    q: float | None = None
    #: ``--skipna``: NaN and null values left out, element by element.
    skipna: bool = False
    #: ``--tmp-dir``: where holistic ops partition unsorted inputs larger than the budget
    #: (None: the system's temporary directory).
    tmp_dir: str | None = None

    @property
    def sparse(self) -> bool:
        """Whether the run gathers (``--indices``) or weights (``--weights``) its rows."""
        return any(
            v is not None
            for v in (self.indices, self.indices_column, self.weights, self.weights_column)
        )


def engine_of(spec: RunSpec) -> str | Engine:
    """The engine to fold with: a name, or the named engine built with the spec's options.

    Drivers call this when they start folding, so that an engine that is not installed is
    reported after the inputs were found readable.
    """
    if not spec.fast_atomics:
        return spec.engine
    from segcli.engines import get_engine

    gpu: Any = spec.engine if isinstance(spec.engine, Engine) else get_engine(spec.engine)
    engine: Engine = gpu.with_options(fast_atomics=True)
    return engine


def spec_op(spec: RunSpec) -> str | ops.Op:
    """The op of a single-op spec, leaving missing values out under ``--skipna``."""
    return ops.skipna_op(spec.op) if spec.skipna else spec.op


def op_names(spec: RunSpec) -> tuple[str, ...]:
    """The ops of the run: agg's list, or the one op."""
    return tuple(ops.get_op(op).name for op in spec.ops) or (ops.get_op(spec.op).name,)


def has_holistic(spec: RunSpec) -> bool:
    """Whether the run has a sorting op (median, quantile, nunique): its driver is their own."""
    return any(ops.get_op(name).holistic for name in op_names(spec))


def op_and_fill(
    spec: RunSpec, data_dtype: np.dtype[Any], inner_shape: tuple[int, ...], label: str
) -> tuple[Any, Any]:
    """The op to fold and the fill to finalize with: the spec's own, or for several ops their
    combined op, which fills each op's empty segments itself."""
    if not spec.ops:
        return spec_op(spec), spec.fill
    from segcli.multi import combined_op

    op = combined_op(
        spec.ops, data_dtype, inner_shape, fill=spec.fill, label=label, skipna=spec.skipna
    )
    return (ops.skipna_op(op) if spec.skipna else op), None


@dataclass
class InputFacts:
    """What a run says about one input, whichever driver read it."""

    path: str
    label: str
    format: str
    shape: list[int]
    dtype: str
    bytes: int
    #: How the values were converted on reading, e.g. "decimal128(10, 2) read as float64".
    note: str | None = None


def input_facts(
    path: str,
    label: str,
    fmt: str,
    shape: Sequence[int],
    dtype: np.dtype[Any],
    note: str | None = None,
) -> InputFacts:
    """The facts of one input; ``fmt`` is the format name :mod:`segcli.io` detected."""
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return InputFacts(path, label, fmt, [int(s) for s in shape], str(dtype), size, note)


@dataclass
class DriverResult:
    """A finished reduction, the facts of its inputs, and how it ran."""

    reduction: Reduction
    data: InputFacts
    ids: InputFacts
    #: "in-memory", "streaming" or "distributed".
    mode: str
    #: The mode's own facts, in the order the summary shows them (chunks; partitions, workers).
    mode_facts: dict[str, Any] = field(default_factory=dict)
    #: Seconds per step, in the order the summary shows them.
    timings: dict[str, float] = field(default_factory=dict)
    #: A ``--by`` run's keys, in the order of the result's rows (None for ids).
    keys: KeyFacts | None = None
    #: The family the summary names when not the reduction's own (``sparse``: ``--indices``).
    family: str | None = None


class Driver(Protocol):
    def __call__(self, spec: RunSpec, progress: Progress | None) -> DriverResult: ...
