"""The one signature every engine implements, and the validation contract they all keep.

An engine folds a block of rows into an op's partial state (see :mod:`segcli.ops`): it looks up
the fold kind of the op's intermediate in its own primitive table, never the op's name. Every
engine folds the rows of each segment and lane in their global row order (see :mod:`segcli.ops`
for lanes), so results are deterministic and do not depend on how the rows were split into
blocks.

The validation contract, the same for every engine and every driver:

1. **Before the fold**, :mod:`segcli.validate` checks, in the order a user would fix them: the
   data dtype for the op (``ops.check_data_dtype``), the ids' dtype (integers only), the shapes
   (ids a prefix of data; 1-D and full length when sorted), n (a non-negative integer), then
   the ids' values, in one mergeable summary per block (``validate.summarize`` / ``merge`` /
   ``report``): sorted ids negative or decreasing, unsorted ids ``>= n`` when n is given. When
   n is inferred it comes from the ids. Last, the output must fit in memory.
2. **The fold** receives rows whose ids passed: ``data`` 2-D ``(rows, inner_size)`` and ``ids``
   1-D with one id per row. It must skip, without counting, every row whose id lies outside
   ``[0, n)``: those are the rows validation lets through to be dropped (negative unsorted ids,
   sorted ids ``>= n``). Unsorted ids ``>= n`` with n given are an error; the in-memory path
   may find them *after* the fold from the counts (``core.report_from_counts``: a row not
   counted that is not negative), which is why skipping must not count.
3. **A failure stops the run** by raising an :class:`segcli.errors.InvalidInputError` (a
   :class:`segcli.errors.SegcliError`) that names the input and the first offender's global
   position; nothing is finalized or written. A streamed or partitioned run stops folding at
   the first block whose summary fails (``validate.IdSummary.blocks_fold``): a block of
   unsorted ids must never reach a fold that assumes order.

The id scan of step 1 is NumPy's (several passes) unless an engine offers a faster one:
:meth:`Engine.scan_ids` with :attr:`Engine.scans_ids` set. Validation asks the registry
(:func:`segcli.engines.id_scanner`) for the engine whose scan to use; no engine rebinds names in
:mod:`segcli.validate`. Importing an engine prints nothing and changes no other module; what an
engine has to tell the user goes through :mod:`segcli.notices`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from segcli import ops


class Engine:
    """Base class: state in :attr:`xp`'s arrays (NumPy here); subclasses implement
    :meth:`fold_block`."""

    name: ClassVar[str] = "base"
    #: The array library the engine keeps its state in.
    xp: ClassVar[Any] = np
    #: Whether :meth:`scan_ids` is a one-pass scan that validation should use for large blocks.
    scans_ids: ClassVar[bool] = False

    def new_state(
        self,
        op: ops.Op,
        num_segments: int,
        inner_shape: tuple[int, ...],
        data_dtype: np.dtype[Any],
        *,
        sorted_ids: bool = False,
    ) -> ops.State:
        return ops.new_state(
            op, num_segments, inner_shape, data_dtype, xp=self.xp, sorted_ids=sorted_ids
        )

    def fold(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
    ) -> None:
        """Fold the next block of rows into ``state`` (the rows after those folded so far).

        An op of several intermediates folds them one after another, each through the
        engine's path for its fold kind (:meth:`segcli.ops.State.per_intermediate`), unless
        it is a joint fold (:attr:`segcli.ops.Op.joint`), which the engine folds at once.
        """
        if state.op.skipna_of is not None:
            from segcli.engines.skipping import fold_skipping

            fold_skipping(self, state, data, ids, sorted_ids)
            return
        first_row = state.next_row
        if len(state.op.intermediates) <= 1 or state.op.joint is not None:
            self.fold_block(state, data, ids, sorted_ids=sorted_ids, first_row=first_row)
        else:
            for k, view in enumerate(state.per_intermediate()):
                self.fold_block(view, data, ids, sorted_ids=sorted_ids, first_row=first_row)
                # An engine may have moved the arrays (to its device): keep what it folded.
                (name,) = (i.name for i in view.op.intermediates)
                state.arrays[name] = view.arrays[name]
                if k == 0:
                    state.count = view.count
        state.next_row = first_row + int(ids.shape[0])

    def fold_at_once(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
    ) -> bool:
        """Fold the next block of rows into every intermediate of a combined op's state
        (``segcli agg``'s) in one pass, where the engine has one for that set, leaving
        ``state.next_row`` to the caller; False, folding nothing, where it has none (the
        default): the caller then folds part by part."""
        return False

    def fold_block(
        self,
        state: ops.State,
        data: np.ndarray,
        ids: np.ndarray,
        *,
        sorted_ids: bool,
        first_row: int,
    ) -> None:
        """What an engine implements: fold rows whose first is global row ``first_row``."""
        raise NotImplementedError

    def fold_sum_skipping_nan(
        self, state: ops.State, data: np.ndarray, ids: np.ndarray, *, sorted_ids: bool
    ) -> np.ndarray | None:
        """``--skipna``'s float sum of one value per row with NaN left out inside the
        engine's own fold (same bits as folding 0 in each NaN's place), for engines that can:
        the present values per segment, or None, folding nothing, where it does not apply
        (:mod:`segcli.engines.skipping` then substitutes and counts itself)."""
        return None

    def unavailable_reason(self) -> str | None:
        """Why this engine cannot run on this machine (no device, say), or None."""
        return None

    def scan_ids(self, flat: np.ndarray, num_segments: int, sorted_ids: bool) -> tuple[int, ...]:
        """One pass over native-order flat ids for validation (``num_segments`` -1: unknown):
        (negatives, first negative, ids >= n, first such, max, decreases, first decrease).
        Only engines with :attr:`scans_ids` implement it."""
        raise NotImplementedError

    def run_concurrently(self, calls: list[Callable[[], Any]]) -> list[Any]:
        """Run the calls (at once where the engine has threads); their results in order."""
        return [call() for call in calls]
