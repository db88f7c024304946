"""An int8 model's pools on the CPU: ``realize_qdq`` pools the int8 values (exact for a
MaxPool with a positive scale), and the pool of an NCHW tensor runs rows of output pixels
tap by tap over a padded copy (``PoolRule``), equal to ONNX Runtime's QDQ result."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import heterocc
import heterocc.targets.llvm.rules as rules
from heterocc.runtime.interpreter import evaluate


def _qdq_pool(op: str, shape, x_quantization=(0.05, 120), y_quantization=(0.05, 120),
              **attrs):
    """``Q(op(DQ(Q(x))))``, each quantization ``(scale, uint8 zero point)``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [helper.make_tensor("sx", TensorProto.FLOAT, [], [x_quantization[0]]),
             helper.make_tensor("zx", TensorProto.UINT8, [], [x_quantization[1]]),
             helper.make_tensor("sy", TensorProto.FLOAT, [], [y_quantization[0]]),
             helper.make_tensor("zy", TensorProto.UINT8, [], [y_quantization[1]])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "sx", "zx"], ["d"]),
             helper.make_node(op, ["d"], ["p"], **attrs),
             helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "sy", "zy"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "pool", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def _qdq_max_pool(shape, **attrs):
    return _qdq_pool("MaxPool", shape, **attrs)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # ResNet's
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},  # SqueezeNet's
    {"kernel_shape": [2, 2], "strides": [1, 1], "dilations": [2, 2], "pads": [0, 1, 1, 0]},
], ids=["resnet", "ceil", "dilated-asym"])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"], ids=["host", "avx2"])
def test_an_int8_max_pool_pools_the_int8_values(monkeypatch, attrs, target):
    """On AVX-512BW a row of output pixels is one vector per tap (a strided window's
    bytes one masked load and a shuffle); on AVX2 the loop LLVM makes of it."""
    ort = pytest.importorskip("onnxruntime")
    pools = []
    original = rules.schedule_pool_nchw
    monkeypatch.setattr(rules, "schedule_pool_nchw", lambda schedule, pool, padded, cpu=None: (
        pools.append(pool.dtype), original(schedule, pool, padded, cpu)))
    model = _qdq_max_pool((1, 8, 13, 13), **attrs)
    compiled = heterocc.compile(model, target=target)
    assert pools == ["uint8"] or pools == ["int8"]  # pooled before dequantizing
    x = np.random.default_rng(1).standard_normal((1, 8, 13, 13)).astype(np.float32) * 3
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(compiled.run([x])[0], session.run(None, {"x": x})[0])


def test_an_int8_max_pool_builds_for_neon():
    compiled = heterocc.compile(_qdq_max_pool((1, 8, 13, 13), kernel_shape=[3, 3],
                                              strides=[2, 2], pads=[1, 1, 1, 1]),
                                target="llvm -mtriple=aarch64-linux-gnu")
    assert compiled.build_static() is not None


@pytest.mark.parametrize("shape,x_zero,y_zero,y_scale", [
    ((1, 40, 7, 7), 120, 128, 0.013),  # MobileNetV2's and ResNet's, 7x7
    ((2, 24, 5, 3), 0, 3, 0.0031),  # a batch, a small odd image, a fine output scale
], ids=["7x7", "batch2-5x3"])
@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
def test_an_int8_global_average_pool_has_onnxruntimes_bits(target, shape, x_zero, y_zero,
                                                          y_scale):
    """``integer_global_average_pools``: the integer sum of each channel, scaled in float32
    and rounded half to even (ONNX Runtime's ``QLinearGlobalAveragePool``, which it fuses
    the QDQ chain into): no float pool left, the integer reference's bits, and ORT's
    (the NEON code built)."""
    model = _qdq_pool("GlobalAveragePool", shape, (0.05, x_zero), (y_scale, y_zero))
    results = _integer_pool_results(model, "GlobalAveragePool", shape, target)
    if results is not None:
        np.testing.assert_array_equal(*results)


def _integer_pool_results(model, pool: str, shape, target: str):
    """``model`` (a QDQ ``pool``) compiled for ``target``: no float pool left, no
    fallback, the integer reference's bits; its output and ONNX Runtime's on one input
    (None for a cross build, which runs nothing here)."""
    ort = pytest.importorskip("onnxruntime")
    compiled = heterocc.compile(model, target=target)
    ops = [m.op for n in compiled.graph.nodes for m in (n.body.nodes if n.body else [n])]
    assert pool not in ops and "ConvInteger" in ops
    assert not compiled.fallbacks
    if "aarch64" in target:  # built (cross): nothing to run here
        return None
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32) * 3
    got = compiled.run([x])[0]
    np.testing.assert_array_equal(got, evaluate(compiled.graph, [x])[0])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return got, session.run(None, {"x": x})[0]


