"""Devices at once: the asynchronous device queue, the modelled timelines of a stream,
the Chrome trace, and a stream run bit-exact against one-at-a-time runs."""

from __future__ import annotations

import concurrent.futures
import json

import numpy as np
import pytest

import heterocc
from heterocc.runtime.pipeline import DeviceQueue, StreamResult, _Task, chrome_trace, schedule
from heterocc.targets.vta import VtaTarget

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import INPUT, quantize, small_cnn  # noqa: E402


def test_device_queue_runs_in_order_and_raises_at_wait():
    queue = DeviceQueue("dev")
    seen = []
    handles = [queue.submit(seen.append, k) for k in range(5)]
    for h in handles:
        DeviceQueue.wait(h)
    assert seen == list(range(5))
    failing = queue.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        DeviceQueue.wait(failing)
    queue.close()


def _chain(inputs: int) -> list[_Task]:
    """Per input: CPU pre (1 s) -> device (2 s, 0.5 s of it link) -> CPU post (1 s)."""
    tasks = []
    for i in range(inputs):
        tasks += [_Task(i, 0, "cpu", (), 1.0), _Task(i, 1, "dev", (0,), 1.5, 0.5, False),
                  _Task(i, 2, "cpu", (1,), 1.0)]
    return tasks


def test_pipelined_timeline_overlaps_the_devices():
    tasks = _chain(16)
    sequential = schedule(tasks, pipelined=False)
    pipelined = schedule(tasks, pipelined=True)
    assert StreamResult.makespan(sequential) == pytest.approx(16 * 4.0)
    # the CPU (2 s per input) bounds the stream: 2 s per input after the first
    assert StreamResult.makespan(pipelined) == pytest.approx(16 * 2.0 + 2.0)
    result = StreamResult([], sequential, pipelined, 0.0)
    assert result.speedup >= 1.3
    cpu = [s for s in pipelined if s.lane == "cpu"]
    dev = [s for s in pipelined if s.lane == "dev"]
    assert any(c.start < d.end and d.start < c.end and c.input != d.input
               for c in cpu for d in dev)
    for lane in ("cpu", "dev", "dev link"):  # one call at a time per lane
        spans = sorted((s for s in pipelined if s.lane == lane), key=lambda s: s.start)
        assert all(a.end <= b.start + 1e-12 for a, b in zip(spans, spans[1:]))
    # within an input, each function starts after what it reads
    end = {(s.input, s.name): s.end for s in pipelined if s.lane != "dev link"}
    for s in pipelined:
        if s.name == "f2":
            assert s.start >= end[(s.input, "f1")] - 1e-12
    assert {s.kind for s in pipelined if s.lane == "dev"} == {"modelled"}
    assert {s.kind for s in cpu} == {"measured"}


def test_chrome_trace_names_lanes_and_kinds():
    spans = schedule(_chain(2), pipelined=True)
    trace = chrome_trace(spans, {0: "pre", 1: "conv", 2: "post"}, "demo")
    json.dumps(trace)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {"cpu (measured)", "dev (modelled)", "dev link (modelled)"}
    assert len(events) == len(spans) and "measured spans" in trace["otherData"]
    conv = next(e for e in events if e["name"] == "conv")
    assert conv["dur"] == pytest.approx(1.5e6) and conv["args"]["timing"] == "modelled"


def test_stream_is_bit_exact_and_overlaps(tmp_path):
    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8")
    # a split where both devices carry work (greedy: by cost this small model may stay on
    # the CPU, where there is nothing to overlap)
    compiled = heterocc.compile(model, target=[VtaTarget(), "llvm"], placement="greedy")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(INPUT).astype(np.float32) for _ in range(6)]
    result = compiled.run_stream([[x] for x in xs])
    for x, outputs in zip(xs, result.outputs):
        np.testing.assert_array_equal(outputs[0], compiled.run([x])[0])
    lanes = {s.lane for s in result.pipelined}
    assert {"llvm", "vta", "vta link"} <= lanes
    assert result.makespan(result.pipelined) <= result.makespan(result.sequential) + 1e-12
    busy = result.busy(result.sequential)
    assert busy["vta"] > 0 and busy["llvm"] > 0
    with pytest.raises(heterocc.errors.InputError, match="at least one"):
        compiled.run_stream([])


