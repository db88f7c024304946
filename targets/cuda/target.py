"""The ``cuda`` target: each fused function becomes a few CUDA kernels.

A TE-compiled target (:class:`heterocc.sdk.te_target.TETarget`, as the llvm one: a function
body becomes tensor expressions through the compute library, functions of one structure
share their kernels, and a function the compute library cannot express runs on the
NumPy references, listed in ``fallbacks`` with the reason). What is the GPU's here: the
schedules of :mod:`.schedules`, the lowering that cuts the TIR into kernel launches
(:mod:`.passes`), the CUDA C printer (:mod:`.codegen`) and nvcc, which compiles it to
PTX and cubins (:mod:`.build`). The kernels run on the GPU through
the driver API (:mod:`.runtime`) when one is present, or on the CPU emulation of the
same TIR (:mod:`.emulate`, through :mod:`.host_driver`) otherwise (``run_on="auto"``).
Kernels take and return device arrays (:mod:`.memory`), so the tensors passed between
GPU functions stay on the device; only model inputs are uploaded and only what a CPU
function or the caller reads is downloaded. A function the compute library cannot express
runs on the NumPy references; ``fallbacks`` says which and why.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from heterocc.ir.graph import Node
from heterocc.sdk import ArtifactError, TargetError, te
from heterocc.sdk.runtime import member_path, report_fallback
from heterocc.sdk.te_target import (
    CompiledFunction,
    ExpressedFunction,
    ScheduleRule,
    TETarget,
    function_constants,
    output_specs,
)

from .build import DEFAULT_ARCHS, CompiledCuda, compile_cuda, find_nvcc
from .codegen import cuda_source
from .host_driver import HostMemoryDriver
from .memory import DeviceArray, DevicePool, Driver
from .passes import GpuFunction, lower_to_kernels
from .plan import LaunchPlan, launch_plan
from .runtime import CudaDevice, DeviceFunction, gpu_available
from .schedules import gpu_rules, schedule_for_gpu

RUN_MODES = ("auto", "gpu", "emulator")
#: file of an artifact's kernel directory with every function's launch description.
LAUNCHES = "launches.json"


def lower_for_gpu(outputs: list[te.Tensor], inputs: list[te.Tensor], name: str) -> GpuFunction:
    """Kernels computing ``outputs`` from ``inputs`` with the default GPU schedules
    (parameters: inputs, then outputs)."""
    return _kernel_launches(schedule_for_gpu(list(outputs)), [*inputs, *outputs], name)


def _kernel_launches(schedule: te.Schedule, params: list[te.Tensor], name: str) -> GpuFunction:
    # lower_to_kernels runs its own TIR pipeline (no loop partitioning of thread loops)
    return lower_to_kernels(te.lower(schedule, params, name=name, optimize=False))


@dataclass
class CudaModule:
    """One function for the GPU: its kernels (TIR), CUDA C source, and nvcc's PTX and
    cubins (None when nvcc was not run)."""

    gpu: GpuFunction
    source: str
    compiled: CompiledCuda | None = None

    def image_for(self, arch: str) -> bytes:
        """The cubin of ``arch`` if built, else the PTX (JIT-compiled by the driver)."""
        if self.compiled is None:
            raise TargetError(f"{self.gpu.name}: no PTX or cubin; build with nvcc first")
        cubin = self.compiled.cubins.get(arch)
        return cubin if cubin is not None else self.compiled.ptx.encode() + b"\0"


def _on_device(value, pool: DevicePool) -> DeviceArray:
    """``value`` in ``pool``'s device memory: a device array of that device as it is,
    anything else uploaded."""
    if isinstance(value, DeviceArray) and value.pool.driver is pool.driver:
        return value
    return DeviceArray.from_host(pool, np.asarray(value))


@dataclass
class CudaKernel:
    """A compiled function: call with the function's inputs (NumPy or device arrays);
    returns its outputs as device arrays (``np.asarray`` downloads them). Inputs already
    on this device are not copied; the constants are uploaded on the first call and stay
    on the device."""

    name: str
    module: CudaModule | None  # None when loaded from an artifact
    runner: DeviceFunction
    constants: list[np.ndarray]
    out_specs: list[tuple[tuple[int, ...], str]]
    device_constants: list[DeviceArray] | None = field(default=None, repr=False)

    def place(self, value) -> DeviceArray:
        """``value`` on this kernel's device (the graph executor keeps it for the later
        readers, so a host value is uploaded once and device values are not copied)."""
        return _on_device(value, self.runner.pool)

    def __call__(self, args: Sequence) -> list[DeviceArray]:
        pool = self.runner.pool
        if self.device_constants is None:
            self.device_constants = [DeviceArray.from_host(pool, c) for c in self.constants]
        inputs = [self.place(a) for a in args]
        outs = [DeviceArray(pool, shape, dtype) for shape, dtype in self.out_specs]
        self.runner.launch([*inputs, *self.device_constants, *outs])
        return outs


@dataclass
class CudaTarget(TETarget):
    """NVIDIA GPUs through CUDA C. ``archs``: cubins to build (PTX is built for the
    first); ``run_on``: "gpu", "emulator" (the CPU reading of the kernels) or "auto"
    (the GPU when the driver sees one); ``nvcc``: "auto" compiles when the binaries are
    needed (to run on the GPU, or to save an artifact where nvcc is installed),
    "always" also when emulating (so every kernel is checked by nvcc at build time),
    "never" not at all (no GPU runs, artifacts without binaries); ``driver``: the
    :class:`~heterocc.targets.cuda.memory.Driver` to run on, by default the GPU (a
    :class:`~heterocc.targets.cuda.runtime.CudaDevice`) or, when emulating, a
    :class:`~heterocc.targets.cuda.host_driver.HostMemoryDriver`. All kernels of the
    target share ``pool``, the driver's device memory."""

    name: str = "cuda"
    archs: tuple[str, ...] = DEFAULT_ARCHS
    run_on: str = "auto"
    nvcc: str = "auto"
    #: each compiled function's module, by function name (functions of one structure
    #: share theirs)
    modules: dict[str, CudaModule] = field(default_factory=dict)
    driver: Driver | None = field(default=None, repr=False)
    _pool: DevicePool | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.run_on not in RUN_MODES:
            raise TargetError(f"cuda target: run_on={self.run_on!r}; use one of "
                              f"{', '.join(RUN_MODES)}")
        if self.nvcc not in ("auto", "always", "never"):
            raise TargetError(f"cuda target: nvcc={self.nvcc!r}; use auto, always or never")

    def _on_gpu(self) -> bool:
        if self.driver is not None:
            return not isinstance(self.driver, HostMemoryDriver)
        if self.run_on == "auto":
            return gpu_available()
        if self.run_on == "gpu" and not gpu_available():
            raise TargetError("cuda target: run_on='gpu' but the CUDA driver sees no GPU; use "
                              "run_on='emulator' to check kernels on the CPU")
        return self.run_on == "gpu"

    def device(self) -> Driver:
        """The driver this target runs on (the GPU is opened on first use)."""
        if self.driver is None:
            self.driver = CudaDevice(0) if self._on_gpu() else HostMemoryDriver()
        return self.driver

    @property
    def pool(self) -> DevicePool:
        """The device memory of every kernel of this target."""
        if self._pool is None:
            self._pool = DevicePool(self.device())
        return self._pool

    def _runner(self, plan: GpuFunction | LaunchPlan, image) -> DeviceFunction:
        return DeviceFunction(self.device(), plan, image, self.pool)

    #: one-element constants stay kernel arguments; a kept stage launches a kernel of
    #: its own anyway, so it may finish an anchor's epilogue
    folds_scalars: ClassVar[bool] = False
    kept_take_epilogues: ClassVar[bool] = True

    def schedule_rules(self) -> list[ScheduleRule]:
        """The GPU's schedule rules (:func:`.schedules.gpu_rules`)."""
        return gpu_rules()

    def lower(self, schedule: te.Schedule, expressed: ExpressedFunction,
              symbol: str) -> GpuFunction:
        """The function's kernel launches (see :func:`lower_for_gpu`)."""
        return _kernel_launches(schedule, [*expressed.params, *expressed.outputs], symbol)

    def codegen(self, lowered: GpuFunction, symbol: str) -> CudaModule:
        """The CUDA C of the kernels (nvcc runs when a kernel needs the binaries)."""
        return self.compile_module(lowered, run_nvcc=False)

    def kernel(self, function: Node, compiled: CompiledFunction) -> CudaKernel:
        """``function`` launching its structure's kernels on this target's device."""
        on_gpu = self._on_gpu()
        if not on_gpu and self.run_on == "auto" and self.driver is None:
            report_fallback("cuda: the CUDA driver sees no GPU, so the CUDA kernels run on "
                            "their CPU emulation (the same results, far slower, no GPU "
                            "timing); run on a machine with an NVIDIA GPU, or say "
                            "'cuda -run_on=emulator' to emulate on purpose")
        return self._kernel(function, compiled, on_gpu, run_nvcc=on_gpu or self.nvcc == "always")

    def _kernel(self, function: Node, compiled: CompiledFunction, on_gpu: bool,
                run_nvcc: bool) -> CudaKernel:
        module = compiled.code
        if (run_nvcc or on_gpu) and module.compiled is None:
            if self.nvcc == "never":
                raise TargetError("cuda target: running on the GPU needs nvcc, but "
                                  "nvcc='never'")
            module.compiled = compile_cuda(module.source, module.gpu.name, self.archs)
        self.modules[function.name] = module
        # the host driver's module image is the kernels' TIR
        image = module.image_for(self.device().arch) if on_gpu else module.gpu
        return CudaKernel(function.name, module, self._runner(module.gpu, image),
                          function_constants(function.body, compiled.tables_for(function.body)),
                          output_specs(function))

    def compile_module(self, gpu: GpuFunction, run_nvcc: bool = True) -> CudaModule:
        """CUDA source of ``gpu``, and its PTX and cubins when ``run_nvcc``."""
        source = cuda_source(gpu.name, gpu.kernels)
        if run_nvcc and self.nvcc == "never":
            raise TargetError("cuda target: running on the GPU needs nvcc, but nvcc='never'")
        compiled = compile_cuda(source, gpu.name, self.archs) if run_nvcc else None
        return CudaModule(gpu, source, compiled)

    def save_kernels(self, kernels: dict, directory: str) -> dict:
        """PTX, cubins and launch descriptions of the functions nvcc compiled (the others
        are rebuilt when the artifact is loaded)."""
        saved = {}
        for name, kernel in kernels.items():
            if not isinstance(kernel, CudaKernel) or kernel.module is None:
                continue  # a NumPy fallback, or loaded from an artifact without its TIR
            module = kernel.module
            if module.compiled is None:
                if self.nvcc == "never" or find_nvcc() is None:
                    continue
                module.compiled = compile_cuda(module.source, module.gpu.name, self.archs)
            gpu, compiled = module.gpu, module.compiled
            files = {"ptx": f"{gpu.name}.ptx"}
            with open(os.path.join(directory, files["ptx"]), "w") as f:
                f.write(compiled.ptx)
            for arch, cubin in compiled.cubins.items():
                files[arch] = f"{gpu.name}.{arch}.cubin"
                with open(os.path.join(directory, files[arch]), "wb") as f:
                    f.write(cubin)
            saved[name] = {"plan": launch_plan(gpu).to_json(), "files": files}
        with open(os.path.join(directory, LAUNCHES), "w") as f:
            json.dump(saved, f, indent=1)
        return {"launches": LAUNCHES, "functions": sorted(saved)}

    def load_kernel(self, function: Node, directory: str, info: dict):
        """The kernel of ``function`` from a saved artifact: its cubin for this GPU (or
        its PTX) on the GPU; rebuilt from the graph when there is no GPU or nothing was
        saved for it."""
        if not self._on_gpu():  # the CPU emulation needs the TIR, not the binaries
            return self.build_with(function, lambda f, compiled: self._kernel(
                f, compiled, on_gpu=False, run_nvcc=False))
        if function.name not in info.get("functions", []):
            return self.build(function)
        with open(member_path(directory, info.get("launches"), "launch table")) as f:
            entry = json.load(f).get(function.name)
        if entry is None:
            raise ArtifactError(f"{info['launches']} has no launch description for "
                                f"{function.name!r}")
        files = entry["files"]
        name = files.get(self.device().arch, files["ptx"])
        with open(member_path(directory, name, "GPU image"), "rb") as f:
            image = f.read()
        if name == files["ptx"]:
            image += b"\0"
        runner = self._runner(LaunchPlan.from_json(entry["plan"]), image)
        return CudaKernel(function.name, None, runner, function_constants(function.body),
                          output_specs(function))
