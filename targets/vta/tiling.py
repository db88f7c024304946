"""Choosing GEMM tilings for the accelerator by its timing model.

Every tiling that fits one virtual thread's share of the buffers is a
candidate; each candidate's instruction stream is generated (with zero data)
and scheduled by ``accel_sim``'s timing model, and the fastest wins. A candidate
whose task count does not split over the virtual threads runs with one thread
(``task_threads``), so it is timed as that one-thread program; candidates that
split come first when the candidate list is cut. Candidates are timed in the order
of a lower bound on their cycles (the busiest module's summed instruction costs)
and the search stops once no remaining bound can beat the best time, which picks
what an exhaustive search picks after timing a few candidates. Results are cached
per GEMM shape.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from heterocc.accel_sim import HardwareConfig, schedule_stream
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Gemm, Load, dram_unit_bytes
from heterocc.accel_sim.reference_programs import GemmTiling, Requantization, tiled_gemm_program
from heterocc.accel_sim.timing import RTL_MACHINE, MachineTiming, instruction_cost

#: at most this many candidates are considered per shape (the largest blocks first)
MAX_CANDIDATES = 24


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def task_threads(m_tiles: int, n_tiles: int, tiling: GemmTiling, threads: int) -> int:
    """``threads``, or 1 when ``tiling``'s task count (output blocks) does not split
    over them: the thread count the tiling's program really runs with."""
    tasks = (m_tiles // tiling.block_rows) * (n_tiles // tiling.block_cols)
    return threads if tasks % threads == 0 else 1


def candidate_tilings(config: HardwareConfig, m_tiles: int, n_tiles: int, k_tiles: int,
                      threads: int, const_tiles: int) -> list[GemmTiling]:
    """Tilings that fit a virtual thread's share of every buffer, largest first."""
    inp_slot = config.inp_depth // threads
    wgt_slot = config.wgt_depth // threads
    acc_slot = (config.acc_depth - const_tiles) // threads
    found = []
    for rows, cols, k_chunk in itertools.product(_divisors(m_tiles), _divisors(n_tiles),
                                                 _divisors(k_tiles)):
        if rows * k_chunk <= inp_slot and cols * k_chunk <= wgt_slot and rows * cols <= acc_slot:
            found.append(GemmTiling(rows, cols, k_chunk))
    # tilings that use every thread first; then big blocks, which reuse each loaded tile
    # most; among them deep reduction chunks
    found.sort(key=lambda t: (task_threads(m_tiles, n_tiles, t, threads) != threads,
                              -(t.block_rows * t.block_cols), -t.k_chunk))
    return found[:MAX_CANDIDATES]


def busy_cycles_bound(config: HardwareConfig, m_tiles: int, n_tiles: int, k_tiles: int,
                      tiling: GemmTiling, alu_steps: int, threads: int = 2) -> int:
    """A lower bound on the modelled cycles of ``tiling``'s program: the cycles the
    compute module (resets, GEMMs, ``alu_steps`` ALU passes per block) or the load
    module (input and weight chunks) is busy, whichever is more. A program of one
    ``threads`` has one slot per buffer: each chunk's LOADs overwrite what the GEMM
    before them read, so they wait for it, and LOADs and GEMMs take turns."""
    rows, cols, k_chunk = tiling.block_rows, tiling.block_cols, tiling.k_chunk
    tasks = (m_tiles // rows) * (n_tiles // cols)
    steps = k_tiles // k_chunk
    block = dict(loop_outer=rows, loop_inner=cols, uop_begin=0)
    reset = Gemm(reset=True, uop_end=1, **block)
    gemm = Gemm(uop_end=k_chunk, **block)
    alu = Alu(alu_op=AluOp.ADD, uop_end=1, **block)
    compute = (instruction_cost(reset, config) + steps * instruction_cost(gemm, config)
               + alu_steps * instruction_cost(alu, config))
    load = sum(load_cycles_bound(Load(buffer=buffer, sram_base=0, dram_base=0, y_size=size,
                                      x_size=k_chunk, x_stride=k_tiles), config)
               for buffer, size in ((Buffer.INP, rows), (Buffer.WGT, cols)))
    if threads == 1:
        return tasks * max(compute, steps * (load + instruction_cost(gemm, config)))
    return tasks * max(compute, steps * load)


def load_cycles_bound(load: Load, config: HardwareConfig,
                      machine: MachineTiming = RTL_MACHINE) -> int:
    """A lower bound on the cycles a LOAD of tiles holds the load module in the timing
    model: its cost alone (``instruction_cost``), or, for a LOAD of many short rows,
    what the read port's limit of bursts in flight allows. Every row is at least one
    burst (of at most ``burst_beats`` beats), and a burst is granted only after the
    one ``outstanding_reads`` before it has its last beat, a DRAM latency after its
    own address: so each further ``outstanding_reads`` bursts take another latency.
    Without it a tiling of one-tile rows looks as cheap as one of long rows, and the
    search times many tilings the port makes slow.

    In the model a burst's address handshake comes at least two edges after the last
    beat of the burst ``outstanding_reads`` before it (the arbiter chooses after that
    beat, the handshake follows), its first beat at least the latency and an edge after
    its handshake, so each window of ``outstanding_reads`` bursts adds at least
    ``latency + 3`` cycles, the first (from the LOAD's issue) ``latency + 1``."""
    unit = dram_unit_bytes(config, load.buffer)
    bus_bytes = config.bus_width_bits // 8
    row_beats = -(-load.x_size * unit // bus_bytes)
    bursts = load.y_size * -(-row_beats // machine.burst_beats)
    windows = (bursts - 1) // machine.outstanding_reads if bursts else -1
    in_flight = (windows + 1) * (config.dram_latency_cycles + 1) + 2 * windows
    return max(instruction_cost(load, config), in_flight)


@functools.lru_cache(maxsize=256)
def best_tiling(config: HardwareConfig, rows: int, k: int, n: int, threads: int,
                epilogue_constants: int) -> tuple[GemmTiling, int]:
    """The tiling with the fewest modelled cycles for an (rows x k) @ (k x n) GEMM run
    with ``threads`` virtual threads where its task count splits over them (one
    otherwise, see ``task_threads``), and that cycle count."""
    a = np.zeros((rows, k), np.int8)
    w = np.zeros((n, k), np.int8)
    ones = np.ones(n, np.int64)
    epilogue = Requantization(*([ones] * 5), zero_point=0, qmin=-128, qmax=127) \
        if epilogue_constants else None
    n_tiles = n // config.block_out
    const_tiles = epilogue_constants * n_tiles
    # the reference program's ALU passes: one per column constant, then max and min
    # with immediates (its zero point is 0)
    alu_steps = len(epilogue.column_constants) + 2 if epilogue is not None else 0
    m_tiles, k_tiles = rows // config.batch, k // config.block_in
    candidates = candidate_tilings(config, m_tiles, n_tiles, k_tiles, threads, const_tiles)
    bounds = [busy_cycles_bound(config, m_tiles, n_tiles, k_tiles, t, alu_steps,
                                task_threads(m_tiles, n_tiles, t, threads))
              for t in candidates]
    # branch and bound: time the candidates by increasing bound until none can beat
    # the best; ties go to the earlier candidate, as in an exhaustive search
    best: tuple[int, int] | None = None  # (cycles, candidate index)
    for index in sorted(range(len(candidates)), key=bounds.__getitem__):
        if best is not None and bounds[index] > best[0]:
            break
        tiling = candidates[index]
        program = tiled_gemm_program(config, a, w, task_threads(m_tiles, n_tiles, tiling, threads),
                                     tiling, Buffer.OUT, epilogue)
        found = (schedule_stream(program.instructions, config).total_cycles, index)
        best = found if best is None else min(best, found)
    if best is None:
        raise ValueError(f"no tiling of a {rows}x{k}x{n} GEMM fits {config.name}")
    return candidates[best[1]], best[0]
