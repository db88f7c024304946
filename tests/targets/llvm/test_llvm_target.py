"""The llvm target's convolution path: direct, grouped, depthwise and strided
convolutions with their fused elementwise epilogues, computed in register tiles, must
match the NumPy reference; repeated function structures compile once; recycled output
buffers never overwrite an array the caller still holds."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import heterocc
from heterocc import te
from heterocc.compute import compute_of
from heterocc.ir.types import TensorType
from heterocc.passes import fused_functions
from heterocc.sdk.te_target import ExpressedFunction, elementwise_epilogue, structure_key
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.rules import DirectConvRule
from heterocc.targets.llvm.target import _schedule
from heterocc.te.schedule import AT
from tests.conftest import conv_model

RNG = np.random.default_rng(11)


def _conv_model(*args, **kwargs):
    return conv_model(RNG, *args, **kwargs)


def _feeds(model):
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = RNG.standard_normal(shape, dtype=np.float32)
    return feeds


def _compile_and_check(model, feeds):
    """Run ``model`` through llvm and the reference; return the compiled llvm model."""
    compiled = heterocc.compile(model, target="llvm")
    ours = compiled.run(feeds)
    expected = heterocc.compile(model, target="reference").run(feeds)
    for a, b in zip(ours, expected):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert compiled.fallbacks == {}
    return compiled


@pytest.mark.parametrize("channels,size,filters,kernel,stride,group,dilation,width", [
    (8, 20, 16, 3, 1, 1, 1, 20),     # tile tail (20 = 16 + 4 columns)
    (5, 9, 7, 3, 1, 1, 1, 9),        # fewer channels than a tile, narrow rows
    (8, 17, 32, 1, 1, 1, 1, 33),     # 1x1, non-square, wide row with a tail
    (6, 15, 12, 3, 2, 1, 1, 15),     # stride 2, odd padded width
    (4, 23, 8, 5, 3, 1, 1, 19),      # stride 3, 5x5
    (8, 14, 8, 3, 1, 1, 2, 14),      # dilation 2
    (8, 12, 12, 3, 1, 4, 1, 12),     # grouped
    (16, 18, 16, 3, 1, 16, 1, 18),   # depthwise
    (12, 21, 12, 3, 2, 12, 1, 21),   # depthwise, stride 2
    (3, 30, 16, 7, 2, 1, 1, 30),     # the 7x7 stem (even width: unpadded phases)
    (12, 20, 12, 3, 2, 12, 1, 20),   # depthwise, stride 2, even width
    (4, 18, 8, 5, 3, 1, 1, 18),      # stride 3, width a multiple of 3
    (8, 16, 8, 3, 2, 1, 2, 16),      # stride 2 and dilation 2
])
def test_conv_geometries_match_reference(channels, size, filters, kernel, stride, group,
                                          dilation, width):
    model = _conv_model(channels, size, filters, kernel, stride, group, dilation=dilation,
                        width=width)
    _compile_and_check(model, _feeds(model))


@pytest.mark.parametrize("pads", [[0, 1, 1, 0], [2, 0, 0, 2], [1, 3, 2, 0]])
@pytest.mark.parametrize("stride,width", [(1, 13), (2, 14), (2, 13)])
def test_asymmetric_padding_matches_reference(pads, stride, width):
    model = _conv_model(6, 11, 8, 3, stride, pad=pads, width=width, epilogue=("relu",))
    _compile_and_check(model, _feeds(model))


@pytest.mark.parametrize("epilogue", [(), ("relu",), ("clip",), ("residual", "relu")])
@pytest.mark.parametrize("group", [1, 8])
def test_fused_epilogues_match_reference(epilogue, group):
    model = _conv_model(8, 19, 8, 3, 1, group, epilogue=epilogue)
    compiled = _compile_and_check(model, _feeds(model))
    # the convolution may be blocked (alter_layout): then layout transforms stand beside it
    (function,) = [f for f in fused_functions(compiled.graph)
                   if f.body.nodes[0].op in ("Conv", "ConvNCHWc")]
    assert len(function.body.nodes) == 1 + len(epilogue)


def _conv_tensors(outputs_of):
    """A conv (+ bias) on placeholders, and the outputs ``outputs_of(conv_output)``."""
    x = te.placeholder((1, 8, 10, 10), "float32", "x")
    w = te.placeholder((16, 8, 3, 3), "float32", "w")
    b = te.placeholder((16,), "float32", "b")
    attrs = {"group": 1, "strides": [1, 1], "pads": [1] * 4, "dilations": [1, 1],
             "kernel_shape": [3, 3], "auto_pad": "NOTSET"}
    (y,) = compute_of("Conv")([x, w, b], attrs, [TensorType((1, 16, 10, 10), "float32")])
    return [x, w, b], outputs_of(y)


def _anchor(schedule):
    return next(s.tensor for s in schedule.stages
                if not s.is_placeholder and DirectConvRule(active_cpu()).matches(s.tensor))


def test_epilogue_is_computed_in_the_conv_tiles():
    params, outputs = _conv_tensors(lambda y: [te.compute(
        y.shape, lambda *i: te.maximum(y[i], te.const(0.0, "float32")), name="act")])
    schedule = _schedule(ExpressedFunction(params, [], outputs), active_cpu())
    conv_stage = schedule[_anchor(schedule)]
    assert conv_stage.attach == AT and conv_stage.scope == "local"
    func = te.lower(schedule, params + outputs, name="f")
    x, w, b = (RNG.standard_normal(p.shape, dtype=np.float32) for p in params)
    from heterocc.targets import llvm as hllvm

    out = np.empty(outputs[0].shape, np.float32)
    hllvm.build(func)(x, w, b, out)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    expected = np.einsum("nchwij,kcij->nkhw", windows, w) + b[None, :, None, None]
    np.testing.assert_allclose(out, np.maximum(expected, 0), rtol=1e-4, atol=1e-4)


def test_conv_read_twice_or_reindexed_keeps_its_own_buffer():
    def two_readers(y):
        return [te.compute(y.shape, lambda *i: y[i] * 2.0, name="twice"),
                te.compute(y.shape, lambda *i: y[i] + 1.0, name="plus")]

    def transposed(y):
        return [te.compute(y.shape, lambda n, k, i, j: y[n, k, j, i], name="transposed")]

    for outputs_of in (two_readers, transposed):
        params, outputs = _conv_tensors(outputs_of)
        schedule = te.create_schedule(outputs)
        for stage in schedule.stages:
            if not stage.is_placeholder and not DirectConvRule(active_cpu()).matches(stage.tensor) \
                    and all(stage.tensor is not t for t in outputs):
                stage.compute_inline()
        assert elementwise_epilogue(schedule, _anchor(schedule), outputs) is None


def test_repeated_blocks_compile_once_and_export():
    """Two convolutions of one structure and different weights share a kernel."""
    first = _conv_model(8, 12, 8, 3, epilogue=("relu",))
    graph = first.graph
    second_w = RNG.standard_normal((8, 8, 3, 3), dtype=np.float32)
    second_b = RNG.standard_normal(8, dtype=np.float32)
    graph.initializer.extend([numpy_helper.from_array(second_w, "w2"),
                              numpy_helper.from_array(second_b, "b2")])
    graph.node.extend([helper.make_node("Conv", ["t1", "w2", "b2"], ["u0"], pads=[1] * 4,
                                        strides=[1, 1], group=1, dilations=[1, 1]),
                       helper.make_node("Relu", ["u0"], ["u1"])])
    graph.output[0].name = "u1"
    feeds = _feeds(first)
    compiled = _compile_and_check(first, feeds)
    functions = [f for f in fused_functions(compiled.graph)
                 if f.body.nodes[0].op in ("Conv", "ConvNCHWc")]
    assert len(functions) == 2
    assert structure_key(functions[0].body) == structure_key(functions[1].body)
    # one convolution kernel, plus the layout transforms' when the convolutions are blocked
    transforms = len(fused_functions(compiled.graph)) - len(functions)
    assert compiled.build_static().targets["llvm"].distinct_kernels == 1 + transforms


def test_repeated_kernels_survive_export(tmp_path):
    model = _conv_model(8, 12, 8, 3, epilogue=("relu",))
    graph = model.graph
    graph.initializer.extend([numpy_helper.from_array(
        RNG.standard_normal((8, 8, 3, 3), dtype=np.float32), "w2")])
    graph.node.extend([helper.make_node("Conv", ["t1", "w2"], ["u0"], pads=[1] * 4)])
    graph.node.extend([helper.make_node("Conv", ["u0", "w2"], ["u1"], pads=[1] * 4)])
    graph.output[0].name = "u1"
    feeds = _feeds(model)
    compiled = _compile_and_check(model, feeds)
    compiled.export(str(tmp_path / "artifact"))
    loaded = heterocc.load(str(tmp_path / "artifact"))
    np.testing.assert_allclose(loaded.run(feeds)[0], compiled.run(feeds)[0], rtol=1e-5,
                               atol=1e-5)


def test_structure_key_ignores_constant_values_not_attributes():
    a = _conv_model(4, 8, 4, 3)
    b = _conv_model(4, 8, 4, 3)
    c = _conv_model(4, 8, 4, 3, stride=2)

    def key(model):
        compiled = heterocc.compile(model, target="reference")
        (function,) = fused_functions(compiled.graph)
        return structure_key(function.body)

    assert key(a) == key(b)
    assert key(a) != key(c)


def test_structure_key_attribute_values_flat_and_nested():
    """Flat lists of plain values (per-channel requantization lists) are their own key;
    nested lists and arrays are frozen as before: equal values, equal keys."""
    from heterocc.sdk.te_target import _frozen

    channels = list(range(1000))
    assert _frozen(channels) == tuple(channels)
    assert _frozen([1, 2.5, "a", True]) == (1, 2.5, "a", True)
    assert _frozen([1, [2, 3]]) == (1, (2, 3))
    assert _frozen([np.int64(3)]) == (3,)
    nested = _frozen([np.arange(3), {"b": [1], "a": 2}])
    assert nested == (("array", np.arange(3).dtype.str, (3,), np.arange(3).tobytes()),
                      (("a", 2), ("b", (1,))))
    assert _frozen(channels) != _frozen(channels[:-1] + [7])


def test_recycled_outputs_never_overwrite_held_results():
    model = _conv_model(4, 10, 4, 3, epilogue=("relu",))
    compiled = heterocc.compile(model, target="llvm")
    first_feeds, second_feeds = _feeds(model), _feeds(model)
    held = compiled.run(first_feeds)[0]
    held_copy = held.copy()
    for _ in range(3):
        again = compiled.run(second_feeds)[0]
        assert again is not held
    np.testing.assert_array_equal(held, held_copy)
    reference = heterocc.compile(model, target="reference")
    np.testing.assert_allclose(again, reference.run(second_feeds)[0], rtol=1e-4, atol=1e-4)


def test_one_element_constants_are_folded_so_the_epilogue_vectorizes():
    from heterocc import tir

    low = te.placeholder((), "float32", "low")
    high = te.placeholder((), "float32", "high")
    params, outputs = _conv_tensors(lambda y: compute_of("Clip")(
        [y, low, high], {}, [TensorType(y.shape, "float32")]))
    scalars = {id(low): np.asarray(np.float32(0.0)), id(high): np.asarray(np.float32(6.0))}
    expressed = ExpressedFunction(params + [low, high], list(scalars.values()), outputs, scalars)
    func = te.lower(_schedule(expressed, active_cpu()), expressed.params + outputs, name="f")
    stores = tir.collect(func.body, lambda n: isinstance(n, tir.BufferStore)
                         and n.buffer.name == outputs[0].name)
    assert stores and all(isinstance(s.indices[0], tir.Ramp) for s in stores)
    assert not tir.collect(func.body, lambda n: isinstance(n, tir.BufferLoad)
                           and n.buffer.name in ("low", "high"))


def test_kernels_check_inputs_quickly_and_refuse_what_does_not_fit():
    """A network's kernels skip the full per-call check of their compiled function (it
    costs as much as a small kernel) but still compute the right result, and an input
    of the wrong dtype, shape or layout still gets the full check's error, naming it."""
    from heterocc.errors import InputError

    model = _conv_model(4, 10, 4, 3, epilogue=("relu",))
    compiled = heterocc.compile(model, target="llvm")
    feeds = _feeds(model)
    expected = heterocc.compile(model, target="reference").run(feeds)[0]
    executor = compiled.build_static().executor
    (name,) = [n for n, k in executor.kernels.items() if hasattr(k, "out_specs")]
    kernel = executor.kernels[name]
    function = kernel.function
    calls = []
    checked = function.check
    function.check = lambda arrays: (calls.append(len(arrays)), checked(arrays))
    try:
        (x,) = feeds.values()
        for _ in range(3):
            np.testing.assert_allclose(compiled.run(feeds)[0], expected, rtol=1e-4, atol=1e-4)
        assert len(calls) <= 1  # once, when the kernel first runs; never per call
        with pytest.raises(InputError, match="must be float32"):
            kernel([x.astype(np.float64)])
        with pytest.raises(InputError, match="must be float32"):
            kernel([x[..., :-1]])
        with pytest.raises(InputError, match="C-contiguous"):
            kernel([np.asfortranarray(x)])
    finally:
        del function.check
    np.testing.assert_allclose(kernel([x])[0], expected, rtol=1e-4, atol=1e-4)
