"""--memory-limit is a promise about peak memory whatever the input's encoding: the choice to
stream is made on the decoded size (read from headers and metadata), never the size on disk."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.lib.format as npformat
import pytest

from segcli.io.sizes import UNBOUNDED, decoded_bytes
from tests.matrix import default_run
from tests.peak import run_measured

ROWS = 50_000_000  # 400 MB of float64 zeros, a few hundred KB compressed
BLOCK = 1 << 20


def peak_mib(*args: object) -> tuple[int, float, str]:
    """Run segcli in a fresh process: exit code, peak RSS in MiB, stderr without the peak."""
    measured = run_measured(*args)
    return measured.returncode, measured.peak_bytes / 2**20, measured.stderr


def write_npz_bomb(path: Path) -> None:
    """``data`` (float64 zeros) and ``ids`` (int64 zeros) written block by block, deflated."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for key, dtype in (("data", "<f8"), ("ids", "<i8")):
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                header = {"descr": dtype, "fortran_order": False, "shape": (ROWS,)}
                npformat.write_array_header_2_0(member, header)  # type: ignore[arg-type]
                zeros = bytes(BLOCK * 8)
                for _ in range(ROWS // BLOCK):
                    member.write(zeros)
                member.write(bytes((ROWS % BLOCK) * 8))


def write_parquet_bomb(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    block = pa.table({"v": np.zeros(BLOCK), "i": np.zeros(BLOCK, np.int64)})
    with pq.ParquetWriter(path, block.schema, compression="zstd") as writer:
        for _ in range(ROWS // BLOCK):
            writer.write_table(block)
        writer.write_table(block.slice(0, ROWS % BLOCK))


BOMB_WRITERS = {"npz": write_npz_bomb, "parquet": write_parquet_bomb}


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``bombs(fmt)``: the module's bomb of that format, written on first use (the .npz takes
    seconds to deflate, and the default run reads only the Parquet one)."""
    folder = tmp_path_factory.mktemp("bombs")
    written: dict[str, Path] = {}

    def bomb(fmt: str) -> Path:
        if fmt not in written:
            written[fmt] = folder / f"bomb.{fmt}"
            BOMB_WRITERS[fmt](written[fmt])
        return written[fmt]

    return bomb


OPTIONS = {
    "npz": ["--data-key", "data", "--ids-key", "ids"],
    "parquet": ["--data-column", "v", "--ids-column", "i"],
}


@default_run(lambda fmt: fmt == "parquet")
@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_compressed_input_streams_within_the_memory_limit(bombs, tmp_path, fmt):
    path = bombs(fmt)
    assert path.stat().st_size < 8_000_000  # far under --memory-limit on disk ...
    assert decoded_bytes(str(path)) == 2 * ROWS * 8  # ... 800 MB once decoded
    out = tmp_path / "out.npy"
    code, peak, stderr = peak_mib(
        "sum", path, *OPTIONS[fmt], "-n", "1", "--memory-limit", "64MB", "-q", "-o", out
    )
    assert code == 0, stderr
    assert np.load(out).tolist() == [0.0]
    # Read whole it peaks above 1 GB; streamed, at the interpreter, pyarrow and 64 MB blocks.
    assert peak < 250, f"peak {peak:.0f} MiB"


def test_decoded_size_counts_only_the_chosen_columns(bombs, tmp_path):
    assert decoded_bytes(str(bombs("parquet")), ["v"]) == ROWS * 8
    npz = tmp_path / "pair.npz"  # the headers tell, however small the members
    np.savez_compressed(npz, data=np.zeros(100), ids=np.zeros(100, np.int8))
    assert decoded_bytes(str(npz), ["ids"]) == 100
    assert decoded_bytes(str(npz)) == 900


def test_arrow_file_size_comes_from_its_batch_lengths(tmp_path):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    path = tmp_path / "t.arrow"
    table = pa.table({"v": np.zeros(100_000), "w": np.zeros((100_000,), np.int8)})
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_file(path, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=10_000)
    assert path.stat().st_size < 100_000
    assert decoded_bytes(str(path)) == 100_000 * 9
    assert decoded_bytes(str(path), ["w"]) == 100_000


@pytest.mark.parametrize("name", ["d.csv.gz", "d.tsv.bz2", "d.csv.zst"])
def test_compressed_csv_always_streams(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"x")
    assert decoded_bytes(str(path)) == UNBOUNDED


def test_a_file_that_cannot_be_inspected_is_left_to_its_reader(tmp_path):
    path = tmp_path / "bad.npz"
    path.write_bytes(b"PK\x03\x04 not really a zip")
    assert decoded_bytes(str(path)) is None
    assert decoded_bytes(str(tmp_path / "missing.parquet")) is None


def test_npy_size_is_its_data_bytes_not_its_file_size(tmp_path):
    """The header (128 bytes here) is not data: shape x itemsize is what a read holds."""
    path = tmp_path / "d.npy"
    np.save(path, np.zeros((1000, 3), np.float32))
    assert path.stat().st_size == 12_000 + 128
    assert decoded_bytes(str(path)) == 12_000
    (tmp_path / "short.npy").write_bytes(path.read_bytes()[:200])  # truncated: its reader says so
    assert decoded_bytes(str(tmp_path / "short.npy")) == 12_000


@pytest.mark.parametrize("sparse", ["indices", "weights"])
def test_npy_memory_refusals_count_data_bytes(tmp_path, sparse):
    """A budget of exactly the data's bytes holds them; one byte less is refused, the two
    sizes in bytes when they round to the same text."""
    from click.testing import CliRunner

    from segcli.cli import cli
    from segcli.memory import human_bytes

    for name, array in {"d": np.zeros(1000), "i": np.arange(1000), "w": np.ones(1000)}.items():
        np.save(tmp_path / f"{name}.npy", array)
    d, i, w = (str(tmp_path / f"{n}.npy") for n in "diw")
    extra, fits = (["--indices", i], 8000) if sparse == "indices" else (["--weights", w], 24_000)
    args = ["sum", d, i, *extra, "-q", "-o", str(tmp_path / "out.npy"), "--memory-limit"]
    ran = CliRunner().invoke(cli, [*args, f"{fits}B"])
    assert ran.exit_code == 0, ran.stderr
    refused = CliRunner().invoke(cli, [*args, f"{fits - 1}B"])
    assert refused.exit_code == 2
    assert f"({fits:,} bytes)" in refused.stderr
    assert f"memory budget of {human_bytes(fits - 1)} ({fits - 1:,} bytes)" in refused.stderr


def write_arrow(path: Path, rows: int, kind: str, seed: int) -> None:
    """Columns v and w (float64) and s (ids below 1,000), in record batches of 4,096 rows (96
    KiB each; a streaming writer leaves batches as small)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    rng = np.random.default_rng(seed)
    table = pa.table(
        {"v": rng.random(rows), "w": rng.random(rows), "s": rng.integers(0, 1000, rows)}
    )
    with (ipc.new_file if kind == "file" else ipc.new_stream)(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=4096)


# Each reader of an Arrow file's batches: several data columns read together (a file), and
# the data column beside the --by keys (a stream).
STREAMED_ARROW = {
    "file": ["agg", "--data-column", "v,w", "--ids-column", "s", "-n", 1000, "--op", "sum"],
    "stream": ["sum", "--data-column", "v", "--by", "s"],
}


@pytest.mark.parametrize("kind", STREAMED_ARROW)
def test_streamed_arrow_memory_does_not_grow_with_the_file(tmp_path, kind):
    """A memory map keeps every page a read touched resident until it is closed: a streamed
    run reading the batches through one grew with the columns read (and the pages the kernel
    maps around them). Read into memory a batch at a time, its peak is a few batches'."""
    small, large = tmp_path / "small.arrow", tmp_path / "large.arrow"
    write_arrow(small, 800_000, kind, seed=1)  # about 19 MB
    write_arrow(large, 2_400_000, kind, seed=2)  # about 58 MB
    size = large.stat().st_size
    command, *options = STREAMED_ARROW[kind]
    options += ["-q", "--chunk-rows", 100_000, "-o"]
    peaks = []
    for path in (small, large):
        code, peak, stderr = peak_mib(command, path, *options, tmp_path / f"{path.stem}.parquet")
        assert code == 0, stderr
        peaks.append(peak)
    peak_small, peak_large = peaks
    # Through a map the large file's run peaked 37 MiB (a file) to 75 MiB (a stream: the data
    # and the keys each map it) above the small one's; read a batch at a time, 2 to 4 MiB.
    assert peak_large - peak_small < size / 3 / 2**20, (peak_small, peak_large, size)


def info_peaks(*paths):
    """The peak memory (MiB) of ``segcli info`` on each of ``paths``, each run succeeding."""
    peaks = []
    for path in paths:
        code, peak, stderr = peak_mib("info", path)
        assert code == 0, stderr
        peaks.append(peak)
    return peaks


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_arrow_info_memory_does_not_grow_with_the_file(tmp_path, kind):
    """``info`` reads each batch's row and null counts from its header: read by pyarrow
    through a memory map, the pages around every header stayed resident, so that the peak
    grew with the file."""
    small, large = tmp_path / "small.arrow", tmp_path / "large.arrow"
    write_arrow(small, 800_000, kind, seed=1)  # about 19 MB
    write_arrow(large, 2_400_000, kind, seed=2)  # about 58 MB
    size = large.stat().st_size
    peak_small, peak_large = info_peaks(small, large)
    # Through the map the large file's peak was 25 MiB above the small one's; now 0.1 MiB.
    assert peak_large - peak_small < size / 10 / 2**20, (peak_small, peak_large)


# JSON lines: two runs over up to 18 MB, about 5 s of the default run: the full matrix holds it.
@pytest.mark.parametrize("kind", ["arrow", pytest.param("jsonl", marks=pytest.mark.full_matrix)])
def test_info_from_stdin_memory_does_not_grow_with_the_stream(tmp_path, kind):
    """``info -`` reads an Arrow IPC stream a batch at a time, and JSON lines a block of
    lines at a time: kept whole to be counted, the large stream's peak was 1.8 (Arrow) or 0.8
    (JSON lines, parsed a block at a time from the bytes kept) times its size above the small
    one's. Parsing JSON lines, the peaks differ by a few MiB from run to run."""
    small, large = tmp_path / f"small.{kind}", tmp_path / f"large.{kind}"
    if kind == "arrow":
        write_arrow(small, 400_000, "stream", seed=1)  # about 10 MB
        write_arrow(large, 1_600_000, "stream", seed=2)  # about 38 MB
    else:
        write_text_table(small, 150_000, seed=1)  # about 4.5 MB
        write_text_table(large, 600_000, seed=2)  # about 18 MB
    size = large.stat().st_size
    peaks = []
    for path in (small, large):
        measured = run_measured("info", "-", stdin=path)
        assert measured.returncode == 0, measured.stderr
        peaks.append(measured.peak_bytes)
    peak_small, peak_large = peaks
    allowed = size / 10 if kind == "arrow" else size / 2
    assert peak_large - peak_small < allowed, (peak_small, peak_large, size)


def test_parquet_info_memory_does_not_grow_with_a_nested_column(tmp_path):
    """The null rows of a list column are counted from its data (its statistics count null
    items), now a row group at a time: read whole, the large file's info peaked 270 MiB above
    the small one's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    small, large = tmp_path / "small.parquet", tmp_path / "large.parquet"
    for path, rows in ((small, 1_000_000), (large, 7_000_000)):
        values = pa.array(np.zeros(rows * 4, np.float32))
        lists = pa.FixedSizeListArray.from_arrays(values, 4)
        pq.write_table(pa.table({"v": lists}), path, row_group_size=200_000)
    peak_small, peak_large = info_peaks(small, large)
    assert peak_large - peak_small < 100, (peak_small, peak_large)


def write_text_table(path: Path, rows: int, seed: int) -> None:
    """Columns v (float), s (integer) and k (text, every 7th row empty), as CSV, TSV or JSON
    lines by the suffix: about 17 bytes a row (31 as JSON lines)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(seed)
    keys = np.array(["north", "south", "east", "west", "up", "down", None], dtype=object)
    table = pa.table(
        {
            "v": rng.random(rows).round(4),
            "s": rng.integers(0, 1000, rows),
            "k": pa.array(keys[np.arange(rows) % 7]),
        }
    )
    if path.suffix == ".jsonl":
        frame = table.to_pandas()
        frame.to_json(path, orient="records", lines=True)
    else:
        delimiter = "\t" if path.suffix == ".tsv" else ","
        pcsv.write_csv(table, path, pcsv.WriteOptions(delimiter=delimiter))


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])  # TSV is read as CSV is
def test_text_info_memory_does_not_grow_with_the_file(tmp_path, suffix):
    """``info`` on CSV, TSV and JSON lines is read a block at a time. Read whole, the large
    file's peak was 3 (CSV) or 1.6 (JSON lines) times its size above the small one's; now
    the peaks differ by the CSV reader's threads' noise (up to 14 MiB here)."""
    rows = 150_000 if suffix == "jsonl" else 270_000
    small, large = tmp_path / f"small.{suffix}", tmp_path / f"large.{suffix}"
    write_text_table(small, rows, seed=1)  # about 4.5 MB
    write_text_table(large, rows * 4, seed=2)  # about 18 MB
    size = large.stat().st_size
    peak_small, peak_large = info_peaks(small, large)
    assert peak_large - peak_small < size / 2**20, (peak_small, peak_large, size)


