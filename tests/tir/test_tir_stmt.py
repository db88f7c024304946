"""TIR statements (heterocc.tir.stmt): what their constructors normalize, how ``seq``
flattens, and that every statement and PrimFunc prints through the printer."""

from __future__ import annotations

import pytest

from heterocc import tir
from heterocc.errors import TypeInferenceError

I = tir.Var("i")


def _store(buffer, value, *indices):
    return tir.BufferStore(buffer, value, indices)


def test_a_loop_takes_python_ints_as_index_expressions():
    body = _store(tir.Buffer("A", (8,), "float32"), 1.0, I)
    loop = tir.For(I, 2, 6, tir.ForKind.SERIAL, body)
    assert isinstance(loop.min, tir.IntImm) and loop.min.value == 2
    assert loop.min.dtype == loop.extent.dtype == tir.INDEX_DTYPE
    assert loop.thread_tag is None


def test_a_store_converts_its_value_to_the_buffer_dtype_and_its_indices_to_index_exprs():
    A = tir.Buffer("A", (4, 4), "int32")
    store = _store(A, 3, 1, I)
    assert store.value.dtype == "int32" and store.value.value == 3
    assert all(index.dtype == tir.INDEX_DTYPE for index in store.indices)
    assert store.indices[1] is I


def test_a_python_number_that_does_not_fit_the_buffer_dtype_is_refused():
    with pytest.raises(TypeInferenceError, match="does not fit in int8"):
        _store(tir.Buffer("A", (4,), "int8"), 300, 0)


def test_seq_flattens_nested_sequences_and_drops_nones():
    A = tir.Buffer("A", (3,), "float32")
    a, b, c = (_store(A, float(k), k) for k in range(3))
    flat = tir.seq([a, tir.SeqStmt((b, c)), None])
    assert isinstance(flat, tir.SeqStmt) and flat.stmts == (a, b, c)
    assert tir.seq([a]) is a  # one statement stays itself
    assert tir.seq([]).stmts == ()


def test_statements_compare_by_identity():
    A = tir.Buffer("A", (1,), "float32")
    assert _store(A, 1.0, 0) != _store(A, 1.0, 0)  # structural equality is simplify's job


def test_the_loop_kinds_and_gpu_axes_are_the_documented_ones():
    assert {k.value for k in tir.ForKind} == {"serial", "parallel", "vectorized", "unrolled",
                                              "unroll_hint", "thread_binding"}
    assert "threadIdx.x" in tir.THREAD_TAGS and "vthread" in tir.THREAD_TAGS


def test_statements_and_functions_print_through_the_printer():
    A = tir.Buffer("A", (4,), "float32")
    func = tir.PrimFunc("f", (A,), tir.For(I, 0, 4, tir.ForKind.UNROLLED, _store(A, 0.0, I)))
    assert repr(func).splitlines() == ["def f(A: float32[4]):",
                                       "  for i in unrolled(0, 4):",
                                       "    A[i] = 0.0"]
    assert repr(func.body) == tir.stmt_to_str(func.body)
    assert func.attrs == {}

