"""The simplifier's vector forms: operations on broadcasts, ramps divided by constants
their lanes never straddle, and loads at one index for every lane."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heterocc.tir import Interval
from heterocc.tir.expr import Binary, Broadcast, Buffer, BufferLoad, Cast, IntImm, Ramp, Select, Var
from heterocc.tir.simplify import simplify


def _div(op, value, divisor, lanes):
    return Binary(op, value, Broadcast(IntImm(divisor), lanes))


def _lanes_of(expr, env: dict, memory: dict | None = None) -> list[int]:
    """The value of every lane of an integer vector expression for the variables in
    ``env`` and the buffers in ``memory`` (enough of TIR for these tests)."""
    if isinstance(expr, IntImm):
        return [expr.value]
    if isinstance(expr, Var):
        return [env[expr]]
    if isinstance(expr, Broadcast):
        return _lanes_of(expr.value, env, memory) * expr.lanes
    if isinstance(expr, Ramp):
        base, stride = _lanes_of(expr.base, env, memory)[0], _lanes_of(expr.stride, env)[0]
        return [base + k * stride for k in range(expr.lanes)]
    if isinstance(expr, Cast):
        return [int(v) for v in _lanes_of(expr.value, env, memory)]
    if isinstance(expr, BufferLoad):
        (index,) = expr.indices
        data = memory[expr.buffer]
        return [int(data[i]) for i in _lanes_of(index, env, memory)]
    if isinstance(expr, Select):
        lanes = [_lanes_of(e, env, memory)
                 for e in (expr.condition, expr.true_value, expr.false_value)]
        width = max(len(v) for v in lanes)
        c, t, f = (v * (width // len(v)) for v in lanes)
        return [x if k else y for k, x, y in zip(c, t, f)]
    a, b = _lanes_of(expr.a, env, memory), _lanes_of(expr.b, env, memory)
    if len(a) != len(b):
        a, b = a * (len(b) // len(a)), b * (len(a) // len(b))
    ops = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
           "floordiv": lambda x, y: x // y, "floormod": lambda x, y: x % y,
           "min": min, "max": max, "ge": lambda x, y: x >= y}
    return [ops[expr.op](x, y) for x, y in zip(a, b)]


def test_a_ramp_within_one_period_divides_to_a_broadcast():
    o = Var("o")
    lanes = 64
    ramp = Ramp(o * 64, IntImm(1), lanes)
    # 12544 = 112 * 112 is a multiple of 64: a vector of 64 pixels lies in one channel
    quotient = simplify(_div("floordiv", _div("floordiv", ramp, 112, lanes), 112, lanes),
                        {o: Interval(0, 6271)})
    assert isinstance(quotient, Broadcast) and quotient.lanes == lanes
    remainder = simplify(_div("floormod", ramp, 12544, lanes), {o: Interval(0, 6271)})
    assert isinstance(remainder, Ramp)
    for value in (0, 195, 196, 6271):
        env = {o: value}
        expected = [(value * 64 + k) // 12544 for k in range(lanes)]
        assert _lanes_of(quotient, env) == expected
        assert _lanes_of(remainder, env) == [(value * 64 + k) % 12544 for k in range(lanes)]


@pytest.mark.parametrize("offset,divisor", [(1, 64), (0, 49), (0, 32), (0, 20)])
def test_a_ramp_that_may_straddle_a_multiple_divides_by_compares(offset, divisor):
    o = Var("o")
    lanes = 64
    ramp = Ramp(o * 64 + offset, IntImm(1), lanes)
    quotient = simplify(_div("floordiv", ramp, divisor, lanes), {o: Interval(0, 100)})
    remainder = simplify(_div("floormod", ramp, divisor, lanes), {o: Interval(0, 100)})
    assert not isinstance(quotient, Broadcast)
    straddled = (divisor - 1 + lanes - 1) // divisor
    # at most two multiples straddled: one scalar division, a compare per multiple
    divisions = [n for n in _nodes(quotient) if isinstance(n, Binary) and n.op == "floordiv"]
    if straddled <= 2:
        assert all(not _is_vector(n) for n in divisions)
    else:
        assert any(_is_vector(n) for n in divisions)
    for value in (0, 1, 37, 100):
        env = {o: value}
        values = [value * 64 + offset + k for k in range(lanes)]
        assert _lanes_of(quotient, env) == [v // divisor for v in values]
        assert _lanes_of(remainder, env) == [v % divisor for v in values]


def _nodes(expr):
    from heterocc.tir.visitor import collect

    return collect(expr, lambda n: True)


def _is_vector(expr) -> bool:
    return "x" in expr.dtype


@pytest.mark.parametrize("rows", [7, 49, 100])
def test_a_table_read_by_a_vector_crossing_rows_is_scalar_loads_and_selects(rows):
    o = Var("o")
    lanes, size = 64, 10
    table = Buffer("table", (size,), "int32")
    ranges = {o: Interval(0, rows * size // lanes - 1)}
    load = simplify(BufferLoad(table, (_div("floordiv", Ramp(o * 64, IntImm(1), lanes), rows,
                                            lanes),)), ranges)
    loads = [n for n in _nodes(load) if isinstance(n, BufferLoad)]
    if rows == 7:  # 64 lanes straddle 9 rows: a gather
        assert len(loads) == 1 and _is_vector(loads[0])
        return
    assert loads and all(not _is_vector(n) for n in loads)
    memory = {table: np.arange(size) * 11 - 3}
    for value in range(ranges[o].hi + 1):
        expected = [int(memory[table][(value * 64 + k) // rows]) for k in range(lanes)]
        assert _lanes_of(load, {o: value}, memory) == expected


def test_the_range_proves_one_quotient():
    o = Var("o")
    result = simplify(_div("floordiv", Ramp(o, IntImm(1), 8), 100, 8), {o: Interval(0, 90)})
    assert isinstance(result, Broadcast) and isinstance(result.value, IntImm)
    assert result.value.value == 0


@settings(max_examples=200, deadline=None)
@given(coeff=st.integers(1, 300), constant=st.integers(-50, 50), stride=st.integers(0, 5),
       lanes=st.sampled_from([2, 4, 8, 16]), divisor=st.integers(1, 200),
       value=st.integers(-1000, 1000), op=st.sampled_from(["floordiv", "floormod"]))
def test_vector_division_keeps_every_lane(coeff, constant, stride, lanes, divisor, value, op):
    o = Var("o")
    ramp = Ramp(o * coeff + constant, IntImm(stride), lanes)
    expr = _div(op, ramp, divisor, lanes)
    result = simplify(expr, {o: Interval(-1000, 1000)})
    assert _lanes_of(result, {o: value}) == _lanes_of(expr, {o: value})


def test_broadcast_operands_and_a_load_at_one_index_become_scalar():
    i = Var("i")
    total = simplify(Binary("add", Broadcast(i * 2, 16), Broadcast(i, 16)))
    assert isinstance(total, Broadcast) and total.lanes == 16
    assert _lanes_of(total, {i: 5}) == [15] * 16
    table = Buffer("table", (8,), "int32")
    load = simplify(BufferLoad(table, (Broadcast(i, 16),)))
    assert isinstance(load, Broadcast) and isinstance(load.value, BufferLoad)
    assert load.dtype == "int32x16" and load.value.dtype == "int32"
    # a predicated load keeps its lanes
    masked = BufferLoad(table, (Broadcast(i, 4),), Broadcast(IntImm(1, "bool"), 4))
    assert isinstance(simplify(masked), BufferLoad)
    np.testing.assert_equal(simplify(masked).dtype, "int32x4")


@pytest.mark.parametrize("form", ["broadcast+ramp", "ramp+broadcast", "ramp-broadcast",
                                  "ramp*broadcast", "ramp+ramp", "ramp-ramp"])
def test_a_ramp_offset_scaled_or_added_to_a_ramp_stays_one_ramp(form):
    """(An int8 convolution's accumulator row was stored at ``broadcast(0) + ramp(0, 1,
    16)``, which the code generator wrote lane by lane: 16 scalar stores for LLVM to
    merge again.)"""
    o, c = Var("o"), Var("c")
    lanes = 16
    ramp, other = Ramp(o * 16, IntImm(1), lanes), Ramp(c, IntImm(3), lanes)
    offset = Broadcast(c + 2, lanes)
    expr = {"broadcast+ramp": Binary("add", offset, ramp),
            "ramp+broadcast": Binary("add", ramp, offset),
            "ramp-broadcast": Binary("sub", ramp, offset),
            "ramp*broadcast": Binary("mul", ramp, offset),
            "ramp+ramp": Binary("add", ramp, other),
            "ramp-ramp": Binary("sub", ramp, other)}[form]
    simplified = simplify(expr, {o: Interval(0, 10), c: Interval(0, 5)})
    assert isinstance(simplified, Ramp) and simplified.lanes == lanes
    for env in ({o: 0, c: 0}, {o: 3, c: 5}, {o: 10, c: 2}):
        assert _lanes_of(simplified, env) == _lanes_of(expr, env)
