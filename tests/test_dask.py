"""The Dask engine against the NumPy engine, on a real local cluster of two worker processes.

One cluster serves the whole module. Inputs are a Parquet dataset of 12 files (one of them
empty, row groups smaller than the files) and ``.npy`` shard pairs named so that only a natural
sort puts them in order. Every op, both families, 1-D and 2-D data, n given and inferred.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from click.testing import CliRunner  # noqa: E402

from segcli import core, ops, validate  # noqa: E402
from segcli.cli import cli  # noqa: E402
from segcli.drivers import dask as seg_dask  # noqa: E402
from segcli.drivers.base import RunSpec  # noqa: E402
from segcli.drivers.dask import tasks as distributed_tasks  # noqa: E402
from segcli.drivers.dask.plan import (  # noqa: E402
    expand,
    natural_key,
    open_dataset,
    plan_partitions,
)
from segcli.engines import EngineChoice, get_engine  # noqa: E402
from segcli.errors import (  # noqa: E402
    ClusterError,
    EngineUnavailableError,
    InvalidInputError,
    ReadError,
)
from segcli.validate import index_text, merge, report, summarize  # noqa: E402
from tests.matrix import default_run  # noqa: E402
from tests.test_min_max_ties import rule_reduce, tied_data  # noqa: E402

pytestmark = pytest.mark.dask

OPS = ["sum", "mean", "min", "max", "prod", "sqrt_n", "count"]
#: n given: unsorted ids lie in [-2, 30); sorted ids reach about 40, so 25 drops a tail.
GIVEN_N = {False: 30, True: 25}
PARQUET_FILES = 12


# ---------------------------------------------------------------------------------------------
# The cluster and the data


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    import dask

    # One death per task is forgiven, a second fails the run: keeps the killed-worker tests
    # short (the default, 3, would restart a worker four times).
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}):
        # Two worker processes, one thread each, on loopback, no dashboard.
        local = seg_dask.local_cluster(2, silence_logs=logging.CRITICAL)
    yield local
    local.close()


@pytest.fixture(scope="module")
def client(cluster: Any) -> Iterator[Any]:
    connected = distributed.Client(cluster, set_as_default=False)
    yield connected
    connected.close()


@pytest.fixture(scope="module")
def address(cluster: Any) -> str:
    return str(cluster.scheduler_address)


@dataclass
class Dataset:
    """Where the files are, and what they hold concatenated in order."""

    root: Path
    arrays: dict[str, np.ndarray]
    files: list[Path]


def _split(total: int, parts: int, rng: np.random.Generator) -> list[int]:
    cuts = np.sort(rng.integers(0, total, parts - 1))
    sizes = np.diff(np.concatenate(([0], cuts, [total]))).tolist()
    sizes[5], sizes[6] = 0, sizes[5] + sizes[6]  # one empty file in the middle
    return [int(s) for s in sizes]


@pytest.fixture(scope="module")
def parquet_dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    rng = np.random.default_rng(6)
    rows = 1500
    arrays = {
        "x": rng.normal(size=rows).astype(np.float32),
        "i8": rng.integers(-100, 101, rows).astype(np.int8),  # sums and products wrap
        "v": rng.normal(size=(rows, 3)),
        "seg": rng.integers(-2, 30, rows).astype(np.int64),
        "sseg": np.sort(rng.integers(0, 41, rows)).astype(np.int32),
    }
    arrays["x"][7] = np.nan  # min and max propagate it
    root = tmp_path_factory.mktemp("parquet")
    files, start = [], 0
    for k, size in enumerate(_split(rows, PARQUET_FILES, rng)):
        piece = {name: a[start : start + size] for name, a in arrays.items()}
        table = pa.table(
            {
                name: pa.FixedSizeListArray.from_arrays(pa.array(a.reshape(-1)), 3)
                if a.ndim == 2
                else pa.array(a)
                for name, a in piece.items()
            }
        )
        path = root / f"part-{k}.parquet"
        pq.write_table(table, path, row_group_size=40)
        files.append(path)
        start += size
    (root / "_SUCCESS").write_text("")  # what Spark leaves behind; never read
    return Dataset(root, arrays, files)


@pytest.fixture(scope="module")
def npy_shards(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """11 pairs ``data-0.npy .. data-10.npy``: (rows, 2, 3) int32 data, (rows, 2) uint8 ids."""
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("shards")
    data, ids, files = [], [], []
    for k in range(11):
        size = int(rng.integers(0, 90))
        d = rng.integers(-1000, 1000, (size, 2, 3)).astype(np.int32)
        i = rng.integers(0, 20, (size, 2)).astype(np.uint8)
        np.save(root / f"data-{k}.npy", d)
        np.save(root / f"ids-{k}.npy", i)
        data.append(d)
        ids.append(i)
        files.append(root / f"ids-{k}.npy")
    return Dataset(root, {"data": np.concatenate(data), "ids": np.concatenate(ids)}, files)


def spec(**fields: Any) -> RunSpec:
    if "chunk_rows" in fields:
        fields["block_rows"] = fields.pop("chunk_rows")
    return RunSpec(**fields)


def run(client: Any, **fields: Any) -> tuple[Any, ...]:
    done = seg_dask.run(spec(**fields), None, client=client)
    return done.reduction, done.data, done.ids, done.mode_facts


def assert_same(got: core.Reduction, expected: core.Reduction) -> None:
    assert got.result.dtype == expected.result.dtype
    assert got.result.shape == expected.result.shape
    assert got.id_report == expected.id_report
    np.testing.assert_array_equal(got.counts, expected.counts)
    # The same bytes: float sums fold in a chain of partitions, in the single machine's order.
    assert np.array_equal(_bytes_of(got.result), _bytes_of(expected.result))


def _bytes_of(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


# ---------------------------------------------------------------------------------------------
# Results equal the NumPy engine's


# Every op over the float column of unsorted ids; sum and max over every column and family
# (a rounding and an exact fold in each partition kind), the rest in the full matrix.
@default_run(
    lambda op, column, sorted_ids: (column, sorted_ids) == ("x", False) or op in ("sum", "max")
)
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
# n given (1-D floats) and inferred (wrapping int8; rows of three).
@pytest.mark.parametrize(("column", "given"), [("x", True), ("i8", False), ("v", False)])
@pytest.mark.parametrize("op", OPS)
def test_parquet_dataset_matches_numpy(
    client: Any, parquet_dataset: Dataset, op: str, column: str, given: bool, sorted_ids: bool
) -> None:
    ids_column = "sseg" if sorted_ids else "seg"
    n = GIVEN_N[sorted_ids] if given else None
    reduction, data_facts, ids_facts, extra = run(
        client,
        op=op,
        data=str(parquet_dataset.root),
        data_column=column,
        ids_column=ids_column,
        num_segments=n,
        sorted_ids=sorted_ids,
    )
    expected = core.reduce_arrays(
        parquet_dataset.arrays[column],
        parquet_dataset.arrays[ids_column],
        n,
        op,
        sorted=sorted_ids,
        engine="numpy",
    )
    assert_same(reduction, expected)
    assert reduction.engine == "dask"
    assert extra == {"partitions": PARQUET_FILES, "workers": 2}
    assert data_facts.shape == list(parquet_dataset.arrays[column].shape)
    assert ids_facts.label == f"{parquet_dataset.root}:{ids_column} ({PARQUET_FILES} files)"


@pytest.mark.parametrize("given", [True, False], ids=["n-given", "n-inferred"])
@pytest.mark.parametrize("op", OPS)
def test_npy_shards_with_2d_ids_match_numpy(
    client: Any, npy_shards: Dataset, op: str, given: bool
) -> None:
    n = 20 if given else None
    reduction, data_facts, _, extra = run(
        client,
        op=op,
        data=str(npy_shards.root / "data-*.npy"),
        ids=str(npy_shards.root / "ids-*.npy"),
        num_segments=n,
    )
    expected = core.reduce_arrays(
        npy_shards.arrays["data"], npy_shards.arrays["ids"], n, op, engine="numpy"
    )
    assert_same(reduction, expected)
    assert extra["partitions"] == 11
    assert data_facts.path == str(npy_shards.root / "data-*.npy")
    assert data_facts.shape == list(npy_shards.arrays["data"].shape)


@default_run(lambda op: op == "mean")  # the row ranges are cut alike for every op
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_single_large_files_split_into_row_ranges(
    client: Any, tmp_path: Path, parquet_dataset: Dataset, op: str
) -> None:
    arrays = parquet_dataset.arrays
    np.save(tmp_path / "data.npy", arrays["v"])
    np.save(tmp_path / "ids.npy", arrays["sseg"])
    pq.write_table(
        pa.table({"x": arrays["x"], "seg": arrays["seg"]}),
        tmp_path / "t.parquet",
        row_group_size=50,
    )
    reduction, *_, extra = run(
        client,
        op=op,
        data=str(tmp_path / "data.npy"),
        ids=str(tmp_path / "ids.npy"),
        sorted_ids=True,
        chunk_rows=64,
    )
    assert extra["partitions"] == -(-len(arrays["v"]) // 64)
    assert_same(
        reduction,
        core.reduce_arrays(arrays["v"], arrays["sseg"], None, op, sorted=True, engine="numpy"),
    )
    whole, *_, extra = run(
        client,
        op=op,
        data=str(tmp_path / "data.npy"),
        ids=str(tmp_path / "ids.npy"),
        sorted_ids=True,
    )
    assert extra["partitions"] == 1  # small enough for one partition
    assert_same(whole, reduction)
    # Row ranges that cut through row groups; DATA and IDS two columns of one file.
    reduction, *_, extra = run(
        client,
        op=op,
        data=str(tmp_path / "t.parquet"),
        data_column="x",
        ids_column="seg",
        chunk_rows=64,
    )
    assert extra["partitions"] == -(-len(arrays["x"]) // 64)
    assert_same(reduction, core.reduce_arrays(arrays["x"], arrays["seg"], None, op, engine="numpy"))


def test_large_inputs_fold_with_numba_on_the_workers(client: Any, tmp_path: Path) -> None:
    """Partitions of an input ``auto`` finds large fold with numba, to the NumPy engine's bytes."""
    try:
        get_engine("numba")
    except EngineUnavailableError as exc:
        pytest.skip(str(exc))
    rng = np.random.default_rng(9)
    data = rng.normal(size=(6000,)).astype(np.float32)
    ids = rng.integers(0, 50, len(data)).astype(np.int32)
    for k, (d, i) in enumerate(zip(np.array_split(data, 3), np.array_split(ids, 3), strict=True)):
        np.save(tmp_path / f"d-{k}.npy", d)
        np.save(tmp_path / f"i-{k}.npy", i)
    plan = seg_dask.plan_run(
        spec(op="max", data=str(tmp_path / "d-*.npy"), ids=str(tmp_path / "i-*.npy"))
    )
    # As for an input past the numba threshold, whatever the threshold is today.
    job = distributed_tasks.Job("max", None, sorted_ids=False, elements=10**12)
    parts = client.gather(
        [client.submit(distributed_tasks.run_partition, p, job) for p in plan.partitions]
    )
    merged = distributed_tasks.combine_results(*parts)
    assert merged.engines == {"numba"}
    assert merged.state is not None
    expected = core.reduce_arrays(data, ids, None, "max", engine="numpy").result
    np.testing.assert_array_equal(ops.finalize(merged.state), expected)


