"""Bring-up of the dot-product array: ``heterocc hil --target dotprod`` runs a model on
the array's device and names the first layer whose output differs from its reference;
weights stay on the device between calls."""

from dataclasses import dataclass

import numpy as np
import onnx
import pytest
from dotprod_accel import DotProdTarget, SimulatorDevice
from dotprod_accel.models import two_layer_mlp

import heterocc
from heterocc import cli
from heterocc.sdk import MirroredDevice, registry
from heterocc.sdk.hil import model_hil

RNG = np.random.default_rng(11)
FIRST, SECOND = "dotprod_dense_bias", "dotprod_dense"


@dataclass
class CorruptingChip(SimulatorDevice):
    """A chip whose runs of one program (by name) return its first output element with
    the lowest bit flipped."""

    program: str = ""
    name: str = "corrupting chip"

    def copy_out(self, program, buffer):
        result = super().copy_out(program, buffer)
        if program.name == self.program:
            result.reshape(-1)[0] ^= 1
        return result


def test_healthy_array_agrees_layer_by_layer():
    report = model_hil(two_layer_mlp(), "dotprod")
    assert report.agrees and report.first_divergence is None
    assert [layer.name for layer in report.layers] == [FIRST, SECOND]
    assert all(layer.cycles > 0 for layer in report.layers)


@pytest.mark.parametrize("corrupted", [FIRST, SECOND])
def test_a_corrupted_layer_is_found(corrupted):
    target = DotProdTarget(hardware=CorruptingChip(program=corrupted))
    report = model_hil(two_layer_mlp(), target, stop_at_first=False)
    assert not report.agrees
    # the first layer's wrong element (-290 for -289) is negative: the CPU's ReLU after it
    # hides it from the model's outputs, not from the layer-by-layer check
    assert report.outputs_match == (corrupted == FIRST)
    assert report.first_divergence.name == corrupted
    verdicts = {layer.name: layer.matches for layer in report.layers}
    assert verdicts == {FIRST: corrupted != FIRST, SECOND: corrupted != SECOND}
    assert "output 0 differs at 1 of" in report.first_divergence.detail


def test_a_mirrored_board_is_stopped_at_the_layer_where_it_leaves_the_simulator():
    board = MirroredDevice(CorruptingChip(program=SECOND), SimulatorDevice())
    report = model_hil(two_layer_mlp(), DotProdTarget(hardware=board))
    assert "buffer 'acc' differs" in report.error  # the model's own run stops there
    assert [(layer.name, layer.matches) for layer in report.layers] == [
        (FIRST, True), (SECOND, False)]
    assert "the device raised: buffer 'acc' differs" in report.first_divergence.detail


@pytest.fixture
def faulty_target(monkeypatch):
    """``dotprod-faulty``: the array with its second layer corrupted, registered for the
    command line (in a registry copy, undone after the test)."""
    monkeypatch.setattr(registry, "_TARGETS", dict(registry._TARGETS))

    def make():  # functions are named after their target
        return DotProdTarget(name="dotprod-faulty",
                             hardware=CorruptingChip(program="dotprod-faulty_dense"))

    registry.register_target("dotprod-faulty", make, "the array with a corrupted layer")


def test_hil_command_bisects_to_the_corrupted_layer(tmp_path, capsys, faulty_target):
    path = tmp_path / "mlp.onnx"
    onnx.save(two_layer_mlp(), str(path))
    x = RNG.integers(-128, 128, (4, 20)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["hil", str(path), "--target", "dotprod", "--input",
                     f"x={tmp_path / 'x.npy'}"]) == 0
    out = capsys.readouterr().out
    assert f"{FIRST} (dense_bias)" in out and "2/2 layers checked agree" in out
    assert cli.main(["hil", str(path), "--target", "dotprod-faulty"]) == 1
    out = capsys.readouterr().out
    assert "first diverging layer: dotprod-faulty_dense (dense)" in out
    assert out.splitlines()[0].startswith("dotprod-faulty_dense_bias (dense_bias)")
    assert out.splitlines()[0].endswith("agrees")


def test_rtl_replay_is_only_for_targets_with_a_hook(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(two_layer_mlp(), str(path))
    assert cli.main(["hil", str(path), "--target", "dotprod", "--device", "rtl"]) == 2
    assert "no hil_command hook" in capsys.readouterr().err


def test_weights_are_written_once_per_loaded_model():
    compiled = heterocc.compile(two_layer_mlp(), target="dotprod,reference")
    compiled.enable_profiling()
    x = RNG.integers(-128, 128, (4, 20)).astype(np.int8)
    first = compiled.run([x])[0]
    kernels = [c for k in compiled.kernels.values() for c in getattr(k, "composites", ())]
    loaded = {k.name: k.last_bytes_loaded for k in kernels}
    # layer 1: 12 x 24 int8 weights and 12 int16 biases; layer 2: 8 x 16 int8 weights
    assert loaded == {FIRST: 12 * 24 + 2 * 12, SECOND: 8 * 16}
    # each call writes only the activations: 4 rows of 24 and of 16 int8 values
    assert {k.name: k.last_bytes_in for k in kernels} == {FIRST: 4 * 24, SECOND: 4 * 16}
    np.testing.assert_array_equal(compiled.run([x])[0], first)
    assert all(k.last_bytes_loaded == 0 for k in kernels)
    assert {k.name: k.last_bytes_in for k in kernels} == {FIRST: 4 * 24, SECOND: 4 * 16}
    rows = [line.split() for line in compiled.profile_report().splitlines()[1:]
            if " dotprod " in line]
    assert sorted(int(row[7]) for row in rows) == sorted(loaded.values())
