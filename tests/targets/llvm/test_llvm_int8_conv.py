"""The CPU's 8-bit dot product and the integer convolution built on it: the instruction
each CPU description gets (AVX-512 VNNI, AVX-VNNI, the exact ``pmaddubsw`` path of AVX2 and
AVX-512BW, AArch64 ``sdot``), and convolutions bit-exact against NumPy's int64 sums on
every description this host runs (cross-compiled and checked by their assembly
elsewhere)."""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

from heterocc import te
from heterocc.errors import CompileError
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.int8_dot import dot4_instruction, window_blocks
from heterocc.targets.llvm.schedules.int8_conv import (
    DOT_CHAINS,
    INT8_FINISH_TILES,
    WIDENED_WEIGHT_PACKING,
    Int8ChannelTiles,
    accumulators_in_flight,
    channel_lanes_tiles,
    conv_tiling,
    data_dtype,
    finish_rows_per_task,
    flat_row_length,
    grouped_on_the_dot_product,
    int8_conv,
    int8_conv_inputs,
    int8_conv_tiles,
    interleave_intrinsic,
    masked_byte_loads,
    pack_int8_weight_array,
    packed_weight_dtype,
    packed_weight_shape,
    row_blocks,
    schedule_int8_conv,
    schedule_int8_conv_result,
    tile_candidates,
    tile_loads,
    tile_register_reserve,
    weight_dtype,
)
from heterocc.targets.llvm.schedules.int8_depthwise import (
    copy_lanes,
    int8_depthwise_conv,
    rows_mostly_whole,
    schedule_int8_depthwise,
)
from heterocc.targets.llvm.schedules.int8_depthwise_quads import (
    IN_BLOCKS,
    attach_copies_in_blocks,
    quad_stages,
)
from heterocc.te.schedule_reads import reads_of

#: (target, the instruction its kernels multiply bytes with)
#: Sapphire Rapids' vector kernels: its matrix tiles (AMX) taken away, which would take
#: the dense convolutions of whole blocks of channels (tests/targets/llvm/
#: test_llvm_int8_matrix.py)
SPR = "llvm -mcpu=sapphirerapids -mattr=-amx-tile"
#: the host's vector kernels (its tiles, where it has them, taken away likewise)
HOST = "llvm -mattr=-amx-tile"
DESCRIPTIONS = [
    (SPR, "vpdpbusd"),  # AVX-512 VNNI, 512-bit
    ("llvm -mcpu=sapphirerapids -mattr=-avx512f,-amx-tile", "vpdpbusd"),  # AVX-VNNI (VEX), 256-bit
    ("llvm -mcpu=sapphirerapids -mattr=-avx512vnni,-amx-tile", "vpmaddubsw"),  # AVX-512BW, no VNNI
    ("llvm -mcpu=haswell", "vpmaddubsw"),  # AVX2
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", "sdot"),  # NEON dotprod
]
#: (target, the instruction its kernels of vectors of pixels multiply bytes with): on x86
#: without VNNI by weights widened to int16 when packed (``weight_dtype``)
PIXEL_DESCRIPTIONS = [(target, "vpmaddwd" if instruction == "vpmaddubsw" else instruction)
                      for target, instruction in DESCRIPTIONS]


def _host_runs(cpu) -> bool:
    host = hllvm.module.host().description
    return cpu.arch == host.arch and cpu.features <= host.features


def _reference(x, w, zero, strides, pads, dilations, group=1):
    """int64 sums of (x - zero) * w over a zero-padded (centered) input; in ``group``
    groups, each group's filters over its own channels."""
    if group > 1:
        per_input, per_output = x.shape[1] // group, w.shape[0] // group
        return np.concatenate([
            _reference(x[:, g * per_input:(g + 1) * per_input], w[g * per_output:
                       (g + 1) * per_output], zero, strides, pads, dilations)
            for g in range(group)], axis=1)
    n, c, h, width = x.shape
    k, _, kh, kw = w.shape
    padded = np.zeros((n, c, h + pads[0] + pads[2], width + pads[1] + pads[3]), np.int64)
    padded[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + width] = x.astype(np.int64) - zero
    (sy, sx), (dy, dx) = strides, dilations
    oh = (padded.shape[2] - (kh - 1) * dy - 1) // sy + 1
    ow = (padded.shape[3] - (kw - 1) * dx - 1) // sx + 1
    out = np.zeros((n, k, oh, ow), np.int64)
    for ry in range(kh):
        for rx in range(kw):
            window = padded[:, :, ry * dy:ry * dy + (oh - 1) * sy + 1:sy,
                            rx * dx:rx * dx + (ow - 1) * sx + 1:sx]
            out += np.einsum("nchw,kc->nkhw", window, w[:, :, ry, rx].astype(np.int64))
    return out


