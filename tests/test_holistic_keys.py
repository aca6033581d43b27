"""median, quantile and nunique grouped by key columns (``--by``) and over gathered rows
(``--indices``): pandas' groupby answers per group, a loop's answers per bag, the same bytes
in memory and streamed, and the errors of the sparse family's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from tests.entry import Ran, run_main

pd = pytest.importorskip("pandas")

Q = 0.3
HOLISTIC = ["median", "quantile", "nunique"]
ROWS = 40


def ok(*args: Any) -> Ran:
    result = run_main(*args)
    assert result.exit_code == 0, result.stderr
    return result


def error_lines(result: Ran) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error:")]


def q_args(op: str) -> list[str]:
    return ["--q", str(Q)] if op == "quantile" else []


def table(seed: int = 0, null_keys: bool = True, null_values: bool = True) -> pa.Table:
    """City and day keys (with nulls), float values with ties and nulls, integer values too."""
    rng = np.random.default_rng(seed)
    cities = rng.choice(["paris", "oslo", "lima", "rome"], ROWS).astype(object)
    days = rng.integers(0, 3, ROWS).astype(object)
    values = rng.integers(-8, 8, ROWS).astype(np.float64) / 2
    counts = rng.integers(0, 5, ROWS).astype(object)
    if null_keys:
        cities[[3, 17]] = None
        days[[5, 17, 30]] = None
    value_mask = np.zeros(ROWS, bool)
    if null_values:
        value_mask[[2, 11, 29]] = True
        counts[[4, 12]] = None
    return pa.table(
        {
            "city": pa.array(list(cities), pa.string()),
            "day": pa.array(list(days), pa.int64()),
            "v": pa.array(values.astype(np.float32), mask=value_mask),
            "n": pa.array(list(counts), pa.int32()),
        }
    )


def write(path: Path, data: pa.Table) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(data, path, row_group_size=9)
    else:
        pcsv.write_csv(data, path)
    return path


def pandas_groups(data: pa.Table, by: list[str], column: str, op: str, dropna: bool = True) -> Any:
    """pandas' answer per group (NaN and nulls left out, as under --skipna), keys ordered
    ascending, nulls last."""
    grouped = data.to_pandas().groupby(by, dropna=dropna)[column]
    result = grouped.quantile(Q) if op == "quantile" else getattr(grouped, op)()
    return result.sort_index(na_position="last")


def read_result(path: Path) -> pa.Table:
    return pq.read_table(path)


def key_rows(result: pa.Table, by: list[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(result.column(name).to_pylist() for name in by), strict=True))


def expected_keys(frame_index: Any) -> list[tuple[Any, ...]]:
    def plain(value: Any) -> Any:
        return None if value is None or value != value else value

    return [tuple(plain(v) for v in (k if isinstance(k, tuple) else (k,))) for k in frame_index]


@pytest.mark.parametrize("op", HOLISTIC)
@pytest.mark.parametrize("column", ["v", "n"])
def test_by_one_string_key_matches_pandas_under_skipna(
    tmp_path: Path, op: str, column: str
) -> None:
    data = table()
    path = write(tmp_path / "t.parquet", data)
    out = tmp_path / "out.parquet"
    args = [op, path, "--data-column", column, "--by", "city", "--skipna", *q_args(op)]
    ok(*args, "-o", out, "-q")
    got = read_result(out)
    want = pandas_groups(data, ["city"], column, op)
    assert key_rows(got, ["city"]) == expected_keys(want.index)
    np.testing.assert_allclose(got.column("value").to_numpy(), want.to_numpy(), rtol=1e-6)
    sizes = data.to_pandas().groupby("city").size().sort_index()
    assert got.column("count").to_pylist() == sizes.tolist()


@pytest.mark.parametrize("op", HOLISTIC)
@pytest.mark.parametrize("null_keys", ["drop", "group"])
def test_by_two_keys_with_null_keys_matches_pandas(tmp_path: Path, op: str, null_keys: str) -> None:
    data = table(seed=1, null_values=False)
    path = write(tmp_path / "t.parquet", data)
    out = tmp_path / "out.parquet"
    args = [op, path, "--data-column", "v", "--by", "city,day", "--null-keys", null_keys]
    ok(*args, *q_args(op), "-o", out, "-q")
    got = read_result(out)
    want = pandas_groups(data, ["city", "day"], "v", op, dropna=null_keys == "drop")
    assert key_rows(got, ["city", "day"]) == expected_keys(want.index)
    np.testing.assert_allclose(got.column("value").to_numpy(), want.to_numpy(), rtol=1e-6)


def numpy_answer(op: str, values: np.ndarray) -> float:
    if not len(values):
        return 0.0
    if op == "median":
        return float(np.median(values))
    if op == "quantile":
        return float(np.quantile(values, Q))
    return float(len(np.unique(values)))  # NaN counts once: np.unique keeps one NaN


@pytest.mark.parametrize("op", HOLISTIC)
def test_by_without_skipna_nan_propagates_and_nunique_counts_it_once(
    tmp_path: Path, op: str
) -> None:
    data = table(seed=2, null_keys=False, null_values=False)
    values = data.column("v").to_numpy().copy()
    values[[1, 6]] = np.nan
    data = data.set_column(2, "v", pa.array(values))
    path = write(tmp_path / "t.parquet", data)
    out = tmp_path / "out.parquet"
    ok(op, path, "--data-column", "v", "--by", "city", *q_args(op), "-o", out, "-q")
    got = read_result(out)
    cities = np.asarray(data.column("city").to_pylist())
    keys = sorted(set(cities))
    assert got.column("city").to_pylist() == keys
    want = [numpy_answer(op, values[cities == key]) for key in keys]
    np.testing.assert_allclose(got.column("value").to_numpy(), want, rtol=1e-6)


CITIES = ["rome", "cairo", "paris", "oslo", "lima"]


def test_keys_from_gives_its_order_and_fills_empty_groups(tmp_path: Path) -> None:
    data = table(seed=3, null_keys=False, null_values=False)
    path = write(tmp_path / "t.parquet", data)
    every = write(tmp_path / "every.csv", pa.table({"city": CITIES}))
    out = tmp_path / "out.parquet"
    args = ["median", path, "--data-column", "v", "--by", "city"]
    ok(*args, "--keys-from", every, "--fill", "-1", "-o", out, "-q")
    got = read_result(out)
    assert got.column("city").to_pylist() == CITIES
    frame = data.to_pandas()
    want = [frame[frame.city == c].v.median() if c != "cairo" else -1.0 for c in CITIES]
    np.testing.assert_allclose(got.column("value").to_numpy(), want, rtol=1e-6)
    assert got.column("count").to_pylist()[1] == 0

    # A key not in --keys-from is the error every --by op gives, and nothing is written.
    some = write(tmp_path / "some.csv", pa.table({"city": CITIES[:-1]}))
    result = run_main(*args, "--keys-from", some, "-o", tmp_path / "no.parquet")
    assert result.exit_code == 1
    cities = data.column("city").to_pylist()
    first, count = cities.index("lima"), cities.count("lima")
    assert error_lines(result) == [
        f"Error: {path}: row {first} has key city='lima', which is not in --keys-from {some} "
        f"({count} row{'s' if count != 1 else ''} with a key not in it)"
    ]
    assert not (tmp_path / "no.parquet").exists()


# A CSV's rows are not known before the end: under a tiny budget it gets the most partitions.
STREAMING = [
    ("parquet", ["--chunk-rows", "7"]),
    ("parquet", ["--chunk-rows", "7", "--memory-limit", "1KiB"]),
    ("csv", ["--chunk-rows", "7"]),
]


@pytest.mark.parametrize(("fmt", "streaming"), STREAMING)
def test_by_streamed_gives_the_in_memory_bytes(
    tmp_path: Path, fmt: str, streaming: list[str]
) -> None:
    data = table(seed=4)
    path = write(tmp_path / f"t.{fmt}", data)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for op in HOLISTIC:
        args = [op, path, "--data-column", "v", "--by", "city,day", "--null-keys", "group"]
        args += [*q_args(op), "--skipna", "-q"]
        whole = ok(*args, "-o", tmp_path / "whole.csv")
        streamed = ok(*args, *streaming, "--tmp-dir", scratch, "-o", tmp_path / "streamed.csv")
        assert whole.stdout == streamed.stdout == ""
        whole_bytes = (tmp_path / "whole.csv").read_bytes()
        assert (tmp_path / "streamed.csv").read_bytes() == whole_bytes
        assert list(scratch.iterdir()) == []  # the partition files are gone


def test_by_streamed_keys_from_gives_the_in_memory_bytes(tmp_path: Path) -> None:
    data = table(seed=5, null_keys=False)
    path = write(tmp_path / "t.parquet", data)
    keys = write(tmp_path / "keys.csv", pa.table({"city": CITIES}))
    args = ["nunique", path, "--data-column", "n", "--by", "city", "--keys-from", keys]
    args += ["--skipna", "-q"]
    whole = ok(*args).stdout
    assert ok(*args, "--chunk-rows", "5").stdout == whole
    assert whole.splitlines()[2] == "cairo\t0"


def test_agg_mean_and_median_by_key_matches_pandas_and_streams(tmp_path: Path) -> None:
    data = table(seed=6, null_keys=True, null_values=False)
    path = write(tmp_path / "t.parquet", data)
    out = tmp_path / "out.parquet"
    args = ["agg", path, "--data-column", "v", "--by", "city", "--op", "mean,median,quantile"]
    ok(*args, "--q", Q, "-o", out, "-q")
    got = read_result(out)
    assert got.column_names == ["city", "mean", "median", f"q{Q}", "count"]
    for name, op in (("mean", "mean"), ("median", "median"), (f"q{Q}", "quantile")):
        want = pandas_groups(data, ["city"], "v", op)
        assert key_rows(got, ["city"]) == expected_keys(want.index)
        np.testing.assert_allclose(got.column(name).to_numpy(), want.to_numpy(), rtol=1e-6)
    whole = ok(*args, "--q", Q, "-q").stdout
    assert ok(*args, "--q", Q, "-q", "--chunk-rows", "6").stdout == whole


def test_agg_by_key_with_several_data_columns(tmp_path: Path) -> None:
    data = table(seed=7, null_values=False)
    path = write(tmp_path / "t.parquet", data)
    out = tmp_path / "out.parquet"
    ok("agg", path, "--data-column", "v,n", "--by", "city", "--op", "median,sum", "-o", out, "-q")
    got = read_result(out)
    for column in ("v", "n"):
        want = pandas_groups(data, ["city"], column, "median")
        np.testing.assert_allclose(got.column(f"{column}_median").to_numpy(), want.to_numpy())


def test_by_on_dask_stays_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "t.parquet", table())
    result = run_main("median", path, "--data-column", "v", "--by", "city", "--engine", "dask")
    assert result.exit_code == 2
    assert error_lines(result)[0].startswith("Error: median cannot run on Dask")


# ---------------------------------------------------------------------------------------------
# --indices: gather, then sort


def loop_gathered(
    op: str, data: np.ndarray, ids: np.ndarray, indices: np.ndarray, n: int
) -> np.ndarray:
    """The obvious loop: each bag's gathered rows, reduced element by element."""
    inner = data.shape[1:]
    out = np.zeros((n, *inner))
    for s in range(n):
        rows = data[indices[ids == s]].reshape(-1, *inner)
        for element in np.ndindex(*inner):
            out[(s, *element)] = numpy_answer(op, rows[(slice(None), *element)])
    return out


