"""The dot-product array as a heterocc target: patterns, codegen, and models
partitioned across it and the CPU, bit-exact against the NumPy references."""

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest
from dotprod_accel import DotProdTarget, MachineConfig
from dotprod_accel.codegen import generate
from dotprod_accel.isa import DEPTH, ISA, LANES, Memory
from dotprod_accel.models import dense_model, two_layer_mlp
from dotprod_accel.patterns import accumulator_range
from dotprod_accel.simulator import SimulatorDevice
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

import heterocc
from heterocc import cli
from heterocc.errors import AcceleratorError, CompileError, PartitionError
from heterocc.sdk import (
    DeviceKernel,
    MirroredDevice,
    available_targets,
    reference_outputs,
    te,
)

RNG = np.random.default_rng(7)


def _offloaded(compiled, target_name="dotprod"):
    return [c for region in compiled.graph.nodes if region.attrs.get("target") == target_name
            for c in region.body.nodes]


def test_model_partitions_across_the_array_and_the_cpu():
    model = two_layer_mlp()
    x = RNG.integers(-128, 128, (4, 20)).astype(np.int8)
    compiled = heterocc.compile(model, target="dotprod,reference")
    (got,) = compiled.run([x])
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got, expected)
    placed = {p.node: (p.target, p.composite) for p in compiled.placement_report.placements}
    assert placed["MatMulInteger_0"] == placed["Add_1"] == ("dotprod", "dense_bias")
    assert placed["MatMulInteger_6"] == ("dotprod", "dense")
    assert placed["MatMulInteger_9"][0] == "reference"
    refusal = next(p.reason for p in compiled.placement_report.placements
                   if p.node == "MatMulInteger_9")
    assert "int16 accumulators could reach" in refusal


def test_every_offloaded_function_is_bit_exact():
    target = DotProdTarget()
    compiled = heterocc.compile(two_layer_mlp(), target=[target, "reference"])
    composites = _offloaded(compiled)
    assert sorted(c.attrs["composite"] for c in composites) == ["dense", "dense_bias"]
    for composite in composites:
        x = RNG.integers(-128, 128, composite.body.inputs[0].type.shape).astype(np.int8)
        kernel = target.build(composite)
        (got,) = kernel([x])
        (expected,) = reference_outputs(composite, [x])
        assert got.dtype == expected.dtype == np.int32
        np.testing.assert_array_equal(got, expected)
        (device_kernel,) = kernel.composites
        assert isinstance(device_kernel, DeviceKernel)
        assert device_kernel.calls == 1 and device_kernel.last_timing.detail["dot"] > 0


@pytest.mark.parametrize("rows,depth,channels,with_bias", [
    (1, 8, 4, False), (3, 13, 6, True), (5, 40, 9, True), (2, 3, 1, False)])
def test_dense_shapes_with_padding(rows, depth, channels, with_bias):
    weights = RNG.integers(-2, 3, (depth, channels)).astype(np.int8)
    bias = RNG.integers(-300, 300, channels).astype(np.int32) if with_bias else None
    model = dense_model(weights, bias, rows)
    compiled = heterocc.compile(model, target="dotprod,reference", strict=True)
    x = RNG.integers(-128, 128, (rows, depth)).astype(np.int8)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(compiled.run([x])[0], expected)
    (composite,) = _offloaded(compiled)
    (kernel,) = DotProdTarget().build(composite).composites
    counts = {fmt.name: 0 for fmt in ISA.formats}
    for command in ISA.decode(kernel.program.words):
        counts[command.op] += 1
    padded_depth, padded_channels = -(-depth // DEPTH), -(-channels // LANES)
    assert counts["DOT"] == rows * padded_depth * padded_channels
    assert counts["VADD"] == (rows * padded_channels if with_bias else 0)
    cleared = sum(c["count"] for c in ISA.decode(kernel.program.words) if c.op == "CLEAR")
    assert cleared == rows * padded_channels * LANES


def test_accumulator_range_is_the_exact_extreme():
    weights = RNG.integers(-128, 128, (5, 3)).astype(np.int8)
    bias = np.array([7, -9, 1000], np.int32)
    sums = [np.array(x, np.int64) @ weights.astype(np.int64)
            for x in itertools.product([-128, 127], repeat=5)]
    exact = np.array(sums)
    low, high = accumulator_range(weights, bias)
    assert high == max(exact.max(), (exact + bias).max())
    assert low == min(exact.min(), (exact + bias).min())


def test_strict_mode_refuses_layers_the_array_would_wrap():
    weights = np.full((16, 4), 127, np.int8)
    with pytest.raises(PartitionError, match=r"int16 accumulators could reach \[-260096, "):
        heterocc.compile(dense_model(weights, None, 2), target="dotprod,reference",
                         strict=True)


def test_layers_too_large_for_the_memories_stay_on_the_cpu():
    small = DotProdTarget(MachineConfig(inp_depth=64, wgt_depth=64, acc_depth=64))
    weights = RNG.integers(-1, 2, (32, 8)).astype(np.int8)
    compiled = heterocc.compile(dense_model(weights, None, 2), target=[small, "reference"])
    (placement,) = compiled.placement_report.placements
    assert placement.target == "reference"
    assert "needs 256 elements of wgt, which holds 64" in placement.reason


def test_a_wrong_intrinsic_is_refused_at_compile_time(monkeypatch):
    """An intrinsic declared as sum(inp + wgt) for the array's sum(inp * wgt): tensorize
    proves the declaration against the loops it replaces and refuses to compile."""
    from dotprod_accel import codegen, intrinsics

    def adding_dot():
        right = intrinsics.dot_intrinsic()
        inp, wgt = right.inputs
        k = te.reduce_axis(DEPTH, "k")
        wrong = te.compute((LANES,), lambda j: te.sum(
            intrinsics.widen(inp[k]) + intrinsics.widen(wgt[j, k]), axis=k), name="acc")
        return te.TensorIntrin(right.name, wrong, right.implement, right.attrs)

    monkeypatch.setattr(codegen, "dot_intrinsic", adding_dot)
    with pytest.raises(CompileError, match=r"where the intrinsic computes \(int16\(inp\[k\]\) "
                                           r"\+ int16\(wgt\[j, k\]\)\)"):
        heterocc.compile(two_layer_mlp(), target="dotprod,reference").run(
            [RNG.integers(-128, 128, (4, 20)).astype(np.int8)])


def test_codegen_refuses_untensorized_computation():
    a = te.placeholder((8,), "int16", "a")
    b = te.compute((8,), lambda i: a[i] + a[i], name="b")
    func = te.lower(te.create_schedule(b), [a, b], name="plain_add")
    with pytest.raises(CompileError, match="plain_add: store of .* only clears accumulators"):
        generate(func, MachineConfig())


def test_target_is_discovered_through_its_entry_point(capsys):
    info = available_targets()["dotprod"]
    assert info.source == "dotprod_accel:DotProdTarget"
    assert cli.main(["targets"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "dotprod" in listed and "vta" in listed


def test_cli_profiles_the_array_found_through_its_entry_point(tmp_path, capsys):
    """`heterocc run --profile` prints a row per function with the array's cycles and the
    bytes each call moves."""
    import onnx

    path = tmp_path / "mlp.onnx"
    onnx.save(two_layer_mlp(), str(path))
    x = RNG.integers(-128, 128, (4, 20)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", str(path), "--target", "dotprod,reference", "--input",
                     f"x={tmp_path / 'x.npy'}", "--profile"]) == 0
    out = capsys.readouterr().out
    header, *rows = out[out.index("node "):].splitlines()
    assert "cycles/call" in header and "bytes/call" in header
    array_rows = [row.split() for row in rows if " dotprod " in row]
    assert len(array_rows) == 2
    for row in array_rows:
        calls, cycles, moved = int(row[2]), int(row[5]), int(row[6])
        assert calls == 1 and cycles > 0 and moved > 0


def test_program_of_the_tutorial():
    """docs/add-a-target.md shows this program; keep the two in step."""
    weights = np.ones((16, 8), np.int8)
    model = dense_model(weights, np.arange(8, dtype=np.int32), rows=1)
    target = DotProdTarget()
    compiled = heterocc.compile(model, target=[target, "reference"])
    (region,) = [n for n in compiled.graph.nodes if n.attrs.get("target") == "dotprod"]
    (kernel,) = target.build(region).composites
    assert kernel.program.listing().splitlines() == [
        "    0  CLEAR acc=16 count=4",
        "    1  DOT inp=0 wgt=0 acc=16 stride=16",
        "    2  DOT inp=8 wgt=8 acc=16 stride=16",
        "    3  CLEAR acc=20 count=4",
        "    4  DOT inp=0 wgt=64 acc=20 stride=16",
        "    5  DOT inp=8 wgt=72 acc=20 stride=16",
        "    6  VADD dst=8 lhs=16 rhs=0",
        "    7  VADD dst=12 lhs=20 rhs=4",
    ]
    x = np.arange(16, dtype=np.int8).reshape(1, 16)
    np.testing.assert_array_equal(compiled.run([x])[0], [np.arange(8) + 120])


@dataclass
class FlakyChip:
    """A faulty chip: every run flips bit 3 of accumulator element ``address``."""

    address: int
    chip: SimulatorDevice = field(default_factory=SimulatorDevice)
    name: str = "flaky chip"

    def copy_in(self, program, buffer, array):
        self.chip.copy_in(program, buffer, array)

    def run(self, program):
        timing = self.chip.run(program)
        self.chip.memories[Memory.ACC][self.address] ^= 8
        return timing

    def copy_out(self, program, buffer):
        return self.chip.copy_out(program, buffer)


def test_mirrored_device_runs_a_model_in_the_loop():
    model = two_layer_mlp()
    x = RNG.integers(-128, 128, (4, 20)).astype(np.int8)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    healthy = DotProdTarget(hardware=MirroredDevice(SimulatorDevice(), SimulatorDevice()))
    np.testing.assert_array_equal(
        heterocc.compile(model, target=[healthy, "reference"]).run([x])[0], expected)
    assert healthy.hardware.reference_timing.cycles > 0
    # acc[12] is element (0, 0) of the first layer's output: its bias (10 channels,
    # padded to 12) comes first
    faulty = DotProdTarget(hardware=MirroredDevice(FlakyChip(address=12), SimulatorDevice()))
    compiled = heterocc.compile(model, target=[faulty, "reference"])
    with pytest.raises(AcceleratorError, match=r"buffer 'out' differs at 1 of 48 elements; "
                                               r"first at index \(0, 0\): flaky chip"):
        compiled.run([x])


def test_exported_artifact_rebuilds_through_the_entry_point(tmp_path):
    """The target has no save_kernels: loading finds it by name and builds again."""
    compiled = heterocc.compile(two_layer_mlp(), target="dotprod,reference")
    compiled.export(str(tmp_path / "artifact"))
    loaded = heterocc.load(str(tmp_path / "artifact"))
    x = RNG.integers(-128, 128, (4, 20)).astype(np.int8)
    np.testing.assert_array_equal(loaded.run([x])[0], compiled.run([x])[0])


@st.composite
def dense_layers(draw):
    """A dense layer the array accepts: any shape, with weights and bias small enough that
    128 * sum|w| + |bias| <= 32612 stays within int16."""
    rows, depth, channels = (draw(st.integers(1, limit)) for limit in (5, 30, 11))
    weight_limit = max(1, 254 // depth)
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    weights = rng.integers(-weight_limit, weight_limit + 1, (depth, channels)).astype(np.int8)
    bias = None
    if draw(st.booleans()):
        bias = rng.integers(-100, 101, channels).astype(np.int32)
    x = rng.integers(-128, 128, (rows, depth)).astype(np.int8)
    return weights, bias, x


@settings(max_examples=20, deadline=None)
@given(dense_layers())
def test_any_accepted_dense_layer_is_bit_exact(layer):
    weights, bias, x = layer
    model = dense_model(weights, bias, x.shape[0])
    compiled = heterocc.compile(model, target="dotprod,reference", strict=True)
    (composite,) = _offloaded(compiled)
    (expected,) = reference_outputs(composite, [x])
    np.testing.assert_array_equal(compiled.run([x])[0], expected)
    np.testing.assert_array_equal(expected, ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_cost_model_counts_the_cycles_a_run_takes(tmp_path, monkeypatch):
    """The estimate's cycles are the device's own count of a call, and placement by cost
    on the array and the CPU stays bit-exact."""
    monkeypatch.setenv("HETEROCC_CACHE_DIR", str(tmp_path))
    target = DotProdTarget(MachineConfig(clock_mhz=100.0, link_gbps=2.0))
    compiled = heterocc.compile(two_layer_mlp(), target=[target, "reference"])
    for composite in _offloaded(compiled):
        estimate = target.estimate(composite)
        kernel = target.compile_layer(composite)
        kernel([RNG.integers(-128, 128, v.type.shape).astype(np.int8)
                for v in composite.body.inputs])
        assert estimate.detail["cycles"] == kernel.last_timing.cycles
        assert estimate.compute_s == pytest.approx(kernel.last_timing.cycles / 100e6)
        assert estimate.transfer_s > 0
    x = RNG.integers(-128, 128, (4, 20)).astype(np.int8)
    by_cost = heterocc.compile(two_layer_mlp(), target=[DotProdTarget(), "llvm"],
                               placement="cost")
    (expected,) = ReferenceEvaluator(two_layer_mlp()).run(None, {"x": x})
    np.testing.assert_array_equal(by_cost.run([x])[0], expected)
    assert by_cost.placement_report.plan.totals()["chosen_ms"] <= \
        by_cost.placement_report.plan.totals()["greedy_ms"]
