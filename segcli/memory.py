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


#: A cgroup limit at or above this is "no limit" (v1 writes 2**63 rounded down to a page).
_NO_LIMIT = 1 << 60


def available_bytes() -> int:
    """Memory a new allocation can have now: the host's (MemAvailable), or what is left under
    this process's cgroup limit (a container's) when that is less."""
    host = _host_available_bytes()
    room = cgroup_room_bytes()
    return host if room is None else min(host, room)


def cgroup_room_bytes(
    root: str = "/sys/fs/cgroup", membership: str = "/proc/self/cgroup"
) -> int | None:
    """Bytes left under the tightest memory limit of this process's cgroup and its parents
    (v2 ``memory.max`` less ``memory.current``, v1 ``memory.limit_in_bytes`` less
    ``memory.usage_in_bytes``); None where no limit is set."""
    rooms = []
    for folder, limit_name, usage_name in _cgroup_memory_folders(root, membership):
        limit = _read_int(os.path.join(folder, limit_name))
        if limit is not None and limit < _NO_LIMIT:
            usage = _read_int(os.path.join(folder, usage_name)) or 0
            rooms.append(max(0, limit - usage))
    return min(rooms) if rooms else None


def _cgroup_memory_folders(root: str, membership: str) -> list[tuple[str, str, str]]:
    """Folders that may hold this process's memory limits, innermost first. A container often
    mounts its own cgroup as the root, so the root is always tried too."""
    try:
        with open(membership, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    found = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            mounts = [(root, "memory.max", "memory.current")]
        elif "memory" in controllers.split(","):
            mounts = [
                (os.path.join(root, "memory"), "memory.limit_in_bytes", "memory.usage_in_bytes")
            ]
        else:
            continue
        for mount, limit_name, usage_name in mounts:
            for ancestor in _ancestors(path):
                found.append((os.path.join(mount, ancestor.lstrip("/")), limit_name, usage_name))
    return found


def _ancestors(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts), -1, -1)]


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # missing, or v2's "max" (no limit)
        return None


def _host_available_bytes() -> int:
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


#: Bytes per result value the JSON writer holds at its peak: the value's shortest text as a
#: NumPy string (up to 128 bytes), a Python float and its slot in the nested lists, and the
#: document's text before and after encoding (measured 175 to 206 bytes per value).
JSON_BYTES_PER_VALUE = 224


def writer_bytes(fmt: str | None, num_segments: int, values: int, itemsize: int) -> int:
    """Memory the writer of output format ``fmt`` needs on top of the finished result:
    ``values`` result values of ``itemsize`` bytes in ``num_segments`` rows. Text, CSV/TSV and
    .npy are written in bounded blocks (or straight from the array)."""
    if fmt == "json":
        return values * JSON_BYTES_PER_VALUE + num_segments * 32  # and the counts' list
    if fmt in ("parquet", "arrow", "npz"):
        # Arrow: the segment and count columns, and an encoded copy of the values; npz to a
        # pipe is built in memory first.
        return num_segments * 16 + values * itemsize
    return 0


def parse_size(text: str) -> int:
    """``"256MB"``, ``"2GB"``, ``"1.5GiB"``, ``"1000000"`` -> bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*((?:[KMGT]I?)?)B?\s*", text.upper())
    if not match:
        raise UsageError(f"--memory-limit {text!r} is not a size (e.g. 512MB, 2GB, 1.5GiB)")
    number, unit = match.groups()
    size = int(float(number) * _UNITS[unit])
    if size <= 0:
        # Read as a budget of nothing, 0 would stream every input a row at a time: a user who
        # wrote it more likely meant "no limit", which tools often spell 0.
        raise UsageError(
            f"--memory-limit {text!r}: give a size above 0 bytes (without the option segcli "
            "picks one from the free memory)"
        )
    return size


def human_bytes(count: float) -> str:
    """Bytes for people: ``1.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} PiB"


def over_budget(size: int, budget: int) -> tuple[str, str]:
    """``size`` and ``budget`` for a message saying one is over the other: in bytes too when
    the two round to the same text ("7.8 KiB over 7.8 KiB" would say nothing)."""
    size_text, budget_text = human_bytes(size), human_bytes(budget)
    if size_text == budget_text:
        return f"{size_text} ({size:,} bytes)", f"{budget_text} ({budget:,} bytes)"
    return size_text, budget_text
