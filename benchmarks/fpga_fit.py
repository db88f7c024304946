"""Full-size FPGA fit figures: Yosys resources of accelerator configs on named parts,
and ResNet-18's accelerator latency at each config's clock from the timing model.

    python benchmarks/fpga_fit.py [--presets 1x16x16 pynq-z2] [--parts xc7z020 ...]
        [--model resnet18] [--size 224] [--onnx-builder]

Synthesis is cached by RTL hash (``heterocc.accel_sim.fpga_fit``): the first run of a
config takes Yosys minutes, later ones read the cache. Prints the machine and the load,
each config's fit table per part, and the model's latency (torch export, onnxruntime
``quantize_static`` QDQ per-channel, as benchmarks/rtl_network.py; ``--onnx-builder``
uses heterocc.models' network without torch). CI synthesizes a small config only
(tests/hw/test_synthesis.py); these are the figures of the full-size ones.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from machine import describe  # noqa: E402
from rtl_network import quantized  # noqa: E402

from heterocc.accel_sim import HardwareConfig  # noqa: E402
from heterocc.accel_sim.fpga_fit import PARTS, fit  # noqa: E402
from heterocc.targets.vta import VtaTarget  # noqa: E402
from heterocc.targets.vta.explore import model_cycles  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["1x16x16", "pynq-z2"])
    parser.add_argument("--parts", nargs="+", default=sorted(PARTS), choices=sorted(PARTS))
    parser.add_argument("--model", default="resnet18", choices=["resnet18", "mobilenet_v2"])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--onnx-builder", action="store_true")
    parser.add_argument("--no-latency", action="store_true", help="resources only")
    args = parser.parse_args()
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    configs = [HardwareConfig.preset(name) for name in args.presets]
    for name, config in zip(args.presets, configs):
        for part in args.parts:
            started = time.perf_counter()
            result = fit(config, part)
            print(f"\n[{name}] {result.table()}")
            source = "cache" if result.synthesis.cached else "Yosys"
            print(f"  ({source}: Yosys took {result.synthesis.seconds:.0f} s when it ran; "
                  f"this call {time.perf_counter() - started:.1f} s)")
    if not args.no_latency:
        with tempfile.TemporaryDirectory() as scratch:
            model = quantized(args.model, args.size, Path(scratch), args.onnx_builder, 4)
            for name, config in zip(args.presets, configs):
                functions, cycles = model_cycles(str(model), config,
                                                 lambda c: VtaTarget(config=c))
                print(f"\n[{name}] {args.model} {args.size}x{args.size}: {functions} "
                      f"accelerator functions, {cycles:,} cycles (timing model) = "
                      f"{cycles / (config.clock_mhz * 1e3):.2f} ms at {config.clock_mhz} MHz")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
