"""Helpers shared by the compute library's computes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import te
from ..errors import CompileError

#: the dtype computes work in where their references compute in float64
F64 = "float64"


def f64(value: float):
    """``value`` as a float64 immediate."""
    return te.const(float(value), F64)


def optional_input(inputs: Sequence, index: int):
    """Input ``index`` of a compute's ``inputs``, or None when it was omitted (trailing
    optional inputs may be left out of the list altogether)."""
    return inputs[index] if len(inputs) > index else None


def broadcast_load(t, out_shape: Sequence[int], index: Sequence):
    """``t`` read at output ``index`` under NumPy broadcasting (right-aligned)."""
    offset = len(out_shape) - len(t.shape)
    return t[tuple(0 if dim == 1 and out_shape[offset + k] != 1 else index[offset + k]
                   for k, dim in enumerate(t.shape))]


#: dtypes the LLVM code generator handles natively (float16 conversions need soft-float
#: helpers the JIT does not link, and the narrow ml_dtypes formats have no LLVM type)
NATIVE_DTYPES = frozenset({"float32", "float64", "int8", "int16", "int32", "int64", "uint8",
                           "uint16", "uint32", "uint64", "bool"})


def require_native(dtypes, op: str) -> None:
    for dtype in dtypes:
        if dtype not in NATIVE_DTYPES:
            raise CompileError(f"{op} on {dtype} has no TE compute")


def elementwise(inputs: Sequence, out_type, fn: Callable, name: str):
    """One output computed elementwise (with broadcasting) from the given inputs."""
    given = [t for t in inputs if t is not None]
    require_native([t.dtype for t in given] + [out_type.dtype], name)
    shape = tuple(out_type.shape)

    def body(*index):
        return fn(*[broadcast_load(t, shape, index) for t in given])

    return te.compute(shape, body, name=name, dtype=out_type.dtype)


def float_only(dtype: str, op: str) -> None:
    if not dtype.startswith("float") or dtype == "float16":
        raise CompileError(f"{op} on {dtype} has no TE compute (float32/float64 only)")


def scalar_attr(value, dtype: str):
    return te.const(value, dtype)
