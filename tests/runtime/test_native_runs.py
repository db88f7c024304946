"""Native runs: consecutive LLVM kernels called in one call through the C runtime's
``heterocc_run_sequence``. The outputs are the bits of one call per function; a run's
own intermediates share an arena by the memory plan's rules; runs from many threads at
once do not mix; profiling keeps one entry per function; a loaded artifact runs on its
own library's runtime (or one call per function where its library lacks the entry); a
function that fails on an input a run cannot take is named; a kernel without a native
entry splits the runs."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.errors import InputError
from heterocc.ir.graph import FUNCTION_OP, Graph, Node, Value, constant
from heterocc.ir.types import TensorType
from heterocc.models import conv_chain
from heterocc.runtime.executor import GraphExecutor
from heterocc.runtime.memory import Lifetime, arena_offsets, assign_slots
from heterocc.runtime.native import NativeEntry, NativeRun
from heterocc.targets.llvm import sequence

RNG = np.random.default_rng(7)


def _branchy() -> onnx.ModelProto:
    """x -> a = Relu(Conv(x)); b = Conv(a); y = Relu(Conv(a) + b); outputs y and a:
    a value read by two functions and returned, an intermediate read once."""
    def weight(name):
        return numpy_helper.from_array(
            (RNG.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"]),
             helper.make_node("Relu", ["c0"], ["a"]),
             helper.make_node("Conv", ["a", "w1"], ["b"]),
             helper.make_node("Conv", ["a", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    shape = [1, 8, 6, 6]
    graph = helper.make_graph(
        nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, shape)],
        [weight("w0"), weight("w1"), weight("w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _executor(model) -> GraphExecutor:
    return heterocc.compile(model, target="llvm").build_static().executor


def _runs(executor: GraphExecutor) -> list[NativeRun]:
    return executor.runs


def _one_call_each(executor: GraphExecutor) -> GraphExecutor:
    return GraphExecutor(executor.graph, executor.kernels, executor.placement,
                         native_runs=False)


def test_a_chain_runs_as_one_call_with_the_bits_of_one_call_per_function():
    executor = _executor(conv_chain(12, channels=8, size=6))
    runs = _runs(executor)
    assert len(runs) == 1 and runs[0].first == 0
    assert runs[0].last == len(executor.graph.nodes) - 1
    # the run's intermediates share the arena: far less than one buffer each
    plan = runs[0].plan
    assert len(plan.buffers) == len(executor.graph.nodes) - 1
    assert plan.arena_bytes <= 3 * 64 * ((8 * 6 * 6 * 4 + 63) // 64)
    reference = heterocc.compile(conv_chain(12, channels=8, size=6), target="reference")
    inputs = [RNG.standard_normal((1, 8, 6, 6)).astype(np.float32) for _ in range(3)]
    held = [executor.execute([x])[0] for x in inputs]  # each run's output kept
    assert len({id(h) for h in held}) == 3
    for x, out in zip(inputs, held):
        np.testing.assert_array_equal(out, _one_call_each(executor).execute([x])[0])
        np.testing.assert_allclose(out, reference.run([x])[0], rtol=1e-4, atol=1e-5)
    executor.native_runs = False  # a new plan, one call per function
    assert executor.runs == []
    np.testing.assert_array_equal(executor.execute([inputs[0]])[0], held[0])


def test_a_value_read_after_the_run_or_returned_is_one_of_its_outputs():
    model = _branchy()
    executor = _executor(model)
    runs = _runs(executor)
    assert len(runs) == 1 and len(runs[0].writes) == 2  # y and a
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    expected = heterocc.compile(model, target="reference").run([x])
    for _ in range(2):
        y, a = executor.execute([x])
        np.testing.assert_allclose(y, expected[0], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a, expected[1], rtol=1e-4, atol=1e-5)
    for got, want in zip(executor.execute([x]), _one_call_each(executor).execute([x])):
        np.testing.assert_array_equal(got, want)


def test_runs_from_many_threads_at_once_match_serial_runs():
    executor = _executor(conv_chain(20, channels=8, size=6))
    assert len(_runs(executor)) == 1
    inputs = [RNG.standard_normal((1, 8, 6, 6)).astype(np.float32) for _ in range(8)]
    serial = [_one_call_each(executor).execute([x])[0] for x in inputs]
    results: dict[tuple[int, int], np.ndarray] = {}
    start = threading.Barrier(8)

    def work(t):
        start.wait()
        for r in range(25):
            k = (t + r) % len(inputs)
            results[t, r] = (k, executor.execute([inputs[k]])[0])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 200
    for k, out in results.values():
        np.testing.assert_array_equal(out, serial[k])


def _run_in_child(executor, x, connection):
    connection.send(executor.execute([x])[0])
    connection.close()


def test_a_forked_child_runs_the_run_its_parent_ran():
    """The child inherits the parent thread's arena and outputs (copied on write) and
    the runtime's pool rebuilt after fork: its results are its own and right."""
    import multiprocessing

    executor = _executor(conv_chain(6, channels=8, size=6))
    x, other = (RNG.standard_normal((1, 8, 6, 6)).astype(np.float32) for _ in range(2))
    expected = executor.execute([x])[0].copy()
    held = executor.execute([other])[0]  # the parent's, held across the fork
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    worker = context.Process(target=_run_in_child, args=(executor, x, child))
    worker.start()
    got = parent.recv() if parent.poll(60) else None
    worker.join(60)
    if worker.exitcode is None:
        worker.kill()
    assert worker.exitcode == 0
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(held, _one_call_each(executor).execute([other])[0])


