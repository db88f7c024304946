import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc.frontend import from_onnx
from heterocc.ir.checker import check_graph
from heterocc.passes import (
    DEFAULT_PIPELINE,
    PassManager,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_batchnorm,
    fold_constants,
    fuse_ops,
    fused_functions,
    post_dominators,
    simplify,
)
from heterocc.runtime.interpreter import evaluate
from tests.conftest import make_model


def _same_results(before, after, inputs):
    for a, b in zip(evaluate(before, inputs), evaluate(after, inputs)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _conv_bn_model(rng, with_bias=True):
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32)
    inits = {"w": w, "g": rng.random(8).astype(np.float32) + 0.5,
             "b": rng.standard_normal(8).astype(np.float32),
             "m": rng.standard_normal(8).astype(np.float32),
             "v": rng.random(8).astype(np.float32) + 0.5}
    conv_in = ["x", "w"]
    if with_bias:
        inits["cb"] = rng.standard_normal(8).astype(np.float32)
        conv_in.append("cb")
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["y"],
                              epsilon=1e-3)]
    return make_model(nodes, [("x", "float32", [2, 4, 6, 6])], [("y", "float32", None)], inits)


@pytest.mark.parametrize("with_bias", [True, False])
def test_batchnorm_folds_into_conv(rng, with_bias):
    g = from_onnx(_conv_bn_model(rng, with_bias))
    folded = fold_batchnorm(g)
    assert [n.op for n in folded.nodes] == ["Conv"]
    check_graph(folded)
    _same_results(g, folded, [rng.standard_normal((2, 4, 6, 6)).astype(np.float32)])


@pytest.mark.parametrize("trans_b", [0, 1])
def test_batchnorm_folds_into_gemm(rng, trans_b):
    w = rng.standard_normal((5, 3) if trans_b else (3, 5)).astype(np.float32)
    inits = {"w": w, "c": rng.standard_normal(5).astype(np.float32),
             "g": rng.random(5).astype(np.float32) + 0.5,
             "b": rng.standard_normal(5).astype(np.float32),
             "m": rng.standard_normal(5).astype(np.float32),
             "v": rng.random(5).astype(np.float32) + 0.5}
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["h"], transB=trans_b, beta=0.5),
             helper.make_node("BatchNormalization", ["h", "g", "b", "m", "v"], ["y"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [4, 3])], [("y", "float32", None)],
                             inits))
    folded = fold_batchnorm(g)
    assert [n.op for n in folded.nodes] == ["Gemm"]
    _same_results(g, folded, [rng.standard_normal((4, 3)).astype(np.float32)])


def test_lone_batchnorm_becomes_mul_add(rng):
    inits = {k: rng.random(4).astype(np.float32) + 0.5 for k in "gbmv"}
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("BatchNormalization", ["r", "g", "b", "m", "v"], ["y"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [1, 4, 3, 3])],
                             [("y", "float32", None)], inits))
    out = fold_batchnorm(g)
    assert [n.op for n in out.nodes] == ["Relu", "Mul", "Add"]
    _same_results(g, out, [rng.standard_normal((1, 4, 3, 3)).astype(np.float32)])


def test_fold_constants_evaluates_constant_subgraphs(rng):
    inits = {"a": np.ones((2, 2), np.float32), "b": np.full((2, 2), 2, np.float32)}
    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"]),
             helper.make_node("Add", ["x", "ab"], ["y"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [2, 2])], [("y", "float32", None)],
                             inits))
    assert [n.op for n in g.nodes] == ["Add"]  # small constant work folds at import
    out = fold_constants(g)
    assert [n.op for n in out.nodes] == ["Add"]
    np.testing.assert_array_equal(out.nodes[0].inputs[1].data, np.full((2, 2), 2, np.float32))


