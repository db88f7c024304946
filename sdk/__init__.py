"""heterocc.sdk: the public interface for adding a hardware target.

A target package imports only this package (and the IR, TE and TIR packages it
re-exports: ``heterocc.sdk.ir``, ``.te``, ``.tir``), as the in-tree targets do. It finds here

* the **protocols** a target implements: :class:`Target` (``name`` and ``build``, the
  only required part), and the optional hooks :class:`PartitioningTarget`
  (``pattern_table``), :class:`GraphPassTarget` (``graph_passes``: its passes in the
  compile pipeline), :class:`ExportableTarget` (``save_kernels`` / ``load_kernel``),
  :class:`TunableTarget` (``tuning``: its tuning templates, tasks and measurement),
  :class:`HilTarget` (``hil_command``: ``heterocc hil MODEL.onnx``) and
  :class:`AcceleratorTarget` (tensor intrinsics, lowering to a schedule, codegen
  from TIR, a device);
* the **device** protocol :class:`Device` (copy in, run, copy out, timing), its
  asynchronous form :class:`AsyncDevice` (``submit`` a program, get a
  :class:`DeviceCall`, ``wait`` on it; :func:`asynchronous` wraps a device without
  it) and the executor's queue of one device (:class:`DeviceQueue`): functions on
  different devices run at once where the graph allows;
* the **pieces** the compiler already has, re-exported: the pattern language, the
  registry, TE (with :class:`TensorIntrin`), TIR, the error hierarchy and the NumPy
  reference interpreter that is every target's oracle;
* the **base of TE-compiled targets** (:mod:`heterocc.sdk.te_target`, the one the in-tree
  ``llvm`` and ``cuda`` targets build on): :class:`TETarget` runs express (op by op
  through the compute library, :func:`express_function`) -> the target's ``schedule``
  (by default its ordered :class:`ScheduleRule` list, applied by
  :func:`schedule_by_rules`) -> ``lower`` -> the target's ``codegen`` -> the
  target's ``kernel``, with the NumPy fallback listed in ``fallbacks`` and one
  compiled kernel per :func:`structure_key`;
  its schedule helpers (:func:`fold_scalars`, :func:`elementwise_epilogue`,
  :func:`epilogue_chain`) and :func:`function_constants` (the order a kernel takes
  the constants in) come with it. A target that generates code from TIR walks it with
  the functors of :mod:`heterocc.tir.functor` (``tir.ExprFunctor``,
  ``tir.StmtFunctor``, ``tir.StmtEmitter``: one ``visit_<Class>`` rule per node class);
* **helpers** that do the plumbing every accelerator target would otherwise write:
  :func:`composite_parts` (a composite function node taken apart),
  :func:`compile_composite` / :func:`build_accelerator_region` (composite -> TE ->
  TIR -> codegen -> a kernel driving the device), :func:`leaf_statements` (walk a
  lowered function with every loop variable bound, the core of a command-list codegen),
  :func:`element_address` (an operand as buffer + offset), :func:`lowering_metadata`
  (what the lowering told codegen, :attr:`Lowering.metadata`), the on-chip memory
  placer :class:`MemoryPlacer` (buffers -> :class:`Bank` s and offsets, with capacity
  errors; :mod:`heterocc.sdk.memory`), the declarative instruction encoder
  :class:`InstructionSet` (fields declared once: encode, decode and the ISA table;
  :mod:`heterocc.sdk.isa`) and :func:`reference_outputs` (the oracle of a function);
* the **cost interface** (:mod:`heterocc.sdk.cost`: what placement asks a target
  for an estimate of a function, :class:`CostTarget`), the **tuning** pieces a
  :class:`TunableTarget` builds its templates from (:mod:`heterocc.sdk.tuning`), and the
  graph pieces a target's own passes use (:mod:`heterocc.sdk.graph`);
* **bring-up**: :mod:`heterocc.sdk.hil` (``heterocc hil MODEL.onnx --target NAME``: a
  model on the target's device, checked layer by layer against the references).

A target registers itself with :func:`register_target`, or, from another
distribution, through the entry-point group ``heterocc.targets``
(:data:`ENTRY_POINT_GROUP`)::

    [project.entry-points."heterocc.targets"]
    mytarget = "my_package:MyTarget"
"""