def test_partitions_never_choose_a_gpu_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = EngineChoice(type("Gpu", (), {"name": "cupy"})(), "auto")  # type: ignore[arg-type]
    monkeypatch.setattr(distributed_tasks, "choose_engine", lambda name, elements: gpu)
    assert distributed_tasks.cpu_engine(10**9).name in distributed_tasks.CPU_ENGINES


def test_progress_follows_partitions(client: Any, npy_shards: Dataset) -> None:
    calls: list[tuple[int, int]] = []
    seg_dask.run(
        spec(
            op="sum",
            data=str(npy_shards.root / "data-*.npy"),
            ids=str(npy_shards.root / "ids-*.npy"),
        ),
        lambda done, total: calls.append((done, total)),
        client=client,
    )
    total = npy_shards.arrays["ids"].size
    assert len(calls) == 11
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert calls[-1] == (total, total)


def test_results_are_deterministic(client: Any, parquet_dataset: Dataset) -> None:
    runs = [
        run(
            client,
            op="sum",
            data=str(parquet_dataset.root / "*.parquet"),
            data_column="v",
            ids_column="seg",
            chunk_rows=90,
        )[0].result
        for _ in range(2)
    ]
    assert runs[0].tobytes() == runs[1].tobytes()


# A plain float sum and the shifted moments by default; products and logsumexp chain their
# partitions the same way (full matrix).
@default_run(lambda op: op in ("sum", "var"))
@pytest.mark.parametrize("sorted_ids", [False, True], ids=["unsorted", "sorted"])
@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n", "prod", "var", "std", "logsumexp"])
def test_order_dependent_folds_give_the_single_machine_bytes(
    client: Any, parquet_dataset: Dataset, op: str, sorted_ids: bool
) -> None:
    """Float folds whose bits depend on their order, over partitions cut inside files too."""
    ids_column = "sseg" if sorted_ids else "seg"
    for column in ("x", "v"):
        reduction = run(
            client,
            op=op,
            data=str(parquet_dataset.root),
            data_column=column,
            ids_column=ids_column,
            sorted_ids=sorted_ids,
            chunk_rows=97,  # partitions cut inside row groups (40 rows) and files
        )[0]
        expected = core.reduce_arrays(
            parquet_dataset.arrays[column],
            parquet_dataset.arrays[ids_column],
            None,
            op,
            sorted=sorted_ids,
            engine="numpy",
        )
        assert_same(reduction, expected)


#: agg's joint lists of the default run, with or without --skipna.
JOINT_AGG_DEFAULT = {("std,var", False), ("logsumexp,argmax", True), ("var", True)}


@default_run(lambda names, skipna: (names, bool(skipna)) in JOINT_AGG_DEFAULT)
@pytest.mark.parametrize("names", ["var", "std,var", "logsumexp", "logsumexp,argmax"])
@pytest.mark.parametrize("skipna", [[], ["--skipna"]])
def test_agg_of_joint_folds_alone_gives_the_single_machine_bytes(
    address: str, tmp_path: Path, names: str, skipna: list[str]
) -> None:
    """agg's combined op keeps var's shifted sums and logsumexp's sum as folds of no lanes of
    their own; with no plain float sum beside them its partitions still fold in a chain."""
    from segcli.multi import combined_op

    rng = np.random.default_rng(17)
    data = 1e6 + rng.normal(size=(300, 2))
    data[::11, 0] = np.nan
    paths = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(paths[0], data)
    np.save(paths[1], rng.integers(-1, 7, 300))
    combined = combined_op(tuple(names.split(",")), data.dtype, (2,))
    assert distributed_tasks.order_matters(combined, data.dtype)
    assert distributed_tasks.order_matters(ops.skipna_op(combined), data.dtype)
    args = ["agg", *map(str, paths), "--op", names, "-q", *skipna]
    assert invoke(*args, "-o", str(tmp_path / "one.npz")).exit_code == 0
    dask = ["--engine", "dask", "--scheduler", address, "--chunk-rows", "7"]
    ran = invoke(*args, *dask, "-o", str(tmp_path / "dask.npz"))
    assert ran.exit_code == 0, ran.stderr
    with np.load(tmp_path / "one.npz") as one, np.load(tmp_path / "dask.npz") as got:
        assert one.files == got.files
        for name in one.files:
            assert one[name].tobytes() == got[name].tobytes(), name


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_min_max_ties_merge_by_the_rule_across_partitions(
    client: Any, tmp_path: Path, dtype: str
) -> None:
    """Partial states merge min and max by the rule of every engine: of 0.0 and -0.0 the
    later partition's, of NaNs the earlier one's (NumPy's float16 maximum keeps the earlier
    zero)."""
    for op in ("min", "max"):
        data, ids = tied_data(dtype, op, (200, 2), nan=True, sorted_ids=False, seed=4)
        root = tmp_path / op
        root.mkdir()
        for k, (a, b) in enumerate(itertools.pairwise([0, 30, 31, 90, 150, 200])):
            np.save(root / f"data-{k}.npy", data[a:b])
            np.save(root / f"ids-{k}.npy", ids[a:b])
        pattern = {"data": str(root / "data-*.npy"), "ids": str(root / "ids-*.npy")}
        reduction = run(client, op=op, **pattern)[0]
        assert reduction.result.tobytes() == rule_reduce(data, ids, 5, op).tobytes()


