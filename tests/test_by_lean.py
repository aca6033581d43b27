"""Work a ``--by`` run no longer does: pyarrow.compute's load, a copy of intp ids before the
packed fold, Arrow's thread pool on the streamed Parquet read. Same results, checked here
against the paths they replace."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segcli import ops
from segcli.engines import numpy_engine
from segcli.io import arrow_kernels as kernels
from tests.matrix import default_run

#: Runs segcli, then prints on stderr (at exit) the modules the process ended with.
_PROBE = """
import atexit, json, runpy, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv = ["segcli", *sys.argv[1:]]
runpy.run_module("segcli", run_name="__main__")
"""


def _modules_of_run(args: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.splitlines()[-1]))


@pytest.fixture
def flights(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = 3000
    delay = pa.array(rng.normal(5, 20, rows), mask=rng.random(rows) < 0.1)
    table = pa.table(
        {
            "carrier": pa.array(
                np.array(["AA", "UA", "DL", None], object)[rng.integers(0, 4, rows)]
            ),
            "origin": pa.array(np.array(["JFK", "LAX", "ORD"])[rng.integers(0, 3, rows)]),
            "cat": pa.array(np.array(["x", "y"])[rng.integers(0, 2, rows)]).dictionary_encode(),
            "f": pa.array(np.array([0.0, -0.0, 1.5, np.nan])[rng.integers(0, 4, rows)]),
            "delay": delay,
        }
    )
    path = tmp_path / "flights.parquet"
    pq.write_table(table, path, row_group_size=1000)
    carriers = ["AA", "UA", "DL", None] * 3
    origins = [origin for origin in ("JFK", "LAX", "ORD") for _ in range(4)]
    pq.write_table(pa.table({"carrier": carriers, "origin": origins}), tmp_path / "keys.parquet")
    return path


# Text output builds its key fields apart: one key list there by default.
@default_run(lambda suffix, by: suffix == "parquet" or by == "carrier,origin")
@pytest.mark.parametrize("suffix", ["parquet", "csv"])
@pytest.mark.parametrize("streamed", [[], ["--chunk-rows", "700"]], ids=["memory", "streamed"])
@pytest.mark.parametrize(
    "by", ["carrier,origin", "cat", "f", "carrier,origin --keys-from KEYS --null-keys group"]
)
def test_a_by_run_loads_neither_pyarrow_compute_nor_pandas(
    flights: Path, by: str, streamed: list[str], suffix: str
) -> None:
    """``import pyarrow.compute`` costs some 40 ms of start-up; a float key's zero, given
    as a Python float, loaded pandas (0.2 s)."""
    keys = by.replace("KEYS", str(flights.with_name("keys.parquet"))).split()
    out = str(flights.with_name(f"out.{suffix}"))
    args = ["mean", str(flights), "--data-column", "delay", "--by", *keys, "--skipna", "-q"]
    modules = _modules_of_run([*args, "-o", out, *streamed])
    assert {"pyarrow.compute", "pandas"}.isdisjoint(modules)
    assert Path(out).stat().st_size > 0


def test_the_kernels_by_name_answer_as_pyarrow_compute() -> None:
    import pyarrow.compute as pc

    text = pa.array(["b", None, "a", "b", "c"])
    ints = pa.array([3, None, 1, 3], pa.int64())
    floats = pa.array([1.5, float("nan"), -0.0, None])
    mask = pa.array([True, False, True, None, True])
    table = pa.table({"k": text, "j": pa.array([2, 1, 2, 0, 1])})
    pairs: list[tuple[Any, Any]] = [
        (kernels.take(text, pa.array([4, 0])), pc.take(text, pa.array([4, 0]))),
        (kernels.take(text, pa.array([1]), boundscheck=False), pc.take(text, pa.array([1]))),
        (kernels.cast(ints, pa.int32()), ints.cast(pa.int32())),
        (kernels.is_null(floats), floats.is_null()),
        (kernels.is_valid(floats), floats.is_valid()),
        (kernels.is_nan(floats), pc.is_nan(floats)),
        (kernels.drop_null(ints), ints.drop_null()),
        (kernels.filter_by(text, mask), text.filter(mask)),
        (kernels.unique(text), pc.unique(text)),
        (kernels.dictionary_encode(text), pc.dictionary_encode(text)),
        (
            kernels.index_in(text, pa.array(["c", "b"]), skip_nulls=True),
            pc.index_in(text, value_set=pa.array(["c", "b"]), skip_nulls=True),
        ),
        (
            kernels.sort_indices(table, [("k", "ascending"), ("j", "descending")]),
            pc.sort_indices(table, sort_keys=[("k", "ascending"), ("j", "descending")]),
        ),
        (kernels.add(floats, 0.0), pc.add(floats, 0.0)),
        (kernels.binary_length(text), pc.binary_length(text)),
        (kernels.min_max(ints), pc.min_max(ints)),
        (kernels.total(ints), pc.sum(ints)),
        (kernels.total(pa.nulls(2, pa.int64())), pc.sum(pa.nulls(2, pa.int64()))),
        (
            kernels.dictionary_decode(text.dictionary_encode()),
            text.dictionary_encode().dictionary_decode(),
        ),
        (kernels.or_(mask, pc.invert(mask)), pc.or_(mask, pc.invert(mask))),
        (kernels.equal(text, pa.scalar("b")), pc.equal(text, pa.scalar("b"))),
        (kernels.match_substring_regex(text, "[ac]"), pc.match_substring_regex(text, "[ac]")),
        (kernels.replace_substring(text, "b", "bb"), pc.replace_substring(text, "b", "bb")),
        (
            kernels.binary_join_element_wise(text, text, pa.scalar("-")),
            pc.binary_join_element_wise(text, text, pa.scalar("-")),
        ),
        (kernels.fill_null(text, pa.scalar("?")), text.fill_null("?")),
    ]
    for ours, theirs in pairs:
        assert ours.type == theirs.type
        assert str(ours) == str(theirs)  # NaN equals nothing, not even itself
    added = kernels.add(floats, 0.0).to_numpy(zero_copy_only=False)
    assert not np.signbit(added[2])  # -0.0 + 0.0
    with pytest.raises(pa.ArrowInvalid):
        kernels.cast(pa.array([300]), pa.int8())


def test_packed_fold_reads_intp_ids_in_place_with_the_copys_bytes() -> None:
    """int64 ids (a --by run's) are chunked as views; int32 ids still go through the reused
    intp buffer. Both fold to the same bits, rows with ids out of range dropped."""
    rng = np.random.default_rng(3)
    rows, n = 150_000, 9
    values = rng.normal(0, 1e3, (rows, 1))
    values[rng.random(rows) < 0.05] = np.nan
    ids = rng.integers(-1, n + 2, rows)
    kept_ids = ids.copy()
    engine = numpy_engine.NumpyEngine()
    states = []
    for dtype in (np.int64, np.int32):
        state = engine.new_state(ops.skipna_op("mean"), n, (), values.dtype, sorted_ids=False)
        engine.fold(state, values, ids.astype(dtype), sorted_ids=False)
        states.append(state)
    first, second = ({k: np.asarray(v).tobytes() for k, v in s.arrays.items()} for s in states)
    assert first == second
    assert states[0].count.tolist() == states[1].count.tolist()
    assert np.array_equal(ids, kept_ids)

    state = engine.new_state(ops.get_op("sum"), n, (), values.dtype, sorted_ids=False)
    folder = numpy_engine._PackedSumFolder(state, values, ids, True)
    for _, _, index, _ in folder.chunks([(0, rows, 0)]):
        assert np.shares_memory(index, ids)
    narrow = numpy_engine._PackedSumFolder(state, values, ids.astype(np.int32), True)
    for _, _, index, _ in narrow.chunks([(0, rows, 0)]):
        assert index.dtype == np.intp and np.shares_memory(index, narrow.index_buffer)


def test_the_streamed_parquet_pass_decodes_on_its_own_thread_alone(
    flights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow's pool spent more CPU for no shorter wall time on the small column chunks of a
    batch: the shared read decodes on the read-ahead thread alone."""
    from segcli.io.keys import ParquetPass
    from segcli.io.tables import open_table

    seen: list[Any] = []
    iter_batches = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("use_threads", True))
        return iter_batches(self, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    shared = ParquetPass(open_table(str(flights), "parquet"), "delay", ["carrier", "origin"])
    assert sum(len(batch) for batch in shared.data(1000)) == 3000
    assert seen == [False]
