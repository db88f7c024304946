"""Copies that permute or cut outer axes (ShuffleNet's channel shuffle and split, a
transformer's head transpose) run as rows of their contiguous innermost axes
(:mod:`heterocc.targets.llvm.schedules.contiguous`): which axes each CPU's vectors take,
the loads the rows read, and results as ONNX Runtime's on AVX-512, AVX2 and NEON code."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime
import pytest
from onnx import helper

import heterocc
from heterocc.compute.registry import compute_of
from heterocc.ir.types import TensorType
from heterocc.sdk import te
from heterocc.sdk.te_target import schedule_by_rules
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.rules import cpu_rules
from heterocc.targets.llvm.schedules import (
    contiguous_reduction_block,
    contiguous_suffix,
    injective_rows,
    lanes_of_kept_axes,
    reduction_blocks,
)
from heterocc.tir.printer import func_to_str
from tests.compute.test_elementwise import random_array
from tests.conftest import make_model

ISAS = pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"],
                               ids=["host", "avx2"])
AVX512 = parse_cpu("llvm -mcpu=skylake-avx512")
AVX2 = parse_cpu("llvm -mcpu=haswell")
NEON = parse_cpu("llvm -mtriple=aarch64-linux-gnu")


def _shuffle_model(channels: int, size: int):
    """ShuffleNetV2's unit without its branch: the first half of ``x`` (Slice)
    concatenated with ``b``, then shuffled (Reshape, Transpose, Reshape)."""
    half = channels // 2
    inits = {"s": np.array([0], np.int64), "e": np.array([half], np.int64),
             "ax": np.array([1], np.int64),
             "g": np.array([1, 2, half, size, size], np.int64),
             "flat": np.array([1, channels, size, size], np.int64)}
    nodes = [helper.make_node("Slice", ["x", "s", "e", "ax"], ["x1"]),
             helper.make_node("Concat", ["x1", "b"], ["c"], axis=1),
             helper.make_node("Reshape", ["c", "g"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "flat"], ["y"])]
    return make_model(nodes, [("x", "float32", [1, channels, size, size]),
                              ("b", "float32", [1, half, size, size])],
                      [("y", "float32", None)], inits)


def _shuffle_stages(channels: int, size: int):
    """The shuffle's TE stages (Concat, Reshape, Transpose, Reshape) of two inputs:
    ``(output, a, b)``."""
    half = channels // 2
    a, b = (te.placeholder((1, half, size, size), "float32", n) for n in "ab")

    def op(name, inputs, shape, **attrs):
        return compute_of(name)(inputs, attrs, [TensorType(shape, "float32")])[0]

    c = op("Concat", [a, b], (1, channels, size, size), axis=1)
    r = op("Reshape", [c], (1, 2, half, size, size))
    t = op("Transpose", [r], (1, half, 2, size, size), perm=[0, 2, 1, 3, 4])
    return op("Reshape", [t], (1, channels, size, size)), a, b


def _shuffle_compute(channels: int, size: int) -> te.Tensor:
    return _shuffle_stages(channels, size)[0]


def _scheduled(out: te.Tensor, cpu) -> te.Schedule:
    return schedule_by_rules([out], cpu_rules(cpu))


def _relu(t):
    return te.compute(t.shape, lambda *i: te.maximum(t[i], te.const(0.0, "float32")),
                      name="relu", dtype="float32")


def test_a_shuffle_keeps_its_images_contiguous():
    out = _shuffle_compute(8, 6)
    assert contiguous_suffix(_scheduled(out, AVX512), out) == 2  # rows of 6 x 6


def test_elementwise_follows_every_axis():
    out = _relu(te.placeholder((1, 4, 5, 5), "float32", "x"))
    schedule = _scheduled(out, AVX512)
    assert contiguous_suffix(schedule, out) == 4
    assert injective_rows(schedule, out, AVX512) == 0  # one flat loop


def test_a_transpose_of_the_last_axis_is_not_contiguous():
    x = te.placeholder((3, 8, 20), "float32", "x")
    out = compute_of("Transpose")([x], {"perm": [0, 2, 1]},
                                  [TensorType((3, 20, 8), "float32")])[0]
    schedule = _scheduled(out, AVX512)
    assert contiguous_suffix(schedule, out) == 0
    assert injective_rows(schedule, out, AVX512) == 1  # gathered rows, no divisions


def test_a_head_transpose_keeps_each_head_vector():
    x = te.placeholder((1, 10, 4, 32), "float32", "x")
    out = compute_of("Transpose")([x], {"perm": [0, 2, 1, 3]},
                                  [TensorType((1, 4, 10, 32), "float32")])[0]
    assert contiguous_suffix(_scheduled(out, AVX512), out) == 1


@pytest.mark.parametrize("cpu, expected", [(AVX512, 0), (AVX2, 2), (NEON, 2)],
                         ids=["avx512", "avx2", "neon"])
def test_rows_need_a_vector_of_the_cpu(cpu, expected):
    """3 x 3 images: shorter than AVX-512's 16 lanes (one flat loop), a row of at
    least one vector for AVX2's 8 and NEON's 4."""
    out = _shuffle_compute(8, 3)
    assert injective_rows(_scheduled(out, cpu), out, cpu) == expected


def test_the_rows_read_contiguous_vectors():
    out, a, b = _shuffle_stages(16, 8)
    text = func_to_str(te.lower(_scheduled(out, AVX512), [a, b, out], name="shuffle"))
    assert "for i1 in serial(0, 16)" in text  # one row per output channel (too small
    # to be worth the thread pool)
    assert "a[ramp(" in text and "b[ramp(" in text  # vectors, not gathers
    assert "% 8" not in text  # no lane's coordinates recovered by division


@ISAS
@pytest.mark.parametrize("channels, size", [(16, 8), (24, 7), (116, 6)])
def test_shuffle_matches_onnxruntime(target, channels, size, rng):
    model = _shuffle_model(channels, size)
    x = random_array(rng, (1, channels, size, size), "float32")
    b = random_array(rng, (1, channels // 2, size, size), "float32")
    got = heterocc.compile(model, target=target).run([x, b])[0]
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, session.run(None, {"x": x, "b": b})[0])


def test_shuffle_builds_for_neon():
    compiled = heterocc.compile(_shuffle_model(16, 8), target="llvm -mtriple=aarch64-linux-gnu")
    assert compiled.build_static() is not None


def _channels_last_norm(blocks: int, block: int, size: int):
    """ConvNeXt's LayerNorm as alter_layout gives it: an ``NCHW{block}c`` tensor moved
    to channels last with its blocks kept innermost (Transpose, Reshape), normalized
    over the channels. ``(output, [inputs])``."""
    channels = blocks * block
    x = te.placeholder((1, blocks, size, size, block), "float32", "x")
    g, beta = (te.placeholder((channels,), "float32", n) for n in ("g", "beta"))

    def op(name, inputs, shape, **attrs):
        return compute_of(name)(inputs, attrs, [TensorType(shape, "float32")])[0]

    t = op("Transpose", [x], (1, size, size, blocks, block), perm=[0, 2, 3, 1, 4])
    r = op("Reshape", [t], (1, size, size, channels))
    y = op("LayerNormalization", [r, g, beta], (1, size, size, channels), axis=-1,
           epsilon=1e-6, stash_type=1)
    return y, [x, g, beta]


@pytest.mark.parametrize("cpu", [AVX512, AVX2, NEON], ids=["avx512", "avx2", "neon"])
def test_channels_last_statistics_reduce_blocks_into_vector_partials(cpu):
    """The LayerNorm's sums over 48 channels read in blocks of 16 (whole vectors on
    every ISA) accumulate one vector partial per block lane over the 3 blocks, then
    reduce the 16 partials once per pixel: no division left, no scalar read of the
    input."""
    out, inputs = _channels_last_norm(3, 16, 5)
    schedule = _scheduled(out, cpu)
    sums = [s for s in schedule.stages if s.reduce_axis and not s.name.endswith(".rf")]
    assert len(sums) == 2  # the mean's and the variance's
    text = func_to_str(te.lower(schedule, [*inputs, out], name="norm"))
    for name in ("layernorm_sum", "layernorm_var"):
        assert f"{name}.rf[ramp(" in text  # vector accumulators
        assert f"allocate {name}.rf: float32[1, 1, 1, 1, 16]" in text  # one pixel's
    assert text.count("r3.outer in serial(0, 3)") == 2
    assert not re.search(r"r3[.\w]* (//|%)", text)  # no channel recovered by division


def test_blocks_narrower_than_a_vector_are_split():
    """Blocks of 8 on AVX-512 (16 lanes) are no whole vector: the axis is split by
    them, its inner loop reading 8 contiguous channels."""
    out, inputs = _channels_last_norm(3, 8, 5)
    schedule = _scheduled(out, AVX512)
    sums = [s for s in schedule.stages if s.reduce_axis]
    assert all(reduction_blocks(schedule, s.tensor) == [8] for s in sums)
    text = func_to_str(te.lower(schedule, [*inputs, out], name="norm"))
    assert text.count("r3.inner in serial(0, 8)") == 2 and ".rf" not in text
    assert not re.search(r"r3[.\w]* (//|%)", text)


def test_a_reduction_read_unblocked_is_not_split():
    x = te.placeholder((4, 48), "float32", "x")
    out = compute_of("ReduceSum")([x], {"axes": [1], "keepdims": 1},
                                  [TensorType((4, 1), "float32")])[0]
    schedule = _scheduled(out, AVX512)
    assert reduction_blocks(schedule, out) == [1]


def _row_sum(columns: int, *strides: int):
    """``sum_r (x0[i, r * strides[0]] + x1[i, r * strides[1]] + ...)`` over 4 rows: each
    input read contiguously along the reduction (stride 1) or a gather per lane."""
    inputs = [te.placeholder((4, columns * stride), "float32", f"x{k}")
              for k, stride in enumerate(strides)]
    r = te.reduce_axis(columns, "r")
    out = te.compute((4,), lambda i: te.sum(
        sum((x[i, r * stride] for x, stride in zip(inputs[1:], strides[1:])),
            inputs[0][i, r * strides[0]]), axis=r), name="row_sum", dtype="float32")
    return out, inputs


@pytest.mark.parametrize("cpu", [AVX512, AVX2, NEON], ids=["avx512", "avx2", "neon"])
def test_a_reduction_read_contiguously_sums_a_partial_per_lane(cpu):
    """A last reduction axis that most of its reads follow element by element (here two
    of three) is summed into a vector partial per lane, in the order the partials fix
    (no float sum left for LLVM to reassociate or keep scalar): the sums of 48 values
    a row, as NumPy's to float rounding."""
    out, inputs = _row_sum(48, 1, 3, 1)
    lanes = cpu.vector_lanes("float32")
    assert contiguous_reduction_block(te.create_schedule(out), out, cpu) == lanes
    func = te.lower(_scheduled(out, cpu), [*inputs, out], name="row_sum")
    assert f"allocate row_sum.rf: float32[1, {lanes}]" in func_to_str(func)
    if cpu is not AVX512 or "avx512f" not in parse_cpu("llvm").features:
        return
    module = build(func, name="row_sum", cpu=cpu)
    xs = [np.random.default_rng(k).standard_normal(t.shape).astype(np.float32)
          for k, t in enumerate(inputs)]
    got = np.zeros(4, np.float32)
    module["row_sum"](*xs, got)
    expected = xs[0].sum(axis=1) + xs[1][:, ::3].sum(axis=1) + xs[2].sum(axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("columns,strides", [(48, (3, 3, 1)), (24, (1,)), (40, (1,))],
                         ids=["mostly-gathered", "one-vector-and-a-half", "no-whole-vectors"])
def test_a_reduction_read_mostly_across_or_short_keeps_its_loop(columns, strides):
    """Reads that mostly gather along the reduction (two of three), or an axis of fewer
    than two whole vectors or not whole vectors, keep the reduction's own loop."""
    out, inputs = _row_sum(columns, *strides)
    assert contiguous_reduction_block(te.create_schedule(out), out, AVX512) == 1
    text = func_to_str(te.lower(_scheduled(out, AVX512), [*inputs, out], name="row_sum"))
    assert ".rf" not in text


@pytest.mark.parametrize("cpu", [AVX512, AVX2, NEON], ids=["avx512", "avx2", "neon"])
def test_channels_last_statistics_sum_vectors(cpu):
    """The partials are summed with vector adds, where the divided indices kept the
    sums scalar (and LLVM gathered across pixels)."""
    out, inputs = _channels_last_norm(3, 16, 5)
    func = te.lower(_scheduled(out, cpu), [*inputs, out], name="norm")
    asm = build(func, name="norm", cpu=cpu).assembly()
    assert ("fadd\tv" if cpu is NEON else "vaddps") in asm
    assert "gather" not in asm


def _channels_first_norm(channels: int, size: int):
    """ConvNeXt's LayerNorm as its int8 form gives it: an NCHW image moved to channels
    last by a Transpose, normalized over the channels. ``(output, [inputs])``."""
    x = te.placeholder((1, channels, size, size), "float32", "x")
    g, beta = (te.placeholder((channels,), "float32", n) for n in ("g", "beta"))

    def op(name, inputs, shape, **attrs):
        return compute_of(name)(inputs, attrs, [TensorType(shape, "float32")])[0]

    t = op("Transpose", [x], (1, size, size, channels), perm=[0, 2, 3, 1])
    y = op("LayerNormalization", [t, g, beta], (1, size, size, channels), axis=-1,
           epsilon=1e-6, stash_type=1)
    return y, [x, g, beta]


def _channel_sum(channels: int, height: int, width: int, transposed: bool = False):
    """``ReduceSum`` over the channels of an NCHW tensor, keeping them (``[1, 1, h,
    w]``); ``transposed``: of the image read with its rows and columns swapped."""
    x = te.placeholder((1, channels, width if transposed else height,
                        height if transposed else width), "float32", "x")
    r = te.reduce_axis(channels, "r")
    out = te.compute((1, 1, height, width), lambda n, c, h, w: te.sum(
        x[n, r, w, h] if transposed else x[n, r, h, w], axis=r), name="channel_sum",
        dtype="float32")
    return out, x


@pytest.mark.parametrize("cpu", [AVX512, AVX2, NEON], ids=["avx512", "avx2", "neon"])
def test_statistics_across_an_images_channels_run_in_lanes_of_pixels(cpu):
    """The statistics over the channels of an NCHW image (read through a transpose) sum
    a vector of pixels per step, one vector load of a channel's row each, where each
    pixel's sum was a scalar loop striding a whole image per channel."""
    out, inputs = _channels_first_norm(32, 8)
    schedule = _scheduled(out, cpu)
    sums = [s for s in schedule.stages if s.reduce_axis]
    assert len(sums) == 2  # the mean's and the variance's
    assert all(lanes_of_kept_axes(schedule, s.tensor, cpu) == 3 for s in sums)  # h, w, 1
    text = func_to_str(te.lower(schedule, [*inputs, out], name="norm"))
    lanes = cpu.vector_lanes("float32")
    for name in ("layernorm_sum", "layernorm_var"):
        assert re.search(rf"{name}\[ramp\(.*, 1, {lanes}\)\] = \({name}\[ramp", text)
    assert ".rf" not in text
    assert re.search(rf"x\[ramp\(\(\(r3 \* 64\) \+ .*, 1, {lanes}\)\]", text)  # a row


@pytest.mark.parametrize("cpu", [AVX512, AVX2, NEON], ids=["avx512", "avx2", "neon"])
def test_a_sum_across_channels_adds_vectors(cpu):
    """Built, the channel sum adds whole vectors and gathers nothing."""
    out, x = _channel_sum(24, 12, 12)
    asm = build(te.lower(_scheduled(out, cpu), [x, out], name="channel_sum"),
                name="channel_sum", cpu=cpu).assembly()
    assert ("fadd\tv" if cpu is NEON else "vaddps") in asm
    assert "gather" not in asm


@pytest.mark.parametrize("height,width", [(12, 12), (7, 7), (3, 16)],
                         ids=["whole-vectors", "a-tail", "rows-of-a-vector"])
def test_lanes_of_pixels_sum_in_the_reductions_order(height, width, rng):
    """Each lane adds its pixel's channels in order: the sums of the pixels in whole
    vectors are NumPy's channel after channel, bit for bit; a tail of pixels (fewer than
    a vector) is a scalar loop, which LLVM may reassociate, as it may any scalar sum."""
    out, x = _channel_sum(40, height, width)
    cpu = parse_cpu("llvm")
    schedule = _scheduled(out, cpu)
    assert lanes_of_kept_axes(schedule, out, cpu) == 2
    module = build(te.lower(schedule, [x, out], name="channel_sum"), name="channel_sum",
                   cpu=cpu)
    data = rng.standard_normal(x.shape).astype(np.float32)
    got = np.zeros(out.shape, np.float32)
    module["channel_sum"](data, got)
    expected = np.zeros((1, 1, height, width), np.float32)
    for channel in range(40):
        expected[0, 0] += data[0, channel]
    lanes = cpu.vector_lanes("float32")
    in_vectors = height * width // lanes * lanes
    np.testing.assert_array_equal(got.ravel()[:in_vectors], expected.ravel()[:in_vectors])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels,height,width,transposed",
                         [(40, 12, 12, True), (40, 3, 5, False)],
                         ids=["pixels-read-across", "under-two-vectors"])
