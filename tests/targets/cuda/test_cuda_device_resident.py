"""Models on the cuda target keep tensors on the device between GPU functions: counted on
HostMemoryDriver (the runtime code a GPU runs, with host memory as device memory), a
chain of GPU functions uploads each model input once and downloads each output once, a
CPU function in the middle costs one download of what it reads and one upload of what
it writes, device memory is reused across runs, and results match NumPy."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.patterns import CompositePattern, is_op, wildcard
from heterocc.runtime.interpreter import evaluate
from heterocc.targets import register_target
from heterocc.targets.cuda import CudaKernel, CudaTarget, DeviceArray, HostMemoryDriver
from heterocc.targets.cuda.memory import block_size

RNG = np.random.default_rng(5)
W1 = RNG.standard_normal((16, 32)).astype(np.float32)
W2 = RNG.standard_normal((32, 8)).astype(np.float32)
RUNS = 10


def _model(outputs=("y",)):
    """x -> MatMul(w1) -> Relu = r -> Softmax = s -> MatMul(w2) = y: three functions
    after fusion (matmul+relu, softmax, matmul)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["a"]),
         helper.make_node("Relu", ["a"], ["r"]),
         helper.make_node("Softmax", ["r"], ["s"], axis=-1),
         helper.make_node("MatMul", ["s", "w2"], ["y"])],
        "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 8] if n == "y" else [4, 32])
         for n in outputs],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(W2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _numpy(x):
    r = np.maximum(x @ W1, 0)
    e = np.exp(r - r.max(axis=-1, keepdims=True))
    return r, (e / e.sum(axis=-1, keepdims=True)) @ W2


@dataclass
class SoftmaxOnHost:
    """A CPU target that takes Softmax, recording the types of the arguments it gets."""

    name: str = "softmax_on_host"
    argument_types: list = field(default_factory=list)

    def pattern_table(self):
        return [CompositePattern("softmax", is_op("Softmax")(wildcard()))]

    def build(self, function):
        def kernel(args):
            self.argument_types += [type(a) for a in args]
            return evaluate(function.body, args)

        return kernel


register_target("softmax_on_host", SoftmaxOnHost, "test target: Softmax on the host")


def _in_use(target: CudaTarget) -> int:
    return target.pool.allocated_bytes - target.pool.cached_bytes


def test_chain_of_gpu_functions_copies_only_inputs_and_outputs():
    driver = HostMemoryDriver()
    target = CudaTarget(driver=driver)
    compiled = heterocc.compile(_model(), target=[target])
    assert len(target.modules) == 3 and not target.fallbacks
    counts = driver.counts
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    compiled.run([x])
    assert counts.uploads == 1 + 2  # x, and the two weights once for all runs
    launches_per_run, allocations = len(counts.launches), counts.allocations
    resident = sum(block_size(a.nbytes) for k in compiled.kernels.values()
                   if isinstance(k, CudaKernel)
                   for a in [*k.device_constants, *k.runner.workspaces])
    for _ in range(RUNS):
        x = RNG.standard_normal((4, 16)).astype(np.float32)
        uploads, downloads = counts.uploads, counts.downloads
        (y,) = compiled.run([x])
        assert (counts.uploads - uploads, counts.downloads - downloads) == (1, 1)
        assert isinstance(y, np.ndarray)
        np.testing.assert_allclose(y, _numpy(x)[1], rtol=1e-4, atol=1e-5)
        # no growth, and no tensor of the run outlives it
        assert counts.allocations == allocations
        assert _in_use(target) == resident
    assert len(counts.launches) == launches_per_run * (RUNS + 1)


def test_cpu_function_in_the_middle_costs_one_download_and_one_upload():
    driver = HostMemoryDriver()
    host = SoftmaxOnHost()
    target = CudaTarget(driver=driver)
    compiled = heterocc.compile(_model(outputs=("y", "r")), target=[host, target])
    assert len(target.modules) == 2
    counts = driver.counts
    compiled.run([RNG.standard_normal((4, 16)).astype(np.float32)])
    allocations = counts.allocations
    for _ in range(3):
        x = RNG.standard_normal((4, 16)).astype(np.float32)
        uploads, downloads = counts.uploads, counts.downloads
        y, r = compiled.run([x])
        # r goes down once for both its readers (Softmax on the host and the caller);
        # y goes down; x and Softmax's output go up
        assert (counts.uploads - uploads, counts.downloads - downloads) == (2, 2)
        want_r, want_y = _numpy(x)
        np.testing.assert_allclose(r, want_r, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-5)
    assert counts.allocations == allocations
    assert host.argument_types and set(host.argument_types) == {np.ndarray}


def test_input_read_by_two_gpu_functions_goes_up_once():
    w3 = RNG.standard_normal((16, 32)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["a"]),
         helper.make_node("MatMul", ["x", "w3"], ["b"]),
         helper.make_node("Sub", ["a", "b"], ["y"])],
        "two_readers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(W1, "w1"), numpy_helper.from_array(w3, "w3")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    driver = HostMemoryDriver()
    target = CudaTarget(driver=driver)
    compiled = heterocc.compile(model, target=[target])
    readers = [n for n in compiled.graph.nodes if compiled.graph.inputs[0] in n.inputs]
    assert len(readers) == 2
    compiled.run([RNG.standard_normal((4, 16)).astype(np.float32)])
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    uploads, downloads = driver.counts.uploads, driver.counts.downloads
    (y,) = compiled.run([x])
    assert (driver.counts.uploads - uploads, driver.counts.downloads - downloads) == (1, 1)
    np.testing.assert_allclose(y, x @ W1 - x @ w3, rtol=1e-4, atol=1e-5)


def test_kernel_called_directly_takes_host_and_device_arrays():
    driver = HostMemoryDriver()
    target = CudaTarget(driver=driver)
    compiled = heterocc.compile(_model(), target=[target])
    kernel = target.build(compiled.graph.nodes[0])  # matmul + relu
    x = RNG.standard_normal((4, 16)).astype(np.float32)
    (r,) = kernel([x])
    assert isinstance(r, DeviceArray) and not r.on_host
    np.testing.assert_allclose(np.asarray(r), _numpy(x)[0], rtol=1e-5, atol=1e-5)
    uploads = driver.counts.uploads
    (again,) = kernel([DeviceArray.from_host(target.pool, x)])
    assert driver.counts.uploads == uploads + 1  # the explicit upload only
    np.testing.assert_array_equal(np.asarray(again), np.asarray(r))
