"""One exception hierarchy for everything heterocc raises at a user.

Messages name the op, node, tensor or instruction at fault and, where it is
known, what would fix it.
"""

from __future__ import annotations


class HeteroccError(Exception):
    """Base of every error heterocc raises on purpose."""


class ModelLoadError(HeteroccError):
    """The model could not be read: bad bytes, a failed ONNX check, a bad path."""


class UnsupportedOpError(HeteroccError):
    """One or more operators have no implementation.

    ``missing`` maps each unsupported op type to the names of the nodes using it.
    """

    def __init__(self, missing: dict[str, list[str]], domain_note: str = ""):
        self.missing = {op: list(nodes) for op, nodes in missing.items()}
        lines = [f"{len(self.missing)} unsupported operator type(s):"]
        for op, nodes in sorted(self.missing.items()):
            shown = ", ".join(repr(n) for n in nodes[:8])
            more = f" and {len(nodes) - 8} more" if len(nodes) > 8 else ""
            lines.append(f"  {op}: used by node(s) {shown}{more}")
        if domain_note:
            lines.append(domain_note)
        super().__init__("\n".join(lines))


class GraphError(HeteroccError):
    """The graph is malformed: a cycle, an undefined input, inconsistent types."""


class TypeInferenceError(HeteroccError):
    """An op's inputs or attributes do not fit together."""


class InputError(HeteroccError):
    """Inputs given at run time do not match the model: name, shape, dtype or count."""


class CompileError(HeteroccError):
    """A target could not compile part of the model. ``kept_files``: files the target
    wrote for the user to finish by hand (e.g. an object file no linker here could link);
    an artifact export that fails keeps them beside the artifact's path."""

    def __init__(self, message: str = "", kept_files: tuple[str, ...] = ()):
        super().__init__(message)
        self.kept_files = tuple(kept_files)


class PartitionError(CompileError):
    """Strict partitioning refused a silent fallback to the CPU."""


class FallbackError(PartitionError):
    """Strict mode refused a fallback (a target taking nothing, an emulated device, an op
    run on NumPy, ...) that heterocc would otherwise only have warned about."""


class ArtifactError(HeteroccError):
    """An exported artifact is corrupt, tampered with, or from another format version."""


class TargetError(HeteroccError):
    """An unknown target, or a target that failed to register."""


class PatternError(TargetError):
    """A target's pattern table is malformed (e.g. it leaves an op's input unchecked)."""


class AcceleratorError(HeteroccError):
    """Base of errors from the accelerator's ISA, stream checker and simulator."""


class IllegalInstructionError(AcceleratorError):
    """An instruction that cannot be encoded, decoded or executed.

    ``index`` is the instruction's position in its stream (None when unknown);
    ``field`` the field (or product of fields) at fault and ``limit`` the bound it
    broke, where the refusal is about one (None otherwise).
    """

    def __init__(self, message: str, index: int | None = None, field: str | None = None,
                 limit: int | None = None):
        self.index = index
        self.field = field
        self.limit = limit
        prefix = f"instruction {index}: " if index is not None else ""
        super().__init__(prefix + message)


class DeadlockError(AcceleratorError):
    """The modules of the accelerator wait on each other forever."""


class TuningError(HeteroccError):
    """The tuner could not run, or a tuning log is unreadable."""


class ResourceError(HeteroccError):
    """A model needs more than a stated limit allows: a tensor larger than the memory
    budget (``heterocc.runtime.budget``), or a graph beyond a size the compiler handles."""
