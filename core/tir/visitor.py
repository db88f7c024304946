"""Generic traversal of TIR (and TE) trees: a rebuilding mutator, a pre-order walk,
substitution of variables."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping

from .expr import Binary, Expr, Var
from .functor import ExprFunctor, StmtFunctor
from .stmt import PrimFunc, Stmt

Node = Expr | Stmt


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(node) -> tuple[str, ...]:
    """Names of the dataclass fields of ``node``'s class (cached per class)."""
    cls = type(node)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


#: node classes whose every field is an ``__init__`` argument, so a copy with new field
#: values is one constructor call (``dataclasses.replace`` costs several times as much)
_POSITIONAL: dict[type, bool] = {}


def rebuild(node, names: tuple[str, ...], values: list):
    """A new node of ``node``'s class with ``values`` for its fields ``names`` (all of
    them, in order): what ``dataclasses.replace`` builds, its checks (``__post_init__``)
    run as there."""
    cls = type(node)
    positional = _POSITIONAL.get(cls)
    if positional is None:
        positional = _POSITIONAL[cls] = all(f.init for f in dataclasses.fields(cls))
    if positional:
        return cls(*values)
    return dataclasses.replace(node, **dict(zip(names, values)))


#: what :func:`children` yields (a tuple: ``isinstance`` with it is faster than with the
#: union ``Node``, which the walks ask for every field of every node)
_NODE_CLASSES = (Expr, Stmt)


def children(node) -> Iterator[Node]:
    """The Expr/Stmt children of ``node`` in field order."""
    return iter(child_list(node))


def child_list(node) -> list[Node]:
    """:func:`children` as a list (the walks' form: no generator per node)."""
    names = _FIELD_NAMES.get(type(node))
    if names is None:
        names = field_names(node)
    found = []
    for name in names:
        value = getattr(node, name)
        if isinstance(value, _NODE_CLASSES):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend([v for v in value if isinstance(v, _NODE_CLASSES)])
    return found


def walk(node: Node, visit: Callable[[Node], None]) -> None:
    """Call ``visit`` on ``node`` and every descendant, parents first; a sub-tree shared
    by several parents (expressions are DAGs) is visited once, at its first place."""
    for current in _distinct_preorder(node, child_list):
        visit(current)


def _distinct_preorder(root: Node, children_of: Callable[[Node], list[Node]]
                       ) -> Iterator[Node]:
    """``root`` and every node reached through ``children_of`` (a list, in order),
    parents first, each distinct node (by identity) once, at its first place."""
    seen: set[int] = set()
    keep: list[Node] = []  # holds every visited node, so no id is reused meanwhile
    stack = [root]
    pop, push, mark, hold = stack.pop, stack.extend, seen.add, keep.append
    while stack:
        current = pop()
        key = id(current)
        if key in seen:
            continue
        mark(key)
        hold(current)
        yield current
        found = children_of(current)
        if found:
            found.reverse()
            push(found)


def collect(node: Node, predicate: Callable[[Node], bool]) -> list[Node]:
    """Every distinct node under ``node`` (inclusive) satisfying ``predicate``, in
    pre-order of first appearance."""
    found: list[Node] = []
    walk(node, lambda n: found.append(n) if predicate(n) else None)
    return found


def collect_statements(stmt: Stmt, predicate: Callable[[Stmt], bool]) -> list[Stmt]:
    """Every distinct statement under ``stmt`` (inclusive) satisfying ``predicate``, in
    pre-order of first appearance: what :func:`collect` finds among statements, without
    walking the expressions (which hold no statements; they are most of a lowered
    function's nodes)."""
    def child_statements(node: Node) -> list[Node]:
        return [c for c in child_list(node) if isinstance(c, Stmt)]

    return [s for s in _distinct_preorder(stmt, child_statements) if predicate(s)]


def free_vars(node: Node) -> set[Var]:
    """Every Var referenced under ``node``."""
    return set(collect(node, lambda n: isinstance(n, Var)))


def uses_any(node: Node, variables: set[Var] | frozenset[Var]) -> bool:
    """Whether ``node`` references one of ``variables``."""
    return any(isinstance(n, Var) and n in variables for n in collect(node, lambda n: True))


