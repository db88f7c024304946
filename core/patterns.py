"""Dataflow patterns over the Graph IR, for partitioning (BYOC pattern tables).

A pattern describes the producer tree of a value::

    conv = is_op("ConvInteger")(wildcard(), is_constant())
    bias = is_op("Add")(conv, is_constant())
    pattern = is_op("Requantize")(bias | conv)

``match(pattern, value, producers)`` returns the nodes the pattern covers
(a :class:`Match`) or None. ``optional(p)`` also matches an omitted input,
``absent()`` only an omitted one.

A row of a target's pattern table (:class:`CompositePattern`) must say something about
every input of every op it lists: an input it left out (a zero point, a bias) would
pass unchecked into the target's composite, so building the row raises a
``PatternError`` naming each one. (Input positions past a pattern's listed inputs
are not checked by ``match`` itself, which the compiler's own rewrites rely on.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .errors import PatternError
from .ir.graph import Node, Value
from .ops.registry import get_op, has_op


class Pattern:
    """Base of all patterns; ``a | b`` is an alternative."""

    def __or__(self, other: Pattern) -> Pattern:
        return Alt(self, other)

    def match(self, value: Value | None, producers: Mapping[Value, Node],
              found: Match) -> bool:
        raise NotImplementedError


@dataclass
class Match:
    """Nodes covered by a successful match, in topological order, and bound inputs."""

    nodes: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)

    def copy(self) -> Match:
        return Match(list(self.nodes), list(self.inputs))


@dataclass(eq=False)
class Wildcard(Pattern):
    """Any value (becomes an input of the composite)."""

    def match(self, value, producers, found):
        if value is None:
            return False
        if not value.is_const:
            found.inputs.append(value)
        return True


@dataclass(eq=False)
class IsConstant(Pattern):
    """A constant, optionally satisfying ``predicate(array)``."""

    predicate: Callable | None = None

    def match(self, value, producers, found):
        return value is not None and value.is_const and (
            self.predicate is None or bool(self.predicate(value.data)))


@dataclass(eq=False)
class Optional(Pattern):
    """``inner``, or an omitted input."""

    inner: Pattern

    def match(self, value, producers, found):
        return value is None or self.inner.match(value, producers, found)


@dataclass(eq=False)
class Absent(Pattern):
    """Only an omitted input (e.g. no zero point: the op's default of zero)."""

    def match(self, value, producers, found):
        return value is None


@dataclass(eq=False)
class Alt(Pattern):
    """The first of two alternatives that matches."""

    first: Pattern
    second: Pattern

    def match(self, value, producers, found):
        for option in (self.first, self.second):
            trial = found.copy()
            if option.match(value, producers, trial):
                found.nodes[:], found.inputs[:] = trial.nodes, trial.inputs
                return True
        return False


@dataclass(eq=False)
class OpPattern(Pattern):
    """A node applying ``op`` whose inputs match ``inputs`` and whose attributes
    satisfy ``attrs`` (a callable on the attribute dict)."""

    op: str
    inputs: tuple[Pattern, ...] = ()
    attrs: Callable[[dict], bool] | None = None

    def __call__(self, *inputs: Pattern) -> OpPattern:
        return OpPattern(self.op, tuple(inputs), self.attrs)

    def where(self, attrs: Callable[[dict], bool]) -> OpPattern:
        return OpPattern(self.op, self.inputs, attrs)

    def match(self, value, producers, found):
        if value is None or value.is_const:
            return False
        node = producers.get(value)
        if node is None or node.op != self.op or node.body is not None:
            return False
        if self.attrs is not None and not self.attrs(node.attrs):
            return False
        for k, sub in enumerate(self.inputs):
            arg = node.inputs[k] if k < len(node.inputs) else None
            if not sub.match(arg, producers, found):
                return False
        if node not in found.nodes:
            found.nodes.append(node)
        return True


def is_op(op: str) -> OpPattern:
    """A node applying ``op``; call the result with the inputs' patterns, in order."""
    return OpPattern(op)


def wildcard() -> Wildcard:
    """Any value; it becomes an input of the composite."""
    return Wildcard()


def is_constant(predicate: Callable | None = None) -> IsConstant:
    """A constant, for which ``predicate(array)`` holds when one is given."""
    return IsConstant(predicate)


def optional(inner: Pattern) -> Optional:
    """``inner``, or an omitted input."""
    return Optional(inner)


def absent() -> Absent:
    """Only an omitted input (a zero point left at its default of zero)."""
    return Absent()


def unlisted_inputs(pattern: Pattern) -> list[str]:
    """``op.input`` for every input that an op of ``pattern`` may receive but the
    pattern does not list (variadic ops and ops outside the registry are not checked)."""
    missing: list[str] = []
    seen: set[int] = set()

    def visit(p: Pattern) -> None:
        if id(p) in seen:
            return
        seen.add(id(p))
        if isinstance(p, Alt):
            visit(p.first)
            visit(p.second)
        elif isinstance(p, Optional):
            visit(p.inner)
        elif isinstance(p, OpPattern):
            # an op only the target knows has no declared inputs to check against
            names = get_op(p.op).input_names if has_op(p.op) else None
            if names is not None:
                missing.extend(f"{p.op}.{name}" for name in names[len(p.inputs):])
            for sub in p.inputs:
                visit(sub)

    visit(pattern)
    return list(dict.fromkeys(missing))


def match(pattern: Pattern, value: Value, producers: Mapping[Value, Node]) -> Match | None:
    """The nodes ``pattern`` covers when rooted at ``value``'s producer, or None."""
    found = Match()
    if not pattern.match(value, producers, found):
        return None
    # inputs: unique, in order, and not produced inside the match
    inside = {v for n in found.nodes for v in n.outputs}
    found.inputs = list(dict.fromkeys(v for v in found.inputs if v not in inside))
    return found


@dataclass
class CompositePattern:
    """One row of a target's pattern table.

    ``check(nodes) -> str | None`` returns why the target cannot take a match
    (e.g. "channels not a multiple of 16"), or None when it can.
    """

    name: str
    pattern: Pattern
    check: Callable[[list[Node]], str | None] | None = None

    def __post_init__(self):
        missing = unlisted_inputs(self.pattern)
        if missing:
            raise PatternError(
                f"pattern {self.name!r} does not look at input(s) {', '.join(missing)}: a "
                "match would take them unchecked. List each one: a sub-pattern, "
                "optional(...) where it may be omitted, or absent() where the target "
                "handles only its omission (e.g. no zero point)")

    def reject_reason(self, nodes: list[Node]) -> str | None:
        return self.check(nodes) if self.check is not None else None
