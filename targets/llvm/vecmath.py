"""Vector math through glibc's libmvec: ``exp``, ``tanh``, ``erf``... of whole SIMD
vectors, instead of LLVM's lane-by-lane calls of scalar libm.

Symbols follow the x86-64 vector function ABI: ``_ZGV<isa>N<lanes><args>_<name>``
with isa ``b`` (SSE), ``d`` (AVX2) or ``e`` (AVX-512) and one ``v`` per vector
argument; float32 functions end in ``f``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from dataclasses import dataclass

#: TIR intrinsic -> (libmvec base name, number of vector arguments).
VECTOR_FUNCTIONS = {
    "exp": ("exp", 1), "exp2": ("exp2", 1), "log": ("log", 1), "log2": ("log2", 1),
    "log10": ("log10", 1), "sin": ("sin", 1), "cos": ("cos", 1), "tan": ("tan", 1),
    "tanh": ("tanh", 1), "erf": ("erf", 1), "asin": ("asin", 1), "acos": ("acos", 1),
    "atan": ("atan", 1), "sinh": ("sinh", 1), "cosh": ("cosh", 1), "asinh": ("asinh", 1),
    "acosh": ("acosh", 1), "atanh": ("atanh", 1), "pow": ("pow", 2),
}


@dataclass(frozen=True)
class VectorISA:
    """The widest vector ABI the host CPU supports: its mangling letter and width."""

    letter: str
    bits: int

    def lanes(self, scalar_bits: int) -> int:
        return self.bits // scalar_bits


def host_isas(features: str) -> tuple[VectorISA, ...]:
    """The vector ABIs a CPU described by LLVM feature flags (``+avx512f,...``) can call,
    widest first."""
    flags = set(features.split(","))
    isas = [VectorISA("b", 128)]
    if "+avx2" in flags:
        isas.insert(0, VectorISA("d", 256))
    if "+avx512f" in flags:
        isas.insert(0, VectorISA("e", 512))
    return tuple(isas)


@functools.cache
def libmvec_name() -> str | None:
    """The loader name of glibc's vector math library (None where there is none)."""
    return ctypes.util.find_library("mvec")


@functools.cache
def libmvec() -> ctypes.CDLL | None:
    """glibc's vector math library, loaded globally (None where there is none)."""
    name = libmvec_name()
    if name is None:
        return None
    try:
        return ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return None


@functools.cache
def has_symbol(symbol: str) -> bool:
    """Whether libmvec (as installed) defines ``symbol``."""
    library = libmvec()
    return library is not None and hasattr(library, symbol)


def vector_symbol(intrinsic: str, scalar_dtype: str, lanes: int,
                  isas: tuple[VectorISA, ...]) -> tuple[str, int] | None:
    """(symbol, width) of the widest libmvec function computing ``intrinsic`` on vectors
    of ``width`` lanes of ``scalar_dtype``, ``width`` dividing ``lanes`` into a power of
    two of pieces; None when libmvec has none."""
    if intrinsic not in VECTOR_FUNCTIONS or scalar_dtype not in ("float32", "float64"):
        return None
    base, arity = VECTOR_FUNCTIONS[intrinsic]
    suffix = "f" if scalar_dtype == "float32" else ""
    for isa in isas:
        width = isa.lanes(32 if scalar_dtype == "float32" else 64)
        pieces = lanes // width
        if lanes % width or pieces & (pieces - 1):
            continue
        symbol = f"_ZGV{isa.letter}N{width}{'v' * arity}_{base}{suffix}"
        if has_symbol(symbol):
            return symbol, width
    return None


def uses_libmvec(ir_text: str) -> bool:
    """Whether LLVM IR calls libmvec (so JIT and linking must make it available)."""
    return "@_ZGV" in ir_text