def gather_case(tmp_path: Path, inner: tuple[int, ...]) -> tuple[list[Path], tuple[Any, ...]]:
    rng = np.random.default_rng(8)
    data = (rng.integers(-6, 6, (9, *inner)) / 2).astype(np.float32)
    data.reshape(-1)[4] = np.nan
    ids = np.sort(rng.choice([0, 1, 1, 3, 4, 4, 4, 6], 25))  # bags 2 and 5 empty
    indices = rng.integers(0, 9, 25).astype(np.int32)
    paths = [tmp_path / "data.npy", tmp_path / "ids.npy", tmp_path / "idx.npy"]
    for p, array in zip(paths, (data, ids, indices), strict=True):
        np.save(p, array)
    return paths, (data, ids, indices)


@pytest.mark.parametrize("op", HOLISTIC)
@pytest.mark.parametrize("inner", [(), (2,)])
def test_indices_match_a_loop_with_n_and_empty_bags(
    tmp_path: Path, op: str, inner: tuple[int, ...]
) -> None:
    (data_path, ids_path, idx_path), (data, ids, indices) = gather_case(tmp_path, inner)
    args = [op, data_path, ids_path, "--indices", idx_path, *q_args(op), "-q"]
    for n, extra in ((7, []), (9, ["-n", "9"])):
        out = tmp_path / f"out{n}.npy"
        ok(*args, *extra, "-o", out)
        got = np.load(out)
        assert got.shape == (n, *inner)
        want = loop_gathered(op, data, ids, indices, n)
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
        streamed = tmp_path / f"streamed{n}.npy"
        ok(*args, *extra, "--chunk-rows", "4", "-o", streamed)
        assert streamed.read_bytes() == out.read_bytes()


