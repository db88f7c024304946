"""Smooth activations finishing a convolution in its register tile: HardSwish
(MobileNetV3) and SiLU, ``x * Sigmoid(x)`` (EfficientNet), on AVX-512, AVX2 and an
AArch64 cross build.

Before, each took extra passes over the convolution's whole output: HardSwish read its
input through a kept copy (the bias added in one pass, the activation in another), and
SiLU's Sigmoid beside the Mul made a branch the convolution's epilogue does not take."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm.cpu import compiling_for, parse_cpu
from heterocc.targets.llvm.module import build
from tests.compute.test_minmax_exactness import (
    ISAS,
    _assert_bit_exact,
    _with_specials,
)
from tests.conftest import make_model

ort = pytest.importorskip("onnxruntime")

ACTIVATIONS = ["HardSwish", "SiLU"]


def _activation(name: str, source: str) -> list:
    if name == "SiLU":
        return [helper.make_node("Sigmoid", [source], ["s"]),
                helper.make_node("Mul", [source, "s"], ["y"])]
    return [helper.make_node(name, [source], ["y"])]


def _conv_model(activation: str, channels=32, filters=48, size=9, identity=False):
    """A 1x1 convolution with bias and ``activation`` after it; ``identity``: depthwise
    with weights 1 and bias 0, so the activation sees the input itself (NaN, infinities
    and signed zeros included)."""
    rng = np.random.default_rng(5)
    if identity:
        filters = channels
        initializers = {"w": np.ones((channels, 1, 1, 1), np.float32),
                        "b": np.zeros(channels, np.float32)}
    else:
        initializers = {"w": (rng.standard_normal((filters, channels, 1, 1)) * 0.5
                              ).astype(np.float32),
                        "b": rng.standard_normal(filters).astype(np.float32)}
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1],
                            group=channels if identity else 1)
    return make_model([conv, *_activation(activation, "c")],
                      [("x", "float32", [1, channels, size, size])],
                      [("y", "float32", [1, filters, size, size])], initializers)


def _conv_function(llvm: LLVMTarget):
    (lowered,) = [c.lowered for c in llvm._compiled.values()
                  if c.lowered is not None and "conv" in c.lowered.name]
    return lowered


@pytest.mark.parametrize("target", ISAS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_activation_finishes_the_convolution_tile(activation, target):
    """One function: the convolution's output written once, by the activation, from the
    tile (no whole-output buffer besides the function's output); matches ONNX Runtime."""
    model = _conv_model(activation)
    llvm = LLVMTarget(cpu=target)
    compiled = heterocc.compile(model, target=[llvm])
    assert "Sigmoid" not in compiled.graph.op_counts()
    text = str(_conv_function(llvm))
    whole = [line for line in text.splitlines() if "allocate" in line and "'global'" in line]
    assert whole == [], whole
    x = np.random.default_rng(1).standard_normal((1, 32, 9, 9)).astype(np.float32) * 3
    got = compiled.run({"x": x})[0]
    assert llvm.fallbacks == {}
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ISAS)
def test_hardswish_epilogue_keeps_the_reference_at_special_values(target):
    """NaN where the reference has NaN (a NaN input, and -inf * 0), the infinities and
    zeros (signs included: -3 gives -0) bit for bit, the rest within a few ulp (the
    code multiplies by 1/6 in a fused multiply-add where the reference divides by 6)."""
    model = _conv_model("HardSwish", identity=True, size=7)
    x = _with_specials([1, 32, 7, 7])
    x.reshape(-1)[-6:] = [-3.0, 3.0, -2.9999998, 3.0000002, -6.0, 1e-38]
    llvm = LLVMTarget(cpu=target)
    got = heterocc.compile(model, target=[llvm]).run({"x": x})[0]
    assert llvm.fallbacks == {}
    expected = heterocc.compile(model, target="reference").run({"x": x})[0]
    exact = np.isnan(expected) | np.isinf(expected) | (expected == 0)
    _assert_bit_exact(got[exact], expected[exact])
    # near -3 the factor x / 6 + 1/2 cancels: its rounding, not the result's, bounds the error
    np.testing.assert_allclose(got[~exact], expected[~exact], rtol=4e-7,
                               atol=1e-7 * float(np.abs(x[np.isfinite(x)]).max()))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_the_fused_activation_builds_for_aarch64(activation):
    """The same function cross-compiled for NEON: the tile and its activation in vector
    registers (fmla for the sums, no stack spill of a q register)."""
    description = "llvm -mtriple=aarch64-linux-gnu"
    llvm = LLVMTarget(cpu=description)
    heterocc.compile(_conv_model(activation), target=[llvm])
    cpu = parse_cpu(description)
    with compiling_for(cpu):
        assembly = build([_conv_function(llvm)], name="epilogue", cpu=cpu).assembly()
    assert "fmla" in assembly
    if activation == "HardSwish":
        assert "fmaxnm" in assembly and "fminnm" in assembly


