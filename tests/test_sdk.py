"""heterocc.sdk: re-exports, protocols, the accelerator helpers driving a toy device,
the TIR walk of command-list codegens, and entry-point discovery."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc import patterns, sdk
from heterocc.sdk import registry
from heterocc.targets import llvm as host_llvm
from heterocc.targets.reference import ReferenceTarget
from heterocc.targets.vta import VtaTarget

RNG = np.random.default_rng(5)


# --- a toy accelerator: bias + ReLU on a "device" that runs the TIR through LLVM ---


@dataclass
class HostProgram:
    func: object
    module: object


@dataclass
class HostDevice:
    """Buffers in host memory, kept per loaded program across runs (a ResidentDevice:
    constants are written once); a run calls the JIT-compiled TIR."""

    name: str = "host"
    programs: dict = field(default_factory=dict)  # id -> (program, buffers by name)
    runs: int = 0

    def load(self, program):
        self.programs.setdefault(id(program), (program, {}))

    def resident(self, program, buffer):
        return buffer in self.programs.get(id(program), (None, {}))[1]

    def reset(self):
        self.programs.clear()

    def copy_in(self, program, buffer, array):
        self.load(program)
        self.programs[id(program)][1][buffer] = np.ascontiguousarray(array)

    def run(self, program):
        self.load(program)
        buffers = self.programs[id(program)][1]
        params = program.func.params
        for p in params:
            buffers.setdefault(p.name, np.zeros(p.shape, p.dtype))
        program.module[program.func.name](*(buffers[p.name] for p in params))
        self.runs += 1
        return sdk.DeviceTiming(cycles=int(np.prod(params[-1].shape)))

    def copy_out(self, program, buffer):
        return self.programs[id(program)][1][buffer].copy()


@dataclass
class StreamingDevice:
    """A HostDevice without the resident life cycle (only copy_in / run / copy_out):
    every buffer is written on every call."""

    host: HostDevice = field(default_factory=HostDevice)
    name: str = "streaming"

    def copy_in(self, program, buffer, array):
        self.host.copy_in(program, buffer, array)

    def run(self, program):
        return self.host.run(program)

    def copy_out(self, program, buffer):
        return self.host.copy_out(program, buffer)


_BIAS_RELU = sdk.is_op("Relu")(sdk.is_op("Add")(sdk.wildcard(), sdk.is_constant()))


@dataclass
class ToyTarget:
    """Toy vector engine: float32 x + bias, then ReLU (test target)."""

    name: str = "toyvec"
    host: HostDevice = field(default_factory=HostDevice)

    def options(self):
        return {}

    def pattern_table(self):
        def check(nodes):
            if nodes[0].inputs[0].type.dtype != "float32":
                return "only float32"
            return None

        return [sdk.CompositePattern("bias_relu", _BIAS_RELU, check)]

    def tensor_intrinsics(self):
        return []

    def lower(self, parts):
        add = parts.require("Add")
        shape = add.inputs[0].type.shape
        bias = np.broadcast_to(parts.constant(add, 1), shape).astype(np.float32)
        x = sdk.te.placeholder(shape, "float32", "x")
        b = sdk.te.placeholder(shape, "float32", "b")
        y = sdk.te.compute(shape, lambda *i: sdk.te.maximum(x[i] + b[i], 0.0), name="y")
        return sdk.Lowering(sdk.te.create_schedule(y),
                            [sdk.Binding(x, argument=parts.argument_index(add.inputs[0])),
                             sdk.Binding(b, constant=bias)],
                            [sdk.Result(y)])

    def codegen(self, func):
        return HostProgram(func, host_llvm.build(func))

    def device(self):
        return self.host

    def build(self, function):
        return sdk.build_accelerator_region(self, function)


def _bias_relu_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Tanh", ["r"], ["t"]), helper.make_node("Add", ["t", "c"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    inits = [numpy_helper.from_array(RNG.standard_normal((3, 5)).astype(np.float32), "b"),
             numpy_helper.from_array(RNG.standard_normal(5).astype(np.float32), "c")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [3, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_sdk_reexports_the_compiler_objects():
    assert sdk.register_target is registry.register_target
    assert sdk.Target is registry.Target
    assert sdk.CompositePattern is patterns.CompositePattern
    assert sdk.is_op is patterns.is_op
    assert sdk.TensorIntrin is heterocc.te.TensorIntrin
    assert sdk.ENTRY_POINT_GROUP == "heterocc.targets"
    assert all(hasattr(sdk, name) for name in sdk.__all__)


def test_protocols_recognize_targets():
    assert isinstance(VtaTarget(), sdk.PartitioningTarget)
    assert not isinstance(ReferenceTarget(), sdk.PartitioningTarget)
    assert isinstance(ToyTarget(), sdk.AcceleratorTarget)
    assert not isinstance(VtaTarget(), sdk.AcceleratorTarget)
    assert isinstance(HostDevice(), sdk.Device)


def test_accelerator_helpers_run_the_toy_target_bit_exactly():
    toy = ToyTarget()
    model = _bias_relu_model()
    compiled = heterocc.compile(model, target=[toy, "reference"])
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    (expected,) = heterocc.compile(model, target="reference").run([x])
    np.testing.assert_array_equal(compiled.run([x])[0], expected)
    regions = [n for n in compiled.graph.nodes if n.attrs.get("target") == "toyvec"]
    assert len(regions) == 2 and toy.host.runs == 2
    for region in regions:
        (composite,) = region.body.nodes
        parts = sdk.composite_parts(composite)
        assert parts.name == "bias_relu" and [n.op for n in parts.nodes] == ["Add", "Relu"]
        assert parts.node("Conv") is None
        arg = RNG.standard_normal(parts.inputs[0].type.shape).astype(np.float32)
        kernel = toy.build(region)
        (got,) = kernel([arg])
        np.testing.assert_array_equal(got, sdk.reference_outputs(region, [arg])[0])
        (device_kernel,) = kernel.composites
        assert device_kernel.calls == 1 and device_kernel.cycles == 15


def test_profile_shows_cycles_and_bytes_of_any_device_kernel():
    toy = ToyTarget()
    compiled = heterocc.compile(_bias_relu_model(), target=[toy, "reference"])
    compiled.enable_profiling()
    compiled.run([RNG.standard_normal((3, 5)).astype(np.float32)])
    rows = [line.split() for line in compiled.profile_report().splitlines()[1:]]
    toy_rows = [row for row in rows if row[1] == "toyvec"]
    assert len(toy_rows) == 2
    for row in toy_rows:
        # 15 elements per run; x in and y out (60 bytes each); the bias (60 bytes) is
        # loaded once and stays on the device
        assert int(row[5]) == 15 and int(row[6]) == 120 and int(row[7]) == 60


def test_constants_are_written_once_per_loaded_model():
    model = _bias_relu_model()
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    (expected,) = heterocc.compile(model, target="reference").run([x])
    for device, per_call, loaded in ((HostDevice(), 60, 60), (StreamingDevice(), 120, 0)):
        toy = ToyTarget(host=device)
        compiled = heterocc.compile(model, target=[toy, "reference"])
        for call in range(3):
            np.testing.assert_array_equal(compiled.run([x])[0], expected)
            kernels = [c for k in compiled.kernels.values() for c in getattr(k, "composites", ())]
            assert len(kernels) == 2
            for kernel in kernels:
                assert kernel.last_bytes_in == per_call  # x (and the bias when streamed)
                assert kernel.last_bytes_loaded == (loaded if call == 0 else 0)
        if isinstance(device, HostDevice):
            device.reset()  # a reset device forgets the bias: the next call writes it again
            np.testing.assert_array_equal(compiled.run([x])[0], expected)
            assert all(k.last_bytes_loaded == 60 for k in kernels)


def test_profile_of_a_kernel_that_reports_nothing_is_wall_time():
    """A target whose kernels are plain callables (no device counters)."""

    @dataclass
    class PlainTarget(ToyTarget):
        name: str = "plain"

        def build(self, function):
            def run(args):
                return sdk.reference_outputs(function, args)
            return run

    compiled = heterocc.compile(_bias_relu_model(), target=[PlainTarget(), "reference"])
    compiled.enable_profiling()
    compiled.run([RNG.standard_normal((3, 5)).astype(np.float32)])
    rows = [line.split() for line in compiled.profile_report().splitlines()[1:]]
    plain_rows = [row for row in rows if row[1] == "plain"]
    assert len(plain_rows) == 2 and all(float(row[3]) >= 0 for row in plain_rows)
    assert all(not row[5].isdigit() for row in plain_rows)  # no cycles column: the ops


def test_composite_parts_errors_name_the_node():
    plain = sdk.Node("Relu", [], [], name="relu_7")
    with pytest.raises(sdk.CompileError, match="'relu_7' .* is not a composite"):
        sdk.composite_parts(plain)
    compiled = heterocc.compile(_bias_relu_model(), target=[ToyTarget(), "reference"])
    composite = next(n for n in compiled.graph.nodes if n.attrs.get("target")).body.nodes[0]
    parts = sdk.composite_parts(composite)
    with pytest.raises(sdk.CompileError, match="has no Conv node; it holds Add, Relu"):
        parts.require("Conv")
    with pytest.raises(sdk.CompileError, match="input 0 must be a constant"):
        parts.constant(parts.require("Add"), 0)


def test_binding_takes_exactly_one_source():
    t = sdk.te.placeholder((2,), "int8", "t")
    with pytest.raises(sdk.CompileError, match="exactly one of"):
        sdk.Binding(t)
    with pytest.raises(sdk.CompileError, match="exactly one of"):
        sdk.Binding(t, argument=0, constant=np.zeros(2, np.int8))


def test_leaf_statements_bind_every_loop():
    te = sdk.te
    a = te.placeholder((3, 4), "int32", "a")
    b = te.compute((3, 4), lambda i, j: a[i, j] * 2, name="b")
    func = te.lower(te.create_schedule(b), [a, b], name="double", optimize=False)
    seen = []
    for stmt, env in sdk.leaf_statements(func):
        assert isinstance(stmt, sdk.tir.BufferStore)
        bindings = {var.name: value for var, value in env.items()}
        seen.append((bindings["i"], bindings["j"]))
        flat = sum(sdk.evaluate_index(e, env) for e in stmt.indices)
        assert flat == bindings["i"] + bindings["j"]
    assert seen == [(i, j) for i in range(3) for j in range(4)]


def test_evaluate_index_refuses_free_variables():
    n = sdk.tir.Var("n")
    assert sdk.evaluate_index(n * 3 + 1, {n: 4}) == 13
    with pytest.raises(sdk.CompileError, match="not a compile-time integer"):
        sdk.evaluate_index(n * 3 + sdk.tir.Var("m"), {n: 4})


# --- entry-point discovery ---------------------------------------------------


def _fake_distribution(root, entry: str) -> None:
    info = root / "toy_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[heterocc.targets]\n{entry}\n")


@pytest.fixture
def fresh_registry(monkeypatch):
    monkeypatch.setattr(registry, "_TARGETS", dict(registry._TARGETS))
    monkeypatch.setattr(registry, "_discovered", False)


def test_entry_point_plugin_is_discovered(tmp_path, monkeypatch, fresh_registry):
    _fake_distribution(tmp_path, "toyvec = tests.test_sdk:ToyTarget")
    monkeypatch.syspath_prepend(str(tmp_path))
    info = sdk.available_targets()["toyvec"]
    assert info.source == "tests.test_sdk:ToyTarget"
    assert info.description.startswith("Toy vector engine")
    assert isinstance(sdk.get_target("toyvec"), ToyTarget)


def test_broken_plugin_names_itself(tmp_path, monkeypatch, fresh_registry):
    _fake_distribution(tmp_path, "broken = tests.no_such_module:Nothing")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(sdk.TargetError, match="target plugin 'broken' .* failed to load"):
        sdk.available_targets()


@dataclass
class NotebookToy(ToyTarget):
    """The same target redefined in a notebook."""


def test_in_process_registration_and_entry_point_coexist(tmp_path, monkeypatch,
                                                         fresh_registry):
    _fake_distribution(tmp_path, "toyvec = tests.test_sdk:ToyTarget")
    monkeypatch.syspath_prepend(str(tmp_path))
    # discovered first, then registered in process: the explicit one wins, with a warning
    assert sdk.available_targets()["toyvec"].factory is ToyTarget
    with pytest.warns(UserWarning, match="replaces the one from entry point "
                                         "tests.test_sdk:ToyTarget"):
        sdk.register_target("toyvec", NotebookToy)
    assert isinstance(sdk.get_target("toyvec"), NotebookToy)
    # a second in-process registration needs replace=True
    with pytest.raises(sdk.TargetError, match="registered twice .* replace=True"):
        sdk.register_target("toyvec", ToyTarget)
    sdk.register_target("toyvec", ToyTarget, replace=True)
    assert sdk.available_targets()["toyvec"].factory is ToyTarget


def test_entry_point_does_not_replace_an_earlier_registration(tmp_path, monkeypatch,
                                                              fresh_registry):
    sdk.register_target("toyvec", NotebookToy)
    _fake_distribution(tmp_path, "toyvec = tests.test_sdk:ToyTarget")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert sdk.available_targets()["toyvec"].factory is NotebookToy


def test_installed_example_target_is_discovered():
    found = {ep.name: ep.value for ep in metadata.entry_points(group=sdk.ENTRY_POINT_GROUP)}
    assert found.get("dotprod") == "dotprod_accel:DotProdTarget", (
        "the example target is not installed: pip install -e examples/dotprod_accel")
    target = sdk.get_target("dotprod")
    assert isinstance(target, sdk.AcceleratorTarget)
    assert target.name == "dotprod" and "dotprod_accel" in sys.modules


@dataclass
class ScalingDevice(HostDevice):
    """A HostDevice whose outputs come back multiplied (a wrong chip)."""

    factor: float = 2.0

    def copy_out(self, program, buffer):
        return super().copy_out(program, buffer) * np.float32(self.factor)


def test_mirrored_device_compares_every_output():
    model = _bias_relu_model()
    # positive pre-activations, so a wrong scale changes every output of the first region
    x = np.abs(RNG.standard_normal((3, 5))).astype(np.float32) + 10.0
    (expected,) = heterocc.compile(model, target="reference").run([x])
    agreeing = ToyTarget(host=sdk.MirroredDevice(HostDevice("chip"), HostDevice("sim")))
    np.testing.assert_array_equal(
        heterocc.compile(model, target=[agreeing, "reference"]).run([x])[0], expected)
    assert agreeing.host.reference_timing.cycles == 15
    wrong = ToyTarget(host=sdk.MirroredDevice(ScalingDevice("chip"), HostDevice("sim")))
    compiled = heterocc.compile(model, target=[wrong, "reference"])
    with pytest.raises(sdk.AcceleratorError,
                       match=r"buffer 'y' differs at 15 of 15 elements; first at index "
                             r"\(0, 0\): chip \d"):
        compiled.run([x])


# --- the helpers every accelerator target writes: placer, encoder, metadata ---


def test_memory_placer_places_aligned_and_names_what_does_not_fit():
    placer = sdk.MemoryPlacer([sdk.Bank("inp", 64), sdk.Bank("acc", 32, alignment=8)], "dense_0")
    placer.assign("x", "inp", "DOT")
    assert placer.place("x", (4, 6)) == sdk.Placement("inp", 0, (4, 6))
    assert placer.place("bias", (3,), bank="acc") == sdk.Placement("acc", 0, (3,))
    assert placer.place("y", (2, 4), bank="acc") == sdk.Placement("acc", 8, (2, 4))
    assert placer.used("acc") == 16 and placer.layout["y"].end == 16
    with pytest.raises(sdk.CompileError, match=r"dense_0: buffer 'z' \(24\) does not fit acc: "
                                               r"it needs 40 of its 32, which already holds "
                                               r"bias \(3\), y \(8\)"):
        placer.place("z", (24,), bank="acc")
    with pytest.raises(sdk.CompileError, match=r"buffer 'x' is used in inp \(DOT\) and, by "
                                               r"VADD, in acc"):
        placer.assign("x", "acc", "VADD")
    with pytest.raises(sdk.CompileError, match="no instruction touches buffer 'w'"):
        placer.place("w", (1,))
    with pytest.raises(sdk.CompileError, match="no memory 'wgt'; the machine has inp, acc"):
        placer.assign("w", "wgt")


def test_instruction_set_encodes_decodes_and_tabulates_its_declaration():
    isa = sdk.InstructionSet("toy", opcode_bits=2, word_bits=32, formats=[
        sdk.InstructionFormat("MOVE", 1, (sdk.Field("dst", 6, "address"), sdk.Field("imm", 8,
                                                                                    signed=True)),
                              "``R[dst] = imm``"),
        sdk.InstructionFormat("HALT", 3, ())])
    commands = [isa.command("MOVE", dst=63, imm=-128), isa.command("HALT"),
                isa.command("MOVE", dst=1, imm=127)]
    words = isa.encode(commands)
    assert int(words[0]) == 1 | 63 << 2 | 0x80 << 8
    assert isa.decode(words) == commands
    assert str(commands[0]) == "MOVE dst=63 imm=-128" and commands[2]["imm"] == 127
    with pytest.raises(sdk.IllegalInstructionError, match=r"instruction 1: MOVE field imm=128 "
                                                          r"does not fit 8 bits \(-128..127\)"):
        isa.encode([commands[1], isa.command("MOVE", imm=128)])
    with pytest.raises(sdk.IllegalInstructionError, match="instruction 0: unknown opcode 2"):
        isa.decode([2])
    with pytest.raises(sdk.IllegalInstructionError, match="MOVE has no field.* src"):
        isa.command("MOVE", src=1)
    assert isa.table().splitlines()[2:] == [
        "| MOVE | 1 | `dst` 2-7: address<br>`imm` 8-15, signed | ``R[dst] = imm`` |",
        "| HALT | 3 | - |  |"]
    with pytest.raises(sdk.CompileError, match="MOVE needs 34 bits, the word has 32"):
        sdk.InstructionSet("wide", [sdk.InstructionFormat("MOVE", 0, (sdk.Field("a", 32),))], 2, 32)
    with pytest.raises(sdk.CompileError, match="repeats a name or the opcode 1"):
        sdk.InstructionSet("twice", [sdk.InstructionFormat("A", 1, ()),
                                     sdk.InstructionFormat("B", 1, ())], 2)


def test_lowering_metadata_reaches_codegen():
    seen = []

    @dataclass
    class TellingTarget(ToyTarget):
        def lower(self, parts):
            lowering = super().lower(parts)
            lowering.metadata["bias_shape"] = parts.require("Add").inputs[1].type.shape
            return lowering

        def codegen(self, func):
            seen.append(sdk.lowering_metadata(func))
            return super().codegen(func)

    model = _bias_relu_model()
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    compiled = heterocc.compile(model, target=[TellingTarget(), "reference"])
    (expected,) = heterocc.compile(model, target="reference").run([x])
    np.testing.assert_array_equal(compiled.run([x])[0], expected)
    assert seen == [{"bias_shape": (3, 5)}, {"bias_shape": (5,)}]
    assert sdk.lowering_metadata(sdk.tir.PrimFunc("bare", (), sdk.tir.SeqStmt(()))) == {}


def test_coalesce_merges_adjacent_runs():
    def merge(last, item):  # (start, count) runs of consecutive addresses, at most 4 long
        if last[0] + last[1] == item[0] and last[1] + item[1] <= 4:
            return (last[0], last[1] + item[1])
        return None

    runs = [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (9, 1), (10, 2), (20, 1)]
    assert sdk.coalesce(runs, merge) == [(0, 4), (4, 1), (9, 3), (20, 1)]
    assert sdk.coalesce([], merge) == []


@dataclass
class LayoutToy(ToyTarget):
    """The toy engine keeping tensors in its ("flat") device layout inside a region."""

    name: str = "layouttoy"

    def lower(self, parts):
        lowering = super().lower(parts)
        lowering.inputs[0].layout = lowering.outputs[0].layout = "flat"
        lowering.inputs[0].to_device = lambda a: np.ascontiguousarray(a, np.float32)
        return lowering

    def region(self, body, kernels):
        return sdk.LayoutRegion(body, kernels)

    def build(self, function):
        return sdk.build_accelerator_region(self, function, region=self.region)


def test_layout_region_hands_device_tensors_between_layers():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Add", ["r", "c"], ["u"]), helper.make_node("Relu", ["u"], ["y"])]
    inits = [numpy_helper.from_array(RNG.standard_normal((3, 5)).astype(np.float32), "b"),
             numpy_helper.from_array(RNG.standard_normal(5).astype(np.float32), "c")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3, 5])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [3, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    (expected,) = heterocc.compile(model, target="reference").run([x])
    toy = LayoutToy()
    compiled = heterocc.compile(model, target=[toy, "reference"])
    np.testing.assert_array_equal(compiled.run([x])[0], expected)
    (region,) = [k for k in compiled.kernels.values() if hasattr(k, "composites")]
    assert len(region.composites) == 2 and isinstance(region.region, sdk.LayoutRegion)
    # the first layer's output goes to the second as it is; only the region's input is
    # converted from the host's layout
    assert region.region.handed_over == 1 and region.region.converted == 1
    assert all(isinstance(k, sdk.LayoutKernel) for k in region.composites)


_LAZY_DISCOVERY = """
import sys
import numpy as np
from onnx import TensorProto, helper
import heterocc
from heterocc.sdk import registry

graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
compiled = heterocc.compile(model, target="llvm")
assert compiled.run([np.array([-1, 0, 2, -3], np.float32)])[0].tolist() == [0, 0, 2, 0]
imported = sorted(m for m in ("heterocc.targets.vta", "heterocc.targets.cuda")
                  if m in sys.modules)
assert registry.is_registered("llvm") and not registry.is_registered("no-such-target")
print(imported, sorted(registry.available_targets()))
"""


def test_a_builtin_target_imports_only_its_own_package():
    """Compiling for llvm in a fresh process leaves the accelerators' packages
    unimported (their import is a share of a small compile's time); an unknown name,
    and the list of targets, still discover them all."""
    import subprocess

    child = subprocess.run([sys.executable, "-c", _LAZY_DISCOVERY], capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    imported, available = child.stdout.strip().splitlines()[-1].split("] [")
    assert imported == "["
    assert all(f"'{name}'" in available for name in registry.BUILTIN_TARGETS)
