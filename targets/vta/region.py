"""One accelerator region run as a whole: tensors stay in the accelerator's layout
between its functions.

A region is a convex group of composites (``partition``); each became an
``AcceleratorKernel``. Direct convolutions, residual additions and max pools read
and write their activations in one blocked layout (``codegen.to_blocked``), so a
tensor one of them produces is handed to the next one as the matrix of tiles it
already is: the host converts layouts only where a tensor enters the region, leaves it, or meets a
kernel with another layout (an im2col or dense GEMM). Channels padded up to a whole
block hold whatever the producer's epilogue left there: a convolution multiplies them
by zero weights, an addition's and a pool's padded lanes are dropped on the way out,
so results do not depend on them.
"""

from __future__ import annotations

import numpy as np

from heterocc.ir.graph import Graph, Value

from .codegen import AcceleratorKernel


class BlockedRegion:
    """Runs the composites of ``body`` (``kernels`` by node name) in order; counts the
    tensors handed over in the blocked layout (``handed_over``) and those converted
    (``converted``) on the last run."""

    def __init__(self, body: Graph, kernels: dict[str, AcceleratorKernel]):
        self.body = body
        self.kernels = kernels
        self.producer = {node.outputs[0]: kernels[node.name] for node in body.nodes}
        self.handed_over = 0
        self.converted = 0

    def _matrix(self, kernel: AcceleratorKernel, position: int, value: Value,
                host: dict, device: dict) -> np.ndarray:
        """Input ``position`` of ``kernel`` as the matrix of its program's tensor."""
        name = kernel.input_names[position]
        tensor = kernel.program.tensors[name]
        if kernel.blocked and value in device and self.producer[value].blocked and \
                device[value].shape == (tensor.rows, tensor.cols):
            self.handed_over += 1
            return device[value]
        self.converted += 1
        layouts = [kernel.to_device] + [layout for _, layout in kernel.more_inputs]
        return layouts[position](self._host(value, host, device))

    def _host(self, value: Value, host: dict, device: dict) -> np.ndarray:
        if value.is_const:
            return value.data
        if value not in host:
            host[value] = self.producer[value].from_device(device[value])
        return host[value]

    def __call__(self, args):
        host = dict(zip(self.body.inputs, args))
        device: dict[Value, np.ndarray] = {}
        self.handed_over = self.converted = 0
        for node in self.body.nodes:
            kernel = self.kernels[node.name]
            matrices = [self._matrix(kernel, position, value, host, device)
                        for position, value in enumerate(node.inputs)]
            device[node.outputs[0]] = kernel.run_device(matrices)
        return [self._host(value, host, device) for value in self.body.outputs]
