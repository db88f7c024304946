"""Artifacts name the CPU their kernels were compiled for, and a host that lacks one of
its features (or is another architecture) refuses them with a clear error instead of
stopping on an illegal instruction."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import heterocc
from heterocc.errors import ArtifactError, TargetError
from heterocc.models import tiny_cnn
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm import cpu as hcpu
from heterocc.targets.llvm import schedules
from heterocc.targets.llvm.cpu import active_cpu

HOST = hcpu.host_cpu()


def _a_feature_this_host_lacks() -> str:
    """A feature of some CPU of the host's architecture that the host does not have (x86
    vendors each have their own: AMD's sse4a and clzero, Intel's AMX)."""
    known = set()
    for family in hcpu.CPU_FAMILIES.values():
        known |= hcpu.with_requirements(family.features)
    same_arch = {f for f in known if hcpu.parse_cpu(f"llvm -mattr=+{f}").arch == HOST.arch}
    missing = sorted(same_arch - HOST.features)
    assert missing, f"{HOST.cpu} has every feature the CPU tables name"
    return missing[0]


def _export(tmp_path, target: str):
    out = tmp_path / "artifact"
    heterocc.compile(tiny_cnn(), target=target).export(str(out))
    return out


def test_the_manifest_records_triple_cpu_and_features(tmp_path):
    out = _export(tmp_path, "llvm -mattr=-avx512f")
    record = json.loads((out / "manifest.json").read_text())["kernels"]["llvm"]["cpu"]
    assert record["triple"] == HOST.triple and record["cpu"] == HOST.cpu
    assert set(record["features"]) == hcpu.without_dependents(HOST.features, ["avx512f"])
    library = json.loads((out / "kernels" / "llvm" / "kernels.so.json").read_text())
    assert library["target"] == record
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    expected = heterocc.compile(tiny_cnn(), target="reference").run({"input": x})[0]
    np.testing.assert_allclose(heterocc.load(str(out)).run({"input": x})[0], expected,
                               rtol=1e-4, atol=1e-5)


def test_an_artifact_needing_a_feature_this_host_lacks_is_refused(tmp_path):
    feature = _a_feature_this_host_lacks()
    out = _export(tmp_path, f"llvm -mattr=+{feature}")
    # the feature brings those it requires (AMD hosts: amx-bf16 brings amx-tile), and the
    # message names every one the host lacks
    lacking = hcpu.missing_features(hcpu.parse_cpu(f"llvm -mattr=+{feature}"), HOST)
    assert feature in lacking
    with pytest.raises(ArtifactError, match=re.escape(f"lacks: {', '.join(lacking)}; ") +
                       ".*" + re.escape(f"-mattr={','.join('-' + f for f in lacking)}")):
        heterocc.load(str(out))


def test_an_avx512_artifact_on_an_avx2_host_is_refused(tmp_path, monkeypatch):
    """Exported with -mattr=+avx512f (wherever CI runs), loaded on an AVX2 host: this
    host as it would be without AVX-512."""
    out = _export(tmp_path, "llvm -mattr=+avx512f")
    avx2_host = hcpu.CPUDescription(
        HOST.triple, HOST.cpu, hcpu.without_dependents(HOST.features, ["avx512f"]),
        HOST.num_cores, HOST.l1d, HOST.l2, HOST.l3)
    monkeypatch.setattr(hcpu, "host_cpu", lambda: avx2_host)
    with pytest.raises(ArtifactError, match=r"cannot run on this host: .*compiled for CPU "
                                            r".* lacks: .*avx512f"):
        heterocc.load(str(out))


def _cpuid_can_hide_avx512() -> bool:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "avx512f" in flags and "cpuid_fault" in flags


@pytest.mark.skipif(not _cpuid_can_hide_avx512(),
                    reason="needs an AVX-512 CPU with CPUID faulting; the refusal itself is "
                           "tested above with the host's description patched")
def test_an_avx512_artifact_is_refused_where_cpuid_hides_avx512(tmp_path):
    """The same refusal in a real process whose CPUID reports no AVX-512
    (benchmarks/avx2_host.py): every layer that asks the CPU sees an AVX2 host. The
    artifact that loads here fails there, with the error, not an illegal instruction."""
    repo = Path(__file__).resolve().parents[2]
    hide = [sys.executable, str(repo / "benchmarks" / "avx2_host.py")]
    check = subprocess.run([*hide, "--check"], capture_output=True, text=True, timeout=300)
    if check.returncode != 0:  # e.g. a sandbox that forbids arch_prctl
        pytest.skip(f"AVX-512 cannot be hidden here: {check.stdout.strip()}")
    out = _export(tmp_path, "llvm -mattr=+avx512f")
    heterocc.load(str(out))  # this host runs it
    load = (f"import heterocc; from heterocc.errors import ArtifactError\n"
            f"try:\n    heterocc.load({str(out)!r})\nexcept ArtifactError as e:\n"
            f"    print('refused:', e)")
    result = subprocess.run([*hide, sys.executable, "-c", load],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "refused:" in result.stdout and "lacks:" in result.stdout
    assert "avx512f" in result.stdout.split("lacks:")[1]


def test_an_artifact_of_another_architecture_is_refused(tmp_path, monkeypatch):
    """Exported for this host, loaded on a host of the other architecture."""
    out = _export(tmp_path, "llvm")
    assert json.loads((out / "manifest.json").read_text())["format"] == 2
    other = hcpu.parse_cpu("llvm -mtriple=aarch64-linux-gnu" if HOST.arch == "x86_64"
                           else "llvm -mtriple=x86_64-linux-gnu")
    monkeypatch.setattr(hcpu, "host_cpu", lambda: other)
    with pytest.raises(ArtifactError, match=f"compiled for {HOST.triple} .* this host is "
                                            f"{other.triple}"):
        heterocc.load(str(out))


def test_a_library_without_a_cpu_record_is_refused(tmp_path):
    module = hllvm.build(schedules.matmul_function(8, 16, 8, cpu=active_cpu()))
    path = module.export_library(tmp_path / "k.so")
    meta_path = tmp_path / "k.so.json"
    meta = json.loads(meta_path.read_text())
    assert hcpu.CPUDescription.from_json(meta["target"]) == HOST
    del meta["target"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(TargetError, match="does not record the CPU"):
        hllvm.load_library(path)
