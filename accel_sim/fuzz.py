"""Mutation fuzzing of the accelerator's device boundary.

Real streams (the reference programs, the accelerator target's compiled kernels)
are mutated — truncated, bit-flipped, given negative or huge fields, illegal
opcodes or enumeration values, broken token flags, instructions dropped,
duplicated or swapped, or random micro-op words in DRAM — and each mutant goes
through every entry point a stream reaches: decode, the checker, the timing
model, ``run_stream(..., check=False)`` and :meth:`FunctionalSimulator.execute`
one instruction at a time. The DRAM array lies inside a larger array whose guard
bytes on both sides must still hold their pattern afterwards (an out-of-bounds
write would change them), and every stream runs under a wall-clock limit (a hang
is reported, not waited for).

The only acceptable outcomes at each stage are success and a refusal by one of
the project's own exceptions (:class:`heterocc.errors.HeteroccError`): anything
else is a crash. ``tools/stream_fuzz.py`` prints the counts; the CI test
``tests/accel_sim/test_stream_fuzz.py`` asserts that crashes, out-of-bounds
writes and hangs are all zero.
"""

from __future__ import annotations

import collections
import dataclasses
import signal
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..errors import HeteroccError
from .checker import find_stream_errors
from .config import UOP_BYTES, HardwareConfig
from .encoding import INSTRUCTION_BYTES, decode_stream, encode_stream
from .functional import FunctionalSimulator
from .isa import DEPENDENCY_FLAGS, OPCODE_OF, AluOp, Buffer, Instruction, Load, isa_layout
from .program import Program
from .reference_programs import (
    GemmTiling,
    Requantization,
    padded_conv3x3_program,
    tiled_gemm_program,
)
from .simulator import run_stream
from .timing import schedule_stream
from .validation import instruction_work

#: the byte every guard byte around the fuzzed DRAM holds
GUARD_PATTERN = 0xA5
#: guard bytes on each side of the DRAM array
GUARD_BYTES = 1 << 16
#: the stages a mutant goes through, in order
STAGES = ("decode", "check", "timing", "run_unchecked", "execute")


@dataclass(frozen=True)
class Seed:
    """A real stream to mutate: its config, instructions and DRAM image."""

    name: str
    config: HardwareConfig
    instructions: tuple[Instruction, ...]
    dram: np.ndarray

    @classmethod
    def from_program(cls, name: str, program: Program) -> Seed:
        """The stream and image of a built program."""
        return cls(name, program.config, tuple(program.instructions), program.dram.copy())


@dataclass(frozen=True)
class Mutant:
    """One mutated stream: as bytes (when the mutation works on words, so decode is
    exercised) or as instruction records (fields no word can hold: negative, huge)."""

    seed: Seed
    mutation: str
    words: bytes | None = None
    records: tuple[Instruction, ...] | None = None
    #: a mutated DRAM image (micro-op words), None: the seed's
    dram: np.ndarray | None = None

    @property
    def image(self) -> np.ndarray:
        """The DRAM image the mutant runs against."""
        return self.seed.dram if self.dram is None else self.dram


@dataclass
class Outcome:
    """What each stage did with one mutant: "ok", "refused:<what>" or "crash:<what>";
    plus whether DRAM's guard bytes changed and whether the time limit ran out."""

    mutant: Mutant
    stages: dict[str, str] = field(default_factory=dict)
    out_of_bounds: bool = False
    hang: bool = False
    seconds: float = 0.0
    #: the checker's peak traced memory (with ``run_mutant(..., measure_checker=True)``)
    checker_peak_bytes: int = 0

    @property
    def crashed(self) -> bool:
        """Whether any stage raised something other than the project's errors."""
        return any(result.startswith("crash:") for result in self.stages.values())


def reference_seeds(config: HardwareConfig | None = None) -> list[Seed]:
    """Seeds from the reference programs: tiled GEMMs with one and two virtual threads
    (one with a requantizing ALU epilogue stored through OUT) and a padded 3x3
    convolution whose micro-ops walk the kernel window."""
    config = config or HardwareConfig()
    rng = np.random.default_rng(0)

    def int8(*shape: int) -> np.ndarray:
        return rng.integers(-128, 128, shape).astype(np.int8)

    m, n, k = 4 * config.batch, 4 * config.block_out, 4 * config.block_in
    epilogue = Requantization(
        bias=rng.integers(-1000, 1000, n), limit=np.full(n, 1 << 20),
        multiplier=rng.integers(1, 1 << 10, n), rounding=np.full(n, 1 << 9),
        shift=np.full(n, 10), zero_point=3, qmin=-128, qmax=127)
    channels = config.block_in
    return [
        Seed.from_program("gemm_1thread", tiled_gemm_program(
            config, int8(m, k), int8(n, k), 1, GemmTiling(2, 2, 2))),
        Seed.from_program("gemm_2threads", tiled_gemm_program(
            config, int8(m, k), int8(n, k), 2, GemmTiling(2, 2, 2))),
        Seed.from_program("gemm_epilogue", tiled_gemm_program(
            config, int8(m, k), int8(n, k), 2, GemmTiling(2, 2, 2), Buffer.OUT, epilogue)),
        Seed.from_program("conv3x3", padded_conv3x3_program(
            config, int8(4 * 4, channels), int8(config.block_out, 9 * channels), 4, 4,
            pad_value=-5)),
    ]


