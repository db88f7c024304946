"""What machine a benchmark ran on: its first printed line, so figures from two
machines are never mixed."""

from __future__ import annotations

import os
import platform

#: vector ISA extensions worth naming, widest first
_ISA_FLAGS = ("avx512f", "avx2", "fma", "avx", "sse4_2", "asimd", "sve")
#: set by avx2_host.py in the processes it runs: the ISA prefix CPUID hides there
HIDDEN_ISA_ENV = "HETEROCC_BENCH_HIDDEN_ISA"


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


def cpu_target(target=None):
    """The CPU description (``heterocc.targets.llvm.CPUDescription``) the ``llvm`` part of
    ``target`` (a target string such as ``"vta,llvm -mattr=-avx512f"``, a list, or None:
    the host) generates code for; None when it has no ``llvm`` part."""
    from heterocc.targets import parse_targets
    from heterocc.targets.llvm import LLVMTarget, host_cpu

    if target is None:
        return host_cpu()
    for item in parse_targets(target):
        if isinstance(item, LLVMTarget):
            return item.cpu
        if item == "llvm":
            return host_cpu()
    return None


def describe(target=None) -> str:
    """``CPU: <name>, <cores> cores, ISA: <extensions>; code for: <cpu> <isa> ...``: the
    machine, from /proc/cpuinfo where the system has one, else from ``platform``, then
    the CPU and ISA the code is generated for (``target``'s ``llvm`` description, see
    :func:`cpu_target`; default: the host)."""
    info = _cpuinfo()
    name = info.get("model name") or platform.processor() or platform.machine()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    hidden = os.environ.get(HIDDEN_ISA_ENV, "")
    if hidden:  # run under avx2_host.py: what the libraries see, and what they don't
        flags = {f for f in flags if not f.startswith(hidden)}
    isa = [f for f in _ISA_FLAGS if f in flags] or [platform.machine()]
    line = f"CPU: {name}, {os.cpu_count()} cores, ISA: {' '.join(isa)}"
    if hidden:
        line += (f" ({hidden} hidden from CPUID by benchmarks/avx2_host.py: "
                 "the same silicon, not an AVX2 machine)")
    try:
        description = cpu_target(target)
    except ImportError:  # heterocc not importable: the machine alone
        return line
    if description is None:
        return f"{line}; code for: {target} (no CPU code)"
    return (f"{line}; code for: {description.cpu} {description.isa} "
            f"({description.vector_bytes * 8}-bit x {description.vector_registers} registers, "
            f"{'FMA' if description.fma else 'no FMA'}, {description.triple})")
