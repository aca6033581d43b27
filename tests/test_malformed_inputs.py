"""Damaged or odd input files: one line naming the file, a documented exit code, nothing written."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import numpy.lib.format as npformat
import pyarrow as pa
import pyarrow.ipc as ipc
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


def npz_pair(compression: int = zipfile.ZIP_STORED) -> tuple[bytearray, zipfile.ZipInfo]:
    """An .npz of arrays ``data`` and ``ids``, and its ``data.npy`` member's entry."""
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w", compression) as z:
        z.writestr("data.npy", npy_bytes(np.arange(6, dtype=np.float32)))
        z.writestr("ids.npy", npy_bytes(np.array([0, 0, 1, 2, 2, 3], np.int64)))
    return bytearray(archive.getvalue()), zipfile.ZipFile(archive).getinfo("data.npy")


def with_member_field(raw: bytearray, info: zipfile.ZipInfo, field: str, value: int) -> bytes:
    """``raw`` with ``data.npy``'s general-purpose flags or compression method set to
    ``value`` in its local header and in the central directory, which zipfile compares."""
    local, central = {"flags": (6, 8), "method": (8, 10)}[field]
    raw[info.header_offset + local : info.header_offset + local + 2] = struct.pack("<H", value)
    at = raw.index(b"PK\x01\x02")  # the first central directory entry: data.npy's
    raw[at + central : at + central + 2] = struct.pack("<H", value)
    return bytes(raw)


def lzma_damaged() -> bytes:
    raw, info = npz_pair(zipfile.ZIP_LZMA)
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 9, start + 20):  # past zipfile's LZMA properties
        raw[i] ^= 0xFF
    return bytes(raw)


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        ("encrypted", "cannot read this .npz member (File 'data.npy' is encrypted"),
        ("method 99", "cannot read this .npz member (That compression method is not supported)"),
        ("lzma", "corrupt .npz member (Corrupt input data)"),
    ],
)
@pytest.mark.parametrize("how", ["whole", "streamed", "info"])
def test_npz_member_zipfile_cannot_extract(tmp_path, damage, fragment, how):
    raw, info = npz_pair()
    damaged = {
        "encrypted": lambda: with_member_field(raw, info, "flags", 1),
        "method 99": lambda: with_member_field(raw, info, "method", 99),
        "lzma": lzma_damaged,
    }[damage]()
    path = tmp_path / "pair.npz"
    path.write_bytes(damaged)
    out = tmp_path / "out.npy"
    if how == "info":
        ran = run_main("info", path)
    else:
        chunks = ["--chunk-rows", "2"] if how == "streamed" else []
        ran = run_main("sum", path, "--data-key", "data", "--ids-key", "ids", *chunks, "-o", out)
    assert_refused(ran, 3, f"{path}:data: {fragment}", out=out)


@pytest.mark.parametrize("digits", [400, 5000])  # past float64's range; past int()'s 4,300
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("column", ["v", "s"])
@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
def test_integer_beyond_float64_in_a_text_table(tmp_path, digits, fmt, column, chunks):
    # pyarrow reads such an integer as inf: rounded, like one just beyond int64, not a value.
    huge = "9" * digits
    rows = [{"s": 0, "v": 1}, {"s": 0, "v": 2}]
    rows[1][column] = huge
    path = tmp_path / f"table.{fmt}"
    if fmt == "csv":
        path.write_text("s,v\n" + "".join(f"{r['s']},{r['v']}\n" for r in rows))
    else:
        path.write_text("".join(f'{{"s": {r["s"]}, "v": {r["v"]}}}\n' for r in rows))
    out = tmp_path / "out.npy"
    ran = run_main("sum", path, "--data-column", "v", "--ids-column", "s", *chunks, "-o", out)
    assert_refused(
        ran,
        1,
        f"{path}: column '{column}' holds {'9' * 80}... ({digits:,} characters) at row 1, an "
        "integer beyond int64",
        out=out,
    )


