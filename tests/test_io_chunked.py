"""Tests for the streaming readers of segcli.io (open_chunked)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import numpy.lib.format as npformat
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from segcli.errors import InvalidInputError, NotStreamableError, ReadError, UsageError
from segcli.io import ChunkSource, open_chunked, write_result

CHUNK_SIZES = [1, 7, 1000]


def collect(source: ChunkSource, rows: int) -> np.ndarray[Any, Any]:
    """Concatenate the chunks, checking every block but the last is exactly ``rows`` long."""
    chunks = list(source.chunks(rows))
    assert all(len(c) == rows for c in chunks[:-1])
    assert all(0 < len(c) <= rows for c in chunks)
    assert all(c.dtype == source.dtype and c.shape[1:] == source.shape[1:] for c in chunks)
    if not chunks:
        return np.zeros((0, *source.shape[1:]), source.dtype)
    return np.concatenate(chunks)


def make_file(tmp_path: Path, fmt: str, array: np.ndarray[Any, Any]) -> tuple[str, str | None]:
    """Write ``array`` in ``fmt`` in several row groups/batches; return (path, column)."""
    path = tmp_path / f"in.{fmt}"
    if fmt == "npy":
        np.save(path, array)
        return str(path), None
    if fmt == "npz":
        np.savez_compressed(path, other=np.zeros(1), x=array)
        return str(path), None
    flat = array.reshape(len(array), int(np.prod(array.shape[1:])))
    if array.ndim == 1:
        column = pa.array(array)
    else:
        column = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])
    table = pa.table({"other": pa.array(np.zeros(len(array))), "x": column})
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=5)
    elif fmt == "arrow":
        with ipc.new_file(path, table.schema) as writer:
            writer.write_table(table, max_chunksize=4)
    else:
        np.savetxt(
            path,
            np.column_stack([np.zeros(len(array)), array]),
            delimiter=",",
            header="other,x",
            comments="",
        )
    return str(path), "x"


@pytest.mark.parametrize("fmt", ["npy", "npz", "parquet", "arrow", "csv"])
@pytest.mark.parametrize("rows", CHUNK_SIZES)
def test_chunks_concatenate_to_the_array(tmp_path: Path, fmt: str, rows: int) -> None:
    array = np.arange(23, dtype=np.float64) * 1.5
    path, column = make_file(tmp_path, fmt, array)
    source = open_chunked(path, column=column, key="x" if fmt == "npz" else None)
    # A CSV's length is known only once it has been parsed through (it streams).
    assert source.shape == ((-1,) if fmt == "csv" else (23,)) and source.dtype == np.float64
    np.testing.assert_array_equal(collect(source, rows), array)
    np.testing.assert_array_equal(collect(source, rows), array)  # chunks() can run again


@pytest.mark.parametrize("fmt", ["npy", "npz", "parquet", "arrow"])
@pytest.mark.parametrize("rows", CHUNK_SIZES)
def test_2d_chunks(tmp_path: Path, fmt: str, rows: int) -> None:
    array = np.arange(23 * 3, dtype=np.float32).reshape(23, 3)
    path, column = make_file(tmp_path, fmt, array)
    source = open_chunked(path, column=column, key="x" if fmt == "npz" else None)
    assert source.shape == (23, 3) and source.dtype == np.float32
    np.testing.assert_array_equal(collect(source, rows), array)


@pytest.mark.parametrize("fmt", ["npy", "npz", "parquet", "arrow"])
def test_empty_input(tmp_path: Path, fmt: str) -> None:
    array = np.zeros(0, np.int32)
    path, column = make_file(tmp_path, fmt, array)
    source = open_chunked(path, column=column, key="x" if fmt == "npz" else None)
    assert source.shape == (0,) and source.dtype == np.int32
    assert list(source.chunks(7)) == []


def test_result_files_stream_with_full_shape(tmp_path: Path) -> None:
    result = (np.arange(10 * 6) + 1j).astype(np.complex64).reshape(10, 2, 3)
    path = tmp_path / "r.parquet"
    write_result(result, str(path))
    source = open_chunked(str(path), column="value")
    assert source.shape == (10, 2, 3) and source.dtype == np.complex64
    np.testing.assert_array_equal(collect(source, 3), result)


def test_variable_lists_must_share_a_length_across_chunks(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    lists = [[1, 2]] * 5 + [[3]]
    pq.write_table(pa.table({"v": pa.array(lists, pa.list_(pa.int64()))}), path)
    source = open_chunked(str(path))
    assert source.shape == (6, 2)
    with pytest.raises(InvalidInputError, match=r"column 'v' rows from 5 have inner shape \[1\]"):
        list(source.chunks(5))


def test_null_reported_at_its_global_row(tmp_path: Path) -> None:
    values: list[float | None] = [1.0] * 20
    values[13] = None
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": values}), path, row_group_size=6)
    source = open_chunked(str(path), column="v")
    with pytest.raises(InvalidInputError, match=r"has 1 null \(first at row 13\)"):
        list(source.chunks(5))


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_null_first_row_counts_every_null_of_the_column(tmp_path: Path, fmt: str) -> None:
    """The first row, read on opening for the dtype, may be null: opening leaves it to the
    blocks, whose error counts the column's nulls, not the first row's one (and comes after
    the checks of the column's metadata, as for a null in any other row)."""
    values: list[float | None] = [1.0] * 20
    values[0] = values[9] = values[17] = None
    table = pa.table({"v": values})
    path = tmp_path / f"t.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path, row_group_size=6)
    else:
        with ipc.new_file(path, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=6):
                writer.write_batch(batch)
    source = open_chunked(str(path), column="v")
    assert source.dtype == np.float64
    with pytest.raises(InvalidInputError, match=r"column 'v' has 3 nulls \(first at row 0\)$"):
        list(source.chunks(7))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(4 * 3, dtype=np.float64).reshape(4, 3),
        np.arange(11 * 2 * 3, dtype=np.float32).reshape(11, 2, 3),
        np.arange(9 * 4, dtype=">i4").reshape(9, 4),  # big-endian: swapped once read
    ],
    ids=["2-D", "3-D", "big-endian"],
)
@pytest.mark.parametrize("rows", [1, 4, 1000])
def test_fortran_order_npy_streams_row_blocks(
    tmp_path: Path, array: np.ndarray[Any, Any], rows: int
) -> None:
    path = tmp_path / "f.npy"
    np.save(path, np.asfortranarray(array))
    source = open_chunked(str(path))
    got = collect(source, rows)
    assert got.dtype.isnative and got.flags.c_contiguous
    np.testing.assert_array_equal(got, array)


