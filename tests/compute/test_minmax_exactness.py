"""NaN, +-inf and signed zeros through Relu, Clip, Max and Min (core/compute/elementwise.py's
one-select-per-bound forms), compiled as AVX-512 and as AVX2 code, standalone and as a
convolution's epilogue: bit for bit the NumPy references' results (a NaN wherever the
reference has one, every other element with the reference's bits, the sign of zero
included). Also: once the bounds are constants, the code keeps no NaN test, on x86 and
on an aarch64 cross-compile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm.cpu import compiling_for, parse_cpu
from heterocc.targets.llvm.module import build
from tests.conftest import make_model

NAN, INF = math.nan, math.inf
#: the host's code (AVX-512 on the machines this project targets) and AVX2 code
ISAS = ["llvm", "llvm -mattr=-avx512f"]
#: planted in every input: NaN, infinities, both zeros, ties with the bounds used below,
#: values just inside and outside them, subnormal-sized values of both signs
SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 6.0, -1.0, 1.0, 2.0, 6.0000005, 5.9999995, -1.0000001,
            0.5, -0.5, 1e-30, -1e-30, 7.5, -3.25]
#: (low, high) of Clip; None omits the bound
BOUNDS = [(0.0, 6.0), (-1.0, 1.0), (-1.0, -0.0), (-1.0, 0.0), (-0.0, 1.0), (0.0, 0.0),
          (2.0, 1.0), (NAN, 6.0), (0.0, NAN), (None, 6.0), (0.0, None), (-0.0, None),
          (None, -0.0)]


def _with_specials(shape, seed=3):
    """Random float32 values of ``shape`` (spread over the bounds above) with every
    special value planted, several times, in a different lane each time."""
    rng = np.random.default_rng(seed)
    flat = (rng.standard_normal(math.prod(shape)) * 4).astype(np.float32)
    for k in range(0, flat.size - len(SPECIALS), 2 * len(SPECIALS) + 3):
        flat[k:k + len(SPECIALS)] = SPECIALS
    return flat.reshape(shape)


def _assert_bit_exact(got, expected):
    assert got.shape == expected.shape and got.dtype == expected.dtype
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))


def _run_both(model, feeds, target):
    """Outputs of ``model`` compiled for ``target`` (no NumPy fallback) and of the
    reference."""
    llvm = LLVMTarget(cpu=target)
    compiled = heterocc.compile(model, target=[llvm])
    got = compiled.run(feeds)
    assert llvm.fallbacks == {}
    return got, heterocc.compile(model, target="reference").run(feeds)


def _clip_inputs(low, high, as_inputs: bool):
    """Clip's input names and, for constant bounds, initializers ('' omits a bound)."""
    names, initializers = ["x"], {}
    for name, value in (("lo", low), ("hi", high)):
        if value is None:
            names.append("")
        else:
            names.append(name)
            if not as_inputs:
                initializers[name] = np.float32(value)
    while names[-1] == "":
        names.pop()
    return names, initializers


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("bounds_are", ["constants", "inputs"])
@pytest.mark.parametrize("low,high", BOUNDS)
def test_clip_standalone(low, high, bounds_are, target):
    shape = [3, 37]  # a row of two whole AVX-512 vectors and a tail
    names, initializers = _clip_inputs(low, high, bounds_are == "inputs")
    inputs = [("x", "float32", shape)]
    feeds = {"x": _with_specials(shape)}
    if bounds_are == "inputs":
        for name, value in (("lo", low), ("hi", high)):
            if value is not None:
                inputs.append((name, "float32", []))
                feeds[name] = np.array(value, np.float32)
    model = make_model([helper.make_node("Clip", names, ["y"])], inputs,
                       [("y", "float32", shape)], initializers)
    got, expected = _run_both(model, feeds, target)
    _assert_bit_exact(got[0], expected[0])


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("low,high", [(0.0, 6.0), (-0.0, 1.0), (NAN, 1.0), (0.0, NAN),
                                      (2.0, 1.0)])
def test_clip_with_legacy_attributes(low, high, target):
    shape = [2, 40]
    model = make_model([helper.make_node("Clip", ["x"], ["y"], min=low, max=high)],
                       [("x", "float32", shape)], [("y", "float32", shape)], opset=6)
    got, expected = _run_both(model, {"x": _with_specials(shape)}, target)
    _assert_bit_exact(got[0], expected[0])


@pytest.mark.parametrize("target", ISAS)
def test_relu_standalone(target):
    shape = [5, 33]
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", "float32", shape)],
                       [("y", "float32", shape)])
    x = _with_specials(shape)
    got, expected = _run_both(model, {"x": x}, target)
    _assert_bit_exact(got[0], expected[0])
    assert not np.signbit(got[0][x == 0]).any()  # Relu(-0.0) is +0.0, as np.maximum gives


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("other", [0.0, -0.0, 1.0, NAN, "tensor", "tensor first"])
def test_max_min_of_two(op, other, target):
    """Max/Min of a tensor and a constant (either zero, a nonzero, NaN) or of two tensors
    full of specials, in both operand orders (NumPy's tie rule depends on it)."""
    shape = [4, 35]
    x = _with_specials(shape)
    initializers, inputs, feeds = {}, [("x", "float32", shape)], {"x": x}
    if isinstance(other, str):
        # the second tensor: the specials shifted by a lane, so that every pair of them meets
        feeds["c"] = np.roll(_with_specials(shape, seed=5), 1)
        inputs.append(("c", "float32", shape))
    else:
        initializers["c"] = np.float32(other)
    names = ["c", "x"] if other in ("tensor first", 0.0, NAN) else ["x", "c"]
    model = make_model([helper.make_node(op, names, ["y"])], inputs,
                       [("y", "float32", shape)], initializers)
    got, expected = _run_both(model, feeds, target)
    _assert_bit_exact(got[0], expected[0])


