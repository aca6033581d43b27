"""A progress bar on stderr for long runs: terminal only, and only after the first second."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: Runs shorter than this never show a bar.
DELAY_SECONDS = 1.0


@contextmanager
def progress_bar(*, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """Yield a ``(rows_done, rows_total)`` callback, or None when no bar should be drawn."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    started = time.perf_counter()
    state: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if "bar" not in state:
            if time.perf_counter() - started < DELAY_SECONDS:
                return
            state["bar"] = start_bar(total, started)
        bar, task = state["bar"]
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"][0].stop()


def start_bar(total: int, started: float, console: Any = None) -> tuple[Any, Any]:
    """A rich progress bar on stderr (or ``console``). A total of 0 or less is unknown (a
    stream on stdin): then only the rows done and the rate show, never a ``n/0 0%`` bar."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    known = total > 0
    columns: tuple[Any, ...] = (
        (
            TextColumn("rows"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
        )
        if known
        else (
            TextColumn("rows {task.completed:,.0f}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
        )
    )
    bar = Progress(*columns, console=console or Console(stderr=True), transient=True)
    bar.start()
    task = bar.add_task("rows", total=total if known else None, rate="")
    return _RateBar(bar, started, known), task


class _RateBar:
    """Wraps rich's Progress to show rows/s, which its own columns give only as bytes or items."""

    def __init__(self, bar: Any, started: float, known: bool) -> None:
        self.bar = bar
        self.started = started
        self.known = known

    def update(self, task: Any, *, completed: int, total: int) -> None:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        self.bar.update(
            task,
            completed=completed,
            total=total if self.known and total > 0 else None,
            rate=f"{completed / elapsed:,.0f} rows/s",
        )

    def stop(self) -> None:
        self.bar.stop()
