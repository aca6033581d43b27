"""A demanding new user's small bad inputs to the newer capabilities (agg, --by, --keys-from,
--keys-out, --skipna, --indices, --weights, check): each run ends with one line on stderr that
names the file or option and the first offending value, a documented exit code, nothing on
stdout, no file written, and no traceback."""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from segcli.errors import EXIT_CODES
from tests.entry import run_main

DOCUMENTED = {code for code, _ in EXIT_CODES}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small inputs of every kind the cases use, in one folder the runs start in."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    here = tmp_path_factory.mktemp("new_user")
    pq.write_table(
        pa.table(
            {
                "s": ["a", "b", "a", "c", None, "b"],
                "dt": [datetime.date(2024, 1, day) for day in range(1, 7)],
                "dec": pa.array(
                    [decimal.Decimal(x) for x in ("1.5", "2.5", "1.5", "3", "2.5", "3")],
                    pa.decimal128(5, 2),
                ),
                "ts": pa.array(
                    [datetime.datetime(2024, 1, 1, hour) for hour in range(6)],
                    pa.timestamp("us", tz="UTC"),
                ),
                "f": [1.0, float("nan"), 1.0, float("inf"), 2.0, None],
                "i": pa.array([1, 2, 1, 2, 3, 3], pa.int64()),
                "v": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                "vn": [1.0, None, 3.0, float("nan"), 5.0, 6.0],
                "b": [True, False] * 3,
                "lst": [[1], [2], [1], [3], [2], [1]],
                "st": [{"a": 1}, {"a": 2}, {"a": 1}, {"a": 1}, {"a": 2}, {"a": 3}],
                "m": pa.array([{"a": 1}] * 6, pa.map_(pa.string(), pa.int64())),
                "count": [1, 2, 3, 4, 5, 6],
            }
        ),
        here / "t.parquet",
    )
    with pa.ipc.new_stream(
        here / "vi.arrows",
        pa.schema([("v", pa.float64()), ("vn", pa.float64()), ("i", pa.int64())]),
    ) as stream:
        stream.write_table(pa.table({"v": [1.0, 2.0], "vn": [1.0, 2.0], "i": [0, 1]}))
    (here / "empty.csv").write_text("")
    (here / "empty.parquet").write_bytes(b"")
    (here / "list_key.jsonl").write_text("".join(f'{{"k": [{i}], "v": 1.0}}\n' for i in range(3)))
    np.save(here / "d.npy", np.arange(6, dtype=np.float32))
    np.save(here / "ids.npy", np.array([0, 0, 1, 1, 2, 2], np.int32))
    np.save(here / "c.npy", np.arange(6).astype(np.complex64))
    np.save(here / "fids.npy", np.array([0, 0, 1, 1, 2, 2.5]))
    np.save(here / "u64ids.npy", np.array([0, 0, 1, 1, 2, 2**64 - 1], np.uint64))
    np.save(here / "sids_dec.npy", np.array([0, 1, 0, 1, 2, 2], np.int32))
    np.save(here / "idx.npy", np.array([0, 1, 2, 5, 4, 3], np.int64))
    np.save(here / "idx_oob.npy", np.array([0, 1, 2, 9, 4, -1], np.int64))
    np.save(here / "fidx.npy", np.array([0, 1, 2, 5, 4, 3], np.float64))
    np.save(here / "w_short.npy", np.ones(3, np.float32))
    np.save(here / "w.npy", np.ones(6, np.float32))
    pq.write_table(
        pa.table({"bag": pa.array([0, 0, 1, 1, 2, 2], pa.int32()), "tok": [0, 1, None, 3, 4, 5]}),
        here / "bags.parquet",
    )
    pcsv.write_csv(pa.table({"other": ["a", "b"]}), here / "keys_other.csv")
    pcsv.write_csv(pa.table({"s": ["a", "a"]}), here / "keys_dup.csv")
    pq.write_table(pa.table({"s": pa.array([1, 2], pa.int32())}), here / "keys_int.parquet")
    pq.write_table(pa.table({"s": pa.array([["a"], ["b"]])}), here / "keys_list.parquet")
    # Keys files as text: each holds one key that does not read as the data's key type.
    (here / "kf_int.csv").write_text("i\n1\nx\n2\n3\n")
    (here / "kf_date.csv").write_text("dt\n2024-01-01\nnotadate\n")
    (here / "kf_decimal.csv").write_text("dec\n1.505\n2.5\n3\n")
    (here / "kf_ts.csv").write_text("ts\n2024-01-01T00:00:00Z\n2024-01-01 01:00:00\n")
    uuids = [bytes([k]) * 16 for k in (1, 2, 1)]
    pq.write_table(
        pa.table({"u": pa.array(uuids, pa.binary(16)), "v": [1.0, 2.0, 3.0]}), here / "bin.parquet"
    )
    (here / "kf_hex.csv").write_text(f"u\n{'02' * 16}\n{'01' * 16}\n{'03' * 16}\n")
    (here / "kf_hex_short.csv").write_text(f"u\n{'01' * 16}\n0102\n")
    # Whole numbers in a key column's first megabyte, then a word: a streamed read keeps int64.
    rows = "".join(f"z,{i % 3},1.0\n" for i in range(200_000))
    (here / "late_key.csv").write_text(f"a,k,v\n{rows}z,x,1.0\n")
    return here


