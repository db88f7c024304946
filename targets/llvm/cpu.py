"""CPU target descriptions: which CPU the ``llvm`` target generates code for.

A description is written as TVM writes one::

    llvm -mcpu=znver3 -mattr=+avx2,-avx512f -mtriple=x86_64-linux-gnu -num-cores=8

Every option is optional; what is left out is the host's (llvmlite reports its CPU
name, features and triple). From the description come the facts the schedules tile
by (:attr:`CPUDescription.vector_bytes`, :attr:`~CPUDescription.vector_registers`,
FMA, cache sizes, cores) and the exact feature string LLVM generates code with.

Features are LLVM's names (``avx512f``, ``fma``, ``neon``). ``-mattr`` adds (``+f``)
or removes (``-f``) features; removing one removes what builds on it (``-avx512f``
removes every AVX-512 extension, ``-avx`` removes AVX2, FMA and AVX-512), adding one
adds what it needs (``+avx512f`` adds AVX2 and FMA).

A named CPU (``-mcpu=NAME`` other than the host's) takes its features and cache sizes
from the family tables below (:data:`CPU_FAMILIES`): *documented defaults*, not a
measurement of any particular part. On the host's own architecture every LLVM
feature outside the description is explicitly switched off, so the code never uses an
instruction the description (and so an artifact's record) does not name.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import llvmlite.binding as llvm
import numpy as np

from heterocc.sdk import TargetError
from heterocc.sdk.registry import parse_target_spec

from .int8_tiles import request_tile_permission

# --- feature sets ---------------------------------------------------------------

#: x86-64 micro-architecture levels (the psABI's, as LLVM names their features).
X86_64_V1 = frozenset({"64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2"})
X86_64_V2 = X86_64_V1 | {"cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3",
                         "crc32"}
X86_64_V3 = X86_64_V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe",
                         "xsave"}
X86_64_V4 = X86_64_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

_INTEL_CLIENT = frozenset({"aes", "pclmul", "rdrnd", "fsgsbase", "xsaveopt", "prfchw"})
_SKYLAKE = _INTEL_CLIENT | {"adx", "rdseed", "clflushopt", "xsavec", "xsaves"}
_ICELAKE = _SKYLAKE | {"avx512vnni", "avx512vbmi", "avx512vbmi2", "avx512bitalg",
                       "avx512vpopcntdq", "avx512ifma", "gfni", "vaes", "vpclmulqdq",
                       "rdpid", "clwb", "sha"}
_SAPPHIRE = _ICELAKE | {"avx512bf16", "avx512fp16", "avxvnni", "amx-tile", "amx-int8",
                        "amx-bf16", "movdiri", "movdir64b", "serialize", "cldemote"}
_ZEN = frozenset({"aes", "pclmul", "rdrnd", "fsgsbase", "xsaveopt", "prfchw", "adx",
                  "rdseed", "clflushopt", "xsavec", "xsaves", "sha", "sse4a", "clzero"})
_ZEN3 = _ZEN | {"vaes", "vpclmulqdq", "rdpid", "clwb"}
_ZEN4 = _ZEN3 | {"avx512vnni", "avx512vbmi", "avx512vbmi2", "avx512bitalg",
                 "avx512vpopcntdq", "avx512ifma", "avx512bf16", "gfni"}
_ARM = frozenset({"neon", "fp-armv8"})


@dataclass(frozen=True)
class CPUFamily:
    """Defaults of a named CPU: its features and cache sizes in bytes (L1d and L2 of one
    core, the L3 of a typical part). Documented defaults, not a measurement.

    ``wide_dot_loads``: where known, the loads per 512-bit multiply-accumulate (an 8-bit
    dot product) the core sustains beside them, as ``benchmarks/int8_tile_loads.py``
    measures it: a register tile that loads more per instruction runs at the loads'
    pace, not the multiplies' (:attr:`CPUDescription.dot_load_budget`). None where the
    loads were never found to bind (a core that multiplies one 512-bit vector a cycle,
    as Zen 4 and Intel's cores do, loads two or more in that time)."""

    features: frozenset[str]
    l1d: int
    l2: int
    l3: int
    wide_dot_loads: float | None = None


_K, _M = 1 << 10, 1 << 20

#: named CPUs (LLVM's names) and their defaults; other names are refused (the host's own
#: name is always accepted: its features and caches are measured).
CPU_FAMILIES: dict[str, CPUFamily] = {
    "x86-64": CPUFamily(X86_64_V1, 32 * _K, 256 * _K, 8 * _M),
    "x86-64-v2": CPUFamily(X86_64_V2, 32 * _K, 256 * _K, 8 * _M),
    "x86-64-v3": CPUFamily(X86_64_V3, 32 * _K, 256 * _K, 8 * _M),
    "x86-64-v4": CPUFamily(X86_64_V4, 32 * _K, 1 * _M, 32 * _M),
    "nehalem": CPUFamily(X86_64_V2, 32 * _K, 256 * _K, 8 * _M),
    "sandybridge": CPUFamily(X86_64_V2 | _INTEL_CLIENT | {"avx", "xsave"},
                             32 * _K, 256 * _K, 8 * _M),
    "haswell": CPUFamily(X86_64_V3 | _INTEL_CLIENT, 32 * _K, 256 * _K, 8 * _M),
    "broadwell": CPUFamily(X86_64_V3 | _INTEL_CLIENT | {"adx", "rdseed"},
                           32 * _K, 256 * _K, 8 * _M),
    "skylake": CPUFamily(X86_64_V3 | _SKYLAKE, 32 * _K, 256 * _K, 8 * _M),
    "alderlake": CPUFamily(X86_64_V3 | _SKYLAKE | {"avxvnni", "gfni", "vaes", "vpclmulqdq",
                                                   "sha", "clwb"},
                           48 * _K, 1280 * _K, 30 * _M),
    "skylake-avx512": CPUFamily(X86_64_V4 | _SKYLAKE | {"clwb"}, 32 * _K, 1 * _M, 32 * _M),
    "cascadelake": CPUFamily(X86_64_V4 | _SKYLAKE | {"clwb", "avx512vnni"},
                             32 * _K, 1 * _M, 32 * _M),
    "cooperlake": CPUFamily(X86_64_V4 | _SKYLAKE | {"clwb", "avx512vnni", "avx512bf16"},
                            32 * _K, 1 * _M, 32 * _M),
    "icelake-client": CPUFamily(X86_64_V4 | _ICELAKE, 48 * _K, 512 * _K, 8 * _M),
    "icelake-server": CPUFamily(X86_64_V4 | _ICELAKE, 48 * _K, 1280 * _K, 48 * _M),
    "tigerlake": CPUFamily(X86_64_V4 | _ICELAKE, 48 * _K, 1280 * _K, 12 * _M),
    "rocketlake": CPUFamily(X86_64_V4 | _ICELAKE, 48 * _K, 512 * _K, 16 * _M),
    "sapphirerapids": CPUFamily(X86_64_V4 | _SAPPHIRE, 48 * _K, 2 * _M, 64 * _M),
    "emeraldrapids": CPUFamily(X86_64_V4 | _SAPPHIRE, 48 * _K, 2 * _M, 64 * _M),
    "graniterapids": CPUFamily(X86_64_V4 | _SAPPHIRE, 48 * _K, 2 * _M, 64 * _M),
    "znver1": CPUFamily(X86_64_V3 | _ZEN, 32 * _K, 512 * _K, 8 * _M),
    "znver2": CPUFamily(X86_64_V3 | _ZEN | {"clwb", "rdpid"}, 32 * _K, 512 * _K, 16 * _M),
    "znver3": CPUFamily(X86_64_V3 | _ZEN3, 32 * _K, 512 * _K, 32 * _M),
    "znver4": CPUFamily(X86_64_V4 | _ZEN4, 32 * _K, 1 * _M, 32 * _M),
    # Zen 5 multiplies two 512-bit vectors a cycle: a tile loading a weight per dot
    # product runs at 0.87-0.92 of its peak, 0.93-0.96 loads an instruction sustained
    # (int8_tile_loads.py, EPYC, one thread; 0.9 rounds down)
    "znver5": CPUFamily(X86_64_V4 | _ZEN4 | {"avx512vp2intersect", "avxvnni", "movdiri",
                                             "movdir64b", "prefetchi"},
                        48 * _K, 1 * _M, 32 * _M, wide_dot_loads=0.9),
    "generic": CPUFamily(_ARM, 64 * _K, 1 * _M, 32 * _M),
    "cortex-a53": CPUFamily(_ARM, 32 * _K, 256 * _K, 1 * _M),
    "cortex-a72": CPUFamily(_ARM, 32 * _K, 512 * _K, 2 * _M),
    "cortex-a76": CPUFamily(_ARM | {"dotprod"}, 64 * _K, 512 * _K, 4 * _M),
    "neoverse-n1": CPUFamily(_ARM | {"dotprod"}, 64 * _K, 1 * _M, 32 * _M),
    "neoverse-v1": CPUFamily(_ARM | {"dotprod"}, 64 * _K, 1 * _M, 32 * _M),
    "apple-m1": CPUFamily(_ARM | {"dotprod"}, 128 * _K, 4 * _M, 16 * _M),
}

#: the CPU name of an architecture when ``-mcpu`` is not given and the triple is not the
#: host's (and the defaults of a host whose own name the table lacks).
ARCH_BASELINES = {"x86_64": "x86-64", "aarch64": "generic"}

#: features that need others (LLVM's implications, for the features the tables use):
#: adding one adds these, removing one of these removes it.
_REQUIRES: dict[str, tuple[str, ...]] = {
    "sse2": ("sse",), "sse3": ("sse2",), "ssse3": ("sse3",), "sse4.1": ("ssse3",),
    "sse4.2": ("sse4.1",), "sse4a": ("sse3",), "avx": ("sse4.2",), "avx2": ("avx",),
    "fma": ("avx",), "f16c": ("avx",), "xop": ("fma4",), "fma4": ("avx", "sse4a"),
    "avx512f": ("avx2", "fma", "f16c"), "aes": ("sse2",), "pclmul": ("sse2",),
    "sha": ("sse2",), "gfni": ("sse2",), "vaes": ("aes", "avx"),
    "vpclmulqdq": ("pclmul", "avx"), "avxvnni": ("avx2",), "avxifma": ("avx2",),
    "avxvnniint8": ("avx2",), "avxvnniint16": ("avx2",), "avxneconvert": ("avx2",),
    "xsaveopt": ("xsave",), "xsavec": ("xsave",), "xsaves": ("xsave",),
    "amx-int8": ("amx-tile",), "amx-bf16": ("amx-tile",), "amx-fp16": ("amx-tile",),
    "amx-complex": ("amx-tile",), "dotprod": ("neon",), "neon": ("fp-armv8",),
}


def _requirements(feature: str) -> tuple[str, ...]:
    if feature in _REQUIRES:
        return _REQUIRES[feature]
    if feature.startswith("avx512") and feature != "avx512f":
        return ("avx512f",)  # every AVX-512 extension builds on the foundation
    if feature.startswith("avx10"):
        return ("avx512f",)
    if feature.startswith("amx-") and feature != "amx-tile":
        return ("amx-tile",)
    return ()


def with_requirements(features: Iterable[str]) -> frozenset[str]:
    """``features`` and every feature they need, transitively."""
    result: set[str] = set()
    pending = list(features)
    while pending:
        feature = pending.pop()
        if feature not in result:
            result.add(feature)
            pending.extend(_requirements(feature))
    return frozenset(result)


def without_dependents(features: Iterable[str], removed: Iterable[str]) -> frozenset[str]:
    """``features`` less ``removed`` and every feature that needs one of them."""
    gone = set(removed)
    result = set(features) - gone
    changed = True
    while changed:
        changed = False
        for feature in list(result):
            if gone.intersection(_requirements(feature)):
                result.discard(feature)
                gone.add(feature)
                changed = True
    return frozenset(result)


# --- the description ------------------------------------------------------------

def triple_arch(triple: str) -> str:
    """The architecture of a target triple (``aarch64-linux-gnu`` -> ``aarch64``);
    ``arm64`` and ``amd64`` read as LLVM's ``aarch64`` and ``x86_64``."""
    arch = triple.split("-", 1)[0]
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


_VENDORS = {"unknown", "pc", "apple", "none", "w64", "nvidia", "amd"}


def triple_system(triple: str) -> str:
    """The operating system of a target triple (``x86_64-unknown-linux-gnu`` and
    ``x86_64-linux-gnu`` both -> ``linux``)."""
    parts = triple.split("-")[1:]
    for part in parts:
        if part not in _VENDORS:
            return part
    return "unknown"


@dataclass(frozen=True, repr=False)
class CPUDescription:
    """One CPU the ``llvm`` target generates code for.

    ``features``: the LLVM features the code may use, exactly (what an artifact records
    and a loading host must have); ``l1d``/``l2``/``l3``: the sizes in bytes of the L1
    data cache and L2 of one core and of the L3 (as sysfs reports it: the cache CPU 0
    shares with others), measured (``caches_from`` ``"sysfs"``) or the CPU family's
    defaults (``"defaults"``).
    """

    triple: str
    cpu: str
    features: frozenset[str]
    num_cores: int
    l1d: int
    l2: int
    l3: int
    caches_from: str = "defaults"

    @property
    def arch(self) -> str:
        return triple_arch(self.triple)

    @property
    def is_x86(self) -> bool:
        return self.arch in ("x86_64", "i386", "i686")

    @property
    def vector_bytes(self) -> int:
        """Bytes of the widest vector register the code uses."""
        if "avx512f" in self.features:
            return 64
        if "avx" in self.features:
            return 32
        if self.features & {"sse", "sse2", "neon"}:
            return 16
        return 8

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 with AVX-512 or on AArch64, else 16."""
        if "avx512f" in self.features or self.arch == "aarch64":
            return 32
        return 16

    @property
    def dot_load_budget(self) -> float | None:
        """The loads per dot-product instruction this CPU's code sustains at the
        multiplies' pace (its family's ``wide_dot_loads``, for 512-bit code), or None where
        that is not known to bind (``schedules.int8_conv.tile_pace``)."""
        family = CPU_FAMILIES.get(self.cpu)
        if family is None or self.vector_bytes != 64:
            return None
        return family.wide_dot_loads

    @property
    def fma(self) -> bool:
        """Whether a fused multiply-add is one instruction."""
        return "fma" in self.features or self.arch == "aarch64"

    @property
    def isa(self) -> str:
        """The vector instruction set in one word: avx512, avx2, avx, sse, neon, scalar."""
        if "avx512f" in self.features:
            return "avx512"
        if "avx2" in self.features:
            return "avx2"
        if "avx" in self.features:
            return "avx"
        if "neon" in self.features:
            return "neon"
        return "sse" if "sse" in self.features else "scalar"

    def __repr__(self) -> str:
        return f"<CPUDescription {self.cpu} {self.triple} {self.isa}>"

    def vector_lanes(self, dtype) -> int:
        """Lanes of ``dtype`` in one vector register."""
        return max(self.vector_bytes // max(np.dtype(dtype).itemsize, 1), 1)

    def llvm_features(self) -> str:
        """The feature string LLVM generates code with: every feature of the description
        on and, on the host's architecture, every other feature LLVM knows off (so a
        CPU name cannot switch on more than the description names)."""
        flags = [f"+{f}" for f in sorted(self.features)]
        if self.arch == triple_arch(llvm.get_process_triple()):
            flags += [f"-{f}" for f in sorted(_host_feature_map()) if f not in self.features]
        return ",".join(flags)

    def spec(self) -> str:
        """The description as a target string: ``parse_cpu(d.spec())`` has ``d``'s
        triple, CPU, features and cores (``-mattr`` lists how the features differ from
        the CPU's own)."""
        base = describe_cpu(self.cpu, mtriple=self.triple, num_cores=self.num_cores).features
        mattr = [f"+{f}" for f in sorted(self.features - base)] + [
            f"-{f}" for f in sorted(base - self.features)]
        return (f"llvm -mtriple={self.triple} -mcpu={self.cpu}"
                + (f" -mattr={','.join(mattr)}" if mattr else "")
                + f" -num-cores={self.num_cores}")

    def summary(self) -> str:
        """One line for logs and benchmarks: CPU, ISA, vector width, registers, FMA."""
        return (f"{self.cpu} ({self.triple}): {self.isa}, {self.vector_bytes * 8}-bit vectors "
                f"x {self.vector_registers} registers, {'FMA' if self.fma else 'no FMA'}, "
                f"{self.num_cores} cores, L1d {self.l1d // _K} KiB / L2 {self.l2 // _K} KiB / "
                f"L3 {self.l3 // _K} KiB ({self.caches_from})")

    def to_json(self) -> dict:
        return {"triple": self.triple, "cpu": self.cpu, "features": sorted(self.features),
                "num_cores": self.num_cores, "l1d": self.l1d, "l2": self.l2, "l3": self.l3,
                "caches_from": self.caches_from}

    @classmethod
    def from_json(cls, data: Mapping) -> CPUDescription:
        return cls(data["triple"], data["cpu"], frozenset(data["features"]),
                   int(data["num_cores"]), int(data["l1d"]), int(data["l2"]), int(data["l3"]),
                   data.get("caches_from", "defaults"))


def masked_vector_loads(features: Iterable[str], arch: str, element_bytes: int) -> bool:
    """Whether a CPU of ``features`` and ``arch`` loads a contiguous vector of elements
    of ``element_bytes`` under a mask in one instruction: x86's AVX masked moves of 32-
    and 64-bit elements, AVX-512BW's of bytes and 16-bit words. Elsewhere (AVX2's bytes
    and words, NEON) LLVM loads a masked vector lane by lane: a test, a branch and a
    lane insert each."""
    if arch != "x86_64":
        return False
    features = frozenset(features)
    return "avx512bw" in features or (element_bytes >= 4 and "avx" in features)


def masked_vector_stores(features: Iterable[str], arch: str, element_bytes: int) -> bool:
    """Whether a CPU of ``features`` and ``arch`` stores part of a contiguous vector of
    elements of ``element_bytes`` under an AVX-512 mask register in one instruction
    (AVX-512F's 32- and 64-bit elements, AVX-512BW's bytes and 16-bit words). Elsewhere
    LLVM stores a vector of a lane count that is no power of two in pieces (7 bytes: 4,
    2 and 1). AVX2's masked moves of 32-bit elements are left out: a masked store
    there is microcoded on some CPUs (AMD's Zen)."""
    if arch != "x86_64":
        return False
    features = frozenset(features)
    return "avx512bw" in features or (element_bytes >= 4 and "avx512f" in features)


@functools.cache
def _host_feature_map() -> dict[str, bool]:
    return dict(llvm.get_host_cpu_features())


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": _K, "M": _M, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def read_host_caches(root: str = "/sys/devices/system/cpu/cpu0/cache"
                     ) -> tuple[int, int, int] | None:
    """(L1d, L2, L3) bytes of CPU 0 from sysfs; None where sysfs does not tell."""
    sizes: dict[int, int] = {}
    try:
        entries = sorted(e for e in os.listdir(root) if e.startswith("index"))
        for entry in entries:
            folder = os.path.join(root, entry)
            with open(os.path.join(folder, "type")) as f:
                kind = f.read().strip()
            if kind == "Instruction":
                continue
            with open(os.path.join(folder, "level")) as f:
                level = int(f.read())
            with open(os.path.join(folder, "size")) as f:
                sizes[level] = _parse_size(f.read())
    except (OSError, ValueError):
        return None
    if 1 not in sizes or 2 not in sizes:
        return None
    return sizes[1], sizes[2], sizes.get(3, sizes[2])


