"""Arithmetic, comparison, logic, bitwise, unary math, casts, Where, Identity and Dropout
(core/ops/elementwise.py) against onnx.reference, plus legacy-opset forms and errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from single_node_oracle import (
    check_inferred,
    compare_with_onnx,
    infer_error,
    onnx_outputs,
    registry_outputs,
    rng,
)

from heterocc.errors import InputError
from heterocc.ir.types import TensorType
from heterocc.ops import FusionKind, get_op, infer_node_types

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_DTYPES = ["float16", "float32", "float64"]


def values(shape, dtype, low=-5.0, high=5.0, seed=0) -> np.ndarray:
    """Random values of ``dtype`` in [low, high) (clamped to the dtype's range)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng(seed).random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = max(int(low), int(info.min)), min(int(high), int(info.max))
        return rng(seed).integers(low, high, shape, endpoint=True).astype(dtype)
    return rng(seed).uniform(low, high, shape).astype(dtype)


def tolerance(dtype) -> dict:
    return {"rtol": 2e-3, "atol": 2e-3} if np.dtype(dtype) == np.float16 else {}


# ---------------------------------------------------------------- unary math

#: op -> (value range that keeps it in its domain, dtypes to test)
UNARY_CASES = {
    "Abs": ((-5, 5), FLOAT_DTYPES + INT_DTYPES),
    "Neg": ((-5, 5), FLOAT_DTYPES + ["int8", "int16", "int32", "int64"]),
    "Exp": ((-5, 5), FLOAT_DTYPES),
    "Log": ((0.1, 5), FLOAT_DTYPES),
    "Sqrt": ((0, 5), FLOAT_DTYPES),
    "Reciprocal": ((0.5, 5), FLOAT_DTYPES),
    "Floor": ((-5, 5), FLOAT_DTYPES),
    "Ceil": ((-5, 5), FLOAT_DTYPES),
    "Sign": ((-5, 5), FLOAT_DTYPES + INT_DTYPES),
    "Sin": ((-5, 5), ["float32", "float64"]),
    "Cos": ((-5, 5), ["float32", "float64"]),
    "Tan": ((-1.4, 1.4), ["float32"]),
    "Asin": ((-0.99, 0.99), ["float32"]),
    "Acos": ((-0.99, 0.99), ["float32"]),
    "Atan": ((-5, 5), ["float32"]),
    "Sinh": ((-5, 5), ["float32"]),
    "Cosh": ((-5, 5), ["float32"]),
    "Asinh": ((-5, 5), ["float32"]),
    "Acosh": ((1, 5), ["float32"]),
    "Atanh": ((-0.99, 0.99), ["float32"]),
    "Erf": ((-3, 3), FLOAT_DTYPES),
    "BitwiseNot": ((-100, 100), INT_DTYPES),
    "Not": ((0, 1), ["bool"]),
}


@pytest.mark.parametrize("op_type,dtype", [(op, dt) for op, (_, dts) in UNARY_CASES.items()
                                           for dt in dts])
def test_unary_matches_onnx(op_type, dtype):
    (low, high), _ = UNARY_CASES[op_type]
    compare_with_onnx(op_type, [values((2, 3, 4), dtype, low, high)], **tolerance(dtype))


def test_round_halves_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6], np.float32)
    got = compare_with_onnx("Round", [x])[0]
    np.testing.assert_array_equal(got, [-2, -2, -0, 0, 2, 2, 0, -1])


@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0}])
def test_is_inf_and_is_nan(attrs):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -1.5], np.float32)
    compare_with_onnx("IsInf", [x], attrs)
    compare_with_onnx("IsNaN", [x.astype(np.float16)])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # raised by onnx.reference, not by us
def test_unary_math_of_out_of_domain_values_gives_nan_like_ieee():
    x = np.array([-1.0, 0.0], np.float32)
    got = compare_with_onnx("Log", [x])[0]
    assert np.isnan(got[0]) and got[1] == -np.inf


# ---------------------------------------------------------------- binary arithmetic

