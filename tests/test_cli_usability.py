"""What users of other compilers' command lines expect: --version, "did you mean", log
levels on every command, latency statistics, .npz inputs and outputs, warnings for
flags that do not apply, quiet broken pipes, stream files from a model."""

import subprocess
import sys

import numpy as np
import onnx
import pytest

import heterocc
from heterocc import __version__
from heterocc.cli import main
from heterocc.models import tiny_cnn


def _save(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(path))
    return path


def test_version_and_did_you_mean(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["compil", "x.onnx"])
    assert "did you mean 'compile'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compile", "x.onnx", "--tagret", "vta"])
    assert "did you mean --target" in capsys.readouterr().err
    assert main(["compile", str(_save(tmp_path)), "--target", "vt"]) == 2
    assert "did you mean 'vta'" in capsys.readouterr().err
    assert main(["compile", str(_save(tmp_path)), "--target", "llvm -mcup=znver3"]) == 2
    assert "did you mean 'mcpu'" in capsys.readouterr().err


def test_log_levels_on_every_command(tmp_path, capsys):
    path = _save(tmp_path)
    # -q hides progress (info) and keeps warnings; -qq keeps errors only
    assert main(["run", str(path), "--target", "vta,llvm", "-q"]) == 0
    assert "warning: vta took no node" in capsys.readouterr().err
    assert main(["run", str(path), "--target", "vta,llvm", "-qq"]) == 0
    assert "vta took no node" not in capsys.readouterr().err
    assert main(["run", str(path), "--target", "vta,llvm", "--log-level", "error"]) == 0
    assert "vta took no node" not in capsys.readouterr().err
    for command in (["targets"], ["accel", "disasm"], ["accel", "build"], ["tune"], ["hil"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert "--log-level" in capsys.readouterr().out


def test_run_repeat_prints_latency_statistics_with_npz_inputs_and_outputs(tmp_path, capsys):
    path = _save(tmp_path)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    assert main(["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--repeat", "5",
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    out = capsys.readouterr().out
    assert "latency over 5 runs (ms): mean" in out and "p99" in out
    (expected,) = heterocc.compile(str(path), target="reference").run({"input": x})
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["probabilities"], expected,
                               rtol=1e-4, atol=1e-6)


def test_target_given_for_an_artifact_warns_and_strict_refuses(tmp_path, capsys):
    path = _save(tmp_path)
    art = tmp_path / "art"
    assert main(["compile", str(path), "-o", str(art)]) == 0
    capsys.readouterr()
    assert main(["run", str(art), "--target", "vta,llvm"]) == 0
    assert "--target does not apply to an artifact" in capsys.readouterr().err
    assert main(["run", str(art), "--target", "vta,llvm", "--strict"]) == 2


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    from heterocc.accel_sim import HardwareConfig, write_stream_file
    from heterocc.accel_sim.reference_programs import tiled_gemm_program

    config = HardwareConfig()
    rng = np.random.default_rng(0)
    program = tiled_gemm_program(config, rng.integers(-8, 8, (64, 64), dtype=np.int8),
                                 rng.integers(-8, 8, (64, 64), dtype=np.int8))
    stream = tmp_path / "gemm.stream"
    write_stream_file(stream, config, program.instructions, program.uops)
    piped = subprocess.run(f"'{sys.executable}' -m heterocc.cli accel disasm '{stream}' "
                           "| head -2", shell=True, capture_output=True, text=True, check=True)
    assert len(piped.stdout.splitlines()) == 2
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


def test_accel_build_writes_streams_that_check_and_disasm_read(tmp_path, capsys):
    path = _save(tmp_path)
    samples = tmp_path / "cal.npz"
    rng = np.random.default_rng(0)
    np.savez(samples, input=rng.standard_normal((2, 1, 3, 32, 32)).astype(np.float32))
    assert main(["accel", "build", str(path), "--calibrate", str(samples),
                 "-o", str(tmp_path / "tiny.stream")]) == 0
    written = [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()
               if line.startswith("wrote ")]
    streams = [p for p in written if p.endswith(".stream")]
    assert streams and all(p[:-len(".stream")] + ".dram" in written for p in streams)
    assert main(["accel", "check", streams[0]]) == 0
    assert main(["accel", "disasm", streams[0]]) == 0
    assert "FINISH" in capsys.readouterr().out
