"""Text, CSV and TSV output: NumPy's exact text at Arrow's speed, and ``--float-format``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from segcli.io import format_text_lines, write_result
from segcli.io.text import ARROW_FROM_ROWS, text_blocks

RNG = np.random.default_rng(12)


def run(*args: Any) -> Any:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def numpy_lines(result: np.ndarray, sep: str, counts: np.ndarray | None = None) -> bytes:
    """The oracle: every cell as NumPy's str of its scalar, joined (the writer's old way)."""
    flat = result.reshape(len(result), -1)
    columns = [
        np.arange(len(result)).astype(str),
        *(flat[:, j].astype(str) for j in range(flat.shape[1])),
    ]
    if counts is not None:
        columns.append(counts.astype(str))
    return "".join(
        sep.join(row) + "\n" for row in zip(*(c.tolist() for c in columns), strict=True)
    ).encode()


def random_bits(dtype: type, size: int) -> np.ndarray:
    unsigned = np.dtype(f"u{np.dtype(dtype).itemsize}")
    return RNG.integers(0, np.iinfo(unsigned).max, size, dtype=unsigned, endpoint=True).view(dtype)


EDGES = [
    0.0,
    -0.0,
    1.0,
    1e-4,
    9.99e-5,
    1e-5,
    999999.94,
    1e6,
    1e15,
    1e16,
    1e20,
    1e-45,
    np.nan,
    np.inf,
    -np.inf,
    123456789.0,
    16777217.0,
    0.1,
    -2.5,
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_floats_print_as_numpy_does(dtype: type) -> None:
    values = np.concatenate(
        [
            random_bits(dtype, 100_000),  # every magnitude, NaN payloads, subnormals
            (RNG.standard_normal(50_000) * 10.0 ** RNG.integers(-9, 20, 50_000)).astype(dtype),
            np.round(RNG.standard_normal(50_000) * 1e5).astype(dtype),  # whole numbers
            np.array(EDGES * 300, dtype),
            np.array([np.finfo(dtype).max, np.finfo(dtype).tiny, -np.finfo(dtype).max], dtype),
        ]
    )
    assert b"".join(text_blocks(values, "\t")) == numpy_lines(values, "\t")


@pytest.mark.parametrize(
    "values",
    [
        np.arange(-5000, 5000).astype(np.int8),
        np.array([2**64 - 1, 0, 7] * 2000, np.uint64),
        np.array([np.iinfo(np.int64).min, -1, 3] * 2000, np.int64),
        RNG.standard_normal(6000).astype(np.float16),
        (RNG.standard_normal(6000) + 1j * RNG.standard_normal(6000)).astype(np.complex64),
        RNG.standard_normal(6000) > 0,
        RNG.standard_normal((6000, 2, 3)).astype(np.float32),
        np.zeros((6000, 0), np.float32),
        np.arange(6000).astype(">f4") / 7,
        np.arange(6000).astype(">i8"),
    ],
    ids=[
        "int8",
        "uint64",
        "int64",
        "float16",
        "complex64",
        "bool",
        "inner",
        "empty-inner",
        "big-endian-float",
        "big-endian-int",
    ],
)
def test_other_dtypes_and_shapes_print_as_before(values: np.ndarray) -> None:
    assert len(values) > ARROW_FROM_ROWS  # the fast path, not the small-result one
    assert b"".join(text_blocks(values, ",")) == numpy_lines(values, ",")


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_csv_file_bytes_with_counts(tmp_path: Path, fmt: str) -> None:
    result = RNG.standard_normal(70_000).astype(np.float32)
    counts = RNG.integers(0, 9, 70_000)
    path = tmp_path / f"r.{fmt}"
    write_result(result, str(path), counts=counts)
    sep = "," if fmt == "csv" else "\t"
    header = sep.join(["segment", "value", "count"]) + "\n"
    assert path.read_bytes() == header.encode() + numpy_lines(result, sep, counts)


def test_small_results_print_the_same() -> None:
    result = np.array([1.0, 1e6, np.nan, 1e-5], np.float32)
    assert list(format_text_lines(result)) == ["0\t1.0", "1\t1e+06", "2\tnan", "3\t1e-05"]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    data, ids = tmp_path / "data.npy", tmp_path / "ids.npy"
    np.save(data, np.array([1, 2.5, 3, 1e-7, -np.inf], np.float32))
    np.save(ids, np.array([0, 0, 1, 2, 3]))
    return data, ids


def test_float_format_on_stdout(pair: tuple[Path, Path]) -> None:
    result = run("sum", *pair, "-q", "--float-format", "%.3f")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "0\t3.500\n1\t3.000\n2\t0.000\n3\t-inf\n"


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_float_format_in_csv(pair: tuple[Path, Path], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"o.{fmt}"
    result = run("sum", *pair, "-q", "--float-format", "%.2e", "-o", out)
    assert result.exit_code == 0, result.stderr
    sep = "," if fmt == "csv" else "\t"
    assert out.read_text().splitlines()[1:3] == [f"0{sep}3.50e+00{sep}2", f"1{sep}3.00e+00{sep}1"]


def test_float_format_many_rows_and_complex() -> None:
    result = np.arange(5000, dtype=np.float64) / 3
    lines = list(format_text_lines(result, float_format="%.2f"))
    assert lines[:2] == ["0\t0.00", "1\t0.33"] and len(lines) == 5000
    complex_lines = list(format_text_lines(np.array([1.5 - 2j]), float_format="%.1f"))
    assert complex_lines == ["0\t(1.5-2.0j)"]


def test_a_complex_value_under_a_field_width_reads_back(tmp_path: Path) -> None:
    """A width pads each real number; a complex value's parts are written without it, as
    "(1.00-1.00j)": "(   1.00+   -1.00j)" would read back as no number."""
    data, ids, out = tmp_path / "c.npy", tmp_path / "i.npy", tmp_path / "o.csv"
    np.save(data, np.array([1 - 1j, 2.5 + 3j, -1j]))
    np.save(ids, np.array([0, 1, 2]))
    assert run("sum", data, ids, "-q", "--float-format", "%8.2f", "-o", out).exit_code == 0
    assert out.read_text().splitlines()[1:] == [
        "0,(1.00-1.00j),1",
        "1,(2.50+3.00j),1",
        "2,(0.00-1.00j),1",
    ]
    result = run("sum", data, ids, "-q", "--expect", out)
    assert result.exit_code == 0, result.stderr


def test_float_format_leaves_integers_alone(tmp_path: Path) -> None:
    data, ids = tmp_path / "d.npy", tmp_path / "i.npy"
    np.save(data, np.array([1, 2], np.int32))
    np.save(ids, np.array([0, 0]))
    result = run("sum", data, ids, "-q", "--float-format", "%.2f")
    assert result.stdout == "0\t3\n"


@pytest.mark.parametrize("suffix", ["npy", "parquet", "json"])
def test_float_format_refused_for_binary_output(
    pair: tuple[Path, Path], tmp_path: Path, suffix: str
) -> None:
    out = tmp_path / f"o.{suffix}"
    result = run("sum", *pair, "-q", "--float-format", "%.3f", "-o", out)
    assert result.exit_code == 2
    assert f"--float-format applies to text, csv and tsv output, not {suffix}" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("bad", ["%d", "%s", "abc", "%.3f %.3f", "%", "%.3f%"])
def test_bad_float_format_is_a_usage_error(pair: tuple[Path, Path], bad: str) -> None:
    result = run("sum", *pair, "-q", "--float-format", bad)
    assert result.exit_code == 2
    assert "need one printf float conversion" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("bad", ["%.2f,x", "%.2f\tx", '"%.2f"', "%.2f\n", "%.2f\r"])
@pytest.mark.parametrize("command", [["sum"], ["agg", "--op", "sum,mean"]])
def test_a_float_format_that_would_split_cells_is_a_usage_error(
    pair: tuple[Path, Path], tmp_path: Path, bad: str, command: list[str]
) -> None:
    """Literal text around the conversion is kept, but not a separator, a quote or a line
    break: the CSV would not read back (not even as the run's own golden file)."""
    out = tmp_path / "o.csv"
    result = run(*command, *pair, "-q", "--float-format", bad, "-o", out)
    assert result.exit_code == 2
    assert "which would split the cells of text output" in result.stderr
    assert not out.exists()
    kept = run(*command, *pair, "-q", "--float-format", "%.2f kg", "-o", out)
    assert kept.exit_code == 0, kept.stderr
    assert out.read_text().splitlines()[1].split(",")[1].endswith(" kg")


NARROW_VALUES = [1.1, 0.1, 1e-3, 3.3, np.nan, -np.inf]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.complex64])
@pytest.mark.parametrize(
    ("command", "fmt"),
    [
        (["sum"], "csv"),
        (["sum"], "tsv"),
        (["agg", "--op", "sum,first"], "csv"),
        (["agg", "--op", "sum,first"], "json"),
    ],
)
def test_narrow_floats_read_back_exactly_from_text(
    tmp_path: Path, dtype: type, command: list[str], fmt: str
) -> None:
    """The default text is the shortest that reads back as the result's value: ``1.1`` is
    float16's 1.0996, which a golden read as float64 missed by 3.6e-4 (past the default
    rtol), and float32's 1.1 missed with --rtol 0 --atol 0."""
    data, ids, golden = tmp_path / "d.npy", tmp_path / "i.npy", tmp_path / f"golden.{fmt}"
    values = np.array(NARROW_VALUES, dtype)
    if dtype is np.complex64:
        values.imag = NARROW_VALUES[::-1]
    np.save(data, values)
    np.save(ids, np.arange(len(values)))
    assert run(*command, data, ids, "-q", "-o", golden).exit_code == 0
    for tolerances in ([], ["--rtol", "0", "--atol", "0"]):
        result = run(*command, data, ids, "-q", "--expect", golden, *tolerances)
        assert result.exit_code == 0, result.stderr


