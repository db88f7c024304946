"""CPU target descriptions (``llvm -mcpu=... -mattr=... -mtriple=... -num-cores=N``): what
they derive, the code generated from them (AVX2 and SSE paths on any x86 host, AArch64
objects and libraries), and the check that refuses code a host cannot run."""

import json
import subprocess

import llvmlite.binding as llvm
import numpy as np
import onnx
import pytest

import heterocc
from heterocc.cli import main
from heterocc.errors import CompileError, TargetError
from heterocc.models import tiny_cnn
from heterocc.targets import llvm as hllvm
from heterocc.targets import parse_targets
from heterocc.targets.llvm import cpu as hcpu
from heterocc.targets.llvm import schedules
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.module import link_command

#: ELF header e_machine values
EM_X86_64, EM_AARCH64 = 62, 183

HOST = hcpu.host_cpu()
AVX2_HOST = "avx2" in HOST.features


def _elf_machine(data: bytes) -> int:
    assert data[:4] == b"\x7fELF"
    return int.from_bytes(data[18:20], "little")


def _avx2_machine(cpu="znver3") -> hcpu.CPUDescription:
    """A made-up AVX2 host (Zen 3 class: no AVX-512)."""
    return hcpu.CPUDescription("x86_64-unknown-linux-gnu", cpu,
                               hcpu.with_requirements(hcpu.CPU_FAMILIES["znver3"].features),
                               2, 32 << 10, 512 << 10, 32 << 20)


# --- descriptions ----------------------------------------------------------------

def test_a_full_target_string_gives_width_registers_fma_caches_and_cores():
    d = hcpu.parse_cpu("llvm -mcpu=znver4 -mtriple=x86_64-linux-gnu -num-cores=4")
    assert (d.cpu, d.triple, d.num_cores) == ("znver4", "x86_64-linux-gnu", 4)
    assert (d.vector_bytes, d.vector_registers, d.fma, d.isa) == (64, 32, True, "avx512")
    # on a Zen 4 host, -mcpu=znver4 is the host: its caches are read from sysfs
    host = hcpu.read_host_caches() if (
        llvm.get_host_cpu_name() == "znver4"
        and hcpu.triple_arch(llvm.get_process_triple()) == "x86_64") else None
    if host is None:
        assert (d.l1d, d.l2, d.caches_from) == (32 << 10, 1 << 20, "defaults")
    else:
        assert ((d.l1d, d.l2, d.l3), d.caches_from) == (host, "sysfs")
    assert d.vector_lanes("float32") == 16 and d.vector_lanes("int8") == 64


@pytest.mark.parametrize("spec, isa, width, registers, fma", [
    ("llvm -mcpu=znver3", "avx2", 32, 16, True),
    ("llvm -mcpu=znver4 -mattr=-avx512f", "avx2", 32, 16, True),
    ("llvm -mcpu=znver4 -mattr=-avx", "sse", 16, 16, False),
    ("llvm -mcpu=x86-64", "sse", 16, 16, False),
    ("llvm -mcpu=x86-64 -mattr=+avx512f", "avx512", 64, 32, True),
    ("llvm -mcpu=sandybridge", "avx", 32, 16, False),
    ("llvm -mtriple=aarch64-linux-gnu", "neon", 16, 32, True),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", "neon", 16, 32, True),
])
def test_vector_facts_follow_the_features(spec, isa, width, registers, fma):
    d = hcpu.parse_cpu(spec)
    assert (d.isa, d.vector_bytes, d.vector_registers, d.fma) == (isa, width, registers, fma)


def test_removing_a_feature_removes_what_builds_on_it_and_adding_adds_its_needs():
    d = hcpu.parse_cpu("llvm -mcpu=sapphirerapids -mattr=-avx512f")
    assert not {f for f in d.features if f.startswith("avx512")}
    assert {"avx2", "fma", "avxvnni"} <= d.features
    d = hcpu.parse_cpu("llvm -mcpu=x86-64 -mattr=+avx512bw")
    assert {"avx512bw", "avx512f", "avx2", "avx", "fma", "f16c", "sse4.2"} <= d.features


def test_the_default_is_the_host():
    assert hcpu.parse_cpu(None) == HOST == hcpu.parse_cpu("llvm")
    assert HOST.triple == hcpu.llvm.get_process_triple()
    assert HOST.cpu == hcpu.llvm.get_host_cpu_name()
    enabled = {f for f, on in hcpu.llvm.get_host_cpu_features().items() if on}
    assert HOST.features == enabled
    d = hcpu.parse_cpu("llvm -mattr=-avx512f")
    assert d.cpu == HOST.cpu and "avx512f" not in d.features
    assert d.features == hcpu.without_dependents(HOST.features, ["avx512f"])


