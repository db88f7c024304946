"""LLVM types of TIR dtypes: registers (scalars and vectors) and memory elements."""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from heterocc.tir import expr as tx

I64 = ir.IntType(64)
I32 = ir.IntType(32)
I8 = ir.IntType(8)
I1 = ir.IntType(1)
PTR = ir.PointerType()


def scalar_type(dtype: str) -> ir.Type:
    """LLVM register type of a scalar dtype."""
    base = tx.scalar_dtype(dtype)
    if base == "bool":
        return I1
    if base == "float16":
        return ir.HalfType()
    if base == "float32":
        return ir.FloatType()
    if base == "float64":
        return ir.DoubleType()
    return ir.IntType(np.dtype(base).itemsize * 8)


def value_type(dtype: str) -> ir.Type:
    """LLVM register type of a (possibly vector) dtype."""
    lanes = tx.lanes_of(dtype)
    scalar = scalar_type(dtype)
    return scalar if lanes == 1 else ir.VectorType(scalar, lanes)


def storage_type(dtype: str) -> ir.Type:
    """LLVM in-memory element type (bools take a byte, as in NumPy)."""
    return I8 if tx.is_bool(dtype) else scalar_type(dtype)


def type_suffix(ty: ir.Type) -> str:
    """LLVM's type suffix of overloaded intrinsics: ``f32``, ``v16f32``, ``v8i8``..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {"half": "f16", "float": "f32", "double": "f64"}[str(ty)]


def element_size(dtype: str) -> int:
    """Bytes of one element of ``dtype`` in memory (a bool takes a byte)."""
    return 1 if tx.is_bool(dtype) else np.dtype(tx.scalar_dtype(dtype)).itemsize