# ---------------------------------------------------------------------------------------------
# Validation: the file and row of the first offender, the count over every partition


def _expected_location(dataset: Dataset, column: str, position: int) -> tuple[Path, int]:
    for path in dataset.files:
        rows = pq.ParquetFile(path).metadata.num_rows
        if position < rows:
            return path, position
        position -= rows
    raise AssertionError("position past the end")


# 30 rows: partitions that cut the 40-row row groups, fewer than 7 rows made (215 of them).
@pytest.mark.parametrize("chunk_rows", [None, 30])
def test_out_of_range_names_file_and_row(
    client: Any, parquet_dataset: Dataset, chunk_rows: int | None
) -> None:
    seg = parquet_dataset.arrays["seg"]
    first = int(np.argmax(seg >= 20))
    path, row = _expected_location(parquet_dataset, "seg", first)
    count = int(np.count_nonzero(seg >= 20))
    message = (
        f"{path}:seg: segment_ids[{row}] = {seg[first]} is out of range [0, 20) "
        f"({count} ids out of range)"
    )
    with pytest.raises(InvalidInputError) as raised:
        run(
            client,
            op="sum",
            data=str(parquet_dataset.root),
            data_column="x",
            ids_column="seg",
            num_segments=20,
            chunk_rows=chunk_rows,
        )
    assert str(raised.value) == message


def test_out_of_range_in_2d_ids_names_both_axes(client: Any, npy_shards: Dataset) -> None:
    ids = npy_shards.arrays["ids"]
    with pytest.raises(InvalidInputError) as whole:
        validate.check_ids(ids, 10, sorted_ids=False)
    flat = ids.reshape(-1)
    first = int(np.argmax(flat >= 10))
    rows_before = 0
    for path in npy_shards.files:
        rows = np.load(path).shape[0]
        if first // 2 < rows_before + rows:
            break
        rows_before += rows
    local = first - rows_before * 2
    where = f"segment_ids[{local // 2}, {local % 2}]"
    message = str(whole.value).split(" = ", 1)[1]  # value and counts, from the one-pass scan
    with pytest.raises(InvalidInputError, match=r"ids-\d+\.npy: segment_ids\[\d+, \d\]") as raised:
        run(
            client,
            op="max",
            data=str(npy_shards.root / "data-*.npy"),
            ids=str(npy_shards.root / "ids-*.npy"),
            num_segments=10,
        )
    assert str(raised.value) == f"{path}: {where} = {message}"


def _shards(root: Path, ids_per_file: list[list[int]], dtype: str = "int32") -> tuple[str, str]:
    for k, values in enumerate(ids_per_file):
        np.save(root / f"d-{k}.npy", np.ones(len(values), np.float32))
        np.save(root / f"i-{k}.npy", np.array(values, dtype))
    return str(root / "d-*.npy"), str(root / "i-*.npy")


def test_sorted_decreases_are_counted_across_files(client: Any, tmp_path: Path) -> None:
    data, ids = _shards(tmp_path, [[0, 2, 1], [0, 5, 4], [], [3]])
    with pytest.raises(InvalidInputError) as whole:
        validate.check_ids(np.array([0, 2, 1, 0, 5, 4, 3]), None, sorted_ids=True)
    with pytest.raises(InvalidInputError) as raised:
        run(client, op="sum", data=data, ids=ids, sorted_ids=True)
    # The first offender is in the first file, so its position is the same as in one pass.
    assert str(raised.value) == f"{tmp_path / 'i-0.npy'}: {whole.value}"
    assert str(raised.value).endswith("(4 decreases)")


def test_sorted_decrease_at_a_file_boundary_names_both_files(client: Any, tmp_path: Path) -> None:
    data, ids = _shards(tmp_path, [[0, 1, 2], [], [1, 3]])
    with pytest.raises(InvalidInputError) as raised:
        run(client, op="sum", data=data, ids=ids, sorted_ids=True)
    assert str(raised.value) == (
        f"{tmp_path / 'i-2.npy'}: segment_ids[0] = 1 < segment_ids[2] = 2 in "
        f"{tmp_path / 'i-0.npy'}: --sorted ids must be non-decreasing (1 decrease)"
    )


@pytest.mark.parametrize("op", ["sum", "max", "count"])
def test_sorted_decrease_after_an_id_too_large_for_memory_is_the_error(
    client: Any, tmp_path: Path, op: str
) -> None:
    # The first partition's id 2**40 alone would need terabytes on its worker; the decrease in
    # the next one makes the ids invalid, the error one machine gives.
    data, ids = _shards(tmp_path, [[0, 2**40], [1, 1]], "int64")
    with pytest.raises(InvalidInputError) as raised:
        run(client, op=op, data=data, ids=ids, sorted_ids=True)
    assert str(raised.value) == (
        f"{tmp_path / 'i-1.npy'}: segment_ids[0] = 1 < segment_ids[1] = 1099511627776 in "
        f"{tmp_path / 'i-0.npy'}: --sorted ids must be non-decreasing (1 decrease)"
    )
    valid = tmp_path / "valid"
    valid.mkdir()
    data, ids = _shards(valid, [[0, 2**40], [2**40]], "int64")
    too_large = r"^num_segments = 1099511627777 \(inferred: the largest id is 1099511627776\): "
    with pytest.raises(InvalidInputError, match=too_large + "the output"):
        run(client, op=op, data=data, ids=ids, sorted_ids=True)


def test_sorted_negative_id(client: Any, tmp_path: Path) -> None:
    data, ids = _shards(tmp_path, [[0, 0], [1, -1, -3]])
    with pytest.raises(InvalidInputError) as raised:
        run(client, op="sum", data=data, ids=ids, sorted_ids=True)
    assert str(raised.value) == (
        f"{tmp_path / 'i-1.npy'}: segment_ids[1] = -1 is negative; "
        "--sorted ids must be >= 0 (2 negative ids)"
    )


def test_summaries_merged_at_any_cuts_equal_one_pass() -> None:
    """No cluster: summaries of random pieces, merged, give the one-pass report or error."""
    rng = np.random.default_rng(3)
    for trial in range(300):
        sorted_ids = bool(trial % 2)
        ids = rng.integers(-1 if trial % 3 == 0 else 0, 12, int(rng.integers(0, 40)))
        if sorted_ids and trial % 5:
            ids = np.sort(ids)
        n = None if trial % 4 == 0 else int(rng.integers(0, 14))
        cuts = np.sort(rng.integers(0, len(ids) + 1, int(rng.integers(0, 5))))
        pieces = np.split(ids, cuts)
        starts = np.concatenate(([0], cuts))
        merged = summarize(pieces[0], 0, n, sorted_ids=sorted_ids)
        for piece, start in zip(pieces[1:], starts[1:], strict=True):
            merged = merge(merged, summarize(piece, int(start), n, sorted_ids=sorted_ids))
        try:
            expected: Any = validate.check_ids(ids, n, sorted_ids=sorted_ids)
        except InvalidInputError as exc:
            expected = f"x: {exc}"
        try:
            got: Any = report(
                merged,
                n,
                sorted_ids=sorted_ids,
                locate=lambda p, shape=ids.shape: ("x", index_text(shape, p)),
            )
        except InvalidInputError as exc:
            got = str(exc)
        assert got == expected, (ids, n, cuts)


# ---------------------------------------------------------------------------------------------
# Inputs that do not pair up


def test_shard_counts_must_match(client: Any, tmp_path: Path) -> None:
    data, ids = _shards(tmp_path, [[0], [1], [2]])
    (tmp_path / "i-2.npy").unlink()
    with pytest.raises(
        InvalidInputError,
        match=r"matches 3 files but .* matches 2: DATA and "
        r"IDS shards must pair up \(first unpaired: .*d-2\.npy\)",
    ):
        run(client, op="sum", data=data, ids=ids)


def test_shard_rows_must_match(client: Any, tmp_path: Path) -> None:
    data, ids = _shards(tmp_path, [[0], [1, 1], [2]])
    # As many ids as data rows in all, but not pair by pair.
    np.save(tmp_path / "i-1.npy", np.array([1, 1, 1], np.int32))
    np.save(tmp_path / "i-2.npy", np.array([], np.int32))
    with pytest.raises(InvalidInputError) as raised:
        run(client, op="sum", data=data, ids=ids)
    assert str(raised.value) == (
        f"{tmp_path / 'd-1.npy'} and {tmp_path / 'i-1.npy'} do not "
        "pair up: 2 rows vs 3 rows (pair 2 of 3)"
    )


