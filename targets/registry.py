"""The target registry.

A target compiles the functions the partitioner gives it into kernels: callables
from a list of NumPy arrays to a list of NumPy arrays. Built-in targets register
here on import; targets from other packages are found through the entry-point
group ``heterocc.targets`` (each entry point names a Target class or factory).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol

import numpy as np

from heterocc.errors import TargetError
from heterocc.ir.graph import Node

Kernel = Callable[[Sequence[np.ndarray]], list[np.ndarray]]

ENTRY_POINT_GROUP = "heterocc.targets"


class Target(Protocol):
    """What the compiler needs from a target."""

    name: str

    def build(self, function: Node) -> Kernel:
        """Compile one function node (``function.body`` is its graph) into a kernel."""
        ...


@dataclass
class TargetInfo:
    """A registered target: its factory and where it came from."""

    name: str
    factory: Callable[..., Target]
    source: str = "builtin"
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    from_entry_point: bool = False


_TARGETS: dict[str, TargetInfo] = {}
_discovered = False


def register_target(name: str, factory: Callable[..., Target], description: str = "",
                    source: str = "builtin", replace: bool = False) -> None:
    """Register ``factory(**options) -> Target`` under ``name``.

    A name already taken by another factory: an in-process registration replaces one
    found through an entry point, with a warning (a notebook redefining a packaged
    plugin); ``replace=True`` replaces any registration silently; otherwise it is a
    TargetError. Entry points never replace an in-process registration: discovery skips
    their names."""
    existing = _TARGETS.get(name)
    if existing is not None and existing.factory is not factory and not replace:
        if not existing.from_entry_point or source != "builtin":
            raise TargetError(f"target {name!r} is registered twice ({existing.source} and "
                              f"{source}); pass replace=True to replace it")
        warnings.warn(f"target {name!r}: the registration in this process replaces the one "
                      f"from entry point {existing.source}", stacklevel=2)
    _TARGETS[name] = TargetInfo(name, factory, source, description)


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _TARGETS:
            continue
        try:
            factory = ep.load()
        except Exception as exc:  # a broken plugin must not break the compiler
            raise TargetError(f"target plugin {ep.name!r} ({ep.value}) failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc
        _TARGETS[ep.name] = TargetInfo(ep.name, factory, ep.value,
                                       getattr(factory, "__doc__", "") or "",
                                       from_entry_point=True)


def available_targets() -> dict[str, TargetInfo]:
    """Every registered target (built-in and from entry points) by name."""
    _discover()
    return dict(sorted(_TARGETS.items()))


def get_target(name: str, **options) -> Target:
    """An instance of target ``name``; TargetError naming the known ones otherwise."""
    _discover()
    try:
        info = _TARGETS[name]
    except KeyError:
        raise TargetError(f"unknown target {name!r}; available: "
                          f"{', '.join(sorted(_TARGETS))}") from None
    return info.factory(**options)


def parse_targets(spec) -> list:
    """``"vta,llvm"`` or ``["vta", "llvm"]`` -> ``["vta", "llvm"]``; target instances
    in a list are kept as they are."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() if isinstance(n, str) else n for n in items
             if not isinstance(n, str) or n.strip()]
    if not names:
        raise TargetError("no target given")
    return names
