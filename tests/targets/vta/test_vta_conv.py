"""Direct convolutions on the accelerator: the LOAD pads with the input's zero point,
micro-ops walk the kernel window, the host writes the input once (no im2col)."""

import numpy as np
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import Buffer, Load
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.codegen import compile_composite, input_zero_point
from heterocc.targets.vta.conv import ConvGeometry, candidate_conv_tilings, conv_cycles_bound

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import quantize, single_conv  # noqa: E402


def _composite(model, target):
    compiled = heterocc.compile(model, target=[target, "llvm"], strict=True,
                                placement="greedy")
    (region,) = [n for n in compiled.graph.nodes if n.attrs.get("target") == "vta"]
    (composite,) = region.body.nodes
    return composite


@pytest.mark.parametrize("kernel, stride, channels, filters, size", [
    (3, 1, 16, 16, 10), (3, 2, 32, 24, 11), (1, 1, 20, 40, 8), (1, 2, 16, 16, 9),
    (5, 1, 16, 32, 9), (7, 2, 16, 16, 12)])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_direct_convolution_is_bit_exact(tmp_path, kernel, stride, channels, filters, size,
                                         activations):
    model = quantize(single_conv(kernel + stride, stride, kernel, channels, filters, size),
                     tmp_path, "QDQ", activations)
    target = VtaTarget()
    composite = _composite(model, target)
    kernel_ = compile_composite(composite, target.config, 2)
    assert kernel_.input_tensor == "X"  # the direct path, not im2col
    rng = np.random.default_rng(kernel * 10 + stride)
    zero_point = input_zero_point(composite.body.nodes[0])
    for _ in range(2):
        x = rng.integers(-128, 128, composite.body.inputs[0].type.shape).astype(np.int8)
        (expected,) = evaluate(composite.body, [x])
        np.testing.assert_array_equal(kernel_([x])[0], expected)
    pads = [i for i in kernel_.program.instructions
            if isinstance(i, Load) and i.buffer == Buffer.INP and
            (i.y_pad_top or i.y_pad_bottom or i.x_pad_left or i.x_pad_right)]
    if kernel > 1:  # padded windows: the LOAD fills the border with the zero point
        assert pads and all(i.pad_value == zero_point for i in pads)


def test_host_writes_the_input_once(tmp_path):
    """The input tensor of the program holds the layer's input (channels padded to a
    block), not KH x KW copies of it."""
    model = quantize(single_conv(1, 1, 3, 32, 32, 14), tmp_path, "QDQ", "QInt8")
    target = VtaTarget()
    kernel = compile_composite(_composite(model, target), target.config, 2)
    x_tensor = kernel.program.tensors["X"]
    assert x_tensor.rows * x_tensor.cols == 32 * 14 * 14


def test_small_channel_counts_stay_im2col(tmp_path):
    model = quantize(single_conv(2, 1, 3, 3, 16, 12), tmp_path, "QDQ", "QInt8")
    target = VtaTarget()
    kernel = compile_composite(_composite(model, target), target.config, 2)
    assert kernel.input_tensor == "A"


def test_candidate_tilings_fit_the_buffers_and_the_bound_orders_them():
    config = HardwareConfig.preset("1x16x16")
    g = ConvGeometry(1, 4, 56, 56, 4, (3, 3), (1, 1), (1, 1, 1, 1))
    candidates = candidate_conv_tilings(config, g, 2, 12)
    assert candidates
    for t in candidates:
        window = ((t.rows - 1) + 3) * 58 * t.channels
        assert 2 * window <= config.inp_depth
        assert 2 * t.filters * t.rows * 56 <= config.acc_depth - 12
    bounds = sorted(conv_cycles_bound(config, g, t, 5) for t in candidates)
    # every MAC of the layer takes a GEMM cycle at least
    assert bounds[0] >= 56 * 56 * 4 * 4 * 9


