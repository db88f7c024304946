"""The llvm target's depthwise blocked convolutions (``schedule_depthwise_conv2d_nchwc``):
whole models against the reference on the host's ISA and on AVX2 code, every tile knob
against the NumPy reference, the tiles derived from the CPU description, and padded
reads as masked loads only where the CPU has mask registers."""

from __future__ import annotations

import re

import numpy as np
import pytest

import heterocc
from heterocc import te
from heterocc.compute import compute_of
from heterocc.errors import CompileError
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm.cpu import active_cpu, compiling_for, parse_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules import (
    BlockedConvTiles,
    DepthwiseConvTiles,
    default_depthwise_conv_tiles,
    depthwise_conv_tile,
    looped_window_columns,
    schedule_conv2d_nchwc,
    schedule_depthwise_conv2d_nchwc,
)
from tests.conftest import conv_model

RNG = np.random.default_rng(29)
AVX2 = "llvm -mattr=-avx512f"
#: descriptions to tile for (their code is only inspected, never run)
AVX512_CPU = parse_cpu("llvm -mcpu=x86-64-v4")
AVX2_CPU = parse_cpu("llvm -mcpu=x86-64-v3")
NEON_CPU = parse_cpu("llvm -mtriple=aarch64-linux-gnu")


def _check_model(model, target: str) -> None:
    feeds = {v.name: RNG.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim],
                                         dtype=np.float32) for v in model.graph.input}
    llvm = LLVMTarget(cpu=target)
    compiled = heterocc.compile(model, target=[llvm])
    assert compiled.graph.op_counts().get("ConvNCHWc") == 1
    expected = heterocc.compile(model, target="reference").run(feeds)
    for ours, theirs in zip(compiled.run(feeds), expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert llvm.fallbacks == {}


@pytest.mark.parametrize("target", ["llvm", AVX2])
@pytest.mark.parametrize("channels,size,kernel,stride,pad,width", [
    (32, 14, 3, 1, None, 14),          # one tile per row
    (32, 7, 3, 1, None, 7),            # MobileNetV2's last stage
    (16, 9, 3, 1, None, 13),           # a prime width: a tail tile
    (48, 12, 3, 1, None, 56),          # a wide row: several tiles
    (16, 5, 3, 1, None, 112),          # the widest row of MobileNetV2
    (32, 14, 3, 2, None, 14),          # stride 2, one tile per row
    (32, 15, 3, 2, None, 112),         # stride 2, wide, odd height
    (16, 11, 3, 2, [0, 1, 1, 0], 13),  # asymmetric padding
    (16, 8, 3, 1, 0, 9),               # no padding at all
    (40, 10, 5, 2, None, 20),          # 8-channel blocks, 5x5 (weights left in memory)
])
def test_depthwise_geometries_match_reference(target, channels, size, kernel, stride, pad,
                                              width):
    model = conv_model(RNG, channels, size, channels, kernel, stride, channels, pad=pad,
                       width=width, epilogue=("clip",))
    _check_model(model, target)


@pytest.mark.parametrize("target", ["llvm", AVX2])
def test_depthwise_residual_epilogue_and_dilation_match_reference(target):
    _check_model(conv_model(RNG, 32, 9, 32, 3, 1, 32, dilation=2, width=14,
                            epilogue=("residual", "relu")), target)


def _depthwise_stages(shape=(1, 2, 9, 13, 16), kernel=3, stride=1, pads=(1, 1, 1, 1)):
    """Placeholders (data, weights, bias) and the ConvNCHWc + Relu output."""
    n, blocks, h, w, block = shape
    x = te.placeholder(shape, "float32", "x")
    weights = te.placeholder((blocks, 1, kernel, kernel, 1, block), "float32", "w")
    bias = te.placeholder((blocks, block), "float32", "b")
    attrs = {"strides": [stride, stride], "pads": list(pads), "dilations": [1, 1],
             "group": blocks * block}
    (conv,) = compute_of("ConvNCHWc")([x, weights, bias], attrs, None)
    out_type = TensorType(conv.shape, "float32")
    (y,) = compute_of("Relu")([conv], {}, [out_type])
    return [x, weights, bias], y, attrs


def _stages_of(schedule):
    return {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}


def _run(params, y, schedule, name, attrs):
    module = build([te.lower(schedule, [*params, y], name=name)], name=name)
    arrays = [RNG.standard_normal(p.shape, dtype=np.float32) for p in params]
    out = np.empty(y.shape, np.float32)
    module[name](*arrays, out)
    expected = np.maximum(get_op("ConvNCHWc").run(arrays, attrs)[0], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tiles", [
    DepthwiseConvTiles(columns=1), DepthwiseConvTiles(columns=5),
    DepthwiseConvTiles(columns=16), DepthwiseConvTiles(channel_blocks=2),
    DepthwiseConvTiles(unroll_window=False), DepthwiseConvTiles(unroll_window=True, columns=4),
    DepthwiseConvTiles(parallel=True), DepthwiseConvTiles(parallel=False, columns=13),
])
@pytest.mark.parametrize("stride", [1, 2])
def test_every_depthwise_tile_gives_the_same_result(tiles, stride):
    params, y, attrs = _depthwise_stages(stride=stride)
    schedule = te.create_schedule(y)
    stages = _stages_of(schedule)
    schedule_depthwise_conv2d_nchwc(schedule, stages["conv_nchwc"], y, [stages["conv_bias"]],
                                    tiles, cpu=active_cpu())
    _run(params, y, schedule, "dw_tiles", attrs)


