"""How fast a zoo model's int8 form could run on this CPU's 8-bit dot product at best,
next to ONNX Runtime: whether a latency target (0.8x ORT's) is within reach of faster
kernels at all, or needs fewer multiplies.

1. The peak of the dot product the llvm target emits for the CPU (``Dot4Emitter``: AVX-512
   VNNI ``vpdpbusd``, AVX-VNNI, NEON ``udot``/``sdot``; on x86 without VNNI the split
   ``vpmaddubsw`` form, which only the channel-lane kernels keep: the convolutions of
   vectors of pixels multiply by weights widened when packed, two ``vpmaddwd`` a group
   where this loop times four, so there its time is no lower bound for those kernels):
   independent accumulator chains on registers, no memory, timed on one thread, then on
   every core at once (the best of several runs).
2. The model's multiply-accumulates the dot product takes: its dense and grouped
   convolutions and its products (Gemm, MatMul), counted from the exported graph with
   the reduction rounded up to whole groups of four bytes (a 3-channel stem costs four),
   as a direct (im2col-free or not) convolution multiplies them. Depthwise convolutions
   are counted apart and left out of the bound, like everything else a model runs
   besides (requantization, pooling, residual adds, packing): they only add time.
3. Their time at one core's peak times the threads: a lower bound of any kernel that
   multiplies them on that instruction. Where the CPU has matrix tiles (x86 AMX-INT8),
   the convolutions the llvm target computes on them (``matrix_conv``: their input
   channels counted rounded up to whole blocks of 64, as the tiles multiply them) are
   timed at the tiles' peak instead (four accumulator tiles advanced by ``tdpbsud`` on
   operand tiles loaded once), the rest at the dot product's. Then ONNX Runtime's median
   latency on the same int8 model (as ``benchmarks/zoo.py`` makes it: ``quantize_static``
   QDQ, per channel) at the same thread count, and bound / ORT: above 0.8, "0.8x ORT"
   is out of reach of any kernel of the direct convolution's arithmetic on this CPU.

    python benchmarks/int8_bound.py [--models resnet18 resnet50] [--threads 2]
                                    [--target "llvm -mattr=-avx512f"] [--runs 50]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm
import numpy as np
import onnx
from llvmlite import ir

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import cpu_target, describe  # noqa: E402  (beside this script)
from zoo import TEXT, VISION, export, quantize, random_feed  # noqa: E402  (beside this script)

from heterocc.targets.llvm.int8_dot import Dot4Emitter  # noqa: E402
from heterocc.targets.llvm.int8_tiles import (  # noqa: E402
    TILE_BYTES,
    TILE_ROWS,
    has_tiles,
    tile_configuration,
)
from heterocc.targets.llvm.module import machines  # noqa: E402
from heterocc.targets.llvm.schedules.int8_conv import data_dtype  # noqa: E402
from heterocc.targets.llvm.schedules.int8_matrix import CHANNEL_BLOCK, matrix_conv  # noqa: E402

#: bytes per int32 lane of the dot product: the reduction is multiplied in groups of four
GROUP = 4
#: accumulator chains the peak loop keeps (every vector register but four, at least 8)
OPERAND_REGISTERS = 4
#: the peak loop's symbol in the target's engine (beside its kernels)
PEAK_FUNCTION = "heterocc_bench_dot_peak"
#: the tiles' peak loop's symbol
TILE_PEAK_FUNCTION = "heterocc_bench_tile_peak"
#: multiply-accumulates of one tile product (16 x 16 x 64)
TILE_MACS = TILE_ROWS * TILE_ROWS * TILE_BYTES


def tile_peak_ir() -> str:
    """LLVM IR of ``i32 TILE_PEAK_FUNCTION(i64 count, i32 seed, ptr scratch)``: the tiles
    configured, two weight and two data tiles loaded from ``scratch`` (4 KB), then
    ``count`` iterations of the four products of a 2 x 2 register tile into four
    accumulator tiles (each waiting on its own last product, as in a convolution's
    reduction), stored back, the tiles released."""
    config = tile_configuration()
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    ptr = ir.PointerType()
    module = ir.Module(name="tile_peak")
    table = ir.GlobalVariable(module, ir.ArrayType(i8, len(config)), "tile_config")
    table.global_constant, table.align = True, 64
    table.initializer = ir.Constant(ir.ArrayType(i8, len(config)), bytearray(config))
    function = ir.Function(module, ir.FunctionType(i32, [i64, i32, ptr]),
                           name=TILE_PEAK_FUNCTION)
    count, _, scratch = function.args
    entry, loop, done = (function.append_basic_block(n) for n in ("entry", "loop", "done"))

    def call(name, args, types):
        callee = module.globals.get(name) or ir.Function(
            module, ir.FunctionType(ir.VoidType(), types), name=name)
        builder.call(callee, args)

    def tile(number):
        return ir.Constant(i8, number)

    builder = ir.IRBuilder(entry)
    call("llvm.x86.ldtilecfg", [table], [ptr])
    for number in range(4, 8):  # operands: rows of 64 bytes, 1 KB a tile
        address = builder.gep(scratch, [ir.Constant(i64, 1024 * (number - 4))],
                              source_etype=i8)
        call("llvm.x86.tileloadd64", [tile(number), address, ir.Constant(i64, TILE_BYTES)],
             [i8, ptr, i64])
    for number in range(4):
        call("llvm.x86.tilezero", [tile(number)], [i8])
    builder.branch(loop)
    builder.position_at_end(loop)
    index = builder.phi(i64)
    for c, (a, b) in enumerate(((4, 6), (4, 7), (5, 6), (5, 7))):
        call("llvm.x86.tdpbsud", [tile(c), tile(a), tile(b)], [i8, i8, i8])
    step = builder.add(index, ir.Constant(i64, 1))
    builder.cbranch(builder.icmp_unsigned("<", step, count), loop, done)
    index.add_incoming(ir.Constant(i64, 0), entry)
    index.add_incoming(step, loop)
    builder.position_at_end(done)
    for number in range(4):
        address = builder.gep(scratch, [ir.Constant(i64, 1024 * number)], source_etype=i8)
        call("llvm.x86.tilestored64", [tile(number), address, ir.Constant(i64, TILE_BYTES)],
             [i8, ptr, i64])
    call("llvm.x86.tilerelease", [], [])
    builder.ret(ir.Constant(i32, 0))
    return str(module)


def dot_peak_ir(description, lanes: int, chains: int) -> str:
    """LLVM IR of ``i32 PEAK_FUNCTION(i64 count, i32 seed, ptr)``: ``count`` iterations, each
    advancing ``chains`` independent ``<lanes x i32>`` accumulators by one dot product of
    data bytes (as the CPU's convolutions store them: :func:`data_dtype`) by int8 weights
    as the target emits it for ``description``."""
    module = ir.Module(name="dot_peak")
    i32, i64 = ir.IntType(32), ir.IntType(64)
    words = ir.VectorType(i32, lanes)
    function = ir.Function(module, ir.FunctionType(i32, [i64, i32, ir.PointerType()]),
                           name=PEAK_FUNCTION)
    count, seed, _ = function.args  # the third: the tiles' loop's scratch, unused here
    entry, loop, done = (function.append_basic_block(n) for n in ("entry", "loop", "done"))
    builder = ir.IRBuilder(entry)
    broadcast = builder.insert_element(ir.Constant(words, ir.Undefined), seed,
                                       ir.Constant(i32, 0))
    broadcast = builder.shuffle_vector(broadcast, ir.Constant(words, ir.Undefined),
                                       ir.Constant(words, [0] * lanes))
    data_bytes = ir.VectorType(ir.IntType(8), GROUP * lanes)
    a = builder.bitcast(broadcast, data_bytes)
    builder.branch(loop)
    builder.position_at_end(loop)
    index = builder.phi(i64)
    accumulators = [builder.phi(words) for _ in range(chains)]

    def declare(name, ret, args):
        existing = module.globals.get(name)
        return existing or ir.Function(module, ir.FunctionType(ret, args), name=name)

    emitter = Dot4Emitter(builder, declare, description.features, description.arch)
    # the data's byte type as the convolutions read it (int8 for AArch64's sdot)
    unsigned_data = data_dtype(description) == "uint8"
    # each chain's weights are the next chain's accumulator of the last iteration, so
    # that no product is loop-invariant (hoisted, or one computed for every chain);
    # the data stays invariant, as a register tile reuses a data vector (the exact
    # AVX2 form splits it once) across several weights
    updated = [emitter.emit(acc, a, builder.bitcast(accumulators[(c + 1) % chains],
                                                    data_bytes), unsigned_data, False)
               for c, acc in enumerate(accumulators)]
    close_loop(builder, (entry, loop, done), index, count, accumulators, updated, broadcast)
    return str(module)


def close_loop(builder, blocks, index, count, accumulators, updated, initial) -> None:
    """End a counted loop of accumulator chains: ``index`` (a phi) steps to ``count``,
    each accumulator phi starts at ``initial`` and takes its ``updated`` value, and the
    ``done`` block returns the first lane of their sum (so that none is dead code).
    ``blocks``: the function's (entry, loop, done) blocks, the builder in ``loop``."""
    entry, loop, done = blocks
    i32, i64 = ir.IntType(32), ir.IntType(64)
    step = builder.add(index, ir.Constant(i64, 1))
    builder.cbranch(builder.icmp_unsigned("<", step, count), loop, done)
    index.add_incoming(ir.Constant(i64, 0), entry)
    index.add_incoming(step, loop)
    for phi, new in zip(accumulators, updated):
        phi.add_incoming(initial, entry)
        phi.add_incoming(new, loop)
    builder.position_at_end(done)
    total = updated[0]
    for value in updated[1:]:
        total = builder.add(total, value)
    builder.ret(builder.extract_element(total, ir.Constant(i32, 0)))


def dot_peak(description, runs: int, seconds: float) -> tuple[float, float]:
    """Byte multiply-accumulates per second of the dot-product peak loop: one thread,
    and every core at once (the best of ``runs`` runs of about ``seconds`` each)."""
    lanes = description.vector_bytes // 4
    chains = max(8, description.vector_registers - OPERAND_REGISTERS)
    return _peak(description, dot_peak_ir(description, lanes, chains), PEAK_FUNCTION,
                 chains * lanes * GROUP, runs, seconds)


def tile_peak(description, runs: int, seconds: float) -> tuple[float, float]:
    """:func:`dot_peak` of the tiles' loop (:func:`tile_peak_ir`)."""
    return _peak(description, tile_peak_ir(), TILE_PEAK_FUNCTION, 4 * TILE_MACS, runs,
                 seconds)


def _peak(description, source: str, symbol: str, per_iteration: int, runs: int,
          seconds: float) -> tuple[float, float]:
    """Multiply-accumulates per second of the loop ``symbol`` of ``source`` (LLVM IR;
    ``per_iteration`` of them an iteration), one thread and every core at once."""
    state = machines(description)
    if state.engine is None:
        raise SystemExit(f"code for {description.triple} does not run on this machine")
    module = llvm.parse_assembly(source)
    module.verify()
    with state.engine_lock:  # the engine the target's kernels are loaded into
        state.engine.add_module(module)
        state.engine.finalize_object()
        address = state.engine.get_function_address(symbol)
    # ctypes releases the GIL during the call: the threads run the loop side by side
    loop = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_int32,
                            ctypes.c_void_p)(address)
    scratch = [np.zeros(4096, np.uint8) for _ in range(os.cpu_count() or 1)]
    start = time.perf_counter()
    loop(100_000, 3, scratch[0].ctypes.data)
    count = max(1, int(100_000 * seconds / (time.perf_counter() - start)))
    per_call = count * per_iteration
    rates = []
    for threads in (1, os.cpu_count() or 1):
        best = 0.0
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(runs):
                start = time.perf_counter()
                list(pool.map(lambda t: loop(count, 3, scratch[t].ctypes.data),
                              range(threads)))
                best = max(best, threads * per_call / (time.perf_counter() - start))
        rates.append(best)
    return rates[0], rates[1]