SHAPE_PAIRS = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((), (2, 2))]


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + INT_DTYPES)
def test_add_sub_mul_keep_dtype_and_wrap(op_type, dtype):
    low, high = (-120, 120) if np.dtype(dtype).kind in "iu" else (-5, 5)
    for seed, (sa, sb) in enumerate(SHAPE_PAIRS):
        a, b = values(sa, dtype, low, high, seed), values(sb, dtype, low, high, seed + 10)
        compare_with_onnx(op_type, [a, b], **tolerance(dtype))


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_integer_div_truncates_toward_zero(dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], dtype)
    b = np.array([2, 2, -2, -2, 3, -3, 5, -3], dtype)
    got = compare_with_onnx("Div", [a, b])[0]
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 2, 2, 0, 0])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ["uint8", "uint32", "uint64"])
def test_div_matches_onnx(dtype):
    a = values((3, 4), dtype, 1, 100)
    b = values((4,), dtype, 1, 9, seed=3)
    compare_with_onnx("Div", [a, b], **tolerance(dtype))


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16", "float32", "float64"])
def test_mod_both_sign_conventions(fmod, dtype):
    low = 0 if np.dtype(dtype).kind == "u" else -20
    a = values((3, 5), dtype, low, 20)
    b = values((5,), dtype, 1, 6, seed=2)
    if np.dtype(dtype).kind != "u":
        b[::2] = -b[::2]
    compare_with_onnx("Mod", [a, b], {"fmod": fmod})


@pytest.mark.parametrize("base,exponent", [
    ("float32", "float32"), ("float32", "int64"), ("float32", "int32"), ("float32", "uint64"),
    ("float16", "float32"), ("float64", "int8"), ("int64", "int64"), ("int32", "int32"),
    ("int64", "float32"), ("int32", "float32")])
def test_pow_result_has_the_base_dtype(base, exponent):
    x = values((2, 3), base, 1, 4)
    y = values((3,), exponent, 0, 3, seed=1)
    compare_with_onnx("Pow", [x, y], **tolerance(base))


def test_pow_of_integers_with_negative_exponent_truncates():
    x, y = np.array([2, 1, -1, 4], np.int64), np.array([-1, -3, -1, -2], np.int64)
    got = check_inferred("Pow", [x, y])[0]
    np.testing.assert_array_equal(got, [0, 1, -1, 0])


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_bit_shift_matches_onnx(direction, dtype):
    bits = 8 * np.dtype(dtype).itemsize
    x = values((4, 6), dtype, -100, 100)
    y = values((6,), dtype, 0, bits - 1, seed=5)
    compare_with_onnx("BitShift", [x, y], {"direction": direction})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift_out_of_range_amounts_leave_the_sign_fill(direction):
    x = np.array([-5, 5, -128, 127, -1], np.int8)
    y = np.array([8, -1, 9, 100, 3], np.int8)
    got = compare_with_onnx("BitShift", [x, y], {"direction": direction})[0]
    expected = [-1, 0, -1, 0, -1] if direction == "RIGHT" else [0, 0, 0, 0, -8]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "uint64"])
def test_bitwise_binary(op_type, dtype):
    compare_with_onnx(op_type, [values((3, 4), dtype, -50, 50), values((4,), dtype, 0, 90, 1)])


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logic(op_type):
    compare_with_onnx(op_type, [values((2, 3, 4), bool), values((3, 1), bool, seed=4)])


