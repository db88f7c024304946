"""TE computes of the layout ops: ``LayoutTransform`` (NCHW <-> NCHW[x]c) and the blocked
convolution ``ConvNCHWc`` over NCHW[x]c data and packed weights.
"""

from __future__ import annotations

from .. import te
from ..errors import CompileError
from ..ops.layout import blocked_conv_geometry, layout_block
from .common import float_only, require_native
from .nn import pad
from .registry import register_compute


@register_compute("LayoutTransform")
def layout_transform(inputs, attrs, out_types):
    """Each output element read from its channel's place in the source layout."""
    (x,) = inputs
    out = out_types[0]
    require_native([x.dtype], "LayoutTransform")
    src, dst = layout_block(attrs["src_layout"]), layout_block(attrs["dst_layout"])

    def read(n, channel, y, xx):
        if not src:
            return x[n, channel, y, xx]
        return x[n, channel // src, y, xx, channel % src]

    if dst:
        def body(n, outer, y, xx, inner):
            return read(n, outer * dst + inner, y, xx)
    else:
        body = read
    # a CPU schedule recognises the channel read (``c // b``, ``c % b``, ``outer * b +
    # inner``) and runs it row by row: a flat vectorized loop would need vector division
    # to recover the channel of each lane
    return [te.compute(out.shape, body, name="layout_transform", dtype=out.dtype)]


@register_compute("ConvNCHWc")
def conv_nchwc(inputs, attrs, out_types):
    """Blocked convolution (dense or depthwise) over NCHW[x]c data (a dense one's also
    NCHW, read as NCHW1c) and packed weights, carrying its workload (``blocked_conv``,
    its tuning task's key). The padded input is materialized ahead (a guarded read in
    the tile's inner loop would
    cost a select per multiply-add); the output channel block is the innermost axis, so
    the schedule vectorizes over it: a dense convolution multiplies one broadcast input
    element by a weight vector, a depthwise one an input vector (contiguous whatever the
    stride) by a weight vector."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    float_only(x.dtype, "ConvNCHWc")
    try:
        geometry = blocked_conv_geometry(x.shape, w.shape, attrs)
    except ValueError as exc:
        raise CompileError(f"ConvNCHWc: {exc}") from None
    sy, sx = attrs["strides"]
    dy, dx = attrs["dilations"]
    pads = attrs["pads"]
    depthwise = attrs["group"] != 1
    data = pad(x, pads[:2], pads[2:], 0.0, "conv_pad", lead=2,
                attrs=None if depthwise else {"keep": True})
    ry = te.reduce_axis(geometry["kernel"][0], "ry")
    rx = te.reduce_axis(geometry["kernel"][1], "rx")
    if not depthwise:
        rco = te.reduce_axis(x.shape[1], "rco")
        rci = te.reduce_axis(geometry["in_block"], "rci")

        def body(n, ko, yy, xx, ki):
            # an NCHW input (4-D) is NCHW1c in memory: its channel block has no axis
            block = () if x.ndim == 4 else (rci,)
            return te.sum(data[(n, rco, yy * sy + ry * dy, xx * sx + rx * dx, *block)]
                          * w[ko, rco, ry, rx, rci, ki], axis=[rco, ry, rx, rci])
    else:
        def body(n, ko, yy, xx, ki):
            return te.sum(data[n, ko, yy * sy + ry * dy, xx * sx + rx * dx, ki]
                          * w[ko, 0, ry, rx, 0, ki], axis=[ry, rx])

    # the workload travels with the compute: a tuning log's config for it is looked up
    # when the kernel is scheduled (``heterocc.tuning.apply.blocked_conv_tiles``)
    workload = {"input_shape": tuple(x.shape), "weight_shape": tuple(w.shape),
                "strides": tuple(attrs["strides"]), "pads": tuple(pads),
                "dilations": tuple(attrs["dilations"]), "group": attrs["group"]}
    y = te.compute(geometry["out_shape"], body, name="conv_nchwc", dtype=x.dtype,
                   attrs={"blocked_conv": workload})
    if b is None:
        return [y]
    return [te.compute(y.shape, lambda n, ko, yy, xx, ki: y[n, ko, yy, xx, ki] + b[ko, ki],
                       name="conv_bias", dtype=x.dtype)]
