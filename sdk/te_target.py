"""A base for targets that compile fused functions through TE (the CPU's and the GPU's).

Such a target turns each function it is given into a kernel in four steps, of which it
supplies only the middle two and its runtime:

1. **express** (here, once for every target): the function body op by op through the
   compute library (:mod:`heterocc.compute`) into tensor expressions
   (:func:`express_function`): placeholders for its inputs, its constants and the
   constant tables its computes embed;
2. **schedule** (the target's rules, applied here): a :class:`~heterocc.te.Schedule`
   of those expressions by the target's ordered :class:`ScheduleRule` list, each rule
   recognising a kind of stage by its compute's structure (:func:`schedule_by_rules`:
   one-element constants folded into the code, anchors such as a convolution given
   their elementwise tail, bias + activation + residual add, to finish in their own
   tiles, the rest inlined);
3. **lower** (the target, default :func:`heterocc.te.lower`) and **codegen** (the
   target): TIR to whatever the target runs;
4. **kernel** (the target): a callable over the function's arguments, which takes the
   function's constants in :func:`function_constants` order.

:class:`TETarget` chains them: a function whose ops the compute library cannot express
(or whose code a target cannot generate) runs on the NumPy references instead and is
listed in ``fallbacks`` with the reason, and functions of one structure
(:func:`structure_key`: the same ops, attributes, types and dataflow, whatever their
larger constants hold) share one compiled kernel, so the repeated blocks of a network
compile once.
"""

from __future__ import annotations

import contextlib
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from heterocc import te
from heterocc.compute import compute_of
from heterocc.compute.registry import code_key_of, unfolded_scalars_of
from heterocc.diagnostics import progress
from heterocc.errors import CompileError, TypeInferenceError
from heterocc.ir.graph import Node, Value
from heterocc.runtime.interpreter import evaluate
from heterocc.te.schedule import INLINE
from heterocc.te.schedule_reads import reads_of
from heterocc.tir import expr as tx
from heterocc.tir.visitor import Mutator, collect

#: how many times a broadcast must repeat each element of a costly stage before the stage is
#: computed once in memory rather than inlined (:func:`repeated_costly_stages`)
REPEAT_TO_KEEP = 2
#: float operations that make a stage costly without a math call or a division
COSTLY_OPERATIONS = 3
#: reductions that must read a costly stage, each in a pass over all of it, before the
#: stage is computed once in memory rather than inlined into each
#: (:func:`repeated_costly_stages`: a LayerNorm's mean and variance passes)
PASSES_TO_KEEP = 2

#: what "this function cannot be compiled" raises; anything else is a bug and propagates
COMPILE_ERRORS = (CompileError, TypeInferenceError, NotImplementedError)


# ----------------------------------------------------------------------------- express


@dataclass
class ExpressedFunction:
    """A function body as tensor expressions."""

    params: list  # placeholders of the function's inputs, its constants, then its tables
    constants: list[np.ndarray]  # the graph's constants, then the computes' tables
    outputs: list
    #: one-element constants, by id of their placeholder: folded into the code
    scalars: dict[int, np.ndarray] = field(default_factory=dict)
    #: the constant tables the computes embed (``te.constant_tensor``), the last entries
    #: of ``constants``; fixed by the ops' attributes and types (functions of one
    #: :func:`structure_key` have tables of equal shapes, equal where :func:`tables_key`
    #: is: ``CompiledFunction.tables_for``)
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
        except COMPILE_ERRORS:
            tables = []  # no kernel: nothing takes them
    return [_contiguous(v.data) for v in seen] + list(tables)


def _folded(op: str, position: int, value: Value) -> bool:
    """Whether the constant ``value``, first read as input ``position`` of an ``op``
    node, is folded into the code (:func:`fold_scalars`): one element, and no input the
    op's compute reads as an argument (:func:`unfolded_scalars_of`)."""
    return np.size(value.data) == 1 and position not in unfolded_scalars_of(op)


