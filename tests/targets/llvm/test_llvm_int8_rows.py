"""Products of rows by a constant int8 weight on the CPU's dot product
(``schedules/int8_rows.py``): a ``ConvInteger`` of M one-pixel images by a 1x1 kernel
(what ``integer_products_as_convolutions`` makes of a transformer's projections) in
register tiles of rows by vectors of output channels, bit-exact against NumPy's int64
sums on every description this host runs (cross-compiled ones checked by their
assembly)."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.errors import CompileError
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.int8_dot import dot4_instruction
from heterocc.targets.llvm.schedules import int8_rows
from heterocc.targets.llvm.schedules.int8_conv import (
    accumulators_in_flight,
    data_dtype,
    pack_int8_weight_array,
    packed_weight_dtype,
    packed_weight_shape,
    tile_register_reserve,
)
from tests.targets.llvm.test_llvm_int8_conv import DESCRIPTIONS, _host_runs

POINTWISE = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}


def _build(m: int, k: int, n: int, data: str, cpu, prepacked: bool):
    x = te.placeholder((m, k, 1, 1), data, "x")
    w = te.placeholder((n, k, 1, 1), "int8", "w")
    zero = te.placeholder((1,), data, "zero")
    tiles = int8_rows.row_tiles(x.shape, w.shape, POINTWISE, cpu)
    assert isinstance(tiles, int8_rows.Int8RowTiles)
    dtype = packed_weight_dtype(cpu, tiles)
    packed = te.placeholder(packed_weight_shape(w.shape, tiles.lanes, dtype), dtype,
                            "w.packed") if prepacked else None
    out = int8_rows.int8_rows_conv(x, w, zero, cpu, "rows", packed, tiles)
    schedule = te.create_schedule(out)
    int8_rows.schedule_int8_rows(schedule, int8_rows.row_sums(out), cpu)
    int8_rows.schedule_int8_rows_result(schedule, out, None, cpu)
    module = hllvm.build(te.lower(schedule, [x, packed if prepacked else w, zero, out],
                                  name="rows"), cpu=cpu)
    return module, tiles, dtype


@pytest.mark.parametrize("target,instruction", DESCRIPTIONS,
                         ids=["avx512vnni", "avxvnni", "avx512bw", "avx2", "neon-sdot"])
@pytest.mark.parametrize("m,k,n,data,prepacked", [
    (29, 64, 96, "uint8", True),  # rows past the last whole tile, weight packed at build
    (13, 30, 40, "int8", False),  # channels past the last group of four; narrow lanes
], ids=["29x64x96-u8-prepacked", "13x30x40-i8"])
def test_a_product_of_rows_is_exact(target, instruction, m, k, n, data, prepacked):
    """Rows not a whole number of tiles (the copy repeats the last row, whose sums are
    dropped), channels not a whole number of groups of four (zero weights), uint8 and
    int8 data with a zero point, the weight packed at build time (with its sums) or at
    run time: the reference's bits, extreme bytes included."""
    cpu = parse_cpu(target)
    module, tiles, dtype = _build(m, k, n, data, cpu, prepacked)
    unsigned = data_dtype(cpu) == "uint8"
    used = dot4_instruction(cpu.features, cpu.arch, tiles.lanes, unsigned, False)
    assert used == instruction.lstrip("v") or used == "vpdpbusd"
    # without VNNI a weight read by several rows is widened once, when packed: pmaddwd
    assert (used if dtype == "int8" else "pmaddwd") in module.assembly()
    if not _host_runs(cpu):
        return  # cross-compiled: its assembly was the check
    rng = np.random.default_rng(m * k)
    info = np.iinfo(data)
    for xs, ws, z in [(rng.integers(info.min, info.max + 1, (m, k, 1, 1)),
                       rng.integers(-128, 128, (n, k, 1, 1)), info.min + 9),
                      (np.full((m, k, 1, 1), info.min), np.full((n, k, 1, 1), -128), 0)]:
        xs, ws = xs.astype(data), ws.astype(np.int8)
        got = np.full((m, n, 1, 1), -1, np.int32)
        weight = pack_int8_weight_array(ws, tiles.lanes, dtype) if prepacked else ws
        module["rows"](xs, weight, np.array([z], data), got)
        expected = (xs[:, :, 0, 0].astype(np.int64) - z) @ ws[:, :, 0, 0].T.astype(np.int64)
        np.testing.assert_array_equal(got[:, :, 0, 0], expected)


