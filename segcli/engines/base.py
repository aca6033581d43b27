"""The one signature every engine implements.

An engine folds a block of rows into an op's partial state (see :mod:`segcli.ops`). It receives
rows already validated: ``data`` is 2-D ``(rows, inner_size)`` and ``ids`` 1-D with one id per
row; a row whose id lies outside ``[0, n)`` is one validation allowed to drop, and the engine
skips it. Every engine folds the rows of each segment and lane in their global row order (see
:mod:`segcli.ops` for lanes), so results are deterministic and do not depend on how the rows
were split into blocks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from segcli import ops


class Engine:
    """Base class: state in :attr:`xp`'s arrays (NumPy here); subclasses implement
    :meth:`fold_block`."""

    name: ClassVar[str] = "base"
    #: The array library the engine keeps its state in.
    xp: ClassVar[Any] = np

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
        """Fold the next block of rows into ``state`` (the rows after those folded so far)."""
        first_row = state.next_row
        self.fold_block(state, data, ids, sorted_ids=sorted_ids, first_row=first_row)
        state.next_row = first_row + int(ids.shape[0])

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

    def unavailable_reason(self) -> str | None:
        """Why this engine cannot run on this machine (no device, say), or None."""
        return None

    def to_host(self, state: ops.State) -> ops.State:
        """The state with NumPy arrays (a no-op for CPU engines)."""
        return state

    def from_host(self, state: ops.State) -> ops.State:
        """A NumPy state moved to wherever this engine keeps its state (a no-op on the CPU)."""
        return state

    def grow(self, state: ops.State, num_segments: int) -> ops.State:
        """The state over more segments (``num_segments`` >= its own), for when n is inferred.

        The segments added are empty (the op's initial value), so growing loses nothing. By
        default the state goes to the host, is copied into a bigger one and comes back; an
        engine whose state is more than ``count`` and ``acc`` overrides this.
        """
        return self.from_host(ops.grown(self.to_host(state), num_segments))
