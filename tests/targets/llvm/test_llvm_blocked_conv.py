"""The llvm target's blocked (NCHW[x]c) convolutions: ConvNCHWc kernels with their fused
epilogues and the layout transforms must match the NumPy reference, and whole models
compiled with the blocked layout must match ONNX Runtime."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import heterocc
from heterocc import te
from heterocc.compute import compute_of
from heterocc.errors import CompileError
from heterocc.ir.types import TensorType
from heterocc.models import mobilenet_v2, resnet18, tiny_cnn
from heterocc.ops import get_op
from heterocc.passes import fused_functions
from heterocc.sdk.te_target import ExpressedFunction
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm.cpu import active_cpu, compiling_for, parse_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules import (
    BlockedConvTiles,
    blocked_conv_columns,
    default_block_unroll,
    default_blocked_conv_tiles,
    dense_conv_reduction_blocks,
    even_tiles,
    one_block_columns,
    one_block_tile_columns,
    pointwise_conv_tile,
    schedule_conv2d_nchwc,
    window_shares_inputs,
)
from heterocc.targets.llvm.target import _schedule
from tests.conftest import conv_model, make_model

RNG = np.random.default_rng(17)


def _conv_model(*args, **kwargs):
    return conv_model(RNG, *args, **kwargs)


def _feeds(model):
    return {v.name: RNG.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim],
                                        dtype=np.float32) for v in model.graph.input}


def _compile_blocked_and_check(model, feeds):
    """``model`` on llvm (blocked) against the reference; returns the llvm model."""
    compiled = heterocc.compile(model, target="llvm")
    assert "ConvNCHWc" in compiled.graph.op_counts()
    expected = heterocc.compile(model, target="reference").run(feeds)
    for ours, theirs in zip(compiled.run(feeds), expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert compiled.fallbacks == {}
    return compiled


@pytest.mark.parametrize("channels,size,filters,kernel,stride,group,dilation,width", [
    (16, 12, 16, 3, 1, 1, 1, 12),    # one block in, one out
    (3, 30, 16, 7, 2, 1, 1, 30),     # the stem: its NCHW input read in place (NCHW1c)
    (24, 9, 40, 3, 1, 1, 1, 9),      # 8-channel blocks (24, 40 not multiples of 16)
    (12, 17, 32, 1, 1, 1, 1, 33),    # 1x1, a row wider than a tile, prime-ish width
    (16, 15, 32, 3, 2, 1, 1, 15),    # stride 2, odd width
    (8, 14, 16, 3, 1, 1, 2, 14),     # dilation 2
    (8, 16, 16, 5, 3, 1, 1, 16),     # stride 3, 5x5
    (32, 14, 32, 3, 1, 32, 1, 14),   # depthwise
    (48, 21, 48, 3, 2, 48, 1, 21),   # depthwise, stride 2, odd width
    (40, 20, 40, 5, 2, 40, 1, 20),   # depthwise, 8-channel blocks, 5x5 stride 2
    (16, 11, 16, 3, 1, 16, 2, 13),   # depthwise, dilation 2, non-square
])
def test_blocked_conv_geometries_match_reference(channels, size, filters, kernel, stride,
                                                 group, dilation, width):
    model = _conv_model(channels, size, filters, kernel, stride, group, dilation=dilation,
                        width=width)
    _compile_blocked_and_check(model, _feeds(model))


#: dense geometries whose tiles have tails on both ISAs: odd widths (7, 13), 14 and 56,
#: strides 2, padded and unpadded 1x1, odd output block counts (24 channels: 3 blocks of
#: 8; 144: 9 blocks of 16, tiles of three blocks)
DENSE_TILE_GEOMETRIES = [
    # channels, size, filters, kernel, stride, pad, epilogue
    (32, 7, 64, 3, 1, 1, ("relu",)),
    (16, 13, 32, 3, 1, 1, ("residual", "relu")),
    (32, 14, 48, 1, 1, 0, ("clip",)),
    (16, 56, 32, 1, 1, 0, ()),
    (48, 14, 24, 1, 1, 0, ("residual",)),
    (24, 14, 32, 1, 2, 0, ()),
    (16, 13, 32, 1, 1, 1, ("relu",)),
    (16, 12, 32, 3, 1, 1, ("residual", "relu")),  # AVX2: two tiles of 6 columns
    # 1x1 tiles of several blocks over few columns (pointwise_conv_tile on AVX-512):
    # 20 blocks in fives over 4 columns (a tail of 3) with the reduction chunked; 4
    # blocks over 5, 5 and 3 of 13 columns; 6 blocks in threes at stride 2; 60 blocks
    # in threes, not chunked; one block over a row of 41 in 21 and 20 columns
    (160, 7, 320, 1, 1, 0, ("relu",)),
    (64, 13, 64, 1, 1, 0, ("clip",)),
    (96, 14, 96, 1, 2, 0, ("residual",)),
    (160, 7, 960, 1, 1, 0, ("clip",)),
    (32, 41, 16, 1, 1, 0, ("relu",)),
    (32, 15, 32, 3, 2, 1, ("relu",)),
    (16, 56, 24, 3, 1, 1, ()),
    (16, 14, 144, 1, 1, 0, ("clip",)),
    (144, 13, 24, 1, 1, 0, ("relu",)),
    # NCHW inputs of few channels read in place (blocks of one channel): MobileNetV2's
    # stem at an odd size, a grayscale 1x1 and a 4-channel 3x3
    (3, 29, 32, 3, 2, 1, ("clip",)),
    (1, 15, 16, 1, 1, 0, ("relu",)),
    (4, 13, 48, 3, 1, 1, ("residual",)),
]


@pytest.mark.parametrize("cpu", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
@pytest.mark.parametrize("channels,size,filters,kernel,stride,pad,epilogue",
                         DENSE_TILE_GEOMETRIES)
def test_dense_blocked_tiles_match_onnxruntime_on_each_isa(cpu, channels, size, filters,
                                                           kernel, stride, pad, epilogue):
    """The default dense tiles of each CPU description (AVX2's one two-vector block of 6
    columns, AVX-512's two blocks of up to 8, with their tail tiles) against ORT."""
    model = _conv_model(channels, size, filters, kernel, stride, 1, pad=pad,
                        epilogue=epilogue)
    feeds = _feeds(model)
    compiled = heterocc.compile(model, target=[LLVMTarget(cpu=cpu)])
    assert compiled.graph.op_counts().get("ConvNCHWc")
    assert compiled.fallbacks == {}
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for ours, theirs in zip(compiled.run(feeds), session.run(None, feeds)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pads", [[0, 1, 1, 0], [2, 0, 0, 2]])
@pytest.mark.parametrize("group", [1, 16])
def test_blocked_conv_asymmetric_padding(pads, group):
    model = _conv_model(16, 11, 16, 3, 2, group, pad=pads, width=14, epilogue=("relu",))
    _compile_blocked_and_check(model, _feeds(model))


@pytest.mark.parametrize("epilogue", [(), ("relu",), ("clip",), ("residual", "relu"),
                                      ("scale", "clip")])
@pytest.mark.parametrize("group", [1, 16])
def test_blocked_epilogues_fuse_and_match_reference(epilogue, group):
    model = _conv_model(16, 14, 16, 3, 1, group, epilogue=epilogue)
    compiled = _compile_blocked_and_check(model, _feeds(model))
    (function,) = [f for f in fused_functions(compiled.graph)
                   if f.body.nodes[0].op == "ConvNCHWc"]
    assert [n.op for n in function.body.nodes][1:] == [
        {"relu": "Relu", "clip": "Clip", "residual": "Add", "scale": "Mul"}[op]
        for op in epilogue]


def _blocked_conv_stages(group, epilogue):
    x = te.placeholder((1, 1, 10, 14, 16), "float32", "x")
    w = te.placeholder((1, 1, 3, 3, 1 if group > 1 else 16, 16), "float32", "w")
    b = te.placeholder((1, 16), "float32", "b")
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": group}
    out_type = TensorType((1, 1, 10, 14, 16), "float32")
    (y,) = compute_of("ConvNCHWc")([x, w, b], attrs, [out_type])
    if epilogue:
        (y,) = compute_of("Relu")([y], {}, [out_type])
    return [x, w, b], y


@pytest.mark.parametrize("group", [1, 16])
@pytest.mark.parametrize("epilogue", [False, True])
def test_blocked_schedule_computes_the_epilogue_in_its_tiles(group, epilogue):
    """The function's output is written once, by the tile loop; the sums stay local."""
    params, y = _blocked_conv_stages(group, epilogue)
    schedule = _schedule(ExpressedFunction(params, [], [y]), active_cpu())
    prim = te.lower(schedule, [*params, y], name="blocked")
    text = str(prim)
    # a depthwise kernel this small runs in the calling thread (not worth the pool)
    assert ("parallel" in text) == (group == 1) and "ramp" in text
    assert text.count("in 'local'") >= 1
    module = build([prim], name="blocked")
    arrays = [RNG.standard_normal(p.shape, dtype=np.float32) for p in params]
    out = np.empty(y.shape, np.float32)
    module["blocked"](*arrays, out)
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": group}
    expected = get_op("ConvNCHWc").run(arrays, attrs)[0]
    if epilogue:
        expected = np.maximum(expected, 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("columns", [1, 5, 7, 16])
def test_explicit_tile_widths_give_the_same_result(columns):
    params, y = _blocked_conv_stages(1, True)
    schedule = te.create_schedule(y)
    stages = {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}
    schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], y, [stages["conv_bias"]],
                          BlockedConvTiles(columns=columns), cpu=active_cpu())
    prim = te.lower(schedule, [*params, y], name=f"tile{columns}")
    module = build([prim], name=f"tile{columns}")
    arrays = [RNG.standard_normal(p.shape, dtype=np.float32) for p in params]
    out = np.empty(y.shape, np.float32)
    module[f"tile{columns}"](*arrays, out)
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}
    expected = np.maximum(get_op("ConvNCHWc").run(arrays, attrs)[0], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("unroll,kernel_outer", [(None, False), (1, False), (2, True),
                                                 (8, False), (16, True), (64, False)])
def test_in_block_unroll_factors_give_the_same_result(unroll, kernel_outer):
    """The in-block reduction unrolled whole (None, or more than the block), not at all
    (1), or in parts (its inner ``unroll`` channels), in either reduction order."""
    params, y = _blocked_conv_stages(1, True)
    schedule = te.create_schedule(y)
    stages = {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}
    schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], y, [stages["conv_bias"]],
                          BlockedConvTiles(block_unroll=unroll, kernel_outer=kernel_outer),
                          cpu=active_cpu())
    prim = te.lower(schedule, [*params, y], name="unrolled")
    text = str(prim)
    # the in-block channel loop (16) is gone where it is unrolled whole, split where not
    assert ("rci in serial(0, 16)" in text) == (unroll == 1)
    assert ("rci.outer in serial(0, 8)" in text) == (unroll == 2)
    module = build([prim], name="unrolled")
    arrays = [RNG.standard_normal(p.shape, dtype=np.float32) for p in params]
    out = np.empty(y.shape, np.float32)
    module["unrolled"](*arrays, out)
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}
    expected = np.maximum(get_op("ConvNCHWc").run(arrays, attrs)[0], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_an_unroll_factor_must_divide_the_block():
    params, y = _blocked_conv_stages(1, True)
    schedule = te.create_schedule(y)
    stages = {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}
    with pytest.raises(CompileError, match="cannot unroll its input channel blocks of 16 by 6"):
        schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], y, [stages["conv_bias"]],
                              BlockedConvTiles(block_unroll=6), cpu=active_cpu())


