"""Blocked tensor layouts for the CPU: ``LayoutTransform`` and the blocked convolution.

A blocked layout ``NCHW{b}c`` stores a 4-D activation as ``(N, C / b, H, W, b)``: the
``b`` channels of one block are contiguous, so one vector register holds one pixel of
``b`` channels whatever the convolution's stride. ``ConvNCHWc`` convolves such a tensor
with weights packed at compile time as ``(O / ob, C / group / ib, KH, KW, ib, ob)`` and
writes ``NCHW{ob}c``. A dense one may also take a plain ``NCHW`` input (4-D), which is
``NCHW1c`` in memory: an input block of one channel, read in place. Only two groupings
are blocked: dense (``group == 1``) and depthwise (``group == C == O``, where the input
block equals the output block and the packed weight has one input channel:
``(C / b, 1, KH, KW, 1, b)``).
"""

from __future__ import annotations

import re

import numpy as np

from ..ir.types import TensorType
from .nn import conv_geometry, conv_nd
from .registry import REQUIRED, FusionKind, InferContext, register_op

_LAYOUT = re.compile(r"NCHW(?:(\d+)c)?")


def layout_block(layout: str) -> int:
    """Channels per block of ``layout``: 0 for plain ``NCHW``, ``b`` for ``NCHW{b}c``."""
    match = _LAYOUT.fullmatch(layout)
    if match is None or match.group(1) == "0":
        raise ValueError(f"unknown layout {layout!r}: expected NCHW or NCHW<block>c")
    return int(match.group(1) or 0)


def blocked_layout(block: int) -> str:
    """The layout name of ``block`` channels per block (0: plain NCHW)."""
    return f"NCHW{block}c" if block else "NCHW"