def _family(cpu: str, arch: str) -> CPUFamily:
    family = CPU_FAMILIES.get(cpu)
    if family is not None:
        return family
    baseline = ARCH_BASELINES.get(arch)
    if baseline is None:
        raise TargetError(f"no defaults for CPUs of architecture {arch!r}; supported: "
                          f"{', '.join(ARCH_BASELINES)}")
    return CPU_FAMILIES[baseline]


def _parse_mattr(mattr: str | Iterable[str] | None) -> tuple[set[str], set[str]]:
    items = mattr.split(",") if isinstance(mattr, str) else list(mattr or ())
    added, removed = set(), set()
    for item in (i.strip() for i in items):
        if not item:
            continue
        if item[0] not in "+-" or len(item) < 2:
            raise TargetError(f"-mattr item {item!r} must be +FEATURE or -FEATURE "
                              "(e.g. -mattr=+avx2,-avx512f)")
        (added if item[0] == "+" else removed).add(item[1:])
    both = added & removed
    if both:
        raise TargetError(f"-mattr both adds and removes {', '.join(sorted(both))}")
    return added, removed


def describe_cpu(mcpu: str | None = None, mattr: str | Iterable[str] | None = None,
                 mtriple: str | None = None, num_cores: int | str | None = None
                 ) -> CPUDescription:
    """The description of ``-mcpu``/``-mattr``/``-mtriple``/``-num-cores``; what is
    left out is the host's (its CPU and features only when the triple is the host's)."""
    llvm.initialize_native_target()
    host_triple = llvm.get_process_triple()
    triple = mtriple or host_triple
    arch = triple_arch(triple)
    if arch not in ARCH_BASELINES:
        raise TargetError(f"-mtriple={triple}: architecture {arch!r} is not supported; "
                          f"supported: {', '.join(ARCH_BASELINES)}")
    native = arch == triple_arch(host_triple) and triple_system(triple) == triple_system(
        host_triple)
    host_cpu = llvm.get_host_cpu_name()
    caches, caches_from = None, "defaults"
    if native and mcpu in (None, host_cpu):
        cpu = host_cpu
        features = frozenset(f for f, on in _host_feature_map().items() if on)
        if "amx-tile" in features and not request_tile_permission():
            # the CPU has tiles but the system does not let this process use them
            features = without_dependents(features, {"amx-tile"})
        caches = read_host_caches()
        caches_from = "sysfs" if caches else "defaults"
        if caches is None:
            family = _family(cpu, arch)
            caches = family.l1d, family.l2, family.l3
    else:
        cpu = mcpu or ARCH_BASELINES[arch]
        if cpu not in CPU_FAMILIES:  # a typo must not silently give baseline code
            raise TargetError(f"-mcpu={cpu}: no defaults for this CPU; known: "
                              f"{', '.join(CPU_FAMILIES)} (or the host's, "
                              f"{llvm.get_host_cpu_name()}); name the nearest and add "
                              "features with -mattr")
        family = CPU_FAMILIES[cpu]
        if arch == "aarch64" and family.features - with_requirements(_ARM | {"dotprod"}):
            raise TargetError(f"-mcpu={cpu} is an x86 CPU; the triple {triple} is {arch}")
        if arch == "x86_64" and "neon" in family.features:
            raise TargetError(f"-mcpu={cpu} is an Arm CPU; the triple {triple} is {arch}")
        features = with_requirements(family.features)
        caches = family.l1d, family.l2, family.l3
    added, removed = _parse_mattr(mattr)
    features = without_dependents(with_requirements(features | added), removed)
    cores = host_cores() if num_cores is None else num_cores
    try:
        cores = int(cores)
    except (TypeError, ValueError):
        raise TargetError(f"-num-cores={num_cores!r} is not a number") from None
    if cores < 1:
        raise TargetError(f"-num-cores={cores}: needs at least one core")
    return CPUDescription(triple, cpu, features, cores, *caches, caches_from=caches_from)


