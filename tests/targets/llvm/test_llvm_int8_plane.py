"""Integer depthwise convolutions whose window is the whole image (the integer global
pools of ``integer_global_average_pools``): each channel's plane one flat dot product
(``targets/llvm/schedules/int8_depthwise_plane.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.schedules.int8_conv import schedule_int8_conv_result
from heterocc.targets.llvm.schedules.int8_depthwise import (
    WEIGHT_PLANE,
    depthwise_weight_packing,
    int8_depthwise_conv,
    pack_depthwise_weight_array,
    schedule_int8_depthwise,
)
from heterocc.targets.llvm.schedules.int8_depthwise_plane import (
    INT8_PLANE,
    pack_weight_plane_array,
    plane_applies,
    weight_plane_shape,
)
from heterocc.targets.llvm.schedules.int8_depthwise_quads import (
    IN_BLOCKS,
    attach_copies_in_blocks,
)
from heterocc.te.schedule_reads import reads_of
from heterocc.tir.stmt import For, ForKind
from heterocc.tir.visitor import collect

HOST = "llvm"  # runs the code where the host has the dot product (AVX-512 VNNI here)
VNNI = "llvm -mcpu=sapphirerapids -mattr=-amx-tile"  # AVX-512 VNNI: 16 int32 lanes
AVX_VNNI = "llvm -mcpu=sapphirerapids -mattr=-avx512f,-amx-tile"  # AVX-VNNI: 8 lanes
NEON = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"  # sdot


def _host_runs(cpu) -> bool:
    host = hllvm.module.host().description
    return cpu.arch == host.arch and cpu.features <= host.features


def _whole_image(shape) -> dict:
    return {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1),
            "group": shape[1]}


def _sums(out: te.Tensor) -> te.Tensor:
    return next(t for t in reads_of(out.op.body) if "int8_rows" in t.op.attrs)


def _build(target: str, shape, dtype: str, constant: bool):
    """The whole-image depthwise kernel of ``shape`` data scheduled as a model's is (the
    copy made per task): ``(module, lowered function, sums, cpu)``."""
    cpu = parse_cpu(target)
    channels, kernel = shape[1], tuple(shape[2:])
    attrs = _whole_image(shape)
    x = te.placeholder(shape, dtype, "x")
    w = te.placeholder((channels, 1, *kernel), "int8", "w")
    zero = te.placeholder((1,), dtype, "zero")
    packed = None
    if constant:
        packed_shape, packed_dtype, packing = depthwise_weight_packing(
            w.shape, attrs, cpu, shape)
        assert packing == WEIGHT_PLANE
        packed = te.placeholder(packed_shape, packed_dtype, "w.packed")
    out = int8_depthwise_conv(x, w, zero, attrs, cpu, packed_weight=packed)
    sums = _sums(out)
    schedule = te.create_schedule(out)
    schedule_int8_depthwise(schedule, sums, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    attach_copies_in_blocks(schedule, out, schedule[out], schedule[out].leaf_iter_vars[0])
    func = te.lower(schedule, [x, packed if constant else w, zero, out], name="plane")
    return hllvm.build(func, cpu=cpu), func, sums, cpu


@pytest.mark.parametrize("target", [HOST, VNNI, AVX_VNNI, NEON],
                         ids=["host", "vnni", "avx-vnni", "neon"])
@pytest.mark.parametrize("shape", [(1, 16, 7, 7), (2, 24, 28, 28), (1, 8, 5, 13),
                                   (1, 32, 14, 14)],
                         ids=["7x7", "28x28-batch2", "5x13", "14x14"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("constant", [True, False], ids=["packed", "runtime-weight"])
def test_a_whole_image_window_is_one_flat_dot_product_per_vector(target, shape, dtype,
                                                                 constant):
    """A depthwise convolution whose kernel is the image takes the plane path: sums of
    ``lanes`` partial sums a channel (``int8_plane``), each instruction a dot product of
    two whole vectors of bytes (no window shuffle), one parallel loop with the copy made
    in it; bit-exact against int64 sums (extreme bytes, the zero point at both ends)
    where the host runs the code."""
    cpu = parse_cpu(target)
    if not plane_applies(shape, (shape[1], 1, *shape[2:]), _whole_image(shape), cpu):
        pytest.skip(f"{target}: no one-instruction 8-bit dot product on this host")
    module, func, sums, cpu = _build(target, shape, dtype, constant)
    assert sums.op.attrs.get(INT8_PLANE)
    lanes = cpu.vector_lanes("int32")
    assert tuple(sums.shape) == (shape[0], shape[1], 1, lanes)
    data = reads_of(sums.op.body)[0]
    assert data.op.attrs.get(IN_BLOCKS)
    loops = collect(func.body, lambda n: isinstance(n, For))
    parallel = [loop for loop in loops if loop.kind == ForKind.PARALLEL]
    tasks = shape[0] * shape[1] // sums.op.attrs["int8_depthwise"].channels
    if constant:  # a weight known at run time is made at root, in parallel, beforehand
        assert len(parallel) == (tasks > 1)  # a loop of one task is no loop
        for loop in parallel:
            assert len(collect(loop.body, lambda n: isinstance(n, For))) == len(loops) - 1
    ir = module.ir
    if cpu.arch == "aarch64":
        assert "sdot" in module.assembly()
    else:
        assert "vpdpbusd" in ir
    assert "shufflevector" not in "\n".join(  # the window form's byte shuffle is gone
        line for line in ir.splitlines() if "vpdpbusd" in line or "sdot" in line)
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(sum(shape))
    info = np.iinfo(dtype)
    xs = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    xs[0, 0] = info.max
    xs[-1, -1] = info.min
    ws = rng.integers(-128, 128, (shape[1], 1, *shape[2:])).astype(np.int8)
    ws[0] = -128
    ws[-1] = 127
    for z in (info.min, info.max, 3):
        got = np.zeros((shape[0], shape[1], 1, 1), np.int32)
        weight = pack_depthwise_weight_array(ws, WEIGHT_PLANE, lanes) if constant else ws
        module["plane"](xs, weight, np.array([z], dtype), got)
        expected = np.einsum("nchw,chw->nc", xs.astype(np.int64) - z,
                             ws[:, 0].astype(np.int64))[:, :, None, None]
        np.testing.assert_array_equal(got, expected)


def test_only_a_whole_unpadded_window_on_a_one_instruction_dot_product_takes_the_plane():
    """The plane path needs the window to be the image (no padding, no dilation) and the
    CPU's 8-bit dot product as one instruction (AVX2's stand-ins keep the other paths)."""
    vnni = parse_cpu(VNNI)
    shape = (1, 16, 7, 7)
    w_shape = (16, 1, 7, 7)
    assert plane_applies(shape, w_shape, _whole_image(shape), vnni)
    assert plane_applies(shape, w_shape, _whole_image(shape), parse_cpu(NEON))
    assert not plane_applies(shape, w_shape, _whole_image(shape),
                             parse_cpu("llvm -mcpu=haswell"))
    assert not plane_applies(shape, (16, 1, 3, 3), _whole_image(shape), vnni)
    assert not plane_applies((1, 16, 5, 5), w_shape, {**_whole_image(shape),
                                                      "pads": (1, 1, 1, 1)}, vnni)
    assert not plane_applies(shape, w_shape, {**_whole_image(shape), "dilations": (2, 2)},
                             vnni)
    assert not plane_applies(None, w_shape, _whole_image(shape), vnni)  # data unknown


@pytest.mark.parametrize("lanes", [16, 8, 4])
def test_the_flat_weight_holds_the_taps_then_zeros_then_the_sum(lanes):
    """``pack_weight_plane_array``: each channel's taps row after row, zeros to whole
    vectors of ``4 * lanes`` bytes, then one group of four bytes holding its int32 weight
    sum (lowest byte first); the shape ``weight_plane_shape`` says."""
    rng = np.random.default_rng(lanes)
    w = rng.integers(-128, 128, (5, 1, 7, 9)).astype(np.int8)
    w[2] = -128  # a sum of -8064
    packed = pack_weight_plane_array(w, lanes)
    cpu = {16: VNNI, 8: AVX_VNNI, 4: NEON}[lanes]
    assert packed.shape == weight_plane_shape(w.shape, parse_cpu(cpu))
    taps = 7 * 9
    flat = packed.reshape(5, -1)
    groups = packed.shape[1] - 1
    assert groups * 4 % (4 * lanes) == 0 and groups * 4 >= taps > groups * 4 - 4 * lanes
    np.testing.assert_array_equal(flat[:, :taps], w.reshape(5, -1))
    assert not flat[:, taps:groups * 4].any()
    sums = flat[:, groups * 4:].copy().view("<i4")[:, 0]
    np.testing.assert_array_equal(sums, w.reshape(5, -1).astype(np.int64).sum(axis=1))