def _chunked_conv_stages(epilogue):
    """A 3x3 conv of 4 input blocks to 4 output blocks over a 7x9 image (rows of one
    tile and a tail at 5 columns), with its bias and, optionally, a residual and ReLU."""
    x = te.placeholder((1, 4, 7, 9, 16), "float32", "x")
    w = te.placeholder((4, 4, 3, 3, 16, 16), "float32", "w")
    b = te.placeholder((4, 16), "float32", "b")
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}
    out_type = TensorType((1, 4, 7, 9, 16), "float32")
    (y,) = compute_of("ConvNCHWc")([x, w, b], attrs, [out_type])
    params = [x, w, b]
    if epilogue:
        r = te.placeholder(out_type.shape, "float32", "r")
        (y,) = compute_of("Add")([y, r], {}, [out_type])
        (y,) = compute_of("Relu")([y], {}, [out_type])
        params.append(r)
    return params, y, attrs


@pytest.mark.parametrize("cpu", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
@pytest.mark.parametrize("chunk,columns,epilogue", [(0, None, True), (1, None, True),
                                                    (2, 5, False), (1, 5, True),
                                                    (4, None, False)])
def test_reduction_chunks_give_the_same_result(cpu, chunk, columns, epilogue):
    """The reduction run in chunks of input blocks over the whole image (partial sums in
    the output buffer, the bias, residual and ReLU after the last chunk) matches NumPy,
    with and without tail tiles, on each ISA; a chunk of every block is one chunk."""
    prim = _check_chunked(epilogue, BlockedConvTiles(columns=columns, reduction_blocks=chunk),
                          parse_cpu(cpu))
    # chunked: the partial sums span all rows, the rows run inside the chunk loop (0, no
    # whole-image chunks, leaves the rows' default chunks, tested below)
    if chunk:
        assert ("rco.outer in serial(0, " in str(prim)) == (chunk != 4)


@pytest.mark.parametrize("tiles,message", [
    (BlockedConvTiles(reduction_blocks=3), "reduction chunks of 3 input channel blocks do "
                                           "not divide 4"),
    (BlockedConvTiles(reduction_blocks=2, kernel_outer=True), "cannot chunk its input"),
])
def test_a_reduction_chunk_must_divide_the_blocks_and_lead_the_reduction(tiles, message):
    params, y, _ = _chunked_conv_stages(False)
    schedule = te.create_schedule(y)
    stages = {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}
    with pytest.raises(CompileError, match=message):
        schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], None, (), tiles, cpu=active_cpu())