def express_function(body) -> ExpressedFunction:
    """A function body as tensor expressions, op by op through the compute library;
    CompileError where an op has no compute."""
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
        for k, v in enumerate(node.inputs):
            if v is not None and v not in tensors:
                if not v.is_const:
                    raise CompileError(f"value {v.name!r} is not defined in the function")
                data = _contiguous(v.data)
                folded = data if _folded(node.op, k, v) else None
                tensors[v] = te.placeholder(v.type.shape, v.type.dtype, f"c{len(constants)}",
                                            folded=folded)
                params.append(tensors[v])
                constants.append(data)
                if folded is not None:
                    scalars[id(tensors[v])] = data
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


# ----------------------------------------------------------------------------- schedule helpers


class _FoldScalars(Mutator):
    """Reads of one-element constants replaced by their values."""

    def __init__(self, scalars: dict[int, np.ndarray]):
        self.scalars = scalars

    def visit_TensorLoad(self, node: te.TensorLoad):
        value = self.scalars.get(id(node.tensor))
        if value is None:
            return self.generic(node)
        return te.const(value.reshape(()).item(), node.tensor.dtype)


def fold_scalars(schedule: te.Schedule, scalars: dict[int, np.ndarray]) -> None:
    """Fold one-element constants (:attr:`ExpressedFunction.scalars`: Clip bounds,
    scales) into every stage: an immediate needs no load, and a load under a vector
    select (NaN-aware min/max) would keep the TIR vectorizer from vectorizing the stage."""
    if not scalars:
        return
    folder = _FoldScalars(scalars)
    for stage in schedule.stages:
        if not stage.is_placeholder:
            stage.body = folder.expr(stage.body)


def _loads_of(tensor: te.Tensor) -> list[te.TensorLoad]:
    return collect(tensor.op.body, lambda n: isinstance(n, te.TensorLoad))


def reads_through_inlined(schedule: te.Schedule, reader: te.Tensor,
                          anchor: te.Tensor) -> bool:
    """Whether ``reader``'s body reads ``anchor``, directly or through inlined stages."""
    for load in _loads_of(reader):
        source = load.tensor
        if source is anchor:
            return True
        if schedule[source].attach == INLINE and reads_through_inlined(schedule, source, anchor):
            return True
    return False


def _reads_elementwise(schedule: te.Schedule, reader: te.Tensor, anchor: te.Tensor) -> bool:
    """Whether every read of ``anchor`` by ``reader`` (through inlined stages) is at the
    reader's own index, in a stage of ``anchor``'s shape."""
    axes = [iv.var for iv in reader.op.axis]
    for load in _loads_of(reader):
        source = load.tensor
        through = (source is not anchor and schedule[source].attach == INLINE
                   and reads_through_inlined(schedule, source, anchor))
        if source is not anchor and not through:
            continue
        if reader.shape != anchor.shape or len(load.indices) != len(axes) or any(
                index is not axis for index, axis in zip(load.indices, axes)):
            return False
        if through and not _reads_elementwise(schedule, source, anchor):
            return False
    return True


def elementwise_epilogue(schedule: te.Schedule, anchor: te.Tensor,
                         outputs: Sequence[te.Tensor],
                         takers: Sequence[te.Tensor] | None = None) -> te.Tensor | None:
    """The stage that finishes ``anchor`` elementwise (bias, residual add, activation,
    all inlined into it) and is its only reader: a stage of ``anchor``'s shape, with no
    reduction, that reads each element of it at its own index, so a schedule can
    compute it where the anchor's sum is still in a register. It must be one of
    ``takers`` (by default the function's ``outputs``; a target that keeps other
    stages in memory may let those take an epilogue too). None when there is none
    (``anchor`` is itself an output, has several readers, or is read across elements)."""
    if any(t is anchor for t in outputs):
        return None
    readers = [stage.tensor for stage in schedule.stages
               if not stage.is_placeholder and stage.attach != INLINE
               and stage.tensor is not anchor
               and reads_through_inlined(schedule, stage.tensor, anchor)]
    if len(readers) != 1:
        return None
    (reader,) = readers
    takers = outputs if takers is None else takers
    if (not any(t is reader for t in takers) or reader.op.reduce_axis
            or not _reads_elementwise(schedule, reader, anchor)):
        return None
    return reader