def test_agg_json_of_complex_inner_dimensions(tmp_path: Path) -> None:
    """A complex result with inner dimensions is nested as its shape, each value an [re, im]
    pair (was an internal error: the pairs were taken for one more axis)."""
    data, ids, golden = tmp_path / "d.npy", tmp_path / "i.npy", tmp_path / "golden.json"
    values = np.zeros((2, 2), np.complex64)
    values.real = [[1, 2], [3, 4]]
    values.imag = [[np.inf, -1], [-np.inf, np.nan]]
    np.save(data, values)
    np.save(ids, np.arange(2))
    written = run("agg", data, ids, "--op", "sum,first", "-q", "-o", golden)
    assert written.exit_code == 0, written.stderr
    assert '"sum": [[[1.0, "inf"], [2.0, -1.0]], [[3.0, "-inf"], [4.0, "nan"]]]' in (
        golden.read_text()
    )
    result = run("agg", data, ids, "--op", "sum,first", "-q", "--expect", golden)
    assert result.exit_code == 0, result.stderr


def test_agg_json_golden_keeps_an_infinite_imaginary_part(tmp_path: Path) -> None:
    """Read as ``re + 1j * im``, the pair [1.5, "-inf"] was nan-infj: 1j * -inf is NaN in
    the real part."""
    data, ids, golden = tmp_path / "d.npy", tmp_path / "i.npy", tmp_path / "golden.json"
    np.save(data, np.array([complex(1.5, -np.inf), complex(np.inf, 2)], np.complex128))
    np.save(ids, np.arange(2))
    assert run("agg", data, ids, "--op", "sum,first", "-q", "-o", golden).exit_code == 0
    result = run("agg", data, ids, "--op", "sum,first", "-q", "--expect", golden)
    assert result.exit_code == 0, result.stderr


@pytest.mark.parametrize("rows", [4, ARROW_FROM_ROWS + 1])
def test_float_format_zero_flag_pads_non_finite_values_with_spaces(rows: int) -> None:
    """As C's printf (and the shell's): Python's ``%`` wrote ``0000000nan``, which no reader
    takes for a number, not even --expect."""
    values = np.resize(np.array([np.nan, -np.inf, 2.5, np.inf]), rows)
    lines = list(format_text_lines(values, float_format="%%%+010.3f"))
    assert lines[:4] == ["0\t%      +nan", "1\t%      -inf", "2\t%+00002.500", "3\t%      +inf"]


def test_zero_padded_float_format_reads_back(pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    assert run("sum", *pair, "-q", "--float-format", "%010.3f", "-o", out).exit_code == 0
    assert out.read_text().splitlines()[4] == "3,      -inf,1"
    result = run("sum", *pair, "-q", "--expect", out, "--atol", "1e-3")
    assert result.exit_code == 0, result.stderr
