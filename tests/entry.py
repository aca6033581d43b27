"""Run segcli's own entry point in this process, as the console script does.

Unlike click's ``CliRunner.invoke``, this goes through ``segcli.cli.main``: one-line usage
errors, named exit codes and the signal handlers (restored afterwards) are all the user's.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Any

from click.testing import CliRunner

from segcli.cli import main
from segcli.signals import HANDLED


@dataclass
class Ran:
    exit_code: int
    stdout: str
    stderr: str


def run_main(*args: Any) -> Ran:
    """``segcli ARGS`` through its entry point; its exit code and both streams."""
    saved = {signum: signal.getsignal(signum) for signum in HANDLED}
    with CliRunner().isolation() as (stdout, stderr, _):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exit:
            code = int(exit.code or 0)
        finally:
            for signum, handler in saved.items():
                signal.signal(signum, handler)
        return Ran(code, stdout.getvalue().decode(), stderr.getvalue().decode())
