"""The compute library: a TE compute for each op of the registry.

A compute takes the op's input tensors (``te.Tensor``, or None for an omitted
optional input), its attributes (defaults filled in) and its output types (static
shapes, from type inference), and returns its output tensors::

    @register_compute("Relu")
    def relu(inputs, attrs, out_types):
        (x,) = inputs
        return [te.compute(x.shape, lambda *i: te.maximum(x(*i), te.const(0, x.dtype)))]

Constant inputs arrive as placeholders too (their data is bound when the
kernel is built, and one-element constants are folded into the code by the
LLVM target); what a shape-like operand decides is already in ``out_types``,
so a compute derives it from there or reads the operand inside the kernel.
A compute raises CompileError for a case it does not cover; the target then
runs that function on the NumPy reference instead and says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CompileError
from ..ir.types import TensorType
from ..ops import get_op, has_op

TeCompute = Callable[[Sequence[Any], dict[str, Any], Sequence[TensorType]], list[Any]]


def register_compute(*op_names: str) -> Callable[[TeCompute], TeCompute]:
    """Decorator: the TE compute of ops ``op_names`` (stored on their OpDef)."""

    def decorate(fn: TeCompute) -> TeCompute:
        for name in op_names:
            if not has_op(name):
                raise ValueError(f"no op {name!r} in the registry")
            op = get_op(name)
            if op.te_compute is not None:
                raise ValueError(f"op {name!r} has a TE compute already")
            op.te_compute = fn
        return fn

    return decorate


def has_compute(op_name: str) -> bool:
    return has_op(op_name) and get_op(op_name).te_compute is not None


def code_key_of(op_name: str) -> Callable[[dict[str, Any]], Any] | None:
    """What of an op's attributes its compute's code depends on, where the compute
    declares it (``compute.code_key``, a function of the attributes): a compute that
    passes attribute values to the kernel as tables (``te.constant_tensor``) leaves
    their contents out, so that functions differing only there share one kernel, each
    with its own tables. None where the code depends on every attribute value.

    The key is asked for each function's structure, more than once per compile: a
    compute whose key walks its attributes in Python remembers it (Requantize keeps it
    with the forms it decides per attribute values, ``qnn._forms``)."""
    compute = get_op(op_name).te_compute if has_op(op_name) else None
    return getattr(compute, "code_key", None)


def unfolded_scalars_of(op_name: str) -> tuple[int, ...]:
    """Positions of an op's inputs whose one-element constants its kernel reads as
    arguments instead of having them folded into its code, where its compute declares
    them (``compute.unfolded_scalars``): a value that differs between layers otherwise
    alike (a quantized convolution's input zero point), so that they share one kernel.
    Empty by default (every one-element constant folded)."""
    compute = get_op(op_name).te_compute if has_op(op_name) else None
    return getattr(compute, "unfolded_scalars", ())


def compute_of(op_name: str) -> TeCompute:
    op = get_op(op_name)
    if op.te_compute is None:
        raise CompileError(f"{op_name} has no TE compute in the compute library (heterocc.compute)")
    return op.te_compute
