"""What a command reports: a run's :class:`RunSummary` and a check's findings, each as rows
(:func:`summary_rows`, :func:`check_rows`) and as JSON facts (:func:`summary_facts`,
:func:`check_facts`); rows render as a rich table or plain text.

Building the facts needs NumPy; rendering imports rich only when a table is drawn, and the
CLI decides where it goes (stderr, never stdout, which carries data).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from segcli import validate
from segcli.drivers.base import DriverResult, InputFacts, input_facts
from segcli.memory import human_bytes

if TYPE_CHECKING:
    from segcli.drivers.check import CheckResult
    from segcli.keys.facts import KeyFacts

__all__ = ["InputFacts", "RunSummary", "input_facts"]

#: Bumped when a field is renamed or removed; new fields may appear within a version.
SCHEMA_VERSION = 1


@dataclass
class RunSummary:
    """Everything a run reports; :func:`summary_facts` is the ``--summary-json`` schema."""

    op: str
    family: str
    data: InputFacts
    ids: InputFacts
    num_segments: int
    num_segments_inferred: bool
    engine: str
    engine_reason: str
    rows_total: int
    rows_used: int
    rows_dropped_negative: int
    rows_dropped_beyond_n: int
    empty_segments: int
    output_path: str | None
    output_format: str | None
    output_shape: list[int]
    output_dtype: str
    nan_count: int
    result_min: float | None
    result_max: float | None
    timings_s: dict[str, float] = field(default_factory=dict)
    #: "in-memory", "streaming" or "distributed"; ``extra`` holds the mode's own facts
    #: (chunks; partitions and workers).
    mode: str = "in-memory"
    extra: dict[str, Any] = field(default_factory=dict)
    #: A ``--by`` run's key facts (columns, types, distinct keys, rows dropped for a missing
    #: key; see :meth:`segcli.keys.facts.KeyFacts.summary`), else None.
    keys: dict[str, Any] | None = None
    #: ``--skipna``: ``values`` left out (NaN or null) and ``rows`` dropped for a null id;
    #: None without it.
    skipped: dict[str, int] | None = None

    @property
    def total_seconds(self) -> float:
        return sum(self.timings_s.values())

    def work_phase(self) -> str:
        """The timed phase the throughput is over: ``compute``, or ``read+compute`` where a
        streaming run reads and computes in one loop."""
        return "compute" if "compute" in self.timings_s else "read+compute"

    def work_seconds(self) -> float:
        return self.timings_s.get(self.work_phase(), 0.0)

    def rows_per_second(self) -> float | None:
        seconds = self.work_seconds()
        return self.rows_total / seconds if seconds > 0 else None


def summary_facts(summary: RunSummary) -> dict[str, Any]:
    """The summary as the documented ``--summary-json`` facts."""
    facts = asdict(summary)
    for key in ("result_min", "result_max"):
        facts[key] = json_number(facts[key])
    facts["timings_s"] = {k: round(v, 6) for k, v in summary.timings_s.items()}
    facts["timings_s"]["total"] = round(summary.total_seconds, 6)
    rate = summary.rows_per_second()
    facts["rows_per_second"] = None if rate is None else round(rate)
    if facts["keys"] is None:
        del facts["keys"]  # only --by runs have keys
    if facts["skipped"] is None:
        del facts["skipped"]  # only --skipna runs skip
    return {"schema_version": SCHEMA_VERSION, **facts}


def json_number(value: float | None) -> float | str | None:
    """JSON has no inf or NaN: those become the strings "inf", "-inf", "nan"."""
    if value is None or math.isfinite(value):
        return value
    return str(value)


def result_range(result: np.ndarray) -> tuple[int, float | None, float | None]:
    """NaN count and the range of the non-NaN values (real part for complex)."""
    values = result.real if result.dtype.kind == "c" else result
    # A complex value is NaN when either part is, as NumPy's isnan says.
    nan_count = int(np.count_nonzero(np.isnan(result))) if result.dtype.kind in "fc" else 0
    if result.dtype.kind == "c" and nan_count:  # a NaN imaginary part leaves the range too
        values = np.where(np.isnan(result), np.nan, values)
    if values.size == nan_count:
        return nan_count, None, None
    # fmin/fmax pass NaN over without a copy of the other values (a whole result's bytes).
    low, high = np.fmin.reduce(values, axis=None), np.fmax.reduce(values, axis=None)
    # Integers stay exact (a float64 rounds 2**63 - 1 to 2**63); bools count as 0 and 1.
    plain = int if values.dtype.kind in "iub" else float
    return nan_count, plain(low), plain(high)


def run_summary(
    run: DriverResult,
    *,
    output_path: str | None,
    output_format: str | None,
    write_s: float,
    keys_out: str | None = None,
) -> RunSummary:
    """The summary of a finished run that wrote its result in ``write_s`` seconds (and a
    ``--by`` run's key table to ``keys_out``, if given)."""
    reduction = run.reduction
    nan_count, low, high = result_range(reduction.result)
    report = reduction.id_report
    return RunSummary(
        op=reduction.op.name,
        family=_family(run.family, sorted_ids=reduction.sorted_ids),
        data=run.data,
        ids=run.ids,
        num_segments=report.num_segments,
        num_segments_inferred=report.inferred,
        engine=reduction.engine,
        engine_reason=reduction.engine_reason,
        rows_total=report.rows,
        rows_used=report.rows_used,
        rows_dropped_negative=report.dropped_negative - reduction.null_ids,
        rows_dropped_beyond_n=report.dropped_beyond,
        empty_segments=reduction.empty_segments,
        output_path=output_path,
        output_format=output_format,
        output_shape=list(reduction.result.shape),
        output_dtype=str(reduction.result.dtype),
        nan_count=nan_count,
        result_min=low,
        result_max=high,
        timings_s={**run.timings, "write": write_s},
        mode=run.mode,
        extra=dict(run.mode_facts),
        keys=None
        if run.keys is None
        else {**key_facts(run.keys, reduction.empty_segments), "keys_out": keys_out},
        skipped=None
        if reduction.skipped_values is None
        else {"values": reduction.skipped_values, "rows": reduction.null_ids},
    )


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _fact(name: str, value: Any) -> str:
    name = name.replace("_", " ")  # index_rows: "12 index rows"
    if not isinstance(value, int):
        return f"{name} {value}"
    return f"{value:,} {name.removesuffix('s') if value == 1 else name}"


def _rows(count: int) -> str:
    return f"{count:,} row" if count == 1 else f"{count:,} rows"


def _shape(shape: list[int]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def summary_rows(summary: RunSummary) -> list[tuple[str, str]]:
    """The summary as (label, value) rows, shared by the table and the plain rendering."""
    s = summary
    dropped = []
    if s.rows_dropped_negative:
        cause = "a missing key" if s.keys is not None else "a negative id"
        dropped.append(f"{_rows(s.rows_dropped_negative)} with {cause}")
    if s.rows_dropped_beyond_n:
        dropped.append(f"{_rows(s.rows_dropped_beyond_n)} with an id >= n")
    times = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in s.timings_s.items())
    rate = s.rows_per_second()
    rows = [
        ("data", f"{s.data.label}  {_shape(s.data.shape)} {s.data.dtype}"),
        ("ids", f"{s.ids.label}  {_shape(s.ids.shape)} {s.ids.dtype}"),
        ("op", f"{s.op} ({s.family})"),
        (
            "segments",
            f"{s.num_segments:,} "
            + ("(inferred from ids)" if s.num_segments_inferred else "(given)"),
        ),
        ("engine", f"{s.engine} ({s.engine_reason})"),
        ("mode", ", ".join([s.mode, *(_fact(k, v) for k, v in s.extra.items())])),
        (
            "rows",
            f"{s.rows_used:,} used of {s.rows_total:,}"
            + (f"; dropped: {', '.join(dropped)}" if dropped else ""),
        ),
        ("empty segments", f"{s.empty_segments:,}"),
        (
            "output",
            f"{s.output_path or 'stdout (text)'}  {_shape(s.output_shape)} {s.output_dtype}",
        ),
        (
            "result",
            f"{range_text(s.output_dtype, s.result_min, s.result_max)}, "
            f"{s.nan_count:,} NaN{fill_note(s)}",
        ),
        ("time", f"{s.total_seconds * 1000:.1f} ms ({times})"),
    ]
    rows += [
        ("note", f"{role}: {f.note}") for role, f in (("data", s.data), ("ids", s.ids)) if f.note
    ]
    if s.skipped is not None:
        values = s.skipped["values"]
        skipped = f"{values:,} missing value{'' if values == 1 else 's'} (NaN or null)"
        if s.keys is None:  # a --by run has no ids: a null key is a missing key, counted above
            skipped += f", {_rows(s.skipped['rows'])} with a null id"
        rows.append(("skipped", skipped))
    if rate is not None:
        # Over the work phase alone, not the whole time shown above it: say so, and that the
        # bytes are DATA's (not the ids'), or a reader divides the rows by the total time.
        per_second = human_bytes(s.data.bytes / s.work_seconds())
        rows.append(
            (
                "throughput",
                f"{rate:,.0f} rows/s, {per_second}/s of DATA (over the {s.work_phase()} time)",
            )
        )
    if s.keys is not None:
        rows = _with_key_rows(rows, s.keys, s.num_segments)
    return rows


def range_text(dtype: str, low: float | None, high: float | None) -> str:
    """``range [low, high]``; a complex result's range is of its real parts, and says so."""
    part = " (real part)" if dtype.startswith("complex") else ""
    return f"range [{_number(low)}, {_number(high)}]{part}"


def fill_note(summary: RunSummary) -> str:
    """Says that the range and NaN count hold the fill of empty segments, where some are: a
    min's range of ``[1, 3.40282e+38]`` is the fill, not a value of the data; so are the NaN
    of ``--fill nan``."""
    empty, skipped = summary.empty_segments, summary.skipped
    what = "group" if summary.keys is not None else "segment"
    causes = [f"{empty:,} empty {what}{'' if empty == 1 else 's'}"] if empty else []
    if skipped is not None and skipped["values"]:
        # Per element, a non-empty segment whose values were all missing gets the fill too.
        causes.append(f"any all-skipped {what}")
    return f" (the fill of {' and '.join(causes)} included)" if causes else ""


def key_facts(keys: KeyFacts, empty_groups: int) -> dict[str, Any]:
    """A ``--by`` run's ``keys`` facts; ``distinct`` counts the keys found in DATA, which
    leaves out the empty groups that ``--keys-from`` adds (``num_segments`` counts those)."""
    return {**keys.summary(), "distinct": keys.distinct - empty_groups}


def _with_key_rows(
    rows: list[tuple[str, str]], keys: dict[str, Any], groups: int
) -> list[tuple[str, str]]:
    """A ``--by`` run's rows: the key columns for ``ids``, distinct keys for ``segments``."""
    fixed = f"from --keys-from {keys['keys_from']}" if keys["keys_from"] else "distinct"
    replaced = {
        "ids": ("keys", f"{', '.join(keys['columns'])}  ({', '.join(keys['types'])})"),
        "segments": ("groups", f"{groups:,} ({fixed}; null keys {keys['null_keys']})"),
        "empty segments": ("empty groups", None),
    }
    if keys.get("keys_out"):
        (output,) = (value for label, value in rows if label == "output")
        replaced["output"] = ("output", f"{output}; key table {keys['keys_out']}")
    out = []
    for label, value in rows:
        new_label, new_value = replaced.get(label, (label, value))
        out.append((new_label, value if new_value is None else new_value))
    return out


def check_facts(
    found: CheckResult, *, sorted_ids: bool, failures: list[str], skipna: bool = False
) -> dict[str, Any]:
    """What ``segcli check`` found, as its ``--summary-json`` facts."""
    report = found.id_report
    return {
        "schema_version": 1,
        "command": "check",
        "data": vars(found.data),
        "ids": vars(found.ids),
        "family": _family(found.family, sorted_ids=sorted_ids),
        "mode": found.mode,
        "num_segments": report.num_segments,
        "num_segments_inferred": report.inferred,
        "rows_total": report.rows,
        "rows_used": report.rows_used,
        # As in a run's summary: a null id's row is not counted as a negative id's.
        "rows_dropped_negative": report.dropped_negative - found.null_ids,
        "rows_dropped_beyond_n": report.dropped_beyond,
        **({"rows_dropped_null_id": found.null_ids} if skipna and found.keys is None else {}),
        "rows_dropped": dropped_rows(report),
        "empty_segments": empty_segments(found),
        "nan_values": found.nan_values,
        **({"missing_values": missing_values(found)} if skipna else {}),
        "passed": not failures,
        "failures": failures,
        **({} if found.keys is None else {"keys": key_facts(found.keys, empty_segments(found))}),
    }


def check_rows(
    found: CheckResult, *, sorted_ids: bool, failures: list[str], skipna: bool = False
) -> list[tuple[str, str]]:
    """What ``segcli check`` found, as (label, value) rows."""
    report = found.id_report
    data, ids = found.data, found.ids
    rows = [
        ("data", f"{data.label}  {tuple(data.shape)} {data.dtype}"),
        ("ids", f"{ids.label}  {tuple(ids.shape)} {ids.dtype}"),
        ("family", _family(found.family, sorted_ids=sorted_ids)),
        (
            "segments",
            f"{report.num_segments:,} " + ("(inferred from ids)" if report.inferred else "(given)"),
        ),
        ("rows", f"{report.rows_used:,} used of {report.rows:,}"),
        ("empty segments", f"{empty_segments(found):,}"),
        ("dropped rows", f"{dropped_rows(report):,}" + _null_id_rows(found)),
        _missing_row(found, skipna),
        ("verdict", "ok" if not failures else "FAILED: " + "; ".join(failures)),
    ]
    if found.keys is not None:
        rows = _with_key_rows(
            rows, key_facts(found.keys, empty_segments(found)), report.num_segments
        )
    return rows


def _null_id_rows(found: CheckResult) -> str:
    return f" ({found.null_ids:,} with a null id)" if found.null_ids else ""


def _missing_row(found: CheckResult, skipna: bool) -> tuple[str, str]:
    """DATA's NaN; under ``--skipna`` its nulls too, counted together as the run summary's
    "missing values (NaN or null)" (a float column's nulls read as NaN: the two are one)."""
    # --indices: only the gathered rows are scanned, each as often as it is gathered.
    gathered = " in the gathered rows" if found.family == "sparse" else ""
    if not skipna:
        return ("NaN values", f"{found.nan_values:,}{gathered}")
    return ("missing values", f"{missing_values(found):,} (NaN or null){gathered}")


def missing_values(found: CheckResult) -> int:
    """``--skipna``: the NaN and null values of DATA."""
    return found.nan_values + found.null_values


def empty_segments(found: CheckResult) -> int:
    return int(np.count_nonzero(found.counts == 0))


def dropped_rows(report: validate.IdReport) -> int:
    return report.dropped_negative + report.dropped_beyond


def render_table(
    title: str, rows: list[tuple[str, str]], *, alert: frozenset[str] = frozenset()
) -> Any:
    """A rich Table for a terminal; rows whose label is in ``alert`` are drawn in red."""
    from rich.table import Table

    from segcli.terminal import rich_literal

    # Rows name files, columns and keys: literal text, never markup (``[bold]x.npy``); the
    # title is the command's own.
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for label, value in rows:
        table.add_row(
            rich_literal(label), rich_literal(value), style="red" if label in alert else None
        )
    return table


def render_plain(title: str, rows: list[tuple[str, str]]) -> str:
    """Aligned ``label  value`` lines under a title, for logs and pipes."""
    from segcli.terminal import terminal_safe

    rows = [(terminal_safe(label), terminal_safe(value)) for label, value in rows]
    width = max(len(label) for label, _ in rows)
    lines = [title, *(f"  {label.ljust(width)}  {value}" for label, value in rows)]
    return "\n".join(lines)


def dumps(facts: dict[str, Any]) -> str:
    return json.dumps(facts, indent=2, allow_nan=False, default=str)


def _family(given: str | None, *, sorted_ids: bool) -> str:
    """The family a summary names: the driver's (``sparse``), else the one ``--sorted`` says."""
    return given or ("sorted" if sorted_ids else "unsorted")
