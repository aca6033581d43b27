"""--fill is read exactly in the result dtype; a value the dtype cannot hold is a usage error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import segcli
from segcli.cli import cli
from segcli.errors import UsageError


def run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def inputs(tmp_path: Path, dtype: str) -> tuple[Path, Path]:
    data, ids = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data, np.array([1, 2], dtype))
    np.save(ids, np.array([0, 0], np.int32))
    return data, ids


@pytest.mark.parametrize(
    ("dtype", "op", "fill", "want"),
    [
        ("int64", "sum", "9007199254740993", 9007199254740993),
        ("int64", "max", "-9223372036854775808", -(2**63)),
        ("uint64", "min", "18446744073709551615", 2**64 - 1),
        ("uint8", "sum", "255", 255),
        ("int32", "sum", "1e3", 1000),
        ("int16", "prod", "-7.0", -7),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_integer_fill_is_written_exactly(tmp_path, dtype, op, fill, want, stream):
    out = tmp_path / "out.npy"
    chunking = ["--chunk-rows", "1"] if stream else []
    result = run(
        op, *inputs(tmp_path, dtype), "-n", "3", "--fill", fill, "-q", "-o", out, *chunking
    )
    assert result.exit_code == 0, result.stderr
    got = np.load(out)
    assert got.dtype == np.dtype(dtype)
    assert int(got[1]) == want and int(got[2]) == want


@pytest.mark.parametrize(
    ("dtype", "op", "fill", "shown"),
    [
        ("uint8", "sum", "300", "uint8"),
        ("int32", "sum", "1.5", "int32"),
        ("uint16", "max", "-1", "uint16"),
        ("int64", "sum", "9223372036854775808", "int64"),
        ("int8", "sum", "nan", "int8"),
        ("int64", "count", "inf", "int64"),
        ("float32", "sum", "1e300", "float32"),
        ("float64", "sum", "1e999", "float64"),
        ("int8", "mean", "1e39", "float32"),
        # Too small: not a value of the result dtype's, but 0 (or -0.0).
        ("float32", "sum", "1e-50", "float32"),
        ("float32", "min", "-1e-50", "float32"),
        ("float16", "max", "1e-8", "float16"),
        ("float64", "sum", "1e-400", "float64"),
        ("complex64", "sum", "1e-50+1j", "complex64"),
    ],
)
def test_fill_the_result_dtype_cannot_hold_is_a_usage_error(tmp_path, dtype, op, fill, shown):
    out = tmp_path / "out.npy"
    result = run(op, *inputs(tmp_path, dtype), "-n", "3", "--fill", fill, "-o", out)
    assert result.exit_code == 2
    assert result.stderr.count("Error:") == 1
    assert f"--fill {fill} cannot be stored in the {shown} result of {op}" in result.stderr
    assert not out.exists()


def test_fill_that_is_not_a_number(tmp_path):
    result = run("sum", *inputs(tmp_path, "int32"), "-n", "3", "--fill", "lots")
    assert result.exit_code == 2
    assert result.stderr.endswith("Error: --fill 'lots' is not a number\n")


@pytest.mark.parametrize(
    ("dtype", "fill"),
    [("float16", "nan"), ("float32", "-inf"), ("float64", "0.1"), ("float32", "0.1")],
)
def test_float_fills_keep_their_bytes(dtype, fill):
    got = segcli.segment_reduce(np.array([1], dtype), np.array([0]), 2, "sum", fill=fill)
    want = np.dtype(dtype).type(float(fill))
    assert got[1].tobytes() == want.tobytes()


# Each text is just past a tie of its dtype that it rounds to in float64: read through float64,
# ties to even would give the value below (1.0, 1.0 and 65504.0); read once, the one above.
ONE_ROUNDING = [
    ("float32", "1.0000000596046447762", np.float32(1 + 2**-23)),
    ("float16", "1.00048828125000000001", np.float16(1 + 2**-10)),
    ("float16", "-1.00048828125000000001", np.float16(-1 - 2**-10)),
]


@pytest.mark.parametrize(("dtype", "fill", "want"), ONE_ROUNDING)
@pytest.mark.parametrize("engine", ["numpy", "numba"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("op", ["sum", "std", "first"])
def test_float_fill_is_rounded_once_in_the_result_dtype(
    tmp_path, dtype, fill, want, engine, stream, op
):
    out = tmp_path / "out.npy"
    chunking = ["--chunk-rows", "1"] if stream else []
    args = [op, *inputs(tmp_path, dtype), "-n", "3", "--fill", fill, "--engine", engine]
    result = run(*args, "-q", "-o", out, *chunking)
    assert result.exit_code == 0, result.stderr
    got = np.load(out)
    assert got.dtype == want.dtype
    assert got[1:].tobytes() == np.array([want, want]).tobytes()


def test_a_float_fill_below_the_overflow_tie_is_the_largest_value():
    # float64 reads it as 65520.0, the tie with inf, which float16 rounds to inf (an error).
    got = segcli.segment_reduce(
        np.array([1], np.float16), np.array([0]), 2, "sum", fill="65519.99999999999999999"
    )
    assert got[1] == np.finfo(np.float16).max
    with pytest.raises(UsageError, match="cannot be stored in the float16"):
        segcli.segment_reduce(np.array([1], np.float16), np.array([0]), 2, "sum", fill="65520")


def test_complex_fill_accepts_complex_literals():
    got = segcli.segment_reduce(np.array([1], np.complex64), np.array([0]), 2, "sum", fill="1+2j")
    assert got[1] == np.complex64(1 + 2j)


def test_library_fill_accepts_python_numbers():
    got = segcli.segment_reduce(np.array([1], np.uint64), np.array([0]), 2, "sum", fill=2**64 - 1)
    assert got[1] == np.uint64(2**64 - 1)
    with pytest.raises(UsageError, match="cannot be stored in the uint64"):
        segcli.segment_reduce(np.array([1], np.uint64), np.array([0]), 2, "sum", fill=-1)


@pytest.mark.parametrize("dtype", ["int32", "float32", "complex64"])
def test_library_bool_fill_of_a_number_result_is_refused_alike(dtype):
    # A bool fills bool results (any, all) only, whatever the number dtype of the result.
    for fill in (True, np.False_):
        with pytest.raises(UsageError, match=f"fill {fill!r} is not a number"):
            segcli.segment_reduce(np.array([1], dtype), np.array([0]), 2, "sum", fill=fill)
    got = segcli.segment_reduce(np.array([1], dtype), np.array([0]), 2, "any", fill=np.False_)
    assert got.tolist() == [True, False]