def test_simplify_removes_identity_dropout_and_reshape_chains(rng):
    nodes = [helper.make_node("Identity", ["x"], ["i"]),
             helper.make_node("Dropout", ["i"], ["d"]),
             helper.make_node("Flatten", ["d"], ["f"], axis=1),
             helper.make_node("Reshape", ["f", "s"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t1"], perm=[1, 0]),
             helper.make_node("Transpose", ["t1"], ["y"], perm=[1, 0])]
    model = make_model(nodes, [("x", "float32", [2, 3, 4])], [("y", "float32", None)],
                       {"s": np.array([4, 6], np.int64)})
    g = from_onnx(model)
    out = eliminate_dead_code(simplify(g))  # simplify leaves the bypassed nodes to DCE
    assert [n.op for n in out.nodes] == ["Reshape"]
    assert out.nodes[0].inputs[0] is g.inputs[0]
    _same_results(g, out, [rng.standard_normal((2, 3, 4)).astype(np.float32)])


@pytest.mark.parametrize("exponent, muls", [(1.0, 0), (2.0, 1), (3.0, 2), (4.0, 2)])
def test_simplify_computes_small_integer_powers_as_products(exponent, muls, rng):
    nodes = [helper.make_node("Pow", ["x", "e"], ["p"]),
             helper.make_node("Relu", ["p"], ["y"])]
    model = make_model(nodes, [("x", "float32", [2, 5])], [("y", "float32", None)],
                       {"e": np.array(exponent, np.float32)})
    g = from_onnx(model)
    out = eliminate_dead_code(simplify(g))
    check_graph(out)
    assert [n.op for n in out.nodes] == ["Mul"] * muls + ["Relu"]
    _same_results(g, out, [rng.standard_normal((2, 5)).astype(np.float32)])


@pytest.mark.parametrize("exponent", [0.5, 5.0, -1.0])
def test_simplify_keeps_other_powers(exponent):
    nodes = [helper.make_node("Pow", ["x", "e"], ["y"])]
    model = make_model(nodes, [("x", "float32", [3])], [("y", "float32", None)],
                       {"e": np.array([exponent], np.float32)})
    assert [n.op for n in simplify(from_onnx(model)).nodes] == ["Pow"]


def test_simplify_makes_one_product_of_a_batch_of_rows(rng):
    """[5, 1, 8] x [8, 6] (ViT's projection of tokens one row each): one [5, 8] x [8, 6]."""
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                       [("x", "float32", [5, 1, 8])], [("y", "float32", None)],
                       {"w": rng.standard_normal((8, 6)).astype(np.float32)})
    g = from_onnx(model)
    out = eliminate_dead_code(simplify(g))
    check_graph(out)
    assert [n.op for n in out.nodes] == ["Reshape", "MatMul", "Reshape"]
    assert out.nodes[1].inputs[0].type.shape == (5, 8)
    _same_results(g, out, [rng.standard_normal((5, 1, 8)).astype(np.float32)])


@pytest.mark.parametrize("operands", [["x", "s"], ["s", "x"]])
def test_simplify_makes_silu_one_swish(operands, rng):
    """x * Sigmoid(x) (torch's SiLU), in either operand order: one Swish, bit for bit
    the two ops' float32 results."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", operands, ["y"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [2, 7])], [("y", "float32", None)]))
    out = eliminate_dead_code(simplify(g))
    check_graph(out)
    assert [(n.op, n.attrs.get("alpha")) for n in out.nodes] == [("Swish", 1.0)]
    x = (rng.standard_normal((2, 7)) * 8).astype(np.float32)
    x[0, :4] = [np.inf, -np.inf, 0.0, -100.0]
    (before,), (after,) = evaluate(g, [x]), evaluate(out, [x])
    np.testing.assert_array_equal(after, before)


def test_simplify_keeps_a_sigmoid_read_elsewhere_and_other_products():
    """A Sigmoid that another node reads stays beside the Swish; Sigmoid(x) * y is no
    SiLU and stays a product."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["silu"]),
             helper.make_node("Mul", ["s", "z"], ["gated"]),
             helper.make_node("Add", ["silu", "gated"], ["y"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [3]), ("z", "float32", [3])],
                             [("y", "float32", None)]))
    out = eliminate_dead_code(simplify(g))
    check_graph(out)
    assert [n.op for n in out.nodes] == ["Sigmoid", "Swish", "Mul", "Add"]