def case(*args: str, code: int, says: tuple[str, ...], id: str) -> object:
    return pytest.param(list(args), code, says, id=id)


# One case a few lines: the command line, then what the run must say.
# fmt: off
CASES = [
    # agg: columns, ops, outputs, fills
    case(
        "agg", "t.parquet", "--data-column", "nope", "--by", "s", "--op", "sum",
        code=2, says=("t.parquet", "no column 'nope'"), id="agg-unknown-data-column",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v,vn", "--ids-column", "i",
        code=2, says=("t.parquet: no column 'v,vn'", "segcli agg --data-column a,b reads several"),
        id="op-data-column-list",
    ),
    case(
        "agg", "keys_other.csv", "--by", "other", "--op", "count",
        code=2, says=("keys_other.csv: has no column besides the key columns (other); name the "
                      "column to reduce with --data-column",),
        id="agg-by-only-key-columns",
    ),
    case(
        "agg", "t.parquet", "--data-column", "v,nope", "--by", "s", "--op", "sum",
        code=2, says=("t.parquet", "no column 'nope'"), id="agg-second-data-column-unknown",
    ),
    case(
        "agg", "t.parquet", "--data-column", "v,v", "--by", "s", "--op", "sum",
        code=2, says=("--data-column", "'v' is given twice"), id="agg-data-column-twice",
    ),
    case(
        "agg", "empty.csv", "--data-column", "v", "--ids-column", "s", "--op", "sum",
        code=3, says=("empty.csv", "Empty CSV"), id="agg-empty-csv",
    ),
    case(
        "agg", "empty.parquet", "--data-column", "v", "--ids-column", "i", "--op", "sum",
        code=3, says=("empty.parquet", "0 bytes"), id="agg-empty-parquet",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,mean,sum",
        code=2, says=("--op", "'sum' is given twice"), id="agg-op-twice-in-list",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum", "--op", "max",
        code=2, says=("--op was given more than once", "--op sum,max"), id="agg-op-repeated",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,,max",
        code=2, says=("--op 'sum,,max'",), id="agg-op-empty-name",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "SUM",
        code=2, says=("unknown op 'SUM'",), id="agg-op-unknown",
    ),
    case(
        "agg", "t.parquet", "--data-column", "b", "--ids-column", "i", "--op", "any,sum",
        code=1, says=("t.parquet:b", "bool data is not supported by sum"), id="agg-bool-sum",
    ),
    case(
        "agg", "c.npy", "ids.npy", "--op", "sum,min",
        code=1, says=("c.npy", "complex64 data is not supported by min"), id="agg-complex-min",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,mean", "-o", "out.npy",
        code=2, says=(".npy holds one array", "2 result columns (sum, mean)"), id="agg-npy-two",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,mean", "-o", "out.txt",
        code=2, says=("out.txt", "cannot tell the output format"), id="agg-unknown-suffix",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,mean", "-o", "-", "--format", "npy",
        code=2, says=(".npy holds one array",), id="agg-npy-on-stdout",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,mean", "--fill", "abc",
        code=2, says=("--fill 'abc' is not a number",), id="agg-fill-not-a-number",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,count", "--fill", "1.5",
        code=2, says=("--fill 1.5", "int64 result of count"), id="agg-fill-fraction-count",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "any,sum", "--fill", "2",
        code=2, says=("--fill 2", "bool result of any"), id="agg-fill-bool",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum", "--fill", "1e400",
        code=2, says=("--fill 1e400", "float32 result of sum"), id="agg-fill-overflow",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "quantile",
        code=2, says=("quantile needs --q",), id="agg-quantile-without-q",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "var", "--ddof", "-1",
        code=2, says=("--ddof -1",), id="agg-negative-ddof",
    ),
    # --by: key columns of every kind, and options that do not go with it
    case(
        "agg", "t.parquet", "--data-column", "v", "--by", "s,nope", "--op", "sum",
        code=2, says=("t.parquet", "no column 'nope'"), id="by-unknown-key",
    ),
    case(
        "agg", "t.parquet", "--data-column", "v", "--by", "lst", "--op", "sum",
        code=1, says=("t.parquet", "key column 'lst' has type list"), id="by-list-key",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "st",
        code=1, says=("t.parquet", "key column 'st' has type struct"), id="by-struct-key",
    ),
    case(
        "check", "t.parquet", "--data-column", "v", "--by", "m",
        code=1, says=("t.parquet", "key column 'm' has type map"), id="check-by-map-key",
    ),
    case(
        "agg", "list_key.jsonl", "--data-column", "v", "--by", "k", "--op", "sum,max",
        code=1, says=("list_key.jsonl", "key column 'k' has type list"), id="by-jsonl-list-key",
    ),
    case(
        "agg", "t.parquet", "--data-column", "v", "--by", "i,i", "--op", "sum",
        code=2, says=("--by", "'i' is given twice"), id="by-key-twice",
    ),
    case(
        "agg", "t.parquet", "--data-column", "v", "--by", "count", "--op", "sum",
        code=2, says=("--by", "key column 'count'"), id="by-key-named-count",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "-n", "3",
        code=2, says=("--by cannot be used with -n",), id="by-with-n",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "--sorted",
        code=2, says=("--by cannot be used with --sorted",), id="by-with-sorted",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--by", "s", "--op", "sum",
        code=2, says=("--by cannot be used with IDS",), id="by-with-ids",
    ),
    case(
        "agg", "t.parquet", "--data-column", "v", "--by", "s", "--op", "sum", "-o", "out.npz",
        code=2, says=("npz output holds no key columns", "--keys-out"), id="by-npz-no-keys-out",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "-o", "o.npy",
        "--keys-out", "k.json",
        code=2, says=("--keys-out k.json",), id="keys-out-json",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "-o", "o.npy",
        "--keys-out", "t.parquet",
        code=2, says=("--keys-out t.parquet is the same file as DATA",), id="keys-out-is-data",
    ),
    case(
        "sum", "d.npy", "ids.npy", "--keys-from", "keys_dup.csv",
        code=2, says=("--keys-from applies to --by only",), id="keys-from-without-by",
    ),
    # --keys-from: missing columns, other types, duplicates
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "--keys-from", "keys_other.csv",
        code=2, says=("--keys-from keys_other.csv", "no column 's'"), id="keys-from-no-column",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "--keys-from", "keys_int.parquet",
        code=1, says=("--keys-from keys_int.parquet", "int32"), id="keys-from-other-type",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "--keys-from", "keys_dup.csv",
        code=1, says=("--keys-from keys_dup.csv", "s='a' twice"), id="keys-from-duplicate",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "--keys-from", "missing.csv",
        code=3, says=("missing.csv", "no such file"), id="keys-from-missing-file",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "s", "--keys-from", "keys_list.parquet",
        code=1, says=("--keys-from keys_list.parquet", "type list"), id="keys-from-list",
    ),
    # fixed: a text keys file's value that does not read as the data's key type is named
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "i", "--keys-from", "kf_int.csv",
        code=1, says=("--keys-from kf_int.csv", "key column 'i'", "'x' at row 1", "int64"),
        id="keys-from-csv-word-among-integers",
    ),
    case(
        "agg", "t.parquet", "--data-column", "v", "--by", "dt", "--keys-from", "kf_date.csv",
        "--op", "sum,max",
        code=1, says=("--keys-from kf_date.csv", "'notadate' at row 1", "date32"),
        id="keys-from-csv-bad-date",
    ),
    case(
        "sum", "t.parquet", "--data-column", "v", "--by", "dec", "--keys-from", "kf_decimal.csv",
        code=1, says=("--keys-from kf_decimal.csv", "'1.505' at row 0", "decimal128(5, 2)"),
        id="keys-from-csv-decimal-too-fine",
    ),
    case(
        "check", "t.parquet", "--data-column", "v", "--by", "ts", "--keys-from", "kf_ts.csv",
        code=1, says=("--keys-from kf_ts.csv", "'2024-01-01 01:00:00' at row 1", "tz=UTC"),
        id="check-keys-from-csv-naive-timestamp",
    ),
    # ids and keys that are not integers, NaN and null, n = 0
    case(
        "agg", "t.parquet", "--data-column", "v", "--ids-column", "f", "--op", "sum",
        # Float ids are found from the metadata, before a null, as a streamed run finds them.
        code=1, says=("t.parquet:f", "segment_ids must be integers, got float64"),
        id="float-ids-with-nan-and-null",
    ),
    case(
        "agg", "d.npy", "fids.npy", "--op", "sum,mean",
        code=1, says=("fids.npy", "segment_ids[5] = 2.5"), id="fractional-ids",
    ),
    case(
        "check", "d.npy", "u64ids.npy",
        code=1, says=("num_segments = 18446744073709551616",), id="check-uint64-max-id",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--op", "sum,argmax", "-n", "0", "-o", "out.npz",
        code=1, says=("ids.npy", "segment_ids[0] = 0 is out of range [0, 0)"), id="n-zero",
    ),
    # --skipna
    case(
        "agg", "t.parquet", "--data-column", "vn", "--by", "s", "--op", "sum,mean",
        code=1, says=("t.parquet", "column 'vn' has 1 null", "row 1"), id="nulls-without-skipna",
    ),
    case(
        "sum", "d.npy", "ids.npy", "--weights", "w.npy", "--skipna",
        code=2, says=("--skipna does not go with --weights",), id="skipna-with-weights",
    ),
    case(
        "check", "t.parquet", "--data-column", "vn", "--by", "s", "--skipna", "--no-nan",
        code=4, says=("t.parquet:vn", "2 missing values", "--no-nan"), id="check-skipna-no-nan",
    ),
    # the sparse family
    case(
        "sum", "d.npy", "sids_dec.npy", "--indices", "idx.npy",
        code=1, says=("sids_dec.npy", "segment_ids[2] = 0 < segment_ids[1] = 1"),
        id="indices-decreasing-ids",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--indices", "idx_oob.npy", "--op", "sum,mean",
        code=1, says=("idx_oob.npy", "indices[3] = 9", "2 indices"), id="agg-indices-oob",
    ),
    case(
        "mean", "d.npy", "ids.npy", "--indices", "fidx.npy",
        code=1, says=("fidx.npy", "indices must be integers"), id="float-indices",
    ),
    case(
        "sum", "d.npy", "bags.parquet", "--ids-column", "bag", "--indices-column", "tok",
        code=1, says=("bags.parquet", "column 'tok' has 1 null", "row 2"), id="null-index",
    ),
    case(
        "sum", "d.npy", "ids.npy", "--weights", "w_short.npy",
        code=1, says=("w_short.npy", "3 weights"), id="weights-too-few",
    ),
    case(
        "max", "d.npy", "ids.npy", "--weights", "w.npy",
        code=2, says=("--weights applies to sum, mean, sqrt_n only, not max",), id="weights-max",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--weights", "w.npy", "--op", "sum",
        code=2, says=("No such option '--weights'",), id="agg-weights",
    ),
    case(
        "agg", "d.npy", "ids.npy", "--indices", "idx.npy", "--op", "median",
        code=2, says=("agg does not take --indices with median",), id="agg-indices-median",
    ),
    # check with each of these
    case(
        "check", "d.npy", "ids.npy", "--indices", "idx_oob.npy",
        code=1, says=("idx_oob.npy", "indices[3] = 9"), id="check-indices-oob",
    ),
    case(
        "check", "d.npy", "ids.npy", "--weights", "w.npy", "--op", "max",
        code=2, says=("--weights applies to sum, mean, sqrt_n only",), id="check-weights-max",
    ),
    case(
        "check", "d.npy", "ids.npy", "--op", "sum,sum",
        code=2, says=("--op", "'sum' is given twice"), id="check-op-twice",
    ),
    case(
        "check", "c.npy", "ids.npy", "--op", "sum,max",
        code=1, says=("c.npy", "complex64 data is not supported by max"), id="check-complex-max",
    ),
    # fixed: a dtype refused by check's default op says that the op was the default
    case(
        "check", "t.parquet", "--data-column", "b", "--by", "s",
        code=1, says=("t.parquet:b: bool data is not supported by sum", "check validates for "
                      "--op sum unless --op names the run's ops"), id="check-bool-default-op",
    ),
    case(
        "check", "t.parquet", "--data-column", "v", "--by", "s", "--keys-from", "keys_other.csv",
        code=2, says=("--keys-from keys_other.csv", "no column 's'"), id="check-keys-from-column",
    ),
    # fixed: binary keys of a text keys file are hex, as the output writes them
    case(
        "sum", "bin.parquet", "--data-column", "v", "--by", "u", "--keys-from", "kf_hex_short.csv",
        code=1, says=("--keys-from kf_hex_short.csv", "'0102' at row 1", "hex text of 16 bytes"),
        id="keys-from-csv-binary-key-too-short",
    ),
    # fixed: a streamed text key column's later value of another type is named, with its row
    case(
        "sum", "late_key.csv", "--data-column", "v", "--by", "k", "--chunk-rows", "1000",
        code=3, says=("late_key.csv: column 'k' holds 'x'", "int64", "row 200000"),
        id="streamed-csv-key-changes-type",
    ),
    case(
        "agg", "late_key.csv", "--data-column", "v", "--by", "a,k", "--op", "sum,mean",
        "--memory-limit", "1MB",
        code=3, says=("late_key.csv: column 'k' holds 'x'", "row 200000"),
        id="streamed-csv-second-key-changes-type",
    ),
    case(
        "check", "late_key.csv", "--data-column", "v", "--by", "k", "--chunk-rows", "1000",
        code=3, says=("late_key.csv: column 'k' holds 'x'", "row 200000"),
        id="check-streamed-csv-key-changes-type",
    ),
    # outputs
    case(
        "agg", "t.parquet", "--data-column", "v", "--ids-column", "i", "--op", "sum",
        "--summary-json", "t.parquet",
        code=2, says=("--summary-json t.parquet is the same file as DATA",), id="summary-is-data",
    ),
]
# fmt: on


