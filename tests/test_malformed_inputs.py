"""Damaged or odd input files: one line naming the file, a documented exit code, nothing written."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

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
