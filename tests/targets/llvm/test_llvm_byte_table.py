"""A ``LookupTable``'s 256-entry byte table read in registers (targets/llvm/byte_table.py):
AVX-512 VBMI's two-table byte permutes, AArch64's four-register ``tbl``; elsewhere the
gather. Every lane count (a whole vector, a row shorter than one, several vectors and a
remainder) bit-exact against the table indexed in NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.ir.graph import Graph, Node, Value, constant
from heterocc.ir.types import TensorType
from heterocc.passes import fuse_ops, fused_functions
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.target import LLVMKernel, LLVMTarget

HOST = "llvm"
AVX2 = "llvm -mattr=-avx512f"
NEON = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"


def _lookup(shape) -> tuple[Node, np.ndarray]:
    """The function of one LookupTable of an int8 tensor of ``shape``, and its table."""
    table = np.random.default_rng(0).integers(-128, 128, 256).astype(np.int8)
    x, y = Value("x", TensorType(shape, "int8")), Value("y", TensorType(shape, "int8"))
    graph = Graph([x], [y], [Node("LookupTable", [x, constant(table, "t")], [y],
                                  {"absorbed": []}, "lookup")])
    (function,) = fused_functions(fuse_ops(graph))
    return function, table


SHAPES = [(1, 4, 8, 16), (1, 64, 13, 13), (2, 3, 5, 200)]


@pytest.mark.parametrize("shape", SHAPES, ids=["64-lanes", "13-lane-rows", "200-lane-rows"])
@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_a_byte_table_lookup_gives_the_tables_entries(target, shape):
    function, table = _lookup(shape)
    llvm = LLVMTarget(cpu=target)
    kernel = llvm.build(function)
    assert isinstance(kernel, LLVMKernel), llvm.fallbacks
    ir_text = kernel.function.owner.ir
    permutes = "avx512vbmi" in llvm.cpu.features and target == HOST
    assert ("vpermi2var.qi" in ir_text) == permutes
    assert ("masked.gather" in ir_text) != permutes
    x = np.random.default_rng(1).integers(-128, 128, shape).astype(np.int8)
    x.reshape(-1)[:256] = np.arange(-128, 128)[:x.size]  # every index where it fits
    np.testing.assert_array_equal(kernel([x])[0], table[x.astype(np.int64) + 128])


def test_a_byte_table_lookup_builds_for_neon_as_tbl():
    function, _ = _lookup((1, 64, 13, 13))
    llvm = LLVMTarget(cpu=NEON)
    kernel = llvm.build(function)
    module = build([kernel.prim], "lookup", NEON)
    # the four quarters of 64 entries, each a four-register tbl, for every 16 lanes
    assert "masked.gather" not in module.ir
    assert module.assembly().count("\ttbl\t") >= 4
