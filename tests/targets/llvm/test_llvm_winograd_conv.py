"""Winograd convolutions F(2,3) and F(4,3) on the llvm target: the transforms exact, each
tile size against the NumPy convolution (odd sizes, padding, ragged tiles, epilogues) on
AVX-512 and AVX2 code, the selection rule, the option that turns it off, a NEON cross
build, and whole models against ONNX Runtime."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import onnxruntime as ort
import pytest

import heterocc
from heterocc import te
from heterocc.errors import InputError
from heterocc.ops.layout import pack_conv_weight, to_blocked
from heterocc.ops.nn import conv_nd
from heterocc.targets.llvm import LLVMTarget, llvm_target
from heterocc.targets.llvm.cpu import compiling_for, host_cpu, parse_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules.winograd_conv import (
    WINOGRAD_MIN_CHANNELS,
    WINOGRAD_PACKING,
    WINOGRAD_TILES,
    direct_vector_operations,
    schedule_winograd_conv,
    tiles_per_chunk,
    transform_weight_array,
    weights_dominate,
    winograd_conv,
    winograd_matrices,
    winograd_vector_operations,
)
from tests.conftest import conv_model

RNG = np.random.default_rng(35)
ISAS = ["llvm", "llvm -mattr=-avx512f"]


def _feeds(model):
    return {v.name: RNG.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim],
                                        dtype=np.float32) for v in model.graph.input}


def _winograd_tiles(compiled) -> list[int]:
    """The F(m, 3) tile of every Winograd convolution in ``compiled``'s kernels."""
    executor = compiled.build_static().executor
    return [axes for kernel in executor.kernels.values()
            if getattr(kernel, "prim", None) is not None
            for _, width, axes in kernel.prim.attrs["packed_constants"]
            if width == WINOGRAD_PACKING]


@pytest.mark.parametrize("m", WINOGRAD_TILES)
def test_the_transforms_compute_a_correlation_exactly(m):
    """``Aᵀ[(G g) ⊙ (Bᵀ d)]`` is the correlation of ``d`` with ``g`` (1-D), in exact
    fractions: the matrices from the interpolation points are right, not just close."""
    matrices = winograd_matrices(m)
    alpha = matrices.alpha
    rng = np.random.default_rng(m)
    d = [Fraction(int(v)) for v in rng.integers(-9, 10, alpha)]
    g = [Fraction(int(v)) for v in rng.integers(-9, 10, 3)]
    kernel = [sum(row[k] * g[k] for k in range(3)) for row in matrices.G]
    data = [sum(row[k] * d[k] for k in range(alpha)) for row in matrices.BT]
    product = [a * b for a, b in zip(kernel, data)]
    got = [sum(row[k] * product[k] for k in range(alpha)) for row in matrices.AT]
    assert got == [sum(d[i + k] * g[k] for k in range(3)) for i in range(m)]


def test_the_weight_transform_is_the_kernels_two_sided_product():
    w = RNG.standard_normal((32, 16, 3, 3), dtype=np.float32)
    packed = pack_conv_weight(w, 8, 16)
    u = transform_weight_array(packed, 4)
    g = np.array([[float(v) for v in row] for row in winograd_matrices(4).G])
    expected = np.einsum("pr,ocrs,qs->pqoc", g, w.astype(np.float64), g)
    # u: (a, a, O/ob, C/ib, ib, ob)
    got = u.transpose(0, 1, 2, 5, 3, 4).reshape(6, 6, 32, 16)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("m", WINOGRAD_TILES)