@pytest.mark.parametrize("shape,attrs", [
    ((1, 32, 14, 14), {"kernel_shape": [2, 2], "strides": [2, 2]}),  # DenseNet's transitions
    ((2, 24, 9, 7), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1}),  # padding counted: the zero point adds 0
], ids=["2x2-s2", "3x3-padded"])
@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
def test_an_int8_average_pool_sums_its_windows_in_integers(target, shape, attrs):
    """``integer_global_average_pools`` on windows: each window's integer sum, scaled in
    float32 and rounded half to even, so the integer reference's bits do not depend on
    the order of a float sum (a float pool between DQ and Q differed from the reference
    in the last bit on a quarter of DenseNet's values); ONNX Runtime's within one step."""
    model = _qdq_pool("AveragePool", shape, (0.05, 120), (0.021, 125), **attrs)
    results = _integer_pool_results(model, "AveragePool", shape, target)
    if results is not None:
        got, theirs = results
        steps = np.abs(got - theirs) / np.float32(0.021)
        assert np.max(steps) < 1.01 and np.mean(steps > 0.5) < 0.01


def _squeeze_excite(shape):
    """A squeeze-excite gate of a quantized ``x``: ``Q(DQ(x) * DQ(Q(Sigmoid(DQ(Q(
    GlobalAveragePool(DQ(x))))))))``, the one DequantizeLinear of ``x`` read by the pool
    and by the gate's product (EfficientNet's, MobileNetV3's)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    quantization = {"x": (0.05, 120), "p": (0.02, 100), "s": (1 / 256, 0), "y": (0.03, 110)}
    inits = [tensor for name, (scale, zero) in quantization.items() for tensor in (
        helper.make_tensor(f"s{name}", TensorProto.FLOAT, [], [scale]),
        helper.make_tensor(f"z{name}", TensorProto.UINT8, [], [zero]))]

    def qdq(value, name):
        return [helper.make_node("QuantizeLinear", [value, f"s{name}", f"z{name}"], [f"q{name}"]),
                helper.make_node("DequantizeLinear", [f"q{name}", f"s{name}", f"z{name}"],
                                 [f"d{name}"])]

    nodes = [*qdq("x", "x"), helper.make_node("GlobalAveragePool", ["dx"], ["pool"]),
             *qdq("pool", "p"), helper.make_node("Sigmoid", ["dp"], ["sigmoid"]),
             *qdq("sigmoid", "s"), helper.make_node("Mul", ["dx", "ds"], ["gated"]),
             *qdq("gated", "y")]
    nodes[-1].output[0] = "y"
    model = helper.make_model(helper.make_graph(nodes, "squeeze_excite", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
def test_a_squeeze_excites_pool_sums_the_int8_values(target):
    """The pool's DequantizeLinear is also the gate product's operand: it stays for the
    product, and the pool sums the 8-bit tensor (no float pool reading floats four times
    its size); the integer reference's bits, ONNX Runtime's result within a step."""
    shape = (1, 32, 7, 7)
    results = _integer_pool_results(_squeeze_excite(shape), "GlobalAveragePool", shape, target)
    if results is not None:
        got, theirs = results
        assert np.abs(got - theirs).max() <= 0.03 * 1.0001


def _pool_function(compiled) -> str:
    (name,) = [n.name for n in compiled.graph.nodes if "maxpool" in n.name]
    return str(compiled.kernels[name].prim)


@pytest.mark.parametrize("cores, channels, planes", [
    (2, 8, True),  # 8 planes for 2 cores: 4 tasks each
    (4, 8, False),  # 2 a core: rows in parallel
    (2, 2, False),
], ids=["planes", "few-for-4-cores", "few-planes"])
def test_a_padded_max_pool_of_many_planes_copies_each_plane_in_its_task(cores, channels,
                                                                         planes):
    """Where its planes give every core TASKS_PER_CORE tasks, the pool runs a task per
    plane that makes the plane's padded copy (in the cache) and pools it: one parallel
    loop, the copy allocated inside it; else the copy is made ahead, rows in parallel.
    Both have the reference's bits."""
    model = _qdq_max_pool((1, channels, 40, 40), kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1])
    compiled = heterocc.compile(model, target=f"llvm -num-cores={cores}")
    text = _pool_function(compiled)
    body = text.splitlines()[1]
    assert ("parallel" in body) == planes  # the function opens with the plane loop
    assert ("allocate maxpool_pad" in body) == (not planes)
    x = np.random.default_rng(3).standard_normal((1, channels, 40, 40)).astype(np.float32) * 3
    reference = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_array_equal(compiled.run([x])[0], reference)


def test_a_plane_past_the_l2_share_keeps_the_copy_ahead():
    """A padded plane larger than PLANE_L2_SHARE of the L2 is copied ahead of the rows
    (a task's copy would not stay in the cache)."""
    import dataclasses

    from heterocc.sdk import te
    from heterocc.targets.llvm.cpu import parse_cpu
    from heterocc.targets.llvm.schedules.pool import PLANE_L2_SHARE, pool_planes

    cpu = dataclasses.replace(parse_cpu("llvm -num-cores=2"), l2=64 * 1024)
    side = int((PLANE_L2_SHARE * cpu.l2) ** 0.5)  # bytes of a side of the largest plane
    for extent, fits in ((side, True), (side + 1, False)):
        padded = te.placeholder((1, 16, extent, extent), "uint8", name="padded")
        pool = te.placeholder((1, 16, extent // 2, extent // 2), "uint8", name="pool")
        assert pool_planes(pool, padded, cpu) == fits
    assert not pool_planes(pool, None, cpu)  # no padding stage: nothing to copy
