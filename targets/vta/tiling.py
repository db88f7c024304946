"""Choosing GEMM tilings for the accelerator by its timing model.

Every tiling that fits one virtual thread's share of the buffers is a
candidate; each candidate's instruction stream is generated (with zero data)
and scheduled by ``accel_sim``'s timing model, and the fastest wins. Programs
are small (hundreds to a few thousand instructions), so this takes
milliseconds per candidate; results are cached per GEMM shape.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from heterocc.accel_sim import HardwareConfig, schedule_stream
from heterocc.accel_sim.isa import Buffer
from heterocc.accel_sim.reference_programs import GemmTiling, Requantization, tiled_gemm_program

#: at most this many candidates are timed per shape (the largest blocks first)
MAX_CANDIDATES = 24


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


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
    # big blocks reuse each loaded tile most; among them prefer deep reduction chunks
    found.sort(key=lambda t: (-(t.block_rows * t.block_cols), -t.k_chunk))
    return found[:MAX_CANDIDATES]


@functools.lru_cache(maxsize=256)
def best_tiling(config: HardwareConfig, rows: int, k: int, n: int, threads: int,
                epilogue_constants: int) -> tuple[GemmTiling, int]:
    """The tiling with the fewest modelled cycles for an (rows x k) @ (k x n) GEMM,
    and that cycle count."""
    a = np.zeros((rows, k), np.int8)
    w = np.zeros((n, k), np.int8)
    ones = np.ones(n, np.int64)
    epilogue = Requantization(*([ones] * 5), zero_point=0, qmin=-128, qmax=127) \
        if epilogue_constants else None
    n_tiles = n // config.block_out
    const_tiles = epilogue_constants * n_tiles
    best: tuple[GemmTiling, int] | None = None
    for tiling in candidate_tilings(config, rows // config.batch, n_tiles, k // config.block_in,
                                    threads, const_tiles):
        program = tiled_gemm_program(config, a, w, threads, tiling, Buffer.OUT, epilogue)
        cycles = schedule_stream(program.instructions, config).total_cycles
        if best is None or cycles < best[1]:
            best = (tiling, cycles)
    if best is None:
        raise ValueError(f"no tiling of a {rows}x{k}x{n} GEMM fits {config.name}")
    return best
