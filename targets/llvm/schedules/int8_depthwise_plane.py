"""Integer depthwise convolutions whose window is the whole image (a global pool's sum,
``integer_global_average_pools``: ``ConvInteger(x, ones[C, 1, H, W])``, a squeeze-excite's
or a classifier's): each channel's plane is one run of bytes, and so is its weight, so the
sum is a dot product of two flat vectors: ``4 * lanes`` bytes of each per dot-product
instruction (:data:`.int8_dot.DOT4_CALL` with both operands whole vectors), then the
lanes added once.

The window kernel (:mod:`.int8_depthwise_quads`) would compute a vector of output pixels
of which one is kept, a window load, a shuffle and an instruction per kernel row and quad:
a 28x28 plane 196 of them per channel where this takes 13; with its copy a row a vector
(rows of 28, 14 or 7 bytes, which LLVM splits into pieces and unrolls), EfficientNet-B0's
16 squeeze-excite pools took 3.5 CPU-s of LLVM's time to compile, 1.1 now.

The data is copied as the window kernel copies it (:func:`.int8_depthwise_quads.
pack_padded`: stored as the dot product reads it, the zero point past the image), in
vectors of as many whole image rows as fit (:func:`copy_rows_per_vector`), inside the
result's parallel loop, a task's channels at a time; the constant weight is packed once,
when the kernel is built (:func:`pack_weight_plane_array`: the taps flat, zeros to whole
vectors, then the channel's weight sum), so its bytes past the taps multiply the copy's
zero points by 0.
"""

from __future__ import annotations

import functools
import operator

import numpy as np

from heterocc.sdk import te
from heterocc.te.intrin import BufferRegion, TensorIntrin
from heterocc.te.schedule_reads import reads_of

from ..cpu import CPUDescription
from ..int8_dot import dot4_instruction
from .common import schedule_rows, vector_lanes
from .int8_conv import (
    GROUP,
    INT8_BLOCKS_PER_TASK,
    RowBlocks,
    _flip,
    _zero,
    data_dtype,
    int32_of_bytes,
    store_dot4,
    tensorized_channel_tiles,
)
from .int8_depthwise_quads import IN_BLOCKS, pack_padded

#: a depthwise sums stage's attribute: its window is the whole image (this module's)
INT8_PLANE = "int8_plane"


def plane_applies(x_shape, w_shape, attrs, cpu: CPUDescription) -> bool:
    """Whether a depthwise convolution of ``x_shape`` data by ``w_shape`` weights with
    ``attrs`` is a whole-image window (no padding, no dilation, the kernel the image's
    size: one output pixel per channel) on a CPU whose 8-bit dot product is one
    instruction (``vpdpbusd``, ``sdot``; its stand-ins cost more per byte than the
    16-bit products of the other depthwise kernels)."""
    if x_shape is None or len(x_shape) != 4 or len(w_shape) != 4:
        return False
    pads = tuple(attrs.get("pads") or (0, 0, 0, 0))
    dilations = tuple(attrs.get("dilations") or (1, 1))
    if any(pads) or any(d != 1 for d in dilations) or attrs.get("auto_pad", "NOTSET") not in (
            "NOTSET", "VALID", b"NOTSET", b"VALID"):
        return False
    if tuple(int(s) for s in w_shape[2:]) != tuple(int(s) for s in x_shape[2:]):
        return False
    lanes = cpu.vector_lanes("int32")
    instruction = dot4_instruction(cpu.features, cpu.arch, lanes,
                                   data_dtype(cpu) == "uint8", False)
    return instruction in ("vpdpbusd", "sdot")