_COUNTED_PEAK = """
import sys
import pyarrow.ipc  # before the first measure: counting may import it
from segcli.io.sizes import decoded_bytes
from segcli.io.tables import open_table

def peak():
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmHWM:"))) * 1024

before = peak()
assert open_table(sys.argv[1], "arrow").ipc_rows() == int(sys.argv[2])
decoded_bytes(sys.argv[1])
print(peak() - before)
"""


@pytest.mark.parametrize("kind", ["file", "stream"])
def test_counting_an_arrow_files_rows_keeps_none_of_it_resident(tmp_path, kind):
    """Counted on a memory map, the pages around each batch's header that the kernel maps
    with it stay resident: most of a file of small batches, at the start of every streamed
    run (its size is checked, and each column read counts the rows)."""
    path = tmp_path / "t.arrow"
    write_arrow(path, 1_200_000, kind, seed=3)  # about 29 MB
    done = subprocess.run(
        [sys.executable, "-c", _COUNTED_PEAK, str(path), "1200000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) < path.stat().st_size / 10, int(done.stdout)


def test_an_arrow_stream_on_a_pipe_given_by_path_streams_as_its_file_does(tmp_path):
    """An Arrow IPC stream on a pipe given by its path (``cat t.arrow | segcli sum
    /dev/stdin``) streams, as it does on ``-`` and as its file does: read into memory whole,
    the pipe's run peaked 1.2 times its size above the file's; now within a MiB of it.
    (JSON lines and CSV on a pipe stream too, tests/test_pipe_tables.py, but at sizes a test
    affords their streamed peak is pyarrow's readers' own, over a whole read's.)"""
    path = tmp_path / "t.arrow"
    write_arrow(path, 1_600_000, "stream", seed=2)  # about 38 MB
    options = ["--data-column", "v", "--ids-column", "s", "-n", 1000, "-q"]
    options += ["--memory-limit", "16MB", "-o", tmp_path / "out.npy"]
    from_file = run_measured("sum", path, *options)
    from_pipe = run_measured("sum", "/dev/stdin", *options, stdin=path, piped=True)
    assert from_file.returncode == from_pipe.returncode == 0, from_pipe.stderr
    size = path.stat().st_size
    peaks = from_file.peak_bytes, from_pipe.peak_bytes
    assert from_pipe.peak_bytes - from_file.peak_bytes < size / 3, (*peaks, size)
