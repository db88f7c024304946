import json

import numpy as np
import onnx

from heterocc.cli import main
from heterocc.models import tiny_cnn


def _save(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(path))
    return path


def test_inspect_prints_functions_and_counts(tmp_path, capsys):
    path = _save(tmp_path)
    dot = tmp_path / "g.dot"
    assert main(["inspect", str(path), "--dot", str(dot)]) == 0
    out = capsys.readouterr().out
    assert "fused_conv_add_relu" in out and "ONNX nodes: 15" in out
    assert dot.read_text().startswith("digraph")


def test_inspect_json(tmp_path, capsys):
    assert main(["inspect", str(_save(tmp_path)), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["onnx_nodes"] == 15 and counts["functions"] >= 1
    assert "BatchNormalization" not in counts["op_counts"]


def test_run_with_inputs_and_profile(tmp_path, capsys):
    path = _save(tmp_path)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outdir = tmp_path / "out"
    assert main(["run", str(path), "--input", f"input={tmp_path / 'x.npy'}", "--profile",
                 "--output-dir", str(outdir)]) == 0
    out = capsys.readouterr().out
    assert "probabilities: float32[1, 10]" in out and "ms/call" in out
    assert np.load(outdir / "probabilities.npy").shape == (1, 10)


def test_errors_are_reported_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08garbage")
    assert main(["inspect", str(bad)]) == 2
    assert "heterocc: error:" in capsys.readouterr().err


def test_wrong_input_shape_is_an_error(tmp_path, capsys):
    path = _save(tmp_path)
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    assert main(["run", str(path), "--input", f"input={tmp_path / 'x.npy'}"]) == 2
    assert "shape (1, 3, 8, 8)" in capsys.readouterr().err


def test_dump_ir_writes_one_file_per_pass(tmp_path):
    path = _save(tmp_path)
    assert main(["compile", str(path), "--dump-ir", str(tmp_path / "ir")]) == 0
    assert any(p.name.endswith("fuse_ops.txt") for p in (tmp_path / "ir").iterdir())


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "top-1: float32" in out and "cycles/call" in out
    assert "conv2d_bias_requantize" in out
    # the ORT-quantized (asymmetric, per-channel) model runs on the accelerator too
    assert "quantized by onnxruntime's quant_pre_process and quantize_static" in out
    assert "vta 100.0%" in out


def test_compile_to_an_artifact_then_run_it(tmp_path, capsys):
    path = _save(tmp_path)
    out = tmp_path / "artifact"
    assert main(["compile", str(path), "-o", str(out)]) == 0
    assert (out / "manifest.json").exists()
    assert main(["run", str(out)]) == 0
    assert "probabilities: float32[1, 10]" in capsys.readouterr().out


def test_accel_disasm_and_check_through_the_main_cli(tmp_path, capsys):
    from heterocc.accel_sim import HardwareConfig, write_stream_file
    from heterocc.accel_sim.reference_programs import tiled_gemm_program

    config = HardwareConfig()
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 8, (32, 32), dtype=np.int8)
    w = rng.integers(-8, 8, (32, 32), dtype=np.int8)
    program = tiled_gemm_program(config, a, w)
    path = tmp_path / "gemm.stream"
    write_stream_file(path, config, program.instructions, program.uops)
    assert main(["accel", "disasm", str(path)]) == 0
    listing = capsys.readouterr().out
    assert "GEMM" in listing and "FINISH" in listing
    assert main(["accel", "check", str(path)]) == 0
    assert "cycles" in capsys.readouterr().out.lower()


def _calibration_npz(tmp_path, count=4):
    rng = np.random.default_rng(0)
    path = tmp_path / "calibration.npz"
    np.savez(path, input=rng.standard_normal((count, 1, 3, 32, 32)).astype(np.float32))
    return path


def test_quantize_writes_a_qdq_model_that_onnxruntime_runs(tmp_path, capsys):
    import onnxruntime as ort

    out = tmp_path / "tiny_qdq.onnx"
    assert main(["quantize", str(_save(tmp_path)), "--calibrate",
                 str(_calibration_npz(tmp_path)), "-o", str(out)]) == 0
    assert "calibrated on 4 samples" in capsys.readouterr().out
    model = onnx.load(str(out))
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) >= 4
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (y,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})
    assert y.shape == (1, 10) and np.isclose(y.sum(), 1.0, atol=1e-3)


def test_run_and_inspect_calibrate_on_the_command_line(tmp_path, capsys):
    path, samples = _save(tmp_path), str(_calibration_npz(tmp_path))
    assert main(["inspect", str(path), "--target", "vta,llvm", "--calibrate", samples,
                 "--placement", "greedy"]) == 0
    out = capsys.readouterr().out
    assert "ConvInteger" in out and "vta" in out  # the placement report of the int8 graph
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 32, 32), np.float32))
    assert main(["run", str(path), "--target", "vta,llvm", "--calibrate", samples,
                 "--placement", "greedy", "--input", f"input={tmp_path / 'x.npy'}",
                 "--profile"]) == 0
    assert "conv2d_bias_requantize" in capsys.readouterr().out


def test_calibrate_names_a_bad_sample_file(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not an npz")
    assert main(["compile", str(_save(tmp_path)), "--calibrate", str(bad)]) == 2
    assert "cannot load samples from" in capsys.readouterr().err


def test_partition_dot_labels_functions_with_the_fallback_target(tmp_path):
    dot = tmp_path / "p.dot"
    samples = str(_calibration_npz(tmp_path))
    assert main(["inspect", str(_save(tmp_path)), "--target", "vta,llvm", "--calibrate", samples,
                 "--placement", "greedy", "--dot", str(dot)]) == 0
    text = dot.read_text()
    assert "[vta]" in text and "[llvm]" in text and "[reference]" not in text


def test_hil_of_a_model_goes_to_the_target_hook(tmp_path, capsys, monkeypatch):
    from heterocc.targets.vta import VtaTarget

    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(size=8), str(path))
    replayed = []
    monkeypatch.setattr(VtaTarget, "hil_command",
                        lambda self, args: replayed.append(args.stream) or 0)
    assert main(["hil", str(path), "--device", "rtl"]) == 0
    assert replayed == [str(path)]
    assert main(["hil", str(path), "--target", "reference"]) == 2
    assert "target 'reference' cannot replay a model" in capsys.readouterr().err