def test_indices_in_a_table_column(tmp_path: Path) -> None:
    vocab = np.arange(12, dtype=np.float64).reshape(6, 2)
    np.save(tmp_path / "vocab.npy", vocab)
    bags = pa.table({"bag": [0, 0, 0, 2, 2], "token": [5, 1, 3, 0, 0]})
    pq.write_table(bags, tmp_path / "bags.parquet")
    args = ["median", tmp_path / "vocab.npy", tmp_path / "bags.parquet", "--ids-column", "bag"]
    result = ok(*args, "--indices-column", "token", "-q")
    assert result.stdout.splitlines() == ["0\t6.0\t7.0", "1\t0.0\t0.0", "2\t0.0\t1.0"]


@pytest.mark.parametrize(
    ("ids", "indices", "extra", "message"),
    [
        (
            [0, 2, 1, 1],
            [0, 1, 2, 3],
            [],
            "segment_ids[2] = 1 < segment_ids[1] = 2: --indices needs non-decreasing segment "
            "ids (1 decrease)",
        ),
        (
            [0, -1, 1, 1],
            [0, 1, 2, 3],
            [],
            "segment_ids[1] = -1 is negative: --indices needs ids >= 0 (1 negative id)",
        ),
        (
            [0, 1, 3, 4],
            [0, 1, 2, 3],
            ["-n", "3"],
            "segment_ids[2] = 3 is out of range [0, 3) (2 ids out of range)",
        ),
        (
            [0, 1, 1, 1],
            [0, 9, 2, 12],
            [],
            "indices[1] = 9 is out of range [0, 5) (2 indices out of range)",
        ),
    ],
)
@pytest.mark.parametrize("streaming", [[], ["--chunk-rows", "2"]])
def test_indices_errors_are_the_sparse_family_rules(
    tmp_path: Path,
    ids: list[int],
    indices: list[int],
    extra: list[str],
    message: str,
    streaming: list[str],
) -> None:
    np.save(tmp_path / "data.npy", np.arange(5, dtype=np.float64))
    np.save(tmp_path / "ids.npy", np.asarray(ids, np.int64))
    np.save(tmp_path / "idx.npy", np.asarray(indices, np.int64))
    paths = [tmp_path / "data.npy", tmp_path / "ids.npy", "--indices", tmp_path / "idx.npy"]
    out = tmp_path / "out.npy"
    result = run_main("median", *paths, *extra, *streaming, "-o", out)
    assert result.exit_code == 1, result.stderr
    (line,) = error_lines(result)
    assert line.endswith(message)
    assert not out.exists()


