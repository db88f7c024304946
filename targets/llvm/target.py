"""The ``llvm`` target: each fused function becomes one machine-code kernel.

A function body is turned into tensor expressions op by op (the operator
inventory, ``heterocc.inventory``), its intermediate elementwise/injective
stages are inlined into their readers, its anchor (a convolution, a matmul, a
reduction) gets the CPU schedule for its kind, and the result is lowered to TIR
and compiled with LLVM. A function whose ops the inventory cannot express yet
runs on the NumPy references instead; ``fallbacks`` lists those with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from heterocc import te
from heterocc.errors import CompileError, TypeInferenceError
from heterocc.inventory import compute_of
from heterocc.ir.graph import Node, Value
from heterocc.runtime.interpreter import evaluate

from .module import build as build_module
from .module import load_library
from .schedules import (
    schedule_conv2d_nchw,
    schedule_injective,
    schedule_matmul,
    schedule_reduction,
)

#: anchor schedules, by the ``schedule`` attribute a compute puts on its output
_ANCHOR_SCHEDULES = {"conv2d_nchw": schedule_conv2d_nchw, "matmul": schedule_matmul}


@dataclass
class _Expressed:
    """A function body as tensor expressions."""

    params: list  # placeholders of the function's inputs, then of its constants
    constants: list[np.ndarray]
    outputs: list


def _constants_of(body) -> list[np.ndarray]:
    """The function's constants in the order its kernel takes them (first use)."""
    seen: dict[Value, None] = {}
    for node in body.nodes:
        for v in node.inputs:
            if v is not None and v.is_const:
                seen.setdefault(v, None)
    return [np.ascontiguousarray(v.data) for v in seen]


def _express(body) -> _Expressed:
    tensors: dict[Value, object] = {}
    params, constants = [], []
    for k, v in enumerate(body.inputs):
        tensors[v] = te.placeholder(v.type.shape, v.type.dtype, f"in{k}")
        params.append(tensors[v])
    for node in body.nodes:
        if node.body is not None:
            raise CompileError(f"nested function {node.name!r}")
        args = []
        for v in node.inputs:
            if v is not None and v not in tensors:
                if not v.is_const:
                    raise CompileError(f"value {v.name!r} is not defined in the function")
                tensors[v] = te.placeholder(v.type.shape, v.type.dtype, f"c{len(constants)}")
                params.append(tensors[v])
                constants.append(np.ascontiguousarray(v.data))
            args.append(tensors[v] if v is not None else None)
        outs = compute_of(node.op)(args, node.attrs, [v.type for v in node.outputs])
        for v, t in zip(node.outputs, outs):
            if tuple(t.shape) != v.type.shape or t.dtype != v.type.dtype:
                raise CompileError(f"{node.op} compute gives {t.dtype}{list(t.shape)} for "
                                   f"{v.type}")
            tensors[v] = t
    outputs = [tensors[v] for v in body.outputs]
    if any(isinstance(t.op, te.PlaceholderOp) for t in outputs):
        raise CompileError("a function output is one of its inputs or constants")
    return _Expressed(params, constants, outputs)


def _schedule(expressed: _Expressed) -> te.Schedule:
    """Inline injective stages, give anchors (convolutions, matmuls, reductions) their
    CPU schedule, and vectorize / parallelize the outputs."""
    s = te.create_schedule(expressed.outputs)
    outputs = {id(t) for t in expressed.outputs}
    anchors = []
    for stage in list(s.stages):
        t = stage.tensor
        if stage.is_placeholder:
            continue
        if t.op.attrs.get("schedule") in _ANCHOR_SCHEDULES or t.op.reduce_axis:
            anchors.append(t)
        elif id(t) not in outputs and not t.op.attrs.get("keep"):
            stage.compute_inline()
    for t in anchors:
        special = _ANCHOR_SCHEDULES.get(t.op.attrs.get("schedule"))
        if special is not None:
            special(s, t)
        else:
            schedule_reduction(s, t)
    anchor_ids = {id(t) for t in anchors}
    for t in expressed.outputs:
        if id(t) not in anchor_ids:
            schedule_injective(s, t)
    return s


@dataclass
class LLVMKernel:
    """A compiled function: call with the function's input arrays."""

    name: str
    function: object
    constants: list[np.ndarray]
    out_specs: list[tuple[tuple[int, ...], str]]
    prim: object = None  # the TIR PrimFunc, kept for export

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        outs = [np.empty(shape, dtype) for shape, dtype in self.out_specs]
        self.function(*args, *self.constants, *outs)
        return outs


LIBRARY = "kernels.so"


@dataclass
class LLVMTarget:
    """The CPU through LLVM. ``fallbacks`` maps functions run on NumPy to the reason."""

    name: str = "llvm"
    fallbacks: dict[str, str] = field(default_factory=dict)
    _libraries: dict[str, object] = field(default_factory=dict, repr=False)

    def save_kernels(self, kernels: dict, directory: str) -> dict:
        """One shared library with every compiled function; NumPy fallbacks are listed."""
        compiled = {name: k for name, k in kernels.items() if isinstance(k, LLVMKernel)}
        if compiled:
            module = build_module([k.prim for k in compiled.values()], name="artifact")
            module.export_library(os.path.join(directory, LIBRARY))
        return {"library": LIBRARY if compiled else None,
                "functions": {name: k.prim.name for name, k in compiled.items()}}

    def load_kernel(self, function: Node, directory: str, info: dict):
        """The kernel of ``function`` from a saved library (NumPy if it had none)."""
        symbol = info.get("functions", {}).get(function.name)
        if symbol is None:
            body = function.body
            return lambda args: evaluate(body, args)
        library = self._libraries.get(directory)
        if library is None:
            library = self._libraries[directory] = load_library(
                os.path.join(directory, info["library"]))
        return LLVMKernel(function.name, library[symbol], _constants_of(function.body),
                          [(v.type.shape, v.type.dtype) for v in function.outputs])

    def build(self, function: Node):
        try:
            return self._compile(function)
        except (CompileError, TypeInferenceError, NotImplementedError) as exc:
            self.fallbacks[function.name] = f"{type(exc).__name__}: {exc}"
            body = function.body
            return lambda args: evaluate(body, args)

    def _compile(self, function: Node) -> LLVMKernel:
        expressed = _express(function.body)
        schedule = _schedule(expressed)
        symbol = "".join(c if c.isalnum() else "_" for c in function.name)
        prim = te.lower(schedule, expressed.params + expressed.outputs, name=symbol)
        module = build_module([prim], name=symbol)
        return LLVMKernel(function.name, module[symbol], expressed.constants,
                          [(t.shape, t.dtype) for t in expressed.outputs], prim)
