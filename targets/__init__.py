"""Code-generation targets, one sub-package each, behind one registry (the built-in
ones are imported when the registry is first used, see ``registry.BUILTIN_TARGETS``)."""

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
