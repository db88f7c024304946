"""Lowering of the accelerator's composites to instruction streams.

A composite (ConvInteger or MatMulInteger, optional int32 bias, Requantize)
becomes a tensor expression with a requantizing epilogue, scheduled for the
accelerator with the tiling the timing model finds fastest (or a tuning log's),
lowered to TIR, its virtual threads interleaved (``vthreads``), and generated
into a DAE instruction stream (``dae.emit_program``):

- a convolution with at least ``block_in`` input channels (or a 1x1 one) runs directly on chip
  (``conv.packed_conv2d``): the host writes the input once in the blocked layout,
  the LOADs pad it with its zero point, and micro-ops walk the kernel window;
- a dense layer, and a convolution with fewer channels whose taps the GEMM does
  in fewer iterations folded together (a network's first layer, whose channels
  would mostly be padding in the blocked layout), is a packed
  GEMM (``schedule.packed_gemm``); for such a convolution the host lays the input
  windows out as the A matrix (im2col).

The streams themselves are templates, built once per shape and filled per layer
(``templates``). Weights (packed into block_out x block_in tiles), epilogue constants and the
instruction stream with its micro-op kernels are built once, at compile time, and
written to the device once, when the program is loaded (``device.VtaDevice``, the
SDK's resident-device protocol); each call only writes the activations.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
from dataclasses import dataclass

import numpy as np

from heterocc.accel_sim import HardwareConfig, schedule_stream
from heterocc.accel_sim.isa import Load, Store, dram_unit_bytes
from heterocc.accel_sim.program import (
    DramTensor,
    Program,
    element_dtype,
)
from heterocc.accel_sim.reference_programs import GemmTiling, Requantization
from heterocc.ir.graph import Node
from heterocc.sdk import CompileError, DeviceTiming, ProgramRunner, device_lock, holds
from heterocc.sdk.graph import conv_geometry, zero_point_bias

from .blocking import HostBuffers, blocked_input, from_blocked
from .conv import (
    ConvGeometry,
    ConvTiling,
)
from .device import VtaDevice
from .epilogue import plan_epilogue
from .gather import gather_geometry, gather_weights, identity_requantization, with_input_parts
from .gather import unsupported as unsupported_gather
from .lookup import (
    concat_unsupported,
    copy_program,
    device_table,
    flatten_unsupported,
    lookup_program,
)
from .lookup import unsupported as unsupported_lookup
from .pool import max_pool_geometry, pool_program
from .residual import add_program, quantized_add, quantized_mul
from .templates import (
    best_conv_tiling,
    conv_stream,
    conv_timing,
    epilogue_signature,
    filled_program,
    gemm_program,
    usable_threads,
)
from .tiling import best_tiling
from .tuning import vta_tiling

#: held while a kernel without a device makes its own on its first call: two threads
#: calling it first at once would each make one and run on either
_MAKING_DEVICE = threading.Lock()

#: the layout tag of tensors in the blocked layout of direct convolutions (``to_blocked``)
BLOCKED = "blocked"
#: the layout tag of a dense layer's activations and results: (rows, columns padded to
#: whole tiles) matrices, tile rows in order
ROWS = "rows"

#: per-column constants of an unshortened requantization (bias, -limit, limit,
#: multiplier, rounding, shift)
FULL_EPILOGUE_CONSTANTS = 6


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _per_channel(value, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(value, np.int64).reshape(-1), (channels,)).copy()


def input_zero_point(core: Node) -> int:
    """The integer op's input zero point (0 when absent): a constant scalar, as the
    pattern table's check guarantees."""
    zero_point = core.inputs[2] if len(core.inputs) > 2 else None
    return 0 if zero_point is None else int(zero_point.data.reshape(()))


def _requantization(nodes: list[Node], weights: np.ndarray) -> Requantization:
    """The composite's requantization per output channel (row of ``weights``, the
    N x K matrix the GEMM core multiplies), its bias absorbing the input zero point:
    ``sum((a - z) * w) + bias == sum(a * w) + (bias - z * sum(w))``, so the core
    multiplies the stored int8 activations as they are."""
    requant = nodes[-1]
    channels = weights.shape[0]
    bias = np.zeros(channels, np.int64)
    add = next((n for n in nodes if n.op == "Add"), None)
    if add is not None:
        bias = _per_channel(add.inputs[1].data, channels)
    bias = bias + zero_point_bias(weights, input_zero_point(nodes[0]))
    a = requant.attrs
    shift = _per_channel(a["shift"], channels)
    rounding = np.where(shift > 0, np.left_shift(1, np.maximum(shift - 1, 0)), 0)
    return Requantization(bias, _per_channel(a["acc_limit"], channels),
                          _per_channel(a["multiplier"], channels), rounding, shift,
                          int(a["zero_point"]), int(a["qmin"]), int(a["qmax"]),
                          int(a.get("product_shift", 0)))


