"""The IRBuilder (heterocc.tir.builder): the statements each ``with`` block builds, and
the misuses it refuses. (tests/tir/test_tir_core.py compiles and runs a built kernel.)"""

from __future__ import annotations

import pytest

from heterocc import tir
from heterocc.errors import CompileError


def test_a_loop_block_yields_its_variable_and_wraps_what_it_emits():
    out = tir.Buffer("out", (4, 8), "float32")
    ib = tir.IRBuilder()
    with ib.for_range(4, "r", kind=tir.ForKind.PARALLEL) as r:
        with ib.for_range(8, "c", start=0, kind=tir.ForKind.VECTORIZED) as c:
            ib.store(out, 2.0, r, c)
    loop = ib.get()
    assert isinstance(loop, tir.For) and loop.var is r and loop.kind is tir.ForKind.PARALLEL
    inner = loop.body
    assert isinstance(inner, tir.For) and inner.var is c and inner.extent.value == 8
    assert isinstance(inner.body, tir.BufferStore) and inner.body.indices == (r, c)
    assert inner.body.value.dtype == "float32"


def test_a_thread_bound_loop_keeps_its_tag():
    ib = tir.IRBuilder()
    with ib.for_range(32, "t", kind=tir.ForKind.THREAD_BINDING, thread_tag="threadIdx.x"):
        ib.evaluate(tir.Call("sync", (), "int32"))
    loop = ib.get()
    assert loop.thread_tag == "threadIdx.x" and isinstance(loop.body, tir.Evaluate)


def test_if_and_else_blocks_make_one_guard():
    out = tir.Buffer("out", (8,), "int32")
    ib = tir.IRBuilder()
    with ib.for_range(8, "i") as i:
        with ib.if_scope(i < 3, likely=True):
            ib.store(out, 1, i)
        with ib.else_scope():
            ib.store(out, 2, i)
    guard = ib.get().body
    assert isinstance(guard, tir.IfThenElse) and guard.likely
    assert guard.then_case.value.value == 1 and guard.else_case.value.value == 2


def test_an_allocation_block_yields_a_buffer_in_its_scope():
    ib = tir.IRBuilder()
    with ib.allocate((2, 3), "int8", "wgt", scope="wgt_buffer") as wgt:
        ib.store(wgt, 0, 1, 2)
    alloc = ib.get()
    assert isinstance(alloc, tir.Allocate) and alloc.buffer is wgt
    assert (wgt.shape, wgt.dtype, wgt.scope) == ((2, 3), "int8", "wgt_buffer")


def test_several_statements_become_a_sequence_and_empty_blocks_an_empty_one():
    out = tir.Buffer("out", (2,), "float32")
    ib = tir.IRBuilder()
    assert ib.get().stmts == ()
    ib.store(out, 0.0, 0)
    ib.store(out, 1.0, 1)
    with ib.for_range(2, "unused"):
        pass
    body = ib.get()
    assert isinstance(body, tir.SeqStmt) and len(body.stmts) == 3
    assert body.stmts[2].body.stmts == ()


def test_else_without_an_if_and_get_inside_a_block_are_refused():
    ib = tir.IRBuilder()
    ib.store(tir.Buffer("out", (1,), "float32"), 0.0, 0)
    with pytest.raises(CompileError, match="else_scope must directly follow an if_scope"):
        with ib.else_scope():
            pass
    with ib.if_scope(tir.const(True)):
        pass
    with ib.else_scope():
        pass
    with pytest.raises(CompileError, match="else_scope"):  # the guard has its else already
        with ib.else_scope():
            pass
    with pytest.raises(CompileError, match="inside an open with-block"):
        with ib.for_range(2):
            ib.get()
