"""Integer depthwise convolutions on the CPU's 8-bit dot product: the taps of a kernel
row in groups of four bytes, gathered in registers.

A depthwise convolution has no four input channels to add per int32 lane, but a kernel
row has three (or more) taps: output pixel ``x`` reads padded columns ``x * sx + rx *
dx``. So one load of a padded row's bytes and one byte shuffle (``vpermb``, AArch64's
``tbl``; on x86 without VBMI a 16-byte load per 128-bit block and ``pshufb``:
:func:`.int8_dot.window_blocks`) make, for each lane of a vector of output pixels, its
quad ``(x * sx, + dx, + 2 dx, + 3 dx)`` (a second quad per pixel for taps 4-7, and so
on), and one
dot-product instruction (:data:`.int8_dot.DOT4_CALL` in its window form) adds a whole
kernel row: a 3x3 kernel takes three loads, shuffles and ``vpdpbusd`` (or ``sdot``) per
vector of output pixels, where the 16-bit products take nine multiplies, widenings and
adds and the column pairs six pair products over an int16 copy twice the size. The
fourth tap's weight is 0.

The data is a padded byte copy stored as the dense convolution's is
(:func:`.int8_conv.data_dtype`: uint8, the sign bit flipped from int8, for ``vpdpbusd``;
int8 for ``sdot``), padded with the zero point, so the sums are corrected by ``(zero
point + flip) * sum(w)`` per channel, the identity of
:func:`heterocc.ops.qnn.zero_point_bias`. The copy is split by row phase (each phase's
padded rows one after another, a row a whole number of column strides long), and the
output pixels are numbered over rows of ``row length / column stride`` positions, so
that the window of output position ``q`` starts at byte ``q * column stride`` of its
phase and a vector runs on across rows (a 7x7 output fills whole vectors), in blocks of
rows as the dense convolution's (:func:`.int8_conv.row_blocks`).

A call is one parallel loop: each iteration copies the padded rows of its channels that
its blocks read, then sums and finishes them (:func:`blocks_per_task`); a constant
weight carries its per-channel sums, packed with it when the kernel is built
(:func:`pack_weight_quads_array`), so nothing runs serially around the loop.
"""

from __future__ import annotations

import numpy as np

from heterocc.sdk import te
from heterocc.te.intrin import BufferRegion, TensorIntrin
from heterocc.te.schedule_reads import reads_of

from ..cpu import CPUDescription
from ..int8_dot import SHUFFLE_BLOCK, dot4_instruction, window_blocks, window_read_bytes
from .int8_conv import (
    GROUP,
    IMAGE_COLUMNS,
    INT8_BLOCKS_PER_TASK,
    TASK_BALANCE,
    _flip,
    _zero,
    block_of_rows,
    data_dtype,
    int32_of_bytes,
    pool_makespan,
    row_blocks,
    schedule_phase_rows,
    store_dot4,
    tensorized_channel_tiles,
    weight_dtype,
)


def window_bytes(lanes: int, stride: int, dilation: int) -> int:
    """The bytes one window load of :func:`dot4_window_intrinsic` spans."""
    return stride * (lanes - 1) + (GROUP - 1) * dilation + 1


def quads_apply(strides, dilations, cpu: CPUDescription) -> bool:
    """Whether a depthwise convolution of ``strides`` and ``dilations`` takes a kernel
    row per dot-product instruction on ``cpu``:

    * where it has the 8-bit dot product (``vpdpbusd``, ``sdot``), or on x86 without
      VNNI (where it would be the split ``vpmaddubsw``) by weight quads widened to
      int16 when packed: two ``pmaddwd`` a kernel row, each of two taps' bytes moved
      into int16 lanes by the window's own shuffle
      (:meth:`.int8_dot.Dot4Emitter.emit_widened_weight`). Against the 16-bit products
      (Zen 5, ``benchmarks/int8_depthwise.py``): Haswell code 0.51-1.00x (the column
      pairs, where they applied, 0.63-0.76x), Skylake-AVX512 code 0.48-0.96x;
    * and a byte shuffle: across the whole vector (AVX-512 VBMI's ``vpermb``, NEON's
      ``tbl``), where one window of a vector of pixels fits one vector of bytes; or,
      on x86 without VBMI (:func:`.int8_dot.window_blocks`: Cascade Lake, AVX-VNNI),
      ``pshufb`` within each 128-bit block, where the window of four pixels fits its
      16 bytes (a byte permute across blocks would take several shuffles)."""
    lanes = cpu.vector_lanes("int32")
    unsigned = data_dtype(cpu) == "uint8"
    instruction = dot4_instruction(cpu.features, cpu.arch, lanes, unsigned, False)
    stride, dilation = int(strides[1]), int(dilations[1])
    if window_blocks(cpu.features, cpu.arch, lanes):
        # x86 without VBMI: each 128-bit block's four lanes gathered by pshufb
        fits = window_bytes(GROUP, stride, dilation) <= SHUFFLE_BLOCK
    else:
        fits = (cpu.arch == "aarch64" or "avx512vbmi" in cpu.features) \
            and window_bytes(lanes, stride, dilation) <= cpu.vector_lanes("uint8")
    # x86 without VNNI: a group's bytes by weights widened when packed, two pmaddwd a
    # kernel row (Dot4Emitter.emit_widened_weight)
    return instruction in ("vpdpbusd", "sdot", "pmaddubsw") and fits


