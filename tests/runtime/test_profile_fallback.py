"""The per-function profile names where a function really ran: a function the CPU target
could not compile runs on the NumPy references and is labelled ``llvm/numpy``, never
``llvm``."""

from __future__ import annotations

import numpy as np
from onnx import helper

import heterocc
from tests.conftest import make_model


def test_profile_labels_numpy_fallback_functions():
    # MaxPool with its Indices output has no TE compute (a fallback); the Exp
    # of its values cast to float32 compiles
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2]),
             helper.make_node("Cast", ["p"], ["c"], to=1),
             helper.make_node("Exp", ["c"], ["e"]),
             helper.make_node("Cast", ["i"], ["y2"], to=1)]
    model = make_model(nodes, [("x", "float16", [1, 2, 4, 4])],
                       [("e", "float32", None), ("y2", "float32", None)])
    compiled = heterocc.compile(model, target="llvm")
    fallbacks = next(iter(compiled._cache.values())).targets["llvm"].fallbacks
    compiled.enable_profiling()
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float16)
    compiled.run([x])
    entries = list(compiled._profile.values())
    labels = {e.node: e.target for e in entries}
    assert fallbacks and set(fallbacks) <= set(labels)
    for node, label in labels.items():
        assert label == ("llvm/numpy" if node in fallbacks else "llvm"), (node, label)
    assert "llvm" in labels.values()
    assert "llvm/numpy" in compiled.profile_report()


def test_a_fallbacks_outputs_are_contiguous_for_the_kernels_that_read_them():
    """A function run on the NumPy references (``numpy_kernel``) hands on C-contiguous
    arrays, as a compiled kernel does: a reference Transpose's strided view would be
    refused by the compiled kernel reading it."""
    from types import SimpleNamespace

    from heterocc.ir.graph import Graph, Node, Value
    from heterocc.ir.types import TensorType
    from heterocc.ops import get_op
    from heterocc.sdk.te_target import numpy_kernel

    x = Value("x", TensorType((3, 5), "float32"))
    y = Value("y", TensorType((5, 3), "float32"))
    node = Node("Transpose", [x], [y], get_op("Transpose").normalize_attrs(
        {"perm": [1, 0]}, "t"), "t")
    run = numpy_kernel(SimpleNamespace(body=Graph([x], [y], [node], "g")))
    data = np.arange(15, dtype=np.float32).reshape(3, 5)
    (out,) = run([data])
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, data.T)
