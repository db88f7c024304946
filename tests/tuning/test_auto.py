"""The template-free search: sketch rules, every sketch point a correct schedule, the
evolutionary operators, and applying an auto record at compile time."""

import functools
import itertools
import math

import numpy as np
import pytest
from onnx import helper

from heterocc import te, tir
from heterocc.compute.nn import matmul as plain_matmul
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules import matmul, pack_matmuls
from heterocc.targets.llvm.tuning import matmul_panel, schedule_matmul_tuned
from heterocc.targets.llvm.tuning.common import search_hints
from heterocc.tuning.apply import ApplyHistoryBest
from heterocc.tuning.auto import EvolutionaryTuner, SearchHints, Sketch, tile_options
from heterocc.tuning.auto.sketch import OPERAND_REGISTERS, PARALLEL_ONLY_WORK, register_rows
from heterocc.tuning.measure import MeasureOptions, measure_in_process
from heterocc.tuning.records import MeasureRecord, RecordLog
from heterocc.tuning.task import Task

HINTS = SearchHints(vector_lanes=8, registers=16, cores=2)
CONV = Task("auto.conv2d_nchwc", (1, 2, 6, 6, 4, 2, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
                                  "float32"))


def _matmul_epilogue():
    A, B = te.placeholder((24, 16), "float32", "A"), te.placeholder((16, 32), "float32", "B")
    C = plain_matmul(A, B, "C")
    scaled = te.compute(C.shape, lambda i, j: C[i, j] * 2.0, name="out")  # an epilogue
    pack_matmuls([scaled], cpu=active_cpu())
    return [A, B], [scaled]


def _assert_computes_matmul_epilogue(lowered, seed):
    """The function ``f`` lowered from :func:`_matmul_epilogue` computes ``(a @ b) * 2``."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    out = np.zeros((24, 32), np.float32)
    build(lowered)["f"](a, b, out)
    np.testing.assert_allclose(out, (a @ b) * 2.0, rtol=1e-4, atol=1e-4)


def _random_points(space, rng, count):
    return [space.get(space.index_of_digits([int(rng.integers(r)) for r in space.radices]))
            for _ in range(count)]


def test_tile_options_are_perfect_tiles():
    options = tile_options(12)
    assert (1, 1, 1) in options and (2, 2, 3) in options and (3, 4, 1) in options
    assert all(12 % math.prod(o) == 0 for o in options)
    assert (5, 1, 1) not in options


def test_register_tiles_that_do_not_divide_the_loop_are_offered_innermost():
    # ONNX Runtime's AVX-512 kernel keeps 12 rows of two vectors; 12 divides no power of 2
    hints = SearchHints(vector_lanes=16, registers=32, cores=2)
    assert {12, 14, 28} <= set(register_rows(hints))
    assert set(register_rows(SearchHints(vector_lanes=8, registers=16))) >= {6, 12}
    options = tile_options(1024, inner=register_rows(hints))
    assert (1, 1, 12) in options and (1, 8, 12) in options and (1, 1, 14) in options
    for option in options:  # outer levels perfect, the whole tile within the loop
        assert 1024 % math.prod(option[:-1]) == 0 and math.prod(option) <= 1024
        assert 1024 % option[-1] == 0 or option[-1] in register_rows(hints)
    assert set(tile_options(1024)) < set(options)
    # a loop shorter than the tile is not offered it
    assert all(o[-1] <= 10 for o in tile_options(10, inner=(12, 14)))


def _ragged_matmul(rows=30, columns=32):
    A = te.placeholder((rows, 16), "float32", "A")
    B = te.placeholder((16, columns), "float32", "B")
    C = plain_matmul(A, B, "C")
    scaled = te.compute(C.shape, lambda i, j: C[i, j] * 2.0, name="out")
    pack_matmuls([scaled], cpu=active_cpu())
    return [A, B], [scaled]


def _assert_fenced_product(function, m, k, n, rng):
    """``function`` (A, B, out) computes ``(A @ B) * 2`` of an (m, k) by (k, n) product
    and writes nothing outside ``out`` (fenced on both sides)."""
    _, a = _fenced((m, k), np.nan, rng)
    _, b = _fenced((k, n), np.nan, rng)
    memory, out = _fenced((m, n), -7.0)
    function(a, b, out)
    np.testing.assert_allclose(out, (a @ b) * 2.0, rtol=1e-4, atol=1e-4)
    assert (memory[:64] == -7.0).all() and (memory[-64:] == -7.0).all()


def _fenced(shape, fill, rng=None):
    """A view of ``shape`` inside a larger array whose margins hold ``fill`` (a write
    outside the view shows there)."""
    margin, size = 64, math.prod(shape)
    memory = np.full(size + 2 * margin, fill, np.float32)
    view = memory[margin:margin + size].reshape(shape)
    if rng is not None:
        view[...] = rng.standard_normal(shape)
    return memory, view


@pytest.mark.parametrize("rows", [(1, 1, 4), (3, 2, 4), (1, 1, 12), (1, 2, 8)])
def test_ragged_register_tiles_are_exact_in_bounds_and_peeled(rows):
    """A register tile that does not divide its loop (30 rows by 4, 12, 2x8 or 3x2x4):
    every place and order computes the product exactly, writes nothing outside the
    output, reads only provably inside its inputs (the pipeline would otherwise clamp
    the index), and the full tiles run without the tail's guards."""
    rng = np.random.default_rng(0)
    sketch = Sketch(_ragged_matmul()[1], HINTS)
    for location, order in itertools.product(("at0", "at1", "direct"), ("natural", "reversed")):
        values = {**sketch.default_values(), "a0.tile.s0": rows, "a0.location": location,
                  "a0.order": order}
        config = sketch.space.from_values(values)
        inputs, outputs = _ragged_matmul()
        schedule = sketch.apply(outputs, config)
        raw = te.lower(schedule, [*inputs, *outputs], name="f", optimize=False)
        parted = tir.partition_loops(tir.remove_true_guards(raw))
        assert str(tir.guard_load_bounds(parted)) == str(parted), (location, order)
        lowered = te.lower(schedule, [*inputs, *outputs], name="f")
        loops = tir.collect(lowered.body, lambda n: isinstance(n, tir.For)
                            and n.kind is tir.ForKind.PARALLEL)
        # the first parallel loop holds the full tiles: no guard left in it
        assert not tir.collect(loops[0], lambda n: isinstance(n, tir.IfThenElse)), \
            (location, order, str(lowered))
        _assert_fenced_product(build(lowered)["f"], 30, 16, 32, rng)


