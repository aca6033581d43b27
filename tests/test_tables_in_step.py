"""Names the CLI keeps free of NumPy (for a fast ``--help``) match the tables they mirror."""

from __future__ import annotations

import segcli
from segcli import cli
from segcli.engines import ENGINE_NAMES
from segcli.io.formats import OUTPUT_FORMATS
from segcli.op_names import OP_SUMMARIES


def test_op_names_match_the_op_table():
    assert list(OP_SUMMARIES) == list(segcli.OPS)
    assert all(segcli.OPS[name].summary == text for name, text in OP_SUMMARIES.items())


def test_cli_engines_are_the_registry_plus_dask():
    assert {*ENGINE_NAMES, "dask"} == set(cli.ENGINES)


def test_cli_formats_are_the_writers_formats():
    assert cli.FORMATS == OUTPUT_FORMATS