def _build(shape, filters, kernel, strides, pads, dilations, cpu, group=1):
    x = te.placeholder(shape, "int8", "x")
    w = te.placeholder((filters, shape[1] // group, *kernel), "int8", "w")
    zero = te.placeholder((1,), "int8", "zero")
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    out = int8_conv(x, w, zero, attrs, cpu)
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, out.op.body.a.tensor, cpu)
    return hllvm.build(te.lower(schedule, [x, w, zero, out], name="conv"), cpu=cpu), out


def _matches_reference_on_host(module, out, cpu, shape, filters, kernel, pads, zero: int,
                               seed: int) -> None:
    """Where the host runs ``cpu``'s code: the built stride-1 convolution of random int8
    data and weights equals :func:`_reference`, bit for bit."""
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(seed)
    xs = rng.integers(-128, 128, shape).astype(np.int8)
    ws = rng.integers(-128, 128, (filters, shape[1], *kernel)).astype(np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](xs, ws, np.array([zero], np.int8), got)
    np.testing.assert_array_equal(got, _reference(xs, ws, zero, (1, 1), pads, (1, 1)))


def test_the_instruction_follows_the_description():
    vnni = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx2", "sse2"})
    assert dot4_instruction(vnni, "x86_64", 16, True, False) == "vpdpbusd"
    assert dot4_instruction(vnni, "x86_64", 8, True, False) == "vpdpbusd"  # AVX-512VL
    assert dot4_instruction(vnni, "x86_64", 16, False, False) == "pmaddwd"  # s8 x s8
    assert dot4_instruction(frozenset({"avx2", "avxvnni"}), "x86_64", 8, True,
                            False) == "vpdpbusd"
    assert dot4_instruction(frozenset({"avx2", "ssse3", "sse2"}), "x86_64", 8, True,
                            False) == "pmaddubsw"
    # uint8 x int8 on a split weight; without SSSE3 (or for int8 data) widened to int16
    assert dot4_instruction(frozenset({"sse2"}), "x86_64", 4, True, False) == "pmaddwd"
    assert dot4_instruction(frozenset({"neon", "dotprod"}), "aarch64", 4, False,
                            False) == "sdot"
    assert dot4_instruction(frozenset({"neon"}), "aarch64", 4, False, False) == "generic"
    assert data_dtype(parse_cpu("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1")) == "int8"
    assert data_dtype(parse_cpu("llvm -mcpu=haswell")) == "uint8"


def test_tiles_come_from_the_description():
    assert int8_conv_tiles(64, parse_cpu(SPR)).lanes == 16
    assert int8_conv_tiles(64, parse_cpu("llvm -mcpu=haswell")) .lanes == 8
    assert int8_conv_tiles(64, parse_cpu("llvm -mcpu=haswell")).channels == 8
    assert int8_conv_tiles(24, parse_cpu(SPR)).channels == 12
    neon = int8_conv_tiles(64, parse_cpu("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"))
    assert (neon.lanes, neon.channels) == (4, 16)


@pytest.mark.parametrize("target,instruction", PIXEL_DESCRIPTIONS,
                         ids=["avx512vnni", "avxvnni", "avx512bw", "avx2", "neon-sdot"])
@pytest.mark.parametrize("shape,filters,kernel,strides,pads,dilations", [
    ((1, 8, 9, 11), 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 3, 13, 13), 8, (3, 3), (2, 2), (1, 0, 1, 2), (1, 1)),  # 3 channels, stride 2
    ((2, 20, 7, 7), 12, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    ((1, 4, 10, 10), 8, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated
], ids=["3x3", "stride2-asym-pad", "1x1-batch2", "dilated"])
def test_integer_convolution_is_exact(target, instruction, shape, filters, kernel, strides,
                                      pads, dilations):
    cpu = parse_cpu(target)
    module, out = _build(shape, filters, kernel, strides, pads, dilations, cpu)
    assert instruction in module.assembly()
    assert "vpmaddubsw" not in module.assembly()  # no split form where int16 weights are
    if not _host_runs(cpu):
        return  # cross-compiled: its assembly was the check
    rng = np.random.default_rng(sum(shape) + filters)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    w = rng.integers(-128, 128, (filters, shape[1], *kernel)).astype(np.int8)
    zero = np.array([-7], np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](x, w, zero, got)
    np.testing.assert_array_equal(got, _reference(x, w, -7, strides, pads, dilations))


@pytest.mark.parametrize("target", [HOST, "llvm -mcpu=haswell",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
@pytest.mark.parametrize("lanes", [False, True], ids=["pixels", "channel-lanes"])
@pytest.mark.parametrize("shape,kernel,pads,dilations,row", [
    ((1, 8, 12, 20), (3, 3), (1, 1, 1, 1), (1, 1), 21),  # rows share one padding column
    ((1, 8, 12, 20), (3, 3), (1, 2, 1, 0), (1, 1), 22),  # left padding only
    ((1, 8, 12, 20), (3, 3), (0, 0, 2, 2), (1, 1), 22),  # right padding only
    ((1, 8, 12, 20), (3, 5), (2, 4, 2, 4), (1, 2), 24),  # dilated
    ((1, 8, 12, 20), (1, 1), (1, 1, 1, 1), (1, 1), 22),  # padding past the kernel's reach
], ids=["3x3", "left", "right", "dilated", "1x1-padded"])
def test_stride_one_rows_share_their_padding_columns(target, lanes, shape, kernel, pads,
                                                      dilations, row, monkeypatch):
    """At stride 1 the packed rows are ``width + max(left, right)`` positions apart, a
    tap past a row's end reading the next row's left padding (the zero point); where
    the padding outreaches the kernel (a padded 1x1) the rows keep both paddings.
    Bit-exact against the reference with vectors of pixels and with channel lanes."""
    reach = (kernel[1] - 1) * dilations[1]
    assert flat_row_length(shape[3], pads, 1, reach) == row
    cpu = parse_cpu(target)
    module = importlib.import_module(int8_conv.__module__)
    if lanes:
        monkeypatch.setattr(module, "channel_lanes_tiles",
                            lambda x_shape, w_shape, attrs, cpu: module.channel_tiling(
                                w_shape[0], *module.conv_geometry(x_shape, w_shape, attrs)[4],
                                cpu))
    built, out = _build(shape, 32, kernel, (1, 1), pads, dilations, cpu)
    data, _ = int8_conv_inputs(out.op.body.a.tensor)
    # the packing's row: its one pass's, or its first pass's (the padded copy)
    packed = data if "int8_row" in data.op.attrs else next(
        t for t in reads_of(data.op.body) if "int8_row" in t.op.attrs)
    assert packed.op.attrs["int8_row"] == row
    if cpu.arch == "aarch64":  # cross-compiled: its dot product is the check
        assert "sdot" in built.assembly()
    if _host_runs(cpu):
        rng = np.random.default_rng(3)
        xs = rng.integers(-128, 128, shape).astype(np.int8)
        ws = rng.integers(-128, 128, (32, shape[1], *kernel)).astype(np.int8)
        got = np.zeros(out.shape, np.int32)
        built["conv"](xs, ws, np.array([9], np.int8), got)
        np.testing.assert_array_equal(got, _reference(xs, ws, 9, (1, 1), pads, dilations))


#: (target, an instruction of its byte interleave): unpacks of bytes and words on x86
#: (LLVM's interleaved-store lowering), one four-register store on AArch64
INTERLEAVES = [
    (SPR, "vpunpcklbw"),
    ("llvm -mcpu=sapphirerapids -mattr=-avx512f,-amx-tile", "vpunpcklbw"),
    ("llvm -mcpu=haswell", "vpunpcklbw"),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", "st4"),
]


@pytest.mark.parametrize("target,instruction", INTERLEAVES,
                         ids=["avx512", "avx2-vnni", "avx2", "neon"])
def test_the_byte_interleave_intrinsic_is_one_shuffle_and_exact(target, instruction):
    """``cpu.interleave`` (:func:`interleave_intrinsic`): four runs of a register's bytes
    into groups of four, ``out[p, g] = src[g, p]``, lowered to the CPU's unpacks or
    ``st4``; exact where the host runs it."""
    cpu = parse_cpu(target)
    run = cpu.vector_lanes("uint8")
    src = te.placeholder((8, 3 * run), "uint8", "src")
    out = te.compute((2, 3 * run, 4), lambda g, p, i: src[4 * g + i, p], name="out")
    schedule = te.create_schedule(out)
    stage = schedule[out]
    _, inner = stage.split(stage.op.axis[1], run)
    stage.tensorize(inner, interleave_intrinsic(run, "uint8"))
    module = hllvm.build(te.lower(schedule, [src, out], name="interleave"), cpu=cpu)
    assert instruction in module.assembly()
    if not _host_runs(cpu):
        return  # cross-compiled: its assembly was the check
    data = np.random.default_rng(3).integers(0, 256, (8, 3 * run)).astype(np.uint8)
    got = np.zeros((2, 3 * run, 4), np.uint8)
    module["interleave"](data, got)
    np.testing.assert_array_equal(got, data.reshape(2, 4, 3 * run).transpose(0, 2, 1))


@pytest.mark.parametrize("target", [
    "llvm", SPR, "llvm -mcpu=haswell",
    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"], ids=["host", "avx512", "avx2", "neon"])
@pytest.mark.parametrize("data", ["uint8", "int8"])
@pytest.mark.parametrize("shape,kernel,strides,pads", [
    ((1, 6, 14, 15), (3, 3), (1, 1), (1, 1, 1, 1)),  # 6 channels: a padded group
    ((1, 3, 23, 23), (7, 7), (2, 2), (3, 3, 3, 3)),  # a stem: four phases
    ((1, 8, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1)),  # rows of 9 (MIN_COPIED_ROW)
    ((1, 6, 14, 14), (1, 1), (1, 1), (0, 0, 0, 0)),  # unpadded, rows of 56 bytes
    ((1, 8, 5, 28), (1, 1), (1, 1), (0, 0, 0, 0)),  # unpadded, rows of 112 bytes
], ids=["3x3", "stem", "7x7", "1x1-14", "1x1-28"])
def test_a_padded_image_is_packed_by_a_vector_byte_interleave(target, data, shape, kernel,
                                                             strides, pads):
    """Where the CPU loads bytes under a mask (AVX-512BW), a padded image is packed in
    two vector passes: a padded, phase-split copy of each channel, then four channels'
    runs interleaved by one ``cpu.interleave`` a step (unpacks in the assembly) into the
    dot product's groups of four bytes; so is an unpadded image at stride 1 whose rows'
    four channels fill no more than a vector, each channel copied as one run of its
    pixels (a 14-pixel row's 56 bytes); longer unpadded rows, and any image elsewhere,
    byte by byte in one pass. Bit-exact either way, extreme bytes and zero point
    included."""
    cpu = parse_cpu(target)
    x = te.placeholder(shape, data, "x")
    w = te.placeholder((16, shape[1], *kernel), "int8", "w")
    zero = te.placeholder((1,), data, "zero")
    attrs = {"strides": strides, "pads": pads, "dilations": (1, 1), "group": 1}
    out = int8_conv(x, w, zero, attrs, cpu)
    sums = out.op.body.a.tensor
    packed, _ = int8_conv_inputs(sums)
    plane = not any(pads) and shape[3] * 4 <= cpu.vector_lanes(packed.dtype)
    interleaved = masked_byte_loads(cpu) and (any(pads) or plane)
    assert packed.op.attrs.get("int8_interleaved") == (
        cpu.vector_lanes(packed.dtype) if interleaved else None)
    if interleaved and plane:  # one run of pixels a channel
        (copy,) = reads_of(packed.op.body)
        assert copy.op.attrs["int8_row"] == copy.shape[-1] == packed.shape[-2]
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, sums, cpu)
    module = hllvm.build(te.lower(schedule, [x, w, zero, out], name="conv"), cpu=cpu)
    if interleaved:
        assert "vpunpcklbw" in module.assembly()
    if not _host_runs(cpu):
        return  # cross-compiled: its assembly was the check
    info = np.iinfo(data)
    rng = np.random.default_rng(sum(shape))
    xs = rng.integers(info.min, info.max + 1, shape).astype(data)
    xs[0, 0, 0, :3] = (info.min, info.max, info.min)
    ws = rng.integers(-128, 128, (16, shape[1], *kernel)).astype(np.int8)
    ws.reshape(16, -1)[0, :3] = (-128, -128, 127)  # a view: 1x1 kernels too
    z = info.max if data == "uint8" else info.min
    got = np.zeros(out.shape, np.int32)
    module["conv"](xs, ws, np.array([z], data), got)
    np.testing.assert_array_equal(got, _reference(xs, ws, z, strides, pads, (1, 1)))


@pytest.mark.parametrize("target,instruction", PIXEL_DESCRIPTIONS,
                         ids=["avx512vnni", "avxvnni", "avx512bw", "avx2", "neon-sdot"])
@pytest.mark.parametrize("shape,kernel,strides,pads,dilations", [
    ((1, 120, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # ResNet's last stage
    ((1, 1024, 5, 5), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # 25 pixels
    ((2, 64, 14, 14), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # into 7x7, batch 2
    ((1, 62, 5, 5), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated, 5x5 -> 5x5
], ids=["3x3", "1x1", "stride2-batch2", "dilated"])
def test_channel_lanes_are_exact(target, instruction, shape, kernel, strides, pads,
                                 dilations):
    """Small outputs take output channels as the lanes (vectors of pixels would
    compute a 7x7 output's 49 pixels in 64 positions), each pixel's bytes broadcast to
    the weight vectors, on every description's instruction (without VNNI, two
    ``vpmaddwd`` a group by the weight vectors widened when packed): bit-exact, extreme
    bytes (every product at -128 x -128 or 127 x -128) too."""
    cpu = parse_cpu(target)
    filters = 32
    module, out = _build(shape, filters, kernel, strides, pads, dilations, cpu)
    tiles = out.op.body.a.tensor.op.attrs["int8_conv"]
    assert isinstance(tiles, Int8ChannelTiles) and tiles.lanes == cpu.vector_lanes("int32")
    assert tiles.pixels * tiles.vectors + tiles.vectors + 1 <= cpu.vector_registers - 4
    assert instruction in module.assembly()
    if not _host_runs(cpu):
        return  # cross-compiled: its assembly was the check
    rng = np.random.default_rng(sum(shape))
    w_shape = (filters, shape[1], *kernel)
    cases = [(rng.integers(-128, 128, shape), rng.integers(-128, 128, w_shape), -7),
             (np.full(shape, -128), np.full(w_shape, -128), 0),
             (np.full(shape, 127), np.full(w_shape, -128), 5)]
    for x, w, zero in cases:
        x, w = x.astype(np.int8), w.astype(np.int8)
        got = np.zeros(out.shape, np.int32)
        module["conv"](x, w, np.array([zero], np.int8), got)
        np.testing.assert_array_equal(got, _reference(x, w, zero, strides, pads, dilations))


def test_channel_lanes_where_the_positions_saved_outweigh_a_tiles_cost():
    """Channel lanes save the positions vectors of pixels would compute past the
    output's pixels on every instruction of the reduction, and cost a tile's
    accumulators stored and read back per output: they take a convolution where that
    waste times the reduction's instructions reaches CHANNEL_LANES_BREAK_EVEN.
    MobileNetV2's 1x1 layers at 7x7 on AVX-512 (64 positions for 49 pixels): 320->1280
    (80 instructions an accumulator) takes them, 160->960 (40) does not; a long
    reduction takes them at a smaller waste (a 3x3 at 14x14, 224 positions for 196:
    64->256, 144 instructions, not 32->128, 72); AVX2's vectors of 8 pixels waste 7
    positions at 7x7, and keep 320->1280 in vectors of pixels."""
    avx512 = parse_cpu(SPR + " -num-cores=2")
    one = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    three = dict(one, pads=(1, 1, 1, 1))
    assert channel_lanes_tiles((1, 320, 7, 7), (1280, 320, 1, 1), one, avx512) is not None
    assert channel_lanes_tiles((1, 160, 7, 7), (960, 160, 1, 1), one, avx512) is None
    assert channel_lanes_tiles((1, 64, 14, 14), (256, 64, 3, 3), three, avx512) is not None
    assert channel_lanes_tiles((1, 32, 14, 14), (128, 32, 3, 3), three, avx512) is None
    haswell = parse_cpu("llvm -mcpu=haswell -num-cores=2")
    assert channel_lanes_tiles((1, 320, 7, 7), (1280, 320, 1, 1), one, haswell) is None


@pytest.mark.parametrize("target,instruction", DESCRIPTIONS,
                         ids=["avx512vnni", "avxvnni", "avx512bw", "avx2", "neon-sdot"])
@pytest.mark.parametrize("shape,filters,kernel,prepacked", [
    ((1, 40, 1, 1), 40, (1, 1), True),  # a classifier on a pooled image
    ((2, 36, 3, 3), 24, (3, 3), False),  # a 3x3 into one pixel, batch 2
], ids=["classifier", "3x3-to-1x1"])
def test_a_one_pixel_output_takes_narrow_channel_lanes(target, instruction, shape, filters,
                                                      kernel, prepacked):
    """An output of one pixel (a classifier's convolution on a pooled image) would waste
    15 of 16 lanes of a vector of pixels: it takes output channels as the lanes, in
    vectors as narrow as the dot product's instruction allows where the filters fill
    no whole register (40 filters: five vectors of 8 int32, 10 of 4 on NEON), five of
    them in flight a tile; bit-exact, its weight prepacked in that layout too."""
    cpu = parse_cpu(target)
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    w_shape = (filters, shape[1], *kernel)
    tiles = channel_lanes_tiles(shape, w_shape, attrs, cpu)
    full = cpu.vector_lanes("int32")
    assert isinstance(tiles, Int8ChannelTiles) and tiles.pixels == 1
    assert tiles.lanes == (full if filters % full == 0 else full // 2)
    assert tiles.vectors > 1
    assert tiles.vectors + tiles.vectors + 1 <= cpu.vector_registers - 4
    x = te.placeholder(shape, "int8", "x")
    w = te.placeholder(w_shape, "int8", "w")
    zero = te.placeholder((1,), "int8", "zero")
    dtype = packed_weight_dtype(cpu, tiles)
    assert dtype == "int8"  # one pixel reads each weight once: bytes, not widened
    packed = te.placeholder(packed_weight_shape(w_shape, tiles.lanes, dtype), dtype,
                            "w.packed") if prepacked else None
    out = int8_conv(x, w, zero, attrs, cpu, packed_weight=packed)
    assert out.op.body.a.tensor.op.attrs["int8_conv"] == tiles
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, out.op.body.a.tensor, cpu)
    module = hllvm.build(te.lower(schedule, [x, packed if prepacked else w, zero, out],
                                  name="conv"), cpu=cpu)
    # the narrow width's instruction (AVX-VNNI's beside AVX-512BW's vpmaddubsw)
    unsigned = data_dtype(cpu) == "uint8"
    narrow = dot4_instruction(cpu.features, cpu.arch, tiles.lanes, unsigned, False)
    assert narrow in module.assembly() and (narrow == instruction.lstrip("v")
                                             or narrow == "vpdpbusd")
    if not _host_runs(cpu):
        return  # cross-compiled: its assembly was the check
    rng = np.random.default_rng(sum(shape))
    for xs, ws, z in [(rng.integers(-128, 128, shape), rng.integers(-128, 128, w_shape), -7),
                      (np.full(shape, -128), np.full(w_shape, -128), 0)]:
        xs, ws = xs.astype(np.int8), ws.astype(np.int8)
        got = np.zeros(out.shape, np.int32)
        weight = pack_int8_weight_array(ws, tiles.lanes, dtype) if prepacked else ws
        module["conv"](xs, weight, np.array([z], np.int8), got)
        np.testing.assert_array_equal(got, _reference(xs, ws, z, (1, 1), (0, 0, 0, 0),
                                                      (1, 1)))


def test_channel_lanes_leave_a_block_for_each_core():
    """Channel tiles take the most rows per block whose sums fit half the L1 data cache
    while the blocks (tiles of channels by rows) still number the cores: 512 filters at
    7x7 in whole images, DenseNet's 32 at 7x7 (one tile) a row at a time on two cores,
    whole on one."""
    from heterocc.targets.llvm.schedules.int8_conv import channel_tiling

    two = parse_cpu(SPR + " -num-cores=2")
    tiles = channel_tiling(512, 7, 7, two)
    assert tiles.rows == 7 and 512 // tiles.channels >= 2
    tiles = channel_tiling(32, 7, 7, two)
    assert tiles.channels == 32 and tiles.rows == 1
    assert channel_tiling(32, 7, 7, parse_cpu(SPR + " -num-cores=1")
                          ).rows == 7
    assert channel_tiling(24, 7, 7, two) is None  # 24 channels fill no 16-lane vectors


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell",
                                    "llvm -mcpu=sapphirerapids -mattr=-avx512vnni,-amx-tile",
                                    "llvm -mcpu=x86-64-v2"], ids=["avx2", "avx512bw", "sse4"])
def test_without_vnni_the_weights_are_widened_once_when_packed(target):
    """On x86 without VNNI a convolution of vectors of pixels holds its weights as int16
    (``weight_dtype``), packed once for a constant (``pack_int8_weight_array``, weight
    sums included), so that two ``pmaddwd`` a group of four take the place of the split
    ``vpmaddubsw``'s four multiplies: bit-exact, prepacked or packed per call, extreme
    bytes and weights too."""
    cpu = parse_cpu(target)
    assert weight_dtype(cpu) == "int16"
    shape, w_shape = (1, 20, 9, 9), (12, 20, 3, 3)  # 12 filters: no vector of channels
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    assert channel_lanes_tiles(shape, w_shape, attrs, cpu) is None
    x, w = te.placeholder(shape, "uint8", "x"), te.placeholder(w_shape, "int8", "w")
    zero = te.placeholder((1,), "uint8", "zero")
    packed = te.placeholder(packed_weight_shape(w_shape), "int16", "w.packed")
    with pytest.raises(CompileError, match="not int16"):
        int8_conv(x, w, zero, attrs, cpu,
                  packed_weight=te.placeholder(packed_weight_shape(w_shape), "int8", "p"))
    modules = {}
    for prepacked in (False, True):
        out = int8_conv(x, w, zero, attrs, cpu, packed_weight=packed if prepacked else None)
        schedule = te.create_schedule(out)
        schedule_int8_conv(schedule, out.op.body.a.tensor, cpu)
        module = hllvm.build(te.lower(schedule, [x, packed if prepacked else w, zero, out],
                                      name="conv"), cpu=cpu)
        assembly = module.assembly()
        assert "pmaddwd" in assembly and "pmaddubsw" not in assembly
        modules[prepacked] = module
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(3)
    cases = [(rng.integers(0, 256, shape), rng.integers(-128, 128, w_shape), 9),
             (np.full(shape, 255), np.full(w_shape, -128), 0),
             (np.full(shape, 255), np.full(w_shape, 127), 255)]
    for xs, ws, z in cases:
        xs, ws = xs.astype(np.uint8), ws.astype(np.int8)
        expected = _reference(xs, ws, z, (1, 1), (1, 1, 1, 1), (1, 1))
        packed_ws = pack_int8_weight_array(ws, 0, "int16")
        assert packed_ws.dtype == np.int16
        for prepacked, module in modules.items():
            got = np.zeros(expected.shape, np.int32)
            module["conv"](xs, packed_ws if prepacked else ws, np.array([z], np.uint8), got)
            np.testing.assert_array_equal(got, expected)


def test_the_weights_stay_bytes_where_the_cpu_multiplies_bytes():
    """Weights are widened to int16 only where the byte product at the kernel's width
    would be the split ``vpmaddubsw``: not with VNNI or NEON's dot product, nor for a
    narrow vector of channels that AVX-VNNI multiplies beside AVX-512BW's registers;
    a vector of channels widened holds each lane's pairs of input channels in halves."""
    for target in (SPR, "llvm -mcpu=sapphirerapids -mattr=-avx512f,-amx-tile",
                   "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"):
        assert weight_dtype(parse_cpu(target)) == "int8", target
        assert packed_weight_dtype(parse_cpu(target), Int8ChannelTiles(4, 2, 7, 1)) \
            == "int8", target
    avx512bw = parse_cpu("llvm -mcpu=sapphirerapids -mattr=-avx512vnni,-amx-tile")  # AVX-VNNI too
    assert packed_weight_dtype(avx512bw, Int8ChannelTiles(16, 2, 7, 1)) == "int16"
    assert packed_weight_dtype(avx512bw, Int8ChannelTiles(8, 2, 7, 1)) == "int8"
    haswell = parse_cpu("llvm -mcpu=haswell")
    assert packed_weight_dtype(haswell, Int8ChannelTiles(8, 2, 7, 1)) == "int16"
    # a one-pixel tile reads each weight once: bytes
    assert packed_weight_dtype(haswell, Int8ChannelTiles(8, 5, 1, 1)) == "int8"
    w = np.arange(-64, 64, dtype=np.int8).reshape(16, 8, 1, 1)
    packed = pack_int8_weight_array(w, 8, "int16")
    assert packed.shape == packed_weight_shape(w.shape, 8, "int16") == (2, 3, 1, 1, 2, 8, 2)
    # output channel 8 * 1 + 3, input channels 4..7 of group 1: (4, 5) then (6, 7)
    assert list(packed[1, 1, 0, 0, :, 3].ravel()) == list(w[11, 4:8, 0, 0])


def test_extreme_bytes_do_not_saturate():
    """Extreme data (-128 or 127, stored as 0 or 255 after the sign flip) times extreme
    weights (-128, 127, -1), all taps: the widened paths add byte products in int32,
    and ``vpmaddubsw``'s int16 pair sums of the split weight's halves never saturate."""
    for target, _ in DESCRIPTIONS[:4]:
        cpu = parse_cpu(target)
        if not _host_runs(cpu):
            continue
        module, out = _build((1, 8, 6, 6), 8, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), cpu)
        for value in (-128, 127):
            for weight in (-128, 127, -1):
                x = np.full((1, 8, 6, 6), value, np.int8)
                w = np.full((8, 8, 3, 3), weight, np.int8)
                got = np.zeros(out.shape, np.int32)
                module["conv"](x, w, np.array([0], np.int8), got)
                np.testing.assert_array_equal(
                    got, _reference(x, w, 0, (1, 1), (1, 1, 1, 1), (1, 1)))


@pytest.mark.parametrize("target", [HOST, "llvm -mcpu=haswell",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
@pytest.mark.parametrize("data", ["uint8", "int8"])
@pytest.mark.parametrize("filters", [8, 32])
def test_weight_sums_packed_at_build_time_are_exact(target, data, filters):
    """A constant weight packed once (``pack_int8_weight_array``, in vectors of output
    channels where the convolution takes channel lanes: 32 filters of a 6x7 output on
    every description, 8 where they fill int32 vectors) carries each output channel's
    weight sum, the zero-point correction's factor, so no call sums it: sums of every
    sign and size (all four bytes) give the reference's bits."""
    cpu = parse_cpu(target)
    shape = (1, 120, 6, 7)
    x = te.placeholder(shape, data, "x")
    w = te.placeholder((filters, 120, 3, 3), "int8", "w")
    attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    tiles = channel_lanes_tiles(shape, w.shape, attrs, cpu)
    assert (tiles is not None) == (filters % cpu.vector_lanes("int32") == 0)
    lanes = tiles.lanes if tiles is not None else 0
    dtype = packed_weight_dtype(cpu, tiles)
    packed = te.placeholder(packed_weight_shape(w.shape, lanes, dtype), dtype, "w.packed")
    zero = te.placeholder((1,), data, "zero")
    out = int8_conv(x, w, zero, attrs, cpu, packed_weight=packed)
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, out.op.body.a.tensor, cpu)
    assert not any(stage.op.name.endswith("_weight_sum") for stage in schedule.stages)
    module = hllvm.build(te.lower(schedule, [x, packed, zero, out], name="conv"), cpu=cpu)
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(11)
    info = np.iinfo(data)
    xs = rng.integers(info.min, info.max + 1, shape).astype(data)
    ws = rng.integers(-128, 128, (filters, 120, 3, 3)).astype(np.int8)
    ws[0], ws[1], ws[2] = -128, 127, 0  # sums -138240, 137160, 0
    z = np.array([info.min + 5], data)
    got = np.zeros(out.shape, np.int32)
    module["conv"](xs, pack_int8_weight_array(ws, lanes, dtype), z, got)
    np.testing.assert_array_equal(got, _reference(xs, ws, int(z[0]), (1, 1), (1, 1, 1, 1),
                                                  (1, 1)))


@pytest.mark.parametrize("target,instruction", PIXEL_DESCRIPTIONS,
                         ids=["avx512vnni", "avxvnni", "avx512bw", "avx2", "neon-sdot"])
@pytest.mark.parametrize("shape,filters,group,strides", [
    ((1, 32, 10, 10), 32, 4, (1, 1)),  # RegNet's groups of 8 channels
    ((1, 16, 9, 9), 32, 4, (2, 2)),  # ResNeXt's groups of 4, 8 filters each, stride 2
    ((2, 48, 7, 7), 24, 6, (1, 1)),  # 8 channels to 4 filters a group, batch 2
], ids=["groups-of-8", "groups-of-4-stride2", "4-filters-batch2"])
def test_a_grouped_convolution_runs_on_the_dot_product_a_group_a_tile(
        target, instruction, shape, filters, group, strides):
    """A convolution grouped by whole groups of four input channels takes the dense
    kernel, each output channel reading its group's packed channels only and each
    register tile's channels lying in one group (so they share their data vectors);
    bit-exact against the grouped reference."""
    cpu = parse_cpu(target)
    pads = (1, 1, 1, 1)
    module, out = _build(shape, filters, (3, 3), strides, pads, (1, 1), cpu, group)
    tiles = out.op.body.a.tensor.op.attrs["int8_conv"]
    assert (filters // group) % tiles.channels == 0
    assert instruction in module.assembly()
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(sum(shape) + group)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    w = rng.integers(-128, 128, (filters, shape[1] // group, 3, 3)).astype(np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](x, w, np.array([-5], np.int8), got)
    np.testing.assert_array_equal(got, _reference(x, w, -5, strides, pads, (1, 1), group))


def test_groups_of_other_than_whole_channel_quads_stay_off_the_dot_product():
    """Groups of 2 or 6 input channels would put one packed group of four across two
    convolution groups: the CPU's integer kernels leave such a ConvInteger to its
    generic compute (and refuse it by name when asked)."""
    x = te.placeholder((1, 12, 6, 6), "int8", "x")
    for per_group in (2, 6):
        w = te.placeholder((12, per_group, 3, 3), "int8", "w")
        attrs = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1),
                 "group": 12 // per_group}
        assert not grouped_on_the_dot_product(w.shape, 12 // per_group)
        with pytest.raises(CompileError, match="groups of 4"):
            int8_conv(x, w, None, attrs, parse_cpu("llvm"))
    assert grouped_on_the_dot_product((12, 4, 3, 3), 3)


def test_a_grouped_convolution_is_refused_by_name():
    x = te.placeholder((1, 8, 6, 6), "int8", "x")
    w = te.placeholder((8, 1, 3, 3), "int8", "w")
    with pytest.raises(CompileError, match="dense"):
        int8_conv(x, w, None, {"strides": (1, 1), "pads": (1, 1, 1, 1),
                               "dilations": (1, 1), "group": 8}, parse_cpu("llvm"))


def _conv_chain(seed: int, layers, shape, out_shape, activation):
    """A float model of a chain of convolutions on an input of ``shape``: ``layers`` of
    (name, in channels, out channels, kernel, group, stride, activated), each with a
    bias and, where activated, ``activation`` after it (``"Relu"``, or ``"Clip"`` to
    [0, 6])."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes, x = [], [], "input"
    for name, cin, cout, kernel, group, stride, activated in layers:
        inits += [numpy_helper.from_array((rng.standard_normal(
            (cout, cin // group, kernel, kernel)) * 0.3).astype(np.float32), f"{name}_w"),
            numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32),
                                    f"{name}_b")]
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_y"],
                                      pads=[kernel // 2] * 4, group=group,
                                      strides=[stride] * 2))
        x = f"{name}_y"
        if activated:
            bounds = ["zero", "six"] if activation == "Clip" else []
            nodes.append(helper.make_node(activation, [x, *bounds], [f"{name}_a"]))
            x = f"{name}_a"
    if activation == "Clip":
        inits += [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                  numpy_helper.from_array(np.array(6, np.float32), "six")]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _inverted_residual(stride: int = 1):
    """A MobileNetV2 block on a 7x7 image: 1x1 expansion, 3x3 depthwise (of ``stride``),
    1x1 projection (each with bias; Clip(0, 6) after the first two)."""
    layers = (("expand", 8, 32, 1, 1, 1, True), ("depthwise", 32, 32, 3, 32, stride, True),
              ("project", 32, 16, 1, 1, 1, False))
    out = (1, 16, *[(7 - 1) // stride + 1] * 2)
    return _conv_chain(8, layers, (1, 8, 7, 7), out, "Clip"), (1, 8, 7, 7), 2


def _grouped_block():
    """A RegNet block on a 10x10 image: a 1x1 convolution to 32 channels, a 3x3 one of
    stride 2 in 4 groups of 8 channels, a 1x1 projection to 16 (each with bias, ReLU
    after the first two)."""
    layers = (("expand", 8, 32, 1, 1, 1, True), ("grouped", 32, 32, 3, 4, 2, True),
              ("project", 32, 16, 1, 1, 1, False))
    return _conv_chain(10, layers, (1, 8, 10, 10), (1, 16, 5, 5), "Relu"), (1, 8, 10, 10), 3


def _fire_and_pool():
    """A SqueezeNet fire module on a 9x9 image (1x1 squeeze, then 1x1 and 3x3 expansions
    concatenated), a 1x1 convolution and a global average pool."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(9)
    inits, nodes = [], []
    for name, source, cin, cout, kernel in (("squeeze", "input", 8, 4, 1),
                                            ("left", "squeeze_c", 4, 8, 1),
                                            ("right", "squeeze_c", 4, 8, 3),
                                            ("head", "joined", 16, 12, 1)):
        inits += [numpy_helper.from_array((rng.standard_normal(
            (cout, cin, kernel, kernel)) * 0.4).astype(np.float32), f"{name}_w"),
            numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32),
                                    f"{name}_b")]
        nodes += [helper.make_node("Conv", [source, f"{name}_w", f"{name}_b"], [f"{name}_y"],
                                   pads=[kernel // 2] * 4),
                  helper.make_node("Relu", [f"{name}_y"], [f"{name}_c"])]
    nodes.insert(6, helper.make_node("Concat", ["left_c", "right_c"], ["joined"], axis=1))
    nodes.append(helper.make_node("GlobalAveragePool", ["head_c"], ["pooled"]))
    graph = helper.make_graph(
        nodes, "fire", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                      (1, 8, 9, 9))],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, (1, 12, 1, 1))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, (1, 8, 9, 9), 4


def _quantized(source, shape, activations: str, tmp_path):
    """``source`` quantized by ONNX Runtime (QDQ, per-channel int8 weights,
    ``activations``: ``QUInt8`` or ``QInt8``), calibrated on four random inputs."""
    import onnx
    import onnxruntime.quantization as oq

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"input": np.random.default_rng(10 + i).standard_normal(
                shape).astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    onnx.save(source, str(tmp_path / "float.onnx"))
    oq.quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"),
                       Calibration(), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                       activation_type=getattr(oq.QuantType, activations),
                       weight_type=oq.QuantType.QInt8)
    return onnx.load(str(tmp_path / "qdq.onnx"))


@pytest.mark.parametrize("model_of", ["small_cnn", "inverted_residual", "fire_and_pool",
                                      "grouped_block"])
@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_a_quantized_cnn_runs_its_convolutions_on_the_dot_product(tmp_path, monkeypatch,
                                                                  activations, model_of):
    """An ORT-quantized QDQ CNN (per-channel weights; uint8 activations, ORT's default,
    or int8) on ``llvm`` alone: its convolutions (and its classifier's Gemm, as a 1x1
    one) become ConvInteger + Requantize, the
    dense and grouped ones computed by the dot-product schedule (the depthwise one by
    int32 multiply-adds over packed rows), bit-exact with the integer reference of the compiled
    graph and within one step of ONNX Runtime. Concatenations and global average pools
    between them stay in integers."""
    pytest.importorskip("onnxruntime.quantization")
    import heterocc
    import heterocc.targets.llvm.rules as rules
    from heterocc.runtime.interpreter import evaluate
    from tests.passes.test_per_channel_axes import ort_reference, output_scale, steps_apart
    from tests.targets.vta.ort_models import INPUT, small_cnn

    if model_of == "small_cnn":
        source, shape, dense = small_cnn(), INPUT, 4
    elif model_of == "fire_and_pool":
        source, shape, dense = _fire_and_pool()
    elif model_of == "grouped_block":  # its grouped convolution on the dense kernel
        source, shape, dense = _grouped_block()
    else:
        source, shape, dense = _inverted_residual()
    model = _quantized(source, shape, activations, tmp_path)

    scheduled = []
    original = rules.schedule_int8_conv
    monkeypatch.setattr(rules, "schedule_int8_conv", lambda schedule, tensor, cpu=None: (
        scheduled.append(tensor.name), original(schedule, tensor, cpu)))
    compiled = heterocc.compile(model, target="llvm")
    nodes = [n for _, n in compiled.graph.walk()]
    ops = [n.op for n in nodes]
    # a global average pool sums its integers as a depthwise ConvInteger by ones
    # (integer_global_average_pools); a classifier's Gemm becomes a 1x1 ConvInteger
    # (integer_products_as_convolutions)
    classifiers = sum(n.op_type == "Gemm" for n in source.graph.node)
    pools = sum(n.op_type == "GlobalAveragePool" for n in source.graph.node)
    convolutions = sum(n.op_type == "Conv" for n in source.graph.node) + classifiers
    assert ops.count("ConvInteger") == convolutions + pools and "Conv" not in ops
    assert "GlobalAveragePool" not in ops
    assert "Gemm" not in ops and "MatMulInteger" not in ops
    # a concatenation copies the int8 tensors (integer_concats), no float glue around it
    concats = [n.outputs[0].type.dtype for n in nodes if n.op == "Concat"]
    assert concats == (["int8"] if model_of == "fire_and_pool" else [])
    assert len(scheduled) == dense + classifiers
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    got = compiled.run([x])[0]
    np.testing.assert_array_equal(got, evaluate(compiled.graph, [x])[0])
    assert steps_apart(got, ort_reference(model, x), output_scale(model)) <= 1


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mattr=-avx512vnni"],
                         ids=["avx2", "avx512bw"])
def test_a_quantized_cnn_without_vnni_gives_the_integer_references_bits(tmp_path, target):
    """An ORT-quantized QDQ CNN compiled for a CPU without VNNI: its constant weights
    packed at build time as int16 (the dense convolutions' ``pmaddwd`` form, the
    depthwise one's widened quads for its window kernel); the integer reference's bits,
    as the host's own description gives them, and so does its artifact, loaded."""
    pytest.importorskip("onnxruntime.quantization")
    import heterocc
    from heterocc.runtime.interpreter import evaluate
    from heterocc.targets.llvm.schedules.int8_depthwise import WEIGHT_WIDENED_QUADS

    source, shape, _ = _inverted_residual()
    model = _quantized(source, shape, "QUInt8", tmp_path)
    compiled = heterocc.compile(model, target=target)
    packed = {packing: kernel.constants[index] for kernel in compiled.kernels.values()
              for index, packing, _ in kernel.prim.attrs["packed_constants"]}
    assert packed[WIDENED_WEIGHT_PACKING].dtype == np.int16
    assert packed[WEIGHT_WIDENED_QUADS].dtype == np.int16
    if not _host_runs(parse_cpu(target)):
        return  # built for it: the packing was the check
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    got = compiled.run([x])[0]
    np.testing.assert_array_equal(got, evaluate(compiled.graph, [x])[0])
    np.testing.assert_array_equal(got, heterocc.compile(model, target="llvm").run([x])[0])
    compiled.export(str(tmp_path / "artifact"))
    np.testing.assert_array_equal(heterocc.load(str(tmp_path / "artifact")).run([x])[0], got)


@pytest.mark.parametrize("target", [HOST, "llvm -mcpu=haswell",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
@pytest.mark.parametrize("data,strides,pads,dilations", [
    ("uint8", (1, 1), (1, 1, 1, 1), (1, 1)),
    ("int8", (2, 2), (1, 1, 1, 1), (1, 1)),
    ("uint8", (2, 2), (0, 1, 2, 0), (2, 2)),
], ids=["stride1", "stride2", "asym-dilated"])
def test_integer_depthwise_convolution_is_exact(target, data, strides, pads, dilations):
    cpu = parse_cpu(target)
    shape, channels = (1, 24, 9, 11), 24
    sums, func = _lowered_depthwise(cpu, shape, (3, 3), strides, pads, dilations, data)
    # each block of rows summed inside the finishing loop, in a buffer of one block
    block, tile = sums.op.attrs["int8_rows"], sums.op.attrs["int8_depthwise"].channels
    assert _allocated_in_parallel_loop(func, sums.name) == [tile * block.extent]
    module = hllvm.build(func, cpu=cpu)
    if not _host_runs(cpu):
        assembly = module.assembly()
        if sums.op.attrs.get("int8_quads"):  # a kernel row per sdot (quads_apply)
            assert re.search(r"\tsdot\tv", assembly)
            return
        # cross-compiled: 16-bit vector products (int16 data times int8 weights) added
        # into the int32 sums by widening adds
        assert re.search(r"\tmul\tv\d+\.(8h|4h)", assembly)
        assert re.search(r"\tsaddw2?\tv", assembly)
        return
    rng = np.random.default_rng(5)
    info = np.iinfo(data)
    xs = rng.integers(info.min, info.max + 1, shape).astype(data)
    ws = rng.integers(-128, 128, (channels, 1, 3, 3)).astype(np.int8)
    z = np.array([info.min + 3], data)
    got = np.zeros(_depthwise_out(shape, (3, 3), strides, pads, dilations), np.int32)
    module["conv"](xs, ws, z, got)
    expected = np.concatenate([_reference(xs[:, c:c + 1], ws[c:c + 1], int(z[0]), strides,
                                          pads, dilations) for c in range(channels)], axis=1)
    np.testing.assert_array_equal(got, expected)


def test_a_padded_row_copy_moves_the_vectors_that_cost_least():
    """A depthwise copy (one column of padding each side) moves a register's lanes
    where a masked move of its elements is one instruction (AVX-512BW; at most the
    row); else the power of two whose vectors cost least, a vector one and an element
    of a vector crossing the image's border (moved lane by lane) half of one: AVX2 and
    NEON copy MobileNetV2's rows of 114 in vectors of 16 (NEON's int16: its register's
    8), of 58 and 30 in 8, of 16 and 9 in 4."""
    from heterocc.targets.llvm.schedules.int8_conv import lanes_by_lane

    widths = (112, 56, 28, 14, 7)

    def lanes(target, dtype):
        return [copy_lanes(w + 2, 1, w, dtype, parse_cpu(target)) for w in widths]

    for dtype in ("int16", "uint8"):
        assert lanes("llvm -mcpu=haswell", dtype) == [16, 8, 8, 4, 4]
    neon = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
    assert lanes(neon, "int16") == [8, 8, 8, 4, 4]
    assert lanes(neon, "uint8") == [16, 8, 8, 4, 4]
    assert lanes("llvm -mcpu=skylake-avx512", "int16") == [32, 32, 30, 16, 9]
    assert lanes("llvm -mcpu=skylake-avx512", "uint8") == [64, 58, 30, 16, 9]
    # the exactness test's 11-wide image: rows of 13 in vectors of 4
    assert copy_lanes(13, 1, 11, "int16", parse_cpu("llvm -mcpu=haswell")) == 4
    # what goes lane by lane: the vectors that cross a border, and the row's tail
    assert lanes_by_lane(114, 1, 112, 16) == 16 + 2
    assert lanes_by_lane(114, 1, 112, 32) == 32 + 18
    assert lanes_by_lane(9, 1, 7, 4) == 4 + 1
    assert lanes_by_lane(64, 0, 64, 16) == 0


def _depthwise_sums(out: te.Tensor) -> te.Tensor:
    """The sums (the ``int8_rows`` stage) that a depthwise convolution's result reads."""
    from heterocc.te.schedule_reads import reads_of

    return next(t for t in reads_of(out.op.body) if "int8_rows" in t.op.attrs)


def _depthwise_out(shape, kernel, strides, pads, dilations) -> tuple[int, ...]:
    """The output shape of a depthwise convolution."""
    sizes = [(shape[2 + i] + pads[i] + pads[2 + i] - dilations[i] * (kernel[i] - 1) - 1)
             // strides[i] + 1 for i in range(2)]
    return (shape[0], shape[1], *sizes)


def _lowered_depthwise(cpu, shape, kernel, strides, pads, dilations, data="uint8"):
    """A depthwise convolution's sums and its function (scheduled as the rules do)."""
    channels = shape[1]
    x = te.placeholder(shape, data, "x")
    w = te.placeholder((channels, 1, *kernel), "int8", "w")
    zero = te.placeholder((1,), data, "zero")
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": channels}
    out = int8_depthwise_conv(x, w, zero, attrs, cpu)
    sums = _depthwise_sums(out)
    schedule = te.create_schedule(out)
    schedule_int8_depthwise(schedule, sums, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    attach_copies_in_blocks(schedule, out, schedule[out], schedule[out].leaf_iter_vars[0])
    return sums, te.lower(schedule, [x, w, zero, out], name="conv")


def _allocated_in_parallel_loop(func, name: str) -> list[int]:
    """The sizes of the buffers called ``name`` that ``func`` allocates inside a
    parallel loop."""
    from heterocc.tir.stmt import Allocate, For, ForKind
    from heterocc.tir.visitor import collect

    return [a.buffer.size for loop in collect(func.body, lambda n: isinstance(n, For)
                                              and n.kind == ForKind.PARALLEL)
            for a in collect(loop.body, lambda n: isinstance(n, Allocate))
            if a.buffer.name == name]


@pytest.mark.parametrize("target", [HOST, "llvm -mcpu=haswell",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
@pytest.mark.parametrize("shape,filters,kernel,strides,pads", [
    ((1, 8, 14, 14), 32, (1, 1), (1, 1), (0, 0, 0, 0)),  # blocks of several rows
    ((1, 60, 7, 7), 64, (3, 3), (1, 1), (1, 1, 1, 1)),  # channel lanes
    ((2, 4, 20, 20), 8, (1, 1), (1, 1), (0, 0, 0, 0)),  # one row a block, batch 2
    ((1, 60, 15, 15), 128, (3, 3), (2, 2), (1, 1, 1, 1)),  # stride 2
    ((1, 16, 32, 32), 48, (1, 1), (1, 1), (0, 0, 0, 0)),  # rows of whole tiles
    ((1, 96, 1, 1), 4, (1, 1), (1, 1), (0, 0, 0, 0)),  # a squeeze-excite's 1x1 image
    ((1, 32, 28, 28), 192, (1, 1), (1, 1), (0, 0, 0, 0)),  # rows of a vector and a part
    ((1, 320, 7, 7), 64, (1, 1), (1, 1), (0, 0, 0, 0)),  # 1x1, channel lanes on AVX-512
    ((2, 8, 4, 12), 32, (1, 1), (1, 1), (0, 0, 0, 0)),  # whole tiles across rows, batch 2
    ((1, 8, 5, 5), 32, (1, 1), (1, 1), (0, 0, 0, 0)),  # a tile and a part across rows
], ids=["1x1-rows", "3x3-7x7", "1x1-batch2", "stride2", "1x1-tiles", "1x1-image",
        "1x1-28", "1x1-7x7", "1x1-4x12", "1x1-5x5"])
def test_blocks_of_rows_are_summed_inside_the_finishing_loop(target, shape, filters, kernel,
                                                             strides, pads):
    """The finishing stage (here the sums times 3 plus the channel) runs over blocks of
    output rows in parallel and computes each block's sums inside (a buffer of one
    block, never the whole output's sums in memory), bit-exact on every description."""
    cpu = parse_cpu(target)
    x = te.placeholder(shape, "uint8", "x")
    w = te.placeholder((filters, shape[1], *kernel), "int8", "w")
    zero = te.placeholder((1,), "uint8", "zero")
    attrs = {"strides": strides, "pads": pads, "dilations": (1, 1), "group": 1}
    result = int8_conv(x, w, zero, attrs, cpu)
    out = te.compute(result.shape, lambda b, k, y, c: result[b, k, y, c] * 3 + k, name="out",
                     dtype="int32")
    sums = result.op.body.a.tensor
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, sums, cpu)
    schedule_int8_conv_result(schedule, result, out, cpu=cpu)
    func = te.lower(schedule, [x, w, zero, out], name="conv")
    block = sums.op.attrs["int8_rows"]
    tiles = sums.op.attrs["int8_conv"]
    # a 1x1 convolution's dense sums, on a CPU of 32 vector registers (AVX-512, NEON;
    # not AVX2's 16): finished in registers, a tile at a time, where its rows or its
    # image are whole tiles (never a partial tile)
    width = getattr(tiles, "lanes", 0) * getattr(tiles, "vectors", 0)
    pixels = shape[2] * shape[3]
    register_finished = (cpu.vector_registers >= 32 and kernel == (1, 1) and not any(pads)
                         and not isinstance(tiles, Int8ChannelTiles)
                         and (shape[3] % width == 0 or pixels % width == 0))
    assert bool(sums.op.attrs.get(INT8_FINISH_TILES)) == register_finished
    if register_finished:
        # each tile's sums finished while in registers, a buffer of one tile (which LLVM
        # keeps in registers); a task finishes several rows of its tile (or several
        # tiles, across rows) where the pool still has tasks enough to share
        # (finish_rows_per_task); in row tasks (row_tasks) every tile of channels is in
        # each task: the tasks share out each image's runs
        from heterocc.targets.llvm.schedules.int8_conv import INT8_ROW_TASKS
        channel_tiles = shape[0] * (1 if sums.op.attrs[INT8_ROW_TASKS]
                                    else filters // tiles.channels)
        if shape[3] % width == 0:
            assert block.rows == 1
            units = shape[2]
        else:
            assert (block.rows, block.extent) == (shape[2], pixels)
            units = pixels // width
        tasks = channel_tiles * units // finish_rows_per_task(units, channel_tiles, cpu)
        assert set(_allocated_in_parallel_loop(func, sums.name)) == {tiles.channels * width}
        assert _parallel_extents(func, sums.name) == [tasks]
    elif shape[2:] != (1, 1):  # (a 1x1 image of 4 filters is one task: no parallel loop)
        assert _allocated_in_parallel_loop(func, sums.name) == [tiles.channels * block.extent]
    if isinstance(tiles, Int8ChannelTiles):  # only the output's pixels, rows of them
        assert tuple(sums.shape[2:4]) == tuple(result.shape[2:])
        assert block.extent == block.rows * result.shape[3]
    else:
        assert sums.shape[2] * block.rows == result.shape[2]
        assert block.extent % cpu.vector_lanes("int32") == 0
    module = hllvm.build(func, cpu=cpu)
    lanes = cpu.vector_lanes("int32")
    back_to_back = kernel == (1, 1) and not any(pads) or isinstance(tiles, Int8ChannelTiles)
    if back_to_back and block.rows > 1 and (
            shape[3] < lanes or (shape[3] < 2 * lanes and block.rows * shape[3] % lanes == 0)):
        # a block's rows lie back to back in the sums as in the output (channel lanes'
        # sums hold only the output's pixels), each shorter than a vector (or a vector
        # and a part, the block whole vectors): finished in whole vectors across rows,
        # never a partial vector per row of 14 or 7 pixels (or of the 12 past a
        # 28-pixel row's first vector)
        assert f"<{shape[3] % lanes} x i32>" not in module.ir
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(12)
    xs = rng.integers(0, 256, shape).astype(np.uint8)
    ws = rng.integers(-128, 128, (filters, shape[1], *kernel)).astype(np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](xs, ws, np.array([131], np.uint8), got)
    expected = _reference(xs, ws, 131, strides, pads, (1, 1)) * 3 \
        + np.arange(filters)[None, :, None, None]
    np.testing.assert_array_equal(got, expected)


def _parallel_extents(func, name: str) -> list[int]:
    """The extents of ``func``'s parallel loops that allocate buffer ``name``."""
    from heterocc.tir.stmt import Allocate, For, ForKind
    from heterocc.tir.visitor import collect

    return [loop.extent.value for loop in collect(
        func.body, lambda n: isinstance(n, For) and n.kind == ForKind.PARALLEL)
        if collect(loop.body, lambda n: isinstance(n, Allocate) and n.buffer.name == name)]


def test_register_finished_rows_are_shared_in_tasks_of_several_rows():
    """A convolution finished in register tiles takes the most rows a task that leave
    four tasks a core, shared evenly: MobileNetV2's 16->96 at 112x112 (six tiles of 16
    channels) in halves of the image on two cores, in quarters on four; a single tile
    in 14-row tasks; one row a task where nothing larger divides the height evenly."""
    two, four = (parse_cpu(f"{SPR} -num-cores={n}") for n in (2, 4))
    assert finish_rows_per_task(112, 6, two) == 56  # 12 tasks
    assert finish_rows_per_task(112, 6, four) == 28  # 24 tasks
    assert finish_rows_per_task(112, 1, two) == 14  # 8 tasks
    assert finish_rows_per_task(7, 1, two) == 1  # 7 tasks: fewer than 8 either way
    for height, tiles, cpu in ((112, 6, two), (56, 9, four), (28, 3, two), (13, 5, four)):
        rows = finish_rows_per_task(height, tiles, cpu)
        tasks = tiles * height // rows
        assert height % rows == 0
        assert rows == 1 or (tasks >= 4 * cpu.num_cores and tasks % cpu.num_cores == 0)


def test_row_blocks_drop_fewest_positions_within_half_the_l1_cache():
    """A 14x14 1x1 convolution sums all 14 rows at once (208 positions for 196 pixels);
    rows of whole vectors (every row count wastes nothing) in the most rows within half
    of L1d: a 112-wide one two rows at a time, a 14x14 3x3 one (16 positions a row) all
    14; a 56-wide 3x3 one (58 positions a row) the rows that waste least; every block
    within half of L1d."""
    from heterocc.targets.llvm.schedules.int8_conv import RowBlocks

    cpu = parse_cpu(SPR)
    assert row_blocks(14, 14, 14, 16, 16, cpu) == RowBlocks(14, 208)
    assert row_blocks(112, 112, 112, 16, 16, cpu) == RowBlocks(2, 224)
    assert row_blocks(14, 16, 14, 16, 8, cpu) == RowBlocks(14, 224)
    for height, length, width in ((56, 58, 56), (28, 30, 28), (7, 9, 7), (56, 56, 56)):
        blocks = row_blocks(height, length, width, 16, 16, cpu)
        assert height % blocks.rows == 0 and blocks.extent % 16 == 0
        assert 16 * blocks.extent * 4 <= cpu.l1d // 2 or blocks.rows == 1
        assert blocks.extent >= (blocks.rows - 1) * length + width
    # a dense convolution's blocks may fill the whole L1d: 8 rows of a 56-wide 3x3
    assert row_blocks(56, 58, 56, 16, 16, cpu, budget=cpu.l1d) == RowBlocks(8, 464)
    one_core = parse_cpu(SPR + " -num-cores=1")
    assert conv_tiling(64, 56, 56, 58, one_core)[1] == RowBlocks(8, 464)
    # on two cores too: the thread pool's chunks of 28 tasks (4, 4, 4, 4, 3, 3, 3, 3)
    # leave each core 14
    two_cores = parse_cpu(SPR + " -num-cores=2")
    assert conv_tiling(64, 56, 56, 58, two_cores)[1] == RowBlocks(8, 464)


@pytest.mark.parametrize("target", [SPR, "llvm -mcpu=haswell",
                                    "llvm -mcpu=sapphirerapids -mattr=-avx512f,-amx-tile",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["avx512", "avx2", "avxvnni", "neon"])
def test_register_tiles_fit_the_registers_and_share_each_weight(target, monkeypatch):
    """Every candidate tile's accumulators, data vectors and broadcast weight fit the
    description's vector registers, less four where the dot product is widened
    (Haswell's ``pmaddwd``) and less none where it is one instruction (``vpdpbusd``,
    ``sdot``); a ResNet-50 1x1 convolution at 14x14 takes one vector of the most
    channels where that tile has the accumulators the dot product needs in flight
    (:func:`accumulators_in_flight`: all but AVX-VNNI's 16 registers; fewest positions,
    each data vector read by most instructions); a 7x7 output is not rounded past the
    vectors one-vector tiles would compute; a tile of several data vectors (forced
    here) reads each broadcast weight once for all of them, bit-exact."""
    cpu = parse_cpu(target)
    reserve = tile_register_reserve(cpu)
    assert reserve == (4 if target.endswith("haswell") else 0)
    for filters in (8, 12, 64, 96, 512):
        for tiles in tile_candidates(filters, cpu):
            assert filters % tiles.channels == 0
            assert tiles.vectors == 1 or \
                tiles.channels * tiles.vectors + tiles.vectors + 1 <= cpu.vector_registers - reserve
    tiles, blocks = conv_tiling(256, 14, 14, 14, cpu)
    if int8_conv_tiles(256, cpu).channels >= accumulators_in_flight(cpu):
        assert (tiles.channels, tiles.vectors) == (int8_conv_tiles(256, cpu).channels, 1)
    assert blocks.extent % tiles.lanes == 0
    single = row_blocks(7, 9, 7, tiles.lanes, 16, cpu)
    tiles, blocks = conv_tiling(512, 7, 7, 9, cpu)
    assert 7 // blocks.rows * blocks.extent <= 7 // single.rows * single.extent
    widest = max(tile_candidates(64, cpu), key=lambda t: t.vectors)
    assert widest.vectors > 1

    def forced(filters, out_height, out_width, row_length, cpu, group_filters=None):
        return widest, row_blocks(out_height, row_length, out_width,
                                  widest.lanes * widest.vectors, widest.channels, cpu)

    module = importlib.import_module(int8_conv.__module__)
    monkeypatch.setattr(module, "conv_tiling", forced)
    monkeypatch.setattr(module, "channel_lanes_tiles", lambda *args: None)
    shape, kernel, pads = (1, 64, 14, 14), (3, 3), (1, 1, 1, 1)
    module, out = _build(shape, 64, kernel, (1, 1), pads, (1, 1), cpu)
    assert out.op.body.a.tensor.op.attrs["int8_conv"] == widest
    if cpu.arch == "x86_64" and "avx512f" in cpu.features:
        assembly = module.assembly()
        # one broadcast per weight, an instruction per data vector for each (and a few
        # broadcasts outside the tile)
        assert assembly.count("vpdpbusd") >= 2 * assembly.count("vpbroadcastd") > 0
    _matches_reference_on_host(module, out, cpu, shape, 64, kernel, pads, -3, 5)


def test_where_the_loads_bind_a_padded_convolution_loads_each_weight_for_several_vectors():
    """On a CPU whose 512-bit dot products outpace a load each (Zen 5: its family's
    ``wide_dot_loads``, from ``benchmarks/int8_tile_loads.py``), a padded 3x3
    convolution takes a tile of several data vectors, which loads each broadcast weight
    once for all of them (fewer loads per instruction than the CPU sustains), bit-exact;
    sums finished in registers (a 1x1 without padding), the same CPU's AVX2 code and
    Zen 4 (whose loads do not bind) keep the one-vector tile of the most channels."""
    zen5 = parse_cpu("llvm -mcpu=znver5 -num-cores=2")
    assert zen5.dot_load_budget == 0.9
    for filters, size in ((64, 56), (128, 28)):
        tiles, blocks = conv_tiling(filters, size, size, size + 2, zen5)
        assert tiles.vectors > 1 and tile_loads(tiles) <= zen5.dot_load_budget
        assert blocks.extent % (tiles.lanes * tiles.vectors) == 0
    assert conv_tiling(96, 112, 112, 112, zen5)[0].vectors == 1
    zen4 = parse_cpu("llvm -mcpu=znver4 -num-cores=2")
    assert zen4.dot_load_budget is None
    assert conv_tiling(64, 56, 56, 58, zen4)[0].vectors == 1
    shape, kernel, pads = (1, 32, 28, 28), (3, 3), (1, 1, 1, 1)
    module, out = _build(shape, 64, kernel, (1, 1), pads, (1, 1), zen5)
    assert out.op.body.a.tensor.op.attrs["int8_conv"].vectors > 1
    _matches_reference_on_host(module, out, zen5, shape, 64, kernel, pads, 5, 11)


@pytest.mark.parametrize("target", ["llvm -mcpu=alderlake -num-cores=2",
                                    "llvm -mcpu=znver5 -mattr=-avx512f -num-cores=2"],
                         ids=["alderlake", "zen5-avx2"])
def test_sixteen_registers_of_one_instruction_dot_products_keep_enough_sums_in_flight(target):
    """With 16 vector registers and a dot product that is one instruction (AVX-VNNI's
    256-bit ``vpdpbusd``), a register tile has no widened temporaries to leave room for:
    ResNet's 3x3 and 1x1 convolutions take tiles of :data:`DOT_CHAINS` accumulators or
    more (the one-vector tile's 8 leave the instruction's latency uncovered), within the
    16 registers with their data vectors and broadcast weight, bit-exact; Haswell, whose
    dot product is widened (its products added by a one-cycle add, not waiting on the
    accumulator), keeps four registers for it and its tiles fit in 12."""
    cpu = parse_cpu(target)
    assert cpu.vector_registers == 16 and tile_register_reserve(cpu) == 0
    for filters, size, row_length in ((64, 56, 57), (128, 28, 29), (256, 28, 28)):
        tiles, _ = conv_tiling(filters, size, size, row_length, cpu)
        accumulators = tiles.channels * tiles.vectors
        assert accumulators >= DOT_CHAINS
        assert accumulators + tiles.vectors + 1 <= cpu.vector_registers
    assert accumulators_in_flight(cpu) == DOT_CHAINS
    haswell = parse_cpu("llvm -mcpu=haswell")
    assert tile_register_reserve(haswell) == 4 and accumulators_in_flight(haswell) == 1
    tiles, _ = conv_tiling(64, 56, 56, 57, haswell)
    assert tiles.vectors == 1 or \
        tiles.channels * tiles.vectors + tiles.vectors + 1 <= haswell.vector_registers - 4
    shape, kernel, pads = (1, 32, 28, 28), (3, 3), (1, 1, 1, 1)
    module, out = _build(shape, 64, kernel, (1, 1), pads, (1, 1), cpu)
    built = out.op.body.a.tensor.op.attrs["int8_conv"]
    assert built.channels * built.vectors >= DOT_CHAINS
    _matches_reference_on_host(module, out, cpu, shape, 64, kernel, pads, -7, 13)


@pytest.mark.parametrize("target", [HOST, "llvm -mcpu=haswell"], ids=["host", "avx2"])
@pytest.mark.parametrize("shape,filters,kernel,strides,pads,dilations,phases", [
    ((1, 8, 14, 14), 16, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), (1, 1)),  # downsample
    ((1, 3, 17, 17), 8, (7, 7), (2, 2), (3, 3, 3, 3), (1, 1), (2, 2)),  # a stem
    ((1, 5, 16, 13), 8, (3, 2), (3, 2), (1, 0, 2, 1), (2, 1), (3, 2)),  # stride 3, dilated
], ids=["1x1-s2", "7x7-s2", "s3x2-dilated"])
def test_strided_convolutions_read_the_stride_phases_flat(target, shape, filters, kernel,
                                                          strides, pads, dilations, phases):
    """A strided convolution's data is packed by the stride's phases, each phase's
    pixels numbered row after row, so that its vectors run on across rows as with
    stride 1; only the phases the taps read are packed (one for a 1x1); bit-exact."""
    cpu = parse_cpu(target)
    module, out = _build(shape, filters, kernel, strides, pads, dilations, cpu)
    sums = out.op.body.a.tensor
    data, _ = int8_conv_inputs(sums)
    assert tuple(data.shape[2:4]) == phases
    if "int8_interleaved" in data.op.attrs:
        # the padded copy holds whole rows; the interleaved data whole runs of its
        # vector step
        (copy,) = reads_of(data.op.body)
        assert copy.shape[2] == phases[0] * phases[1]
        assert copy.shape[3] % copy.op.attrs["int8_row"] == 0
        assert data.shape[4] % data.op.attrs["int8_interleaved"] == 0
    else:  # rows too short to copy in vectors: packed byte by byte, whole rows
        assert data.shape[4] % data.op.attrs["int8_row"] == 0
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(sum(shape) + filters)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    w = rng.integers(-128, 128, (filters, shape[1], *kernel)).astype(np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](x, w, np.array([5], np.int8), got)
    np.testing.assert_array_equal(got, _reference(x, w, 5, strides, pads, dilations))


@pytest.mark.parametrize("target", [HOST, "llvm -mcpu=haswell",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
@pytest.mark.parametrize("shape,kernel,strides,pads,phases", [
    ((1, 3, 30, 30), (7, 7), (2, 2), (3, 3, 3, 3), 4),  # a stem: one channel group
    ((1, 3, 31, 31), (3, 3), (2, 2), (0, 0, 0, 0), 4),  # SqueezeNet's, unpadded
    ((1, 8, 16, 16), (3, 3), (1, 1), (1, 1, 1, 1), 1),  # stride 1: groups alone
], ids=["stem", "stem-unpadded", "3x3"])
def test_the_packing_runs_each_stride_phase_in_parallel(target, shape, kernel, strides,
                                                        pads, phases):
    """The data's packing runs batch, channel groups and stride phases as one parallel
    loop, so that a stem's three channels (one group) are packed by more than one core
    where the stride splits them in phases; or, where the convolution runs in row tasks
    (``row_tasks``), inside each task for its rows; bit-exact."""
    from heterocc.targets.llvm.schedules.int8_conv import INT8_ROW_TASKS
    from heterocc.tir.stmt import For, ForKind
    from heterocc.tir.visitor import collect

    cpu = parse_cpu(target)
    x = te.placeholder(shape, "uint8", "x")
    w = te.placeholder((16, shape[1], *kernel), "int8", "w")
    zero = te.placeholder((1,), "uint8", "zero")
    attrs = {"strides": strides, "pads": pads, "dilations": (1, 1), "group": 1}
    out = int8_conv(x, w, zero, attrs, cpu)
    sums = out.op.body.a.tensor
    data, _ = int8_conv_inputs(sums)
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, sums, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    func = te.lower(schedule, [x, w, zero, out], name="conv")
    groups = -(-shape[1] // 4)
    packing = [loop for loop in collect(func.body, lambda n: isinstance(n, For)
                                        and n.kind == ForKind.PARALLEL)
               if data.op.name in str(loop.body)
               and not any(t.op.name in str(loop.body) for t in (sums, out))]
    if sums.op.attrs[INT8_ROW_TASKS]:  # no loop of its own: the tasks allocate it
        (tasks,) = [loop for loop in collect(func.body, lambda n: isinstance(n, For)
                                             and n.kind == ForKind.PARALLEL)
                    if sums.op.name in str(loop.body)]
        assert packing == [] and f"allocate {data.op.name}" in str(tasks.body)
    else:
        assert [loop.extent.value for loop in packing] == [groups * phases]
    module = hllvm.build(func, cpu=cpu)
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(sum(shape))
    xs = rng.integers(0, 256, shape).astype(np.uint8)
    ws = rng.integers(-128, 128, (16, shape[1], *kernel)).astype(np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](xs, ws, np.array([200], np.uint8), got)
    np.testing.assert_array_equal(got, _reference(xs, ws, 200, strides, pads, (1, 1)))


@pytest.mark.parametrize("target", [SPR, "llvm -mcpu=haswell",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["avx512", "avx2", "neon"])
def test_blocks_are_shared_evenly_by_the_cores(target):
    """The tiles and blocks of rows are chosen for the busiest core's time: SqueezeNet's
    384->48 1x1 at 13x13 on two cores of AVX-512 or NEON takes four tiles of 12 channels
    (three of 16 leave one core half the time idle) but three of 16 on one core (least
    work); MobileNetV2's 960->160 at 7x7 on channel lanes (five tiles) takes blocks of a
    row on two cores, of the whole image on one; ResNet's layers keep their tiles. The
    12-channel tile is bit-exact."""
    from heterocc.targets.llvm.schedules.int8_conv import channel_tiling, pool_makespan

    one, two = (parse_cpu(f"{target} -num-cores={cores}") for cores in (1, 2))
    base = int8_conv_tiles(48, one).channels
    tiles, blocks = conv_tiling(48, 13, 13, 13, one)
    assert (tiles.channels, blocks.rows) == (base, 13)
    tiles, blocks = conv_tiling(48, 13, 13, 13, two)
    squeeze_tiles = tiles
    if base == 16:  # AVX-512, NEON: 3 tiles of 16 -> 4 of 12
        assert (tiles.channels, tiles.vectors, blocks.rows) == (12, 1, 13)
    else:  # AVX2: 6 tiles of 8 already share two cores
        assert tiles.channels == base
    # ResNet's 64->64 3x3 at 56x56 keeps its tile, its blocks of rows as many tasks as
    # the thread pool's chunks share evenly
    (tiles, blocks), (one_tiles, _) = (conv_tiling(64, 56, 56, 58, c) for c in (two, one))
    assert tiles == one_tiles
    assert pool_makespan(64 // tiles.channels * (56 // blocks.rows), 2) == 1.0
    lanes = channel_tiling(160, 7, 7, two)
    if 160 // lanes.channels % 2:
        assert lanes.rows == 1
    assert channel_tiling(160, 7, 7, one).rows == 7
    if not _host_runs(two):
        return
    shape = (1, 384, 13, 13)
    x = te.placeholder(shape, "uint8", "x")
    w = te.placeholder((48, 384, 1, 1), "int8", "w")
    zero = te.placeholder((1,), "uint8", "zero")
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    out = int8_conv(x, w, zero, attrs, two)
    sums = out.op.body.a.tensor
    assert sums.op.attrs["int8_conv"].channels == squeeze_tiles.channels
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, sums, two)
    schedule_int8_conv_result(schedule, out, cpu=two)
    module = hllvm.build(te.lower(schedule, [x, w, zero, out], name="conv"), cpu=two)
    rng = np.random.default_rng(13)
    xs = rng.integers(0, 256, shape).astype(np.uint8)
    ws = rng.integers(-128, 128, (48, 384, 1, 1)).astype(np.int8)
    xs[0, :4, 0, 0], ws[0, :4, 0, 0] = 255, -128
    got = np.zeros(out.shape, np.int32)
    module["conv"](xs, ws, np.array([7], np.uint8), got)
    np.testing.assert_array_equal(got, _reference(xs, ws, 7, (1, 1), (0, 0, 0, 0), (1, 1)))


def test_int16_pairs_take_the_pair_product_instruction():
    """The dot product of int16 pairs (a depthwise convolution's pair of taps) is
    ``vpdpwssd`` with AVX-512 VNNI or AVX-VNNI, ``vpmaddwd`` on AVX-512BW and AVX2, the
    widened form elsewhere (and for unsigned operands, which it never gets)."""
    expected = ["vpdpwssd", "vpdpwssd", "pmaddwd", "pmaddwd", "generic"]
    for (target, _), instruction in zip(DESCRIPTIONS, expected):
        cpu = parse_cpu(target)
        lanes = cpu.vector_lanes("int32")
        assert dot4_instruction(cpu.features, cpu.arch, lanes, False, False, 16) \
            == instruction, target
        assert dot4_instruction(cpu.features, cpu.arch, lanes, True, False, 16) == "generic"


@pytest.mark.parametrize("target,instruction", [
    # (x86 with AVX2 or later takes the window kernel: quads_apply) SSE, without a
    # masked move of bytes: where the copied rows mostly load whole vectors
    ("llvm -mcpu=nehalem", "pmaddwd"),
], ids=["sse"])
@pytest.mark.parametrize("shape,kernel,strides,pads,dilations", [
    ((1, 24, 9, 11), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 16, 14, 14), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # 7x7 out: vectors span rows
    ((1, 8, 13, 12), (5, 2), (3, 2), (2, 0, 1, 1), (2, 1)),  # even width, row stride 3
    ((1, 8, 6, 9), (1, 5), (1, 2), (0, 2, 0, 2), (1, 1)),
    ((1, 8, 5, 64), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # rows of mostly whole vectors
    ((1, 8, 4, 66), (3, 4), (2, 2), (1, 2, 1, 1), (1, 1)),  # even kernel width, wide
], ids=["3x3", "14to7", "5x2-s3x2-dilated", "1x5-s1x2", "wide", "wide-3x4"])
def test_a_depthwise_convolution_of_column_stride_2_takes_its_taps_in_pairs(
        target, instruction, shape, kernel, strides, pads, dilations):
    """With column stride 2 (and column dilation 1) on AVX-512BW, a depthwise
    convolution's neighbouring column taps are one pair product per vector
    (``vpdpwssd``, or ``vpmaddwd`` without VNNI) over rows copied by row phase;
    bit-exact against int64 sums for odd and even kernel widths, row strides and
    dilations. On AVX2, whose copy of a vector crossing the image's border goes lane by
    lane, only where most of a copied row's vectors lie inside the image."""
    cpu = parse_cpu(target)
    channels = shape[1]
    sums, func = _lowered_depthwise(cpu, shape, kernel, strides, pads, dilations)
    module = hllvm.build(func, cpu=cpu)
    if not masked_byte_loads(cpu) and not rows_mostly_whole(shape[3], pads[1], pads[3],
                                                            cpu):
        instruction = None  # the column-phase kernel
    assert bool(sums.op.attrs.get("int8_pairs")) == (instruction is not None)
    if instruction is not None:
        assert re.search(rf"\t(\{{vex\}}\t)?{instruction}\t", module.assembly())
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(sum(shape))
    xs = rng.integers(0, 256, shape).astype(np.uint8)
    ws = rng.integers(-128, 128, (channels, 1, *kernel)).astype(np.int8)
    got = np.zeros(_depthwise_out(shape, kernel, strides, pads, dilations), np.int32)
    module["conv"](xs, ws, np.array([200], np.uint8), got)
    expected = np.concatenate([_reference(xs[:, c:c + 1], ws[c:c + 1], 200, strides, pads,
                                          dilations) for c in range(channels)], axis=1)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("stride", [1, 2])
def test_a_constant_depthwise_weight_is_packed_when_the_kernel_is_built(tmp_path, stride):
    """A depthwise convolution's constant weight is packed once, when the kernel is
    built (``depthwise_weight_packing``: its quads where the window kernel takes it,
    else repeated into its int16 vectors), not on every call: the kernel holds the
    packed constant, and the model (and its exported artifact, which packs it again on
    load) gives the integer reference's bits; with stride 2 too (on AVX-512BW without
    VBMI its taps in column pairs, read from that constant)."""
    pytest.importorskip("onnxruntime.quantization")
    import heterocc
    from heterocc.runtime.interpreter import evaluate
    from heterocc.targets.llvm.schedules import (
        depthwise_weight_packing,
        pack_depthwise_weight_array,
    )

    source, shape, _ = _inverted_residual(stride)
    compiled = heterocc.compile(_quantized(source, shape, "QUInt8", tmp_path),
                                target="llvm")
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    got = compiled.run([x])[0]
    np.testing.assert_array_equal(got, evaluate(compiled.graph, [x])[0])
    cpu = hllvm.module.host().description
    attrs = {"strides": (stride, stride), "dilations": (1, 1)}
    packed_shape, dtype, packing = depthwise_weight_packing((32, 1, 3, 3), attrs, cpu)
    kernels = [k for _, n in compiled.graph.walk() if n.body is not None
               for k in [n] if any(b.op == "ConvInteger" and b.attrs.get("group") == 32
                                   for b in n.body.nodes)]
    assert len(kernels) == 1
    executor = next(iter(compiled._cache.values())).executor
    constants = executor.kernels[kernels[0].name].constants
    packed = [c for c in constants if c.shape == packed_shape]
    assert len(packed) == 1 and packed[0].dtype == np.dtype(dtype)
    # the weight itself: each tap's first lane, or the quads' taps before the zeros
    # (and before the row of weight sums)
    weight = (packed[0][:, :3, 0, :3].reshape(32, 1, 3, 3) if dtype == "int8" else
              packed[0][:, :, :, :1].reshape(32, 1, 3, 3).astype(np.int8))
    np.testing.assert_array_equal(packed[0], pack_depthwise_weight_array(weight, packing))
    compiled.export(str(tmp_path / "artifact"))
    loaded = heterocc.load(str(tmp_path / "artifact"))
    np.testing.assert_array_equal(loaded.run([x])[0], got)


@pytest.mark.parametrize("target,instruction", [
    (SPR, "vpdpbusd"),
    # VNNI without VBMI's byte shuffle: each 128-bit block's window by pshufb
    ("llvm -mcpu=cascadelake", "vpdpbusd"),
    ("llvm -mcpu=alderlake", "{vex}\tvpdpbusd"),  # AVX-VNNI, 256 bits
    # without VNNI: two pmaddwd a row by the weights widened when packed
    ("llvm -mcpu=sapphirerapids -mattr=-avx512vnni,-amx-tile", "vpmaddwd"),
    ("llvm -mcpu=haswell", "vpmaddwd"),
    ("llvm -mcpu=nehalem", None),  # SSE: the 16-bit products
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", "sdot"),
], ids=["vnni", "vnni-no-vbmi", "avx-vnni", "avx512bw", "avx2", "sse", "neon"])
@pytest.mark.parametrize("shape,kernel,strides,pads,dilations,data", [
    ((1, 24, 9, 11), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "uint8"),
    ((2, 16, 12, 12), (3, 3), (1, 1), (0, 2, 1, 0), (1, 1), "int8"),  # batch 2, uneven pads
    ((1, 8, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), "uint8"),  # two quads a row
    ((1, 8, 10, 13), (2, 3), (1, 1), (1, 2, 0, 1), (2, 2), "int8"),  # dilated
    ((1, 8, 9, 28), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "uint8"),  # stride 2: 14 wide
    ((1, 8, 11, 30), (3, 3), (3, 2), (0, 1, 2, 2), (1, 2), "int8"),  # strided, dilated
], ids=["3x3", "batch2-pads", "5x5", "dilated", "stride2", "s3x2-dilated"])
def test_a_depthwise_convolution_takes_a_kernel_row_per_window_dot_product(
        target, instruction, shape, kernel, strides, pads, dilations, data):
    """Where the CPU has the 8-bit dot product and a byte shuffle (of the whole vector,
    or of its 128-bit blocks: x86 without VBMI), a depthwise convolution's kernel row is
    one window load, shuffle and dot product per vector of pixels (``quads_apply``):
    bit-exact against int64 sums for uint8 and int8 data, batch 2, uneven padding, two
    quads a row, dilations and strides (and the extremes: a channel of -128 weights);
    elsewhere the 16-bit products or the column pairs."""
    cpu = parse_cpu(target)
    channels = shape[1]
    sums, func = _lowered_depthwise(cpu, shape, kernel, strides, pads, dilations, data)
    module = hllvm.build(func, cpu=cpu)
    assert bool(sums.op.attrs.get("int8_quads")) == (instruction is not None)
    if instruction is not None:
        assembly = module.assembly()
        assert re.search(rf"\t{instruction}\t", assembly)
        # the window's shuffle: of the whole vector, or of each 128-bit block
        shuffle = r"\tvpshufb\t" if window_blocks(cpu.features, cpu.arch,
                                                   cpu.vector_lanes("int32")) \
            else r"\tvperm(?:[ti]2)?[bw]\t|\ttbl\t"
        assert re.search(shuffle, assembly)
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(sum(shape))
    info = np.iinfo(data)
    xs = rng.integers(info.min, info.max + 1, shape).astype(data)
    ws = rng.integers(-128, 128, (channels, 1, *kernel)).astype(np.int8)
    ws[0] = -128  # the extremes: a channel of -128 weights over the widest data
    z = np.array([info.min + 5], data)
    got = np.zeros(_depthwise_out(shape, kernel, strides, pads, dilations), np.int32)
    module["conv"](xs, ws, z, got)
    expected = np.concatenate([_reference(xs[:, c:c + 1], ws[c:c + 1], int(z[0]), strides,
                                          pads, dilations) for c in range(channels)], axis=1)
    np.testing.assert_array_equal(got, expected)


def test_the_window_kernel_needs_the_dot_product_and_a_byte_shuffle():
    """``quads_apply``: the 8-bit dot product and a byte shuffle, and a window within
    what one shuffle gathers from: one vector of bytes (VBMI, NEON), or each 128-bit
    block's 16 bytes (x86 without VBMI); any stride."""
    from heterocc.targets.llvm.schedules.int8_depthwise_quads import quads_apply

    vnni = parse_cpu(SPR)  # 16 int32 lanes
    assert quads_apply((1, 1), (1, 1), vnni)
    assert quads_apply((2, 2), (1, 1), vnni)
    assert quads_apply((1, 1), (8, 8), vnni)  # 15 + 24 + 1 = 40 bytes
    assert not quads_apply((1, 1), (20, 20), vnni)  # 76 bytes: past one vector
    assert quads_apply((1, 4), (1, 1), vnni)  # 60 + 3 + 1 = 64 bytes
    assert not quads_apply((1, 5), (1, 1), vnni)  # 79 bytes
    # VNNI without VBMI: each 128-bit block's four lanes by pshufb, their windows
    # within 16 bytes
    cascadelake = parse_cpu("llvm -mcpu=cascadelake")
    assert quads_apply((1, 1), (1, 1), cascadelake)
    assert quads_apply((1, 4), (1, 1), cascadelake)  # 12 + 3 + 1 = 16 bytes
    assert not quads_apply((1, 5), (1, 1), cascadelake)  # 19 bytes
    assert quads_apply((1, 1), (4, 4), cascadelake)  # 3 + 12 + 1
    assert not quads_apply((1, 1), (5, 5), cascadelake)
    assert quads_apply((1, 1), (1, 1), parse_cpu("llvm -mcpu=alderlake"))  # AVX-VNNI
    # without VNNI, the weights widened (two pmaddwd a row); not on SSE's 4 lanes
    assert quads_apply((1, 1), (1, 1), parse_cpu(
        "llvm -mcpu=sapphirerapids -mattr=-avx512vnni,-amx-tile"))
    assert quads_apply((1, 1), (1, 1), parse_cpu("llvm -mcpu=haswell"))
    assert not quads_apply((1, 1), (1, 1), parse_cpu("llvm -mcpu=nehalem"))
    assert quads_apply((1, 1), (1, 1), parse_cpu(
        "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"))


def _window_reads(func, cpu) -> list[tuple[str, int, int]]:
    """``(buffer, its size, the last element a window load reads)`` for every window
    dot product (:data:`.int8_dot.DOT4_CALL` with a stride and a dilation) of ``func``,
    the load's index evaluated at every value of the loops around it."""
    import itertools

    from heterocc.targets.llvm.int8_dot import DOT4_CALL, window_read_bytes
    from heterocc.tir import expr as tx
    from heterocc.tir.simplify import simplify
    from heterocc.tir.stmt import BufferStore, For
    from heterocc.tir.visitor import children, collect, free_vars, substitute

    found = []

    def visit(node, loops: dict):
        if isinstance(node, For):
            loops = {**loops, node.var: range(node.min.value, node.min.value + node.extent.value)}
        if isinstance(node, BufferStore):
            for call in collect(node.value, lambda n: isinstance(n, tx.Call)
                                and n.name == DOT4_CALL and len(n.args) == 7):
                data = call.args[1]
                (index,) = data.indices
                names = sorted(free_vars(index), key=lambda v: v.name)
                last = max(simplify(substitute(index, dict(zip(names, map(tx.IntImm, values)))))
                           .value for values in itertools.product(*(loops[v] for v in names)))
                span, stride = call.args[3].value, call.args[5].value
                lanes = tx.lanes_of(call.dtype)
                found.append((data.buffer.name, data.buffer.size, last + window_read_bytes(
                    span, lanes, stride, cpu.features, cpu.arch) - 1))
            return
        for child in children(node):
            if not isinstance(child, tx.Expr):
                visit(child, loops)

    visit(func.body, {})
    return found


@pytest.mark.parametrize("target", [SPR, "llvm -mcpu=cascadelake",
                                    "llvm -mcpu=alderlake",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["vnni", "vnni-no-vbmi", "avx-vnni", "neon"])
@pytest.mark.parametrize("shape,kernel,strides,pads,dilations", [
    ((1, 8, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # MobileNetV2's last layers
    ((1, 8, 14, 14), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),  # its 14x14 stride 2
    ((1, 8, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),  # MNASNet's 5x5, two quads
    ((1, 8, 11, 30), (3, 3), (3, 2), (0, 1, 2, 2), (1, 2)),  # strided, dilated
], ids=["7x7", "14x14-s2", "5x5", "s3x2-dilated"])
def test_the_window_loads_stay_in_the_padded_copy_and_it_holds_no_whole_spare_row(
        target, shape, kernel, strides, pads, dilations):
    """The padded copy of the window kernel holds every byte a window load reads (a
    whole vector of bytes, or 16 bytes a 128-bit block, past the last output position:
    those lanes are dropped) and less than one row more, so that no spare row of the
    zero point is written on every call."""
    cpu = parse_cpu(target)
    sums, func = _lowered_depthwise(cpu, shape, kernel, strides, pads, dilations)
    assert sums.op.attrs.get("int8_quads")
    reads = _window_reads(func, cpu)
    assert reads
    padded = quad_stages(sums)["padded"]
    row, phases = padded.op.attrs["int8_row"], padded.shape[2]
    for buffer, size, last in reads:
        assert last < size, f"{buffer}: a window load reads byte {last} of {size}"
    # the last channel's last row phase: the rows of every phase are as many as the
    # furthest-reaching phase needs, less than one row past its reads
    assert max(last for _, _, last in reads) >= reads[0][1] - phases * row


@pytest.mark.parametrize("target,packings", [
    (SPR, ("quads", "quads")),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", ("quads", "quads")),
    ("llvm -mcpu=cascadelake", ("quads", "quads")),  # VNNI without VBMI: pshufb
    # without VNNI: the quads widened to int16
    ("llvm -mcpu=sapphirerapids -mattr=-avx512vnni,-amx-tile", ("widened", "widened")),
    ("llvm -mcpu=haswell", ("widened", "widened")),
    ("llvm -mcpu=nehalem", ("lanes", "lanes")),  # SSE: no window shuffle; narrow rows
], ids=["vnni", "neon", "vnni-no-vbmi", "avx512bw", "avx2", "sse"])
@pytest.mark.parametrize("kernel,strides", [((3, 3), (1, 1)), ((5, 5), (2, 2)),
                                            ((3, 7), (2, 2))], ids=["3x3", "5x5-s2", "3x7-s2"])
def test_a_depthwise_kernel_reads_its_constant_weight_as_packed_at_build_time(
        target, packings, kernel, strides):
    """A constant weight packed when the kernel is built (``depthwise_weight_packing``:
    the window kernel's quads, each kernel row's taps in groups of four with zeros past
    its width; the column pairs' pairs of taps; else each tap's int16 vector) is what
    the kernel would make of the weight on every call: the same sums, bit-exact against
    int64 sums, where the host runs the code; the packed weight is the operand the sums
    read (no stage repacks it per call)."""
    from heterocc.targets.llvm.schedules.int8_depthwise import (
        WEIGHT_PAIRS,
        WEIGHT_QUADS,
        WEIGHT_WIDENED_QUADS,
        depthwise_weight_packing,
        pack_depthwise_weight_array,
    )
    from heterocc.te.schedule_reads import reads_of

    cpu = parse_cpu(target)
    shape, channels = (1, 16, 13, 15), 16
    attrs = {"strides": strides, "pads": (1, 2, 2, 1), "dilations": (1, 1),
             "group": channels}
    packed_shape, dtype, packing = depthwise_weight_packing((channels, 1, *kernel), attrs,
                                                            cpu)
    kind = {WEIGHT_QUADS: "quads", WEIGHT_PAIRS: "pairs",
            WEIGHT_WIDENED_QUADS: "widened"}.get(packing, "lanes")
    assert dtype == ("int8" if kind == "quads" else "int16")
    assert kind == packings[strides[1] - 1]
    x = te.placeholder(shape, "uint8", "x")
    w = te.placeholder((channels, 1, *kernel), "int8", "w")
    zero = te.placeholder((1,), "uint8", "zero")
    packed = te.placeholder(packed_shape, dtype, "w.packed")
    out = int8_depthwise_conv(x, w, zero, attrs, cpu, packed_weight=packed)
    sums = _depthwise_sums(out)
    assert reads_of(sums.op.body)[1] is packed  # the operand itself: no stage repacks it
    schedule = te.create_schedule(out)
    schedule_int8_depthwise(schedule, sums, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    module = hllvm.build(te.lower(schedule, [x, packed, zero, out], name="conv"), cpu=cpu)
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(3)
    xs = rng.integers(0, 256, shape).astype(np.uint8)
    ws = rng.integers(-128, 128, (channels, 1, *kernel)).astype(np.int8)
    ws[1] = -128
    z = np.array([201], np.uint8)
    pads = attrs["pads"]
    got = np.zeros(_depthwise_out(shape, kernel, strides, pads, (1, 1)), np.int32)
    module["conv"](xs, pack_depthwise_weight_array(ws, packing), z, got)
    expected = np.concatenate([_reference(xs[:, c:c + 1], ws[c:c + 1], 201, strides, pads,
                                          (1, 1)) for c in range(channels)], axis=1)
    np.testing.assert_array_equal(got, expected)


def test_the_pool_makespan_follows_the_runtimes_chunks():
    """``pool_makespan``: the thread pool's chunks (four a thread, the longer first) of
    equal tasks, each taken by the first thread free, against an even split
    (``test_llvm_runtime`` checks it against the runtime's chunks)."""
    from heterocc.targets.llvm.schedules.int8_depthwise_quads import pool_makespan

    assert pool_makespan(12, 2) == 1.0  # chunks of 2, 2, 2, 2, 1, 1, 1, 1
    assert pool_makespan(24, 2) == 1.0  # chunks of 3
    assert pool_makespan(4, 2) == 1.0  # four chunks of one
    assert pool_makespan(25, 2) == pytest.approx(26 / 25)  # 13 tasks on one thread
    assert pool_makespan(7, 1) == 1.0


@pytest.mark.parametrize("target", [SPR,
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["vnni", "neon"])
@pytest.mark.parametrize("shape,kernel,strides,pads,dilations,cores,whole", [
    ((1, 16, 20, 20), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2, True),  # 2 tiles
    ((1, 64, 28, 28), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 2, True),  # 8 tiles
    # 12 tiles: the pool's chunks of 2, 2, 2, 2, 1, 1, 1, 1 tasks, 6 a core
    ((1, 96, 28, 28), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 2, True),
    ((2, 8, 14, 14), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 2, True),  # batch 2
    ((1, 8, 11, 30), (3, 3), (3, 2), (0, 1, 2, 2), (1, 2), 2, False),  # 1 tile: split
], ids=["3x3", "s2", "s2-12tiles", "5x5-batch2", "s3x2-dilated"])
def test_the_window_kernel_is_one_parallel_loop_copying_per_task(
        target, shape, kernel, strides, pads, dilations, cores, whole):
    """The window kernel is one parallel loop (one hand-off to the thread pool per
    call): each iteration copies the channels and whole rows its sums read, just before
    them (``attach_copies_in_blocks``, ``blocks_per_task`` blocks of rows: a channel
    tile's whole image unless the thread pool's chunks of such tasks would not share
    out evenly over the cores),
    allocated inside that loop with the bytes a window load reads past them; no weight
    sums at root (the constant weight's sums are packed with it). Bit-exact against
    int64 sums where the host runs it."""
    import dataclasses

    from heterocc.targets.llvm.schedules.int8_conv import INT8_BLOCKS_PER_TASK
    from heterocc.targets.llvm.schedules.int8_depthwise import (
        depthwise_weight_packing,
        pack_depthwise_weight_array,
    )
    from heterocc.targets.llvm.schedules.int8_depthwise_quads import (
        TASK_BALANCE,
        pool_makespan,
    )
    from heterocc.tir.stmt import For, ForKind
    from heterocc.tir.visitor import collect

    cpu = dataclasses.replace(parse_cpu(target), num_cores=cores)
    channels = shape[1]
    x = te.placeholder(shape, "uint8", "x")
    zero = te.placeholder((1,), "uint8", "zero")
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": channels}
    packed_shape, dtype, packing = depthwise_weight_packing((channels, 1, *kernel), attrs,
                                                            cpu)
    w = te.placeholder((channels, 1, *kernel), "int8", "w")
    packed = te.placeholder(packed_shape, dtype, "w.packed")
    out = int8_depthwise_conv(x, w, zero, attrs, cpu, packed_weight=packed)
    sums = _depthwise_sums(out)
    padded = quad_stages(sums)["padded"]
    assert padded.op.attrs.get(IN_BLOCKS)
    # each task a channel tile's whole image (``whole``), or the most blocks of rows
    # whose tasks the pool shares out evenly
    blocks, tiles = sums.shape[2], shape[0] * channels // sums.op.attrs[
        "int8_depthwise"].channels
    per_task = sums.op.attrs[INT8_BLOCKS_PER_TASK]
    assert (per_task == blocks) == whole and blocks % per_task == 0
    even = [p for p in range(1, blocks + 1) if blocks % p == 0
            and pool_makespan(tiles * blocks // p, cores) <= TASK_BALANCE]
    assert per_task == max(even, default=per_task)
    schedule = te.create_schedule(out)
    schedule_int8_depthwise(schedule, sums, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    attach_copies_in_blocks(schedule, out, schedule[out], schedule[out].leaf_iter_vars[0])
    func = te.lower(schedule, [x, packed, zero, out], name="conv")
    loops = collect(func.body, lambda n: isinstance(n, For))
    (parallel,) = [loop for loop in loops if loop.kind == ForKind.PARALLEL]
    assert len(collect(parallel.body, lambda n: isinstance(n, For))) == len(loops) - 1
    sizes = _allocated_in_parallel_loop(func, "int8_padded")
    # a task's channels (or rows), not the whole copy (every case has two tasks or more)
    whole_copy = padded.shape[0] * padded.shape[1] * padded.shape[2] * padded.shape[3]
    assert sizes and all(size < whole_copy for size in sizes)
    for buffer, allocated, last in _window_reads(func, cpu):
        assert last < allocated, f"{buffer}: a window load reads byte {last} of {allocated}"
    module = hllvm.build(func, cpu=cpu)
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(sum(shape))
    xs = rng.integers(0, 256, shape).astype(np.uint8)
    ws = rng.integers(-128, 128, (channels, 1, *kernel)).astype(np.int8)
    ws[0] = -128
    z = np.array([9], np.uint8)
    got = np.zeros(_depthwise_out(shape, kernel, strides, pads, dilations), np.int32)
    module["conv"](xs, pack_depthwise_weight_array(ws, packing), z, got)
    expected = np.concatenate([_reference(xs[:, c:c + 1], ws[c:c + 1], 9, strides, pads,
                                          dilations) for c in range(channels)], axis=1)
    np.testing.assert_array_equal(got, expected)
