"""Integer convolutions on the CPU's matrix tiles (x86 AMX-INT8): which convolutions take
them, the tile instructions in the code, and the integer reference's bits where the host
has the tiles (elsewhere the code is built for a CPU that has them and its assembly is
the check)."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.errors import CompileError
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm import cpu as cpu_module
from heterocc.targets.llvm.cpu import describe_cpu, parse_cpu
from heterocc.targets.llvm.int8_tiles import (
    TILE_DOT_CALL,
    TILE_LOAD_CALL,
    TILE_ROWS,
    has_tiles,
    request_tile_permission,
    tile_configuration,
)
from heterocc.targets.llvm.schedules import (
    MATRIX_WEIGHT_PACKING,
    Int8MatrixTiles,
    matrix_conv,
    matrix_weight_shape,
    pack_matrix_weight_array,
)
from heterocc.targets.llvm.schedules.int8_conv import int8_conv, schedule_int8_conv
from heterocc.tir import expr as tx
from heterocc.tir import stmt as ts
from tests.targets.llvm.test_llvm_int8_conv import _conv_chain, _host_runs, _quantized, _reference

TILES = "llvm -mcpu=sapphirerapids"
ATTRS = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}


@pytest.mark.parametrize("target,x_shape,w_shape,attrs,expected", [
    (TILES, (1, 64, 8, 8), (32, 64, 3, 3), ATTRS, True),
    (TILES, (1, 128, 8, 8), (48, 128, 1, 1), ATTRS, True),  # 48: tiles of 16
    (TILES + " -mattr=-amx-int8", (1, 64, 8, 8), (32, 64, 3, 3), ATTRS, False),
    ("llvm -mcpu=znver4", (1, 64, 8, 8), (32, 64, 3, 3), ATTRS, False),  # VNNI, no tiles
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", (1, 64, 8, 8), (32, 64, 3, 3),
     ATTRS, False),
    (TILES, (1, 96, 8, 8), (32, 96, 3, 3), ATTRS, True),  # 128 channels for 96
    (TILES, (1, 160, 8, 8), (32, 160, 1, 1), ATTRS, True),  # 192 for 160
    (TILES, (1, 32, 8, 8), (32, 32, 3, 3), ATTRS, False),  # 64 for 32: too many
    (TILES, (1, 64, 8, 8), (32, 64, 1, 1), ATTRS, False),  # one tile product a sum
    (TILES, (1, 64, 8, 8), (24, 64, 3, 3), ATTRS, False),  # not whole tiles of 16
    (TILES, (1, 128, 8, 8), (32, 64, 3, 3), {**ATTRS, "group": 2}, False),  # grouped
])
def test_the_tiles_take_dense_convolutions_that_fill_them(target, x_shape, w_shape, attrs,
                                                          expected):
    assert matrix_conv(x_shape, w_shape, attrs, parse_cpu(target)) is expected


def test_the_tile_configuration_gives_every_tile_sixteen_rows_of_64_bytes():
    config = tile_configuration()
    assert len(config) == 64 and config[0] == 1  # palette 1
    assert [int.from_bytes(config[16 + 2 * t:18 + 2 * t], "little") for t in range(8)] \
        == [64] * 8
    assert list(config[48:56]) == [TILE_ROWS] * 8 and not any(config[56:])


def test_a_host_that_refuses_the_tiles_is_described_without_them(monkeypatch):
    """Linux lets a process use the tiles only once it asks; where it refuses (an older
    kernel, a sandbox), the host's description drops them, so no kernel uses them."""
    monkeypatch.setattr(cpu_module, "request_tile_permission", lambda: False)
    assert not {"amx-tile", "amx-int8", "amx-bf16"} & describe_cpu().features
    assert isinstance(request_tile_permission(), bool)


def _built(shape, filters, kernel, strides, pads, dilations, target, prepacked):
    cpu = parse_cpu(target)
    x = te.placeholder(shape, "int8", "x")
    w_shape = (filters, shape[1], *kernel)
    w = te.placeholder(w_shape, "int8", "w")
    packed = te.placeholder(matrix_weight_shape(w_shape), "int8", "w.packed") \
        if prepacked else None
    zero = te.placeholder((1,), "int8", "zero")
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": 1}
    out = int8_conv(x, w, zero, attrs, cpu, packed_weight=packed)
    sums = out.op.body.a.tensor
    assert isinstance(sums.op.attrs["int8_conv"], Int8MatrixTiles)
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, sums, cpu)
    module = hllvm.build(te.lower(schedule, [x, packed if prepacked else w, zero, out],
                                  name="conv"), cpu=cpu)
    return module, out, cpu