def _described(target, l1d, cores=2):
    return dataclasses.replace(parse_cpu(target), l1d=l1d, num_cores=cores)


@pytest.mark.parametrize("out_shape,reduction,blocks,cpu,chunk", [
    # ResNet-18's 512-channel 3x3 at 7x7, two blocks of 16 per tile: 18 KiB of weights
    # per input block, a chunk of one in a 48 KiB L1, the 6 KiB of sums beside it
    ((1, 32, 7, 7, 16), (32, 3, 3, 16), 2, _described("llvm -mcpu=skylake-avx512", 48 << 10),
     1),
    # ... not with a 32 KiB L1: one input block's weights exceed half of it, no chunk
    # keeps them there
    ((1, 32, 7, 7, 16), (32, 3, 3, 16), 2, _described("llvm -mcpu=skylake-avx512", 32 << 10),
     0),
    # AVX2's one 16-float block per tile at 7x7 with a 32 KiB L1: 9 KiB, one to a chunk
    ((1, 32, 7, 7, 16), (32, 3, 3, 16), 1, _described("llvm -mcpu=haswell", 32 << 10), 1),
    # 14x14: 25 KiB of sums fit beside one chunk in 48 KiB, not in 32
    ((1, 16, 14, 14, 16), (16, 3, 3, 16), 2, _described("llvm -mcpu=skylake-avx512", 48 << 10),
     1),
    ((1, 16, 14, 14, 16), (16, 3, 3, 16), 2, _described("llvm -mcpu=skylake-avx512", 32 << 10),
     0),
    # 28x28: the sums alone take 100 KiB
    ((1, 8, 28, 28, 16), (8, 3, 3, 16), 2, _described("llvm -mcpu=skylake-avx512", 48 << 10),
     0),
    # AVX2's one 16-float block per tile: 9 KiB per input block, two to a chunk
    ((1, 32, 7, 7, 16), (32, 3, 3, 16), 1, _described("llvm -mcpu=haswell", 48 << 10), 2),
    # a 1x1 conv: 2 KiB per input block, the most that fill half the L1 and divide 60
    ((1, 10, 7, 7, 16), (60, 1, 1, 16), 2, _described("llvm -mcpu=skylake-avx512", 48 << 10),
     12),
    ((1, 10, 7, 7, 16), (60, 1, 1, 16), 2, _described("llvm -mcpu=skylake-avx512", 40 << 10),
     10),
    # the whole reduction fits half the L1: nothing to chunk
    ((1, 4, 7, 7, 16), (1, 3, 3, 16), 2, _described("llvm -mcpu=skylake-avx512", 48 << 10), 0),
    # three blocks of a 1x1 conv over 160 channels: 30 KiB of weights exceed half a
    # 48 KiB L1 but stay there beside a row's 4 KiB of input; not beside it in 32 KiB
    ((1, 60, 7, 7, 16), (10, 1, 1, 16), 3, _described("llvm -mcpu=skylake-avx512", 48 << 10),
     0),
    ((1, 60, 7, 7, 16), (10, 1, 1, 16), 3, _described("llvm -mcpu=skylake-avx512", 32 << 10),
     5),
    # 16 channel-block pairs cannot keep 32 cores busy
    ((1, 32, 7, 7, 16), (32, 3, 3, 16), 2,
     _described("llvm -mcpu=skylake-avx512", 48 << 10, cores=32), 0),
])
def test_default_reduction_chunks_follow_the_l1_and_the_cores(out_shape, reduction, blocks,
                                                              cpu, chunk):
    assert dense_conv_reduction_blocks(out_shape, reduction, blocks, 4, cpu=cpu) == chunk


