"""TE computes of shape and data-movement ops (core/compute/tensor.py) against the
NumPy reference, through the llvm target; every case must really compile (no fallback)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import heterocc
from heterocc import te
from heterocc.compute import compute_of
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.ops.registry import infer_node_types
from heterocc.targets.llvm.module import build
from tests.conftest import make_model


def assert_llvm_matches_reference(model, inputs, rtol=1e-6, atol=1e-6):
    """``model`` compiled for llvm gives the reference target's outputs, with no function
    left on the NumPy fallback."""
    ours = heterocc.compile(model, target="llvm")
    got = ours.run(inputs)
    want = heterocc.compile(model, target="reference").run(inputs)
    assert ours.graph.nodes, "the graph folded away: nothing reached the compute"
    assert ours.fallbacks == {}
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


def single_node(op, operands, attrs=None, outputs=1, out_dtype=None, opset=18):
    """A model of one ``op`` node and the arrays to run it with.

    ``operands`` are ``(name, array, constant)`` in input order: a constant becomes an
    initializer, any other a graph input; a None array leaves an optional input out."""
    names = [name if array is not None else "" for name, array, _ in operands]
    out_names = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op, names, out_names, **(attrs or {}))
    runtime = [(name, array) for name, array, constant in operands
               if array is not None and not constant]
    out_dtype = out_dtype or operands[0][1].dtype.name
    model = make_model([node], [(name, a.dtype.name, list(a.shape)) for name, a in runtime],
                       [(n, out_dtype, None) for n in out_names],
                       {name: a for name, a, constant in operands if constant and a is not None},
                       opset)
    return model, [a for _, a in runtime]


def data_op(op, x, constants=(), attrs=None, outputs=1, opset=18):
    """``single_node`` over graph input ``x`` and constant operands ``(name, array)``."""
    return single_node(op, [("x", x, False)] + [(n, a, True) for n, a in constants], attrs,
                       outputs, opset=opset)


def ints(*values):
    return np.array(values, np.int64)


@pytest.fixture
def x34(rng):
    return rng.standard_normal((3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    (ints(1), ints(3), None, None),
    (ints(0, 1), ints(-1, 100), ints(0, 2), None),
    (ints(-1, 4), ints(-100, 0), ints(1, -1), ints(-1, -2)),
    (ints(2, -3), ints(0, 5), ints(-3, 2), ints(-2, 2)),
    (ints(10), ints(20), ints(1), None),  # empty along axis 1
    (ints(0, 0, 0), ints(3, 4, 5), None, ints(2, 3, 4)),
])
def test_slice(x34, starts, ends, axes, steps):
    constants = [("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)]
    while constants and constants[-1][1] is None:
        constants.pop()
    assert_llvm_matches_reference(*data_op("Slice", x34, constants))


@pytest.mark.parametrize("split,attrs", [
    (None, {"axis": 1, "num_outputs": 2}),
    (ints(1, 3, 1), {"axis": -1}),
    (ints(2, 1), {"axis": 0}),
])
def test_split(x34, split, attrs):
    outputs = len(split) if split is not None else attrs["num_outputs"]
    constants = [("split", split)] if split is not None else []
    assert_llvm_matches_reference(*data_op("Split", x34, constants, attrs, outputs))


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 1, 1, 1), (3, 4, 1), (4, 1, 1, 1)])
def test_expand(rng, shape):
    x = rng.standard_normal((3, 1, 5)).astype(np.float32)
    assert_llvm_matches_reference(*data_op("Expand", x, [("shape", ints(*shape))]))


def test_tile_int32(rng):
    x = rng.integers(-50, 50, (2, 1, 3)).astype(np.int32)
    assert_llvm_matches_reference(*data_op("Tile", x, [("repeats", ints(2, 3, 2))]))


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_block_rearrangements(rng, op, mode):
    shape = (2, 12, 3, 2) if op == "DepthToSpace" else (2, 3, 4, 6)
    x = rng.standard_normal(shape).astype(np.float32)
    # SpaceToDepth takes a mode from opset 28 on
    attrs = {"blocksize": 2, "mode": mode}
    assert_llvm_matches_reference(*data_op(op, x, attrs=attrs, opset=28))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [
    (ints(1, 0, 2, 0, 3, 1), None),
    (ints(0, -1, 1, 2, 1, -2), None),  # negative pads crop
    (ints(2, 1, 1, 3), ints(-1, 1)),
    (ints(0, 2, 0, 0), ints(2, 0)),
])
def test_pad(x34, mode, pads, axes):
    # the fill value is a graph input: read at run time, like any operand
    operands = [("x", x34, False), ("pads", pads, True),
                ("value", np.array(1.5, np.float32), False), ("axes", axes, True)]
    if axes is None:
        operands.pop()
    assert_llvm_matches_reference(*single_node("Pad", operands, {"mode": mode}))


def test_pad_with_constant_fill_value(x34):
    constants = [("pads", ints(0, 1, 1, 1, 0, 2)), ("value", np.array([-2.0], np.float32))]
    assert_llvm_matches_reference(*data_op("Pad", x34, constants))


def test_pad_wraps_more_than_once(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    assert_llvm_matches_reference(*data_op("Pad", x, [("pads", ints(0, 7, 1, 5))],
                                          {"mode": "wrap"}))


def test_constant_pad_of_integers_defaults_to_zero(rng):
    x = rng.integers(1, 9, (3, 2)).astype(np.int64)
    assert_llvm_matches_reference(*data_op("Pad", x, [("pads", ints(1, 1, 0, 2))]))


def test_eye_like(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    attrs = {"k": -1, "dtype": 6}  # int32
    assert_llvm_matches_reference(*single_node("EyeLike", [("x", x, False)], attrs,
                                               out_dtype="int32"))


def run_compute_alone(op, arrays, attrs=None):
    """``op``'s TE compute alone, built with LLVM, and the reference's outputs: for ops
    whose every operand decides the output shape, which the graph passes always fold."""
    opdef = get_op(op)
    attrs = opdef.normalize_attrs(attrs or {})
    types = [TensorType(a.shape, a.dtype.name) for a in arrays]
    out_types = infer_node_types(opdef, types, arrays, attrs, 1)
    params = [te.placeholder(a.shape, a.dtype.name, f"in{k}") for k, a in enumerate(arrays)]
    outputs = compute_of(op)(params, attrs, out_types)
    kernel = build(te.lower(te.create_schedule(outputs), params + outputs, name="kernel"))
    got = [np.empty(t.shape, t.dtype) for t in out_types]
    kernel["kernel"](*arrays, *got)
    return got, opdef.run(arrays, attrs)


@pytest.mark.parametrize("dtype,start,limit,delta", [
    ("int32", 3, -8, -2),
    ("int64", -4, 9, 3),
    ("float32", 0.5, 4.0, 0.3),
])
def test_range(dtype, start, limit, delta):
    got, want = run_compute_alone("Range", [np.array(v, dtype) for v in (start, limit, delta)])
    assert got[0].dtype == want[0].dtype
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def test_constant_of_shape():
    value = numpy_helper.to_array(helper.make_tensor("value", 6, [1], [7]))  # int32
    got, want = run_compute_alone("ConstantOfShape", [ints(2, 3)], {"value": value})
    assert got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("op,constants", [
    ("Reshape", [("shape", ints(4, -1, 3))]),
    ("Unsqueeze", [("axes", ints(0, -1))]),
    ("Flatten", []),
])
def test_reshapes_with_shape_operands(x34, op, constants):
    assert_llvm_matches_reference(*data_op(op, x34, constants))




def test_attribute_forms_of_older_opsets(x34):
    """Slice (opset 1) and Pad (opset 2) took their operands as attributes."""
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[3, 4], axes=[2, 1])
    # ONNX infers no shape for this old form: the output's is given
    model = make_model([node], [("x", "float32", [3, 4, 5])], [("y", "float32", [3, 3, 2])],
                       opset=9)
    assert_llvm_matches_reference(model, [x34])
    attrs = {"pads": [0, 1, 2, 1, 0, -1], "mode": "constant", "value": 3.0}
    assert_llvm_matches_reference(*data_op("Pad", x34, attrs=attrs, opset=9))


@pytest.mark.parametrize("shape,axes", [((5, 2, 7), None), ((6, 3), [2, -2])])
def test_center_crop_pad(x34, shape, axes):
    attrs = {} if axes is None else {"axes": axes}
    assert_llvm_matches_reference(*data_op("CenterCropPad", x34, [("shape", ints(*shape))],
                                           attrs))