def test_blocked_conv_schedule_hands_depthwise_to_its_own_with_the_tile_knobs():
    """A tuning config of the blocked-conv template (columns, channel blocks) schedules a
    depthwise convolution through the depthwise schedule."""
    params, y, attrs = _depthwise_stages()
    schedule = te.create_schedule(y)
    stages = _stages_of(schedule)
    schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], y, [stages["conv_bias"]],
                          BlockedConvTiles(columns=7, channel_blocks=2), cpu=active_cpu())
    text = str(te.lower(schedule, [*params, y], name="dw_dispatch"))
    # one tile: 2 blocks x 7 columns of accumulators
    assert "conv_nchwc: float32[1, 2, 1, 7, 16]" in text
    _run(params, y, schedule, "dw_dispatch", attrs)


def test_depthwise_schedule_refuses_what_it_cannot_tile():
    params, y, _ = _depthwise_stages()
    schedule = te.create_schedule(y)
    stages = _stages_of(schedule)
    with pytest.raises(CompileError, match="3 channel blocks per tile do not divide 2"):
        schedule_depthwise_conv2d_nchwc(schedule, stages["conv_nchwc"], y,
                                        [stages["conv_bias"]], DepthwiseConvTiles(
                                            channel_blocks=3), cpu=active_cpu())
    dense = te.placeholder((1, 1, 4, 4, 16), "float32", "d")
    weights = te.placeholder((1, 1, 3, 3, 16, 16), "float32", "v")
    (conv,) = compute_of("ConvNCHWc")([dense, weights], {
        "strides": [1, 1], "pads": [1] * 4, "dilations": [1, 1], "group": 1}, None)
    with pytest.raises(CompileError, match="not a blocked depthwise conv2d"):
        schedule_depthwise_conv2d_nchwc(te.create_schedule(conv), conv, cpu=active_cpu())


@pytest.mark.parametrize("cpu,width,kernel,stride,block_bytes,tile", [
    # AVX-512: the 3x3 window's 9 weight vectors stay in registers beside 14 columns
    (AVX512_CPU, 56, (3, 3), 1, 64, (14, True)),
    (AVX512_CPU, 112, (3, 3), 1, 64, (16, True)),
    (AVX512_CPU, 7, (3, 3), 1, 64, (7, True)),
    # stride 2: no input shared between columns, so half as many (a row that fits
    # with one input per column is still taken whole)
    (AVX512_CPU, 56, (3, 3), 2, 64, (8, True)),
    (AVX512_CPU, 14, (3, 3), 2, 64, (14, True)),
    # 5x5: 25 weight vectors leave too few registers; the window is looped over
    (AVX512_CPU, 56, (5, 5), 1, 64, (14, False)),
    # AVX2: a 16-channel block is two vectors; 16 registers hold no 3x3 window: it is
    # looped over, 3 columns (half the registers less one column), the row in the fewest
    # tiles
    (AVX2_CPU, 56, (3, 3), 1, 64, (3, False)),
    (AVX2_CPU, 7, (3, 3), 1, 64, (3, False)),
    (AVX2_CPU, 56, (5, 5), 2, 64, (3, False)),
    # AVX2 with an 8-channel block: one vector per column, 9 weights + 3 columns only;
    # looped, 7 columns (a divisor of the row)
    (AVX2_CPU, 56, (3, 3), 1, 32, (7, False)),
    # NEON: a 16-channel block is four vectors
    (NEON_CPU, 56, (3, 3), 1, 64, (3, False)),
])
def test_depthwise_tiles_follow_the_cpu_description(cpu, width, kernel, stride, block_bytes,
                                                    tile):
    assert depthwise_conv_tile(width, kernel, stride, block_bytes, cpu) == tile