def test_rows_of_a_fortran_order_npy_are_read_at_their_offsets(tmp_path: Path) -> None:
    """What a Dask worker reads: a row range by seeking, the same rows as the whole file's."""
    from segcli.io.rows import open_file, read_rows

    array = np.arange(10 * 3 * 2, dtype=np.float64).reshape(10, 3, 2)
    path = tmp_path / "f.npy"
    np.save(path, np.asfortranarray(array))
    ref = open_file(str(path), column=None, key=None, role="data")
    np.testing.assert_array_equal(read_rows(ref, 3, 7), array[3:7])
    np.testing.assert_array_equal(read_rows(ref, 0, 10), array)
    path.write_bytes(path.read_bytes()[:-8])  # cut after it was planned: found as it is read
    with pytest.raises(ReadError, match=r"truncated \.npy: 472 of 480 bytes arrived$"):
        read_rows(ref, 3, 10)  # the last column's piece ends past the cut


def test_a_truncated_fortran_order_npy_says_how_much_arrived(tmp_path: Path) -> None:
    path = tmp_path / "f.npy"
    np.save(path, np.asfortranarray(np.zeros((4, 3))))
    path.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(ReadError, match=r"truncated \.npy: 88 of 96 bytes arrived$"):
        open_chunked(str(path))


def test_a_fortran_order_npz_member_does_not_stream(tmp_path: Path) -> None:
    """Its columns would each be decompressed again from the member's start for every block."""
    path = tmp_path / "f.npz"
    np.savez(path, x=np.asfortranarray(np.zeros((4, 3))), y=np.asfortranarray(np.arange(5.0)))
    with pytest.raises(NotStreamableError, match=r"f\.npz:x: cannot stream a Fortran-order"):
        open_chunked(str(path), key="x")
    # 1-D: the order does not matter
    np.testing.assert_array_equal(collect(open_chunked(str(path), key="y"), 2), np.arange(5.0))


def test_truncated_npy_while_streaming(tmp_path: Path) -> None:
    path = tmp_path / "t.npy"
    np.save(path, np.arange(10.0))
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(ReadError, match=r"truncated .npy: 9 of 10 rows arrived \(76 of 80 bytes\)"):
        open_chunked(str(path))  # found before any block is read


def test_open_chunked_errors(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match=r"^nope\.npy: no such file$"):
        open_chunked("nope.npy")
    with pytest.raises(UsageError, match="stdin"):
        open_chunked("-")
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1], "b": [2]}), path)
    with pytest.raises(UsageError, match="pick one with --ids-column"):
        open_chunked(str(path), role="ids")
    with pytest.raises(UsageError, match=r"no column 'c' \(columns: a, b\)"):
        open_chunked(str(path), column="c")
    with pytest.raises(ValueError, match="rows must be at least 1"):
        list(open_chunked(str(path), column="a").chunks(0))


def test_big_npy_streams_in_bounded_memory(tmp_path: Path) -> None:
    """A ~200 MB file streamed in 1 MB blocks never holds more than a few blocks."""
    path = tmp_path / "big.npy"
    rows, block_rows = 25_000_000, 131_072  # float64: 200 MB in all, 1 MB per block
    header = {"descr": "<f8", "fortran_order": False, "shape": (rows,)}
    with path.open("wb") as f:
        npformat.write_array_header_1_0(f, header)
        f.truncate(f.tell() + rows * 8)  # sparse zeros: instant to make, no memory needed
    source = open_chunked(str(path))
    tracemalloc.start()
    try:
        total = 0
        for chunk in source.chunks(block_rows):
            total += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == rows
    assert peak < 4 * block_rows * 8, f"peak {peak} bytes"


def test_a_fortran_order_npy_on_a_pipe_is_a_usage_error(tmp_path: Path) -> None:
    """Its rows are pieces of every column, which a one-pass stream cannot seek to."""
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.asfortranarray(np.zeros((4, 3))))
    buffer.seek(0)
    with pytest.raises(NotStreamableError, match=r"^<stdin>: cannot stream a Fortran-order"):
        open_chunked("-", stdin=buffer)
    assert issubclass(NotStreamableError, UsageError)  # exit 2: the file is valid
