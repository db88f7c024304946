"""Dense int8 convolutions whose parallel tasks are blocks of rows (``row_tasks``): each
task packs the rows its block reads and sums every tile of output channels over them,
in one parallel loop (a 1x1 convolution finished in registers: a run of rows or of
tiles across rows); bit-exact against the reference, and where they are not taken."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.targets.llvm import module as llvm_module
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.schedules.int8_conv import (
    ROW_TASK_WEIGHT_SHARE,
    ROW_TASKS_PER_CORE,
    row_tasks,
)

#: AVX-512BW (the packing's masked byte loads) with VNNI, two cores
TARGET = "llvm -mcpu=icelake-server -num-cores=2"


def _conv_integer(x_shape, filters: int, kernel: int, stride: int, seed: int = 0):
    """``ConvInteger`` of uint8 data (zero point 7) by constant int8 weights, padded to
    keep the size at stride 1."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, (filters, x_shape[1], kernel, kernel)).astype(np.int8)
    pad = kernel // 2
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)
    y = helper.make_tensor_value_info("y", TensorProto.INT32, None)
    node = helper.make_node("ConvInteger", ["x", "w", "zx"], ["y"], pads=[pad] * 4,
                            strides=[stride, stride])
    graph = helper.make_graph([node], "conv", [x], [y],
                              [numpy_helper.from_array(w, "w"),
                               numpy_helper.from_array(np.array(7, np.uint8), "zx")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def _opens_with_row_tasks(compiled) -> bool:
    """Whether the convolution's function opens with its parallel loop, the packed data
    allocated inside it (else packed ahead, allocated at the top)."""
    (kernel,) = [k for k in compiled.kernels.values() if getattr(k, "prim", None)]
    lines = str(kernel.prim).splitlines()
    return "parallel" in lines[1] and "allocate int8_data" in lines[2]


def _host_runs(target: str) -> bool:
    cpu, host = parse_cpu(target), llvm_module.host().description
    return cpu.arch == host.arch and cpu.features <= host.features


@pytest.mark.parametrize("x_shape, filters, kernel, stride, tasks", [
    ((1, 3, 64, 64), 16, 7, 2, True),  # a stem: 3 channels, small weights
    ((2, 16, 24, 24), 32, 3, 1, True),  # a batch of two, 3x3
    ((1, 256, 12, 12), 256, 3, 1, False),  # 600 KB of weights: channels in parallel
    ((1, 16, 32, 32), 32, 1, 1, True),  # 1x1 finished in registers, a tile a row
    ((1, 24, 28, 28), 48, 1, 1, True),  # 1x1 finished in registers, tiles across rows
    ((1, 32, 32, 32), 64, 1, 2, True),  # a 1x1 downsample (a 16x16 output)
    ((1, 32, 7, 7), 64, 1, 1, False),  # a plane packed in two passes: one row
], ids=["stem", "batch2-3x3", "heavy-weights", "1x1-rows", "1x1-across-rows",
        "1x1-stride2", "1x1-7x7"])
def test_a_data_heavy_convolution_packs_its_rows_in_each_task(x_shape, filters, kernel,
                                                               stride, tasks):
    model = _conv_integer(x_shape, filters, kernel, stride)
    compiled = heterocc.compile(model, target=TARGET)
    assert _opens_with_row_tasks(compiled) == tasks
    if not _host_runs(TARGET):  # code for a CPU this host is not: the host's own runs
        compiled = heterocc.compile(model, target="llvm -num-cores=2")
    x = np.random.default_rng(1).integers(0, 256, x_shape).astype(np.uint8)
    x[..., :2, :] = 255  # extreme bytes at a border that the tasks' packing pads
    reference = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_array_equal(compiled.run([x])[0], reference)


def test_row_tasks_need_weights_within_the_l2_share_and_two_blocks_a_core():
    cpu = dataclasses.replace(parse_cpu(TARGET), l2=1 << 20, num_cores=2)
    limit = int(ROW_TASK_WEIGHT_SHARE * cpu.l2)
    enough = ROW_TASKS_PER_CORE * cpu.num_cores  # blocks of rows needed
    assert row_tasks(1, limit, enough, cpu)
    assert not row_tasks(1, limit + 1, enough, cpu)  # weights past the share
    assert not row_tasks(1, limit, enough - 1, cpu)  # too few blocks
    assert row_tasks(2, limit, enough // 2, cpu)  # a batch's blocks count


def test_without_masked_byte_loads_the_data_is_packed_ahead():
    """AVX2 packs byte by byte in one pass (no masked byte loads): no row tasks."""
    compiled = heterocc.compile(_conv_integer((1, 3, 64, 64), 16, 7, 2),
                                target="llvm -mcpu=haswell -num-cores=2")
    assert not _opens_with_row_tasks(compiled)
