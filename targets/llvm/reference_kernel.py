"""The reference kernel the CPU's cost model times beside every chain of kernels
(:func:`heterocc.targets.llvm.cost.time_chain`): one fixed int8 convolution, the same
on every model, so that its time in a window of timing says how fast the machine ran
in that window.

Why a convolution of the target's own code and not the vector peak loop
(:mod:`.peak`): on the shared machine this was measured on, the chain of ResNet-18's
kernels ran up to 1.8x slower for seconds at a time, each kernel 1.0x to 1.8x; the
peak loop on registers moved far less (its time correlated 0.2 to 0.4 with the chain's
over 40 windows), a copy of 8 MB more (0.6), one of the model's own convolutions,
timed in the chain, most: the fraction of kernels within 25% between two windows rose
from 59% to 88% with every window's kernels divided by that convolution's time.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import secrets
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

from heterocc.sdk import CompileError, InputError, TensorType, Value, ir
from heterocc.sdk import cost as sdk_cost
from heterocc.sdk.cost import random_arguments
from heterocc.sdk.graph import run_pipeline
from heterocc.sdk.runtime import from_onnx
from heterocc.sdk.te_target import COMPILE_ERRORS
from heterocc.tir.stmt import For, ForKind
from heterocc.tir.visitor import collect_statements

from .cpu import runs_on_host
from .module import CompiledFunction, FunctionSignature, JitObject, jit_object, load_jit_object

#: the reference convolution: 3x3, this many channels in and out, on a square image of
#: this side (a ResNet's third stage: 116 M multiply-accumulates, 576 KB of weights;
#: 0.23 to 0.38 ms in a chain on AVX-512 VNNI over two cores). Why so large: over 35 windows of
#: ResNet-18's chain (load 13), its kernels within 25% between two windows were 89%
#: raw, 89% divided by a 3x3 of 128 channels on 14x14, 90% by 256 on 7x7, 93% by this
#: one, 87% by 64 on 28x28: the kernels whose weights the caches do not hold move most
#: with the machine's phases
REFERENCE_CHANNELS = 256
REFERENCE_SIZE = 14


def reference_model(channels: int = REFERENCE_CHANNELS, size: int = REFERENCE_SIZE
                    ) -> ModelProto:
    """An ONNX model of one int8 ``QLinearConv`` (3x3, padded, per-channel weight
    scales), its weights drawn from a fixed seed: the same model on every call."""
    rng = np.random.default_rng(0)
    constants = {
        "x_scale": np.float32(0.05), "x_zero": np.int8(0),
        "w": rng.integers(-64, 64, (channels, channels, 3, 3)).astype(np.int8),
        "w_scale": np.full(channels, 0.01, np.float32),
        "w_zero": np.zeros(channels, np.int8),
        "y_scale": np.float32(0.1), "y_zero": np.int8(0)}
    node = helper.make_node("QLinearConv", ["x", *constants], ["y"], pads=[1, 1, 1, 1],
                            name="reference_conv")
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        [node], "chain_reference",
        [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
        [helper.make_tensor_value_info("y", TensorProto.INT8, shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- the reference kernel's code, built once per machine, CPU and compiler version
#
# Building the reference (the ONNX model through the target's passes, its schedule,
# lowering, LLVM) took 0.36-0.46 CPU-s of every compile that timed a chain, the same
# work in every process; its code and packed constants are kept on disk instead
# (:class:`ReferenceCodeCache`) and loaded in a few milliseconds.

#: the first bytes of a cache entry, then its HMAC-SHA256 (:data:`_MAC_BYTES`), then
#: the entry (NumPy's ``.npz``: arrays and a JSON record, nothing pickled)
_MAGIC = b"HCCREF1\n"
_MAC_BYTES = 32


@dataclass
class ReferenceKernel:
    """The reference convolution compiled for one CPU: called as a model's kernel is
    (its input arrays in, its outputs out; the constants its own), on the arguments
    :attr:`arguments` (random, of its input types). ``parallel``: whether its code has
    a parallel loop (it runs on the runtime's threads), ``loaded``: whether its code
    came from the cache on disk rather than being built in this process."""

    function: CompiledFunction
    constants: list[np.ndarray]
    out_specs: list[tuple[tuple[int, ...], str]]
    parallel: bool
    loaded: bool = False
    arguments: list[np.ndarray] = field(default_factory=list)
    _constant_addresses: tuple[int, ...] = field(default=(), repr=False)
    _per_thread: threading.local = field(default_factory=threading.local, repr=False)

    def __post_init__(self):
        count = len(self.function.signature.params) - len(self.constants) - len(self.out_specs)
        inputs = [Value(p.name, TensorType(p.shape, p.dtype))
                  for p in self.function.signature.params[:count]]
        self.arguments = random_arguments(inputs)
        # every argument checked once (count, shapes, types, overlap), as LLVMKernel does
        self.function.check([*self.arguments, *self.constants, *self._outputs()])
        self._constant_addresses = tuple(c.ctypes.data for c in self.constants)

    def _outputs(self) -> list[np.ndarray]:
        """This thread's output arrays: the kernel is shared by the process (one per CPU),
        and two threads timing it at once must not write into the same arrays."""
        outputs = getattr(self._per_thread, "outputs", None)
        if outputs is None:
            outputs = [np.empty(shape, dtype) for shape, dtype in self.out_specs]
            self._per_thread.outputs = outputs
            self._per_thread.addresses = tuple(o.ctypes.data for o in outputs)
        return outputs

    def __call__(self, args) -> list[np.ndarray]:
        """One call on ``args`` (arrays of :attr:`arguments`' types, unchecked), into
        this thread's outputs."""
        outputs = self._outputs()
        self.function.call_addresses(*(a.ctypes.data for a in args), *self._constant_addresses,
                                     *self._per_thread.addresses)
        return outputs


def source_digest() -> str:
    """SHA-256 of the sources of the compiler (core, SDK and targets, every ``.py``
    file) and of the LLVM it drives: any change to what could change the reference's
    code changes it."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        roots = {Path(ir.__file__).resolve().parents[1], Path(sdk_cost.__file__).resolve().parent,
                 Path(__file__).resolve().parents[1]}
        # an installed package nests the SDK and the targets in the core's folder
        roots = {r for r in roots if not any(o != r and o in r.parents for o in roots)}
        files = sorted(p for root in roots for p in root.rglob("*.py"))
        digest = hashlib.sha256(f"llvmlite {llvmlite.__version__} llvm "
                                f"{llvm.llvm_version_info} numpy {np.__version__}".encode())
        for path in files:
            data = path.read_bytes()
            digest.update(f"{path.name}:{len(data)}:".encode())
            digest.update(data)
        _SOURCE_DIGEST = digest.hexdigest()
    return _SOURCE_DIGEST


_SOURCE_DIGEST: str | None = None


class ReferenceCodeCache:
    """The reference kernel's code and constants on disk, in ``directory`` (the cost
    cache's): one entry per CPU description, schedule rules and :func:`source_digest`,
    named by a digest of those and recording them in full.

    It loads only what it wrote: an entry is authenticated by an HMAC-SHA256 under a
    key of this cache (``reference-code.key``: random, made with the cache, readable by
    its owner only) before anything of it is parsed, and is used only where it records
    the key asked for; the key file and the entry must belong to this user and be
    writable by no one else. Anything else (a damaged or truncated file, one written by
    another hand, an older compiler's, one for another CPU) is not loaded, and the
    kernel is built and its entry written again. Where the key cannot be kept safe
    (a folder that cannot be written, a key file that others may write), nothing is
    read or written: the kernel is built in each process, as without a cache."""

    KEY_FILE = "reference-code.key"

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def entry_path(self, key: str) -> Path:
        """Where the entry of ``key`` lives."""
        return self.directory / f"reference-{hashlib.sha256(key.encode()).hexdigest()[:24]}.bin"

    def _secret(self, create: bool) -> bytes | None:
        path = self.directory / self.KEY_FILE
        if create and not path.exists():
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                staged = path.with_name(f"{self.KEY_FILE}.{os.getpid()}.tmp")
                fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(secrets.token_bytes(32))
                try:
                    os.link(staged, path)  # atomic: a key another process made first wins
                except FileExistsError:
                    pass
                finally:
                    staged.unlink()
            except OSError:
                return None
        secret = _owned_file_bytes(path)
        return secret if secret is not None and len(secret) == 32 else None

    def load(self, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
        """The entry of ``key``: its record and its arrays, or None where there is none
        this cache wrote for that key (see the class)."""
        secret = self._secret(create=False)
        data = _owned_file_bytes(self.entry_path(key)) if secret else None
        if data is None or not data.startswith(_MAGIC):
            return None
        mac, payload = data[len(_MAGIC):len(_MAGIC) + _MAC_BYTES], \
            data[len(_MAGIC) + _MAC_BYTES:]
        if not hmac.compare_digest(mac, hmac.new(secret, payload, "sha256").digest()):
            return None
        try:
            with np.load(io.BytesIO(payload), allow_pickle=False) as found:
                arrays = {name: found[name] for name in found.files}
            record = json.loads(arrays.pop("record").tobytes())
        except (OSError, ValueError, KeyError):
            return None
        if not isinstance(record, dict) or record.get("key") != key:
            return None
        return record, arrays

    def store(self, key: str, record: dict, arrays: dict[str, np.ndarray]) -> None:
        """Write the entry of ``key`` (atomically: a reader sees the old file or the new
        one). A cache that cannot be written costs a build next time, never an error."""
        secret = self._secret(create=True)
        if secret is None:
            return
        buffer = io.BytesIO()
        np.savez(buffer, record=np.frombuffer(json.dumps({**record, "key": key}).encode(),
                                              np.uint8), **arrays)
        payload = buffer.getvalue()
        path = self.entry_path(key)
        staged = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hmac.new(secret, payload, "sha256").digest() + payload)
            os.replace(staged, path)
        except OSError:
            pass


def _owned_file_bytes(path: Path) -> bytes | None:
    """The bytes of the regular file ``path`` (not followed through a link) if this user
    owns it and no one else may write it, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        status = os.fstat(f.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid() \
                or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None
        return f.read()


def reference_key(target) -> str:
    """What the reference's code depends on: the CPU description (as a target string),
    the schedule rules, the reference's shape and the compiler's sources
    (:func:`source_digest`)."""
    return (f"reference1/{target.tuning_key}/rules={getattr(target, 'rules', 'hand')}/"
            f"c{REFERENCE_CHANNELS}s{REFERENCE_SIZE}/{source_digest()}")


def reference_kernel(target, directory: str | os.PathLike) -> ReferenceKernel | None:
    """The reference kernel compiled for ``target``'s CPU with its schedule rules (on a
    target of its own: nothing of it reaches ``target``'s build), its code from the
    cache in ``directory`` (:class:`ReferenceCodeCache`) or built now and kept there;
    once per process and key. None where that CPU's code does not run here, or the
    reference does not compile (it would run on NumPy: nothing like a model's code)."""
    if not runs_on_host(target.cpu):
        return None
    key = reference_key(target)
    with _KERNELS_LOCK:  # two compiling threads must not load one symbol twice
        if key in _KERNELS:
            return _KERNELS[key]
        symbol = "heterocc_reference_" + hashlib.sha256(key.encode()).hexdigest()[:16]
        cache = ReferenceCodeCache(directory)
        found = cache.load(key)
        kernel = None
        if found is not None:
            kernel = _loaded(found, symbol, target.cpu)
        if kernel is None:
            kernel = _built(target, symbol, key, cache)
        _KERNELS[key] = kernel
        return kernel


#: :func:`reference_kernel` by :func:`reference_key` (its code stays in the engine, and
#: a symbol is loaded into an engine once), filled under :data:`_KERNELS_LOCK`
_KERNELS: dict[str, ReferenceKernel | None] = {}
_KERNELS_LOCK = threading.Lock()


def _loaded(found: tuple[dict, dict[str, np.ndarray]], symbol: str, cpu
            ) -> ReferenceKernel | None:
    record, arrays = found
    try:
        signature = FunctionSignature.from_json(record["signature"])
        made = JitObject(arrays["code"].tobytes(), (signature,), (symbol,),
                         bool(record["runtime"]), bool(record["libmvec"]))
        constants = [np.ascontiguousarray(arrays[f"constant{k}"])
                     for k in range(int(record["constants"]))]
        out_specs = [(tuple(shape), dtype) for shape, dtype in record["outputs"]]
        (function,) = load_jit_object(made, cpu).values()
        return ReferenceKernel(function, constants, out_specs, bool(record["parallel"]),
                               loaded=True)
    except (KeyError, TypeError, ValueError, CompileError, InputError):
        return None


def has_parallel_loop(body) -> bool:
    """Whether a kernel's TIR ``body`` has a parallel loop (so a call runs on the
    runtime's thread pool, not on the calling thread alone)."""
    return bool(collect_statements(
        body, lambda s: isinstance(s, For) and s.kind is ForKind.PARALLEL))


def _built(target, symbol: str, key: str, cache: ReferenceCodeCache) -> ReferenceKernel | None:
    own = type(target)(cpu=target.cpu, rules=getattr(target, "rules", "hand"))
    graph = run_pipeline(from_onnx(reference_model()), {own.name: own}).graph
    (node,) = [n for n in graph.nodes if n.body is not None]
    made: list[JitObject] = []

    def codegen(lowered, name):  # the object code kept, and the kernel run from it
        made.append(jit_object([lowered], [symbol], own.cpu))
        return load_jit_object(made[-1], own.cpu)[name]

    own.codegen = codegen
    try:
        compiled = own.compiled(node)
    except COMPILE_ERRORS:
        return None
    kernel = own.kernel(node, compiled)
    parallel = has_parallel_loop(compiled.lowered.body)
    reference = ReferenceKernel(kernel.function, kernel.constants, kernel.out_specs, parallel)
    (code,) = made
    cache.store(key, {"signature": code.signatures[0].to_json(), "runtime": code.needs_runtime,
                      "libmvec": code.needs_libmvec, "parallel": parallel,
                      "constants": len(kernel.constants),
                      "outputs": [[list(shape), dtype] for shape, dtype in kernel.out_specs]},
                {"code": np.frombuffer(code.code, np.uint8),
                 **{f"constant{k}": c for k, c in enumerate(kernel.constants)}})
    return reference
