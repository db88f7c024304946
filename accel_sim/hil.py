"""Hardware in the loop: run accelerator streams on the simulator and on the RTL,
compare DRAM bit for bit, report cycles, and on a mismatch name the first
instruction whose effect differs.

The divergence search bisects over *execution prefixes*: the first ``k``
instructions in the order the timing model issues them. Such a prefix is a
per-module prefix of the stream whose every popped token is pushed inside it,
so it runs on any implementation exactly as it does in the full stream. A tail
appended to it waits for every module and stores the whole accumulator buffer
to a dump area, so a wrong GEMM or ALU shows up at once, not only at the next
STORE. The reported instruction is the one whose addition first makes the
simulator and the RTL disagree.

``heterocc hil STREAM [--dram IMAGE] [--simulator verilator|icarus]`` is the
command-line face (:func:`add_hil_parser`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import AcceleratorError, InputError
from .checker import check_stream
from .config import UOP_BYTES, HardwareConfig
from .encoding import encode_uops, format_instruction, read_stream_file
from .functional import dma_dram_span
from .isa import (
    Buffer,
    DmaInstruction,
    Finish,
    Gemm,
    Instruction,
    Load,
    MicroOp,
    Queue,
    Store,
    popped_queues,
    pushed_queues,
)
from .rtl_device import (
    BENCH_MEMORY,
    SIMULATORS,
    BenchMemory,
    RtlRun,
    RtlSimulator,
    bench_capacity_bytes,
    bench_timing_config,
)
from .simulator import run_stream
from .timing import schedule_stream


@dataclass(frozen=True)
class StreamComparison:
    """The outcome of one stream on both sides.

    ``first_divergence`` is the index (in the stream) of the first instruction
    whose effect differs, or None when DRAM agrees.
    """

    name: str
    instructions: int
    matches: bool
    rtl_cycles: int
    model_cycles: int
    first_divergence: int | None = None
    divergence_detail: str = ""

    def summary(self) -> str:
        """One line, plus the divergence when there is one."""
        ratio = self.rtl_cycles / self.model_cycles if self.model_cycles else float("nan")
        verdict = "agrees" if self.matches else "DIFFERS"
        line = (
            f"{self.name}: {self.instructions} instructions, DRAM {verdict}; RTL "
            f"{self.rtl_cycles} cycles, timing model {self.model_cycles} (ratio {ratio:.3f})"
        )
        if self.first_divergence is not None:
            line += (
                f"\n  first differing instruction: {self.first_divergence}: "
                f"{self.divergence_detail}"
            )
        return line


def simulate(
    instructions: Sequence[Instruction], config: HardwareConfig, dram: np.ndarray
) -> tuple[np.ndarray, int]:
    """DRAM after the stream and the timing model's cycles (the stream is not re-checked)."""
    after = dram.copy()
    report = run_stream(instructions, config, after, check=False)
    return after, report.timing.total_cycles


def _no_op_gemm(**flags: bool) -> Gemm:
    return Gemm(uop_begin=0, uop_end=0, loop_outer=0, loop_inner=0, **flags)


def _no_op_store(**flags: bool) -> Store:
    return Store(buffer=Buffer.ACC, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0,
                 **flags)


def prefix_with_dump(
    instructions: Sequence[Instruction],
    positions: Sequence[int],
    config: HardwareConfig,
    dump_tile: int,
) -> list[Instruction]:
    """The instructions at ``positions`` (an execution prefix), then a tail that
    stores the whole accumulator buffer at ACC tile ``dump_tile`` and finishes
    once every STORE is done.

    Tokens the prefix leaves on the compute<->store queues are drained first, so
    that the dump waits for the last compute instruction and FINISH for the dump.
    """
    chosen = [instructions[position] for position in sorted(positions)]
    balance = dict.fromkeys(Queue, 0)
    for instruction in chosen:
        for queue in pushed_queues(instruction):
            balance[queue] += 1
        for queue in popped_queues(instruction):
            balance[queue] -= 1
    tail: list[Instruction] = [
        _no_op_store(pop_prev=True) for _ in range(balance[Queue.COMPUTE_TO_STORE])
    ]
    tail += [_no_op_gemm(pop_next=True) for _ in range(balance[Queue.STORE_TO_COMPUTE])]
    tail += [
        _no_op_gemm(push_next=True),
        Store(buffer=Buffer.ACC, sram_base=0, dram_base=dump_tile, y_size=1,
              x_size=config.acc_depth, x_stride=config.acc_depth, pop_prev=True,
              push_prev=True),
        Finish(pop_next=True),
    ]
    return chosen + tail


