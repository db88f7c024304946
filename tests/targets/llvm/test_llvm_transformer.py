"""Transformers on the llvm target's fast path: 3-D and batched products with constant
weights read them packed once at build time, attention's products of two activations
pack B in their own stage, and each product finishes its elementwise epilogue (bias,
GELU by Erf, residual add) in its register tiles. The encoder layer must match ONNX
Runtime, also after export and load."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.models import encoder_layer
from heterocc.targets.llvm.schedules import pack_columns

RNG = np.random.default_rng(17)


def _llvm(compiled):
    return compiled.build_static().targets["llvm"]


def _lowered(compiled) -> dict[str, object]:
    """The PrimFuncs of the compiled functions, by name."""
    return {c.lowered.name: c.lowered for c in _llvm(compiled)._compiled.values()
            if c.lowered is not None}


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("shape,target", [
    (dict(seq=16, d_model=64, heads=4, ffn=96), "llvm"),
    (dict(seq=16, d_model=64, heads=4, ffn=96), "llvm -mattr=-avx512f"),  # AVX2's tiles
    (dict(seq=64, d_model=256, heads=4, ffn=1024), "llvm")])
def test_encoder_layer_matches_onnxruntime(shape, target, tmp_path):
    model = encoder_layer(**shape)
    x = RNG.standard_normal((1, shape["seq"], shape["d_model"]), dtype=np.float32)
    compiled = heterocc.compile(model, target=target)
    ours = compiled.run({"input": x})[0]
    np.testing.assert_allclose(ours, _ort(model, {"input": x}), rtol=1e-4, atol=1e-4)
    assert compiled.fallbacks == {}
    compiled.export(str(tmp_path / "encoder"))
    loaded = heterocc.load(str(tmp_path / "encoder"))
    np.testing.assert_allclose(loaded.run({"input": x})[0], ours, rtol=1e-6, atol=1e-6)


def test_encoder_products_prepack_weights_pack_activations_and_fuse_epilogues():
    compiled = heterocc.compile(encoder_layer(seq=16, d_model=64, heads=4, ffn=96),
                                target="llvm")
    lowered = _lowered(compiled)
    products = {name: func for name, func in lowered.items() if "matmul" in name}
    # the products with constant weights read them prepacked: q, k and v (one
    # structure, one kernel), the output projection, the two of the FFN
    prepacked = [f for f in products.values() if f.attrs["packed_constants"]]
    assert len(prepacked) == 4
    for func in prepacked:
        text = str(func)
        assert "packed_B" not in text  # nothing is packed at run time
        assert any(p.name.endswith(".packed") for p in func.params)
        # the epilogue is finished from the register tile: the product has no
        # buffer in memory
        assert "allocate matmul: float32" in text and "in 'local'" in text
        assert "in 'global'" not in text
    # attention's two products of activations pack B into their own buffer, once
    activations = [f for f in products.values() if not f.attrs["packed_constants"]]
    assert len(activations) == 2
    for func in activations:
        text = str(func)
        assert "allocate matmul.packed_B" in text and "matmul.packed_B[ramp(" in text


def _product_model(a_shape, w_shape, epilogue: str):
    """``x @ W + bias`` (then ``epilogue``: "gelu" by Erf, "residual" add of ``x @ W``'s
    shape input, or "none") with a constant W."""
    w = RNG.standard_normal(w_shape, dtype=np.float32)
    out_shape = list(np.broadcast_shapes(a_shape[:-2], w_shape[:-2])) + \
        [a_shape[-2], w_shape[-1]]
    bias = RNG.standard_normal(w_shape[-1], dtype=np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Add", ["p", "bias"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(a_shape))]
    out = "y"
    if epilogue == "gelu":
        inits += [numpy_helper.from_array(np.array(2 ** -0.5, np.float32), "r2"),
                  numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                  numpy_helper.from_array(np.array(0.5, np.float32), "half")]
        nodes += [helper.make_node("Mul", ["y", "r2"], ["s"]),
                  helper.make_node("Erf", ["s"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]),
                  helper.make_node("Mul", ["y", "e1"], ["g"]),
                  helper.make_node("Mul", ["g", "half"], ["out"])]
        out = "out"
    elif epilogue == "residual":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, out_shape))
        nodes.append(helper.make_node("Add", ["y", "r"], ["out"]))
        out = "out"
    graph = helper.make_graph(nodes, "product", inputs,
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT,
                                                             out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("a_shape,w_shape", [
    ((1, 24, 40), (40, 70)),        # 3-D by 2-D, columns past the last panel
    ((2, 3, 9, 16), (16, 48)),      # 4-D by 2-D
    ((2, 12, 8), (2, 8, 33)),       # batched constant weights
    ((5, 20), (20, 64)),            # plain 2-D
])
@pytest.mark.parametrize("epilogue", ["none", "gelu", "residual"])
def test_products_with_constant_weights_match_onnxruntime(a_shape, w_shape, epilogue):
    model = _product_model(a_shape, w_shape, epilogue)
    feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim],
                                         dtype=np.float32) for i in model.graph.input}
    compiled = heterocc.compile(model, target="llvm")
    np.testing.assert_allclose(compiled.run(feeds)[0], _ort(model, feeds),
                               rtol=1e-4, atol=1e-4)
    assert compiled.fallbacks == {}
    assert any(f.attrs["packed_constants"] for f in _lowered(compiled).values())


def test_pack_columns_is_the_packed_layout():
    b = RNG.standard_normal((2, 5, 7), dtype=np.float32)
    packed = pack_columns(b, 4)
    assert packed.shape == (2, 2, 5, 4) and packed.flags.c_contiguous
    for panel in range(2):
        for column in range(4):
            j = panel * 4 + column
            expected = b[:, :, j] if j < 7 else np.zeros((2, 5), np.float32)
            np.testing.assert_array_equal(packed[:, panel, :, column], expected)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_weights_are_prepacked_through_a_transpose(trans_b, tmp_path):
    w = RNG.standard_normal((40, 24) if trans_b else (24, 40), dtype=np.float32)
    bias = RNG.standard_normal(40, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "bias"], ["y"], transB=trans_b),
         helper.make_node("Relu", ["y"], ["out"])], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 24])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 40])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    feeds = {"x": RNG.standard_normal((3, 24), dtype=np.float32)}
    compiled = heterocc.compile(model, target="llvm")
    expected = _ort(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)[0], expected, rtol=1e-4, atol=1e-4)
    (func,) = _lowered(compiled).values()
    assert [p[2] for p in func.attrs["packed_constants"]] == [[1, 0] if trans_b else None]
    assert "packed_B" not in str(func) and "gemm_bt" not in str(func)
    compiled.export(str(tmp_path / "gemm"))
    np.testing.assert_allclose(heterocc.load(str(tmp_path / "gemm")).run(feeds)[0],
                               expected, rtol=1e-4, atol=1e-4)


def test_softmax_and_layernorm_run_vectorized_and_row_parallel():
    compiled = heterocc.compile(encoder_layer(seq=64, d_model=256, heads=4, ffn=64),
                                target="llvm")
    assert compiled.fallbacks == {}
    lowered = _lowered(compiled)
    softmax = str(next(f for name, f in lowered.items() if "softmax" in name))
    # one loop over the 4 x 64 rows in parallel, each computing its maximum, its
    # exponentials (a row's buffer) and their sum, then its quotients, vectorized
    # (SoftmaxRowsRule, test_llvm_softmax.py)
    assert softmax.count("in parallel(0, 256)") == 1
    assert "softmax_exp[ramp(" in softmax and "softmax[ramp(" in softmax
    assert softmax.count("in parallel(") == 1
    layernorm = str(next(f for name, f in lowered.items() if "layernorm" in name))
    # (64 rows of 256: enough work to wake the thread pool)
    assert layernorm.count("in parallel(0, 64)") == 2  # sum and variance per row
    assert "layernorm[ramp(" in layernorm
