"""Whether the loads of an int8 convolution's register tile, rather than its multiplies,
set its pace on this CPU: the figure behind a CPU family's ``wide_dot_loads``
(``targets/llvm/cpu.py``), which ``schedules.int8_conv.tile_pace`` weighs tiles by.

A dense int8 convolution's register tile of ``vectors`` vectors of pixels by ``channels``
output channels loads each data vector once and each channel's four weight bytes once
(broadcast to every lane), then issues ``vectors * channels`` dot products: ``(vectors +
channels) / (vectors * channels)`` loads per instruction, 1.06 for 16 channels by one
vector, 0.46 for 8 by three. Each tile here is that loop alone, its operands in the L1
cache (offsets that change each iteration, so nothing is hoisted), emitted as the
target's kernels are (``Dot4Emitter``: LLVM folds a broadcast used once into the dot
product's memory operand, as it does in a kernel), timed on one thread beside the
dot product's register-only peak (``int8_bound.py``'s loop). A tile's share of the peak
below 1 means its loads bind: ``loads x share`` is the loads per instruction the core
sustains (on Zen 5 about 0.9: two 512-bit multiplies a cycle). Where every tile runs at
the peak (a core that multiplies one 512-bit vector a cycle) the loads do not bind.

    python benchmarks/int8_tile_loads.py [--target "llvm -mattr=-avx512f"] [--seconds 0.3]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import llvmlite.binding as llvm
import numpy as np
from llvmlite import ir

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from int8_bound import GROUP, close_loop, dot_peak  # noqa: E402  (beside this script)
from machine import cpu_target, describe  # noqa: E402

from heterocc.targets.llvm.int8_dot import Dot4Emitter  # noqa: E402
from heterocc.targets.llvm.module import machines  # noqa: E402
from heterocc.targets.llvm.schedules.int8_conv import (  # noqa: E402
    accumulators_in_flight,
    data_dtype,
)

#: (vectors, channels) of the tiles timed: the one-vector tiles and the multi-vector ones
#: ``tile_candidates`` offers a 64- or 128-filter convolution with 32 vector registers
#: (the first seven); with 16 (AVX2), those it offers where the dot product is widened
#: and four registers are kept for it (1 x 8, 2 x 4, 3 x 2), those where it is one
#: instruction (2 x 6, 3 x 4), and 2 x 5 and 3 x 3 beside ``DOT_CHAINS``
TILES = ((1, 16), (1, 24), (2, 8), (2, 12), (3, 8), (4, 4), (4, 6), (1, 8), (2, 4), (3, 2), (2, 5),
         (3, 3), (2, 6), (3, 4))
#: bytes between two output channels' weights (a 3x3 kernel over 132 input channels, as a
#: packed weight lies): each broadcast reads its own cache line
CHANNEL_STRIDE = 1188
#: distinct offsets the loop cycles through (each iteration a new one, all in L1)
OFFSETS = 32


def tile_ir(description, vectors: int, channels: int, name: str) -> str:
    """LLVM IR of ``i32 name(i64 count, i8* data, i8* weights)``: ``count`` iterations of a
    register tile of ``vectors`` x ``channels`` accumulators, each iteration loading its
    data vectors and broadcast weights at an offset that cycles through
    :data:`OFFSETS` positions."""
    lanes = description.vector_bytes // 4
    module = ir.Module(name=name)
    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    words = ir.VectorType(i32, lanes)
    data_bytes = ir.VectorType(i8, GROUP * lanes)
    function = ir.Function(module, ir.FunctionType(i32, [i64, i8.as_pointer(),
                                                         i8.as_pointer()]), name=name)
    count, data, weights = function.args
    entry, loop, done = (function.append_basic_block(n) for n in ("entry", "loop", "done"))
    builder = ir.IRBuilder(entry)
    builder.branch(loop)
    builder.position_at_end(loop)
    index = builder.phi(i64)
    accumulators = [builder.phi(words) for _ in range(vectors * channels)]

    def declare(symbol, ret, args):
        return module.globals.get(symbol) or ir.Function(module, ir.FunctionType(ret, args),
                                                         name=symbol)

    emitter = Dot4Emitter(builder, declare, description.features, description.arch)
    unsigned_data = data_dtype(description) == "uint8"
    offset = builder.mul(builder.and_(index, ir.Constant(i64, OFFSETS - 1)),
                         ir.Constant(i64, GROUP))
    loaded = []
    for v in range(vectors):
        at = builder.gep(data, [builder.add(offset, ir.Constant(i64, v * GROUP * lanes))])
        loaded.append(builder.load(builder.bitcast(at, data_bytes.as_pointer()), align=1))
    updated = [None] * (vectors * channels)
    for c in range(channels):
        at = builder.gep(weights, [builder.add(offset, ir.Constant(i64, c * CHANNEL_STRIDE))])
        word = builder.load(builder.bitcast(at, i32.as_pointer()), align=1)
        spread = builder.insert_element(ir.Constant(words, ir.Undefined), word,
                                        ir.Constant(i32, 0))
        spread = builder.shuffle_vector(spread, ir.Constant(words, ir.Undefined),
                                        ir.Constant(words, [0] * lanes))
        weight = builder.bitcast(spread, data_bytes)
        for v in range(vectors):
            slot = c * vectors + v
            updated[slot] = emitter.emit(accumulators[slot], loaded[v], weight,
                                         unsigned_data, False)
    close_loop(builder, (entry, loop, done), index, count, accumulators, updated,
               ir.Constant(words, [0] * lanes))
    return str(module)


def tile_rate(description, vectors: int, channels: int, seconds: float, runs: int) -> float:
    """Byte multiply-accumulates per second of one tile's loop on one thread (the best
    of ``runs`` runs of about ``seconds`` each)."""
    state = machines(description)
    name = f"heterocc_bench_tile_{vectors}x{channels}"
    module = llvm.parse_assembly(tile_ir(description, vectors, channels, name))
    module.verify()
    with state.engine_lock:
        state.engine.add_module(module)
        state.engine.finalize_object()
        address = state.engine.get_function_address(name)
    loop = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p,
                            ctypes.c_void_p)(address)
    lanes = description.vector_bytes // 4
    data = np.full(OFFSETS * GROUP + vectors * GROUP * lanes + 64, 3, np.uint8)
    weights = np.full(OFFSETS * GROUP + channels * CHANNEL_STRIDE + 64, 1, np.int8)
    args = (data.ctypes.data, weights.ctypes.data)
    start = time.perf_counter()
    loop(20_000, *args)
    count = max(1, int(20_000 * seconds / (time.perf_counter() - start)))
    per_call = count * vectors * channels * lanes * GROUP
    best = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        loop(count, *args)
        best = max(best, per_call / (time.perf_counter() - start))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default=None, help="an llvm target string (default: host)")
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    description = cpu_target(args.target)
    if description is None or machines(description).engine is None:
        raise SystemExit("the target's code does not run on this machine")
    print(describe(args.target))
    print(f"load: {os.getloadavg()[0]:.1f}; the description's dot_load_budget: "
          f"{description.dot_load_budget}")
    peak, _ = dot_peak(description, args.runs, args.seconds)
    print(f"dot product peak (registers only, one thread): {peak / 1e9:.1f} G byte-MAC/s")
    print(f"{'tile (vectors x channels)':26s} {'loads/instr':>11s} {'G byte-MAC/s':>12s} "
          f"{'of peak':>8s}  loads/instr sustained")
    for vectors, channels in TILES:
        if vectors * channels + vectors + 1 > description.vector_registers:
            continue
        rate = tile_rate(description, vectors, channels, args.seconds, args.runs)
        loads = (vectors + channels) / (vectors * channels)
        share = rate / peak
        if vectors * channels < accumulators_in_flight(description):
            sustained = f"({vectors * channels} chains: latency-bound, not counted)"
        else:
            sustained = f"{loads * share:.2f}" if share < 0.97 else "not bound"
        print(f"{f'{vectors} x {channels}':26s} {loads:11.2f} {rate / 1e9:12.1f} "
              f"{share:8.2f}  {sustained}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
