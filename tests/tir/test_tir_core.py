"""TIR: the simplifier (checked against direct evaluation), the printer and the passes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heterocc import tir
from heterocc.errors import CompileError, TypeInferenceError
from heterocc.tir import Interval

I = tir.Var("i")
J = tir.Var("j")
RANGES = {I: Interval(0, 7), J: Interval(0, 31)}

_PY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b, "floormod": lambda a, b: a % b, "min": min, "max": max,
    "lt": lambda a, b: int(a < b), "le": lambda a, b: int(a <= b), "gt": lambda a, b: int(a > b),
    "ge": lambda a, b: int(a >= b), "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
    "and": lambda a, b: int(a and b), "or": lambda a, b: int(a or b),
}


def evaluate(expr, env):
    """Direct integer evaluation: the oracle of the simplifier."""
    if isinstance(expr, tir.IntImm):
        return expr.value
    if isinstance(expr, tir.Var):
        return env[expr]
    if isinstance(expr, tir.Binary):
        return _PY[expr.op](evaluate(expr.a, env), evaluate(expr.b, env))
    if isinstance(expr, tir.Select):
        return evaluate(expr.true_value if evaluate(expr.condition, env) else expr.false_value,
                        env)
    if isinstance(expr, tir.Not):
        return 1 - evaluate(expr.a, env)
    raise TypeError(type(expr))


def int_exprs():
    leaves = st.sampled_from([I, J]) | st.integers(-9, 40).map(tir.const)

    def extend(children):
        arith = st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max"]), children,
                          children).map(lambda t: tir.binary(*t))
        divmod_ = st.tuples(st.sampled_from(["floordiv", "floormod"]), children,
                            st.integers(1, 17)).map(lambda t: tir.binary(t[0], t[1], t[2]))
        return arith | divmod_

    return st.recursive(leaves, extend, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(int_exprs(), st.sampled_from(["lt", "le", "ge", "eq", "ne"]), st.integers(-5, 60))
def test_simplify_preserves_value_under_ranges(expr, compare, bound):
    simplified = tir.simplify(expr, RANGES)
    condition = tir.binary(compare, expr, bound)
    simplified_condition = tir.simplify(condition, RANGES)
    for i, j in itertools.product(range(8), range(0, 32, 3)):
        env = {I: i, J: j}
        assert evaluate(simplified, env) == evaluate(expr, env)
        assert evaluate(simplified_condition, env) == evaluate(condition, env)


def test_simplify_cancels_and_resolves_with_ranges():
    assert tir.simplify((I * 32 + J) - I * 32) is J
    assert tir.simplify((I * 32 + J) // 32, RANGES) is I
    assert tir.simplify((I * 32 + J) % 32, RANGES) is J
    assert tir.expr_to_str(tir.simplify((I * 64 + J + 5) // 32, RANGES)) == \
        "((i * 2) + ((j + 5) // 32))"
    assert tir.expr_to_str(tir.simplify((I * 64 + J + 5) % 32, RANGES)) == "((j + 5) % 32)"
    assert tir.prove(I * 32 + J < 256, RANGES)
    assert not tir.prove(I * 32 + J < 255, RANGES)
    assert tir.simplify(tir.minimum(J, 40), RANGES) is J
    assert tir.simplify(tir.maximum(I, 7), RANGES).value == 7
    assert tir.simplify(tir.const(3) * 4 + 1).value == 13


def test_const_bound_of_split_index():
    assert tir.const_bound(I * 32 + J, RANGES) == Interval(0, 255)
    assert tir.const_bound((I * 32 + J) // 10, RANGES) == Interval(0, 25)
    assert tir.const_bound(J % 5, RANGES) == Interval(0, 4)


def test_expressions_refuse_python_truth_and_bad_operands():
    with pytest.raises(TypeError, match="truth value"):
        bool(I < 3)
    with pytest.raises(TypeInferenceError, match="floordiv"):
        I / 2
    with pytest.raises(TypeInferenceError, match="unknown intrinsic"):
        tir.call_intrin("nope", I)
    with pytest.raises(TypeInferenceError, match="does not fit in int8"):
        tir.Var("small", "int8") + 300
    x = tir.Var("x", "float32")
    assert (x + 1).dtype == "float32" and (x * I).dtype == "float64"
    assert tir.exp(I).dtype == "float32"


def _buffer(name, shape, dtype="float32"):
    return tir.Buffer(name, shape, dtype)


def _loop(var, extent, body, kind=tir.ForKind.SERIAL):
    return tir.For(var, tir.const(0), tir.const(extent), kind, body)


def test_printer_format():
    A = _buffer("A", (8, 32))
    body = _loop(I, 8, _loop(J, 32, tir.IfThenElse(
        I * 32 + J < 200, tir.BufferStore(A, tir.const(1.0), (I, J)), likely=True),
        tir.ForKind.VECTORIZED), tir.ForKind.PARALLEL)
    func = tir.PrimFunc("f", (A,), body)
    assert str(func).splitlines() == [
        "def f(A: float32[8, 32]):",
        "  for i in parallel(0, 8):",
        "    for j in vectorized(0, 32):",
        "      if likely (((i * 32) + j) < 200):",
        "        A[i, j] = 1.0",
    ]


def test_remove_true_guards_keeps_needed_ones():
    A = _buffer("A", (8, 32))
    store = tir.BufferStore(A, tir.const(1.0), (I, J))
    proven = tir.IfThenElse(I * 32 + J < 256, store, likely=True)
    needed = tir.IfThenElse(I * 32 + J < 200, store, likely=True)
    func = tir.PrimFunc("f", (A,), _loop(I, 8, _loop(J, 32, tir.seq([proven, needed]))))
    guards = tir.collect(tir.remove_true_guards(func).body,
                         lambda n: isinstance(n, tir.IfThenElse))
    assert len(guards) == 1 and tir.expr_to_str(guards[0].condition) == "(((i * 32) + j) < 200)"


def test_flatten_then_unroll():
    A = _buffer("A", (4, 3))
    func = tir.PrimFunc("f", (A,), _loop(I, 4, _loop(J, 3, tir.BufferStore(
        A, tir.cast("float32", I), (I, J)), tir.ForKind.UNROLLED)))
    func = tir.remove_true_guards(tir.unroll_loops(tir.flatten_buffers(func)))
    stores = tir.collect(func.body, lambda n: isinstance(n, tir.BufferStore))
    assert [tir.expr_to_str(s.indices[0]) for s in stores] == [
        "(i * 3)", "((i * 3) + 1)", "((i * 3) + 2)"]


def test_vectorize_forms_ramps_or_falls_back():
    A, B = _buffer("A", (64,)), _buffer("B", (64,))
    contiguous = _loop(J, 16, tir.BufferStore(A, tir.BufferLoad(B, (J * 2,)) + 1.0, (J + 16,)),
                       tir.ForKind.VECTORIZED)
    func = tir.vectorize_loops(tir.PrimFunc("f", (A, B), contiguous))
    (store,) = tir.collect(func.body, lambda n: isinstance(n, tir.BufferStore))
    assert isinstance(store.indices[0], tir.Ramp) and store.value.dtype == "float32x16"
    assert not tir.collect(func.body, lambda n: isinstance(n, tir.For))

    reduction = _loop(J, 16, tir.BufferStore(A, tir.BufferLoad(A, (0,)) + tir.BufferLoad(
        B, (J,)), (0,)), tir.ForKind.VECTORIZED)
    func = tir.vectorize_loops(tir.PrimFunc("g", (A, B), reduction))
    (loop,) = tir.collect(func.body, lambda n: isinstance(n, tir.For))
    assert loop.kind is tir.ForKind.SERIAL


def test_guard_load_bounds_clamps_only_unproven_loads():
    A, B = _buffer("A", (10,)), _buffer("B", (10,))
    proven = tir.select(I + 3 < 10, tir.BufferLoad(A, (I + 3,)), 0.0)
    unproven = tir.BufferLoad(A, (I + 3,))
    body = _loop(I, 10, tir.BufferStore(B, proven + unproven, (I,)))
    func = tir.guard_load_bounds(tir.PrimFunc("f", (A, B), body))
    loads = tir.collect(func.body, lambda n: isinstance(n, tir.BufferLoad))
    assert [tir.expr_to_str(load.indices[0]) for load in loads] == [
        "(i + 3)", "max(min((i + 3), 9), 0)"]


def test_partition_loops_splits_off_the_guarded_tail():
    A = _buffer("A", (10,))
    outer, inner = tir.Var("o"), tir.Var("v")
    index = outer * 4 + inner
    guarded = tir.IfThenElse(index < 10, tir.BufferStore(A, tir.const(1.0), (index,)),
                             likely=True)
    func = tir.PrimFunc("f", (A,), _loop(outer, 3, _loop(inner, 4, guarded,
                                                         tir.ForKind.VECTORIZED)))
    text = str(tir.partition_loops(func)).splitlines()
    assert text == [
        "def f(A: float32[10]):",
        "  for o in serial(0, 2):",
        "    for v in vectorized(0, 4):",
        "      A[((o * 4) + v)] = 1.0",
        "  for v in vectorized(0, 2):",
        "    A[(v + 8)] = 1.0",
    ]


def test_partition_loops_returns_a_function_with_nothing_to_split_as_it_is():
    # no likely guard: nothing split, and no second simplification of what
    # remove_true_guards has just simplified (lower_pipeline runs it before)
    A = _buffer("A", (8,))
    i = tir.Var("i")
    func = tir.PrimFunc("f", (A,), _loop(i, 8, tir.BufferStore(A, tir.const(1.0), (i + 0,))))
    assert tir.partition_loops(func) is func


def test_partition_loops_peels_a_tail_reached_through_a_fused_loop():
    # 10 rows in tiles of 4 (the last cut short) times 2 column tiles, the two tile
    # loops fused: the row tile is fused // 2, which grows with the fused loop, so the
    # fused loop is split where the short tile starts and the full tiles lose the guard;
    # being parallel, it stays one loop whose body branches there (each branch reading
    # the variable clamped into its part), so the short tile runs beside the full ones
    A = _buffer("A", (10, 2))
    fused, inner = tir.Var("f"), tir.Var("v")
    row = (fused // 2) * 4 + inner
    guarded = tir.IfThenElse(row < 10, tir.BufferStore(A, tir.const(1.0), (row, fused % 2)),
                             likely=True)
    func = tir.PrimFunc("f", (A,), _loop(fused, 6, _loop(inner, 4, guarded),
                                         tir.ForKind.PARALLEL))
    assert str(tir.partition_loops(func)).splitlines() == [
        "def f(A: float32[10, 2]):",
        "  for f in parallel(0, 6):",
        "    if (f < 4):",
        "      for v in serial(0, 4):",
        "        A[(((min(f, 3) // 2) * 4) + v), (min(f, 3) % 2)] = 1.0",
        "    else:",
        "      for v in serial(0, 2):",
        "        A[(v + 8), (max(f, 4) - 4)] = 1.0",
    ]


def test_partition_loops_keeps_the_guard_of_a_tail_that_recurs_along_the_loop():
    # (f % 3) * 4 + v < 10 fails again in every third iteration of f: no split of f
    # peels it, only the inner loop's last iterations keep the guard
    A = _buffer("A", (12,))
    fused, inner = tir.Var("f"), tir.Var("v")
    index = (fused % 3) * 4 + inner
    guarded = tir.IfThenElse(index < 10, tir.BufferStore(A, tir.const(1.0), (index,)),
                             likely=True)
    func = tir.PrimFunc("f", (A,), _loop(fused, 6, _loop(inner, 4, guarded)))
    assert str(tir.partition_loops(func)).splitlines() == [
        "def f(A: float32[12]):",
        "  for f in serial(0, 6):",
        "    for v in serial(0, 2):",
        "      A[(((f % 3) * 4) + v)] = 1.0",
        "    for v in serial(2, 2):",
        "      if likely ((((f % 3) * 4) + v) < 10):",
        "        A[(((f % 3) * 4) + v)] = 1.0",
    ]


def test_ir_builder_nests_and_runs():
    from heterocc.targets import llvm as hllvm

    out = _buffer("out", (4, 6))
    ib = tir.IRBuilder()
    with ib.for_range(4, "r", kind=tir.ForKind.PARALLEL) as r:
        with ib.allocate((6,), "float32", "row") as row:
            with ib.for_range(6, "c") as c:
                ib.store(row, tir.cast("float32", r * 10 + c), c)
            with ib.for_range(6, "c", kind=tir.ForKind.VECTORIZED) as c:
                with ib.if_scope(c < 3):
                    ib.store(out, tir.BufferLoad(row, (c,)), r, c)
                with ib.else_scope():
                    ib.store(out, -1.0, r, c)
    func = tir.lower_pipeline(tir.PrimFunc("built", (out,), ib.get()))
    result = np.zeros((4, 6), np.float32)
    hllvm.build(func)(result)
    expected = np.where(np.arange(6) < 3, np.arange(4)[:, None] * 10 + np.arange(6), -1)
    np.testing.assert_array_equal(result, expected)
    with pytest.raises(CompileError, match="else_scope"):
        with tir.IRBuilder().else_scope():
            pass


def test_inject_virtual_threads_copies_body_and_scratch_buffers():
    from heterocc import te
    from heterocc.targets import llvm as hllvm

    A = te.placeholder((8, 16), "float32", "A")
    B = te.compute((8, 16), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 16), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C)
    vt, rest = s[C].split(s[C].op.axis[0], nparts=2)
    s[C].bind(vt, "vthread")
    s[B].compute_at(s[C], rest)
    func = te.lower(s, [A, C], name="f")
    names = sorted(a.buffer.name for a in tir.collect(func.body,
                                                      lambda n: isinstance(n, tir.Allocate)))
    assert names == ["B.vt0", "B.vt1"]
    a = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    c = np.zeros((8, 16), np.float32)
    hllvm.build(func)(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


class _Copy(tir.Mutator):
    """Rebuilds every sum, difference and product: fresh nodes, nothing kept on them."""

    def visit_Binary(self, node):
        return tir.Binary(node.op, self.expr(node.a), self.expr(node.b))


def _form_items(form):
    return [(key, coeff) for key, (coeff, _) in form.terms.items()], form.constant


@settings(max_examples=300, deadline=None)
@given(int_exprs())
def test_the_linear_form_kept_on_a_node_is_the_one_found_in_it(expr):
    """Sums and products built by simplification keep their linear form (from_linear_form):
    the form is what decomposing a fresh copy of the node finds, terms in order (the
    order decides how the simplifier rebuilds them), and building the node again from
    its form gives an equal node (so the simplifier may keep it as it is)."""
    from heterocc.tir.simplify import built_from_its_form, from_linear_form, linear_form

    simplified = tir.simplify(expr, RANGES)
    for node in tir.collect(simplified, lambda n: isinstance(n, tir.Binary)):
        if "_linear_form" not in node.__dict__:
            continue
        kept = linear_form(node)
        assert _form_items(kept) == _form_items(linear_form(_Copy().expr(node)))
        if built_from_its_form(node, node.dtype):
            assert tir.structurally_equal(from_linear_form(kept, node.dtype), node)
    assert tir.structurally_equal(tir.simplify(simplified, RANGES), tir.simplify(
        _Copy().expr(simplified), RANGES))  # a kept node simplifies as its fresh copy


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_constants_fold_as_numpy_computes_them(dtype):
    info = np.iinfo(dtype)
    values = [0, 1, -1, 7, -7, 16, int(info.max), int(info.min)]
    for op in ("add", "sub", "mul", "floordiv", "floormod", "min", "max", "lt", "ge", "eq"):
        for x, y in itertools.product(values, values):
            folded = tir.simplify(tir.Binary(op, tir.IntImm(x, dtype), tir.IntImm(y, dtype)))
            if op in ("floordiv", "floormod") and y == 0:
                assert isinstance(folded, tir.Binary)  # a division by zero stays
                continue
            with np.errstate(all="ignore"):
                expected = getattr(np, {"add": "add", "sub": "subtract", "mul": "multiply",
                                        "floordiv": "floor_divide", "floormod": "mod",
                                        "min": "minimum", "max": "maximum", "lt": "less",
                                        "ge": "greater_equal", "eq": "equal"}[op])(
                    np.array(x, dtype), np.array(y, dtype))
            assert folded.value == int(expected), (op, x, y)
            assert folded.dtype == ("bool" if op in ("lt", "ge", "eq") else dtype)


def _unrolled_first(func):
    """The pipeline as it was: every vectorized loop vectorized after unrolling."""
    func = tir.partition_loops(tir.remove_true_guards(tir.inject_virtual_threads(func)))
    func = tir.flatten_buffers(tir.guard_load_bounds(func))
    func = tir.remove_true_guards(tir.unroll_loops(func))
    return tir.remove_true_guards(tir.vectorize_loops(func))


def test_vectorizing_before_unrolling_gives_the_code_of_vectorizing_after():
    """lower_pipeline vectorizes a tile's vectorized rows once, before unrolling copies
    them; a vectorized loop with an unrolled loop inside, or a vector select (whose
    loads are predicated by what the unrolled copy's ranges prove), is vectorized after
    unrolling: the code is what vectorizing every loop after unrolling gives."""
    A = tir.Buffer("A", (4, 20), "float32")
    B = tir.Buffer("B", (4, 16), "float32")
    i, j, k = tir.Var("i"), tir.Var("j"), tir.Var("k")
    unrolled, vectorized = tir.ForKind.UNROLLED, tir.ForKind.VECTORIZED
    read = tir.BufferLoad(A, (j, k + i * 4))
    tile = tir.For(i, 0, 2, unrolled, tir.For(j, 0, 4, unrolled, tir.For(
        k, 0, 8, vectorized, tir.BufferStore(B, read * 2.0, (j, k + i * 8)))))
    rows = tir.For(k, 0, 16, vectorized, tir.For(j, 0, 4, unrolled, tir.BufferStore(
        B, tir.BufferLoad(A, (j, k)) + 1.0, (j, k))))
    padded = tir.For(j, 0, 4, unrolled, tir.For(k, 0, 16, vectorized, tir.BufferStore(
        B, tir.select(k + j < 18, tir.BufferLoad(A, (j, k + j)), tir.const(0.0)), (j, k))))
    for body in (tile, rows, padded):
        func = tir.PrimFunc("f", (A, B), body)
        lowered = tir.lower_pipeline(func)
        assert str(lowered) == str(_unrolled_first(func))
        assert "ramp(" in str(lowered) and "vectorized" not in str(lowered)


def test_a_single_iteration_loop_simplifies_as_its_body_with_the_value_substituted():
    # the simplifier reads the variable of a loop of one iteration as its value instead
    # of copying the body with it substituted first: the same result, for nested unit
    # loops, a guard they decide, and a sibling loop over the same variable (whose
    # rewritings must not leak into the unit loop's, nor the other way)
    from heterocc.tir.simplify import simplify_stmt
    from heterocc.tir.visitor import substitute

    A = _buffer("A", (64,))
    i, j, k = tir.Var("i"), tir.Var("j"), tir.Var("k")
    index = (i * 8 + j) * 2 + k // 4
    store = tir.BufferStore(A, tir.const(1.0), (index,))
    guarded = tir.IfThenElse(i * 8 + j < 20, store, likely=True)
    body = tir.SeqStmt((
        _loop(k, 4, tir.BufferStore(A, tir.const(2.0), (index,))),  # i, j free here
        tir.For(i, tir.const(2), tir.const(1), tir.ForKind.SERIAL,
                tir.For(j, tir.const(3), tir.const(1), tir.ForKind.SERIAL,
                        _loop(k, 4, guarded))),
        _loop(i, 2, _loop(k, 4, tir.BufferStore(A, tir.const(3.0), (index,)))),
    ))
    expected = tir.SeqStmt((
        simplify_stmt(body.stmts[0]),
        simplify_stmt(substitute(substitute(body.stmts[1].body.body, {j: tir.const(3)}),
                                 {i: tir.const(2)})),
        simplify_stmt(body.stmts[2]),
    ))
    assert str(simplify_stmt(body)) == str(expected)
    # i = 2, j = 3: the guard (19 < 20) removed, the index (2*8 + 3)*2 + k // 4 is 38
    unit = tir.PrimFunc("f", (A,), simplify_stmt(body.stmts[1]))
    assert str(unit).splitlines() == [
        "def f(A: float32[64]):",
        "  for k in serial(0, 4):",
        "    A[38] = 1.0",
    ]