def dot4_window_intrinsic(lanes: int, dtype: str, stride: int, dilation: int,
                          weight_type: str = "int8") -> TensorIntrin:
    """``acc[l] += sum_j data[stride * l + dilation * j] * w[j]`` over ``lanes`` pixels
    and four taps (``dtype`` data, ``weight_type`` weights: int8, or int16 widened when
    packed): one :data:`.int8_dot.DOT4_CALL` in its window form (a load of the span, a
    byte shuffle, the dot product)."""
    span = window_bytes(lanes, stride, dilation)
    data = te.placeholder((span,), dtype, "data")
    weight = te.placeholder((GROUP,), weight_type, "weight")
    r = te.reduce_axis(GROUP, "r")
    acc = te.compute((lanes,), lambda lane: te.sum(
        te.cast("int32", data[stride * lane + dilation * r]) * te.cast("int32", weight[r]),
        axis=r), name="acc")

    def implement(inputs: list[BufferRegion], output: BufferRegion):
        data_region, weight_region = inputs
        return store_dot4(output, data_region.load(0), weight_region.load(0),
                          (span, GROUP, stride, dilation), lanes)

    return TensorIntrin(f"cpu_dot4_window_{dtype}_{weight_type}_{lanes}_{stride}_{dilation}",
                        acc, implement, {"lanes": lanes})


#: a padded copy's attribute: it is made task by task inside the result's parallel
#: loop (:func:`blocks_per_task`, :func:`attach_copies_in_blocks`)
IN_BLOCKS = "int8_copy_in_blocks"


