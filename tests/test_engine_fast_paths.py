"""The NumPy engine's fast paths: what they rely on, and that they give the reference's bytes.

Speed itself is measured in ``benchmarks/``, never asserted here; these tests pin the
conditions the fast paths need and compare them with the plain ``ufunc.at`` folds.
"""

from __future__ import annotations

import numpy as np

from segcli import ops
from segcli.engines import numpy_engine

#: An equal float32 dtype that is not NumPy's own descriptor object, as the streaming readers
#: build theirs (``header.dtype.newbyteorder("=")``).
ODD_FLOAT32 = np.dtype("<f4").newbyteorder("=")


def test_the_odd_dtype_is_a_distinct_descriptor() -> None:
    assert np.dtype(np.float32) == ODD_FLOAT32
    assert ODD_FLOAT32 is not np.dtype(np.float32)


def test_canonical_views_with_numpys_own_descriptor() -> None:
    array = np.zeros(4, ODD_FLOAT32)
    view = numpy_engine._canonical(array)
    assert view.dtype is np.dtype(np.float32)
    view[1] = 5
    assert array[1] == 5  # a view: the fold's writes land in the state


def test_states_of_odd_descriptors_fold_through_own_ones() -> None:
    """A streamed float32 block's state (odd descriptors) folds as any other, and the joint
    folds see NumPy's own descriptors."""
    state = ops.new_state(ops.OPS["min"], 3, (), ODD_FLOAT32)
    assert state.acc.dtype is not np.dtype(np.float32)
    data = np.array([[3.0], [1.0], [2.0], [-1.0]], ODD_FLOAT32)
    numpy_engine.ENGINE.fold(state, data, np.array([0, 1, 1, 2]), sorted_ids=False)
    np.testing.assert_array_equal(ops.finalize(state), [3.0, 1.0, -1.0])
    views = numpy_engine.flat_intermediates(ops.new_state(ops.OPS["argmin"], 3, (), ODD_FLOAT32))
    assert all(view.dtype is np.dtype(view.dtype.type) for view in views.values())
