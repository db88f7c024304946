"""The protocols a target implements: :class:`Target` (``name`` and ``build``, the only
required part) and the optional hooks the compiler looks for where it needs them.

A target need not derive from any of them: they are ``typing.Protocol`` s, checked by the
methods an object has (``isinstance(target, PartitioningTarget)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from heterocc.ir.graph import Node
from heterocc.patterns import CompositePattern

if TYPE_CHECKING:  # the tuning package finds targets through the registry
    from heterocc.tuning.templates import TargetTuning

#: a compiled function: NumPy arrays in (the function's inputs, in order), NumPy arrays out
Kernel = Callable[[Sequence[np.ndarray]], list[np.ndarray]]

#: the entry-point group through which other distributions add targets
ENTRY_POINT_GROUP = "heterocc.targets"


@runtime_checkable
class Target(Protocol):
    """What the compiler needs from a target."""

    name: str

    def build(self, function: Node) -> Kernel:
        """Compile one function node (``function.body`` is its graph) into a kernel."""
        ...


# --------------------------------------------------------------------------- protocols


@runtime_checkable
class PartitioningTarget(Target, Protocol):
    """A target that takes part of a model: the partitioner offers it every match
    of its pattern table (in order, the first accepted row wins) and the CPU keeps
    the rest."""

    def pattern_table(self) -> list[CompositePattern]:
        """The composites this target accepts; a row's ``check`` says why a match
        is refused (the reason lands in the placement report)."""
        ...


@runtime_checkable
class GraphPassTarget(Target, Protocol):
    """A target with graph passes of its own (a layout of its choosing, say). When it is
    the fallback, the compile pipeline (``heterocc.passes.pipeline``) runs them after
    quantization and partitioning, on the nodes left to it, and before fusion."""

    def graph_passes(self) -> list:
        """Its passes, in order: registered pass names or ``Graph -> Graph`` functions."""
        ...


@runtime_checkable
class TunableTarget(Target, Protocol):
    """A target whose schedules ``heterocc tune`` can tune (see ``docs/tuning.md``)."""

    def tuning(self) -> TargetTuning:
        """Its templates, the tasks of a model's graph for this instance, and the
        in-process measurement of one candidate."""
        ...


@runtime_checkable
class HilTarget(Target, Protocol):
    """A target whose functions of a model can be replayed on hardware and compared
    (``heterocc hil MODEL.onnx --target NAME``)."""

    def hil_command(self, args) -> int:
        """Run the replay for the parsed ``hil`` arguments; the command's exit status."""
        ...


@runtime_checkable
class ExportableTarget(Target, Protocol):
    """A target whose kernels can be written into an exported artifact and loaded
    back without compiling again."""

    def save_kernels(self, kernels: dict[str, Kernel], directory: str) -> dict:
        """Write ``kernels`` (by function name) under ``directory``; returns the JSON
        description ``load_kernel`` receives back as ``info``."""
        ...

    def load_kernel(self, function: Node, directory: str, info: dict) -> Kernel:
        """The kernel of ``function`` from what ``save_kernels`` wrote."""
        ...