def test_cli_run_stream_writes_a_trace(tmp_path, capsys):
    import onnx

    from heterocc.cli import main

    path = tmp_path / "model.onnx"
    onnx.save(quantize(small_cnn(), tmp_path, "QDQ", "QInt8"), str(path))
    trace = tmp_path / "trace.json"
    # greedy: by cost this small model may stay on the CPU, with no device lane to show
    assert main(["run", str(path), "--target", "vta,llvm", "--placement", "greedy",
                 "--stream", "4", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "stream of 4 inputs" in out and "outputs equal to one-at-a-time runs: True" in out
    data = json.loads(trace.read_text())
    events = data["traceEvents"]
    assert {e["args"]["input"] for e in events if e["ph"] == "X"} == {0, 1, 2, 3}
    # each lane says how its spans were timed; the trace says what each kind means
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"llvm (measured)", "vta host (measured)", "vta link (modelled)",
            "vta (modelled)"} <= threads
    assert "replay" in data["otherData"]["measured spans"]
    assert "cycle count" in data["otherData"]["modelled spans"]
    assert "replay bit-exact: True" in out


def _diamond(inputs: int) -> list[_Task]:
    """Per input: CPU f0 (1 s) feeds a device f1 (host part 0.5 s, link 0.5 s, compute
    2 s) and a CPU f2 (3 s); CPU f3 (1 s) reads both."""
    tasks = []
    for i in range(inputs):
        tasks += [_Task(i, 0, "cpu", (), 1.0),
                  _Task(i, 1, "dev", (0,), 2.0, 0.5, False, 0.5),
                  _Task(i, 2, "cpu", (0,), 3.0),
                  _Task(i, 3, "cpu", (1, 2), 1.0)]
    return tasks


def test_the_pipelined_schedule_of_a_small_graph_has_the_known_start_times():
    spans = schedule(_diamond(2), pipelined=True)
    start = {(s.lane, s.input, s.name): (s.start, s.seconds) for s in spans}
    assert start == pytest.approx({
        ("cpu", 0, "f0"): (0.0, 1.0),
        ("dev host", 0, "f1"): (1.0, 0.5), ("dev link", 0, "f1"): (1.5, 0.5),
        ("dev", 0, "f1"): (2.0, 2.0),
        ("cpu", 0, "f2"): (1.0, 3.0), ("cpu", 0, "f3"): (4.0, 1.0),
        ("cpu", 1, "f0"): (5.0, 1.0),
        ("dev host", 1, "f1"): (6.0, 0.5), ("dev link", 1, "f1"): (6.5, 0.5),
        ("dev", 1, "f1"): (7.0, 2.0),
        ("cpu", 1, "f2"): (6.0, 3.0), ("cpu", 1, "f3"): (9.0, 1.0)})
    assert StreamResult.makespan(schedule(_diamond(2), pipelined=False)) == pytest.approx(16.0)
    # whatever the graph: a function starts after everything it reads, and a device (its
    # host part, link and compute together) and the CPU each run one function at a time
    tasks = _diamond(5)
    spans = schedule(tasks, pipelined=True)
    first = {}
    last = {}
    for s in spans:
        key = (s.input, s.name)
        first[key] = min(first.get(key, s.start), s.start)
        last[key] = max(last.get(key, s.end), s.end)
    for t in tasks:
        for d in t.deps:
            assert first[(t.input, f"f{t.index}")] >= last[(t.input, f"f{d}")] - 1e-12
    for lane in ("cpu", "dev"):
        calls = sorted((first[k], last[k]) for k in first
                       if (lane == "dev") == (k[1] == "f1"))
        assert all(a[1] <= b[0] + 1e-12 for a, b in zip(calls, calls[1:]))
    for name in ("f0", "f1", "f2", "f3"):  # each function takes the inputs in order
        order = sorted((first[k], k[0]) for k in first if k[1] == name)
        assert [i for _, i in order] == list(range(5))
    assert {s.kind for s in spans if s.lane == "dev host"} == {"measured"}


def test_the_stream_replays_the_device_and_gets_the_same_bits(tmp_path):
    from heterocc.errors import AcceleratorError
    from heterocc.runtime.replay import ReplayDevice, recording

    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8")
    vta = VtaTarget()
    compiled = heterocc.compile(model, target=[vta, "llvm"], placement="greedy")
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(INPUT).astype(np.float32) for _ in range(3)]
    result = compiled.run_stream([[x] for x in xs])
    assert result.replay_bit_exact and result.live_seconds["llvm"] > 0
    host = [s for s in result.pipelined if s.lane == "vta host"]
    assert host and {s.kind for s in host} == {"measured"} and all(s.seconds > 0 for s in host)
    # the same replay read on both clocks; the timelines differ only in measured spans
    assert set(result.tasks) == {"wall", "cpu"} and result.clock == "wall"
    assert result.speedup_of() == pytest.approx(result.speedup)
    def modelled(spans):
        return sorted((s.input, s.name, s.lane, s.seconds) for s in spans if s.kind == "modelled")

    assert modelled(result.timeline(True, "cpu")) == modelled(result.pipelined)
    assert result.speedup_of("cpu") > 0 and result.speedup_of(host_parts_on="llvm") > 0
    # the kernels have their own device back, and the recorded runs replay by program
    region = next(n for n in compiled.graph.nodes if n.attrs.get("target") == "vta")
    layer = region.body.nodes[0]
    kernel = next(k for k in vta.kernels if k.name == layer.name)
    x = rng.integers(-128, 128, layer.inputs[0].type.shape).astype(
        layer.inputs[0].type.np_dtype)
    assert kernel.device is vta.hardware
    with recording([kernel]) as wrappers:
        wrapper = wrappers[id(vta.hardware)]
        assert kernel.device is wrapper
        (first,) = kernel([x])  # a composite's kernel takes its own input
        runs = wrapper.take()
        assert [r.program for r in runs] == [kernel.program] and runs[0].timing.cycles
        wrapper.serve(runs)
        (again,) = kernel([x])
        assert again.tobytes() == first.tobytes() and wrapper.left() == 0
        with pytest.raises(AcceleratorError, match="more often than it did"):
            kernel([x])
        other = [type(runs[0])(vta.kernels[-1].program, runs[0].timing, runs[0].outputs)]
        assert other[0].program is not kernel.program
        wrapper.serve(other)
        with pytest.raises(AcceleratorError, match="where the recorded run ran another program"):
            kernel([x])
        # another thread meanwhile runs on the device, and records
        wrapper.serve(runs)
        beside = concurrent.futures.ThreadPoolExecutor(1)
        assert beside.submit(kernel, [x]).result()[0].tobytes() == first.tobytes()
        assert wrapper.left() == 1 and beside.submit(wrapper.take).result()
        beside.shutdown()
        wrapper.stop()
        kernel([x])  # this thread records again
        assert len(wrapper.take()) == 1
    assert kernel.device is vta.hardware and isinstance(wrapper, ReplayDevice)