@functools.cache
def host_cpu() -> CPUDescription:
    """The description of the machine this process runs on (the default target)."""
    return describe_cpu()


#: options of the ``llvm`` target string, by the keyword the registry passes them as
CPU_OPTIONS = ("mcpu", "mattr", "mtriple", "num_cores")


def parse_cpu(spec: str | CPUDescription | None) -> CPUDescription:
    """A description from a target string (``"llvm -mcpu=znver3 -mattr=-avx512f"``, or
    only its options), a description (as it is) or None (the host)."""
    if spec is None:
        return host_cpu()
    if isinstance(spec, CPUDescription):
        return spec
    text = spec.strip()
    if not text.startswith("llvm"):
        text = f"llvm {text}"
    name, options = parse_target_spec(text)
    if name != "llvm":
        raise TargetError(f"{spec!r} is not an llvm target string")
    unknown = sorted(set(options) - set(CPU_OPTIONS))
    if unknown:
        raise TargetError(f"llvm target option(s) {', '.join('-' + u for u in unknown)} are "
                          f"not known; options: -mcpu, -mattr, -mtriple, -num-cores")
    if not options:
        return host_cpu()
    return describe_cpu(**options)


def missing_features(required: CPUDescription, host: CPUDescription) -> list[str]:
    """Features code for ``required`` may use that ``host`` lacks, sorted."""
    return sorted(required.features - host.features)