def _depthwise_identity_model(channels, size, activation, low=None, high=None):
    """A 1x1 depthwise Conv with weights 1 and bias 0 (so its output is its input, NaN
    and infinities included: nothing else rounds) and ``activation`` after it."""
    initializers = {"w": np.ones((channels, 1, 1, 1), np.float32),
                    "b": np.zeros(channels, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1],
                              group=channels)]
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    else:
        names, bounds = _clip_inputs(low, high, as_inputs=False)
        initializers.update(bounds)
        nodes.append(helper.make_node("Clip", ["c", *names[1:]], ["y"]))
    shape = [1, channels, size, size]
    return make_model(nodes, [("x", "float32", shape)], [("y", "float32", shape)],
                      initializers)


#: bounds under which every zero the epilogue gives is decided by a bound (a zero passed
#: through unbounded would carry the convolution's own sign of zero, which its nsz float
#: arithmetic does not promise)
_EPILOGUE_BOUNDS = [(0.0, 6.0), (-1.0, -0.0), (-1.0, 0.0), (-0.0, 1.0), (0.0, None),
                    (2.0, 1.0), (NAN, 6.0), (0.0, NAN)]


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("activation,low,high", [("Relu", None, None)] + [
    ("Clip", low, high) for low, high in _EPILOGUE_BOUNDS])
def test_conv_epilogue(activation, low, high, target):
    model = _depthwise_identity_model(32, 7, activation, low, high)
    x = _with_specials([1, 32, 7, 7])
    llvm = LLVMTarget(cpu=target)
    compiled = heterocc.compile(model, target=[llvm])
    assert compiled.graph.op_counts().get("ConvNCHWc") == 1
    names = [c.lowered.name for c in llvm._compiled.values() if c.lowered is not None]
    assert any("conv" in n and activation.lower() in n for n in names), names  # fused
    got = compiled.run({"x": x})[0]
    assert llvm.fallbacks == {}
    _assert_bit_exact(got, heterocc.compile(model, target="reference").run({"x": x})[0])


@pytest.mark.parametrize("description", ["llvm -mcpu=x86-64-v4", "llvm -mcpu=x86-64-v3",
                                         "llvm -mtriple=aarch64-linux-gnu"])
@pytest.mark.parametrize("activation", ["Relu", "Clip"])
def test_constant_bounds_leave_no_nan_test(activation, description):
    """Conv + Relu / ReLU6 (Clip 0..6): the epilogue compiles to compares against the
    bounds alone: no unordered compare, no maxnum/minnum (whose NaN rules differ from
    NumPy's), and on x86 no vcmpunordps."""
    model = _depthwise_identity_model(32, 7, activation, 0.0, 6.0)
    llvm = LLVMTarget(cpu=description)
    heterocc.compile(model, target=[llvm])
    cpu = parse_cpu(description)
    lowered = [c.lowered for c in llvm._compiled.values()
               if c.lowered is not None and "conv" in c.lowered.name]
    assert len(lowered) == 1
    with compiling_for(cpu):
        module = build(lowered, name="epilogue", cpu=cpu)
    assert "fcmp uno" not in module.ir and "fcmp une" not in module.ir
    assert "maxnum" not in module.ir and "minnum" not in module.ir
    assert "fcmp ole" in module.ir or "fcmp ugt" in module.ir  # the x <= 0 bound
    if "x86" in description:
        assert "unord" not in module.assembly()


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("constant", [None, 0.0, -0.0, 1.0])
def test_max_min_of_many_tensors(op, constant, target):
    """Three or four tensors (and a constant): NumPy's left fold bit for bit. Besides the
    shifted specials, the first 16 lanes hold every sign pattern of zeros over four
    inputs, where the fold's result is the last zero's sign."""
    shape = [3, 20]
    xs = {f"x{k}": np.roll(_with_specials(shape, seed=k), k) for k in range(4)}
    for lane in range(16):
        for k, x in enumerate(xs.values()):
            x.reshape(-1)[lane] = -0.0 if lane >> k & 1 else 0.0
    for count in (3, 4):
        names = list(xs)[:count]
        initializers = {} if constant is None else {"c": np.float32(constant)}
        inputs = names if constant is None else [*names[:1], "c", *names[1:]]
        model = make_model([helper.make_node(op, inputs, ["y"])],
                           [(k, "float32", shape) for k in names], [("y", "float32", shape)],
                           initializers)
        feeds = {k: xs[k] for k in names}
        got, expected = _run_both(model, feeds, target)
        _assert_bit_exact(got[0], expected[0])


def test_nan_bound_initializer_folds_to_nan():
    """A NaN bound makes every output NaN, as np.maximum/np.minimum do: the folded
    kernel stores NaN without computing the clipped value."""
    shape = [2, 16]
    model = make_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                       [("x", "float32", shape)], [("y", "float32", shape)],
                       {"lo": np.float32(-1), "hi": np.float32(NAN)})
    got, expected = _run_both(model, {"x": _with_specials(shape)}, "llvm")
    assert np.isnan(got[0]).all() and np.isnan(expected[0]).all()
