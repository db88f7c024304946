"""The graph executor's run plan: kernels, constants, omitted inputs and plain op nodes
are found once and run in order; a value is dropped right after its last reader (and an
output nobody reads at once), so a kernel may write it again; assigning other kernels
makes a new plan; profiling still times every node; device kernels still get their
arguments through ``place``; a network of many tiny LLVM kernels matches the reference."""

from __future__ import annotations

import gc
import sys
import warnings
import weakref

import numpy as np
import pytest

import heterocc
from heterocc.ir.graph import FUNCTION_OP, Graph, Node, Value, constant
from heterocc.ir.types import TensorType
from heterocc.models import conv_chain
from heterocc.runtime.executor import DeviceTensor, GraphExecutor

RNG = np.random.default_rng(5)
T = TensorType((4,), "float32")


def _function(name, inputs, outputs):
    """A function node (its body only names the op, for the profile)."""
    params = [Value(f"{name}_p{k}", T) for k in range(len(inputs))]
    results = [Value(f"{name}_r{k}", T) for k in range(len(outputs))]
    body = Graph(params, results, [Node("Relu", params[:1], results[:1], name=f"{name}_op")])
    return Node(FUNCTION_OP, inputs, outputs, name=name, body=body)


class Recorder:
    """A kernel computing ``fn(*args)`` that records what it was given."""

    def __init__(self, fn, outputs=1):
        self.fn, self.outputs, self.seen = fn, outputs, []

    def __call__(self, args):
        self.seen.append([None if a is None else a.copy() for a in args])
        result = self.fn(*args)
        return list(result) if self.outputs > 1 else [result]


def _chain():
    """x -> a = f(x, w) -> (b, unused) = g(a, None) -> y = h(b, a): a constant, an
    omitted optional input, an output nobody reads, a value read twice."""
    x = Value("x", T)
    w = constant(np.arange(4, dtype=np.float32), "w")
    a, b, unused, y = (Value(n, T) for n in ("a", "b", "unused", "y"))
    nodes = [_function("f", [x, w], [a]), _function("g", [a, None], [b, unused]),
             _function("h", [b, a], [y])]
    kernels = {"f": Recorder(lambda x, w: x + w),
               "g": Recorder(lambda a, none: (a * 2, a * 0), outputs=2),
               "h": Recorder(lambda b, a: b - a)}
    return Graph([x], [y], nodes), kernels


def test_plan_runs_kernels_with_constants_and_omitted_inputs():
    graph, kernels = _chain()
    executor = GraphExecutor(graph, kernels)
    x = RNG.standard_normal(4).astype(np.float32)
    for _ in range(2):  # the second run follows the plan the first made
        (y,) = executor.execute([x])
        a = x + np.arange(4, dtype=np.float32)
        np.testing.assert_array_equal(y, a * 2 - a)
    assert kernels["g"].seen[-1][1] is None
    np.testing.assert_array_equal(kernels["f"].seen[-1][1], np.arange(4, dtype=np.float32))
    executor.set_input("x", x)
    executor.run()
    np.testing.assert_array_equal(executor.get_output(0), y)


def test_values_are_dropped_after_their_last_reader():
    """Each intermediate is released once its last reader ran (and an output nobody
    reads at once), so a kernel that recycles its outputs finds them free."""
    graph, kernels = _chain()
    alive = {}

    def keep(name, kernel):
        def run(args):
            results = kernel(args)
            alive[name] = [weakref.ref(r) for r in results]
            return results
        return run

    def check_h(b, a):
        gc.collect()
        assert alive["g"][1]() is None  # "unused": never read, dropped at once
        return b - a

    kernels = {"f": keep("f", kernels["f"]), "g": keep("g", kernels["g"]),
               "h": Recorder(check_h)}
    executor = GraphExecutor(graph, kernels)
    (y,) = executor.execute([RNG.standard_normal(4).astype(np.float32)])
    gc.collect()
    assert alive["f"][0]() is None and alive["g"][0]() is None  # a and b: dead after h
    assert sys.getrefcount(y) == 2  # the returned output is the caller's alone


def test_other_kernels_make_a_new_plan():
    graph, kernels = _chain()
    executor = GraphExecutor(graph, kernels)
    x = np.ones(4, np.float32)
    first = executor.execute([x])[0]
    executor.kernels = {**kernels, "h": Recorder(lambda b, a: b + a)}
    np.testing.assert_array_equal(executor.execute([x])[0], first + 2 * (x + np.arange(4)))