def check_runs_on(required: CPUDescription, host: CPUDescription | None = None,
                  what: str = "this code") -> None:
    """Raise TargetError unless code generated for ``required`` can run on ``host``
    (default: this machine): same architecture and operating system, and every feature
    it may use present. The message names what is missing and how to recompile."""
    host = host or host_cpu()
    if (required.arch, triple_system(required.triple)) != (host.arch,
                                                          triple_system(host.triple)):
        raise TargetError(f"{what} was compiled for {required.triple} ({required.cpu}); this "
                          f"host is {host.triple}: recompile with --target 'llvm "
                          f"-mtriple={host.triple}' (or run it on an {required.arch} machine)")
    missing = missing_features(required, host)
    if missing:
        raise TargetError(
            f"{what} was compiled for CPU {required.cpu} with features this host "
            f"({host.cpu}) lacks: {', '.join(missing)}; running it would stop on an illegal "
            f"instruction. Recompile for this host (--target llvm) or without them "
            f"(--target 'llvm -mattr={','.join('-' + f for f in missing)}')")


def runs_on_host(description: CPUDescription) -> bool:
    """Whether code for ``description`` can run in this process."""
    try:
        check_runs_on(description)
    except TargetError:
        return False
    return True


# --- the description schedules see ----------------------------------------------

_ACTIVE: contextvars.ContextVar[CPUDescription | None] = contextvars.ContextVar(
    "heterocc_llvm_cpu", default=None)


def active_cpu() -> CPUDescription:
    """The description being compiled for: the one :func:`compiling_for` set, else the
    host. Schedules are always given theirs; the tuning templates, run under the
    measuring harness's :func:`compiling_for`, read it here."""
    return _ACTIVE.get() or host_cpu()


@contextlib.contextmanager
def compiling_for(description: CPUDescription) -> Iterator[CPUDescription]:
    """Make ``description`` the :func:`active_cpu` inside the ``with`` block."""
    token = _ACTIVE.set(description)
    try:
        yield description
    finally:
        _ACTIVE.reset(token)