def _rows_product_model(rng, trans_b=0, also_read=False):
    """GPT-2's ``Conv1D``: x[1, 5, 8] flattened to [5, 8], Gemm with W[8, 6] and a bias,
    reshaped back to [1, 5, 6], then Tanh (``also_read``: the Gemm's output is also an
    output)."""
    w = rng.standard_normal((6, 8) if trans_b else (8, 6)).astype(np.float32)
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["rows"]),
             helper.make_node("Gemm", ["rows", "w", "b"], ["g"], transB=trans_b),
             helper.make_node("Reshape", ["g", "back"], ["r"]),
             helper.make_node("Tanh", ["r"], ["y"])]
    outputs = [("y", "float32", None)] + ([("g", "float32", None)] if also_read else [])
    return make_model(nodes, [("x", "float32", [1, 5, 8])], outputs,
                      {"w": w, "b": rng.standard_normal(6).astype(np.float32),
                       "flat": np.array([5, 8], np.int64),
                       "back": np.array([1, 5, 6], np.int64)})


def test_simplify_makes_a_gemm_between_reshapes_one_matmul_and_add(rng):
    """So the Tanh after it joins the product's function (GPT-2's GELU)."""
    g = from_onnx(_rows_product_model(rng))
    out = eliminate_dead_code(simplify(g))
    check_graph(out)
    assert [n.op for n in out.nodes] == ["MatMul", "Add", "Tanh"]
    assert out.nodes[0].inputs[0] is out.inputs[0]
    _same_results(g, out, [rng.standard_normal((1, 5, 8)).astype(np.float32)])
    functions = fused_functions(fuse_ops(out))
    assert [[n.op for n in f.body.nodes] for f in functions] == [["MatMul", "Add", "Tanh"]]


@pytest.mark.parametrize("trans_b,also_read", [(1, False), (0, True)])
def test_simplify_keeps_a_gemm_it_cannot_rewrite(trans_b, also_read, rng):
    g = from_onnx(_rows_product_model(rng, trans_b, also_read))
    assert "Gemm" in [n.op for n in eliminate_dead_code(simplify(g)).nodes]


def test_cse_merges_identical_nodes_and_dce_drops_the_rest(rng):
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Relu", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"]),
             helper.make_node("Sigmoid", ["x"], ["unused"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [3])], [("y", "float32", None)]))
    out = eliminate_dead_code(eliminate_common_subexpressions(g))
    assert [n.op for n in out.nodes] == ["Relu", "Add"]
    assert out.nodes[1].inputs[0] is out.nodes[1].inputs[1]
    _same_results(g, out, [rng.standard_normal(3).astype(np.float32)])


def test_cse_merges_equal_constants_hashing_only_possible_twins(rng, monkeypatch):
    """Constants of equal contents and type merge; a constant whose type and first
    elements no other has is never hashed (a model's weights are most of its bytes)."""
    from heterocc.passes import cse

    hashed = []
    key = cse._constant_key
    monkeypatch.setattr(cse, "_constant_key", lambda v: hashed.append(v.name) or key(v))
    w = rng.standard_normal((4, 8)).astype(np.float32)  # more than the 16 compared
    late = w.copy()
    late[-1, -1] += 1  # the same type and first elements: hashed, and kept apart
    inits = {"w1": w, "w2": w.copy(), "w3": rng.standard_normal((4, 8)).astype(np.float32),
             "w4": late,
             "big": rng.standard_normal((8, 5)).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", name], [f"m{k}"])
             for k, name in enumerate(("w1", "w2", "w3", "w4"))]
    nodes += [helper.make_node("Sum", ["m0", "m1", "m2", "m3"], ["s"]),
              helper.make_node("MatMul", ["s", "big"], ["y"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [2, 4])], [("y", "float32", None)],
                             inits))
    out = eliminate_dead_code(eliminate_common_subexpressions(g))
    assert sorted(hashed) == ["w1", "w2", "w4"]
    assert [n.op for n in out.nodes].count("MatMul") == 4
    total = next(n for n in out.nodes if n.op == "Sum")
    assert total.inputs[0] is total.inputs[1]
    assert len({id(v) for v in total.inputs}) == 3
    _same_results(g, out, [rng.standard_normal((2, 4)).astype(np.float32)])


