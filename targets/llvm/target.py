"""The ``llvm`` target: each fused function becomes one machine-code kernel.

A function body is turned into tensor expressions op by op (the compute
library, ``heterocc.compute``), its intermediate elementwise/injective
stages are inlined into their readers, its anchor (a convolution, a matmul, a
reduction) gets the CPU schedule for its kind, and the result is lowered to TIR
and compiled with LLVM. A function whose ops the compute library cannot express yet
runs on the NumPy references instead; ``fallbacks`` lists those with the reason.

A convolution's elementwise epilogue (bias, residual add, activation) is finished in
the convolution's register tiles; one-element constants are folded into the code;
functions of one structure (ops, attributes, types: see :func:`structure_key`) share
one compiled kernel, each calling it with its own constants.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from heterocc import te
from heterocc.compute import compute_of
from heterocc.errors import CompileError, TypeInferenceError
from heterocc.ir.graph import Node, Value
from heterocc.runtime.interpreter import evaluate
from heterocc.te.schedule import INLINE
from heterocc.te.schedule_reads import reads_of
from heterocc.tir.visitor import Mutator, collect

from .module import build as build_module
from .module import load_library
from .schedules import (
    BlockedConvTiles,
    schedule_conv2d_nchw,
    schedule_conv2d_nchwc,
    schedule_injective,
    schedule_matmul,
    schedule_pool_nchwc,
    schedule_reduction,
    schedule_rows,
)
from .tuning import blocked_conv_tiles, llvm_tuning, schedule_matmul_tuned


#: anchor schedules, by the ``schedule`` attribute a compute puts on its output
def _schedule_matmul(schedule: te.Schedule, product: te.Tensor) -> None:
    """The tuning log's best matmul schedule for this shape when one is applied
    (``heterocc.compile(..., tuning_log=...)``), else the default."""
    if not schedule_matmul_tuned(schedule, product):
        schedule_matmul(schedule, product)


def _schedule_conv2d_nchwc(schedule: te.Schedule, conv: te.Tensor,
                           epilogue: te.Tensor | None = None,
                           chain: Sequence[te.Tensor] = ()) -> None:
    """The blocked convolution's schedule with the tiles of the applied tuning log's best
    config for its workload, else the default tiles."""
    tiles = blocked_conv_tiles(conv) or BlockedConvTiles()
    schedule_conv2d_nchwc(schedule, conv, epilogue, chain, tiles)


_ANCHOR_SCHEDULES = {"conv2d_nchw": schedule_conv2d_nchw,
                     "conv2d_nchwc": _schedule_conv2d_nchwc, "matmul": _schedule_matmul,
                     "layout_transform": schedule_rows, "pool_nchwc": schedule_pool_nchwc}
#: anchor schedules that finish the function's elementwise epilogue in their tiles
_EPILOGUE_SCHEDULES = ("conv2d_nchw", "conv2d_nchwc")


@dataclass
class ExpressedFunction:
    """A function body as tensor expressions."""

    params: list  # placeholders of the function's inputs, its constants, then its tables
    constants: list[np.ndarray]  # the graph's constants, then the computes' tables
    outputs: list
    #: one-element constants, by id of their placeholder: folded into the code
    scalars: dict[int, np.ndarray] = field(default_factory=dict)
    #: the constant tables the computes embed (``te.constant_tensor``), the last entries
    #: of ``constants``; fixed by the ops' attributes and types, so functions of one
    #: :func:`structure_key` have equal tables
    tables: list[np.ndarray] = field(default_factory=list)


def _contiguous(array: np.ndarray) -> np.ndarray:
    """``array`` in C order, keeping its rank (``np.ascontiguousarray`` turns 0-d into 1-d)."""
    return np.require(array, requirements="C")


def function_constants(body, tables: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """The function's constants in the order its kernel takes them: the graph's
    constants (first use), then the constant tables of its computes, ``tables`` when
    given (:attr:`ExpressedFunction.tables`), else found by expressing ``body`` again."""
    seen: dict[Value, None] = {}
    for node in body.nodes:
        for v in node.inputs:
            if v is not None and v.is_const:
                seen.setdefault(v, None)
    if tables is None:
        try:
            tables = express_function(body).tables
        except (CompileError, TypeInferenceError, NotImplementedError):
            tables = []  # no kernel: nothing takes them
    return [_contiguous(v.data) for v in seen] + list(tables)


def express_function(body) -> ExpressedFunction:
    """A function body as tensor expressions, op by op through the compute library
    (shared by the CPU and GPU targets); CompileError where an op has no compute."""
    tensors: dict[Value, object] = {}
    params, constants = [], []
    scalars: dict[int, np.ndarray] = {}
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
                constants.append(_contiguous(v.data))
                if constants[-1].size == 1:
                    scalars[id(tensors[v])] = constants[-1]
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
    tables = []
    for t in te.constant_tensors(outputs):
        params.append(t)
        tables.append(t.op.data)
        if t.op.data.size == 1:
            scalars[id(t)] = t.op.data
    return ExpressedFunction(params, constants + tables, outputs, scalars, tables)


class _FoldScalars(Mutator):
    """Reads of one-element constants replaced by their values."""

    def __init__(self, scalars: dict[int, np.ndarray]):
        self.scalars = scalars

    def visit_TensorLoad(self, node: te.TensorLoad):
        value = self.scalars.get(id(node.tensor))
        if value is None:
            return self.generic(node)
        return te.const(value.reshape(()).item(), node.tensor.dtype)


def _fold_scalars(schedule: te.Schedule, scalars: dict[int, np.ndarray]) -> None:
    """Fold one-element constants (Clip bounds, scales) into every stage: an immediate
    needs no load, and a load under a vector select (NaN-aware min/max) would keep the
    TIR vectorizer from vectorizing the stage."""
    if not scalars:
        return
    folder = _FoldScalars(scalars)
    for stage in schedule.stages:
        if not stage.is_placeholder:
            stage.body = folder.expr(stage.body)


def _loads_of(tensor: te.Tensor) -> list[te.TensorLoad]:
    return collect(tensor.op.body, lambda n: isinstance(n, te.TensorLoad))


def _reads_through_inlined(schedule: te.Schedule, reader: te.Tensor,
                           anchor: te.Tensor) -> bool:
    """Whether ``reader``'s body reads ``anchor``, directly or through inlined stages."""
    for load in _loads_of(reader):
        source = load.tensor
        if source is anchor:
            return True
        if schedule[source].attach == INLINE and _reads_through_inlined(schedule, source, anchor):
            return True
    return False


