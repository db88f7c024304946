"""Devices at once in a plain ``run()``: the lanes of a plan, the SDK's asynchronous
device interface (vta's device over the simulator, the driver protocol, the PYNQ driver
on tests/hw's stand-in board and the RTL), independent branches on vta and llvm run at
once with the same bits as one after another, their timeline, and a failing device
call."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc import sdk
from heterocc.accel_sim import HardwareConfig, SimulatorDevice, decode_stream
from heterocc.accel_sim.fpga_device import FpgaDevice
from heterocc.accel_sim.hil import simulate
from heterocc.accel_sim.rtl_device import RtlRun, RtlRunResult
from heterocc.ir.graph import FUNCTION_OP, Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.runtime.executor import GraphExecutor
from heterocc.runtime.overlap import HOST, plan_lanes
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.device import VtaDevice
from tests.hw.test_transports_and_hil import _Board

CONFIG = HardwareConfig()
SHAPE = (1, 16, 8, 8)


# --- the plan's lanes ---------------------------------------------------------------


def test_lanes_overlap_only_where_a_device_step_has_an_independent_peer():
    # a chain host -> vta -> host: nothing to overlap
    assert not plan_lanes([HOST, "vta", HOST], [(), (0,), (1,)]).overlaps
    # two branches of one input, one on vta and one on the host
    plan = plan_lanes([HOST, "vta", HOST, HOST], [(), (0,), (0,), (1, 2)])
    assert plan.overlaps and plan.devices == ["vta"] and plan.readers[0] == (1, 2)
    # independent branches on the same lane, or on the host alone, do not
    assert not plan_lanes(["vta", "vta"], [(), ()]).overlaps
    assert not plan_lanes([HOST, HOST], [(), ()]).overlaps
    # a step reached through another lane is not independent of it
    assert not plan_lanes(["vta", HOST, HOST], [(), (0,), (1,)]).overlaps


def test_a_queue_runs_a_call_from_its_own_worker_at_once_and_its_thread_ends_with_it():
    import gc

    from heterocc.runtime.overlap import DeviceQueue

    def nested() -> int:
        queue = DeviceQueue("nested")
        # a region's executor inside a device call submits to the same lane: it cannot
        # wait behind the call that submits it
        return queue.submit(lambda: queue.submit(lambda: 5).result()).result(10)

    assert nested() == 5
    gc.collect()
    deadline = time.monotonic() + 10
    while any(t.name.startswith("device-nested") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a dropped queue's worker thread lives on"
        time.sleep(0.01)


def _submit_in_child(queue, connection):
    connection.send(queue.submit(lambda: 7).result(30))


def test_a_queue_used_before_a_fork_serves_the_child():
    """A forked child inherits the queue without its worker thread; its calls must not
    wait forever (a compiled model shared with forked workers)."""
    import multiprocessing

    from heterocc.runtime.overlap import DeviceQueue

    queue = DeviceQueue("forked")
    assert queue.submit(lambda: 1).result(10) == 1  # the worker thread is running
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    worker = context.Process(target=_submit_in_child, args=(queue, child))
    worker.start()
    worker.join(60)
    if worker.exitcode is None:
        worker.kill()
    assert worker.exitcode == 0 and parent.recv() == 7
    assert queue.submit(lambda: 2).result(10) == 2  # the parent's worker is untouched
    queue.close()


class _Gate:
    """A stand-in device kernel that finishes only once the host kernel has started:
    run one after another it would never finish (it gives up after a while)."""

    device = "gate-device"

    def __init__(self):
        self.host_started = threading.Event()
        self.waited = None

    def __call__(self, args):
        self.waited = self.host_started.wait(timeout=20)
        return [args[0] + 1]


def _two_branches() -> Graph:
    """x -> f_dev (on a device) and x -> f_cpu (on the host), both outputs."""
    x = Value("x", TensorType((4,), "float32"))
    nodes = []
    for name in ("f_dev", "f_cpu"):
        a, r = Value("a", x.type), Value("r", x.type)
        body = Graph([a], [r], [Node("Relu", [a], [r], name=f"{name}_op")])
        nodes.append(Node(FUNCTION_OP, [x], [Value(f"{name}_y", x.type)], name=name,
                          body=body))
    return Graph([x], [n.outputs[0] for n in nodes], nodes)


def test_a_plain_run_calls_the_host_while_the_device_call_is_in_flight():
    gate = _Gate()

    def host(args):
        gate.host_started.set()
        return [args[0] * 2]

    graph = _two_branches()
    executor = GraphExecutor(graph, {"f_dev": gate, "f_cpu": host},
                             {"f_dev": "dev", "f_cpu": "llvm"})
    assert executor.lanes.lanes == ("dev", HOST) and executor.lanes.overlaps
    x = np.arange(4, dtype=np.float32)
    dev, cpu = executor.execute([x])
    assert gate.waited  # the host ran while the device call waited for it
    np.testing.assert_array_equal(dev, x + 1)
    np.testing.assert_array_equal(cpu, x * 2)


def test_a_failing_host_branch_waits_for_the_device_call_then_raises():
    def device_kernel(args):
        time.sleep(0.05)
        return [args[0]]

    device_kernel.device = "dev"

    def host(args):
        raise ValueError("the CPU kernel failed")

    executor = GraphExecutor(_two_branches(), {"f_dev": device_kernel, "f_cpu": host},
                             {"f_dev": "dev", "f_cpu": "llvm"})
    with pytest.raises(ValueError, match="the CPU kernel failed") as info:
        executor.execute([np.zeros(4, np.float32)])
    assert any("'f_cpu'" in note and "the host" in note for note in info.value.__notes__)


# --- the asynchronous device interface ----------------------------------------------


class _PlainDevice:
    """A device with copy_in / run / copy_out only (no submit / wait)."""

    name = "plain"

    def __init__(self):
        self.runs = 0

    def copy_in(self, program, buffer, array):
        pass

    def run(self, program):
        self.runs += 1
        return sdk.DeviceTiming(7)

    def copy_out(self, program, buffer):
        return np.zeros(1)


def test_a_device_without_submit_is_wrapped_and_vta_is_asynchronous():
    plain = _PlainDevice()
    wrapped = sdk.asynchronous(plain)
    assert isinstance(wrapped, sdk.SynchronousDevice) and isinstance(wrapped, sdk.AsyncDevice)
    call = wrapped.submit("prog")
    assert call.done() and wrapped.wait(call).cycles == 7 and plain.runs == 1
    assert sdk.run_on(plain, "prog").cycles == 7
    vta = VtaDevice(CONFIG)
    assert sdk.asynchronous(vta) is vta and isinstance(vta, sdk.AsyncDevice)


def test_a_call_past_its_time_out_names_the_program_and_the_device():
    import concurrent.futures as cf

    call = sdk.DeviceCall("board", "conv1", cf.Future())
    with pytest.raises(sdk.AcceleratorError, match="program conv1 on device board did not "
                                                   "finish within 0.01 s"):
        call.result(0.01)


class _SimulatedRtl:
    """The RTL bench's interface (``run(runs) -> results``) answered by the simulator, so
    that tests/hw's PYNQ stand-in board, whose START runs its RTL, runs here without
    one."""

    def __init__(self, config: HardwareConfig):
        self.config = config

    def run(self, runs: list[RtlRun]) -> list[RtlRunResult]:
        results = []
        for run in runs:
            words = run.dram[run.instruction_address:][:16 * run.instruction_count]
            stream = decode_stream(words.tobytes(), self.config)
            dram, cycles = simulate(stream, self.config, run.dram)
            results.append(RtlRunResult(dram, True, False, cycles, len(stream), cycles, 0.0))
        return results


def _board(config: HardwareConfig, hangs: bool = False):
    """tests/hw's PYNQ stand-in (MMIO and ``allocate`` over one memory) with the
    simulator behind its registers, or with nothing (a START that never finishes)."""
    return _Board(config, None if hangs else _SimulatedRtl(config),
                  memory=np.zeros(1 << 24, np.uint8))


def _fpga(config: HardwareConfig, hangs: bool = False) -> FpgaDevice:
    board = _board(config, hangs)
    return FpgaDevice(config, board, board.allocate, poll_interval_s=0.0 if not hangs
                      else 0.001)


def _driver_only(config):
    """The simulator seen through the driver protocol alone (start / wait)."""
    inner = SimulatorDevice(config, 1 << 26)

    class DriverOnly:
        def __getattr__(self, name):
            return getattr(inner, name)

    return DriverOnly()


# --- a model with independent branches on vta and llvm ------------------------------


def _branches_model(tmp_path) -> onnx.ModelProto:
    """x -> Conv+Relu (quantized by onnxruntime: vta) and x -> SiLU -> average pool (float:
    llvm), two outputs: neither branch reads the other."""
    from onnxruntime import quantization as oq

    from tests.targets.vta.ort_models import _Calibration

    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.3)
                                .astype(np.float32), "w")
    b = numpy_helper.from_array((rng.standard_normal(16) * 0.1).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["conv_out"]),
             helper.make_node("Sigmoid", ["input"], ["s"]),
             helper.make_node("Mul", ["input", "s"], ["silu"]),
             helper.make_node("GlobalAveragePool", ["silu"], ["pool_out"])]
    graph = helper.make_graph(
        nodes, "branches", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("conv_out", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("pool_out", TensorProto.FLOAT, None)], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    src, dst = tmp_path / "branches.onnx", tmp_path / "branches_qdq.onnx"
    onnx.save(model, str(src))
    oq.quantize_static(str(src), str(dst), _Calibration(SHAPE),
                       quant_format=oq.QuantFormat.QDQ, op_types_to_quantize=["Conv"],
                       per_channel=True)
    return onnx.load(str(dst))


@pytest.fixture(scope="module")
def branches(tmp_path_factory):
    pytest.importorskip("onnxruntime.quantization")
    return _branches_model(tmp_path_factory.mktemp("branches"))


def _inputs(count: int) -> list[np.ndarray]:
    return [np.random.default_rng(50 + i).standard_normal(SHAPE).astype(np.float32)
            for i in range(count)]


def _compile(model, hardware=None):
    target = VtaTarget() if hardware is None else VtaTarget(hardware=hardware)
    return heterocc.compile(model, target=[target, "llvm"], placement="greedy")


def _sequential(compiled, x) -> list[np.ndarray]:
    """The outputs of one function after another, in graph order, on this thread."""
    exe = next(iter(compiled._cache.values()))
    exe.executor.overlap = False
    try:
        return compiled.run([x])
    finally:
        exe.executor.overlap = True


def test_branches_on_vta_and_llvm_overlap_with_the_bits_of_a_sequential_run(branches):
    compiled = _compile(branches)
    lanes = next(iter(compiled._cache.values())).executor.lanes
    assert lanes.overlaps and lanes.devices == ["vta"] and HOST in lanes.lanes
    for x in _inputs(3):
        got = compiled.run([x])
        for a, b in zip(got, _sequential(compiled, x), strict=True):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    # the timeline of one run: the vta function (its host part measured in the replay,
    # its transfer and compute modelled from its bytes and cycles at the clock) overlaps
    # the llvm function's (measured)
    x = _inputs(1)[0]
    result = compiled.run_timeline([x])
    assert result.replay_bit_exact
    assert all(a.tobytes() == b.tobytes()
               for a, b in zip(result.outputs[0], _sequential(compiled, x), strict=True))
    vta = [s for s in result.pipelined if s.lane.startswith("vta")]
    cpu = [s for s in result.pipelined if s.lane == "llvm"]
    assert vta and cpu and {s.kind for s in vta if s.lane != "vta host"} == {"modelled"}
    assert {s.kind for s in cpu} == {s.kind for s in vta if s.lane == "vta host"} \
        == {"measured"}
    assert any(c.start < d.end and d.start < c.end for c in cpu for d in vta)
    assert result.makespan(result.pipelined) < result.makespan(result.sequential)
    trace = sdk_trace(result, compiled)
    assert {e["args"]["timing"] for e in trace if e["ph"] == "X"} == {"measured", "modelled"}


def sdk_trace(result, compiled) -> list[dict]:
    from heterocc.runtime.pipeline import chrome_trace

    names = {k: n.name for k, n in enumerate(compiled.graph.nodes)}
    return chrome_trace(result.pipelined, names)["traceEvents"]


@pytest.mark.parametrize("transport", ["driver", "pynq"])
def test_every_transport_serves_the_overlapped_run_bit_exact(branches, transport):
    """The vta device's submit / wait over the driver protocol and over the PYNQ driver
    (on a stand-in board: the board cannot run here), against the simulator in
    process."""
    driver = _driver_only(CONFIG) if transport == "driver" else _fpga(CONFIG)
    compiled = _compile(branches, VtaDevice(CONFIG, driver, timeout_s=60))
    reference = _compile(branches)
    for x in _inputs(2):
        for a, b in zip(compiled.run([x]), reference.run([x]), strict=True):
            assert a.tobytes() == b.tobytes()
    # a stream's replay serves every transport's recorded runs back
    stream = compiled.run_stream([[x] for x in _inputs(2)], replays=1)
    assert stream.replay_bit_exact and any(s.lane == "vta host" for s in stream.pipelined)


def test_a_failing_device_call_in_one_branch_is_a_clear_error_and_does_not_hang(branches):
    device = VtaDevice(CONFIG, _fpga(CONFIG, hangs=True), timeout_s=0.2)
    compiled = _compile(branches, device)
    started = time.monotonic()
    with pytest.raises(sdk.AcceleratorError, match="did not finish within 0.2 s") as info:
        compiled.run([_inputs(1)[0]])
    assert time.monotonic() - started < 30
    assert any("on device lane 'vta'" in note for note in info.value.__notes__)


def test_one_program_in_flight_and_each_handle_waited_once():
    from tests.hw.programs import requantize

    program = requantize(CONFIG, np.random.default_rng(3)).program
    device = VtaDevice(CONFIG, _driver_only(CONFIG))
    device.load(program)
    call = device.submit(program)
    timing = device.wait(call)
    assert timing.cycles > 0 and not call.future.cancelled()
    with pytest.raises(sdk.AcceleratorError, match="not the program in flight"):
        device.wait(call)
    stuck = VtaDevice(CONFIG, _fpga(CONFIG, hangs=True), timeout_s=0.05)
    stuck.load(program)
    first = stuck.submit(program)
    with pytest.raises(sdk.AcceleratorError, match="still running"):
        stuck.submit(program)
    with pytest.raises(sdk.AcceleratorError, match="did not finish"):
        stuck.wait(first)


@pytest.mark.rtl
@pytest.mark.hil
def test_vta_device_submits_to_the_rtl_and_the_host_is_free_until_it_waits():
    """The RTL transport through the vta device's submit / wait (Icarus): the RTL
    simulates on the device's thread while this one goes on; same bytes and the RTL's
    own cycle count."""
    from heterocc.accel_sim.rtl_device import RtlDevice
    from tests.hw.conftest import BUILD_ROOT, require_rtl_tools
    from tests.hw.programs import reference_gemms

    require_rtl_tools("icarus")
    program = reference_gemms(CONFIG, np.random.default_rng(4))[1].program
    simulated = VtaDevice(CONFIG)
    rtl = VtaDevice(CONFIG, RtlDevice(CONFIG, "icarus", dram_bytes=1 << 22,
                                      build_root=BUILD_ROOT), timeout_s=600)
    images = []
    for device in (simulated, rtl):
        device.load(program)
        call = device.submit(program)
        if device is rtl:  # the simulator process takes far longer than this line
            assert not call.done()
        timing = device.wait(call)
        images.append(device.image(program))
    assert timing.cycles == rtl.driver.last_result.cycles > 0
    np.testing.assert_array_equal(images[1], images[0])


def test_the_overlapped_run_from_eight_threads_matches_serial_runs(branches):
    from tests.runtime.test_thread_safety import assert_threaded_equals_serial

    compiled = _compile(branches)
    assert_threaded_equals_serial(compiled.run, _inputs(5), 4)


def test_a_mirrored_device_runs_both_sides_at_once_and_compares_them(branches):
    mirrored = sdk.MirroredDevice(VtaDevice(CONFIG, _fpga(CONFIG)), VtaDevice(CONFIG))
    assert sdk.asynchronous(mirrored) is mirrored
    compiled = _compile(branches, mirrored)
    x = _inputs(1)[0]
    for a, b in zip(compiled.run([x]), _compile(branches).run([x]), strict=True):
        assert a.tobytes() == b.tobytes()
    assert mirrored.reference_timing.cycles > 0


def test_a_device_function_without_sdk_device_calls_is_replayed_whole():
    """A device kernel that does not drive its device through copy in / run / copy out
    (no ``run_program``) is replayed as a whole function: its recorded outputs, no host
    part measured; the host functions are timed in the replay and the bits agree."""
    from heterocc.runtime.pipeline import run_stream

    calls = []

    class Opaque:
        device = "opaque-device"

        def __call__(self, args):
            calls.append(1)
            return [args[0] + 1]

    executor = GraphExecutor(_two_branches(), {"f_dev": Opaque(), "f_cpu": lambda a: [a[0] * 2]},
                             {"f_dev": "dev", "f_cpu": "llvm"})
    xs = [np.full(4, float(i), np.float32) for i in range(3)]
    result = run_stream(executor, {}, [[x] for x in xs], "llvm", replays=2)
    assert len(calls) == 3  # the live run only: the replays never call the device
    assert result.replay_bit_exact
    for x, (dev, cpu) in zip(xs, result.outputs):
        np.testing.assert_array_equal(dev, x + 1)
        np.testing.assert_array_equal(cpu, x * 2)
    assert {s.lane for s in result.pipelined} == {"llvm", "dev"}
    assert all(s.seconds == 0 for s in result.pipelined if s.lane == "dev")
    with pytest.raises(heterocc.errors.InputError, match="replays=0"):
        run_stream(executor, {}, [[xs[0]]], "llvm", replays=0)
