"""Memory sizes: what this machine has free, and sizes written by people (``256MB``)."""

from __future__ import annotations

import os
import re

from segcli.errors import UsageError

_UNITS = {
    "": 1,
    "B": 1,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "KI": 2**10,
    "MI": 2**20,
    "GI": 2**30,
    "TI": 2**40,
}


def available_bytes() -> int:
    """Memory available to a new allocation now (MemAvailable), or physical memory."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def parse_size(text: str) -> int:
    """``"256MB"``, ``"2GB"``, ``"1.5GiB"``, ``"1000000"`` -> bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*((?:[KMGT]I?)?)B?\s*", text.upper())
    if not match:
        raise UsageError(f"--memory-limit {text!r} is not a size (e.g. 512MB, 2GB, 1.5GiB)")
    number, unit = match.groups()
    return int(float(number) * _UNITS[unit])


def human_bytes(count: float) -> str:
    """Bytes for people: ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} PiB"
