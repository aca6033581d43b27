"""Benchmark of the key encoder behind ``--by`` (segcli.keys) against polars' whole group-by.

One run, side by side, on one Parquet file: N rows (default 30M) with two string keys (about 20
carriers x 3 origins, with nulls) and a float value with nulls. Timed, each the median of
``--rounds`` interleaved rounds:

- polars: ``pl.read_parquet(path).group_by([carrier, origin]).agg(mean)``: read and group-by.
- the encoder alone on the key columns already in memory, as plain strings (``pq.read_table``):
  the whole table as one block, and in 1M-row blocks.
- the same with the key columns read as dictionaries (``read_dictionary=``), the way a run
  can read a Parquet column the writer stored dictionary-encoded: the encoder then maps the
  dictionaries and takes the codes, no string is hashed per row.
- read + encode (dictionary read) from the file, for a like-for-like figure with polars.

Then a high-cardinality key (``--distinct``, default 1M distinct strings over ``--rows-high``
rows) the same way. Usage: ``python benchmarks/keys_bench.py [--rows 30000000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from segcli.keys import KeyEncoder

BLOCK = 1_000_000


def write_flights(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    carriers = pa.array([f"C{i:02d}" for i in range(20)])
    origins = pa.array(["JFK", "LAX", "ORD"])

    def key(pool: pa.Array) -> pa.Array:
        codes = rng.integers(0, len(pool), rows).astype(np.int32)
        nulls = rng.random(rows) < 0.01
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=nulls), pool).cast(pa.string())

    value = rng.normal(10, 5, rows)
    table = pa.table(
        {
            "carrier": key(carriers),
            "origin": key(origins),
            "arr_delay": pa.array(value, mask=rng.random(rows) < 0.05),
        }
    )
    pq.write_table(table, path, row_group_size=BLOCK)


def write_high(path: Path, rows: int, distinct: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    pool = pa.array([f"user-{i:08d}" for i in rng.permutation(distinct)])
    codes = pa.array(rng.integers(0, distinct, rows).astype(np.int32))
    key = pa.DictionaryArray.from_arrays(codes, pool).cast(pa.string())
    pq.write_table(pa.table({"user": key, "v": rng.random(rows)}), path, row_group_size=BLOCK)


def encode_whole(table: pa.Table, by: list[str]) -> int:
    encoder = KeyEncoder(by, null_keys="group")  # polars keeps null groups too
    encoder.encode(table)
    return encoder.finish().keys.num_rows


def encode_blocks(table: pa.Table, by: list[str]) -> int:
    encoder = KeyEncoder(by, null_keys="group")  # polars keeps null groups too
    for start in range(0, table.num_rows, BLOCK):
        encoder.encode(table.slice(start, BLOCK))
    return encoder.finish().keys.num_rows


def read_and_encode(path: Path, by: list[str]) -> int:
    encoder = KeyEncoder(by, null_keys="group")  # polars keeps null groups too
    file = pq.ParquetFile(path, read_dictionary=by)
    for batch in file.iter_batches(batch_size=BLOCK, columns=by):
        encoder.encode(batch)
    return encoder.finish().keys.num_rows


def polars_group_by(path: Path, by: list[str], value: str) -> int:
    import polars as pl

    frame = pl.read_parquet(path).group_by(by).agg(pl.col(value).mean())
    return int(frame.height)


def interleaved(jobs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in jobs}
    answers: dict[str, Any] = {}
    names = list(jobs)
    for round_ in range(rounds):
        # Each round starts one job later: no job always runs right after polars' threads.
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            job = jobs[name]
            start = time.perf_counter()
            answers[name] = job()
            times[name].append(time.perf_counter() - start)
    groups = set(answers.values())
    assert len(groups) == 1, f"the tools disagree on the number of groups: {answers}"
    return {name: statistics.median(values) for name, values in times.items()}


def table_md(title: str, rows: int, results: dict[str, float], reference: str) -> str:
    lines = [
        f"### {title} ({rows:,} rows)",
        "",
        f"| what | median s | Mrows/s | time / {reference} |",
        "|---|---:|---:|---:|",
    ]
    for name, seconds in results.items():
        ratio = seconds / results[reference]
        lines.append(f"| {name} | {seconds:.3f} | {rows / seconds / 1e6:.0f} | {ratio:.2f} |")
    return "\n".join(lines)


POLARS = "polars read + group_by mean"


def bench_low_cardinality(folder: str, rows: int, rounds: int) -> str:
    by = ["carrier", "origin"]
    flights = Path(folder, "flights.parquet")
    write_flights(flights, rows)
    plain = pq.read_table(flights, columns=by)
    coded = pq.read_table(flights, columns=by, read_dictionary=by)
    results = interleaved(
        {
            POLARS: lambda: polars_group_by(flights, by, "arr_delay"),
            "encoder, strings, one block": lambda: encode_whole(plain, by),
            "encoder, strings, 1M blocks": lambda: encode_blocks(plain, by),
            "encoder, dictionaries, one block": lambda: encode_whole(coded, by),
            "encoder, dictionaries, 1M blocks": lambda: encode_blocks(coded, by),
            "read (dictionaries) + encode, 1M blocks": lambda: read_and_encode(flights, by),
        },
        rounds,
    )
    return table_md("Two string keys, 20 x 3 distinct", rows, results, POLARS)


def bench_high_cardinality(folder: str, rows: int, distinct: int, rounds: int) -> str:
    users = Path(folder, "users.parquet")
    write_high(users, rows, distinct)
    plain = pq.read_table(users, columns=["user"])
    results = interleaved(
        {
            POLARS: lambda: polars_group_by(users, ["user"], "v"),
            "encoder, strings, one block": lambda: encode_whole(plain, ["user"]),
            "encoder, strings, 1M blocks": lambda: encode_blocks(plain, ["user"]),
            "read (dictionaries) + encode, 1M blocks": lambda: read_and_encode(users, ["user"]),
        },
        rounds,
    )
    return table_md(f"One string key, {distinct:,} distinct", rows, results, POLARS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000_000)
    parser.add_argument("--rows-high", type=int, default=5_000_000)
    parser.add_argument("--distinct", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        print(bench_low_cardinality(folder, args.rows, args.rounds))
        print()
        print(bench_high_cardinality(folder, args.rows_high, args.distinct, args.rounds))


if __name__ == "__main__":
    main()