def _reads_elementwise(schedule: te.Schedule, reader: te.Tensor, anchor: te.Tensor) -> bool:
    """Whether every read of ``anchor`` by ``reader`` (through inlined stages) is at the
    reader's own index, in a stage of ``anchor``'s shape."""
    axes = [iv.var for iv in reader.op.axis]
    for load in _loads_of(reader):
        source = load.tensor
        through = (source is not anchor and schedule[source].attach == INLINE
                   and _reads_through_inlined(schedule, source, anchor))
        if source is not anchor and not through:
            continue
        if reader.shape != anchor.shape or len(load.indices) != len(axes) or any(
                index is not axis for index, axis in zip(load.indices, axes)):
            return False
        if through and not _reads_elementwise(schedule, source, anchor):
            return False
    return True


def _epilogue_of(schedule: te.Schedule, anchor: te.Tensor, outputs: list) -> te.Tensor | None:
    """The function output that finishes ``anchor`` elementwise (bias, residual add,
    activation, all inlined into it) and is its only reader; None when there is none."""
    if any(t is anchor for t in outputs):
        return None
    readers = [stage.tensor for stage in schedule.stages
               if not stage.is_placeholder and stage.attach != INLINE
               and stage.tensor is not anchor
               and _reads_through_inlined(schedule, stage.tensor, anchor)]
    if len(readers) != 1:
        return None
    (reader,) = readers
    if (not any(t is reader for t in outputs) or reader.op.reduce_axis
            or reader.op.attrs.get("schedule")
            or not _reads_elementwise(schedule, reader, anchor)):
        return None
    return reader


