"""Lookup-table activations on the accelerator: quantized element-wise functions
(``lookup_tables``) become one ALU LUT program (``targets/vta/lookup.py``), on models
built with onnx.helper and quantized by ``quantize_static``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig, check_stream, run_stream
from heterocc.accel_sim.program import read_tensor
from heterocc.ops.lookup import lookup_table
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta.lookup import chunk_tiles, device_table, lookup_program

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import (  # noqa: E402
    onnxruntime_session,
    output_scale,
    quantize,
)

SHAPE = (1, 8, 8, 8)


def _activation(kind: str, x: str):
    """Nodes and initializers computing activation ``kind`` of ``x`` into "act"."""
    from onnx import helper, numpy_helper

    def scalar(name, value):
        return numpy_helper.from_array(np.array(value, np.float32), name)

    if kind == "silu":
        return [helper.make_node("Sigmoid", [x], ["s"]),
                helper.make_node("Mul", [x, "s"], ["act"])], []
    if kind == "gelu":
        return [helper.make_node("Div", [x, "root2"], ["d"]),
                helper.make_node("Erf", ["d"], ["e"]),
                helper.make_node("Add", ["e", "one"], ["p"]),
                helper.make_node("Mul", [x, "p"], ["m"]),
                helper.make_node("Mul", ["m", "half"], ["act"])], \
            [scalar("root2", 2 ** 0.5), scalar("one", 1.0), scalar("half", 0.5)]
    if kind == "gelu_tanh":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        return [helper.make_node("Pow", [x, "three"], ["cube"]),
                helper.make_node("Mul", ["cube", "k"], ["kc"]),
                helper.make_node("Add", [x, "kc"], ["inner"]),
                helper.make_node("Mul", ["inner", "root2pi"], ["arg"]),
                helper.make_node("Tanh", ["arg"], ["t"]),
                helper.make_node("Add", ["t", "one"], ["p"]),
                helper.make_node("Mul", [x, "p"], ["m"]),
                helper.make_node("Mul", ["m", "half"], ["act"])], \
            [scalar("three", 3.0), scalar("k", 0.044715), scalar("root2pi", (2 / np.pi) ** 0.5),
             scalar("one", 1.0), scalar("half", 0.5)]
    return [helper.make_node(kind, [x], ["act"])], []


def conv_activation_conv(kind: str, seed: int = 0) -> onnx.ModelProto:
    """conv, the activation, conv (8 -> 16 -> 16 channels, 8x8)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array((rng.standard_normal((16, cin, 3, 3)) * 0.3)
                                       .astype(np.float32), f"w{k}")
               for k, cin in enumerate((8, 16))]
    act, consts = _activation(kind, "c0")
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1] * 4), *act,
             helper.make_node("Conv", ["act", "w1"], ["c1"], pads=[1] * 4)]
    graph = helper.make_graph(
        nodes, "conv_act_conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("c1", TensorProto.FLOAT, [1, 16, 8, 8])],
        weights + consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _bit_exact_and_near_onnxruntime(compiled, model: onnx.ModelProto, steps: int,
                                    spread: float) -> None:
    """On three inputs (standard normal times ``spread``): the compiled model equals its
    graph's integer reference and is within ``steps`` output steps of ONNX Runtime run
    as written."""
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32) * spread
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        theirs = session.run(None, {"input": x})[0]
        assert np.abs(ours - theirs).max() <= steps * scale * 1.0001


@pytest.mark.parametrize("kind, folded", [
    ("Sigmoid", {"Sigmoid"}), ("HardSigmoid", {"HardSigmoid"}), ("HardSwish", {"HardSwish"}),
    ("Tanh", {"Tanh"}), ("LeakyRelu", {"LeakyRelu"}), ("silu", {"Sigmoid", "Mul"}),
    ("gelu", {"Div", "Erf", "Add", "Mul"}), ("gelu_tanh", {"Pow", "Mul", "Add", "Tanh"}),
])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_activation_runs_as_a_lookup_table_in_one_region(tmp_path, kind, folded, activations):
    model = quantize(conv_activation_conv(kind), tmp_path, "QDQ", activations)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") == 1.0, report.format()
    # the whole chain is one table: realize_qdq leaves GELU's "x * 0.5" and the product
    # of x * sigmoid(x) to it (tabulable_chains), so no integer multiply cuts it
    assert report.accelerator_regions() == 1, report.format()
    assert [p.op for p in report.placements].count("LookupTable") == 1, report.format()
    assert all(p.target == "vta" for p in report.placements if p.op == "LookupTable")
    shown = {p.op for p in report.placements if "folded into the table of" in p.reason}
    assert shown == folded, report.format()
    # two requantizations and the table's: each may round by one step differently from
    # ONNX Runtime's, and the second convolution carries the first's on
    _bit_exact_and_near_onnxruntime(compiled, model, steps=2, spread=2)


