"""Tests for segcli.io: reading inputs, writing results, describe, text output."""

from __future__ import annotations

import contextlib
import io
import math
import os
import pty
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.lib.format as npformat
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from segcli.errors import ExpectationError, InvalidInputError, ReadError, UsageError, WriteError
from segcli.io import (
    atomic_output,
    describe,
    format_text_lines,
    read_inputs,
    read_result_table,
    write_result,
)

OUTPUT_FORMATS = ["npy", "npz", "parquet", "arrow", "csv", "tsv", "json"]
DTYPES = [np.float32, np.float16, np.int8, np.uint64, np.complex64]
SHAPES = [(5,), (5, 3), (5, 2, 3)]


def sample_result(shape: tuple[int, ...], dtype: Any) -> np.ndarray[Any, Any]:
    """Values that stress each dtype: extremes, non-finite floats, negative zero."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    if dtype.kind == "f":
        info = np.finfo(dtype)
        special = [np.nan, np.inf, -np.inf, info.max, info.tiny, -0.0, 0.1, -1.5]
        values = np.resize(np.array(special), size).astype(dtype)
    elif dtype.kind == "c":
        real = np.resize(np.array([0.1, np.nan, -np.inf, 3.4028235e38, 2.5]), size)
        imag = np.resize(np.array([-2.0, np.inf, 0.0, 1e-8]), size)
        values = np.empty(size, dtype)
        values.real, values.imag = real, imag  # real + 1j * imag would turn inf * 0j into nan
    else:
        info = np.iinfo(dtype)
        values = np.resize(np.array([info.min, info.max, 0, 1, 7], dtype=dtype), size)
    return values.reshape(shape)


def write_table(path: Path, table: pa.Table) -> None:
    if path.suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)


def arrow_stream_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def npy_bytes(array: np.ndarray[Any, Any]) -> bytes:
    sink = io.BytesIO()
    np.save(sink, array)
    return sink.getvalue()


class FakeTerminal(io.BytesIO):
    def isatty(self) -> bool:
        return True


# ---------------------------------------------------------------------------------------------
# write_result / read_result_table round trips


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{len(s)}d")
def test_every_format_round_trips(tmp_path: Path, fmt: str, dtype: Any, shape: Any) -> None:
    result = sample_result(shape, dtype)
    path = tmp_path / f"result.{fmt}"
    assert write_result(result, str(path)) == fmt
    text_format = fmt in ("csv", "tsv")
    back = read_result_table(str(path), dtype=result.dtype if text_format else None)
    assert back.dtype == result.dtype
    np.testing.assert_array_equal(back, result)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_text_tables_round_trip_values_without_a_dtype(tmp_path: Path, fmt: str) -> None:
    cases = {
        np.float32: np.float64,
        np.int8: np.int64,
        np.uint64: np.uint64,
        np.complex64: np.complex128,
    }
    for dtype, read_as in cases.items():
        result = sample_result((4, 2), dtype)
        path = tmp_path / f"r.{fmt}"
        write_result(result, str(path))
        back = read_result_table(str(path))
        assert back.dtype == read_as
        # The text is the shortest for the original dtype: exact once cast back to it.
        np.testing.assert_array_equal(back.astype(result.dtype), result)


@pytest.mark.parametrize("fmt", OUTPUT_FORMATS)
def test_empty_results_round_trip(tmp_path: Path, fmt: str) -> None:
    for result in (np.zeros(0, np.float32), np.zeros((0, 3), np.float32)):
        path = tmp_path / f"empty.{fmt}"
        write_result(result, str(path))
        back = read_result_table(str(path), dtype=np.float32)
        assert back.shape == result.shape


@pytest.mark.parametrize("fmt", ["npy", "npz", "parquet", "arrow", "json"])
def test_zero_width_inner_shape_round_trips(tmp_path: Path, fmt: str) -> None:
    result = np.zeros((3, 0, 2), np.float32)
    path = tmp_path / f"r.{fmt}"
    write_result(result, str(path))
    assert read_result_table(str(path)).shape == (3, 0, 2)


def test_table_layout(tmp_path: Path) -> None:
    result = np.arange(12, dtype=np.float16).reshape(2, 2, 3)
    path = tmp_path / "r.parquet"
    write_result(result, str(path), counts=np.array([4, 0]))
    table = pq.read_table(path)
    assert table.column_names == ["segment", "value", "count"]
    assert table.schema.field("segment").type == pa.int64()
    assert table.schema.field("value").type == pa.list_(pa.float16(), 6)
    assert table.schema.metadata[b"segcli.inner_shape"] == b"[2, 3]"
    assert table.column("count").to_pylist() == [4, 0]
    # The N-D value column reads back whole through the ordinary input path, too.
    data, _ids = read_inputs(str(path), None, data_column="value", ids_column="segment")
    np.testing.assert_array_equal(data.array, result)
    assert data.label == f"{path}:value"


def test_one_dimensional_table_has_plain_value_column(tmp_path: Path) -> None:
    path = tmp_path / "r.arrow"
    write_result(np.array([1.5, 2.5], np.float32), str(path))
    table = ipc.open_file(str(path)).read_all()
    assert table.schema.field("value").type == pa.float32()
    assert table.schema.metadata is None


def test_csv_layout(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    result = np.array([[1.5, np.nan], [3.4028235e38, -np.inf]], np.float32)
    write_result(result, str(path), counts=np.array([2, 1]))
    expected = "segment,value_0,value_1,count\n0,1.5,nan,2\n1,3.4028235e+38,-inf,1\n"
    assert path.read_text() == expected
    write_result(np.array([1 + 2j], np.complex64), str(path))
    assert path.read_text() == "segment,value\n0,(1+2j)\n"
    write_result(np.zeros((1, 2, 2), np.int8), str(path))
    assert path.read_text().splitlines()[0] == "segment,value_0_0,value_0_1,value_1_0,value_1_1"


def test_json_layout(tmp_path: Path) -> None:
    import json

    path = tmp_path / "r.json"
    write_result(np.array([0.1, np.nan, np.inf, -np.inf], np.float32), str(path))
    doc = json.loads(path.read_text())
    assert doc == {"shape": [4], "dtype": "float32", "values": [0.1, "nan", "inf", "-inf"]}
    write_result(np.array([[1 - 2j]], np.complex64), str(path), counts=np.array([3]))
    doc = json.loads(path.read_text())
    assert doc == {"shape": [1, 1], "dtype": "complex64", "values": [[[1.0, -2.0]]], "counts": [3]}


def test_npz_keys(tmp_path: Path) -> None:
    path = tmp_path / "r.npz"
    write_result(np.arange(3.0), str(path), counts=np.array([1, 2, 3]))
    with np.load(path) as archive:
        assert sorted(archive.files) == ["counts", "result"]
        np.testing.assert_array_equal(archive["counts"], [1, 2, 3])


def test_explicit_format_overrides_suffix(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    assert write_result(np.arange(3), str(path), "pq") == "parquet"
    assert path.read_bytes()[:4] == b"PAR1"
    np.testing.assert_array_equal(read_result_table(str(path)), np.arange(3))


def test_unknown_output_format(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"unknown output format 'xlsx' \(supported: npy"):
        write_result(np.arange(3), str(tmp_path / "r.npy"), "xlsx")
    with pytest.raises(UsageError, match="cannot tell the output format"):
        write_result(np.arange(3), str(tmp_path / "r.bin"))


def test_segment_column_orders_rows(tmp_path: Path) -> None:
    path = tmp_path / "golden.csv"
    path.write_text("segment,value\n1,20\n0,10\n")
    np.testing.assert_array_equal(read_result_table(str(path)), [10, 20])
    path.write_text("segment,value\n1,20\n5,10\n")
    with pytest.raises(ExpectationError, match=r"golden.csv: row 1 has segment 5, not one of"):
        read_result_table(str(path))


def test_golden_csv_with_bad_number(tmp_path: Path) -> None:
    path = tmp_path / "golden.csv"
    path.write_text("segment,value\n0,1.5\n1,abc\n")
    with pytest.raises(ReadError, match=r"golden.csv: column 'value' row 1: 'abc' is not a number"):
        read_result_table(str(path))


# ---------------------------------------------------------------------------------------------
# stdout


@pytest.mark.parametrize("fmt", ["npy", "npz", "parquet", "arrow"])
def test_binary_refused_on_a_terminal(fmt: str) -> None:
    terminal = FakeTerminal()
    message = f"refusing to write binary {fmt} to a terminal; redirect stdout or use -o FILE"
    with pytest.raises(WriteError, match=f"^{message}$"):
        write_result(np.arange(3), "-", fmt, stdout=terminal)
    assert terminal.getvalue() == b""


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_binary_refused_on_a_terminal_given_by_path(fmt: str, tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    try:
        name = os.ttyname(terminal)
        message = (
            f"{name}: refusing to write binary {fmt} to a terminal; "
            "write a file or a pipe, or a text format (csv, tsv, json)"
        )
        with pytest.raises(WriteError, match=f"^-o {re.escape(message)}$"):
            write_result(np.arange(3), name, fmt)
        link = tmp_path / f"tty.{fmt}"
        link.symlink_to(name)
        with pytest.raises(WriteError, match="refusing to write binary"):
            write_result(np.arange(3), str(link))
        assert write_result(np.arange(2), name, "csv") == "csv"
        os.close(terminal)
        assert _read_until_closed(controller) == b"segment,value\r\n0,0\r\n1,1\r\n"
    finally:
        with contextlib.suppress(OSError):
            os.close(terminal)
        os.close(controller)


def _read_until_closed(controller: int) -> bytes:
    received = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: no terminal end is left open
            return received
        if not chunk:
            return received
        received += chunk


def test_binary_to_a_terminal_is_refused_before_stdin_is_read(tmp_path: Path) -> None:
    from segcli.pipeline import RunRequest, Streams, run

    class Untouchable(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            raise AssertionError("stdin was read")

    np.save(tmp_path / "ids.npy", np.array([0, 1]))
    request = RunRequest(op="sum", data="-", ids=str(tmp_path / "ids.npy"), output="-")
    terminal = FakeTerminal()
    streams = Streams(stdout_binary=terminal, stdin=Untouchable())
    with pytest.raises(WriteError, match=r"^refusing to write binary npy to a terminal"):
        run(request, streams)
    assert terminal.getvalue() == b""


def test_stdout_defaults_to_npy_and_text_is_allowed_on_a_terminal() -> None:
    with pytest.raises(WriteError):
        write_result(np.arange(3), "-", stdout=FakeTerminal())
    terminal = FakeTerminal()
    assert write_result(np.arange(2), "-", "tsv", stdout=terminal) == "tsv"
    assert terminal.getvalue() == b"segment\tvalue\n0\t0\n1\t1\n"


def test_stdout_npy_reads_back_through_stdin(tmp_path: Path) -> None:
    out = io.BytesIO()
    assert write_result(np.arange(4, dtype=np.float32), "-", stdout=out) == "npy"
    np.save(tmp_path / "ids.npy", np.array([0, 0, 1, 1]))
    data, _ids = read_inputs("-", str(tmp_path / "ids.npy"), stdin=io.BytesIO(out.getvalue()))
    np.testing.assert_array_equal(data.array, np.arange(4, dtype=np.float32))
    assert (data.label, data.path, data.fmt) == ("<stdin>", "-", "npy")


def test_stdout_arrow_is_a_stream() -> None:
    out = io.BytesIO()
    write_result(np.arange(3, dtype=np.int8), "-", "arrow", stdout=out)
    assert out.getvalue()[:4] == b"\xff\xff\xff\xff"
    table = ipc.open_stream(out.getvalue()).read_all()
    assert table.column("value").to_pylist() == [0, 1, 2]


def test_stdout_npz_and_parquet() -> None:
    out = io.BytesIO()
    write_result(np.arange(3), "-", "npz", stdout=out, counts=np.ones(3, np.int64))
    with np.load(io.BytesIO(out.getvalue())) as archive:
        assert sorted(archive.files) == ["counts", "result"]
    out = io.BytesIO()
    write_result(np.arange(3), "-", "parquet", stdout=out)
    assert pq.read_table(pa.BufferReader(out.getvalue())).num_rows == 3


# ---------------------------------------------------------------------------------------------
# atomic writes


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_atomic_write_failure_leaves_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    def broken(fp: Any, array: Any, **kwargs: Any) -> None:
        fp.write(b"partial")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(npformat, "write_array", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_result(np.arange(3), str(tmp_path / "out.npy"))
    assert leftovers(tmp_path) == []


def test_atomic_write_failure_keeps_existing_file(tmp_path: Path, monkeypatch: Any) -> None:
    target = tmp_path / "out.npy"
    target.write_bytes(b"old contents")

    def interrupted(fp: Any, array: Any, **kwargs: Any) -> None:
        fp.write(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(npformat, "write_array", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_result(np.arange(3), str(target))
    assert target.read_bytes() == b"old contents"
    assert leftovers(tmp_path) == ["out.npy"]


def test_atomic_output_replaces_on_success(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    with atomic_output(str(target)) as f:
        f.write(b"new")
        assert target.read_bytes() == b"old"  # nobody sees a half-written file
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640
    assert leftovers(tmp_path) == ["out.bin"]


def test_atomic_output_new_file_gets_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "new.bin"
    with atomic_output(str(target)) as f:
        f.write(b"x")
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_atomic_output_os_error_becomes_write_error(tmp_path: Path) -> None:
    message = r"out.bin: cannot write \(No space left on device\)"
    with pytest.raises(WriteError, match=message), atomic_output(str(tmp_path / "out.bin")):
        raise OSError(28, "No space left on device")
    assert leftovers(tmp_path) == []


def test_missing_output_folder(tmp_path: Path) -> None:
    target = tmp_path / "nope" / "out.npy"
    with pytest.raises(WriteError, match=f"^-o {target}: folder .*nope does not exist$"):
        write_result(np.arange(3), str(target))


def test_output_to_a_directory(tmp_path: Path) -> None:
    with pytest.raises(WriteError, match="is a directory"), atomic_output(str(tmp_path)):
        pass


def test_output_to_a_device_is_written_in_place() -> None:
    # Replacing /dev/null with a regular file would be a disaster; it must be written directly.
    write_result(np.arange(3), os.devnull, "npy")
    assert not Path(os.devnull).is_file()


# ---------------------------------------------------------------------------------------------
# reading inputs: formats and options


def test_read_npy_pair(tmp_path: Path) -> None:
    np.save(tmp_path / "data.npy", np.asfortranarray(np.arange(6.0).reshape(2, 3)))
    np.save(tmp_path / "ids.npy", np.array([1, 0]))
    data, ids = read_inputs(str(tmp_path / "data.npy"), str(tmp_path / "ids.npy"))
    np.testing.assert_array_equal(data.array, np.arange(6.0).reshape(2, 3))
    assert (data.label, data.fmt) == (str(tmp_path / "data.npy"), "npy")
    np.testing.assert_array_equal(ids.array, [1, 0])


def test_big_endian_npy_becomes_native(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.arange(3, dtype=">f4"))
    np.save(tmp_path / "i.npy", np.arange(3, dtype=">i8"))
    data, ids = read_inputs(str(tmp_path / "d.npy"), str(tmp_path / "i.npy"))
    assert data.array.dtype == np.float32 and data.array.dtype.isnative
    np.testing.assert_array_equal(ids.array, [0, 1, 2])


def test_uppercase_and_unknown_suffixes(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.arange(3.0))
    os.rename(tmp_path / "d.npy", tmp_path / "D.NPY")
    np.save(tmp_path / "ids.npy", np.arange(3))
    os.rename(tmp_path / "ids.npy", tmp_path / "ids.bin")  # no known suffix: sniffed
    pq.write_table(pa.table({"v": [1.0, 2.0, 3.0]}), tmp_path / "table.dat")
    data, ids = read_inputs(str(tmp_path / "D.NPY"), str(tmp_path / "ids.bin"))
    assert data.fmt == "npy" and ids.fmt == "npy"
    data, _ = read_inputs(str(tmp_path / "table.dat"), str(tmp_path / "ids.bin"))
    assert data.fmt == "parquet" and data.label.endswith("table.dat:v")
    (tmp_path / "junk.dat").write_bytes(b"hello world")
    message = r"junk.dat: unknown file format \(supported: .npy, .npz, .parquet/.pq"
    with pytest.raises(ReadError, match=message):
        read_inputs(str(tmp_path / "junk.dat"), str(tmp_path / "ids.bin"))
    # Text under another name is most likely a CSV/TSV: say how to have it read as one.
    with pytest.raises(ReadError, match=r"\); text: if it is CSV or TSV, name it \.csv or \.tsv$"):
        read_inputs(str(tmp_path / "junk.dat"), str(tmp_path / "ids.bin"))
    (tmp_path / "bin.dat").write_bytes(b"\x00\x01\x02junk")
    with pytest.raises(ReadError, match=r"\(supported: [^)]*\)$"):
        read_inputs(str(tmp_path / "bin.dat"), str(tmp_path / "ids.bin"))


def test_npz_keys_and_single_array(tmp_path: Path) -> None:
    both = tmp_path / "both.npz"
    np.savez(both, x=np.arange(4.0), seg=np.array([0, 1, 1, 0]))
    np.savez(tmp_path / "one.npz", np.array([0, 0, 1, 1]))
    data, ids = read_inputs(str(both), None, data_key="x", ids_key="seg")
    assert (data.label, ids.label, data.fmt) == (f"{both}:x", f"{both}:seg", "npz")
    data, ids = read_inputs(str(both), str(tmp_path / "one.npz"), data_key="x")
    assert ids.label == f"{tmp_path / 'one.npz'}:arr_0"
    with pytest.raises(UsageError, match=r"both.npz: holds 2 arrays; pick one with --data-key"):
        read_inputs(str(both), str(tmp_path / "one.npz"))
    with pytest.raises(UsageError, match=r"need --ids-key \(keys: x, seg\)"):
        read_inputs(str(both), None, data_key="x")
    with pytest.raises(UsageError, match=r"both.npz: no key 'nope' \(keys: x, seg\)"):
        read_inputs(str(both), None, data_key="x", ids_key="nope")


def test_compressed_npz(tmp_path: Path) -> None:
    path = tmp_path / "c.npz"
    np.savez_compressed(path, d=np.arange(1000.0), i=np.arange(1000) % 7)
    data, _ids = read_inputs(str(path), None, data_key="d", ids_key="i")
    np.testing.assert_array_equal(data.array, np.arange(1000.0))


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_table_with_two_columns(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"table{suffix}"
    write_table(path, pa.table({"device": [1, 2], "value": [1.5, 2.5], "segment": [0, 1]}))
    data, ids = read_inputs(str(path), None, data_column="value", ids_column="segment")
    np.testing.assert_array_equal(data.array, [1.5, 2.5])
    np.testing.assert_array_equal(ids.array, [0, 1])
    assert (data.label, ids.label, data.fmt) == (f"{path}:value", f"{path}:segment", suffix[1:])
    with pytest.raises(UsageError, match=r"need --ids-column \(columns: device, value, segment\)"):
        read_inputs(str(path), None, data_column="value")
    with pytest.raises(UsageError, match="need --data-column and --ids-column"):
        read_inputs(str(path), None)
    message = rf"^{path}: no column 'seg' \(columns: device, value, segment\)$"
    with pytest.raises(UsageError, match=message):
        read_inputs(str(path), None, data_column="value", ids_column="seg")


def test_single_column_table_needs_no_option(tmp_path: Path) -> None:
    pq.write_table(pa.table({"ids": pa.array([0, 1], pa.int16())}), tmp_path / "ids.pq")
    pq.write_table(pa.table({"a": [1.0, 2.0], "b": [3.0, 4.0]}), tmp_path / "data.pq")
    data, ids = read_inputs(str(tmp_path / "data.pq"), str(tmp_path / "ids.pq"), data_column="b")
    assert ids.array.dtype == np.int16 and ids.label.endswith("ids.pq:ids")
    np.testing.assert_array_equal(data.array, [3.0, 4.0])
    with pytest.raises(
        UsageError, match=r"has 2 columns; pick one with --data-column \(columns: a, b\)"
    ):
        read_inputs(str(tmp_path / "data.pq"), str(tmp_path / "ids.pq"))


def test_options_that_do_not_apply(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.arange(2.0))
    np.save(tmp_path / "i.npy", np.arange(2))
    with pytest.raises(UsageError, match="--data-column applies only to table files"):
        read_inputs(str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), data_column="x")
    with pytest.raises(UsageError, match=r"--ids-key applies only to .npz archives"):
        read_inputs(str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), ids_key="x")
    with pytest.raises(UsageError, match=r"a \.npy file holds one array"):
        read_inputs(str(tmp_path / "d.npy"), None)
    with pytest.raises(UsageError, match="cannot both be '-'"):
        read_inputs("-", "-", stdin=io.BytesIO())


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_csv_and_tsv_inputs(tmp_path: Path, fmt: str) -> None:
    sep = "," if fmt == "csv" else "\t"
    path = tmp_path / f"t.{fmt}"
    path.write_text(f"x{sep}id\n1.5{sep}0\n2{sep}1\n")
    data, ids = read_inputs(str(path), None, data_column="x", ids_column="id")
    np.testing.assert_array_equal(data.array, [1.5, 2.0])
    assert ids.array.dtype == np.int64 and data.fmt == fmt


def test_gzipped_csv(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(b"x,id\n1.5,0\n2,1\n"))
    data, _ = read_inputs(str(path), None, data_column="x", ids_column="id")
    np.testing.assert_array_equal(data.array, [1.5, 2.0])


# ---------------------------------------------------------------------------------------------
# reading inputs: column conversion


def read_column(tmp_path: Path, column: pa.Array | pa.ChunkedArray) -> np.ndarray[Any, Any]:
    path = tmp_path / "col.parquet"
    pq.write_table(pa.table({"c": column}), path)
    np.save(tmp_path / "ids.npy", np.zeros(len(column), np.int64))
    data, _ = read_inputs(str(path), str(tmp_path / "ids.npy"))
    return data.array


def test_fixed_size_list_column_is_2d(tmp_path: Path) -> None:
    column = pa.array([[1, 2, 3], [4, 5, 6]], pa.list_(pa.float32(), 3))
    array = read_column(tmp_path, column)
    assert array.dtype == np.float32
    np.testing.assert_array_equal(array, [[1, 2, 3], [4, 5, 6]])


def test_equal_length_list_column_is_2d(tmp_path: Path) -> None:
    array = read_column(tmp_path, pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int32())))
    assert array.shape == (3, 2) and array.dtype == np.int32


def test_nested_fixed_size_lists_are_nd(tmp_path: Path) -> None:
    inner = pa.list_(pa.float64(), 2)
    column = pa.array([[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 10], [11, 12]]], pa.list_(inner, 3))
    np.testing.assert_array_equal(
        read_column(tmp_path, column), np.arange(1, 13.0).reshape(2, 3, 2)
    )


def test_sliced_list_array_honours_offset() -> None:
    from segcli.io.columns import ColumnRef, column_to_numpy

    column = pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int64())).slice(1)
    np.testing.assert_array_equal(column_to_numpy(column, ColumnRef("t", "c")), [[3, 4], [5, 6]])


def test_chunked_column_concatenates() -> None:
    from segcli.io.columns import ColumnRef, column_to_numpy

    column = pa.chunked_array([pa.array([1.0, 2.0]), pa.array([3.0])])
    np.testing.assert_array_equal(column_to_numpy(column, ColumnRef("t", "c")), [1, 2, 3])
    empty = pa.chunked_array([], pa.float32())
    assert column_to_numpy(empty, ColumnRef("t", "c")).dtype == np.float32


def test_float16_and_bool_columns(tmp_path: Path) -> None:
    halves = read_column(tmp_path, pa.array(np.array([0.5, 1.5], np.float16)))
    assert halves.dtype == np.float16
    flags = read_column(tmp_path, pa.array([True, False]))
    assert flags.dtype == np.bool_


def test_unequal_lists_are_an_error(tmp_path: Path) -> None:
    column = pa.array([[1, 2], [3, 4], [5]], pa.list_(pa.int64()))
    message = r"col.parquet: column 'c' has lists of different lengths \(2 at row 0, 1 at row 2\)"
    with pytest.raises(InvalidInputError, match=message):
        read_column(tmp_path, column)


def test_nulls_are_counted_with_first_row(tmp_path: Path) -> None:
    values: list[float | None] = [1.0] * 30
    for row in (17, 20, 25):
        values[row] = None
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"value": values, "segment": [0] * 30}), path)
    message = rf"^{path}: column 'value' has 3 nulls \(first at row 17\)$"
    with pytest.raises(InvalidInputError, match=message):
        read_inputs(str(path), None, data_column="value", ids_column="segment")


def test_nulls_inside_lists(tmp_path: Path) -> None:
    column = pa.array([[1, 2], [3, 4], [5, None]], pa.list_(pa.int64(), 2))
    with pytest.raises(InvalidInputError, match=r"has 1 null inside its lists \(first at row 2\)"):
        read_column(tmp_path, column)


def test_null_lists(tmp_path: Path) -> None:
    column = pa.array([[1, 2], None], pa.list_(pa.int64()))
    with pytest.raises(InvalidInputError, match=r"column 'c' has 1 null list \(first at row 1\)"):
        read_column(tmp_path, column)


def test_string_column_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"name": ["a", "b"], "id": [0, 1]}), path)
    message = rf"^{path}: column 'name' has type string, not a numeric type$"
    with pytest.raises(InvalidInputError, match=message):
        read_inputs(str(path), None, data_column="name", ids_column="id")


def test_csv_text_in_numeric_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,id\n1.5,0\nabc,1\n")
    with pytest.raises(InvalidInputError, match="column 'x' has type string"):
        read_inputs(str(path), None, data_column="x", ids_column="id")


def test_csv_empty_cell_is_a_null(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("x,id\n1.5,0\n,1\n")
    with pytest.raises(InvalidInputError, match=r"column 'x' has 1 null \(first at row 1\)"):
        read_inputs(str(path), None, data_column="x", ids_column="id")


# ---------------------------------------------------------------------------------------------
# read errors


def test_missing_file(tmp_path: Path) -> None:
    np.save(tmp_path / "ids.npy", np.arange(2))
    with pytest.raises(ReadError, match=r"^nope.npy: no such file$"):
        read_inputs("nope.npy", str(tmp_path / "ids.npy"))
    with pytest.raises(ReadError, match=r"^nope.parquet: no such file$"):
        read_inputs("nope.parquet", None, data_column="a", ids_column="b")
    with pytest.raises(ReadError, match=r"^nope.bin: no such file$"):
        describe("nope.bin")


def test_not_an_npy_file(tmp_path: Path) -> None:
    path = tmp_path / "ids.npy"
    path.write_bytes(b"PAR1 this is not numpy")
    with pytest.raises(ReadError, match=rf"^{path}: not a .npy file \(bad magic\)$"):
        read_inputs(str(path), str(path))


def test_truncated_npy(tmp_path: Path) -> None:
    path = tmp_path / "d.npy"
    path.write_bytes(npy_bytes(np.arange(100.0))[:-8])
    message = rf"^{path}: truncated .npy: 99 of 100 rows arrived \(792 of 800 bytes\)$"
    with pytest.raises(ReadError, match=message):
        read_inputs(str(path), str(path))
    path.write_bytes(npy_bytes(np.arange(100.0))[:30])
    with pytest.raises(ReadError, match=r"corrupt .npy header"):
        read_inputs(str(path), str(path))


def test_object_npy_is_refused_without_unpickling(tmp_path: Path) -> None:
    path = tmp_path / "o.npy"
    with path.open("wb") as f:
        npformat.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": (2,)})
        f.write(b"\x80\x04junk that must never reach pickle")
    with pytest.raises(ReadError, match=r"holds Python objects \(pickled data\)"):
        read_inputs(str(path), str(path))


def test_string_npy_is_not_numeric(tmp_path: Path) -> None:
    np.save(tmp_path / "s.npy", np.array(["a", "b"]))
    with pytest.raises(InvalidInputError, match=r"s.npy: dtype <U1 is not numeric"):
        read_inputs(str(tmp_path / "s.npy"), str(tmp_path / "s.npy"))


@pytest.mark.parametrize("suffix", [".parquet", ".arrow", ".npz"])
def test_garbage_binary_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(b"\x00garbage" * 20)
    with pytest.raises(ReadError) as caught:
        if suffix == ".npz":
            read_inputs(str(path), None, data_key="a", ids_key="b")
        else:
            read_inputs(str(path), None, data_column="a", ids_column="b")
    message = str(caught.value)
    assert message.startswith(f"{path}: not a valid ") and "\n" not in message
    assert caught.value.__cause__ is not None


def test_truncated_parquet(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1.0] * 100, "b": [0] * 100}), path)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(ReadError, match=rf"^{path}: not a valid Parquet file \("):
        read_inputs(str(path), None, data_column="a", ids_column="b")


def test_malformed_csv(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2,3\n")
    with pytest.raises(ReadError, match=rf"^{path}: line 2 has 3 fields, the header 2: 1,2,3$"):
        read_inputs(str(path), None, data_column="a", ids_column="b")


def test_directory_as_input(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="is a directory"):
        read_inputs(str(tmp_path), str(tmp_path))


# ---------------------------------------------------------------------------------------------
# stdin


def test_stdin_npy(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.arange(3.0))
    stdin = io.BytesIO(npy_bytes(np.array([2, 0, 1], np.int32)))
    _data, ids = read_inputs(str(tmp_path / "d.npy"), "-", stdin=stdin)
    np.testing.assert_array_equal(ids.array, [2, 0, 1])
    assert ids.array.dtype == np.int32 and ids.label == "<stdin>"


def test_stdin_npy_truncated() -> None:
    stdin = io.BytesIO(npy_bytes(np.arange(10.0))[:-1])
    with pytest.raises(ReadError, match=r"^<stdin>: truncated .npy"):
        read_inputs("-", "x.npy", stdin=stdin)


class TrickleStream(io.RawIOBase):
    """A pipe that returns at most 3 bytes per read, to test short reads."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._data.read(min(3, len(buffer)))
        buffer[: len(chunk)] = chunk
        return len(chunk)


