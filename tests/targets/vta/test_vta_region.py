"""A region's tensors kept in the accelerator's DRAM between its programs
(``targets/vta/region.py``): bit-exact, from several threads at once, only the region's
boundary crossing the link, and the estimate of exactly those copies."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.driver import movable_tensor, relocate_tensors
from heterocc.accel_sim.isa import Buffer, Load
from heterocc.accel_sim.program import ProgramBuilder
from heterocc.errors import AcceleratorError
from heterocc.runtime.interpreter import evaluate
from heterocc.sdk import LayoutRegion

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import inputs, quantize, small_cnn  # noqa: E402

CONFIG = HardwareConfig.preset("1x16x16")


@pytest.fixture(scope="module")
def region_and_args(tmp_path_factory):
    """The small CNN's largest vta region (four convolutions, the global average pool,
    the residual addition, the flatten and the dense layer) and its inputs."""
    model = quantize(small_cnn(), tmp_path_factory.mktemp("region"), "QDQ", "QInt8")
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    regions = [n for n in compiled.graph.nodes if n.attrs.get("target") == "vta"]
    region = max(regions, key=lambda n: len(n.body.nodes))
    record: dict = {}
    evaluate(compiled.graph, [inputs(1)[0]], record=record)
    return region, [record[v] for v in region.inputs]


def _built(region):
    from heterocc.targets.vta import VtaTarget

    return VtaTarget(config=CONFIG).build(region)


def test_a_region_keeps_its_tensors_in_the_device_and_stays_bit_exact(region_and_args):
    region, args = region_and_args
    run = _built(region)
    got = run(args)
    want = evaluate(region.body, args)
    host_path = LayoutRegion(run.region.body, run.region.kernels)(args)
    for ours, theirs, reference in zip(got, host_path, want, strict=True):
        np.testing.assert_array_equal(ours, reference)
        np.testing.assert_array_equal(theirs, reference)
    # c2 -> c3, c2 -> c4, c3 -> sum, c4 -> sum, sum -> pool, pool -> flatten,
    # flatten -> dense: every tensor between two programs stays in the device's DRAM
    assert run.region.kept_on_device == 7 and run.region.converted == 2
    # what crosses the link: the two inputs converted on the host, the last output and
    # the stem's (an im2col GEMM's matrix, converted for c2), nothing else
    kernels = run.region.kernels
    written = read = 0
    for node in run.region.body.nodes:
        kernel = kernels[node.name]
        tensors = kernel.program.tensors
        written += sum(tensors[kernel.input_names[k]].rows * tensors[kernel.input_names[k]].cols
                       for k in range(len(node.inputs))
                       if (node.name, k) not in run.region.on_device)
        if run.region.reads[node.name]:
            out = tensors[kernel.output_tensor]
            read += out.rows * out.cols
    assert (run.region.bytes_in, run.region.bytes_out) == (written, read)
    assert sum(not r for r in run.region.reads.values()) == 6


def test_a_region_called_from_threads_at_once_is_bit_exact(region_and_args):
    region, args = region_and_args
    run = _built(region)
    want = evaluate(region.body, args)
    results, start = [None] * 4, threading.Barrier(4)

    def call(k):
        start.wait()
        results[k] = [run(args) for _ in range(2)]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for outputs in results:
        for got in outputs:
            for ours, reference in zip(got, want, strict=True):
                np.testing.assert_array_equal(ours, reference)


def test_the_estimate_is_the_timing_model_and_the_link_for_the_bytes_copied(
        region_and_args):
    """The composites' estimates, less what their ports say a kept tensor does not
    copy, are the region's call as the device counts it: its programs' cycles at the
    clock and the link for exactly the bytes and copies that crossed."""
    from heterocc.targets.vta.cost import VtaCostModel, call_estimate, host_link

    region, args = region_and_args
    run = _built(region)
    run(args)
    model = VtaCostModel(CONFIG, 2)
    body = run.region.body
    estimates = {n.name: model.estimate(n) for n in body.nodes}
    link = host_link(CONFIG)
    compute = sum(e.compute_s for e in estimates.values())
    transfer = sum(e.transfer_s for e in estimates.values())
    producer = {v: n for n in body.nodes for v in n.outputs}
    for name, k in run.region.on_device:  # the consumer copies nothing in
        node = next(n for n in body.nodes if n.name == name)
        port = estimates[name].inputs[k]
        assert port.key is not None and port.key == estimates[
            producer[node.inputs[k]].name].output.key
        transfer -= link.seconds(_port_bytes(run, name, k), 1)
    for node in body.nodes:  # nor does a producer whose readers all take it there out
        if not run.region.reads[node.name]:
            transfer -= link.seconds(_port_bytes(run, node.name, None), 1)
    modelled = call_estimate(run, CONFIG)
    assert modelled.compute_s == pytest.approx(compute, rel=1e-12)
    assert modelled.transfer_s == pytest.approx(transfer, rel=1e-12)
    assert modelled.detail["bytes"] == run.region.bytes_in + run.region.bytes_out


def _port_bytes(run, name: str, position: int | None) -> int:
    kernel = run.region.kernels[name]
    tensor = kernel.program.tensors[kernel.output_tensor if position is None
                                    else kernel.input_names[position]]
    return tensor.rows * tensor.cols


def test_a_moved_tensor_takes_only_transfers_within_it():
    builder = ProgramBuilder(CONFIG)
    a = builder.tensor("A", Buffer.INP, shape=(4, 16))
    builder.tensor("B", Buffer.INP, shape=(4, 16))
    builder.emit(builder.load_tiles(a, 0, 0, 0, 4, 1))
    builder.finish()
    program = builder.build()
    unit = CONFIG.inp_tile_bytes
    moved = relocate_tensors(program.instructions, CONFIG, 8192, program.tensors,
                             {"A": 4096 * 3})
    assert moved[0].dram_base == 4096 * 3 // unit
    assert movable_tensor(program.instructions, CONFIG, program.tensors["A"])
    # a transfer that runs from A into B cannot move with A
    straddling = [Load(buffer=Buffer.INP, sram_base=0, dram_base=a.tile_base + 2, y_size=1,
                       x_size=4, x_stride=4)]
    assert not movable_tensor(straddling, CONFIG, program.tensors["A"])
    with pytest.raises(AcceleratorError, match="does not lie within tensor 'A'"):
        relocate_tensors(straddling, CONFIG, 0, program.tensors, {"A": 4096})


@pytest.mark.rtl
@pytest.mark.hil
@pytest.mark.slow
def test_a_region_keeps_its_tensors_in_the_rtl_dram_bit_exactly():
    """The linked streams on the RTL (Icarus), mirrored against the simulator: the
    tensors a region's programs hand over stay in the RTL's DRAM, every read back agrees
    element for element, and the model's output is the simulated one."""
    from heterocc.accel_sim.rtl_device import RtlDevice
    from heterocc.models import tiny_cnn
    from heterocc.sdk import MirroredDevice
    from heterocc.targets.vta import VtaTarget
    from heterocc.targets.vta.device import VtaDevice
    from tests.hw.conftest import BUILD_ROOT, require_rtl_tools

    require_rtl_tools("icarus")
    rtl = VtaDevice(CONFIG, RtlDevice(CONFIG, "icarus", build_root=BUILD_ROOT), name="rtl")
    target = VtaTarget(config=CONFIG, hardware=MirroredDevice(rtl, VtaDevice(CONFIG)))
    rng = np.random.default_rng(4)
    samples = [[rng.standard_normal((1, 3, 8, 8)).astype(np.float32)] for _ in range(2)]
    model = tiny_cnn(size=8)
    compiled = heterocc.compile(model, target=[target, "reference"], calibration=samples,
                                placement="greedy")
    simulated = heterocc.compile(model, target="vta,reference", calibration=samples,
                                 placement="greedy")
    np.testing.assert_array_equal(compiled.run([samples[0][0]])[0],
                                  simulated.run([samples[0][0]])[0])
    regions = [f for f in compiled.graph.nodes if f.attrs.get("target") == "vta"]
    kept = [k for k in target.kernels if k.last_copies < len(k.input_names) + 1]
    assert regions and kept and all(k.last_cycles > 0 for k in target.kernels)
