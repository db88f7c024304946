"""What machine a benchmark ran on: its first printed line, so figures from two
machines are never mixed."""

from __future__ import annotations

import os
import platform

#: vector ISA extensions worth naming, widest first
_ISA_FLAGS = ("avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "avx2", "fma", "avx", "sse4_2",
              "asimd", "asimddp", "sve")
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
    # the int8 kernels' instructions: matrix tiles, or the vector dot product's form
    int8 = "int8 on AMX tiles" if {"amx-tile", "amx-int8"} <= description.features \
        else "int8 on VNNI" if description.features & {"avx512vnni", "avxvnni"} \
        else None
    return (f"{line}; code for: {description.cpu} {description.isa} "
            f"({description.vector_bytes * 8}-bit x {description.vector_registers} registers, "
            f"{'FMA' if description.fma else 'no FMA'}"
            f"{', ' + int8 if int8 else ''}, {description.triple})")


#: A cache line bounced between two threads pinned to two CPUs: prints the round trip.
_ROUND_TRIP_SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile int64_t line[8] __attribute__((aligned(64)));
static long trips;
static int cpus[2];

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *answer(void *unused) {
    (void)unused;
    pin(cpus[1]);
    for (long i = 0; i < trips; ++i) {
        while (line[0] != 2 * i + 1) {}
        line[0] = 2 * i + 2;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    cpus[0] = atoi(argv[1]);
    cpus[1] = atoi(argv[2]);
    trips = atol(argv[3]);
    pthread_t other;
    pthread_create(&other, NULL, answer, NULL);
    pin(cpus[0]);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (long i = 0; i < trips; ++i) {
        line[0] = 2 * i + 1;
        while (line[0] != 2 * i + 2) {}
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    pthread_join(other, NULL);
    printf("%.0f\n", ((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)) / trips);
    return 0;
}
"""


def core_round_trip_ns(trips: int = 20000) -> int | None:
    """Nanoseconds for a cache line to go from one CPU to another and back, between the
    first two CPUs this process may run on: more between cores that share no cache
    (another die, another socket) than between cores that do. A virtual machine's CPUs
    may move between such cores while it runs: the 2-core Zen 5 guest of session 33 had
    its two 100 ns apart for seconds at a time and 400 ns for others, and two-thread
    figures moved with them (MobileNetV2 int8: 0.79 against 1.50 ms), so the zoo prints
    the distance beside each model's figures. None where it cannot tell (one CPU, no C
    compiler, no affinity calls)."""
    import hashlib
    import subprocess
    import tempfile
    from pathlib import Path

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2:
        return None
    try:
        from heterocc.sdk import CompileError
        from heterocc.targets.llvm import runtime
    except ImportError:
        return None
    try:

        folder = Path(tempfile.gettempdir()) / f"heterocc-bench-{os.getuid()}"
        folder.mkdir(exist_ok=True)
        digest = hashlib.sha256(_ROUND_TRIP_SOURCE.encode()).hexdigest()[:12]
        program = folder / f"core_round_trip_{digest}"
        if not program.exists():
            source = folder / "core_round_trip.c"
            source.write_text(_ROUND_TRIP_SOURCE)
            staged = folder / f"core_round_trip.{os.getpid()}"
            runtime.run_compiler(["-O2", "-pthread", str(source), "-o", str(staged)],
                                 "building the core round-trip probe")
            os.replace(staged, program)
        result = subprocess.run([str(program), str(cpus[0]), str(cpus[1]), str(trips)],
                                capture_output=True, text=True, timeout=30)
        return int(result.stdout) if result.returncode == 0 else None
    except (CompileError, OSError, ValueError, subprocess.SubprocessError):
        return None