@pytest.mark.parametrize("images,channels,filters,height,width,pads,l2", [
    (1, 32, 32, 9, 11, (1, 1, 1, 1), None),       # odd sizes: ragged last tiles both ways
    (1, 32, 32, 8, 8, (1, 1, 1, 1), None),         # whole tiles (F(2,3), F(4,3))
    (1, 32, 32, 7, 5, (0, 0, 0, 0), None),         # no padding: 5x3 outputs
    (1, 32, 32, 6, 10, (0, 1, 2, 0), None),        # asymmetric padding
    (2, 16, 32, 12, 13, (1, 1, 1, 1), None),       # two images, chunks of whole rows
    (2, 64, 32, 5, 6, (1, 1, 1, 1), None),         # two images, all tiles at once
    (2, 16, 16, 11, 30, (1, 1, 1, 1), 16 * 1024),  # rows cut into chunks, a ragged one
])
def test_the_kernel_matches_the_numpy_convolution(m, images, channels, filters, height,
                                                  width, pads, l2):
    """The TE stages and their schedule alone, built and run on the host: all tiles at
    once where the weights dominate, else chunks of a row of tiles (``l2``: a CPU of
    that L2 size, whose chunks are short)."""
    block = 16
    x = RNG.standard_normal((images, channels, height, width), dtype=np.float32)
    w = RNG.standard_normal((filters, channels, 3, 3), dtype=np.float32)
    expected = conv_nd(x, w, None, strides=[1, 1], pads=list(pads), dilations=[1, 1],
                       group=1)
    u = transform_weight_array(pack_conv_weight(w, block, block), m)
    cpu = host_cpu() if l2 is None else dataclasses.replace(host_cpu(), l2=l2)
    X = te.placeholder((images, channels // block, height, width, block), "float32", "x")
    U = te.placeholder(u.shape, "float32", "u")
    out_shape = (images, filters // block, *expected.shape[2:], block)
    Y = winograd_conv(X, U, pads, out_shape, m)
    if l2 is not None:
        assert not weights_dominate(Y, channels)
        assert tiles_per_chunk(Y, channels, cpu) < -(-expected.shape[3] // m)
    schedule = te.create_schedule([Y])
    with compiling_for(cpu):
        schedule_winograd_conv(schedule, Y, cpu=cpu)
        module = build([te.lower(schedule, [X, U, Y], name="winograd")], name="winograd",
                       cpu=cpu)
    y = np.zeros(out_shape, np.float32)
    module["winograd"](to_blocked(x, block), u, y)
    np.testing.assert_allclose(y, to_blocked(expected, block), rtol=1e-4,
                               atol=1e-5 * float(np.abs(expected).max()))


def test_both_orders_of_the_steps_are_taken():
    """All tiles at once for a deep layer on a small image (ResNet-18's 512-channel
    7x7), chunks of rows of tiles for a wide one (its 64-channel 56x56)."""
    deep = winograd_conv(te.placeholder((1, 32, 7, 7, 16), "float32", "x"),
                         te.placeholder((6, 6, 32, 32, 16, 16), "float32", "u"),
                         (1, 1, 1, 1), (1, 32, 7, 7, 16), 4)
    wide = winograd_conv(te.placeholder((1, 4, 56, 56, 16), "float32", "x"),
                         te.placeholder((6, 6, 4, 4, 16, 16), "float32", "u"),
                         (1, 1, 1, 1), (1, 4, 56, 56, 16), 4)
    assert weights_dominate(deep, 512) and not weights_dominate(wide, 64)
    assert tiles_per_chunk(wide, 64, host_cpu()) >= 1


@pytest.mark.parametrize("cpu", ISAS, ids=["host", "avx2"])
@pytest.mark.parametrize("m", WINOGRAD_TILES)
@pytest.mark.parametrize("channels,size,filters,pad,epilogue,width", [
    (32, 14, 64, 1, ("relu",), None),
    (64, 13, 32, 1, ("residual", "relu"), 11),    # ragged tiles, residual add
    (16, 9, 48, 1, ("clip",), 17),               # 16 -> 48 channels, a wide odd row
    (48, 7, 32, 0, ("scale", "relu"), None),      # unpadded: 5x5 outputs
    (24, 10, 40, 1, (), None),                    # 8-channel blocks (24, 40)
])
def test_winograd_models_match_onnxruntime(cpu, m, channels, size, filters, pad, epilogue,
                                           width):
    """Through the compiler (layout, fusion, the weight transformed when the kernel is
    built), the epilogue finished in the output transform, against ORT."""
    model = conv_model(RNG, channels, size, filters, 3, 1, 1, pad=pad, epilogue=epilogue,
                       width=width)
    feeds = _feeds(model)
    compiled = heterocc.compile(model, target=[LLVMTarget(cpu=cpu, winograd=m)])
    assert _winograd_tiles(compiled) == [m]
    assert compiled.fallbacks == {}
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for ours, theirs in zip(compiled.run(feeds), session.run(None, feeds)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4,
                                   atol=1e-5 * float(np.abs(theirs).max()))


def test_winograd_can_be_turned_off():
    """``winograd=False`` (``-winograd=0``): the direct convolution, the same bits as
    a convolution Winograd does not take."""
    model = conv_model(RNG, 32, 14, 32, 3, 1, 1, epilogue=("relu",))
    feeds = _feeds(model)
    on = heterocc.compile(model, target=[LLVMTarget()])
    off = heterocc.compile(model, target="llvm -winograd=0")
    assert _winograd_tiles(on) == [4] and _winograd_tiles(off) == []
    assert llvm_target(winograd="0").winograd is False
    assert llvm_target(winograd="2").winograd == 2
    with pytest.raises(InputError, match="winograd"):
        LLVMTarget(winograd=3)
    with pytest.raises(InputError, match="winograd='maybe'"):  # not silently on
        llvm_target(winograd="maybe")
    expected = heterocc.compile(model, target="reference").run(feeds)[0]
    np.testing.assert_allclose(off.run(feeds)[0], expected, rtol=1e-5, atol=1e-5)


def test_a_winograd_kernel_survives_export(tmp_path):
    """The artifact records the weight's transform (its packing) and the loaded kernel
    transforms the saved weight the same way."""
    model = conv_model(RNG, 32, 10, 32, 3, 1, 1, epilogue=("relu",))
    feeds = _feeds(model)
    compiled = heterocc.compile(model, target="llvm")
    assert _winograd_tiles(compiled) == [4]
    compiled.export(str(tmp_path / "artifact"))
    loaded = heterocc.load(str(tmp_path / "artifact"))
    np.testing.assert_array_equal(loaded.run(feeds)[0], compiled.run(feeds)[0])


@pytest.mark.parametrize("stride,group,dilation", [(2, 1, 1), (1, 32, 1), (1, 1, 2)])
def test_other_convolutions_stay_direct(stride, group, dilation):
    model = conv_model(RNG, 32, 14, 32, 3, stride, group, dilation=dilation)
    compiled = heterocc.compile(model, target=[LLVMTarget(winograd=4)])
    assert _winograd_tiles(compiled) == []


def test_narrow_layers_stay_direct():
    """Fewer than WINOGRAD_MIN_CHANNELS input or output channels: the direct sum;
    each tile from its TILE_MIN_CHANNELS."""
    for channels, filters in ((8, 32), (32, 8)):
        model = conv_model(RNG, channels, 12, filters, 3, 1, 1)
        assert _winograd_tiles(heterocc.compile(model, target="llvm")) == []
    assert WINOGRAD_MIN_CHANNELS == 16
    # F(2,3) from 16 channels, F(4,3) from 32 (it rounds more)
    model = conv_model(RNG, 16, 12, 16, 3, 1, 1)
    assert _winograd_tiles(heterocc.compile(model, target="llvm")) == [2]
    model = conv_model(RNG, 32, 12, 32, 3, 1, 1)
    assert _winograd_tiles(heterocc.compile(model, target="llvm")) == [4]


@pytest.mark.parametrize("cpu", ISAS, ids=["host", "avx2"])
def test_the_rule_takes_the_tile_of_fewest_weights_where_they_stream(cpu):
    """ResNet-18's 512-channel 7x7 layer (38 MB of F(4,3) weights, beyond any L2 of the
    descriptions) by F(2,3); its 128-channel 28x28 one by F(4,3)."""
    deep = conv_model(RNG, 512, 7, 512, 3, 1, 1)
    wide = conv_model(RNG, 128, 28, 128, 3, 1, 1)
    assert _winograd_tiles(heterocc.compile(deep, target=cpu)) == [2]
    assert _winograd_tiles(heterocc.compile(wide, target=cpu)) == [4]


def test_the_rule_counts_vector_operations():
    """F(4,3) for ResNet-18's 3x3 layers on either ISA's vectors; the direct
    convolution where the transforms outweigh the product (one input channel)."""
    for lanes in (8, 16):
        for channels, size in ((64, 56), (128, 28), (256, 14), (512, 7)):
            shape = (1, channels // 16, size, size, 16)
            direct = direct_vector_operations(shape, channels, lanes)
            assert winograd_vector_operations(shape, channels, 4, lanes) < min(
                direct, winograd_vector_operations(shape, channels, 2, lanes))
    shape = (1, 1, 5, 5, 16)
    assert all(winograd_vector_operations(shape, 1, m, 16)
               > direct_vector_operations(shape, 1, 16) for m in WINOGRAD_TILES)


def test_winograd_builds_for_aarch64():
    """A NEON cross build of a Winograd convolution: its product on ``fmla``."""
    description = "llvm -mtriple=aarch64-linux-gnu"
    cpu = parse_cpu(description)
    m, channels, block = 4, 32, cpu.vector_lanes("float32")
    u_shape = (6, 6, channels // block, channels // block, block, block)
    X = te.placeholder((1, channels // block, 14, 14, block), "float32", "x")
    U = te.placeholder(u_shape, "float32", "u")
    Y = winograd_conv(X, U, (1, 1, 1, 1), (1, channels // block, 14, 14, block), m)
    schedule = te.create_schedule([Y])
    with compiling_for(cpu):
        schedule_winograd_conv(schedule, Y, cpu=cpu)
        assembly = build([te.lower(schedule, [X, U, Y], name="winograd")],
                         name="winograd", cpu=cpu).assembly()
    assert "fmla" in assembly


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "googlenet"])
def test_torchvision_models_with_winograd_match_onnxruntime(name, tmp_path):
    """Whole torchvision models (random weights), every 3x3 stride-1 layer by F(4,3),
    against ORT: the largest error relative to the logits' magnitude."""
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    net = getattr(torchvision.models, name)(weights=None, **kwargs).eval()
    x = torch.randn(1, 3, 224, 224)
    path = str(tmp_path / f"{name}.onnx")
    torch.onnx.export(net, (x,), path, input_names=["x"], opset_version=17, dynamo=False)
    compiled = heterocc.compile(path, target="llvm")
    assert len(_winograd_tiles(compiled)) >= 2
    feeds = {"x": x.numpy()}
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ours = compiled.run(feeds)[0]
    scale = float(np.abs(theirs).max())
    np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4 * scale)
    assert (ours.argmax(1) == theirs.argmax(1)).all()
