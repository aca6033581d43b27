"""The op table is data: engines read fold kinds, never op names; State is the one way to move,
grow and trim partial state; importing an engine changes nothing elsewhere."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import segcli
from segcli import ops
from segcli.engines import get_engine
from segcli.errors import EngineUnavailableError

ROOT = Path(__file__).resolve().parent.parent


def _cpu_engines() -> list[str]:
    names = ["numpy"]
    try:
        get_engine("numba")
        names.append("numba")
    except EngineUnavailableError:
        pass
    return names


#: The ops engines fold (the holistic ones are sorted by segcli.holistic).
FOLDED = [name for name, op in ops.OPS.items() if not op.holistic]


@pytest.mark.parametrize("engine", _cpu_engines())
@pytest.mark.parametrize("name", FOLDED)
def test_an_op_renamed_gives_the_same_bytes(
    monkeypatch: pytest.MonkeyPatch, engine: str, name: str
) -> None:
    """An op under another name, made of the same table parts, folds the same: no engine
    and no finalize step asks which op it runs."""
    alias = dataclasses.replace(ops.OPS[name], name=f"renamed_{name}")
    monkeypatch.setitem(ops.OPS, alias.name, alias)
    rng = np.random.default_rng(3)
    data = rng.standard_normal((300, 2)).astype(np.float32)
    ids = rng.integers(-1, 7, 300)
    for sorted_ids in (False, True):
        these = np.sort(np.abs(ids)) if sorted_ids else ids
        want = segcli.segment_reduce(data, these, 7, name, sorted=sorted_ids, engine=engine)
        got = segcli.segment_reduce(data, these, 7, alias.name, sorted=sorted_ids, engine=engine)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def _range_of(parts: Any, out_dtype: np.dtype[Any], owned: bool) -> np.ndarray:
    return np.asarray(parts["max"] - parts["min"]).astype(out_dtype)


#: A new op made of table parts only (max - min per segment): no engine knows it.
RANGE = ops.Op(
    "range",
    (
        ops.Intermediate("min", ops.FOLDS["min"], ops.OPS["min"].intermediates[0].acc_dtype),
        ops.Intermediate("max", ops.FOLDS["max"], ops.OPS["max"].intermediates[0].acc_dtype),
    ),
    finalize=_range_of,
    empty=lambda out_dtype: 0,
    output_dtype=ops.OPS["min"].output_dtype,
    data_kinds=ops.REAL,
)


@pytest.mark.parametrize("engine", _cpu_engines())
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_a_new_op_of_two_intermediates_is_one_table_entry(
    monkeypatch: pytest.MonkeyPatch, engine: str, dtype: str
) -> None:
    """The design's test: an op whose intermediates are folds the engines know runs on every
    engine, in memory and folded block by block, without a line of engine code."""
    monkeypatch.setitem(ops.OPS, RANGE.name, RANGE)
    rng = np.random.default_rng(5)
    data = (rng.standard_normal((500, 3)) * 100).astype(dtype)
    ids = rng.integers(-1, 9, 500)
    for sorted_ids in (False, True):
        these = np.sort(np.abs(ids)) if sorted_ids else ids
        reduction = segcli.reduce_arrays(data, these, 10, "range", sorted=sorted_ids, engine=engine)
        high = segcli.segment_reduce(data, these, 10, "max", sorted=sorted_ids, engine=engine)
        low = segcli.segment_reduce(data, these, 10, "min", sorted=sorted_ids, engine=engine)
        filled = reduction.counts > 0
        assert not filled.all() and filled.any()  # segment 9 is empty
        np.testing.assert_array_equal(reduction.result[filled], high[filled] - low[filled])
        assert (reduction.result[~filled] == 0).all()
        np.testing.assert_array_equal(
            reduction.counts, segcli.segment_reduce(data, these, 10, "count", sorted=sorted_ids)
        )
        # Block by block into a state that grows, then trimmed: the streaming driver's way.
        impl = get_engine(engine)
        state = impl.new_state(RANGE, 4, (3,), data.dtype, sorted_ids=sorted_ids)
        for start in range(0, 500, 123):
            state = state.grown(10)
            impl.fold(
                state, data[start : start + 123], these[start : start + 123], sorted_ids=sorted_ids
            )
        assert ops.finalize(state.trimmed(10)).tobytes() == reduction.result.tobytes()


def test_no_code_outside_the_op_table_asks_which_op_runs() -> None:
    asks = re.compile(r"\bop\.ufunc\b|ufunc is np\.|\bop\.name ==|\.divides\b|op\.name in \(")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "segcli").rglob("*.py"))
        if path.name != "ops.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asks.search(line)
    ]
    assert offenders == []


def test_every_op_declares_its_parts() -> None:
    for op in ops.OPS.values():
        folds = ops.JOINT_FOLDS if op.joint else ops.FOLDS
        for intermediate in op.intermediates:
            assert folds[intermediate.fold.kind] is intermediate.fold
        # A joint fold's intermediates merge together, never one by one.
        assert (op.merge is not None) == (op.joint is not None)
        assert op.data_kinds in (ops.REAL, ops.ANY_NUMBER, ops.WITH_BOOL)
        assert op.out_dtype(np.dtype(np.float32)).kind in "ifb"


# --- State: move, grow, trim -------------------------------------------------------------------


def _folded(op: str, n: int = 3) -> ops.State:
    engine = get_engine("numpy")
    state = engine.new_state(ops.get_op(op), n, (2,), np.dtype(np.float32))
    data = np.arange(12, dtype=np.float32).reshape(6, 2)
    engine.fold(state, data, np.array([0, 2, 2, 1, 0, 0]), sorted_ids=False)
    return state


@pytest.mark.parametrize("op", FOLDED)
def test_grown_adds_empty_segments_and_keeps_the_rest(op: str) -> None:
    state = _folded(op)
    bigger = state.grown(5)
    assert bigger.num_segments == 5 and bigger.lanes == state.lanes
    assert bigger.next_row == state.next_row == 6
    finished, before = ops.finalize(bigger), ops.finalize(state)
    assert finished[:3].tobytes() == before.tobytes()
    empty = ops.finalize(ops.new_state(state.op, 2, (2,), state.data_dtype))
    assert finished[3:].tobytes() == empty.tobytes()
    assert state.grown(3) is state and state.grown(2) is state  # never shrinks


@pytest.mark.parametrize("op", FOLDED)
def test_trimmed_keeps_the_first_segments(op: str) -> None:
    state = _folded(op)
    assert ops.finalize(state.trimmed(2)).tobytes() == ops.finalize(state)[:2].tobytes()
    assert state.num_segments == 3  # the state itself is unchanged


def test_transferred_and_to_host_move_every_array() -> None:
    state = _folded("mean")
    assert state.to_host() is state  # NumPy arrays already
    copied = state.transferred(np.copy)
    assert set(copied.arrays) == {"count", "sum"}
    assert all(copied.arrays[k] is not state.arrays[k] for k in state.arrays)
    assert ops.finalize(copied).tobytes() == ops.finalize(state).tobytes()
    assert state.xp is np


def test_combine_merges_every_intermediate() -> None:
    a, b = _folded("sum"), _folded("sum")
    merged = ops.combine(a, b)
    np.testing.assert_array_equal(merged.count, 2 * a.count)
    np.testing.assert_array_equal(ops.finalize(merged), 2 * ops.finalize(a))


# --- importing an engine has no side effects --------------------------------------------------

_IMPORT_CHECK = """
import os, sys, types
import segcli, segcli.validate, segcli.ops, segcli.engines, segcli.notices
watched = {name: dict(vars(module)) for name, module in sys.modules.items()
           if name == "segcli" or name.startswith("segcli.")}
environ = dict(os.environ)
import segcli.engines.{engine}_engine
changed = [f"{{name}}.{{key}}" for name, before in watched.items()
           for key, value in vars(sys.modules[name]).items()
           if (key not in before or before[key] is not value)
           # Importing a submodule binds it in its package: Python's doing, not the engine's.
           and not isinstance(value, types.ModuleType)]
sys.exit(0 if changed == [] and os.environ == environ else 3)
"""


@pytest.mark.parametrize("engine", ["numpy", "numba", "cupy"])
def test_importing_an_engine_prints_nothing_and_changes_no_other_module(engine: str) -> None:
    if find_spec(engine) is None:
        pytest.skip(f"{engine} is not installed")
    code = _IMPORT_CHECK.replace("{engine}", engine).replace("{{", "{").replace("}}", "}")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_library_notices_reach_a_listener_only() -> None:
    from segcli import notices

    heard: list[str] = []
    notices.send("nobody listens")  # dropped, not printed
    notices.listen(heard.append)
    try:
        notices.send("a note")
    finally:
        notices.listen(None)
    notices.send("dropped again")
    assert heard == ["a note"]
