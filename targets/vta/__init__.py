"""The VTA-like accelerator target.

Takes int8 convolutions and dense layers with their bias and requantization, and
quantized additions (the composites of ``patterns.pattern_table``), and runs them as
DAE instruction streams on the accelerator simulator (``heterocc.accel_sim``). The
convolution and GEMM streams are generated from TE through TIR: ``intrin`` (the GEMM tensor
intrinsic), ``schedule`` (packed GEMM + epilogue and its schedule), ``vthreads``,
``dae`` (TIR -> instructions) and ``tokens`` (dependency tokens); additions are ALU
streams (``residual``); a region passes tensors between its kernels in the blocked
layout (the SDK's ``LayoutRegion``); see ``docs/vta.md``.
Everything else stays on the fallback (CPU) target.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from heterocc.accel_sim import HardwareConfig
from heterocc.ir.graph import Graph, Node
from heterocc.sdk import AcceleratorBase, LayoutRegion

from ..registry import register_target
from .codegen import AcceleratorKernel, compile_composite
from .device import VtaDevice
from .intrin import gemm_intrin
from .patterns import pattern_table as _pattern_table
from .streams import write_streams
from .tuning import vta_tuning


@dataclass
class VtaTarget(AcceleratorBase):
    """``config``: a HardwareConfig or a preset name; ``virtual_threads``: 1 or 2.

    Built on the SDK's accelerator base (``heterocc.sdk.AcceleratorBase``, which writes
    ``build``): each composite becomes one accelerator program (``compile_layer``), and
    a region hands tensors between them in the blocked layout (``region``)."""

    config: HardwareConfig | str = "1x16x16"
    virtual_threads: int = 2
    name: str = "vta"
    kernels: list[AcceleratorKernel] = field(default_factory=list)
    #: where every program of this instance runs: an SDK device (by default one simulated
    #: accelerator, ``device.VtaDevice``; a ``VtaDevice`` over the RTL or a board, or a
    #: ``heterocc.sdk.MirroredDevice`` comparing one with the simulator)
    hardware: object = None

    def __post_init__(self):
        if isinstance(self.config, str):
            self.config = HardwareConfig.preset(self.config)
        if self.hardware is None:
            self.hardware = VtaDevice(self.config)

    def device(self):
        """The device the programs run on (``hardware``)."""
        return self.hardware

    def options(self) -> dict:
        """The hardware preset and the virtual threads (for reports)."""
        return {"config": self.config.name, "virtual_threads": self.virtual_threads}

    def pattern_table(self):
        return _pattern_table()

    def tensor_intrinsics(self) -> list:
        """The GEMM core's instruction as a TE tensor intrinsic (what the schedules
        tensorize with)."""
        return [gemm_intrin(self.config)]

    def tuning(self):
        """The GEMM tiling space on this hardware (``heterocc tune --target vta``)."""
        return vta_tuning(self.config)

    def hil_command(self, args) -> int:
        """``heterocc hil MODEL.onnx``: the model's accelerator functions on the RTL."""
        from .hil import model_hil_command  # hil builds instances of this module's class

        return model_hil_command(args)

    def write_streams(self, output: str) -> list:
        """The instruction streams of every program this instance compiled (and the DRAM
        images of their last runs) as files (``heterocc accel build``)."""
        return write_streams(self.kernels, output)

    def compile_layer(self, function: Node) -> AcceleratorKernel:
        """One composite as one accelerator program (kept in ``kernels``)."""
        kernel = compile_composite(function, self.config, self.virtual_threads)
        kernel.device = self.hardware
        self.kernels.append(kernel)
        return kernel

    def region(self, body: Graph, kernels: dict[str, AcceleratorKernel]) -> LayoutRegion:
        """Tensors pass between the region's programs in the accelerator's blocked layout
        (the SDK's ``LayoutRegion``; the kernels say which of their tensors are blocked)."""
        return LayoutRegion(body, kernels)


register_target("vta", VtaTarget, "VTA-like int8 accelerator (DAE streams on accel_sim)")