def _residual_block(rng):
    inits = {"w1": rng.standard_normal((4, 4, 3, 3)).astype(np.float32),
             "w2": rng.standard_normal((4, 4, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Relu", ["x"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r0"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Transpose", ["r2"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["flat"]),
             helper.make_node("ReduceSum", ["flat", "axes"], ["y"], keepdims=0)]
    inits["shape"] = np.array([1, -1], np.int64)
    inits["axes"] = np.array([1], np.int64)
    return make_model(nodes, [("x", "float32", [1, 4, 5, 5])], [("y", "float32", None)], inits)


def test_post_dominators_of_a_residual_block(rng):
    g = from_onnx(_residual_block(rng))
    ipdom = post_dominators(g)
    ops = [n.op for n in g.nodes]
    # r0 feeds conv1 and the add: its post-dominator is the add
    assert ops[ipdom[0]] == "Add"
    assert ipdom[-1] == len(g.nodes)  # the last node is post-dominated by the exit


def test_fusion_follows_the_rules(rng):
    g = from_onnx(_residual_block(rng))
    fused = fuse_ops(g)
    check_graph(fused)
    groups = [[n.op for n in f.body.nodes] for f in fused_functions(fused)]
    assert ["Conv", "Relu"] in groups  # conv takes its elementwise epilogue
    assert ["Conv", "Add", "Relu"] in groups  # residual add included
    assert ["Transpose", "Reshape", "ReduceSum"] in groups  # reductions take injective inputs
    assert sum(len(x) for x in groups) == len(g.nodes)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    _same_results(g, fused, [x])


def test_fusion_groups_keep_their_members():
    """The union-find behind fusion keeps each group's members (the side-chain rule reads
    them instead of scanning every node): after any unions, a root's members are exactly
    the nodes whose root it is, and its size their count."""
    from heterocc.ops import FusionKind
    from heterocc.passes.fuse_ops import _Groups

    groups = _Groups([FusionKind.ELEMWISE] * 12)
    for a, b in [(3, 4), (5, 4), (0, 11), (4, 11), (7, 8), (8, 8), (9, 7)]:
        groups.union(a, b)
    for i in range(12):
        root = groups.find(i)
        assert sorted(groups.members[root]) == [j for j in range(12) if groups.find(j) == root]
        assert groups.size(i) == len(groups.members[root])
    assert sum(len(m) for m in groups.members) == 12  # non-roots hold none


def test_opaque_ops_stand_alone(rng):
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("TopK", ["r", "k"], ["v", "i"]),
             helper.make_node("Relu", ["v"], ["y"])]
    g = from_onnx(make_model(nodes, [("x", "float32", [2, 6])],
                             [("y", "float32", None), ("i", "int64", None)],
                             {"k": np.array([3], np.int64)}))
    groups = [[n.op for n in f.body.nodes] for f in fused_functions(fuse_ops(g))]
    assert ["TopK"] in groups


def test_pass_manager_times_dumps_and_checks(tmp_path, rng):
    g = from_onnx(_residual_block(rng))
    pm = PassManager(DEFAULT_PIPELINE, dump_ir=str(tmp_path), check=True)
    out = pm.run(g)
    assert [r.name for r in pm.records] == list(DEFAULT_PIPELINE)
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps[0] == "00_input.txt" and dumps[-1].endswith("_fuse_ops.txt")
    assert "fused_conv_add_relu" in (tmp_path / dumps[-1]).read_text()
    assert "fuse_ops" in pm.report()
    _same_results(g, out, [rng.standard_normal((1, 4, 5, 5)).astype(np.float32)])


def test_compile_tiny_cnn_matches_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    from heterocc.models import tiny_cnn

    model = tiny_cnn()
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    compiled = heterocc.compile(model)
    (ref,) = ort.InferenceSession(model.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(compiled.run([x])[0], ref, rtol=1e-4, atol=1e-6)
    assert compiled.fallbacks == {}
    assert compiled.graph.op_counts().get("BatchNormalization", 0) == 0
