"""The base of TE-compiled targets (heterocc.sdk.te_target, exported by heterocc.sdk): a
target that supplies only a schedule, a code generator and its kernels gets the
expressing, the NumPy fallback with its reason, and one compile per function structure."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from heterocc import sdk, te
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.sdk.te_target import repeated_costly_stages
from heterocc.targets.llvm.module import build as build_module
from heterocc.te.schedule import INLINE


@dataclass
class MiniTarget(sdk.TETarget):
    """TE's default schedule, LLVM's code generator, kernels that allocate their outputs."""

    name: str = "mini"
    scheduled: list = field(default_factory=list)

    def schedule(self, expressed: sdk.ExpressedFunction) -> te.Schedule:
        self.scheduled.append(expressed)
        return te.create_schedule(expressed.outputs)

    def codegen(self, lowered, symbol: str):
        return build_module([lowered], name=symbol)[symbol]

    def kernel(self, function: Node, compiled: sdk.CompiledFunction):
        constants = sdk.function_constants(function.body, compiled.tables)

        def run(args):
            outs = [np.empty(v.type.shape, v.type.dtype) for v in function.outputs]
            compiled.code(*args, *constants, *outs)
            return outs

        return run


def _scale_and_shift(name: str, scale: np.ndarray, op: str = "Mul",
                     dtype: str = "float32") -> tuple[Node, np.ndarray]:
    """``name``: a function computing ``op(x, scale) + 1`` over a 4 x 8 input."""
    x = Value("x", TensorType((4, 8), dtype))
    c = Value("c", TensorType(scale.shape, dtype), scale.astype(dtype))
    one = Value("one", TensorType((), dtype), np.array(1, dtype))
    t = Value("t", TensorType((4, 8), dtype))
    y = Value("y", TensorType((4, 8), dtype))
    body = Graph([x], [y], [Node(op, [x, c], [t], get_op(op).normalize_attrs({}), name="op"),
                            Node("Add", [t, one], [y], {}, name="add")])
    return Node("function", [x], [y], name=name, body=body), np.arange(32).reshape(4, 8)


def test_the_base_needs_a_schedule_a_code_generator_and_kernels():
    class Incomplete(sdk.TETarget):
        def schedule(self, expressed):
            return te.create_schedule(expressed.outputs)

    with pytest.raises(TypeError, match="codegen"):
        Incomplete()


def test_functions_of_one_structure_compile_once_and_run_with_their_own_constants():
    rng = np.random.default_rng(0)
    target = MiniTarget()
    first, data = _scale_and_shift("first", rng.standard_normal(8))
    second, _ = _scale_and_shift("second", rng.standard_normal(8))
    x = data.astype(np.float32)
    for function in (first, second):
        (got,) = target.build(function)([x])
        np.testing.assert_allclose(got, x * function.body.nodes[0].inputs[1].data + 1,
                                   rtol=1e-6)
    assert target.distinct_kernels == 1 and len(target.scheduled) == 1
    assert target.fallbacks == {}
    # one-element constants are part of the structure: their values are folded into code
    third, _ = _scale_and_shift("third", np.array(2.0))
    np.testing.assert_allclose(target.build(third)([x])[0], x * 2 + 1)
    assert target.distinct_kernels == 2


def test_a_function_the_compute_library_cannot_express_runs_on_numpy_with_the_reason():
    target = MiniTarget()
    function, data = _scale_and_shift("halves", np.full(8, 0.5), dtype="float16")
    x = data.astype(np.float16)
    (got,) = target.build(function)([x])
    np.testing.assert_array_equal(got, x * np.float16(0.5) + np.float16(1))
    assert target.fallbacks == {"halves": "CompileError: mul on float16 has no TE compute"}
    assert target.scheduled == [] and target.distinct_kernels == 0


def test_a_function_the_target_cannot_generate_runs_on_numpy_and_is_not_retried():
    target = MiniTarget()
    function, data = _scale_and_shift("scaled", np.full(8, 0.5))
    x = data.astype(np.float32)

    def refuse(lowered, symbol):
        raise sdk.CompileError(f"{symbol}: not generated here")

    target.codegen = refuse
    np.testing.assert_array_equal(target.build(function)([x])[0], x * np.float32(0.5) + 1)
    assert target.fallbacks == {"scaled": "CompileError: scaled: not generated here"}
    # the failure is remembered for the structure: another such function is not retried
    other, _ = _scale_and_shift("other", np.full(8, 0.25))
    np.testing.assert_array_equal(target.build(other)([x])[0], x * np.float32(0.25) + 1)
    assert set(target.fallbacks) == {"scaled", "other"} and len(target.scheduled) == 1


def test_compile_all_generates_code_while_it_lowers_and_keeps_build_s_results():
    """Each structure's code waited for only after every structure was lowered; the
    kernels, the sharing of a structure and the fallbacks are those of build alone."""
    events = []

    @dataclass
    class Later(MiniTarget):
        def codegen_later(self, lowered, symbol):
            events.append(("started", symbol))

            def finish():
                events.append(("waited", symbol))
                if symbol == "refused":
                    raise sdk.CompileError(f"{symbol}: not generated here")
                return self.codegen(lowered, symbol)
            return finish

    rng = np.random.default_rng(1)
    functions = [_scale_and_shift(n, rng.standard_normal(8))[0] for n in ("a", "b")]
    functions.append(_scale_and_shift("halves", np.full(8, 0.5), dtype="float16")[0])
    functions.append(_scale_and_shift("refused", np.full(8, 0.5), op="Sub")[0])
    target = Later()
    target.compile_all(functions)
    # "halves" cannot be expressed (float16): never lowered; "b" shares "a"'s code
    assert events == [("started", "a"), ("started", "refused"), ("waited", "a"),
                      ("waited", "refused")]
    assert target.distinct_kernels == 1 and len(target.scheduled) == 2
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    for function in functions[:2]:
        np.testing.assert_allclose(target.build(function)([x])[0],
                                   x * function.body.nodes[0].inputs[1].data + 1, rtol=1e-6)
    np.testing.assert_array_equal(target.build(functions[3])([x])[0], x - np.float32(0.5) + 1)
    assert target.fallbacks["refused"].endswith("not generated here")
    assert target.build(functions[2])([x.astype(np.float16)])[0].dtype == np.float16
    assert set(target.fallbacks) == {"halves", "refused"}
    assert len(events) == 4  # build compiled nothing more


def test_constants_come_in_first_use_order_then_the_tables():
    function, _ = _scale_and_shift("f", np.arange(8.0))
    constants = sdk.function_constants(function.body)
    assert [c.shape for c in constants] == [(8,), ()]
    expressed = sdk.express_function(function.body)
    assert [p.name for p in expressed.params] == ["in0", "c0", "c1"]
    assert list(expressed.scalars.values())[0] == 1


def _sum_then_scale():
    """rows = sum(x, axis 1); kept = rows * 2 (a stage kept in memory); out = kept + 1."""
    x = te.placeholder((4, 8), "float32", "x")
    k = te.reduce_axis(8, "k")
    rows = te.compute((4,), lambda i: te.sum(x[i, k], axis=k), name="rows")
    kept = te.compute((4,), lambda i: rows[i] * 2.0, name="kept", attrs={"keep": True})
    out = te.compute((4,), lambda i: kept[i] + 1.0, name="out")
    return rows, kept, out


def test_the_epilogue_is_the_only_reader_and_one_of_the_takers():
    rows, kept, out = _sum_then_scale()
    schedule = te.create_schedule([out])
    # by default only an output takes an epilogue; a target may let a kept stage take it
    assert sdk.elementwise_epilogue(schedule, rows, [out]) is None
    assert sdk.elementwise_epilogue(schedule, rows, [out], takers=[kept, out]) is kept
    assert sdk.epilogue_chain(schedule, rows, kept) == []
    # an anchor the caller reads is stored for it: no stage finishes it
    assert sdk.elementwise_epilogue(schedule, rows, [out, rows], takers=[kept]) is None


def test_an_anchor_read_across_elements_has_no_epilogue():
    rows, _, _ = _sum_then_scale()
    shifted = te.compute((4,), lambda i: rows[3 - i] + 1.0, name="shifted")
    schedule = te.create_schedule([shifted])
    assert sdk.elementwise_epilogue(schedule, rows, [shifted]) is None
    same = te.compute((4,), lambda i: rows[i] + 1.0, name="same")
    assert sdk.elementwise_epilogue(te.create_schedule([same]), rows, [same]) is same


@dataclass
class _Recording(sdk.ScheduleRule):
    """A rule that matches stages by ``wanted`` and records the stages it schedules."""

    wanted: object
    owns: tuple = ()
    applied: list = field(default_factory=list)

    def matches(self, tensor):
        return self.wanted(tensor)

    def apply(self, schedule, tensor, epilogue=None, chain=()):
        self.applied.append(tensor.name)
        return False

    def owned(self, tensor):
        return self.owns


def test_a_stage_another_rule_owns_is_no_anchor_of_its_own():
    """A rule that owns a reduction (a softmax's row sum) schedules it; the rule for any
    reduction, which matches it too, does not, whatever their order."""
    rows, _, out = _sum_then_scale()
    whole = _Recording(lambda t: t is out, owns=(rows,))
    reductions = _Recording(lambda t: bool(t.op.reduce_axis))
    sdk.schedule_by_rules([out], [whole, reductions])
    assert (whole.applied, reductions.applied) == (["out"], [])
    alone = _Recording(lambda t: bool(t.op.reduce_axis))
    sdk.schedule_by_rules([out], [alone])
    assert alone.applied == ["rows"]


def _squeeze_excite(activation):
    """out[c, p] = x[c, p] * activation(s[c] + 1): the activation's stage, one value per
    channel, read by a stage 16 times its size (a squeeze-excite's scale)."""
    x = te.placeholder((4, 16), "float32", "x")
    s = te.placeholder((4,), "float32", "s")
    shifted = te.compute((4,), lambda c: s[c] + 1.0, name="shifted")
    gate = te.compute((4,), lambda c: activation(shifted[c]), name="gate")
    out = te.compute((4, 16), lambda c, p: x[c, p] * gate[c], name="out")
    return x, s, gate, out


def test_a_costly_stage_that_a_broadcast_repeats_is_computed_once():
    """A math function read by a broadcast stays in memory, with its cheap producers
    inlined into it; a cheap stage, or one read at its own size, is inlined."""
    _, _, gate, out = _squeeze_excite(lambda v: 1.0 / (1.0 + te.exp(0.0 - v)))
    schedule = sdk.schedule_by_rules([out], [])
    assert repeated_costly_stages(schedule, lambda t: t is not out) == [gate]
    assert [s.tensor.name for s in schedule.stages
            if not s.is_placeholder and s.attach != INLINE] == ["gate", "out"]
    _, _, cheap, cheap_out = _squeeze_excite(lambda v: v * 2.0)
    assert repeated_costly_stages(te.create_schedule([cheap_out]), lambda t: True) == []
    x = te.placeholder((4,), "float32", "x")
    same = te.compute((4,), lambda c: te.exp(x[c]), name="same")
    reader = te.compute((4,), lambda c: same[c] * x[c], name="reader")
    assert repeated_costly_stages(te.create_schedule([reader]), lambda t: True) == []


def _two_passes(value):
    """A LayerNorm's statistics over the rows of ``value(x[i, j])``: a mean pass, a
    centred sum of squares, and the centred output; ``(staged, out)``."""
    x = te.placeholder((4, 32), "float32", "x")
    staged = te.compute((4, 32), lambda i, j: value(x[i, j]), name="staged")
    r = te.reduce_axis(32, "r")
    total = te.compute((4,), lambda i: te.sum(staged[i, r], axis=r), name="total")
    s = te.reduce_axis(32, "s")
    spread = te.compute((4,), lambda i: te.sum(
        (staged[i, s] - total[i]) * (staged[i, s] - total[i]), axis=s), name="spread")
    out = te.compute((4, 32), lambda i, j: (staged[i, j] - total[i]) * spread[i], name="out")
    return staged, out


def test_a_costly_stage_that_two_reductions_read_is_computed_once():
    """A costly stage that two reductions read, each in a pass over all of it (and the
    output in a third), stays in memory: inlined, every pass computed it again. A cheap
    one is inlined."""
    staged, out = _two_passes(lambda v: te.floor(v / 3.0) * 3.0)
    inlinable = lambda t: t is not out  # noqa: E731
    assert repeated_costly_stages(te.create_schedule([out]), inlinable) == [staged]
    cheap, cheap_out = _two_passes(lambda v: v + 1.0)
    assert repeated_costly_stages(te.create_schedule([cheap_out]), lambda t: True) == []


def test_a_costly_stage_that_one_reduction_reads_is_inlined():
    x = te.placeholder((4, 32), "float32", "x")
    staged = te.compute((4, 32), lambda i, j: te.exp(x[i, j]), name="staged")
    r = te.reduce_axis(32, "r")
    total = te.compute((4,), lambda i: te.sum(staged[i, r], axis=r), name="total")
    out = te.compute((4, 32), lambda i, j: staged[i, j] / total[i], name="out")
    assert repeated_costly_stages(te.create_schedule([out]), lambda t: t is not out) == []


def test_requantize_decides_its_forms_and_code_key_once_per_attribute_values(monkeypatch):
    """Requantize's forms and code key (asked by the compute and, for every function, by
    structure_key) are decided once per attribute values, in one memo (qnn._forms)."""
    from heterocc.compute import qnn
    from heterocc.compute.registry import code_key_of
    from heterocc.ops import get_op

    decided = []
    original = qnn._per_channel_values
    monkeypatch.setattr(qnn, "_per_channel_values",
                        lambda *args: decided.append(1) or original(*args))
    monkeypatch.setattr(qnn, "_FORMS", {})
    code_key = code_key_of("Requantize")
    attrs = get_op("Requantize").normalize_attrs(
        {"multiplier": [1_234_567_891, 1_100_000_000, 987_654_321], "shift": [5, 6, 7],
         "product_shift": 31, "zero_point": 3, "qmin": -128, "qmax": 127, "axis": 1})
    key = code_key(attrs)
    assert code_key({k: list(v) if isinstance(v, list) else v for k, v in attrs.items()}) \
        is key  # equal values, not the same dict or lists: remembered
    assert qnn._forms(attrs).code_key is key and len(decided) == 1
    # a table's contents are the kernel's arguments, not its code
    assert code_key({**attrs, "multiplier": [1_234_567_890, 1_100_000_001, 987_654_320]}) == key
    assert code_key({**attrs, "zero_point": 2}) != key
    assert len(decided) == 3
    refused = {**attrs, "shift": [40, 6, 7]}
    assert code_key(refused)[0] == "refused" and code_key(dict(refused)) is code_key(refused)
    assert len(decided) == 3  # refused values: no forms decided
