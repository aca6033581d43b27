"""A --scheduler address that is not a Dask scheduler fails within the bound, in one line."""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from segcli.cli import cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("distributed") is None, reason="dask.distributed is not installed"
)

HTTP_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def answer_http(conn: socket.socket) -> None:
    conn.recv(65536)  # an HTTP server speaks only when spoken to
    conn.sendall(HTTP_REPLY)


def answer_junk(conn: socket.socket) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n" + bytes(range(256)) * 16)


def hang_up(conn: socket.socket) -> None:
    conn.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def server() -> Iterator[Callable[[Callable[[socket.socket], None]], str]]:
    """Start a loopback TCP server that handles each connection with the given function."""
    listeners: list[socket.socket] = []

    def start(handle: Callable[[socket.socket], None]) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                with conn:
                    try:
                        handle(conn)
                        conn.settimeout(5)
                        conn.recv(1)  # keep the line open until the client hangs up
                    except OSError:
                        pass

        threading.Thread(target=serve, daemon=True).start()
        return f"tcp://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in listeners:
        listener.close()


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    np.save(tmp_path / "data.npy", np.arange(4.0))
    np.save(tmp_path / "ids.npy", np.array([0, 0, 1, 1]))
    return [str(tmp_path / "data.npy"), str(tmp_path / "ids.npy")]


def run(inputs: list[str], *options: str, out: Path):
    args = ["sum", *inputs, "-q", "-o", str(out), *options]
    started = time.perf_counter()
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    return result, time.perf_counter() - started


def assert_one_line(result, code: int, message: str, out: Path) -> None:
    assert result.exit_code == code, result.output
    assert result.stderr.count("Error:") == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_an_http_port_fails_within_the_bound(server, inputs, tmp_path, monkeypatch):
    from segcli.drivers import dask as distributed

    monkeypatch.setattr(distributed, "CONNECT_TIMEOUT_S", 2)
    address = server(answer_http)
    out = tmp_path / "out.npy"
    result, seconds = run(inputs, "--engine", "dask", "--scheduler", address, out=out)
    assert seconds < 6
    assert_one_line(result, 6, f"Error: no Dask scheduler answered at {address} within 2 s", out)
    assert result.stderr.count("\n") == 1


def test_a_port_answering_other_bytes_is_not_a_scheduler(server, inputs, tmp_path):
    address = server(answer_junk)
    out = tmp_path / "out.npy"
    result, seconds = run(inputs, "--engine", "dask", "--scheduler", address, out=out)
    assert seconds < 10
    assert_one_line(result, 6, f"Error: {address} is not a Dask scheduler: it answered b'SSH", out)
    assert result.stderr.count("\n") == 1


def test_a_port_that_hangs_up_is_not_a_scheduler(server, inputs, tmp_path):
    address = server(hang_up)
    out = tmp_path / "out.npy"
    result, _ = run(inputs, "--engine", "dask", "--scheduler", address, out=out)
    assert_one_line(result, 6, f"Error: {address} closed the connection", out)


# "": typed, as a script's unset variable gives it; not "none given", so no local cluster.
@pytest.mark.parametrize("address", ["garbage!!", "tcp://host:99999", "tcp://a b:1", ""])
def test_a_malformed_address_is_a_usage_error_at_once(inputs, tmp_path, address):
    out = tmp_path / "out.npy"
    result, seconds = run(inputs, "--engine", "dask", "--scheduler", address, out=out)
    assert seconds < 5
    assert_one_line(result, 2, f"Error: bad Dask scheduler address {address!r}", out)


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:", "tcp://127.0.0.1:8786/", " tcp://h:1"])
def test_a_malformed_address_shows_the_form_expected(inputs, tmp_path, address):
    """Not the parser's words ("invalid literal for int()"), nor "not tcp://" of " tcp"."""
    out = tmp_path / "out.npy"
    result, _ = run(inputs, "--engine", "dask", "--scheduler", address, out=out)
    expected = f"Error: bad Dask scheduler address {address!r} (expected tcp://HOST:PORT, e.g. "
    assert_one_line(result, 2, expected, out)


def test_scheduler_without_the_dask_engine_is_refused(inputs, tmp_path):
    out = tmp_path / "out.npy"
    result, _ = run(inputs, "--scheduler", "tcp://127.0.0.1:8786", out=out)
    assert_one_line(result, 2, "Error: --scheduler applies to --engine dask only", out)


def test_the_scheduler_variable_alone_does_not_refuse_other_engines(inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:8786")
    out = tmp_path / "out.npy"
    result, _ = run(inputs, "--engine", "numpy", out=out)
    assert result.exit_code == 0, result.output
    assert np.load(out).tolist() == [1.0, 5.0]