@pytest.mark.parametrize(("args", "code", "says"), CASES)
def test_bad_input_is_one_line_and_nothing_written(folder, monkeypatch, args, code, says):
    monkeypatch.chdir(folder)
    before = sorted(p.name for p in folder.iterdir())
    ran = run_main(*args, "-q")
    lines = ran.stderr.splitlines()
    assert (ran.exit_code, len(lines)) == (code, 1), ran.stderr
    assert code in DOCUMENTED
    assert lines[0].startswith("Error: ")
    for part in says:
        assert part in lines[0]
    assert ran.stdout == ""
    assert sorted(p.name for p in folder.iterdir()) == before


def test_binary_keys_from_a_text_keys_file_are_read_as_hex(folder, monkeypatch):
    # The output writes a binary key (a UUID) as hex, and --expect reads it back so: a keys
    # file of the same text names the same keys, in its own order, the empty one included.
    monkeypatch.chdir(folder)
    ran = run_main(
        *["sum", "bin.parquet", "--data-column", "v", "--by", "u", "-q"],
        "--keys-from",
        "kf_hex.csv",
    )
    assert (ran.exit_code, ran.stderr) == (0, "")
    assert ran.stdout.splitlines() == [
        "u\tvalue",
        f"{'02' * 16}\t2.0",
        f"{'01' * 16}\t4.0",
        f"{'03' * 16}\t0.0",
    ]


