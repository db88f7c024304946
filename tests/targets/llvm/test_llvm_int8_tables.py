"""An int8 model's quantized element-wise functions on the CPU (EfficientNet's SiLU,
MobileNetV3's HardSwish and HardSigmoid, GELU, Tanh, ...): ``lookup_tables`` makes each
chain from a DequantizeLinear of one 8-bit tensor to a QuantizeLinear a 256-entry
``LookupTable`` (the chain's own references on the 256 values), which the producing
convolution's epilogue reads as a byte table (``vpermi2b`` / ``tbl`` / a gather), instead
of the chain in float. Models built with onnx.helper and quantized by ``quantize_static``
(QDQ); bit-exact against the integer reference, the QDQ graph's own included."""

from __future__ import annotations

import numpy as np
import pytest

import heterocc
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.llvm.target import LLVMTarget

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import quantize  # noqa: E402
from tests.targets.vta.test_vta_lookup_table import (  # noqa: E402
    SHAPE,
    _bit_exact_and_near_onnxruntime,
    activation_alone,
    conv_activation_conv,
)

HOST = "llvm"
AVX2 = "llvm -mattr=-avx512f"
NEON = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"

#: each activation and the float ops its table takes in
KINDS = {"Sigmoid": {"Sigmoid"}, "HardSigmoid": {"HardSigmoid"},
         "HardSwish": {"HardSwish"}, "Tanh": {"Tanh"}, "LeakyRelu": {"LeakyRelu"},
         "silu": {"Sigmoid", "Mul"}, "gelu": {"Div", "Erf", "Add", "Mul"},
         "gelu_tanh": {"Mul", "Add", "Tanh"}}  # (simplify multiplies its cube out)


def _ops(graph) -> list[str]:
    """Every op of ``graph``, those inside its fused functions included."""
    ops = []
    for node in graph.nodes:
        ops.append(node.op)
        if node.body is not None:
            ops += _ops(node.body)
    return ops


def _functions_with(compiled, op: str) -> list:
    return [n for n in compiled.graph.nodes
            if n.body is not None and op in [m.op for m in n.body.nodes]]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_an_activation_is_a_table_in_the_convolutions_epilogue(tmp_path, kind, target):
    model = quantize(conv_activation_conv(kind), tmp_path, "QDQ", "QUInt8")
    compiled = heterocc.compile(model, target=target)
    ops = _ops(compiled.graph)
    assert ops.count("LookupTable") == 1, ops
    # read where the first convolution's result is still in registers: its epilogue
    (function,) = _functions_with(compiled, "LookupTable")
    (table,) = [m for m in function.body.nodes if m.op == "LookupTable"]
    assert {name.split(":")[0] for name in table.attrs["absorbed"]} == KINDS[kind]
    # (the epilogues' integer sums and products remain: no function of a float is left)
    assert not (KINDS[kind] | {"Pow"}) - {"Add", "Mul"} & set(ops), ops
    assert "ConvInteger" in [m.op for m in function.body.nodes]
    ir_text = compiled.kernels[function.name].function.owner.ir
    # the byte-table instruction where the CPU has one, else the gather
    permutes = "avx512vbmi" in LLVMTarget(cpu=target).cpu.features
    assert ("vpermi2var.qi" in ir_text) == permutes
    assert ("masked.gather" in ir_text) != permutes
    # two convolutions' requantizations and the activation's: ONNX Runtime may round
    # each a step differently, the second convolution carrying the first's on
    _bit_exact_and_near_onnxruntime(compiled, model, steps=2, spread=2)


@pytest.mark.parametrize("kind", ["silu", "HardSwish", "gelu"])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_the_table_is_what_the_cpus_qdq_graph_computes(tmp_path, kind, activations):
    """The CPU's pipeline (convolutions made integer by ``realize_qdq_convolutions``, the
    rest left in QDQ form) then ``lookup_tables``: the same results as the QDQ graph,
    evaluated op by op, on inputs that reach every table entry."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes import PassManager

    model = quantize(conv_activation_conv(kind), tmp_path, "QDQ", activations)
    before = PassManager(["infer_types", "realize_qdq_convolutions", "uint8_to_int8"]).run(
        from_onnx(model))
    after = PassManager(["lookup_tables", "infer_types"]).run(before)
    assert [n.op for n in after.nodes].count("LookupTable") == 1
    assert not KINDS[kind] & {n.op for n in after.nodes if n.outputs[0].type.dtype == "float32"}
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32) * 4
        np.testing.assert_array_equal(evaluate(after, [x])[0], evaluate(before, [x])[0])


@pytest.mark.parametrize("target", [HOST, AVX2], ids=["host", "avx2"])
def test_a_table_alone_equals_the_integer_reference(tmp_path, target):
    """SiLU of the graph input, nothing else: the table is its own function, bit-exact."""
    model = quantize(activation_alone("silu"), tmp_path, "QDQ", "QUInt8")
    compiled = heterocc.compile(model, target=target)
    assert _ops(compiled.graph).count("LookupTable") == 1
    x = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32) * 3
    np.testing.assert_array_equal(compiled.run([x])[0], evaluate(compiled.graph, [x])[0])


def test_the_tables_epilogue_builds_for_neon(tmp_path):
    from heterocc.targets.llvm.module import build

    model = quantize(conv_activation_conv("silu"), tmp_path, "QDQ", "QUInt8")
    compiled = heterocc.compile(model, target=NEON)
    (function,) = _functions_with(compiled, "LookupTable")
    kernel = compiled.kernels[function.name]
    module = build([kernel.prim], function.name, NEON)
    assert "masked.gather" not in module.ir
    assert module.assembly().count("\ttbl\t") >= 4
