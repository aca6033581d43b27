"""Atomic file output: readers of the target see the old file or the complete new one.

The work is done by :mod:`segcli.io.commit`, which commits several outputs together; this
module keeps the one-file form, :func:`atomic_output`, where callers have always found it.
"""

from __future__ import annotations

from segcli.io.commit import TEMP_PREFIX, atomic_output

__all__ = ["TEMP_PREFIX", "atomic_output"]
