"""The accelerator's TE -> TIR -> DAE path: the GEMM intrinsic, the packed schedule,
virtual-thread interleaving, micro-op kernels, dependency tokens, and bit-exact
results against NumPy int8 references and the hand-written reference programs."""

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc import tir
from heterocc.accel_sim import HardwareConfig, schedule_stream
from heterocc.accel_sim.checker import check_stream
from heterocc.accel_sim.isa import Buffer, Finish, Gemm, Load, MicroOp, Store
from heterocc.accel_sim.reference_programs import GemmTiling, Requantization, tiled_gemm_program
from heterocc.errors import CompileError
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.dae import MicroOpKernels
from heterocc.targets.vta.index_forms import LinearForm, compile_index, linear_form
from heterocc.targets.vta.intrin import ACC_SCOPE, GEMM_CALL, INP_SCOPE, WGT_SCOPE, gemm_intrin
from heterocc.targets.vta.templates import gemm_program, lower_gemm
from heterocc.targets.vta.tokens import Step, TileRange, insert_dependency_tokens

CONFIG = HardwareConfig()


def _model(nodes, x_shape, y_shape, initializers):
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def conv_model(channels, out_channels, size, kernel, stride, pad):
    rng = np.random.default_rng(channels * 100 + out_channels)
    out = (size + 2 * pad - kernel) // stride + 1
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride] * 2, pads=[pad] * 4)
    return _model([conv], (1, channels, size, size), (1, out_channels, out, out), {
        "w": rng.standard_normal((out_channels, channels, kernel, kernel)).astype(np.float32),
        "b": rng.standard_normal(out_channels).astype(np.float32)})


def dense_model(rows, k, n):
    rng = np.random.default_rng(k + n)
    gemm = helper.make_node("Gemm", ["x", "w", "b"], ["y"])
    return _model([gemm], (rows, k), (rows, n), {
        "w": rng.standard_normal((k, n)).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32)})


def _check_accelerator_functions(model, x_shape, threads):
    rng = np.random.default_rng(3)
    calibration = [[rng.standard_normal(x_shape).astype(np.float32)] for _ in range(3)]
    target = VtaTarget(virtual_threads=threads)
    compiled = heterocc.compile(model, target=[target, "reference"], calibration=calibration)
    composites = [c for region in compiled.graph.nodes if region.attrs.get("target") == "vta"
                  for c in region.body.nodes]
    assert composites and len(target.kernels) == len(composites)
    for composite, kernel in zip(composites, target.kernels):
        x_type = composite.body.inputs[0].type
        x = rng.integers(-128, 128, x_type.shape).astype(np.int8)
        (expected,) = evaluate(composite.body, [x])
        (got,) = kernel([x])
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, expected)
    return target


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", [(3, 20, 9, 3, 2, 1), (24, 16, 6, 1, 1, 0),
                                  (16, 40, 7, 3, 1, 1), (5, 7, 8, 3, 1, 0), (8, 33, 8, 1, 2, 0)],
                         ids=lambda c: "c{}o{}s{}k{}st{}p{}".format(*c))
def test_convolutions_are_bit_exact(case, threads):
    channels, _, size, *_ = case
    _check_accelerator_functions(conv_model(*case), (1, channels, size, size), threads)


@pytest.mark.parametrize("threads", [1, 2])
def test_dense_is_bit_exact(threads):
    _check_accelerator_functions(dense_model(4, 40, 72), (4, 40), threads)


def _requantization(rng, n):
    return Requantization(
        bias=rng.integers(-5000, 5000, n), limit=np.full(n, 1 << 20),
        multiplier=rng.integers(1, 200, n), rounding=np.full(n, 1 << 11),
        shift=np.full(n, 12), zero_point=int(rng.integers(-5, 5)), qmin=-128, qmax=127)


def _reference(a, w, rq):
    acc = a.astype(np.int64) @ w.astype(np.int64).T
    if rq is None:
        return acc
    clamped = np.clip(acc + rq.bias, -rq.limit, rq.limit)
    scaled = (clamped * rq.multiplier + rq.rounding) >> rq.shift
    return np.clip(scaled + rq.zero_point, rq.qmin, rq.qmax)


def _run(program, a):
    program.write("A", a)
    program.run()
    return program.read("C")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,tiling", [
    ((8, 64, 32), GemmTiling(2, 1, 2)), ((12, 96, 48), GemmTiling(3, 3, 3)),
    ((16, 32, 64), GemmTiling(4, 2, 1)), ((2, 128, 16), GemmTiling(1, 1, 8))])