@pytest.mark.parametrize("same_clock", [True, False])
def test_profiling_times_each_function_inside_the_run(same_clock, monkeypatch):
    # where perf_counter is another clock than the runtime's, the spans are placed from
    # the call's perf_counter time
    monkeypatch.setattr(sequence, "_SAME_CLOCK", same_clock and sequence._SAME_CLOCK)
    compiled = heterocc.compile(conv_chain(6, channels=8, size=6), target="llvm")
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    plain = compiled.run([x])[0]
    compiled.enable_profiling()
    begun = time.perf_counter()
    np.testing.assert_array_equal(compiled.run([x])[0], plain)
    ended = time.perf_counter()
    executor = compiled.build_static().executor
    assert len(executor.runs) == 1
    entries = {e.node: e for e in compiled.profile_entries()}
    functions = [n.name for n in executor.graph.nodes]
    assert sorted(entries) == sorted(functions)
    assert all(e.calls == 1 and len(e.spans) == 1 and e.target == "llvm"
               for e in entries.values())
    # the kernels' spans, one after another, inside the run
    spans = [entries[name].spans[0] for name in functions]
    assert begun <= spans[0][0] and spans[-1][0] + spans[-1][1] <= ended
    for (start, seconds), (after, _) in zip(spans, spans[1:]):
        assert seconds > 0 and start + seconds <= after


def test_a_runner_that_cannot_time_profiles_function_by_function(monkeypatch):
    compiled = heterocc.compile(conv_chain(4, channels=8, size=6), target="llvm")
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    plain = compiled.run([x])[0]
    (run,) = compiled.build_static().executor.runs
    monkeypatch.setattr(run.native, "_call_timed", None)
    compiled.enable_profiling()
    np.testing.assert_array_equal(compiled.run([x])[0], plain)
    entries = compiled.profile_entries()
    assert len(entries) == len(compiled.build_static().executor.graph.nodes)
    assert all(e.calls == 1 and e.seconds > 0 for e in entries)