def activation_alone(kind: str) -> onnx.ModelProto:
    """The activation of the graph input, nothing else."""
    from onnx import TensorProto, helper

    act, consts = _activation(kind, "input")
    graph = helper.make_graph(
        act, "act", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("act", TensorProto.FLOAT, SHAPE)], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("kind", ["gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_a_whole_activation_is_one_table_within_a_step_of_onnxruntime(tmp_path, kind,
                                                                      activations):
    """GELU (its Erf and its tanh form) and SiLU, the constant factors and the product of
    two functions of x included, are one table on vta; its one rounding is ONNX
    Runtime's but for float evaluation at a rounding boundary: at most one step."""
    model = quantize(activation_alone(kind), tmp_path, "QDQ", activations)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.accelerator_regions() == 1, report.format()
    assert [p.op for p in report.placements].count("LookupTable") == 1, report.format()
    on_host = {p.op for p in report.placements if p.target != "vta"}
    assert on_host <= {"QuantizeLinear", "DequantizeLinear"}, report.format()
    _bit_exact_and_near_onnxruntime(compiled, model, steps=1, spread=3)


def test_activations_sharing_their_constants_are_one_table_each(tmp_path):
    """Two GELUs reading the same constants (as a torch export's do, their quantized
    coefficients one DequantizeLinear each after ``cse``): each is still one table,
    its ``x * 0.5`` included, although the coefficients are read outside its chain."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    weights = [numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.3)
                                       .astype(np.float32), f"w{k}") for k in range(3)]
    first, consts = _activation("gelu", "c0")
    second, _ = _activation("gelu", "c1")
    local = {o for n in second for o in n.output}
    for n in second:  # the second GELU's own tensors renamed, its constants shared
        n.input[:] = [f"{v}_2" if v in local else v for v in n.input]
        n.output[:] = [f"{v}_2" for v in n.output]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1] * 4), *first,
             helper.make_node("Conv", ["act", "w1"], ["c1"], pads=[1] * 4), *second,
             helper.make_node("Conv", ["act_2", "w2"], ["c2"], pads=[1] * 4)]
    graph = helper.make_graph(
        nodes, "two_gelus", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("c2", TensorProto.FLOAT, SHAPE)], weights + consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    model = quantize(model, tmp_path, "QDQ", "QInt8")
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.accelerator_regions() == 1, report.format()
    assert [p.op for p in report.placements].count("LookupTable") == 2, report.format()
    assert {p.op for p in report.placements if "folded into the table of" in p.reason} == \
        {"Div", "Erf", "Add", "Mul"}
    assert not [p for p in report.placements if p.composite == "quantized_mul"]
    # three convolutions' requantizations and two tables' carried on
    _bit_exact_and_near_onnxruntime(compiled, model, steps=3, spread=2)


@pytest.mark.parametrize("kind", ["gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_the_table_is_what_the_qdq_graph_computes(tmp_path, kind, activations):
    """The rewrite changes no result: the graph with its LookupTable equals the integer
    QDQ graph it came from (its whole element-wise chain left in QDQ form by
    ``realize_qdq_before_tables``), on inputs that reach every table entry."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes import PassManager

    model = quantize(conv_activation_conv(kind), tmp_path, "QDQ", activations)
    before = PassManager(["infer_types", "realize_qdq_before_tables", "uint8_to_int8"]).run(
        from_onnx(model))
    after = PassManager(["lookup_tables", "infer_types"]).run(before)
    assert [n.op for n in after.nodes].count("LookupTable") == 1
    # the chain is whole in the table: no product, sum or function of it is left
    assert not {"Erf", "Tanh", "Sigmoid", "Mul", "Add", "Pow", "Div"} & \
        {n.op for n in after.nodes}
    for seed in range(4):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32) * 4
        np.testing.assert_array_equal(evaluate(after, [x])[0], evaluate(before, [x])[0])