def test_seeds_include_ragged_register_tiles_and_window_hints():
    hints = SearchHints(vector_lanes=16, registers=32, cores=2)
    a, b = te.placeholder((1024, 1024), name="A"), te.placeholder((1024, 1024), name="B")
    product = plain_matmul(a, b, "C")
    pack_matmuls([product], cpu=active_cpu())
    sketch = Sketch([product], hints)
    rows = {(seed["a0.tile.s0"], seed["a0.tile.s1"][-1]) for seed in sketch.seed_values()}
    # two vectors by 12 rows (32 registers, 8 left for operands), and cache-blocked
    assert ((1, 1, 12), 32) in rows and ((1, 8, 12), 32) in rows
    # no window to hand to LLVM; past the default, each tile's chunk of the long
    # reduction (256 steps) unrolls a few steps at a time: 12 rows x 2 vectors, 4 steps
    # (96 multiply-adds)
    default, *tiled = sketch.seed_values()
    assert default["a0.reduce_unroll"] == "limit"
    assert tiled and all(isinstance(s["a0.reduce_unroll"], int) for s in tiled)
    blocked_12 = [s for s in sketch.seed_values()
                  if s["a0.tile.s0"] == (1, 8, 12) and s["a0.tile.s1"][-1] == 32]
    assert blocked_12 and all(s["a0.reduce_unroll"] == 4 for s in blocked_12)
    # the reduction may also stay one loop (chunks of up to 256 steps, or all 1024):
    # the seeds that do not block it sum it whole
    chunks = dict((k.name, k.options) for k in sketch.space.knobs)["a0.tile.r0"]
    assert max(chunks) == 1024 and 512 not in chunks and 256 in chunks
    assert all(s["a0.tile.r0"] == 1024 for s in tiled if s["a0.tile.s0"][1] == 1)
    # a 3x3 window over 56 columns: first (after the default) the tiles whose
    # accumulators leave registers for the 9 weight vectors, the window unrolled by
    # LLVM (as the depthwise hand schedule); every other seed also with the window
    # unrolled; no ragged tiles (a row of a few such tiles is mostly tail)
    data = te.placeholder((1, 4, 58, 58, 16), name="data")
    weight = te.placeholder((4, 1, 3, 3, 1, 16), name="w")
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    conv = te.compute((1, 4, 56, 56, 16), lambda n, c, y, x, k: te.sum(
        data[n, c, y + ry, x + rx, k] * weight[c, 0, ry, rx, 0, k], axis=[ry, rx]),
        name="conv")
    default, windowed, *rest = Sketch([conv], hints).seed_values()
    assert default["a0.tile.s3"] == (1, 1, 28)  # 32 registers, 4 for operands
    # 32 - 4 - 9 registers: 19 accumulators, the widest divisor of the row within
    assert windowed["a0.tile.s3"] == (1, 1, 14) and windowed["a0.reduce_unroll"] == "hint"
    limits = [s for s in rest if s["a0.reduce_unroll"] == "limit"]
    assert limits and all({**s, "a0.reduce_unroll": "hint"} in rest for s in limits)
    assert all(56 % s["a0.tile.s3"][-1] == 0 for s in [default, windowed, *rest])


def test_a_vectorized_axis_that_whole_vectors_do_not_divide_is_tiled_by_whole_vectors():
    """40 columns (a classifier's 1000 in small): its widest divisor within two vectors,
    10, would make every vector straddle two; the default tile is two whole vectors
    with the last one cut short, peeled off so the full tiles stay unguarded; a single
    row's loop of one trip stays out of the parallel loop (its columns are the work)."""
    rng = np.random.default_rng(0)
    sketch = Sketch(_ragged_matmul(1, 40)[1], HINTS)
    values = sketch.default_values()
    assert values["a0.tile.s1"] == (1, 1, 16)
    for location, order in itertools.product(("at0", "at1", "direct"), ("natural", "reversed")):
        config = sketch.space.from_values({**values, "a0.location": location,
                                           "a0.order": order})
        inputs, outputs = _ragged_matmul(1, 40)
        schedule = sketch.apply(outputs, config)
        raw = te.lower(schedule, [*inputs, *outputs], name="f", optimize=False)
        parted = tir.partition_loops(tir.remove_true_guards(raw))
        assert str(tir.guard_load_bounds(parted)) == str(parted), (location, order)
        lowered = te.lower(schedule, [*inputs, *outputs], name="f")
        # the product's parallel loops (not the packing of B, computed at root)
        loops = [loop for loop in tir.collect(
            lowered.body, lambda n: isinstance(n, tir.For) and n.kind is tir.ForKind.PARALLEL)
            if not tir.collect(loop, lambda n: isinstance(n, tir.BufferStore)
                               and n.buffer.name == "C.packed_B")]
        # 2 full tiles and the short one in one parallel loop, which branches where the
        # short one starts (tir.partition_loops): the full tiles' branch is unguarded
        assert loops[0].extent.value == 3, (location, order, str(lowered))
        branch = loops[0].body
        assert isinstance(branch, tir.IfThenElse), (location, order, str(lowered))
        assert tir.expr_to_str(branch.condition) == f"({loops[0].var.name} < 2)"
        assert not tir.collect(branch.then_case, lambda n: isinstance(n, tir.IfThenElse))
        _assert_fenced_product(build(lowered)["f"], 1, 16, 40, rng)


def test_a_tile_size_mutation_reaches_ragged_register_tiles():
    task = Task("auto.matmul", (1024, 64, 32, "float32"))
    tuner = EvolutionaryTuner(task, seed=0)
    space = tuner.space
    position = [k.name for k in space.knobs].index("a0.tile.s0")
    knob = space.knobs[position]
    start = space.from_values({**task.default_config().to_json(),
                               "a0.tile.s0": (1, 1, 8)}).index
    reached = set()
    for _ in range(400):
        child = tuner.mutate(start)
        tile = knob.options[space.digits(child)[position]]
        if tile[:-1] == (1, 1):
            reached.add(tile[-1])
    # an innermost resize keeps the outer levels: from 8 rows to rows that divide 1024
    # and rows that do not
    assert reached & {12, 14} and reached & {4, 16}