@pytest.mark.parametrize("op_type", ["Equal", "Less", "LessOrEqual", "Greater",
                                     "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "int8", "uint32", "int64"])
def test_comparisons_give_bool(op_type, dtype):
    a = values((3, 4), dtype, 0, 4)
    b = values((4,), dtype, 0, 4, seed=7)
    assert compare_with_onnx(op_type, [a, b])[0].dtype == bool


def test_equal_on_bool():
    compare_with_onnx("Equal", [values((5,), bool), values((5,), bool, seed=1)])


def test_string_tensors_compare_select_and_copy():
    words = np.array(["a", "bb", "c", "dd"], dtype=object)
    others = np.array(["a", "b", "c", "d"], dtype=object)
    np.testing.assert_array_equal(check_inferred("Equal", [words, others])[0],
                                  [True, False, True, False])
    condition = np.array([True, False, False, True])
    np.testing.assert_array_equal(check_inferred("Where", [condition, words, others])[0],
                                  ["a", "b", "c", "dd"])
    assert list(check_inferred("Identity", [words])[0]) == list(words)


# ---------------------------------------------------------------- variadic

@pytest.mark.parametrize("op_type", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("shapes", [[(3, 4)], [(3, 4), (4,)], [(2, 3, 4), (3, 1), ()]])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_variadic_broadcasts(op_type, shapes, dtype):
    inputs = [values(s, dtype, seed=i) for i, s in enumerate(shapes)]
    compare_with_onnx(op_type, inputs, **tolerance(dtype))


@pytest.mark.parametrize("op_type,numpy_result", [
    ("Max", lambda xs: np.maximum(np.maximum(xs[0], xs[1]), xs[2])),
    ("Min", lambda xs: np.minimum(np.minimum(xs[0], xs[1]), xs[2])),
    ("Sum", lambda xs: xs[0] + xs[1] + xs[2]),
    ("Mean", lambda xs: (xs[0] + xs[1] + xs[2]) / 3)])
def test_variadic_output_can_be_larger_than_the_first_input(op_type, numpy_result):
    # onnx.reference's Sum/Mean fail when input 0 is not the full shape: NumPy oracle here
    inputs = [values(s, "float64", seed=i) for i, s in enumerate([(3, 1), (2, 1, 4), ()])]
    np.testing.assert_allclose(check_inferred(op_type, inputs)[0], numpy_result(inputs))


@pytest.mark.parametrize("op_type", ["Max", "Min"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_max_min_integers(op_type, dtype):
    compare_with_onnx(op_type, [values((3, 4), dtype, 0, 60), values((4,), dtype, 0, 60, 1)])


def test_single_input_max_is_a_copy():
    x = values((3,), "float32")
    out = get_op("Max").run([x], {"consumed_inputs": None})[0]
    assert out is not x and not np.shares_memory(out, x)


# ---------------------------------------------------------------- Where, Identity

@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "uint8"])
def test_where_broadcasts_all_three(dtype):
    condition = values((2, 1, 4), bool)
    compare_with_onnx("Where", [condition, values((3, 1), dtype, seed=1),
                                values((4,), dtype, seed=2)])


@pytest.mark.parametrize("dtype", ["float16", "int8", "bool", "uint64"])
def test_identity(dtype):
    compare_with_onnx("Identity", [values((2, 3), dtype)])


# ---------------------------------------------------------------- casts

CAST_DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint16",
               "bool"]


@pytest.mark.parametrize("source", CAST_DTYPES)
@pytest.mark.parametrize("target", CAST_DTYPES)
def test_cast_between_supported_dtypes(source, target):
    # values every dtype holds, so no out-of-range (undefined) conversion is compared
    x = values((3, 4), source, 0, 100)
    to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(target))
    compare_with_onnx("Cast", [x], {"to": to})
    compare_with_onnx("CastLike", [x, np.zeros((1,), target)])


def test_cast_truncates_floats_and_maps_nonzero_to_true():
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, np.nan], np.float32)
    as_int = check_inferred("Cast", [x[:5]], {"to": TensorProto.INT32})[0]
    np.testing.assert_array_equal(as_int, [-2, 0, 0, 0, 2])
    as_bool = compare_with_onnx("Cast", [x], {"to": TensorProto.BOOL})[0]
    np.testing.assert_array_equal(as_bool, [True, True, False, True, True, True])


def test_opset1_cast_names_its_target_type():
    got = check_inferred("Cast", [values((4,), "float32")], {"to": "INT64"})[0]
    assert got.dtype == np.int64


@pytest.mark.parametrize("to,name", [(TensorProto.STRING, "STRING"),
                                     (TensorProto.COMPLEX64, "COMPLEX64"),
                                     (999, "an unknown type")])
def test_cast_to_unsupported_type_is_a_clear_error(to, name):
    message = infer_error("Cast", [TensorType((3,), "float32")], {"to": to})
    assert f"casting to {name} (to={to}) is not supported" in message
    assert "node 'n0'" in message and "float8_e4m3fn" in message


def as_float64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(np.float64) if x.dtype.kind == "V" else x.astype(float)


NARROW = {name: getattr(TensorProto, name) for name in [
    "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "BFLOAT16",
    "FLOAT4E2M1", "INT4", "UINT4", "INT2", "UINT2"]}
#: finite values around every narrow format's range, with specials, signs and ties
NARROW_PROBES = np.array([0.0, -0.0, 0.3, -1.7, 2.5, 3.5, 7.4, -9.0, 100.0, 300.0, 500.0,
                          -70000.0, 1e-3, 1e-9, 65504.0, np.inf, -np.inf, np.nan], np.float32)


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("target", NARROW)
def test_cast_to_narrow_formats_matches_onnx(target, saturate, round_mode):
    x = NARROW_PROBES if target in ("BFLOAT16",) or "FLOAT8" in target else \
        np.nan_to_num(NARROW_PROBES, posinf=0, neginf=0)  # float -> int of inf/NaN: undefined
    attrs = {"to": NARROW[target], "saturate": saturate, "round_mode": round_mode}
    (inferred,), (mine,) = registry_outputs("Cast", [x], attrs)
    (theirs,) = onnx_outputs("Cast", [x], attrs)
    assert inferred.dtype == mine.dtype.name == theirs.dtype.name
    if mine.dtype.kind == "V":
        np.testing.assert_array_equal(as_float64(mine), as_float64(theirs))
    elif target.endswith("INT4") or target.endswith("INT2"):
        # ONNX leaves float -> int out of range undefined: compare the in-range values
        in_range = (np.abs(x) < 1.5) & (x >= 0 if target.startswith("U") else True)
        np.testing.assert_array_equal(mine.astype(int)[in_range], theirs.astype(int)[in_range])


