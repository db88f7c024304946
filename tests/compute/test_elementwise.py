"""TE computes of elementwise ops (core/compute/elementwise.py) against the NumPy
references, through the llvm target: each case must really compile (no NumPy fallback)
and match exactly (integers, bools) or within float tolerance."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.targets.llvm.target import LLVMKernel, LLVMTarget
from tests.conftest import make_model


def run_compiled(nodes, inputs):
    """One function of ``nodes`` ((op, attrs) pairs, each over all of ``inputs``: arrays,
    None for an omitted optional input) compiled by the llvm target, and the NumPy
    references' outputs, in node order.

    Fails if the target falls back to NumPy: the computes must cover the case.
    """
    values = [None if a is None else Value(f"in{k}", TensorType(a.shape, a.dtype.name))
              for k, a in enumerate(inputs)]
    given = [v for v in values if v is not None]
    body_nodes, outputs, expected = [], [], []
    for index, (op, attrs) in enumerate(nodes):
        definition = get_op(op)
        attrs = definition.normalize_attrs(attrs or {})
        results = definition.run(inputs, attrs)
        node_outputs = [Value(f"out{index}_{k}", TensorType(r.shape, r.dtype.name))
                        for k, r in enumerate(results)]
        body_nodes.append(Node(op, values, node_outputs, attrs, name=f"{op.lower()}{index}"))
        outputs += node_outputs
        expected += results
    body = Graph(given, outputs, body_nodes)
    function = Node("function", given, outputs, name=f"fused_{nodes[0][0].lower()}", body=body)
    target = LLVMTarget()
    kernel = target.build(function)
    assert isinstance(kernel, LLVMKernel), target.fallbacks
    got = kernel([np.asarray(a, order="C") for a in inputs if a is not None])
    return got, expected


def assert_same(got, expected, rtol=1e-5, atol=1e-6):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)


def check(op, inputs, attrs=None, rtol=1e-5, atol=1e-6):
    """``op`` (a name, or several names sharing ``attrs``, compiled as one function) gives
    its reference's outputs on ``inputs`` through the llvm target."""
    ops = [op] if isinstance(op, str) else op
    got, expected = run_compiled([(name, attrs) for name in ops], inputs)
    assert_same(got, expected, rtol, atol)


