"""An older copy of segcli run beside the current one: old against new in the same rounds.

Make the copy with ``git archive REV segcli | tar -x -C TREE``; the harnesses that take
``--against TREE`` run its package as one more contender.
"""

from __future__ import annotations

import os
import sys

#: Runs ``segcli`` from the first folder of PYTHONPATH, after checking that it did.
FROM_TREE = (
    "import os, segcli; "
    "assert segcli.__file__.startswith(os.environ['PYTHONPATH']), segcli.__file__; "
    "runpy.run_module('segcli', run_name='__main__')"
)


def older_segcli(tree: str, args: list[str], code: str | None = None) -> list[str]:
    """The command that runs ``segcli ARGS`` from ``tree`` (``code``: a Python program that
    ends by running :data:`FROM_TREE`, instead of the plain one)."""
    if code is None:
        code = f"import sys, runpy; sys.argv = ['segcli', *sys.argv[1:]]; {FROM_TREE}"
    # -P: no current folder ahead of PYTHONPATH (from the repository, the newer package).
    return ["env", f"PYTHONPATH={os.path.abspath(tree)}", sys.executable, "-P", "-c", code, *args]