def test_infinities_written_as_such_are_no_integers(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("s,v\n0,inf\n0,1e999\n1,-inf\n")
    ran = run_main("max", path, "--data-column", "v", "--ids-column", "s", "-q")
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout == "0\tinf\n1\t-inf\n"


LONG = 100_000


@pytest.mark.parametrize(
    ("name", "content", "args", "code", "fragment"),
    [
        (
            "text.csv",
            f"k,s,v\na,0,1\nb,0,{'x' * LONG}\n".encode(),
            ["--ids-column", "s"],
            1,
            f"row 1 holds '{'x' * 80}'... (100,000 characters) (1 value that is not a number)",
        ),
        (
            "text.jsonl",
            f'{{"k": "a", "s": 0, "v": "{"x" * LONG}"}}\n'.encode(),
            ["--ids-column", "s"],
            1,
            f"row 0 holds '{'x' * 80}'... (100,000 characters)",
        ),
        (
            "latin.csv",
            b"k,s,v\n" + b"\xe9" * LONG + b",0,1\n",
            ["--by", "k"],
            3,
            "column 'k' row 0 holds b'" + "\\xe9" * 20 + "'... (100,000 bytes), which is not UTF-8",
        ),
        (
            "null-first.csv",  # past the first rows a streamed read types its columns by
            f"k,s,v\n,0,1\n{'y' * 3_000_000},0,1\n".encode(),
            ["--by", "k", "--chunk-rows", "1"],
            3,
            f"column 'k' holds '{'y' * 79}... (3,000,002 characters) after its first rows",
        ),
    ],
)
def test_a_long_offending_value_is_cut_in_the_error(tmp_path, name, content, args, code, fragment):
    path = tmp_path / name
    path.write_bytes(content)
    out = tmp_path / "out.csv"
    ran = run_main("sum", path, "--data-column", "v", *args, "-o", out)
    assert_refused(ran, code, fragment, out=out)
    assert len(ran.stderr) < 1000


def test_a_long_key_missing_from_keys_from_is_cut(tmp_path):
    data, keys = tmp_path / "data.csv", tmp_path / "keys.csv"
    data.write_text(f"k,v\n{'q' * LONG},1\n")
    keys.write_text("k\nabc\n")
    out = tmp_path / "out.csv"
    ran = run_main("sum", data, "--data-column", "v", "--by", "k", "--keys-from", keys, "-o", out)
    assert_refused(ran, 1, f"row 0 has key k='{'q' * 80}'... (100,000 characters), which", out=out)
    assert len(ran.stderr) < 1000


@pytest.mark.parametrize("chunks", [[], ["--chunk-rows", "1"]])
def test_csv_whose_first_row_is_longer_than_the_head_it_is_typed_by(tmp_path, chunks):
    # The header fits in the first megabyte, its first row does not: the columns are typed by
    # that row, not found to have none (all null) and the row refused as another type.
    path = tmp_path / "table.csv"
    path.write_text(f"k,v\n{'a' * 3_000_000},1.5\nb,2\n")
    ran = run_main("sum", path, "--data-column", "v", "--by", "k", "--no-header", *chunks, "-q")
    assert ran.exit_code == 0, ran.stderr[:500]
    assert ran.stdout == f"{'a' * 3_000_000}\t1.5\nb\t2.0\n"


def test_latin1_csv_opening_like_an_arrow_stream_is_not_called_one(tmp_path):
    # "ÿÿÿÿ" in Latin-1 is ff ff ff ff, the marker an Arrow IPC stream opens with; the stream
    # goes on with its first message's length, which this header does not hold.
    path = tmp_path / "table.csv"
    path.write_bytes("ÿÿÿÿÿÿÿÿ,s\n1,0\n".encode("latin-1"))
    out = tmp_path / "out.npy"
    ran = run_main("sum", path, "--data-column", "s", "--ids-column", "s", "-o", out)
    assert_refused(ran, 3, f"{path}: the column name b'" + "\\xff" * 8 + "' is not UTF-8", out=out)


@pytest.mark.parametrize("depth", [64, 1100])  # one axis too many; past Python's recursion
@pytest.mark.parametrize("args", [[], ["--chunk-rows", "1"], ["--by", "k"]])
def test_json_lists_nested_deeper_than_numpy_axes(tmp_path, depth, args):
    if np.lib.NumpyVersion(np.__version__) < "2.0.0":
        depth = max(depth, 32)
    value = "[" * depth + "1" + "]" * depth
    path = tmp_path / "table.jsonl"
    path.write_text(f'{{"k": "a", "s": 0, "v": {value}}}\n')
    ids = [] if "--by" in args else ["--ids-column", "s"]
    out = tmp_path / "out.json"
    ran = run_main("sum", path, "--data-column", "v", *ids, *args, "-o", out)
    assert_refused(ran, 1, f"{path}: column 'v' holds lists nested {depth:,} deep", out=out)


def test_json_lists_nested_as_deep_as_numpy_axes_allow(tmp_path):
    depth = 63 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 31
    path = tmp_path / "table.jsonl"
    path.write_text(f'{{"s": 0, "v": {"[" * depth}2{"]" * depth}}}\n')
    ran = run_main("sum", path, "--data-column", "v", "--ids-column", "s", "-q")
    assert ran.exit_code == 0, ran.stderr
    assert ran.stdout == "0\t2\n"


@pytest.mark.parametrize("args", [["--ids-column", "s"], ["--by", "k", "--chunk-rows", "2"]])
def test_dictionary_of_lists_column_reads_as_its_lists(tmp_path, args):
    rows = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 0], pa.int8()), pa.array([[1.0, 2.0], [10.0, 20.0]])
    )
    table = pa.table({"k": ["a", "a", "b"], "s": pa.array([0, 0, 1], pa.int32()), "v": rows})
    path = tmp_path / "table.arrow"
    with ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)
    ran = run_main("sum", path, "--data-column", "v", *args, "-q")
    assert ran.exit_code == 0, ran.stderr
    names = ["a", "b"] if "--by" in args else ["0", "1"]
    assert ran.stdout.splitlines()[-2:] == [f"{names[0]}\t11.0\t22.0", f"{names[1]}\t1.0\t2.0"]