def _squeeze_excite_model(channels=32, size=14):
    """A squeeze-excite block as torchvision writes it: depthwise convolution + SiLU,
    global average pool, 1x1 convolution + SiLU, 1x1 convolution + Sigmoid, and the
    scale ``x * Sigmoid(s)``, one gate per channel broadcast over the image."""
    rng = np.random.default_rng(7)
    squeezed = 8

    def weight(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    initializers = {"w": weight(channels, 1, 3, 3), "b": weight(channels),
                    "w1": weight(squeezed, channels, 1, 1), "b1": weight(squeezed),
                    "w2": weight(channels, squeezed, 1, 1), "b2": weight(channels)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1], group=channels),
             *_activation("SiLU", "c"),
             helper.make_node("GlobalAveragePool", ["y"], ["p"]),
             helper.make_node("Conv", ["p", "w1", "b1"], ["q"], kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["q"], ["qs"]),
             helper.make_node("Mul", ["q", "qs"], ["q2"]),
             helper.make_node("Conv", ["q2", "w2", "b2"], ["r"], kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["r"], ["gate"]),
             helper.make_node("Mul", ["y", "gate"], ["out"])]
    return make_model(nodes, [("x", "float32", [1, channels, size, size])],
                      [("out", "float32", [1, channels, size, size])], initializers)


def _scale_function(llvm: LLVMTarget):
    (lowered,) = [c.lowered for c in llvm._compiled.values()
                  if c.lowered is not None and c.lowered.name.endswith("sigmoid_mul")]
    return lowered


def _exp_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "exp(" in line]


@pytest.mark.parametrize("target", ISAS)
def test_the_squeeze_excite_gate_is_computed_once_per_channel(target):
    """The gate's Sigmoid is computed once per channel, by the convolution that makes
    it (in its tile), not once per pixel inside the scale's loop (14 x 14 times as
    many exponentials); the block matches ONNX Runtime."""
    model = _squeeze_excite_model()
    llvm = LLVMTarget(cpu=target)
    compiled = heterocc.compile(model, target=[llvm])
    text = str(_scale_function(llvm))
    loop = text[text.index("parallel("):] if "parallel(" in text else text[
        text.rindex("for "):]
    assert _exp_lines(text) and not _exp_lines(loop), text
    x = np.random.default_rng(2).standard_normal((1, 32, 14, 14)).astype(np.float32)
    got = compiled.run({"x": x})[0]
    assert llvm.fallbacks == {}
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_the_squeeze_excite_gate_builds_for_aarch64():
    """The same scale function cross-compiled for NEON: the exponentials before the
    scale's loop, the scale a multiply of four-lane vectors."""
    description = "llvm -mtriple=aarch64-linux-gnu"
    llvm = LLVMTarget(cpu=description)
    heterocc.compile(_squeeze_excite_model(), target=[llvm])
    function = _scale_function(llvm)
    text = str(function)
    assert _exp_lines(text) and not _exp_lines(text[text.rindex("for "):]), text
    cpu = parse_cpu(description)
    with compiling_for(cpu):
        assembly = build([function], name="scale", cpu=cpu).assembly()
    assert any(line.split()[:1] == ["fmul"] and ".4s" in line
               for line in assembly.splitlines())
