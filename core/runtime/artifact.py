"""Self-contained compiled artifacts on disk: export and load.

Layout of an artifact directory::

    manifest.json   format version, inputs, outputs, targets, and the SHA-256 of every file
    graph.json      the optimized, fused Graph IR (heterocc.ir.serialize)
    params.npz      its constant tensors (loaded with allow_pickle=False)
    kernels/...     whatever each target saves for its functions (e.g. a shared library)

What a target saves may name the machine its kernels need (the ``llvm`` target records
the CPU description: triple, CPU name and features, under ``kernels.llvm.cpu``); a target
refuses to load kernels this host cannot run, and loading raises ArtifactError naming
what is missing instead of letting the code die on an illegal instruction.

Loading checks the format version and every file's hash before reading it, and
never executes code from the artifact other than the compiled kernels.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import ArtifactError, TargetError
from ..ir.graph import Graph
from ..ir.serialize import graph_from_json, graph_to_json
from ..targets import get_target
from .executor import GraphExecutor, ProfileEntry, check_input, format_profile
from .inputs import InputSpec, name_inputs

#: bumped whenever the artifact layout changes incompatibly (2: CPU kernels record the
#: CPU description they were compiled for)
ARTIFACT_FORMAT_VERSION = 2
MANIFEST = "manifest.json"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def export_artifact(path: str, graph: Graph, executor: GraphExecutor,
                    inputs: list[InputSpec], output_names: list[str],
                    targets: Mapping[str, object]) -> None:
    """Write ``graph`` and the kernels of ``executor`` to directory ``path``.

    ``targets`` maps a target name to the target instance that built the
    functions placed on it; a target saves its kernels through its optional
    ``save_kernels(kernels, directory) -> dict`` hook.
    """
    os.makedirs(path, exist_ok=True)
    doc, params = graph_to_json(graph)
    with open(os.path.join(path, "graph.json"), "w") as f:
        json.dump(doc, f)
    np.savez(os.path.join(path, "params.npz"), **params)
    kernel_info: dict[str, dict] = {}
    for name, target in targets.items():
        funcs = [n.name for n in graph.nodes if n.body is not None
                 and executor.placement.get(n.name) == name]
        save = getattr(target, "save_kernels", None)
        if save is not None and funcs:
            kdir = os.path.join(path, "kernels", name)
            os.makedirs(kdir, exist_ok=True)
            kernel_info[name] = save({f: executor.kernels[f] for f in funcs}, kdir)
    files = {}
    for root, _, names in os.walk(path):
        for fname in names:
            full = os.path.join(root, fname)
            rel = os.path.relpath(full, path)
            if rel != MANIFEST:
                files[rel] = _sha256(full)
    manifest = {
        "format": ARTIFACT_FORMAT_VERSION,
        "producer": "heterocc",
        "inputs": [s.to_json() for s in inputs],
        "outputs": list(output_names),
        "placement": dict(executor.placement),
        "kernels": kernel_info,
        "files": dict(sorted(files.items())),
    }
    with open(os.path.join(path, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)


def _read_manifest(path: str) -> dict:
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath) as f:
            manifest = json.load(f)
    except OSError as exc:
        raise ArtifactError(f"{path!r} is not a heterocc artifact: cannot read {MANIFEST} "
                            f"({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{mpath} is corrupt: {exc}") from None
    if manifest.get("format") != ARTIFACT_FORMAT_VERSION:
        raise ArtifactError(f"artifact format {manifest.get('format')!r} is not supported; "
                            f"this heterocc reads format {ARTIFACT_FORMAT_VERSION}: "
                            "recompile the model")
    return manifest


def _verify_files(path: str, manifest: dict) -> None:
    files = manifest.get("files", {})
    for rel in ("graph.json", "params.npz"):
        if rel not in files:
            raise ArtifactError(f"artifact manifest does not list {rel}")
    for rel, digest in files.items():
        full = os.path.normpath(os.path.join(path, rel))
        if not full.startswith(os.path.normpath(path) + os.sep):
            raise ArtifactError(f"artifact manifest names a file outside the artifact: {rel!r}")
        if not os.path.isfile(full):
            raise ArtifactError(f"artifact file {rel} is missing")
        if _sha256(full) != digest:
            raise ArtifactError(f"artifact file {rel} does not match its recorded hash: "
                                "the artifact is corrupt or was modified")


@dataclass
class LoadedModel:
    """A model loaded from an artifact: ``run`` as for a compiled model."""

    graph: Graph
    executor: GraphExecutor
    inputs: list[InputSpec]
    output_names: list[str]
    path: str = ""
    _profile: dict[str, ProfileEntry] | None = field(default=None, repr=False)

    def run(self, inputs=None, **named) -> list[np.ndarray]:
        given = name_inputs(self.inputs, inputs, named)
        args = [check_input(v, given[v.name]) for v in self.graph.inputs]
        return self.executor.execute(args)

    __call__ = run

    def enable_profiling(self) -> None:
        self._profile = self.executor.profile = {}

    def profile_entries(self) -> list[ProfileEntry]:
        """The runs since ``enable_profiling``, one entry per node."""
        return list((self._profile or {}).values())

    def profile_report(self) -> str:
        return format_profile(list((self._profile or {}).values()))


def load_artifact(path: str) -> LoadedModel:
    """Load an artifact written by ``CompiledModel.export``.

    Raises ArtifactError for a missing, corrupt or tampered file, another format
    version, or kernels compiled for a machine this host is not (another architecture,
    CPU features it lacks: the message names them).
    """
    path = os.fspath(path)
    manifest = _read_manifest(path)
    _verify_files(path, manifest)
    with open(os.path.join(path, "graph.json")) as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"graph.json is corrupt: {exc}") from None
    try:
        with np.load(os.path.join(path, "params.npz"), allow_pickle=False) as npz:
            params = {k: npz[k] for k in npz.files}
    except ValueError as exc:
        raise ArtifactError(f"params.npz is corrupt or holds objects: {exc}") from None
    graph = graph_from_json(doc, params)
    placement = manifest.get("placement", {})
    targets: dict[str, object] = {}
    kernels = {}
    for node in graph.nodes:
        if node.body is None:
            continue
        name = placement.get(node.name, "reference")
        target = targets.get(name) or targets.setdefault(name, get_target(name))
        load = getattr(target, "load_kernel", None)
        info = manifest.get("kernels", {}).get(name)
        if load is not None and info is not None:
            try:
                kernels[node.name] = load(node, os.path.join(path, "kernels", name), info)
            except TargetError as exc:
                raise ArtifactError(f"artifact {path} cannot run on this host: {exc}") from None
        else:
            kernels[node.name] = target.build(node)
    inputs = [InputSpec.from_json(d) for d in manifest["inputs"]]
    executor = GraphExecutor(graph, kernels, placement)
    return LoadedModel(graph, executor, inputs, list(manifest["outputs"]), path)