def _ceil_group(value: int) -> int:
    return -(-value // GROUP) * GROUP


def model_macs(path: str, description=None) -> tuple[int, int, int]:
    """(multiply-accumulates of the dense and grouped convolutions and products, with each
    reduction rounded up to whole groups of four; those of the depthwise convolutions;
    those of the convolutions ``description``'s tiles take, each reduction rounded up to
    whole blocks of 64 channels) of the float model at ``path``, from its inferred
    shapes. The tiles' are not in the first count."""
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    graph = model.graph
    shapes = {init.name: tuple(init.dims) for init in graph.initializer}
    for info in [*graph.value_info, *graph.input, *graph.output]:
        dims = info.type.tensor_type.shape.dim
        shapes[info.name] = tuple(d.dim_value or 1 for d in dims)
    dense = depthwise = tiles = 0
    for node in graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            k, per_group, *window = shapes[node.input[1]]
            n, _, *spatial = shapes[node.output[0]]
            points = n * k * int(np.prod(spatial)) * int(np.prod(window))
            if attrs.get("group", 1) > 1 and per_group == 1:
                depthwise += points
            elif description is not None and matrix_conv(
                    shapes[node.input[0]], shapes[node.input[1]], attrs, description):
                tiles += points * -(-per_group // CHANNEL_BLOCK) * CHANNEL_BLOCK
            else:
                dense += points * _ceil_group(per_group)
        elif node.op_type == "Gemm":
            a, b = shapes[node.input[0]], shapes[node.input[1]]
            rows = a[1] if attrs.get("transA", 0) else a[0]
            depth = a[0] if attrs.get("transA", 0) else a[1]
            columns = b[0] if attrs.get("transB", 0) else b[1]
            dense += rows * columns * _ceil_group(depth)
        elif node.op_type == "MatMul":
            a, b = shapes[node.input[0]], shapes[node.input[1]]
            batch = int(np.prod(shapes[node.output[0]][:-2]))
            dense += batch * a[-2] * b[-1] * _ceil_group(a[-1])
    return dense, depthwise, tiles


def ort_latency(path: str, threads: int, runs: int) -> float:
    """ONNX Runtime's median seconds per run of the model at ``path`` on ``threads``
    intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = random_feed(session, np.random.default_rng(0))
    for _ in range(5):
        session.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50"],
                        choices=[*VISION, *TEXT])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--target", default="llvm",
                        help='the CPU whose dot product bounds, e.g. "llvm -mattr=-avx512f"')
    parser.add_argument("--runs", type=int, default=50, help="ONNX Runtime runs per model")
    parser.add_argument("--peak-runs", type=int, default=100)
    parser.add_argument("--peak-seconds", type=float, default=0.002,
                        help="length of one peak run: short runs, the best of many, are "
                             "the ones no other process preempted")
    args = parser.parse_args()
    print(describe(args.target))
    print(f"load: {os.getloadavg()[0]:.1f}")
    description = cpu_target(args.target)
    one, every = dot_peak(description, args.peak_runs, args.peak_seconds)
    cores = os.cpu_count() or 1
    # the bound at --threads threads: one core's peak times the threads (cores running
    # at once never beat it: their clocks only drop; a busy machine preempts the
    # all-cores run more than the one-core one, which would loosen a bound taken there)
    peak = one * min(args.threads, cores)
    print(f"8-bit dot product peak: {one / 1e9:.1f} G byte-MAC/s on one core, "
          f"{every / 1e9:.1f} on {cores} cores at once; the bound at {args.threads} "
          f"threads takes {peak / 1e9:.1f}")
    tile_rate = None
    if has_tiles(description.features, description.arch):
        tile_one, tile_every = tile_peak(description, args.peak_runs, args.peak_seconds)
        tile_rate = tile_one * min(args.threads, cores)
        print(f"matrix tiles' peak: {tile_one / 1e9:.1f} G byte-MAC/s on one core, "
              f"{tile_every / 1e9:.1f} on {cores} cores at once; the bound at "
              f"{args.threads} threads takes {tile_rate / 1e9:.1f}")
    print(f"{'model':<20}{'dense GMAC':>11}{'tiles GMAC':>11}{'depthwise':>11}{'bound ms':>10}"
          f"{'ORT ms':>9}{'bound/ORT':>11}")
    with tempfile.TemporaryDirectory() as directory:
        for name in args.models:
            float_path = os.path.join(directory, f"{name}.onnx")
            skipped = export(name, float_path)
            if skipped:
                print(f"{name:<20}skipped: {skipped}")
                continue
            int8_path = os.path.join(directory, f"{name}.int8.onnx")
            quantize(float_path, int8_path)
            dense, depthwise, tiles = model_macs(
                float_path, description if tile_rate is not None else None)
            bound = dense / peak + (tiles / tile_rate if tiles else 0.0)
            ort_seconds = ort_latency(int8_path, args.threads, args.runs)
            print(f"{name:<20}{dense / 1e9:>11.3f}{tiles / 1e9:>11.3f}{depthwise / 1e9:>11.3f}"
                  f"{bound * 1e3:>10.2f}{ort_seconds * 1e3:>9.2f}{bound / ort_seconds:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
