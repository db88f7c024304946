"""Dispatch on the class of a TIR (or TE) node: one rule per node class.

A functor is a class with a method ``visit_<NodeClass>`` for each node class it handles,
for expressions (:class:`ExprFunctor`, entry point :meth:`~ExprFunctor.expr`) and for
statements (:class:`StmtFunctor`, entry point :meth:`~StmtFunctor.stmt`); extra
arguments of the entry point are passed on to the rule. Every code generator and TIR
pass walks the tree this way:

    class Depth(ExprFunctor):
        def visit_Binary(self, node):
            return 1 + max(self.expr(node.a), self.expr(node.b))

        def visit_default(self, node):
            return 1

A node class without a rule of its own takes the rule of its nearest base class that
has one (a target's statement subclass can reuse a generic rule), else
:meth:`~Functor.visit_default`, which raises: a functor that meets a node it was not
written for says so instead of producing something wrong. Node classes defined outside
the TIR core (TE's tensor reads, a target's barrier) dispatch the same way.

The rule of a node class is looked up once per functor class (following the node class's
bases) and then kept in that functor class's table, so a visit costs one dictionary
lookup, however many rules a functor has.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from heterocc.errors import CompileError

from .stmt import SeqStmt, Stmt

#: the prefix of rule names: ``visit_Binary`` handles :class:`~heterocc.tir.expr.Binary`
RULE_PREFIX = "visit_"


class Functor:
    """Dispatch by node class, shared by :class:`ExprFunctor` and :class:`StmtFunctor`
    (a class may be both: expression and statement classes have distinct names, so
    one table holds the rules of both)."""

    #: how error messages name this functor (e.g. "LLVM codegen"); the class name if empty
    role: ClassVar[str] = ""
    #: rules found so far, by node class; each functor class has its own table
    _rules: ClassVar[dict[type, Callable[..., Any]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._rules = {}

    @classmethod
    def rule_for(cls, node_class: type) -> Callable[..., Any]:
        """The method (unbound) that handles nodes of ``node_class``: the
        ``visit_<Class>`` of the nearest class in its method resolution order, else
        :meth:`visit_default`."""
        rules = cls._rules
        rule = rules.get(node_class)
        if rule is None:
            rule = cls.visit_default
            for base in node_class.__mro__:
                found = getattr(cls, RULE_PREFIX + base.__name__, None)
                if found is not None:
                    rule = found
                    break
            rules[node_class] = rule
        return rule

    def dispatch(self, node, *args):
        """Apply the rule of ``node``'s class to it (with ``args``)."""
        # the hottest path of every compile: one lookup, no further call frame
        rule = self._rules.get(type(node)) or self.rule_for(type(node))
        return rule(self, node, *args)

    def visit_default(self, node, *args):
        """Nodes without a rule: an error naming the functor and the node."""
        kind = "statement" if isinstance(node, Stmt) else "expression"
        raise CompileError(f"{self.role or type(self).__name__}: unsupported {kind} "
                           f"{type(node).__name__} ({node!r})")


class ExprFunctor(Functor):
    """A computation over expressions, one ``visit_<Class>`` rule per expression class."""

    #: the result of ``node``'s rule (a subclass may wrap it with a memo, calling
    #: :meth:`~Functor.dispatch`)
    expr = Functor.dispatch


class StmtFunctor(Functor):
    """A computation over statements, one ``visit_<Class>`` rule per statement class."""

    #: the result of ``node``'s rule
    stmt = Functor.dispatch


class StmtEmitter(StmtFunctor):
    """A statement functor run for its effect (a code generator): a sequence runs its
    statements in order."""

    def visit_SeqStmt(self, node: SeqStmt, *args) -> None:
        for child in node.stmts:
            self.stmt(child, *args)