def test_missing_kernel_names_the_node():
    graph, kernels = _chain()
    del kernels["g"]
    with pytest.raises(KeyError, match="'g'"):
        GraphExecutor(graph, kernels).execute([np.ones(4, np.float32)])


def test_plain_op_nodes_run_on_the_reference():
    x, y = Value("x", T), Value("y", T)
    graph = Graph([x], [y], [Node("Relu", [x], [y], name="relu")])
    executor = GraphExecutor(graph, {})
    values = np.array([-1, 2, -3, 4], np.float32)
    np.testing.assert_array_equal(executor.execute([values])[0], np.maximum(values, 0))


def test_numpy_steps_run_without_warnings_and_machine_code_without_their_guard():
    """A step run in NumPy (a plain op's reference, a Python kernel) may divide by zero or
    take a log of 0: the run raises no warning and leaves NumPy's error state as it was.
    A plan of native runs alone skips that guard (machine code raises neither)."""
    x, y = Value("x", T), Value("y", T)
    graph = Graph([x], [y], [Node("Log", [x], [y], name="log")])
    executor = GraphExecutor(graph, {})
    values = np.array([0, 1, 2, -1], np.float32)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        (out,) = executor.execute([values])
        assert np.geterr()["divide"] == "raise"
    assert out[0] == -np.inf and np.isnan(out[3])
    assert not executor._machine_code_only
    model = heterocc.compile(conv_chain(3), target="llvm")
    feed = {v.name: RNG.standard_normal(v.shape).astype(np.float32) for v in model.inputs}
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        model.run(feed)
    assert model._executable_for(feed).executor._machine_code_only


def test_profiling_times_every_node_while_the_plan_is_kept():
    graph, kernels = _chain()
    executor = GraphExecutor(graph, kernels)
    x = np.ones(4, np.float32)
    executor.execute([x])
    executor.profile = {}
    for _ in range(3):
        executor.execute([x])
    assert sorted(executor.profile) == ["f", "g", "h"]
    assert all(e.calls == 3 and e.seconds > 0 for e in executor.profile.values())
    executor.profile = None
    executor.execute([x])
    assert len(kernels["f"].seen) == 5


class Held(DeviceTensor):
    """A value on a pretend device."""

    def __init__(self, array):
        self.array = array

    def numpy(self):
        return self.array


class DeviceKernel:
    """Doubles its input on the pretend device; counts uploads."""

    def __init__(self):
        self.uploads = 0

    def place(self, value):
        if isinstance(value, Held):
            return value
        self.uploads += 1
        return Held(np.asarray(value))

    def __call__(self, args):
        assert all(isinstance(a, Held) for a in args)
        return [Held(args[0].array * 2)]


def test_device_kernels_get_placed_values_and_host_readers_get_numpy():
    """x goes up once for two device readers; the host kernel and the graph's output
    get host arrays."""
    x, a, b, y = (Value(n, T) for n in ("x", "a", "b", "y"))
    nodes = [_function("d1", [x], [a]), _function("d2", [x], [b]),
             _function("host", [a, b], [y])]
    device = DeviceKernel()
    host = Recorder(lambda a, b: a + b)
    executor = GraphExecutor(Graph([x], [y], nodes), {"d1": device, "d2": device,
                                                      "host": host})
    values = np.arange(4, dtype=np.float32)
    (out,) = executor.execute([values])
    assert device.uploads == 1
    assert all(type(v) is np.ndarray for v in host.seen[0])
    np.testing.assert_array_equal(out, values * 4)


def test_many_tiny_llvm_kernels_match_the_reference_and_keep_held_outputs():
    model = conv_chain(12, channels=8, size=6)
    compiled = heterocc.compile(model, target="llvm")
    assert compiled.fallbacks == {}
    reference = heterocc.compile(model, target="reference")
    inputs = [RNG.standard_normal((1, 8, 6, 6)).astype(np.float32) for _ in range(3)]
    held = [compiled.run([x])[0] for x in inputs]  # each run's output kept by the caller
    for x, out in zip(inputs, held):
        np.testing.assert_allclose(out, reference.run([x])[0], rtol=1e-4, atol=1e-5)
