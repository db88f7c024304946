"""Checks one registered op against onnx.reference.ReferenceEvaluator on a one-node model.

Shared by the op test files: ``compare_with_onnx`` runs the op's type inference and its
NumPy reference, runs ONNX's reference on the same inputs, and asserts that the inferred
types, the reference's outputs and ONNX's outputs all agree. The folder's other helpers
live here too, defined once: seeded test data (``rng``, ``normal``, ``data``,
``integers``, ``ints``) and type inference alone (``infer``, ``infer_types``,
``infer_error``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from heterocc.errors import TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import get_op, infer_node_types

LATEST_OPSET = onnx.defs.onnx_opset_version()


def onnx_outputs(op_type: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any],
                 num_outputs: int = 1, opset: int = LATEST_OPSET) -> list[np.ndarray]:
    """Outputs of ONNX's reference for a one-node model (None inputs are omitted)."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outputs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op_type, names, outputs, **attrs)
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
        for name, x in zip(names, inputs) if x is not None]
    graph_outputs = [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
                     for name in outputs]
    model = helper.make_model(helper.make_graph([node], "single", graph_inputs, graph_outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    feeds = {name: x for name, x in zip(names, inputs) if x is not None}
    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, feeds)]


def registry_outputs(op_type: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any],
                     num_outputs: int = 1) -> tuple[list[TensorType], list[np.ndarray]]:
    """(inferred output types, reference outputs) of the registered op; every input is
    offered to type inference as a constant."""
    op = get_op(op_type)
    full_attrs = op.normalize_attrs(attrs)
    types = [TensorType.of(x) if x is not None else None for x in inputs]
    inferred = infer_node_types(op, types, list(inputs), full_attrs, num_outputs)
    return inferred, op.run(list(inputs), full_attrs)[:num_outputs]


def compare_with_onnx(op_type: str, inputs: Sequence[np.ndarray | None],
                      attrs: dict[str, Any] | None = None, num_outputs: int = 1,
                      opset: int = LATEST_OPSET, rtol: float = 1e-5,
                      atol: float = 1e-6) -> list[np.ndarray]:
    """Assert that type inference, the NumPy reference and ONNX's reference agree on
    every output; returns the registry's outputs."""
    attrs = dict(attrs or {})
    inferred, got = registry_outputs(op_type, inputs, attrs, num_outputs)
    expected = onnx_outputs(op_type, inputs, attrs, num_outputs, opset)
    assert len(got) == num_outputs
    for k, (t, mine, theirs) in enumerate(zip(inferred, got, expected)):
        assert (t.shape, t.dtype) == (mine.shape, mine.dtype.name), \
            f"output {k}: inferred {t}, reference gave {mine.dtype}{mine.shape}"
        assert mine.shape == theirs.shape, f"output {k}: {mine.shape} != onnx {theirs.shape}"
        assert mine.dtype == theirs.dtype, f"output {k}: {mine.dtype} != onnx {theirs.dtype}"
        if mine.dtype.kind == "f":
            np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(mine, theirs, err_msg=f"output {k}")
    return got


def check_inferred(op_type: str, inputs: Sequence[np.ndarray | None],
                   attrs: dict[str, Any] | None = None,
                   num_outputs: int = 1) -> list[np.ndarray]:
    """Assert only that type inference matches the NumPy reference; returns its outputs
    (for cases ONNX's reference does not cover, checked against a hand-written oracle)."""
    inferred, got = registry_outputs(op_type, inputs, dict(attrs or {}), num_outputs)
    for t, mine in zip(inferred, got):
        assert (t.shape, t.dtype) == (mine.shape, mine.dtype.name)
    return got


# ----------------------------------------------------------------------------- test data


def rng(seed: int | np.random.Generator = 0) -> np.random.Generator:
    """A NumPy generator seeded with ``seed`` (a generator is returned as it is): each
    test draws its own reproducible data."""
    return np.random.default_rng(seed)


def normal(shape, dtype=np.float32, seed=0, *, scale: float = 1.0,
           shift: float = 0.0) -> np.ndarray:
    """Normal test data of ``dtype`` (standard normal times ``scale`` plus ``shift``,
    computed in float64), reproducible by ``seed``."""
    return (rng(seed).standard_normal(shape) * scale + shift).astype(dtype)


def data(shape, dtype=np.float32, seed=0) -> np.ndarray:
    """Normal test data of ``dtype`` spread over about +-30 (ten times a standard
    normal's), reproducible by ``seed``."""
    return normal(shape, dtype, seed, scale=10.0)


def integers(shape, dtype, seed: int | np.random.Generator = 0) -> np.ndarray:
    """Integers over the whole range of integer ``dtype``, drawn from ``seed`` (a seed,
    or a generator to draw from)."""
    info = np.iinfo(dtype)
    return rng(seed).integers(info.min, int(info.max) + 1, shape).astype(dtype)


def ints(*values) -> np.ndarray:
    """``values`` as an int64 vector (the shape operands of ONNX ops)."""
    return np.array(values, np.int64)


# ----------------------------------------------------------------------------- type inference


def infer_types(op_type: str, types: Sequence[TensorType | None],
                attrs: dict[str, Any] | None = None, num_outputs: int = 1,
                values: Sequence[np.ndarray | None] | None = None, domain: str = "",
                node: str = "") -> list[TensorType]:
    """The registry's type inference of ``op_type`` (of ONNX domain ``domain``) from input
    ``types`` alone, or with the input ``values`` it is offered as constants; ``node``
    names the node in error messages."""
    op = get_op(op_type, domain)
    values = [None] * len(types) if values is None else list(values)
    return infer_node_types(op, list(types), values, op.normalize_attrs(dict(attrs or {})),
                            num_outputs, node)


def infer(op_type: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
          num_outputs: int = 1, constant: Collection[int] | None = None) -> list[TensorType]:
    """The registry's type inference of ``op_type`` on ``inputs``, of which those whose
    positions ``constant`` lists (all when None) are offered as constant values."""
    types = [TensorType.of(x) if x is not None else None for x in inputs]
    values = [x if constant is None or i in constant else None for i, x in enumerate(inputs)]
    return infer_types(op_type, types, attrs, num_outputs, values)


def infer_error(op_type: str, types: Sequence[TensorType | None],
                attrs: dict[str, Any] | None = None,
                values: Sequence[np.ndarray | None] | None = None, num_outputs: int = 1,
                node: str = "n0") -> str:
    """The message of the TypeInferenceError that inference of ``op_type`` raises for
    these input types (the node named ``node``); fails the test when it raises none."""
    with pytest.raises(TypeInferenceError) as caught:
        infer_types(op_type, types, attrs, num_outputs, values, node=node)
    return str(caught.value)
