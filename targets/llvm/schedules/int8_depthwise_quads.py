"""Integer depthwise convolutions on the CPU's 8-bit dot product: the taps of a kernel
row in groups of four bytes.

A depthwise convolution has no four input channels to add per int32 lane, but a kernel
row has three (or more) taps: output pixel ``x`` reads padded columns ``x * sx + rx *
dx``. So the data is copied as quads, ``quad[x] = (column x * sx, + dx, + 2 dx, + 3 dx)``
of one padded row (a second quad per pixel for taps 4-7, and so on), and one
dot-product instruction (:data:`.int8_dot.DOT4_CALL`) adds a whole kernel row of a
vector of output pixels: a 3x3 kernel takes three ``vpdpbusd`` (or ``sdot``) per vector
of output pixels, where the 16-bit products take nine multiplies, widenings and adds
and the column pairs six pair products. The fourth tap's weight is 0.

The data is stored as the dense convolution's is (:func:`.int8_conv.data_dtype`:
uint8, the sign bit flipped from int8, for ``vpdpbusd``; int8 for ``sdot``), padded with
the zero point, so the sums are corrected by ``(zero point + flip) * sum(w)`` per
channel, the identity of :func:`heterocc.ops.qnn.zero_point_bias`. Two copies make the
quads: the padded image (a vector copy, masked at the borders) and the quads from it
(no guard: a plain interleaving loop that LLVM vectorizes into shuffles).

With row stride 1 the quads of the padded rows are numbered row after row, so that a
vector of output pixels runs on across rows (as the dense convolution's,
:func:`.int8_conv.row_blocks`); with a larger row stride, a row per block.
"""

from __future__ import annotations

from heterocc.sdk import te

from ..cpu import CPUDescription
from ..int8_dot import dot4_instruction
from .common import vector_lanes
from .int8_conv import (
    GROUP,
    MIN_SPLIT_ROW,
    _flip,
    _zero,
    block_of_rows,
    data_dtype,
    dot4_intrinsic,
    register_tiles,
    row_blocks,
)