# --- mutations ----------------------------------------------------------------------

#: extreme values for record fields (beyond what a word's field can hold, too)
_EXTREMES = (-1, -(1 << 15), -(1 << 31), -(1 << 63), 1 << 16, 1 << 32, 1 << 40, 1 << 70)


def _words(seed: Seed) -> bytearray:
    return bytearray(encode_stream(seed.instructions, seed.config))


def _truncate(seed: Seed, rng: np.random.Generator) -> Mutant:
    data = _words(seed)
    return Mutant(seed, "truncate", words=bytes(data[: int(rng.integers(0, len(data)))]))


def _bit_flips(seed: Seed, rng: np.random.Generator) -> Mutant:
    data = _words(seed)
    for _ in range(int(rng.integers(1, 9))):
        bit = int(rng.integers(0, len(data) * 8))
        data[bit // 8] ^= 1 << (bit % 8)
    return Mutant(seed, "bit_flip", words=bytes(data))


def _set_bits(data: bytearray, word: int, offset: int, width: int, value: int) -> None:
    start = word * INSTRUCTION_BYTES
    bits = int.from_bytes(data[start: start + INSTRUCTION_BYTES], "little")
    mask = ((1 << width) - 1) << offset
    bits = (bits & ~mask) | ((value << offset) & mask)
    data[start: start + INSTRUCTION_BYTES] = bits.to_bytes(INSTRUCTION_BYTES, "little")


def _field_word(seed: Seed, rng: np.random.Generator) -> Mutant:
    """A field of one word set to its largest value, zero, or random bits."""
    data = _words(seed)
    word = int(rng.integers(0, len(seed.instructions)))
    opcode = OPCODE_OF[type(seed.instructions[word])]
    fields = isa_layout(seed.config).fields(opcode)[5:]
    if not fields:
        return _bit_flips(seed, rng)
    chosen = fields[int(rng.integers(0, len(fields)))]
    value = int(rng.choice([chosen.maximum if not chosen.signed else -1, 0,
                            int(rng.integers(0, 1 << chosen.width))]))
    _set_bits(data, word, chosen.offset, chosen.width, value)
    return Mutant(seed, f"field_word:{chosen.name}", words=bytes(data))


def _illegal_code(seed: Seed, rng: np.random.Generator) -> Mutant:
    """An opcode (5-7), a buffer or an ALU op code no instruction has, or a reserved
    bit set."""
    data = _words(seed)
    word = int(rng.integers(0, len(seed.instructions)))
    choice = int(rng.integers(0, 3))
    if choice == 0:
        _set_bits(data, word, 0, 3, int(rng.integers(5, 8)))
        return Mutant(seed, "illegal_code:opcode", words=bytes(data))
    if choice == 1:
        # bits 7-9 hold a LOAD/STORE's buffer and an ALU's alu_op: a code neither has
        unknown = [code for code in range(8) if code not in set(Buffer) | set(AluOp)]
        _set_bits(data, word, 7, 3, int(rng.choice(unknown)))
        return Mutant(seed, "illegal_code:buffer_or_alu_op", words=bytes(data))
    _set_bits(data, word, 127, 1, 1)
    return Mutant(seed, "illegal_code:reserved_bit", words=bytes(data))


def _token_flags(seed: Seed, rng: np.random.Generator) -> Mutant:
    """Dependency flags toggled on a few instructions (imbalance, deadlock)."""
    records = list(seed.instructions)
    for _ in range(int(rng.integers(1, 4))):
        at = int(rng.integers(0, len(records)))
        flag = DEPENDENCY_FLAGS[int(rng.integers(0, len(DEPENDENCY_FLAGS)))]
        records[at] = dataclasses.replace(records[at], **{flag: not getattr(records[at], flag)})
    return Mutant(seed, "token_flags", words=encode_stream(records, seed.config))


def _reorder(seed: Seed, rng: np.random.Generator) -> Mutant:
    """An instruction dropped, duplicated, or two swapped."""
    records = list(seed.instructions)
    at = int(rng.integers(0, len(records)))
    kind = ("drop", "duplicate", "swap")[int(rng.integers(0, 3))]
    if kind == "drop":
        del records[at]
    elif kind == "duplicate":
        records.insert(at, records[at])
    else:
        other = int(rng.integers(0, len(records)))
        records[at], records[other] = records[other], records[at]
    return Mutant(seed, f"reorder:{kind}", words=encode_stream(records, seed.config))


def _field_record(seed: Seed, rng: np.random.Generator) -> Mutant:
    """A record field (no encoding in between) set to a negative or huge value."""
    records = list(seed.instructions)
    at = int(rng.integers(0, len(records)))
    names = [f.name for f in dataclasses.fields(records[at]) if f.name not in DEPENDENCY_FLAGS]
    if not names:
        return _token_flags(seed, rng)
    name = names[int(rng.integers(0, len(names)))]
    value = int(_EXTREMES[int(rng.integers(0, len(_EXTREMES)))])
    records[at] = dataclasses.replace(records[at], **{name: value})
    return Mutant(seed, f"field_record:{name}", records=tuple(records))


def _micro_ops(seed: Seed, rng: np.random.Generator) -> Mutant:
    """Random words where the stream's LOAD UOPs read their micro-ops: tile indices
    past a buffer, GEMMs and ALUs that name other tiles (ALU write hazards)."""
    slots = [
        (instruction.dram_base + row * instruction.x_stride + column) * UOP_BYTES
        for instruction in seed.instructions
        if isinstance(instruction, Load) and instruction.buffer == Buffer.UOP
        for row in range(instruction.y_size) for column in range(instruction.x_size)
    ]
    if not slots:
        return _bit_flips(seed, rng)
    image = seed.dram.copy()
    for _ in range(int(rng.integers(1, 4))):
        at = slots[int(rng.integers(0, len(slots)))]
        word = int(image[at: at + UOP_BYTES].view("<u4")[0])
        # a random word, or one field's bits flipped
        word = int(rng.integers(0, 1 << 32)) if rng.integers(0, 2) else \
            word ^ (1 << int(rng.integers(0, 32)))
        image[at: at + UOP_BYTES] = np.frombuffer(word.to_bytes(UOP_BYTES, "little"), np.uint8)
    return Mutant(seed, "micro_ops", words=encode_stream(seed.instructions, seed.config),
                  dram=image)


#: every mutation, by the name the outcome counts use
MUTATIONS: dict[str, Callable[[Seed, np.random.Generator], Mutant]] = {
    "truncate": _truncate,
    "bit_flip": _bit_flips,
    "field_word": _field_word,
    "illegal_code": _illegal_code,
    "token_flags": _token_flags,
    "reorder": _reorder,
    "field_record": _field_record,
    "micro_ops": _micro_ops,
}


def mutants(seeds: Sequence[Seed], count: int, seed: int = 0) -> Iterator[Mutant]:
    """``count`` mutants, the mutations and the seeds in turn, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    kinds = list(MUTATIONS.values())
    for number in range(count):
        yield kinds[number % len(kinds)](seeds[(number // len(kinds)) % len(seeds)], rng)


# --- running one mutant ---------------------------------------------------------------


class _TimeLimit(BaseException):
    """Raised by the alarm when a mutant runs past its wall-clock limit (a BaseException,
    so that no ``except Exception`` on the way swallows it)."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def expire(signum, frame):
        raise _TimeLimit()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _stage(stages: dict[str, str], name: str, action: Callable[[], object]) -> object:
    try:
        result = action()
    except HeteroccError as error:
        stages[name] = f"refused:{refusal_kind(error)}"
        return None
    except Exception as error:  # noqa: BLE001 -- the fuzzer's whole point is to see it
        stages[name] = f"crash:{type(error).__name__}: {error}"[:300]
        return None
    stages[name] = "ok"
    return result


def refusal_kind(error: HeteroccError) -> str:
    """The error's class, and the field it names when it names one."""
    name = type(error).__name__
    field_name = getattr(error, "field", None)
    return f"{name}[{field_name}]" if field_name else name


class GuardedDram:
    """A DRAM array inside guard bytes that reveal any write outside it."""

    def __init__(self, size: int):
        self.backing = np.full(size + 2 * GUARD_BYTES, GUARD_PATTERN, dtype=np.uint8)
        self.dram = self.backing[GUARD_BYTES: GUARD_BYTES + size]

    def intact(self) -> bool:
        """Whether both guards still hold their pattern."""
        return bool((self.backing[:GUARD_BYTES] == GUARD_PATTERN).all()
                    and (self.backing[-GUARD_BYTES:] == GUARD_PATTERN).all())


def run_mutant(mutant: Mutant, config: HardwareConfig | None = None,
               time_limit_s: float = 10.0, measure_checker: bool = False) -> Outcome:
    """Every stage on one mutant (``config`` overrides the seed's, e.g. a smaller budget;
    ``measure_checker`` traces the checker's peak memory, which slows it down)."""
    config = config or mutant.seed.config
    outcome = Outcome(mutant)
    stages = outcome.stages
    memory = GuardedDram(mutant.image.size)
    started = time.perf_counter()
    try:
        with _time_limit(time_limit_s):
            if mutant.words is not None:
                decoded = _stage(stages, "decode", lambda: decode_stream(mutant.words, config))
                if decoded is None:
                    return outcome
                instructions = decoded
            else:
                instructions = list(mutant.records)
            size = memory.dram.size
            if measure_checker:
                tracemalloc.start()
            errors = _stage(stages, "check",
                            lambda: find_stream_errors(instructions, config, size))
            if measure_checker:
                outcome.checker_peak_bytes = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            if errors:
                stages["check"] = f"refused:{refusal_kind(errors[0])}"
            _stage(stages, "timing", lambda: schedule_stream(instructions, config))
            memory.dram[:] = mutant.image
            _stage(stages, "run_unchecked",
                   lambda: run_stream(instructions, config, memory.dram, check=False))
            memory.dram[:] = mutant.image
            _stage(stages, "execute", lambda: _execute_in_order(instructions, config, memory))
    except _TimeLimit:
        outcome.hang = True
    finally:
        if tracemalloc.is_tracing():
            tracemalloc.stop()
        outcome.seconds = time.perf_counter() - started
        outcome.out_of_bounds = not memory.intact()
    return outcome


def _execute_in_order(instructions: Sequence[Instruction], config: HardwareConfig,
                      memory: GuardedDram) -> None:
    """Each instruction straight to the functional simulator, in stream order (no
    checker, no timing model in front of it)."""
    machine = FunctionalSimulator(config, memory.dram)
    for index, instruction in enumerate(instructions):
        machine.execute(instruction, index)


@dataclass
class Tally:
    """Counts over many outcomes."""

    streams: int = 0
    crashes: list[Outcome] = field(default_factory=list)
    out_of_bounds: list[Outcome] = field(default_factory=list)
    hangs: list[Outcome] = field(default_factory=list)
    by_stage: dict[str, collections.Counter] = field(
        default_factory=lambda: {stage: collections.Counter() for stage in STAGES})
    by_mutation: collections.Counter = field(default_factory=collections.Counter)
    slowest_s: float = 0.0
    checker_peak_bytes: int = 0

    def add(self, outcome: Outcome) -> None:
        """Count one outcome."""
        self.streams += 1
        self.by_mutation[outcome.mutant.mutation.split(":")[0]] += 1
        self.slowest_s = max(self.slowest_s, outcome.seconds)
        self.checker_peak_bytes = max(self.checker_peak_bytes, outcome.checker_peak_bytes)
        if outcome.crashed:
            self.crashes.append(outcome)
        if outcome.out_of_bounds:
            self.out_of_bounds.append(outcome)
        if outcome.hang:
            self.hangs.append(outcome)
        for stage, result in outcome.stages.items():
            self.by_stage[stage][result.split(":", 2)[0] if result.startswith("crash")
                                 else result] += 1


def fuzz(seeds: Sequence[Seed], count: int, seed: int = 0,
         config: Callable[[Seed], HardwareConfig] | None = None,
         time_limit_s: float = 10.0, measure_checker: bool = False) -> Tally:
    """Run ``count`` deterministic mutants of ``seeds``; ``config`` picks each seed's
    config (by default its own)."""
    tally = Tally()
    for mutant in mutants(seeds, count, seed):
        tally.add(run_mutant(mutant, config(mutant.seed) if config else None, time_limit_s,
                             measure_checker))
    return tally


def budget_for(seed: Seed, headroom: int = 4) -> HardwareConfig:
    """The seed's config with a work budget ``headroom`` times the seed's own work (at
    least one tile and one iteration per instruction), so that mutants that ask for
    more are refused quickly."""
    tiles = iterations = 0
    for instruction in seed.instructions:
        work = instruction_work(instruction)
        tiles += work.tiles
        iterations += work.iterations
    count = len(seed.instructions)
    return dataclasses.replace(
        seed.config,
        max_stream_instructions=headroom * max(count, 1),
        max_stream_tiles=headroom * max(tiles, count),
        max_stream_iterations=headroom * max(iterations, count),
    )


__all__ = [
    "GUARD_BYTES",
    "MUTATIONS",
    "STAGES",
    "GuardedDram",
    "Mutant",
    "Outcome",
    "Seed",
    "Tally",
    "budget_for",
    "fuzz",
    "mutants",
    "reference_seeds",
    "refusal_kind",
    "run_mutant",
]
