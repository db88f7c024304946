"""Self-contained compiled artifacts on disk: export and load.

Layout of an artifact directory::

    manifest.json   format version, inputs, outputs, targets, and the SHA-256 of every file
    manifest.sig    (signed artifacts) an Ed25519 signature of manifest.json
    graph.json      the optimized, fused Graph IR (heterocc.ir.serialize)
    params.npz      its constant tensors (loaded with allow_pickle=False)
    kernels/...     whatever each target saves for its functions (e.g. a shared library)

What a target saves may name the machine its kernels need (the ``llvm`` target records
the CPU description: triple, CPU name and features, under ``kernels.llvm.cpu``); a target
refuses to load kernels this host cannot run, and loading raises ArtifactError naming
what is missing instead of letting the code die on an illegal instruction.

An artifact runs native code (the CPU kernels are a shared library that loading opens).
Loading therefore checks, before it opens anything but the manifest (and, with
``verify=``, checks its signature before even that; ``heterocc.runtime.signing``):
the format version; that the directory holds exactly the files the manifest lists, all
regular files, none through a symbolic link, every name a plain relative path; and every
file's hash. Targets open only paths confined to the artifact
(``heterocc.runtime.files.member_path``). The hashes catch corruption and a partial
copy; they do not stop someone who can write the directory, who can rehash a replaced
library: only a signature checked against a key you trust does. Every failure to load is
an ArtifactError.

Export writes the whole artifact into a fresh directory beside ``path`` and renames it
into place, so that a reader (or a concurrent export to the same path) sees either the
old artifact or a new one whole, never a mixture.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import ArtifactError, CompileError, HeteroccError, TargetError
from ..ir.graph import Graph
from ..ir.serialize import graph_from_json, graph_to_json
from ..sdk.registry import get_target
from .executor import GraphExecutor, ProfileEntry, check_input, format_profile
from .files import check_member_name, member_path, sha256_file, tree_files
from .inputs import InputSpec, name_inputs
from .memory import pool_graph_constants

#: bumped whenever the artifact layout changes incompatibly (2: CPU kernels record the
#: CPU description they were compiled for)
ARTIFACT_FORMAT_VERSION = 2
MANIFEST = "manifest.json"
#: the detached signature of the manifest (see ``heterocc.runtime.signing``)
SIGNATURE = "manifest.sig"
#: tries at renaming a finished export into place while other exports race for the path
_PUBLISH_TRIES = 64


def export_artifact(path: str, graph: Graph, executor: GraphExecutor,
                    inputs: list[InputSpec], output_names: list[str],
                    targets: Mapping[str, object], sign: str | None = None) -> None:
    """Write ``graph`` and the kernels of ``executor`` to directory ``path``.

    ``targets`` maps a target name to the target instance that built the
    functions placed on it; a target saves its kernels through its optional
    ``save_kernels(kernels, directory) -> dict`` hook. ``sign`` names an Ed25519
    private key file (``heterocc keygen``) to sign the manifest with.

    The artifact is written to a new directory beside ``path`` and renamed into place:
    an earlier artifact (or an empty directory) at ``path`` is replaced whole; anything
    else there is refused (ArtifactError) rather than deleted.
    """
    path = os.path.abspath(os.fspath(path))
    parent, base = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    _check_replaceable(path)
    staging = _fresh_directory(parent, f".{base}.partial-")
    try:
        _write_artifact(staging, graph, executor, inputs, output_names, targets)
        if sign is not None:
            from .signing import sign_artifact

            sign_artifact(staging, sign)
        _publish(staging, path)
    except CompileError as exc:
        kept = _keep_beside(exc.kept_files, staging, path)
        shutil.rmtree(staging, ignore_errors=True)
        if not kept:
            raise
        message = str(exc)
        for old, new in kept.items():
            message = message.replace(old, new)
        raise CompileError(message, kept_files=tuple(kept.values())) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _keep_beside(files: tuple[str, ...], staging: str, path: str) -> dict[str, str]:
    """Move the files a failed export kept for the user out of the staging directory
    (which is removed) to ``<path>.<name>``; their old and new paths."""
    kept = {}
    for name in files:
        if os.path.commonpath([os.path.abspath(name), staging]) != staging:
            continue  # written elsewhere by the target: stays where it is
        destination = f"{path}.{os.path.basename(name)}"
        os.replace(name, destination)
        kept[name] = destination
    return kept


def _fresh_directory(parent: str, prefix: str) -> str:
    """A new directory in ``parent`` (made with the process's umask, unlike mkdtemp)."""
    while True:
        candidate = os.path.join(parent, prefix + secrets.token_hex(6))
        try:
            os.mkdir(candidate)
            return candidate
        except FileExistsError:
            continue


def _check_replaceable(path: str) -> None:
    """ArtifactError unless ``path`` is absent, an empty directory or an artifact."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        raise ArtifactError(f"{path} exists and is not a directory; choose another output "
                            "path or remove it")
    if os.listdir(path) and not os.path.isfile(os.path.join(path, MANIFEST)):
        raise ArtifactError(f"{path} exists and is not a heterocc artifact (no {MANIFEST}); "
                            "refusing to replace it: choose another output path or empty it")


def _publish(staging: str, path: str) -> None:
    """Rename ``staging`` to ``path``; an artifact already there is moved aside first
    and deleted after. Every rename is atomic, so ``path`` is at every moment absent,
    the old artifact or a new one whole; of concurrent exports the last rename wins."""
    parent, base = os.path.split(path)
    for _ in range(_PUBLISH_TRIES):
        try:
            os.rename(staging, path)  # replaces a missing path or an empty directory
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        _check_replaceable(path)
        aside = os.path.join(parent, f".{base}.old-{secrets.token_hex(6)}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            continue  # another export moved it aside first: try again
        shutil.rmtree(aside, ignore_errors=True)
    raise ArtifactError(f"could not rename the export into {path}: other processes kept "
                        "replacing it")


def _write_artifact(path: str, graph: Graph, executor: GraphExecutor,
                    inputs: list[InputSpec], output_names: list[str],
                    targets: Mapping[str, object]) -> None:
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
            kdir = os.path.join(path, "kernels", check_member_name(name, "target"))
            os.makedirs(kdir, exist_ok=True)
            kernel_info[name] = save({f: executor.kernels[f] for f in funcs}, kdir)
    files = {}
    for rel, kind in tree_files(path).items():
        if kind != "file":
            raise ArtifactError(f"a target wrote {rel!r} into the artifact, which is not a "
                                "regular file")
        files[rel] = sha256_file(os.path.join(path, *rel.split("/")))
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


def parse_manifest(text: bytes, where: str) -> dict:
    """The manifest from its bytes, checked for the fields loading reads and their types."""
    try:
        manifest = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ArtifactError(f"{where} is corrupt: {exc}") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{where} is corrupt: not a JSON object")
    if manifest.get("format") != ARTIFACT_FORMAT_VERSION:
        raise ArtifactError(f"artifact format {manifest.get('format')!r} is not supported; "
                            f"this heterocc reads format {ARTIFACT_FORMAT_VERSION}: "
                            "recompile the model")
    kinds = {"inputs": list, "outputs": list, "placement": dict, "kernels": dict,
             "files": dict}
    for key, kind in kinds.items():
        if not isinstance(manifest.get(key), kind):
            raise ArtifactError(f"{where} is corrupt: {key!r} is missing or not a "
                                f"{kind.__name__}")
    for rel, digest in manifest["files"].items():
        check_member_name(rel)
        if not isinstance(digest, str) or len(digest) != 64:
            raise ArtifactError(f"{where} is corrupt: the hash of {rel!r} is not a SHA-256")
    for node, target in manifest["placement"].items():
        if not isinstance(target, str) or "/" in check_member_name(target, "target"):
            raise ArtifactError(f"{where}: function {node!r} is placed on {target!r}, "
                                "which is not a target name")
    return manifest


def read_manifest_bytes(path: str) -> bytes:
    """The bytes of ``path``'s manifest (ArtifactError when there is none)."""
    try:
        with open(member_path(path, MANIFEST), "rb") as f:
            return f.read()
    except OSError as exc:
        raise ArtifactError(f"{path!r} is not a heterocc artifact: cannot read {MANIFEST} "
                            f"({exc.strerror})") from None


def _verify_files(path: str, manifest: dict) -> None:
    """The directory holds exactly the manifest's files (besides the manifest and its
    signature), all regular files with their recorded hashes."""
    files = manifest["files"]
    for rel in ("graph.json", "params.npz"):
        if rel not in files:
            raise ArtifactError(f"artifact manifest does not list {rel}")
    try:
        present = tree_files(path)
    except OSError as exc:
        raise ArtifactError(f"cannot list artifact {path}: {exc}") from None
    for rel, kind in sorted(present.items()):
        if kind != "file":
            what = "symbolic link" if kind == "link" else "special file"
            raise ArtifactError(f"artifact entry {rel!r} is a {what}; an artifact holds "
                                "regular files only")
        if rel not in files and rel not in (MANIFEST, SIGNATURE):
            raise ArtifactError(f"artifact file {rel!r} is not listed in its manifest: the "
                                "artifact was modified")
    for rel, digest in files.items():
        if present.get(rel) != "file":
            raise ArtifactError(f"artifact file {rel} is missing")
        try:
            actual = sha256_file(member_path(path, rel))
        except OSError as exc:
            raise ArtifactError(f"cannot read artifact file {rel}: {exc.strerror}") from None
        if actual != digest:
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


def load_artifact(path: str, verify: str | None = None) -> LoadedModel:
    """Load an artifact written by ``CompiledModel.export``.

    ``verify`` names an Ed25519 public key file (``heterocc keygen``): the artifact must
    carry a signature of its manifest by the matching private key, checked before any
    other file is read. Raises ArtifactError for a missing, corrupt or tampered file
    (or signature), another format version, or kernels compiled for a machine this host
    is not (another architecture, CPU features it lacks: the message names them).
    """
    path = os.fspath(path)
    if verify is not None:
        from .signing import verified_manifest

        text = verified_manifest(path, verify)
    else:
        text = read_manifest_bytes(path)
    manifest = parse_manifest(text, os.path.join(path, MANIFEST))
    _verify_files(path, manifest)
    try:
        return _load_verified(path, manifest)
    except ArtifactError:
        raise
    except TargetError as exc:
        raise ArtifactError(f"artifact {path} cannot run on this host: {exc}") from None
    except (HeteroccError, OSError, EOFError, ValueError, KeyError, IndexError, TypeError,
            AttributeError, RecursionError, zipfile.BadZipFile) as exc:
        # the files match their hashes, so this is an artifact written wrong (or by a
        # tool that rehashed what it changed): say which, not a traceback
        raise ArtifactError(f"artifact {path} cannot be loaded: {type(exc).__name__}: "
                            f"{exc}") from None


def _load_verified(path: str, manifest: dict) -> LoadedModel:
    with open(member_path(path, "graph.json"), "rb") as f:
        try:
            doc = json.loads(f.read())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"graph.json is corrupt: {exc}") from None
    try:
        with np.load(member_path(path, "params.npz"), allow_pickle=False) as npz:
            params = {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ArtifactError(f"params.npz is corrupt or holds objects: {exc}") from None
    graph = graph_from_json(doc, params)
    del params
    pool_graph_constants(graph)  # as a compile leaves them (``pool_constants``)
    placement = manifest["placement"]
    targets: dict[str, object] = {}
    kernels = {}
    for node in graph.nodes:
        if node.body is None:
            continue
        name = placement.get(node.name, "reference")
        target = targets.get(name) or targets.setdefault(name, get_target(name))
        load = getattr(target, "load_kernel", None)
        info = manifest["kernels"].get(name)
        if load is not None and info is not None:
            if not isinstance(info, dict):
                raise ArtifactError(f"artifact manifest: the record of target {name!r} is "
                                    "not an object")
            kernels[node.name] = load(node, member_path(path, f"kernels/{name}"), info)
        else:
            kernels[node.name] = target.build(node)
    inputs = [InputSpec.from_json(d) for d in manifest["inputs"]]
    executor = GraphExecutor(graph, kernels, placement)
    return LoadedModel(graph, executor, inputs, list(manifest["outputs"]), path)
