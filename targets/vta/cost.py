"""How long a composite takes on the accelerator: the cycles of its instruction stream
in the timing model (``accel_sim.timing``) at the config's clock, plus the host link's
time for the tensors a call copies in and out (the runtime writes a layer's
activations and reads its output on every call; weights stay resident).

A call also takes the host's own CPU time (:attr:`heterocc.sdk.CostEstimate.host_s`):
the composite's inputs laid out as the program's matrices (an im2col for a convolution
not lowered directly), packed into tiles and written, its output unpacked and laid back
out. :func:`host_seconds` times those steps once per compiled kernel on random inputs
(the fastest of a few calls on the calling thread's CPU clock, as the CPU's kernels
are timed): the replayed stream
measured 0.6-5.7 ms of it per input for MobileNetV2 and ResNet-18, as much as the
accelerator's own time on the 32x32 core. A region keeps the tensors its kernels hand
to each other in the device's DRAM (``region.DeviceRegion``): neither copied nor
converted nor packed; the estimate gives each input's and the output's share (its copy
over the link and, by bytes, of the host part: :func:`with_ports`) and the placement
takes off those of the tensors it counts as kept. Summed over a region's kernels,
the term was 0.85-1.9x the replayed region's host part on ResNet-18 and MobileNetV2 at
224 (both configs of ``benchmarks/placement.py``), 0.4-0.6x on small layers
(``benchmarks/placement_host_check.py``, which also times :func:`region_host_seconds`:
the region's runner without the device, conversions only where it makes them).

Compiling a composite is the only way to know its stream, so :class:`VtaCostModel`
keeps the kernels it compiled for the target to reuse when the composite stays on the
accelerator, and the estimates on disk (:class:`heterocc.sdk.CostCache`) so a later
compile of the same workload on the same hardware compiles nothing to estimate it.
Placement compiles only the composites whose bound does not settle them: the bound
(:class:`CycleBound`) is the least work the timing model's compute module, read channel
and write channel must each do for any stream of the composite, from its shapes and
weights, with each copy's least time over the link (:meth:`VtaCostModel.port_bounds`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.program import element_dtype, pack_tiles, tensor_matrix
from heterocc.ir.graph import Node
from heterocc.sdk import (
    CompileError,
    CostCache,
    CostEstimate,
    HostLink,
    Port,
    accelerator_estimate,
    workload_key,
)
from heterocc.sdk.cost import random_arguments
from heterocc.sdk.graph import conv_geometry

from .codegen import (
    AcceleratorKernel,
    compile_composite,
    direct_conv_geometry,
    matrix_bytes,
    planned_epilogue,
)
from .epilogue import column_steps
from .region import DeviceRegion, port_key
from .residual import alu_iterations_per_tile, quantized_add, quantized_mul


def host_link(config: HardwareConfig) -> HostLink:
    """The host link a config declares."""
    return HostLink(config.link_mbytes_per_s / 1000, config.link_latency_ns / 1000)


def kernel_estimate(kernel: AcceleratorKernel, config: HardwareConfig,
                    source: str = "", host_s: float = 0.0) -> CostEstimate:
    """A compiled kernel's time: its modelled cycles at the clock, the bytes the host
    moves per call (inputs written, output read) over the link, and ``host_s`` of the
    host's own work per call (:func:`host_seconds`); with what each input and the
    output take of it (:func:`kernel_ports`)."""
    metrics = kernel.metrics()
    estimate = accelerator_estimate(metrics["cycles"], config.clock_mhz, host_link(config),
                                    metrics["host_bytes"], len(kernel.input_names) + 1,
                                    source, host_s)
    return with_ports(estimate, kernel_ports(kernel), config)


def kernel_ports(kernel: AcceleratorKernel) -> dict:
    """Each input's and the output's key (``region.port_key``: where a neighbour on the
    device holds the tensor in the same tiles, it stays in the device's DRAM) and the
    bytes its copy moves: ``{"inputs": [[key, bytes], ...], "output": [key, bytes]}``
    (what the cache keeps)."""
    tensors = kernel.program.tensors
    return {"inputs": [[port_key(kernel, k), matrix_bytes(kernel.config, tensors[name])]
                       for k, name in enumerate(kernel.input_names)],
            "output": [port_key(kernel, None),
                       matrix_bytes(kernel.config, tensors[kernel.output_tensor])]}


def with_ports(estimate: CostEstimate, ports: dict, config: HardwareConfig) -> CostEstimate:
    """``estimate`` with its ports (:class:`heterocc.sdk.Port`): each copy's time over
    the link, and its share of the host's part by the bytes it moves (the host's steps
    are copies, their time in proportion to the bytes; im2col inputs excepted, which
    are never shared)."""
    link = host_link(config)
    moved = sum(b for _, b in ports["inputs"]) + ports["output"][1]

    def port(key, nbytes) -> Port:
        share = estimate.host_s * nbytes / moved if moved else 0.0
        return Port(key, link.seconds(nbytes, 1), share)

    estimate.inputs = tuple(port(k, b) for k, b in ports["inputs"])
    estimate.output = port(*ports["output"])
    return estimate


#: :func:`host_seconds` keeps the fastest of at least this many timed calls, and calls
#: until this long (after one untimed call)
HOST_SAMPLES = 3
HOST_SECONDS = 0.005
#: whether the thread CPU clock resolves the host steps (a microsecond or better)
_THREAD_CLOCK_USABLE = time.get_clock_info("thread_time").resolution <= 1e-6


def _device_side(kernel: AcceleratorKernel, names: list[str] | None = None):
    """What the host does around ``kernel``'s device run on a call, without the run:
    the input matrices packed into tiles (the transport's write; of the tensors
    ``names``, by default all its inputs), the output tensor's tiles unpacked into its
    matrix (the read); takes and returns what ``run_on_device`` does."""
    config, tensors = kernel.config, kernel.program.tensors
    out = tensors[kernel.output_tensor]
    raw = np.zeros(out.nbytes, np.uint8)
    names = kernel.input_names if names is None else names

    def run(matrices):
        for name, matrix in zip(names, matrices):
            t = tensors[name]
            pack_tiles(np.asarray(matrix, element_dtype(config, t.buffer)),
                       t.tile_rows, t.tile_cols)
        return [tensor_matrix(config, out, raw)]

    return run


def host_steps(kernel: AcceleratorKernel, function: Node):
    """A callable doing what the host does on a call of ``kernel`` besides the device's
    run (the module): the composite's inputs (random, of ``function``'s input types)
    laid out and packed into tiles, the output tensor's tiles unpacked and laid back out
    (the transport's copy itself is the link's term)."""
    args = random_arguments([v for v in function.inputs if v is not None and not v.is_const])
    device = _device_side(kernel)

    def call():
        kernel.from_device(device(kernel.device_inputs(args))[0])

    return call


def region_host_steps(region, function: Node):
    """A callable doing what the host does on a call of a region's runner ``region``
    (the SDK's ``LayoutRegion`` of ``function``, a region of composites): layouts
    converted only where the runner converts them (the region's boundary, or where two
    kernels' layouts disagree), and the tiles packed and unpacked only of the tensors
    that cross the link (``region.DeviceRegion`` keeps the others in the device)."""
    args = random_arguments([v for v in function.inputs if v is not None and not v.is_const])
    runner = DeviceRegion(region.body, region.kernels)

    def host_only(kernel, program, writes, read):
        matrix = _device_side(kernel, [name for name, _ in writes])(
            [array for _, array in writes])[0]
        return matrix if read else None

    return lambda: runner.run_with(args, host_only)


def _fastest(call) -> float:
    # the calling thread's CPU clock: the host steps are NumPy copies on this thread, and
    # a wait for the interpreter's lock (another thread busy in Python: up to the 5 ms
    # switch interval per call) or for the core is not their cost (a CI run timed a small
    # region's steps at 5.4 ms on the wall clock, 9x its replay; they take ~0.3 ms); a
    # clock too coarse for it (not Linux's) falls back
    clock = time.thread_time if _THREAD_CLOCK_USABLE else time.perf_counter
    call()
    samples: list[float] = []
    while len(samples) < HOST_SAMPLES or sum(samples) < HOST_SECONDS:
        start = clock()
        call()
        samples.append(clock() - start)
    return min(samples)


def host_seconds(kernel: AcceleratorKernel, function: Node) -> float:
    """The host's CPU seconds per call of ``kernel`` (:func:`host_steps`): the fastest
    of :data:`HOST_SAMPLES` calls or more (until :data:`HOST_SECONDS`), after one."""
    return _fastest(host_steps(kernel, function))


def region_host_seconds(region, function: Node) -> float:
    """The host's CPU seconds per call of a region (:func:`region_host_steps`), timed as
    :func:`host_seconds` times a kernel's."""
    return _fastest(region_host_steps(region, function))


def call_estimate(kernel, config: HardwareConfig) -> CostEstimate | None:
    """The time of a region kernel's last call from the device's own counts: the cycles
    each of its programs reported at the clock, and the bytes and copies that crossed
    the link (a region's tensors kept in the device's DRAM do not; None before a
    call)."""
    parts = list(getattr(kernel, "composites", ())) or [kernel]
    if any(getattr(p, "last_timing", None) is None for p in parts):
        return None
    cycles = sum(p.last_cycles for p in parts)
    moved = sum(p.last_bytes_in + p.last_bytes_out for p in parts)
    transfers = sum(getattr(p, "last_copies", len(p.input_names) + 1) for p in parts)
    return accelerator_estimate(cycles, config.clock_mhz, host_link(config), moved, transfers,
                                f"device cycle count at {config.clock_mhz} MHz")


def _output_tiles(node: Node, config: HardwareConfig) -> int:
    """The accumulator tiles (``batch`` rows of ``block_out`` output channels) a
    convolution's or dense layer's result fills: each is reset once and passed over
    once by every step of its epilogue."""
    if node.op == "MatMulInteger":
        n = node.inputs[1].type.shape[1]
        rows = node.outputs[0].type.size // n
    else:
        batches, n, height, width = node.outputs[0].type.shape
        rows = batches * height * width
    return -(-rows // config.batch) * -(-n // config.block_out)


def _gemm_node(node: Node) -> bool:
    """Whether ``node`` is a convolution or dense layer the GEMM core runs (constant
    weights, a 2-D convolution or a (K, N) matrix)."""
    if len(node.inputs) < 2 or node.inputs[1] is None or not node.inputs[1].is_const:
        return False
    if node.op == "MatMulInteger":
        return node.inputs[1].type.ndim == 2
    return node.op == "ConvInteger" and node.outputs[0].type.ndim == 4


def gemm_iterations(function: Node, config: HardwareConfig) -> int:
    """The GEMM iterations the composite's convolutions cannot do without, from their
    shapes (the timing model runs the GEMM core's iterations one after another, so their
    cycles bound the call's from below). Each output pixel row of ``batch`` pixels and
    each output channel block meets the reduction in ``block_in`` lanes: a depthwise
    convolution (diagonal tiles, one lane busy) once per kernel tap, any other at least
    its input channels times taps over ``block_in`` times (im2col's folded reduction, no
    more than the direct lowering's); a dense layer's row blocks meet each weight block
    once (its output tiles times its input blocks). Resets and other work are not
    counted (0 where nothing is)."""
    iterations = 0
    for node in function.body.nodes:
        if not _gemm_node(node):
            continue
        if node.op == "MatMulInteger":
            reduction = -(-node.inputs[1].type.shape[0] // config.block_in)
        else:
            taps = math.prod(node.inputs[1].type.shape[2:])
            g = direct_conv_geometry(node, config)
            reduction = taps if g is not None and g.depthwise \
                else -(-node.inputs[0].type.shape[1] * taps // config.block_in)
        iterations += _output_tiles(node, config) * reduction
    return iterations


def weight_tile_bytes(node: Node, config: HardwareConfig) -> int:
    """The bytes of a convolution's or dense layer's weights as the GEMM core reads
    them (0 for another node): whole ``block_out x block_in`` tiles, a byte an element,
    zero-padded. A depthwise convolution's tiles are diagonal (``direct_conv_geometry``:
    one filter per channel), one per output channel block and kernel tap, so it moves
    ``block_in`` times its weights' bytes (a 7x7 global pooling as a depthwise
    convolution of 512 channels: 784 KB of tiles for 25 KB of weights); any other moves
    at least its output channel blocks times its folded reduction's input blocks (the
    im2col GEMM's count; the direct lowering's, a block per tap, is no smaller)."""
    if not _gemm_node(node):
        return 0
    w = node.inputs[1]
    tile = config.block_in * config.block_out
    if node.op == "MatMulInteger":
        k, n = w.type.shape
        return -(-n // config.block_out) * -(-k // config.block_in) * tile
    filters, per_group = w.type.shape[:2]
    taps = math.prod(w.type.shape[2:])
    blocks = -(-filters // config.block_out)
    g = direct_conv_geometry(node, config)
    if g is not None and g.depthwise:
        return blocks * taps * tile
    return blocks * -(-per_group * taps // config.block_in) * tile


def _touched(length: int, kernel: int, stride: int, pad: int, outputs: int) -> int:
    """How many of an axis's ``length`` input positions some window of a convolution or
    pooling reads (output ``o`` reads ``o * stride - pad`` to ``+ kernel - 1``): all of
    them unless the stride skips some (a 1x1 convolution of stride 2 reads a quarter)."""
    touched, end = 0, 0  # positions below ``end`` counted
    for o in range(outputs):
        first = max(o * stride - pad, end, 0)
        last = min(o * stride - pad + kernel, length)
        if last > first:
            touched += last - first
            end = last
    return touched


def _read_elements(node: Node) -> int:
    """The activation elements a convolution, dense layer or max pool reads from the
    device's DRAM at least once (its windows' input positions, every channel), 0 for
    another node."""
    if node.op == "MatMulInteger" and _gemm_node(node):
        return node.inputs[0].type.size
    if node.op == "MaxPool" and node.inputs[0].type.ndim == 4:
        kernel_shape = node.attrs["kernel_shape"]
    elif node.op == "ConvInteger" and _gemm_node(node):
        kernel_shape = node.inputs[1].type.shape[2:]
    else:
        return 0
    x = node.inputs[0].type.shape
    kernel, strides, dilations, pads, out = conv_geometry(x, (0, 0, *kernel_shape),
                                                          node.attrs)
    if any(d != 1 for d in dilations):
        return 0
    return x[0] * x[1] * math.prod(_touched(x[2 + i], kernel[i], strides[i], pads[i], out[i])
                                   for i in range(2))


#: composites whose ALU reads every element of every activation input (the host expands
#: a product's broadcast operand first)
_ELEMENTWISE = ("quantized_add", "quantized_mul")


def _elementwise_alu_cycles(function: Node, config: HardwareConfig) -> int:
    """The compute module's cycles for an addition's or product's ALU passes
    (``residual.add_program``): its passes' iterations over every tile of the first
    operand, and an instruction's overhead for each pass (0 where the composite does not
    parse, as the lowering then refuses it)."""
    parse = quantized_mul if function.attrs.get("composite") == "quantized_mul" \
        else quantized_add
    found = parse(function.body.nodes)
    if isinstance(found, str):
        return 0
    add, casts = found
    shape = casts[0].inputs[0].type.shape
    if len(shape) != 4:
        return 0
    n, c, h, w = shape
    tiles = -(-n // config.batch) * -(-c // config.block_in) * h * w
    per_tile, passes = alu_iterations_per_tile(add)
    return tiles * per_tile * config.alu_cycles_per_iteration \
        + passes * config.instruction_overhead_cycles


@dataclass(frozen=True)
class CycleBound:
    """The least cycles a call of a composite takes in the timing model
    (``accel_sim.timing``), from its shapes and weights, without compiling it: the
    modules run at once, so each of three resources bounds the call by the work it must
    do alone (:attr:`cycles`, the largest).

    - ``compute``: the compute module runs its GEMM and ALU instructions one after
      another, each ``instruction_overhead_cycles`` plus its iterations: the GEMM
      iterations no lowering goes without (:func:`gemm_iterations`), the reset of every
      output tile (an iteration each), a pass over every output tile per step of the
      requantizing epilogue (``codegen.planned_epilogue``), and an instruction's
      overhead for the GEMMs, the resets and each step; an addition's or product's
      ALU passes (:func:`_elementwise_alu_cycles`);
    - ``reads``: the one read channel moves every byte a LOAD brings on chip, at least
      a cycle a beat (``bus_width_bits``), the first a DRAM latency after the request:
      the weights as the tiles the GEMM core reads (:func:`weight_tile_bytes`; they
      stay in DRAM between calls, not on chip), each activation element some window
      reads, at a byte an element (:func:`_read_elements`; an addition's inputs whole),
      and the epilogue's per-channel constants (an accumulator word per channel);
    - ``writes``: the write channel stores the result, a byte an element, a beat each
      ``bus / dram_bytes_per_cycle`` cycles, the last answered a DRAM latency later.

    A tile a tiling loads twice is counted once, padding, micro-ops and instruction
    fetch not at all: what is counted, every stream of the composite does, so the bound
    never exceeds the timing model's cycles (``tests/targets/vta/test_vta_bound.py``
    checks it on every composite of small quantized networks)."""

    compute: int = 0
    reads: int = 0
    writes: int = 0

    @property
    def cycles(self) -> int:
        """The call's least cycles: the busiest resource's."""
        return max(self.compute, self.reads, self.writes)

    def describe(self, clock_mhz: float) -> str:
        """Which resource bounds the call, in words."""
        if not self.cycles:
            return "no accelerator work counted"
        what = max((self.compute, "compute (GEMM, resets, epilogue)"),
                   (self.reads, "DRAM reads (weights, activations, constants)"),
                   (self.writes, "DRAM writes (result)"))[1]
        return f"{self.cycles} cycles of {what} at {clock_mhz:g} MHz"


def cycle_bound(function: Node, config: HardwareConfig) -> CycleBound:
    """:class:`CycleBound` of a call of the composite ``function`` on ``config``."""
    overhead = config.instruction_overhead_cycles
    nodes = function.body.nodes
    compute = gemm_iterations(function, config) * config.gemm_cycles_per_iteration
    read_bytes = sum(weight_tile_bytes(n, config) + _read_elements(n) for n in nodes)
    core = nodes[0]
    if _gemm_node(core):
        steps = planned_epilogue(function, config)
        tiles = _output_tiles(core, config)
        compute += tiles * (config.gemm_cycles_per_iteration
                            + len(steps) * config.alu_cycles_per_iteration)
        compute += overhead * (2 + len(steps))  # a GEMM, a reset, the steps
        channels = core.outputs[0].type.shape[1 if core.op == "ConvInteger" else -1]
        read_bytes += len(column_steps(steps)) * channels * (config.acc_bits // 8)
    if function.attrs.get("composite") in _ELEMENTWISE:
        read_bytes += sum(v.type.size for v in function.inputs
                          if v is not None and not v.is_const)
        compute += _elementwise_alu_cycles(function, config)
    bus = config.bus_width_bits // 8
    latency = config.dram_latency_cycles
    reads = latency + -(-read_bytes // bus) if read_bytes else 0
    beat = max(1, -(-bus // config.dram_bytes_per_cycle))
    out = sum(v.type.size for v in function.outputs)
    writes = latency + -(-out // bus) * beat if out else 0
    return CycleBound(compute, reads, writes)


def reuse_key(function: Node) -> tuple:
    """Which composite a function node is, across the partitioner's rounds: its pattern
    row and the names of its nodes (unique in a graph)."""
    return function.attrs.get("composite"), tuple(n.name for n in function.body.nodes)


@dataclass
class VtaCostModel:
    """The ``estimate`` hook of a :class:`~heterocc.targets.vta.VtaTarget`."""

    config: HardwareConfig
    virtual_threads: int
    cache: CostCache = field(default_factory=CostCache)
    #: kernels compiled to estimate, by :func:`reuse_key`, until ``compile_layer`` takes them
    compiled: dict[tuple, AcceleratorKernel] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """What the cached figures depend on besides the workload: the hardware (its
        name and its timing parameters), the virtual threads and the cost model's version."""
        c = self.config
        return (f"vta4/{c.name}/t{c.instruction_overhead_cycles}-{c.dram_latency_cycles}-"
                f"{c.dram_bytes_per_cycle}-{c.gemm_cycles_per_iteration}-"
                f"{c.alu_cycles_per_iteration}/vt{self.virtual_threads}")

    def estimate(self, function: Node) -> CostEstimate | None:
        """The composite's time on this accelerator, or None when it does not compile
        for it (the greedy placement's build then reports why)."""
        if "composite" not in function.attrs:
            return None
        workload = workload_key(function)
        cached = self.cache.get(self.key, workload)
        if cached is not None:
            return with_ports(accelerator_estimate(
                cached["cycles"], self.config.clock_mhz, host_link(self.config),
                cached["bytes"], cached["transfers"],
                f"cycle model at {self.config.clock_mhz} MHz (cached)", cached["host_s"]),
                cached["ports"], self.config)
        try:
            kernel = compile_composite(function, self.config, self.virtual_threads)
        except CompileError:
            return None
        self.compiled[reuse_key(function)] = kernel
        estimate = kernel_estimate(kernel, self.config, host_s=host_seconds(kernel, function))
        self.cache.put(self.key, workload, {"cycles": estimate.detail["cycles"],
                                            "bytes": estimate.detail["bytes"],
                                            "transfers": len(kernel.input_names) + 1,
                                            "host_s": estimate.host_s,
                                            "ports": kernel_ports(kernel)})
        return estimate

    def lower_bound(self, function: Node) -> tuple[float, str] | None:
        """The least time a call of the composite takes, without compiling it: its
        cycles' bound (:func:`cycle_bound`) at the clock, and the least time of every
        copy it makes over the link (:meth:`port_bounds`: each activation input in, its
        result out; weights stay resident in the device's DRAM)."""
        if "composite" not in function.attrs:
            return None
        bound = cycle_bound(function, self.config)
        inputs, output = self.port_bounds(function)
        copies = sum(inputs) + output
        return (bound.cycles / (self.config.clock_mhz * 1e6) + copies,
                f"{bound.describe(self.config.clock_mhz)}; its {len(inputs) + 1} copies "
                f"over the link at least {copies * 1e3:.3g} ms")

    def lower_bound_kept(self, function: Node) -> tuple[float, str] | None:
        """:meth:`lower_bound` of a call whose tensors all stay in the device's DRAM (its
        neighbours in a region keep them there: ``region.DeviceRegion``): its cycles'
        bound alone, no copy. What placement bounds a composite with where a neighbour
        of the same accelerator could share a tensor with it."""
        if "composite" not in function.attrs:
            return None
        bound = cycle_bound(function, self.config)
        return (bound.cycles / (self.config.clock_mhz * 1e6),
                f"its tensors kept in the device; {bound.describe(self.config.clock_mhz)}")

    def port_bounds(self, function: Node) -> tuple[tuple[float, ...], float] | None:
        """The least time each copy a call of the composite makes over the link takes:
        each activation input's (in the composite's input order, as the estimate's
        ``inputs``) and its result's, at a byte an element (the device's tiles only pad
        them)."""
        if "composite" not in function.attrs:
            return None
        link = host_link(self.config)
        inputs = tuple(link.seconds(v.type.size) for v in function.inputs
                       if v is not None and not v.is_const)
        return inputs, link.seconds(sum(v.type.size for v in function.outputs))

    def take(self, function: Node) -> AcceleratorKernel | None:
        """The kernel compiled for ``function`` while estimating, once (None if none)."""
        return self.compiled.pop(reuse_key(function), None)
