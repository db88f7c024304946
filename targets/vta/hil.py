"""Hardware-in-the-loop for whole models: every accelerator function of a compiled
model, replayed on the RTL through the same streams and DRAM images the
simulator ran, with per-function agreement and cycles.

    heterocc hil MODEL.onnx --device rtl [--simulator icarus|verilator]
"""

from __future__ import annotations

import logging

import numpy as np

import heterocc
from heterocc.accel_sim.hil import StreamComparison, compare_stream
from heterocc.accel_sim.rtl_device import (
    BENCH_MEMORY,
    BenchMemory,
    RtlSimulator,
    bench_timing_config,
)

from . import VtaTarget

_log = logging.getLogger("heterocc.hil")


def model_hil(model, inputs: dict | None = None, simulator: str = "verilator",
              build_root=None, calibration_samples: int = 4,
              seed: int = 0, memory: BenchMemory = BENCH_MEMORY) -> list[StreamComparison]:
    """Run ``model`` across the accelerator simulator and the CPU, then replay each
    accelerator function's stream on the RTL and compare DRAM and cycles.

    A float model is quantized first with the built-in calibrator (seeded random
    samples); a QDQ model is used as it is. The bench's DRAM answers after
    ``memory.latency`` cycles, and the timing model is compared under that memory.
    """
    proto = heterocc.frontend.load_model(model)
    rng = np.random.default_rng(seed)
    target = VtaTarget()
    is_qdq = any(n.op_type in ("QuantizeLinear", "QLinearConv") for n in proto.graph.node)
    compiled = heterocc.compile(proto, target=[target, "reference"])
    if inputs is None:
        inputs = {s.name: rng.standard_normal(s.shape).astype(s.dtype)
                  for s in compiled.inputs}
    if not is_qdq:
        calibration = [{s.name: rng.standard_normal(s.shape).astype(s.dtype)
                        for s in compiled.inputs} for _ in range(calibration_samples)]
        target = VtaTarget()
        compiled = heterocc.compile(proto, target=[target, "reference"],
                                    calibration=calibration)
    compiled.run(inputs)
    rtl = RtlSimulator(target.config, simulator, build_root, memory)
    # cycles are compared under the bench memory's timing, not the default DRAM's
    timing = bench_timing_config(target.config, memory)
    ran = [k for k in target.kernels if k.last_input is not None]
    results = []
    for index, k in enumerate(ran, 1):
        _log.info(f"hil: function {index}/{len(ran)} ({k.name}, "
                  f"{len(k.program.instructions)} instructions) on the RTL")
        results.append(compare_stream(k.name, k.program.instructions, timing, k.last_input,
                                      rtl))
    return results


def model_hil_command(args) -> int:
    """``heterocc hil MODEL.onnx``: one summary line per accelerator function."""
    results = model_hil(args.stream, simulator=args.simulator, build_root=args.build_dir,
                        memory=BenchMemory(args.latency))
    for r in results:
        print(r.summary())
    agree = sum(r.matches for r in results)
    print(f"{agree}/{len(results)} accelerator functions agree with the simulator")
    return 0 if agree == len(results) else 1