def test_the_first_random_points_are_parallel_and_vectorized():
    task = Task("auto.matmul", (1024, 64, 32, "float32"))
    tuner = EvolutionaryTuner(task, seed=0)
    first = [config.to_json() for config in tuner.next_batch(8)]
    annotations = [k.name for k in tuner.space.knobs if k.kind in ("parallel", "vectorize")]
    assert annotations and all(point[name] is True for point in first for name in annotations)
    assert len({tuple(sorted(point.items())) for point in first}) == 8  # still random
    # a plain random point (exploration later) may lack them: the space keeps both
    drawn = {tuner.space.get(tuner.random_index()).to_json()[annotations[-1]]
             for _ in range(64)}
    assert drawn == {True, False}


def test_rules_fuse_the_consumer_and_offer_producer_locations():
    _, outputs = _matmul_epilogue()
    sketch = Sketch(outputs, HINTS)
    (anchor,) = sketch.anchors
    assert anchor.name == "C" and anchor.outer == "out" and anchor.fusable
    assert anchor.spatial == (24, 32) and anchor.reduce == (16,)
    assert sketch.producers == ["C.packed_B"]  # the target's packed copy of B
    knobs = {k.name: k for k in sketch.space.knobs}
    assert knobs["p0.location"].options == ("inline", "root")
    # a fused anchor is computed inside its consumer's tile; a lone one may also write
    # its output directly (no cache write)
    # computed inside the consumer's tile at level 0 or 1, or on its own; a lone anchor
    # has the same places (a cache write instead of the consumer), so that a point
    # tuned without an epilogue applies to a function with one
    product = plain_matmul(*_matmul_epilogue()[0], "C")
    pack_matmuls([product], cpu=active_cpu())
    lone = Sketch([product], HINTS)
    assert [k.name for k in lone.space.knobs] == [k.name for k in sketch.space.knobs]
    assert knobs["a0.location"].options == ("at0", "at1", "direct")
    assert {k.kind for k in sketch.space.knobs} >= {"split", "location", "parallel",
                                                     "vectorize", "unroll"}
    default = sketch.default_config()
    assert default["a0.tile.s1"][-1] == 16  # two vectors of the CPU wide


def test_a_large_anchor_on_several_cores_is_always_parallel():
    # a serial nest times like a parallel one while the other cores are busy, so a
    # search on a loaded machine must not be able to choose one for a large product
    def parallel_options(n, cores):
        a, b = te.placeholder((n, n), name="A"), te.placeholder((n, n), name="B")
        hints = SearchHints(vector_lanes=16, registers=32, cores=cores)
        knobs = {k.name: k for k in Sketch([plain_matmul(a, b, "C")], hints).space.knobs}
        return knobs["a0.parallel"].options

    assert 1024 ** 3 >= PARALLEL_ONLY_WORK * 2
    assert parallel_options(1024, cores=2) == (True,)
    assert 64 ** 3 < PARALLEL_ONLY_WORK * 2
    assert parallel_options(64, cores=2) == (True, False)
    assert parallel_options(1024, cores=1) == (True, False)  # nothing to split over


def test_a_point_gives_every_core_a_parallel_iteration_and_unrolls_its_tile():
    a, b = te.placeholder((512, 512), name="A"), te.placeholder((512, 512), name="B")
    sketch = Sketch([plain_matmul(a, b, "C")], SearchHints(vector_lanes=16, registers=32,
                                                             cores=2))
    assert sketch.space.knobs[[k.name for k in sketch.space.knobs].index("a0.parallel")
                              ].options == (True,)
    base = {**sketch.default_values(), "a0.tile.s0": (8, 8, 8), "a0.unroll": 64}
    # all 512 rows in one outer tile: the columns' outer tiles are the parallel loop
    assert sketch.admissible({**base, "a0.tile.s1": (1, 8, 32)})  # 2 iterations
    # one outermost tile: the parallel loop takes the second-level loops (8 x 4)
    assert sketch.admissible({**base, "a0.tile.s1": (4, 4, 32)})
    # one tile at both levels: a serial nest
    assert not sketch.admissible({**base, "a0.tile.s0": (1, 8, 64), "a0.tile.s1": (1, 16, 32)})
    for order in ("natural", "reversed"):  # whichever axis the nest walks outermost
        assert sketch.admissible({**base, "a0.order": order, "a0.tile.s0": (4, 8, 8),
                                  "a0.tile.s1": (4, 4, 32)})
    # a register tile of 8 rows with an unroll limit below them keeps its accumulators
    # in memory; a single row has nothing to unroll
    assert not sketch.admissible({**base, "a0.tile.s1": (1, 8, 32), "a0.unroll": 0})
    assert sketch.admissible({**base, "a0.tile.s0": (8, 64, 1), "a0.tile.s1": (1, 8, 32),
                              "a0.unroll": 0})
    rng = np.random.default_rng(0)
    assert all(sketch.admissible(sketch.sample_values(rng)) for _ in range(64))
    # a small product may run serially: any split is admissible
    small = Sketch([plain_matmul(te.placeholder((64, 64), name="A"),
                                 te.placeholder((64, 64), name="B"), "C")],
                   SearchHints(vector_lanes=16, registers=32, cores=2))
    assert small.admissible({**small.default_values(), "a0.tile.s0": (1, 8, 8),
                             "a0.tile.s1": (1, 2, 32), "a0.parallel": False})