def test_ids_of_another_length_are_the_shape_error_of_every_engine(
    client: Any, tmp_path: Path
) -> None:
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.arange(5, dtype=np.float32))
    np.save(ids, np.zeros(3, np.int64))
    with pytest.raises(InvalidInputError) as raised:
        run(client, op="sum", data=str(data), ids=str(ids))
    # The line the numpy engine gives for these files (the pairing's was another wording).
    said = f"{ids}: segment_ids shape (3,) is not a prefix of {data} shape (5,)"
    assert str(raised.value) == said


def test_data_shards_must_share_a_dtype(client: Any, tmp_path: Path) -> None:
    data, ids = _shards(tmp_path, [[0], [1]])
    np.save(tmp_path / "d-1.npy", np.ones(1, np.float64))
    with pytest.raises(
        InvalidInputError,
        match=r"d-1\.npy: rows of shape \[\] and dtype float64 "
        r"differ from .*d-0\.npy \(\[\], float32\)",
    ):
        run(client, op="sum", data=data, ids=ids)


def test_ids_shards_may_mix_integer_widths(client: Any, tmp_path: Path) -> None:
    """Ids compare by value: an int8 -1 drops its row, a uint64 2**64 - 1 is out of range
    (never -1), whatever the widths of the other shards."""
    widths = [np.int8, np.uint16, np.int64, np.uint64]
    values = [[0, -1, 2], [3, 1], [2, 0], [1]]
    for k, (dtype, shard) in enumerate(zip(widths, values, strict=True)):
        np.save(tmp_path / f"d-{k}.npy", np.arange(len(shard), dtype=np.float32) + k)
        np.save(tmp_path / f"i-{k}.npy", np.array(shard).astype(dtype))
    data, ids = str(tmp_path / "d-*.npy"), str(tmp_path / "i-*.npy")
    got, _, ids_facts, _ = run(client, op="sum", data=data, ids=ids)
    every_data = np.concatenate([np.load(tmp_path / f"d-{k}.npy") for k in range(4)])
    expected = core.reduce_arrays(every_data, np.concatenate(values), None, "sum", engine="numpy")
    assert_same(got, expected)
    assert ids_facts.dtype == "int64"  # the widest, as the summary shows it
    np.save(tmp_path / "i-3.npy", np.array([2**64 - 1], np.uint64))
    with pytest.raises(
        InvalidInputError, match=r"i-3\.npy: segment_ids\[0\] = 18446744073709551615"
    ):
        run(client, op="sum", data=data, ids=ids, num_segments=4)
    np.save(tmp_path / "i-3.npy", np.array([1.0], np.float32))
    with pytest.raises(InvalidInputError, match=r"i-3\.npy: rows of shape \[\] and dtype float32"):
        run(client, op="sum", data=data, ids=ids)


def test_a_worker_read_error_names_the_file(client: Any, tmp_path: Path) -> None:
    data, ids = _shards(tmp_path, [[0, 1], [2, 3]])
    whole = (tmp_path / "d-1.npy").read_bytes()
    (tmp_path / "d-1.npy").write_bytes(whole[:-3])  # the header is fine, the body is short
    with pytest.raises(
        ReadError,
        match=r"d-1\.npy: truncated \.npy: 1 of 2 rows arrived \(5 of 8 bytes\)",
    ):
        run(client, op="sum", data=data, ids=ids)


def test_no_matching_files(client: Any, tmp_path: Path) -> None:
    with pytest.raises(ReadError, match=r"nothing-\*\.npy: no files match"):
        run(client, op="sum", data=str(tmp_path / "nothing-*.npy"), ids=str(tmp_path / "i.npy"))


