"""TIR functors: dispatch by node class, inherited rules, extra arguments, the error for
a node without a rule, and the rule table filled once per node class."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from heterocc import tir
from heterocc.errors import CompileError
from heterocc.tir.functor import ExprFunctor, StmtEmitter

I = tir.Var("i")
BUF = tir.Buffer("b", (4,), "int64")


class Depth(ExprFunctor):
    """Depth of an expression tree; leaves count one."""

    def visit_Binary(self, node):
        return 1 + max(self.expr(node.a), self.expr(node.b))

    def visit_Var(self, node):
        return 1

    visit_IntImm = visit_Var


def test_rules_dispatch_by_node_class():
    assert Depth().expr(I + 1) == 2
    assert Depth().expr((I + 1) * (I - 2) + 3) == 4


def test_a_node_without_a_rule_is_an_error_naming_the_functor_and_the_node():
    with pytest.raises(CompileError, match=r"Depth: unsupported expression Cast"):
        Depth().expr(tir.cast("int32", I))

    class Named(Depth):
        role = "depth counter"

    with pytest.raises(CompileError, match=r"depth counter: unsupported expression Cast"):
        Named().expr(tir.cast("int32", I))


@dataclass(frozen=True, eq=False, repr=False)
class Fence(tir.Evaluate):
    """A statement class from outside the TIR core, derived from a core one."""


class Lines(StmtEmitter, ExprFunctor):
    """Statements to lines at an indent (an extra argument of every rule)."""

    def __init__(self):
        self.lines = []

    def visit_Evaluate(self, node, indent):
        self.lines.append("  " * indent + f"eval {self.expr(node.value)}")

    def visit_For(self, node, indent):
        self.lines.append("  " * indent + f"for {node.var.name}")
        self.stmt(node.body, indent + 1)

    def visit_Var(self, node):
        return node.name


def test_a_sequence_runs_in_order_and_rules_take_extra_arguments():
    body = tir.seq([tir.Evaluate(I), tir.For(I, 0, 4, tir.ForKind.SERIAL, tir.Evaluate(I))])
    printer = Lines()
    printer.stmt(body, 1)
    assert printer.lines == ["  eval i", "  for i", "    eval i"]


def test_a_subclass_takes_the_rule_of_its_nearest_base_until_it_has_its_own():
    printer = Lines()
    printer.stmt(Fence(I), 0)
    assert printer.lines == ["eval i"]

    class FenceLines(Lines):
        def visit_Fence(self, node, indent):
            self.lines.append("fence")

    fenced = FenceLines()
    fenced.stmt(tir.seq([Fence(I), tir.Evaluate(I)]), 0)
    assert fenced.lines == ["fence", "eval i"]


def test_each_functor_class_keeps_its_own_table_filled_once_per_node_class():
    class Counting(Depth):
        lookups = 0

        @classmethod
        def rule_for(cls, node_class):
            cls.lookups += 1
            return super().rule_for(node_class)

    functor = Counting()
    for _ in range(3):
        functor.expr((I + 1) * 2)
    assert Counting.lookups == 3  # Binary, Var, IntImm: looked up once each
    assert set(Counting._rules) == {tir.Binary, tir.Var, tir.IntImm}
    assert tir.Binary not in Lines._rules


def test_mutators_dispatch_through_the_functor():
    class Double(tir.Mutator):
        def visit_IntImm(self, node):
            return tir.const(node.value * 2, node.dtype)

    doubled = Double().stmt(tir.BufferStore(BUF, I + 3, (1,)))
    assert tir.stmt_to_str(doubled) == "b[2] = (i + 6)"
