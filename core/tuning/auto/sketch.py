"""Sketches: the schedule space of a TE compute, derived by rules (no per-op template).

:func:`derive_sketch` reads the stages of a compute (what a target's operator inventory
gives, e.g. a product or a convolution with its epilogue) and applies the rules of the
Ansor paper to them:

- **inline**: an elementwise stage between the anchor and the output is inlined; a
  producer of the anchor (a padding, a packed copy of an operand) is inlined or
  computed at root (a ``location`` knob: the compute-location decision);
- **multi-level tiling** of every anchor (a stage with a reduction): each spatial loop
  is split into four levels and each reduction loop into two, ordered
  ``S0 S1 R0 S2 R1 S3`` (the "SSRSRS" structure); the factors are knobs, perfect
  tiles but for the innermost level, which also offers, whether or not they divide the
  loop, whole vectors on the vectorized axis and on the others the register tile
  heights the CPU's registers suit (:func:`register_rows`); the last tile is then cut
  short by a guard that the TIR's loop partition peels off;
- **consumer fusion**: an anchor whose only reader starts an elementwise chain to an
  output (its epilogue) is computed inside that output's tile (``compute_at`` at level 0
  or 1), the chain inlined into the output, or on its own (``direct``);
- **cache write**: an anchor that is itself the output accumulates each tile in a local
  buffer (``cache_write`` + ``compute_at`` at level 0 or 1), or directly in the output;
- **annotations**: the outer tile loops fused and run in parallel, the innermost spatial
  loop vectorized, the register tile and inner reduction unrolled up to a limit (the
  tile's write-back too, within the same limit), or the
  inner reduction left to LLVM's unroller by a hint (a convolution's window);
- **compute location of producers**: a padding is read in place by default (inlined;
  a masked load where vectorized) unless its compute asks to be kept;
- **rfactor**: an anchor with too few output points to fill the cores' vector lanes
  and a long reduction (a full sum, a classifier head's few columns) may instead
  reduce into partial results (``Schedule.rfactor``): one vector of them per output
  point (``vector``: accumulators along the lanes, reduced across them once), or
  chunks of the reduction in parallel (``parallel``), then a final reduction over them.

The result is a :class:`~..space.ConfigSpace` whose points are complete schedules, plus
:meth:`Sketch.apply`, which schedules a freshly built copy of the same compute by one
point.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import te
from ...errors import InputError
from ...te.schedule_reads import reads_of
from ...tir import expr as tx
from ...tir.visitor import collect
from ..space import Config, ConfigSpace, Knob, divisors

#: levels of a spatial loop (S0 outermost .. S3 innermost; a reduction loop has two)
SPATIAL_LEVELS = 4
#: largest inner tile factor offered per level (keeps the option lists short)
MAX_FACTOR = 64
#: unroll limits offered (product of the unrolled loops' extents; 0: no unrolling)
UNROLL_LIMITS = (0, 16, 64, 512)
#: the longest chunk a reduction loop is cut in (a longer reduction is "long": too long to
#: unroll whole, see :func:`_long_reduction`)
MAX_REDUCTION_CHUNK = 4 * MAX_FACTOR
#: steps of the innermost reduction loop that one iteration may do, unrolled by LLVM (a
#: third level of the reduction's tiling): a register tile's long reduction (a product's
#: chunk of 256 steps) is too long to unroll whole, and one step per iteration spends
#: issue slots on the loop's own counting and branching beside its multiply-adds
REDUCTION_STEPS = (2, 4, 8)
#: vector multiply-adds that a cache-blocked seed's reduction iteration aims for (the
#: fewest :data:`REDUCTION_STEPS` that reach it): beside them, the loop's counting and
#: branching is a few percent of the issue slots (the CPU hand schedules' figure)
SEED_UNROLLED_MULADDS = 96
#: multiply-adds per core from which an anchor's tiles always run in parallel (on a CPU
#: of several cores): about 0.1 ms of one core's work, so waking the thread pool is a
#: small part of it. Below it a serial nest is offered too.
PARALLEL_ONLY_WORK = 1 << 22
#: vectors of a seeded register tile: along the vectorized axis, or where that is one
#: vector (a channel block), as many blocks along an outer axis (three where 2 and 4 do
#: not divide the blocks, e.g. 9 of 144 channels: the blocked-conv hand schedule's too)
TILE_VECTORS = (1, 2, 3, 4)
#: parallel iterations per core that an anchor's parallel loop is given where its tiles
#: allow (TVM's auto-scheduler fuses outer loops until ``num_cores * 16``): the thread
#: pool hands out contiguous chunks of them, and a thread that starts late or is
#: preempted leaves its chunks to the others only where there are several per core. A
#: point whose outermost tile loops give fewer also fuses its second-level tile loops
#: (:func:`_parallel_span`): with two or four iterations, one late thread and the whole
#: call waits (a MobileNetV2 search from scratch picked such points in half its
#: functions: fastest calls as fast as the hand schedules', medians up to 1.9x slower)
PARALLEL_JOBS_PER_CORE = 16
#: a register tile that does not divide its loop is seeded only where the loop holds at
#: least this many such tiles (the cut-short last tile is then a small part of it)
RAGGED_ROWS = 8
#: a reduction of no loop longer than this is a window (a convolution's taps)
WINDOW = 7
#: the most copies of a tile's body that the TIR's unrolling and LLVM's (the hinted
#: reduction loops) make together, the largest unroll limit offered: a hint unrolls its
#: loop inside every copy the TIR made, so a 512-way unrolled tile with a hinted 3x3
#: window over 4 channel blocks was 294,912 copies, and an 84-way one with a hinted
#: window of 24 taps (2,016 copies of scalar code) kept LLVM busy past 200 s; those
#: trials timed out, about 30% of a search from scratch. The seeds' hinted windows (a
#: depthwise 3x3 under a register tile) stay well within it.
MAX_UNROLLED_BODY = UNROLL_LIMITS[-1]
#: vector registers a sampled register tile leaves for operands (the broadcast input,
#: the weights' vectors): its accumulators take the rest (:meth:`Sketch.sample_values`)
OPERAND_REGISTERS = 4
#: the rfactor rule's options: none (the tiled nest), vector partials, parallel chunks
RFACTOR_OPTIONS = ("none", "vector", "parallel")
#: vectors of partials per output point of a ``vector`` rfactor: independent
#: accumulators, so that each add does not wait for the one before it (an add's latency
#: is several of its issue slots)
RFACTOR_VECTORS = 4
#: draws of :meth:`Sketch.sample_values` before it gives a point that is not admissible
#: (a sketch whose every point breaks a rule still gives points to measure)
SAMPLE_ATTEMPTS = 32
#: chunks per core of a ``parallel`` rfactor (uneven progress of the cores evens out)
RFACTOR_CHUNKS_PER_CORE = 4
#: a compute attribute ``{axis: period}``: its body selects constants (a transform's
#: matrix entries) by the index ``axis % period`` (the axis itself where the period is its
#: extent), so a flat schedule unrolls those indices and the selects fold
#: (:func:`_schedule_flat`); TVM's ``auto_scheduler_simplify_const_tensor_indices``
CONSTANT_SELECTS = "constant_selects"


@dataclass(frozen=True)
class SearchHints:
    """What the target tells the search about its hardware: vector lanes of the anchor's
    dtype, vector registers and cores (the default point fills a register tile)."""

    vector_lanes: int = 8
    registers: int = 16
    cores: int = 1


def _is_elementwise_reader(reader: te.Tensor, tensor: te.Tensor) -> bool:
    """``reader`` computes ``f(tensor[i...])`` elementwise: same shape, no reduction."""
    op = reader.op
    return (isinstance(op, te.ComputeOp) and not op.reduce_axis
            and tuple(reader.shape) == tuple(tensor.shape))


def tile_options(extent: int, levels: int = SPATIAL_LEVELS - 1,
                 inner: Sequence[int] = ()) -> tuple[tuple[int, ...], ...]:
    """Inner factors ``(f1, .., f_levels)`` of a loop of ``extent``: each a divisor at
    most MAX_FACTOR, their product dividing the extent (the outermost level takes the
    rest: perfect tiles, as Ansor samples them).

    ``inner``: innermost factors offered although they do not divide the extent (a
    register tile of as many rows as the registers allow, e.g. 12 of 1024 rows): the
    outer levels of such a tile are perfect tiles of the extent whose product with it
    still fits, and the loop's last tile is cut short (the split guards it, and the
    TIR's loop partition peels it off so that the full tiles stay unguarded)."""
    found: list[tuple[int, ...]] = [()]
    for _ in range(levels):
        found = [(*prefix, d) for prefix in found for d in divisors(extent)
                 if d <= MAX_FACTOR and extent % (math.prod(prefix) * d) == 0]
    if levels and inner:
        prefixes = tile_options(extent, levels - 1)
        found += [(*prefix, f) for f in sorted(set(inner)) for prefix in prefixes
                  if 1 < f <= MAX_FACTOR and extent % f and math.prod(prefix) * f <= extent]
    return tuple(found)


