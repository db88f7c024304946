"""Requantize of a small input in int32 products (core/compute/qnn.py,
``_split_product_form``; the input's range from core/compute/value_range.py): where the
computes producing the accumulator bound it (a residual addition's term: an int8/uint8
operand less its zero point) and ``|a| * (m mod 2**k) < 2**31``, the product shift's step
``(a * m) >> k`` becomes ``a * (m >> k) + ((a * (m mod 2**k)) >> k)`` with the same bits
as the int64 reference: over every input byte, at the multiplier's and zero point's
edges, with both rounding forms, per tensor and per channel, on the host's AVX-512 and
on AVX2; refused (and still exact) where the bound or the values do not allow it."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.compute import qnn
from heterocc.compute.value_range import value_range
from heterocc.ir.graph import Graph, Node, Value, constant
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.llvm.target import LLVMKernel, LLVMTarget

TARGETS = ["llvm", "llvm -mattr=-avx512f"]


def _term(shape, in_dtype: str, zero: int, attrs: dict, out_dtype: str = "int32"):
    """The function ``Requantize(int32(x) - zero)`` of one int8/uint8 input (as
    ``_rewrite_add`` makes a residual addition's term), its body graph."""
    x = Value("x", TensorType(shape, in_dtype))
    wide = Value("wide", TensorType(shape, "int32"))
    centered = Value("centered", TensorType(shape, "int32"))
    y = Value("y", TensorType(shape, out_dtype))
    info = np.iinfo(out_dtype)
    attrs = get_op("Requantize").normalize_attrs(
        {"qmin": int(info.min), "qmax": int(info.max), "out_dtype": out_dtype, **attrs})
    body = Graph([x], [y], [
        Node("Cast", [x], [wide], get_op("Cast").normalize_attrs({"to": 6}), "cast"),
        Node("Sub", [wide, constant(np.array(zero, np.int32), "zero")], [centered], {}, "sub"),
        Node("Requantize", [centered], [y], attrs, "requantize")])
    return Node("function", [x], [y], name="term", body=body), attrs


def _every_byte(dtype: str, shape=(1, 2, 16, 16)) -> np.ndarray:
    """Every value of ``dtype`` (twice), in a tensor of ``shape`` (512 elements)."""
    info = np.iinfo(dtype)
    values = np.arange(int(info.min), int(info.max) + 1)
    return np.resize(values, int(np.prod(shape))).reshape(shape).astype(dtype)


def _compile(target: str, function: Node):
    llvm = LLVMTarget(cpu=target)
    kernel = llvm.build(function)
    assert isinstance(kernel, LLVMKernel), llvm.fallbacks
    return kernel


def _split_taken(monkeypatch) -> list:
    """The forms the compute chose, appended as the kernels are built."""
    chosen = []
    original = qnn._split_product_form

    def spy(attrs, bound):
        form = original(attrs, bound)
        chosen.append(form)
        return form

    monkeypatch.setattr(qnn, "_split_product_form", spy)
    return chosen


#: (multiplier, product shift, shift, zero point, input dtype): a residual term's values
#: (product shift 9-10, shift 0), the largest remainder (m mod 2**k = 2**k - 1) and none,
#: the largest multiplier, product shifts from 1 up to 22 (|a| * r just under 2**31 for |a| =
#: 255 + 128), shifts that round, zero points at either end
CASES = [(1_180_929_605, 9, 0, 29, "int8"), (1_100_000_000, 10, 0, -5, "int8"),
         (2 ** 31 - 1, 10, 0, 0, "int8"), (2 ** 31 - 1, 22, 0, 127, "int8"),
         (2 ** 31 - 2 ** 22, 22, 0, -128, "int8"), (2 ** 30 + 1023, 10, 0, 255, "uint8"),
         (8_000_001, 1, 0, 0, "uint8"), (987_654_321, 15, 3, 128, "uint8"),
         (2 ** 20 * 3 + 511, 9, 12, -100, "int8"), (12_345, 13, 5, 17, "int8")]


@pytest.mark.parametrize("target", TARGETS, ids=["host", "avx2"])
@pytest.mark.parametrize("multiplier,product_shift,shift,zero,in_dtype", CASES)
def test_a_bounded_term_in_int32_products_gives_the_references_bits(
        target, multiplier, product_shift, shift, zero, in_dtype, monkeypatch):
    chosen = _split_taken(monkeypatch)
    function, attrs = _term((1, 2, 16, 16), in_dtype, zero, {
        "multiplier": multiplier, "shift": shift, "product_shift": product_shift})
    kernel = _compile(target, function)
    assert chosen and chosen[-1] == (multiplier >> product_shift,
                                     multiplier % 2 ** product_shift)
    x = _every_byte(in_dtype)
    got = kernel([x])[0]
    np.testing.assert_array_equal(got, evaluate(function.body, [x])[0])
    a = x.astype(object) - zero  # the int64 reference by hand (no step wraps here)
    by_hand = (a * multiplier // 2 ** product_shift + ((1 << (shift - 1)) if shift else 0)
               ) // 2 ** shift
    np.testing.assert_array_equal(got, by_hand.astype(np.int64))


@pytest.mark.parametrize("target", TARGETS, ids=["host", "avx2"])
def test_a_term_whose_product_wraps_wraps_as_the_reference(target, monkeypatch):
    """``a * m >> k`` beyond int32 (a multiplier too large for a residual term) wraps
    in the split form as the reference wraps it, into int8 with the clamp."""
    chosen = _split_taken(monkeypatch)
    for out_dtype in ("int32", "int8"):
        function, _ = _term((1, 2, 16, 16), "int8", -128, {
            "multiplier": 2 ** 31 - 1, "shift": 4, "product_shift": 2, "zero_point": 3},
            out_dtype)
        kernel = _compile(target, function)
        assert chosen[-1] is not None
        x = _every_byte("int8")
        np.testing.assert_array_equal(kernel([x])[0], evaluate(function.body, [x])[0])


@pytest.mark.parametrize("target", TARGETS, ids=["host", "avx2"])
def test_per_channel_values_the_same_throughout_take_the_form_tables_do_not(
        target, monkeypatch, rng):
    chosen = _split_taken(monkeypatch)
    for multipliers, takes in (([1_180_929_605] * 2, True),
                               ([1_180_929_605, 1_100_000_007], False)):
        function, _ = _term((1, 2, 16, 16), "uint8", 200, {
            "multiplier": multipliers, "shift": [0, 0], "product_shift": 10,
            "acc_limit": [2 ** 31 - 1] * 2, "axis": 1})
        kernel = _compile(target, function)
        assert (chosen[-1] is not None) == takes
        x = _every_byte("uint8")
        np.testing.assert_array_equal(kernel([x])[0], evaluate(function.body, [x])[0])


def test_the_form_is_refused_where_the_remainders_product_could_wrap(monkeypatch, rng):
    """An accumulator from an int32 input (no bound), or a product of two uint8 values
    (up to 255 * 255) with a 16-bit remainder, keeps the 64-bit step, still exact."""
    assert qnn._split_product_form(
        {"multiplier": 2 ** 31 - 1, "shift": 0, "product_shift": 16, "acc_limit": 2 ** 31 - 1,
         "zero_point": 0}, 255 * 255) is None
    assert qnn._split_product_form(
        {"multiplier": 2 ** 31 - 1, "shift": 0, "product_shift": 16, "acc_limit": 2 ** 31 - 1,
         "zero_point": 0}, None) is None
    # the clamp to acc_limit bounds it too
    assert qnn._split_product_form(
        {"multiplier": 2 ** 31 - 1, "shift": 0, "product_shift": 16, "acc_limit": 2 ** 15,
         "zero_point": 0}, None) is None
    assert qnn._split_product_form(
        {"multiplier": 2 ** 31 - 1, "shift": 0, "product_shift": 16, "acc_limit": 2 ** 15,
         "zero_point": 0}, 2 ** 20) == (2 ** 15 - 1, 2 ** 16 - 1)
    # an int32 shift takes at most 31, even where the input is always 0
    assert qnn._split_product_form(
        {"multiplier": 2 ** 31 - 1, "shift": 0, "product_shift": 32, "acc_limit": 2 ** 31 - 1,
         "zero_point": 0}, 0) is None
    chosen = _split_taken(monkeypatch)
    shape = (1, 2, 16, 16)
    a, b = (Value(n, TensorType(shape, "uint8")) for n in "ab")
    wide = [Value(f"{n}32", TensorType(shape, "int32")) for n in "ab"]
    acc = Value("acc", TensorType(shape, "int32"))
    y = Value("y", TensorType(shape, "int32"))
    cast = get_op("Cast").normalize_attrs({"to": 6})
    attrs = get_op("Requantize").normalize_attrs({
        "multiplier": 2 ** 31 - 1, "shift": 2, "product_shift": 16, "qmin": -2 ** 31,
        "qmax": 2 ** 31 - 1, "out_dtype": "int32"})
    body = Graph([a, b], [y], [Node("Cast", [a], [wide[0]], cast, "ca"),
                               Node("Cast", [b], [wide[1]], cast, "cb"),
                               Node("Mul", wide, [acc], {}, "mul"),
                               Node("Requantize", [acc], [y], attrs, "rq")])
    kernel = _compile("llvm", Node("function", [a, b], [y], name="f", body=body))
    assert chosen == [None]
    xa, xb = _every_byte("uint8"), rng.integers(0, 256, shape).astype(np.uint8)
    xb[0, 0, 0, :] = 255  # the largest products
    np.testing.assert_array_equal(kernel([xa, xb])[0], evaluate(body, [xa, xb])[0])


def test_value_range_follows_casts_constants_and_wrapping():
    x = te.placeholder((4,), "int8", "x")
    zero = te.placeholder((), "int32", "zero", folded=np.array(-7, np.int32))
    wide = te.compute((4,), lambda i: te.cast("int32", x[i]), name="wide")
    centered = te.compute((4,), lambda i: wide[i] - zero[()], name="centered")
    assert value_range(centered) == (-121, 134)
    table = te.constant_tensor(np.array([3, -9, 4, 1], np.int32), "table")
    scaled = te.compute((4,), lambda i: centered[i] * table[i], name="scaled")
    assert value_range(scaled) == (-9 * 134, 9 * 121)
    # a product that may leave int32 wraps: any int32
    huge = te.compute((4,), lambda i: scaled[i] * te.const(2 ** 30, "int32"), name="huge")
    assert value_range(huge) == (-2 ** 31, 2 ** 31 - 1)
    # a narrowing cast of a range that does not fit wraps too; one that fits keeps it
    assert value_range(te.compute((4,), lambda i: te.cast("int8", centered[i]))) == (-128, 127)
    assert value_range(te.compute((4,), lambda i: te.cast("int16", centered[i]))) == \
        (-121, 134)
    unknown = te.placeholder((4,), "int32", "unknown")
    assert value_range(unknown) == (-2 ** 31, 2 ** 31 - 1)
    assert value_range(te.placeholder((4,), "float32", "f")) is None


@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_an_ort_quantized_residual_addition_takes_the_form_bit_exact(
        tmp_path, monkeypatch, activations):
    """``relu(a + b)`` quantized by ONNX Runtime (QDQ): both terms' requantizations take
    the split form on ``llvm``; the output has the integer reference's bits."""
    pytest.importorskip("onnxruntime.quantization")
    import heterocc
    from tests.targets.vta.ort_models import quantize_pair, residual_sum

    chosen = _split_taken(monkeypatch)
    shape = (1, 24, 14, 14)
    model = quantize_pair(residual_sum(shape), tmp_path, activations)
    compiled = heterocc.compile(model, target="llvm")
    assert sum(form is not None for form in chosen) == 2
    rng = np.random.default_rng(5)
    feed = [rng.standard_normal(shape).astype(np.float32) * s for s in (2, 0.7)]
    np.testing.assert_array_equal(compiled.run(feed)[0], evaluate(compiled.graph, feed)[0])


def _residual_graph(skip_first: bool):
    """``Requantize(term(conv) + term(skip))`` in integers as ``_rewrite_add`` makes it,
    the skip's term listed before or after the convolution's chain (the node order that
    left ResNet's identity skips as functions of their own writing int32)."""
    from heterocc.ir.graph import Graph as G

    rng = np.random.default_rng(0)
    shape = (1, 8, 6, 6)
    x, skip = Value("x", TensorType(shape, "int8")), Value("skip", TensorType(shape, "int8"))
    acc, q = Value("acc", TensorType(shape, "int32")), Value("q", TensorType(shape, "int8"))
    weight = constant(rng.integers(-127, 128, (8, 8, 1, 1)).astype(np.int8), "w")
    requantize = get_op("Requantize").normalize_attrs
    conv = [Node("ConvInteger", [x, weight], [acc], get_op("ConvInteger").normalize_attrs({}),
                 "conv"),
            Node("Requantize", [acc], [q], requantize({
                "multiplier": 1_234_567, "shift": 20, "qmin": -128, "qmax": 127,
                "out_dtype": "int8"}), "conv_rq")]
    chains, terms = [], []
    for name, v in (("c", q), ("s", skip)):
        wide, centered, term = (Value(f"{name}{k}", TensorType(shape, "int32")) for k in "wct")
        chains.append([
            Node("Cast", [v], [wide], get_op("Cast").normalize_attrs({"to": 6}), f"{name}cast"),
            Node("Sub", [wide, constant(np.array(3, np.int32), f"{name}z")], [centered], {},
                 f"{name}sub"),
            Node("Requantize", [centered], [term], requantize({
                "multiplier": 1_180_929_605, "shift": 0, "product_shift": 9, "qmin": -2 ** 31,
                "qmax": 2 ** 31 - 1, "out_dtype": "int32"}), f"{name}rq")])
        terms.append(term)
    total, y = Value("total", TensorType(shape, "int32")), Value("y", TensorType(shape, "int8"))
    tail = [Node("Add", terms, [total], {}, "add"),
            Node("Requantize", [total], [y], requantize({
                "multiplier": 1, "shift": 20, "zero_point": -128, "qmin": -128, "qmax": 127,
                "out_dtype": "int8"}), "rq")]
    body = (chains[1] + conv + chains[0]) if skip_first else (conv + chains[0] + chains[1])
    return G([x, skip], [y], body + tail)


@pytest.mark.parametrize("skip_first", [True, False], ids=["skip-first", "conv-first"])
def test_the_skips_term_joins_the_convolutions_epilogue_in_either_order(skip_first):
    """Whichever comes first in the node order, the skip's integer term joins the
    convolution's epilogue (one function reading the int8 skip), with the reference's
    bits on llvm."""
    from heterocc.passes import fuse_ops, fused_functions

    graph = _residual_graph(skip_first)
    (function,) = fused_functions(fuse_ops(graph))
    assert [v.type.dtype for v in function.inputs] == ["int8", "int8"]
    rng = np.random.default_rng(1)
    feed = [rng.integers(-128, 128, (1, 8, 6, 6)).astype(np.int8) for _ in range(2)]
    arrays = dict(zip(graph.inputs, feed))  # the function takes them in its own order
    got = _compile("llvm", function)([arrays[v] for v in function.inputs])[0]
    np.testing.assert_array_equal(got, evaluate(graph, feed)[0])


def test_value_range_of_a_chain_too_deep_to_walk_is_its_dtypes():
    x = te.placeholder((4,), "int8", "x")
    t = te.compute((4,), lambda i: te.cast("int32", x[i]), name="wide")
    for k in range(2000):
        t = te.compute((4,), lambda i, t=t: t[i] + te.const(0, "int32"), name=f"s{k}")
    assert value_range(t) == (-2 ** 31, 2 ** 31 - 1)
