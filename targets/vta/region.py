"""A region's programs hand their tensors to each other in the device's DRAM.

The SDK's ``LayoutRegion`` keeps a tensor in the device's layout from one layer of a
region to the next, but each program still writes its inputs over the host link and
reads its output back: on a 1 GB/s link that costs as much as the device's own time per
layer. Here a producer's output tensor and its consumer's input tensor, where both
programs hold it in the same tiles (the same layout, extents and element type), are
linked to one tensor of the region's :class:`~.device.SharedTensors` in the device's
DRAM (each program's stream pointed at it when loaded: ``device.LinkedProgram``). The
consumer reads it where the producer wrote it: nothing crosses the link for it, and
the host neither converts nor packs it. The host writes only the region's inputs and
the tensors a program takes in another layout, and reads only the region's outputs and
the tensors a layer off the device path needs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from heterocc.accel_sim.driver import movable_tensor
from heterocc.accel_sim.program import DramTensor, element_dtype
from heterocc.ir.graph import Graph, Value
from heterocc.sdk import LayoutRegion, device_lock

from .codegen import AcceleratorKernel
from .device import LinkedProgram, SharedTensors


def tensor_format(kernel: AcceleratorKernel, name: str) -> tuple:
    """What must agree for two programs to share tensor ``name``'s bytes: its tiles'
    shapes and element type, its extents, and the layout its matrix holds."""
    t: DramTensor = kernel.program.tensors[name]
    return (t.rows, t.cols, t.tile_rows, t.tile_cols, t.unit_bytes,
            element_dtype(kernel.config, t.buffer).str)


def linkable(kernel: AcceleratorKernel, name: str) -> bool:
    """Whether tensor ``name`` of ``kernel``'s program can live outside its image: no
    other tensor overlaps it (a gather's input parts share one tensor's bytes) and every
    transfer of it lies within it (``relocate_tensors`` moves those)."""
    tensors = kernel.program.tensors
    mine = tensors[name]
    for other in tensors.values():
        if other.name != name and other.byte_address < mine.byte_address + mine.nbytes \
                and mine.byte_address < other.byte_address + other.nbytes:
            return False
    return movable_tensor(kernel.program.instructions, kernel.config, mine)


def port_key(kernel: AcceleratorKernel, position: int | None) -> str | None:
    """The form in which ``kernel``'s program holds its input ``position`` (None: its
    output) where another program may share it in the device's DRAM: the hardware, the
    layout and the tensor's tiles (``heterocc.sdk.Port.key``); None where it cannot be
    shared (the host's layout, an im2col matrix, a tensor the program cannot move)."""
    if position is None:
        layout, name = kernel.output_layout(0), kernel.output_tensor
    else:
        layout, name = kernel.input_layout(position), kernel.input_names[position]
        if name == kernel.output_tensor:
            return None
    if layout is None or not linkable(kernel, name):
        return None
    return f"{kernel.config.name}/{layout}/" + "/".join(map(str, tensor_format(kernel, name)))


def hands_over(producer: AcceleratorKernel, consumer: AcceleratorKernel,
               position: int) -> bool:
    """Whether ``consumer``'s input ``position`` can read ``producer``'s output in the
    device's DRAM where the producer wrote it (see the module)."""
    key = port_key(consumer, position)
    return key is not None and key == port_key(producer, None)


class DeviceRegion(LayoutRegion):
    """Runs a region's accelerator kernels (``kernels`` by composite name, in ``body``'s
    order) with the tensors they hand to each other kept in the device's DRAM (see the
    module); tensors that cannot be are handed over as ``LayoutRegion`` does. Counts,
    on the last run, the tensors kept on the device (``kept_on_device``, also in
    ``handed_over``) and the region's link traffic (``bytes_in``, ``bytes_out``)."""

    def __init__(self, body: Graph, kernels: dict[str, AcceleratorKernel]):
        super().__init__(body, kernels)
        #: (node name, input position) read from a shared tensor
        self.on_device: set[tuple[str, int]] = set()
        shared: dict[Value, str] = {}
        consumers: dict[Value, list[tuple[str, int]]] = defaultdict(list)
        for node in body.nodes:
            kernel = kernels[node.name]
            for position, value in enumerate(node.inputs):
                consumers[value].append((node.name, position))
                if value in self.producer and isinstance(kernel, AcceleratorKernel):
                    producer, index = self.producer[value]
                    if index == 0 and isinstance(producer, AcceleratorKernel) and \
                            hands_over(producer, kernel, position):
                        self.on_device.add((node.name, position))
                        shared.setdefault(value, f"t{len(shared)}")
        region = SharedTensors(
            ",".join(n.name for n in body.nodes[:1]),
            {name: self.producer[value][0].program.tensors[
                self.producer[value][0].output_tensor].nbytes
             for value, name in shared.items()})
        #: each node's program (linked where it has shared tensors) and whether its
        #: output is read back (a region output, or a consumer not on the device path)
        self.programs: dict[str, object] = {}
        self.reads: dict[str, bool] = {}
        outputs = set(body.outputs)
        for node in body.nodes:
            kernel = kernels[node.name]
            out = node.outputs[0]
            links = {}
            if out in shared:
                links[kernel.output_tensor] = shared[out]
            for position, value in enumerate(node.inputs):
                if (node.name, position) in self.on_device:
                    links[kernel.input_names[position]] = shared[value]
            self.programs[node.name] = (LinkedProgram(kernel.program, region, links)
                                        if links else getattr(kernel, "program", None))
            self.reads[node.name] = out in outputs or any(
                use not in self.on_device for use in consumers[out]) or out not in shared
        self.kept_on_device = 0
        self.bytes_in = self.bytes_out = 0

    def _device(self):
        """The one device every kernel runs on, or None (then tensors go by the host)."""
        devices = {id(k.device): k.device for k in self.kernels.values()
                   if isinstance(k, AcceleratorKernel)}
        if len(devices) != 1 or len(self.kernels) != sum(
                isinstance(k, AcceleratorKernel) for k in self.kernels.values()):
            return None
        device = next(iter(devices.values()))
        return device if getattr(device, "shares_tensors", True) else None

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        device = self._device()
        if device is None or not self.on_device:
            return super().__call__(args)
        # the region's call holds the device from its first program to its last: its
        # shared tensors are one per device, so two calls must not interleave
        with device_lock(device):
            return self.run_with(args, _run_linked)

    def run_with(self, args: Sequence[np.ndarray], run) -> list[np.ndarray]:
        """The region's call with each program run by ``run(kernel, program, writes,
        read)`` (the device's, or the host's steps alone: ``cost.region_host_steps``):
        ``writes`` the (tensor, matrix) pairs that cross the link, ``read`` whether the
        output does; it returns the output's matrix where read."""
        host: dict[Value, np.ndarray] = dict(zip(self.body.inputs, args))
        arrays: dict[Value, np.ndarray] = {}
        self.handed_over = self.converted = self.kept_on_device = 0
        self.bytes_in = self.bytes_out = 0
        for node in self.body.nodes:
            kernel = self.kernels[node.name]
            writes = []
            for position, value in enumerate(node.inputs):
                if (node.name, position) in self.on_device:
                    self.handed_over += 1
                    self.kept_on_device += 1
                    continue
                writes.append((kernel.input_names[position],
                               self._input(kernel, position, value, host, arrays)))
            found = run(kernel, self.programs[node.name], writes, self.reads[node.name])
            self.bytes_in += getattr(kernel, "last_bytes_in", 0)
            self.bytes_out += getattr(kernel, "last_bytes_out", 0)
            if found is not None:
                arrays[node.outputs[0]] = found
        return [self._host(value, host, arrays) for value in self.body.outputs]


def _run_linked(kernel: AcceleratorKernel, program, writes, read: bool):
    return kernel.run_linked(program, writes, read)
