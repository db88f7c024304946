"""The in-tree code-generation targets, one sub-package each, built on ``heterocc.sdk`` as
an outside target would be; they register in the SDK's registry, which imports them when
it is first used (``heterocc.sdk.registry.BUILTIN_TARGETS``)."""

from heterocc.sdk import (
    ENTRY_POINT_GROUP,
    Kernel,
    Target,
    TargetInfo,
    available_targets,
    get_target,
    register_target,
)
from heterocc.sdk.registry import parse_targets

__all__ = ["ENTRY_POINT_GROUP", "Kernel", "Target", "TargetInfo", "available_targets",
           "get_target", "parse_targets", "register_target"]
