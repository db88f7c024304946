"""heterocc.targets.llvm: TIR to CPU machine code through LLVM (llvmlite), for the host
or for a CPU description (``llvm -mcpu=... -mattr=... -mtriple=...``, see ``cpu.py``).

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
from .cpu import CPUDescription, active_cpu, check_runs_on, compiling_for, host_cpu, parse_cpu
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
    "BufferSpec", "CPUDescription", "CodeGenLLVM", "CompiledFunction", "FunctionSignature",
    "LLVMKernel", "LLVMModule", "LLVMTarget", "LoadedLibrary", "active_cpu", "build",
    "check_runs_on", "compiling_for", "host_cpu", "host_description", "llvm_target",
    "load_library", "num_threads", "parse_cpu",
]

from heterocc.sdk import InputError  # noqa: E402

from .cpu import describe_cpu  # noqa: E402

#: the words of ``-winograd=WORD`` that turn Winograd convolutions on and off
_SWITCH_WORDS = {"1": True, "true": True, "on": True, "yes": True,
                 "0": False, "false": False, "off": False, "no": False}


def _winograd_option(word: str) -> bool | int:
    """``-winograd=WORD``: on or off (:data:`_SWITCH_WORDS`), or a tile size (a number
    above 1, which ``LLVMTarget`` checks); anything else is an input error."""
    word = word.strip().lower()
    if word in _SWITCH_WORDS:
        return _SWITCH_WORDS[word]
    if word.isdigit():
        return int(word)
    raise InputError(f"llvm target: -winograd={word!r}; choose 1/true/on, 0/false/off or "
                     "a tile size")


def llvm_target(mcpu: str | None = None, mattr: str | None = None, mtriple: str | None = None,
                num_cores: int | str | None = None, cpu: CPUDescription | str | None = None,
                blocked_layout: bool = True, schedule_rules: str = "hand",
                winograd: bool | int | str = True) -> LLVMTarget:
    """The ``llvm`` target for the CPU the options of its target string describe
    (``llvm -mcpu=znver3 -mattr=+avx2,-avx512f -mtriple=... -num-cores=N``; what is left
    out is the host's), or for ``cpu`` (a description or a target string).
    ``schedule_rules`` (``-schedule-rules=none``): ``"none"`` turns the hand schedule
    rules off (see ``LLVMTarget.rules``). ``winograd`` (``-winograd=0``): False keeps
    every convolution direct, none by Winograd's F(m, 3); 2 or 4 that tile wherever
    Winograd applies (see ``LLVMTarget.winograd``)."""
    if isinstance(winograd, str):
        winograd = _winograd_option(winograd)
    if cpu is None and any(v is not None for v in (mcpu, mattr, mtriple, num_cores)):
        cpu = describe_cpu(mcpu, mattr, mtriple, num_cores)
    return LLVMTarget(cpu=cpu, blocked_layout=blocked_layout, rules=schedule_rules,
                      winograd=winograd)


from heterocc.sdk.registry import register_target  # noqa: E402

register_target("llvm", llvm_target, "a CPU through LLVM (llvmlite): llvm -mcpu=NAME "
                "-mattr=+feat,-feat -mtriple=TRIPLE -num-cores=N -schedule-rules=none "
                "-winograd=0; "
                "default: the host")
