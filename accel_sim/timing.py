"""The timing model: three in-order modules running concurrently, gated by tokens,
sharing one DRAM read port with instruction fetch, as the RTL in ``hw/rtl`` does.

:func:`schedule_stream` replays a stream the way the RTL executes it (docs/isa.md
section 7 gives the rules and their constants):

- **fetch** reads the stream in bursts of 8 instructions through the shared read
  port, one burst at a time and only while its 16-entry staging queue has room;
  each instruction is dispatched in order to its module's 64-entry command queue
  and may issue two cycles after its last beat arrived;
- a module **issues** its next instruction when it is free, the instruction has
  been dispatched, every queue it pops holds a token and every queue it pushes has
  room; tokens go out when an instruction completes;
- **GEMM and ALU** take ``instruction_overhead_cycles`` plus their iterations;
  FINISH and empty loops half the overhead;
- a **LOAD** splits its rows into AXI bursts (at most 16 beats, never across
  4 KiB); the read port grants one burst every other cycle, round robin among
  compute, load and fetch, with at most 8 bursts in flight; the memory answers a
  burst ``dram_latency_cycles`` after its address, in request order, one bus beat
  per ``bus bytes / dram_bytes_per_cycle`` cycles; the LOAD's SRAM writer takes
  one beat (or micro-op word) per cycle, padding included, and a beat waits on the
  channel, blocking every later burst, until the writer reaches it;
- a **STORE** owns the write channels: one beat per beat time, each burst answered
  ``dram_latency_cycles`` after its last beat, at most 16 bursts unanswered.

The model is event driven (per burst, with runs of identical bursts skipped once
they settle into a periodic state), so whole networks schedule in milliseconds.
With ``cost=...`` :func:`schedule_stream` instead charges every instruction a fixed
cost (:func:`instruction_cost`: each module its own DRAM bandwidth, fetch free):
a first-order estimate. In both, because each queue has exactly one producer and
one consumer, a stream that cannot finish deadlocks on any implementation, and
:class:`DeadlockError` says where.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import DeadlockError, IllegalInstructionError
from .config import UOP_BYTES, HardwareConfig
from .isa import (
    OPCODE_OF,
    WORD_BUFFERS,
    Alu,
    DmaInstruction,
    Finish,
    Gemm,
    Instruction,
    Load,
    Module,
    Queue,
    Store,
    dram_unit_bytes,
    module_of,
    popped_queues,
    pushed_queues,
)
from .validation import validate_stream


def transfer_bytes(instruction: DmaInstruction, config: HardwareConfig) -> int:
    """Bytes a DMA moves: padded tiles written to SRAM (LOAD) or tiles written to DRAM."""
    tiles = instruction.y_size * instruction.x_size
    if isinstance(instruction, Load):
        tiles = instruction.padded_rows * instruction.padded_cols
    return tiles * dram_unit_bytes(config, instruction.buffer)


def instruction_cost(instruction: Instruction, config: HardwareConfig) -> int:
    """Cycles an instruction occupies its module once issued, alone on the machine
    (the cost-only model: a quick estimate).

    DMA: overhead + DRAM latency (when it touches DRAM) + ceil(bytes / bytes per
    cycle). GEMM and ALU: overhead + iterations x cycles per iteration. FINISH:
    overhead.
    """
    overhead = config.instruction_overhead_cycles
    if isinstance(instruction, DmaInstruction):
        touches_dram = instruction.y_size * instruction.x_size > 0
        return (
            overhead
            + (config.dram_latency_cycles if touches_dram else 0)
            + math.ceil(transfer_bytes(instruction, config) / config.dram_bytes_per_cycle)
        )
    if isinstance(instruction, Gemm):
        return overhead + instruction.iterations * config.gemm_cycles_per_iteration
    if isinstance(instruction, Alu):
        return overhead + instruction.iterations * config.alu_cycles_per_iteration
    if isinstance(instruction, Finish):
        return overhead
    raise IllegalInstructionError(f"{type(instruction).__name__} is not an ISA instruction")


def gemm_active_cycles(instruction: Instruction, config: HardwareConfig) -> int:
    """Cycles in which the GEMM core multiplies (non-reset GEMM iterations)."""
    if isinstance(instruction, Gemm) and not instruction.reset:
        return instruction.iterations * config.gemm_cycles_per_iteration
    return 0


@dataclass(frozen=True)
class ScheduledInstruction:
    """When one instruction ran: it issued at ``start`` and completed at ``end``."""

    index: int
    module: Module
    start: int
    end: int


@dataclass(frozen=True)
class ModuleTiming:
    """One module's totals: busy executing, stalled on tokens, instruction count."""

    instructions: int
    busy_cycles: int
    stall_cycles: int