def _schedule_chunked(params, y, epilogue, tiles, description):
    """``y`` of :func:`_chunked_conv_stages` scheduled with ``tiles``, lowered."""
    schedule = te.create_schedule(y)
    stages = {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}
    chain = [stages["conv_bias"]] + ([stages["add"]] if epilogue else [])
    schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], y if epilogue else None,
                          chain if epilogue else (), tiles, cpu=description)
    return te.lower(schedule, [*params, y], name="chunked")


def _check_chunked(epilogue, tiles, description):
    """The convolution of :func:`_chunked_conv_stages` with ``tiles`` on ``description``
    (built and run) against NumPy; returns its TIR."""
    params, y, attrs = _chunked_conv_stages(epilogue)
    prim = _schedule_chunked(params, y, epilogue, tiles, description)
    module = build([prim], name="chunked", cpu=description)
    arrays = [RNG.standard_normal(p.shape, dtype=np.float32) for p in params]
    out = np.empty(y.shape, np.float32)
    module["chunked"](*arrays, out)
    expected = get_op("ConvNCHWc").run(arrays[:3], attrs)[0]
    if epilogue:
        expected = np.maximum(expected + arrays[3], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    return prim


@pytest.mark.parametrize("cpu", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
@pytest.mark.parametrize("chunk,columns,epilogue", [(1, None, True), (2, 5, False),
                                                    (1, 4, True), (4, None, True)])
def test_row_reduction_chunks_give_the_same_result(cpu, chunk, columns, epilogue):
    """The reduction run in chunks of input blocks inside each output row (the row's
    partial sums in a buffer, each chunk over every tile of the row, columns outside the
    channel blocks in the tile; bias, residual and ReLU after the last chunk) matches
    NumPy, with and without tail tiles, on each ISA; the rows stay parallel."""
    text = str(_check_chunked(
        epilogue, BlockedConvTiles(columns=columns, row_reduction_blocks=chunk), parse_cpu(cpu)))
    assert ("rco.outer in serial(0, " in text) == (chunk != 4)
    assert "parallel" in text.split("rco")[0]  # the rows, outside the chunks


def test_row_reduction_chunks_build_for_neon():
    """The same tiles cross-compiled for AArch64: four-lane vector multiply-adds (the
    row's partial sums live on the stack between chunks, so stack stores are expected),
    one per column and vector of the block and input channel: 5 columns x 4 vectors x
    16 channels in the unrolled block."""
    params, y, _ = _chunked_conv_stages(True)
    description = parse_cpu("llvm -mtriple=aarch64-linux-gnu")
    prim = _schedule_chunked(params, y, True,
                             BlockedConvTiles(row_reduction_blocks=2), description)
    with compiling_for(description):
        assembly = build([prim], name="chunked", cpu=description).assembly()
    assert len(re.findall(r"\bfmla\s+v\d+\.4s", assembly)) >= 5 * 4 * 16


@pytest.mark.parametrize("tiles,message", [
    (BlockedConvTiles(row_reduction_blocks=3), "row reduction chunks of 3 input channel "
                                               "blocks do not divide 4"),
    (BlockedConvTiles(row_reduction_blocks=2, reduction_blocks=2), "takes neither"),
    (BlockedConvTiles(row_reduction_blocks=2, kernel_outer=True), "takes neither"),
])
def test_a_row_reduction_chunk_must_divide_the_blocks_and_stand_alone(tiles, message):
    params, y, _ = _chunked_conv_stages(False)
    with pytest.raises(CompileError, match=message):
        _schedule_chunked(params, y, False, tiles, active_cpu())


@pytest.mark.parametrize("l1d", [32 << 10, 48 << 10])
def test_a_default_schedule_reduces_densenets_wide_1x1_per_tile(l1d):
    """With no tiles given, a 1x1 convolution whose weights overflow the L1 and whose
    output does not fit it (512 -> 64 channels at 28x28) reduces each tile at once, as
    with ``row_reduction_blocks=0`` (row-by-row chunks measured slower), and takes the
    row-by-row chunks only when the tiles ask for them: both match NumPy."""
    x = te.placeholder((1, 32, 28, 28, 16), "float32", "x")
    w = te.placeholder((4, 32, 1, 1, 16, 16), "float32", "w")
    b = te.placeholder((4, 16), "float32", "b")
    attrs = {"strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [1, 1], "group": 1}
    (y,) = compute_of("ConvNCHWc")([x, w, b], attrs,
                                   [TensorType((1, 4, 28, 28, 16), "float32")])
    description = _described("llvm", l1d)
    arrays = [RNG.standard_normal(t.shape, dtype=np.float32) for t in (x, w, b)]
    expected = get_op("ConvNCHWc").run(arrays, attrs)[0]
    texts = []
    for tiles in (BlockedConvTiles(), BlockedConvTiles(row_reduction_blocks=0),
                  BlockedConvTiles(row_reduction_blocks=4)):
        schedule = te.create_schedule(y)
        conv = next(s.tensor for s in schedule.stages if s.tensor.name == "conv_nchwc")
        schedule_conv2d_nchwc(schedule, conv, None, (), tiles, cpu=description)
        prim = te.lower(schedule, [x, w, b, y], name="wide")
        texts.append(str(prim))
        module = build([prim], name="wide", cpu=description)
        out = np.empty(y.shape, np.float32)
        module["wide"](*arrays, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    assert texts[0] == texts[1] and "rco.outer" not in texts[0] and "rco.outer" in texts[2]


AVX512 = parse_cpu("llvm -mcpu=x86-64-v4")
AVX2 = parse_cpu("llvm -mcpu=x86-64-v3")
NEON = parse_cpu("llvm -mtriple=aarch64-linux-gnu")


@pytest.mark.parametrize("cpu,blocks,width,block_bytes,tile", [
    # AVX-512, 16-float blocks (one vector), 21 accumulators: MobileNetV2's 1x1 layers
    (AVX512, 6, 14, 64, (7, 3)),     # 576->96 at 14x14: 3 blocks x 7 columns
    (AVX512, 10, 7, 64, (4, 5)),     # 960->160 at 7x7: 5 x (4, 3), not 10 x 2
    (AVX512, 20, 7, 64, (4, 5)),
    (AVX512, 4, 14, 64, (5, 4)),     # 4 x (5, 5, 4) rather than 2 x 7
    (AVX512, 2, 56, 64, (10, 2)),    # 2 x 10 ties 1 x 19 on accumulators, loads fewer
    (AVX512, 9, 56, 64, (7, 3)),
    (AVX512, 1, 112, 64, (19, 1)),   # one block: the columns that fill the share
    # AVX2 (16 registers, 10 accumulators): a 16-float block is two vectors
    (AVX2, 6, 14, 64, (5, 1)),
    (AVX2, 10, 7, 64, (4, 1)),
    (AVX2, 4, 56, 64, (6, 1)),       # 9 tiles of 6 and one of 2
    (AVX2, 4, 55, 64, (5, 1)),       # 11 of 5, not 9 of 6 and one of 1
    # ... an 8-float block one: three of them, not one over 10 columns
    (AVX2, 3, 56, 32, (3, 3)),
    # NEON's 4-float vectors: a 16-float block is four; a 4-float block one
    (NEON, 6, 14, 64, (5, 1)),
    (NEON, 24, 14, 16, (7, 3)),
])
def test_pointwise_tiles_follow_the_registers(cpu, blocks, width, block_bytes, tile):
    assert pointwise_conv_tile(blocks, width, block_bytes, cpu) == tile
    out_shape = (1, blocks, 5, width, block_bytes // 4)
    assert default_blocked_conv_tiles(out_shape, 4, cpu=cpu, windowed=False) == tile


@pytest.mark.parametrize("cpu", [AVX512, AVX2, NEON], ids=["avx512", "avx2", "neon"])
@pytest.mark.parametrize("blocks,width", [(b, w) for b in (1, 2, 3, 6, 7, 10, 12, 20, 60)
                                          for w in (1, 3, 7, 13, 14, 28, 41, 56, 112)])
def test_pointwise_tile_is_the_fullest_that_fits(cpu, blocks, width):
    """Against every (blocks, columns) that divides the blocks and keeps its
    accumulators within two thirds of the registers (one block of several vectors: all
    of them but its weights, a broadcast and a spare) and its weight vectors and a
    broadcast within the rest: none of the same class (two or more weight vectors per
    broadcast, or not) does more multiply-adds per step averaged over a row's tiles,
    and the class of two or more is taken where it has a member."""
    vectors = max(1, 64 // cpu.vector_bytes)
    columns, count = pointwise_conv_tile(blocks, width, 64, cpu)
    accumulators = cpu.vector_registers * 2 // 3

    def fits(count, columns):
        # one block of several vectors keeps one broadcast live: its accumulators, its
        # weight vectors, a broadcast and a spare register within all of them
        if count == 1 and vectors > 1:
            per_column = vectors + (cpu.arch == "aarch64")  # its inputs as one vector
            return columns * per_column + vectors + 2 <= cpu.vector_registers
        return count * vectors * columns <= accumulators

    assert blocks % count == 0 and 1 <= columns <= width
    assert count == 1 or fits(count, columns)
    assert count == 1 or count * vectors < cpu.vector_registers - accumulators

    def mean(count, columns):
        return count * vectors * width / -(-width // columns)

    legal = [(c, k) for k in range(1, blocks + 1) if blocks % k == 0
             and k * vectors < cpu.vector_registers - accumulators
             for c in range(1, width + 1) if fits(k, c)]
    paired = [(c, k) for c, k in legal if k * vectors >= 2]
    if paired:
        assert count * vectors >= 2
    rivals = paired if count * vectors >= 2 else legal
    assert mean(count, columns) == max(mean(k, c) for c, k in rivals)


def test_windowed_tiles_keep_the_paired_rule():
    """A kernel window keeps dense_conv_channel_blocks' pairs (the schedule passes
    windowed=False for 1x1 kernels only)."""
    assert default_blocked_conv_tiles((1, 6, 14, 14, 16), 4, cpu=AVX512) == (7, 2)
    assert default_blocked_conv_tiles((1, 6, 14, 14, 16), 4, cpu=AVX512, windowed=False) == (7, 3)


@pytest.mark.parametrize("width,limit,columns", [(56, 28, 28), (112, 28, 28), (28, 28, 28),
                                                 (14, 28, 14), (7, 28, 7), (112, 14, 14),
                                                 (33, 28, 28), (30, 14, 10)])
def test_tile_columns_divide_the_row_where_they_can(width, limit, columns):
    assert blocked_conv_columns(width, limit) == columns


@pytest.mark.parametrize("width,limit,columns", [(56, 8, 8), (28, 8, 7), (14, 8, 7), (7, 8, 7),
                                                 (56, 5, 5), (14, 5, 5), (7, 5, 4), (13, 8, 7),
                                                 (30, 8, 8), (3, 5, 3)])
def test_dense_tiles_are_the_fewest_that_cover_a_row(width, limit, columns):
    assert even_tiles(width, limit) == columns
    tiles = -(-width // columns)
    assert tiles == -(-width // min(width, limit)) and (tiles - 1) * columns < width


@pytest.mark.parametrize("src,dst,shape", [
    ("NCHW", "NCHW16c", (2, 32, 5, 7)), ("NCHW16c", "NCHW", (1, 2, 5, 7, 16)),
    ("NCHW", "NCHW3c", (1, 3, 9, 4)), ("NCHW16c", "NCHW8c", (1, 3, 4, 4, 16)),
    ("NCHW8c", "NCHW16c", (1, 4, 3, 5, 8))])
def test_layout_transform_kernels(src, dst, shape):
    x = RNG.standard_normal(shape, dtype=np.float32)
    attrs = {"src_layout": src, "dst_layout": dst}
    expected = get_op("LayoutTransform").run([x], attrs)[0]
    placeholder = te.placeholder(shape, "float32", "x")
    (y,) = compute_of("LayoutTransform")([placeholder], attrs,
                                         [TensorType(expected.shape, "float32")])
    schedule = _schedule(ExpressedFunction([placeholder], [], [y]), active_cpu())
    module = build([te.lower(schedule, [placeholder, y], name="transform")], name="transform")
    out = np.empty(expected.shape, np.float32)
    module["transform"](x, out)
    np.testing.assert_array_equal(out, expected)


def _check_against_ort(model, rtol=1e-3, atol=1e-3, target="llvm"):
    feeds = _feeds(model)
    compiled = heterocc.compile(model, target=target)
    assert compiled.graph.op_counts().get("ConvNCHWc")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for ours, theirs in zip(compiled.run(feeds), session.run(None, feeds)):
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)
    assert compiled.fallbacks == {}


def test_tiny_cnn_matches_onnxruntime():
    _check_against_ort(tiny_cnn(size=32))


@pytest.mark.slow  # whole networks compiled end to end
@pytest.mark.parametrize("build_model", [resnet18, mobilenet_v2])
def test_small_models_match_onnxruntime(build_model):
    _check_against_ort(build_model(size=32), rtol=1e-3, atol=5e-3)


@pytest.mark.parametrize("pool", [
    helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1]),
    helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 3], auto_pad="SAME_UPPER"),
    helper.make_node("AveragePool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("AveragePool", ["c"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                     count_include_pad=1),
])
def test_pooling_a_blocked_tensor_matches_reference(pool):
    weights = RNG.standard_normal((16, 8, 3, 3), dtype=np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4), pool],
                       [("x", "float32", [1, 8, 11, 13])], [("y", "float32", None)],
                       {"w": weights})
    compiled = _compile_blocked_and_check(model, _feeds(model))
    ops = compiled.graph.op_counts()
    assert ops["LayoutTransform"] == 2 and ops[pool.op_type] == 1


def _one_block_tile_assembly(cpu, width, columns=None, channel_blocks=None,
                             block_unroll=None):
    """A 3x3 conv of 4 blocks of 16 channels to 4 over a 7 x ``width`` image, scheduled
    with ``columns``, ``channel_blocks`` and ``block_unroll`` (None: the default tile)
    and built for ``cpu``: its assembly."""
    x = te.placeholder((1, 4, 7, width, 16), "float32", "x")
    w = te.placeholder((4, 4, 3, 3, 16, 16), "float32", "w")
    b = te.placeholder((4, 16), "float32", "b")
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}
    (y,) = compute_of("ConvNCHWc")([x, w, b], attrs,
                                   [TensorType((1, 4, 7, width, 16), "float32")])
    schedule = te.create_schedule(y)
    stages = {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}
    schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], y,  # y: the bias epilogue
                          tiles=BlockedConvTiles(columns=columns, channel_blocks=channel_blocks,
                                                 block_unroll=block_unroll), cpu=cpu)
    with compiling_for(cpu):
        return build([te.lower(schedule, [x, w, b, y], name="tile")], name="tile",
                     cpu=cpu).assembly()