def test_indices_usage_errors(tmp_path: Path) -> None:
    (data_path, ids_path, idx_path), _ = gather_case(tmp_path, ())
    np.save(tmp_path / "w.npy", np.ones(25))
    args = ["median", data_path, ids_path, "--indices", idx_path]
    result = run_main(*args, "--weights", tmp_path / "w.npy", "-o", tmp_path / "out.npy")
    assert result.exit_code == 2
    assert error_lines(result) == [
        "Error: --weights applies to sum, mean, sqrt_n only, not median (see 'segcli median "
        "--help')"
    ]
    result = run_main(*args, "--engine", "dask")
    assert result.exit_code == 2 and len(error_lines(result)) == 1
    # DATA must fit the memory budget (the gather reads from anywhere in it).
    result = run_main(*args, "--memory-limit", "8")
    assert result.exit_code == 2
    assert "must fit in memory" in error_lines(result)[0]
    assert not (tmp_path / "out.npy").exists()


def test_complex_data_with_indices_is_refused_naming_the_op(tmp_path: Path) -> None:
    np.save(tmp_path / "data.npy", np.ones(3, np.complex64))
    np.save(tmp_path / "ids.npy", np.zeros(2, np.int64))
    np.save(tmp_path / "idx.npy", np.zeros(2, np.int64))
    args = ["median", tmp_path / "data.npy", tmp_path / "ids.npy", "--indices"]
    result = run_main(*args, tmp_path / "idx.npy")
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert "complex64 data is not supported by median" in line
    assert ok("nunique", *args[1:], tmp_path / "idx.npy", "-q").stdout.splitlines() == ["0\t1"]
