"""Damaged or odd input files: one line naming the file, a documented exit code, nothing written."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import numpy.lib.format as npformat
import pytest
from click.testing import CliRunner

from segcli.cli import cli
from tests.entry import Ran, run_main


def assert_refused(ran: Ran, code: int, *fragments: str, out: Path) -> None:
    assert ran.exit_code == code, ran.stderr
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert ran.stderr.startswith("Error: "), ran.stderr
    for fragment in fragments:
        assert fragment in ran.stderr, ran.stderr
    assert not out.exists()


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def claiming(shape: tuple[int, ...], body: bytes, descr: str = "<f4") -> bytes:
    """A .npy whose header says ``shape`` whatever the body holds."""
    buffer = io.BytesIO()
    npformat.write_array_header_1_0(
        buffer, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return buffer.getvalue() + body


def run_stdin(stdin: bytes, *args: object) -> Ran:
    result = CliRunner().invoke(cli, [str(a) for a in args], input=stdin, catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    path = tmp_path / "ids.npy"
    np.save(path, np.array([0, 0, 1, 2, 2, 3], np.int64))
    return path


@pytest.mark.parametrize("compression", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_member_with_a_bad_crc_streamed(tmp_path, compression):
    data = npy_bytes(np.arange(6, dtype=np.float32))
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression) as z:
        z.writestr("data.npy", data)
        z.writestr("ids.npy", npy_bytes(np.array([0, 0, 1, 2, 2, 3], np.int64)))
    crc = zipfile.ZipFile(archive).getinfo("data.npy").CRC
    path = tmp_path / "pair.npz"  # the member's CRC-32, in its local header and the directory
    path.write_bytes(
        archive.getvalue().replace(struct.pack("<I", crc), struct.pack("<I", ~crc & 0xFFFFFFFF))
    )
    out = tmp_path / "out.npy"
    ran = run_main(
        "mean", path, "--data-key", "data", "--ids-key", "ids", "--chunk-rows", "2", "-o", out
    )
    assert_refused(ran, 3, f"{path}:data: corrupt .npz member", "Bad CRC-32", out=out)


@pytest.mark.parametrize("n", [[], ["-n", "4"]])
def test_agg_of_rows_wider_than_a_result_row_on_stdin(tmp_path, ids, n):
    # On a pipe no file size tests the header's claim: rows of 10**12 values reach agg, whose
    # result row (a field per op) NumPy cannot make.
    out = tmp_path / "out.npz"
    stdin = claiming((6, 10**12), np.zeros(6, np.float32).tobytes())
    ran = run_stdin(stdin, "agg", "--op", "sum,mean", "-", ids, *n, "-o", out)
    assert_refused(ran, 1, "<stdin>: rows of shape [1000000000000]", "sum, mean", out=out)


@pytest.mark.parametrize("how", ["file", "streamed", "stdin", "info"])
def test_npy_header_of_an_empty_shape_numpy_cannot_make(tmp_path, ids, how):
    # No element, so no byte claimed, but NumPy allocates no array (nor block of rows) of a
    # shape whose non-zero dimensions overflow.
    shape = (6, 0, 2**62)
    data = tmp_path / "data.npy"
    data.write_bytes(claiming(shape, b""))
    out = tmp_path / "out.npy"
    if how == "stdin":
        ran = run_stdin(data.read_bytes(), "sum", "-", ids, "-o", out)
        label = "<stdin>"
    elif how == "info":
        ran, label = run_main("info", data), str(data)
    else:
        chunks = ["--chunk-rows", "2"] if how == "streamed" else []
        ran, label = run_main("sum", data, ids, *chunks, "-o", out), str(data)
    assert_refused(
        ran, 3, f"{label}: corrupt .npy header (shape [6, 0, {2**62}] of float32", out=out
    )


@pytest.mark.parametrize("op", ["sum", "median", "count"])
def test_npy_stream_whose_rows_cannot_be_held(tmp_path, ids, op):
    # A block of one row of 10**14 float32 is more than any address space: the header's claim
    # is named, as a whole read names it, not reported as running out of memory.
    out = tmp_path / "out.npy"
    ran = run_stdin(claiming((6, 10**14), b"\0" * 24), op, "-", ids, "-o", out)
    assert_refused(
        ran, 3, "<stdin>: the header claims shape [6, 100000000000000]", "more than", out=out
    )