def _epilogue_chain(schedule: te.Schedule, anchor: te.Tensor,
                    epilogue: te.Tensor) -> list[te.Tensor] | None:
    """The inlined stages between ``anchor`` and its ``epilogue``, in order, when they
    form one path (each read only by the next); None when they branch."""
    chain: list[te.Tensor] = []
    current = anchor
    while True:
        readers = [stage.tensor for stage in schedule.stages
                   if not stage.is_placeholder
                   and (stage.attach == INLINE or stage.tensor is epilogue)
                   and any(t is current for t in reads_of(stage.body))]
        if len(readers) != 1:
            return None
        if readers[0] is epilogue:
            return chain
        current = readers[0]
        chain.append(current)


def _schedule(expressed: ExpressedFunction) -> te.Schedule:
    """Inline injective stages, give anchors (convolutions, matmuls, reductions) their
    CPU schedule (a convolution's elementwise epilogue is computed in its register
    tiles), and vectorize / parallelize the other outputs."""
    s = te.create_schedule(expressed.outputs)
    _fold_scalars(s, expressed.scalars)
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
    scheduled = {id(t) for t in anchors}
    for t in anchors:
        kind = t.op.attrs.get("schedule")
        if kind in _EPILOGUE_SCHEDULES:
            epilogue = _epilogue_of(s, t, expressed.outputs)
            chain = None if epilogue is None else _epilogue_chain(s, t, epilogue)
            if chain is None:
                epilogue = None
            _ANCHOR_SCHEDULES[kind](s, t, epilogue, chain or [])
            if epilogue is not None:
                scheduled.add(id(epilogue))
        elif kind in _ANCHOR_SCHEDULES:
            _ANCHOR_SCHEDULES[kind](s, t)
        else:
            schedule_reduction(s, t)
    for t in expressed.outputs:
        if id(t) not in scheduled:
            schedule_injective(s, t)
    return s


#: references to an array that ``_Outputs.recycled`` itself holds while counting: its
#: list slot and ``sys.getrefcount``'s argument.
_OWN_REFERENCES = 2


@dataclass
class _Outputs:
    """Output arrays of a kernel, recycled across calls: an array from the last call is
    written again once nothing else refers to it (the executor dropped an intermediate
    after its last reader). Fresh arrays cost page faults on every call, which on a
    loaded machine can take longer than the kernel itself."""

    specs: list[tuple[tuple[int, ...], str]]
    last: list[np.ndarray] = field(default_factory=list)

    def recycled(self) -> list[np.ndarray]:
        if self.last and all(sys.getrefcount(self.last[k]) <= _OWN_REFERENCES
                             for k in range(len(self.last))):
            return list(self.last)
        self.last = [np.empty(shape, dtype) for shape, dtype in self.specs]
        return list(self.last)


@dataclass
class LLVMKernel:
    """A compiled function: call with the function's input arrays."""

    name: str
    function: object
    constants: list[np.ndarray]
    out_specs: list[tuple[tuple[int, ...], str]]
    prim: object = None  # the TIR PrimFunc, kept for export
    _outputs: _Outputs | None = field(default=None, repr=False)

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self._outputs is None:
            self._outputs = _Outputs(self.out_specs)
        outs = self._outputs.recycled()
        self.function(*args, *self.constants, *outs)
        return outs


LIBRARY = "kernels.so"