@pytest.mark.parametrize("location", ["at0", "at1", "direct"])
def test_a_parallel_loop_of_few_outer_tiles_takes_the_second_level_loops(location):
    """Outermost tile loops of 2 x 1 iterations (fewer than 16 per core): the parallel
    loop fuses the second-level tile loops too, in nest order, until it has enough or a
    ragged axis's loop comes (its guard would reach the fused index through a
    remainder); the product stays exact and in bounds in every order."""
    rng = np.random.default_rng(0)
    hints = SearchHints(vector_lanes=8, registers=16, cores=2)
    sketch = Sketch(_ragged_matmul(64, 32)[1], hints)
    cases = {  # rows, columns -> parallel iterations (natural order, reversed order)
        ((1, 1, 32), (4, 1, 8)): (2 * 4, 4 * 2),      # all second-level loops: 8
        ((2, 4, 4), (4, 1, 8)): (2 * 2 * 4, 4 * 2 * 2),  # 16 rows', 16 columns' tiles
        ((16, 1, 2), (4, 1, 8)): (2 * 16, 2 * 4 * 16),  # stops at 32 (16 per core)
        ((1, 1, 12), (4, 1, 8)): (6, 4 * 6),          # 64 rows by 12: ragged, 6 tiles
    }
    for (rows, columns), jobs in cases.items():
        for order, expected in zip(("natural", "reversed"), jobs):
            values = {**sketch.default_values(), "a0.tile.s0": rows, "a0.tile.s1": columns,
                      "a0.location": location, "a0.order": order, "a0.unroll": 64}
            assert sketch._parallel_jobs(sketch.anchors[0], [rows, columns],
                                         order == "reversed") == expected
            inputs, outputs = _ragged_matmul(64, 32)
            schedule = sketch.apply(outputs, sketch.space.from_values(values))
            raw = te.lower(schedule, [*inputs, *outputs], name="f", optimize=False)
            parted = tir.partition_loops(tir.remove_true_guards(raw))
            assert str(tir.guard_load_bounds(parted)) == str(parted), (rows, columns, order)
            lowered = te.lower(schedule, [*inputs, *outputs], name="f")
            loops = [loop for loop in tir.collect(
                lowered.body, lambda n: isinstance(n, tir.For)
                and n.kind is tir.ForKind.PARALLEL)
                if not tir.collect(loop, lambda n: isinstance(n, tir.BufferStore)
                                   and n.buffer.name == "C.packed_B")]
            assert loops[0].extent.value == expected, (rows, columns, order, str(lowered))
            _assert_fenced_product(build(lowered)["f"], 64, 16, 32, rng)


def test_the_search_drops_children_that_break_the_sampling_rules():
    task = Task("auto.matmul", (64, 64, 64, "float32"))
    tuner = EvolutionaryTuner(task, seed=0, initial=4, population=16, generations=3,
                              epsilon=0.0)

    def cost(config):  # made up: taller register tiles and less unrolling look faster,
        # which leads the model to tiles of many rows not unrolled, were they proposed
        return (1 + config["a0.unroll"]) / (1 + config["a0.tile.s0"][-1])

    configs = tuner.next_batch(4)
    tuner.update(configs, [cost(c) for c in configs])
    for _ in range(4):
        batch = tuner.next_batch(8)
        assert all(task.definition.admissible(task.args, c.values) for c in batch)
        tuner.update(batch, [cost(c) for c in batch])


def test_every_sketch_point_computes_the_product_with_its_epilogue():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    _, outputs = _matmul_epilogue()
    sketch = Sketch(outputs, HINTS)
    for config in [sketch.default_config(), *_random_points(sketch.space, rng, 6)]:
        inputs, outputs = _matmul_epilogue()
        schedule = sketch.apply(outputs, config)
        function = build(te.lower(schedule, [*inputs, *outputs], name="f"))["f"]
        out = np.zeros((24, 32), np.float32)
        function(a, b, out)
        np.testing.assert_allclose(out, (a @ b) * 2.0, rtol=1e-4, atol=1e-4)


def _classifier_head(columns=10, depth=2000):
    """A product with a few output points and a long reduction, and an epilogue."""
    A = te.placeholder((1, depth), "float32", "A")
    B = te.placeholder((depth, columns), "float32", "B")
    C = plain_matmul(A, B, "C")
    out = te.compute(C.shape, lambda i, j: C[i, j] + 1.0, name="out")
    pack_matmuls([out], cpu=active_cpu())
    return [A, B], [out]


def test_the_rfactor_rule_fires_on_few_output_points_and_a_long_reduction():
    knobs = {k.name: k for k in Sketch(_classifier_head()[1], HINTS).space.knobs}
    assert knobs["a0.rfactor"].options == ("none", "vector", "parallel")
    assert knobs["a0.rfactor"].kind == "rfactor"
    # enough output points for the cores' lanes, or a short reduction: no rfactor
    assert "a0.rfactor" not in {k.name for k in Sketch(_matmul_epilogue()[1], HINTS).space.knobs}
    assert "a0.rfactor" not in {k.name for k in
                                Sketch(_classifier_head(depth=40)[1], HINTS).space.knobs}


@pytest.mark.parametrize("rfactor", ["none", "vector", "parallel"])
def test_every_rfactor_point_computes_the_head(rfactor):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((1, 2000)).astype(np.float32)
    b = rng.standard_normal((2000, 10)).astype(np.float32)
    sketch = Sketch(_classifier_head()[1], HINTS)
    seeds = [v for v in sketch.seed_values() if v["a0.rfactor"] == rfactor]
    assert seeds, "every rfactor option is seeded"
    randoms = [c for c in _random_points(sketch.space, rng, 30) if c["a0.rfactor"] == rfactor]
    for config in [sketch.space.from_values(seeds[0]), *randoms[:3]]:
        inputs, outputs = _classifier_head()
        schedule = sketch.apply(outputs, config)
        lowered = te.lower(schedule, [*inputs, *outputs], name="f")
        assert ("C.rf" in str(lowered)) == (rfactor != "none")
        out = np.zeros((1, 10), np.float32)
        build(lowered)["f"](a, b, out)
        np.testing.assert_allclose(out, a @ b + 1.0, rtol=1e-4, atol=1e-3)