def plane_vectors(taps: int, lanes: int) -> int:
    """How many dot-product instructions (vectors of ``4 * lanes`` bytes) a plane of
    ``taps`` bytes takes."""
    return -(-taps // (GROUP * lanes))


def copy_rows_per_vector(width: int, dtype: str, cpu: CPUDescription) -> int:
    """How many image rows of ``width`` bytes one vector move of the plane's copy takes:
    as many as a vector of ``dtype`` holds (at least one). A row a vector (rows of 28,
    14 or 7 bytes: each one masked move, and odd-width vectors LLVM splits into
    pieces) took 1.3-1.4x the time of EfficientNet-B0's squeeze-excite pools at 28x28
    and 14x14, and LLVM 3.2x the time to compile them (AVX-512)."""
    return max(vector_lanes(dtype, cpu) // width, 1)


def weight_plane_shape(w_shape, cpu: CPUDescription) -> tuple[int, ...]:
    """The shape of a constant whole-image depthwise weight of ``w_shape`` (``[C, 1, KH,
    KW]``) packed flat (:func:`pack_weight_plane_array`): ``[C, groups + 1, 4]``, the
    taps in whole vectors of groups of four, then one group holding the weight sum."""
    return _plane_shape(w_shape, cpu.vector_lanes("int32"))


def _plane_shape(w_shape, lanes: int) -> tuple[int, ...]:
    """:func:`weight_plane_shape` for ``lanes`` int32 lanes per vector."""
    channels, _, kh, kw = w_shape
    return (channels, plane_vectors(kh * kw, lanes) * lanes + 1, GROUP)


def pack_weight_plane_array(w: np.ndarray, lanes: int) -> np.ndarray:
    """NumPy's packing of a constant whole-image depthwise weight ``w`` (once, when its
    kernel is built): each channel's taps row after row, zeros to whole vectors, then
    its weight sum's four bytes (the int32's, lowest first: read back by
    :func:`.int8_conv.int32_of_bytes`); ``lanes``: the int32 lanes of the CPU's
    vector (:func:`weight_plane_shape`)."""
    channels, _, kh, kw = w.shape
    shape = _plane_shape(w.shape, lanes)
    flat = np.zeros((channels, shape[1] * GROUP), np.int8)
    flat[:, :kh * kw] = w.reshape(channels, -1)
    sums = w.astype(np.int64).reshape(channels, -1).sum(axis=1).astype("<i4")
    flat[:, (shape[1] - 1) * GROUP:] = sums.view(np.int8).reshape(channels, GROUP)
    return flat.reshape(shape)


def dot4_vectors_intrinsic(lanes: int, dtype: str) -> TensorIntrin:
    """``acc[l] += sum_j data[4 l + j] * w[l, j]`` over ``lanes`` lanes (``dtype`` data,
    int8 weights): one :data:`.int8_dot.DOT4_CALL` of two whole vectors of bytes."""
    data = te.placeholder((GROUP * lanes,), dtype, "data")
    weight = te.placeholder((lanes, GROUP), "int8", "weight")
    r = te.reduce_axis(GROUP, "r")
    acc = te.compute((lanes,), lambda lane: te.sum(
        te.cast("int32", data[GROUP * lane + r]) * te.cast("int32", weight[lane, r]),
        axis=r), name="acc")

    def implement(inputs: list[BufferRegion], output: BufferRegion):
        data_region, weight_region = inputs
        return store_dot4(output, data_region.load(0), weight_region.load(0, 0),
                          (GROUP * lanes, GROUP * lanes), lanes)

    return TensorIntrin(f"cpu_dot4_vectors_{dtype}_{lanes}", acc, implement,
                        {"lanes": lanes})


def _plane_weight(w: te.Tensor, packed_weight: te.Tensor | None, groups: int):
    """``(weight, weight_sum)``: the flat weight ``[C, groups (+ 1), 4]`` and each
    channel's weight sum, from the weight packed when the kernel was built (its last
    group the sum) or, for a weight known only at run time, made and summed per call."""
    channels, _, kh, kw = w.shape
    if packed_weight is not None:
        return packed_weight, lambda c: int32_of_bytes(
            lambda index: packed_weight[c, groups, index])
    taps = kh * kw

    def element(c, g, j):
        tap = g * GROUP + j
        clamped = te.minimum(tap, taps - 1)
        value = te.cast("int32", w[c, 0, clamped // kw, clamped % kw])
        return te.cast("int8", te.if_then_else(tap < taps, value, te.const(0, "int32")))

    weight = te.compute((channels, groups, GROUP), element, name="int8_weight_plane",
                        dtype="int8")
    ry, rx = te.reduce_axis(kh, "wy"), te.reduce_axis(kw, "wx")
    summed = te.compute((channels,), lambda c: te.sum(te.cast("int32", w[c, 0, ry, rx]),
                                                      axis=[ry, rx]),
                        name="int8_depthwise_weight_sum", dtype="int32",
                        attrs={"int8_weight_sum": True})
    return weight, lambda c: summed[c]


def plane_depthwise_conv(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None, tiles,
                         cpu: CPUDescription, name: str,
                         packed_weight: te.Tensor | None) -> te.Tensor:
    """int32 ``sum((x - x_zero) * w)`` of a whole-image depthwise convolution
    (:func:`plane_applies`; checked by :func:`.int8_depthwise.int8_depthwise_conv`):
    per channel, ``lanes`` partial sums of its plane in vectors of groups of four bytes
    (an anchor carrying ``int8_depthwise``, ``int8_quads`` and :data:`INT8_PLANE`), then
    added and corrected by the zero point (``int8_conv_result``, ``[n, C, 1, 1]``).
    ``packed_weight``: :func:`pack_weight_plane_array` of ``w``, or None."""
    n, channels, height, width = x.shape
    lanes = tiles.lanes
    dtype = data_dtype(cpu)
    vectors = plane_vectors(height * width, lanes)
    groups = vectors * lanes
    # the copy in whole rows of the image, covering every vector's bytes (the zero
    # point past the image, which the weight's zeros multiply), made per task, moved
    # in vectors of as many whole rows as one holds (copy_rows_per_vector)
    per = copy_rows_per_vector(width, dtype, cpu)
    rows = -(-groups * GROUP // (width * per)) * per
    blocked = {IN_BLOCKS: True, te.REGION_MULTIPLE: width * per}
    data = pack_padded(x, x_zero, (0, 0, 0, 0), 1, 1, width, rows, dtype, blocked)
    weight, weight_sum = _plane_weight(w, packed_weight, groups)
    rv, rj = te.reduce_axis(vectors, "rv"), te.reduce_axis(GROUP, "rj")

    def body(b, c, y, lane):
        group = rv * lanes + lane
        return te.sum(te.cast("int32", data[b, c, 0, group * GROUP + rj])
                      * te.cast("int32", weight[c, group, rj]), axis=[rv, rj])

    sums = te.compute((n, channels, 1, lanes), body, name=f"{name}_depthwise",
                      dtype="int32",
                      attrs={"int8_depthwise": tiles, "int8_rows": RowBlocks(1, lanes),
                             "int8_quads": (1, 1), INT8_PLANE: True,
                             INT8_BLOCKS_PER_TASK: 1})
    offset = _zero(x_zero) + _flip(x.dtype, dtype)

    def result(b, c, y, column):
        # the lanes' partial sums, consecutive: one vector load and a horizontal add
        total = functools.reduce(operator.add, (sums[b, c, 0, lane] for lane in range(lanes)))
        return total - offset * weight_sum(c)

    return te.compute((n, channels, 1, 1), result, name=name, dtype="int32",
                      attrs={"int8_conv_result": True})


def schedule_plane_depthwise(schedule: te.Schedule, sums: te.Tensor,
                             cpu: CPUDescription) -> None:
    """The sums of :func:`plane_depthwise_conv`: a tile of channels, a vector of partial
    sums each, accumulating in registers over the plane's vectors, one dot product of
    two whole vectors per channel and vector; the copy row by row (vectorized), serial:
    made task by task where :func:`.int8_depthwise_quads.attach_copies_in_blocks`
    places it."""
    tiles = sums.op.attrs["int8_depthwise"]
    data, weight = reads_of(sums.op.body)[:2]
    # serial (made inside the result's parallel loop), in vectors of whole image rows
    stage = schedule[data]
    lanes = vector_lanes(data.dtype, cpu)
    _, inner = stage.split(stage.op.axis[-1], data.op.attrs[te.REGION_MULTIPLE])
    if int(inner.extent) > lanes:
        _, inner = stage.split(inner, lanes)
    stage.vectorize(inner)
    if isinstance(weight.op, te.ComputeOp):  # a weight known only at run time
        schedule_rows(schedule, weight, cpu, serial_axes=1)
    tensorized_channel_tiles(schedule, sums, tiles.channels, tiles.lanes,
                             dot4_vectors_intrinsic(tiles.lanes, data.dtype))