class Mutator(ExprFunctor, StmtFunctor):
    """Rebuilds a tree bottom-up; subclasses override ``visit_<NodeClass>`` for the nodes
    they change (dispatched as by every :mod:`~heterocc.tir.functor`) and call
    :meth:`generic` to rebuild the rest. Unchanged subtrees are shared, not copied.

    Expressions are DAGs (a compute reuses a sub-expression; rewriting keeps it shared):
    within one top-level :meth:`expr` call every distinct node is rewritten once and its
    result reused wherever the node appears again, so the cost is linear in the DAG and
    sharing survives. A subclass whose rewriting depends on context that changes inside
    an expression (facts under a select's condition) overrides :meth:`expr` with a memo
    that accounts for it; context changed at statements (loop ranges) needs nothing."""

    _memo: dict[int, tuple[Expr, Expr]] | None = None

    def expr(self, node: Expr) -> Expr:
        memo = self._memo
        if memo is None:
            self._memo = {}
            try:
                return self.dispatch(node)
            finally:
                self._memo = None
        hit = memo.get(id(node))
        if hit is not None:
            return hit[1]
        result = self.dispatch(node)
        memo[id(node)] = (node, result)  # the node kept alive: its id stays its own
        return result

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
        if type(node) is Binary:  # most nodes: what the general case does, without its loop
            a, b = self.expr(node.a), self.expr(node.b)
            return node if a is node.a and b is node.b else Binary(node.op, a, b)
        names = field_names(node)
        values = []
        changed = False
        for name in names:
            value = getattr(node, name)
            mapped = self._map(value)
            if mapped is not value:
                changed = True
            values.append(mapped)
        return rebuild(node, names, values) if changed else node

    #: a node without a rule of this mutator: its children rewritten
    visit_default = generic

    def func(self, func: PrimFunc) -> PrimFunc:
        body = self.stmt(func.body)
        return func if body is func.body else dataclasses.replace(func, body=body)


class StmtMutator(Mutator):
    """A :class:`Mutator` of statements only (loops, guards, allocations): expressions
    hold no statements, so it keeps them as they are without walking them (most of a
    lowered function's nodes are in its expressions)."""

    def expr(self, node: Expr) -> Expr:
        return node


class _Substituter(Mutator):
    """Rewrites only the nodes that use a substituted variable; the others are kept as
    they are without being walked. Which nodes use one (``uses``, by id) depends on the
    variables, not on what replaces them, so the copies of one body for several values
    of its variables share it."""

    def __init__(self, mapping: Mapping[Var, Expr], uses: dict[int, tuple[Node, bool]]):
        self.mapping = mapping
        self.uses = uses

    def _uses(self, node: Node) -> bool:
        hit = self.uses.get(id(node))
        if hit is not None:
            return hit[1]
        if isinstance(node, Var):
            found = node in self.mapping
        else:
            found = False
            for child in child_list(node):
                if self._uses(child):
                    found = True
                    break
        self.uses[id(node)] = (node, found)  # the node kept alive: its id stays its own
        return found

    def expr(self, node: Expr) -> Expr:
        return super().expr(node) if self._uses(node) else node

    def stmt(self, node: Stmt) -> Stmt:
        return self.dispatch(node) if self._uses(node) else node

    def visit_Var(self, node: Var) -> Expr:
        return self.mapping.get(node, node)


def substitute(node: Node, mapping: Mapping[Var, Expr]) -> Node:
    """``node`` with each Var in ``mapping`` replaced by its expression (the sub-trees
    that use none of them are shared with ``node``, not copied)."""
    if not mapping:
        return node
    sub = _Substituter(mapping, {})
    return sub.expr(node) if isinstance(node, Expr) else sub.stmt(node)


def substitute_each(node: Node, var: Var, values: Iterable[Expr]) -> list[Node]:
    """``node`` with ``var`` replaced by each of ``values`` in turn: one copy per value
    (what unrolling a loop makes), each as :func:`substitute` makes it; the walk that
    finds where ``var`` is used is done once for all the copies."""
    uses: dict[int, tuple[Node, bool]] = {}
    copies = []
    for value in values:
        sub = _Substituter({var: value}, uses)
        copies.append(sub.expr(node) if isinstance(node, Expr) else sub.stmt(node))
    return copies
