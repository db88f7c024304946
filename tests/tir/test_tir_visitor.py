"""Generic TIR traversal (heterocc.tir.visitor): children, walks, collection, free
variables, substitution and the rebuilding Mutator."""

from __future__ import annotations

from heterocc import tir
from heterocc.tir.visitor import (
    Mutator,
    children,
    collect,
    collect_statements,
    free_vars,
    substitute,
    substitute_each,
    uses_any,
)

I, J = tir.Var("i"), tir.Var("j")
A = tir.Buffer("A", (8, 8), "float32")


def test_children_come_in_field_order():
    load = tir.BufferLoad(A, (I, J))
    assert list(children(load)) == [I, J]
    store = tir.BufferStore(A, load, (J, I))
    assert list(children(store)) == [load, J, I]


def test_collect_visits_a_shared_subtree_once_in_pre_order():
    shared = I * 2
    expr = (shared + shared) * shared
    found = collect(expr, lambda n: isinstance(n, tir.Binary))
    assert found[0] is expr and found.count(shared) == 1 and len(found) == 3


def test_free_vars_and_uses_any():
    stmt = tir.For(I, 0, 8, tir.ForKind.SERIAL, tir.BufferStore(A, 1.0, (I, J)))
    assert free_vars(stmt) == {I, J}
    assert uses_any(stmt, {J}) and not uses_any(stmt, {tir.Var("k")})


def test_substitute_rebuilds_only_what_changes():
    other = tir.BufferLoad(A, (0, 0))
    expr = tir.BufferLoad(A, (I, J)) + other
    replaced = substitute(expr, {I: J + 1})
    assert tir.expr_to_str(replaced) == "(A[(j + 1), j] + A[0, 0])"
    assert replaced.b is other  # untouched subtrees are shared, not copied
    assert substitute(expr, {tir.Var("k"): I}) is expr


def test_a_mutator_rewrites_one_node_class_and_keeps_the_rest():
    class DoubleStores(Mutator):
        def visit_BufferStore(self, node):
            return tir.BufferStore(node.buffer, self.expr(node.value) * 2.0, node.indices)

    func = tir.PrimFunc("f", (A,), tir.For(I, 0, 8, tir.ForKind.SERIAL,
                                           tir.BufferStore(A, 3.0, (I, I))))
    doubled = DoubleStores().func(func)
    assert doubled.name == "f" and doubled.params == func.params
    assert str(doubled).splitlines()[-1] == "    A[i, i] = (3.0 * 2.0)"
    assert str(func).splitlines()[-1] == "    A[i, i] = 3.0"  # the input is not changed


def test_substitute_each_copies_a_body_per_value_sharing_what_it_does_not_change():
    other = tir.BufferLoad(A, (J, 0)) * 2.0
    body = tir.BufferStore(A, tir.BufferLoad(A, (I, J)) + other, (I, J))
    copies = substitute_each(body, I, [tir.IntImm(k) for k in range(3)])
    assert [str(c) for c in copies] == [str(substitute(body, {I: tir.IntImm(k)}))
                                        for k in range(3)]
    assert all(c.value.b is other for c in copies)  # untouched subtrees are shared
    assert substitute_each(body, tir.Var("k"), [I, J]) == [body, body]


def test_collect_statements_finds_distinct_statements_in_pre_order():
    store = tir.BufferStore(A, tir.BufferLoad(A, (I, J)) + 1.0, (I, J))
    inner = tir.For(J, 0, 8, tir.ForKind.SERIAL, tir.seq([store, store]))
    outer = tir.For(I, 0, 8, tir.ForKind.SERIAL, inner)
    assert collect_statements(outer, lambda n: isinstance(n, tir.For)) == [outer, inner]
    assert collect_statements(outer, lambda n: isinstance(n, tir.BufferStore)) == [store]
    assert collect_statements(outer, lambda n: True) == [
        n for n in collect(outer, lambda n: True) if isinstance(n, tir.Stmt)]
