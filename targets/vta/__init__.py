"""The VTA-like accelerator target.

Takes int8 convolutions and dense layers with their bias and requantization, and
quantized additions (the composites of ``patterns.pattern_table``), and runs them as
DAE instruction streams on the accelerator simulator (``heterocc.accel_sim``). The
convolution and GEMM streams are generated from TE through TIR: ``intrin`` (the GEMM tensor
intrinsic), ``schedule`` (packed GEMM + epilogue and its schedule), ``vthreads``,
``dae`` (TIR -> instructions) and ``tokens`` (dependency tokens); additions are ALU
streams (``residual``); a region passes tensors between its kernels in the blocked
layout, kept in its DRAM where two programs share the tiles (``region``); see
``docs/vta.md``.
Everything else stays on the fallback (CPU) target.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from heterocc.accel_sim import HardwareConfig
from heterocc.ir.graph import Graph, Node
from heterocc.sdk import AcceleratorBase, TargetError
from heterocc.sdk.registry import register_target

from .codegen import AcceleratorKernel, compile_composite
from .cost import VtaCostModel, call_estimate
from .device import VtaDevice
from .explore import explore_command
from .intrin import gemm_intrin
from .patterns import pattern_table as _pattern_table
from .region import DeviceRegion
from .streams import write_streams
from .tuning import vta_tuning


@dataclass
class VtaTarget(AcceleratorBase):
    """``config``: a HardwareConfig or a preset name; ``virtual_threads``: 1 or 2;
    ``clock_mhz``, ``link_gbps`` (GB/s) and ``link_latency_us`` replace the config's
    clock and host link (what time estimates use: ``vta -clock_mhz=300 -link_gbps=1``).

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
    clock_mhz: float | str | None = None
    link_gbps: float | str | None = None
    link_latency_us: float | str | None = None
    cost_model: VtaCostModel | None = field(default=None, repr=False)

    def __post_init__(self):
        if isinstance(self.config, str):
            self.config = HardwareConfig.preset(self.config)
        self.config = _with_clock_and_link(self.config, self.clock_mhz, self.link_gbps,
                                           self.link_latency_us)
        self.virtual_threads = int(self.virtual_threads)
        if self.hardware is None:
            self.hardware = VtaDevice(self.config)
        if self.cost_model is None:
            self.cost_model = VtaCostModel(self.config, self.virtual_threads)

    def device(self):
        """The device the programs run on (``hardware``)."""
        return self.hardware

    def options(self) -> dict:
        """The hardware preset and the virtual threads (for reports)."""
        return {"config": self.config.name, "virtual_threads": self.virtual_threads,
                "clock_mhz": self.config.clock_mhz,
                "link_gbps": self.config.link_mbytes_per_s / 1000,
                "link_latency_us": self.config.link_latency_ns / 1000}

    def estimate(self, function: Node):
        """How long a composite takes here: its stream's cycles in the timing model at
        the clock, plus the host link's time for what a call copies (``cost``)."""
        return self.cost_model.estimate(function)

    def lower_bound(self, function: Node):
        """The least time a call of ``function`` takes here without compiling it (the
        copies of its result and of an input over the link; ``cost``)."""
        return self.cost_model.lower_bound(function)

    def lower_bound_kept(self, function: Node):
        """The least time of a call of ``function`` whose tensors stay in the device's
        DRAM between it and its neighbours (``cost``): placement's bound where a
        neighbour on the accelerator could share a tensor with it."""
        return self.cost_model.lower_bound_kept(function)

    def port_bounds(self, function: Node):
        """The least time each copy a call of ``function`` makes over the link takes
        (``cost``): placement's bound of the copies a neighbour on the device could save,
        over ``lower_bound_kept`` (the call without them)."""
        return self.cost_model.port_bounds(function)

    def call_estimate(self, kernel):
        """The modelled time of ``kernel``'s last call (its programs' cycle counts at the
        clock, its copies over the link): a stream's timeline (``run_stream``)."""
        return call_estimate(kernel, self.config)

    def pattern_table(self):
        """The composites this hardware runs (``patterns.pattern_table``)."""
        return _pattern_table(self.config)

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

    def explore_command(self, args) -> int:
        """``heterocc accel explore MODEL``: latency against FPGA resources over a sweep of
        configs (``explore``); each config gets an instance like this one."""
        return explore_command(args, lambda config: type(self)(
            config=config, virtual_threads=self.virtual_threads))

    def write_streams(self, output: str) -> list:
        """The instruction streams of every program this instance compiled (and the DRAM
        images of their last runs) as files (``heterocc accel build``)."""
        return write_streams(self.kernels, output)

    def compile_layer(self, function: Node) -> AcceleratorKernel:
        """One composite as one accelerator program (kept in ``kernels``)."""
        kernel = self.cost_model.take(function)
        if kernel is None:
            kernel = compile_composite(function, self.config, self.virtual_threads)
        kernel.name = function.name
        kernel.device = self.hardware
        self.kernels.append(kernel)
        return kernel

    def region(self, body: Graph, kernels: dict[str, AcceleratorKernel]) -> DeviceRegion:
        """Tensors pass between the region's programs in the accelerator's blocked layout
        and stay in its DRAM where both programs hold them in the same tiles
        (``region.DeviceRegion``, over the SDK's ``LayoutRegion``; the kernels say which of
        their tensors are blocked)."""
        return DeviceRegion(body, kernels)


def _number(option: str, value: float | str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TargetError(f"vta option {option}={value!r} is not a number") from None
    if not number > 0 and option != "link_latency_us" or number < 0:
        raise TargetError(f"vta option {option}={value!r} must be positive")
    return number


def _with_clock_and_link(config: HardwareConfig, clock_mhz, link_gbps,
                         link_latency_us) -> HardwareConfig:
    """``config`` with the clock and host link the target's options give."""
    changes = {}
    if clock_mhz is not None:
        changes["clock_mhz"] = max(1, round(_number("clock_mhz", clock_mhz)))
    if link_gbps is not None:
        changes["link_mbytes_per_s"] = max(1, round(_number("link_gbps", link_gbps) * 1000))
    if link_latency_us is not None:
        changes["link_latency_ns"] = round(_number("link_latency_us", link_latency_us) * 1000)
    return dataclasses.replace(config, **changes) if changes else config


register_target("vta", VtaTarget, "VTA-like int8 accelerator (DAE streams on accel_sim)")