def test_a_full_reduction_reduces_in_parallel_chunks():
    """One output point of 100003 elements (no whole number of vectors or chunks)."""
    def full_sum():
        x = te.placeholder((100003,), "float32", "x")
        k = te.reduce_axis(100003, "k")
        return x, te.compute((1,), lambda i: te.sum(x[k] * x[k], axis=k), name="total")

    x, total = full_sum()
    sketch = Sketch([total], HINTS)
    values = {**sketch.default_values(), "a0.rfactor": "parallel"}
    x, total = full_sum()
    lowered = te.lower(sketch.apply([total], sketch.space.from_values(values)), [x, total],
                       name="f")
    assert "parallel" in str(lowered)
    data = np.random.default_rng(3).standard_normal(100003).astype(np.float32)
    out = np.zeros(1, np.float32)
    build(lowered)["f"](data, out)
    np.testing.assert_allclose(out, [np.dot(data.astype(np.float64), data)], rtol=1e-4)


@pytest.mark.parametrize("task", [Task("auto.matmul", (20, 24, 12, "float32")),
                                  Task("auto.batch_matmul", (2, 8, 16, 12, "float32")), CONV],
                         ids=["matmul", "batch_matmul", "conv2d_nchwc"])
def test_auto_candidates_of_the_llvm_workloads_are_checked_correct(task):
    rng = np.random.default_rng(1)
    options = MeasureOptions(repeat=1, min_repeat_s=0.0)
    for config in [task.default_config(), *_random_points(task.space, rng, 3)]:
        result = measure_in_process(task, config, options)
        assert result.ok, (config.values, result.message)


def test_mutations_keep_tiles_perfect_and_crossover_mixes_stages():
    tuner = EvolutionaryTuner(CONV, seed=3)
    space = tuner.space
    start = tuner.random_index()
    for _ in range(40):
        child = tuner.mutate(start)
        changed = [i for i, (x, y) in enumerate(zip(space.digits(start), space.digits(child)))
                   if x != y]
        assert len(changed) <= 1
        start = child
    tiles = [k for k in space.knobs if k.name.startswith("a0.tile.s")]
    for knob in tiles:  # every tile a mutation reaches is an option: a perfect tile
        assert all(isinstance(o, tuple) for o in knob.options)
    a, b = tuner.random_index(), tuner.random_index()
    child = space.digits(tuner.crossover(a, b))
    groups = {}
    for position, knob in enumerate(space.knobs):
        groups.setdefault(knob.name.split(".")[0], []).append(position)
    for positions in groups.values():  # each stage's knobs come whole from one parent
        assert all(child[p] == space.digits(a)[p] for p in positions) or \
            all(child[p] == space.digits(b)[p] for p in positions)


def test_move_factor_moves_a_prime_between_levels():
    tuner = EvolutionaryTuner(CONV, seed=0)
    for _ in range(30):
        moved = tuner._move_factor((2, 3, 4))
        # the product changes only by a factor taken from or given to the outer level
        ratio = math.prod(moved) / 24
        assert ratio in (1, 1 / 2, 1 / 3, 2, 3)


def test_the_search_learns_and_proposes_unmeasured_points():
    task = Task("auto.matmul", (16, 16, 16, "float32"))
    tuner = EvolutionaryTuner(task, seed=0, initial=4, population=8, generations=2)
    configs = tuner.next_batch(4)
    # a made-up cost: faster with taller register tiles (the model must learn it; the
    # first points are all one vector wide, the sampling rules' whole vectors)
    tuner.update(configs, [1.0 / (1 + c["a0.tile.s0"][-1] + c["a0.unroll"]) for c in configs])
    assert tuner.model.trained
    batch = tuner.next_batch(4)
    assert len(batch) == 4 and not {c.index for c in batch} & {c.index for c in configs}


def _records(task, config, cost):
    return MeasureRecord(task.workload_key, config.to_json(), config.index, (cost,))


