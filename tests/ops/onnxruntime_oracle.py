"""ONNX Runtime as the oracle where onnx.reference is wrong or incomplete (pooling with
ceil_mode overflow or SAME_LOWER strides, recurrent sequence_lens / clip / activations)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime
from onnx import helper


def onnxruntime_outputs(op_type: str, inputs: Sequence[np.ndarray | None],
                        attrs: dict[str, Any], output_dtypes: Sequence[type],
                        opset: int = 19) -> list[np.ndarray]:
    """Outputs of ONNX Runtime (CPU) for a one-node model; None inputs are omitted."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outputs = [f"out{i}" for i in range(len(output_dtypes))]
    graph = helper.make_graph(
        [helper.make_node(op_type, names, outputs, **attrs)], "single",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if x is not None],
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(t)), None)
         for n, t in zip(outputs, output_dtypes)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, {n: x for n, x in zip(names, inputs) if x is not None})
