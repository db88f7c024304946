"""Grouped convolutions that are not depthwise (ResNeXt, RegNet) on the accelerator.

Each model is one grouped convolution with bias, built with onnx.helper and quantized
here by ``onnxruntime.quantization.quantize_static`` (QDQ, per-channel weights); the
checks: every multiply-accumulate on the accelerator, bit-exactness against the integer
reference of the partitioned graph, one rounding step of ONNX Runtime at most.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.codegen import compile_composite, ungrouped_weights

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import (  # noqa: E402
    inputs,
    onnxruntime_session,
    output_scale,
    quantize,
)


def grouped_conv(seed: int, channels: int, filters: int, group: int, stride: int,
                 kernel: int, size: int) -> onnx.ModelProto:
    """One padded grouped convolution with bias and no activation."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal(
        (filters, channels // group, kernel, kernel)) * 0.4).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(filters).astype(np.float32) * 0.2, "b")
    node = helper.make_node("Conv", ["input", "w", "b"], ["y"], group=group,
                            pads=[kernel // 2] * 4, strides=[stride] * 2)
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    graph = helper.make_graph(
        [node], "grouped",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, filters, out, out])],
        [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


# (channels, filters, group, stride, kernel, size): groups 2, 4, 8; RegNet's group widths
# 8 and 16 (24 channels in 3 groups, 48 in 3), whole groups in a tile (block-diagonal
# tiles); group width 24 and two filters per channel (block-diagonal weights over all
# channels); 8 input channels (under a block: im2col)
CASES = [(32, 32, 2, 1, 3, 8), (32, 64, 4, 2, 3, 9), (64, 64, 8, 1, 3, 7),
         (24, 24, 3, 1, 3, 8), (24, 24, 3, 2, 3, 9), (48, 48, 3, 2, 3, 9),
         (48, 48, 3, 1, 1, 6), (48, 48, 2, 1, 3, 7), (8, 16, 2, 1, 3, 6)]


@pytest.mark.parametrize("channels, filters, group, stride, kernel, size", CASES)
def test_grouped_convolution_runs_on_the_accelerator_bit_exactly(
        tmp_path, channels, filters, group, stride, kernel, size):
    model = quantize(grouped_conv(group + stride, channels, filters, group, stride, kernel,
                                  size), tmp_path, "QDQ", "QUInt8")
    compiled = heterocc.compile(model, target="vta,llvm", strict=True, placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") == 1.0, report.format()
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    assert report.macs_by_target()["vta"] == \
        filters * out * out * channels // group * kernel * kernel
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    shape = (1, channels, size, size)
    for x in inputs(2, shape):
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        # one requantization: at most one rounding step from ORT (docs/vta.md)
        assert np.abs(np.round((ours - session.run(None, {"input": x})[0]) / scale)).max() \
            <= 1


@pytest.mark.parametrize("group, weight_tiles", [
    (6, 3 * 1 * 9),   # group width 8: each tile holds two whole groups, one tile per block
    (2, 3 * 3 * 9)])  # group width 24 straddles tiles: all 3 x 3 channel blocks
def test_grouped_kernel_counts_the_model_macs_and_is_exact_on_extreme_inputs(
        tmp_path, group, weight_tiles):
    from heterocc.accel_sim.isa import Gemm

    """The kernel alone, on int8 inputs across the whole range (the zero point's bias
    term and the zero weights outside each group must cancel exactly)."""
    model = quantize(grouped_conv(7, 48, 48, group, 1, 3, 7), tmp_path, "QDQ", "QUInt8")
    target = VtaTarget()
    compiled = heterocc.compile(model, target=[target, "llvm"], strict=True,
                                placement="greedy")
    (region,) = [n for n in compiled.graph.nodes if n.attrs.get("target") == "vta"]
    (composite,) = region.body.nodes
    kernel = compile_composite(composite, target.config, 2)
    assert kernel.input_tensor == "X"  # the direct convolution, not im2col
    assert kernel.macs == 48 * 7 * 7 * 48 // group * 9
    # GEMM cycles: one per weight tile and output pixel
    assert sum((i.uop_end - i.uop_begin) * i.loop_outer * i.loop_inner
               for i in kernel.program.instructions
               if isinstance(i, Gemm) and not i.reset) == weight_tiles * 7 * 7
    rng = np.random.default_rng(3)
    shape = composite.body.inputs[0].type.shape
    for x in (rng.integers(-128, 128, shape).astype(np.int8), np.full(shape, 127, np.int8),
              np.full(shape, -128, np.int8)):
        np.testing.assert_array_equal(kernel([x])[0], evaluate(composite.body, [x])[0])


def test_ungrouped_weights_are_block_diagonal():
    from heterocc.ir.graph import Node, constant

    w = np.arange(1, 9, dtype=np.int8).reshape(4, 2, 1, 1)
    node = Node("ConvInteger", [None, constant(w, "w")], [], {"group": 2})
    np.testing.assert_array_equal(ungrouped_weights(node)[:, :, 0, 0],
                                  [[1, 2, 0, 0], [3, 4, 0, 0], [0, 0, 5, 6], [0, 0, 7, 8]])
