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
            state["bar"] = _start_bar(total, started)
        bar, task = state["bar"]
        bar.update(task, completed=done, total=total)

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"][0].stop()


def _start_bar(total: int, started: float) -> tuple[Any, Any]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("rows"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    bar.start()
    task = bar.add_task("rows", total=total, rate="")
    return _RateBar(bar, started), task


class _RateBar:
    """Wraps rich's Progress to show rows/s, which its own columns give only as bytes or items."""

    def __init__(self, bar: Any, started: float) -> None:
        self.bar = bar
        self.started = started

    def update(self, task: Any, *, completed: int, total: int) -> None:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        self.bar.update(
            task, completed=completed, total=total, rate=f"{completed / elapsed:,.0f} rows/s"
        )

    def stop(self) -> None:
        self.bar.stop()
