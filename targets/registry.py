"""The target registry: the one place core meets a particular target.

A target compiles the functions the partitioner gives it into kernels: callables
from a list of NumPy arrays to a list of NumPy arrays. Built-in targets
(:data:`BUILTIN_TARGETS`) register here when the registry is first asked for a
target; targets from other packages are found through the entry-point group
``heterocc.targets`` (each entry point names a Target class or factory).

Besides ``name`` and ``build`` a target may offer optional hooks, looked up by
the compiler where it needs them (``heterocc.sdk`` documents each as a protocol):
``pattern_table`` (partitioning), ``graph_passes`` (its passes in the compile
pipeline), ``save_kernels``/``load_kernel`` (artifacts), ``tuning`` (its tuning
templates, tasks and measurement) and ``hil_command`` (``heterocc hil`` on a model).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol

import numpy as np

from heterocc.errors import TargetError
from heterocc.ir.graph import Node

Kernel = Callable[[Sequence[np.ndarray]], list[np.ndarray]]

ENTRY_POINT_GROUP = "heterocc.targets"
#: the built-in targets: sub-packages of ``heterocc.targets`` that register themselves
#: when imported. They are imported on first use of the registry, like plugins, so
#: that core can import the registry without importing any particular target.
BUILTIN_TARGETS = ("reference", "llvm", "cuda", "vta")


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


_TARGETS: dict[str, TargetInfo] = {}
_discovered = False


def register_target(name: str, factory: Callable[..., Target], description: str = "",
                    source: str = "builtin") -> None:
    """Register ``factory(**options) -> Target`` under ``name``."""
    if name in _TARGETS and _TARGETS[name].factory is not factory:
        raise TargetError(f"target {name!r} is registered twice "
                          f"({_TARGETS[name].source} and {source})")
    _TARGETS[name] = TargetInfo(name, factory, source, description)


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for name in BUILTIN_TARGETS:
        importlib.import_module(f"{__package__}.{name}")
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _TARGETS:
            continue
        try:
            factory = ep.load()
        except Exception as exc:  # a broken plugin must not break the compiler
            raise TargetError(f"target plugin {ep.name!r} ({ep.value}) failed to load: "
                              f"{type(exc).__name__}: {exc}") from exc
        register_target(ep.name, factory, getattr(factory, "__doc__", "") or "",
                        source=ep.value)


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
    if options:
        try:
            inspect.signature(info.factory).bind(**options)
        except TypeError as error:
            raise TargetError(f"target {name!r} does not take the option(s) "
                              f"{', '.join(options)}: {error}") from None
        except ValueError:  # a factory without a signature to check: it decides
            pass
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