@pytest.mark.parametrize("requantize", [True, False])
def test_generated_stream_matches_reference_program(shape, tiling, threads, requantize):
    rows, k, n = shape
    rng = np.random.default_rng(rows + k + n)
    a = rng.integers(-128, 128, (rows, k)).astype(np.int8)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    rq = _requantization(rng, n) if requantize else None
    program = gemm_program(CONFIG, rows, w, tiling, threads, rq)
    reference = tiled_gemm_program(CONFIG, a, w, threads, tiling,
                                   Buffer.OUT if requantize else Buffer.ACC, rq)
    got = _run(program, a)
    np.testing.assert_array_equal(got, _run(reference, a))
    np.testing.assert_array_equal(got, _reference(a, w, rq))
    new = schedule_stream(program.instructions, CONFIG).total_cycles
    old = schedule_stream(reference.instructions, CONFIG).total_cycles
    assert new <= 1.25 * old  # small programs: the extra micro-op loads weigh most here


def test_large_gemm_cycles_match_the_reference_program():
    rows, k, n = 196, 2304, 256
    tiling = GemmTiling(98, 8, 4)
    w = np.zeros((n, k), np.int8)
    program = gemm_program(CONFIG, rows, w, tiling, 2, None)
    reference = tiled_gemm_program(CONFIG, np.zeros((rows, k), np.int8), w, 2, tiling)
    new = schedule_stream(program.instructions, CONFIG)
    old = schedule_stream(reference.instructions, CONFIG)
    assert new.total_cycles <= 1.05 * old.total_cycles
    assert new.gemm_utilization > 0.9
    single = schedule_stream(gemm_program(CONFIG, rows, w, tiling, 1, None).instructions, CONFIG)
    assert single.total_cycles > 1.3 * new.total_cycles  # double buffering pays


def test_gemm_intrinsic_declares_one_tile():
    intrin = gemm_intrin(CONFIG)
    inp, wgt = intrin.inputs
    assert (inp.shape, inp.dtype) == ((1, 16), "int8")
    assert (wgt.shape, wgt.dtype) == ((16, 16), "int8")
    assert (intrin.compute.shape, intrin.compute.dtype) == ((1, 16), "int32")


def test_lowered_tir_is_tensorized_staged_and_thread_interleaved():
    func, _ = lower_gemm(CONFIG, 8, 64, 32, GemmTiling(2, 1, 2), 2, None)
    calls = tir.collect(func.body, lambda n: isinstance(n, tir.Call) and n.name == GEMM_CALL)
    assert calls
    allocated = tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    scopes = {a.buffer.scope for a in allocated}
    assert scopes == {INP_SCOPE, WGT_SCOPE, ACC_SCOPE}
    names = {a.buffer.name for a in allocated}
    assert {"C.vt0", "C.vt1", "A.vta.inp.vt0", "A.vta.inp.vt1"} <= names
    assert not tir.collect(func.body, lambda n: isinstance(n, tir.For)
                           and n.kind is tir.ForKind.THREAD_BINDING)
    # the innermost tile loops are gone: the calls sit in (rows, cols, k_chunk) loops
    loops = tir.collect(func.body, lambda n: isinstance(n, tir.For) and isinstance(
        n.body, tir.For) and isinstance(n.body.body, tir.Evaluate))
    assert loops


def test_micro_op_kernels_are_shared_and_not_reloaded():
    kernels = MicroOpKernels(depth=4)
    first = (MicroOp(0, 0, 0), MicroOp(1, 1, 1))
    second = (MicroOp(2, 2, 2),)
    begin, load = kernels.place(first)
    assert (begin, load.x_size, load.dram_base) == (0, 2, 0)
    assert kernels.place(first) == (0, None)  # resident: no reload
    begin, load = kernels.place(second)
    assert (begin, load.dram_base) == (2, 2)
    begin, load = kernels.place((MicroOp(3, 3, 3), MicroOp(4, 4, 4)))  # evicts: back to 0
    assert begin == 0 and load.dram_base == 3
    begin, load = kernels.place(first)  # evicted, reloaded, but one DRAM copy
    assert load.dram_base == 0 and len(kernels.words) == 5


def test_program_micro_ops_are_deduplicated():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (64, 96)).astype(np.int8)
    program = gemm_program(CONFIG, 16, w, GemmTiling(2, 2, 3), 2, _requantization(rng, 64))
    uop_loads = [i for i in program.instructions if isinstance(i, Load) and i.buffer == Buffer.UOP]
    loop_instructions = [i for i in program.instructions if hasattr(i, "uop_begin")]
    assert len(uop_loads) < len(loop_instructions) / 4
    kernels = {}
    for load in uop_loads:
        block = tuple(program.uops[load.dram_base - program.tensors["uops"].tile_base:][
            :load.x_size])
        assert kernels.setdefault(block, load.dram_base) == load.dram_base


