"""The target registry: the one place core meets a particular target.

A target compiles the functions the partitioner gives it into kernels: callables
from a list of NumPy arrays to a list of NumPy arrays. A built-in target
(:data:`BUILTIN_TARGETS`) registers here when the registry is first asked for it;
targets from other packages are found through the entry-point group
``heterocc.targets`` (each entry point names a Target class or factory) when the
registry is asked for another name or for the list of all.

Besides ``name`` and ``build`` a target may offer optional hooks, looked up by
the compiler where it needs them (``heterocc.sdk`` documents each as a protocol):
``pattern_table`` (partitioning), ``graph_passes`` (its passes in the compile
pipeline), ``save_kernels``/``load_kernel`` (artifacts), ``tuning`` (its tuning
templates, tasks and measurement) and ``hil_command`` (``heterocc hil`` on a model).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import typing
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from heterocc.errors import TargetError

from .protocols import ENTRY_POINT_GROUP, Target

#: the package of the in-tree targets
BUILTIN_PACKAGE = "heterocc.targets"
#: the built-in targets: sub-packages of :data:`BUILTIN_PACKAGE` that register themselves
#: when imported. They are imported on first use of the registry, like plugins, so
#: that core can import the registry without importing any particular target.
BUILTIN_TARGETS = ("reference", "llvm", "cuda", "vta")


@dataclass
class TargetInfo:
    """A registered target: its factory and where it came from."""

    name: str
    factory: Callable[..., Target]
    source: str = "builtin"
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    from_entry_point: bool = False

    @property
    def target_class(self) -> type | None:
        """The class the factory makes: the factory itself when it is a class, else its
        return annotation (None when it has none), so a target's optional hooks can be
        asked for without making one."""
        if isinstance(self.factory, type):
            return self.factory
        try:
            made = typing.get_type_hints(self.factory).get("return")
        except (NameError, TypeError):
            return None
        return made if isinstance(made, type) else None


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
    for name in BUILTIN_TARGETS:
        importlib.import_module(f"{BUILTIN_PACKAGE}.{name}")
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


def _registered(name: str) -> TargetInfo | None:
    """``name``'s registration or None. A built-in name imports only its own package
    (built-ins win over entry points of their name, so the others need not be
    imported: a compile for ``llvm`` skips the accelerators' packages); any other name
    discovers every target."""
    if name not in _TARGETS and name in BUILTIN_TARGETS:
        importlib.import_module(f"{BUILTIN_PACKAGE}.{name}")
    if name not in _TARGETS:
        _discover()
    return _TARGETS.get(name)


def is_registered(name: str) -> bool:
    """Whether a target ``name`` is registered (built-in, in process or by entry point)."""
    return _registered(name) is not None


def _registration(name: str) -> TargetInfo:
    """``name``'s registration; TargetError naming the known targets otherwise."""
    info = _registered(name)
    if info is None:  # _registered has discovered every target
        raise TargetError(f"unknown target {name!r}{suggest(name, _TARGETS)}; available: "
                          f"{', '.join(sorted(_TARGETS))}")
    return info


def available_targets() -> dict[str, TargetInfo]:
    """Every registered target (built-in and from entry points) by name."""
    _discover()
    return dict(sorted(_TARGETS.items()))


def get_target(name: str, **options) -> Target:
    """An instance of target ``name``; TargetError naming the known ones otherwise."""
    info = _registration(name)
    if options:
        try:
            inspect.signature(info.factory).bind(**options)
        except TypeError as error:
            taken = [p.replace("_", "-") for p in inspect.signature(info.factory).parameters]
            hints = "".join(suggest(o.replace("_", "-"), taken) for o in options)
            raise TargetError(f"target {name!r} does not take the option(s) "
                              f"{', '.join(options)}{hints}: {error}") from None
        except ValueError:  # a factory without a signature to check: it decides
            pass
    return info.factory(**options)


#: the target that compiles code for this machine's CPU (always present), and that takes
#: what no accelerator does when a target list names only accelerators
HOST_TARGET = "llvm"


def compile_for_host(funcs: Sequence, name: str):
    """TIR PrimFuncs compiled for this machine's CPU by the host target's
    ``compile_host`` hook (its table of callables by PrimFunc name): how a target that
    needs host code, such as a GPU target running its kernels without a GPU, gets it
    without importing another target."""
    target = get_target(HOST_TARGET)
    hook = getattr(target, "compile_host", None)
    if hook is None:
        raise TargetError(f"target {HOST_TARGET!r} has no compile_host hook: it cannot "
                          f"compile {name!r} for this machine")
    return hook(list(funcs), name)


def parse_target_spec(text: str) -> tuple[str, dict[str, str | bool]]:
    """``"llvm -mcpu=znver3 -num-cores=4"`` -> ``("llvm", {"mcpu": "znver3",
    "num_cores": "4"})``: a target name and its options (TVM's form: ``-key=value``, or
    ``-flag`` for True; dashes in a key become underscores, as keyword arguments)."""
    tokens = text.split()
    if not tokens:
        raise TargetError("no target given")
    name, options = tokens[0], {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not key.startswith("-") or len(key.lstrip("-")) == 0:
            raise TargetError(f"target option {token!r} in {text!r} must be -key=value or "
                              "-flag (e.g. llvm -mcpu=znver3 -mattr=+avx2,-avx512f)")
        key = key.lstrip("-").replace("-", "_")
        if key in options:
            raise TargetError(f"target option -{key} given twice in {text!r}")
        options[key] = value if sep else True
    return name, options


def _split_targets(spec: str) -> list[str]:
    """Comma-separated targets, where a piece starting with ``+`` or ``-`` continues the
    previous target's options (``vta,llvm -mattr=+avx2,-avx512f`` is two targets)."""
    pieces: list[str] = []
    for piece in spec.split(","):
        stripped = piece.strip()
        if pieces and stripped[:1] in ("+", "-") and " " in pieces[-1].strip():
            pieces[-1] += "," + stripped
        else:
            pieces.append(piece)
    return pieces


def parse_targets(spec) -> list:
    """``"vta,llvm"`` or ``["vta", "llvm"]`` -> ``["vta", "llvm"]``; target instances
    in a list are kept as they are. A target with options (``"vta,llvm -mcpu=znver3"``)
    becomes an instance, ``get_target(name, **options)``."""
    items = _split_targets(spec) if isinstance(spec, str) else list(spec)
    targets = []
    for item in items:
        if not isinstance(item, str):
            targets.append(item)
            continue
        if not item.strip():
            continue
        name, options = parse_target_spec(item)
        if not options:
            targets.append(name)
            continue
        try:
            targets.append(get_target(name, **options))
        except TypeError as exc:  # the factory has no such keyword
            raise TargetError(f"target {name!r} does not take the options of {item.strip()!r}: "
                              f"{exc}") from None
    if not targets:
        raise TargetError("no target given")
    return targets


def _target_class(target) -> object:
    """The class (for a name) or instance whose hooks say what kind of target it is."""
    if not isinstance(target, str):
        return target
    made = _registration(target).target_class
    # a factory that does not say what it makes: ask an instance
    return made if made is not None else get_target(target)


def is_accelerator(target) -> bool:
    """Whether ``target`` (a name or an instance) takes only what its pattern table
    matches (a ``pattern_table`` hook: vta, SDK accelerators) rather than any function
    (llvm, cuda, reference)."""
    return callable(getattr(_target_class(target), "pattern_table", None))


def _name_of(target) -> str:
    return target if isinstance(target, str) else target.name


@dataclass
class TargetOrder:
    """A list of targets put in the order the compiler uses: the accelerators first, in
    the order given (the first takes what both match), then the one general-purpose
    target that takes the rest (the fallback). ``warnings`` say what was done to the
    user's order that changes where code runs; ``notes`` what changes only the order."""

    targets: list
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the fallback was not in the list (only accelerators were): HOST_TARGET was added
    added_fallback: bool = False

    @property
    def fallback(self) -> str:
        return _name_of(self.targets[-1])


VALID_ORDERS = ("valid orders: accelerators first (they take what their patterns match, "
                "the first one first), then one CPU or GPU target that takes the rest, "
                "e.g. 'vta,llvm', 'dotprod,vta,cuda', 'llvm' or 'cuda'")


def order_targets(targets: Sequence) -> TargetOrder:
    """The compile order of ``targets`` (names or instances, as :func:`parse_targets`
    gives them). Any order is accepted: accelerators listed after the general-purpose
    target move before it; with several general-purpose targets the last takes the rest
    and the others get nothing (a warning says so); with only accelerators the host CPU
    (:data:`HOST_TARGET`) is added to take what they cannot (a warning says so)."""
    targets = list(targets)
    names = [_name_of(t) for t in targets]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise TargetError(f"target(s) {', '.join(duplicated)} listed twice in "
                          f"{','.join(names)}; {VALID_ORDERS}")
    accelerators = [t for t in targets if is_accelerator(t)]
    general = [t for t in targets if not is_accelerator(t)]
    accel_names = ", ".join(_name_of(t) for t in accelerators)
    order = TargetOrder([])
    if not general:
        order.added_fallback = True
        general = [HOST_TARGET]
        order.warnings.append(
            f"{accel_names} take{'s' if len(accelerators) == 1 else ''} only what "
            f"{'its' if len(accelerators) == 1 else 'their'} patterns match; everything "
            f"else runs on {HOST_TARGET}, the host CPU, added as the fallback (write "
            f"'{','.join(names)},{HOST_TARGET}' to say so, or end the list with cuda for "
            "the GPU)")
    elif len(general) > 1:
        unused = ", ".join(_name_of(t) for t in general[:-1])
        last = _name_of(general[-1])
        order.warnings.append(
            f"targets {unused} and {last} each compile any function, and only one of them "
            f"can take what no accelerator takes: the last, {last}; {unused} get"
            f"{'s' if len(general) == 2 else ''} nothing. To run there, end the list with "
            f"it (e.g. "
            f"'{','.join([*(_name_of(t) for t in accelerators), _name_of(general[0])])}'); "
            f"{VALID_ORDERS}")
        general = general[-1:]
    order.targets = [*accelerators, *general]
    if accelerators and any(not is_accelerator(t) for t in targets[:targets.index(
            accelerators[-1])]):
        order.notes.append(
            f"target order {','.join(names)}: accelerators are offered the model first "
            f"whatever their position, and the general-purpose target takes the rest; "
            f"compiling as {','.join(_name_of(t) for t in order.targets)}")
    return order


def suggest(name: str, choices) -> str:
    """' (did you mean X?)' for the closest of ``choices`` to a misspelt ``name``, or ''."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
