"""The work of the accelerator streams a real network compiles to, against the
stream work budget (HardwareConfig.max_stream_*, docs/isa.md section 6, rule 9).

    python benchmarks/vta_stream_work.py [--model resnet18] [--size 224]

Quantizes the model with onnxruntime's quantize_static (QDQ, int8, per-channel
weights; benchmarks/vta_resnet18.py), compiles it for ``vta,llvm`` and prints, over
its accelerator functions, the largest instruction count, DMA tiles and GEMM/ALU
iterations of one stream, their totals, and how far each maximum is below the
default budget.
"""

from __future__ import annotations

import argparse
import os
import sys

import heterocc
from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.validation import instruction_work
from heterocc.targets.vta import VtaTarget

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402
from vta_resnet18 import quantized  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--size", type=int, default=224)
    args = parser.parse_args(argv)
    print(describe())
    target = VtaTarget()
    heterocc.compile(quantized(args.model, False, args.size, "qdq", "int8", False),
                     target=[target, "llvm"])
    rows = []
    for kernel in target.kernels:
        work = [instruction_work(i) for i in kernel.program.instructions]
        rows.append((len(work), sum(w.tiles for w in work), sum(w.iterations for w in work)))
    budget = HardwareConfig()
    limits = (budget.max_stream_instructions, budget.max_stream_tiles,
              budget.max_stream_iterations)
    print(f"{args.model} at {args.size}: {len(rows)} accelerator functions")
    for position, what in enumerate(("instructions", "DMA tiles", "GEMM/ALU iterations")):
        largest = max(row[position] for row in rows)
        total = sum(row[position] for row in rows)
        print(f"  {what:>20}: largest stream {largest:>10,}  all streams {total:>11,}  "
              f"default budget {limits[position]:>11,} ({limits[position] / largest:,.0f}x "
              "the largest)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
