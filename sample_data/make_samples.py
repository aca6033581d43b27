"""Regenerate the sample files: a day of temperature readings from four sensors.

    python sample_data/make_samples.py

data.npy     float32 (1000,)   temperature in degrees C, one reading per row
ids.npy      int32   (1000,)   sensor id 0..3 for each reading (sensor 3 was offline: empty)
sorted_ids.npy int32 (1000,)   the same readings grouped by hour 0..23, ids non-decreasing
accel.npy    float32 (1000, 3) x, y, z acceleration per reading, for a 2-D reduction
table.parquet  columns: time (int64 seconds), segment (int32 sensor id), value (float32)
flights.parquet  columns: carrier (string), origin (string, a few nulls: origin not recorded),
               arr_delay (float32 minutes): 2,000 flights out of New York, for --by
carriers.csv   the carriers expected to fly (one, HA, flew nothing): a --keys-from list
vocab.npy      float32 (6, 3)  an embedding table: one vector per word of a 6-word vocabulary
bags.parquet   columns: bag (int32, sorted), token (int32 row of vocab.npy), weight (float32):
               four sentences as bags of token ids (bag 2 is empty), for --indices
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent


def main() -> None:
    rng = np.random.default_rng(20261130)
    rows = 1000
    time = np.sort(rng.integers(0, 86_400, rows)).astype(np.int64)
    # Sensors 0-2 report; sensor 3 is listed in the fleet (n = 4) but sent nothing today.
    sensor = rng.choice(np.array([0, 1, 2], dtype=np.int32), rows, p=[0.5, 0.3, 0.2])
    base = np.array([21.0, 18.5, 24.0], dtype=np.float32)[sensor]
    daily = 3.0 * np.sin(2 * np.pi * (time / 86_400 - 0.25))
    value = (base + daily + rng.normal(0, 0.4, rows)).round(2).astype(np.float32)
    hour = (time // 3600).astype(np.int32)
    accel = rng.normal(0, 1, (rows, 3)).round(3).astype(np.float32)
    accel[:, 2] += 9.81

    np.save(HERE / "data.npy", value)
    np.save(HERE / "ids.npy", sensor)
    np.save(HERE / "sorted_ids.npy", hour)
    np.save(HERE / "accel.npy", accel)
    table = pa.table({"time": time, "segment": sensor, "value": value})
    pq.write_table(table, HERE / "table.parquet", row_group_size=250)
    write_flights(rng)
    write_bags()
    write_gaps()


def write_flights(rng: np.random.Generator) -> None:
    rows = 2000
    carriers = np.array(["AA", "B6", "DL", "UA", "WN"])
    carrier = rng.choice(carriers, rows, p=[0.25, 0.2, 0.25, 0.2, 0.1])
    origin = rng.choice(np.array(["EWR", "JFK", "LGA"]), rows).astype(object)
    origin[rng.random(rows) < 0.01] = None
    late = dict(zip(carriers, [4.0, 9.0, 1.5, 6.0, 3.0], strict=True))
    delay = np.array([late[c] for c in carrier]) + rng.exponential(12.0, rows) - 12.0
    table = pa.table(
        {
            "carrier": pa.array(carrier, pa.string()),
            "origin": pa.array(origin, pa.string()),
            "arr_delay": pa.array(delay.round(0).astype(np.float32)),
        }
    )
    pq.write_table(table, HERE / "flights.parquet", row_group_size=500)
    (HERE / "carriers.csv").write_text("carrier\nAA\nB6\nDL\nHA\nUA\nWN\n")


def write_bags() -> None:
    # the, cat, sat, on, mat, dog: small whole vectors, so per-bag means read at a glance.
    vocab = np.array(
        [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1]], dtype=np.float32
    )
    np.save(HERE / "vocab.npy", vocab)
    # "the cat sat", "the dog sat on the mat", (nothing), "cat dog"; "the" weighs little.
    token = np.array([0, 1, 2, 0, 5, 2, 3, 0, 4, 1, 5], dtype=np.int32)
    bag = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 3, 3], dtype=np.int32)
    weight = np.where(token == 0, 0.25, 1.0).astype(np.float32)
    table = pa.table({"bag": bag, "token": token, "weight": weight})
    pq.write_table(table, HERE / "bags.parquet")


def write_gaps() -> None:
    # Three sensors with readings missing (null), and one reading whose sensor is unknown.
    sensor = pa.array([0, 0, 0, 1, 1, 1, 2, 2, None, 2], pa.int32())
    temp = [20.5, None, 21.5, 18.0, None, 19.0, None, None, 30.0, 25.0]
    table = pa.table({"sensor": sensor, "temp": pa.array(temp, pa.float32())})
    pq.write_table(table, HERE / "gaps.parquet")


if __name__ == "__main__":
    main()