@pytest.mark.parametrize("source", ["FLOAT8E4M3FN", "FLOAT8E5M2", "BFLOAT16", "INT4", "UINT4"])
@pytest.mark.parametrize("target", ["float32", "float16", "int8", "uint8", "bool"])
def test_cast_from_narrow_formats_matches_onnx(source, target):
    narrow = get_op("Cast").run([np.array([0.0, 1.0, -2.0, 3.0, 6.0], np.float32)],
                                {"to": NARROW[source], "saturate": 1, "round_mode": "up"})[0]
    if source.startswith("U"):
        narrow = narrow[[0, 1, 3, 4]]
    to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(target))
    compare_with_onnx("Cast", [narrow], {"to": to})


def test_identity_moves_narrow_formats():
    bf16 = get_op("Cast").run([values((3,), "float32")],
                              {"to": TensorProto.BFLOAT16, "saturate": 1, "round_mode": "up"})[0]
    assert check_inferred("Identity", [bf16])[0].dtype == bf16.dtype


def test_arithmetic_on_narrow_formats_asks_for_a_cast():
    message = infer_error("Add", [TensorType((3,), "bfloat16")] * 2)
    assert "input 0 has dtype bfloat16" in message and "insert a Cast" in message


def test_cast_rejects_unknown_round_mode():
    message = infer_error("Cast", [TensorType((3,), "float32")],
                          {"to": TensorProto.FLOAT16, "round_mode": "sideways"})
    assert "round_mode='sideways'" in message and "'nearest'" in message


# ---------------------------------------------------------------- Dropout

@pytest.mark.parametrize("num_outputs", [1, 2])
@pytest.mark.parametrize("ratio", [None, np.array(0.1, np.float32)])
def test_dropout_in_inference_is_the_identity(num_outputs, ratio):
    x = values((3, 4), "float32")
    got = compare_with_onnx("Dropout", [x, ratio] if ratio is not None else [x], {"seed": 0},
                            num_outputs=num_outputs)
    np.testing.assert_array_equal(got[0], x)
    if num_outputs == 2:
        assert got[1].dtype == bool and got[1].all()


@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.75])
def test_seeded_training_dropout_matches_onnx(ratio):
    x = values((3, 4, 5), "float32")
    inputs = [x, np.array(ratio, np.float32), np.array(True)]
    compare_with_onnx("Dropout", inputs, {"seed": 3}, num_outputs=2)


def test_opset10_dropout_with_ratio_attribute():
    x = values((2, 5), "float32")
    got = compare_with_onnx("Dropout", [x], {"ratio": 0.3}, num_outputs=2, opset=10)
    np.testing.assert_array_equal(got[0], x)


def test_training_dropout_without_seed_is_refused():
    types = [TensorType((4,), "float32"), TensorType((), "float32"), TensorType((), "bool")]
    constants = [None, np.array(0.5, np.float32), np.array(True)]
    assert "give the node a 'seed' attribute" in infer_error("Dropout", types, {},
                                                             constants, 2)
    # the training flag only known when it runs: refused then
    op = get_op("Dropout")
    with pytest.raises(InputError, match="Dropout: training_mode=True"):
        op.run([values((4,), "float32"), *constants[1:]], op.normalize_attrs({}))


# ---------------------------------------------------------------- legacy (opset < 7) forms

def test_legacy_broadcast_axis_aligns_b_inside_a():
    a, b = values((2, 3, 4, 5), "float32"), values((3, 4), "float32", seed=1)
    for op_type, numpy_op in [("Add", np.add), ("Mul", np.multiply), ("Less", np.less)]:
        got = check_inferred(op_type, [a, b], {"broadcast": 1, "axis": 1})[0]
        np.testing.assert_array_equal(got, numpy_op(a, b.reshape(3, 4, 1)))


def test_legacy_broadcast_axis_out_of_range():
    message = infer_error("Sub", [TensorType((2, 3), "float32"), TensorType((3, 4), "float32")],
                          {"broadcast": 1, "axis": 1})
    assert "legacy broadcast axis 1 cannot place B (3, 4) inside A (2, 3)" in message


