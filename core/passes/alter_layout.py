"""Blocked layout for CPU convolutions (``alter_layout``).

Float32 2-D convolutions whose channel counts allow it become ``ConvNCHWc`` over
``NCHW{b}c`` data, with their weights packed at compile time. The blocked layout is
carried through layout-agnostic ops (elementwise activations, binary arithmetic of two
blocked tensors (one of them possibly one value per channel, broadcast over the pixels)
or of a blocked tensor and a per-channel or scalar constant, 2-D max and
average pooling, a channel concatenation of tensors whose channels fill whole blocks), so
that a chain of convolutions reads and writes blocked tensors
throughout. A value is moved to another layout only where a reader needs it there, once
per layout: a transform to NCHW and straight back never appears, and every op that is
not layout-agnostic (global pooling, reshape, a graph output) reads NCHW.

Given the channels of the target's vector register (:func:`alter_layout_for`), a
convolution whose filters fill no whole number of vectors (24 filters with 16-lane
vectors) writes its output padded to the next multiple of a full vector block, its
padding channels computed from zero weights and zero bias. Its readers keep the padding
harmless: a convolution gives those input channels zero weights (a depthwise one zero
filters, so its output carries the padding on), elementwise ops compute on them, and a
transform out of the blocked layout cuts them off (``LayoutTransform``'s ``channels``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from ..ir.graph import Graph, NameScope, Node, Value, constant
from ..ir.types import TensorType
from ..ops.layout import blocked_layout, blocked_shape, pack_conv_weight
from ..ops.nn import conv_geometry, resolve_conv_padding
from .manager import register_pass

#: output channels per block, preferred first: one AVX-512 vector of float32, else one
#: AVX vector (so that 24- or 40-channel layers stay blocked too)
OUT_BLOCKS = (16, 8)
#: input channel blocks tried, widest first, for a convolution whose input is not
#: blocked yet (the last one always divides)
IN_BLOCKS = (16, 8, 4, 3, 2, 1)

#: ops computing each element from the same element of their one tensor input (other
#: inputs, when present, must be one-element constants: Clip's bounds)
UNARY_OPS = frozenset({"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu",
                       "Tanh", "Elu", "Softplus", "Neg", "Abs", "Exp", "Swish"})
#: binary elementwise ops carried in the blocked layout
BINARY_OPS = frozenset({"Add", "Sub", "Mul", "Div"})
#: 2-D pooling, carried as 3-D pooling of the blocked tensor with a window of one over
#: the channel block
POOL_OPS = frozenset({"MaxPool", "AveragePool"})
#: global pools carried in the blocked layout as the pool of their whole image
GLOBAL_POOL_OPS = {"GlobalAveragePool": "AveragePool", "GlobalMaxPool": "MaxPool"}
#: reductions that, over a 4-D tensor's image (axes 2 and 3), are its global pool
IMAGE_REDUCTION_OPS = {"ReduceMean": "GlobalAveragePool", "ReduceMax": "GlobalMaxPool"}
#: unary ops that could make a padding channel infinite (a few nested Exp of 0
#: overflow), which a reader's zero weight would turn into NaN: they read no padding
UNBOUNDED_UNARY_OPS = frozenset({"Exp"})


@dataclass(frozen=True)
class ConvBlocking:
    """How one Conv is blocked: channels per input and per output block."""

    in_block: int
    out_block: int
    depthwise: bool


def conv_blocking(node: Node, available_block: int = 0,
                  available_channels: int = 0, vector_channels: int = 0
                  ) -> ConvBlocking | None:
    """The blocking of Conv ``node``, or None where it stays NCHW: it must be a float32
    2-D convolution with constant weights (and bias), one of ``OUT_BLOCKS`` dividing its output
    channels, and dense (group 1) or depthwise (group == channels == filters). A dense
    convolution takes its input in ``available_block`` when that divides its channels
    (no transform), else, from NCHW, as it is (a block of one channel) when it has
    fewer channels than the narrowest output block, else in the widest block of
    ``IN_BLOCKS`` that divides them.
    ``available_channels``: the channels the input is available with in that block when
    it carries padding (more than the convolution's); a depthwise convolution then
    takes it as it is (its padding channels get zero filters).
    ``vector_channels``: the target's vector block; a dense convolution whose filters
    no block divides (ShuffleNet's 58 and 116) is blocked in it, its output padded to a
    whole number of them (:func:`padded_channels`)."""
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    if (x.type.ndim != 4 or x.type.dtype != "float32" or not w.is_const
            or (bias is not None and not bias.is_const)):
        return None
    channels, filters, group = x.type.shape[1], w.type.shape[0], node.attrs.get("group", 1)
    held = available_channels or channels
    out_block = next((b for b in OUT_BLOCKS if filters % b == 0), 0)
    if group == 1 and not out_block and padded_channels(filters, vector_channels) != filters:
        out_block = vector_channels
    if group == channels == filters and held != channels and available_block:
        return ConvBlocking(available_block, available_block, True)
    if not out_block:
        return None
    if group == 1:
        if available_block and held % available_block == 0:
            return ConvBlocking(available_block, out_block, False)
        if not available_block and channels < min(OUT_BLOCKS):
            # an NCHW input of fewer channels than a vector block (an image's RGB) is
            # read in place as NCHW1c: transforming it to its channels' block would be a
            # pass of short gathered rows (3 channels: 0.05 ms for MobileNetV2's 224x224
            # input), and the stem convolution reading whole rows of one channel ran
            # as fast or faster than reading pixels of 3
            return ConvBlocking(1, out_block, False)
        in_block = next(b for b in IN_BLOCKS if channels % b == 0)
        if in_block < min(OUT_BLOCKS) and not available_block:
            # NCHW read in place (NCHW1c) rather than transformed to blocks of 2 or 4
            # channels (ShuffleNet's 58 and 116 after a channel split): the transform is
            # a pass of short gathered rows, and the convolution reads either as fast
            in_block = 1
        return ConvBlocking(in_block, out_block, False)
    if group == channels == filters:
        return ConvBlocking(out_block, out_block, True)
    return None


def padded_channels(channels: int, vector_channels: int) -> int:
    """Channels of a convolution's output of ``channels`` filters on a target with
    ``vector_channels``-lane vectors (one of ``OUT_BLOCKS``; 0: no padding): where they
    fill more than one vector but no whole number of them (24 of 16), the next multiple
    of the vector, so that every block is a full vector (the padding costs at most half
    again the work, where half-vector blocks would run at half the vector width);
    otherwise ``channels``."""
    if vector_channels not in OUT_BLOCKS or channels <= vector_channels \
            or channels % vector_channels == 0:
        return channels
    # (58 of 16, which no block divides, pads as well: blocked, its convolutions run
    # about twice as fast as in NCHW, measured on ShuffleNetV2)
    return -(-channels // vector_channels) * vector_channels


def _pad_axis(data: np.ndarray, axis: int, size: int, fill: float = 0.0) -> np.ndarray:
    """``data`` with ``fill`` appended along ``axis`` up to ``size``."""
    widths = [(0, 0)] * data.ndim
    widths[axis] = (0, size - data.shape[axis])
    return np.pad(data, widths, constant_values=fill)


def _per_channel_blocked(value: Value, channels: int, block: int, held: int = 0,
                         fill: float = 0.0) -> Value | None:
    """A constant operand of a binary op in the blocked layout: one-element ones as they
    are, per-channel ``(C, 1, 1)`` / ``(1, C, 1, 1)`` ones as ``(1, C/b, 1, 1, b)``
    (padded with ``fill`` to ``held`` channels where the other operand carries padding);
    None for any other constant."""
    data = value.data
    if data.size == 1:
        return value
    if data.shape in ((channels, 1, 1), (1, channels, 1, 1)):
        held = held or channels
        data = _pad_axis(data.reshape(channels), 0, held, fill)
        blocked = data.reshape(1, held // block, block, 1, 1).transpose(0, 1, 3, 4, 2)
        return constant(np.ascontiguousarray(blocked), f"{value.name}_{blocked_layout(block)}")
    return None


@dataclass
class _LayoutRewriter:
    """Emits the rewritten nodes in order, realizing each value in the layouts its
    readers need (each at most once)."""

    scope: NameScope
    #: channels of the target's vector register (0: no padding of convolution outputs)
    vector_channels: int = 0
    nodes: list[Node] = field(default_factory=list)
    #: blocked realizations of each original value, by block
    blocked: dict[Value, dict[int, Value]] = field(default_factory=dict)
    #: original values produced only blocked so far (their NCHW form not emitted yet)
    only_blocked: set[Value] = field(default_factory=set)
    #: blocked realizations that carry padding channels: the channels they hold
    held: dict[Value, int] = field(default_factory=dict)

    def block_of(self, value: Value | None) -> int:
        """A block ``value`` is already available in (0: NCHW only)."""
        if value is None or value.is_const:
            return 0
        return next(iter(self.blocked.get(value, {})), 0)

    def held_of(self, value: Value | None) -> int:
        """Channels ``value``'s realization in :meth:`block_of` holds, padding included
        (0 when it carries none, or is not blocked)."""
        block = self.block_of(value)
        return self.held.get(self.blocked[value][block], 0) if block else 0

    def nchw(self, value: Value | None) -> Value | None:
        """``value`` in NCHW: the original value, produced by a transform if need be."""
        if value is None or value not in self.only_blocked:
            return value
        block, source = next(iter(self.blocked[value].items()))
        self._transform(source, block, 0, value)
        self.only_blocked.discard(value)
        return value

    def in_block(self, value: Value, block: int) -> Value:
        """``value`` in ``NCHW{block}c``, transformed from a layout it has if need be
        (without the padding the source may carry)."""
        have = self.blocked.setdefault(value, {})
        if block not in have:
            source_block, source = (next(iter(have.items())) if value in self.only_blocked
                                    else (0, value))
            have[block] = self._value_like(value, block)
            self._transform(source, source_block, block, have[block])
        return have[block]

    def produce_blocked(self, original: Value, block: int, held: int = 0) -> Value:
        """A new value standing for ``original`` in ``NCHW{block}c``, holding ``held``
        channels (padding after the original's; 0: just the original's)."""
        self.blocked[original] = {block: self._value_like(original, block, held)}
        self.only_blocked.add(original)
        if held and held != original.type.shape[1]:
            self.held[self.blocked[original][block]] = held
        return self.blocked[original][block]

    def _value_like(self, original: Value, block: int, held: int = 0) -> Value:
        n, channels, h, w = original.type.shape
        return Value(self.scope.fresh(f"{original.name}_{blocked_layout(block)}"),
                     TensorType(blocked_shape((n, held or channels, h, w), block),
                                original.type.dtype))

    def _transform(self, source: Value, src_block: int, dst_block: int, out: Value) -> None:
        attrs = {"src_layout": blocked_layout(src_block), "dst_layout": blocked_layout(dst_block)}
        if source in self.held:  # cut the padding off
            attrs["channels"] = out.type.shape[1] * (dst_block or 1)
        self.nodes.append(Node("LayoutTransform", [source], [out], attrs,
                               self.scope.fresh(f"{out.name}_transform")))

    # --- one rewrite per kind of node ------------------------------------------------
    def conv(self, node: Node) -> bool:
        x, weight = node.inputs[0], node.inputs[1]
        held_in = self.held_of(x)
        blocking = conv_blocking(node, self.block_of(x), held_in, self.vector_channels)
        if blocking is None:
            return False
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        _, strides, dilations, pads, _ = conv_geometry(x.type.shape, weight.type.shape,
                                                       node.attrs)
        group = node.attrs.get("group", 1)
        weights, biases = weight.data, None if bias is None else bias.data
        out_block = blocking.out_block
        if blocking.depthwise:
            # the input's padding channels (if any) pass through, filtered by zeros
            held_out = held_in if blocking.in_block == blocking.out_block and held_in else 0
            group = held_out or group
        else:
            held_out = padded_channels(weights.shape[0], self.vector_channels)
            if held_out != weights.shape[0]:
                out_block = self.vector_channels
            if held_in and blocking.in_block == self.block_of(x):
                weights = _pad_axis(weights, 1, held_in)
        if held_out and held_out != weights.shape[0]:
            weights = _pad_axis(weights, 0, held_out)
            biases = None if biases is None else _pad_axis(biases, 0, held_out)
        weight_block = 1 if blocking.depthwise else blocking.in_block
        packed = constant(pack_conv_weight(weights, weight_block, out_block),
                          self.scope.fresh(f"{weight.name}_packed"))
        # NCHW is NCHW1c in memory: a dense convolution reads it in place
        data = (self.nchw(x) if blocking.in_block == 1 and not blocking.depthwise
                else self.in_block(x, blocking.in_block))
        inputs = [data, packed]
        if biases is not None:
            inputs.append(constant(biases.reshape(-1, out_block),
                                   self.scope.fresh(f"{bias.name}_blocked")))
        out = self.produce_blocked(node.outputs[0], out_block, held_out)
        attrs = {"strides": list(strides), "pads": list(pads), "dilations": list(dilations),
                 "group": group}
        self.nodes.append(Node("ConvNCHWc", inputs, [out], attrs, node.name))
        return True

    def unary(self, node: Node) -> bool:
        x, *rest = node.inputs
        block = self.block_of(x)
        if not block or len(node.outputs) != 1 or any(
                v is not None and not (v.is_const and v.data.size == 1) for v in rest):
            return False
        if self.held_of(x) and node.op in UNBOUNDED_UNARY_OPS:
            return False
        out = self.produce_blocked(node.outputs[0], block, self.held_of(x))
        self.nodes.append(replace(node, inputs=[self.in_block(x, block), *rest], outputs=[out]))
        return True

    def binary(self, node: Node) -> bool:
        """Binary arithmetic of blocked tensors of the output's shape, or of one and a
        tensor of one value per channel (``(N, C, 1, 1)``: a squeeze-excite's scale),
        broadcast over the pixels in the blocked layout as it is in NCHW."""
        shape = node.outputs[0].type.shape
        tensors = [v for v in node.inputs if not v.is_const]
        full = [v for v in tensors if v.type.shape == shape]
        block = next((b for b in map(self.block_of, full) if b), 0)
        if (not block or len(shape) != 4 or node.outputs[0].type.dtype != "float32"
                or any(v.type.shape not in (shape, (*shape[:2], 1, 1)) for v in tensors)):
            return False
        held = {self.held_of(v) for v in tensors}
        if len(held) > 1 or (held != {0} and {self.block_of(v) for v in tensors} != {block}):
            return False  # padded and unpadded operands meet in NCHW
        held = held.pop()
        divisor = node.inputs[1] if node.op == "Div" else None
        if held and divisor is not None and not divisor.is_const:
            return False  # 0 / 0 in the padding would be NaN
        # a constant divisor's padding is 1, so that the padding stays finite
        constants = {v: _per_channel_blocked(v, shape[1], block, held, 1.0 if v is divisor
                                             else 0.0)
                     for v in node.inputs if v.is_const}
        if any(c is None for c in constants.values()):
            return False
        inputs = [constants[v] if v.is_const else self.in_block(v, block)
                  for v in node.inputs]
        out = self.produce_blocked(node.outputs[0], block, held)
        self.nodes.append(replace(node, inputs=inputs, outputs=[out]))
        return True

    def pool(self, node: Node) -> bool:
        x = node.inputs[0]
        block = self.block_of(x)
        attrs = node.attrs
        if not block or len(node.outputs) != 1:
            return False
        kernel = list(attrs["kernel_shape"])
        strides = list(attrs.get("strides") or [1, 1])
        dilations = list(attrs.get("dilations") or [1, 1])
        pads = resolve_conv_padding(x.type.shape[2:], kernel, strides, dilations,
                                    attrs.get("pads"), attrs.get("auto_pad", "NOTSET"))
        window = {"auto_pad": "NOTSET", "kernel_shape": [*kernel, 1],
                  "strides": [*strides, 1], "dilations": [*dilations, 1],
                  "pads": [pads[0], pads[1], 0, pads[2], pads[3], 0]}
        out = self.produce_blocked(node.outputs[0], block, self.held_of(x))
        self.nodes.append(replace(node, inputs=[self.in_block(x, block)], outputs=[out],
                                  attrs={**attrs, **window}))
        return True

    def global_pool(self, node: Node) -> bool:
        """A global pool of a blocked tensor stays blocked, as a pool whose window is the
        whole image: each channel block reduced as vectors, rather than the tensor
        transformed back to NCHW to be reduced one channel at a time."""
        x = node.inputs[0]
        block = self.block_of(x)
        if not block or len(node.outputs) != 1 or x.type.ndim != 4:
            return False
        height, width = x.type.shape[2:]
        window = {"auto_pad": "NOTSET", "kernel_shape": [height, width, 1],
                  "strides": [1, 1, 1], "dilations": [1, 1, 1], "pads": [0] * 6}
        window.update({"count_include_pad": 0} if node.op == "GlobalAveragePool"
                      else {"storage_order": 0})
        out = self.produce_blocked(node.outputs[0], block, self.held_of(x))
        self.nodes.append(Node(GLOBAL_POOL_OPS[node.op], [self.in_block(x, block)], [out],
                               window, node.name))
        return True

    def image_reduction(self, node: Node) -> bool:
        """A ReduceMean or ReduceMax over the image (axes 2 and 3) of a blocked 4-D
        tensor is its global pool (MNASNet's and ShuffleNetV2's heads, ``x.mean([2,
        3])``), kept blocked as :meth:`global_pool` keeps one, rather than the whole
        tensor transformed to NCHW to be reduced one channel at a time; without
        ``keepdims``, the pooled ``[N, C, 1, 1]`` (C numbers back in NCHW) reshaped to
        the reduction's ``[N, C]``."""
        x = node.inputs[0]
        if not self.block_of(x) or x.type.ndim != 4 or len(node.outputs) != 1:
            return False
        axes = node.attrs.get("axes")
        if len(node.inputs) > 1 and node.inputs[1] is not None:
            if not node.inputs[1].is_const:
                return False
            axes = node.inputs[1].data.reshape(-1).tolist()
        if sorted(int(a) % 4 for a in axes or ()) != [2, 3]:
            return False
        out = node.outputs[0]
        kept = bool(node.attrs.get("keepdims", 1))
        pooled = out if kept else Value(self.scope.fresh(f"{out.name}_pooled"),
                                        TensorType((*x.type.shape[:2], 1, 1), out.type.dtype))
        self.global_pool(Node(IMAGE_REDUCTION_OPS[node.op], [x], [pooled], {}, node.name))
        if not kept:
            shape = constant(np.array(out.type.shape, np.int64),
                             self.scope.fresh(f"{out.name}_shape"))
            self.nodes.append(Node("Reshape", [self.nchw(pooled), shape], [out],
                                   {"allowzero": 0}, self.scope.fresh(f"{node.name}_flat")))
        return True

    def concat(self, node: Node) -> bool:
        """A concatenation over the channels of tensors whose channel counts are whole
        blocks stays blocked, as the concatenation of their channel blocks (DenseNet's
        growing feature maps): rather than each producer's output transformed to NCHW,
        concatenated, and the result transformed back for the next convolution. The
        block is the widest one an input already has that divides every input's
        channels; an input carrying padding channels, or a constant, keeps it NCHW."""
        shape = node.outputs[0].type.shape
        if (len(shape) != 4 or node.attrs.get("axis", 0) % 4 != 1
                or node.outputs[0].type.dtype != "float32" or len(node.outputs) != 1
                or any(v is None or v.is_const or self.held_of(v) for v in node.inputs)):
            return False
        channels = [v.type.shape[1] for v in node.inputs]
        blocks = sorted({self.block_of(v) for v in node.inputs} - {0}, reverse=True)
        block = next((b for b in blocks if all(c % b == 0 for c in channels)), 0)
        if not block:
            return False
        out = self.produce_blocked(node.outputs[0], block)
        self.nodes.append(replace(node, inputs=[self.in_block(v, block) for v in node.inputs],
                                  outputs=[out], attrs={**node.attrs, "axis": 1}))
        return True

    def to_channels_last(self, node: Node) -> bool:
        """A Transpose of a blocked tensor to channels last (``perm`` (0, 2, 3, 1):
        ConvNeXt's NCHW -> NHWC before its LayerNorm) reads the blocked tensor with its
        block kept innermost, ``NCHW{b}c`` -> ``NHW(C/b)(b)``, reshaped to ``NHWC``:
        every pixel's channel blocks are whole vectors, so the copy moves vectors and
        its readers (a LayerNorm's statistics over the channels) read contiguous
        channels, where a transform to NCHW followed by the transpose gathers twice.
        A tensor carrying padding channels keeps the NCHW route (its padding cut off)."""
        x = node.inputs[0]
        block = self.block_of(x)
        perm = node.attrs.get("perm")
        if (not block or self.held_of(x) or x.type.ndim != 4 or len(node.outputs) != 1
                or perm is None or list(perm) != [0, 2, 3, 1]):
            return False
        n, channels, h, w = x.type.shape
        out = node.outputs[0]
        blocks_last = Value(self.scope.fresh(f"{out.name}_blocks_last"),
                            TensorType((n, h, w, channels // block, block), x.type.dtype))
        self.nodes.append(Node("Transpose", [self.in_block(x, block)], [blocks_last],
                               {"perm": [0, 2, 3, 1, 4]}, node.name))
        shape = constant(np.array(out.type.shape, np.int64), self.scope.fresh(f"{out.name}_shape"))
        self.nodes.append(Node("Reshape", [blocks_last, shape], [out], {"allowzero": 0},
                               self.scope.fresh(f"{node.name}_channels_last")))
        return True

    def any_other(self, node: Node) -> None:
        inputs = [self.nchw(v) for v in node.inputs]
        self.nodes.append(node if inputs == node.inputs else replace(node, inputs=inputs))


@register_pass("alter_layout")
def alter_layout(graph: Graph, vector_channels: int = 0) -> Graph:
    """Rewrite blockable float32 Conv nodes into ``ConvNCHWc`` on ``NCHW16c``-style data
    with packed constant weights, carrying the blocked layout through layout-agnostic
    ops and inserting ``LayoutTransform`` only where a reader needs another layout.
    Function nodes (partitioned regions) and other ops read NCHW as before.
    ``vector_channels``: float32 lanes of the target's vector register; a dense
    convolution whose filters fill no whole number of them writes its output padded
    (:func:`padded_channels`); 0 pads nothing."""
    rewriter = _LayoutRewriter(NameScope.of(graph), vector_channels)
    for node in graph.nodes:
        if node.body is None and node.op == "Conv" and rewriter.conv(node):
            continue
        if node.body is None and node.op in UNARY_OPS and rewriter.unary(node):
            continue
        if node.body is None and node.op in BINARY_OPS and len(node.inputs) == 2 \
                and rewriter.binary(node):
            continue
        if node.body is None and node.op in POOL_OPS and rewriter.pool(node):
            continue
        if node.body is None and node.op in GLOBAL_POOL_OPS and rewriter.global_pool(node):
            continue
        if node.body is None and node.op in IMAGE_REDUCTION_OPS \
                and rewriter.image_reduction(node):
            continue
        if node.body is None and node.op == "Concat" and rewriter.concat(node):
            continue
        if node.body is None and node.op == "Transpose" and rewriter.to_channels_last(node):
            continue
        rewriter.any_other(node)
    outputs = [rewriter.nchw(v) for v in graph.outputs]
    return graph.rebuild(rewriter.nodes, outputs)


def alter_layout_for(vector_channels: int):
    """The ``alter_layout`` pass of a target whose vector register holds
    ``vector_channels`` float32 lanes (its convolutions' outputs padded to them)."""
    layout_pass = partial(alter_layout, vector_channels=vector_channels)
    layout_pass.pass_name = "alter_layout"
    return layout_pass
