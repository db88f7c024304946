"""The accelerator target: partitioned quantized models on the simulator,
bit-exact against the NumPy reference of every accelerator function."""

import numpy as np
import onnx
import pytest

import heterocc
from heterocc import sdk
from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.device import SimulatorDevice
from heterocc.cli import main
from heterocc.errors import PartitionError
from heterocc.models import tiny_cnn
from heterocc.runtime.interpreter import evaluate
from heterocc.sdk.hil import model_hil
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.codegen import compile_composite
from heterocc.targets.vta.device import VtaDevice


@pytest.fixture
def qdq_model(qdq_tiny_cnn):
    return qdq_tiny_cnn


def _composites(compiled):
    return [c for region in compiled.graph.nodes if region.attrs.get("target") == "vta"
            for c in region.body.nodes]


@pytest.mark.parametrize("preset", ["1x8x8", "1x16x16", "1x32x32", "1x64x64"])
def test_every_accelerator_function_is_bit_exact(qdq_model, preset):
    target = VtaTarget(config=preset)
    compiled = heterocc.compile(qdq_model, target=[target, "reference"])
    composites = _composites(compiled)
    # (the pooled tensor's Flatten before the dense layer too)
    assert sorted({c.attrs["composite"] for c in composites}) == [
        "conv2d_bias_requantize", "dense_bias_requantize", "flatten", "max_pool",
        "quantized_add"]
    rng = np.random.default_rng(0)
    for composite in composites:
        kernel = compile_composite(composite, target.config, 2)
        xs = [rng.integers(-128, 128, v.type.shape).astype(np.int8)
              for v in composite.body.inputs]
        (expected,) = evaluate(composite.body, xs)
        (got,) = kernel(xs)
        assert got.dtype == expected.dtype == np.int8
        np.testing.assert_array_equal(got, expected)
        assert kernel.last_cycles > 0


