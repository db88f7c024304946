"""Tile variants of one blocked convolution on the CPU, each layer's kernel timed alone
(without its layout transforms) in alternating rounds on this process's CPU clock, one
thread. Prints each variant's median, GFLOP/s and ratio to the first. Run:

    python benchmarks/conv_tiles.py [--channels 64] [--size 56] [--filters 64]
        [--kernel 3] [--stride 1] [--target "llvm -mattr=-avx512f"]
        [--variants "default;5,1;6,1"] [--repeat 40]

A variant is ``default`` (the schedule's own tiles) or ``columns,channel_blocks``
(``BlockedConvTiles``' fields: output columns per register tile, output channel blocks
per tile), optionally ``,reduction_blocks,row_reduction_blocks`` and then
``,block_unroll`` (-1: the default), e.g. ``8,2,-1,-1,16``: AVX-512's 2 x 8 tile with the
whole 16-channel input block unrolled per step.
Every variant's output is checked against the first's. The variants reach the
schedule as a tuning log's configs would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

os.environ.setdefault("HETEROCC_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from alternating import alternating_samples  # noqa: E402  (beside this script)
from conv2d import add_layer_arguments, conv_kernel, conv_model  # noqa: E402
from machine import cpu_target, describe  # noqa: E402

import heterocc  # noqa: E402
from heterocc.targets import llvm as hllvm  # noqa: E402
from heterocc.targets.llvm.schedules import BlockedConvTiles  # noqa: E402
from heterocc.targets.llvm.tuning import ScheduleConfigs  # noqa: E402


def tiles_of(variant: str) -> BlockedConvTiles | None:
    """The tiles a ``--variants`` entry names; None: the default."""
    if variant == "default":
        return None
    fields = [int(f) for f in variant.split(",")]
    if len(fields) not in (2, 4, 5):
        raise SystemExit(f"variant {variant!r}: "
                         "columns,blocks[,reduction,row_reduction[,block_unroll]]")
    extra = [None if f < 0 else f for f in fields[2:]]
    extra += [None] * (3 - len(extra))
    return BlockedConvTiles(columns=fields[0], channel_blocks=fields[1],
                            reduction_blocks=extra[0], row_reduction_blocks=extra[1],
                            block_unroll=extra[2])


@dataclass(frozen=True)
class FixedTiles(ScheduleConfigs):
    """Schedule configs that give every blocked convolution the same tiles."""

    tiles: BlockedConvTiles | None = None

    def blocked_conv_tiles(self, conv):
        return self.tiles


@dataclass
class FixedTilesTarget(hllvm.LLVMTarget):
    """The llvm target with :class:`FixedTiles` in place of a tuning log's configs."""

    tiles: BlockedConvTiles | None = None

    def _configs(self) -> ScheduleConfigs:
        return FixedTiles(tiles=self.tiles)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_layer_arguments(parser)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--variants", default="default")
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    print(describe(args.target))
    cpu = cpu_target(args.target)
    model = conv_model(args.channels, args.size, args.filters, args.kernel, args.stride, 1,
                       "relu")
    x = np.random.default_rng(1).standard_normal((1, args.channels, args.size, args.size),
                                                 dtype=np.float32)
    variants = args.variants.split(";")
    kernels, expected = [], None
    for variant in variants:
        tiles = tiles_of(variant)
        target = (hllvm.LLVMTarget(cpu=cpu) if tiles is None
                  else FixedTilesTarget(cpu=cpu, tiles=tiles))
        compiled = heterocc.compile(model, target=[target])
        out = compiled.run({"x": x})[0]
        expected = out if expected is None else expected
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
        kernels.append(conv_kernel(compiled))
    samples = alternating_samples(kernels, args.repeat, 2, pause_s=0.0,
                                  clock=time.process_time)
    out_size = (args.size + 2 * (args.kernel // 2) - args.kernel) // args.stride + 1
    flops = 2.0 * args.filters * args.channels * args.kernel ** 2 * out_size ** 2
    print(f"conv C{args.channels} {args.size}x{args.size} K{args.filters} "
          f"{args.kernel}x{args.kernel} stride {args.stride}, {args.target}, "
          f"load {os.getloadavg()[0]:.2f}; kernel alone, CPU clock, one thread")
    first = statistics.median(samples[0])
    for variant, times in zip(variants, samples):
        median = statistics.median(times)
        print(f"  {variant:20s} {median * 1e3:8.3f} ms {flops / median / 1e9:7.1f} GFLOP/s "
              f"ratio {median / first:.3f}")


if __name__ == "__main__":
    main()
