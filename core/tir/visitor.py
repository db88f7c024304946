"""Generic traversal of TIR (and TE) trees: a rebuilding mutator, a pre-order walk,
substitution of variables."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping

from .expr import Expr, Var
from .stmt import PrimFunc, Stmt

Node = Expr | Stmt


def children(node) -> Iterator[Node]:
    """The Expr/Stmt children of ``node`` in field order."""
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Expr | Stmt):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, Expr | Stmt))


def walk(node: Node, visit: Callable[[Node], None]) -> None:
    """Call ``visit`` on ``node`` and every descendant, parents first."""
    stack = [node]
    while stack:
        current = stack.pop()
        visit(current)
        stack.extend(reversed(list(children(current))))


def collect(node: Node, predicate: Callable[[Node], bool]) -> list[Node]:
    """Every node under ``node`` (inclusive) satisfying ``predicate``, in pre-order."""
    found: list[Node] = []
    walk(node, lambda n: found.append(n) if predicate(n) else None)
    return found


def free_vars(node: Node) -> set[Var]:
    """Every Var referenced under ``node``."""
    return set(collect(node, lambda n: isinstance(n, Var)))


def uses_any(node: Node, variables: set[Var] | frozenset[Var]) -> bool:
    """Whether ``node`` references one of ``variables``."""
    return any(isinstance(n, Var) and n in variables for n in collect(node, lambda n: True))


class Mutator:
    """Rebuilds a tree bottom-up; subclasses override ``visit_<NodeClass>`` for the nodes
    they change and call :meth:`generic` to rebuild the rest. Unchanged subtrees are
    shared, not copied."""

    def expr(self, node: Expr) -> Expr:
        method = getattr(self, "visit_" + type(node).__name__, None)
        return method(node) if method else self.generic(node)

    def stmt(self, node: Stmt) -> Stmt:
        method = getattr(self, "visit_" + type(node).__name__, None)
        return method(node) if method else self.generic(node)

    def _map(self, value):
        if isinstance(value, Expr):
            return self.expr(value)
        if isinstance(value, Stmt):
            return self.stmt(value)
        if isinstance(value, tuple):
            mapped = tuple(self._map(v) for v in value)
            return value if all(m is v for m, v in zip(mapped, value)) else mapped
        return value

    def generic(self, node):
        changes = {}
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            mapped = self._map(value)
            if mapped is not value:
                changes[f.name] = mapped
        return dataclasses.replace(node, **changes) if changes else node

    def func(self, func: PrimFunc) -> PrimFunc:
        body = self.stmt(func.body)
        return func if body is func.body else dataclasses.replace(func, body=body)


class _Substituter(Mutator):
    def __init__(self, mapping: Mapping[Var, Expr]):
        self.mapping = mapping

    def visit_Var(self, node: Var) -> Expr:
        return self.mapping.get(node, node)


def substitute(node: Node, mapping: Mapping[Var, Expr]) -> Node:
    """``node`` with each Var in ``mapping`` replaced by its expression."""
    if not mapping:
        return node
    sub = _Substituter(mapping)
    return sub.expr(node) if isinstance(node, Expr) else sub.stmt(node)