def test_partitioned_model_matches_onnxruntime(qdq_model):
    import onnxruntime as ort

    compiled = heterocc.compile(qdq_model, target="vta,reference")
    report = compiled.placement_report.by_target()
    assert report["vta"] >= 10
    sess = ort.InferenceSession(qdq_model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    agree = 0
    for seed in range(10):
        x = np.random.default_rng(200 + seed).standard_normal((1, 3, 32, 32)).astype(np.float32)
        ref = sess.run(None, {"input": x})[0]
        ours = compiled.run([x])[0]
        assert np.abs(ref - ours).max() < 0.05
        agree += int(ref.argmax() == ours.argmax())
    assert agree >= 9


def test_profile_shows_simulated_cycles(qdq_model):
    compiled = heterocc.compile(qdq_model, target="vta,reference")
    compiled.enable_profiling()
    compiled.run([np.zeros((1, 3, 32, 32), np.float32)])
    table = compiled.profile_report()
    vta_rows = [line for line in table.splitlines() if " vta " in line]
    assert vta_rows and all(line.split()[5].isdigit() for line in vta_rows)


def test_double_buffering_takes_fewer_cycles(qdq_model):
    cycles = {}
    for threads in (1, 2):
        target = VtaTarget(virtual_threads=threads)
        compiled = heterocc.compile(qdq_model, target=[target, "reference"])
        compiled.run([np.ones((1, 3, 32, 32), np.float32)])
        cycles[threads] = sum(k.last_cycles for k in target.kernels)
    assert cycles[2] < cycles[1]


def test_built_in_quantization_runs_on_the_accelerator():
    model = tiny_cnn()
    rng = np.random.default_rng(1)
    calibration = [[rng.standard_normal((1, 3, 32, 32)).astype(np.float32)] for _ in range(4)]
    compiled = heterocc.compile(model, target="vta,reference", calibration=calibration)
    assert compiled.placement_report.by_target()["vta"] >= 10
    reference = heterocc.compile(model)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    assert compiled.run([x])[0].argmax() == reference.run([x])[0].argmax()


def test_strict_mode_names_what_the_accelerator_refuses():
    # a dilated convolution matches the conv pattern but is refused: the micro-ops walk
    # a dense kernel window
    from onnx import TensorProto, helper, numpy_helper

    w = np.ones((4, 4, 3, 3), np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], dilations=[2, 2],
                              pads=[2, 2, 2, 2]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 4, 5, 5])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.1), "s"),
         numpy_helper.from_array(np.int8(0), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    with pytest.raises(PartitionError, match="dilated convolution"):
        heterocc.compile(model, target="vta,reference", strict=True)
    relaxed = heterocc.compile(model, target="vta,reference")
    assert relaxed.placement_report.by_target().get("vta", 0) == 0


@pytest.mark.parametrize("shape", [(196, 2304, 256), (49, 4608, 512)])
def test_timing_model_search_beats_the_default_tiling(shape):
    from heterocc.accel_sim import HardwareConfig, schedule_stream
    from heterocc.accel_sim.isa import Buffer
    from heterocc.accel_sim.reference_programs import tiled_gemm_program
    from heterocc.targets.vta.tiling import best_tiling

    config = HardwareConfig()
    rows, k, n = shape
    tiling, cycles = best_tiling(config, rows, k, n, 2, 0)
    default = tiled_gemm_program(config, np.zeros((rows, k), np.int8),
                                 np.zeros((n, k), np.int8), 2, output=Buffer.OUT)
    assert cycles <= schedule_stream(default.instructions, config).total_cycles
    ideal = rows * (k // config.block_in) * (n // config.block_out)
    assert ideal / cycles > 0.9  # the GEMM core is busy more than 90% of the time


def test_tuning_log_drives_the_accelerator_tiling(qdq_model, tmp_path):
    path = tmp_path / "qdq.onnx"
    onnx.save(qdq_model, str(path))
    log = tmp_path / "tune.jsonl"
    assert main(["tune", str(path), "--target", "vta", "--trials", "4", "--log", str(log),
                 "--tuner", "random"]) == 0
    assert log.read_text().count("\n") >= 4
    target = VtaTarget()
    tuned = heterocc.compile(qdq_model, target=[target, "reference"], tuning_log=str(log))
    plain = heterocc.compile(qdq_model, target="vta,reference")
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(tuned.run([x])[0], plain.run([x])[0])


def test_generic_bring_up_finds_a_corrupted_accelerator_layer(qdq_model, tmp_path, capsys):
    """``heterocc hil --target vta --device target``: the model on the simulator, checked
    layer by layer against the NumPy references; a layer whose program returns one wrong
    element is named as the first divergence, the layers before it agree."""
    compiled = heterocc.compile(qdq_model, target="vta,reference")
    report = model_hil(compiled, "vta")
    names = [c.name for c in _composites(compiled)]
    assert report.agrees and [layer.name for layer in report.layers] == names
    assert all(layer.cycles > 0 for layer in report.layers)
    victim = next(c for k in compiled.kernels.values() for c in getattr(k, "composites", ())
                  if c.name == names[1])
    honest = victim.run_device

    def corrupted(matrices):
        out = honest(matrices).copy()
        out.reshape(-1)[0] ^= 1
        return out

    victim.run_device = corrupted
    report = model_hil(compiled, "vta")
    assert [(layer.name, layer.matches) for layer in report.layers] == [
        (names[0], True), (names[1], False)]
    assert report.first_divergence.detail.startswith("output 0 differs at 1 of")
    path = tmp_path / "tiny.onnx"
    onnx.save(qdq_model, str(path))
    assert main(["hil", str(path), "--target", "vta", "--device", "target"]) == 0
    assert f"{len(names)}/{len(names)} layers checked agree" in capsys.readouterr().out


class _DriverOnly:
    """The simulator seen only through the driver protocol (allocate, write, read,
    start, wait), as a board or the RTL is."""

    def __init__(self, config):
        self.inner = SimulatorDevice(config, 1 << 26)
        self.config = config

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_weights_are_loaded_once_and_any_transport_serves(qdq_model):
    x = np.random.default_rng(9).standard_normal((1, 3, 32, 32)).astype(np.float32)
    target = VtaTarget()
    compiled = heterocc.compile(qdq_model, target=[target, "reference"])
    first = compiled.run([x])[0]
    # activations cross the link only at a region's boundary: the first program
    # writes, the last reads, the tensors between them stay in the device's DRAM
    assert target.kernels and all(
        k.last_bytes_loaded == k.program.dram.nbytes for k in target.kernels)
    assert target.kernels[0].last_bytes_in > 0 and target.kernels[-1].last_bytes_out > 0
    moved = [(k.last_bytes_in, k.last_bytes_out) for k in target.kernels]
    np.testing.assert_array_equal(compiled.run([x])[0], first)
    assert all(k.last_bytes_loaded == 0 for k in target.kernels)
    assert [(k.last_bytes_in, k.last_bytes_out) for k in target.kernels] == moved
    # the same programs through the driver protocol (what the RTL and a board implement),
    # mirrored against the simulator: bit-exact, with the timing model's cycles
    config = target.config
    board = VtaDevice(config, _DriverOnly(config), name="driver")
    mirrored = VtaTarget(hardware=sdk.MirroredDevice(board, VtaDevice(config)))
    again = heterocc.compile(qdq_model, target=[mirrored, "reference"])
    np.testing.assert_array_equal(again.run([x])[0], first)
    assert [k.last_cycles for k in mirrored.kernels] == [k.last_cycles for k in target.kernels]


def test_a_mirrored_vta_board_that_differs_is_named():
    class Flipping(VtaDevice):
        def copy_out(self, program, buffer):
            out = super().copy_out(program, buffer)
            out.reshape(-1)[3] ^= 1
            return out

    config = HardwareConfig.preset("1x16x16")
    (intrinsic,) = VtaTarget(config=config).tensor_intrinsics()
    assert intrinsic.name == "vta.gemm" and tuple(intrinsic.compute.shape) == (1, 16)
    target = VtaTarget(hardware=sdk.MirroredDevice(Flipping(config, name="chip"),
                                                   VtaDevice(config)))
    model = tiny_cnn(size=8)
    rng = np.random.default_rng(2)
    samples = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(2)]
    compiled = heterocc.compile(model, target=[target, "reference"], calibration=samples)
    with pytest.raises(sdk.AcceleratorError, match=r"differs at 1 of \d+ elements; first at "
                                                   r"index \(0, 3\): chip"):
        compiled.run([samples[0][0]])


@pytest.mark.parametrize("rows", [1, 2])
def test_a_batch_2_accelerator_leaves_layers_of_odd_rows_to_the_cpu(tmp_path, rows):
    """On hardware whose tiles hold 2 rows, a dense layer of 1 row goes to the CPU with
    the reason in the placement report (it failed at build before); 2 rows run on vta,
    bit-exact with the graph's reference."""
    pytest.importorskip("onnxruntime.quantization")
    from tests.passes.test_per_channel_axes import linear_model, quantize

    shape = (rows, 32)
    model = quantize(linear_model("MatMul", shape), tmp_path, shape)
    target = VtaTarget(config=HardwareConfig(log_batch=1))
    compiled = heterocc.compile(model, target=[target, "llvm"], placement="greedy")
    dense = [p for p in compiled.placement_report.placements if p.op == "MatMulInteger"]
    if rows == 1:
        assert dense[0].target == "llvm"
        assert "do not fill whole 2-row tiles" in dense[0].reason
    else:
        assert dense[0].target == "vta"
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(compiled.run([x])[0], evaluate(compiled.graph, [x])[0])
