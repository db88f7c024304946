import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc.errors import InputError, ModelLoadError, UnsupportedOpError
from heterocc.frontend import from_onnx
from tests.conftest import make_model


def _relu_model():
    return make_model([helper.make_node("Relu", ["x"], ["y"])],
                      [("x", "float32", [2, 3])], [("y", "float32", None)])


def test_import_gives_static_types():
    g = from_onnx(_relu_model())
    assert [str(v.type) for v in g.inputs] == ["float32[2, 3]"]
    assert str(g.outputs[0].type) == "float32[2, 3]"


@pytest.mark.parametrize("data", [b"", b"\x00\x01garbage\xff" * 3, b"not a model at all"])
def test_garbage_bytes_are_a_load_error(data):
    with pytest.raises(ModelLoadError):
        heterocc.compile(data)


def test_truncated_model_is_a_load_error():
    data = _relu_model().SerializeToString()
    with pytest.raises(ModelLoadError):
        heterocc.compile(data[: len(data) // 2])


def test_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(ModelLoadError, match="cannot read"):
        heterocc.compile(str(tmp_path / "absent.onnx"))


def test_every_unsupported_op_is_named_at_once():
    nodes = [helper.make_node("FancyOpA", ["x"], ["a"], name="first"),
             helper.make_node("FancyOpB", ["a"], ["b"], name="second"),
             helper.make_node("FancyOpA", ["b"], ["y"], name="third")]
    model = make_model(nodes, [("x", "float32", [2])], [("y", "float32", None)])
    with pytest.raises(UnsupportedOpError) as info:
        heterocc.compile(model, check=False)
    assert info.value.missing == {"FancyOpA": ["first", "third"], "FancyOpB": ["second"]}
    assert "FancyOpB" in str(info.value) and "'third'" in str(info.value)


def test_reshape_shape_given_as_a_graph_input_specializes_at_run():
    model = make_model([helper.make_node("Reshape", ["x", "shape"], ["y"])],
                       [("x", "float32", [2, 6]), ("shape", "int64", [2])],
                       [("y", "float32", None)])
    compiled = heterocc.compile(model)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    (a,) = compiled.run([x, np.array([3, 4], np.int64)])
    (b,) = compiled.run([x, np.array([4, -1], np.int64)])
    np.testing.assert_array_equal(a, x.reshape(3, 4))
    np.testing.assert_array_equal(b, x.reshape(4, 3))
    assert compiled.specialize_on == ["shape"]


def test_symbolic_batch_dimension_compiles_per_shape():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [("x", "float32", ["N", 3])], [("y", "float32", None)])
    compiled = heterocc.compile(model)
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_array_equal(compiled.run([x])[0], np.maximum(x, 0))
    fixed = heterocc.compile(model, shapes={"x": (4, 3)})
    assert fixed.graph.inputs[0].type.shape == (4, 3)


def test_wrong_inputs_at_run_are_named():
    compiled = heterocc.compile(_relu_model())
    good = np.zeros((2, 3), np.float32)
    with pytest.raises(InputError, match="missing input"):
        compiled.run({})
    with pytest.raises(InputError, match="unknown input.*'z'"):
        compiled.run({"x": good, "z": good})
    with pytest.raises(InputError, match="shape \\(3, 2\\).*expects \\(2, 3\\)"):
        compiled.run({"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(InputError, match="dtype float64.*expects float32"):
        compiled.run({"x": np.zeros((2, 3))})


def test_a_cycle_in_the_onnx_graph_is_reported():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"),
             helper.make_node("Relu", ["a"], ["b"], name="r2")]
    model = make_model(nodes, [("x", "float32", [2])], [("b", "float32", None)])
    with pytest.raises(ModelLoadError, match="before it is defined"):
        heterocc.compile(model, check=False)


@pytest.mark.parametrize("form", ["proto", "bytes", "path"])
def test_undefined_input_is_reported_by_the_checker(form, tmp_path):
    model = make_model([helper.make_node("Relu", ["nowhere"], ["y"])],
                       [("x", "float32", [2])], [("y", "float32", None)])
    given = {"proto": model, "bytes": model.SerializeToString(),
             "path": str(tmp_path / "m.onnx")}[form]
    if form == "path":
        (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    with pytest.raises(ModelLoadError, match="fails onnx.checker"):
        heterocc.compile(given)
    with pytest.raises(ModelLoadError, match="fails onnx.checker"):
        from_onnx(given)


def test_shape_plumbing_folds_at_import():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Reshape", ["x", "s"], ["y"])]
    model = make_model(nodes, [("x", "float32", [2, 3])], [("y", "float32", None)])
    g = from_onnx(model)
    assert [n.op for n in g.nodes] == ["Reshape"] and g.nodes[0].inputs[1].is_const


def test_old_upsample_keeps_asymmetric_nearest_sampling():
    import onnx

    node = helper.make_node("Upsample", ["x", "s"], ["y"], mode="nearest")
    model = make_model([node], [("x", "float32", [1, 1, 2, 2])],
                       [("y", "float32", [1, 1, 4, 6])],
                       {"s": np.array([1, 1, 2, 3], np.float32)}, opset=9)
    model.ir_version = 4
    onnx.checker.check_model(model)
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    expected = np.repeat(np.repeat(x, 2, axis=2), 3, axis=3)
    np.testing.assert_array_equal(heterocc.compile(model).run([x])[0], expected)


def test_split_with_an_empty_split_input_uses_the_output_count():
    node = helper.make_node("Split", ["x", ""], ["a", "b", "c"], axis=0)
    model = make_model([node], [("x", "float32", [6])],
                       [("a", "float32", [2]), ("b", "float32", [2]), ("c", "float32", [2])])
    x = np.arange(6, dtype=np.float32)
    outs = heterocc.compile(model).run([x])
    assert [o.tolist() for o in outs] == [[0, 1], [2, 3], [4, 5]]


def test_scalar_inputs_and_outputs_stay_zero_dimensional():
    model = make_model([helper.make_node("Neg", ["x"], ["y"])], [("x", "float32", [])],
                       [("y", "float32", None)])
    (y,) = heterocc.compile(model).run([np.array(3.0, np.float32)])
    assert y.shape == () and y == -3.0


def test_a_model_whose_ops_are_unchanged_at_the_base_opset_skips_the_converter():
    import onnx
    from onnx import version_converter

    from heterocc.frontend import onnx as frontend

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [("x", "float32", [1, 2, 4, 4])], [("y", "float32", None)],
                       {"w": np.ones((3, 2, 3, 3), np.float32)}, opset=17)
    assert frontend._unchanged_up_to_base(model, 17)
    fast = frontend._upgrade(model)
    assert fast is not model and frontend.default_opset(fast) == frontend.BASE_OPSET
    assert frontend.default_opset(model) == 17  # the caller's model is left as it was
    converted = version_converter.convert_version(model, frontend.BASE_OPSET)
    assert list(fast.graph.node) == list(converted.graph.node)
    assert list(fast.graph.initializer) == list(converted.graph.initializer)
    onnx.checker.check_model(fast)


def test_a_model_with_an_op_redefined_by_the_base_opset_is_converted():
    from heterocc.frontend import onnx as frontend

    # ReduceMean-18 takes its axes as an input, ReduceMean-13 as an attribute
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)
    model = make_model([node], [("x", "float32", [2, 3])], [("y", "float32", None)],
                       opset=13)
    assert not frontend._unchanged_up_to_base(model, 13)
    upgraded = frontend._upgrade(model)
    assert len(upgraded.graph.node[-1].input) == 2  # the converter's axes input
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(heterocc.compile(model).run([x])[0], x.mean(axis=1))