# Cases run in a process of their own: stdin, and what needs real descriptors.
STDIN_CASES = [
    pytest.param(
        ["agg", "-", "--data-column", "v", "--ids-column", "i", "--op", "sum"],
        b"i,v\n1,2.0\n",
        3,
        ("<stdin>", "CSV/TSV text", "read only from a path"),
        id="stdin-csv",
    ),
    pytest.param(
        ["agg", "-", "--data-column", "v", "--ids-column", "i", "--op", "sum,mean"],
        b'{"i": 1, "v": 2.0}\n',
        3,
        ("<stdin>", "JSON lines are not read from '-'"),
        id="stdin-json-lines",
    ),
    pytest.param(
        ["agg", "-", "ids.npy", "--op", "sum"], b"", 3, ("<stdin>", "no input"), id="stdin-empty"
    ),
    pytest.param(
        ["sum", "-", "--data-column", "v,vn", "--ids-column", "i"],
        "vi.arrows",
        2,
        ("<stdin>: no column 'v,vn'", "segcli agg --data-column a,b reads several"),
        id="stdin-data-column-list",
    ),
    pytest.param(
        ["sum", "t.parquet", "--data-column", "v", "--by", "s", "--keys-from", "-"],
        b"s\na\n",
        2,
        ("--keys-from reads a table file, not stdin",),
        id="stdin-keys-from",
    ),
    # exit 5 silences stdout by its descriptor, which only a real process has
    pytest.param(
        ["mean", "t.parquet", "--data-column", "v", "--ids-column", "i", "-o", "nodir/o.csv"],
        b"",
        5,
        ("-o nodir/o.csv", "does not exist"),
        id="output-folder-missing",
    ),
]