def test_lanes_of_pixels_need_contiguous_reads_of_two_vectors(channels, height, width,
                                                              transposed):
    """An image read with its axes swapped (a gather per lane), or fewer pixels than two
    vectors, keeps a loop per output point."""
    out, x = _channel_sum(channels, height, width, transposed)
    schedule = _scheduled(out, AVX512)
    assert lanes_of_kept_axes(schedule, out, AVX512) == 0
    assert "ramp" not in func_to_str(te.lower(schedule, [x, out], name="channel_sum"))


def test_a_sum_along_contiguous_rows_keeps_its_partials():
    """A reduction that reads its own axis contiguously keeps the partial per lane
    (:func:`contiguous_reduction_block`): its output points are no lanes of a read."""
    out, inputs = _row_sum(48, 1)
    schedule = _scheduled(out, AVX512)
    assert lanes_of_kept_axes(schedule, out, AVX512) == 0


@ISAS
def test_layernorm_across_an_images_channels_matches_onnxruntime(target, rng):
    """The int8 ConvNeXt's shape of it, compiled from ONNX: Transpose to channels last,
    LayerNormalization, against ONNX Runtime."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["y"], axis=-1,
                              epsilon=1e-6)]
    inits = {"g": rng.standard_normal(48).astype(np.float32),
             "b": rng.standard_normal(48).astype(np.float32)}
    model = make_model(nodes, [("x", "float32", [1, 48, 7, 9])], [("y", "float32", None)],
                       inits, opset=17)
    x = rng.standard_normal((1, 48, 7, 9)).astype(np.float32)
    got = heterocc.compile(model, target=target).run({"x": x})[0]
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
