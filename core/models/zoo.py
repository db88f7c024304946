"""ResNet-18 and MobileNetV2 as ONNX graphs (torchvision's layer structure,
seeded random weights), for tests and benchmarks that must not need torch."""

from __future__ import annotations

import numpy as np
import onnx

from .builder import OnnxBuilder


def resnet18(batch: int = 1, size: int = 224, classes: int = 1000,
             seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 (basic blocks [2, 2, 2, 2]) with batch norm after every conv."""
    b = OnnxBuilder(seed)
    x = b.node("Relu", [b.batchnorm(b.conv("input", 3, 64, 7, stride=2), 64)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = b.node("Relu", [b.batchnorm(b.conv(x, cin, cout, 3, stride), cout)])
            y = b.batchnorm(b.conv(y, cout, cout, 3), cout)
            shortcut = x
            if stride != 1 or cin != cout:
                shortcut = b.batchnorm(b.conv(x, cin, cout, 1, stride), cout)
            x = b.node("Relu", [b.node("Add", [y, shortcut])])
            cin = cout
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    out = b.dense(x, 512, classes)
    return b.model("resnet18", (batch, 3, size, size), out, (batch, classes))


def mobilenet_v2(batch: int = 1, size: int = 224, classes: int = 1000,
                 seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0): inverted residuals with depthwise convs and ReLU6."""
    b = OnnxBuilder(seed)

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                relu6: bool = True) -> str:
        y = b.batchnorm(b.conv(x, cin, cout, k, stride, groups), cout)
        return b.node("Clip", [y, b.param(f"{y}_lo", _f32(0.0)), b.param(f"{y}_hi", _f32(6.0))]) \
            if relu6 else y

    x = conv_bn("input", 3, 32, 3, 2)
    cin = 32
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]
    for expand, cout, repeats, first_stride in settings:
        for i in range(repeats):
            stride = first_stride if i == 0 else 1
            hidden = cin * expand
            y = x if expand == 1 else conv_bn(x, cin, hidden, 1)
            y = conv_bn(y, hidden, hidden, 3, stride, groups=hidden)
            y = conv_bn(y, hidden, cout, 1, relu6=False)
            x = b.node("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    x = conv_bn(x, cin, 1280, 1)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    out = b.dense(x, 1280, classes)
    return b.model("mobilenet_v2", (batch, 3, size, size), out, (batch, classes))


def conv_chain(count: int, channels: int = 8, size: int = 8, batch: int = 1,
               seed: int = 0) -> onnx.ModelProto:
    """``count`` 1x1 Conv + Relu pairs on a small image: a network of many tiny
    functions, where per-node and per-loop overheads are what a run measures."""
    b = OnnxBuilder(seed)
    x = "input"
    for _ in range(count):
        x = b.node("Relu", [b.conv(x, channels, channels, 1)])
    return b.model("conv_chain", (batch, channels, size, size), x,
                   (batch, channels, size, size))


def _f32(v: float):
    return np.array(v, dtype=np.float32)


def encoder_layer(seq: int = 64, d_model: int = 256, heads: int = 4, ffn: int = 1024,
                  batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """One post-norm transformer encoder layer (as torch's ``TransformerEncoderLayer``
    exports it, GELU by Erf): multi-head self-attention over ``[batch, seq, d_model]``
    (3-D MatMuls with constant weights, per-head ``[B,H,T,D] x [B,H,D,T]`` products,
    Softmax), residual Add + LayerNormalization, a ``d_model -> ffn -> d_model`` GELU
    feed-forward block, residual Add + LayerNormalization. ``seq=128, d_model=768,
    heads=12, ffn=3072`` is a BERT-base layer."""
    if d_model % heads:
        raise ValueError(f"encoder_layer: {heads} heads do not divide d_model {d_model}")
    b = OnnxBuilder(seed)
    head = d_model // heads

    def linear(x: str, cin: int, cout: int) -> str:
        w = (b.rng.standard_normal((cin, cout)) * (1.0 / cin) ** 0.5).astype(np.float32)
        bias = (0.02 * b.rng.standard_normal(cout)).astype(np.float32)
        y = b.node("MatMul", [x, b.param(b._name("w"), w)])
        return b.node("Add", [y, b.param(b._name("b"), bias)])

    def shape(*dims: int) -> str:
        return b.param(b._name("shape"), np.array(dims, dtype=np.int64))

    def layer_norm(x: str) -> str:
        scale = (1.0 + 0.1 * b.rng.standard_normal(d_model)).astype(np.float32)
        shift = (0.1 * b.rng.standard_normal(d_model)).astype(np.float32)
        return b.node("LayerNormalization", [x, b.param(b._name("ln_scale"), scale),
                                             b.param(b._name("ln_bias"), shift)],
                      axis=-1, epsilon=1e-5)

    def split_heads(x: str, perm: list[int]) -> str:
        return b.node("Transpose", [b.node("Reshape", [x, shape(batch, seq, heads, head)])],
                      perm=perm)

    x = "input"
    q = split_heads(linear(x, d_model, d_model), [0, 2, 1, 3])
    k = split_heads(linear(x, d_model, d_model), [0, 2, 3, 1])
    v = split_heads(linear(x, d_model, d_model), [0, 2, 1, 3])
    scores = b.node("Mul", [b.node("MatMul", [q, k]), b.param(b._name("scale"),
                                                              _f32(head ** -0.5))])
    context = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
    context = b.node("Reshape", [b.node("Transpose", [context], perm=[0, 2, 1, 3]),
                                 shape(batch, seq, d_model)])
    x = layer_norm(b.node("Add", [x, linear(context, d_model, d_model)]))
    hidden = linear(x, d_model, ffn)
    erf = b.node("Erf", [b.node("Div", [hidden, b.param(b._name("sqrt2"), _f32(2 ** 0.5))])])
    gelu = b.node("Mul", [b.node("Mul", [hidden, b.node("Add", [erf, b.param(
        b._name("one"), _f32(1.0))])]), b.param(b._name("half"), _f32(0.5))])
    out = layer_norm(b.node("Add", [x, linear(gelu, ffn, d_model)]))
    return b.model("encoder_layer", (batch, seq, d_model), out, (batch, seq, d_model))