#: vector reloads from the stack (a spilled register) in AVX2 and NEON assembly
_STACK_VECTORS = re.compile(r"\(%rsp\).*%ymm|\b(?:ldr|ldp)\s+q\d+.*\[sp")


@pytest.mark.parametrize("cpu,default,wider", [
    (AVX2, 6, 7),  # 12 accumulators + 2 weight vectors + a broadcast + a spare
    (NEON, 5, 6),  # 20 + 4 + a live input vector per column (fmla by element) + 2
])
def test_one_block_tiles_fill_the_registers_without_spilling(cpu, default, wider):
    """A tile of one channel block of several vectors (:func:`one_block_columns`) takes
    the most columns whose registers fit: its code keeps every vector in registers, and
    one column more spills to the stack (the register model's prediction, checked in
    the generated code, whatever machine runs the test)."""
    vectors = 64 // cpu.vector_bytes
    assert one_block_columns(vectors, cpu) == default
    assert default_blocked_conv_tiles((1, 4, 7, 2 * default, 16), 4, cpu=cpu) == (default, 1)
    fits = _one_block_tile_assembly(cpu, 2 * default)
    spills = _one_block_tile_assembly(cpu, 2 * wider, columns=wider)
    muladds = r"vfmadd\w+\s+.*%ymm" if cpu.is_x86 else r"\bfmla\s+v\d+\.4s"
    # every column and vector of the tile, every input channel of the unrolled block
    assert len(re.findall(muladds, fits)) >= default * vectors * 16
    # (LLVM's AArch64 code parks one pair of vectors on the stack outside the loop)
    assert len(_STACK_VECTORS.findall(fits)) <= 1
    assert len(_STACK_VECTORS.findall(spills)) > 16