def random_array(rng, shape, dtype, low=None, high=None):
    """Random values spread over ``dtype`` (integers: its whole range by default)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "f":
        scale = 4.0 if high is None else high
        return (rng.standard_normal(shape) * scale).astype(dtype)
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return rng.integers(low, high, shape, dtype=dtype, endpoint=True)


def with_specials(x):
    """``x`` (float) with NaN, +-inf and +-0 planted in its first elements."""
    flat = x.reshape(-1).copy()
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], x.dtype)
    flat[:len(specials)] = specials
    return flat.reshape(x.shape)


INT_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_TYPES = ["float32", "float64"]


#: the seed of the ``rng`` fixture (tests/conftest.py) in this module
RNG_SEED = 7


# ---------------------------------------------------------------- arithmetic


@pytest.mark.parametrize("dtype", INT_TYPES + FLOAT_TYPES)
def test_arithmetic_broadcasts_and_wraps(dtype, rng):
    a = random_array(rng, (3, 4, 5), dtype)
    b = random_array(rng, (4, 1), dtype)
    if np.dtype(dtype).kind in "iu":
        b.reshape(-1)[:2] = 0  # division by zero gives 0, as in NumPy
    check(["Add", "Sub", "Mul", "Div"], [a, b])


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_division_of_the_minimum_by_minus_one_wraps(dtype):
    low = np.iinfo(dtype).min
    a = np.array([low, low, 7, -7, 7, -7, 0, low], dtype)
    b = np.array([-1, 1, 2, 2, -2, -2, 0, 0], dtype)
    got, expected = run_compiled([("Div", None), ("Mod", {"fmod": 0}), ("Mod", {"fmod": 1})],
                                 [a, b])
    assert_same(got, expected)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", INT_TYPES + FLOAT_TYPES)
def test_mod_follows_the_sign_rule_of_fmod(fmod, dtype, rng):
    a = random_array(rng, (6, 7), dtype)
    kind = np.dtype(dtype).kind
    b = random_array(rng, (7,), dtype, *{"i": (-9, 9), "u": (0, 9)}.get(kind, ()))
    if kind == "f":
        a = with_specials(a)
        b[:3] = [np.inf, -np.inf, 0.0]
    check("Mod", [a, b], {"fmod": fmod})


@pytest.mark.parametrize("dtype", INT_TYPES + FLOAT_TYPES)
def test_max_min_of_several_inputs(dtype, rng):
    inputs = [random_array(rng, shape, dtype) for shape in [(2, 3, 4), (3, 1), (4,)]]
    if np.dtype(dtype).kind == "f":
        inputs[0] = with_specials(inputs[0])  # NaN wins, as in NumPy
    check(["Max", "Min"], inputs)


def test_sum_and_mean(rng):
    inputs = [random_array(rng, shape, "float32") for shape in [(2, 3, 4), (3, 1), (4,)]]
    check(["Sum", "Mean"], inputs)


@pytest.mark.parametrize("base_dtype,exponent_dtype", [
    ("float32", "float32"), ("float32", "int64"), ("float32", "int8"), ("float64", "int32"),
    ("float64", "float32"), ("int32", "float32"), ("int64", "float64")])
def test_pow(base_dtype, exponent_dtype, rng):
    base = random_array(rng, (3, 5), base_dtype, -6, 6).astype(base_dtype)
    if np.dtype(exponent_dtype).kind == "f":
        exponent = (rng.integers(-3, 4, (5,)) + (rng.random(5) < 0.5) * 0.5)
    else:
        exponent = rng.integers(-3, 6, (5,))
    check("Pow", [np.abs(base) if np.dtype(exponent_dtype).kind == "f" else base,
                  exponent.astype(exponent_dtype)], rtol=1e-5)


def test_integer_pow_is_refused_not_wrong():
    target = LLVMTarget()
    base = Value("b", TensorType((3,), "int32"))
    exponent = Value("e", TensorType((3,), "int32"))
    out = Value("y", TensorType((3,), "int32"))
    body = Graph([base, exponent], [out], [Node("Pow", [base, exponent], [out], {
        "broadcast": 0, "axis": None})])
    target.build(Node("function", [base, exponent], [out], name="f", body=body))
    assert "integer powers" in target.fallbacks["f"]


# ---------------------------------------------------------------- comparison, logic, bits


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int64", "uint64", "float32", "float64"])
def test_comparisons(dtype, rng):
    a = random_array(rng, (4, 6), dtype, 0, 3) if np.dtype(dtype).kind in "iu" else \
        np.round(random_array(rng, (4, 6), dtype))
    b = random_array(rng, (6,), dtype, 0, 3) if np.dtype(dtype).kind in "iu" else \
        np.round(random_array(rng, (6,), dtype))
    if np.dtype(dtype).kind == "f":
        a = with_specials(a)
        b[0] = np.nan
    check(["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"], [a, b.astype(dtype)])


def test_equal_on_bool(rng):
    check("Equal", [random_array(rng, (5, 4), bool), random_array(rng, (4,), bool)])


def test_logic(rng):
    check(["And", "Or", "Xor"], [random_array(rng, (3, 4), bool), random_array(rng, (3, 1), bool)])


def test_not(rng):
    check("Not", [random_array(rng, (3, 4), bool)])


@pytest.mark.parametrize("dtype", INT_TYPES)
def test_bitwise(dtype, rng):
    check(["BitwiseAnd", "BitwiseOr", "BitwiseXor"],
          [random_array(rng, (3, 4), dtype), random_array(rng, (4,), dtype)])
    check("BitwiseNot", [random_array(rng, (3, 4), dtype)])


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", INT_TYPES)
def test_bit_shift_including_out_of_range_amounts(direction, dtype, rng):
    bits = np.dtype(dtype).itemsize * 8
    x = random_array(rng, (4, 9), dtype)
    low = -3 if np.dtype(dtype).kind == "i" else 0
    amount = np.array([low, 0, 1, 3, bits - 1, bits, bits + 5, 2, 1], dtype)
    check("BitShift", [x, amount], {"direction": direction})


# ---------------------------------------------------------------- unary


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float32", "float64"])
def test_sign_abs_neg(dtype, rng):
    x = random_array(rng, (5, 6), dtype)
    if np.dtype(dtype).kind == "f":
        x = with_specials(x)
    check(["Sign", "Abs"] + (["Neg"] if np.dtype(dtype).kind != "u" else []), [x])


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_round_halves_to_even(dtype):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2.4999, -0.49, 1e20, np.nan, np.inf],
                 dtype)
    check("Round", [x])


@pytest.mark.parametrize("detect_positive,detect_negative", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_is_inf_is_nan(detect_positive, detect_negative, rng):
    x = with_specials(random_array(rng, (4, 5), "float32"))
    got, expected = run_compiled([("IsInf", {"detect_positive": detect_positive,
                                             "detect_negative": detect_negative}),
                                  ("IsNaN", None)], [x])
    assert_same(got, expected)


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_float_unary(dtype, rng):
    x = random_array(rng, (4, 5), dtype)
    check(["Exp", "Floor", "Ceil", "Sin", "Cos", "Tanh", "Erf", "Reciprocal"], [x],
          rtol=1e-5, atol=1e-5)
    check(["Log", "Sqrt"], [np.abs(x) + x.dtype.type(0.1)], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- casts, selection


NATIVE_TYPES = INT_TYPES + FLOAT_TYPES + ["bool"]


def _cast_to_every_native_dtype(x, targets=NATIVE_TYPES):
    nodes = [("Cast", {"to": helper.np_dtype_to_tensor_dtype(np.dtype(t))}) for t in targets]
    got, expected = run_compiled(nodes, [x])
    assert_same(got, expected)


@pytest.mark.parametrize("source", INT_TYPES + ["bool"])
def test_cast_from_integers_wraps(source, rng):
    _cast_to_every_native_dtype(random_array(rng, (4, 6), source))


@pytest.mark.parametrize("source", FLOAT_TYPES)
def test_cast_from_floats_truncates(source, rng):
    # values in range of every target (undefined otherwise); zero and NaN decide bool
    x = ((rng.random((4, 6)) * 2 - 1) * 120).astype(source)
    x[0, :3] = [0.0, -0.0, 0.75]
    _cast_to_every_native_dtype(x, [t for t in NATIVE_TYPES if not t.startswith("uint")])
    _cast_to_every_native_dtype(np.abs(x), [t for t in NATIVE_TYPES if t.startswith("uint")])
    specials = np.array([np.nan, np.inf, -np.inf, 1e30, -1e-30, 0.5], source)
    _cast_to_every_native_dtype(specials, FLOAT_TYPES + ["bool"])


def test_cast_of_an_extended_dtype_falls_back():
    target = LLVMTarget()
    x = Value("x", TensorType((3,), "float32"))
    y = Value("y", TensorType((3,), "float16"))
    body = Graph([x], [y], [Node("Cast", [x], [y], {"to": 10})])
    target.build(Node("function", [x], [y], name="f", body=body))
    assert "float16" in target.fallbacks["f"]


def test_where_and_identity(rng):
    condition = random_array(rng, (3, 1, 5), bool)
    check("Where", [condition, random_array(rng, (4, 5), "int16"),
                    random_array(rng, (3, 4, 1), "int16")])
    check("Identity", [random_array(rng, (3, 4), "uint32")])


# ---------------------------------------------------------------- through the whole pipeline


def test_legacy_broadcast_with_axis_through_compile(rng):
    """opset 6 Add with broadcast=1, axis=1 aligns B (3,) with A's axis 1."""
    node = helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=1)
    model = make_model([node], [("a", "float32", [2, 3, 4]), ("b", "float32", [3])],
                       [("y", "float32", [2, 3, 4])], opset=6)
    a = random_array(rng, (2, 3, 4), "float32")
    b = random_array(rng, (3,), "float32")
    compiled = heterocc.compile(model, target="llvm")
    np.testing.assert_allclose(compiled.run([a, b])[0], a + b[:, None], rtol=1e-6)
    assert compiled.fallbacks == {}


def test_comparison_chain_fuses_and_compiles(rng):
    """Less -> Not -> Cast in one fused function, compiled end to end."""
    nodes = [helper.make_node("Less", ["a", "b"], ["lt"]),
             helper.make_node("Not", ["lt"], ["ge"]),
             helper.make_node("Cast", ["ge"], ["y"], to=6)]
    model = make_model(nodes, [("a", "float32", [4, 5]), ("b", "float32", [5])],
                       [("y", "int32", [4, 5])])
    a, b = random_array(rng, (4, 5), "float32"), random_array(rng, (5,), "float32")
    compiled = heterocc.compile(model, target="llvm")
    np.testing.assert_array_equal(compiled.run([a, b])[0], (a >= b).astype(np.int32))
    assert compiled.fallbacks == {}
