"""The accelerator functions of a compiled model as stream files (``heterocc accel build``):
what ``heterocc accel disasm``/``check`` read and ``heterocc hil`` replays on the RTL."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from heterocc.accel_sim import write_stream_file
from heterocc.sdk import CompileError

from .codegen import AcceleratorKernel

#: what the output tensor holds before a replay: not a result any layer leaves there
UNWRITTEN = 0xA5


def replay_image(kernel: AcceleratorKernel) -> np.ndarray:
    """The kernel's DRAM image of its last run with its output tensor overwritten by
    ``UNWRITTEN`` bytes. The image is read after the run, when the output is already
    there: replayed as it is, a device that stored nothing would agree."""
    return unwritten_output(kernel, kernel.last_input.copy())


def unwritten_output(kernel: AcceleratorKernel, image: np.ndarray) -> np.ndarray:
    """``image`` (the kernel's program's DRAM) with its output tensor overwritten by
    ``UNWRITTEN`` bytes, in place (unless the output is also an input): a run that
    stores nothing then leaves it so."""
    if kernel.output_tensor not in kernel.input_names:
        tensor = kernel.program.tensors[kernel.output_tensor]
        image[tensor.byte_address:tensor.byte_address + tensor.nbytes] = UNWRITTEN
    return image


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
    run, the DRAM image of its last run as ``.dram``, for ``hil --dram``, its output
    tensor overwritten: ``replay_image``); returns the paths written."""
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
            replay_image(kernel).tofile(dram)
            written.append(dram)
    return written