def test_a_run_times_each_kernel_on_the_threads_cpu_clock():
    # the figure benchmarks/between_kernels.py compares with the whole run: each kernel's
    # CPU time, a part of the CPU time of the call around them all
    executor = _executor(conv_chain(5, channels=8, size=6))
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    plain = executor.execute([x])[0]
    (run,) = executor.runs
    before = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
    outputs, seconds = run.native.cpu_timed([x])
    after = time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)
    np.testing.assert_array_equal(outputs[run.writes.index(executor._output_slots[0])], plain)
    assert len(seconds) == len(run.plan.functions) == len(executor.graph.nodes)
    assert all(s > 0 for s in seconds) and sum(seconds) <= after - before
    assert run.native.cpu_timed([x.astype(np.float64)]) is None  # an input it cannot take


def test_a_loaded_artifact_runs_on_its_own_librarys_runtime(tmp_path, monkeypatch):
    model = conv_chain(5, channels=8, size=6)
    heterocc.compile(model, target="llvm").export(str(tmp_path / "a"))
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    expected = heterocc.compile(model, target="reference").run([x])[0]
    loaded = heterocc.load(str(tmp_path / "a"))
    np.testing.assert_allclose(loaded.run([x])[0], expected, rtol=1e-4, atol=1e-5)
    executor = loaded.executor
    runs = _runs(executor)
    assert len(runs) == 1
    kernel = next(iter(executor.kernels.values()))
    assert sequence.runner_of(kernel.function) is not sequence.jit_runner()
    # a library exported before the runtime had the entry: one call per function
    assert runs[0].native.cpu_timed([x]) is not None  # the library's runtime has the entry
    monkeypatch.setattr(type(kernel.function.owner), "symbol_address", lambda self, name: None)
    older = heterocc.load(str(tmp_path / "a"))
    executor = older.executor
    assert _runs(executor) == []
    np.testing.assert_allclose(older.run([x])[0], expected, rtol=1e-4, atol=1e-5)


def test_an_input_the_run_cannot_take_is_reported_by_the_function_reading_it():
    executor = _executor(conv_chain(4, channels=8, size=6))
    first = executor.graph.nodes[0].name
    with pytest.raises(InputError, match="float32") as caught:
        executor.execute([np.zeros((1, 8, 6, 6), np.float64)])
    assert any(first in note for note in caught.value.__notes__)


def test_a_kernel_without_a_native_entry_splits_the_runs():
    executor = _executor(conv_chain(7, channels=8, size=6))
    middle = executor.graph.nodes[3].name
    kernels = dict(executor.kernels)
    inner = kernels[middle]
    kernels[middle] = lambda args: inner(args)  # a Python kernel: no native entry
    split = GraphExecutor(executor.graph, kernels, executor.placement)
    runs = _runs(split)
    assert [(r.first, r.last) for r in runs] == [(0, 2), (4, len(executor.graph.nodes) - 1)]
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(split.execute([x])[0], executor.execute([x])[0])