def _differs(rtl_dram: np.ndarray, simulated: np.ndarray) -> bool:
    return not np.array_equal(rtl_dram[: simulated.size], simulated)


def find_first_divergence(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    dram: np.ndarray,
    rtl: RtlSimulator,
) -> int:
    """Stream index of the first instruction (in execution order) whose effect differs.

    Assumes the full stream differs. Bisects over execution prefixes, one RTL run each.
    """
    body = [instruction for instruction in instructions if not isinstance(instruction, Finish)]
    order = schedule_stream(body, config).execution_order()
    dump_address = -(-dram.size // 4096) * 4096
    dump_tile = dump_address // config.acc_tile_bytes
    image = np.zeros(dump_address + config.acc_depth * config.acc_tile_bytes, np.uint8)
    image[: dram.size] = dram

    def prefix_differs(length: int) -> bool:
        stream = prefix_with_dump(body, order[:length], config, dump_tile)
        expected, model_cycles = simulate(stream, config, image)
        run = RtlRun.for_stream(image, stream, config, max_cycles=20 * model_cycles + 10_000)
        result = rtl.run([run])[0]
        return not result.done or _differs(result.dram, expected)

    agreeing, differing = 0, len(order)
    while differing - agreeing > 1:
        middle = (agreeing + differing) // 2
        if prefix_differs(middle):
            differing = middle
        else:
            agreeing = middle
    return order[differing - 1]


def model_timing(config: HardwareConfig, rtl: RtlSimulator) -> HardwareConfig:
    """``config`` with the timing of ``rtl`` on its bench memory (when it has one), so
    that the timing model predicts the RTL's own cycle counter."""
    memory = getattr(rtl, "memory", None)
    return config if memory is None else bench_timing_config(config, memory)


def compare_stream(
    name: str,
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    dram: np.ndarray,
    rtl: RtlSimulator,
    locate: bool = True,
) -> StreamComparison:
    """Run one stream on both sides; on a mismatch, optionally locate the divergence.

    The model's cycles are for the RTL on ``rtl``'s bench memory (:func:`model_timing`).
    The stream is checked against ``dram`` first: the RTL only runs checked streams.
    """
    check_stream(instructions, config, dram_bytes=dram.size)
    expected, model_cycles = simulate(instructions, model_timing(config, rtl), dram)
    run = RtlRun.for_stream(dram, instructions, config, max_cycles=20 * model_cycles + 10_000)
    result = rtl.run([run])[0]
    matches = result.done and not _differs(result.dram, expected)
    comparison = StreamComparison(name, len(instructions), matches, result.cycles, model_cycles)
    if matches or not locate:
        return comparison
    index = find_first_divergence(instructions, config, dram, rtl)
    return replace(
        comparison,
        first_divergence=index,
        divergence_detail=format_instruction(instructions[index]),
    )


def dram_for_stream(
    instructions: Sequence[Instruction],
    uops: Sequence[MicroOp],
    config: HardwareConfig,
    seed: int = 0,
    max_bytes: int | None = None,
) -> np.ndarray:
    """A DRAM image for a stream file that came without one.

    Every byte a LOAD reads gets random data, except the words LOAD UOP reads:
    they get the file's micro-ops, in address order, which is how ProgramBuilder
    and the compiler lay out kernels. Raises InputError when the counts disagree,
    and IllegalInstructionError for a stream that is not valid or would need an
    image larger than ``max_bytes`` (by default the RTL bench memory's capacity: the
    image's size comes from the stream's own fields, so they are bounded before
    anything is allocated).
    """
    if max_bytes is None:
        max_bytes = bench_capacity_bytes(config)
    check_stream(instructions, config, dram_bytes=max_bytes)
    rng = np.random.default_rng(seed)
    end = 0
    uop_words: set[int] = set()
    for instruction in instructions:
        if not isinstance(instruction, DmaInstruction):
            continue
        first, last = dma_dram_span(instruction, config)
        end = max(end, last)
        if isinstance(instruction, Load) and instruction.buffer == Buffer.UOP:
            for row in range(instruction.y_size):
                start = instruction.dram_base + row * instruction.x_stride
                uop_words.update(range(start, start + instruction.x_size))
    image = rng.integers(0, 256, end, dtype=np.uint8)
    if len(uop_words) != len(uops):
        raise InputError(
            f"the stream's LOAD UOP instructions read {len(uop_words)} micro-op words but the "
            f"file holds {len(uops)} micro-ops; pass the program's DRAM image with --dram"
        )
    words = encode_uops(uops, config)
    for address, word in zip(sorted(uop_words), words):
        image[address * UOP_BYTES : (address + 1) * UOP_BYTES] = np.frombuffer(
            word.tobytes(), np.uint8
        )
    return image


def run_hil(
    stream_path: str | Path,
    dram_path: str | Path | None = None,
    simulator: str = "verilator",
    build_root: str | Path | None = None,
    memory: BenchMemory = BENCH_MEMORY,
) -> StreamComparison:
    """Run a stream file on the simulator and the RTL (its DRAM answering after
    ``memory.latency`` cycles) and compare them."""
    stream = read_stream_file(stream_path)
    if dram_path is not None:
        dram = np.fromfile(dram_path, dtype=np.uint8)
    else:
        dram = dram_for_stream(stream.instructions, stream.uops, stream.config)
    check_stream(stream.instructions, stream.config, dram_bytes=dram.size)
    rtl = RtlSimulator(stream.config, simulator, build_root, memory)
    return compare_stream(Path(stream_path).name, stream.instructions, stream.config, dram, rtl)


def add_hil_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``hil``: run a stream on the simulator and on the RTL and compare."""
    parser = subparsers.add_parser(
        "hil",
        help="hardware in the loop: an accelerator stream on the simulator and the RTL, or a "
             "model on a target's device checked layer by layer against the references",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("stream", help="stream file (heterocc accel format, docs/isa.md), or "
                        "an ONNX model run on the --target accelerator")
    parser.add_argument("--dram", help="raw DRAM image the stream runs against (address 0)")
    parser.add_argument("--device", choices=["rtl", "target"],
                        help="rtl: the stream, or a model's accelerator streams, on the RTL "
                             "(the default for streams, and for models of a target with a "
                             "hil_command hook); target: a model on the --target's own device, "
                             "checked layer by layer against the NumPy references")
    parser.add_argument("--simulator", default="verilator", choices=SIMULATORS,
                        help="HDL simulator for the RTL")
    parser.add_argument("--build-dir", help="RTL build folder (default hw/build)")
    parser.add_argument("--latency", type=int, default=BENCH_MEMORY.latency,
                        help="cycles the bench's DRAM takes to answer a burst "
                        f"(default {BENCH_MEMORY.latency})")
    parser.set_defaults(func=_hil_command)
    return parser


def _hil_command(args: argparse.Namespace) -> int:
    try:
        comparison = run_hil(args.stream, args.dram, args.simulator, args.build_dir,
                             BenchMemory(args.latency))
    except AcceleratorError as exc:
        print(f"error: {exc}")
        return 2
    print(comparison.summary())
    return 0 if comparison.matches else 1


__all__ = [
    "StreamComparison",
    "add_hil_parser",
    "compare_stream",
    "dram_for_stream",
    "find_first_divergence",
    "main",
    "model_timing",
    "prefix_with_dump",
    "run_hil",
    "simulate",
]


def main(argv: list[str] | None = None) -> int:
    """``python -m heterocc.accel_sim.hil hil STREAM ...`` (the same as ``heterocc hil``)."""
    parser = argparse.ArgumentParser(prog="heterocc")
    add_hil_parser(parser.add_subparsers(required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
