"""Code-generation targets, one sub-package each, behind one registry."""

from . import cuda, llvm, reference, vta  # noqa: F401  (register the built-in targets)
from .registry import (
    ENTRY_POINT_GROUP,
    Kernel,
    Target,
    TargetInfo,
    available_targets,
    get_target,
    parse_targets,
    register_target,
)

__all__ = ["ENTRY_POINT_GROUP", "Kernel", "Target", "TargetInfo", "available_targets",
           "get_target", "parse_targets", "register_target"]
