"""heterocc.targets.llvm: TIR to host machine code through LLVM (llvmlite).

Example::

    from heterocc import te
    from heterocc.targets import llvm as hllvm
    func = te.lower(schedule, [A, B, C], name="matmul")
    module = hllvm.build(func)
    module["matmul"](a, b, c)            # NumPy arrays, shapes and dtypes checked
    module.export_library("kernels.so")  # + kernels.so.json with the signatures
    hllvm.load_library("kernels.so")["matmul"](a, b, c)
"""

from .codegen import CodeGenLLVM
from .module import (
    BufferSpec,
    CompiledFunction,
    FunctionSignature,
    LLVMModule,
    LoadedLibrary,
    build,
    host_description,
    load_library,
)
from .runtime import num_threads
from .target import LLVMKernel, LLVMTarget

__all__ = [
    "BufferSpec", "CodeGenLLVM", "CompiledFunction", "FunctionSignature", "LLVMKernel",
    "LLVMModule", "LLVMTarget", "LoadedLibrary", "build", "host_description", "load_library",
    "num_threads",
]

from ..registry import register_target  # noqa: E402

register_target("llvm", LLVMTarget, "host CPU through LLVM (llvmlite)")