def depthwise_conv(seed: int, stride: int, kernel: int, channels: int, size: int):
    """One depthwise convolution (group = channels) with bias, as MobileNets have."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((channels, 1, kernel, kernel)) * 0.4)
                                .astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")
    node = helper.make_node("Conv", ["input", "w", "b"], ["y"], group=channels,
                            pads=[kernel // 2] * 4, strides=[stride] * 2)
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    graph = helper.make_graph(
        [node], "dw",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, out, out])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("stride, kernel, channels, size", [
    (1, 3, 32, 10), (2, 3, 24, 11), (1, 5, 16, 9), (2, 3, 96, 14)])
def test_depthwise_convolution_is_bit_exact(tmp_path, stride, kernel, channels, size):
    model = quantize(depthwise_conv(stride, stride, kernel, channels, size), tmp_path, "QDQ",
                     "QUInt8")
    target = VtaTarget()
    composite = _composite(model, target)
    kernel_ = compile_composite(composite, target.config, 2)
    assert kernel_.input_tensor == "X"
    rng = np.random.default_rng(stride + kernel)
    for _ in range(2):
        x = rng.integers(-128, 128, composite.body.inputs[0].type.shape).astype(np.int8)
        (expected,) = evaluate(composite.body, [x])
        np.testing.assert_array_equal(kernel_([x])[0], expected)
    assert kernel_.macs == channels * kernel * kernel * (
        (size + 2 * (kernel // 2) - kernel) // stride + 1) ** 2


@pytest.mark.parametrize("kernel, channels", [(1, 12), (3, 3)])
def test_fewer_channels_than_a_block_run_direct_where_it_costs_no_gemm_iterations(
        tmp_path, kernel, channels):
    """A 1x1 convolution with fewer channels than a block runs directly (the same GEMM
    iterations as im2col, the input written once, not as a matrix); a 3x3 one keeps
    im2col (its 9 taps fold into one block); both bit-exact, call after call."""
    model = quantize(single_conv(kernel + channels, 1, kernel, channels, 20, 9), tmp_path,
                     "QDQ", "QInt8")
    target = VtaTarget()
    composite = _composite(model, target)
    kernel_ = compile_composite(composite, target.config, 2)
    assert kernel_.input_tensor == ("X" if kernel == 1 else "A")
    rng = np.random.default_rng(channels)
    for _ in range(3):  # a call's buffers reused by the next
        x = rng.integers(-128, 128, composite.body.inputs[0].type.shape).astype(np.int8)
        (expected,) = evaluate(composite.body, [x])
        np.testing.assert_array_equal(kernel_([x])[0], expected)


def test_a_kernel_called_from_threads_at_once_is_bit_exact(tmp_path):
    """Each thread lays its inputs out in its own buffers: calls from two threads at
    once (an im2col and a direct convolution) give each its own result."""
    from concurrent.futures import ThreadPoolExecutor

    target = VtaTarget()
    kernels = []
    for kernel, channels in ((3, 3), (3, 16)):
        model = quantize(single_conv(5, 2, kernel, channels, 16, 10), tmp_path, "QDQ", "QInt8")
        composite = _composite(model, target)
        kernels.append((composite, compile_composite(composite, target.config, 2)))
    rng = np.random.default_rng(3)
    jobs = []
    for composite, kernel_ in kernels:
        for _ in range(6):
            x = rng.integers(-128, 128, composite.body.inputs[0].type.shape).astype(np.int8)
            jobs.append((kernel_, x, evaluate(composite.body, [x])[0]))
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda job: job[0]([job[1]])[0], jobs))
    for (_, _, expected), result in zip(jobs, got):
        np.testing.assert_array_equal(result, expected)


def test_threads_calling_a_kernel_first_at_once_share_the_device_it_makes(tmp_path,
                                                                          monkeypatch):
    """A kernel compiled without a device makes one on its first call: two threads making
    that call at once (held together while the device is made) get one device between
    them, and each its own result."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from heterocc.targets.vta import codegen

    made = []

    class SlowToMake(codegen.VtaDevice):
        def __init__(self, config):
            time.sleep(0.05)  # the window in which another thread's first call arrives
            super().__init__(config)
            made.append(self)

    monkeypatch.setattr(codegen, "VtaDevice", SlowToMake)
    target = VtaTarget()
    model = quantize(single_conv(5, 2, 3, 16, 16, 10), tmp_path, "QDQ", "QInt8")
    composite = _composite(model, target)
    kernel = compile_composite(composite, target.config, 2)
    rng = np.random.default_rng(5)
    inputs = [rng.integers(-128, 128, composite.body.inputs[0].type.shape).astype(np.int8)
              for _ in range(2)]
    start = threading.Barrier(2)

    def call(x):
        start.wait()
        return kernel([x])[0]

    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(call, inputs))
    assert len(made) == 1
    for x, result in zip(inputs, got):
        np.testing.assert_array_equal(result, evaluate(composite.body, [x])[0])
