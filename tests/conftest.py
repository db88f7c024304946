"""Shared fixtures: small ONNX models built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

_ONNX_TYPES = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64,
               "int32": TensorProto.INT32, "int8": TensorProto.INT8, "bool": TensorProto.BOOL,
               "uint8": TensorProto.UINT8, "float16": TensorProto.FLOAT16}


def make_model(nodes, inputs, outputs, initializers=None, opset=18) -> onnx.ModelProto:
    """A model from nodes; ``inputs``/``outputs`` are (name, dtype, shape) triples
    (shape None for outputs: inferred), ``initializers`` a name -> array dict."""
    def vi(name, dtype, shape):
        return helper.make_tensor_value_info(name, _ONNX_TYPES[dtype], shape)

    graph = helper.make_graph(
        nodes, "test", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    if any(o[2] is None for o in outputs):  # let ONNX fill in the output shapes
        model = onnx.shape_inference.infer_shapes(model)
    return model


@pytest.fixture
def rng():
    return np.random.default_rng(0)
