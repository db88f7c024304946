"""The accelerator functions of a compiled model as stream files (``heterocc accel build``):
what ``heterocc accel disasm``/``check`` read and ``heterocc hil`` replays on the RTL."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from heterocc.accel_sim import write_stream_file
from heterocc.sdk import CompileError

from .codegen import AcceleratorKernel


def stream_paths(output: str | Path, names: Sequence[str]) -> list[Path]:
    """Where each kernel's stream goes: ``OUT.stream`` for one kernel, ``OUT.NAME.stream``
    for several; under a directory (any other ``output``) ``DIR/NAME.stream``."""
    output = Path(output)
    if output.suffix == ".stream":
        if len(names) == 1:
            return [output]
        return [output.with_name(f"{output.stem}.{n}.stream") for n in names]
    return [output / f"{n}.stream" for n in names]


def write_streams(kernels: Sequence[AcceleratorKernel], output: str | Path) -> list[Path]:
    """Write every kernel's instruction stream and micro-ops (and, for a kernel that has
    run, the DRAM image of its last run as ``.dram``, for ``hil --dram``); returns the
    paths written."""
    if not kernels:
        raise CompileError("no function of the model went to the accelerator, so there is "
                           "no stream to write (the placement report says why: heterocc "
                           "partition MODEL --target vta,llvm)")
    paths = stream_paths(output, [k.name for k in kernels])
    written: list[Path] = []
    for kernel, path in zip(kernels, paths):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_stream_file(path, kernel.config, kernel.program.instructions,
                          kernel.program.uops)
        written.append(path)
        if kernel.last_input is not None:
            dram = path.with_suffix(".dram")
            kernel.last_input.tofile(dram)
            written.append(dram)
    return written