def register_rows(hints: SearchHints) -> tuple[int, ...]:
    """Register tile heights worth offering whether or not they divide a loop: for a
    tile one, two or four vectors wide, the rows whose accumulators fill the registers
    but four (kept for operands), and the rows that leave eight (more operands in
    flight, as ONNX Runtime's AVX-512 kernel keeps 12 rows of two vectors)."""
    found = {(hints.registers - spare) // vectors
             for vectors in (1, 2, 4) for spare in (4, 8)}
    return tuple(sorted(rows for rows in found if rows > 1))


@dataclass(frozen=True)
class AnchorRule:
    """How the rules tile one anchor stage (a compute with a reduction): which tensor
    holds the tile loops (``outer``: the anchor itself, or its fused elementwise
    consumer) and whether a cache write may be used."""

    name: str
    outer: str
    fusable: bool
    spatial: tuple[int, ...]
    reduce: tuple[int, ...]
    #: the spatial axes (by position) that index the operands read with the reduction
    #: but not along every spatial axis (a depthwise convolution's weights: by channel,
    #: not by row or column), the operands a register tile reuses; empty where none is
    held_axes: tuple[int, ...] = ()


class Sketch:
    """The rule-derived schedule space of one compute (see the module's docstring).

    ``outputs``: the compute's output tensors as the target builds them (the anchor
    stages are found by their reductions). Build the space once from one copy of the
    compute and :meth:`apply` it to fresh copies: stages are matched by name."""

    def __init__(self, outputs: Sequence[te.Tensor], hints: SearchHints | None = None):
        self.hints = hints or SearchHints()
        schedule = te.create_schedule(list(outputs))
        output_names = {t.name for t in outputs}
        readers: dict[str, list[te.Tensor]] = {}
        for stage in schedule.stages:
            if not stage.is_placeholder:
                for read in reads_of(stage.op.body):
                    readers.setdefault(read.name, []).append(stage.tensor)
        self.anchors: list[AnchorRule] = []
        self.producers: list[str] = []
        self.inlined: list[str] = []
        anchor_reads: set[str] = set()
        for stage in schedule.stages:
            tensor = stage.tensor
            if stage.is_placeholder or not stage.op.reduce_axis:
                continue
            outer = _fusable_output(tensor, readers, output_names) or tensor.name
            self.anchors.append(AnchorRule(
                tensor.name, outer, outer != tensor.name,
                tuple(int(iv.extent) for iv in stage.op.axis),
                tuple(int(iv.extent) for iv in stage.op.reduce_axis),
                _held_operand_axes(stage.op)))
            anchor_reads |= {t.name for t in reads_of(stage.op.body)}
        if not self.anchors:
            raise InputError("auto schedule: the compute has no reduction to tile (only "
                             "computes with a reduction are tuned)")
        outers = {a.outer for a in self.anchors} | {a.name for a in self.anchors}
        #: producers that only add a border (a padding) and may be read in place
        self.bordered: set[str] = set()
        #: border producers whose compute asks for them to be kept (materialized by
        #: default; read in place by a seed)
        self.kept_borders: set[str] = set()
        for stage in schedule.stages:
            name = stage.tensor.name
            if stage.is_placeholder or name in outers or name in output_names:
                continue
            if stage.op.reduce_axis:
                continue
            (self.producers if name in anchor_reads else self.inlined).append(name)
            if name in anchor_reads and _is_border(stage):
                self.bordered.add(name)
            elif name in anchor_reads and _is_border(stage, kept=True):
                self.kept_borders.add(name)
        self.other_outputs = [name for name in output_names if name not in outers]
        self.space = ConfigSpace(tuple(self._knobs()))

    # ------------------------------------------------------------------ the space

    def _knobs(self):
        for number, _ in enumerate(self.producers):
            yield Knob(f"p{number}.location", "location", ("inline", "root"))
        for number, anchor in enumerate(self.anchors):
            p = f"a{number}"
            *rows_axes, _ = range(len(anchor.spatial))
            for axis, extent in enumerate(anchor.spatial):
                # non-dividing register tiles: rows on the axes other than the
                # vectorized one, whole vectors on that one (32 of 1000 columns)
                inner = (register_rows(self.hints) if axis in rows_axes
                         else self._vector_widths())
                yield Knob(f"{p}.tile.s{axis}", "split", tile_options(extent, inner=inner))
            for axis, extent in enumerate(anchor.reduce):
                # chunks up to MAX_REDUCTION_CHUNK steps, and the whole loop unchunked (a
                # register tile then sums its whole reduction in one loop: the CPU
                # hand schedule's product, whose 1024 steps cut in chunks ran 10% slower
                # one-threaded with a 14 x 2-vector tile, LLVM spilling an accumulator)
                yield Knob(f"{p}.tile.r{axis}", "split",
                           tuple(d for d in divisors(extent)
                                 if d <= MAX_REDUCTION_CHUNK or d == extent))
            # the same places with or without an epilogue, so that a point tuned on the
            # bare workload applies to the function that adds one
            yield Knob(f"{p}.location", "location", ("at0", "at1", "direct"))
            # which spatial axis the tile loops walk outermost: the first (a product's
            # row blocks) or the last (its column panels: each thread keeps its part of
            # the operand read along the last axis cached while the rows stream by)
            yield Knob(f"{p}.order", "order", ("natural", "reversed"))
            yield Knob(f"{p}.parallel", "parallel", self._parallel_options(anchor))
            yield Knob(f"{p}.vectorize", "vectorize", (True, False))
            yield Knob(f"{p}.unroll", "unroll", UNROLL_LIMITS)
            # the inner reduction loops unrolled by the limit above, or handed to LLVM
            # with an unroll hint (a convolution's window: once LLVM unrolls it, its
            # weights stay in registers along the row and neighbouring taps share loads),
            # or the innermost one split again, a few steps unrolled at a time
            # (:data:`REDUCTION_STEPS`)
            yield Knob(f"{p}.reduce_unroll", "unroll", ("limit", "hint", *REDUCTION_STEPS))
            if self._rfactor_applies(anchor):
                yield Knob(f"{p}.rfactor", "rfactor", RFACTOR_OPTIONS)

    def _rfactor_applies(self, anchor: AnchorRule) -> bool:
        """Ansor's condition for the rfactor rule: the output points cannot give every
        core a vector of lanes, while the reduction could (several vectors per core)."""
        lanes, cores = self.hints.vector_lanes, self.hints.cores
        return (math.prod(anchor.spatial) < lanes * cores
                and max(anchor.reduce) >= 4 * lanes * cores)

    def _vector_widths(self) -> tuple[int, ...]:
        """Innermost tiles of the vectorized axis offered whether or not they divide
        it: one, two or four whole vectors."""
        return tuple(v * self.hints.vector_lanes for v in (1, 2, 4))

    def _vector_tile(self, extent: int, width: int) -> int:
        """The innermost tile of a vectorized axis of ``extent`` at most ``width``
        lanes: its largest divisor when that is whole vectors (or the whole axis),
        else whole vectors with the axis's last tile cut short (a divisor such as 25 of
        1000 would make every load straddle vectors)."""
        lanes = self.hints.vector_lanes
        divisor = _largest_inner(extent, width)
        if divisor == extent or divisor % lanes == 0 or extent < lanes:
            return divisor
        return min(width, MAX_FACTOR) // lanes * lanes

    def _parallel_options(self, anchor: AnchorRule) -> tuple[bool, ...]:
        """Whether the tile loops may run serially: not for a large anchor on several
        cores. A serial nest times as fast as a parallel one whenever the other cores
        are busy (a shared machine), so a search under load would pick it and the
        quiet model then runs up to cores times slower (a 1024-cubed product tuned at
        load 5 chose one); a serial point stays reachable as a parallel loop of one
        iteration."""
        work = math.prod(anchor.spatial) * math.prod(anchor.reduce)
        if self.hints.cores > 1 and work >= PARALLEL_ONLY_WORK * self.hints.cores:
            return (True,)
        return (True, False)

    def admissible(self, values: dict) -> bool:
        """Whether a point keeps the rules :meth:`sample_values` draws by, which a
        mutation or a crossover may break: an anchor that must run in parallel
        (:meth:`_parallel_options`) has at least one parallel iteration per core (a
        parallel loop of one iteration is a serial nest, which times as fast as a
        parallel one while the other cores are busy, so a search on a shared machine
        would keep it), and each register tile is unrolled whole (an unroll limit below
        its rows leaves the accumulators in memory: a MobileNetV2 search from scratch
        spent 25 trials on a 3 x 7 tile with no unrolling)."""
        cores = self.hints.cores
        for number, anchor in enumerate(self.anchors):
            p = f"a{number}"
            if values.get(f"{p}.rfactor", "none") != "none":
                continue
            tiles = [values[f"{p}.tile.s{axis}"] for axis in range(len(anchor.spatial))]
            rows = math.prod(tile[-1] for tile in tiles[:-1])
            if rows > 1 and values[f"{p}.unroll"] < min(rows, max(UNROLL_LIMITS)):
                return False
            if self._parallel_options(anchor) == (True,):
                reversed_order = values[f"{p}.order"] == "reversed"
                if self._parallel_jobs(anchor, tiles, reversed_order) < cores:
                    return False
        return True

    def _parallel_plan(self, anchor: AnchorRule, tiles: Sequence[tuple[int, ...]],
                       reversed_order: bool) -> tuple[list[tuple[int, bool]],
                                                      list[tuple[int, bool]],
                                                      tuple[int, int, int]]:
        """The trips (trip count, ragged) of an anchor's outermost and second-level
        tile loops in nest order, and which of them its parallel loop fuses
        (:func:`_parallel_span`, aiming for :data:`PARALLEL_JOBS_PER_CORE` per core)."""
        outermost = [(-(-extent // math.prod(tile)), bool(extent % math.prod(tile)))
                     for extent, tile in zip(anchor.spatial, tiles)]
        second = [(tile[0], ragged) for tile, (_, ragged) in zip(tiles, outermost)]
        if reversed_order:
            outermost, second = outermost[::-1], second[::-1]
        cores = self.hints.cores
        wanted = cores * PARALLEL_JOBS_PER_CORE if cores > 1 else 1
        return outermost, second, _parallel_span(outermost, second, wanted)

    def _parallel_jobs(self, anchor: AnchorRule, tiles: Sequence[tuple[int, ...]],
                       reversed_order: bool) -> int:
        """The iterations of the anchor's parallel loop under ``tiles``."""
        outermost, second, (start, cut, taken) = self._parallel_plan(anchor, tiles,
                                                                     reversed_order)
        return (math.prod(trip for trip, _ in outermost[start:cut])
                * math.prod(trip for trip, _ in second[:taken]))

    def default_values(self) -> dict:
        """A reasonable first point: a register tile of up to two vectors by as many
        rows as the accumulators leave registers for (four kept for operands), as the
        CPU's hand schedules have it; the reduction in long chunks, the tile accumulated
        in a local buffer computed at level 1, the outer tiles in parallel, producers at
        root but a border padding the compute does not ask to keep (``keep``), which is
        read in place (a depthwise convolution's padded input: materializing it costs as
        much memory traffic as the convolution itself)."""
        lanes, registers = self.hints.vector_lanes, self.hints.registers
        values: dict = {f"p{number}.location": "inline" if name in self.bordered else "root"
                        for number, name in enumerate(self.producers)}
        for number, anchor in enumerate(self.anchors):
            p = f"a{number}"
            *others, last = range(len(anchor.spatial))
            width = self._vector_tile(anchor.spatial[last], 2 * lanes)
            values[f"{p}.tile.s{last}"] = (1, 1, width)
            if others:
                vectors = max(1, width // lanes)
                rows = _largest_inner(anchor.spatial[others[-1]],
                                      max(1, (registers - 4) // vectors))
                values[f"{p}.tile.s{others[-1]}"] = (1, 1, rows)
            for axis in others[:-1]:
                values[f"{p}.tile.s{axis}"] = (1, 1, 1)
            for axis, extent in enumerate(anchor.reduce):
                fitting = [d for d in divisors(extent) if d <= MAX_REDUCTION_CHUNK]
                values[f"{p}.tile.r{axis}"] = max(fitting)
            values[f"{p}.location"] = "at1"
            values[f"{p}.order"] = "natural"
            values[f"{p}.parallel"] = True
            values[f"{p}.vectorize"] = True
            values[f"{p}.unroll"] = 64
            values[f"{p}.reduce_unroll"] = "limit"
            if self._rfactor_applies(anchor):
                values[f"{p}.rfactor"] = "none"
        return values

    def default_config(self) -> Config:
        return self.space.from_values(self.default_values())

    def sample_values(self, rng: np.random.Generator) -> dict:
        """A random point drawn by the sketch's sampling rules (the first points of a
        search from scratch, as Ansor's initial population): every knob uniformly, but
        annotated (the tile loops parallel and the inner loop vectorized wherever the
        sketch offers it) and each anchor's register tile one the CPU description
        allows: the innermost tile of the vectorized axis whole vectors (the whole axis
        where it is narrower than one vector), and the innermost tiles of the other
        axes, drawn in random order, each among the sizes whose accumulators (the
        tile's vectors times its rows) still fit the vector registers but
        :data:`OPERAND_REGISTERS`, with an unroll limit that unrolls the whole tile.
        Each tile is drawn by its innermost size first, then its outer levels. Drawn
        uniformly, almost every point's tile is partial vectors (1 in 35 of a 16-lane
        channel block's tiles is one whole vector) or spills its accumulators, and the
        first measurements teach the cost model only that such code is slow. A point
        that is not :meth:`admissible` (a parallel loop with fewer iterations than
        cores) is drawn again, up to :data:`SAMPLE_ATTEMPTS` times."""
        for _ in range(SAMPLE_ATTEMPTS - 1):
            values = self._draw_values(rng)
            if self.admissible(values):
                return values
        return self._draw_values(rng)

    def _draw_values(self, rng: np.random.Generator) -> dict:
        """One draw of :meth:`sample_values`' rules."""
        lanes = self.hints.vector_lanes
        values: dict = {}
        for knob in self.space.knobs:
            if knob.kind in ("parallel", "vectorize") and True in knob.options:
                values[knob.name] = True
            else:
                values[knob.name] = knob.options[int(rng.integers(len(knob.options)))]
        options = {knob.name: knob.options for knob in self.space.knobs}
        for number, anchor in enumerate(self.anchors):
            p = f"a{number}"
            *others, last = range(len(anchor.spatial))
            name, extent = f"{p}.tile.s{last}", anchor.spatial[last]
            whole = [o for o in options[name]
                     if (o[-1] % lanes == 0 if extent >= lanes else o[-1] == extent)]
            values[name] = _draw_tile(whole or options[name], rng)
            vectors = -(-values[name][-1] // lanes)
            # a window's reused operand (its taps x the tile's vectors along the axes
            # that index it) stays in registers beside the accumulators once the
            # window is unrolled, where it fits (a depthwise 3x3's nine weight vectors)
            free = self.hints.registers - OPERAND_REGISTERS
            held = (math.prod(anchor.reduce) * (vectors if last in anchor.held_axes else 1)
                    if anchor.held_axes and max(anchor.reduce) <= WINDOW else 0)
            if held + vectors > free:
                held = 0  # no room for them: the accumulators alone
            accumulators = vectors
            for axis in rng.permutation(others):
                name = f"{p}.tile.s{axis}"
                grows = axis in anchor.held_axes
                fitting = [o for o in options[name]
                           if accumulators * o[-1] + held * (o[-1] if grows else 1) <= free]
                values[name] = _draw_tile(fitting or options[name], rng)
                accumulators *= values[name][-1]
                held *= values[name][-1] if grows else 1
            # an unroll limit that unrolls the whole register tile, so that its
            # accumulators have constant indices and stay in registers
            rows = math.prod(values[f"{p}.tile.s{axis}"][-1] for axis in others)
            limits = [limit for limit in options[f"{p}.unroll"] if limit >= rows]
            values[f"{p}.unroll"] = (limits[int(rng.integers(len(limits)))] if limits
                                     else max(options[f"{p}.unroll"]))
        return values

    def seed_values(self) -> list[dict]:
        """Points to measure first besides :meth:`default_values`: each register tile
        shape the CPU's registers allow (one to four vectors wide by as many rows
        as the accumulators leave registers for: four of them for operands, and where
        the reduction is no window also a third of them, e.g. two channel blocks of a
        1x1 convolution by 8 of 112 columns rather than 14, 0.15 ms against 0.24, three
        by 7 of 56 rather than 8, 0.10 ms against 0.15), and for
        a long single reduction (a
        product's) the same tiles cache-blocked: the reduction in chunks whose operand
        panel stays in the first-level cache while several row tiles (level 2) reuse it;
        where the rows of a product are many, the same with as many rows as leave
        eight registers for operands although they do not divide the loop (12 rows of
        two vectors on AVX-512, ONNX Runtime's tile); where the reduction is a window (a
        convolution's taps), first the tiles whose accumulators leave registers for the
        window's weights, the window unrolled by LLVM (the depthwise hand schedule's
        tile), and after the others each again with the window unrolled. The evolution
        starts from these instead of from random points alone."""
        seeds = [self.default_values()]
        if self.kept_borders:
            # the default with the paddings read in place although the compute asks to
            # keep them: a pass over the input to pad it can cost more than the masked
            # loads do (MobileNetV2's stem of three channels: 0.08 ms against 0.10)
            seeds.append({**self.default_values(), **{
                f"p{number}.location": "inline" for number, name in enumerate(self.producers)
                if name in self.kept_borders}})
        for number, anchor in enumerate(self.anchors):
            if self._rfactor_applies(anchor):
                for option in RFACTOR_OPTIONS[1:]:
                    seeds.append({**self.default_values(), f"a{number}.rfactor": option})
        windowed = self._windowed()
        if windowed:
            # first, the window's weights kept in registers beside the accumulators
            # (one vector per tap and vector of the tile), the window unrolled by LLVM
            for vectors in TILE_VECTORS:
                values = self._tiled_values(vectors, False, window=True)
                if values is not None and values not in seeds:
                    seeds.append(values)
        # ragged register tiles for the rows of a product, not a window's few columns;
        # for a reduction that is no window, the dividing tiles that leave a third of
        # the registers for operands too (as the blocked-conv hand schedule's tiles do),
        # beside those leaving four
        raggedness = (False,) if windowed else (False, True)
        spares = (4,) if windowed else (4, max(4, self.hints.registers // 3))
        for vectors in TILE_VECTORS:
            for blocked, ragged in itertools.product((False, True), raggedness):
                for spare in (4,) if ragged else spares:
                    values = self._tiled_values(vectors, blocked, ragged, spare=spare)
                    if values is not None:
                        values = self._step_unrolled(values)
                    if values is not None and values not in seeds:
                        seeds.append(values)
        if windowed:
            for values in list(seeds):
                hinted = {**values, **{f"a{number}.reduce_unroll": "hint"
                                       for number in range(len(self.anchors))}}
                if hinted not in seeds:
                    seeds.append(hinted)
        # a tile the knobs do not offer (three vectors along a wide vectorized axis
        # they do not divide) is no point of the space
        options = {knob.name: knob.options for knob in self.space.knobs}
        return [seed for seed in seeds
                if all(value in options[name] for name, value in seed.items())]

    def _windowed(self) -> bool:
        """Every anchor's reduction is a short window (no loop of more than
        :data:`WINDOW` taps), as a depthwise convolution's is."""
        return all(max(anchor.reduce) <= WINDOW for anchor in self.anchors)

    def _tiled_values(self, vectors: int, blocked: bool, ragged: bool = False,
                      window: bool = False, spare: int = 4) -> dict | None:
        lanes, registers = self.hints.vector_lanes, self.hints.registers
        values = self.default_values()
        for number, anchor in enumerate(self.anchors):
            p = f"a{number}"
            if window:
                registers = self.hints.registers - math.prod(anchor.reduce) * vectors
                values[f"{p}.reduce_unroll"] = "hint"
                if registers - 4 < 2 * vectors:
                    return None
            *others, last = range(len(anchor.spatial))
            width = vectors * lanes
            if not others or width > MAX_FACTOR:
                return None
            extent = anchor.spatial[last]
            if extent < width:
                # a last axis of fewer vectors (a channel block): the others come from
                # an outer axis (e.g. several channel blocks per tile)
                extra = width // extent
                wide = [axis for axis in others[:-1] if width % extent == 0
                        and anchor.spatial[axis] > 1 and anchor.spatial[axis] % extra == 0]
                if not wide:
                    return None
                values[f"{p}.tile.s{wide[0]}"] = (1, 1, extra)
                width = extent
            elif extent % width and extent < 4 * width:
                return None  # whole vectors with a cut-short last tile only over 4 or more
            rows_extent = anchor.spatial[others[-1]]
            rows = _largest_inner(rows_extent, max(1, (registers - spare) // vectors))
            if ragged:
                rows = (registers - 8) // vectors
                if rows < 2 or rows_extent % rows == 0 or rows_extent < RAGGED_ROWS * rows:
                    return None
            if not blocked:
                values[f"{p}.tile.s{others[-1]}"] = (1, 1, rows)
                values[f"{p}.tile.s{last}"] = (1, 1, width)
                if _long_reduction(anchor):
                    # not blocked: the tile sums the whole long reduction in one loop
                    values[f"{p}.tile.r0"] = anchor.reduce[0]
                if ragged:  # each thread its columns, the rows streaming by (see order)
                    values[f"{p}.order"] = "reversed"
                continue
            if not _long_reduction(anchor):
                return None
            # a chunk of the reduction x the tile's columns of the operand: 32 KiB at
            # 4-byte elements and 16 lanes (a first-level cache), the row block about
            # eight register tiles deep
            chunk = _largest_inner_of(anchor.reduce[0], min(MAX_REDUCTION_CHUNK, 8192 // width))
            # a level-2 block of whole tiles (that divides the loop, where only the
            # register tile may not)
            blocks = (max(d for d in divisors(rows_extent) if d <= 8 and d * rows <= rows_extent)
                      if ragged else _largest_inner_of(rows_extent // rows, 8))
            values[f"{p}.tile.s{others[-1]}"] = (1, blocks, rows)
            values[f"{p}.tile.s{last}"] = (1, 1, width)
            values[f"{p}.tile.r0"] = chunk
            values[f"{p}.order"] = "reversed"
        return values

    def _step_unrolled(self, values: dict) -> dict:
        """``values`` with every anchor whose single reduction is too long to unroll
        whole (a product's) unrolling its chunk a few steps per iteration: the fewest
        :data:`REDUCTION_STEPS` whose multiply-adds (the register tile's vectors per
        step) reach :data:`SEED_UNROLLED_MULADDS`. (A 14 x 2-vector tile looping over
        a 256-step chunk one step at a time: 12.7 ms for 1024^3 one-threaded on
        AVX-512; 4 steps at a time 11.2 ms.)"""
        values = dict(values)
        lanes = self.hints.vector_lanes
        for number, anchor in enumerate(self.anchors):
            p = f"a{number}"
            if not _long_reduction(anchor):
                continue
            tiles = [values[f"{p}.tile.s{axis}"][-1] for axis in range(len(anchor.spatial))]
            muladds = math.prod(tiles[:-1]) * max(1, -(-tiles[-1] // lanes))
            values[f"{p}.reduce_unroll"] = next(
                (steps for steps in REDUCTION_STEPS if steps * muladds >= SEED_UNROLLED_MULADDS),
                REDUCTION_STEPS[-1])
        return values

    # ------------------------------------------------------------------ applying a point

    def apply(self, outputs: Sequence[te.Tensor], config: Config) -> te.Schedule:
        """The schedule of ``outputs`` (a fresh copy of the compute this sketch was
        derived from) chosen by ``config``."""
        s = te.create_schedule(list(outputs))
        self.schedule_stages(s, outputs, config)
        return s

    def schedule_stages(self, s: te.Schedule, outputs: Sequence[te.Tensor],
                        config: Config) -> None:
        """Schedule the stages of ``outputs`` (a copy of the compute this sketch was
        derived from, tensors matched by name) inside schedule ``s``, which may hold
        other stages too (a target's whole function)."""
        by_name = _tensors_by_name(outputs)
        for name in self.inlined:
            s[by_name[name]].compute_inline()
        for number, name in enumerate(self.producers):
            stage = s[by_name[name]]
            if config[f"p{number}.location"] == "inline":
                stage.compute_inline()
            else:
                stage.compute_root()
                _schedule_flat(stage, self.hints.vector_lanes,
                               _constant_selects(by_name[name], self.inlined))
        for number, anchor in enumerate(self.anchors):
            self._apply_anchor(s, by_name, anchor, f"a{number}", config)
        for name in self.other_outputs:
            _schedule_flat(s[by_name[name]], self.hints.vector_lanes,
                           _constant_selects(by_name[name], self.inlined))

    def _apply_anchor(self, s: te.Schedule, by_name: dict, anchor: AnchorRule, p: str,
                      config: Config) -> None:
        if config.values.get(f"{p}.rfactor", "none") != "none":
            self._apply_rfactor(s, by_name, anchor, p, config)
            return
        tiles = [config[f"{p}.tile.s{axis}"] for axis in range(len(anchor.spatial))]
        reduce_tiles = [config[f"{p}.tile.r{axis}"] for axis in range(len(anchor.reduce))]
        # the innermost tile of the last axis, vectorized in the compute and its
        # write-back, or else a short scalar loop that LLVM unrolls (and vectorizes)
        # itself inside every copy the TIR makes: its lanes count as copies of the body
        # against the unroll limit (unvectorized 512-way tiles of 16 lanes built for 140 s)
        lanes = tiles[-1][-1]
        vectorized = config[f"{p}.vectorize"] and lanes > 1
        scalar_copies = 1 if vectorized else lanes
        location = config[f"{p}.location"]
        reversed_order = config[f"{p}.order"] == "reversed"
        _, _, span = self._parallel_plan(anchor, tiles, reversed_order)
        tensor = by_name[anchor.name]
        extents: dict[int, int] = {}
        if location == "direct":
            compute_stage, outer_stage = s[tensor], None
            levels = _split_levels(compute_stage, tiles, extents)
            if anchor.fusable:  # the epilogue on its own, after the anchor's nest
                _schedule_flat(s[by_name[anchor.outer]], self.hints.vector_lanes)
        else:
            level = int(location[2:])  # the outer stage holds levels 0..level
            if anchor.fusable:
                compute_stage, outer_stage = s[tensor], s[by_name[anchor.outer]]
            else:
                compute_stage = s[s.cache_write(tensor, "local")]
                outer_stage = s[tensor]
            # a tile computed at level 0 whose parallel loop takes second-level loops
            # too is computed at the fused loop: the outer stage splits that level off
            split_second = level == 1 or (config[f"{p}.parallel"] and span[2] > 0)
            outer_factors = [(t[0], math.prod(t[1:])) if split_second else (math.prod(t),)
                             for t in tiles]
            outer_levels = _split_levels(outer_stage, outer_factors, extents)
            if reversed_order:
                outer_levels[:-1] = [lvl[::-1] for lvl in outer_levels[:-1]]
            tile_loops = [iv for lvl in outer_levels[:-1] for iv in lvl]
            rest = outer_levels[-1]
            # the tile's write-back (or fused epilogue): its last axis one vector at a time
            last_outer, last_inner = outer_stage.split(rest[-1], lanes)
            outer_stage.reorder(*tile_loops, *rest[:-1], last_outer, last_inner)
            if vectorized:
                outer_stage.vectorize(last_inner)
            _unroll_writeback(outer_stage, [*rest[:-1], last_outer],
                              [extents[id(iv)] for iv in rest[:-1]]
                              + [-(-extents[id(rest[-1])] // lanes)],
                              config[f"{p}.unroll"] // scalar_copies)
            attach = tile_loops[-1]
            if config[f"{p}.parallel"]:  # fused before the compute is attached inside
                top = _parallel_loops(outer_levels, span)
                fused = outer_stage.fuse(*top) if len(top) > 1 else top[0]
                outer_stage.parallel(fused)
                # at level 0 the tile is computed at the fused loop (with the
                # second-level loops it did not take, where it took some)
                if top[-1] is attach or (level == 0 and split_second):
                    attach = fused
            compute_stage.compute_at(outer_stage, attach)
            levels = _split_levels(compute_stage, [t[level + 1:] for t in tiles], extents)
        reduce = [compute_stage.split(iv, factor)
                  for iv, factor in zip(compute_stage.op.reduce_axis, reduce_tiles)]
        for (_, inner), factor in zip(reduce, reduce_tiles):
            extents[id(inner)] = factor
        r0, r1 = [pair[0] for pair in reduce], [pair[1] for pair in reduce]
        # S0 S1 R0 S2 R1 S3, without the levels the outer stage took
        if reversed_order and outer_stage is None:
            levels[:-2] = [lvl[::-1] for lvl in levels[:-2]]
        *before, s2, s3 = levels
        compute_stage.reorder(*(iv for lvl in before for iv in lvl), *r0, *s2, *r1, *s3)
        if vectorized:
            compute_stage.vectorize(s3[-1])
        limit = config[f"{p}.unroll"]
        reduce_unroll = config[f"{p}.reduce_unroll"]
        hinted = reduce_unroll == "hint"
        if isinstance(reduce_unroll, int) and r1:
            # the innermost reduction loop in iterations of a few steps, unrolled by
            # LLVM (the same machine code as unrolling it in the TIR, from a body the
            # TIR's passes walk once); the tile's loops alone take the limit then
            steps = _largest_inner_of(extents[id(r1[-1])], reduce_unroll)
            if steps > 1:
                _, inner = compute_stage.split(r1[-1], steps)
                compute_stage.unroll(inner, explicit=False)
            hinted, r1 = True, []
        unrolled = scalar_copies  # copies of the body (see ``scalar_copies``)
        for iv in [*reversed(s3[:-1]), *(() if hinted else reversed(r1))] if limit else ():
            if unrolled * extents[id(iv)] > limit:
                break
            unrolled *= extents[id(iv)]
            if extents[id(iv)] > 1:
                compute_stage.unroll(iv)
        # the hinted reduction loops, innermost first, while the copies of the body that
        # both unrollings make stay within MAX_UNROLLED_BODY; the rest stay loops
        for iv in reversed(r1) if hinted else ():
            if unrolled * extents[id(iv)] > MAX_UNROLLED_BODY:
                break
            unrolled *= extents[id(iv)]
            if extents[id(iv)] > 1:
                compute_stage.unroll(iv, explicit=False)
        if config[f"{p}.parallel"] and outer_stage is None:
            top = _parallel_loops(levels, span)
            compute_stage.parallel(compute_stage.fuse(*top) if len(top) > 1 else top[0])

    def _apply_rfactor(self, s: te.Schedule, by_name: dict, anchor: AnchorRule, p: str,
                       config: Config) -> None:
        """The rfactor rule's nest: the anchor's longest reduction axis reduced into
        partials (a vector of them per output point, or parallel chunks), then the
        final reduction over the partials inside the loop over the output points, and
        the epilogue on its own."""
        lanes, cores = self.hints.vector_lanes, self.hints.cores
        tensor = by_name[anchor.name]
        stage = s[tensor]
        longest = max(range(len(anchor.reduce)), key=lambda axis: anchor.reduce[axis])
        axis, extent = stage.op.reduce_axis[longest], anchor.reduce[longest]
        if config[f"{p}.rfactor"] == "vector":
            # the most vectors that divide the reduction (a short last chunk costs a
            # clamp and a select on every element), else the most with that tail
            widths = [v * lanes for v in range(RFACTOR_VECTORS, 0, -1) if v * lanes <= extent]
            dividing = [w for w in widths if extent % w == 0]
            rf = s.rfactor(tensor, axis, (dividing or widths or [extent])[0], keep="inner")
            rf_stage = s[rf]
            *points, kept = rf_stage.op.axis
            rf_stage.reorder(*points, *rf_stage.op.reduce_axis, kept)
            if config[f"{p}.vectorize"]:
                rf_stage.vectorize(kept)
        else:
            chunks = RFACTOR_CHUNKS_PER_CORE * cores
            chunk = -(-extent // chunks)
            rf = s.rfactor(tensor, axis, -(-chunk // lanes) * lanes, keep="outer")
            rf_stage = s[rf]
            rf_stage.parallel(rf_stage.fuse(*rf_stage.op.axis))
        # the final reduction over the partials is short and stays serial
        if anchor.fusable:
            _schedule_flat(s[by_name[anchor.outer]], lanes)


def _held_operand_axes(op: te.ComputeOp) -> tuple[int, ...]:
    """The spatial axes (by position) indexing the operands that ``op`` reads with its
    reduction but not along all its spatial axes: a register tile reuses such an
    operand's values across the axes that do not index it (see
    :attr:`AnchorRule.held_axes`)."""
    spatial = [iv.var for iv in op.axis]
    reduce = {id(iv.var) for iv in op.reduce_axis}
    held: set[int] = set()
    for load in collect(op.body, lambda n: isinstance(n, te.TensorLoad)):
        used = {id(v) for index in load.indices
                for v in collect(index, lambda n: isinstance(n, tx.Var))}
        if used & reduce and not all(id(v) in used for v in spatial):
            held |= {axis for axis, v in enumerate(spatial) if id(v) in used}
    return tuple(sorted(held))


def _draw_tile(options: Sequence[tuple[int, ...]], rng: np.random.Generator
               ) -> tuple[int, ...]:
    """One of a loop's tile ``options`` (inner factors, innermost last): its innermost
    size uniformly among those offered, then its outer levels uniformly (drawn
    uniformly, a tile size offered under many outer levels, a small one, would be drawn
    that much more often)."""
    sizes = sorted({option[-1] for option in options})
    size = sizes[int(rng.integers(len(sizes)))]
    under = [option for option in options if option[-1] == size]
    return under[int(rng.integers(len(under)))]


def _unroll_writeback(stage, loops: list, sizes: list[int], limit: int) -> None:
    """Unroll the loops of a tile's write-back (or fused epilogue), which read the
    tile's accumulators, when all of them together stay within the unroll ``limit``
    (the register tile's): unrolled, every accumulator has a constant index and LLVM
    keeps the tile in registers; a loop over them leaves the whole tile in memory, each
    multiply-add of the reduction loading and storing its accumulator (a 2 x 8 vector
    tile of a 1x1 convolution ran 1.9x slower so)."""
    if not limit or math.prod(sizes) > limit:
        return
    for loop, size in zip(loops, sizes):
        if size > 1:
            stage.unroll(loop)


def _parallel_loops(levels: list[list], span: tuple[int, int, int]) -> list:
    """The tile loops fused into the parallel loop: of ``levels`` (the outermost tile
    loops, then the second level, each in nest order) those ``span`` names (see
    :func:`_parallel_span`)."""
    start, cut, taken = span
    return [*levels[0][start:cut], *levels[1][:taken]]


def _parallel_span(outermost: Sequence[tuple[int, bool]], second: Sequence[tuple[int, bool]],
                   wanted: int) -> tuple[int, int, int]:
    """Which tile loops the parallel loop fuses, given the outermost and second-level
    ones in nest order by (trip count, ragged axis): the outermost as
    :func:`_fused_span` says, then, while they give fewer than ``wanted`` iterations and
    every outermost loop is fused, the second-level ones in nest order (TVM's
    auto-scheduler fuses outer loops so), up to the first of a ragged axis (its index
    would reach a guard through a remainder, which the loop partition cannot peel).
    Returns ``(start, cut, taken)``: the outermost ``[start:cut]`` and the first
    ``taken`` of the second level."""
    start, cut = _fused_span(outermost)
    jobs = math.prod(trip for trip, _ in outermost[start:cut])
    taken = 0
    if cut == len(outermost):
        for trip, ragged in second:
            if jobs >= wanted or ragged:
                break
            jobs *= trip
            taken += 1
    return start, cut, taken


def _fused_span(trips: Sequence[tuple[int, bool]]) -> tuple[int, int]:
    """Which of the outermost tile loops, given in nest order by (trip count, ragged)
    (see :func:`_ragged`), are fused into the parallel loop, as a slice: all of them but
    leading ones of one trip (left outside, where they vanish), and but those from a
    ragged loop on when one comes after the first fused. The fused index reaches the
    first loop's variable as ``fused // c``, which grows with it, so the TIR's loop
    partition still peels the cut-short tiles off the parallel loop; a later loop's
    variable is ``(fused // c) % n``, which it cannot, and its guards would stay in every
    tile of the hot loop. Left serial, that loop is partitioned inside each parallel
    iteration instead."""
    start = next((k for k, (trip, _) in enumerate(trips) if trip > 1), len(trips) - 1)
    cut = next((k for k, (_, ragged) in enumerate(trips) if k > start and ragged),
               len(trips))
    return start, cut


def _largest_inner(extent: int, limit: int) -> int:
    """The largest innermost tile of a loop of ``extent`` at most ``limit`` (a divisor
    within MAX_FACTOR)."""
    return max(d for d in divisors(extent) if d <= min(limit, MAX_FACTOR))


def _long_reduction(anchor: AnchorRule) -> bool:
    """Whether ``anchor`` has one reduction loop, longer than
    :data:`MAX_REDUCTION_CHUNK` (a product's): its seeds sum it whole or in chunks, a
    few steps unrolled at a time."""
    return len(anchor.reduce) == 1 and anchor.reduce[0] > MAX_REDUCTION_CHUNK


def _largest_inner_of(extent: int, limit: int) -> int:
    """The largest divisor of ``extent`` at most ``limit`` (at least 1)."""
    return max(d for d in divisors(extent) if d <= max(1, limit))


def _is_border(stage, kept: bool = False) -> bool:
    """``stage`` only adds a border to one tensor (a padding: same rank, no smaller
    along any axis) and its compute does not ask for it to be materialized (``kept``:
    whether or not it does)."""
    op = stage.op
    reads = reads_of(op.body)
    if (op.attrs.get("keep") and not kept) or len(reads) != 1:
        return False
    shape, source = tuple(stage.tensor.shape), tuple(reads[0].shape)
    return len(shape) == len(source) and all(int(a) >= int(b) for a, b in zip(shape, source))


def _fusable_output(tensor: te.Tensor, readers: dict[str, list[te.Tensor]],
                    output_names: set[str]) -> str | None:
    """The output that an elementwise chain of single readers leads ``tensor`` to (its
    epilogue, e.g. a bias addition then an activation), or None."""
    current = tensor
    while current.name not in output_names:
        consumers = readers.get(current.name, [])
        if len(consumers) != 1 or not _is_elementwise_reader(consumers[0], current):
            return None
        current = consumers[0]
    return None if current is tensor else current.name


def _tensors_by_name(outputs: Sequence[te.Tensor]) -> dict[str, te.Tensor]:
    found: dict[str, te.Tensor] = {}
    pending = list(outputs)
    while pending:
        tensor = pending.pop()
        if tensor.name in found:
            continue
        found[tensor.name] = tensor
        if isinstance(tensor.op, te.ComputeOp):
            pending += reads_of(tensor.op.body)
    return found


def _split_levels(stage, tiles: list[tuple[int, ...]], extents: dict[int, int]
                  ) -> list[list]:
    """Split every spatial axis of ``stage`` by its inner-level extents ``tiles[axis]``
    (outermost first); returns the loops level by level (``len(tiles[0]) + 1`` levels,
    one loop per axis each), recording each inner loop's extent in ``extents``."""
    count = len(tiles[0])
    levels: list[list] = [[] for _ in range(count + 1)]
    for axis, factors in zip(list(stage.op.axis), tiles):
        current = axis
        for depth in range(count):
            outer, current = stage.split(current, math.prod(factors[depth:]))
            levels[depth].append(outer)
        extents[id(current)] = factors[-1] if factors else int(axis.extent)
        levels[count].append(current)
    return levels


def _constant_selects(tensor: te.Tensor, inlined: Sequence[str]) -> dict[int, int]:
    """The :data:`CONSTANT_SELECTS` of ``tensor``'s compute, or of a stage of the same
    shape inlined into it (a convolution's output transform under its epilogue):
    ``{axis: period}``, empty where none is."""
    pending, seen = [tensor], set()
    while pending:
        current = pending.pop()
        if current.name in seen or not isinstance(current.op, te.ComputeOp):
            continue
        seen.add(current.name)
        selects = current.op.attrs.get(CONSTANT_SELECTS)
        if selects:
            return {int(axis): int(period) for axis, period in dict(selects).items()}
        pending += [t for t in reads_of(current.op.body)
                    if t.name in inlined and tuple(t.shape) == tuple(tensor.shape)]
    return {}


def _schedule_flat(stage, lanes: int, selects: dict[int, int] | None = None) -> None:
    """An injective stage at root: outer axes fused in parallel, the last vectorized
    when it is a whole number of vectors. ``selects`` (:data:`CONSTANT_SELECTS`): each
    such axis split by its period, the inner loops unrolled just outside the vectorized
    one, so that every select of a constant by them folds (a Winograd transform's
    matrix, as TVM's auto-scheduler unrolls a compute's
    ``auto_scheduler_simplify_const_tensor_indices``)."""
    axes = list(stage.op.axis)
    if not axes:
        return
    if selects:
        *outer, last = axes
        unrolled = []
        for axis, period in sorted(selects.items()):
            if period >= int(outer[axis].extent):
                unrolled.append(outer[axis])
                continue
            outer[axis], inner = stage.split(outer[axis], period)
            unrolled.append(inner)
        outer = [iv for iv in outer if all(iv is not u for u in unrolled)]
        stage.reorder(*outer, *unrolled, last)
        for iv in unrolled:
            stage.unroll(iv)
        axes = [*outer, last]
        if not outer:
            stage.vectorize(last)
            return
    *outer, last = axes
    extent = int(last.extent)
    if extent % lanes == 0 and extent > lanes:
        _, vector = stage.split(last, lanes)
        stage.vectorize(vector)
    elif extent <= 4 * lanes:
        stage.vectorize(last)
    if outer:
        stage.parallel(stage.fuse(*outer) if len(outer) > 1 else outer[0])
