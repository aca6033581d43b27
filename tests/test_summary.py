"""The summary: one set of facts, drawn as a rich table, plain text or JSON."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
from rich.console import Console

import segcli
from segcli.drivers.base import DriverResult
from segcli.errors import EngineUnavailableError
from segcli.summary import (
    dumps,
    input_facts,
    render_plain,
    render_table,
    run_summary,
    summary_facts,
    summary_rows,
)


def make_summary():
    data = np.array([1.0, np.nan, 3.0, np.inf], np.float32)
    ids = np.array([0, 0, 2, -1])
    reduction = segcli.reduce_arrays(data, ids, 4, "max", engine="numpy")
    run = DriverResult(
        reduction,
        input_facts("d.npy", "d.npy", "npy", data.shape, data.dtype),
        input_facts("i.npy", "i.npy", "npy", ids.shape, ids.dtype),
        "in-memory",
        timings={"read": 0.001, "validate": 0.001, "compute": 0.002},
    )
    return run_summary(run, output_path=None, output_format=None, write_s=0.001)


def test_rows_report_drops_empties_and_nan():
    rows = dict(summary_rows(make_summary()))
    assert rows["rows"] == "3 used of 4; dropped: 1 row with a negative id"
    assert rows["empty segments"] == "2"
    assert rows["segments"] == "4 (given)"
    assert ", 1 NaN" in rows["result"]


def test_result_range_says_it_holds_the_fill_of_empty_segments():
    """max's fill is -FLT_MAX: a range reaching it without a word would read as data."""
    rows = dict(summary_rows(make_summary()))
    assert (
        rows["result"] == "range [-3.40282e+38, 3], 1 NaN (the fill of 2 empty segments included)"
    )
    data, ids = np.array([1.0, 2.0]), np.array([0, 1])
    reduction = segcli.reduce_arrays(data, ids, 2, "sum", engine="numpy")
    facts = input_facts("d.npy", "d.npy", "npy", data.shape, data.dtype)
    run = DriverResult(reduction, facts, facts, "in-memory", timings={"compute": 0.001})
    summary = run_summary(run, output_path=None, output_format=None, write_s=0.001)
    assert dict(summary_rows(summary))["result"] == "range [1, 2], 0 NaN"


def test_throughput_says_it_is_over_the_work_phase_and_of_data_bytes():
    """The time row above it is the whole run's: a bare "rows/s" reads as rows over that
    time. 4 rows of 4 bytes in the 2 ms of compute are 2,000 rows/s and 7.8 KiB/s of DATA."""
    summary = make_summary()
    assert dict(summary_rows(summary))["throughput"] == (
        "2,000 rows/s, 7.8 KiB/s of DATA (over the compute time)"
    )
    summary.timings_s = {"read+compute": 0.004, "write": 0.001}
    assert dict(summary_rows(summary))["throughput"] == (
        "1,000 rows/s, 3.9 KiB/s of DATA (over the read+compute time)"
    )


def test_skipped_row_names_null_ids_only_where_there_are_ids():
    """A --by run has no ids; its null keys are the "missing key" rows already counted."""
    summary = make_summary()
    summary.skipped = {"values": 2, "rows": 0}
    skipped = "2 missing values (NaN or null)"
    assert dict(summary_rows(summary))["skipped"] == f"{skipped}, 0 rows with a null id"
    summary.keys = {
        "columns": ["k"], "types": ["string"], "distinct": 2, "rows_dropped_missing_key": 1,
        "null_keys": "drop", "keys_from": None,
    }  # fmt: skip
    assert dict(summary_rows(summary))["skipped"] == skipped


def test_complex_result_counts_a_nan_imaginary_part_and_says_its_range_is_real():
    data = np.array([1 + 2j, complex(5, np.nan), 3j], np.complex64)
    reduction = segcli.reduce_arrays(data, np.array([0, 1, 2]), 3, "sum", engine="numpy")
    facts = input_facts("d.npy", "d.npy", "npy", data.shape, data.dtype)
    run = DriverResult(reduction, facts, facts, "in-memory", timings={"compute": 0.001})
    summary = run_summary(run, output_path=None, output_format=None, write_s=0.001)
    assert (summary.nan_count, summary.result_min, summary.result_max) == (1, 0.0, 1.0)
    assert dict(summary_rows(summary))["result"] == "range [0, 1] (real part), 1 NaN"


def test_json_is_valid_and_has_no_bare_nan_or_inf():
    summary = make_summary()
    summary.result_max = float("inf")
    facts = json.loads(dumps(summary_facts(summary)))
    assert facts["schema_version"] == 1
    assert facts["result_max"] == "inf"
    assert facts["nan_count"] == 1
    assert facts["timings_s"]["total"] == 0.005


def render(table, **console_options) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=120, **console_options).print(table)
    return buffer.getvalue()


def test_table_on_a_terminal_is_coloured_unless_no_color(monkeypatch):
    summary = make_summary()
    table = render_table("segcli max", summary_rows(summary), alert=frozenset({"result"}))
    coloured = render(table, force_terminal=True, color_system="truecolor")
    cyan, red = "36m", "31m"  # the label column and the alert row
    assert cyan in coloured and red in coloured and "empty segments" in coloured
    monkeypatch.setenv("NO_COLOR", "1")
    plain = render(table, force_terminal=True, color_system="truecolor")
    assert cyan not in plain and red not in plain
    assert "empty segments" in plain


def test_plain_rendering_has_no_escape_codes():
    text = render_plain("segcli max", summary_rows(make_summary()))
    assert "\x1b" not in text
    assert text.splitlines()[0] == "segcli max"


def test_auto_engine_reason_says_why_numpy_ran_on_a_large_input(monkeypatch):
    """A 50M-element run on NumPy is not 'small': the reason names each faster engine and why
    it was passed over (its threshold, or not available here)."""
    from segcli import engines

    def unavailable(name: str) -> engines.Engine:
        if name == "numpy":
            return real_get_engine(name)
        raise EngineUnavailableError(f"engine {name!r} is not available")

    real_get_engine = engines.get_engine
    monkeypatch.setattr(engines, "get_engine", unavailable)
    # numba's threshold drops once its engine is imported (another test may have done so).
    monkeypatch.delitem(sys.modules, "segcli.engines.numba_engine", raising=False)
    choice = engines.choose_engine("auto", elements=50_000_000)
    assert choice.engine.name == "numpy"
    assert choice.reason == "auto: 50,000,000 elements; cupy not available, numba from 100,000,000"
    small = engines.choose_engine("auto", elements=4).reason
    assert small == "auto: 4 elements; cupy from 50,000,000, numba from 100,000,000"


def test_result_range_skips_nan_and_copies_no_values():
    from segcli.summary import result_range

    assert result_range(np.array([[np.nan, 2.0], [-1.5, np.nan]], np.float32)) == (2, -1.5, 2.0)
    assert result_range(np.full(3, np.nan)) == (3, None, None)
    assert result_range(np.array([3, -4], np.int8)) == (0, -4.0, 3.0)
    assert result_range(np.array([1 + 2j, np.nan, -3j])) == (1, 0.0, 1.0)
    assert result_range(np.zeros((0, 2))) == (0, None, None)
