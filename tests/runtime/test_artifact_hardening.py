"""Artifacts that cannot be hijacked or corrupted: manifest paths confined to the
artifact and covered by its hashes, every load failure an ArtifactError, exports
renamed into place whole, and signed manifests (Ed25519) checked before anything else."""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc import cli
from heterocc.errors import ArtifactError
from heterocc.runtime import files as artifact_files
from heterocc.runtime.files import sha256_file
from heterocc.runtime.signing import generate_keypair

X = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)


def _model():
    w = numpy_helper.from_array(np.linspace(-1, 1, 16 * 8, dtype=np.float32).reshape(16, 8),
                                "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, (4, 16))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, (4, 8))], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.fixture(scope="module")
def compiled():
    return heterocc.compile(_model(), target="llvm")


@pytest.fixture
def artifact(compiled, tmp_path):
    path = tmp_path / "art"
    compiled.export(str(path))
    return path


def _manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _write_manifest(path, manifest: dict, rehash: bool = True) -> None:
    """The manifest written back, its file hashes recomputed (what someone who changed
    files and knows the format would do)."""
    if rehash:
        for rel in manifest["files"]:
            full = path / rel
            if full.is_file():
                manifest["files"][rel] = sha256_file(str(full))
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def no_library_opened(monkeypatch):
    """Fails the test if any shared library is opened through ctypes."""
    opened = []

    def refuse(name, *args, **kwargs):
        opened.append(name)
        raise AssertionError(f"a library was opened: {name}")

    monkeypatch.setattr(ctypes, "CDLL", refuse)
    return opened


@pytest.mark.parametrize("library", ["/usr/lib/x86_64-linux-gnu/libm.so.6", "../../evil.so",
                                     "sub/../../../evil.so", "", None, 7])
def test_a_library_path_leaving_the_artifact_is_refused_before_any_library_opens(
        artifact, library, no_library_opened):
    manifest = _manifest(artifact)
    manifest["kernels"]["llvm"]["library"] = library
    _write_manifest(artifact, manifest)
    with pytest.raises(ArtifactError):
        heterocc.load(str(artifact))
    assert no_library_opened == []


def test_a_manifest_file_entry_leaving_the_artifact_is_refused(artifact, no_library_opened):
    manifest = _manifest(artifact)
    manifest["files"]["/etc/passwd"] = "0" * 64
    _write_manifest(artifact, manifest, rehash=False)
    with pytest.raises(ArtifactError, match="outside the artifact"):
        heterocc.load(str(artifact))


def test_a_target_name_that_is_a_path_is_refused(artifact, no_library_opened):
    manifest = _manifest(artifact)
    node = next(iter(manifest["placement"]))
    manifest["placement"][node] = "../llvm"
    _write_manifest(artifact, manifest)
    with pytest.raises(ArtifactError, match="outside the artifact"):
        heterocc.load(str(artifact))


def test_a_symbolic_link_is_refused_even_to_an_identical_file(artifact, tmp_path,
                                                              no_library_opened):
    library = artifact / "kernels" / "llvm" / "kernels.so"
    outside = tmp_path / "outside.so"
    shutil.copy(library, outside)
    library.unlink()
    library.symlink_to(outside)  # same bytes: the hash alone would accept it
    with pytest.raises(ArtifactError, match="symbolic link"):
        heterocc.load(str(artifact))


def test_a_linked_directory_is_refused(artifact, tmp_path, no_library_opened):
    kernels = artifact / "kernels"
    moved = tmp_path / "elsewhere"
    shutil.move(str(kernels), str(moved))
    kernels.symlink_to(moved, target_is_directory=True)
    with pytest.raises(ArtifactError, match="symbolic link"):
        heterocc.load(str(artifact))


def test_a_file_the_manifest_does_not_list_is_refused(artifact, no_library_opened):
    (artifact / "kernels" / "llvm" / "extra.so").write_bytes(b"\x7fELF")
    with pytest.raises(ArtifactError, match="not listed"):
        heterocc.load(str(artifact))


def _truncate(path, rel):
    data = (path / rel).read_bytes()
    (path / rel).write_bytes(data[:len(data) // 2])


TAMPERINGS = {
    "params not a zip": lambda p: (p / "params.npz").write_bytes(b"not a zip file"),
    "params truncated": lambda p: _truncate(p, "params.npz"),
    "params empty": lambda p: (p / "params.npz").write_bytes(b""),
    "graph not json": lambda p: (p / "graph.json").write_text("{\"nodes\": ["),
    "graph not utf-8": lambda p: (p / "graph.json").write_bytes(b"\xff\xfe\x00"),
    "graph empty object": lambda p: (p / "graph.json").write_text("{}"),
    "graph a list": lambda p: (p / "graph.json").write_text("[1, 2]"),
    "graph nested deep": lambda p: (p / "graph.json").write_text("[" * 100000),
    "library garbage": lambda p: (p / "kernels/llvm/kernels.so").write_bytes(b"\0" * 64),
    "library truncated": lambda p: _truncate(p, "kernels/llvm/kernels.so"),
    "library record garbage": lambda p: (p / "kernels/llvm/kernels.so.json").write_text("[]"),
    "library record no functions": lambda p: (p / "kernels/llvm/kernels.so.json").write_text(
        json.dumps({"target": json.loads((p / "kernels/llvm/kernels.so.json").read_text())
                    ["target"]})),
    "library record missing": lambda p: (p / "kernels/llvm/kernels.so.json").unlink(),
    "graph missing": lambda p: (p / "graph.json").unlink(),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERINGS))
def test_every_tampering_ends_in_an_artifact_error(artifact, tamper):
    TAMPERINGS[tamper](artifact)
    _write_manifest(artifact, _manifest(artifact))  # rehashed where the file is there
    with pytest.raises(ArtifactError):
        heterocc.load(str(artifact))


MANIFESTS = {
    "not json": b"{",
    "a list": b"[]",
    "binary": b"\xff\xfe",
    "files a list": json.dumps({"format": 2, "inputs": [], "outputs": [], "placement": {},
                                "kernels": {}, "files": []}).encode(),
    "hash not a string": None,  # filled from the real manifest below
    "inputs malformed": None,
}


@pytest.mark.parametrize("case", sorted(MANIFESTS))
def test_a_malformed_manifest_ends_in_an_artifact_error(artifact, case):
    text = MANIFESTS[case]
    if text is None:
        manifest = _manifest(artifact)
        if case == "hash not a string":
            manifest["files"]["graph.json"] = 5
        else:
            manifest["inputs"] = [{"nom": "x"}]
        text = json.dumps(manifest).encode()
    (artifact / "manifest.json").write_bytes(text)
    with pytest.raises(ArtifactError):
        heterocc.load(str(artifact))


def _export_to(args):
    path, barrier = args
    barrier.wait()
    heterocc.compile(_model(), target="llvm").export(path)


def test_concurrent_exports_to_one_path_leave_one_whole_artifact(compiled, tmp_path):
    path = str(tmp_path / "shared")
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(6)
    workers = [context.Process(target=_export_to, args=((path, barrier),)) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0] * 6
    loaded = heterocc.load(path)
    np.testing.assert_array_equal(loaded.run([X])[0], compiled.run([X])[0])
    assert sorted(os.listdir(tmp_path)) == ["shared"]  # no staging or replaced copies left


def test_export_replaces_an_artifact_but_not_a_directory_of_other_files(compiled, artifact,
                                                                       tmp_path):
    compiled.export(str(artifact))  # over an earlier artifact: replaced whole
    heterocc.load(str(artifact))
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(ArtifactError, match="not a heterocc artifact"):
        compiled.export(str(other))
    assert (other / "keep.txt").read_text() == "mine"


# --- signatures


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    pairs = {}
    for name in ("mine", "theirs"):
        private, public = str(folder / f"{name}.pem"), str(folder / f"{name}.pub")
        generate_keypair(private, public)
        pairs[name] = (private, public)
    assert oct(os.stat(pairs["mine"][0]).st_mode & 0o777) == "0o600"
    return pairs


def test_a_signed_artifact_loads_under_its_key(compiled, keys, tmp_path):
    path = str(tmp_path / "signed")
    compiled.export(path, sign=keys["mine"][0])
    loaded = heterocc.load(path, verify=keys["mine"][1])
    np.testing.assert_array_equal(loaded.run([X])[0], compiled.run([X])[0])


def test_verify_refuses_unsigned_and_foreign_artifacts_before_reading_files(
        compiled, keys, artifact, tmp_path, monkeypatch, no_library_opened):
    signed = str(tmp_path / "signed")
    compiled.export(signed, sign=keys["theirs"][0])

    def no_hashing(path):
        raise AssertionError(f"{path} was read before the signature was checked")

    monkeypatch.setattr(artifact_files, "sha256_file", no_hashing)
    monkeypatch.setattr("heterocc.runtime.artifact.sha256_file", no_hashing)
    with pytest.raises(ArtifactError, match="not signed"):
        heterocc.load(str(artifact), verify=keys["mine"][1])
    with pytest.raises(ArtifactError, match="does not match the key"):
        heterocc.load(signed, verify=keys["mine"][1])


def test_a_replaced_library_with_a_rehashed_manifest_is_refused_under_verify(
        compiled, keys, tmp_path):
    path = tmp_path / "signed"
    compiled.export(str(path), sign=keys["mine"][0])
    library = path / "kernels" / "llvm" / "kernels.so"
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0x01
    library.write_bytes(bytes(data))
    _write_manifest(path, _manifest(path))  # hashes agree again: only the signature can tell
    with pytest.raises(ArtifactError, match="does not match the key"):
        heterocc.load(str(path), verify=keys["mine"][1])


def test_cli_keygen_sign_and_verify(keys, tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes(_model().SerializeToString())
    private, public = str(tmp_path / "k.pem"), str(tmp_path / "k.pub")
    assert cli.main(["keygen", private, public]) == 0
    out = str(tmp_path / "out")
    assert cli.main(["compile", str(model), "-o", out, "--sign", private]) == 0
    assert os.path.isfile(os.path.join(out, "manifest.sig"))
    assert cli.main(["run", out, "--verify", public]) == 0
    capsys.readouterr()
    assert cli.main(["run", out, "--verify", keys["theirs"][1]]) == 2
    assert "does not match the key" in capsys.readouterr().err
    assert cli.main(["keygen", private, public]) == 2  # never overwrites a key