@pytest.mark.parametrize("width,columns", [(56, 6), (55, 5), (28, 6), (27, 6), (14, 5),
                                           (7, 4), (25, 5), (43, 5), (61, 6), (6, 6)])
def test_one_block_tiles_leave_no_one_column_tail(width, columns):
    """AVX2's one-block tiles (6 columns at most) cover a row in the fewest tiles, but
    not with a last tile of one column where one column fewer takes at most one tile
    more (43 in 9 tiles of 5, not 8 of 6; 61 = 10 x 6 + 1 stays: tiles of 5 would
    take 13, not 11)."""
    assert one_block_tile_columns(width, 2, AVX2) == columns
    out_shape = (1, 4, 3, width, 16)
    assert default_blocked_conv_tiles(out_shape, 4, cpu=AVX2) == (columns, 1)
    assert default_blocked_conv_tiles(out_shape, 4, cpu=AVX2, windowed=False) == (columns, 1)


def _stem_tile_assembly(cpu, columns=None):
    """A stem's 3x3 stride-2 convolution of a 3-channel NCHW image (read in place: input
    blocks of one channel) to 32 channels, 30 output columns, scheduled with ``columns``
    (None: the default) for ``cpu``: its assembly."""
    x = te.placeholder((1, 3, 7, 60), "float32", "x")
    w = te.placeholder((2, 3, 3, 3, 1, 16), "float32", "w")
    b = te.placeholder((2, 16), "float32", "b")
    attrs = {"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 1}
    (y,) = compute_of("ConvNCHWc")([x, w, b], attrs,
                                   [TensorType((1, 2, 4, 30, 16), "float32")])
    schedule = te.create_schedule(y)
    stages = {s.tensor.name: s.tensor for s in schedule.stages if not s.is_placeholder}
    schedule_conv2d_nchwc(schedule, stages["conv_nchwc"], y,
                          tiles=BlockedConvTiles(columns=columns), cpu=cpu)
    with compiling_for(cpu):
        return build([te.lower(schedule, [x, w, b, y], name="stem")], name="stem",
                     cpu=cpu).assembly()


def test_a_stems_one_block_tile_leaves_a_register_for_shared_inputs():
    """A tile reading a one-channel input block through a window wider than its stride
    (a stem's NCHW image) keeps each broadcast live from one column's tap to its
    neighbour's: :func:`one_block_columns` leaves it a register (AVX2's 16-float
    blocks: 5 columns, not 6; NEON's four-vector blocks keep 5), and AVX2's code of
    the default tile moves fewer vectors through the stack per multiply-add than 6
    columns' does."""
    assert window_shares_inputs(1, 3, 2) and window_shares_inputs(1, 7, 2)
    assert not window_shares_inputs(1, 1, 1) and not window_shares_inputs(1, 3, 3)
    assert not window_shares_inputs(16, 3, 1)
    assert one_block_columns(2, AVX2, shared_inputs=True) == 5
    assert one_block_columns(2, AVX2) == 6
    assert one_block_columns(4, NEON, shared_inputs=True) == one_block_columns(4, NEON) == 5
    for width in (10, 112):
        assert default_blocked_conv_tiles((1, 2, 4, width, 16), 4, cpu=AVX2,
                                          shared_inputs=True) == (5, 1)
    default = _stem_tile_assembly(AVX2)
    wider = _stem_tile_assembly(AVX2, columns=6)

    def stack_moves_per_muladd(assembly):
        hot = _hot_loop(assembly)
        return (len(_STACK_VECTORS.findall(hot))
                / len(re.findall(r"vfmadd\w+\s+.*%ymm", hot)))

    assert stack_moves_per_muladd(default) < stack_moves_per_muladd(wider) / 2
    _check_against_ort(_conv_model(3, 20, 32, 3, 2), target="llvm -mattr=-avx512f")


#: an AVX-512 CPU whose LLVM scheduling model issues a step's broadcasts ahead of their
#: multiply-adds (Intel models interleave them and never spill these tiles)
ZEN4 = parse_cpu("llvm -mcpu=znver4")


def _hot_loop(assembly: str) -> str:
    """The basic block of ``assembly`` with the most multiply-adds: a tile's reduction."""
    blocks = re.split(r"\n(?=\.LBB\d+_\d+:)", assembly)
    return max(blocks, key=lambda block: len(re.findall(r"vfmadd|fmla", block)))


@pytest.mark.parametrize("cpu,columns,channel_blocks,block,unroll", [
    (ZEN4, 8, 2, 16, 8),    # AVX-512's 3x3 tiles at 56x56: 8 x 16 = 128 broadcasts > 96
    (ZEN4, 7, 2, 16, 8),    # at 28x28, 14x14, 7x7
    (ZEN4, 10, 2, 16, 8),   # a 1x1 tile at 56x56
    (ZEN4, 6, 4, 16, 16),   # 96 broadcasts: the whole block
    (ZEN4, 4, 4, 16, 16),
    (ZEN4, 28, 1, 16, 16),  # one channel block: each broadcast folds into its multiply-add
    (AVX2, 6, 1, 16, 16),   # one two-vector block: each broadcast used by both at once
    (AVX2, 3, 3, 8, 8),     # 8-float blocks on MobileNetV2's 24 channels: 24 <= 48
    (AVX2, 10, 2, 8, 4),    # 80 > 48
])
def test_default_block_unroll_bounds_a_steps_broadcasts(cpu, columns, channel_blocks, block,
                                                         unroll):
    assert default_block_unroll(columns, channel_blocks, block, cpu) == unroll


def test_several_block_tiles_unroll_no_more_broadcasts_than_the_registers_take():
    """A tile of two one-vector channel blocks by 8 columns (AVX-512's default 3x3 tile
    of a 56-wide row) unrolls 8 channels of its 16-channel input blocks per step: its
    reduction loop keeps every vector in registers, where the whole block unrolled
    (128 broadcasts a step) reloads vectors from the stack on every step (LLVM's znver4
    scheduling model; generated code, whatever machine runs the test)."""
    assert default_blocked_conv_tiles((1, 4, 56, 56, 16), 4, cpu=ZEN4) == (8, 2)
    default = _hot_loop(_one_block_tile_assembly(ZEN4, 56))
    whole = _hot_loop(_one_block_tile_assembly(ZEN4, 56, 8, 2, block_unroll=16))
    stack = r"\(%rsp\)"
    assert len(re.findall(r"vfmadd\w+\s+.*%zmm", default)) == 8 * 2 * 8
    assert len(re.findall(stack, default)) <= 4  # the loop's own counters, no vectors
    assert not re.findall(r"\(%rsp\).*%zmm|%zmm.*\(%rsp\)", default)
    assert len(re.findall(r"\(%rsp\).*%zmm|%zmm.*\(%rsp\)", whole)) > 32