def test_host_caches_are_read_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                                 (2, "Unified", "2048K"),
                                                 (3, "Unified", "32M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert hcpu.read_host_caches(str(tmp_path)) == (48 << 10, 2 << 20, 32 << 20)
    assert hcpu.read_host_caches(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("spec, message", [
    ("llvm -mattr=avx2", "must be \\+FEATURE or -FEATURE"),
    ("llvm -mattr=+avx2,-avx2", "both adds and removes avx2"),
    ("llvm -mfoo=1", "-mfoo are not known"),
    ("llvm mcpu=znver3", "must be -key=value"),
    ("llvm -mtriple=riscv64-linux-gnu", "'riscv64' is not supported"),
    ("llvm -num-cores=two", "is not a number"),
    ("llvm -num-cores=0", "at least one core"),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=znver3", "is an x86 CPU"),
    ("llvm -mcpu=znver3 -mcpu=znver4", "given twice"),
    ("llvm -mcpu=znver", "-mcpu=znver: no defaults for this CPU; known: .*znver3"),
])
def test_bad_target_strings_are_refused_by_name(spec, message):
    with pytest.raises(TargetError, match=message):
        hcpu.parse_cpu(spec)


def test_multi_target_strings_keep_the_cpu_options_together():
    vta, cpu_target = parse_targets("vta,llvm -mcpu=znver3 -mattr=+avx2,-avx512f -num-cores=3")
    assert vta == "vta"
    assert cpu_target.name == "llvm"
    assert (cpu_target.cpu.cpu, cpu_target.cpu.isa, cpu_target.cpu.num_cores) == (
        "znver3", "avx2", 3)
    assert parse_targets("vta,llvm") == ["vta", "llvm"]
    with pytest.raises(TargetError, match="does not take the option.* mcpu"):
        parse_targets("reference -mcpu=znver3")


def test_schedules_tile_for_the_description():
    avx512 = hcpu.parse_cpu("llvm -mcpu=x86-64-v4")
    avx2 = hcpu.parse_cpu("llvm -mcpu=x86-64-v3")
    neon = hcpu.parse_cpu("llvm -mtriple=aarch64-linux-gnu")
    # the panel of the fewest loads per multiply-add: 6 rows of 4 vectors with 32
    # registers, 6 of 2 with AVX2's 16
    assert [schedules.panel_width("float32", c) for c in (avx512, avx2, neon)] == [64, 16, 16]
    assert [schedules.panel_vectors(c) for c in (avx512, avx2, neon)] == [4, 2, 4]
    assert [schedules.matmul_tile_rows(1024, schedules.panel_width("float32", c),
                                       "float32", c) for c in (avx512, avx2, neon)] == [6, 6, 6]
    assert [schedules.tile_rows(c) for c in (avx512, avx2, neon)] == [14, 6, 13]
    # a product's tiles are evened over its rows: the fewest tiles, each as short as
    # they allow (64 rows in 5 tiles of 13 with AVX-512; 13 in 3 of 5 with AVX2)
    assert [schedules.matmul_tile_rows(m, 32, "float32", avx512)
            for m in (1, 13, 64, 128, 1024)] == [1, 13, 13, 13, 14]
    assert [schedules.matmul_tile_rows(m, 16, "float32", avx2)
            for m in (1, 13, 64, 1024)] == [1, 5, 6, 6]
    # a one-vector panel keeps a two-vector panel's rows
    assert schedules.matmul_tile_rows(1024, 16, "float32", avx512) == 14
    assert [schedules.conv_tile_channels(c) for c in (avx512, avx2)] == [16, 8]
    # a 16-float channel block is one AVX-512 vector, two AVX2 ones: a default dense tile
    # pairs two AVX-512 blocks (two weight vectors per input element), one AVX2 block
    assert schedules.dense_conv_column_limit(2, 64, avx512) == 8
    # (one AVX2 block of two vectors keeps one broadcast live: 6 columns, 12 accumulators)
    assert schedules.dense_conv_column_limit(1, 64, avx2) == 6
    assert schedules.one_block_columns(2, avx2) == 6
    # a looped depthwise window: 14 columns of one AVX-512 vector, 3 of two AVX2 ones
    assert [schedules.looped_window_columns(v, c) for v, c in ((1, avx512), (2, avx2))] \
        == [14, 3]
    assert [schedules.dense_conv_channel_blocks(64, c) for c in (avx512, avx2, neon)] == [2, 1, 1]
    assert schedules.default_blocked_conv_tiles((1, 4, 56, 56, 16), 4, cpu=avx512) == (8, 2)
    assert schedules.default_blocked_conv_tiles((1, 4, 56, 56, 16), 4, cpu=avx2) == (6, 1)
    # an odd block count takes three blocks (9 of 16 floats, 3 of 8) with fewer columns,
    # the accumulators within two thirds of the registers
    assert schedules.default_blocked_conv_tiles((1, 9, 56, 56, 16), 4, cpu=avx512) == (7, 3)
    assert schedules.default_blocked_conv_tiles((1, 3, 56, 56, 8), 4, cpu=avx2) == (3, 3)
    assert schedules.default_blocked_conv_tiles((1, 5, 56, 56, 16), 4, cpu=avx512) == (28, 1)
    assert schedules.vector_lanes("float32", avx2) == 8
    with hcpu.compiling_for(avx2):
        assert hcpu.active_cpu() is avx2
    assert hcpu.active_cpu() is HOST


# --- generated code ----------------------------------------------------------------

@pytest.mark.parametrize("mattr, wide", [("-avx512f", True), ("-avx512f,-avx2,-fma,-avx", False)])
def test_narrower_isas_through_the_options_compute_the_same_matmul(mattr, wide):
    """AVX2 (on an AVX2 or AVX-512 host) and SSE code, whatever the host's CPU."""
    cpu = hcpu.parse_cpu(f"llvm -mattr={mattr}")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((45, 70)).astype(np.float32)
    b = rng.standard_normal((70, 53)).astype(np.float32)
    c = np.empty((45, 53), np.float32)
    module = hllvm.build(schedules.matmul_function(45, 53, 70, cpu=cpu), cpu=cpu)
    module["matmul"](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    assembly = module.assembly()
    assert "zmm" not in assembly
    wide = wide and AVX2_HOST
    assert cpu.isa == "avx2" if wide else cpu.isa in ("sse", "avx")
    assert ("ymm" in assembly) == wide
    assert ("vfmadd" in assembly) == (wide and "fma" in HOST.features)


def test_a_model_compiles_and_runs_for_avx2_through_the_target_string():
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = heterocc.compile(tiny_cnn(), target="reference").run({"input": x})[0]
    compiled = heterocc.compile(tiny_cnn(), target="llvm -mattr=-avx512f")
    assert compiled.fallbacks == {}
    assert "avx512f" not in compiled.build_static().targets["llvm"].cpu.features
    np.testing.assert_allclose(compiled.run({"input": x})[0], expected, rtol=1e-4, atol=1e-5)


def test_the_cli_takes_a_cpu_target_string(tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(model))
    out = tmp_path / "artifact"
    assert main(["compile", str(model), "--target", "llvm -mattr=-avx512f", "-o", str(out)]) == 0
    record = json.loads((out / "manifest.json").read_text())["kernels"]["llvm"]["cpu"]
    assert "avx512f" not in record["features"] and record["cpu"] == HOST.cpu
    assert main(["run", str(out)]) == 0
    assert "probabilities: float32[1, 10]" in capsys.readouterr().out


# --- cross compilation ----------------------------------------------------------------

ARM = "llvm -mtriple=aarch64-linux-gnu"


def test_an_aarch64_object_is_generated_on_any_host():
    cpu = hcpu.parse_cpu(ARM)
    module = hllvm.build(schedules.matmul_function(32, 48, 16, cpu=cpu), cpu=cpu)
    assert _elf_machine(module.object_code()) == EM_AARCH64
    assert "fmla" in module.assembly()  # NEON fused multiply-add
    with pytest.raises(TargetError, match="compiled for aarch64-linux-gnu"):
        module["matmul"](*(np.zeros(s, np.float32) for s in ((32, 16), (16, 48), (32, 48))))


def test_an_aarch64_shared_library_is_exported_or_the_object_with_a_clear_error(tmp_path):
    """With a cross compiler (Debian's gcc-aarch64-linux-gnu, or HETEROCC_CC_AARCH64)
    the model's library is linked for AArch64; without one the object file is kept beside
    the artifact's path (no half-written artifact) and CompileError says where and what
    to install."""
    compiled = heterocc.compile(tiny_cnn(), target=ARM)
    out = tmp_path / "arm"
    if link_command(hcpu.parse_cpu(ARM)) is None:
        obj = tmp_path / "arm.kernels.so.o"
        with pytest.raises(CompileError, match="gcc-aarch64-linux-gnu") as refused:
            compiled.export(str(out))
        assert str(obj) in str(refused.value) and refused.value.kept_files == (str(obj),)
        assert _elf_machine(obj.read_bytes()) == EM_AARCH64
        assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [obj.name]
        return
    compiled.export(str(out))
    library = out / "kernels" / "llvm" / "kernels.so"
    assert _elf_machine(library.read_bytes()) == EM_AARCH64
    header = subprocess.run(["file", str(library)], capture_output=True, text=True).stdout
    assert "shared object" in header
    record = json.loads((out / "manifest.json").read_text())["kernels"]["llvm"]["cpu"]
    assert record["triple"] == "aarch64-linux-gnu" and "neon" in record["features"]
    with pytest.raises(heterocc.errors.ArtifactError,
                       match="compiled for aarch64-linux-gnu .* this host is"):
        heterocc.load(str(out))


def test_without_a_cross_compiler_the_object_is_written_with_a_clear_error(tmp_path,
                                                                          monkeypatch):
    from heterocc.targets.llvm import module as hmodule

    cpu = hcpu.parse_cpu(ARM)
    module = hllvm.build(schedules.matmul_function(16, 32, 8, cpu=cpu), cpu=cpu)
    monkeypatch.setattr(hmodule, "link_command", lambda description: None)
    with pytest.raises(CompileError, match=r"no C compiler links aarch64-linux-gnu code .*"
                                           r"k\.so\.o.*apt-get install gcc-aarch64-linux-gnu"):
        module.export_library(tmp_path / "k.so")
    assert _elf_machine((tmp_path / "k.so.o").read_bytes()) == EM_AARCH64
    assert not (tmp_path / "k.so").exists()


def test_the_cross_compiler_can_be_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HETEROCC_CC_AARCH64", "no-such-cross-gcc --flag")
    cpu = hcpu.parse_cpu(ARM)
    assert link_command(cpu) == ["no-such-cross-gcc", "--flag"]
    module = hllvm.build(schedules.matmul_function(16, 32, 8, cpu=cpu), cpu=cpu)
    with pytest.raises(CompileError, match="C compiler 'no-such-cross-gcc' not found"):
        module.export_library(tmp_path / "k.so")


def test_host_libraries_are_elf_for_the_host(tmp_path):
    module = hllvm.build(schedules.matmul_function(8, 16, 8, cpu=active_cpu()))
    assert _elf_machine(module.object_code()) == (
        EM_X86_64 if HOST.arch == "x86_64" else EM_AARCH64)


# --- the run-time check ---------------------------------------------------------------

def test_code_for_missing_features_is_refused_naming_them():
    host = _avx2_machine()
    with pytest.raises(TargetError, match=r"lacks: .*avx512f.*-mattr=.*-avx512f"):
        hcpu.check_runs_on(hcpu.parse_cpu("llvm -mcpu=znver5"), host)
    with pytest.raises(TargetError, match="lacks: avx512bw, avx512cd, avx512dq, avx512f, "
                                          "avx512vl;"):
        hcpu.check_runs_on(hcpu.parse_cpu("llvm -mcpu=x86-64-v3 -mattr=+avx512bw,+avx512cd,"
                                          "+avx512dq,+avx512vl"), host)
    assert hcpu.missing_features(hcpu.parse_cpu("llvm -mcpu=znver5"), host)[:1] == [
        "avx512bf16"]
    hcpu.check_runs_on(hcpu.parse_cpu("llvm -mcpu=x86-64-v3"), host)
    hcpu.check_runs_on(hcpu.parse_cpu("llvm -mcpu=znver3 -mattr=-fma"), host)


def test_code_for_another_triple_is_refused():
    with pytest.raises(TargetError, match="compiled for aarch64-linux-gnu .* this host is "
                                          "x86_64-unknown-linux-gnu"):
        hcpu.check_runs_on(hcpu.parse_cpu(ARM), _avx2_machine())
    # the vendor field does not matter
    hcpu.check_runs_on(hcpu.parse_cpu("llvm -mcpu=x86-64-v2 -mtriple=x86_64-pc-linux-gnu"),
                       _avx2_machine())


def test_descriptions_round_trip_through_json():
    d = hcpu.parse_cpu("llvm -mcpu=znver4 -mattr=-avx512vnni -num-cores=5")
    assert hcpu.CPUDescription.from_json(json.loads(json.dumps(d.to_json()))) == d
    assert hcpu.parse_cpu(d.spec()).features == d.features