@pytest.mark.parametrize("shape,filters,kernel,strides,pads,dilations", [
    ((1, 64, 14, 14), 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 128, 13, 13), 32, (3, 3), (2, 2), (1, 0, 1, 2), (1, 1)),  # batch 2, asymmetric
    ((1, 128, 14, 14), 48, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # one tile by three
    ((1, 128, 14, 14), 32, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),  # 1x1 of stride 2
    ((1, 64, 10, 10), 32, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),  # dilated
    ((1, 192, 7, 7), 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # three channel blocks
    ((1, 96, 9, 9), 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),  # 96 channels of 128
    ((1, 162, 7, 7), 16, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),  # 162: not whole groups
], ids=["3x3", "stride2-batch2", "48-filters", "1x1-stride2", "dilated", "7x7-3-blocks",
        "96-channels", "162-channels"])
@pytest.mark.parametrize("prepacked", [False, True], ids=["packed-per-call", "prepacked"])
def test_a_convolution_on_the_tiles_gives_the_reference_bits(shape, filters, kernel, strides,
                                                              pads, dilations, prepacked):
    """The tile product (``tdpbsud``: int8 weights by the uint8-stored data), the tiles
    configured once a function and released before it returns; where the host has
    them, every output of random int8 data and weights (a zero point of -7; weight sums
    of every sign, packed with the weight or summed per call) is the reference's."""
    module, out, cpu = _built(shape, filters, kernel, strides, pads, dilations, TILES,
                              prepacked)
    assembly = module.assembly()
    assert "tdpbsud" in assembly and "tileloadd" in assembly and "tilestored" in assembly
    assert "tilezero" in assembly  # whole sums: accumulators zeroed in the registers
    assert assembly.count("ldtilecfg") == assembly.count("tilerelease") >= 1
    if not _host_runs(cpu):
        return  # built for a CPU with tiles: the assembly was the check
    rng = np.random.default_rng(sum(shape) + filters)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    w = rng.integers(-128, 128, (filters, shape[1], *kernel)).astype(np.int8)
    w[0], w[1], w[2] = -128, 127, 0
    zero = np.array([-7], np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](x, pack_matrix_weight_array(w) if prepacked else w, zero, got)
    np.testing.assert_array_equal(got, _reference(x, w, -7, strides, pads, dilations))


@pytest.mark.parametrize("prepacked", [False, True], ids=["packed-per-call", "prepacked"])
def test_the_tiles_beside_avx2_code_give_the_reference_bits(prepacked):
    """The tiles do not need AVX-512: a CPU with AMX described without it (``-mattr=
    -avx512f``) takes the tiles for the products and 256-bit vectors for the packing
    and finishing (no zmm register), with the reference's bits where the host runs it."""
    shape, filters, kernel, strides, pads = (2, 96, 13, 13), 32, (3, 3), (2, 2), (1, 0, 1, 2)
    module, out, cpu = _built(shape, filters, kernel, strides, pads, (1, 1),
                              TILES + " -mattr=-avx512f", prepacked)
    assembly = module.assembly()
    assert "tdpbsud" in assembly and "zmm" not in assembly
    if not _host_runs(cpu):
        return
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    w = rng.integers(-128, 128, (filters, shape[1], *kernel)).astype(np.int8)
    got = np.zeros(out.shape, np.int32)
    module["conv"](x, pack_matrix_weight_array(w) if prepacked else w,
                   np.array([-7], np.int8), got)
    np.testing.assert_array_equal(got, _reference(x, w, -7, strides, pads, (1, 1)))


def test_a_tile_instruction_names_its_registers_by_number():
    """A tile instruction whose register is not a constant 0-7 is refused by name when
    the code is generated."""
    buffer = tx.Buffer("a", (1024,), "int8")
    body = ts.seq([ts.Evaluate(tx.Call(TILE_LOAD_CALL, (tx.IntImm(9), tx.BufferLoad(
        buffer, (tx.IntImm(0),)), tx.IntImm(64)), "int32"))])
    func = ts.PrimFunc("tiles", (buffer,), body)
    with pytest.raises(CompileError, match=f"{TILE_LOAD_CALL}: a tile is a register"):
        hllvm.build(func, cpu=parse_cpu(TILES))
    dot = ts.PrimFunc("dot", (buffer,), ts.Evaluate(tx.Call(TILE_DOT_CALL, (
        tx.IntImm(0), tx.IntImm(4)), "int32")))
    with pytest.raises(CompileError, match=f"{TILE_DOT_CALL} takes"):
        hllvm.build(dot, cpu=parse_cpu(TILES))


def _wide_chain():
    """A float chain of convolutions wide enough for the tiles: 64 -> 64 3x3, 64 -> 128
    3x3 of stride 2, 128 -> 32 1x1 (ReLU after the first two)."""
    layers = (("first", 64, 64, 3, 1, 1, True), ("down", 64, 128, 3, 1, 2, True),
              ("project", 128, 32, 1, 1, 1, False))
    return _conv_chain(12, layers, (1, 64, 12, 12), (1, 32, 6, 6), "Relu"), (1, 64, 12, 12)


@pytest.mark.parametrize("target", ["llvm", TILES], ids=["host", "sapphirerapids"])
def test_an_ort_quantized_chain_runs_on_the_tiles_with_the_integer_references_bits(
        tmp_path, target):
    """An ORT-quantized QDQ chain (per-channel weights) compiled for a CPU with tiles:
    each convolution's constant weight packed at build time in blocks of 64 channels
    with its sums; where the host runs it, the integer reference's bits, within one
    step of ONNX Runtime, and so does its artifact, loaded."""
    pytest.importorskip("onnxruntime.quantization")
    import heterocc
    from heterocc.runtime.interpreter import evaluate
    from tests.passes.test_per_channel_axes import ort_reference, output_scale, steps_apart

    cpu = parse_cpu(target)
    source, shape = _wide_chain()
    model = _quantized(source, shape, "QUInt8", tmp_path)
    compiled = heterocc.compile(model, target=target)
    packings = [packing for kernel in compiled.kernels.values()
                for _, packing, _ in kernel.prim.attrs["packed_constants"]]
    tiles = has_tiles(cpu.features, cpu.arch)
    assert packings.count(MATRIX_WEIGHT_PACKING) == (3 if tiles else 0)
    if not _host_runs(cpu):
        return
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    got = compiled.run([x])[0]
    np.testing.assert_array_equal(got, evaluate(compiled.graph, [x])[0])
    assert steps_apart(got, ort_reference(model, x), output_scale(model)) <= 1
    compiled.export(str(tmp_path / "artifact"))
    np.testing.assert_array_equal(heterocc.load(str(tmp_path / "artifact")).run([x])[0], got)
