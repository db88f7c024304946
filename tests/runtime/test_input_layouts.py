"""Every input layout the run accepts (big-endian, Fortran order, strided views,
read-only, memory-mapped, 0-d) gives the same result as its native contiguous copy."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.runtime.inputs import native_order


def _model():
    """A float input through a matrix product and an int64 index input through Gather:
    byte order matters for both."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 6 * 5, dtype=np.float32).reshape(6, 5),
                                "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Gather", ["m", "i"], ["g"], axis=1),
             helper.make_node("Relu", ["g"], ["y"])]
    graph = helper.make_graph(
        nodes, "layouts",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 6)),
         helper.make_tensor_value_info("i", TensorProto.INT64, (3,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4, 3))], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


X = np.random.default_rng(5).standard_normal((4, 6)).astype(np.float32)
I = np.array([4, 0, 2], np.int64)


def _read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def _strided(a):
    wide = np.zeros((a.shape[0] * 2, a.shape[1] * 3) if a.ndim == 2 else (a.size * 3,), a.dtype)
    view = wide[::2, ::3] if a.ndim == 2 else wide[::3]
    view[...] = a
    return view


def _memmap(a, tmp_path):
    m = np.memmap(tmp_path / f"m{a.dtype.name}.bin", a.dtype, "w+", shape=a.shape)
    m[...] = a
    return m


LAYOUTS = {
    "big-endian": lambda a, _: a.astype(a.dtype.newbyteorder(">")),
    "fortran": lambda a, _: np.asfortranarray(a),
    "strided": lambda a, _: _strided(a),
    "read-only": lambda a, _: _read_only(a),
    "memmap": _memmap,
    "big-endian strided": lambda a, _: _strided(a).astype(a.dtype.newbyteorder(">"),
                                                          order="K"),
}


@pytest.fixture(scope="module")
def models():
    return {t: heterocc.compile(_model(), target=t) for t in ("llvm", "reference")}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("target", ["llvm", "reference"])
def test_every_input_layout_gives_the_native_result(models, layout, target, tmp_path):
    compiled = models[target]
    expected = compiled.run({"x": X, "i": I})[0]
    x, i = LAYOUTS[layout](X, tmp_path), LAYOUTS[layout](I, tmp_path)
    assert not (x.flags.c_contiguous and x.dtype.isnative and x.flags.writeable
                and type(x) is np.ndarray)  # a layout other than the native one
    np.testing.assert_array_equal(compiled.run({"x": x, "i": i})[0], expected)
    assert compiled.run([x, i])[0].tobytes() == expected.tobytes()


def test_a_loaded_artifact_converts_big_endian_inputs(models, tmp_path):
    models["llvm"].export(str(tmp_path / "a"))
    loaded = heterocc.load(str(tmp_path / "a"))
    big = X.astype(">f4"), I.astype(">i8")
    np.testing.assert_array_equal(loaded.run(list(big))[0], models["llvm"].run([X, I])[0])


def test_native_order_converts_only_foreign_arrays():
    assert native_order(X) is X
    swapped = native_order(X.astype(">f4"))
    assert swapped.dtype.isnative and np.array_equal(swapped, X)
    text = np.array(["a"], ">U1")
    assert native_order(text).dtype.isnative
