"""Expressions are DAGs: a sub-expression used several times is one node. Rewriting,
walking, keying and lowering them costs time linear in their distinct nodes (not in the
exponentially larger trees they unfold to), and keeps them shared."""

from __future__ import annotations

import time

import numpy as np

from heterocc import te
from heterocc.targets.llvm.module import build
from heterocc.tir import Interval
from heterocc.tir.expr import Binary, Buffer, BufferLoad, FloatImm, IntImm, Select, Var
from heterocc.tir.passes import guard_load_bounds
from heterocc.tir.simplify import simplify, structural_key
from heterocc.tir.stmt import BufferStore, For, ForKind, PrimFunc
from heterocc.tir.visitor import collect, substitute

DEPTH = 60  # 3**60 nodes as a tree


def _chain(x, depth: int = DEPTH):
    """``x`` through ``depth`` levels that each read the level below three times."""
    value = x
    for _ in range(depth):
        value = Select(Binary("gt", value, FloatImm(0.0)), Binary("mul", value, FloatImm(2.0)),
                       Binary("sub", value, FloatImm(1.0)))
    return value


def _distinct(expr) -> int:
    return len(collect(expr, lambda n: True))


def test_walk_substitute_and_simplify_visit_each_distinct_node_once():
    i = Var("i")
    buffer = Buffer("x", (8,), "float32")
    expr = _chain(BufferLoad(buffer, (i,)))
    assert _distinct(expr) < 10 * DEPTH
    start = time.perf_counter()
    moved = substitute(expr, {i: i + 1})
    simplified = simplify(Binary("add", moved, FloatImm(0.0)), {i: Interval(0, 6)})
    assert time.perf_counter() - start < 5
    # (counts taken first: printing a DAG as text unfolds it)
    before, after, simpler = _distinct(expr), _distinct(moved), _distinct(simplified)
    assert after == before + 2  # still shared; one more Binary (i + 1) and its 1
    assert simpler <= after


def test_structural_keys_of_separately_built_dags_are_equal_and_cheap():
    i = Var("i")
    buffer = Buffer("x", (8,), "float32")
    first, second = _chain(BufferLoad(buffer, (i,))), _chain(BufferLoad(buffer, (i,)))
    assert first is not second
    equal = structural_key(first) is structural_key(second)
    assert equal
    other = _chain(BufferLoad(buffer, (i + 1,)))
    different = structural_key(other) is not structural_key(first)
    assert different


def test_load_guards_keep_an_in_bounds_shared_read_shared():
    i = Var("i")
    x, y = Buffer("x", (8,), "float32"), Buffer("y", (8,), "float32")
    value = _chain(BufferLoad(x, (i,)))
    func = PrimFunc("f", (x, y), For(i, IntImm(0), IntImm(8), ForKind.SERIAL,
                                     BufferStore(y, value, (i,))))
    start = time.perf_counter()
    guarded = guard_load_bounds(func)
    assert time.perf_counter() - start < 5
    before, after = _distinct(value), _distinct(guarded.body.body.value)
    assert after == before


def test_a_chain_of_stages_reading_their_input_three_times_compiles_and_runs():
    x = te.placeholder((4, 16), "float32", "x")
    value = x
    for level in range(40):
        previous = value
        value = te.compute((4, 16), lambda i, j, p=previous: te.if_then_else(
            p[i, j] > 0.0, p[i, j] * 2.0, p[i, j] - 1.0), name=f"level{level}")
    schedule = te.create_schedule(value)
    for stage in schedule.stages:
        if not stage.is_placeholder and stage.tensor is not value:
            stage.compute_inline()
    schedule[value].vectorize(value.op.axis[1])
    start = time.perf_counter()
    module = build(te.lower(schedule, [x, value], name="chain"))
    assert time.perf_counter() - start < 20
    data = np.linspace(-3, 3, 64, dtype=np.float32).reshape(4, 16)
    out = np.empty_like(data)
    module(data, out)
    expected = data.copy()
    for _ in range(40):
        expected = np.where(expected > 0, expected * np.float32(2), expected - np.float32(1))
    np.testing.assert_array_equal(out, expected)


def test_codegen_emits_an_expression_built_twice_once():
    x = te.placeholder((16,), "float32", "x")
    y = te.compute((16,), lambda i: te.exp(x[i] * 3.0) + te.exp(x[i] * 3.0), name="y")
    module = build(te.lower(te.create_schedule(y), [x, y], name="twice"))
    calls = [line for line in module.unoptimized_ir.splitlines()
             if " call " in line and "llvm.exp" in line]
    assert len(calls) == 1
    data = np.linspace(-1, 1, 16, dtype=np.float32)
    out = np.empty_like(data)
    module(data, out)
    np.testing.assert_allclose(out, 2 * np.exp(data * 3), rtol=1e-6)


