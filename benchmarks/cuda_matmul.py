"""float32 matmul (M = N = K = 4096 by default) with heterocc's CUDA schedule against
torch.matmul (cuBLAS, TF32 off) measured in the same run on the same GPU; optionally
ResNet-18 through the cuda target against ONNX Runtime.

    python benchmarks/cuda_matmul.py [--size 4096] [--repeat 20] [--resnet]
    python benchmarks/cuda_matmul.py --transfers     # no GPU needed

Needs a GPU, nvcc, and (for the peer) PyTorch with CUDA; prints why it stops otherwise.
Times are CUDA-event means over ``--repeat`` launches after one warm-up.

``--transfers`` runs ResNet-18 through the cuda target on HostMemoryDriver (the CUDA
runtime with host memory as device memory and the kernels' CPU emulation) and prints
the host/device copies, launches and allocations of one run after the first, next to
the copies a runtime moving every function's inputs, weights and outputs across on each
call would make (summed from the graph).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="M = N = K")
    parser.add_argument("--repeat", type=int, default=20, help="timed launches")
    parser.add_argument("--resnet", action="store_true", help="also time ResNet-18")
    parser.add_argument("--transfers", action="store_true",
                        help="count ResNet-18's copies per run on HostMemoryDriver (no GPU)")
    return parser.parse_args()


def _ours(size: int, repeat: int, a: np.ndarray, b: np.ndarray):
    from heterocc import te
    from heterocc.targets.cuda import (
        CudaDevice,
        CudaTarget,
        DeviceArray,
        DeviceFunction,
        lower_for_gpu,
    )

    device = CudaDevice(0)
    A = te.placeholder((size, size), "float32", "A")
    B = te.placeholder((size, size), "float32", "B")
    k = te.reduce_axis(size, "k")
    C = te.compute((size, size), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    started = time.perf_counter()
    gpu = lower_for_gpu([C], [A, B], "matmul")
    module = CudaTarget(archs=(device.arch,)).compile_module(gpu)
    build_s = time.perf_counter() - started
    function = DeviceFunction(device, gpu, module.image_for(device.arch))
    pool = function.pool
    arrays = [DeviceArray.from_host(pool, a), DeviceArray.from_host(pool, b),
              DeviceArray(pool, (size, size), np.float32)]
    function.launch(arrays)
    device.synchronize()
    ms = device.time_ms(lambda: function.launch(arrays), repeat)
    c = arrays[2].numpy()
    function.release()
    kernel = gpu.kernels[0]
    return ms, c, build_s, device, f"grid {kernel.grid} block {kernel.block}"


def _torch(repeat: int, a: np.ndarray, b: np.ndarray):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    result = torch.matmul(ta, tb)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        result = torch.matmul(ta, tb)
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / repeat, result.cpu().numpy()


def _resnet18(repeat: int) -> None:
    import heterocc
    from heterocc.models.zoo import resnet18
    from heterocc.targets.cuda import CudaDevice, CudaTarget

    model = resnet18()
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    target = CudaTarget(run_on="gpu", archs=(CudaDevice(0).arch,))
    started = time.perf_counter()
    compiled = heterocc.compile(model, target=[target])
    compiled.run([x])
    print(f"resnet18: compiled in {time.perf_counter() - started:.1f} s, "
          f"{len(target.modules)} GPU functions, {len(target.fallbacks)} NumPy fallbacks")
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        ours = compiled.run([x])
        times.append(time.perf_counter() - started)
    ours_ms = 1e3 * float(np.median(times))
    try:
        import onnxruntime as ort
    except ImportError:
        print(f"resnet18 heterocc cuda: {ours_ms:.2f} ms (onnxruntime not installed)")
        return
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                 if p in ort.get_available_providers()]
    session = ort.InferenceSession(model.SerializeToString(), providers=providers[:1])
    name = session.get_inputs()[0].name
    reference = session.run(None, {name: x})
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        session.run(None, {name: x})
        times.append(time.perf_counter() - started)
    ort_ms = 1e3 * float(np.median(times))
    error = float(np.abs(ours[0] - reference[0]).max())
    print(f"resnet18 heterocc cuda: {ours_ms:.2f} ms (median of {repeat}, input upload and "
          f"output download included); onnxruntime {providers[0]}: {ort_ms:.2f} ms; ratio "
          f"{ort_ms / ours_ms:.3f}; max |difference| {error:.2e}")


def _transfers() -> None:
    import heterocc
    from heterocc.models.zoo import resnet18
    from heterocc.targets.cuda import CudaTarget, HostMemoryDriver

    driver = HostMemoryDriver()
    target = CudaTarget(driver=driver)
    compiled = heterocc.compile(resnet18(), target=[target])
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    compiled.run([x])  # uploads the weights, fills the memory pool
    counts = driver.counts
    before = (counts.uploads, counts.downloads, counts.uploaded_bytes,
              counts.downloaded_bytes, len(counts.launches), counts.allocations)
    compiled.run([x])
    after = (counts.uploads, counts.downloads, counts.uploaded_bytes,
             counts.downloaded_bytes, len(counts.launches), counts.allocations)
    uploads, downloads, up_bytes, down_bytes, launches, allocations = (
        b - a for a, b in zip(before, after))
    functions = [n for n in compiled.graph.nodes if n.name in target.modules]
    per_call_up = sum(v.type.nbytes for n in functions for v in n.inputs) + sum(
        v.type.nbytes for n in functions for inner in n.body.nodes for v in inner.inputs
        if v is not None and v.is_const)
    per_call_down = sum(v.type.nbytes for n in functions for v in n.outputs)
    print(f"resnet18 on the cuda target ({len(functions)} GPU functions, "
          f"{len(target.fallbacks)} NumPy fallbacks), one run after the first:")
    print(f"  device-resident: {uploads} uploads ({up_bytes:,} bytes), {downloads} downloads "
          f"({down_bytes:,} bytes), {launches} launches, {allocations} allocations")
    print(f"  copying every function's inputs, weights and outputs per call: "
          f"{per_call_up:,} bytes up, {per_call_down:,} bytes down")


def main() -> int:
    args = _parse()
    if args.transfers:
        _transfers()
        return 0
    from heterocc.targets.cuda import find_nvcc, gpu_available

    if not gpu_available():
        print("no CUDA GPU visible to the driver: nothing to measure")
        return 0
    if find_nvcc() is None:
        print("nvcc not found: cannot build the kernels")
        return 0
    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.size, args.size)).astype(np.float32)
    b = rng.standard_normal((args.size, args.size)).astype(np.float32)
    ours_ms, c, build_s, device, launch = _ours(args.size, args.repeat, a, b)
    flops = 2.0 * args.size ** 3
    print(f"device: {device.name} ({device.arch}); kernel {launch}; built in {build_s:.1f} s")
    print(f"heterocc cuda matmul {args.size}^3: {ours_ms:.3f} ms, "
          f"{flops / ours_ms / 1e6:.0f} GFLOP/s")
    try:
        torch_ms, expected = _torch(args.repeat, a, b)
    except (ImportError, RuntimeError) as exc:
        print(f"no torch peer ({type(exc).__name__}: {exc}); checking against NumPy")
        expected = a @ b
    else:
        print(f"torch.matmul (cuBLAS, fp32, TF32 off): {torch_ms:.3f} ms, "
              f"{flops / torch_ms / 1e6:.0f} GFLOP/s; heterocc / cuBLAS throughput "
              f"{torch_ms / ours_ms:.3f}")
    error = float(np.abs(c - expected).max() / max(np.abs(expected).max(), 1e-30))
    print(f"max relative difference to the peer: {error:.2e}")
    if args.resnet:
        _resnet18(max(args.repeat // 2, 3))
    return 0 if error < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
