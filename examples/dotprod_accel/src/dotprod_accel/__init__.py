"""dotprod: an example heterocc target built only on ``heterocc.sdk``.

The machine is a 1x8x4 int8 dot-product array with int16 accumulators, driven by
a command list (``isa.py``), simulated in NumPy (``simulator.py``). It takes int8
dense layers (with their bias) whose accumulators cannot wrap; heterocc keeps
everything else on the CPU. Installing this package makes the target available
as ``"dotprod"`` (entry point group ``heterocc.targets``)::

    heterocc.compile(model, target="dotprod,reference")
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from heterocc.sdk import (
    AcceleratorBase,
    CompositeParts,
    CompositePattern,
    CostEstimate,
    Device,
    Lowering,
    Node,
    TensorIntrin,
    tir,
)

from .codegen import generate, lower_dense
from .cost import estimate
from .intrinsics import dot_intrinsic, vadd_intrinsic
from .isa import MachineConfig
from .patterns import pattern_table
from .simulator import Program, SimulatorDevice

__all__ = ["DotProdTarget", "MachineConfig", "Program", "SimulatorDevice"]


@dataclass
class DotProdTarget(AcceleratorBase):
    """1x8x4 int8 dot-product array, int16 accumulators (example SDK target).

    ``config`` sizes its memories; ``hardware`` is the device every kernel of this
    instance runs on: by default one simulated chip, or a board, or a
    ``MirroredDevice`` comparing a board with the simulator."""

    config: MachineConfig = field(default_factory=MachineConfig)
    name: str = "dotprod"
    hardware: Device | None = None

    def __post_init__(self):
        if self.hardware is None:
            self.hardware = SimulatorDevice(self.config)

    def options(self) -> dict[str, Any]:
        return asdict(self.config)

    def pattern_table(self) -> list[CompositePattern]:
        return pattern_table(self.config)

    def tensor_intrinsics(self) -> list[TensorIntrin]:
        return [dot_intrinsic(), vadd_intrinsic()]

    def lower(self, parts: CompositeParts) -> Lowering:
        return lower_dense(parts)

    def codegen(self, func: tir.PrimFunc) -> Program:
        return generate(func, self.config)

    def device(self) -> Device:
        return self.hardware

    def estimate(self, function: Node) -> CostEstimate | None:
        """How long a composite takes here (placement by cost; ``cost.py``)."""
        return estimate(self, function)
