"""One compiled model run from many threads at once: every call gets its own result,
bitwise equal to the same input run serially (CPU kernels with recycled output buffers,
the accelerator's simulated DRAM, the SDK example's device, the ONNX backend's reps)."""

from __future__ import annotations

import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
import heterocc.backend as backend

THREADS = 8


def run_threaded(run, inputs: list, calls_per_thread: int) -> list[tuple[int, list]]:
    """``run(inputs[k])`` from THREADS threads released together, each going through the
    inputs in its own order; (k, outputs) of every call."""
    barrier = threading.Barrier(THREADS)
    results: list[tuple[int, list]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(calls_per_thread):
                k = (t * 7 + i * 3) % len(inputs)
                out = [np.array(o, copy=True) for o in run(inputs[k])]
                with lock:
                    results.append((k, out))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: races show in few calls
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
    return results


def assert_threaded_equals_serial(run, inputs: list, calls_per_thread: int) -> None:
    serial = [[np.array(o, copy=True) for o in run(x)] for x in inputs]
    # distinct inputs give distinct outputs: a call returning another's result shows
    assert len({serial[k][0].tobytes() for k in range(len(inputs))}) == len(inputs)
    results = run_threaded(run, inputs, calls_per_thread)
    assert len(results) == THREADS * calls_per_thread
    wrong = [k for k, out in results
             if any(a.tobytes() != b.tobytes() or a.dtype != b.dtype
                    for a, b in zip(out, serial[k], strict=True))]
    assert not wrong, f"{len(wrong)} of {len(results)} threaded calls differ from serial"


def _float_cnn() -> onnx.ModelProto:
    """conv+relu, a residual 1x1 conv branch, pooling and a dense layer."""
    rng = np.random.default_rng(3)

    def const(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale)
                                       .astype(np.float32), name)

    inits = [const("w1", (8, 3, 3, 3)), const("b1", (8,)), const("w2", (8, 8, 3, 3)),
             const("w3", (8, 8, 1, 1)), const("fc", (16, 8)), const("fb", (16,))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["r1", "w3"], ["c3"]),
             helper.make_node("Add", ["c2", "c3"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "float_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                           (2, 3, 12, 12))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 16))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _inputs(count: int, shape) -> list[np.ndarray]:
    return [np.random.default_rng(100 + i).standard_normal(shape).astype(np.float32)
            for i in range(count)]


def test_llvm_model_from_eight_threads_matches_serial_runs():
    compiled = heterocc.compile(_float_cnn(), target="llvm")
    assert_threaded_equals_serial(compiled.run, _inputs(6, (2, 3, 12, 12)), 12)


def test_backend_rep_from_eight_threads_matches_serial_runs():
    rep = backend.prepare(_float_cnn(), "CPU", target="llvm")
    assert_threaded_equals_serial(lambda x: rep.run([x]), _inputs(5, (2, 3, 12, 12)), 6)


def test_a_specialization_compiled_by_racing_threads_is_built_once():
    model = _float_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    compiled = heterocc.compile(model, target="llvm")
    assert_threaded_equals_serial(compiled.run, _inputs(4, (3, 3, 12, 12)), 3)
    assert len(compiled._cache) == 1


def test_vta_model_quantized_by_onnxruntime_from_eight_threads_matches_serial(tmp_path):
    pytest.importorskip("onnxruntime.quantization")
    from tests.targets.vta.ort_models import INPUT, quantize, small_cnn

    model = quantize(small_cnn(), tmp_path)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    assert any(k for k in compiled.kernels.values() if getattr(k, "composites", ()))
    assert_threaded_equals_serial(compiled.run, _inputs(6, INPUT), 6)


def test_sdk_example_target_from_eight_threads_matches_serial():
    pytest.importorskip("dotprod_accel")
    from dotprod_accel.models import two_layer_mlp

    compiled = heterocc.compile(two_layer_mlp(), target="dotprod,llvm", placement="greedy")
    assert any(getattr(k, "composites", ()) for k in compiled.kernels.values())
    inputs = [np.random.default_rng(40 + i).integers(-20, 20, (4, 20)).astype(np.int8)
              for i in range(6)]
    assert_threaded_equals_serial(compiled.run, inputs, 10)


@pytest.mark.slow
def test_cuda_emulation_from_eight_threads_matches_serial():
    """The CUDA target on the host emulator (no GPU needed): a shared device pool and
    each function's workspaces."""
    compiled = heterocc.compile(_float_cnn(), target="cuda")
    assert all(type(k).__name__ == "CudaKernel" for k in compiled.kernels.values())
    assert_threaded_equals_serial(compiled.run, _inputs(5, (2, 3, 12, 12)), 6)