def test_buffers_share_arena_bytes_only_when_their_lifetimes_do_not_overlap():
    lifetimes = [Lifetime(0, 1, 100), Lifetime(1, 2, 60), Lifetime(2, 4, 100),
                 Lifetime(3, 3, 30), Lifetime(4, None, 10), Lifetime(5, 5, 200)]
    offsets, total = arena_offsets(lifetimes)
    assert all(offset % 64 == 0 for offset in offsets)
    for i, a in enumerate(lifetimes):
        for j, b in enumerate(lifetimes[:i]):
            a_last = float("inf") if a.last is None else a.last
            b_last = float("inf") if b.last is None else b.last
            if a.first <= b_last and b.first <= a_last:  # both live at some step
                assert offsets[i] + a.nbytes <= offsets[j] or \
                    offsets[j] + b.nbytes <= offsets[i], (i, j)
    slots, sizes = assign_slots(lifetimes)
    assert slots[2] == slots[0]  # the first buffer's slot is free again at step 2
    assert len(sizes) < len(lifetimes) and total < sum(-(-x.nbytes // 64) * 64
                                                       for x in lifetimes)


class _TableRunner:
    """A runner that follows a SequencePlan in Python: its "addresses" are keys of the
    kernels and constants it was given, its arena a byte array (float32 views): it
    checks the planner's table of values, independent of any target."""

    max_arguments = 8

    def __init__(self):
        self.code, self.constants, self.calls = {}, {}, 0

    def sequence(self, plan):
        def run(args):
            arena = np.zeros(plan.arena_bytes, np.uint8)
            outputs = [np.empty(shape, dtype) for shape, dtype in plan.outputs]
            table = [*args, *outputs, *(self.constants[a] for a in plan.constants),
                     *(arena[o:o + 16].view(np.float32) for o in plan.buffers)]
            for function, arguments in zip(plan.functions, plan.arguments):
                self.code[function]([table[k] for k in arguments])
            self.calls += 1
            return outputs
        return run


class _Double:
    """A kernel ``fn`` of (4,) float32 arrays offering a native entry of ``runner``."""

    def __init__(self, runner, fn, inputs, outputs):
        self.runner, self.fn, self.inputs, self.outputs = runner, fn, inputs, outputs
        runner.code[id(self)] = self._native

    def __call__(self, args):
        return [np.asarray(r, np.float32) for r in self.fn(*args)]

    def _native(self, buffers):
        for out, value in zip(buffers[self.inputs:], self.fn(*buffers[:self.inputs])):
            out[...] = value

    def native_entry(self):
        spec = ((4,), np.dtype(np.float32))
        return NativeEntry(id(self), (spec,) * self.inputs, (), (spec,) * self.outputs,
                           self.runner)


def test_the_plan_maps_constants_multiple_outputs_and_later_reads():
    """x -> a = f(x, w) -> (b, unused) = g(a) -> c = h(b, a) -> y = k(c); the graph
    returns y and b: a graph constant, an output nobody reads, a value read twice,
    a returned value in the middle of the run."""
    runner = _TableRunner()
    t = TensorType((4,), "float32")
    x = Value("x", t)
    w = constant(np.arange(4, dtype=np.float32), "w")
    runner.constants[w.data.ctypes.data] = w.data
    a, b, unused, c, y = (Value(n, t) for n in ("a", "b", "unused", "c", "y"))

    def function(name, inputs, outputs):
        body = Graph([Value(f"{name}_p{k}", t) for k in range(len(inputs))],
                     [Value(f"{name}_r{k}", t) for k in range(len(outputs))], [])
        return Node(FUNCTION_OP, inputs, outputs, name=name, body=body)

    nodes = [function("f", [x, w], [a]), function("g", [a], [b, unused]),
             function("h", [b, a], [c]), function("k", [c], [y])]
    kernels = {"f": _Double(runner, lambda x, w: [x + w], 2, 1),
               "g": _Double(runner, lambda a: [a * 2, a * 0 - 1], 1, 2),
               "h": _Double(runner, lambda b, a: [b - 3 * a], 2, 1),
               "k": _Double(runner, lambda c: [c * c], 1, 1)}
    graph = Graph([x], [y, b], nodes)
    executor = GraphExecutor(graph, kernels)
    (run,) = _runs(executor)
    assert (run.first, run.last) == (0, 3) and len(run.plan.outputs) == 2
    # a, unused and c in the arena; c takes the bytes of unused (dead after g), not a's
    # (h reads a while it writes c)
    assert len(run.plan.buffers) == 3 and run.plan.arena_bytes == 2 * 64
    xs = RNG.standard_normal(4).astype(np.float32)
    got = executor.execute([xs])
    assert runner.calls == 1
    want = GraphExecutor(graph, kernels, native_runs=False).execute([xs])
    for g, v in zip(got, want):
        np.testing.assert_array_equal(g, v)
    a_ = xs + np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(got[1], a_ * 2)
    np.testing.assert_array_equal(got[0], (a_ * 2 - 3 * a_) ** 2)
