"""Names the CLI keeps free of NumPy (for a fast ``--help``) match the tables they mirror."""

from __future__ import annotations

import numpy as np
import pytest

import segcli
from segcli import cli
from segcli.engines import ENGINE_NAMES
from segcli.io.formats import OUTPUT_FORMATS
from segcli.op_names import OP_SUMMARIES

try:  # `python -m pytest` puts the repository on sys.path; plain `pytest` puts tests/ there
    from tests.reference import reference_reduce
except ModuleNotFoundError:
    from reference import reference_reduce  # type: ignore[no-redef]


def test_op_names_match_the_op_table():
    assert list(OP_SUMMARIES) == list(segcli.OPS)
    assert all(segcli.OPS[name].summary == text for name, text in OP_SUMMARIES.items())


def test_cli_engines_are_the_registry_plus_dask():
    assert {*ENGINE_NAMES, "dask"} == set(cli.ENGINES)


def test_cli_formats_are_the_writers_formats():
    assert cli.FORMATS == OUTPUT_FORMATS


@pytest.mark.parametrize("op", list(segcli.OPS))
def test_every_op_has_a_reference_implementation(op):
    """The oracle the engine tests compare against knows every op of the table."""
    data = np.array([[1.0, 2.0], [3.0, 5.0], [4.0, 4.0]])
    q = 0.25 if op == "quantile" else None
    got = reference_reduce(data, np.array([0, 0, 2]), 3, op, q=q)
    want = segcli.segment_reduce(data, [0, 0, 2], 3, op, engine="numpy", q=q)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12)