@dataclass(frozen=True)
class TimingReport:
    """Cycle counts of one stream."""

    total_cycles: int
    modules: dict[Module, ModuleTiming]
    gemm_active_cycles: int
    schedule: tuple[ScheduledInstruction, ...]

    @property
    def gemm_utilization(self) -> float:
        """Fraction of all cycles in which the GEMM core performs multiply-accumulates."""
        return self.gemm_active_cycles / self.total_cycles if self.total_cycles else 0.0

    def execution_order(self) -> list[int]:
        """Instruction indices by issue cycle.

        ``schedule`` lists instructions in the order the model issued them, which
        puts every token's producer before its consumer; the stable sort keeps
        that order among instructions issued in the same cycle (a zero-cost
        producer and its consumer, for instance).
        """
        ordered = sorted(self.schedule, key=lambda entry: entry.start)
        return [entry.index for entry in ordered]

    def summary(self) -> str:
        """A short human-readable report."""
        lines = [
            f"total cycles: {self.total_cycles}",
            f"GEMM-core utilization: {self.gemm_utilization:.1%}",
        ]
        for module, timing in self.modules.items():
            lines.append(
                f"{module.name.lower():>8}: {timing.instructions} instructions, "
                f"busy {timing.busy_cycles}, stalled {timing.stall_cycles} cycles"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class MachineTiming:
    """Micro-architecture constants of the RTL (``hw/rtl``) and of its memory port that
    the shared-port model reproduces; docs/isa.md section 7 explains each.

    ``burst_beats``: longest AXI burst (``hc_burst_gen`` MAX_BEATS); bursts also
    end at every ``boundary_bytes``. ``outstanding_reads``: read bursts in flight on
    the shared port (``hc_read_arbiter``, 2**LOG_OUTSTANDING). ``fetch_burst``:
    instructions per fetch burst; ``staging_depth``: the fetch staging queue;
    ``command_queue_depth``: each module's command queue (``hc_fetch``).
    ``write_responses``: write bursts the memory holds awaiting their response.
    """

    burst_beats: int = 16
    boundary_bytes: int = 4096
    outstanding_reads: int = 8
    fetch_burst: int = 8
    staging_depth: int = 16
    command_queue_depth: int = 64
    write_responses: int = 16


#: the RTL in hw/rtl with the system bench's memory
RTL_MACHINE = MachineTiming()


CostFunction = Callable[[Instruction, HardwareConfig], int]


def schedule_stream(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    cost: CostFunction | None = None,
    machine: MachineTiming | None = None,
) -> TimingReport:
    """Run the timing model; a stream that cannot complete raises DeadlockError.

    By default this is the shared-port model of the RTL (see the module docstring),
    with the micro-architecture constants of ``machine`` (the RTL's by default).
    With ``cost``, every instruction instead occupies its module for ``cost(i,
    config)`` cycles and modules share nothing but tokens (each has its own DRAM
    bandwidth, fetch is free): a first-order estimate.

    The stream is validated first (:func:`.validation.validate_stream`: every field,
    SRAM range and the work budget), so what the model allocates and loops over is
    bounded by the config's budget, never by a field's value.
    """
    validate_stream(instructions, config)
    if cost is not None:
        return schedule_with_costs(instructions, config, cost)
    return _SharedPortModel(instructions, config, machine or RTL_MACHINE).run()


def schedule_with_costs(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    cost: CostFunction,
) -> TimingReport:
    """:func:`schedule_stream` with ``cost`` for a stream its caller has validated
    already (:func:`.validation.validate_stream`), which is not validated again: the
    bounds that validation gives are this function's precondition."""
    programs = {module: [] for module in Module}
    for index, instruction in enumerate(instructions):
        programs[module_of(instruction)].append(index)
    next_position = dict.fromkeys(Module, 0)
    free_at = dict.fromkeys(Module, 0)
    push_cycles: dict[Queue, list[int]] = {queue: [] for queue in Queue}
    pop_cycles: dict[Queue, list[int]] = {queue: [] for queue in Queue}
    timings = {module: [0, 0, 0] for module in Module}  # instructions, busy, stall
    scheduled: list[ScheduledInstruction] = []
    depth = config.token_queue_depth

    def issue_cycle(module: Module, instruction: Instruction) -> int | None:
        cycle = free_at[module]
        for queue in popped_queues(instruction):
            taken = len(pop_cycles[queue])
            if taken >= len(push_cycles[queue]):
                return None
            cycle = max(cycle, push_cycles[queue][taken])
        for queue in pushed_queues(instruction):
            needs_pop = len(push_cycles[queue]) - depth
            if needs_pop >= 0:
                if needs_pop >= len(pop_cycles[queue]):
                    return None
                cycle = max(cycle, pop_cycles[queue][needs_pop])
        return cycle

    progress = True
    while progress:
        progress = False
        for module in Module:
            program = programs[module]
            while next_position[module] < len(program):
                index = program[next_position[module]]
                instruction = instructions[index]
                start = issue_cycle(module, instruction)
                if start is None:
                    break
                end = start + cost(instruction, config)
                for queue in popped_queues(instruction):
                    pop_cycles[queue].append(start)
                for queue in pushed_queues(instruction):
                    push_cycles[queue].append(end)
                counts = timings[module]
                counts[0] += 1
                counts[1] += end - start
                counts[2] += start - free_at[module]
                free_at[module] = end
                scheduled.append(ScheduledInstruction(index, module, start, end))
                next_position[module] += 1
                progress = True

    blocked = {
        module: programs[module][next_position[module]]
        for module in Module
        if next_position[module] < len(programs[module])
    }
    if blocked:
        raise DeadlockError(
            _deadlock_message(instructions, blocked, push_cycles, pop_cycles, depth)
        )
    return TimingReport(
        total_cycles=max(free_at.values()),
        modules={module: ModuleTiming(*timings[module]) for module in Module},
        gemm_active_cycles=sum(gemm_active_cycles(i, config) for i in instructions),
        schedule=tuple(scheduled),
    )


#: read-port clients in the arbiter's order (hc_top: 0 compute, 1 load, 2 fetch)
_COMPUTE_CLIENT, _LOAD_CLIENT, _FETCH_CLIENT = 0, 1, 2
_INSTRUCTION_BYTES = 16


@functools.lru_cache(maxsize=4096)
def _row_bursts(offset: int, nbytes: int, word_mode: bool, bus: int, max_beats: int,
                boundary: int) -> tuple[tuple[int, int], ...]:
    """(beats, write cycles) of each burst of a row of ``nbytes`` bytes whose first byte
    lies ``offset`` bytes past a ``boundary``: as hc_burst_gen splits it (at
    ``max_beats`` beats and at every boundary); a burst of micro-op words takes one
    write cycle per word, a burst of tiles one per beat."""
    address = offset - offset % bus
    end = offset + nbytes
    beats_left = -(-(end - address) // bus)
    bursts = []
    while beats_left:
        beats = min(beats_left, max_beats, (boundary - address % boundary) // bus)
        if word_mode:
            first, last = max(address, offset), min(address + beats * bus, end)
            bursts.append((beats, (last - first) // UOP_BYTES))
        else:
            bursts.append((beats, beats))
        address += beats * bus
        beats_left -= beats
    return tuple(bursts)


class _SharedPortModel:
    """Event-driven model of the RTL: three modules, instruction fetch and one read
    port shared burst by burst (see the module docstring).

    Times are clock edges from the start: an instruction issues at ``start`` and its
    module (and whatever waits for its tokens) may issue again from ``end``.
    """

    def __init__(self, instructions: Sequence[Instruction], config: HardwareConfig,
                 machine: MachineTiming):
        self.instructions = instructions
        self.config = config
        self.machine = machine
        self.bus = config.bus_width_bits // 8
        self.beat = max(1, -(-self.bus // config.dram_bytes_per_cycle))
        self.latency = config.dram_latency_cycles
        self.overhead = config.instruction_overhead_cycles
        self.insn_beats = max(1, _INSTRUCTION_BYTES // self.bus)

    # --- instruction costs that do not depend on the port -----------------------------
    def _loop_cost(self, instruction: Instruction) -> int:
        if isinstance(instruction, Gemm):
            iterations, per = instruction.iterations, self.config.gemm_cycles_per_iteration
        elif isinstance(instruction, Alu):
            iterations, per = instruction.iterations, self.config.alu_cycles_per_iteration
        else:
            iterations, per = 0, 0
        if iterations == 0:  # FINISH and empty loops only complete
            return max(1, self.overhead - 2)
        return self.overhead + iterations * per

    def _store_cost(self, store: Store) -> int:
        """Cycles from a STORE's issue to its end (see _store_cost)."""
        if store.y_size * store.x_size == 0:
            return self.overhead - 1
        unit = dram_unit_bytes(self.config, store.buffer)
        machine = self.machine
        first, stride = _row_offsets(store.dram_base, store.x_stride, store.y_size,
                                     store.x_size * unit, unit, machine.boundary_bytes)
        return _store_cost(unit, self.bus, self.beat, self.latency, machine.burst_beats,
                           machine.boundary_bytes, machine.write_responses, first, stride,
                           store.y_size, store.x_size)

    def _read_plan(self, load: Load) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...], int,
                                              int]:
        """The bursts of a LOAD as (pad cycles its SRAM writer spends before the burst,
        cycles the burst holds the read data channel), the runs of identical bursts,
        the pad cycles after the last burst, and the pad cycles of a LOAD without
        data."""
        unit = dram_unit_bytes(self.config, load.buffer)
        boundary = self.machine.boundary_bytes
        word_mode = load.buffer in WORD_BUFFERS
        if word_mode:
            first, stride = (load.dram_base * unit) % boundary, (load.x_stride * unit) % boundary
        else:
            first, stride = _row_offsets(load.dram_base, load.x_stride, load.y_size,
                                         load.x_size * unit, unit, boundary)
        return _read_plan(
            word_mode, unit, self.bus, self.beat, self.machine.burst_beats, boundary, first,
            stride, load.y_size, load.x_size, load.y_pad_top, load.y_pad_bottom,
            load.x_pad_left, load.x_pad_right,
        )

    # --- a run ------------------------------------------------------------------------
    def run(self) -> TimingReport:
        """Time the stream on ``machine`` (see :class:`_PortRun`), or, where its command
        queues stall fetch for good, on the same machine with unbounded queues."""
        try:
            return _PortRun(self, self.machine).run()
        except _Stuck:
            pass
        # Stuck although every module may still issue by the ISA's token rules (the
        # cost-only model raises DeadlockError otherwise): the stream needs more
        # look-ahead than the command queues hold, and would stall the RTL's fetch.
        # Time it as if the queues were unbounded.
        schedule_with_costs(self.instructions, self.config, instruction_cost)
        unbounded = dataclasses.replace(self.machine, command_queue_depth=1 << 30,
                                        staging_depth=1 << 30)
        return _PortRun(self, unbounded).run()


class _PortRun:
    """One run of the shared-port model over a stream: the state of fetch, of the three
    modules, of the token queues and of the read port, and the steps that advance it.

    Modules and read-port clients are plain ints (``int(Module)``; ``_COMPUTE_CLIENT``,
    ``_LOAD_CLIENT``, ``_FETCH_CLIENT``) and per-instruction facts plain lists: the
    steps run once per instruction or burst, so whole networks stay fast.
    """

    # slots: the steps read and write this state once per burst or instruction
    __slots__ = (
        "model", "instructions", "count", "limit", "queue_cap", "fetch_burst", "staging",
        "modules", "programs", "position", "pops", "pushes", "arrival", "dispatch",
        "fetched", "dispatched", "fetch_last_beat", "next_position", "free_at", "issued",
        "starts", "ends", "scheduled", "depth", "push_cycles", "pop_cycles", "valid",
        "plans", "next_burst", "writer", "trailing", "owner", "arbiter_free", "last_grant",
        "last_beat", "in_flight", "hands", "streak", "changed",
    )

    def __init__(self, model: _SharedPortModel, machine: MachineTiming):
        self.model = model
        instructions = model.instructions
        self.instructions = instructions
        self.count = count = len(instructions)
        self.limit = machine.outstanding_reads
        self.queue_cap = machine.command_queue_depth
        self.fetch_burst, self.staging = machine.fetch_burst, machine.staging_depth

        # the stream: each instruction's module, its place in that module's program,
        # the token queues it pops and pushes
        self.modules = modules = [int(module_of(instruction)) for instruction in instructions]
        self.programs: list[list[int]] = [[], [], []]
        self.position = [0] * count
        for index, module in enumerate(modules):
            self.position[index] = len(self.programs[module])
            self.programs[module].append(index)
        self.pops = [tuple(int(q) for q in popped_queues(i)) for i in instructions]
        self.pushes = [tuple(int(q) for q in pushed_queues(i)) for i in instructions]

        # fetch and dispatch: when each instruction's last beat arrived and when it
        # entered its module's command queue
        self.arrival = [0] * count
        self.dispatch = [0] * count
        self.fetched = self.dispatched = 0
        self.fetch_last_beat = 0

        # the modules: next position in the program, earliest next issue (None while
        # a LOAD's end is open), issue edges so far
        self.next_position = [0, 0, 0]
        self.free_at: list[int | None] = [0, 0, 0]
        self.issued: list[list[int]] = [[], [], []]
        self.starts = [0] * count
        self.ends = [0] * count
        self.scheduled: list[int] = []  # instruction indices in issue order

        # the token queues: the edge of every push and pop so far
        self.depth = model.config.token_queue_depth
        self.push_cycles: list[list[int]] = [[], [], [], []]
        self.pop_cycles: list[list[int]] = [[], [], [], []]

        # the read port's clients (0 compute DMA, 1 load DMA, 2 fetch): the edge from
        # which each requests (None: no request), and the LOAD each one streams
        self.valid: list[int | None] = [None, None, 1 if count else None]
        self.plans: list[tuple] = [(), (), ()]
        self.next_burst = [0, 0, 0]
        self.writer = [0, 0, 0]
        self.trailing = [0, 0, 0]
        self.owner = [0, 0, 0]
        # the arbiter and the read channel
        self.arbiter_free = 0
        self.last_grant = _COMPUTE_CLIENT
        self.last_beat = -1
        # every granted burst in grant order: its last beat and its address handshake
        # (seeded with bursts long past, so that a window of ``limit`` always exists)
        self.in_flight: list[int] = [-1] * self.limit
        self.hands: list[int] = [-1] * self.limit
        self.streak = 0  # bursts of ``last_grant`` granted in a row

        self.changed = True  # whether the modules' next issue times may have moved

    # --- the event loop -----------------------------------------------------------------
    def run(self) -> TimingReport:
        """Advance to the earlier of the next read-port grant and the next issue, until
        neither is left; raises _Stuck when an instruction never issues."""
        earliest_issue, next_grant = self.earliest_issue, self.next_grant
        grant, issue_ready = self.grant, self.issue_ready
        time = 0
        candidate = None
        while True:
            # the modules' next issue times change only with an issue, a completion or
            # a dispatch; bursts that complete nothing leave them as they were
            if self.changed:
                self.changed = False
                candidate = earliest_issue()
            choose = next_grant(time)
            if choose is not None and (candidate is None or choose < candidate):
                time = choose
                grant(time, candidate)
                continue
            if candidate is None:
                break
            time = candidate
            issue_ready(time)
        if any(self.next_position[m] < len(self.programs[m]) for m in (0, 1, 2)):
            raise _Stuck()
        return self.report()

    def report(self) -> TimingReport:
        """The figures of a finished run: totals per module and every instruction's
        issue and end, in issue order."""
        starts, ends, modules = self.starts, self.ends, self.modules
        timings = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
        for module in (0, 1, 2):
            previous_end = 0
            totals = timings[module]
            for index in self.programs[module]:
                totals[0] += 1
                totals[1] += ends[index] - starts[index]
                totals[2] += starts[index] - previous_end
                previous_end = ends[index]
        config = self.model.config
        return TimingReport(
            total_cycles=max(ends) + 1 if self.count else 0,
            modules={module: ModuleTiming(*timings[int(module)]) for module in Module},
            gemm_active_cycles=sum(gemm_active_cycles(i, config) for i in self.instructions),
            schedule=tuple(ScheduledInstruction(i, Module(modules[i]), starts[i], ends[i])
                           for i in self.scheduled),
        )

    # --- the modules and their token queues ---------------------------------------------
    def earliest_issue(self) -> int | None:
        """The earliest edge at which any module can issue its next instruction."""
        candidate = None
        issue_time = self.issue_time
        for module in (0, 1, 2):
            at = issue_time(module)
            if at is not None and (candidate is None or at < candidate):
                candidate = at
        return candidate

    def issue_time(self, module: int) -> int | None:
        """The edge from which ``module`` can issue its next instruction: once the module
        is free, the instruction dispatched, every queue it pops holds a token and every
        queue it pushes has room (None: not known yet, or nothing left)."""
        program = self.programs[module]
        at = self.next_position[module]
        if at >= len(program):
            return None
        index = program[at]
        time = self.free_at[module]
        if time is None or index >= self.dispatched:
            return None
        ready = self.dispatch[index] + 1
        if ready > time:
            time = ready
        push_cycles, pop_cycles = self.push_cycles, self.pop_cycles
        for queue in self.pops[index]:
            taken = len(pop_cycles[queue])
            pushed = push_cycles[queue]
            if taken >= len(pushed):
                return None
            if pushed[taken] > time:
                time = pushed[taken]
        for queue in self.pushes[index]:
            needs_pop = len(push_cycles[queue]) - self.depth
            if needs_pop >= 0:
                popped = pop_cycles[queue]
                if needs_pop >= len(popped):
                    return None
                if popped[needs_pop] + 1 > time:
                    time = popped[needs_pop] + 1
        return time

    def issue_ready(self, time: int) -> None:
        """Issue, module by module, every instruction that can issue by ``time``, and
        dispatch what the freed command-queue slots let in."""
        issue_time = self.issue_time
        for module in (0, 1, 2):
            while True:
                at = issue_time(module)
                if at is None or at > time:
                    break
                self.issue(module, at)
            self.advance_dispatch()

    def issue(self, module: int, time: int) -> None:
        """``module`` issues its next instruction at ``time``: it pops its tokens; GEMM,
        ALU, STORE and LOADs without data get their end now, a LOAD with data becomes
        its DMA's request on the read port and ends with its last burst."""
        index = self.programs[module][self.next_position[module]]
        self.next_position[module] += 1
        self.changed = True
        instruction = self.instructions[index]
        self.starts[index] = time
        self.issued[module].append(time)
        self.scheduled.append(index)
        for queue in self.pops[index]:
            self.pop_cycles[queue].append(time)
        model = self.model
        if isinstance(instruction, Load):
            bursts, run_last, after, pads = model._read_plan(instruction)
            if not bursts:
                self.complete(index, time + model.overhead - 1 + pads)
                return
            client = _LOAD_CLIENT if module == int(Module.LOAD) else _COMPUTE_CLIENT
            self.valid[client] = time
            self.plans[client] = (bursts, run_last)
            self.next_burst[client] = 0
            self.writer[client] = time + 1
            self.trailing[client] = after
            self.owner[client] = index
            self.free_at[module] = None
        elif isinstance(instruction, Store):
            self.complete(index, time + model._store_cost(instruction))
        else:
            self.complete(index, time + model._loop_cost(instruction))

    def complete(self, index: int, end: int) -> None:
        """Instruction ``index`` ends at ``end``: its module is free and its tokens are
        pushed from then."""
        self.changed = True
        self.ends[index] = end
        self.free_at[self.modules[index]] = end
        for queue in self.pushes[index]:
            self.push_cycles[queue].append(end)

    # --- instruction fetch and dispatch -------------------------------------------------
    def advance_dispatch(self) -> None:
        """Dispatch fetched instructions in order, each a cycle after its arrival and
        after the previous one, while its module's command queue has room."""
        arrival, dispatch, position = self.arrival, self.dispatch, self.position
        queue_cap = self.queue_cap
        while self.dispatched < self.fetched:
            index = self.dispatched
            time = arrival[index] + 1
            if index and dispatch[index - 1] + 1 > time:
                time = dispatch[index - 1] + 1
            ahead = position[index] - queue_cap
            if ahead >= 0:
                done = self.issued[self.modules[index]]
                if ahead >= len(done):
                    return
                time = max(time, done[ahead] + 1)
            dispatch[index] = time
            self.dispatched += 1
            self.changed = True

    def fetch_request(self) -> int | None:
        """Edge from which fetch requests its next burst: after the previous burst's
        last beat, once the staging queue has room for it (None: not yet known)."""
        size = min(self.fetch_burst, self.count - self.fetched)
        time = self.fetch_last_beat + 1
        needed = self.fetched - (self.staging - size)
        if needed > 0:
            if needed > self.dispatched:
                return None
            time = max(time, self.dispatch[needed - 1] + 1)
        return time

    def grant_fetch(self, edge: int) -> None:
        """The arbiter grants fetch a burst of instructions at ``edge``; their beats
        follow the latency and every earlier burst on the read channel."""
        handshake = edge + 1
        self.arbiter_free = handshake + 1
        self.last_grant = _FETCH_CLIENT
        first = max(handshake + self.model.latency, self.last_beat) + 1
        size = min(self.fetch_burst, self.count - self.fetched)
        insn_beats, beat, fetched = self.model.insn_beats, self.model.beat, self.fetched
        for k in range(size):
            self.arrival[fetched + k] = first + ((k + 1) * insn_beats - 1) * beat
        self.fetched = fetched + size
        self.last_beat = self.fetch_last_beat = first + (size * insn_beats - 1) * beat
        self.in_flight.append(self.last_beat)
        self.hands.append(handshake)
        self.streak = 0
        self.valid[_FETCH_CLIENT] = None
        self.advance_dispatch()

    # --- the shared read port -----------------------------------------------------------
    def next_grant(self, time: int) -> int | None:
        """The edge, from ``time`` on, at which the arbiter grants its next burst (None:
        no client requests); fetch's request is renewed first."""
        valid = self.valid
        if valid[_FETCH_CLIENT] is None and self.fetched < self.count:
            valid[_FETCH_CLIENT] = self.fetch_request()
        requests = [v for v in valid if v is not None]
        if not requests:
            return None
        choose = max(self.arbiter_free, min(requests) + 1, time)
        if self.in_flight[-self.limit] >= choose:
            choose = self.in_flight[-self.limit] + 1
        return choose

    def grant(self, time: int, candidate: int | None) -> None:
        """The arbiter grants at ``time``, round robin from the last grant among the
        clients requesting before it; a DMA winner keeps the port until another
        request, or the next issue at ``candidate``, competes."""
        valid = self.valid
        ready = [c for c in (0, 1, 2) if valid[c] is not None and valid[c] < time]
        last_grant = self.last_grant
        winner = min(ready, key=lambda c: (c - last_grant - 1) % 3)
        if winner == _FETCH_CLIENT:
            self.grant_fetch(time)
            return
        horizon = candidate
        for other in (0, 1, 2):
            if other != winner and valid[other] is not None:
                compete = max(valid[other] + 1, time + 2)
                horizon = compete if horizon is None else min(horizon, compete)
        self.stream_bursts(winner, time, horizon)

    def stream_bursts(self, client: int, edge: int, horizon: int | None) -> None:
        """Grant ``client``'s bursts from ``edge`` on, as long as no other client
        can compete (before ``horizon``); completes its LOAD after the last.

        Each burst's beats follow its address by the latency, the previous burst's
        beats on the channel and the LOAD's SRAM writer; at most ``limit`` bursts are
        in flight. Within a run of identical bursts the port settles into a periodic
        state (each window of ``limit`` bursts shifts every time by the same amount):
        once two windows show it, whole windows are skipped arithmetically."""
        latency, limit = self.model.latency, self.limit
        in_flight, hands = self.in_flight, self.hands
        bursts, run_last = self.plans[client]
        k, total = self.next_burst[client], len(bursts)
        write_at = self.writer[client]
        beat_at = self.last_beat
        choose = edge
        window = 2 * limit
        streak = self.streak if self.last_grant == client else 0
        while True:
            handshake = choose + 1
            pad, span = bursts[k]
            write_at += pad
            first = handshake + latency
            if beat_at > first:
                first = beat_at
            first += 1
            if write_at > first:
                first = write_at
            beat_at = first + span - 1
            write_at = beat_at + 1
            in_flight.append(beat_at)
            hands.append(handshake)
            streak += 1
            k += 1
            if k == total:
                break
            if (streak >= window <= k and run_last[k - window] >= k + limit - 1
                    and handshake - hands[-1 - limit] == beat_at - in_flight[-1 - limit]):
                windows = self.periodic_windows(run_last[k - window] - k + 1, handshake,
                                                horizon)
                if windows > 0:
                    jump = windows * (beat_at - in_flight[-1 - limit])
                    in_flight.extend([v + jump for v in in_flight[-window:]])
                    hands.extend([v + jump for v in hands[-window:]])
                    k += windows * limit
                    handshake += jump
                    beat_at += jump
                    write_at += jump
                    if k == total:
                        break
            # the next burst is valid after this handshake; the arbiter chooses
            # again one cycle after a handshake at the earliest
            choose = handshake + 1
            if in_flight[-limit] >= choose:
                choose = in_flight[-limit] + 1
            if horizon is not None and choose >= horizon:
                break
        self.streak = streak
        self.arbiter_free = handshake + 1
        self.last_grant = client
        self.last_beat = beat_at
        self.writer[client] = write_at
        self.next_burst[client] = k
        if k == total:
            self.valid[client] = None
            self.complete(self.owner[client],
                          write_at + self.trailing[client] + self.model.overhead - 2)
        else:
            self.valid[client] = handshake

    def periodic_windows(self, bursts_left: int, handshake: int, horizon: int | None) -> int:
        """How many windows of ``limit`` bursts can be skipped: 0 unless the last window
        repeats the one before it shifted by one amount; at most ``bursts_left`` bursts
        of the run, and none whose handshake would reach ``horizon``."""
        limit, in_flight = self.limit, self.in_flight
        shift = in_flight[-1] - in_flight[-1 - limit]
        if shift <= 0 or not all(in_flight[-i] - in_flight[-i - limit] == shift
                                 for i in range(2, limit + 1)):
            return 0
        windows = bursts_left // limit
        if horizon is not None:
            windows = min(windows, (horizon - handshake) // shift)
        return windows


def _row_offsets(dram_base: int, x_stride: int, rows: int, nbytes: int, unit: int,
                 boundary: int) -> tuple[int, int]:
    """Byte offsets past a boundary of a transfer's first row and between its rows, of
    whole tiles; (0, 0) when no row crosses a boundary, which splits every row alike."""
    first, stride = (dram_base * unit) % boundary, (x_stride * unit) % boundary
    if _rows_cross(first, stride, rows, nbytes, boundary):
        return first, stride
    return 0, 0


@functools.lru_cache(maxsize=8192)
def _rows_cross(first: int, stride: int, rows: int, nbytes: int, boundary: int) -> bool:
    if nbytes > boundary:
        return True
    if stride == 0 or rows == 1:
        return first + nbytes > boundary
    offsets = (first + np.arange(rows, dtype=np.int64) * stride) % boundary
    return bool((offsets + nbytes > boundary).any())


@functools.lru_cache(maxsize=4096)
def _store_cost(unit: int, bus: int, beat: int, latency: int, max_beats: int, boundary: int,
                window: int, first_offset: int, stride_offset: int, y_size: int,
                x_size: int) -> int:
    """Cycles from a STORE's issue to its end. It owns the write channels: beats leave
    one per beat time from its third cycle, a burst's beats wait while the memory
    holds ``window`` bursts unanswered, each burst is answered ``latency`` cycles
    after its last beat, and the STORE completes with the last answer."""
    answers: list[int] = []
    beat_at = 3
    for row in range(y_size):
        offset = (first_offset + row * stride_offset) % boundary
        for beats, _ in _row_bursts(offset, x_size * unit, False, bus, max_beats, boundary):
            if len(answers) >= window:
                beat_at = max(beat_at, answers[-window] + 1)
            last = beat_at + (beats - 1) * beat
            answers.append(last + latency)
            beat_at = last + beat
    return answers[-1] + 2


@functools.lru_cache(maxsize=4096)
def _read_plan(word_mode: bool, unit: int, bus: int, beat: int, max_beats: int, boundary: int,
               first_offset: int, stride_offset: int, y_size: int, x_size: int, top: int,
               bottom: int, left: int, right: int
               ) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...], int, int]:
    """See _SharedPortModel._read_plan; also, for each burst, the index of the last
    burst of the run of identical bursts it starts. Cached: tiled programs repeat
    shapes."""
    entry = 1 if word_mode else unit // bus
    cols = left + x_size + right
    if y_size * x_size == 0:
        return (), (), 0, (top + y_size + bottom) * cols * entry
    nbytes = x_size * unit
    between = (right + left) * entry

    def row(offset: int, pad: int) -> list[tuple[int, int]]:
        spans = [(0, max(writes, (beats - 1) * beat + 1)) for beats, writes
                 in _row_bursts(offset, nbytes, word_mode, bus, max_beats, boundary)]
        spans[0] = (pad, spans[0][1])
        return spans

    offsets = (first_offset + np.arange(y_size, dtype=np.int64) * stride_offset) % boundary
    bursts = row(int(offsets[0]), (top * cols + left) * entry)
    if y_size > 1 and not word_mode and bool((offsets[1:] + nbytes <= boundary).all()):
        # rows of whole beats that stay inside one boundary window split alike
        bursts += row(0, between) * (y_size - 1)
    else:
        for offset in offsets[1:].tolist():
            bursts += row(offset, between)
    run_last = [0] * len(bursts)
    last = len(bursts) - 1
    for index in range(len(bursts) - 1, -1, -1):
        if index < len(bursts) - 1 and bursts[index] != bursts[index + 1]:
            last = index
        run_last[index] = last
    return tuple(bursts), tuple(run_last), (right + bottom * cols) * entry, 0


class _Stuck(Exception):
    """The shared-port model cannot go on (see _SharedPortModel.run)."""


def _deadlock_message(
    instructions: Sequence[Instruction],
    blocked: dict[Module, int],
    push_cycles: dict[Queue, list[int]],
    pop_cycles: dict[Queue, list[int]],
    depth: int,
) -> str:
    occupancy = {queue: len(push_cycles[queue]) - len(pop_cycles[queue]) for queue in Queue}
    lines = ["the stream deadlocks: no module can issue its next instruction"]
    for module, index in blocked.items():
        instruction = instructions[index]
        reasons = [
            f"a token on {queue.name} (empty)"
            for queue in popped_queues(instruction)
            if occupancy[queue] <= 0
        ] + [
            f"a free slot on {queue.name} (full at depth {depth})"
            for queue in pushed_queues(instruction)
            if occupancy[queue] >= depth
        ]
        lines.append(
            f"  {module.name.lower()} module: instruction {index} "
            f"({OPCODE_OF[type(instruction)].name}) waits for {' and '.join(reasons)}"
        )
    lines.append(
        "  queue depths: " + ", ".join(f"{q.name}={occupancy[q]}" for q in Queue)
    )
    lines.append("fix the pop/push flags so that every pop has an earlier matching push")
    return "\n".join(lines)

