"""What machine a benchmark ran on: its first printed line, so figures from two
machines are never mixed."""

from __future__ import annotations

import os
import platform

#: vector ISA extensions worth naming, widest first
_ISA_FLAGS = ("avx512f", "avx2", "fma", "avx", "sse4_2", "asimd", "sve")


def _cpuinfo() -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def describe() -> str:
    """``CPU: <name>, <cores> cores, ISA: <extensions>``, from /proc/cpuinfo where the
    system has one, else from ``platform``."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    isa = [f for f in _ISA_FLAGS if f in flags] or [platform.machine()]
    return f"CPU: {name}, {os.cpu_count()} cores, ISA: {' '.join(isa)}"
