"""``network_hil``'s bookkeeping without an HDL simulator: an RTL stand-in that runs the
functional simulator (every layer agrees, progress and the table follow), one that
stores nothing (every layer must differ, although the device's image of the run already
holds the simulator's outputs), and one that corrupts a byte of the first layer's output
(the next layer must read it: the DRAM is carried). The real RTL runs in
tests/hw/test_network_hil.py."""

import contextlib
import logging

import numpy as np
import pytest

from heterocc.accel_sim import decode_stream
from heterocc.accel_sim.rtl_device import RtlRunResult, bench_timing_config
from heterocc.accel_sim.simulator import run_stream
from heterocc.models import tiny_cnn
from heterocc.targets.vta import hil


class FakeRtl:
    """Runs each stream on the functional simulator (``stores`` False: runs nothing and
    returns the image as it came), reporting progress as the bench does."""

    stores = True

    def __init__(self, config, simulator, build_root, memory):
        self.config, self.memory = config, memory

    def build(self):
        pass

    def run(self, runs, progress=None):
        results = []
        for index, run in enumerate(runs):
            dram = run.dram.copy()
            cycles = 0
            if self.stores:
                stream = dram[run.instruction_address:
                              run.instruction_address + 16 * run.instruction_count]
                instructions = decode_stream(stream.tobytes(), self.config)
                report = run_stream(instructions, bench_timing_config(self.config, self.memory),
                                    dram, check=False)
                cycles = report.timing.total_cycles
            results.append(RtlRunResult(dram, True, False, cycles, run.instruction_count,
                                        cycles, 0.01))
            if progress:
                progress(index, results[-1])
        return results

    @contextlib.contextmanager
    def session(self):
        """One process for the whole model: runs one at a time as the model calls."""
        yield Session(self)


class Session:
    def __init__(self, rtl):
        self.rtl = rtl

    def run(self, run):
        return self.rtl.run([run])[0]


class CorruptingRtl(FakeRtl):
    """Flips the top bit of the first byte the first run of a session writes (an element
    of the first layer's output tensor: the output is written from its first tile)."""

    @contextlib.contextmanager
    def session(self):
        rtl = self

        class Corrupting(Session):
            runs = 0

            def run(self, run):
                result = rtl.run([run])[0]
                if Corrupting.runs == 0:
                    written = np.flatnonzero(result.dram[:run.dram.size] != run.dram)[0]
                    result.dram[written] ^= 0x80
                Corrupting.runs += 1
                return result

        yield Corrupting(self)


class LazyRtl(FakeRtl):
    stores = False


@pytest.fixture
def fake(monkeypatch):
    def use(cls):
        monkeypatch.setattr(hil, "RtlSimulator", cls)
    return use


def test_every_layer_agrees_with_progress_and_a_table(fake, caplog):
    fake(FakeRtl)
    with caplog.at_level(logging.INFO, logger="heterocc.hil"):
        report = hil.network_hil(tiny_cnn(size=8), name="tiny")
    assert len(report.layers) == 5
    assert report.agrees and report.deviation == 0 and report.max_deviation == 0
    assert report.rtl_cycles == report.model_cycles > 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("layer ")]
    assert [line.split()[1] for line in lines] == [f"{i}/5" for i in range(1, 6)]
    table = report.table().splitlines()
    assert table[0].split()[:3] == ["#", "function", "instr"]
    total = next(line for line in table if line.split()[0] == "total").split()
    assert total[1:4] == [str(sum(layer.comparison.instructions for layer in report.layers)),
                          str(report.rtl_cycles), str(report.model_cycles)]
    assert total[-2:] == ["5/5", "5/5"]
    assert table[-1].startswith("tiny on the verilator RTL, DRAM carried: 5/5 accelerator "
                                "functions agree")
    assert "outputs agree with the simulator's and agree with the reference" in table[-1]


def test_an_rtl_that_stores_nothing_differs_everywhere(fake):
    fake(LazyRtl)
    report = hil.network_hil(tiny_cnn(size=8), name="tiny")
    assert not report.agrees
    assert not any(layer.comparison.matches for layer in report.layers)
    assert not any(layer.reference_matches for layer in report.layers)
    first = report.layers[0]
    # bisected to an instruction of the layer's stream
    assert first.comparison.first_divergence is not None
    assert "differs" in first.reference_detail
    assert "DIFFERS" in report.table()
    assert report.rtl_cycles == 0 and report.deviation == -1