def test_structural_keys_tell_signed_zeros_apart_and_take_every_nan_as_one():
    """``-0.0 == 0.0`` in Python, yet ``min(x, -0.0)`` and ``min(x, 0.0)`` differ for a
    zero ``x`` (Clip to [-1, -0.0] after a convolution came out +0.0 when a statement
    reused the other's value); every NaN constant computes the same."""
    x = Var("x", "float32")
    assert structural_key(FloatImm(-0.0, "float32")) != structural_key(FloatImm(0.0, "float32"))
    assert structural_key(Binary("min", x, FloatImm(-0.0, "float32"))) != structural_key(
        Binary("min", x, FloatImm(0.0, "float32")))
    assert structural_key(FloatImm(float("nan"), "float32")) == structural_key(
        FloatImm(float("nan"), "float32"))
    assert structural_key(FloatImm(1.5, "float32")) == structural_key(FloatImm(1.5, "float32"))


def _concatenation(parts: int) -> tuple[PrimFunc, list[Buffer]]:
    """``out[c] = in_k[c - 4k]`` for ``c`` in part ``k`` of ``parts`` parts of 4, as the
    chain of selects a concatenation lowers to (the last part first)."""
    c = Var("c")
    inputs = [Buffer(f"in{k}", (4,), "float32") for k in range(parts)]
    out = Buffer("out", (4 * parts,), "float32")
    value = BufferLoad(inputs[0], (c,))
    for k in range(1, parts):
        value = Select(Binary("ge", c, IntImm(4 * k)),
                       BufferLoad(inputs[k], (Binary("sub", c, IntImm(4 * k)),)), value)
    body = For(c, IntImm(0), IntImm(4 * parts), ForKind.SERIAL, BufferStore(out, value, (c,)))
    return PrimFunc("concat", (*inputs, out), body), inputs


def test_load_guards_of_a_long_concatenation_cost_linear_in_its_inputs(monkeypatch):
    """Each load of a chain of selects is bounded by the conditions of the selects
    nearest it: the guard tries those first, so the simplifications it makes grow
    linearly with the number of inputs (DenseNet's concatenations of 30-49 inputs
    were quadratic), and every load is proven in bounds (no clamp)."""
    import heterocc.tir.passes as passes

    calls = []

    def counted(expr, ranges=None):
        calls.append(expr)
        return simplify(expr, ranges)

    monkeypatch.setattr(passes, "simplify", counted)
    counts = []
    for parts in (16, 32):
        func, inputs = _concatenation(parts)
        calls.clear()
        guarded = guard_load_bounds(func)
        counts.append(len(calls))
        loads = collect(guarded.body, lambda n: isinstance(n, BufferLoad))
        assert len(loads) == parts
        assert all(isinstance(load.indices[0], Var | Binary)
                   and not (isinstance(load.indices[0], Binary)
                            and load.indices[0].op in ("min", "max")) for load in loads)
    assert counts[1] <= 2.2 * counts[0], counts


def test_the_pipeline_simplifies_again_after_unrolling_only_what_unrolling_changed(monkeypatch):
    """Where neither the vectorizer nor unrolling changes a function, the pipeline does
    not simplify it a third time: it is as the simplification before left it."""
    import heterocc.tir.passes as passes

    runs = []
    simplify_function = passes.remove_true_guards

    def counted(func):
        runs.append(func)
        return simplify_function(func)

    monkeypatch.setattr(passes, "remove_true_guards", counted)
    i, j = Var("i"), Var("j")
    x, y = Buffer("x", (4, 8), "float32"), Buffer("y", (4, 8), "float32")
    store = BufferStore(y, Binary("mul", BufferLoad(x, (i, j)), FloatImm(2.0)), (i, j))

    def nest(inner_kind: ForKind) -> PrimFunc:
        return PrimFunc("f", (x, y), For(i, IntImm(0), IntImm(4), ForKind.SERIAL,
                                         For(j, IntImm(0), IntImm(8), inner_kind, store)))

    passes.lower_pipeline(nest(ForKind.SERIAL))
    assert len(runs) == 2
    runs.clear()
    unrolled = passes.lower_pipeline(nest(ForKind.UNROLLED))
    assert len(runs) == 3
    stores = collect(unrolled.body, lambda n: isinstance(n, BufferStore))
    assert len(stores) == 8