#: vector moves to and from the stack (a spilled register) in AVX2 and NEON assembly
_STACK_VECTORS = re.compile(r"\(%rsp\).*%ymm|%ymm.*\(%rsp\)|\b(?:ldr|ldp|str|stp)\s+q\d+.*\[sp")


def _looped_window_stack_moves(cpu, kernel, columns):
    """Stack moves in the hot loop (the most multiply-adds) of a looped-window depthwise
    tile of ``columns`` over 16-channel blocks with a ``kernel`` x ``kernel`` window."""
    params, y, _ = _depthwise_stages((1, 2, 9, 56, 16), kernel=kernel, pads=(kernel // 2,) * 4)
    schedule = te.create_schedule(y)
    stages = _stages_of(schedule)
    schedule_depthwise_conv2d_nchwc(schedule, stages["conv_nchwc"], y, [stages["conv_bias"]],
                                    DepthwiseConvTiles(columns=columns, unroll_window=False),
                                    cpu=cpu)
    with compiling_for(cpu):
        assembly = build([te.lower(schedule, [*params, y], name="dw")], name="dw",
                         cpu=cpu).assembly()
    blocks = re.split(r"\n(?=\.?LBB\d+_\d+:)", assembly)
    hot = max(blocks, key=lambda block: len(re.findall(r"vfmadd|fmla", block)))
    return len(_STACK_VECTORS.findall(hot))


@pytest.mark.parametrize("cpu", [AVX2_CPU, NEON_CPU], ids=["avx2", "neon"])
@pytest.mark.parametrize("kernel", [3, 5])
def test_looped_windows_take_the_columns_whose_registers_fit(cpu, kernel):
    """A looped window's tile (:func:`looped_window_columns`: 3 columns of a 16-channel
    block with AVX2's 16 and NEON's 32 registers) keeps its kernel row's code in
    registers, and one column more moves vectors through the stack (the register
    model's prediction, checked in the generated code; NEON's a cross build)."""
    vectors = 64 // cpu.vector_bytes
    columns = looped_window_columns(vectors, cpu)
    assert columns == 3
    assert _looped_window_stack_moves(cpu, kernel, columns) == 0
    assert _looped_window_stack_moves(cpu, kernel, columns + 1) > 0


def test_small_depthwise_kernels_stay_in_the_calling_thread():
    """The thread pool only for kernels with enough multiply-adds to gain from it, by
    the vector width of the CPU."""
    # 2 blocks of 16 channels at 7x7: 882 AVX-512 / 1764 AVX2 vector multiply-adds;
    # MobileNetV2's smallest depthwise layer (576 channels, 7x7 out): 15876 / 31752
    small, smallest_model_layer, large = (
        _stages_of(te.create_schedule(_depthwise_stages(shape)[1]))["conv_nchwc"]
        for shape in ((1, 2, 7, 7, 16), (1, 36, 7, 7, 16), (1, 9, 56, 56, 16)))
    for cpu in (AVX512_CPU, AVX2_CPU):
        assert not default_depthwise_conv_tiles(small, cpu).parallel
        assert default_depthwise_conv_tiles(smallest_model_layer, cpu).parallel
        assert default_depthwise_conv_tiles(large, cpu).parallel
    params, y, _ = _depthwise_stages((1, 2, 7, 7, 16))
    schedule = te.create_schedule(y)
    stages = _stages_of(schedule)
    schedule_depthwise_conv2d_nchwc(schedule, stages["conv_nchwc"], y, [stages["conv_bias"]],
                                    cpu=active_cpu())
    assert "parallel" not in str(te.lower(schedule, [*params, y], name="dw_small"))


@pytest.mark.parametrize("cpu,masked", [(AVX512_CPU, True), (AVX2_CPU, False)])
def test_padded_reads_are_masked_loads_where_the_cpu_has_mask_registers(cpu, masked):
    """AVX-512: the window is unrolled (by LLVM: the TIR keeps an unroll-hinted loop),
    its padded reads masked loads; elsewhere a padded read branches around its load."""
    params, y, _ = _depthwise_stages()
    with compiling_for(cpu):
        schedule = te.create_schedule(y)
        stages = _stages_of(schedule)
        schedule_depthwise_conv2d_nchwc(schedule, stages["conv_nchwc"], y,
                                        [stages["conv_bias"]], cpu=cpu)
        prim = te.lower(schedule, [*params, y], name="dw_masked")
    text = str(prim)
    # the window unrolled where the weights fit the registers
    assert ("for ry in unroll_hint" in text) == masked
    assert ("for ry in serial" in text) == (not masked)
    ir_text = build([prim], name="dw_masked", cpu=cpu).unoptimized_ir
    assert ("llvm.masked.load" in ir_text) == masked
