"""The TIR printer (heterocc.tir.printer): one line per expression, one line per statement,
every node class with its own form."""

from __future__ import annotations

from heterocc import tir
from heterocc.tir.printer import expr_to_str, func_to_str, stmt_to_str

I = tir.Var("i")
A = tir.Buffer("A", (8,), "float32")
Q = tir.Buffer("Q", (8,), "int8", "acc")


def test_immediates_name_their_dtype_unless_it_is_the_default():
    assert expr_to_str(tir.const(3)) == "3"  # int64, the index dtype
    assert expr_to_str(tir.const(3, "int8")) == "int8(3)"
    assert expr_to_str(tir.const(0.5)) == "0.5"  # float32
    assert expr_to_str(tir.const(0.5, "float64")) == "float64(0.5)"
    assert expr_to_str(tir.const(True)) == "True"


def test_operators_print_infix_and_functions_by_name():
    assert expr_to_str(I * 4 + 1) == "((i * 4) + 1)"
    assert expr_to_str(I // 2) == "(i // 2)" and expr_to_str(I % 2) == "(i % 2)"
    assert expr_to_str(tir.maximum(I, 0)) == "max(i, 0)"
    assert expr_to_str(tir.logical_and(I < 3, I >= 1)) == "((i < 3) and (i >= 1))"
    assert expr_to_str(tir.Not(I < 3)) == "not (i < 3)"


def test_select_cast_call_and_loads():
    load = tir.BufferLoad(A, (I,))
    assert expr_to_str(tir.select(I < 4, load, 0.0)) == "select((i < 4), A[i], 0.0)"
    assert expr_to_str(tir.cast("float32", I)) == "float32(i)"
    assert expr_to_str(tir.exp(load)) == "exp(A[i])"
    # a target's own instruction prints the same way as a math intrinsic
    assert expr_to_str(tir.Call("gemm", (tir.BufferLoad(Q, (I,)),), "int32")) == "gemm(Q[i])"


def test_vector_nodes_show_their_lanes():
    ramp = tir.Ramp(I * 4, tir.const(1), 4)
    assert expr_to_str(ramp) == "ramp((i * 4), 1, 4)"
    assert expr_to_str(tir.Broadcast(tir.const(0.5), 4)) == "broadcast(0.5, 4)"
    mask = tir.Broadcast(tir.const(True), 4)
    assert expr_to_str(tir.BufferLoad(A, (ramp,), mask)) == \
        "(A[ramp((i * 4), 1, 4)] if broadcast(True, 4))"


def test_statements_indent_their_bodies():
    ib = tir.IRBuilder()
    with ib.allocate((8,), "int8", "Q", "acc") as q:
        with ib.for_range(8, "j", kind=tir.ForKind.THREAD_BINDING,
                          thread_tag="threadIdx.x") as j:
            with ib.if_scope(j < 4):
                ib.store(q, 1, j)
            with ib.else_scope():
                ib.evaluate(tir.Call("fence", (), "int32"))
    assert stmt_to_str(ib.get()).splitlines() == [
        "allocate Q: int8[8] in 'acc'",
        "for j in threadIdx.x(0, 8):",
        "  if (j < 4):",
        "    Q[j] = int8(1)",
        "  else:",
        "    fence()",
    ]


def test_an_empty_sequence_prints_pass_and_a_function_its_signature():
    func = tir.PrimFunc("empty", (A, Q), tir.SeqStmt(()))
    assert func_to_str(func).splitlines() == [
        "def empty(A: float32[8], Q: int8[8]):",
        "  pass",
    ]


def test_a_statement_class_the_printer_does_not_know_prints_its_name():
    class Barrier(tir.Stmt):
        pass

    assert stmt_to_str(tir.seq([Barrier(), tir.Evaluate(tir.const(0))])).splitlines() == [
        "<Barrier>", "0"]
