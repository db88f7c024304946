"""Tensor expressions the CUDA tests schedule: the compute library's kinds of compute
(elementwise, reductions, matmul, conv2d, depthwise conv2d, pooling, softmax, layer
norm), each with its NumPy oracle."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from heterocc import te

RNG = np.random.default_rng(11)


@dataclass
class Case:
    """Inputs and outputs of a compute, and the NumPy function it must match."""

    name: str
    inputs: list[te.Tensor]
    outputs: list[te.Tensor]
    reference: Callable[..., list[np.ndarray]]

    def random_inputs(self) -> list[np.ndarray]:
        return [RNG.standard_normal(t.shape).astype(t.dtype) for t in self.inputs]


def elementwise(shape=(4, 33, 65)) -> Case:
    x = te.placeholder(shape, "float32", "x")
    bias = te.placeholder((shape[-1],), "float32", "bias")
    y = te.compute(shape, lambda *i: te.maximum(te.exp(x[i]) * 0.5 + bias[i[-1]], 0.0), name="y")
    return Case("elementwise", [x, bias], [y],
                lambda a, b: [np.maximum(np.exp(a) * 0.5 + b, 0)])


def vector_elementwise(size=4096) -> Case:
    x = te.placeholder((size,), "float32", "x")
    y = te.placeholder((size,), "float32", "y")
    z = te.compute((size,), lambda i: x[i] + y[i], name="z")
    return Case("vector_elementwise", [x, y], [z], lambda a, b: [a + b])


def row_sum(rows=37, columns=300) -> Case:
    x = te.placeholder((rows, columns), "float32", "x")
    r = te.reduce_axis(columns, "r")
    y = te.compute((rows,), lambda i: te.sum(x[i, r], axis=r), name="y")
    return Case("row_sum", [x], [y], lambda a: [a.sum(axis=1)])


def matmul(m=100, n=70, k=13) -> Case:
    a = te.placeholder((m, k), "float32", "A")
    b = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return Case(f"matmul_{m}x{n}x{k}", [a, b], [c], lambda x, y: [x @ y])


def dense_relu(m=64, n=128, k=64) -> Case:
    """A matmul whose product feeds a bias + relu epilogue (one kernel: the epilogue
    is computed on the register tile)."""
    case = matmul(m, n, k)
    bias = te.placeholder((n,), "float32", "bias")
    c = case.outputs[0]
    out = te.compute((m, n), lambda i, j: te.maximum(c[i, j] + bias[j], 0.0), name="out")
    return Case("dense_relu", [*case.inputs, bias], [out],
                lambda x, y, b: [np.maximum(x @ y + b, 0)])


def _pad(x: te.Tensor, pad: int) -> te.Tensor:
    n, c, h, w = x.shape

    def body(i, ch, y, xx):
        inside = te.logical_and(te.logical_and(y >= pad, y < h + pad),
                                te.logical_and(xx >= pad, xx < w + pad))
        return te.if_then_else(inside, x[i, ch, y - pad, xx - pad], 0.0)

    return te.compute((n, c, h + 2 * pad, w + 2 * pad), body, name="pad")


def _conv_reference(x, w, stride, pad, groups):
    n, c, h, width = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (width + 2 * pad - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    og = o // groups
    for k in range(o):
        g = k // og
        for dy in range(kh):
            for dx in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, dy:dy + stride * oh:stride,
                           dx:dx + stride * ow:stride]
                out[:, k] += np.einsum("nchw,c->nhw", patch, w[k, :, dy, dx])
    return out.astype(np.float32)


def conv2d(n=1, c=8, h=10, w=10, o=12, kernel=3, stride=1, pad=1, groups=1) -> Case:
    x = te.placeholder((n, c, h, w), "float32", "x")
    cg = c // groups
    weight = te.placeholder((o, cg, kernel, kernel), "float32", "w")
    data = _pad(x, pad)
    oh = (h + 2 * pad - kernel) // stride + 1
    ow = (w + 2 * pad - kernel) // stride + 1
    rc = te.reduce_axis(cg, "rc")
    ry = te.reduce_axis(kernel, "ry")
    rx = te.reduce_axis(kernel, "rx")
    og = o // groups

    def body(i, k, y, xx):
        channel = (k // og) * cg + rc if groups > 1 else rc
        return te.sum(data[i, channel, y * stride + ry, xx * stride + rx] * weight[k, rc, ry, rx],
                      axis=[rc, ry, rx])

    out = te.compute((n, o, oh, ow), body, name="conv")
    name = "depthwise_conv2d" if groups > 1 else "conv2d"
    return Case(name, [x, weight], [out],
                lambda a, b: [_conv_reference(a, b, stride, pad, groups)])


def max_pool(n=2, c=3, h=9, w=9, kernel=3, stride=2) -> Case:
    x = te.placeholder((n, c, h, w), "float32", "x")
    oh, ow = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    ry, rx = te.reduce_axis(kernel, "ry"), te.reduce_axis(kernel, "rx")
    out = te.compute((n, c, oh, ow), lambda i, ch, y, xx: te.max(
        x[i, ch, y * stride + ry, xx * stride + rx], axis=[ry, rx]), name="pool")

    def reference(a):
        windows = np.lib.stride_tricks.sliding_window_view(a, (kernel, kernel), axis=(2, 3))
        return [windows[:, :, ::stride, ::stride].max(axis=(-2, -1))]

    return Case("max_pool", [x], [out], reference)


def softmax(rows=5, columns=37) -> Case:
    x = te.placeholder((rows, columns), "float32", "x")
    r1, r2 = te.reduce_axis(columns, "r1"), te.reduce_axis(columns, "r2")
    peak = te.compute((rows,), lambda i: te.max(x[i, r1], axis=r1), name="peak")
    total = te.compute((rows,), lambda i: te.sum(te.exp(x[i, r2] - peak[i]), axis=r2),
                       name="total")
    out = te.compute((rows, columns), lambda i, j: te.exp(x[i, j] - peak[i]) / total[i],
                     name="softmax")

    def reference(a):
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return [e / e.sum(axis=1, keepdims=True)]

    return Case("softmax", [x], [out], reference)


def layer_norm(rows=6, columns=50, epsilon=1e-5) -> Case:
    x = te.placeholder((rows, columns), "float32", "x")
    gamma = te.placeholder((columns,), "float32", "gamma")
    r1, r2 = te.reduce_axis(columns, "r1"), te.reduce_axis(columns, "r2")
    total = te.compute((rows,), lambda i: te.sum(x[i, r1], axis=r1), name="total")
    mean = te.compute((rows,), lambda i: total[i] / float(columns), name="mean")
    var = te.compute((rows,), lambda i: te.sum((x[i, r2] - mean[i]) * (x[i, r2] - mean[i]),
                                               axis=r2), name="var")
    out = te.compute((rows, columns), lambda i, j: (x[i, j] - mean[i]) * gamma[j] / te.sqrt(
        var[i] / float(columns) + epsilon), name="layer_norm")

    def reference(a, g):
        centered = a - a.mean(axis=1, keepdims=True)
        return [centered * g / np.sqrt((centered ** 2).mean(axis=1, keepdims=True) + epsilon)]

    return Case("layer_norm", [x, gamma], [out], reference)


def inventory_cases() -> list[Case]:
    """One case of every kind of compute the compute library makes."""
    return [elementwise(), vector_elementwise(), row_sum(), matmul(), matmul(128, 256, 64),
            dense_relu(), conv2d(), conv2d(c=6, o=6, groups=6, stride=2),
            max_pool(), softmax(), layer_norm()]
