"""Run a command as if on an AVX2 host: on an x86 machine with AVX-512, every library in
the command's processes (NumPy's BLAS, ONNX Runtime's MLAS, LLVM's host detection,
heterocc's loader) is told by CPUID that the CPU has no AVX-512, so each picks the
kernels it would pick on an AVX2 machine. Usage:

    python benchmarks/avx2_host.py python benchmarks/models_vs_ort.py
    python benchmarks/avx2_host.py --check      # says whether hiding works here

Why: a benchmark compared with ONNX Runtime or NumPy on an AVX-512 machine measures
their AVX-512 kernels, whatever target heterocc's code was generated for; their
libraries pick kernels from CPUID at run time and offer no switch. This makes the
comparison ISA for ISA. It is the same silicon (caches, clocks, cores) — not a figure
from an AVX2 machine, and the figures it gives say so (``machine.describe``).

How: Linux's CPUID faulting (``arch_prctl(ARCH_SET_CPUID, 0)``, Intel CPUs and most
hypervisors; the ``cpuid_fault`` flag in /proc/cpuinfo) makes the CPUID instruction
raise SIGSEGV. A small library preloaded into every process of the command turns
faulting on before anything else runs (threads inherit it; exec resets it and the
preload sets it again), and its SIGSEGV handler executes the real CPUID with faulting
briefly off, clears the AVX-512 feature bits, and steps over the instruction. Any other
SIGSEGV gets the default action, as before. (A library that installs its own SIGSEGV
handler later, such as Python's ``faulthandler``, would break this: don't run pytest
under it.) The XCR0 register (``xgetbv``) still shows AVX-512 state enabled; every
library checks CPUID's feature bits as well, so hiding these suffices.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from machine import HIDDEN_ISA_ENV  # beside this script

#: the preloaded library: CPUID faulting on, and a handler clearing leaf 7's AVX-512 bits
#: (every AVX-512 subset, and AVX10, which implies it)
SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* leaf 7, subleaf 0 */
#define EBX_AVX512 ((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | \
                    (1u << 28) | (1u << 30) | (1u << 31))
#define ECX_AVX512 ((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14))
#define EDX_AVX512 ((1u << 2) | (1u << 3) | (1u << 8) | (1u << 23))
/* leaf 7, subleaf 1: AVX512_BF16 (eax 5), AVX10 (edx 19) */
#define EAX1_AVX512 (1u << 5)
#define EDX1_AVX10 (1u << 19)

static void cpuid_faulting(int on) { syscall(SYS_arch_prctl, ARCH_SET_CPUID, on ? 0 : 1); }

static void on_fault(int signal_number, siginfo_t *info, void *context) {
    greg_t *regs = ((ucontext_t *)context)->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    (void)info;
    if (ip[0] != 0x0f || ip[1] != 0xa2) {  /* not CPUID: fault again, as without us */
        struct sigaction plain = {0};
        plain.sa_handler = SIG_DFL;
        sigaction(signal_number, &plain, NULL);
        return;
    }
    unsigned leaf = (unsigned)regs[REG_RAX], sub = (unsigned)regs[REG_RCX];
    unsigned a, b, c, d;
    cpuid_faulting(0);
    __cpuid_count(leaf, sub, a, b, c, d);
    cpuid_faulting(1);
    if (leaf == 7 && sub == 0) { b &= ~EBX_AVX512; c &= ~ECX_AVX512; d &= ~EDX_AVX512; }
    if (leaf == 7 && sub == 1) { a &= ~EAX1_AVX512; d &= ~EDX1_AVX10; }
    regs[REG_RAX] = a; regs[REG_RBX] = b; regs[REG_RCX] = c; regs[REG_RDX] = d;
    regs[REG_RIP] += 2;
}

__attribute__((constructor)) static void hide_avx512(void) {
    struct sigaction action = {0};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, NULL);
    cpuid_faulting(1);
}
"""

#: a probe run under the shim: the feature LLVM's host detection (CPUID) reports
_PROBE = ("import llvmlite.binding as llvm; "
          "print(llvm.get_host_cpu_features().get('avx512f', False))")


def shim_library() -> Path:
    """The preloadable shim, compiled once per source into a cache folder."""
    digest = hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:16]
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "heterocc"
    library = folder / f"hide_avx512_{digest}.so"
    if not library.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as work:
            source = Path(work) / "hide_avx512.c"
            source.write_text(SHIM_SOURCE)
            built = Path(work) / library.name
            subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(built), str(source)],
                           check=True)
            os.replace(built, library)
    return library


def hidden_environment() -> dict[str, str]:
    """``os.environ`` plus the preload of the shim (and ``machine.HIDDEN_ISA_ENV``)."""
    environment = dict(os.environ)
    preload = [str(shim_library())]
    if environment.get("LD_PRELOAD"):
        preload.append(environment["LD_PRELOAD"])
    environment["LD_PRELOAD"] = " ".join(preload)
    environment[HIDDEN_ISA_ENV] = "avx512"
    return environment


def hiding_works() -> tuple[bool, str]:
    """Whether a process under the shim sees no AVX-512, and why not when it doesn't."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "avx512f" not in flags:
        return False, "this CPU has no AVX-512 to hide: run the command as it is"
    if "cpuid_fault" not in flags:
        return False, "this CPU (or its hypervisor) offers no CPUID faulting"
    probe = subprocess.run([sys.executable, "-c", _PROBE], env=hidden_environment(),
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "False":
        return False, f"a process under the shim still sees AVX-512: {probe.stderr[-300:]}"
    return True, "AVX-512 hidden from CPUID"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    works, why = hiding_works()
    if argv == ["--check"]:
        print(why)
        return 0 if works else 1
    if not works:
        print(f"avx2_host: {why}", file=sys.stderr)
        return 1
    return subprocess.run(argv, env=hidden_environment()).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