@pytest.mark.parametrize("preset", ["1x8x8", "1x16x16"])
@pytest.mark.parametrize("chunks", [0.5, 1, 3.5])
def test_lookup_program_matches_the_op(preset, chunks):
    config = HardwareConfig.preset(preset)
    tiles = max(1, int(chunks * chunk_tiles(config)))
    rng = np.random.default_rng(tiles)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    program = lookup_program(config, tiles, device_table(table).tobytes())
    check_stream(program.instructions, config, dram_bytes=program.dram.size)
    x = rng.integers(-128, 128, (tiles * config.batch, config.block_in)).astype(np.int8)
    dram = program.dram.copy()
    program.write("X0", x, dram)
    run_stream(program.instructions, config, dram)
    got = read_tensor(config, program.tensors["Y"], dram)
    np.testing.assert_array_equal(got, lookup_table(x, table, absorbed=[]))


def test_a_product_of_two_tensors_keeps_its_multiply(tmp_path):
    """``a * sigmoid(b)`` of two tensors (squeeze-excite's gate) depends on two inputs: only
    the Sigmoid becomes a table; a tensor read outside a chain stays as it is."""
    from onnx import TensorProto, helper, numpy_helper

    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes import PassManager

    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array((rng.standard_normal((8, 8, 1, 1)) * 0.3)
                                       .astype(np.float32), f"w{k}") for k in range(2)]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["a"]),
             helper.make_node("Conv", ["input", "w1"], ["b"]),
             helper.make_node("Sigmoid", ["b"], ["s"]),
             helper.make_node("Mul", ["a", "s"], ["y"])]
    graph = helper.make_graph(
        nodes, "gate", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    quantized = quantize(model, tmp_path, "QDQ", "QInt8")
    for realize in ("realize_qdq", "realize_qdq_before_tables"):
        before = PassManager(["infer_types", realize, "uint8_to_int8"]).run(
            from_onnx(quantized))
        after = PassManager(["lookup_tables", "infer_types"]).run(before)
        ops = [n.op for n in after.nodes]
        assert ops.count("LookupTable") == 1 and "Sigmoid" not in ops
        # the product of two tensors is the integer one (int32 operands, a Requantize)
        (mul,) = [n for n in after.nodes if n.op == "Mul"]
        assert mul.outputs[0].type.dtype == "int32" and "Requantize" in ops, realize
        x = rng.standard_normal(SHAPE).astype(np.float32)
        np.testing.assert_array_equal(evaluate(after, [x])[0], evaluate(before, [x])[0])


@pytest.mark.parametrize("shape", [(1, 32), (1, 2, 32)])
def test_a_table_between_dense_layers(tmp_path, shape):
    """A classifier's hardswish after a dense layer: on a 2-D tensor the ALU maps it in
    the dense layers' own (rows, columns) layout, one region with them; a 3-D one (a
    sequence model's) the accelerator refuses, and the CPU runs the LookupTable through
    its TE compute, as its reference does. Bit-exact either way."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 16)) * 0.3)
                                     .astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.3)
                                     .astype(np.float32), "w1")]
    nodes = [helper.make_node("MatMul", ["input", "w0"], ["h"]),
             helper.make_node("HardSwish", ["h"], ["a"]),
             helper.make_node("MatMul", ["a", "w1"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:-1], 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    compiled = heterocc.compile(quantize(model, tmp_path, "QDQ", "QInt8"), target="vta,llvm",
                                placement="greedy")
    report = compiled.placement_report
    (table,) = [p for p in report.placements if p.op == "LookupTable"]
    if len(shape) == 2:
        assert table.target == "vta", report.format()
        assert report.accelerator_regions() == 1 and report.round_trips == 0, report.format()
    else:
        assert table.target == "llvm" and "3-D" in table.reason
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
        np.testing.assert_array_equal(compiled.run([x])[0], evaluate(compiled.graph, [x])[0])