def _frozen(value) -> object:
    """A hashable stand-in for an attribute value (arrays by content)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, str | int | float | bool | bytes | np.generic) or value is None:
        return value
    return ("object", id(value))  # never equal to another object's key


def structure_key(body) -> tuple:
    """What the kernel of a function body depends on: its ops, attributes, value types
    and dataflow, and the values of its one-element constants (folded into the code),
    but not the contents of larger constants, which the kernel takes as arguments.
    Functions with equal keys share one compiled kernel."""
    refs: dict[Value, tuple] = {v: ("input", k, v.type.shape, v.type.dtype)
                                for k, v in enumerate(body.inputs)}
    nodes = []
    for node in body.nodes:
        args = []
        for v in node.inputs:
            if v is not None and v not in refs:
                folded = v.data.tobytes() if v.is_const and np.size(v.data) == 1 else None
                refs[v] = ("constant" if v.is_const else "undefined", len(refs),
                           v.type.shape, v.type.dtype, folded)
            args.append(None if v is None else refs[v])
        for k, v in enumerate(node.outputs):
            refs[v] = ("node", len(nodes), k, v.type.shape, v.type.dtype)
        nodes.append((node.op, _frozen(node.attrs), tuple(args)))
    return tuple(nodes), tuple(refs.get(v) for v in body.outputs)


@dataclass
class _Compiled:
    """A kernel compiled for one function structure, or why it could not be."""

    function: object = None
    prim: object = None
    error: Exception | None = None
    tables: list[np.ndarray] = field(default_factory=list)


@dataclass
class LLVMTarget:
    """The CPU through LLVM. ``fallbacks`` maps functions run on NumPy to the reason.

    ``blocked_layout``: compile convolutions in the blocked NCHW[x]c layout (the
    ``alter_layout`` pass); False keeps every convolution in NCHW."""

    name: str = "llvm"
    blocked_layout: bool = True
    fallbacks: dict[str, str] = field(default_factory=dict)
    _libraries: dict[str, object] = field(default_factory=dict, repr=False)
    #: kernels compiled so far, by :func:`structure_key` (repeated blocks compile once)
    _compiled: dict[tuple, _Compiled] = field(default_factory=dict, repr=False)

    @property
    def distinct_kernels(self) -> int:
        """Kernels compiled so far; functions of one structure share one."""
        return sum(1 for c in self._compiled.values() if c.error is None)

    def save_kernels(self, kernels: dict, directory: str) -> dict:
        """One shared library with every compiled function; NumPy fallbacks are listed."""
        compiled = {name: k for name, k in kernels.items() if isinstance(k, LLVMKernel)}
        if compiled:
            # functions sharing a kernel share its PrimFunc: export each once
            prims = {id(k.prim): k.prim for k in compiled.values()}
            module = build_module(list(prims.values()), name="artifact")
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
        return LLVMKernel(function.name, library[symbol], function_constants(function.body),
                          [(v.type.shape, v.type.dtype) for v in function.outputs])

    def graph_passes(self) -> list[str]:
        """The CPU's layout pass (blocked NCHW[x]c convolutions), then folding again for a
        transform of a constant input; none when ``blocked_layout`` is off."""
        return ["alter_layout", "fold_constants"] if self.blocked_layout else []

    def tuning(self):
        """The CPU's tuning templates, tasks and measurement (``heterocc tune``)."""
        return llvm_tuning(self)

    def build(self, function: Node):
        try:
            return self._compile(function)
        except (CompileError, TypeInferenceError, NotImplementedError) as exc:
            self.fallbacks[function.name] = f"{type(exc).__name__}: {exc}"
            body = function.body
            return lambda args: evaluate(body, args)

    def _compile(self, function: Node) -> LLVMKernel:
        key = structure_key(function.body)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile_structure(function)
        if compiled.error is not None:
            raise compiled.error
        return LLVMKernel(function.name, compiled.function,
                          function_constants(function.body, compiled.tables),
                          [(v.type.shape, v.type.dtype) for v in function.body.outputs],
                          compiled.prim)

    @staticmethod
    def _compile_structure(function: Node) -> _Compiled:
        try:
            expressed = express_function(function.body)
            schedule = _schedule(expressed)
            symbol = "".join(c if c.isalnum() else "_" for c in function.name)
            prim = te.lower(schedule, expressed.params + expressed.outputs, name=symbol)
            module = build_module([prim], name=symbol)
        except (CompileError, TypeInferenceError, NotImplementedError) as exc:
            return _Compiled(error=exc)
        return _Compiled(module[symbol], prim, tables=expressed.tables)
