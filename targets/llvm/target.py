"""The ``llvm`` target: each fused function becomes one machine-code kernel.

A TE-compiled target (:class:`heterocc.sdk.te_target.TETarget`: expressing a function op by
op through the compute library, the NumPy fallback listed in ``fallbacks``, kernels
shared by functions of one structure). What is the CPU's here: the schedule (its
intermediate elementwise/injective stages are inlined into their readers, its anchor, a
convolution, a matmul or a reduction, gets the CPU schedule for its kind, one-element
constants are folded into the code, the elementwise epilogue of a convolution or a
product, bias + residual add + activation, is finished in its register tiles, products
read constant weights packed once when the kernel is built), the code
generator (TIR to LLVM, :mod:`.codegen` and :mod:`.module`) and the kernels, which call
the machine code with NumPy arrays.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from heterocc.ir.graph import Node
from heterocc.sdk import InputError, TargetError, te
from heterocc.sdk.graph import alter_layout_for
from heterocc.sdk.runtime import NativeEntry, member_path
from heterocc.sdk.te_target import (
    CompiledFunction,
    ExpressedFunction,
    ScheduleRule,
    TETarget,
    function_constants,
    numpy_kernel,
    output_specs,
    schedule_by_rules,
)
from heterocc.sdk.tuning import SCHEDULE_RULES, current, records_for
from heterocc.te.schedule_reads import reads_of
from heterocc.tir import lower_pipeline

from .codegen import EXACT_FLOAT
from .cost import CpuCostModel
from .cpu import CPUDescription, check_runs_on, compiling_for, parse_cpu
from .int8_matmul import integer_products_as_convolutions
from .module import build as build_module
from .module import build_later, load_library
from .outputs import OutputArrays
from .rules import ChannelSelectRule, cpu_rules, generic_rules
from .schedules import (
    DEPTHWISE_PACKINGS,
    MATRIX_WEIGHT_PACKING,
    WIDENED_WEIGHT_PACKING,
    PanelChoice,
    channel_lanes_tiles,
    depthwise_weight_packing,
    int8_conv_operands,
    matrix_conv,
    matrix_weight_shape,
    pack_columns,
    pack_depthwise_weight_array,
    pack_int8_weight_array,
    pack_matmuls,
    pack_matrix_weight_array,
    packed_source,
    packed_weight_dtype,
    packed_weight_shape,
    reachable_computes,
    row_tiles,
    split_at_channel_selects,
    use_int8_conv,
    use_int8_convs,
    use_prepacked,
)
from .schedules.winograd_conv import (
    WINOGRAD_PACKING,
    WINOGRAD_TILES,
    transform_weight_array,
    transformed_weight_shape,
    use_winograd_conv,
    winograd_operands,
    winograd_tile,
)
from .sequence import runner_of
from .tuning import (
    ScheduleConfigs,
    function_configs,
    function_tuned,
    llvm_tuning,
    record_winograd_tile,
)

#: Python's thread switch interval while a model's kernels compile (see
#: :meth:`LLVMTarget.compile_all`)
SWITCH_INTERVAL_S = 0.001


def _transposed_constant(source: te.Tensor, slots: dict[int, int]
                         ) -> tuple[te.Tensor, list[int] | None] | None:
    """``(constant placeholder, axes)`` when ``source`` is one of the function's constants
    (axes None) or a plain transpose of one (Gemm's ``transB``: ``source`` is
    ``constant.transpose(axes)``); None otherwise."""
    if id(source) in slots:
        return source, None
    body = source.op.body if isinstance(source.op, te.ComputeOp) else None
    if not isinstance(body, te.TensorLoad) or id(body.tensor) not in slots:
        return None
    axes = [iv.var for iv in source.op.axis]
    indices = list(body.indices)
    if len(indices) != len(axes) or any(
            sum(index is axis for index in indices) != 1 for axis in axes):
        return None
    return body.tensor, [next(p for p, index in enumerate(indices) if index is axis)
                         for axis in axes]


@dataclass
class _FunctionConstants:
    """The graph constants among a function's parameters (``expressed.params[first:]``,
    but its tables), by slot, and how many of its stages read each tensor: where a
    kernel may take a constant read once in a packing of its own, built with it."""

    expressed: ExpressedFunction
    stages: list
    first: int
    slots: dict[int, int]
    readers: dict[int, int]

    @classmethod
    def of(cls, expressed: ExpressedFunction) -> _FunctionConstants:
        first = len(expressed.params) - len(expressed.constants)
        slots = {id(p): k for k, p in
                 enumerate(expressed.params[first:len(expressed.params)
                                            - len(expressed.tables)])}
        stages = reachable_computes(expressed.outputs)
        readers: dict[int, int] = {}
        for stage in stages:
            for source in {id(t) for t in reads_of(stage.op.body)}:
                readers[source] = readers.get(source, 0) + 1
        return cls(expressed, stages, first, slots, readers)

    def read_once(self, tensor: te.Tensor) -> bool:
        """Whether one stage alone reads ``tensor``."""
        return self.readers.get(id(tensor)) == 1

    def packable(self, tensor: te.Tensor) -> bool:
        """Whether ``tensor`` is a graph constant that one stage alone reads."""
        return id(tensor) in self.slots and self.read_once(tensor)

    def replace(self, constant: te.Tensor, shape, dtype: str, suffix: str
                ) -> tuple[te.Tensor, int]:
        """``(placeholder, constant index)``: the constant's parameter replaced by a
        placeholder of ``shape`` and ``dtype`` (named ``<constant>.<suffix>``), the
        packing its kernel reads."""
        placeholder = te.placeholder(shape, dtype, f"{constant.name}.{suffix}")
        index = self.slots[id(constant)]
        self.expressed.params[self.first + index] = placeholder
        return placeholder, index


def _prepack_constants(expressed: ExpressedFunction, panel_of: PanelChoice | None,
                       cpu: CPUDescription, int8: bool = True,
                       winograd_tile: Callable[[te.Tensor], int] | None = None
                       ) -> list[tuple[int, int, list | None]]:
    """Products whose B is one of the function's graph constants (or a transpose of one)
    read it packed once, when the kernel is built, instead of packing it on every call:
    the constant's placeholder in ``expressed.params`` becomes one of the packed shape.
    Returns ``(constant index, panel width, axes)`` of each, the packing that
    :func:`_packed_constants` applies to ``function_constants`` (``axes``: the transpose
    applied first, or None). A constant also read otherwise stays as it is. ``panel_of``
    and ``cpu``: see :func:`.schedules.pack_matmuls`. ``int8``: integer convolutions
    take the CPU's dot product (False: they stay the plain integer computes, as with
    the hand rules off). ``winograd_tile``: the F(m, 3) tile of each blocked
    convolution (0: direct; None: none by Winograd), see
    :func:`_prepack_winograd_weights`."""
    pack_matmuls(expressed.outputs, panel_of, cpu=cpu)
    constants = _FunctionConstants.of(expressed)
    packings = _prepack_int8_conv_weights(constants, cpu) if int8 else []
    if winograd_tile is not None:
        packings += _prepack_winograd_weights(constants, winograd_tile)
    for product in constants.stages:
        source = packed_source(product)
        found = None if source is None else _transposed_constant(source, constants.slots)
        if found is None or not (constants.read_once(source)
                                 and constants.read_once(found[0])):
            continue
        constant, axes = found
        packed = product.op.attrs["packed_B"]
        prepacked, index = constants.replace(constant, packed.shape, packed.dtype, "packed")
        use_prepacked(product, prepacked)
        packings.append((index, int(packed.shape[-1]), axes))
    return packings


def _prepack_int8_conv_weights(constants: _FunctionConstants, cpu: CPUDescription
                               ) -> list[tuple[int, int | str, int | None]]:
    """Integer convolutions the CPU computes on its dot product (``use_int8_conv``),
    reading a constant weight that nothing else reads packed once, when the kernel is
    built: ``(constant index, 0, lanes)`` for each (width 0: :func:`.schedules.
    pack_int8_weight_array`, see :func:`_packed_constants`; ``lanes``: its vectors of
    output channels where it takes channel lanes, else 0); a depthwise one's
    ``(constant index, packing, lanes)`` (:func:`.schedules.depthwise_weight_packing`:
    flat for a whole-image window, its quads, its pairs of taps, or ``-lanes``, its int16
    vectors; ``lanes``: the CPU's int32 lanes, which the flat packing pads to)."""
    packings = []
    for stage in constants.stages:
        described = int8_conv_operands(stage)
        if described is None:
            continue
        weight = described["w"]
        prepacked = None
        if constants.packable(weight):
            if described["depthwise"]:
                shape, dtype, packing = depthwise_weight_packing(
                    weight.shape, described["attrs"], cpu, described["x"].shape)
                prepacked, index = constants.replace(weight, shape, dtype, "packed")
                packings.append((index, packing, cpu.vector_lanes("int32")))
            elif row_tiles(described["x"].shape, weight.shape, described["attrs"],
                           cpu) is None and matrix_conv(described["x"].shape, weight.shape,
                                                        described["attrs"], cpu):
                prepacked, index = constants.replace(
                    weight, matrix_weight_shape(weight.shape), "int8", "packed")
                packings.append((index, MATRIX_WEIGHT_PACKING, 0))
            else:  # axes: the vectors of output channels of channel lanes (or 0)
                tiles = row_tiles(described["x"].shape, weight.shape, described["attrs"],
                                  cpu) or channel_lanes_tiles(described["x"].shape,
                                                              weight.shape,
                                                              described["attrs"], cpu)
                lanes = tiles.lanes if tiles is not None else 0
                dtype = packed_weight_dtype(cpu, tiles)
                prepacked, index = constants.replace(
                    weight, packed_weight_shape(weight.shape, lanes, dtype), dtype, "packed")
                packings.append((index, 0 if dtype == "int8" else WIDENED_WEIGHT_PACKING,
                                 lanes))
        use_int8_conv(stage, cpu, prepacked)
    return packings


def _prepack_winograd_weights(constants: _FunctionConstants,
                              winograd_tile: Callable[[te.Tensor], int]
                              ) -> list[tuple[int, str, int]]:
    """Blocked 3x3 convolutions that ``winograd_tile`` gives an F(m, 3) tile, reading a
    constant weight nothing else reads, computed by Winograd (``use_winograd_conv``)
    on that weight transformed once, when the kernel is built: ``(constant index,
    WINOGRAD_PACKING, m)`` for each (see :func:`_packed_constants`)."""
    packings = []
    for stage in constants.stages:
        operands = winograd_operands(stage)
        if operands is None or not constants.packable(operands["w"]):
            continue
        m = winograd_tile(stage)
        if not m:
            continue
        weight = operands["w"]
        transformed, index = constants.replace(
            weight, transformed_weight_shape(weight.shape, m), weight.dtype, "winograd")
        use_winograd_conv(stage, transformed, m)
        packings.append((index, WINOGRAD_PACKING, m))
    return packings


def _schedule(expressed: ExpressedFunction, cpu: CPUDescription,
              configs: ScheduleConfigs | None = None, rules: str = "hand") -> te.Schedule:
    """The CPU's rules (:func:`.rules.cpu_rules`) applied to a function: injective
    stages inlined, anchors (convolutions, products, reductions, layout transforms)
    given their CPU schedule (the elementwise epilogue of a convolution or a product is
    computed in its register tiles), the other outputs vectorized and in parallel.
    Products are first given the CPU's packed layout of B (the compute library's are
    plain); a product's packing of a non-constant B is its own stage, never inlined
    (that would read B across rows in the inner loop). ``cpu``: the CPU description to
    tile for (None: the active one); ``configs``: the tuning log's for the function
    (None: the defaults). ``rules="none"``: the generic rules
    (:func:`.rules.generic_rules`) instead of the hand rules; products are packed all
    the same (the compute the auto search's sketches are derived from)."""
    configs = configs or ScheduleConfigs()
    pack_matmuls(expressed.outputs, configs.matmul_panel, cpu=cpu)
    if rules == "none":
        return schedule_by_rules(expressed.outputs, generic_rules(cpu, configs),
                                 expressed.scalars)
    use_int8_convs(expressed.outputs, cpu)
    return schedule_by_rules(expressed.outputs, cpu_rules(cpu, configs), expressed.scalars)


def _packed_constants(constants: list[np.ndarray], packings) -> list[np.ndarray]:
    """A kernel's constants with those its products read prepacked packed
    (``(constant index, panel width, axes)``, see :func:`_prepack_constants`)."""
    constants = list(constants)
    for index, width, axes in packings:
        if width == WINOGRAD_PACKING:  # a Winograd convolution's weight, ``axes`` its m
            constants[index] = transform_weight_array(constants[index], axes)
            continue
        if width == MATRIX_WEIGHT_PACKING:  # an integer convolution's on the tiles
            constants[index] = pack_matrix_weight_array(constants[index])
            continue
        if width in (0, WIDENED_WEIGHT_PACKING):  # an integer convolution's weight
            # (_prepack_int8_conv_weights): int8, or widened to int16
            constants[index] = pack_int8_weight_array(
                constants[index], axes, "int8" if width == 0 else "int16")
            continue
        if width in DEPTHWISE_PACKINGS or (isinstance(width, int) and width < 0):  # depthwise
            constants[index] = pack_depthwise_weight_array(constants[index], width, axes)
            continue
        operand = constants[index] if axes is None else np.transpose(constants[index], axes)
        constants[index] = pack_columns(operand, width)
    return constants


#: serializes the first call's preparation of every LLVMKernel (once per kernel)
_PREPARING = threading.Lock()


@dataclass
class LLVMKernel:
    """A compiled function: call with the function's input arrays.

    The inputs are checked against the function's parameters by a quick test of shape,
    dtype and layout per input; the constants and outputs are the kernel's own arrays,
    made from the signature, so they are not checked again: the full check of
    ``CompiledFunction`` (overlap of every written buffer with every other) costs about
    as much as a small kernel and would be paid by every function of a network on every
    run. An input that fails the quick test takes the full check, which names it.

    A kernel may be called from several threads at once: the constants are only read,
    and every thread writes output arrays of its own (:class:`~.outputs.OutputArrays`)."""

    name: str
    function: object
    constants: list[np.ndarray]
    out_specs: list[tuple[tuple[int, ...], str]]
    prim: object = None  # the TIR PrimFunc, kept for export
    #: each thread's outputs (``outputs``), made by the first call (None before it)
    _threads: threading.local | None = field(default=None, repr=False)
    #: (shape, dtype) of each input parameter, and the constants' data addresses
    _inputs: list[tuple[tuple[int, ...], np.dtype]] | None = field(default=None, repr=False)
    _constant_addresses: tuple[int, ...] = field(default=(), repr=False)

    def with_own_constants(self) -> LLVMKernel:
        """A kernel of the same function on its own copies of the constants and its own
        output buffers (timing in turn over several copies: what a model's kernel finds
        in the caches)."""
        return LLVMKernel(self.name, self.function, [c.copy() for c in self.constants],
                          self.out_specs, self.prim)

    def _prepare(self) -> threading.local:
        with _PREPARING:
            if self._threads is not None:
                return self._threads
            params = getattr(self.function, "signature", None)
            if params is not None and hasattr(self.function, "call_addresses"):
                count = len(params.params) - len(self.constants) - len(self.out_specs)
                inputs = [(tuple(p.shape), np.dtype(p.dtype)) for p in params.params[:count]]
                self.function.check([*[np.empty(shape, dtype) for shape, dtype in inputs],
                                     *self.constants,
                                     *[np.empty(shape, dtype) for shape, dtype in self.out_specs]])
                self._constant_addresses = tuple(c.ctypes.data for c in self.constants)
                self._inputs = inputs
            # else a function that cannot run here: its own call says why
            self._threads = threading.local()
            return self._threads

    def native_entry(self) -> NativeEntry | None:
        """The kernel's machine code for a native run of consecutive kernels
        (``heterocc.runtime.native``, called through :mod:`.sequence`), or None where it
        cannot be called so (code for another CPU, no runtime with the entry)."""
        runner = runner_of(self.function)
        if runner is None:
            return None
        if self._threads is None:
            self._prepare()
        if self._inputs is None:
            return None
        return NativeEntry(self.function.address, tuple(self._inputs),
                           self._constant_addresses,
                           tuple((tuple(shape), np.dtype(dtype))
                                 for shape, dtype in self.out_specs), runner)

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        threads = self._threads
        if threads is None:
            threads = self._prepare()
        try:
            outputs = threads.outputs
        except AttributeError:  # this thread's first call
            outputs = threads.outputs = OutputArrays(self.out_specs)
        outs, out_addresses = outputs.recycled()
        inputs = self._inputs
        if inputs is not None and len(args) == len(inputs):
            addresses = []
            for a, (shape, dtype) in zip(args, inputs):  # the quick test of each input
                if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype \
                        or not a.flags.c_contiguous:
                    break
                addresses.append(a.ctypes.data)
            else:
                self.function.call_addresses(*addresses, *self._constant_addresses,
                                             *out_addresses)
                return outs
        self.function(*args, *self.constants, *outs)  # the full check names what is wrong
        return outs


LIBRARY = "kernels.so"


@functools.lru_cache(maxsize=16)
def _cpu_spec(description: CPUDescription) -> str:
    return description.spec()


@dataclass
class LLVMTarget(TETarget):
    """The CPU through LLVM. ``fallbacks`` maps functions run on NumPy to the reason.

    ``blocked_layout``: compile convolutions in the blocked NCHW[x]c layout (the
    ``alter_layout`` pass); False keeps every convolution in NCHW.
    ``cpu``: the CPU to generate code for (a ``cpu.CPUDescription`` or a target string
    such as ``"llvm -mcpu=znver3 -mattr=-avx512f"``; default: the host).
    ``integer_qdq``: the pass by which this target, alone, computes an imported QDQ
    model's quantized chains in integers (int8 x int8 -> int32 on the CPU's dot
    product, then ``Requantize``: the accelerator's integer semantics):
    ``"realize_qdq_linear"`` (the default: convolutions and products by a constant
    weight, with the additions and max pools between them; element-wise products and
    products of two activations stay float), ``"realize_qdq_convolutions"``
    (convolutions and a classifier's last product only), ``"realize_qdq"`` (every
    product) or None (every chain dequantized to float as written).
    ``rules``: the schedule rules, ``"hand"`` (the CPU's own, :func:`.rules.cpu_rules`:
    the default) or ``"none"`` (the generic ones, :func:`.rules.generic_rules`: where the
    auto search from scratch starts; a tuning log's auto records of whole functions
    still apply). The target string's option ``-schedule-rules=none``.
    ``winograd``: dense 3x3 stride-1 float convolutions that the CPU computes faster by
    Winograd's F(m, 3) take it (:mod:`.schedules.winograd_conv`: fewer multiplies,
    rounding errors a few times the direct sum's); False keeps every convolution
    direct (exact sums in the direct order); a tile size (2 or 4) computes every
    convolution Winograd can take by that F(m, 3), whether faster or not (for
    measurements). The target string's option ``-winograd=0`` (or ``=2``, ``=4``)."""

    name: str = "llvm"
    blocked_layout: bool = True
    integer_qdq: str | None = "realize_qdq_linear"
    cpu: CPUDescription | str | None = None
    rules: str = "hand"
    winograd: bool | int = True
    _libraries: dict[str, object] = field(default_factory=dict, repr=False)
    #: packings of constants chosen while scheduling, by id of the expressed function
    _packings: dict[int, list] = field(default_factory=dict, repr=False)
    #: per thread, the tuning log's configs for the function it compiles
    #: (:meth:`_compile_structure`; a target instance may serve racing compiles)
    _compiling: threading.local = field(default_factory=threading.local, repr=False)
    _cost_model: object = field(default=None, repr=False)

    def __post_init__(self):
        if self.winograd not in (True, False, *WINOGRAD_TILES):
            raise InputError(f"llvm target: winograd={self.winograd!r}; choose true (where "
                             "faster), false (never) or a tile size of "
                             f"{', '.join(map(str, WINOGRAD_TILES))}")
        if self.rules not in SCHEDULE_RULES:
            raise InputError(f"llvm target: schedule rules {self.rules!r}; choose "
                             f"{' or '.join(SCHEDULE_RULES)} (none: the generic schedules "
                             "the auto search starts from)")
        self.cpu = parse_cpu(self.cpu)

    @property
    def tuning_key(self) -> str:
        """What tuning records call this target's hardware: its CPU description as a
        target string (a record tuned for another CPU, or on another machine, does not
        apply here)."""
        return _cpu_spec(self.cpu)

    @contextlib.contextmanager
    def compile_context(self):
        """While a function compiles: schedules tile for this target's CPU description,
        and an applied tuning log offers the records tuned for it."""
        with compiling_for(self.cpu), records_for(self.tuning_key):
            yield

    def schedule_rules(self) -> list[ScheduleRule]:
        """The CPU's schedule rules (:func:`.rules.cpu_rules`) for this target's CPU,
        with the tuning log's configs for the function compiling (the generic rules,
        :func:`.rules.generic_rules`, with ``rules="none"``)."""
        made = generic_rules if self.rules == "none" else cpu_rules
        return made(self.cpu, self._configs())

    def schedule(self, expressed: ExpressedFunction,
                 configs: ScheduleConfigs | None = None) -> te.Schedule:
        """The CPU schedule of a function (see :func:`_schedule`) with ``configs`` (by
        default those the applied tuning log gave the function compiling), its
        products reading constant B operands packed at build time
        (:func:`_prepack_constants`); a function whose auto record the log chose
        (``tuning.function_configs``) is scheduled by it as a whole instead
        (``tuning.function_tuned``)."""
        configs = configs or self._configs()
        winograd = None
        # (a function whose auto record the log chose is scheduled by it as a whole)
        auto = configs.choice is not None and configs.choice[0] == "auto"
        if self.winograd and self.rules == "hand" and not auto:
            def winograd(conv: te.Tensor) -> int:
                # a convolution the tuning log tuned keeps its tuned direct tiles
                if configs.blocked_conv_tiles(conv) or configs.conv_auto(conv):
                    return 0
                if self.winograd is not True:  # a tile size asked for
                    return int(self.winograd)
                return winograd_tile(conv, self.cpu)
        elif self.winograd and auto and record_winograd_tile(configs.choice[1].values):
            # the auto record's algorithm (with either rule set: the search from
            # scratch is entitled to the Winograd compute, not to its hand schedule)
            def winograd(conv: te.Tensor) -> int:
                return record_winograd_tile(configs.choice[1].values)
        self._packings[id(expressed)] = _prepack_constants(
            expressed, configs.matmul_panel, self.cpu, int8=self.rules == "hand",
            winograd_tile=winograd)
        tuned = function_tuned(expressed, configs, self.cpu)
        return tuned if tuned is not None else _schedule(expressed, self.cpu, configs,
                                                         self.rules)

    def _start_structure(self, function: Node):
        # the applied tuning log read once for this function: its choice as a whole
        # (auto record or hand schedule) and its workloads' configs, passed down to the
        # schedules
        self._compiling.configs = function_configs(function.body, current(), self.rules)
        # float steps rounded to integers by a QuantizeLinear (an int8 model's float glue)
        # are computed as the reference computes them, step by step (see EXACT_FLOAT)
        self._compiling.exact_float = any(n.op == "QuantizeLinear" for n in function.body.nodes)
        try:
            return super()._start_structure(function)
        finally:
            del self._compiling.configs, self._compiling.exact_float

    def _configs(self) -> ScheduleConfigs:
        """The configs of the function this thread compiles (the defaults outside one)."""
        return getattr(self._compiling, "configs", None) or ScheduleConfigs()

    def lower(self, schedule: te.Schedule, expressed: ExpressedFunction, symbol: str):
        """The PrimFunc, with the packing of its constants in its ``packed_constants``
        attribute: ``(constant index, panel width, axes)``, applied by :meth:`kernel`."""
        rule = ChannelSelectRule(self.cpu)
        if any(rule.matches(t) for t in expressed.outputs):
            # a blocked concatenation: its choice of source resolved per piece of the
            # channel-block loop before the pipeline vectorizes (.channel_blocks)
            lowered = te.lower(schedule, expressed.params + expressed.outputs, name=symbol,
                               optimize=False)
            lowered = lower_pipeline(split_at_channel_selects(lowered))
        else:
            lowered = super().lower(schedule, expressed, symbol)
        lowered.attrs["packed_constants"] = self._packings.pop(id(expressed), [])
        if getattr(self._compiling, "exact_float", False):
            lowered.attrs[EXACT_FLOAT] = True
        return lowered

    def codegen(self, lowered, symbol: str):
        """The machine-code entry of ``lowered`` (a PrimFunc), compiled by LLVM."""
        return build_module([lowered], name=symbol, cpu=self.cpu)[symbol]

    def compile_all(self, functions: Sequence[Node]) -> None:
        """:meth:`TETarget.compile_all` with Python's thread switch interval shortened
        meanwhile (:data:`SWITCH_INTERVAL_S`): LLVM's thread comes back from LLVM some
        15 times per kernel (ResNet-18: 278 calls for 19 kernels) and each time waits
        until the lowering thread lets go of the interpreter, by default after 5 ms."""
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
        try:
            super().compile_all(functions)
        finally:
            sys.setswitchinterval(interval)

    def codegen_later(self, lowered, symbol: str):
        """:meth:`codegen` with LLVM's optimization and machine code generation in the
        background (:func:`.module.build_later`); the LLVM IR is made now. Where
        :meth:`codegen` itself was replaced (a subclass, an instance), that runs now."""
        if "codegen" in vars(self) or type(self).codegen is not LLVMTarget.codegen:
            return super().codegen_later(lowered, symbol)
        module = build_later([lowered], name=symbol, cpu=self.cpu)
        return lambda: module()[symbol]

    def compile_host(self, funcs: Sequence, name: str):
        """PrimFuncs compiled for this target's CPU as one module (the registry's
        ``compile_for_host`` hook: host code for targets that need it)."""
        return build_module(funcs, name=name, cpu=self.cpu)

    def kernel(self, function: Node, compiled: CompiledFunction) -> LLVMKernel:
        """``function`` calling its structure's machine code with its own constants."""
        own = function_constants(function.body, compiled.tables_for(function.body))
        constants = _packed_constants(own, compiled.lowered.attrs["packed_constants"])
        return LLVMKernel(function.name, compiled.code, constants,
                          output_specs(function), compiled.lowered)

    def save_kernels(self, kernels: dict, directory: str) -> dict:
        """One shared library with every compiled function; NumPy fallbacks are listed."""
        compiled = {name: k for name, k in kernels.items() if isinstance(k, LLVMKernel)}
        if compiled:
            # functions sharing a kernel share its PrimFunc: export each once
            prims = {id(k.prim): k.prim for k in compiled.values()}
            module = build_module(list(prims.values()), name="artifact", cpu=self.cpu)
            module.export_library(os.path.join(directory, LIBRARY))
        return {"library": LIBRARY if compiled else None, "cpu": self.cpu.to_json(),
                "functions": {name: k.prim.name for name, k in compiled.items()},
                "packed_constants": {k.prim.name: [list(p) for p in
                                                   k.prim.attrs["packed_constants"]]
                                     for k in compiled.values()}}

    def load_kernel(self, function: Node, directory: str, info: dict):
        """The kernel of ``function`` from a saved library (NumPy if it had none)."""
        symbol = info.get("functions", {}).get(function.name)
        if symbol is None:
            return numpy_kernel(function)
        library = self._libraries.get(directory)
        if library is None:
            # confined to the artifact, whose files were checked against their hashes
            library = self._libraries[directory] = load_library(
                member_path(directory, info.get("library"), "kernel library"))
        packings = info.get("packed_constants", {}).get(symbol, [])
        constants = _packed_constants(function_constants(function.body), packings)
        return LLVMKernel(function.name, library[symbol], constants, output_specs(function))

    def estimate(self, function: Node):
        """How long ``function`` takes on this CPU: measured once per workload and CPU,
        then read from the on-disk cache (:mod:`.cost`)."""
        return self.cost_model.estimate(function)

    def cached(self, function: Node):
        """``estimate`` where the on-disk cache has the figure, else None (measures
        nothing)."""
        return self.cost_model.cached(function)

    def estimate_within(self, graph, parts: dict) -> None:
        """The functions of ``parts`` (function node -> the nodes of ``graph`` it holds)
        are to be estimated as the build will run them: in ``graph`` fused whole, their
        kernels shared with the build (:meth:`.cost.CpuCostModel.within`)."""
        self.cost_model.within(graph, parts)

    def estimate_placed(self, graph, kept: dict, offloaded: list) -> dict:
        """The estimates of the functions ``kept`` on this CPU (function node -> its
        nodes of ``graph``) once the ``offloaded`` groups ((nodes, target) pairs) run
        elsewhere, as the build then fuses the graph
        (:meth:`.cost.CpuCostModel.placed`)."""
        return self.cost_model.placed(graph, kept, offloaded)

    def lower_bound(self, function: Node):
        """The least time ``function`` could take on this CPU and how it was bounded, or
        None (:meth:`.cost.CpuCostModel.lower_bound`)."""
        return self.cost_model.lower_bound(function)

    @property
    def cost_model(self) -> CpuCostModel:
        """This target's cost model (made on first use)."""
        if self._cost_model is None:
            self._cost_model = CpuCostModel(self)
        return self._cost_model

    def graph_passes(self) -> list:
        """With ``integer_qdq``, the quantized concatenations that remain between
        integer convolutions in integers too (``integer_concats``: copies of the int8
        tensors), so no DequantizeLinear -> float op -> QuantizeLinear glue runs around
        them; the quantized element-wise functions of one 8-bit tensor (SiLU, HardSwish,
        HardSigmoid, GELU, ...: ``lookup_tables``) become 256-entry byte tables, exact by
        construction, which the producing convolution's epilogue reads in registers
        (``byte_table.py``) instead of computing the chain in float; and integer matrix
        products as 1x1 integer convolutions on the dot product
        (``integer_products_as_convolutions``). Global average pools are summed in
        integers and scaled in float32 as ONNX Runtime's ``QLinearGlobalAveragePool``
        does (``integer_global_average_pools``: its bits; the convolution before one
        writes 8-bit values instead of floats), and average pools over windows the same
        way, their zero point added before rounding as ORT's ``QLinearAveragePool``
        adds it (an integer sum: no order of a float sum moves an output step). Not in
        the accelerator's form (``integer_average_pools``): it rounds once more than
        ONNX Runtime's and moved a QOperator ResNet-18's logits from 0 to 5 steps of
        ORT's, for no measured speed. Float steps left between DQ and Q are compiled
        without fast-math flags (``EXACT_FLOAT``). Then the CPU's layout pass
        (blocked NCHW[x]c convolutions, outputs padded to whole vectors of this CPU) and
        folding again for a transform of a constant input, unless ``blocked_layout`` is
        off."""
        passes = ["integer_concats", "lookup_tables", "integer_global_average_pools",
                  integer_products_as_convolutions] if self.integer_qdq else []
        if not self.blocked_layout:
            return passes
        return [*passes, alter_layout_for(self.cpu.vector_lanes("float32")),
                "fold_constants"]

    def tuning(self):
        """The CPU's tuning templates, tasks and measurement (``heterocc tune``): its
        candidates are timed here, so the host must run code for this CPU."""
        try:
            check_runs_on(self.cpu, what="code tuned for this target")
        except TargetError as error:
            raise InputError(f"cannot tune for {self.tuning_key!r} on this machine: "
                             f"{error}; tune on a machine with that CPU") from None
        return llvm_tuning(self)
