"""Whole networks on the accelerator RTL: ResNet-18 and MobileNetV2 (torch export,
onnxruntime ``quantize_static`` QDQ with per-channel weights, 224x224) run with every
accelerator function on the Verilator RTL, layer after layer, in one HDL simulator
process, each layer reading the DRAM the RTL wrote for the layers before it; each layer
bit-exact against the simulator and the integer reference and its cycles against the
timing model, and the model's outputs against the simulator-run model's
(``heterocc.targets.vta.hil.network_hil``, what ``heterocc hil MODEL`` runs).

    python benchmarks/rtl_network.py [--models resnet18 mobilenet_v2] [--size 224]
        [--simulator verilator|icarus] [--table]

Prints the machine and the load, then per model: the wall time of each phase (compile,
the model on the simulator, the RTL build, the RTL runs: simulator start, memory loads
and dumps included) and in total, the CPU seconds of this process and of the HDL
simulator it started, the simulated cycles per second (cycles from start to ``irq`` over
the wall time they took), bit-exactness per layer against the simulator and the
reference, and the RTL's cycles against the timing model's (whole network and the
largest layer deviation). ``--table`` adds the per-layer table. The RTL is built first
(once per config, cached in hw/build), outside the timed runs. The torch export and the
quantization are not timed. Without torch, ``--onnx-builder`` uses the same networks
built with onnx.helper (``heterocc.models``).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnxruntime import quantization as oq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from machine import describe  # noqa: E402
from vta_resnet18 import RandomCalibration  # noqa: E402

from heterocc.accel_sim import HardwareConfig  # noqa: E402
from heterocc.accel_sim.rtl_device import RtlSimulator  # noqa: E402
from heterocc.targets.vta.hil import network_hil  # noqa: E402


def float_model(name: str, size: int, path: Path, onnx_builder: bool) -> None:
    """The float network: the torch definition exported, or the onnx.helper one."""
    if onnx_builder:
        from heterocc import models

        onnx.save(getattr(models, name)(size=size), str(path))
        return
    if size != 224:
        raise SystemExit("the torch export is 224x224; use --onnx-builder for --size")
    from torch_models import export

    export(name, str(path))


def quantized(name: str, size: int, folder: Path, onnx_builder: bool,
              calibration: int) -> Path:
    """``name`` quantized by quantize_static: QDQ, per-channel int8 weights, onnxruntime's
    default activations (uint8 with zero points)."""
    source, target = folder / f"{name}.onnx", folder / f"{name}_qdq.onnx"
    float_model(name, size, source, onnx_builder)
    model = onnx.load(str(source))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    oq.quantize_static(str(source), str(target),
                       RandomCalibration(model.graph.input[0].name, shape, calibration),
                       quant_format=oq.QuantFormat.QDQ, per_channel=True)
    return target


def cpu_seconds() -> tuple[float, float]:
    """User+system CPU seconds of this process and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"],
                        choices=["resnet18", "mobilenet_v2"])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--simulator", default="verilator", choices=["verilator", "icarus"])
    parser.add_argument("--onnx-builder", action="store_true",
                        help="the networks from heterocc.models (onnx.helper), not torch")
    parser.add_argument("--calibration", type=int, default=4, help="calibration batches")
    parser.add_argument("--table", action="store_true", help="print the per-layer table")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log each layer as it ends (heterocc.hil)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(message)s")

    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    started = time.perf_counter()
    RtlSimulator(HardwareConfig.preset("1x16x16"), args.simulator).build()
    print(f"RTL build ({args.simulator}, cached in hw/build): "
          f"{time.perf_counter() - started:.1f} s")
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models:
            path = quantized(name, args.size, Path(scratch), args.onnx_builder,
                             args.calibration)
            own, children = cpu_seconds()
            started = time.perf_counter()
            report = network_hil(str(path), simulator=args.simulator, name=name)
            wall = time.perf_counter() - started
            own_after, children_after = cpu_seconds()
            rate = report.simulated_cycles / report.rtl_wall_seconds
            agree_sim = sum(layer.comparison.matches for layer in report.layers)
            agree_ref = sum(layer.reference_matches for layer in report.layers)
            phases = ", ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items())
            if args.table:
                print(report.table())
            print(f"\n{name} {args.size}x{args.size} (QDQ per-channel) on the {args.simulator} "
                  f"RTL: {len(report.layers)} accelerator functions, "
                  f"{report.rtl_cycles:,} cycles")
            print(f"  wall {wall:.1f} s ({phases}); CPU {own_after - own:.1f} s here + "
                  f"{children_after - children:.1f} s in the HDL simulator")
            print(f"  simulated {report.simulated_cycles:,} cycles in "
                  f"{report.rtl_wall_seconds:.1f} s of simulation: {rate:,.0f} cycles/s")
            print(f"  bit-exact: {agree_sim}/{len(report.layers)} layers with the simulator, "
                  f"{agree_ref}/{len(report.layers)} with the integer reference; the model's "
                  f"outputs (DRAM carried) "
                  f"{'agree with' if report.outputs_match_simulator else 'DIFFER from'} the "
                  f"simulator-run model's and "
                  f"{'agree with' if report.outputs_match else 'DIFFER from'} the reference")
            print(f"  cycles: RTL {report.rtl_cycles:,}, timing model "
                  f"{report.model_cycles:,} ({100 * report.deviation:+.3f}%); largest layer "
                  f"deviation {100 * report.max_deviation:.3f}%")
            print(f"  load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            failures += not report.agrees
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