@pytest.mark.parametrize("auto_wins", [True, False])
def test_compile_applies_the_faster_of_the_auto_and_template_records(auto_wins):
    shape = (16, 40, 24, "float32")
    auto, template = Task("auto.matmul", shape), Task("matmul", shape)
    auto_config = auto.space.from_values({**auto.default_config().to_json(),
                                          "a0.location": "direct"})
    records = [_records(auto, auto_config, 1.0 if auto_wins else 3.0),
               _records(template, template.default_config(), 2.0)]
    A = te.placeholder((16, 24), "float32", "A")
    B = te.placeholder((24, 40), "float32", "B")
    log = ApplyHistoryBest(records)
    assert (matmul_panel(log, 16, 40, 24, "float32") is None) == auto_wins
    C = matmul(A, B, panel_of=functools.partial(matmul_panel, log), cpu=active_cpu())
    schedule = te.create_schedule(C)
    assert schedule_matmul_tuned(log, schedule, C)
    stage = schedule[C]
    # the auto point computes straight into C (no cache write); the template's default
    # accumulates in registers (a local stage)
    assert any(s.name.endswith(".local") for s in schedule.stages) != auto_wins
    assert stage.relations
    function = build(te.lower(schedule, [A, B, C], name="f"))["f"]
    a = np.random.default_rng(0).standard_normal((16, 24)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((24, 40)).astype(np.float32)
    c = np.zeros((16, 40), np.float32)
    function(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_compile_fuses_a_convolutions_epilogue_by_its_auto_record(tmp_path, monkeypatch):
    """A conv + bias + relu function takes the auto point tuned on the bare blocked
    convolution, its epilogue computed in the convolution's tiles."""
    import heterocc
    from heterocc.targets.llvm import tuning as llvm_tuning
    from heterocc.tuning.extract import extract_tasks
    from tests.conftest import make_model

    rng = np.random.default_rng(0)
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        [("x", "float32", [1, 8, 6, 6])], [("y", "float32", None)],
        {"w": rng.standard_normal((8, 8, 3, 3)).astype(np.float32),
         "bias": rng.standard_normal(8).astype(np.float32)})
    # the workload's auto record (what logs of the bare-workload search hold; the auto
    # search itself now tunes whole functions, see test_function_tasks.py)
    (anchor,) = extract_tasks(model, search="template")
    task = Task("auto." + anchor.template, anchor.args)
    assert task.template == "auto.conv2d_nchwc"
    applied = []
    original = llvm_tuning.apply_conv_auto

    def spy(*args, **kwargs):
        applied.append(original(*args, **kwargs))
        return applied[-1]

    monkeypatch.setattr("heterocc.targets.llvm.rules.apply_conv_auto", spy)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    expected = heterocc.compile(model).run([x])[0]
    for config in [task.default_config(), *_random_points(task.space, rng, 1)]:
        log = tmp_path / f"{config.index}.jsonl"
        with RecordLog(log) as records:
            records.append(_records(task, config, 1.0))
        applied.clear()
        tuned = heterocc.compile(model, target="llvm", tuning_log=str(log))
        assert applied == [True]
        np.testing.assert_allclose(tuned.run([x])[0], expected, rtol=1e-4, atol=1e-4)


def test_compile_applies_an_auto_matmul_record_alone(tmp_path):
    """Only an auto record, applied in a fresh process (where the shape's sketch was never
    built): reading the record back builds the sketch inside the log's context, which
    must not consult the log again (it once recursed without end)."""
    import subprocess
    import sys

    shape = (12, 56, 20, "float32")
    task = Task("auto.matmul", shape)
    log = tmp_path / "auto.jsonl"
    with RecordLog(log) as records:
        records.append(_records(task, task.default_config(), 1.0))
    script = f"""
import numpy as np, heterocc
from onnx import TensorProto, helper, numpy_helper
w = np.random.default_rng(2).standard_normal((20, 56)).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [12, 20])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [12, 56])],
    [numpy_helper.from_array(w, "w")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
compiled = heterocc.compile(model, target="llvm", tuning_log={str(log)!r})
x = np.random.default_rng(3).standard_normal((12, 20)).astype(np.float32)
np.testing.assert_allclose(compiled.run([x])[0], x @ w, rtol=1e-4, atol=1e-4)
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize("limit", [64, 0])
def test_a_register_tiles_write_back_is_unrolled_like_the_tile(limit):
    """The epilogue that reads a tile's accumulators (here 4 rows x 2 vectors) is
    unrolled within the tile's unroll limit, so its accumulator indices are constants
    (LLVM keeps the tile in registers); with unrolling off it stays a loop; either way
    the point computes the product and its epilogue."""
    _, outputs = _matmul_epilogue()
    sketch = Sketch(outputs, HINTS)
    config = sketch.space.from_values({
        **sketch.default_values(), "a0.tile.s0": (1, 1, 4), "a0.tile.s1": (1, 1, 16),
        "a0.location": "at1", "a0.unroll": limit})
    inputs, outputs = _matmul_epilogue()
    schedule = sketch.apply(outputs, config)
    lowered = te.lower(schedule, [*inputs, *outputs], name="f")
    writes = tir.collect(lowered.body, lambda n: isinstance(n, tir.BufferStore)
                         and n.buffer.name == "out")
    # unrolled: one vector store per row of the tile, reading its accumulators at
    # constant places; else one store in a loop over the rows
    assert len(writes) == (4 if limit else 1)
    reads = [load for store in writes for load in tir.collect(
        store.value, lambda n: isinstance(n, tir.BufferLoad) and n.buffer.name == "C")]
    constant = [isinstance(r.indices[-1].base, tir.IntImm) for r in reads
                if isinstance(r.indices[-1], tir.Ramp)]
    assert constant and all(constant) == bool(limit)
    _assert_computes_matmul_epilogue(lowered, seed=1)


@pytest.mark.parametrize("steps", [2, 4, 8])
def test_the_innermost_reduction_loop_unrolls_a_few_steps_at_a_time(steps):
    """``reduce_unroll`` as a step count splits the innermost reduction loop (a chunk
    of 8 of the product's 16 steps) into iterations of that many steps, unrolled by
    LLVM's hint; the chunks and the iterations stay loops; the point computes the
    product and its epilogue."""
    _, outputs = _matmul_epilogue()
    sketch = Sketch(outputs, HINTS)
    config = sketch.space.from_values({
        **sketch.default_values(), "a0.tile.s0": (1, 1, 4), "a0.tile.s1": (1, 1, 16),
        "a0.tile.r0": 8, "a0.location": "at1", "a0.unroll": 64,
        "a0.reduce_unroll": steps})
    inputs, outputs = _matmul_epilogue()
    lowered = te.lower(sketch.apply(outputs, config), [*inputs, *outputs], name="f")
    hinted = tir.collect(lowered.body, lambda n: isinstance(n, tir.For)
                         and n.kind is tir.ForKind.UNROLL_HINT)
    assert [loop.extent.value for loop in hinted] == [steps]
    # outside it, the chunk's remaining iterations (none left for 8) and the two
    # chunks stay loops
    serial = [loop.extent.value for loop in tir.collect(
        lowered.body, lambda n: isinstance(n, tir.For) and n.kind is tir.ForKind.SERIAL)]
    assert 2 in serial and (steps == 8 or 8 // steps in serial)
    _assert_computes_matmul_epilogue(lowered, seed=2)


def _pointwise_conv(in_blocks: int, out_blocks: int, width: int) -> te.Tensor:
    """A blocked 1x1 convolution (16-channel blocks) over a square image of ``width``."""
    data = te.placeholder((1, in_blocks, width, width, 16), name="data")
    weight = te.placeholder((out_blocks, in_blocks, 1, 1, 16, 16), name="w")
    rc, ry, rx, rb = (te.reduce_axis(in_blocks, "rc"), te.reduce_axis(1, "ry"),
                      te.reduce_axis(1, "rx"), te.reduce_axis(16, "rb"))
    return te.compute((1, out_blocks, width, width, 16), lambda n, c, y, x, k: te.sum(
        data[n, rc, y + ry, x + rx, rb] * weight[c, rc, ry, rx, rb, k],
        axis=[rc, ry, rx, rb]), name="conv")


def _blocked_conv3x3(in_blocks: int, out_blocks: int, width: int):
    """Placeholders and a blocked 3x3 convolution (16-channel blocks, no padding)."""
    data = te.placeholder((1, in_blocks, width + 2, width + 2, 16), name="data")
    weight = te.placeholder((out_blocks, in_blocks, 3, 3, 16, 16), name="w")
    rc, ry, rx, rb = (te.reduce_axis(in_blocks, "rc"), te.reduce_axis(3, "ry"),
                      te.reduce_axis(3, "rx"), te.reduce_axis(16, "rb"))
    conv = te.compute((1, out_blocks, width, width, 16), lambda n, c, y, x, k: te.sum(
        data[n, rc, y + ry, x + rx, rb] * weight[c, rc, ry, rx, rb, k],
        axis=[rc, ry, rx, rb]), name="conv")
    return data, weight, conv


def test_hinted_window_loops_stay_within_the_unrolled_body_limit():
    """Tiles the TIR unrolls 128, 8 and 1 ways with the window handed to LLVM's unroller:
    only the innermost reduction loops whose copies stay within MAX_UNROLLED_BODY are
    hinted (none beside 128 copies, the 16 channel steps and the row of taps beside 8,
    the whole window with its 2 channel blocks beside 1; an 84-way tile with a hinted
    window of 24 taps kept LLVM busy past a trial's time-out); each point computes the
    convolution."""
    from heterocc.tuning.auto.sketch import MAX_UNROLLED_BODY

    hints = SearchHints(vector_lanes=16, registers=32, cores=2)
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 2, 10, 10, 16)).astype(np.float32)
    weight = rng.standard_normal((2, 2, 3, 3, 16, 16)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(data, (3, 3), axis=(2, 3))
    expected = np.einsum("ncyxbij,kcijbo->nkyxo", windows, weight)
    for blocks, rows, columns, extents in ((2, 8, 8, []), (2, 2, 2, [3, 16]),
                                           (1, 1, 1, [2, 3, 3, 16])):
        placeholders = _blocked_conv3x3(2, 2, 8)
        sketch = Sketch([placeholders[-1]], hints)
        config = sketch.space.from_values({
            **sketch.default_values(), "a0.tile.s1": (1, 1, blocks),
            "a0.tile.s2": (1, 1, rows), "a0.tile.s3": (1, 1, columns), "a0.tile.r0": 2,
            "a0.unroll": 512, "a0.reduce_unroll": "hint"})
        lowered = te.lower(sketch.apply([placeholders[-1]], config), list(placeholders),
                           name="f")
        hinted = [loop.extent.value for loop in tir.collect(
            lowered.body, lambda n: isinstance(n, tir.For)
            and n.kind is tir.ForKind.UNROLL_HINT)]
        assert hinted == extents
        assert blocks * rows * columns * math.prod(hinted) <= MAX_UNROLLED_BODY
        out = np.zeros((1, 2, 8, 8, 16), np.float32)
        build(lowered)["f"](data, weight, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("vectorize", [True, False])
def test_an_unvectorized_tiles_scalar_lanes_count_against_its_unroll_limit(vectorize):
    """A register tile of 4 channel blocks x 7 rows x 2 columns under a 512-way unroll
    limit: vectorized, the TIR unrolls all 56 of its vector updates; unvectorized, its 16
    lanes stay a scalar loop in every copy (LLVM unrolls and vectorizes it there), so
    they count: 14 copies of it, 224 scalar bodies, not 896 (a search's unvectorized
    tiles so unrolled built for up to 140 s, past the trial's time-out). Either way the
    point computes the convolution."""
    hints = SearchHints(vector_lanes=16, registers=32, cores=2)
    placeholders = _blocked_conv3x3(2, 4, 14)
    sketch = Sketch([placeholders[-1]], hints)
    config = sketch.space.from_values({
        **sketch.default_values(), "a0.tile.s1": (1, 1, 4), "a0.tile.s2": (1, 1, 7),
        "a0.tile.s3": (1, 1, 2), "a0.vectorize": vectorize, "a0.unroll": 512})
    lowered = te.lower(sketch.apply([placeholders[-1]], config), list(placeholders),
                       name="f")
    updates = [store for store in tir.collect(lowered.body, lambda n: isinstance(
        n, tir.BufferStore) and n.buffer.name == "conv.local") if tir.collect(
        store.value, lambda n: isinstance(n, tir.BufferLoad) and n.buffer.name == "data")]
    assert len(updates) == (56 if vectorize else 14)
    assert vectorize or len(updates) * 16 <= 512
    rng = np.random.default_rng(4)
    data = rng.standard_normal((1, 2, 16, 16, 16)).astype(np.float32)
    weight = rng.standard_normal((4, 2, 3, 3, 16, 16)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(data, (3, 3), axis=(2, 3))
    out = np.zeros((1, 4, 14, 14, 16), np.float32)
    build(lowered)["f"](data, weight, out)
    np.testing.assert_allclose(out, np.einsum("ncyxbij,kcijbo->nkyxo", windows, weight),
                               rtol=1e-4, atol=1e-3)


def test_seeds_offer_register_tiles_leaving_four_or_a_third_of_the_registers():
    """A 1x1 convolution's reduction (no window): the dividing register tiles whose
    accumulators leave a third of the registers for operands are seeds beside those
    leaving four (32 registers, two one-vector channel blocks: 14 and 8 of 112
    columns)."""
    hints = SearchHints(vector_lanes=16, registers=32, cores=2)
    conv = _pointwise_conv(in_blocks=2, out_blocks=6, width=112)
    tiles = {(seed["a0.tile.s1"][-1], seed["a0.tile.s3"][-1])
             for seed in Sketch([conv], hints).seed_values()}
    assert {(2, 14), (2, 8), (1, 28), (1, 16)} <= tiles


def test_seeds_offer_three_channel_blocks_where_two_and_four_do_not_divide():
    """9 blocks of 16 channels (144): two and four blocks per tile divide none of them,
    three do (the blocked-conv hand schedule's choice), so a seed takes three (by 7 of
    56 columns: 21 accumulators); every seed is a point of the space."""
    hints = SearchHints(vector_lanes=16, registers=32, cores=2)
    conv = _pointwise_conv(in_blocks=2, out_blocks=9, width=56)
    sketch = Sketch([conv], hints)
    seeds = sketch.seed_values()
    assert {(s["a0.tile.s1"][-1], s["a0.tile.s3"][-1]) for s in seeds} >= {(3, 8), (3, 7), (1, 28)}
    assert all(sketch.space.from_values(s) for s in seeds)
    # a product's wide vectorized axis: three vectors (48 of 1024 columns) are no
    # option of its knob, so no seed takes them
    a, b = te.placeholder((64, 256), name="A"), te.placeholder((256, 1024), name="B")
    product = plain_matmul(a, b, "C")
    pack_matmuls([product], cpu=active_cpu())
    assert all(s["a0.tile.s1"][-1] != 48 for s in Sketch([product], hints).seed_values())


def test_auto_records_are_read_back_by_their_values_not_their_index():
    """A record's index numbered the sketch of its day (a knob that since gained
    options renumbers the points after it): the log reads it back by its knob values,
    so its config's timings are found under today's index."""
    task = Task("auto.matmul", (64, 64, 64, "float32"))
    config = task.default_config()
    stale = MeasureRecord(task.workload_key, config.to_json(), config.index + 1, (0.5,))
    context = ApplyHistoryBest([stale])
    assert context.lookup(task.workload_key).index == config.index
    assert context.floor_cost(task.workload_key, config.index) == 0.5
    assert context.floor_cost(task.workload_key, config.index + 1) is None


@pytest.mark.parametrize("hints", [HINTS, SearchHints(vector_lanes=4, registers=32, cores=2)])
def test_sampled_points_fill_the_registers_with_whole_vectors(hints):
    # the search from scratch draws its first points by the sampling rules: register
    # tiles of whole vectors whose accumulators fit the CPU's registers, unrolled whole
    _, outputs = _matmul_epilogue()
    sketch = Sketch(outputs, hints)
    rng = np.random.default_rng(0)
    options = {knob.name: knob.options for knob in sketch.space.knobs}
    tiles = set()
    for _ in range(64):
        values = sketch.sample_values(rng)
        assert all(values[name] in options[name] for name in options)
        assert values["a0.parallel"] is True and values["a0.vectorize"] is True
        rows, columns = values["a0.tile.s0"][-1], values["a0.tile.s1"][-1]
        assert columns % hints.vector_lanes == 0
        assert rows * columns // hints.vector_lanes <= hints.registers - OPERAND_REGISTERS
        assert values["a0.unroll"] >= rows
        tiles.add((values["a0.tile.s0"], values["a0.tile.s1"]))
    assert len(tiles) > 8  # still random: tiles of several shapes and outer levels


def test_sampled_points_of_a_channel_block_take_the_whole_block():
    # a blocked convolution's last axis is a channel block of fewer lanes than a
    # vector: the tile takes it whole, the other accumulators from the outer axes
    task = Task("auto.conv2d_nchwc", (1, 2, 8, 8, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
                                      "float32"))
    hints = search_hints("float32", active_cpu())
    rng = np.random.default_rng(1)
    for _ in range(32):
        values = task.definition.sample(task.args, rng)
        inner = [values[f"a0.tile.s{axis}"][-1] for axis in range(5)]
        assert inner[-1] == 4  # narrower than a vector of any CPU it runs on
        assert math.prod(inner[:-1]) <= hints.registers - OPERAND_REGISTERS



def _blocked_depthwise3x3(blocks: int, width: int) -> te.Tensor:
    """A blocked depthwise 3x3 convolution (16-channel blocks, no padding)."""
    data = te.placeholder((1, blocks, width + 2, width + 2, 16), name="data")
    weight = te.placeholder((blocks, 1, 3, 3, 1, 16), name="w")
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    return te.compute((1, blocks, width, width, 16), lambda n, c, y, x, k: te.sum(
        data[n, c, y + ry, x + rx, k] * weight[c, 0, ry, rx, 0, k], axis=[ry, rx]),
        name="dwconv")


@pytest.mark.parametrize("hints", [
    SearchHints(vector_lanes=16, registers=32, cores=2),  # AVX-512
    SearchHints(vector_lanes=8, registers=16, cores=2),  # AVX2: a block is two vectors
    SearchHints(vector_lanes=4, registers=32, cores=2)])  # NEON: four
def test_sampled_points_of_a_window_keep_its_reused_operand_in_registers(hints):
    # a depthwise window's weights are read by channel, not by row or column: a
    # register tile reuses them across its rows and columns, nine vectors per channel
    # vector, which the sampled tiles leave registers for beside the accumulators
    # where they fit at all (not four vectors' 36 weights in 32 registers)
    sketch = Sketch([_blocked_depthwise3x3(blocks=6, width=28)], hints)
    assert sketch.anchors[0].held_axes == (1, 4)  # channel blocks, lanes
    rng = np.random.default_rng(0)
    free = hints.registers - OPERAND_REGISTERS
    tiles = set()
    for _ in range(64):
        values = sketch.sample_values(rng)
        n, blocks, rows, columns, lanes = (values[f"a0.tile.s{axis}"][-1] for axis in range(5))
        assert lanes % hints.vector_lanes == 0
        vectors = lanes // hints.vector_lanes
        held = 9 * vectors if 10 * vectors <= free else 0
        assert n * blocks * rows * columns * vectors + held * blocks <= free
        tiles.add((blocks, rows, columns))
    assert len(tiles) > 3
    # a reduction that is no window (a 1x1 convolution's channels) keeps the rule of
    # the accumulators alone: its tiles reach past what a window's weights would leave
    pointwise = Sketch([_pointwise_conv(in_blocks=2, out_blocks=9, width=28)], hints)
    widest = max(math.prod(values[f"a0.tile.s{axis}"][-1] for axis in range(4))
                 * values["a0.tile.s4"][-1] // hints.vector_lanes
                 for values in (pointwise.sample_values(rng) for _ in range(64)))
    assert free - 9 < widest <= free


def test_the_search_from_scratch_starts_from_sampled_points_and_explores_uniformly():
    task = Task("auto.matmul", (256, 64, 64, "float32"))
    tuner = EvolutionaryTuner(task, seed=0)
    first = [config.to_json() for config in tuner.next_batch(8)]
    widths = {tuple(point["a0.tile.s1"]) for point in first}
    assert all(width[-1] % 4 == 0 for width in widths)  # whole vectors on any x86/NEON CPU
    # exploration points stay uniform: they reach partial vectors too
    explored = {tuner.space.get(tuner.random_index()).to_json()["a0.tile.s1"][-1]
                for _ in range(64)}
    assert any(width % 4 for width in explored)
