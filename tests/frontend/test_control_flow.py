"""If / Loop / Scan: bodies become sub-graphs with explicit captures."""

import numpy as np
from onnx import TensorProto, helper

import heterocc
from tests.conftest import make_model


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_if_with_a_runtime_condition_and_captured_values():
    then_g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["out"])], "then", [],
                               [_vi("out", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "y"], ["out"])], "else", [],
                               [_vi("out", TensorProto.FLOAT, [3])])
    node = helper.make_node("If", ["c"], ["z"], then_branch=then_g, else_branch=else_g)
    model = make_model([node], [("c", "bool", []), ("x", "float32", [3]), ("y", "float32", [3])],
                       [("z", "float32", [3])])
    compiled = heterocc.compile(model)
    x, y = np.arange(3, dtype=np.float32), np.ones(3, np.float32)
    np.testing.assert_array_equal(compiled.run([np.array(True), x, y])[0], x + y)
    np.testing.assert_array_equal(compiled.run([np.array(False), x, y])[0], x - y)
    assert compiled.graph.op_counts()["If"] == 1


def test_loop_with_loop_carried_state_and_a_capture():
    # acc = acc * 2 + x, five times; x is read from the enclosing graph
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_in", "two"], ["doubled"]),
         helper.make_node("Add", ["doubled", "x"], ["acc_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                 _vi("acc_in", TensorProto.FLOAT, [2])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", TensorProto.FLOAT, [2])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    node = helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body)
    model = make_model([node], [("acc0", "float32", [2]), ("x", "float32", [2])],
                       [("acc", "float32", [2])], {"n": np.array(5, np.int64)})
    x = np.array([1.0, -1.0], np.float32)
    acc = np.zeros(2, np.float32)
    for _ in range(5):
        acc = acc * 2 + x
    compiled = heterocc.compile(model)
    np.testing.assert_array_equal(compiled.run([np.zeros(2, np.float32), x])[0], acc)


def test_loop_whose_shapes_grow_unrolls_on_specialized_inputs():
    # scan output: the running sum after each of n iterations (n is a graph input)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["s_in", "one"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["scan"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                 _vi("s_in", TensorProto.FLOAT, [])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("s_out", TensorProto.FLOAT, []),
         _vi("scan", TensorProto.FLOAT, [])],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    node = helper.make_node("Loop", ["n", "", "s0"], ["s", "history"], body=body)
    model = make_model([node], [("n", "int64", []), ("s0", "float32", [])],
                       [("s", "float32", []), ("history", "float32", ["k"])])
    compiled = heterocc.compile(model)
    s, history = compiled.run([np.array(4, np.int64), np.array(0.5, np.float32)])
    assert s == 4.5 and history.tolist() == [1.5, 2.5, 3.5, 4.5]
    assert compiled.run([np.array(2, np.int64), np.array(0.0, np.float32)])[1].tolist() == [1, 2]


def test_scan_running_sum_in_both_directions():
    body = helper.make_graph(
        [helper.make_node("Add", ["state_in", "x_t"], ["state_out"]),
         helper.make_node("Identity", ["state_out"], ["y_t"])],
        "body", [_vi("state_in", TensorProto.FLOAT, [2]), _vi("x_t", TensorProto.FLOAT, [2])],
        [_vi("state_out", TensorProto.FLOAT, [2]), _vi("y_t", TensorProto.FLOAT, [2])])
    node = helper.make_node("Scan", ["init", "xs"], ["final", "ys"], body=body,
                            num_scan_inputs=1, scan_input_directions=[1])
    model = make_model([node], [("init", "float32", [2]), ("xs", "float32", [4, 2])],
                       [("final", "float32", [2]), ("ys", "float32", [4, 2])])
    xs = np.arange(8, dtype=np.float32).reshape(4, 2)
    final, ys = heterocc.compile(model).run([np.zeros(2, np.float32), xs])
    np.testing.assert_array_equal(ys, np.cumsum(xs[::-1], axis=0))
    np.testing.assert_array_equal(final, xs.sum(axis=0))