def test_every_onnx_attribute_of_every_opset_is_declared():
    ops = ["Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
           "Erf", "IsNaN", "IsInf", "Not", "BitwiseNot", "Add", "Sub", "Mul", "Div", "Pow", "Mod",
           "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual",
           "Greater", "GreaterOrEqual", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
           "Where", "Cast", "CastLike", "Identity", "Dropout"]
    history = onnx.defs.get_all_schemas_with_history()
    for op_type in ops:
        onnx_attrs = {a for s in history if s.name == op_type and s.domain == ""
                      for a in s.attributes}
        assert onnx_attrs <= set(get_op(op_type).attrs), op_type


# ---------------------------------------------------------------- errors and fusion kinds

def test_float_only_op_names_dtype_and_fix():
    message = infer_error("Exp", [TensorType((3,), "int32")])
    assert message.startswith("Exp (node 'n0'): input 0 has dtype int32")
    assert "float16, float32, float64" in message and "insert a Cast" in message


def test_mixed_dtypes_are_refused():
    message = infer_error("Add", [TensorType((3,), "float32"), TensorType((3,), "int64")])
    assert "float32[3], int64[3] must share one dtype" in message


def test_shapes_that_do_not_broadcast():
    message = infer_error("Mul", [TensorType((2, 3), "float32"), TensorType((4,), "float32")])
    assert "(2, 3), (4,) do not broadcast" in message


@pytest.mark.parametrize("op_type,attrs,fragment", [
    ("BitShift", {"direction": "UP"}, "direction='UP'"),
    ("Mod", {"fmod": 2}, "fmod=2"),
])
def test_bad_attribute_values(op_type, attrs, fragment):
    dtype = "int32"
    message = infer_error(op_type, [TensorType((3,), dtype), TensorType((3,), dtype)], attrs)
    assert fragment in message


def test_where_condition_must_be_bool():
    types = [TensorType((3,), "float32")] * 3
    assert "input 0 has dtype float32, but Where takes bool" in infer_error("Where", types)


def test_variadic_needs_an_input():
    assert "needs at least 1 input" in infer_error("Sum", [])


def test_fusion_kinds():
    assert get_op("Exp").fusion_kind == FusionKind.ELEMWISE
    assert get_op("Cast").fusion_kind == FusionKind.ELEMWISE
    for op_type in ["Add", "Div", "Equal", "Where", "Max", "BitShift"]:
        assert get_op(op_type).fusion_kind == FusionKind.BROADCAST


MY_OPS = ("Abs Neg Exp Log Sqrt Reciprocal Floor Ceil Round Sign Sin Cos Tan Asin Acos Atan Sinh "
          "Cosh Asinh Acosh Atanh Erf IsNaN IsInf Not BitwiseNot Relu LeakyRelu PRelu Sigmoid "
          "HardSigmoid HardSwish Tanh Softplus Softsign Elu Selu Celu ThresholdedRelu Gelu Mish "
          "Swish Shrink Clip Add Sub Mul Div Pow Mod Max Min Sum Mean And Or Xor Equal Less "
          "LessOrEqual Greater GreaterOrEqual BitShift BitwiseAnd BitwiseOr BitwiseXor Where Cast "
          "CastLike Identity Dropout").split()


@pytest.mark.parametrize("op_type", MY_OPS)
def test_types_follow_from_input_types_alone(op_type):
    # no shape operands: inference must succeed with every input a run-time value
    op = get_op(op_type)
    assert op.shape_operands == ()
    dtype = {"Not": "bool", "And": "bool", "Or": "bool", "Xor": "bool"}.get(op_type, "float32")
    if op_type.startswith("Bit"):
        dtype = "int32"
    arity = {"Where": 3, "Clip": 3, "Dropout": 3}.get(op_type, 2 if op_type in (
        "Add Sub Mul Div Pow Mod Max Min Sum Mean And Or Xor Equal Less LessOrEqual Greater "
        "GreaterOrEqual BitShift BitwiseAnd BitwiseOr BitwiseXor PRelu CastLike").split() else 1)
    types = [TensorType((2, 3), dtype)] + [TensorType((), dtype)] * (arity - 1)
    if op_type == "Where":
        types[0] = TensorType((2, 3), "bool")
    if op_type == "Dropout":
        types[2] = TensorType((), "bool")
    attrs = {"Cast": {"to": TensorProto.FLOAT16}, "BitShift": {"direction": "LEFT"}}
    inferred = infer_node_types(op, types, [None] * arity,
                                op.normalize_attrs(attrs.get(op_type, {})), 1)
    assert inferred[0].shape == (2, 3)
