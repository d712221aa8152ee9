"""How much memory Systolix lets one run or one input file take.

The emulator allocates its memories, and the readers their arrays, only after checking that the
total fits ``memory_limit()`` bytes; past it the run is an error that states the limit and what
the model would need, before anything is allocated. The limit is three quarters of the memory
this machine (or its container, or the process's address-space limit) has, or the value of the
environment variable ``SYSTOLIX_MEMORY_LIMIT`` (bytes, or with a suffix: ``512M``, ``8G``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from systolix.errors import SystolixError

ENV_VAR = "SYSTOLIX_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class MemoryLimitError(SystolixError):
    """A run or a file would need more memory than the limit allows."""


def _machine_memory() -> int | None:
    """Bytes of memory this process can use: physical RAM, its cgroup's limit, RLIMIT_AS."""
    candidates = []
    try:
        candidates.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for cgroup in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(cgroup).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            candidates.append(int(text))
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            candidates.append(soft)
    except (ImportError, ValueError, OSError):
        pass
    return min(candidates) if candidates else None


def parse_size(text: str) -> int:
    """``"8G"`` -> 8 GiB in bytes; plain digits are bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise SystolixError(f"{ENV_VAR}={text!r}: expected a size in bytes, e.g. 8G, 512M or 1000000000")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise SystolixError(f"{ENV_VAR}={text!r}: the limit must be positive")
    return value


def memory_limit() -> int:
    """The most bytes one emulator run (all its memories, the whole batch) or one input file may take."""
    text = os.environ.get(ENV_VAR)
    if text:
        return parse_size(text)
    machine = _machine_memory()
    return (machine // 4 * 3) if machine else (8 << 30)


def limit_source() -> str:
    """Where ``memory_limit()`` comes from, for messages."""
    if os.environ.get(ENV_VAR):
        return f"set by {ENV_VAR}"
    return f"3/4 of this machine's memory; set {ENV_VAR} to change it"


def format_bytes(n: int | float) -> str:
    """1536 -> '1.5 KiB'."""
    n = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{int(n):,} bytes" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover
