"""The timing model against the RTL: compiled models' accelerator streams (the
quantized tiny CNN, a small CNN quantized by onnxruntime with its residual addition
on the ALU, a ResNet stem's max pool on the ALU, and a sample of a quantized
ResNet-18's layers) and random
programs, each run on the RTL (Verilator) with the bench memory at a short and at
the default DRAM latency, their cycles compared with
``schedule_stream(stream, bench_timing_config(config, memory))`` within 5%, and
their DRAM bit for bit with the simulator.

Writes ``hw/build/reports/timing_model.json`` with every stream's cycles and ratio.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig, schedule_stream
from heterocc.accel_sim.hil import simulate
from heterocc.accel_sim.rtl_device import BenchMemory, RtlRun, RtlSimulator, bench_timing_config
from heterocc.models import resnet18, tiny_cnn
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.pool import MaxPoolGeometry, pool_program
from tests.hw.conftest import BUILD_ROOT, REPORT_DIR, require_rtl_tools
from tests.hw.programs import random_program

pytestmark = pytest.mark.rtl

#: the bench memory's latency: a short one, and the default HardwareConfig's DRAM
LATENCIES = (8, 64)
TOLERANCE = 0.05
#: ResNet-18 layers sampled: one stream per distinct length, shortest first, until
#: the modelled cycles (at the default latency) reach this budget
RESNET_CYCLE_BUDGET = 300_000
RANDOM_SEEDS = range(3000, 3012)


def _model_streams(model, samples: int = 2, seed: int = 0) -> list[tuple[str, list, np.ndarray]]:
    """(name, instructions, DRAM image) of every accelerator function of ``model``,
    quantized with the built-in calibrator and run once on random input."""
    proto = heterocc.frontend.load_model(model)
    rng = np.random.default_rng(seed)
    graph_input = proto.graph.input[0]
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]

    def sample() -> dict[str, np.ndarray]:
        return {graph_input.name: rng.standard_normal(shape).astype(np.float32)}

    target = VtaTarget()
    compiled = heterocc.compile(proto, target=[target, "reference"],
                                calibration=[sample() for _ in range(samples)])
    compiled.run(sample())
    return [(k.name, list(k.program.instructions), k.last_input)
            for k in target.kernels if k.last_input is not None]


def _resnet_sample(config: HardwareConfig) -> list[tuple[str, list, np.ndarray]]:
    chosen, seen, budget = [], set(), 0
    streams = sorted(_model_streams(resnet18(size=32)), key=lambda s: len(s[1]))
    for name, instructions, dram in streams:
        if len(instructions) in seen:
            continue
        cycles = schedule_stream(instructions, config).total_cycles
        if budget + cycles > RESNET_CYCLE_BUDGET:
            break
        seen.add(len(instructions))
        budget += cycles
        chosen.append((f"resnet18_{name}", instructions, dram))
    return chosen


def _ort_small_cnn_streams(directory) -> list[tuple[str, list, np.ndarray]]:
    """Every accelerator stream of the small CNN quantized by onnxruntime's
    quantize_static (QDQ int8): convolutions and the residual addition on the ALU."""
    from tests.targets.vta.ort_models import inputs, quantize, small_cnn

    target = VtaTarget()
    compiled = heterocc.compile(quantize(small_cnn(), directory, "QDQ", "QInt8"),
                                target=[target, "reference"])
    compiled.run([inputs(1)[0]])
    return [(f"ort_small_cnn_{k.name}", list(k.program.instructions), k.last_input)
            for k in target.kernels if k.last_input is not None]


def _pool_stream(config: HardwareConfig) -> tuple[str, list, np.ndarray]:
    """A ResNet stem's max pool (3x3, stride 2, pad 1) on the ALU: padded INP loads and
    MAX over input tiles with strided loops, two chunks in flight."""
    geometry = MaxPoolGeometry(2, 16, 16, (3, 3), (2, 2), (1, 1, 1, 1), 8, 8)
    program = pool_program(config, geometry)
    dram = program.dram.copy()
    tensor = program.tensors["X"]
    x = np.random.default_rng(7).integers(-128, 128, (tensor.rows, tensor.cols))
    program.write("X", x.astype(np.int8), dram)
    return "max_pool_stem", list(program.instructions), dram


@pytest.fixture(scope="module")
def streams(tmp_path_factory) -> list[tuple[str, list, np.ndarray]]:
    config = HardwareConfig()
    found = [(f"tiny_cnn_{name}", ins, dram) for name, ins, dram in _model_streams(tiny_cnn(8))]
    found += _ort_small_cnn_streams(tmp_path_factory.mktemp("ort"))
    found.append(_pool_stream(config))
    found += _resnet_sample(config)
    for seed in RANDOM_SEEDS:
        program = random_program(config, seed).program
        found.append((f"random_{seed}", list(program.instructions), program.dram))
    return found


@pytest.mark.parametrize("latency", LATENCIES)
def test_model_cycles_match_the_rtl(streams, latency):
    require_rtl_tools("verilator")
    config = HardwareConfig()
    memory = BenchMemory(latency)
    timing = bench_timing_config(config, memory)
    runs = [RtlRun.for_stream(dram, instructions, config,
                              max_cycles=2 * schedule_stream(instructions, timing).total_cycles)
            for _, instructions, dram in streams]
    results = RtlSimulator(config, "verilator", BUILD_ROOT, memory).run(runs)
    rows = []
    for (name, instructions, dram), result in zip(streams, results):
        expected, model = simulate(instructions, timing, dram)
        assert result.done, f"{name} did not finish on the RTL"
        assert np.array_equal(result.dram[: expected.size], expected), f"{name}: DRAM differs"
        rows.append({"stream": name, "instructions": len(instructions),
                     "rtl_cycles": result.cycles, "model_cycles": model,
                     "ratio": result.cycles / model})
    ratios = [row["ratio"] for row in rows]
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    report = REPORT_DIR / "timing_model.json"
    previous = json.loads(report.read_text()) if report.exists() else {}
    previous[f"latency_{latency}"] = {"streams": rows, "min_ratio": min(ratios),
                                      "max_ratio": max(ratios)}
    report.write_text(json.dumps(previous, indent=1))
    assert any(name.startswith("tiny_cnn") for name, _, _ in streams)
    assert any(name.startswith("resnet18") for name, _, _ in streams)
    assert any("quantized_add" in name for name, _, _ in streams)
    assert any("max_pool" in name for name, _, _ in streams)
    outliers = [row for row in rows if abs(row["ratio"] - 1) > TOLERANCE]
    assert not outliers, f"RTL cycles off the timing model by more than 5%: {outliers}"