def planned_epilogue(function: Node, config: HardwareConfig) -> list:
    """The ALU steps (``epilogue.plan_epilogue``) the lowering of a convolution or dense
    composite gives its requantization, from its weights alone (nothing compiled): each
    is one ALU pass over every output tile. The plan depends on each output channel's
    weights only through the sums of their positive and of their negative values (the
    accumulators' range, the input zero point's bias term), so a filter's own weights
    give the plan the direct and the im2col lowerings make of their packed rows (a
    grouped convolution's zeros outside the group, the padding, add nothing)."""
    nodes = function.body.nodes
    core = nodes[0]
    if core.op == "ConvInteger":
        weights = core.inputs[1].data.reshape(core.inputs[1].type.shape[0], -1)
    else:
        weights = core.inputs[1].data.T
    columns = _round_up(weights.shape[0], config.block_out)
    return plan_epilogue(_requantization(nodes, weights), weights, columns, config.acc_bits)


@dataclass
class AcceleratorKernel(ProgramRunner):
    """One composite compiled for the accelerator; call it with the composite's inputs.

    ``to_device`` lays the (first) input out as the matrix of the program's input
    tensor (``input_tensor``), ``from_device`` turns the matrix of its output tensor back
    into the composite's output; ``more_inputs`` holds (tensor, to_device) of further
    inputs (a residual addition's second operand).

    ``blocked`` marks a kernel whose input and output tensors all hold the
    activations in the blocked layout of a direct convolution (tile rows of
    ``batch x block`` elements over batches, channel blocks, rows and columns): a
    region hands such tensors from kernel to kernel as they are
    (``run_device``), converting only at its boundary."""

    name: str
    config: HardwareConfig
    program: Program
    to_device: object
    from_device: object
    input_tensor: str = "A"
    output_tensor: str = "C"
    tiling: GemmTiling | ConvTiling | None = None
    virtual_threads: int = 1
    calls: int = 0
    cycles: int = 0
    last_timing: DeviceTiming | None = None
    utilization: float = 0.0
    macs: int = 0
    #: the DRAM image of the last call (see ``last_input``), once built
    _last_image: np.ndarray | None = None
    #: the composite's own activations: its input and output tensors, unpadded
    input_bytes: int = 0
    output_bytes: int = 0
    in_channels: int = 0
    #: the timing model's report of the program (it does not depend on the data)
    timing: object = None
    _metrics: dict | None = None
    more_inputs: tuple = ()
    blocked: bool = False
    #: the layout of a kernel's tensors that are not blocked (``ROWS``), or None: the
    #: host's layout
    matrix_layout: str | None = None
    #: the layout of the output when it differs from the inputs' (a flatten's: blocked
    #: in, ``ROWS`` out)
    result_layout: str | None = None
    #: where the program runs (an SDK ``ResidentDevice``: the image, weights included, is
    #: written once when loaded); by default a simulated accelerator of its own
    device: object = None
    #: bytes the last call wrote (its activations) and read (its output)
    last_bytes_in: int = 0
    last_bytes_out: int = 0
    #: bytes of the program's image (weights, constants, micro-ops) the last call loaded
    last_bytes_loaded: int = 0
    #: the device of the last call, whose memory ``last_input`` reads
    _last_device: object = None
    #: the program the last call ran (``program`` or a region's linked form of it)
    _last_program: object = None
    #: copies over the link the last call made (its inputs written, its output read;
    #: fewer in a region that keeps tensors in the device's DRAM)
    last_copies: int = 0

    @property
    def last_input(self) -> np.ndarray | None:
        """The program's DRAM image after the last call (what hardware in the loop
        replays on the RTL: this call's inputs, weights and constants, and its output;
        the run changes only the output tensor), None before a call or from a device
        that cannot tell. Read from the device when first asked (only this kernel's
        calls write its program's tensors there), not on every call: an image holds the
        weights, megabytes, and even the call's own tensors would double the bytes a
        call copies."""
        device = self._last_device
        if self._last_image is None and device is not None:
            with device_lock(device):
                tensor_bytes = getattr(device, "tensor_bytes", None)
                if callable(tensor_bytes):
                    image = self.program.dram.copy()
                    ran = self._last_program or self.program
                    for name in dict.fromkeys([*self.input_names, self.output_tensor]):
                        start = self.program.tensors[name].byte_address
                        # where the last run read and wrote it (a region's shared tensor)
                        raw = tensor_bytes(ran, name)
                        image[start:start + raw.size] = raw
                    self._last_image = image
                else:
                    image = getattr(device, "image", None)
                    self._last_image = image(self.program) if callable(image) else None
        return self._last_image

    def metrics(self) -> dict:
        """What the placement report shows for this composite: modelled ``cycles`` and
        GEMM-core ``utilization`` per call, ``dram_read_bytes`` / ``dram_write_bytes``
        its transfers move, ``host_bytes`` the host writes and reads per call, its own
        ``input_bytes`` / ``output_bytes`` and ``in_channels``. The stream does not
        depend on the data, so this is computed once, without running it."""
        if self._metrics is None:
            timing = self.timing or schedule_stream(self.program.instructions, self.config)
            read = sum(dram_unit_bytes(self.config, i.buffer) * i.y_size * i.x_size
                       for i in self.program.instructions if isinstance(i, Load))
            written = sum(dram_unit_bytes(self.config, i.buffer) * i.y_size * i.x_size
                          for i in self.program.instructions if isinstance(i, Store))
            self._metrics = {"cycles": timing.total_cycles,
                             "utilization": round(timing.gemm_utilization, 4),
                             "dram_read_bytes": read, "dram_write_bytes": written,
                             "host_bytes": self.host_bytes, "input_bytes": self.input_bytes,
                             "output_bytes": self.output_bytes,
                             "in_channels": self.in_channels}
        return self._metrics

    @property
    def host_bytes(self) -> int:
        """Bytes the host moves per call: the input tensor it writes and the output
        tensor it reads (an im2col input holds each input element up to KH x KW times)."""
        return sum(matrix_bytes(self.config, self.program.tensors[name])
                   for name in (*self.input_names, self.output_tensor))

    @property
    def input_names(self) -> list[str]:
        """The program's input tensors, in the composite's input order."""
        return [self.input_tensor] + [name for name, _ in self.more_inputs]

    def device_inputs(self, args) -> list[np.ndarray]:
        """The composite's inputs laid out as the matrices of the program's input tensors."""
        return [self.input_to_device(position, x) for position, x in enumerate(args)]

    # -- the SDK's LayoutKernel: a region hands blocked tensors from layer to layer.
    # Channels padded up to a whole block hold whatever the producer's epilogue left
    # there: a convolution multiplies them by zero weights and an addition's padded lanes
    # are dropped on the way out, so results do not depend on them.

    def input_layout(self, position: int) -> str | None:
        """``"blocked"`` for a kernel whose tensors are all in the blocked layout,
        ``"rows"`` for one whose tensors are all matrices of rows (a dense layer's)."""
        return BLOCKED if self.blocked else self.matrix_layout

    def output_layout(self, index: int) -> str | None:
        return self.result_layout or (BLOCKED if self.blocked else self.matrix_layout)

    def takes(self, position: int, array: np.ndarray) -> bool:
        """A blocked matrix of exactly this input tensor's tiles."""
        tensor = self.program.tensors[self.input_names[position]]
        return array.shape == (tensor.rows, tensor.cols)

    def input_to_device(self, position: int, array: np.ndarray) -> np.ndarray:
        layouts = [self.to_device] + [to_device for _, to_device in self.more_inputs]
        return layouts[position](array)

    def output_to_host(self, index: int, array: np.ndarray) -> np.ndarray:
        return self.from_device(array)

    def run_on_device(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        return [self.run_device(arrays)]

    def dram_image(self, *args: np.ndarray) -> np.ndarray:
        """The program's DRAM image with the inputs ``args`` laid out in its input
        tensors."""
        return self._image(self.device_inputs(args))

    def _image(self, matrices: list[np.ndarray]) -> np.ndarray:
        dram = self.program.dram.copy()
        for name, matrix in zip(self.input_names, matrices):
            self.program.write(name, matrix, dram)
        return dram

    def run_device(self, matrices: list[np.ndarray]) -> np.ndarray:
        """Run the program on its input tensors' matrices (written to the device; the
        program's image, weights included, is loaded on the first call); the output
        tensor's matrix. The device's lock is held throughout (see
        ``heterocc.sdk.device_lock``): the image and report read after the run are this
        call's."""
        self._ensure_device()
        with device_lock(self.device):
            return self.run_linked(self.program, list(zip(self.input_names, matrices)),
                                   True)

    def _ensure_device(self) -> None:
        if self.device is None:
            with _MAKING_DEVICE:
                if self.device is None:
                    self.device = VtaDevice(self.config)

    def run_linked(self, program, inputs: list[tuple[str, np.ndarray]],
                   read: bool) -> np.ndarray | None:
        """Run ``program`` (this kernel's, or its ``LinkedProgram`` form in a region:
        some tensors kept in the device's memory) after writing only ``inputs`` (tensor
        name, matrix); the output tensor's matrix where ``read``, else None (it stays on
        the device for the next program). The caller holds the device's lock."""
        fresh = not holds(self.device, program, self.output_tensor)
        tensors = self.program.tensors
        writes = [(name, functools.partial(np.asarray, matrix,
                                           element_dtype(self.config, tensors[name].buffer)),
                   False) for name, matrix in inputs]
        found = self.run_program(writes, [self.output_tensor] if read else [], program)
        self.last_copies = len(writes) + bool(read)
        if fresh:
            self.last_bytes_loaded = self.program.dram.nbytes
        # what hardware in the loop replays on the RTL, read when asked (``last_input``)
        self._last_image, self._last_device = None, self.device
        self._last_program = program
        report = getattr(self.device, "last_report", None)
        if report is not None:
            self.utilization = report.timing.gemm_utilization
        return found[0] if read else None

    def __call__(self, args):
        return [self.from_device(self.run_device(self.device_inputs(args)))]


def matrix_bytes(config: HardwareConfig, tensor: DramTensor) -> int:
    """Bytes of a tensor's matrix (its padded extents), what a copy of it moves."""
    return tensor.rows * tensor.cols * element_dtype(config, tensor.buffer).itemsize


def ungrouped_weights(conv: Node) -> np.ndarray:
    """The convolution's OIHW weights over all its input channels: a grouped
    convolution's filters (O, C/group, KH, KW) placed block-diagonally in (O, C, KH, KW),
    zero outside their own group. The GEMM core then computes the grouped convolution
    exactly as an ungrouped one (a zero weight adds nothing, whatever the input or its
    zero point; the zero point's bias term sums only the group's own weights)."""
    w = conv.inputs[1].data
    group = int(conv.attrs.get("group", 1))
    if group == 1:
        return w
    o, per_group, kh, kw = w.shape
    filters = o // group
    dense = np.zeros((o, per_group * group, kh, kw), w.dtype)
    for g in range(group):
        dense[g * filters:(g + 1) * filters, g * per_group:(g + 1) * per_group] = \
            w[g * filters:(g + 1) * filters]
    return dense


def _as_view(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` reshaped without a copy (its axes split in place), to be written
    through."""
    view = array.reshape(shape)
    if not np.may_share_memory(view, array):
        raise CompileError(f"a {array.shape} array cannot be viewed as {shape}")
    return view


def _conv_lowering(conv: Node, k_padded: int):
    x, w = conv.inputs[0].type, ungrouped_weights(conv)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    kernel, strides, _, pads, (oh, ow) = conv_geometry(x.shape, w.shape, conv.attrs)
    # a padded position holds the input's zero point: it contributes nothing once the
    # zero point's term is folded into the bias (``_requantization``)
    fill = input_zero_point(conv)
    buffers = HostBuffers()
    k = c * kh * kw

    def to_matrix(arr: np.ndarray) -> np.ndarray:
        # the input written into the middle of a buffer whose border holds the zero
        # point from its creation, its windows copied once into the matrix's first k
        # columns (the padding columns stay zero)
        padded = buffers.get("padded", (n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]),
                             np.int8, fill)
        padded[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = arr
        win = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), axis=(2, 3))
        win = win[:, :, :oh * strides[0]:strides[0], :ow * strides[1]:strides[1]]
        matrix = buffers.get("matrix", (n * oh * ow, k_padded), np.int8)
        _as_view(matrix[:, :k], (n, oh, ow, c, kh, kw))[...] = win.transpose(0, 2, 3, 1, 4, 5)
        return matrix

    def from_matrix(cmat: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(cmat[:, :o].reshape(n, oh, ow, o).transpose(0, 3, 1, 2))

    return w.reshape(o, -1), to_matrix, from_matrix, n * oh * ow


def _padded_columns(rows: int, columns: int, padded: int):
    """The host step that lays a (..., columns) tensor out as a (rows, padded) matrix:
    the tensor itself where no column is padded, else copied once into a per-thread
    buffer whose padding columns stay zero."""
    buffers = HostBuffers()

    def to_matrix(a: np.ndarray) -> np.ndarray:
        a = a.reshape(rows, columns)
        if padded == columns:
            return a
        matrix = buffers.get("matrix", (rows, padded), np.int8)
        matrix[:, :columns] = a
        return matrix

    return to_matrix


def _dense_lowering(dense: Node, k_padded: int):
    """A matrix product of activations (..., M, K) with constant weights (K, N) as one
    GEMM: every leading axis of the activations folds into the rows (they share the
    weights), and the output, (..., M, N), unfolds from them."""
    w = dense.inputs[1].data  # (K, N)
    k, n_out = w.shape
    out_shape = dense.outputs[0].type.shape
    rows = math.prod(dense.inputs[0].type.shape[:-1])

    def from_matrix(cmat: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(cmat[:, :n_out]).reshape(out_shape)

    return w.T, _padded_columns(rows, k, k_padded), from_matrix, rows


def direct_conv_geometry(conv: Node, config: HardwareConfig) -> ConvGeometry | None:
    """The convolution in tiles when it runs directly on chip (None: as an im2col GEMM):
    2-D, undilated, whole batches, at least ``block_in`` input channels or as few GEMM
    iterations as the im2col GEMM's (1x1 kernels). A depthwise
    convolution uses diagonal weight tiles; any other grouped one runs as the ungrouped
    convolution of its block-diagonal weights (``ungrouped_weights``)."""
    x, w = conv.inputs[0].type, conv.inputs[1].type
    if x.ndim != 4 or x.shape[0] % config.batch:
        return None
    depthwise = _tile_holds_whole_groups(conv, config)
    taps = math.prod(w.shape[2:])
    if not depthwise and x.shape[1] < config.block_in and \
            taps * -(-x.shape[1] // config.block_in) > -(-x.shape[1] * taps // config.block_in):
        # fewer channels than a block: the direct lowering pads them to a whole block at
        # every tap, the im2col GEMM folds the taps into its reduction first; direct only
        # where that costs no GEMM iterations (a 1x1 convolution: the host then writes
        # the input once, not an im2col matrix, and a region keeps it blocked)
        return None
    kernel, strides, dilations, pads, _ = conv_geometry(x.shape, w.shape, conv.attrs)
    if any(d != 1 for d in dilations) or max(pads) > max(kernel):
        return None
    return ConvGeometry(x.shape[0] // config.batch, -(-x.shape[1] // config.block_in),
                        x.shape[2], x.shape[3], -(-w.shape[0] // config.block_out),
                        tuple(kernel), tuple(strides), (pads[0], pads[1], pads[2], pads[3]),
                        depthwise)


def _tile_holds_whole_groups(conv: Node, config: HardwareConfig) -> bool:
    """Whether each output channel block of this grouped convolution reads only the
    input channel block of the same index: as many filters as channels, square tiles,
    and a group width (1 when depthwise) that divides the tile, so every tile holds
    whole groups and its weights are block-diagonal."""
    x, w = conv.inputs[0].type, conv.inputs[1].type
    group = int(conv.attrs.get("group", 1))
    return (group > 1 and x.shape[1] == w.shape[0] and config.block_in == config.block_out
            and config.block_in % w.shape[1] == 0)


def _blocked_weights(w: np.ndarray, g: ConvGeometry, config: HardwareConfig) -> np.ndarray:
    """OIHW weights as (O/block_out, C/block_in, KH, KW, block_out, block_in), zero-padded;
    grouped ones whose tiles hold whole groups (``_tile_holds_whole_groups``; (O, C/group,
    KH, KW)) as (O/block_out, 1, KH, KW, block_out, block_in) tiles holding each group's
    filters in its block on the diagonal (depthwise: each channel's tap on the
    diagonal)."""
    o, c, kh, kw = w.shape
    bo, bi = config.block_out, config.block_in
    if g.depthwise:
        width = c  # channels per group: output lane j reads input lanes of j's group
        filters = np.zeros((g.filters * bo, width, kh, kw), np.int8)
        filters[:o] = w
        blocked = np.zeros((g.filters, 1, kh, kw, bo, bi), np.int8)
        lanes = np.arange(bo)
        for k in range(width):
            inputs = lanes // width * width + k
            blocked[:, 0, :, :, lanes, inputs] = filters[:, k].reshape(
                g.filters, bo, kh, kw).transpose(1, 0, 2, 3)
        return blocked
    padded = np.zeros((g.filters * bo, g.channels * bi, kh, kw), np.int8)
    padded[:o, :c] = w
    return padded.reshape(g.filters, bo, g.channels, bi, kh, kw).transpose(0, 2, 4, 5, 1, 3)


def _conv_program(config: HardwareConfig, g: ConvGeometry, packed: np.ndarray,
                  requantization: Requantization, virtual_threads: int, pad_value: int):
    """(program, tiling, threads, epilogue signature) of the direct convolution ``g`` with
    the blocked weights ``packed`` (``_blocked_weights``) and its ``requantization``,
    its padded LOADs filling ``pad_value``; None when no tiling fits the buffers."""
    bo = config.block_out
    rows = packed.transpose(0, 4, 1, 2, 3, 5).reshape(g.filters * bo, -1)
    epilogue = plan_epilogue(requantization, rows, g.filters * bo, config.acc_bits)
    signature = epilogue_signature(epilogue)
    found = best_conv_tiling(config, g, virtual_threads, signature)
    if found is None:
        return None
    tiling, threads = found
    stream = conv_stream(config, g, tiling, threads, signature)
    program = filled_program(stream, config, {"W": packed.reshape(-1, config.block_in)},
                             epilogue, g.filters * bo, pad_value=pad_value)
    return program, tiling, threads, signature


def _direct_conv(function: Node, g: ConvGeometry, config: HardwareConfig,
                 virtual_threads: int) -> AcceleratorKernel | None:
    """The composite as a direct convolution on chip, or None when no tiling fits."""
    nodes = function.body.nodes
    core = nodes[0]
    n, c, h, width = core.inputs[0].type.shape
    w = core.inputs[1].data if g.depthwise else ungrouped_weights(core)
    o = w.shape[0]
    bi, bo = config.block_in, config.block_out
    packed = _blocked_weights(w, g, config)
    # each row of the GEMM view: one output channel's weights, in the order they meet
    # the input (the accumulator range the epilogue plans with depends on nothing else)
    rows = packed.transpose(0, 4, 1, 2, 3, 5).reshape(g.filters * bo, -1)
    built = _conv_program(config, g, packed, _requantization(nodes, rows[:o]),
                          virtual_threads, input_zero_point(core))
    if built is None:
        return None
    program, tiling, threads, signature = built

    to_device = blocked_input(config)

    def from_device(y: np.ndarray) -> np.ndarray:
        return from_blocked(y, (n, o, g.out_height, g.out_width), config)

    # the model's multiply-accumulates (a grouped convolution's zero weights not counted)
    macs = n * g.out_height * g.out_width * o * core.inputs[1].type.shape[1] * \
        g.kernel[0] * g.kernel[1]
    return AcceleratorKernel(function.name, config, program, to_device, from_device, "X", "Y",
                             tiling, threads, macs=macs,
                             timing=conv_timing(config, g, tiling, threads, signature),
                             blocked=bi == bo)


def _alu_tiles(function: Node, shape: tuple[int, ...], config: HardwareConfig) -> int:
    """Tiles of a 4-D ``shape`` in the blocked layout, for an ALU program that brings
    input tiles into the accumulators (``src_inp``)."""
    n, c, h, w = shape
    if n % config.batch or config.block_in != config.block_out:
        raise CompileError(f"{function.name}: batch {n} is not a multiple of {config.batch}, "
                           "or the input tiles are not shaped like accumulator tiles")
    return n // config.batch * -(-c // config.block_in) * h * w


def _residual_add(function: Node, config: HardwareConfig) -> AcceleratorKernel:
    """A quantized addition or product on the ALU (``residual``), its operands and
    result in the blocked layout of the convolutions around it; a product's second
    operand that broadcasts (a squeeze-excite scale, N x C x 1 x 1) is expanded to the
    first's shape on the host."""
    parse = quantized_mul if function.attrs.get("composite") == "quantized_mul" \
        else quantized_add
    found = parse(function.body.nodes)
    if isinstance(found, str):
        raise CompileError(f"{function.name}: {found}")
    add, casts = found
    shape = casts[0].inputs[0].type.shape
    program = add_program(config, _alu_tiles(function, shape, config), add)
    order = [function.body.inputs.index(cast.inputs[0]) for cast in casts]
    if sorted(order) != [0, 1]:
        raise CompileError(f"{function.name}: the addition's operands are not its two inputs")

    to_device = blocked_input(config)

    def from_device(y: np.ndarray) -> np.ndarray:
        return from_blocked(y, shape, config)

    # operand 1 may broadcast (a product's): the function input it is expands it
    # each operand its own buffer (both are laid out before either is written)
    by_operand = [to_device, blocked_input(config, None if casts[1].inputs[0].type.shape
                                           == shape else shape)]
    devices = [by_operand[order.index(j)] for j in (0, 1)]  # per function input
    names = ["A", "B"] if order == [0, 1] else ["B", "A"]
    return AcceleratorKernel(function.name, config, program, devices[0], from_device,
                             names[0], "Y", more_inputs=((names[1], devices[1]),),
                             blocked=True)


def _max_pool(function: Node, config: HardwareConfig) -> AcceleratorKernel:
    """An integer max pool on the ALU (``pool``), its input and output in the blocked
    layout of the convolutions around it."""
    pool = function.body.nodes[0]
    geometry = max_pool_geometry(pool, config)
    if isinstance(geometry, str):
        raise CompileError(f"{function.name}: {geometry}")
    shape = pool.outputs[0].type.shape

    to_device = blocked_input(config)

    def from_device(y: np.ndarray) -> np.ndarray:
        return from_blocked(y, shape, config)

    return AcceleratorKernel(function.name, config, pool_program(config, geometry), to_device,
                             from_device, "X", "Y", blocked=True)


def _lookup_table(function: Node, config: HardwareConfig) -> AcceleratorKernel:
    """A lookup-table activation on the ALU (``lookup``), its input and output in the
    blocked layout of the convolutions around it."""
    node = function.body.nodes[0]
    why = unsupported_lookup(node)
    if why is not None:
        raise CompileError(f"{function.name}: {why}")
    shape = node.inputs[0].type.shape
    table = device_table(node.inputs[1].data).tobytes()
    if len(shape) == 2:
        return _row_lookup_table(function, shape, table, config)
    tiles = _alu_tiles(function, shape, config)

    to_device = blocked_input(config)

    def from_device(y: np.ndarray) -> np.ndarray:
        return from_blocked(y, shape, config)

    return AcceleratorKernel(function.name, config, lookup_program(config, tiles, table),
                             to_device, from_device, "X0", "Y", blocked=True)


def _row_lookup_table(function: Node, shape: tuple[int, int], table: bytes,
                      config: HardwareConfig) -> AcceleratorKernel:
    """A lookup-table activation of a (rows, columns) tensor (a classifier's hidden
    layer) in the layout of the dense layers around it: the columns padded to whole
    tiles. The table maps each element on its own, so the program's tiles may come in
    the matrix's order: its tensors are that matrix's."""
    rows, columns = shape
    if rows % config.batch or config.block_in != config.block_out:
        raise CompileError(f"{function.name}: {rows} rows are not a multiple of the batch "
                           f"{config.batch}, or the input tiles are not shaped like the "
                           "output tiles")
    padded = _round_up(columns, config.block_in)
    program = lookup_program(config, rows // config.batch * padded // config.block_in, table)
    tensors = {name: dataclasses.replace(program.tensors[name], rows=rows, cols=padded)
               for name in ("X0", "Y")}
    program = dataclasses.replace(program, tensors={**program.tensors, **tensors})

    to_device = _padded_columns(rows, columns, padded)

    def from_device(y: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(y[:, :columns])

    return AcceleratorKernel(function.name, config, program, to_device, from_device, "X0",
                             "Y", matrix_layout=ROWS)


def _flatten(function: Node, config: HardwareConfig) -> AcceleratorKernel:
    """A pooled (N, C, 1, 1) tensor flattened to (N, C) before a classifier: the tiles
    of the blocked layout (batch group, channel block) are those of the dense layer's
    (rows, padded columns) matrix in the same order, so the program copies them through
    the accumulators (``lookup.copy_program``) and its output is that matrix."""
    node = function.body.nodes[0]
    why = flatten_unsupported(node)
    if why is not None:
        raise CompileError(f"{function.name}: {why}")
    n, c = node.outputs[0].type.shape
    program = copy_program(config, (_alu_tiles(function, node.inputs[0].type.shape,
                                                config),))
    padded = _round_up(c, config.block_out)
    y = dataclasses.replace(program.tensors["Y"], rows=n, cols=padded)
    program = dataclasses.replace(program, tensors={**program.tensors, "Y": y})

    to_device = blocked_input(config)

    def from_device(y: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(y[:, :c])

    return AcceleratorKernel(function.name, config, program, to_device, from_device, "X0",
                             "Y", blocked=True, result_layout=ROWS)


def _concat(function: Node, config: HardwareConfig) -> AcceleratorKernel:
    """A channel concatenation as copies through the ALU (``lookup.copy_program``), its
    inputs and output in the blocked layout of the convolutions around it."""
    node = function.body.nodes[0]
    why = concat_unsupported(node, config.block_in)
    if why is not None or config.batch != 1:
        raise CompileError(f"{function.name}: {why or 'the batch tile is not 1'}")
    order = [function.body.inputs.index(v) for v in node.inputs]
    if sorted(order) != list(range(len(order))):
        raise CompileError(f"{function.name}: an input is concatenated twice")
    shape = node.outputs[0].type.shape
    sources = tuple(_alu_tiles(function, v.type.shape, config) for v in node.inputs)

    to_device = blocked_input(config)

    def from_device(y: np.ndarray) -> np.ndarray:
        return from_blocked(y, shape, config)

    # the composite's inputs in its own order, each the program's tensor of its position
    names = [f"X{node.inputs.index(v)}" for v in function.body.inputs]
    return AcceleratorKernel(function.name, config, copy_program(config, sources), to_device,
                             from_device, names[0], "Y",
                             more_inputs=tuple((name, blocked_input(config))
                                               for name in names[1:]),
                             blocked=True)


def _channel_gather(function: Node, config: HardwareConfig,
                    virtual_threads: int) -> AcceleratorKernel:
    """A channel gather as a 1x1 convolution with 0/1 weights on the GEMM core
    (``gather``), its inputs and output in the blocked layout of the convolutions around
    it; each input is written to its own part of the convolution's input tensor."""
    node = function.body.nodes[0]
    why = unsupported_gather(node, config)
    if why is not None:
        raise CompileError(f"{function.name}: {why}")
    g = gather_geometry(node, config)
    shape = node.outputs[0].type.shape
    built = _conv_program(config, g, gather_weights(node, g, config),
                          identity_requantization(shape[1]), virtual_threads, 0)
    if built is None:
        raise CompileError(f"{function.name}: no tiling of the {g.channels}-block gather "
                           f"fits the buffers of {config.name}")
    program, tiling, threads, signature = built

    to_device = blocked_input(config)

    def from_device(y: np.ndarray) -> np.ndarray:
        return from_blocked(y, shape, config)

    # the composite's inputs in its own order, each the program's part of its position
    names = [f"X{node.inputs.index(v)}" for v in function.body.inputs]
    return AcceleratorKernel(function.name, config, with_input_parts(program, node, config),
                             to_device, from_device, names[0], "Y", tiling, threads,
                             timing=conv_timing(config, g, tiling, threads, signature),
                             more_inputs=tuple((name, blocked_input(config))
                                               for name in names[1:]),
                             blocked=True)


def compile_composite(function: Node, config: HardwareConfig,
                      virtual_threads: int) -> AcceleratorKernel:
    """An accelerator kernel for one composite function node."""
    kernel = _lowered_composite(function, config, virtual_threads)
    body = function.body
    kernel.output_bytes = body.outputs[0].type.nbytes
    kernel.input_bytes = sum(value.type.nbytes for value in body.inputs)
    core = body.nodes[0]
    if core.op in ("ConvInteger", "MatMulInteger"):
        shape = core.inputs[0].type.shape
        kernel.in_channels = shape[1] if core.op == "ConvInteger" else shape[-1]
    return kernel


def _lowered_composite(function: Node, config: HardwareConfig,
                       virtual_threads: int) -> AcceleratorKernel:
    if function.attrs.get("composite") in ("quantized_add", "quantized_mul"):
        return _residual_add(function, config)
    if function.attrs.get("composite") == "max_pool":
        return _max_pool(function, config)
    if function.attrs.get("composite") == "lookup_table":
        return _lookup_table(function, config)
    if function.attrs.get("composite") == "concat":
        return _concat(function, config)
    if function.attrs.get("composite") == "channel_gather":
        return _channel_gather(function, config, virtual_threads)
    if function.attrs.get("composite") == "flatten":
        return _flatten(function, config)
    nodes = function.body.nodes
    core = nodes[0]
    if core.op == "ConvInteger":
        geometry = direct_conv_geometry(core, config)
        direct = geometry and _direct_conv(function, geometry, config, virtual_threads)
        if direct:
            return direct
        # im2col over all input channels (a grouped convolution's block-diagonal weights)
        k = core.inputs[0].type.shape[1] * math.prod(core.inputs[1].type.shape[2:])
        weights, to_matrix, from_matrix, rows = _conv_lowering(
            core, _round_up(k, config.block_in))
    elif core.op == "MatMulInteger":
        k = core.inputs[1].data.shape[0]
        weights, to_matrix, from_matrix, rows = _dense_lowering(
            core, _round_up(k, config.block_in))
    else:
        raise CompileError(f"{function.name}: no accelerator lowering for {core.op}")
    out_channels, k = weights.shape
    k_padded = _round_up(k, config.block_in)
    n_padded = _round_up(out_channels, config.block_out)
    m_padded = _round_up(rows, config.batch)
    if m_padded != rows:
        raise CompileError(f"{function.name}: {rows} rows are not a multiple of the batch "
                           f"size {config.batch}")
    w = np.zeros((n_padded, k_padded), np.int8)
    w[:out_channels, :k] = weights
    epilogue = plan_epilogue(_requantization(nodes, weights), w, n_padded,
                             config.acc_bits)
    tuned = vta_tiling(rows, k_padded, n_padded, config, requantize=True)
    if tuned is not None:  # a tuning log is applied: its best tiling and thread count
        tiling, virtual_threads = tuned
    else:
        # timed with the reference program's full epilogue, whose six constants take
        # at least the accumulator space the planned epilogue keeps
        tiling, _ = best_tiling(config, rows, k_padded, n_padded, virtual_threads,
                                FULL_EPILOGUE_CONSTANTS)
    virtual_threads = usable_threads(config, rows, n_padded, tiling, virtual_threads)
    program = gemm_program(config, rows, w, tiling, virtual_threads, epilogue)
    # the model's multiply-accumulates (a grouped convolution's zero weights not counted)
    group = int(core.attrs.get("group", 1)) if core.op == "ConvInteger" else 1
    # a dense layer's operands are (rows, padded columns) matrices: a lookup table
    # between two of them takes them as they are (an im2col input is not such a matrix)
    return AcceleratorKernel(function.name, config, program, to_matrix, from_matrix, "A", "C",
                             tiling, virtual_threads, macs=rows * k * out_channels // group,
                             matrix_layout=ROWS if core.op == "MatMulInteger" else None)
