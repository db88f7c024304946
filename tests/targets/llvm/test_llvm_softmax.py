"""A softmax over its last axis computed row by row (``schedules/softmax.py``,
``SoftmaxRowsRule``): every stage of a row at the output's row loop, the values ONNX
Runtime's, on AVX-512, AVX2 and NEON code."""

from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import heterocc
from heterocc import te, tir
from heterocc.compute import compute_of
from heterocc.sdk.te_target import schedule_by_rules
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.rules import cpu_rules
from heterocc.targets.llvm.schedules.softmax import softmax_row_stages
from tests.conftest import make_model

RNG = np.random.default_rng(41)
AVX2 = "llvm -mattr=-avx512f"
NEON_CPU = parse_cpu("llvm -mtriple=aarch64-linux-gnu")


def _softmax_model(shape, axis=-1, mask=False):
    """Softmax over ``axis`` of an input of ``shape``, after a causal -1e4 mask's Add
    over the last two axes (``mask``, as GPT-2's attention)."""
    nodes, initializers, source = [], {}, "x"
    if mask:
        rows, columns = shape[-2:]
        initializers["mask"] = np.triu(np.full((rows, columns), -1e4, np.float32), 1)
        nodes.append(helper.make_node("Add", ["x", "mask"], ["masked"]))
        source = "masked"
    nodes.append(helper.make_node("Softmax", [source], ["y"], axis=axis))
    return make_model(nodes, [("x", "float32", shape)], [("y", "float32", shape)],
                      initializers, opset=17)


def _lowered_softmax(compiled):
    llvm = compiled.build_static().targets["llvm"]
    (func,) = [c.lowered for c in llvm._compiled.values() if c.lowered is not None]
    return func


@pytest.mark.parametrize("target", ["llvm", AVX2], ids=["host", "avx2"])
@pytest.mark.parametrize("shape,mask", [
    ((1, 4, 128, 128), True),   # GPT-2's attention rows
    ((1, 3, 197, 197), False),  # ViT-B/16's: no whole number of vectors
    ((2, 5), False),            # rows shorter than a vector, too few for the pool
    ((3, 7, 33), True),
])
def test_softmax_rows_match_ort_with_each_rows_stages_at_its_loop(target, shape, mask):
    """The values are ONNX Runtime's; the function is one loop over rows (in parallel
    where the softmax is large), inside which the row's maximum, shift, exponentials
    (a buffer of one row, written a vector at a time) and sum are computed."""
    model = _softmax_model(list(shape), mask=mask)
    feeds = {"x": (RNG.standard_normal(shape) * 4).astype(np.float32)}
    compiled = heterocc.compile(model, target=target)
    assert compiled.fallbacks == {}
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)[0], expected, rtol=2e-6, atol=1e-7)
    func = _lowered_softmax(compiled)
    text = str(func)
    rows = int(np.prod(shape[:-1]))
    allocations = {a.buffer.name: a.buffer.size
                   for a in tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))}
    assert allocations["softmax_exp"] >= shape[-1]  # one row (and a vector's slack)
    assert allocations["softmax_exp"] < 2 * shape[-1] + 64
    assert allocations["softmax_max"] == allocations["softmax_sum"] == 1
    loops = re.findall(r"for (\S+) in (parallel|serial)\(0, (\d+)\)", text)
    assert loops[0][2] == str(rows)  # the rows outermost, every stage inside
    assert ("in parallel(0, " in text) == (int(np.prod(shape)) >= 1 << 14)
    assert "softmax_exp[ramp(" in text and "softmax[ramp(" in text


def test_a_softmax_over_another_axis_keeps_the_stage_by_stage_schedule():
    """The rule takes the last axis only (its rows contiguous); a softmax over axis 1 of
    three matches ORT through the reduction and injective schedules."""
    model = _softmax_model([2, 9, 5], axis=1)
    feeds = {"x": RNG.standard_normal((2, 9, 5)).astype(np.float32)}
    compiled = heterocc.compile(model, target="llvm")
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)[0], expected, rtol=2e-6, atol=1e-7)
    assert "softmax_exp: float32[1, 1, 1" not in str(_lowered_softmax(compiled))


def test_softmax_row_stages_recognise_the_structure_not_a_name():
    """The stages come from the compute's structure: a quotient of a kept stage by its
    sum over the last axis; a plain division by another reduction is no softmax."""
    x = te.placeholder((4, 12), "float32", "x")
    (out,) = compute_of("Softmax")([x], {"axis": -1}, None)
    stages = softmax_row_stages(out)
    assert stages is not None
    assert stages.exps.shape == (4, 12) and stages.total.shape == (4, 1)
    assert [bool(t.op.reduce_axis) for t in stages.statistics] == [True, False]  # max, shift
    r = te.reduce_axis(12, "r")
    peak = te.compute((4, 1), lambda i, _: te.max(x[i, r], axis=r), name="peak")
    scaled = te.compute((4, 12), lambda i, j: x[i, j] / peak[i, 0], name="scaled")
    assert softmax_row_stages(scaled) is None


def test_neon_code_of_the_rows_calls_nothing():
    """A NEON cross build of the row schedule: vector exp in registers (no call), the
    quotients and exponentials in 4-float vectors."""
    x = te.placeholder((8, 40), "float32", "x")
    (out,) = compute_of("Softmax")([x], {"axis": -1}, None)
    schedule = schedule_by_rules([out], cpu_rules(NEON_CPU))
    func = te.lower(schedule, [x, out], name="softmax_neon")
    assert str(func).count("parallel") == 0 and "softmax_exp[ramp(" in str(func)
    assembly = build([func], name="softmax_neon", cpu=NEON_CPU).assembly()
    assert "bl\texpf" not in assembly and "fmla" in assembly


def test_row_stages_read_elsewhere_stay_in_memory():
    """A function that also returns the exponentials (another reader of a row stage)
    keeps every stage in memory, as without the rule: the values stay NumPy's."""
    x = te.placeholder((6, 20), "float32", "x")
    (out,) = compute_of("Softmax")([x], {"axis": -1}, None)
    exps = softmax_row_stages(out).exps
    doubled = te.compute(exps.shape, lambda i, j: exps[i, j] * 2.0, name="doubled")
    schedule = schedule_by_rules([out, doubled], cpu_rules(parse_cpu("llvm")))
    func = te.lower(schedule, [x, out, doubled], name="softmax_shared")
    module = build([func], name="softmax_shared")
    a = RNG.standard_normal((6, 20)).astype(np.float32)
    got, twice = np.empty_like(a), np.empty_like(a)
    module["softmax_shared"](a, got, twice)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=2e-6)
    np.testing.assert_allclose(twice, 2 * e, rtol=2e-6)


def test_rows_longer_than_half_the_l1_keep_the_stage_by_stage_schedule():
    """A row of more floats than half the L1 data cache holds would not stay cached from
    its maximum to its quotients: the rule leaves it (the reductions in parallel over
    rows, the exponentials in memory), and the values stay ORT's."""
    cpu = parse_cpu("llvm")
    columns = cpu.l1d // 2 // 4 + 16
    model = _softmax_model([1, 2, columns])
    feeds = {"x": (RNG.standard_normal((1, 2, columns)) * 4).astype(np.float32)}
    compiled = heterocc.compile(model, target="llvm")
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(compiled.run(feeds)[0], expected, rtol=2e-6, atol=1e-8)
    allocations = {a.buffer.name: a.buffer.size for a in tir.collect(
        _lowered_softmax(compiled).body, lambda n: isinstance(n, tir.Allocate))}
    assert allocations["softmax_exp"] == 2 * columns  # the whole tensor, not a row