def test_a_folder_leaves_out_hidden_subfolders(tmp_path: Path) -> None:
    """An unfinished write's attempts (``_temporary/``) and dot folders are not the data's
    files, as a Parquet reader takes a folder; a partition folder (``year=2020``) is."""
    names = ["part-0.parquet", "year=2020/part-1.pq", "_temporary/0/part-0.parquet"]
    names += [".staging/part-2.parquet", "year=2020/_SUCCESS", "year=2020/.part-1.pq.crc"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    found = [str(tmp_path / name) for name in names[:2]]
    assert expand(str(tmp_path)) == found


def test_a_glob_leaves_out_folders_starting_with_an_underscore_it_does_not_name(
    tmp_path: Path,
) -> None:
    """``out/**/*.parquet`` does not reach into an unfinished write's ``_temporary/`` (its rows
    would be read twice), as a folder read does not; a pattern that names such a folder, or a
    file whose own name starts with ``_``, is taken as written."""
    names = ["part-0.parquet", "year=2020/part-1.parquet", "_temporary/0/part-0.parquet"]
    names += ["_old/part-3.parquet", "year=2020/_part-4.parquet"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    paths = [str(tmp_path / name) for name in names]
    assert expand(str(tmp_path / "**" / "*.parquet")) == [paths[0], paths[4], paths[1]]
    assert expand(str(tmp_path / "_old" / "*.parquet")) == [paths[3]]
    assert expand(str(tmp_path / "_temporary" / "**" / "*.parquet")) == [paths[2]]
    assert expand(str(tmp_path / "_o*" / "*.parquet")) == [paths[3]]


def test_planning_helpers(parquet_dataset: Dataset) -> None:
    assert sorted(["d-10", "d-9", "d-1"], key=natural_key) == ["d-1", "d-9", "d-10"]
    # equal numbers: by the names, whatever order the directory listed them in
    for listed in (["p-2", "p-02", "p-1"], ["p-02", "p-1", "p-2"]):
        assert sorted(listed, key=natural_key) == ["p-1", "p-02", "p-2"]
    files = expand(str(parquet_dataset.root))
    assert files == [str(p) for p in parquet_dataset.files]  # _SUCCESS left out, natural order
    data = open_dataset(str(parquet_dataset.root), column="v", key=None, role="data")
    ids = open_dataset(str(parquet_dataset.root), column="seg", key=None, role="ids")
    parts = plan_partitions(data, ids, rows_per_partition=None, partition_bytes=100 * 40)
    # 32 bytes a row: 100 row groups' worth of bytes hold 125 rows, so row groups of 40 pair up
    # into runs of 160 rows (the last run of a file may be shorter).
    assert all(p.rows <= 160 for p in parts)
    assert sum(p.rows for p in parts) == data.shape[0]
    assert [p.row_offset for p in parts] == np.cumsum([0] + [p.rows for p in parts])[:-1].tolist()


# ---------------------------------------------------------------------------------------------
# The cluster misbehaving


class KillWorker(distributed.WorkerPlugin):  # type: ignore[misc]
    """Kills the worker process as it starts a partition task: once (``marker``), or always."""

    def __init__(self, marker: str | None) -> None:
        self.marker = marker

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish != "executing" or not str(key).startswith("segcli-partition"):
            return
        if self.marker is not None:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return  # another worker already died for this test
        os._exit(1)


@pytest.fixture
def killer(client: Any) -> Iterator[Any]:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    yield lambda plugin: client.register_plugin(plugin, name="segcli-test-killer")
    # The run released its tasks, so nothing dies now: wait for the nannies' restarts, then
    # unregister. The scheduler drops the plugin before it tells the workers: on a loaded
    # machine a worker the run killed may hang up on that message (CommClosedError, an
    # OSError), and its restart then starts without the plugin; asking again would only be
    # told that the plugin does not exist.
    client.wait_for_workers(2, timeout=60)
    with contextlib.suppress(OSError):
        client.unregister_worker_plugin("segcli-test-killer")
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_worker_killed_mid_run_still_gives_the_right_result(
    client: Any, killer: Any, parquet_dataset: Dataset, tmp_path: Path
) -> None:
    killer(KillWorker(str(tmp_path / "killed")))
    reduction, *_ = run(
        client, op="max", data=str(parquet_dataset.root), data_column="v", ids_column="seg"
    )
    assert (tmp_path / "killed").exists()  # a worker did die mid-run
    assert_same(
        reduction,
        core.reduce_arrays(
            parquet_dataset.arrays["v"], parquet_dataset.arrays["seg"], None, "max", engine="numpy"
        ),
    )


def test_workers_that_keep_dying_give_a_clean_error(
    client: Any, killer: Any, npy_shards: Dataset
) -> None:
    killer(KillWorker(None))
    with pytest.raises(
        ClusterError,
        match=r"^partition \d+ \(.*ids-\d+\.npy rows "
        r"0-\d+\): Dask workers kept dying while running it",
    ):
        run(
            client,
            op="sum",
            data=str(npy_shards.root / "data-*.npy"),
            ids=str(npy_shards.root / "ids-*.npy"),
        )


def test_the_cluster_segcli_starts_keeps_no_profiles() -> None:
    """Its workers run with the profiler off and a slow event-loop check (idle CPU a third),
    and the caller's own Dask settings are left as they were."""
    import dask

    def settings() -> tuple[Any, Any]:
        import dask

        return (
            dask.config.get("distributed.worker.profile.enabled"),
            dask.config.get("distributed.admin.tick.interval"),
        )

    with seg_dask.local_cluster(1) as cluster, distributed.Client(cluster) as client:
        assert set(client.run(settings).values()) == {(False, "1s")}
    assert dask.config.get("distributed.worker.profile.enabled") is True


def test_facts_are_the_same_on_dask_in_memory_and_streamed(client: Any, tmp_path: Path) -> None:
    """One facts builder: a ``.pq`` input is ``parquet`` in every mode, with the same label,
    shape, dtype and size."""
    from segcli.drivers import memory, stream

    rng = np.random.default_rng(4)
    values, segments = rng.normal(size=300), rng.integers(0, 9, 300)
    path = tmp_path / "t.pq"
    pq.write_table(pa.table({"value": values, "segment": segments}), path, row_group_size=64)
    spec = RunSpec(op="sum", data=str(path), data_column="value", ids_column="segment")
    on_dask = seg_dask.run(spec, None, client=client)
    whole = memory.run(spec)
    streamed = stream.run(RunSpec(**{**vars(spec), "block_rows": 64}))
    assert on_dask.data == whole.data == streamed.data
    assert on_dask.ids == whole.ids == streamed.ids
    assert on_dask.data.format == "parquet"


def test_missing_dask_is_an_engine_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(
        EngineUnavailableError,
        match=r"^engine 'dask' is not available .*; "
        r"install it with: pip install 'segcli\[dask\]' \(or '\.\[dask\]' in a segcli checkout\)$",
    ):
        seg_dask.run(spec(op="sum", data="x.npy", ids="y.npy"))


# ---------------------------------------------------------------------------------------------
# The command line


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def test_cli_writes_the_result_and_a_distributed_summary(
    address: str, parquet_dataset: Dataset, tmp_path: Path
) -> None:
    out = tmp_path / "out.npy"
    result = invoke(
        "mean",
        str(parquet_dataset.root / "part-*.parquet"),
        "--data-column",
        "v",
        "--ids-column",
        "seg",
        "--engine",
        "dask",
        "--scheduler",
        address,
        "-o",
        str(out),
        "--summary-json",
        "-",
    )
    assert result.exit_code == 0, result.output
    expected = core.reduce_arrays(
        parquet_dataset.arrays["v"], parquet_dataset.arrays["seg"], None, "mean", engine="numpy"
    ).result
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-12)
    facts = json.loads(result.stderr)
    assert facts["mode"] == "distributed"
    assert facts["extra"] == {"partitions": PARQUET_FILES, "workers": 2}
    assert facts["engine"] == "dask"
    assert facts["engine_reason"] == f"scheduler {address}; partitions on numpy"


def test_cli_invalid_ids_write_nothing(
    address: str, npy_shards: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", address)  # the documented variable
    out = tmp_path / "out.npy"
    result = invoke(
        "sum",
        str(npy_shards.root / "data-*.npy"),
        str(npy_shards.root / "ids-*.npy"),
        "-n",
        "5",
        "--engine",
        "dask",
        "-o",
        str(out),
    )
    assert result.exit_code == 1
    assert "ids out of range)" in result.stderr and "ids-0.npy: segment_ids[" in result.stderr
    assert not out.exists()


def test_cli_unreachable_scheduler_fails_within_the_bound(
    npy_shards: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seg_dask, "CONNECT_TIMEOUT_S", 2)
    started = time.perf_counter()
    result = invoke(
        "sum",
        str(npy_shards.root / "data-*.npy"),
        str(npy_shards.root / "ids-*.npy"),
        "--engine",
        "dask",
        "--scheduler",
        "tcp://127.0.0.1:9",
    )
    assert time.perf_counter() - started < 8
    assert result.exit_code == 2
    said = "Error: cannot reach Dask scheduler at tcp://127.0.0.1:9 (Connection refused); is it"
    assert said in result.stderr


def test_cli_starts_a_local_cluster_without_an_address(
    npy_shards: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    result = invoke(
        "count",
        str(npy_shards.root / "data-*.npy"),
        str(npy_shards.root / "ids-*.npy"),
        "--engine",
        "dask",
        "--summary-json",
        "-",
        "-o",
        str(tmp_path / "out.npy"),
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stderr)["engine_reason"].startswith("local cluster, ")
    expected = np.bincount(npy_shards.arrays["ids"].reshape(-1), minlength=20)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


DASK_ARGS = ("--ids-column", "seg", "--engine", "dask", "-o", "out.npy")


def test_bad_input_on_a_local_cluster_is_one_line(tmp_path: Path) -> None:
    """The workers are other processes writing to the same terminal: a task that meets bad
    input must not also log its traceback there (a whole process, as the user runs it)."""
    import subprocess

    table = pa.table({"x": pa.array([1.0, None, 3.0]), "seg": pa.array([0, 0, 1])})
    pq.write_table(table, tmp_path / "t.parquet")
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    ran = subprocess.run(
        [sys.executable, "-m", "segcli", "sum", "t.parquet", "--data-column", "x", *DASK_ARGS],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1
    assert ran.stderr == "Error: t.parquet: column 'x' has 1 null (first at row 1)\n"
    assert not (tmp_path / "out.npy").exists()


@pytest.mark.usefixtures("short_lanes")
@pytest.mark.parametrize("op", ["sum", "var", "logsumexp"])
def test_partitions_deal_rows_to_lanes_by_global_row(tmp_path: Path, op: str) -> None:
    """A partition's float sums (and var's shifted sums, logsumexp's scaled ones) fold each
    row into the lane of its global row number."""
    rng = np.random.default_rng(11)
    data = rng.normal(size=(37,)) * rng.choice([1e-6, 1.0, 1e6], 37)
    ids = rng.integers(0, 4, 37)
    cuts = [0, 13, 25, 37]
    for k, (a, b) in enumerate(itertools.pairwise(cuts)):
        np.save(tmp_path / f"d-{k}.npy", data[a:b])
        np.save(tmp_path / f"i-{k}.npy", ids[a:b])
    plan = seg_dask.plan_run(
        spec(op=op, data=str(tmp_path / "d-*.npy"), ids=str(tmp_path / "i-*.npy"))
    )
    job = distributed_tasks.Job(op, 4, sorted_ids=False, elements=data.size)
    engine = get_engine("numpy")
    for part, (a, b) in zip(plan.partitions, itertools.pairwise(cuts), strict=True):
        got = distributed_tasks.run_partition(part, job).state
        assert got is not None and got.lanes == 2
        want = ops.new_state(ops.get_op(op), 4, (), data.dtype, first_row=a)
        engine.fold(want, data[a:b].reshape(-1, 1), ids[a:b], sorted_ids=False)
        for name, array in want.arrays.items():
            assert got.arrays[name].tobytes() == array.tobytes(), (a, b, name)


# ---------------------------------------------------------------------------------------------
# --by: partial results merged by key


@pytest.fixture(scope="module")
def keyed_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``part-*.parquet``, each with its own dictionary of cities (one file empty), and
    ``all.parquet`` holding the same rows in one file, for the single-machine run."""
    rng = np.random.default_rng(15)
    root = tmp_path_factory.mktemp("keyed")
    cities = [["a", "bb", "c"], [], ["dd", "bb", "e", "a"], ["e", "c", "zz"]]
    tables = []
    for k, choices in enumerate(cities):
        rows = len(choices) * 17
        city = (
            rng.choice(np.array([*choices, None], object), rows)
            if choices
            else np.array([], object)
        )
        k2 = rng.integers(0, 3, rows)
        table = pa.table(
            {
                "city": pa.array(city, pa.string()).dictionary_encode(),
                "k2": pa.array(k2, mask=rng.random(rows) < 0.1),
                # Quarters: every order of the additions gives the same bytes.
                "q": rng.integers(-400, 400, rows) / 4,
                "x": rng.normal(size=rows) * rng.choice([1e-8, 1.0, 1e8], rows),
            }
        )
        pq.write_table(table, root / f"part-{k}.parquet", row_group_size=16)
        with pa.ipc.new_file(root / f"part-{k}.arrow", table.schema) as writer:
            writer.write_table(table, max_chunksize=20)
        tables.append(table)
    pq.write_table(pa.concat_tables(tables), root / "all.parquet", row_group_size=16)
    return root


def keyed_run(
    root: Path, out: Path, *args: str, address: str | None = None, glob: str = "part-*.parquet"
) -> Any:
    """A ``--by`` run: on the cluster over ``glob`` when ``address`` is given, else on one
    machine over ``all.parquet``."""
    source = ["all.parquet"] if address is None else [glob, "--engine", "dask"]
    where = [] if address is None else ["--scheduler", address]
    result = invoke(
        *args[:1],
        str(root / source[0]),
        *source[1:],
        *where,
        *args[1:],
        "-o",
        str(out),
        "--summary-json",
        str(out.with_suffix(".json")),
    )
    return result


def keys_summary(out: Path) -> Any:
    return json.loads(out.with_suffix(".json").read_text())["keys"]


# Each op and each partitioning once by default: every op cut in 7-row partitions with its
# null keys dropped, mean in the other partitionings with the other null-key rule each.
@default_run(
    lambda op, chunk_rows, null_keys: (
        (chunk_rows, null_keys) == (7, "drop")
        or (op == "mean" and (chunk_rows == 7) == (null_keys == "drop"))
    )
)
@pytest.mark.parametrize("chunk_rows", [None, 7, 50])
@pytest.mark.parametrize(
    ("op", "column"), [("sum", "q"), ("mean", "q"), ("min", "x"), ("max", "x"), ("count", "q")]
)
@pytest.mark.parametrize("null_keys", ["drop", "group"])
def test_by_gives_the_single_machine_bytes(
    address: str,
    keyed_dataset: Path,
    tmp_path: Path,
    op: str,
    column: str,
    chunk_rows: int | None,
    null_keys: str,
) -> None:
    args = [op, "--data-column", column, "--by", "city,k2", "--null-keys", null_keys]
    alone = keyed_run(keyed_dataset, tmp_path / "one.arrow", *args)
    assert alone.exit_code == 0, alone.stderr
    rows = [] if chunk_rows is None else ["--chunk-rows", str(chunk_rows)]
    spread = keyed_run(keyed_dataset, tmp_path / "dask.arrow", *args, *rows, address=address)
    assert spread.exit_code == 0, spread.stderr
    assert (tmp_path / "dask.arrow").read_bytes() == (tmp_path / "one.arrow").read_bytes()
    assert keys_summary(tmp_path / "dask.arrow") == keys_summary(tmp_path / "one.arrow")
    if null_keys == "drop":
        assert keys_summary(tmp_path / "dask.arrow")["rows_dropped_missing_key"] > 0


def test_by_on_arrow_files_gives_the_single_machine_bytes(
    address: str, keyed_dataset: Path, tmp_path: Path
) -> None:
    """Arrow files are one partition each, read whole; their batches' dictionaries differ."""
    args = ["max", "--data-column", "x", "--by", "k2,city", "--null-keys", "group"]
    assert keyed_run(keyed_dataset, tmp_path / "one.arrow", *args).exit_code == 0
    spread = keyed_run(
        keyed_dataset, tmp_path / "dask.arrow", *args, address=address, glob="part-*.arrow"
    )
    assert spread.exit_code == 0, spread.stderr
    assert (tmp_path / "dask.arrow").read_bytes() == (tmp_path / "one.arrow").read_bytes()


# One op of each fold kind, over partitions cut inside files, by default.
@default_run(lambda op, chunk_rows: chunk_rows == 9 and op in ("sum", "prod", "var", "logsumexp"))
@pytest.mark.parametrize("chunk_rows", [None, 9])
@pytest.mark.parametrize("op", ["sum", "mean", "sqrt_n", "prod", "var", "std", "logsumexp"])
def test_by_float_folds_give_the_single_machine_bytes(
    address: str, keyed_dataset: Path, tmp_path: Path, op: str, chunk_rows: int | None
) -> None:
    """Folds whose bits depend on their order fold the partitions in a chain, continuing the
    groups and state of the ones before: the single machine's bytes, run after run."""
    import pyarrow.ipc as ipc

    args = [op, "--data-column", "x", "--by", "city,k2", "--null-keys", "group"]
    assert keyed_run(keyed_dataset, tmp_path / "one.arrow", *args).exit_code == 0
    rows = [] if chunk_rows is None else ["--chunk-rows", str(chunk_rows)]
    done = keyed_run(keyed_dataset, tmp_path / "dask.arrow", *args, *rows, address=address)
    assert done.exit_code == 0, done.stderr
    got, want = (ipc.open_file(tmp_path / n).read_all() for n in ("dask.arrow", "one.arrow"))
    values = [t["value"].to_numpy().view(np.uint8) for t in (got, want)]
    assert np.array_equal(*values)
    assert (tmp_path / "dask.arrow").read_bytes() == (tmp_path / "one.arrow").read_bytes()


def test_by_keys_from_keeps_its_order_and_empty_groups(
    address: str, keyed_dataset: Path, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.csv"
    keys.write_text("city\nzz\ne\nnowhere\ndd\nc\nbb\na\n")  # "nowhere" is an empty group
    args = ["mean", "--data-column", "q", "--by", "city", "--keys-from", str(keys)]
    assert keyed_run(keyed_dataset, tmp_path / "one.arrow", *args).exit_code == 0
    spread = keyed_run(
        keyed_dataset, tmp_path / "dask.arrow", *args, "--chunk-rows", "10", address=address
    )
    assert spread.exit_code == 0, spread.stderr
    assert (tmp_path / "dask.arrow").read_bytes() == (tmp_path / "one.arrow").read_bytes()
    summary = json.loads((tmp_path / "dask.json").read_text())
    assert summary["empty_segments"] == 1


def test_by_unknown_key_names_the_earliest_file_and_row(
    address: str, keyed_dataset: Path, tmp_path: Path
) -> None:
    """ "dd" first appears in part-2 and "zz" in part-3: the error names part-2's first "dd"
    row, counted from that file's start, whichever partition finishes first."""
    keys = tmp_path / "keys.csv"
    keys.write_text("city\na\nbb\nc\ne\n")
    city = pq.read_table(keyed_dataset / "part-2.parquet")["city"].to_pylist()
    row = city.index("dd")
    assert row >= 2  # so not in the file's first partition: the row is not partition-local
    out = tmp_path / "dask.arrow"
    args = ["sum", "--data-column", "q", "--by", "city", "--keys-from", str(keys)]
    done = keyed_run(keyed_dataset, out, *args, "--chunk-rows", "2", address=address)
    assert done.exit_code == 1
    assert done.stderr.count("\n") == 1
    assert f"part-2.parquet: row {row} has key city='dd', which is not in --keys-from" in (
        done.stderr
    )
    assert not out.exists()


def test_scattered_states_keep_the_identity_elsewhere() -> None:
    from segcli.drivers.dask.keyed import scattered

    op = ops.get_op("min")
    state = ops.new_state(op, 2, (), np.dtype(np.float64))
    get_engine("numpy").fold(
        state, np.array([[3.0], [1.0], [2.0]]), np.array([1, 0, 1]), sorted_ids=False
    )
    moved = scattered(state, np.array([3, 0]), 4)
    np.testing.assert_array_equal(moved.count, [2, 0, 0, 1])
    np.testing.assert_array_equal(ops.finalize(moved, fill=-1.0), [2.0, -1.0, -1.0, 1.0])


def test_fold_chain_reads_at_most_a_few_partitions_ahead_of_its_folds() -> None:
    """A read waits for the fold READ_AHEAD_PER_WORKER partitions a worker before it, so rows
    read but not folded stay bounded however fast the reads go."""

    @dataclass(eq=False)  # hashable, as futures are
    class Submitted:
        function: Any
        args: tuple[Any, ...]
        key: str

    class Recorder:
        def __init__(self) -> None:
            self.submitted: list[Submitted] = []

        def nthreads(self) -> dict[str, int]:
            return {"a": 1, "b": 1}

        def submit(self, function: Any, *args: Any, key: str, **_: Any) -> Submitted:
            self.submitted.append(Submitted(function, args, key))
            return self.submitted[-1]

    client = Recorder()
    parts: Any = tuple(SimpleNamespace(index=k) for k in range(10))
    read, fold = distributed_tasks.read_partition_rows, distributed_tasks.fold_rows
    tasks, root = seg_dask._fold_chain(client, parts, "t", read, fold, None)
    ahead = 2 * seg_dask.READ_AHEAD_PER_WORKER
    reads = [s for s in client.submitted if s.function is distributed_tasks.read_partition_rows]
    folds = [s for s in client.submitted if s.function is distributed_tasks.fold_rows]
    assert list(tasks) == reads and root is folds[-1]
    for k, (read, fold) in enumerate(zip(reads, folds, strict=True)):
        assert fold.args[:2] == (folds[k - 1] if k else None, read)
        waits = read.args[2:]
        if k < ahead:
            assert waits == ()
        else:
            (token,) = waits
            assert token.args == (folds[k - ahead],)


# ---------------------------------------------------------------------------------------------
# Nulls: counted over every partition, as a single machine counts them

#: Rows holding a null, spread over several row groups (of 50 rows) and partitions.
NULL_ROWS = [15, 90, 150, 160, 210, 250, 290, 310, 350, 399]


def _table_with_nulls(path: Path, null_in: str) -> None:
    rows = 400
    null = np.zeros(rows, bool)
    null[NULL_ROWS] = True
    columns = {
        "v": pa.array(np.arange(rows, dtype=np.float64), mask=null if null_in == "v" else None),
        "id": pa.array(np.arange(rows) // 10, mask=null if null_in == "id" else None),
        "k": pa.array(np.arange(rows) % 3),
    }
    lists: list[list[float | None] | None] = [[float(i), float(i)] for i in range(rows)]
    lists[20] = [1.0, None]  # a null inside a list before the first null list
    for row in NULL_ROWS[2:]:
        lists[row] = None
    columns["l"] = pa.array(lists, pa.list_(pa.float64()))
    pq.write_table(pa.table(columns), path, row_group_size=50)


@pytest.mark.parametrize(
    ("null_in", "args", "expected"),
    [
        ("v", ["--ids-column", "id"], "column 'v' has 10 nulls (first at row 15)"),
        ("id", ["--ids-column", "id"], "column 'id' has 10 nulls (first at row 15)"),
        ("id", ["--ids-column", "id", "--skipna", "--sorted"], "segment_ids[15] is null (10 null"),
        ("v", ["--by", "k"], "column 'v' has 10 nulls (first at row 15)"),
        (
            "l",
            ["--ids-column", "id"],
            "'l' has 8 null lists and 1 null inside its lists (first at row 20)",
        ),
    ],
)
def test_nulls_are_counted_over_every_partition(
    address: str,
    tmp_path: Path,
    null_in: str,
    args: list[str],
    expected: str,
) -> None:
    """A partition fails on its own nulls; the error counts those of every partition and
    names the file's first, as the in-memory run does."""
    _table_with_nulls(tmp_path / "t.parquet", null_in)
    column = "l" if null_in == "l" else "v"
    common = ["sum", str(tmp_path / "t.parquet"), "--data-column", column, *args]
    on_one_machine = invoke(*common, "-o", str(tmp_path / "one.parquet"))
    dask_args = ["--engine", "dask", "--scheduler", address, "--chunk-rows", "50"]
    on_dask = invoke(*common, *dask_args, "-o", str(tmp_path / "out.parquet"))
    assert on_one_machine.exit_code == on_dask.exit_code == 1
    assert on_dask.stderr == on_one_machine.stderr
    assert on_dask.stderr.count("\n") == 1 and expected in on_dask.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


@pytest.mark.parametrize(
    ("data_nulls", "ids_nulls", "expected"),
    [
        ([160, 170, 390], [155, 380], "column 'id' has 2 nulls (first at row 155)"),
        ([152, 170, 390], [155, 380], "column 'v' has 3 nulls (first at row 152)"),
        ([260, 390], [15, 380], "column 'id' has 2 nulls (first at row 15)"),
    ],
)
def test_the_earliest_null_of_data_and_ids_is_named_over_every_partition(
    address: str, tmp_path: Path, data_nulls: list[int], ids_nulls: list[int], expected: str
) -> None:
    """Of DATA's and IDS' nulls, the column of the first null row is named, as on one machine."""
    rows = 400
    v_null, id_null = np.zeros(rows, bool), np.zeros(rows, bool)
    v_null[data_nulls], id_null[ids_nulls] = True, True
    table = pa.table(
        {
            "v": pa.array(np.arange(rows, dtype=np.float64), mask=v_null),
            "id": pa.array(np.arange(rows) // 10, mask=id_null),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=50)
    common = ["sum", str(tmp_path / "t.parquet"), "--data-column", "v", "--ids-column", "id"]
    on_one_machine = invoke(*common, "-o", str(tmp_path / "one.parquet"))
    dask_args = ["--engine", "dask", "--scheduler", address, "--chunk-rows", "50"]
    on_dask = invoke(*common, *dask_args, "-o", str(tmp_path / "out.parquet"))
    assert on_one_machine.exit_code == on_dask.exit_code == 1
    assert (
        on_dask.stderr == on_one_machine.stderr == f"Error: {tmp_path / 't.parquet'}: {expected}\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_nulls_of_later_files_count_and_the_first_file_is_named(
    address: str, tmp_path: Path
) -> None:
    null = [False, True, False, True]
    for k in range(3):
        table = pa.table({"v": pa.array([1.0] * 4, mask=np.array(null) & (k != 0)), "id": [0] * 4})
        pq.write_table(table, tmp_path / f"p-{k}.parquet")
    glob = str(tmp_path / "p-*.parquet")
    ran = invoke(
        "sum",
        glob,
        "--data-column",
        "v",
        "--ids-column",
        "id",
        "--engine",
        "dask",
        "--scheduler",
        address,
        "-o",
        str(tmp_path / "out.npy"),
    )
    assert ran.exit_code == 1
    first = tmp_path / "p-1.parquet"
    assert ran.stderr == f"Error: {first}: column 'v' has 4 nulls (first at row 1)\n"
    assert not (tmp_path / "out.npy").exists()


@pytest.mark.parametrize(
    ("columns", "args", "expected", "nulls"),
    [
        # A later file's first row is null: the earlier file's null is the first.
        ([{"v": [1.0, None], "id": [0, 0]}, {"v": [None, 1.0], "id": [0, 0]}], [], "p-0 v 1", 2),
        # IDS' first row is null, DATA's later: the earliest null row is named, as on one
        # machine (DATA's on a tie).
        ([{"v": [1.0, None], "id": [None, 0]}], [], "p-0 id 0", 1),
        ([{"v": [None, 1.0], "id": [None, 0]}], [], "p-0 v 0", 1),
        (
            [{"v": [1.0, None], "id": [0, 0]}, {"v": [None, 1.0], "id": [0, 0]}],
            ["--by"],
            "p-0 v 1",
            2,
        ),
    ],
)
def test_a_null_in_a_first_row_counts_the_nulls_of_every_file(
    address: str,
    tmp_path: Path,
    columns: list[dict[str, Any]],
    args: list[str],
    expected: str,
    nulls: int,
) -> None:
    """The first row, read while planning for the dtype, is no earlier than the other nulls."""
    for k, table in enumerate(columns):
        pq.write_table(pa.table(table), tmp_path / f"p-{k}.parquet")
    ids = args or ["--ids-column"]
    ran = invoke(
        "sum",
        str(tmp_path / "p-*.parquet"),
        "--data-column",
        "v",
        *ids,
        "id",
        "--engine",
        "dask",
        "--scheduler",
        address,
        "-o",
        str(tmp_path / "out.npy" if not args else tmp_path / "out.parquet"),
    )
    assert ran.exit_code == 1
    noun = "null" if nulls == 1 else "nulls"
    file, column, row = expected.split()
    first = tmp_path / f"{file}.parquet"
    assert (
        ran.stderr == f"Error: {first}: column '{column}' has {nulls} {noun} (first at row {row})\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"p-{k}.parquet" for k in range(len(columns))
    ]


# ---------------------------------------------------------------------------------------------
# This session's single-machine rules, on the cluster


def _one_machine_and_dask(address: str, out: Path, *args: str) -> tuple[Any, Any]:
    """The same command in memory and on the cluster (partitions of 30 rows), writing
    ``one-<out>`` and ``dask-<out>`` (names in out's folder)."""
    dask = ["--engine", "dask", "--scheduler", address, "--chunk-rows", "30"]
    return (
        invoke(*args, "--engine", "numpy", "-o", str(out.with_name(f"one-{out.name}"))),
        invoke(*args, *dask, "-o", str(out.with_name(f"dask-{out.name}"))),
    )


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("grouping", [["--ids-column", "id", "--sorted"], ["--by", "id"]])
def test_min_max_ties_of_sorted_and_keyed_runs_merge_by_the_rule(
    address: str, tmp_path: Path, dtype: str, grouping: list[str]
) -> None:
    """Ties of 0.0 and -0.0, and NaNs, across Parquet partitions: the single machine's bytes."""
    for op in ("min", "max"):
        data, ids = tied_data(dtype, op, (200,), nan=True, sorted_ids=True, seed=5)
        path = tmp_path / f"{op}.parquet"
        pq.write_table(pa.table({"v": data, "id": ids.astype(np.int64)}), path, row_group_size=30)
        out = tmp_path / f"{op}-out.parquet"
        args = [op, str(path), "--data-column", "v", *grouping, "-q"]
        for result in _one_machine_and_dask(address, out, *args):
            assert result.exit_code == 0, result.stderr
        one, dask = (pq.read_table(out.with_name(f"{side}-{out.name}")) for side in ("one", "dask"))
        assert one.schema == dask.schema
        for name in one.column_names:
            assert one[name].to_numpy().tobytes() == dask[name].to_numpy().tobytes()


def test_expect_with_by_compares_the_key_columns_on_dask(address: str, tmp_path: Path) -> None:
    table = pa.table({"k": ["a", "b", "a", "c"] * 20, "x": np.arange(80, dtype=np.float64)})
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=30)
    args = ["sum", path, "--data-column", "x", "--by", "k", "-q"]
    golden = tmp_path / "golden.parquet"
    assert invoke(*args, "-o", str(golden)).exit_code == 0
    # The same values under other keys: only the key columns differ.
    other = pq.read_table(golden).set_column(0, "k", pa.array(["a", "b", "d"]))
    pq.write_table(other, tmp_path / "other.parquet")
    dask = ["--engine", "dask", "--scheduler", address, "--chunk-rows", "30"]
    assert invoke(*args, *dask, "--expect", str(golden)).exit_code == 0
    one = invoke(*args, "--expect", str(tmp_path / "other.parquet"))
    on_dask = invoke(*args, *dask, "--expect", str(tmp_path / "other.parquet"))
    assert one.exit_code == on_dask.exit_code == 4
    assert on_dask.stderr == one.stderr
    assert "k='c', the golden file k='d'" in on_dask.stderr and on_dask.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("first", "second", "common"),
    [
        (pa.array([1, 2, 1], pa.int32()), pa.array([3, 2**40, 2]), pa.int64()),
        (
            pa.array([0, 5, 0], pa.timestamp("s")),
            pa.array([1_500_000, 0, 5_000_000], pa.timestamp("us")),
            pa.timestamp("us"),
        ),
    ],
    ids=["int32-int64", "seconds-microseconds"],
)
def test_key_types_that_differ_between_files_widen_on_dask(
    address: str, tmp_path: Path, first: pa.Array, second: pa.Array, common: pa.DataType
) -> None:
    """Each file's keys in the type both fit (the first file's would not hold the second's
    values), as one machine groups the files' rows written in that type."""
    for k, keys in enumerate((first, second)):
        table = pa.table({"k": keys, "x": np.arange(len(keys), dtype=np.float64) + 10 * k})
        pq.write_table(table, tmp_path / f"part-{k}.parquet")
    both = pa.concat_tables(
        pq.read_table(tmp_path / f"part-{k}.parquet").cast(
            pa.schema([pa.field("k", common), pa.field("x", pa.float64())])
        )
        for k in (0, 1)
    )
    pq.write_table(both, tmp_path / "all.parquet")
    args = ["--data-column", "x", "--by", "k", "-q"]
    dask = invoke(
        "sum",
        str(tmp_path / "part-*.parquet"),
        "--engine",
        "dask",
        "--scheduler",
        address,
        *args,
        "-o",
        str(tmp_path / "dask.parquet"),
    )
    assert dask.exit_code == 0, dask.stderr
    one = invoke("sum", str(tmp_path / "all.parquet"), *args, "-o", str(tmp_path / "one.parquet"))
    assert one.exit_code == 0, one.stderr
    got = pq.read_table(tmp_path / "dask.parquet")
    assert got.schema.field("k").type == common
    assert got.equals(pq.read_table(tmp_path / "one.parquet"))


@pytest.mark.parametrize("grouping", [["--ids-column", "id"], ["--by", "k"]])
def test_agg_skipna_summary_counts_on_dask(
    address: str, tmp_path: Path, grouping: list[str]
) -> None:
    """Missing values and null ids skipped across partitions: the single machine's counts."""
    rows = np.arange(90)
    table = pa.table(
        {
            "v": pa.array(rows.astype(np.float64), mask=np.isin(rows, [3, 17, 45, 89])),
            "id": pa.array(rows // 10, mask=np.isin(rows, [8, 30, 61])),
            "k": pa.array(rows % 4, mask=np.isin(rows, [4])),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=30)
    args = ["agg", str(path), "--data-column", "v", *grouping, "--op", "mean,min,count"]
    ran = _one_machine_and_dask(
        address, tmp_path / "out.parquet", *args, "--skipna", "--summary-json", "-"
    )
    one, dask = (json.loads(result.stderr) for result in ran)
    assert (
        one["skipped"]
        == dask["skipped"]
        == ({"values": 4, "rows": 3} if "--ids-column" in grouping else {"values": 4, "rows": 0})
    )
    for fact in ("rows_used", "rows_total", "rows_dropped_negative", "results"):
        assert one[fact] == dask[fact]


def test_null_lists_under_skipna_on_dask(address: str, tmp_path: Path) -> None:
    """A null list is a row of missing values on the cluster too, a partition of null lists
    only included (it has no length of its own): the single machine's bytes."""
    lists: list[Any] = [[float(i), -float(i)] for i in range(90)]
    for i in [*range(30, 60), 3, 75]:  # the second partition is all null lists
        lists[i] = None
    table = pa.table({"v": pa.array(lists, pa.list_(pa.float64())), "id": np.arange(90) % 7})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=30)
    args = ["agg", str(path), "--data-column", "v", "--ids-column", "id", "--op", "mean,count"]
    one, dask = _one_machine_and_dask(address, tmp_path / "out.parquet", *args, "--skipna")
    assert one.exit_code == dask.exit_code == 0, (one.stderr, dask.stderr)
    written = [(tmp_path / f"{who}-out.parquet").read_bytes() for who in ("one", "dask")]
    assert written[0] == written[1]


def test_null_lists_are_no_error_when_a_partition_fails_on_a_null_sorted_id(
    address: str, tmp_path: Path
) -> None:
    """Under --skipna the nulls a failed partition counts are its ids', never its null lists
    (missing values): the single machine's error."""
    lists: list[Any] = [None, [1.0, 2.0], None, [3.0, 4.0]] * 10
    ids: list[Any] = [i // 4 for i in range(40)]
    ids[25] = None
    table = pa.table({"v": pa.array(lists, pa.list_(pa.float64())), "id": pa.array(ids)})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, row_group_size=8)
    args = ["sum", str(path), "--data-column", "v", "--ids-column", "id", "--sorted", "--skipna"]
    one, dask = _one_machine_and_dask(address, tmp_path / "out.npy", *args)
    assert one.exit_code == dask.exit_code == 1
    assert dask.stderr == one.stderr
    assert "segment_ids[25] is null (1 null id)" in one.stderr
