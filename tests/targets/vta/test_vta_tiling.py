"""The timing-model tiling search scores each tiling with the threads it really runs with."""

import numpy as np
import pytest

from heterocc.accel_sim import HardwareConfig, schedule_stream
from heterocc.accel_sim.isa import Buffer, Finish, Load
from heterocc.accel_sim.reference_programs import GemmTiling, Requantization, tiled_gemm_program
from heterocc.targets.vta.tiling import (
    best_tiling,
    busy_cycles_bound,
    candidate_tilings,
    load_cycles_bound,
    task_threads,
)

CONFIG = HardwareConfig()


def _modelled_cycles(rows, k, n, tiling, threads):
    ones = np.ones(n, np.int64)
    epilogue = Requantization(*([ones] * 5), zero_point=0, qmin=-128, qmax=127)
    program = tiled_gemm_program(CONFIG, np.zeros((rows, k), np.int8), np.zeros((n, k), np.int8),
                                 threads, tiling, Buffer.OUT, epilogue)
    return schedule_stream(program.instructions, CONFIG).total_cycles


def test_task_threads_falls_back_to_one_for_odd_task_counts():
    assert task_threads(4, 6, GemmTiling(2, 2, 1), 2) == 2   # 2 x 3 tasks
    assert task_threads(3, 3, GemmTiling(1, 1, 1), 2) == 1   # 9 tasks
    assert task_threads(3, 3, GemmTiling(3, 3, 1), 1) == 1


def test_candidates_that_split_over_the_threads_come_first():
    found = candidate_tilings(CONFIG, 6, 63, 8, 2, 0)
    splits = [task_threads(6, 63, t, 2) == 2 for t in found]
    assert splits[0] and splits == sorted(splits, reverse=True)


@pytest.mark.parametrize("shape", [(16, 512, 1008), (48, 256, 48), (96, 128, 160)])
def test_best_tiling_reports_the_cycles_of_the_program_that_runs(shape):
    rows, k, n = shape
    tiling, cycles = best_tiling(CONFIG, rows, k, n, 2, 6)
    m_tiles, n_tiles = rows // CONFIG.batch, n // CONFIG.block_out
    threads = task_threads(m_tiles, n_tiles, tiling, 2)
    assert cycles == _modelled_cycles(rows, k, n, tiling, threads)
    splitting = [t for t in candidate_tilings(CONFIG, m_tiles, n_tiles, k // CONFIG.block_in, 2,
                                              6 * n_tiles)
                 if task_threads(m_tiles, n_tiles, t, 2) == 2]
    if splitting:  # the best splitting candidate is never beaten by a mis-scored odd one
        assert cycles <= min(_modelled_cycles(rows, k, n, t, 2) for t in splitting)


@pytest.mark.parametrize("shape", [(3136, 64, 64), (784, 576, 128), (49, 4608, 512)])
@pytest.mark.parametrize("threads", [1, 2])
def test_bounded_search_matches_the_exhaustive_one(shape, threads):
    rows, k, n = shape
    m_tiles, n_tiles, k_tiles = rows // CONFIG.batch, n // CONFIG.block_out, k // CONFIG.block_in
    timed = []
    for tiling in candidate_tilings(CONFIG, m_tiles, n_tiles, k_tiles, threads, 6 * n_tiles):
        runs_with = task_threads(m_tiles, n_tiles, tiling, threads)
        cycles = _modelled_cycles(rows, k, n, tiling, runs_with)
        assert busy_cycles_bound(CONFIG, m_tiles, n_tiles, k_tiles, tiling, 8) <= cycles
        assert busy_cycles_bound(CONFIG, m_tiles, n_tiles, k_tiles, tiling, 8,
                                 runs_with) <= cycles
        timed.append((cycles, tiling))
    cycles, tiling = min(timed, key=lambda c: c[0])
    assert best_tiling(CONFIG, rows, k, n, threads, 6) == (tiling, cycles)


@pytest.mark.parametrize("shape", [(12544, 160, 64), (12544, 32, 16), (1, 4096, 144)])
def test_bounded_search_matches_the_exhaustive_one_on_network_stems(shape):
    # a 224x224 network's first convolution as an im2col GEMM: tilings of one-tile
    # rows are bound by the read port's bursts in flight, which the bound counts; a
    # matrix-vector product (one task, one thread: LOADs and GEMMs take turns)
    test_bounded_search_matches_the_exhaustive_one(shape, 2)


@pytest.mark.parametrize("buffer", [Buffer.INP, Buffer.WGT])
@pytest.mark.parametrize("rows", [1, 17, 448])
@pytest.mark.parametrize("cols", [1, 2, 16, 40])
def test_load_bound_never_exceeds_the_modelled_load(buffer, rows, cols):
    for dram_base in (0, 7, 250):
        load = Load(buffer=buffer, sram_base=0, dram_base=dram_base, y_size=rows, x_size=cols,
                    x_stride=cols + 3)
        if rows * cols > (CONFIG.inp_depth if buffer == Buffer.INP else CONFIG.wgt_depth):
            continue
        report = schedule_stream([load, Finish()], CONFIG)
        issued = next(s for s in report.schedule if s.index == 0)
        assert load_cycles_bound(load, CONFIG) <= issued.end - issued.start
