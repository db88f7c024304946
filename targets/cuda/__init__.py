"""heterocc.targets.cuda: TIR to CUDA C for NVIDIA GPUs.

Example (no GPU needed to build; the emulator checks the kernels on the CPU)::

    from heterocc import te
    from heterocc.targets import cuda
    A = te.placeholder((256, 64), "float32", "A")
    B = te.placeholder((64, 128), "float32", "B")
    k = te.reduce_axis(64, "k")
    C = te.compute((256, 128), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    gpu = cuda.lower_for_gpu([C], [A, B], "matmul")   # kernels: TIR + launch extents
    print(cuda.cuda_source("matmul", gpu.kernels))    # CUDA C
    cuda.compile_cuda(cuda.cuda_source("matmul", gpu.kernels))  # nvcc: PTX + cubins
    cuda.run_emulated(gpu, [a, b, c])                  # the same kernels on the CPU

A model compiled with ``CudaTarget()`` keeps the tensors between its GPU functions in
device memory (:class:`DeviceArray`); without a GPU the same runtime runs on
:class:`HostMemoryDriver`, which counts every copy and launch.
"""

from .build import DEFAULT_ARCHS, CompiledCuda, compile_cuda, find_nvcc
from .codegen import cuda_source
from .emulate import EmulatedFunction, kernel_function, run_emulated, sequential_function
from .host_driver import DriverCounts, HostMemoryDriver
from .memory import DeviceArray, DevicePool, Driver
from .passes import Barrier, GpuFunction, Kernel, lower_to_kernels
from .plan import Launch, LaunchPlan, launch_plan
from .runtime import CudaDevice, DeviceFunction, gpu_available
from .schedules import (
    MatmulTiling,
    schedule_for_gpu,
    schedule_injective,
    schedule_matmul,
    schedule_reduction,
)
from .target import CudaKernel, CudaModule, CudaTarget, lower_for_gpu

__all__ = [
    "DEFAULT_ARCHS", "Barrier", "CompiledCuda", "CudaDevice", "CudaKernel", "CudaModule",
    "CudaTarget", "DeviceArray", "DeviceFunction", "DevicePool", "Driver", "DriverCounts",
    "EmulatedFunction", "GpuFunction", "HostMemoryDriver", "Kernel", "Launch", "LaunchPlan",
    "MatmulTiling", "launch_plan", "compile_cuda", "cuda_source", "find_nvcc",
    "gpu_available", "kernel_function", "lower_for_gpu", "lower_to_kernels", "run_emulated",
    "schedule_for_gpu", "schedule_injective", "schedule_matmul", "schedule_reduction",
    "sequential_function",
]

from heterocc.sdk.registry import register_target  # noqa: E402

register_target("cuda", CudaTarget, "NVIDIA GPUs through CUDA C (nvcc, driver API)")
