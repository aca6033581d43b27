"""What a .npy header claims is checked before it is trusted: dtype width, shape, size."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
import numpy.lib.format as npformat
import pytest
from click.testing import CliRunner

from segcli.cli import cli

ENGINES = ["numpy", "numba"] + (["dask"] if importlib.util.find_spec("distributed") else [])
PATHS = {"in-memory": [], "streamed": ["--chunk-rows", "1"], "over-budget": ["--memory-limit", "1"]}


def run(*args: object, input: bytes | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


def write_npy(path: Path, shape: tuple[int, ...], body: bytes, descr: str = "<f8") -> Path:
    """A .npy whose header says ``shape`` whatever the body holds."""
    buffer = io.BytesIO()
    npformat.write_array_header_1_0(
        buffer, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    path.write_bytes(buffer.getvalue() + body)
    return path


@pytest.fixture
def ids(tmp_path: Path) -> Path:
    path = tmp_path / "ids.npy"
    np.save(path, np.array([0, 0, 1], np.int64))
    return path


def assert_refused(result, code: int, *fragments: str, out: Path) -> None:
    assert result.exit_code == code, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
@pytest.mark.parametrize("op", ["sum", "count"])
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("path", PATHS)
def test_wider_than_spec_dtypes_are_refused(tmp_path, ids, dtype, op, engine, path):
    if np.dtype(dtype).itemsize <= (16 if np.dtype(dtype).kind == "c" else 8):
        pytest.skip("long double is 64-bit on this platform")
    data = tmp_path / "data.npy"
    np.save(data, np.array([1, 2, 3], dtype))
    out = tmp_path / "out.npy"
    result = run(op, data, ids, "--engine", engine, *PATHS[path], "-q", "-o", out)
    name = np.dtype(dtype).name
    assert_refused(result, 1, f"{data}: dtype {name}", "complex64/128", out=out)


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
def test_library_refuses_wider_dtypes_for_every_op(dtype):
    import segcli
    from segcli.errors import InvalidInputError

    if np.dtype(dtype).itemsize <= (16 if np.dtype(dtype).kind == "c" else 8):
        pytest.skip("long double is 64-bit on this platform")
    for op in segcli.OPS:
        with pytest.raises(InvalidInputError, match="accepted: float16/32/64"):
            segcli.segment_reduce(np.ones(2, dtype), np.array([0, 0]), 1, op)


@pytest.mark.parametrize("path", PATHS)
def test_negative_shape_is_refused_on_every_path(tmp_path, ids, path):
    data = write_npy(tmp_path / "neg.npy", (-3,), b"")
    out = tmp_path / "out.npy"
    result = run("sum", data, ids, *PATHS[path], "-q", "-o", out)
    assert_refused(result, 3, f"{data}: corrupt .npy header (negative dimension", out=out)


def test_negative_shape_on_stdin_is_refused(tmp_path, ids):
    body = write_npy(tmp_path / "neg.npy", (3, -1), b"").read_bytes()
    out = tmp_path / "out.npy"
    result = run("sum", "-", ids, "-q", "-o", out, input=body)
    assert_refused(result, 3, "<stdin>: corrupt .npy header (negative dimension", out=out)


@pytest.mark.parametrize("path", PATHS)
def test_header_claiming_10_to_the_12_elements_names_the_file_and_claim(tmp_path, ids, path):
    data = write_npy(tmp_path / "huge.npy", (10**12,), np.arange(3.0).tobytes())
    out = tmp_path / "out.npy"
    result = run("sum", data, ids, *PATHS[path], "-q", "-o", out)
    assert_refused(result, 3, f"{data}: truncated .npy: 3 of 1000000000000 rows arrived", out=out)
    assert "out of memory" not in result.stderr


def test_header_claim_is_checked_inside_npz(tmp_path, ids):
    member = write_npy(tmp_path / "m.npy", (10**12,), np.arange(3.0).tobytes()).read_bytes()
    import zipfile

    archive = tmp_path / "huge.npz"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("data.npy", member)
    out = tmp_path / "out.npy"
    result = run("sum", archive, ids, "-q", "-o", out)
    assert_refused(result, 3, "huge.npz", "3 of 1000000000000 rows arrived", out=out)


@pytest.mark.parametrize("path", PATHS)
def test_file_shorter_than_its_header_names_rows_found_and_claimed(tmp_path, ids, path):
    data = write_npy(tmp_path / "short.npy", (10,), np.arange(3.0).tobytes())
    out = tmp_path / "out.npy"
    result = run("sum", data, ids, *PATHS[path], "-q", "-o", out)
    assert_refused(result, 3, f"{data}: truncated .npy: 3 of 10 rows arrived", out=out)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", [(10**30,), (10**11, 10**11)], ids=["1-D", "2-D"])
def test_a_claim_beyond_any_file_is_a_corrupt_header_everywhere(tmp_path, ids, path, shape):
    """Sizes that overflow int64 arithmetic are refused as the header is read: on a file, on
    stdin and inside an .npz, whether the run streams or not."""
    data = write_npy(tmp_path / "vast.npy", shape, np.arange(3.0).tobytes())
    import zipfile

    archive = tmp_path / "vast.npz"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("data.npy", data.read_bytes())
    out = tmp_path / "out.npy"
    claim = "claims more bytes than any file holds"
    for source in (data, archive):
        result = run("sum", source, ids, *PATHS[path], "-q", "-o", out)
        assert_refused(result, 3, f"{source}", "corrupt .npy header", claim, out=out)
    result = run("sum", "-", ids, "-q", "-o", out, input=data.read_bytes())
    assert_refused(result, 3, "<stdin>: corrupt .npy header", claim, out=out)


@pytest.mark.parametrize(
    "header",
    [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4,",  # cut: the tokenizer's error
        "{'descr': '<f4', 'fortran_order': False, 'shape': " + "(" * 400 + ")" * 400 + "}",
    ],
    ids=["cut", "nested"],
)
def test_a_garbled_header_is_corrupt_not_an_internal_error(tmp_path, ids, header):
    text = header.encode()
    text += b" " * (-(len(text) + 11) % 64) + b"\n"
    data = tmp_path / "bad.npy"
    data.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + bytes(16))
    out = tmp_path / "out.npy"
    for path in PATHS.values():
        result = run("sum", data, ids, *path, "-q", "-o", out)
        assert_refused(result, 3, f"{data}: corrupt .npy header", out=out)
    result = run("info", data)
    assert result.exit_code == 3 and "corrupt .npy header" in result.stderr


def test_an_archive_without_arrays_is_a_file_problem(tmp_path, ids):
    """Whatever the options ask, an .npz with no KEY.npy member holds nothing to read."""
    import zipfile

    empty, odd = tmp_path / "empty.npz", tmp_path / "odd.npz"
    zipfile.ZipFile(empty, "w").close()
    with zipfile.ZipFile(odd, "w") as archive:
        archive.writestr("a.bin", b"xx")
    out = tmp_path / "out.npy"
    for archive_path in (empty, odd):
        said = f"{archive_path}: holds no arrays"
        for args in ([archive_path], [archive_path, ids], [archive_path, "--data-key", "a", ids]):
            assert_refused(run("sum", *args, "-q", "-o", out), 3, said, out=out)