def blocks_per_task(blocks: int, tiles: int, cpu: CPUDescription) -> int:
    """How many of a channel tile's ``blocks`` of rows one iteration of the result's
    parallel loop computes (``tiles`` channel tiles in all, batch included), the padded
    copy of its channels and rows made in that iteration, just before its sums read
    them (:data:`IN_BLOCKS`): the most (a divisor of ``blocks``; all of them, the tile's
    whole image, where they can) whose tasks the thread pool shares out evenly over the
    CPU's cores (:func:`pool_makespan` within :data:`TASK_BALANCE`), else the most
    even split.

    One parallel loop, not a copy's loop at root and then the sums' (two hand-offs to
    the thread pool per call): MobileNetV2's stride-2 depthwise layers did not run
    faster on two threads than on one. Large tasks rather than a block of rows each: a
    block's copy repeats the rows its windows reach past it (a 14x14 output, one row a
    block: 1.2-1.3x the kernel's time on one thread); a tile's 8 channels at 112x112
    stay in the L2 (104 KB), where the whole image's copy at root did not (1.27 MB for 96
    channels). But an uneven split costs as much: a tile a task, MobileNetV2's 96x112
    stride-2 layer (12 tasks) ran 1.15x and its 144x56 one (18) 1.09x slower on two
    threads than with the copy at root, while the pool cut them into chunks of 1, 2, 1,
    2, ... tasks (now the longer chunks first: both share out evenly)."""
    best = None
    for per in range(blocks, 0, -1):
        if blocks % per:
            continue
        makespan = pool_makespan(tiles * (blocks // per), max(cpu.num_cores, 1))
        if makespan <= TASK_BALANCE:
            return per
        if best is None or makespan < best[0]:
            best = (makespan, per)
    return best[1]


def pack_padded(x: te.Tensor, x_zero: te.Tensor | None, pads, stride: int, phases: int,
                row_length: int, rows: int, dtype: str, attrs=None) -> te.Tensor:
    """``x`` (8-bit NCHW) stored as ``dtype`` (the sign bit flipped where the byte types
    differ), padded with the zero point, split by row phase: ``[n, C, phases, rows *
    row_length]``, phase ``p``'s padded rows ``stride * r + p`` one after another, each
    ``row_length`` columns (the zero point past the padded image). The flat axis carries
    ``int8_row`` (the row length), so that its schedule loops over rows and columns (no
    division); the reads are guarded, not clamped, so a row is one vector copy masked at
    the borders."""
    n, channels, height, width = x.shape
    top, left = pads[0], pads[1]
    flip = _flip(x.dtype, dtype)
    zero = _zero(x_zero)

    def element(b, c, phase, position):
        y = position // row_length * stride + phase - top
        col = position % row_length - left
        inside = te.logical_and(te.logical_and(y >= 0, y < height),
                                te.logical_and(col >= 0, col < width))
        return te.cast(dtype, te.if_then_else(inside, te.cast("int32", x[b, c, y, col]),
                                              zero) + flip)

    return te.compute((n, channels, phases, rows * row_length), element,
                      name="int8_padded", dtype=dtype,
                      attrs={"int8_row": row_length, IMAGE_COLUMNS: (int(left), int(width)),
                             **(attrs or {})})


def _tap_weight(w: te.Tensor, packed_weight: te.Tensor | None, c, i, j):
    """Weight ``w[c, 0, i, j]`` as int32, from ``w`` or its int16 vectors
    (:func:`.int8_depthwise.pack_weight_lanes_array`)."""
    if packed_weight is None:
        return te.cast("int32", w[c, 0, i, j])
    return te.cast("int32", packed_weight[c, i, j, 0])


def weight_quads_shape(w_shape) -> tuple[int, ...]:
    """The shape of a constant depthwise weight of ``w_shape`` (``[C, 1, KH, KW]``)
    packed into its quads (:func:`pack_weight_quads_array`): :func:`quad_weight`'s
    ``[C, KH, quads, 4]`` with one more kernel row, the channel's weight sum's."""
    channels, _, kh, kw = w_shape
    return (channels, kh + 1, -(-kw // GROUP), GROUP)


def pack_weight_quads_array(w: np.ndarray, dtype: str = "int8") -> np.ndarray:
    """NumPy's copy of :func:`quad_weight` of a constant depthwise weight ``w``, what it
    is packed into once, when its kernel is built, rather than on every call, followed
    by one kernel row whose first four bytes hold each channel's weight sum (the
    zero-point correction's factor; the int32's bytes from the lowest, read back by
    :func:`quad_weight_sum`), so that no call sums the weight again. ``dtype``: int8,
    or int16 where the dot product multiplies widened weights
    (:func:`.int8_conv.weight_dtype`), each byte widened with its sign (the sum's bytes
    too, which :func:`.int8_conv.int32_of_bytes` reads back alike)."""
    channels, _, kh, kw = w.shape
    shape = weight_quads_shape(w.shape)
    rows = np.zeros((channels, kh + 1, shape[2] * GROUP), np.int8)  # a row's taps, flat
    rows[:, :kh, :kw] = w[:, 0]
    sums = w.astype(np.int64).reshape(channels, -1).sum(axis=1).astype("<i4")
    rows[:, kh, :GROUP] = sums.view(np.int8).reshape(channels, GROUP)
    return rows.reshape(shape).astype(dtype)


def is_weight_quads(packed_weight: te.Tensor | None, w_shape) -> bool:
    """Whether ``packed_weight`` holds the weight quads themselves
    (:func:`pack_weight_quads_array` of a weight of ``w_shape``), not the weight's int16
    vectors."""
    return packed_weight is not None \
        and tuple(packed_weight.shape) == weight_quads_shape(w_shape)


def quad_weight(w: te.Tensor, packed_weight: te.Tensor | None,
                dtype: str = "int8") -> te.Tensor:
    """``[C, KH, quads, 4]`` ``dtype`` (int8, or int16 widened): the weights of taps
    ``4 q + j`` of each kernel row (0 past its width); ``packed_weight`` itself where it
    holds them (:func:`is_weight_quads`, with its row of weight sums after them)."""
    if is_weight_quads(packed_weight, w.shape):
        return packed_weight
    channels, _, kh, kw = w.shape

    def element(c, i, q, j):
        tap = GROUP * q + j
        value = _tap_weight(w, packed_weight, c, i, te.minimum(tap, kw - 1))
        return te.cast(dtype, te.if_then_else(tap < kw, value, te.const(0, "int32")))

    return te.compute((channels, kh, -(-kw // GROUP), GROUP), element,
                      name="int8_weight_quads", dtype=dtype)


def quad_weight_sum(weight: te.Tensor, kh: int):
    """``weight_sum(c)``: channel ``c``'s weight sum (the zero-point correction's
    factor) for the quads ``weight`` of a kernel ``kh`` rows high: read from the row
    after the kernel's where the weight was packed with its sums when the kernel was
    built (:func:`pack_weight_quads_array`: its four bytes as one int32, the lower three
    unsigned, the highest signed), else summed once per call (:func:`weight_sums`)."""
    if int(weight.shape[1]) == kh:
        summed = weight_sums(weight)
        return lambda c: summed[c]

    return lambda c: int32_of_bytes(lambda index: weight[c, kh, 0, index])


def weight_sums(weight: te.Tensor) -> te.Tensor:
    """``[C]`` int32: each channel's sum of its weight quads (``weight``, compact: a
    channel's taps in one run of bytes, computed from a weight known only at run time),
    the zero-point correction's factor."""
    channels, kh, quads, _ = weight.shape
    ry, rq, rj = (te.reduce_axis(n, name) for n, name in ((kh, "wy"), (quads, "wq"),
                                                          (GROUP, "wj")))
    return te.compute((channels,), lambda c: te.sum(
        te.cast("int32", weight[c, ry, rq, rj]), axis=[ry, rq, rj]),
        name="int8_depthwise_weight_sum", dtype="int32", attrs={"int8_weight_sum": True})


def quad_depthwise_conv(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None, geometry,
                        tiles, cpu: CPUDescription, name: str,
                        packed_weight: te.Tensor | None) -> te.Tensor:
    """int32 ``sum((x - x_zero) * w)`` of a depthwise convolution (checked by
    :func:`.int8_depthwise.int8_depthwise_conv`, ``geometry``: its strides, dilations,
    pads and output size) with a kernel row's taps per dot product (the module's
    docstring): the sums (an anchor carrying ``int8_depthwise`` and ``int8_quads``),
    corrected by the zero point and cropped (``int8_conv_result``). ``packed_weight``:
    the weight quads packed when the kernel is built (:func:`pack_weight_quads_array`),
    or the weight's int16 vectors, or None."""
    n, channels, height, width = x.shape
    _, _, kh, kw = w.shape
    (sy, sx), (dy, dx), pads, (oh, ow) = geometry
    dtype = data_dtype(cpu)
    quads = -(-kw // GROUP)
    # output pixels numbered over rows of row_length / sx positions, so that a vector
    # runs on across rows and output position q's window starts at byte q * sx of its
    # row phase (the padded rows of one phase one after another)
    row_length = -(-(width + pads[1] + pads[3]) // sx) * sx
    out_row = row_length // sx
    blocks = row_blocks(oh, out_row, ow, tiles.lanes, tiles.channels, cpu)
    span = blocks.rows * out_row
    phases = min(sy, (kh - 1) * dy + 1)
    # the last byte a window load reads (the last vector's, at the last kernel row and
    # quad, rounded up to a power of two bytes), in whole rows: the bytes past the
    # padded image only feed the positions past the output, which are dropped
    span_bytes = window_bytes(tiles.lanes, sx, dx)
    read_bytes = window_read_bytes(span_bytes, tiles.lanes, sx, cpu.features, cpu.arch)
    last = ((oh // blocks.rows - 1) * span + blocks.extent - tiles.lanes) * sx \
        + (kh - 1) * dy // sy * row_length + GROUP * (quads - 1) * dx + read_bytes - 1
    rows = -(-(last + 1) // row_length)
    # made per parallel task (blocks_per_task), a task's copy is whole rows, allocated
    # with the bytes a window load reads past the last window
    blocked = {IN_BLOCKS: True, te.REGION_MULTIPLE: row_length,
               te.READ_SLACK: max(read_bytes - span_bytes, 0)}
    data = pack_padded(x, x_zero, pads, sy, phases, row_length, rows, dtype, blocked)
    weight = quad_weight(w, packed_weight, weight_dtype(cpu))
    weight_sum = quad_weight_sum(weight, kh)
    ry, rq = te.reduce_axis(kh, "ry"), te.reduce_axis(quads, "rq")
    rj = te.reduce_axis(GROUP, "rj")

    def body(b, c, y, column):
        position = (y * span + column) * sx + ry * dy // sy * row_length \
            + (GROUP * rq + rj) * dx
        return te.sum(te.cast("int32", data[b, c, ry * dy % sy, position])
                      * te.cast("int32", weight[c, ry, rq, rj]), axis=[ry, rq, rj])

    sums = te.compute((n, channels, oh // blocks.rows, blocks.extent), body,
                      name=f"{name}_depthwise", dtype="int32",
                      attrs={"int8_depthwise": tiles, "int8_rows": blocks,
                             "int8_quads": (sx, dx),
                             INT8_BLOCKS_PER_TASK: blocks_per_task(
                                 oh // blocks.rows, n * channels // tiles.channels, cpu)})
    offset = _zero(x_zero) + _flip(x.dtype, dtype)

    def result(b, c, y, column):
        at = block_of_rows(blocks, out_row, y, column)
        return sums[(b, c, *at)] - offset * weight_sum(c)

    return te.compute((n, channels, oh, ow), result, name=name, dtype="int32",
                      attrs={"int8_conv_result": True})


def quad_stages(sums: te.Tensor) -> dict[str, te.Tensor]:
    """The stages the sums of :func:`quad_depthwise_conv` read: ``padded`` (the data)
    and ``weight`` (the weight quads). (The weight sums are the result's:
    :func:`weight_sum_stages`.)"""

    data, weight = reads_of(sums.op.body)[:2]
    return {"padded": data, "weight": weight}


def schedule_quad_depthwise(schedule: te.Schedule, sums: te.Tensor,
                            cpu: CPUDescription) -> None:
    """The sums of :func:`quad_depthwise_conv`: a tile of channels by one vector of
    pixels accumulating in registers over the kernel rows and quads, one window dot
    product per (channel, kernel row, quad); the padded copy row by row (vectorized),
    serial: made task by task (:data:`IN_BLOCKS`) where :func:`attach_copies_in_blocks`
    places it."""
    tiles = sums.op.attrs["int8_depthwise"]
    stride, dilation = sums.op.attrs["int8_quads"]
    padded = quad_stages(sums)["padded"]
    schedule_phase_rows(schedule, padded, cpu, parallel=False)  # inside the result's loop
    tensorized_channel_tiles(schedule, sums, tiles.channels, tiles.lanes,
                             dot4_window_intrinsic(tiles.lanes, padded.dtype, stride,
                                                   dilation, quad_stages(sums)["weight"].dtype))


def weight_sum_stages(result: te.Tensor) -> list[te.Tensor]:
    """The per-channel weight sums (``int8_weight_sum``) that an ``int8_conv_result``
    stage reads: computed once per call at root, never inlined into every output."""

    return [t for t in reads_of(result.op.body)
            if isinstance(t.op, te.ComputeOp) and t.op.attrs.get("int8_weight_sum")]


def attach_copies_in_blocks(schedule: te.Schedule, result: te.Tensor, stage: te.Stage,
                            block: te.IterVar) -> None:
    """The padded copies made task by task (:data:`IN_BLOCKS`) that the sums of an
    ``int8_conv_result`` stage ``result`` read computed at ``block``, the parallel loop
    of ``stage`` (the result's, or its epilogue's) whose iterations compute the sums
    (:func:`blocks_per_task` blocks of rows each): each iteration copies the channels
    and rows it reads."""
    seen, frontier = set(), [result]
    while frontier:
        tensor = frontier.pop()
        for read in reads_of(tensor.op.body) if isinstance(tensor.op, te.ComputeOp) else ():
            if id(read) in seen:
                continue
            seen.add(id(read))
            if isinstance(read.op, te.ComputeOp) and read.op.attrs.get(IN_BLOCKS):
                schedule[read].compute_at(stage, block)
            elif not (isinstance(read.op, te.ComputeOp)
                      and read.op.attrs.get("int8_conv_result")):  # another's: not ours
                frontier.append(read)