def test_stdin_npy_with_short_reads(tmp_path: Path) -> None:
    np.save(tmp_path / "i.npy", np.arange(50))
    stdin: Any = TrickleStream(npy_bytes(np.arange(50.0).reshape(25, 2)))
    data, _ = read_inputs("-", str(tmp_path / "i.npy"), stdin=stdin)
    np.testing.assert_array_equal(data.array, np.arange(50.0).reshape(25, 2))


def test_stdin_arrow_stream_and_file() -> None:
    table = pa.table({"value": [1.0, 2.0], "segment": [1, 0]})
    stream = io.BytesIO(arrow_stream_bytes(table))
    data, ids = read_inputs("-", None, data_column="value", ids_column="segment", stdin=stream)
    np.testing.assert_array_equal(ids.array, [1, 0])
    assert (data.label, data.path, data.fmt) == ("<stdin>:value", "-", "arrow")
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    stdin = io.BytesIO(sink.getvalue())
    data, _ = read_inputs("-", None, data_column="value", ids_column="segment", stdin=stdin)
    np.testing.assert_array_equal(data.array, [1.0, 2.0])


@pytest.mark.filterwarnings("ignore:Feather V1 files are deprecated:DeprecationWarning")
def test_feather_v1_is_refused_by_name(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.feather as feather

    path = tmp_path / "old.feather"
    feather.write_feather(pa.table({"v": [1.0], "s": [0]}), path, version=1)
    message = rf"^{re.escape(str(path))}: a Feather v1 file, which is not read: write it as"
    with pytest.raises(ReadError, match=message):
        read_inputs(str(path), None, data_column="v", ids_column="s")
    with pytest.raises(ReadError, match=message):
        describe(str(path))


def test_stdin_garbage_and_empty() -> None:
    with pytest.raises(ReadError, match=r"^<stdin>: no input"):
        read_inputs("-", "x.npy", stdin=io.BytesIO())
    with pytest.raises(ReadError, match=r"^<stdin>: not a \.npy, Parquet or Arrow IPC stream"):
        read_inputs("-", None, data_column="a", ids_column="b", stdin=io.BytesIO(b"\x01hello"))
    with pytest.raises(ReadError, match=r"^<stdin>: this looks like CSV/TSV text"):
        read_inputs("-", None, data_column="a", ids_column="b", stdin=io.BytesIO(b"hello"))
    with pytest.raises(UsageError, match=r"a \.npy stream holds one array"):
        read_inputs("-", None, stdin=io.BytesIO(npy_bytes(np.arange(3))))


# ---------------------------------------------------------------------------------------------
# text output


def test_format_text_lines() -> None:
    result = np.array([1.5, 3.4028235e38, np.nan, np.inf, 0.1], np.float32)
    assert list(format_text_lines(result)) == [
        "0\t1.5",
        "1\t3.4028235e+38",
        "2\tnan",
        "3\tinf",
        "4\t0.1",
    ]
    assert list(format_text_lines(np.arange(6, dtype=np.uint64).reshape(2, 1, 3))) == [
        "0\t0\t1\t2",
        "1\t3\t4\t5",
    ]
    assert list(format_text_lines(np.array([2**64 - 1], np.uint64))) == ["0\t18446744073709551615"]
    assert list(format_text_lines(np.zeros(0))) == []


def test_format_text_lines_many_segments() -> None:
    lines = list(format_text_lines(np.arange(200_000, dtype=np.int32)))
    assert len(lines) == 200_000 and lines[-1] == "199999\t199999"


# ---------------------------------------------------------------------------------------------
# describe


def test_describe_npy(tmp_path: Path) -> None:
    path = tmp_path / "d.npy"
    np.save(path, np.asfortranarray(np.zeros((3, 4), np.float32)))
    assert describe(str(path)) == {
        "path": str(path),
        "format": "npy",
        "size": path.stat().st_size,
        "shape": [3, 4],
        "dtype": "float32",
        "fortran_order": True,
    }


def test_describe_npz(tmp_path: Path) -> None:
    path = tmp_path / "d.npz"
    np.savez_compressed(path, a=np.zeros(5, np.int8), b=np.zeros((2, 2)))
    info = describe(str(path))
    assert info["format"] == "npz"
    assert info["arrays"] == {
        "a": {"shape": [5], "dtype": "int8", "fortran_order": False},
        "b": {"shape": [2, 2], "dtype": "float64", "fortran_order": False},
    }


def test_describe_parquet(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": [1.0, 2.0, 3.0], "s": [0, 1, 0]}), path, row_group_size=2)
    info = describe(str(path))
    assert info["format"] == "parquet" and info["rows"] == 3 and info["row_groups"] == 2
    assert info["columns"] == [
        {"name": "v", "type": "double", "nulls": 0},
        {"name": "s", "type": "int64", "nulls": 0},
    ]
    assert info["size"] == path.stat().st_size


def test_describe_arrow_file_and_stream(tmp_path: Path) -> None:
    table = pa.table({"v": pa.array([1, 2, 3], pa.int16())})
    path = tmp_path / "t.arrow"
    with ipc.new_file(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    info = describe(str(path))
    assert (info["ipc"], info["rows"], info["record_batches"]) == ("file", 3, 2)
    assert info["columns"] == [{"name": "v", "type": "int16", "nulls": 0}]
    stream_path = tmp_path / "s.arrows.ipc"
    stream_path.write_bytes(arrow_stream_bytes(table))
    info = describe(str(stream_path))
    assert (info["format"], info["ipc"], info["rows"]) == ("arrow", "stream", 3)


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_describe_text(tmp_path: Path, fmt: str) -> None:
    sep = "," if fmt == "csv" else "\t"
    path = tmp_path / f"t.{fmt}"
    path.write_text(f"a{sep}b\n1{sep}x\n2{sep}y\n")
    info = describe(str(path))
    assert info["format"] == fmt and info["rows"] == 2
    assert info["columns"] == [
        {"name": "a", "type": "int64", "nulls": 0},
        {"name": "b", "type": "string", "nulls": 0},
    ]


def test_describe_corrupt_npy(tmp_path: Path) -> None:
    path = tmp_path / "d.npy"
    path.write_bytes(b"garbage")
    with pytest.raises(ReadError, match=r"not a \.npy file"):
        describe(str(path))


# ---------------------------------------------------------------------------------------------
# import cost


def test_reading_npy_does_not_import_pyarrow(tmp_path: Path) -> None:
    np.save(tmp_path / "d.npy", np.arange(3.0))
    np.save(tmp_path / "i.npy", np.arange(3))
    code = (
        "import sys, numpy as np\n"
        "from segcli.io import read_inputs, write_result\n"
        f"d, i = read_inputs({str(tmp_path / 'd.npy')!r}, {str(tmp_path / 'i.npy')!r})\n"
        f"write_result(d.array, {str(tmp_path / 'o.npy')!r})\n"
        "assert 'pyarrow' not in sys.modules, 'pyarrow was imported'\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


# ---------------------------------------------------------------------------------------------
# property: any result round-trips through every format


@settings(max_examples=30, deadline=None)
@given(
    result=hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float64, np.int16, np.uint32, np.complex128]),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4),
    ),
    fmt=st.sampled_from(OUTPUT_FORMATS),
)
@example(result=np.zeros((2, 0), np.float32), fmt="csv")
@example(result=np.zeros((2, 0, 3), np.float32), fmt="tsv")
def test_round_trip_property(result: np.ndarray[Any, Any], fmt: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"r.{fmt}")
        write_result(result, path)
        back = read_result_table(path, dtype=result.dtype)
    if fmt in ("csv", "tsv") and math.prod(result.shape[1:]) == 0:
        assert back.shape[0] == result.shape[0]  # no value columns: the inner shape is lost
    else:
        assert back.shape == result.shape
        np.testing.assert_array_equal(back, result)


def test_info_of_empty_stdin_names_json_lines_among_what_it_reads() -> None:
    """info - reads JSON lines too (a block at a time): empty stdin's error lists them."""
    with pytest.raises(ReadError) as raised:
        describe("-", stdin=io.BytesIO())
    assert str(raised.value) == (
        "<stdin>: no input (expected a .npy, Parquet or Arrow IPC stream, or JSON lines)"
    )