def epilogue_chain(schedule: te.Schedule, anchor: te.Tensor,
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


def _costly(expr) -> bool:
    """Whether ``expr`` calls a math function (``exp``, ``tanh``...), divides floats or
    takes :data:`COSTLY_OPERATIONS` or more float operations (a HardSigmoid's multiply,
    add and two clamps): more work than a store and a load of its result."""
    operations = 0
    for node in collect(expr, lambda n: isinstance(n, tx.Call | tx.Binary | tx.Select)):
        if isinstance(node, tx.Call):
            return True
        if isinstance(node, tx.Binary) and node.op == "div" and "float" in node.dtype:
            return True
        operations += "float" in node.dtype
    return operations >= COSTLY_OPERATIONS


def _elements(tensor: te.Tensor) -> int:
    return int(np.prod([int(d) for d in tensor.shape]))


def repeated_costly_stages(schedule: te.Schedule,
                           inlinable: Callable[[te.Tensor], bool]) -> list[te.Tensor]:
    """The stages that would be inlined (``inlinable``) into a reduction-free reader
    at least :data:`REPEAT_TO_KEEP` times their size (a broadcast: a squeeze-excite's
    ``x * Sigmoid(s)`` reads each of ``Sigmoid(s)``'s channels ``H x W`` times) or into
    :data:`PASSES_TO_KEEP` reductions or more (a LayerNorm's mean and variance passes
    over a requantized residual addition: ConvNeXt-T int8's downsampling LayerNorms
    computed it three times, with the output's pass), and that compute a math
    function, a division or several float operations (:func:`_costly`), themselves or
    through the stages inlined into them. Inlined, such a stage would compute each
    element once per read, so it is better computed once, in memory."""
    costly: dict[int, bool] = {}

    def candidate(source: te.Tensor) -> bool:  # a reduction-free stage to be inlined
        return (isinstance(source.op, te.ComputeOp) and not source.op.reduce_axis
                and inlinable(source))

    def costly_through(tensor: te.Tensor) -> bool:
        if id(tensor) not in costly:
            costly[id(tensor)] = False  # a cycle cannot occur; this bounds the recursion
            op = tensor.op
            costly[id(tensor)] = _costly(op.body) or any(
                costly_through(t) for t in reads_of(op.body) if candidate(t))
        return costly[id(tensor)]

    found: dict[int, te.Tensor] = {}
    passes: dict[int, int] = {}  # a candidate -> the reductions that read it
    for stage in schedule.stages:
        reader = stage.tensor
        if stage.is_placeholder:
            continue
        sources = {id(t): t for t in reads_of(reader.op.body) if candidate(t)}
        for source in sources.values():
            if reader.op.reduce_axis:
                passes[id(source)] = passes.get(id(source), 0) + 1
                if passes[id(source)] >= PASSES_TO_KEEP and costly_through(source):
                    found.setdefault(id(source), source)
            elif (_elements(reader) >= REPEAT_TO_KEEP * _elements(source)
                    and costly_through(source)):
                found.setdefault(id(source), source)
    return list(found.values())


# ----------------------------------------------------------------------------- schedule rules


class ScheduleRule(ABC):
    """One kind of stage a target schedules its own way, recognised by the structure of
    its compute (its axes, reductions and reads), never by a name the compute library
    put on it. A target lists its rules in order (:meth:`TETarget.schedule_rules`); the
    first whose :meth:`matches` accepts a stage schedules it.

    An *anchor* rule (``anchor = True``: convolutions, products, reductions) keeps its
    stage in memory (its producers are inlined into it) and may finish the stage's
    elementwise epilogue in its own tiles (``epilogue = True``; ``epilogue_chain``: only
    when the inlined stages between them form one path). A rule with ``anchor = False``
    schedules what stays in memory without being an anchor: the function's outputs
    and the stages the compute library keeps (``keep``), which no anchor finished."""

    anchor: bool = True
    epilogue: bool = False
    epilogue_chain: bool = False

    @abstractmethod
    def matches(self, tensor: te.Tensor) -> bool:
        """Whether this rule schedules ``tensor``'s stage."""

    @abstractmethod
    def apply(self, schedule: te.Schedule, tensor: te.Tensor,
              epilogue: te.Tensor | None = None,
              chain: Sequence[te.Tensor] = ()) -> bool:
        """Schedule ``tensor``'s stage (and ``epilogue``, its elementwise tail, when the
        rule takes epilogues and the function has one; ``chain``: the inlined stages
        between them). Returns whether it finished ``epilogue``."""

    def owned(self, tensor: te.Tensor) -> Sequence[te.Tensor]:
        """Stages the rule schedules along with ``tensor`` (a product's packing of its
        operand), which are neither inlined nor scheduled on their own."""
        return ()


def _untouched(stage: te.Stage) -> bool:
    """Whether no schedule has given ``stage`` a place or loops yet."""
    return (stage.attach != INLINE and not stage.relations and not stage.loop_kinds)


def schedule_by_rules(outputs: Sequence[te.Tensor], rules: Sequence[ScheduleRule],
                      scalars: dict[int, np.ndarray] | None = None,
                      kept_take_epilogues: bool = False) -> te.Schedule:
    """The schedule of a function's ``outputs`` by ``rules`` (see :class:`ScheduleRule`),
    the one place that finds the anchors, gives them their epilogues and inlines the
    rest: one-element constants are folded into the code (``scalars``,
    :func:`fold_scalars`); every stage that an anchor rule matches is an anchor unless
    another anchor's rule owns it (:meth:`ScheduleRule.owned`), every
    other stage is inlined into its readers unless it is an output, kept, or a costly
    stage that a broadcast would recompute (:func:`repeated_costly_stages`); each anchor
    that takes an epilogue is given its elementwise epilogue where it has one
    (:func:`elementwise_epilogue`: an output or a repeated costly stage, or with
    ``kept_take_epilogues`` also a kept stage, and each taken by one anchor only); the
    anchors are scheduled by their rules, then the outputs and kept stages that no
    anchor finished by the first non-anchor rule that matches them."""
    outputs = list(outputs)
    schedule = te.create_schedule(outputs)
    fold_scalars(schedule, scalars or {})
    output_ids = {id(t) for t in outputs}
    anchors: list[tuple[te.Tensor, ScheduleRule]] = []
    owned: set[int] = set()
    for stage in schedule.stages:
        if stage.is_placeholder:
            continue
        rule = next((r for r in rules if r.anchor and r.matches(stage.tensor)), None)
        if rule is not None:
            anchors.append((stage.tensor, rule))
            owned.update(id(t) for t in rule.owned(stage.tensor) if t is not stage.tensor)
    # a stage another anchor's rule owns is scheduled by that rule, never as an anchor of
    # its own (a softmax's row maximum and sum, reductions that the reduction rule would
    # otherwise take)
    anchors = [(t, rule) for t, rule in anchors if id(t) not in owned]
    anchor_ids = {id(t) for t, _ in anchors}
    repeated = {id(t) for t in repeated_costly_stages(
        schedule, lambda t: not (id(t) in anchor_ids or id(t) in owned
                                 or id(t) in output_ids or t.op.attrs.get("keep")))}
    stays: list[te.Tensor] = []  # outputs and kept stages: in memory, not anchors
    for stage in list(schedule.stages):
        t = stage.tensor
        if stage.is_placeholder or id(t) in anchor_ids or id(t) in owned:
            continue
        if id(t) in output_ids or t.op.attrs.get("keep") or id(t) in repeated:
            stays.append(t)
        else:
            stage.compute_inline()
    # a repeated costly stage is an anchor's elementwise tail at the anchor's own size
    # (a squeeze-excite's bias and Sigmoid after its 1x1 convolution): its tile takes it
    takers = [t for t in stays
              if kept_take_epilogues or id(t) in output_ids or id(t) in repeated]
    epilogues: dict[int, tuple[te.Tensor, list[te.Tensor]]] = {}
    for anchor, rule in anchors:
        if not rule.epilogue:
            continue
        epilogue = elementwise_epilogue(schedule, anchor, outputs, takers=takers)
        if epilogue is None:
            continue
        chain = epilogue_chain(schedule, anchor, epilogue)
        if chain is None and rule.epilogue_chain:
            continue
        takers = [t for t in takers if t is not epilogue]
        epilogues[id(anchor)] = (epilogue, chain or [])
    finished: set[int] = set()
    for anchor, rule in anchors:
        epilogue, chain = epilogues.get(id(anchor), (None, []))
        if rule.apply(schedule, anchor, epilogue, chain):
            finished.add(id(epilogue))
    for t in stays:
        if id(t) in finished or not (id(t) in output_ids or _untouched(schedule[t])):
            continue
        rule = next((r for r in rules if not r.anchor and r.matches(t)), None)
        if rule is not None:
            rule.apply(schedule, t)
    return schedule


# ----------------------------------------------------------------------------- structure keys


#: attribute values that are their own key
_PLAIN = frozenset((int, float, str, bool))


def _frozen(value) -> object:
    """A hashable stand-in for an attribute value (arrays by content)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        if all(type(v) in _PLAIN for v in value):  # per-channel lists: thousands of ints
            return tuple(value)
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, str | int | float | bool | bytes | np.generic) or value is None:
        return value
    return ("object", id(value))  # never equal to another object's key


def structure_key(body) -> tuple:
    """What the kernel of a function body depends on: its ops, attributes, value types
    and dataflow, and the values of its one-element constants (folded into the code),
    but not the contents of larger constants, which the kernel takes as arguments, nor
    of attributes that a compute passes as tables (its ``code_key``: each function
    gets its own, :func:`tables_key`). Functions with equal keys share one compiled
    kernel."""
    refs: dict[Value, tuple] = {v: ("input", k, v.type.shape, v.type.dtype)
                                for k, v in enumerate(body.inputs)}
    nodes = []
    for node in body.nodes:
        args = []
        for k, v in enumerate(node.inputs):
            if v is not None and v not in refs:
                folded = v.data.tobytes() if v.is_const and _folded(node.op, k, v) else None
                refs[v] = ("constant" if v.is_const else "undefined", len(refs),
                           v.type.shape, v.type.dtype, folded)
            args.append(None if v is None else refs[v])
        for k, v in enumerate(node.outputs):
            refs[v] = ("node", len(nodes), k, v.type.shape, v.type.dtype)
        code_key = code_key_of(node.op)  # a costly one remembers its keys (code_key_of)
        attrs = code_key(node.attrs) if code_key else _frozen(node.attrs)
        nodes.append((node.op, attrs, tuple(args)))
    return tuple(nodes), tuple(refs.get(v) for v in body.outputs)


def tables_key(body) -> tuple:
    """What, beyond :func:`structure_key`, a function's tables depend on: the attributes
    of its ops whose computes pass attributes as tables."""
    return tuple(_frozen(node.attrs) for node in body.nodes if code_key_of(node.op))


# ----------------------------------------------------------------------------- the base


def kernel_symbol(function: Node) -> str:
    """The symbol of ``function``'s compiled code: its name as a C identifier."""
    return "".join(c if c.isalnum() else "_" for c in function.name)


def output_specs(function: Node) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each output of ``function``, the arrays its kernel returns."""
    return [(v.type.shape, v.type.dtype) for v in function.outputs]


def numpy_kernel(function: Node) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
    """``function`` run on the ops' NumPy references (the fallback of every target),
    marked ``numpy_fallback`` so that a profile says where it really ran. Its outputs
    are C-contiguous, as a compiled kernel's are and as the compiled kernels that read
    them require (a reference's Transpose returns a strided view)."""
    body = function.body

    def run(args):
        # (np.ascontiguousarray would make a 0-d output 1-d)
        return [out if out.flags.c_contiguous else np.ascontiguousarray(out)
                for out in evaluate(body, args)]

    run.numpy_fallback = True
    return run


@dataclass
class CompiledFunction:
    """A function structure compiled once (shared by every function of its
    :func:`structure_key`), or why it could not be."""

    code: Any = None  #: what the target's codegen made (a machine-code entry, a module)
    lowered: Any = None  #: what it was made from (a TIR PrimFunc, the GPU kernels)
    tables: list[np.ndarray] = field(default_factory=list)  #: the computes' tables
    error: Exception | None = None
    #: :func:`tables_key` of the function compiled, whose :attr:`tables` these are
    tables_of: tuple = ()

    def tables_for(self, body) -> list[np.ndarray]:
        """The computes' tables of ``body``, a function of this structure: :attr:`tables`
        where its attributes are those compiled, else its own (expressed again)."""
        if tables_key(body) == self.tables_of:
            return self.tables
        return express_function(body).tables


@dataclass(kw_only=True)
class TETarget(ABC):
    """Base of targets that compile functions through TE (see the module docstring).

    A subclass supplies :meth:`schedule_rules` (or replaces :meth:`schedule`),
    :meth:`codegen` and :meth:`kernel`, and may replace :meth:`lower`; it inherits
    :meth:`build` (the Target protocol), the NumPy fallback with ``fallbacks``
    (function name -> why it runs on NumPy) and the sharing of compiled code between
    functions of one structure."""

    fallbacks: dict[str, str] = field(default_factory=dict)
    #: compiled code so far, by :func:`structure_key` (repeated blocks compile once)
    _compiled: dict[tuple, CompiledFunction] = field(default_factory=dict, repr=False)

    #: whether one-element constants are folded into the code (:func:`fold_scalars`)
    folds_scalars: ClassVar[bool] = True
    #: whether a kept stage (``keep``) may take an anchor's epilogue, besides the outputs
    kept_take_epilogues: ClassVar[bool] = False

    # -- what a target supplies

    def schedule_rules(self) -> Sequence[ScheduleRule]:
        """The target's schedule rules, in the order they are tried (see
        :class:`ScheduleRule`): anchor rules, then the rules of the stages that stay in
        memory without being anchors. None by default: every stage but the outputs and
        kept stages inlined, with TE's default loops (a target that schedules otherwise
        replaces :meth:`schedule`)."""
        return ()

    def schedule(self, expressed: ExpressedFunction) -> te.Schedule:
        """The target's schedule of a function's tensor expressions: by default
        :func:`schedule_by_rules` with :meth:`schedule_rules`."""
        return schedule_by_rules(expressed.outputs, self.schedule_rules(),
                                 expressed.scalars if self.folds_scalars else None,
                                 self.kept_take_epilogues)

    def lower(self, schedule: te.Schedule, expressed: ExpressedFunction, symbol: str):
        """``schedule`` lowered to what :meth:`codegen` takes; by default one TIR
        PrimFunc over the inputs, constants and tables, then the outputs."""
        return te.lower(schedule, expressed.params + expressed.outputs, name=symbol)

    @abstractmethod
    def codegen(self, lowered, symbol: str):
        """The target's code of ``lowered`` (kept in :attr:`CompiledFunction.code`)."""

    def codegen_later(self, lowered, symbol: str) -> Callable[[], Any]:
        """:meth:`codegen` of ``lowered`` as a callable that returns the code, or
        raises what codegen raised. By default codegen runs at once; a target whose
        code generator works outside Python (LLVM, a vendor compiler) may start it in
        the background and wait in the callable, so that :meth:`compile_all` lowers the
        next functions meanwhile."""
        code = self.codegen(lowered, symbol)
        return lambda: code

    @abstractmethod
    def kernel(self, function: Node, compiled: CompiledFunction):
        """The callable that runs ``function`` with ``compiled`` (its structure's code)."""

    # -- written once

    @property
    def distinct_kernels(self) -> int:
        """Kernels compiled so far; functions of one structure share one."""
        return sum(1 for c in self._compiled.values() if c.error is None)

    def build(self, function: Node):
        """The kernel of ``function``, or its NumPy fallback where it cannot be
        compiled (the reason is kept in ``fallbacks``)."""
        return self.build_with(function, self.kernel)

    def compile_all(self, functions: Sequence[Node]) -> None:
        """Compile the structures of ``functions`` ahead of :meth:`build`, each one's
        code generated while the next ones are lowered (:meth:`codegen_later`): the
        same code and errors as compiling them one by one, in less time where codegen
        runs outside Python."""
        pending: dict[tuple, Callable[[], CompiledFunction]] = {}
        for function in progress(functions, f"{self.name}: lowering functions",
                                 len(functions)):
            key = structure_key(function.body)
            if key not in self._compiled and key not in pending:
                pending[key] = self._start_structure(function)
        for key, finish in pending.items():
            self._compiled[key] = finish()

    def build_with(self, function: Node,
                   make_kernel: Callable[[Node, CompiledFunction], Any]):
        """:meth:`build` with ``make_kernel`` in place of :meth:`kernel` (a target
        whose kernels depend on how it is asked, e.g. with or without a device)."""
        try:
            return make_kernel(function, self.compiled(function))
        except COMPILE_ERRORS as exc:
            self.fallbacks[function.name] = f"{type(exc).__name__}: {exc}"
            return numpy_kernel(function)

    def compiled(self, function: Node) -> CompiledFunction:
        """The compiled code of ``function``'s structure (compiled on first request);
        raises the compile error when it could not be compiled."""
        key = structure_key(function.body)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile_structure(function)
        if compiled.error is not None:
            raise compiled.error
        return compiled

    def compile_context(self) -> contextlib.AbstractContextManager:
        """Entered around expressing, scheduling, lowering and code generation of each
        function (e.g. the CPU description the schedules tile for); none by default."""
        return contextlib.nullcontext()

    def _compile_structure(self, function: Node) -> CompiledFunction:
        return self._start_structure(function)()

    def _start_structure(self, function: Node) -> Callable[[], CompiledFunction]:
        """Express, schedule and lower ``function`` now, start its codegen
        (:meth:`codegen_later`); the callable returned waits for the code."""
        try:
            with self.compile_context():
                expressed = express_function(function.body)
                symbol = kernel_symbol(function)
                lowered = self.lower(self.schedule(expressed), expressed, symbol)
                code = self.codegen_later(lowered, symbol)
        except COMPILE_ERRORS as exc:
            return functools.partial(CompiledFunction, error=exc)
        except RecursionError:
            # a long fused chain nests its expression deeper than the recursive
            # expression visitors go: the function runs on its NumPy reference instead
            return functools.partial(CompiledFunction, error=CompileError(
                f"function {function.name!r} ({len(function.body.nodes)} ops): its "
                "expression is nested too deeply to compile"))

        def finish() -> CompiledFunction:
            try:
                return CompiledFunction(code(), lowered, expressed.tables,
                                        tables_of=tables_key(function.body))
            except COMPILE_ERRORS as exc:
                return CompiledFunction(error=exc)
        return finish
