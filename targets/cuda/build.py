"""Compiling CUDA C with ``nvcc``: PTX (portable, JIT-compiled by the driver for any newer
GPU) and one cubin per chosen architecture. A failed compilation raises CompileError
with nvcc's message and the numbered lines of the kernel source around each error."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from heterocc.sdk import CompileError

#: default architectures: Ampere (A100) and Hopper (H100/H200).
DEFAULT_ARCHS = ("sm_80", "sm_90")
#: lines of source shown before and after each line nvcc complains about.
CONTEXT_LINES = 3
NVCC_TIMEOUT_S = 300


def find_nvcc() -> str | None:
    """Path of nvcc: ``$HETEROCC_NVCC``, then PATH, then ``$CUDA_HOME/bin``."""
    explicit = os.environ.get("HETEROCC_NVCC")
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = os.path.join(home, "bin", "nvcc")
    return candidate if os.path.exists(candidate) else None


@dataclass
class CompiledCuda:
    """The outputs of one nvcc run: PTX text for the lowest architecture and a cubin
    per architecture (bytes)."""

    ptx: str
    cubins: dict[str, bytes] = field(default_factory=dict)


def _excerpt(source: str, message: str) -> str:
    lines = source.splitlines()
    wanted = sorted({int(m) for m in re.findall(r"\.cu\((\d+)\)", message)})
    if not wanted:
        return "\n".join(f"{n + 1:5d} | {line}" for n, line in enumerate(lines[:40]))
    shown: list[str] = []
    for line_number in wanted[:5]:
        low = max(line_number - 1 - CONTEXT_LINES, 0)
        high = min(line_number + CONTEXT_LINES, len(lines))
        shown += [f"{n + 1:5d}{'>' if n + 1 == line_number else ' '}| {lines[n]}"
                  for n in range(low, high)]
        shown.append("  ...")
    return "\n".join(shown)


def _run(nvcc: str, args: list[str], source: str, name: str) -> None:
    try:
        result = subprocess.run([nvcc, *args], capture_output=True, text=True,
                                timeout=NVCC_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CompileError(f"nvcc took over {NVCC_TIMEOUT_S} s on {name!r}") from None
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip()
        raise CompileError(f"nvcc failed on {name!r} ({' '.join(args[:2])}):\n{message}\n"
                           f"kernel source:\n{_excerpt(source, message)}")


def compile_cuda(source: str, name: str = "kernels", archs=DEFAULT_ARCHS,
                 options: tuple[str, ...] = ("-O3",)) -> CompiledCuda:
    """PTX (for the first of ``archs``) and a cubin per architecture of ``source``."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found: install the CUDA toolkit, or set HETEROCC_NVCC or "
                           "CUDA_HOME")
    if not archs:
        raise CompileError("compile_cuda needs at least one architecture (e.g. sm_80)")
    with tempfile.TemporaryDirectory(prefix="heterocc_cuda_") as work:
        path = os.path.join(work, re.sub(r"\W", "_", name) + ".cu")
        with open(path, "w") as f:
            f.write(source)
        ptx_path = os.path.join(work, "module.ptx")
        virtual = "compute_" + archs[0].removeprefix("sm_")
        _run(nvcc, ["-ptx", f"-arch={virtual}", *options, path, "-o", ptx_path], source, name)
        with open(ptx_path) as f:
            ptx = f.read()
        cubins = {}
        for arch in archs:
            cubin_path = os.path.join(work, f"{arch}.cubin")
            _run(nvcc, ["-cubin", f"-arch={arch}", *options, path, "-o", cubin_path], source,
                 name)
            with open(cubin_path, "rb") as f:
                cubins[arch] = f.read()
    return CompiledCuda(ptx, cubins)
