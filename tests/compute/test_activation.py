"""TE computes of activations (core/compute/activation.py) against the NumPy references,
through the llvm target: every case must really compile (no NumPy fallback)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import heterocc
from tests.compute.test_elementwise import (
    assert_same,
    check,
    random_array,
    run_compiled,
    with_specials,
)
from tests.conftest import make_model

FLOAT_TYPES = ["float32", "float64"]


#: the seed of the ``rng`` fixture (tests/conftest.py) in this module
RNG_SEED = 11


def _inputs(rng, dtype):
    """Values over the interesting range (tails included), NaN, +-inf and +-0, and tiny
    ones where expm1/log1p lose precision if computed naively."""
    x = with_specials(random_array(rng, (6, 9), dtype, high=6.0))
    x[1, :4] = [1e-7, -1e-7, 80.0, -80.0]
    return x


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_parameterless_activations(dtype, rng):
    check(["Relu", "Sigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "Tanh"],
          [_inputs(rng, dtype)], rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("alpha", [1.0, 0.3, 2.5])
def test_activations_with_alpha(dtype, alpha, rng):
    attrs = {"alpha": alpha}
    check(["Elu", "Celu", "LeakyRelu", "ThresholdedRelu", "Swish"], [_inputs(rng, dtype)],
          attrs, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_selu_and_hard_sigmoid(dtype, rng):
    x = _inputs(rng, dtype)
    check("Selu", [x], rtol=2e-6, atol=1e-7)
    check("Selu", [x], {"alpha": 1.5, "gamma": 0.5}, rtol=2e-6, atol=1e-7)
    check("HardSigmoid", [x], {"alpha": 0.3, "beta": 0.4}, rtol=2e-6, atol=1e-7)
    check("Celu", [x], {"alpha": -0.5}, rtol=2e-6, atol=1e-7)  # the general formula


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_gelu(approximate, dtype, rng):
    check("Gelu", [_inputs(rng, dtype)], {"approximate": approximate}, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_relu_on_integers(dtype, rng):
    check("Relu", [random_array(rng, (5, 7), dtype)])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int32", "uint64"])
@pytest.mark.parametrize("bias,lambd", [(0.0, 0.5), (1.5, 1.0), (-2.25, 3.5)])
def test_shrink(dtype, bias, lambd, rng):
    x = random_array(rng, (5, 8), dtype, *((None, None) if dtype.startswith("float") else
                                             (0 if dtype.startswith("u") else -20, 20)))
    check("Shrink", [x], {"bias": bias, "lambd": lambd})


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("slope_shape", [(), (1,), (4,), (3, 1, 1), (5,), (1, 3, 4, 5)])
def test_prelu_slope_broadcasts(dtype, slope_shape, rng):
    """A (C,) slope that does not broadcast from the right lies along axis 1 (opset < 7)."""
    x = random_array(rng, (2, 3, 4, 5), dtype, -50, 50)
    slope = random_array(rng, slope_shape if slope_shape != (4,) else (3,), dtype, -5, 5)
    check("PRelu", [x, slope])


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint16", "int64"])
def test_clip_with_bound_inputs(dtype, rng):
    x = random_array(rng, (4, 6), dtype)
    if dtype.startswith("float"):
        x = with_specials(x)
    low, high = np.sort(random_array(rng, (2,), dtype))
    check("Clip", [x, np.array(low), np.array(high)])
    check("Clip", [x, None, np.array([high])])
    check("Clip", [x, np.array([high]), np.array(low)])  # low > high: everything is high


def test_clip_with_legacy_attributes(rng):
    x = with_specials(random_array(rng, (4, 6), "float32"))
    got, expected = run_compiled([("Clip", {"min": -1.5, "max": 2.0}), ("Clip", {"min": 0.5})],
                                 [x])
    assert_same(got, expected)


def test_float16_activation_falls_back_instead_of_miscompiling():
    from heterocc.ir.graph import Graph, Node, Value
    from heterocc.ir.types import TensorType
    from heterocc.targets.llvm.target import LLVMTarget

    target = LLVMTarget()
    x, y = Value("x", TensorType((3,), "float16")), Value("y", TensorType((3,), "float16"))
    body = Graph([x], [y], [Node("Elu", [x], [y], {"alpha": 1.0, "consumed_inputs": None})])
    target.build(Node("function", [x], [y], name="f", body=body))
    assert "float16" in target.fallbacks["f"]


def test_activation_chain_through_compile(rng):
    """Conv-free chain Gelu -> Mul -> Softplus -> PRelu compiles as one function."""
    nodes = [helper.make_node("Gelu", ["x"], ["g"], approximate="tanh"),
             helper.make_node("Mul", ["g", "x"], ["m"]),
             helper.make_node("Softplus", ["m"], ["s"]),
             helper.make_node("PRelu", ["s", "slope"], ["y"])]
    model = make_model(nodes, [("x", "float32", [2, 3, 4]), ("slope", "float32", [3, 1])],
                       [("y", "float32", [2, 3, 4])], opset=20)
    x = random_array(rng, (2, 3, 4), "float32")
    slope = random_array(rng, (3, 1), "float32")
    ours = heterocc.compile(model, target="llvm")
    reference = heterocc.compile(model, target="reference")
    np.testing.assert_allclose(ours.run([x, slope])[0], reference.run([x, slope])[0],
                               rtol=1e-5, atol=1e-6)
    assert ours.fallbacks == {}


@pytest.mark.parametrize("alpha", [1.0, 1.702])
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_swiglu(alpha, dtype, rng):
    gate, value = (with_specials(random_array(rng, (3, 8), dtype)) for _ in range(2))
    check("SwiGLU", [gate, value], {"alpha": alpha})