@pytest.mark.parametrize(("args", "stdin", "code", "says"), STDIN_CASES)
def test_bad_stdin_is_one_line_and_nothing_written(folder, args, stdin, code, says):
    if isinstance(stdin, str):
        stdin = (folder / stdin).read_bytes()
    before = sorted(p.name for p in folder.iterdir())
    result = subprocess.run(
        [sys.executable, "-m", "segcli", *args, "-q", "--summary-json", "-"],
        input=stdin,
        capture_output=True,
        cwd=folder,
        timeout=60,
        check=False,
    )
    lines = result.stderr.decode().splitlines()
    assert result.returncode == code, result.stderr
    assert result.stdout == b""
    assert sorted(p.name for p in folder.iterdir()) == before
    # A usage error writes no summary; any other failure's JSON on stderr comes first.
    error = lines[-1]
    assert error.startswith("Error: ") and all(part in error for part in says)
    if code == 2:
        assert len(lines) == 1
    else:
        assert json.loads("\n".join(lines[:-1]))["exit_code"] == code


def test_by_reads_stdin_by_path_as_its_refusal_of_dash_says(folder):
    """The stdin-by case's hint: the same bytes given as /dev/stdin group by key."""
    result = subprocess.run(
        [sys.executable, "-m", "segcli", "sum", "/dev/stdin", "--data-column", "v", "--by", "s"],
        input=(folder / "t.parquet").read_bytes(),
        capture_output=True,
        cwd=folder,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["s\tvalue", "a\t4.0", "b\t8.0", "c\t4.0"]


def test_binary_view_keys_from_a_text_keys_file_are_read_as_hex(tmp_path, monkeypatch):
    # A binary_view key is written as hex like the other binary kinds, so read back as hex.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"k": pa.array([b"\x01\x02", b"\xff", b"\x01\x02"], pa.binary_view())})
    pq.write_table(table.append_column("v", pa.array([1.0, 2.0, 3.0])), tmp_path / "t.parquet")
    (tmp_path / "keys.csv").write_text("k\nff\n0102\nabcd\n")
    monkeypatch.chdir(tmp_path)
    ran = run_main(
        "sum", "t.parquet", "--data-column", "v", "--by", "k", "-q", "--keys-from", "keys.csv"
    )
    assert (ran.exit_code, ran.stderr) == (0, "")
    assert ran.stdout.splitlines() == ["k\tvalue", "ff\t2.0", "0102\t4.0", "abcd\t0.0"]


def test_a_dtype_refused_by_an_op_given_to_check_has_no_default_hint(folder, monkeypatch):
    monkeypatch.chdir(folder)
    ran = run_main("check", "t.parquet", "--data-column", "b", "--by", "s", "--op", "sum")
    assert ran.exit_code == 1
    assert ran.stderr == (
        "Error: t.parquet:b: bool data is not supported by sum (accepted: float16/32/64, "
        "signed and unsigned integers, complex64/128)\n"
    )
    assert (
        run_main("check", "t.parquet", "--data-column", "b", "--by", "s", "--op", "count").exit_code
        == 0
    )
