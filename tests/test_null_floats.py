"""Float columns with nulls read under ``--skipna``: the nulls become NaN through pyarrow's
``fill_null`` (one pass), with the same values and bits as the NumPy copy it replaced."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from segcli.io.columns import ColumnRef, column_to_numpy, nulls_kept

WHERE = ColumnRef("t.parquet", "x")


def with_nulls(dtype: str, rows: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    values = rng.normal(0, 10, rows).astype(dtype)
    values[::7] = np.nan  # NaN values stay NaN beside the nulls
    return values, rng.random(rows) < 0.2


def numpy_reference(values: np.ndarray, null: np.ndarray) -> np.ndarray:
    out = values.copy()
    out[null] = np.nan
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("offset", [0, 13], ids=["whole", "sliced"])
def test_nulls_become_nan_with_the_same_bits(dtype: str, offset: int) -> None:
    values, null = with_nulls(dtype)
    array = pa.array(values, mask=null).slice(offset)
    with nulls_kept():
        got = column_to_numpy(array, WHERE)
    want = numpy_reference(values, null)[offset:]
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()
    got[0] = 1.0  # writable, as the copy was


def test_a_chunked_column_with_nulls() -> None:
    values, null = with_nulls("float64")
    null[400:] = False
    chunked = pa.chunked_array([pa.array(values[:400], mask=null[:400]), pa.array(values[400:])])
    with nulls_kept():
        got = column_to_numpy(chunked, WHERE)
    assert got.tobytes() == numpy_reference(values, null).tobytes()


def test_fill_null_is_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from segcli.io import arrow_kernels

    calls: list[int] = []
    fill_null = arrow_kernels.fill_null

    def spy(array: pa.Array, fill: pa.Scalar) -> pa.Array:
        calls.append(len(array))
        assert isinstance(fill, pa.Scalar)  # a Python float would make pyarrow import pandas
        return fill_null(array, fill)

    monkeypatch.setattr(arrow_kernels, "fill_null", spy)
    values, null = with_nulls("float64", 50)
    with nulls_kept():
        column_to_numpy(pa.array(values, mask=null), WHERE)
    assert calls == [50]


def test_other_types_keep_their_path() -> None:
    ints = pa.array([1, None, 3], pa.int32())
    halves = pa.array(np.array([1, 2, 3], np.float16), mask=np.array([False, True, False]))
    with nulls_kept():
        masked = column_to_numpy(ints, WHERE)
        half = column_to_numpy(halves, WHERE)
    assert np.ma.getmaskarray(masked).tolist() == [False, True, False]
    assert half.dtype == np.float16 and np.isnan(half[1]) and half[2] == 3


def test_reading_nulls_imports_no_pandas() -> None:
    # pa.array imports pandas itself: the column is built from its buffers.
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from segcli.io.columns import ColumnRef, column_to_numpy, nulls_kept\n"
        "valid = pa.py_buffer(np.packbits([1, 0, 1], bitorder='little'))\n"
        "array = pa.Array.from_buffers(pa.float64(), 3, [valid, pa.py_buffer(np.ones(3))])\n"
        "with nulls_kept():\n"
        "    column_to_numpy(array, ColumnRef('f', 'x'))\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


#: Runs segcli, then prints on stderr which of two slow imports it loaded.
LOADED = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print('pandas' in sys.modules, 'numpy.ma' in sys.modules,"
    " file=sys.stderr))\n"
    "sys.argv = ['segcli', *sys.argv[1:]]\n"
    "runpy.run_module('segcli', run_name='__main__')\n"
)


@pytest.mark.parametrize(
    ("chunk", "loaded"),
    # Neither in memory nor streamed: no block is masked.
    [([], "False False"), (["--chunk-rows", "2"], "False False")],
    ids=["memory", "stream"],
)
@pytest.mark.parametrize("suffix", ["csv", "tsv", "parquet"])
def test_a_skipna_by_run_loads_neither_pandas_nor_numpy_ma(
    chunk: list[str], loaded: str, suffix: str, tmp_path: Any
) -> None:
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "k": pa.array(["a", "b", "a", 'b"', "a"]),
            "x": pa.array([1.0, None, 2.0, 4.0, None], pa.float64()),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    out = tmp_path / f"out.{suffix}"
    argv = ["mean", str(tmp_path / "t.parquet"), "--by", "k", "--skipna", "-q", *chunk]
    done = subprocess.run(
        [sys.executable, "-c", LOADED, *argv, "-o", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == loaded
    if suffix == "csv":
        assert out.read_text().splitlines()[1:] == ["a,1.5,3", "b,0.0,1", '"b""",4.0,1']
