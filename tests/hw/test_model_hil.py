"""Hardware-in-the-loop for a whole model: the compiler's accelerator streams,
replayed on the RTL, agree bit-exactly with the simulator."""

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.rtl_device import RtlDevice
from heterocc.cli import main
from heterocc.models import tiny_cnn
from heterocc.sdk import MirroredDevice
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.device import VtaDevice
from heterocc.targets.vta.hil import model_hil
from tests.hw.conftest import BUILD_ROOT, require_rtl_tools

pytestmark = [pytest.mark.rtl, pytest.mark.hil]


def test_compiled_model_streams_agree_on_the_rtl():
    require_rtl_tools("icarus")
    results = model_hil(tiny_cnn(size=8), simulator="icarus", build_root=BUILD_ROOT)
    # three convolutions, the residual addition (the built-in quantizer quantizes it; the
    # ALU runs it) and the dense layer
    assert len(results) == 5
    assert all(r.matches for r in results), [r.summary() for r in results]
    for r in results:
        assert abs(r.rtl_cycles / r.model_cycles - 1) < 0.05, r.summary()


def test_hil_command_takes_a_model(tmp_path, capsys):
    require_rtl_tools("icarus")
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(size=8), str(path))
    assert main(["hil", str(path), "--device", "rtl", "--simulator", "icarus",
                 "--build-dir", str(BUILD_ROOT)]) == 0
    assert "5/5 accelerator functions agree" in capsys.readouterr().out


def test_compiled_model_runs_on_the_rtl_through_the_sdk_device():
    """The RTL transport as the target's SDK device, mirrored against the simulator:
    every program's output agrees element for element, weights loaded once."""
    require_rtl_tools("icarus")
    config = HardwareConfig.preset("1x16x16")
    rtl = VtaDevice(config, RtlDevice(config, "icarus", build_root=BUILD_ROOT), name="rtl")
    target = VtaTarget(config=config, hardware=MirroredDevice(rtl, VtaDevice(config)))
    rng = np.random.default_rng(4)
    samples = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(2)]
    model = tiny_cnn(size=8)
    compiled = heterocc.compile(model, target=[target, "reference"], calibration=samples)
    simulated = heterocc.compile(model, target="vta,reference", calibration=samples)
    np.testing.assert_array_equal(compiled.run([samples[0][0]])[0],
                                  simulated.run([samples[0][0]])[0])
    assert len(target.kernels) == 5 and all(k.last_cycles > 0 for k in target.kernels)
    assert all(k.last_bytes_loaded == k.program.dram.nbytes for k in target.kernels)


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
@pytest.mark.parametrize("kind", ["lookup_table", "average_pool"])
def test_activation_and_pool_streams_agree_on_the_rtl(tmp_path, kind, simulator):
    """The compiler's streams of a lookup-table activation (the ALU's LUT) and of an
    average pool (a depthwise all-ones convolution) between convolutions, from a model
    quantized by quantize_static, replayed on the RTL: bit- and cycle-exact."""
    pytest.importorskip("onnxruntime.quantization")
    from tests.targets.vta.ort_models import quantize
    from tests.targets.vta.test_vta_average_pool import conv_pool
    from tests.targets.vta.test_vta_lookup_table import conv_activation_conv

    require_rtl_tools(simulator)
    model = conv_activation_conv("silu") if kind == "lookup_table" \
        else conv_pool("window", then_conv=True)
    results = model_hil(quantize(model, tmp_path, "QDQ", "QInt8"), simulator=simulator,
                        build_root=BUILD_ROOT)
    assert len(results) == 3
    assert all(r.matches for r in results), [r.summary() for r in results]
    for r in results:
        assert abs(r.rtl_cycles / r.model_cycles - 1) < 0.05, r.summary()


@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_channel_shuffle_streams_agree_on_the_rtl(tmp_path, simulator):
    """The compiler's streams of a ShuffleNet unit's channel gathers (1x1 convolutions
    with 0/1 weights whose inputs are written to consecutive parts of one tensor, the
    identity epilogue leaving no ALU step) between convolutions, from a model quantized
    by quantize_static, replayed on the RTL: bit- and cycle-exact."""
    pytest.importorskip("onnxruntime.quantization")
    from tests.targets.vta.ort_models import quantize
    from tests.targets.vta.test_vta_channel_shuffle import shuffle_units

    require_rtl_tools(simulator)
    model = quantize(shuffle_units(10, size=4), tmp_path, "QDQ", "QInt8")
    results = model_hil(model, simulator=simulator, build_root=BUILD_ROOT)
    assert sum("gather" in r.name for r in results) == 5, [r.name for r in results]
    assert all(r.matches for r in results), [r.summary() for r in results]
    for r in results:
        assert abs(r.rtl_cycles / r.model_cycles - 1) < 0.05, r.summary()