@pytest.mark.parametrize("target", [d for d, _ in DESCRIPTIONS])
def test_row_tiles_fill_the_registers_and_round_the_rows_least(target):
    """ViT's 197 tokens by 768 -> 3072: a tile's accumulators, weight vectors and one
    broadcast fit the registers; it holds the accumulators the dot product needs in
    flight where the registers allow; it computes 200 rows at most, and its loads per
    dot product (each row's broadcast shared by its weight vectors, each weight vector
    by its rows) stay within what the CPU loads beside its dot products, and at most
    0.5 with 32 registers."""
    cpu = parse_cpu(target)
    x_shape, w_shape = (197, 768, 1, 1), (3072, 768, 1, 1)
    tiles = int8_rows.row_tiles(x_shape, w_shape, POINTWISE, cpu)
    budget = cpu.vector_registers - tile_register_reserve(cpu)
    assert tiles.rows * tiles.vectors + tiles.vectors + 1 <= budget
    assert tiles.lanes == cpu.vector_lanes("int32")
    if budget >= 2 * accumulators_in_flight(cpu):
        assert tiles.rows * tiles.vectors >= accumulators_in_flight(cpu)
    assert -(-197 // tiles.rows) * tiles.rows <= 200
    loads = (tiles.rows + tiles.vectors) / (tiles.rows * tiles.vectors)
    assert loads <= (0.5 if cpu.vector_registers >= 32 else cpu.dot_load_budget or 1.0)


def test_one_row_or_a_larger_image_is_no_product_of_rows():
    """A classifier's one row takes channel lanes of one pixel (``int8_conv``), a
    batch of 2x2 images, a 3x3 kernel or padding the convolution's own kernels."""
    cpu = parse_cpu("llvm -mcpu=sapphirerapids -mattr=-amx-tile")
    padded = {**POINTWISE, "pads": (1, 1, 1, 1)}
    for x_shape, w_shape, attrs in [((1, 768, 1, 1), (1000, 768, 1, 1), POINTWISE),
                                    ((8, 64, 2, 2), (64, 64, 1, 1), POINTWISE),
                                    ((8, 64, 1, 1), (64, 64, 3, 3), padded),
                                    ((8, 64, 1, 1), (64, 32, 1, 1), {**POINTWISE, "group": 2}),
                                    ((8, 64, 1, 1), (34, 64, 1, 1), POINTWISE)]:  # no lanes
        assert int8_rows.row_tiles(x_shape, w_shape, attrs, cpu) is None


def test_a_packed_weight_of_another_layout_is_refused_by_name():
    """A weight packed for other lanes (the convolution's pixel vectors: no lanes) is
    refused before anything is built, naming the product and the layout it needs."""
    cpu = parse_cpu("llvm -mcpu=sapphirerapids -mattr=-amx-tile")
    x = te.placeholder((13, 64, 1, 1), "uint8", "x")
    w = te.placeholder((32, 64, 1, 1), "int8", "w")
    tiles = int8_rows.row_tiles(x.shape, w.shape, POINTWISE, cpu)
    wrong = te.placeholder(packed_weight_shape(w.shape, 0, "int8"), "int8", "w.packed")
    with pytest.raises(CompileError, match=r"fc1: the packed weight is int8\[32, 17, 1, 1, 4\]"
                       r".*lanes=16"):
        int8_rows.int8_rows_conv(x, w, None, cpu, "fc1", wrong, tiles)