from __future__ import annotations

from heterocc import ir, te, tir
from heterocc.errors import (
    AcceleratorError,
    ArtifactError,
    CompileError,
    HeteroccError,
    IllegalInstructionError,
    InputError,
    PatternError,
    TargetError,
)
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.patterns import (
    CompositePattern,
    Match,
    Pattern,
    absent,
    is_constant,
    is_op,
    match,
    optional,
    wildcard,
)
from heterocc.runtime.overlap import DeviceQueue, kernel_device
from heterocc.te import BufferRegion, TensorIntrin

from .accelerator import (
    METADATA_ATTR,
    AcceleratorBase,
    AcceleratorTarget,
    Binding,
    CompositeParts,
    DeviceKernel,
    LayoutKernel,
    LayoutRegion,
    Lowering,
    MirroredDevice,
    ProgramRunner,
    Result,
    build_accelerator_region,
    compile_composite,
    composite_parts,
    lowering_metadata,
    reference_outputs,
)
from .addressing import coalesce, element_address, evaluate_index, flat_offset, leaf_statements
from .cost import (
    CostCache,
    CostEstimate,
    CostTarget,
    HostLink,
    Port,
    accelerator_estimate,
    can_estimate,
    workload_key,
)
from .device import (
    AsyncDevice,
    Device,
    DeviceCall,
    DeviceTiming,
    ResidentDevice,
    SynchronousDevice,
    asynchronous,
    device_lock,
    holds,
    load_program,
    program_name,
    run_on,
)
from .hil import LayerComparison, ModelHilReport, model_hil
from .isa import Command, Field, InstructionFormat, InstructionSet
from .memory import Bank, MemoryPlacer, Placement
from .protocols import (
    ENTRY_POINT_GROUP,
    ExportableTarget,
    GraphPassTarget,
    HilTarget,
    Kernel,
    PartitioningTarget,
    Target,
    TunableTarget,
)
from .registry import TargetInfo, available_targets, get_target, register_target
from .te_target import (
    CompiledFunction,
    ExpressedFunction,
    ScheduleRule,
    TETarget,
    elementwise_epilogue,
    epilogue_chain,
    express_function,
    fold_scalars,
    function_constants,
    schedule_by_rules,
    structure_key,
)

__all__ = [
    "absent", "accelerator_estimate", "AsyncDevice", "asynchronous", "DeviceCall",
    "DeviceQueue", "kernel_device", "program_name", "run_on", "SynchronousDevice",
    "AcceleratorBase", "AcceleratorError", "AcceleratorTarget",
    "ArtifactError", "available_targets", "Bank", "Binding", "BufferRegion",
    "build_accelerator_region", "can_estimate", "coalesce", "Command", "compile_composite",
    "CompiledFunction", "CompileError", "composite_parts", "CompositeParts", "CompositePattern",
    "CostCache", "CostEstimate", "CostTarget", "Device", "device_lock", "DeviceKernel",
    "DeviceTiming", "element_address", "elementwise_epilogue", "ENTRY_POINT_GROUP",
    "epilogue_chain", "evaluate_index", "ExportableTarget", "express_function",
    "ExpressedFunction", "Field", "flat_offset", "fold_scalars", "function_constants",
    "get_target", "Graph", "GraphPassTarget", "HeteroccError", "HilTarget", "holds", "HostLink",
    "IllegalInstructionError", "InputError", "InstructionFormat", "InstructionSet", "ir",
    "is_constant", "is_op", "Kernel", "LayerComparison", "LayoutKernel", "LayoutRegion",
    "leaf_statements", "load_program", "Lowering", "lowering_metadata", "Match", "match",
    "MemoryPlacer", "METADATA_ATTR", "MirroredDevice", "model_hil", "ModelHilReport", "Node",
    "optional", "PartitioningTarget", "Pattern", "PatternError", "Placement", "Port",
    "ProgramRunner",
    "reference_outputs", "register_target", "ResidentDevice", "Result", "schedule_by_rules",
    "ScheduleRule", "structure_key", "Target", "TargetError", "TargetInfo", "te", "TensorIntrin",
    "TensorType", "TETarget", "tir", "TunableTarget", "Value", "wildcard", "workload_key",
]
