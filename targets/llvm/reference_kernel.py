"""The reference kernel the CPU's cost model times beside every chain of kernels
(:func:`heterocc.targets.llvm.cost.time_chain`): one fixed int8 convolution, the same
on every model, so that its time in a window of timing says how fast the machine ran
in that window.

Why a convolution of the target's own code and not the vector peak loop
(:mod:`.peak`): on the shared machine this was measured on, the chain of ResNet-18's
kernels ran up to 1.8x slower for seconds at a time, each kernel 1.0x to 1.8x; the
peak loop on registers moved far less (its time correlated 0.2 to 0.4 with the chain's
over 40 windows), a copy of 8 MB more (0.6), one of the model's own convolutions,
timed in the chain, most: the fraction of kernels within 25% between two windows rose
from 59% to 88% with every window's kernels divided by that convolution's time.
"""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

#: the reference convolution: 3x3, this many channels in and out, on a square image of
#: this side (a ResNet's third stage: 116 M multiply-accumulates, 576 KB of weights;
#: 0.23 to 0.38 ms in a chain on AVX-512 VNNI over two cores). Why so large: over 35 windows of
#: ResNet-18's chain (load 13), its kernels within 25% between two windows were 89%
#: raw, 89% divided by a 3x3 of 128 channels on 14x14, 90% by 256 on 7x7, 93% by this
#: one, 87% by 64 on 28x28: the kernels whose weights the caches do not hold move most
#: with the machine's phases
REFERENCE_CHANNELS = 256
REFERENCE_SIZE = 14


def reference_model(channels: int = REFERENCE_CHANNELS, size: int = REFERENCE_SIZE
                    ) -> ModelProto:
    """An ONNX model of one int8 ``QLinearConv`` (3x3, padded, per-channel weight
    scales), its weights drawn from a fixed seed: the same model on every call."""
    rng = np.random.default_rng(0)
    constants = {
        "x_scale": np.float32(0.05), "x_zero": np.int8(0),
        "w": rng.integers(-64, 64, (channels, channels, 3, 3)).astype(np.int8),
        "w_scale": np.full(channels, 0.01, np.float32),
        "w_zero": np.zeros(channels, np.int8),
        "y_scale": np.float32(0.1), "y_zero": np.int8(0)}
    node = helper.make_node("QLinearConv", ["x", *constants], ["y"], pads=[1, 1, 1, 1],
                            name="reference_conv")
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        [node], "chain_reference",
        [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT8, shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