def blocked_shape(shape, block: int) -> tuple[int, ...]:
    """The shape of an NCHW tensor of ``shape`` in layout ``NCHW{block}c``."""
    n, c, h, w = shape
    return (n, c // block, h, w, block)


def to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """NCHW ``x`` in ``NCHW{block}c``."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked(x: np.ndarray) -> np.ndarray:
    """``NCHW{b}c`` ``x`` back in NCHW."""
    n, outer, h, w, block = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, outer * block, h, w))


def pack_conv_weight(w: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """OIHW conv weights packed as ``(O / ob, I / ib, KH, KW, ib, ob)``."""
    o, i, kh, kw = w.shape
    return np.ascontiguousarray(
        w.reshape(o // out_block, out_block, i // in_block, in_block, kh, kw)
        .transpose(0, 2, 4, 5, 3, 1))


def unpack_conv_weight(w: np.ndarray) -> np.ndarray:
    """Packed conv weights back in OIHW (inverse of :func:`pack_conv_weight`)."""
    oo, io, kh, kw, ib, ob = w.shape
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3).reshape(oo * ob, io * ib, kh, kw))


# --------------------------------------------------------------------------- LayoutTransform

def _infer_layout_transform(ctx: InferContext):
    x = ctx.type(0)
    try:
        src, dst = layout_block(ctx.attrs["src_layout"]), layout_block(ctx.attrs["dst_layout"])
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    if x.ndim != (5 if src else 4) or (src and x.shape[4] != src):
        raise ctx.error(f"input {x} is not in layout {ctx.attrs['src_layout']}")
    held = x.shape[1] * (src or 1)
    channels = ctx.attrs.get("channels", 0) or held
    if channels > held:
        raise ctx.error(f"{channels} channels asked of an input holding {held}")
    if dst and channels % dst:
        raise ctx.error(f"{channels} channels do not split into blocks of {dst}")
    nchw = (x.shape[0], channels, x.shape[2], x.shape[3])
    return [TensorType(blocked_shape(nchw, dst) if dst else nchw, x.dtype)]


@register_op("LayoutTransform", infer=_infer_layout_transform, fusion=FusionKind.INJECTIVE,
             attrs={"src_layout": REQUIRED, "dst_layout": REQUIRED, "channels": 0})
def layout_transform(x, *, src_layout, dst_layout, channels=0):
    """A 4-D activation moved between ``NCHW`` and blocked ``NCHW{b}c`` layouts.
    ``channels`` (0: all): the first channels only, the rest being padding that a
    blocked tensor carries to fill its last block (``alter_layout``)."""
    src, dst = layout_block(src_layout), layout_block(dst_layout)
    nchw = from_blocked(x) if src else x
    if channels:
        nchw = nchw[:, :channels]
    return to_blocked(nchw, dst) if dst else np.ascontiguousarray(nchw)


# --------------------------------------------------------------------------- ConvNCHWc

BLOCKED_CONV_ATTRS = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1],
                      "group": 1}


def blocked_conv_input_shape(x_shape) -> tuple[int, ...]:
    """A ``ConvNCHWc`` input's shape as ``NCHW{ib}c``: a plain ``NCHW`` one (4-D, a
    dense convolution's) is ``NCHW1c`` in memory."""
    return blocked_shape(x_shape, 1) if len(x_shape) == 4 else tuple(x_shape)


def blocked_conv_geometry(x_shape, w_shape, attrs) -> dict:
    """What a ``ConvNCHWc`` computes, from its blocked input (a dense one's may be plain
    NCHW: one channel per block) and packed weight shapes: NCHW-equivalent shapes,
    blocks, output spatial size; ValueError when they disagree."""
    n, in_outer, h, w, in_block = blocked_conv_input_shape(x_shape)
    out_outer, w_in_outer, kh, kw, w_in_block, out_block = w_shape
    channels, filters = in_outer * in_block, out_outer * out_block
    group = attrs["group"]
    if len(x_shape) == 4 and group != 1:
        raise ValueError(f"a depthwise convolution needs a blocked input, not NCHW "
                         f"{list(x_shape)}")
    if group == 1:
        if (w_in_outer, w_in_block) != (in_outer, in_block):
            raise ValueError(f"weight {list(w_shape)} does not match input {list(x_shape)}")
    elif group == channels == filters:
        if (w_in_outer, w_in_block) != (1, 1) or in_block != out_block:
            raise ValueError(f"depthwise weight {list(w_shape)} must be (C/b, 1, KH, KW, 1, b) "
                             f"with b the input block {in_block}")
    else:
        raise ValueError(f"group {group} is neither 1 nor depthwise ({channels} channels, "
                         f"{filters} filters)")
    nchw = dict(strides=attrs["strides"], pads=attrs["pads"], dilations=attrs["dilations"])
    *_, (oh, ow) = conv_geometry((n, channels, h, w), (filters, channels // group, kh, kw), nchw)
    return {"out_shape": (n, out_outer, oh, ow, out_block), "in_block": in_block,
            "out_block": out_block, "kernel": (kh, kw), "channels": channels}


def _infer_blocked_conv(ctx: InferContext):
    x, w = ctx.type(0), ctx.type(1)
    if x.ndim not in (4, 5) or w.ndim != 6:
        raise ctx.error(f"input {x} must be NCHW[x]c (5-D) or NCHW (4-D) and weight {w} "
                        f"packed (6-D)")
    try:
        geometry = blocked_conv_geometry(x.shape, w.shape, ctx.attrs)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    out_shape = geometry["out_shape"]
    if ctx.has(2) and ctx.type(2).shape != (out_shape[1], out_shape[4]):
        raise ctx.error(f"bias shape {ctx.type(2).shape} must be {(out_shape[1], out_shape[4])}")
    return [TensorType(out_shape, x.dtype)]


@register_op("ConvNCHWc", infer=_infer_blocked_conv, fusion=FusionKind.OUT_FUSABLE,
             attrs=BLOCKED_CONV_ATTRS)
def conv_nchwc(x, w, b=None, *, strides, pads, dilations, group):
    """2-D convolution of a blocked ``NCHW{ib}c`` input with packed weights
    ``(O/ob, C/group/ib, KH, KW, ib, ob)`` and an optional bias ``(O/ob, ob)``,
    giving ``NCHW{ob}c``; dense (group 1) or depthwise (group == C). A dense one also
    takes an ``NCHW`` input (4-D, read as ``NCHW1c``, with ``ib`` = 1)."""
    bias = None if b is None else b.reshape(-1)
    y = conv_nd(x if x.ndim == 4 else from_blocked(x), unpack_conv_weight(w), bias,
                strides=strides, pads=pads, dilations=dilations, group=group)
    return to_blocked(y.astype(x.dtype, copy=False), w.shape[5])