def quads_apply(strides, channels: int, padded_size, kernel_width: int,
                cpu: CPUDescription) -> bool:
    """Whether a depthwise convolution of ``strides`` over ``channels`` padded images of
    ``padded_size`` (rows, columns) takes a kernel row per dot-product instruction on
    ``cpu``:

    * where it has the 8-bit dot product itself (``vpdpbusd``, ``sdot``); its exact
      stand-ins (``vpmaddubsw`` on split data, widened ``pmaddwd``) cost more per data
      vector than the 16-bit products they would replace, since a depthwise data vector
      multiplies one channel's weights only;
    * stride 1 (a strided convolution's quads would need a copy per phase);
    * padded rows of at least :data:`.int8_conv.MIN_SPLIT_ROW` (the copies loop per row:
      7x7 images' 9-pixel rows took longer to copy than the products saved);
    * the two copies (a byte per padded pixel, four per quad) within half the L2 cache,
      so that the sums read them from it: a 112x112 or 56x56 layer's 2 MB of quads,
      written and read back from memory, cost more than they saved (MobileNetV2, load 9:
      0.25 -> 0.35 ms at 32x112x112, 0.29 -> 0.46 at 144x56x56; 0.11 -> 0.09 at
      192x28x28, 0.097 -> 0.085 at 576x14x14)."""
    lanes = cpu.vector_lanes("int32")
    unsigned = data_dtype(cpu) == "uint8"
    instruction = dot4_instruction(cpu.features, cpu.arch, lanes, unsigned, False)
    rows, columns = padded_size
    copies = channels * rows * columns * (GROUP * -(-kernel_width // GROUP) + 1)
    return (tuple(int(s) for s in strides) == (1, 1) and instruction in ("vpdpbusd", "sdot")
            and columns >= MIN_SPLIT_ROW and copies <= cpu.l2 // 2)


def pack_padded(x: te.Tensor, x_zero: te.Tensor | None, pads, rows: int,
                dtype: str) -> te.Tensor:
    """``x`` (8-bit NCHW) stored as ``dtype`` (the sign bit flipped where the byte types
    differ), padded with the zero point, its ``rows`` padded rows (past the padded image
    too) one after another: ``[n, C, rows * padded width]``. The flat axis carries
    ``int8_row`` (the padded width), so that its schedule loops over rows and columns
    (no division); the reads are guarded, not clamped, so a row is one vector copy
    masked at the borders."""
    n, channels, height, width = x.shape
    top, left = pads[0], pads[1]
    row_length = width + pads[1] + pads[3]
    flip = _flip(x.dtype, dtype)
    zero = _zero(x_zero)

    def element(b, c, position):
        y, col = position // row_length - top, position % row_length - left
        inside = te.logical_and(te.logical_and(y >= 0, y < height),
                                te.logical_and(col >= 0, col < width))
        return te.cast(dtype, te.if_then_else(inside, te.cast("int32", x[b, c, y, col]),
                                              zero) + flip)

    return te.compute((n, channels, rows * row_length), element, name="int8_padded",
                      dtype=dtype, attrs={"int8_row": row_length})


def pack_quads(padded: te.Tensor, quads: int, positions: int, dilation: int) -> te.Tensor:
    """``[n, C, quads, positions, 4]``: at flat position ``p`` and quad ``q``, the four
    padded pixels ``p + (4 q + j) * dilation`` (``j`` 0..3) of :func:`pack_padded`'s
    rows. A quad of a pixel near a row's end runs into the next row, but only where its
    weight is 0 or the pixel is a padding column's, computed and dropped (the kernel's
    taps of an output pixel lie in its row). A plain interleaving copy, no guard."""
    n, channels, _ = padded.shape

    def element(b, c, q, position, j):
        return padded[b, c, position + (GROUP * q + j) * dilation]

    return te.compute((n, channels, quads, positions, GROUP), element, name="int8_quads",
                      dtype=padded.dtype)


def _tap_weight(w: te.Tensor, packed_weight: te.Tensor | None, c, i, j):
    """Weight ``w[c, 0, i, j]`` as int32, from ``w`` or its int16 vectors
    (:func:`.int8_depthwise.pack_weight_lanes_array`)."""
    if packed_weight is None:
        return te.cast("int32", w[c, 0, i, j])
    return te.cast("int32", packed_weight[c, i, j, 0])


def quad_weight(w: te.Tensor, packed_weight: te.Tensor | None) -> te.Tensor:
    """``[C, KH, quads, 4]`` int8: the weights of taps ``4 q + j`` of each kernel row
    (0 past its width)."""
    channels, _, kh, kw = w.shape

    def element(c, i, q, j):
        tap = GROUP * q + j
        value = _tap_weight(w, packed_weight, c, i, te.minimum(tap, kw - 1))
        return te.cast("int8", te.if_then_else(tap < kw, value, te.const(0, "int32")))

    return te.compute((channels, kh, -(-kw // GROUP), GROUP), element,
                      name="int8_weight_quads", dtype="int8")


def weight_sums(w: te.Tensor, packed_weight: te.Tensor | None) -> te.Tensor:
    """``[C]`` int32: each channel's sum of weights (the zero-point correction's
    factor)."""
    channels, _, kh, kw = w.shape
    ry, rx = te.reduce_axis(kh, "wy"), te.reduce_axis(kw, "wx")
    return te.compute((channels,), lambda c: te.sum(
        _tap_weight(w, packed_weight, c, ry, rx), axis=[ry, rx]),
        name="int8_depthwise_weight_sum", dtype="int32", attrs={"int8_weight_sum": True})


def quad_depthwise_conv(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None, geometry,
                        tiles, cpu: CPUDescription, name: str,
                        packed_weight: te.Tensor | None) -> te.Tensor:
    """int32 ``sum((x - x_zero) * w)`` of a depthwise convolution (checked by
    :func:`.int8_depthwise.int8_depthwise_conv`, ``geometry``: its strides, dilations,
    pads and output size) with a kernel row's taps per dot product (the module's
    docstring): the sums (an anchor carrying ``int8_depthwise`` and ``int8_quads``),
    corrected by the zero point and cropped (``int8_conv_result``)."""
    n, channels, height, width = x.shape
    _, _, kh, kw = w.shape
    (dy, dx), pads, (oh, ow) = geometry[1:]
    dtype = data_dtype(cpu)
    quads = -(-kw // GROUP)
    # output pixels numbered over the padded rows, a vector running on across rows
    row_length = width + pads[1] + pads[3]
    blocks = row_blocks(oh, row_length, ow, tiles.lanes, tiles.channels, cpu)
    span = blocks.rows * row_length
    positions = (oh // blocks.rows - 1) * span + blocks.extent + (kh - 1) * dy * row_length
    # the last quad's last tap, in whole rows
    rows = -(-(positions + (GROUP * quads - 1) * dx) // row_length)
    padded = pack_padded(x, x_zero, pads, rows, dtype)
    data = pack_quads(padded, quads, positions, dx)
    weight = quad_weight(w, packed_weight)
    summed = weight_sums(w, packed_weight)
    ry, rq = te.reduce_axis(kh, "ry"), te.reduce_axis(quads, "rq")
    rj = te.reduce_axis(GROUP, "rj")

    def body(b, c, y, column):
        position = y * span + column + ry * dy * row_length
        return te.sum(te.cast("int32", data[b, c, rq, position, rj])
                      * te.cast("int32", weight[c, ry, rq, rj]), axis=[ry, rq, rj])

    sums = te.compute((n, channels, oh // blocks.rows, blocks.extent), body,
                      name=f"{name}_depthwise", dtype="int32",
                      attrs={"int8_depthwise": tiles, "int8_rows": blocks,
                             "int8_quads": True})
    offset = _zero(x_zero) + _flip(x.dtype, dtype)

    def result(b, c, y, column):
        at = block_of_rows(blocks, row_length, y, column)
        return sums[(b, c, *at)] - offset * summed[c]

    return te.compute((n, channels, oh, ow), result, name=name, dtype="int32",
                      attrs={"int8_conv_result": True})


def quad_stages(sums: te.Tensor) -> dict[str, te.Tensor]:
    """The stages the sums of :func:`quad_depthwise_conv` read, directly or not:
    ``quads``, ``padded`` and ``weight`` (the weight quads). (The weight sums are the
    result's: :func:`weight_sum_stages`.)"""
    from heterocc.te.schedule_reads import reads_of

    data, weight = reads_of(sums.op.body)[:2]
    return {"quads": data, "padded": reads_of(data.op.body)[0], "weight": weight}


def schedule_quad_depthwise(schedule: te.Schedule, sums: te.Tensor,
                            cpu: CPUDescription) -> None:
    """The sums of :func:`quad_depthwise_conv`: a tile of channels by one vector of
    pixels accumulating in registers over the kernel rows and quads, one dot product
    per (channel, kernel row, quad); the padded copy row by row (vectorized), the quads
    copy per row of quads (LLVM vectorizes the interleaving), both at root, channels
    in parallel."""
    tiles = sums.op.attrs["int8_depthwise"]
    stages = quad_stages(sums)
    row = stages["padded"].op.attrs["int8_row"]
    padded = schedule[stages["padded"]]
    b, c, position = padded.op.axis
    _, columns = padded.split(position, row)
    _, inner = padded.split(columns, min(vector_lanes(stages["padded"].dtype, cpu), row))
    padded.vectorize(inner)
    padded.parallel(padded.fuse(b, c))
    quads = schedule[stages["quads"]]
    b, c, *_ = quads.op.axis
    quads.parallel(quads.fuse(b, c))
    local = register_tiles(schedule, sums, tiles.channels, tiles.lanes, parallel=False)
    lb, lc, ly, lx = schedule[local].op.axis
    ry, rq, rj = schedule[local].op.reduce_axis
    schedule[local].reorder(lb, ly, ry, rq, lc, lx, rj)
    schedule[local].unroll(lc)
    schedule[local].tensorize(lx, dot4_intrinsic(tiles.lanes, stages["quads"].dtype))


def weight_sum_stages(result: te.Tensor) -> list[te.Tensor]:
    """The per-channel weight sums (``int8_weight_sum``) that an ``int8_conv_result``
    stage reads: computed once per call at root, never inlined into every output."""
    from heterocc.te.schedule_reads import reads_of

    return [t for t in reads_of(result.op.body)
            if isinstance(t.op, te.ComputeOp) and t.op.attrs.get("int8_weight_sum")]