def test_the_dram_is_carried_from_layer_to_layer(fake):
    """A byte the RTL wrote wrong in layer 1 is what layer 2 reads: layer 2's RTL and
    simulator agree on that input, and both differ from the reference; the model's
    outputs differ from the simulator-run model's."""
    fake(CorruptingRtl)
    report = hil.network_hil(tiny_cnn(size=8), name="tiny", locate=False)
    first, second = report.layers[:2]
    assert not first.comparison.matches and not first.reference_matches
    assert second.comparison.matches
    assert not second.reference_matches, "layer 2 did not read layer 1's RTL output"
    assert "differs" in second.reference_detail
    assert not report.outputs_match_simulator and not report.agrees
    assert "DIFFER from the simulator's" in report.table()


def test_hil_command_takes_inputs(fake, tmp_path, capsys):
    """``heterocc hil MODEL --input x=FILE.npy``: the network runs on the given input."""
    import onnx

    from heterocc.cli import main

    fake(FakeRtl)
    model = tiny_cnn(size=8)
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    name = model.graph.input[0].name
    np.save(tmp_path / "x.npy", np.random.default_rng(3).standard_normal((1, 3, 8, 8))
            .astype(np.float32))
    assert main(["hil", str(path), "--input", f"{name}={tmp_path / 'x.npy'}"]) == 0
    assert "5/5 accelerator functions agree" in capsys.readouterr().out
    assert main(["hil", str(path), "--input", "nofile"]) == 2


def test_accel_build_dram_images_hold_no_output(tmp_path):
    """``accel build``'s .dram images have the output tensor overwritten (as the network
    replay's), and running the stream from one gives the last run's image back."""
    import heterocc
    from heterocc.targets.vta import VtaTarget
    from heterocc.targets.vta.streams import UNWRITTEN, write_streams

    target = VtaTarget()
    rng = np.random.default_rng(0)
    calibration = [{"input": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
                   for _ in range(2)]
    compiled = heterocc.compile(tiny_cnn(size=8), target=[target, "reference"],
                                calibration=calibration)
    compiled.run({"input": calibration[0]["input"]})
    written = write_streams(target.kernels, tmp_path)
    for kernel in target.kernels:
        image = np.fromfile(tmp_path / f"{kernel.name}.dram", dtype=np.uint8)
        tensor = kernel.program.tensors[kernel.output_tensor]
        output = slice(tensor.byte_address, tensor.byte_address + tensor.nbytes)
        assert (image[output] == UNWRITTEN).all()
        assert not np.array_equal(image, kernel.last_input)
        run_stream(kernel.program.instructions, kernel.config, image, check=False)
        np.testing.assert_array_equal(image, kernel.last_input)
    assert len(written) == 2 * len(target.kernels)


def test_an_rtl_session_whose_simulator_died_says_so(tmp_path):
    """A run posted to a session whose HDL simulator has exited raises, naming the run and
    the simulator's error, instead of waiting for a reading that never comes; ``end``
    posts the end marker the bench stops at."""
    import json
    import threading

    from heterocc.accel_sim import HardwareConfig
    from heterocc.accel_sim.rtl_device import RtlRun, RtlSession, RtlSimulator
    from heterocc.errors import AcceleratorError

    config = HardwareConfig.preset("1x16x16")
    simulator = RtlSimulator(config, "verilator", tmp_path)
    process = threading.Thread(target=lambda: None)
    process.start()
    process.join()
    session = RtlSession(simulator, tmp_path, process, [RuntimeError("segfault")])
    with pytest.raises(AcceleratorError, match="ended during run 0: segfault"):
        session.run(RtlRun(np.zeros(64, np.uint8), 0, 1))
    assert json.loads((tmp_path / "run0.json").read_text())["insn_count"] == 1
    session.end()
    assert json.loads((tmp_path / "run1.json").read_text()) == {"end": True}
    with pytest.raises(AcceleratorError, match="ended"):
        session.run(RtlRun(np.zeros(64, np.uint8), 0, 1))
