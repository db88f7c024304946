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