def test_dependency_tokens_follow_the_data():
    inp = TileRange(Buffer.INP, 0, 4)
    acc = TileRange(Buffer.ACC, 0, 2)
    load = Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=4, x_stride=4)
    gemm = Gemm(uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1)
    store = Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2)
    uops = Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    steps = [Step(uops), Step(load, writes=[inp]), Step(gemm, reads=[inp], writes=[acc]),
             Step(store, reads=[acc]), Step(load, writes=[inp]),
             Step(gemm, reads=[inp], writes=[acc]), Step(store, reads=[acc]),
             Step(Finish(), reads=[TileRange(Buffer.ACC, 0, CONFIG.acc_depth)],
                  writes=[TileRange(Buffer.ACC, 0, CONFIG.acc_depth)])]
    out = insert_dependency_tokens(steps, CONFIG)
    flags = [{f for f in ("pop_prev", "pop_next", "push_prev", "push_next") if getattr(i, f)}
             for i in out]
    assert flags == [
        set(),                                    # the micro-op load (compute, in order)
        {"push_next"},                            # data ready
        {"pop_prev", "push_next", "push_prev"},   # wait data; acc ready, inp free
        {"pop_prev", "push_prev"},                # wait acc; acc free
        {"pop_next", "push_next"},                # wait inp free (WAR); data ready
        {"pop_prev", "pop_next", "push_next"},    # wait data and acc free; acc ready
        {"pop_prev", "push_prev"},
        {"pop_next"},                             # FINISH waits for the last store
    ]
    check_stream(out, CONFIG, dram_bytes=4096)


def test_schedule_errors_name_the_problem():
    w = np.zeros((32, 64), np.int8)
    with pytest.raises(CompileError, match="virtual threads"):
        gemm_program(CONFIG, 6, w, GemmTiling(2, 2, 1), 2, None)  # 3 tasks over 2 threads
    with pytest.raises(CompileError, match="does not divide"):
        gemm_program(CONFIG, 6, w, GemmTiling(4, 1, 1), 1, None)
    small = HardwareConfig.preset("1x16x16")
    with pytest.raises(CompileError, match="overflows"):
        gemm_program(small, 4096, np.zeros((16, 16), np.int8), GemmTiling(4096, 1, 1), 1,
                     None)


def test_index_functors_evaluate_affine_and_refuse_what_is_not_integer_arithmetic():
    i, j = tir.Var("i"), tir.Var("j")
    expr = (i * 4 + j - 3) * 2
    assert linear_form(expr) == LinearForm(-6, {i: 8, j: 2})
    assert compile_index(expr)({i: 2, j: 5}) == 2 * (8 + 5 - 3)
    quotient = tir.Binary("floordiv", i, tir.IntImm(3))
    assert linear_form(quotient) is None and linear_form(i * j) is None
    assert compile_index(quotient + j)({i: 7, j: 1}) == 3
    with pytest.raises(CompileError, match="index variable 'j' is not bound"):
        compile_index(i + j)({i: 0})
    with pytest.raises(CompileError, match="is not integer arithmetic"):
        compile_index(tir.FloatImm(1.5))


def test_micro_op_offsets_walk_the_loops_as_nested_loops():
    from heterocc.targets.vta.dae import _offsets
    coeffs, extents = (7, 3, 1), (2, 3, 2)
    walked = [sum(c * p for c, p in zip(coeffs, point))
              for point in itertools.product(*(range(e) for e in extents))]
    assert list(_offsets(coeffs, extents)) == walked
    assert _offsets((), ()) == (0,)


def test_the_chosen_conv_stream_is_the_timed_one_and_passes_the_checker():
    from heterocc.targets.vta.conv import ConvGeometry
    from heterocc.targets.vta.templates import best_conv_tiling, conv_stream, conv_timing
    g = ConvGeometry(1, 4, 12, 12, 2, (3, 3), (1, 1), (1, 1, 1, 1))
    tiling, threads = best_conv_tiling(CONFIG, g, 2, None)
    program = conv_stream(CONFIG, g, tiling, threads, None)
    check_stream(program.instructions, CONFIG, dram_bytes=len(program.dram))
    assert conv_timing(CONFIG, g, tiling, threads, None).total_cycles == \
        schedule_stream(program.instructions, CONFIG).total_cycles