def test_a_kernels_last_image_is_built_from_its_tensors_not_copied_per_call(tmp_path):
    """What hardware in the loop replays (``last_input``) is the device's image after the
    call, though a call reads back only its tensors' bytes, not the whole image: the
    program's stream replayed on it computes the output it holds (where a region kept
    a kernel's tensors in the device's DRAM, they are read from there)."""
    from heterocc.accel_sim import run_stream as simulate

    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8")
    vta = VtaTarget()
    compiled = heterocc.compile(model, target=[vta, "llvm"], placement="greedy")
    compiled.run([np.random.default_rng(6).standard_normal(INPUT).astype(np.float32)])
    assert vta.kernels and len({id(k.program) for k in vta.kernels}) == len(vta.kernels)
    for kernel in vta.kernels:
        assert kernel._last_image is None
        image = kernel.last_input
        replayed = image.copy()
        simulate(kernel.program.instructions, kernel.config, replayed)
        np.testing.assert_array_equal(replayed, image)
        weights = vta.hardware.image(kernel.program)
        inside = [kernel.program.tensors[n] for n in (*kernel.input_names,
                                                      kernel.output_tensor)]
        keep = np.ones(image.size, bool)
        for t in inside:
            keep[t.byte_address:t.byte_address + t.nbytes] = False
        np.testing.assert_array_equal(image[keep], weights[keep])


def test_host_parts_on_the_cpu_lane_wait_for_the_cpu():
    """The bound where the device's host part runs on the CPU's lane: it becomes a CPU
    span of its own just before the device's part, one CPU function at a time."""
    from heterocc.runtime.pipeline import _host_parts_on

    tasks = _host_parts_on(_diamond(2), "cpu")
    spans = schedule(tasks, pipelined=True)
    cpu = sorted((s for s in spans if s.lane == "cpu"), key=lambda s: s.start)
    assert all(a.end <= b.start + 1e-12 for a, b in zip(cpu, cpu[1:]))
    assert not [s for s in spans if s.lane == "dev host"]
    part = {s.input: s for s in cpu if s.name == "f1 host part"}
    dev = {s.input: s for s in spans if s.lane == "dev link"}
    assert set(part) == {0, 1} and all(dev[i].start >= part[i].end - 1e-12 for i in (0, 1))
    # the same work, so one after another takes as long; overlapped, the CPU carries more
    assert StreamResult.makespan(schedule(tasks, pipelined=False)) == pytest.approx(16.0)
    assert StreamResult.makespan(spans) >= StreamResult.makespan(
        schedule(_diamond(2), pipelined=True)) - 1e-12
    trace = chrome_trace(spans, {0: "pre", 1: "conv", 2: "side", 3: "post"})
    assert "conv host part" in {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
