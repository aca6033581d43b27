"""The progress bar: only on a terminal, only after the first second, silent otherwise."""

from __future__ import annotations

import io

from segcli import progress


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())
    with progress.progress_bar(enabled=True) as update:
        assert update is None


def test_no_bar_when_disabled(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", Terminal())
    with progress.progress_bar(enabled=False) as update:
        assert update is None


def test_bar_shows_rows_and_rate_on_a_terminal_after_the_delay(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.0)
    with progress.progress_bar(enabled=True) as update:
        assert update is not None
        update(500, 1000)
        update(1000, 1000)
    assert "rows" in terminal.getvalue()


def _rendered(total: int, done: int) -> str:
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    bar, task = progress.start_bar(total, 0.0, console=console)
    bar.update(task, completed=done, total=total)
    bar.bar.refresh()
    text = out.getvalue()
    bar.stop()
    return text


def test_unknown_total_shows_rows_and_rate_only():
    text = _rendered(0, 19_922_944)
    assert "rows 19,922,944" in text and "rows/s" in text
    assert "/0" not in text and "0%" not in text


def test_known_total_shows_done_of_total_and_percent():
    text = _rendered(1000, 500)
    assert "500/1000" in text and "50%" in text


def _recorded_bar(monkeypatch, calls: list[tuple[bool, list[tuple[int, int]]]]) -> None:
    """``progress_bar`` as a terminal's, recording whether it was enabled and each update."""
    from contextlib import contextmanager

    @contextmanager
    def recorded(*, enabled: bool):
        updates: list[tuple[int, int]] = []
        calls.append((enabled, updates))
        yield (lambda done, total: updates.append((done, total))) if enabled else None

    monkeypatch.setattr(progress, "progress_bar", recorded)


def test_a_streamed_check_shows_its_rows_as_a_streamed_run_does(tmp_path, monkeypatch):
    """``check`` streams as the ops do, and now shows the same bar (it showed none, and
    refused --no-progress)."""
    import numpy as np
    from click.testing import CliRunner

    from segcli.cli import cli

    np.save(tmp_path / "d.npy", np.ones(1000))
    np.save(tmp_path / "i.npy", np.arange(1000) % 7)
    calls: list[tuple[bool, list[tuple[int, int]]]] = []
    _recorded_bar(monkeypatch, calls)
    args = ["check", str(tmp_path / "d.npy"), str(tmp_path / "i.npy"), "--chunk-rows", "300"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.stderr
    assert calls == [(True, [(300, 1000), (600, 1000), (900, 1000), (1000, 1000)])]
    result = CliRunner().invoke(cli, [*args, "--no-progress"])
    assert result.exit_code == 0, result.stderr
    assert calls[1] == (False, [])
