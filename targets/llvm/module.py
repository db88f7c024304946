"""Building PrimFuncs with LLVM: optimization for a CPU description (``cpu.py``;
default: the host), in-process JIT with a NumPy calling convention, and export to a
shared library that records the CPU it needs.

Each CPU description gets its target machines and, when this machine can run its code,
one MCJIT execution engine for the whole process, created on first use. Every build
adds a module to that engine under unique symbol names, so modules built at different
times never clash. Code for a CPU this host cannot run (another architecture, missing
features) is compiled and exported but never called.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np

from heterocc.sdk import CompileError, InputError, TargetError
from heterocc.tir.stmt import BufferStore, PrimFunc
from heterocc.tir.visitor import collect_statements

from . import llvm_worker
from .codegen import CodeGenLLVM
from .cpu import (
    CPUDescription,
    check_runs_on,
    host_cores,
    host_cpu,
    parse_cpu,
    runs_on_host,
    triple_system,
)
from .llvm_worker import OPT_LEVEL, InvalidIR, jit_target_machine, optimized_module
from .runtime import PARALLEL_FOR, compiler, load_runtime, run_compiler, write_runtime_source
from .vecmath import host_isas, libmvec_name, uses_libmvec

#: environment variable: how many modules LLVM compiles at once (1: only on the LLVM
#: thread of this process; default: one per core this process may run on, at most 4)
JOBS_VARIABLE = "HETEROCC_LLVM_JOBS"


@dataclass(frozen=True)
class BufferSpec:
    """Shape and dtype one argument of a compiled function must have."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    written: bool

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "written": self.written}

    @classmethod
    def from_json(cls, data: dict) -> BufferSpec:
        return cls(data["name"], tuple(data["shape"]), data["dtype"], bool(data["written"]))


@dataclass(frozen=True)
class FunctionSignature:
    """The calling contract of one compiled function: its name and its buffers."""

    name: str
    params: tuple[BufferSpec, ...]

    @classmethod
    def of(cls, func: PrimFunc) -> FunctionSignature:
        written = {id(s.buffer) for s in collect_statements(
            func.body, lambda n: isinstance(n, BufferStore))}
        return cls(func.name, tuple(BufferSpec(b.name, tuple(b.shape), b.dtype, id(b) in written)
                                    for b in func.params))

    def to_json(self) -> dict:
        return {"name": self.name, "params": [p.to_json() for p in self.params]}

    @classmethod
    def from_json(cls, data: dict) -> FunctionSignature:
        return cls(data["name"], tuple(BufferSpec.from_json(p) for p in data["params"]))


class _Machines:
    """LLVM state for one CPU description: target machines for in-process code and for
    export, and (when the code can run here) an MCJIT engine of its own."""

    def __init__(self, description: CPUDescription):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.description = description
        self.cpu = description.cpu
        self.features = description.llvm_features()
        native = description.triple == llvm.get_process_triple()
        if not native:  # a cross build needs the other architectures' back ends
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
        try:
            target = llvm.Target.from_triple(description.triple)
        except RuntimeError as error:
            raise CompileError(f"LLVM cannot generate code for {description.triple}: "
                               f"{error}") from None
        self.export_machine = target.create_target_machine(
            cpu=self.cpu, features=self.features, opt=OPT_LEVEL, reloc="pic", codemodel="default")
        self.runnable = runs_on_host(description)
        if self.runnable:
            self.jit_machine = jit_target_machine(target, self.cpu, self.features)
            self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.jit_machine)
        else:
            self.jit_machine = self.export_machine
            self.engine = None
        #: serializes additions to the engine (builds may run on several Python threads)
        self.engine_lock = threading.Lock()
        self._module_ids = itertools.count()
        #: what a worker process needs to make :attr:`jit_machine` (see llvm_worker)
        self.worker_header = llvm_worker.machine_header(description.triple, self.cpu,
                                                        self.features)

    def next_module_id(self) -> int:
        return next(self._module_ids)

    @property
    def isas(self):
        """The libmvec vector ABIs the code may call (x86 only: glibc's mangling)."""
        return host_isas(self.features) if self.description.is_x86 else ()


@functools.cache
def machines(description: CPUDescription | None = None) -> _Machines:
    """The lazily created LLVM state of ``description`` (default: the host)."""
    if description is None:
        return machines(host_cpu())
    return _Machines(description)


def host() -> _Machines:
    """The LLVM state of the host CPU."""
    return machines(host_cpu())


def _optimized_module(ir_text: str, machine: llvm.TargetMachine) -> llvm.ModuleRef:
    try:
        return optimized_module(ir_text, machine)
    except InvalidIR as error:
        raise CompileError(f"generated LLVM IR does not verify: {error}") from None


def _generate(funcs: Sequence[PrimFunc], symbols: Sequence[str], module_name: str,
              state: _Machines | None = None) -> str:
    """Unoptimized LLVM IR of ``funcs`` for ``state``'s CPU (default: the host)."""
    state = state or host()
    codegen = CodeGenLLVM(module_name, state.isas,
                          masked_loads="avx512f" in state.description.features,
                          features=state.description.features, arch=state.description.arch)
    for func, symbol in zip(funcs, symbols):
        codegen.add_function(func, symbol)
    return codegen.ir_text()


def _check_names(funcs: Sequence[PrimFunc]) -> None:
    names = [f.name for f in funcs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise CompileError(f"functions named {', '.join(duplicates)} more than once; give each "
                           "PrimFunc a unique name")
    for name in names:
        if not name.isidentifier():
            raise CompileError(f"function name {name!r} is not a valid C identifier")


class CompiledFunction:
    """A compiled kernel called with NumPy arrays, one per buffer parameter, checked for
    count, shape, dtype, C-contiguity and (for written buffers) overlap first."""

    def __init__(self, signature: FunctionSignature, address: int, owner: object):
        self.signature = signature
        self._owner = owner  # keeps the code (JIT module or loaded library) alive
        #: the machine code's entry (C ABI: one data pointer per parameter)
        self.address = address
        prototype = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(signature.params)))
        self._call = prototype(address)

    @property
    def name(self) -> str:
        return self.signature.name

    def check(self, arrays: Sequence) -> None:
        """Raise InputError unless ``arrays`` fit the function's parameters."""
        params = self.signature.params
        if len(arrays) != len(params):
            raise InputError(f"{self.name}: expected {len(params)} arrays "
                             f"({', '.join(p.name for p in params)}), got {len(arrays)}")
        for array, spec in zip(arrays, params):
            where = f"{self.name}: argument {spec.name!r}"
            if not isinstance(array, np.ndarray):
                raise InputError(f"{where} must be a numpy.ndarray, got {type(array).__name__}")
            if array.dtype.name != spec.dtype or tuple(array.shape) != spec.shape:
                raise InputError(f"{where} must be {spec.dtype}{list(spec.shape)}, got "
                                 f"{array.dtype.name}{list(array.shape)}")
            if not array.flags.c_contiguous:
                raise InputError(f"{where} must be C-contiguous; pass np.ascontiguousarray(...)")
            if spec.written and not array.flags.writeable:
                raise InputError(f"{where} is written by the kernel but the array is read-only")
        for i, spec in enumerate(params):
            if not spec.written:
                continue
            for j, other in enumerate(arrays):
                if j != i and np.may_share_memory(arrays[i], other):
                    raise InputError(
                        f"{self.name}: output {spec.name!r} shares memory with argument "
                        f"{params[j].name!r}; pass separate arrays")

    def __call__(self, *arrays: np.ndarray) -> None:
        self.check(arrays)
        self._call(*(a.ctypes.data for a in arrays))

    @property
    def owner(self) -> object:
        """What holds the code: the :class:`LLVMModule` (JIT) or :class:`LoadedLibrary`."""
        return self._owner

    def call_addresses(self, *addresses: int) -> None:
        """Call with the data addresses of the buffers, unchecked: for a caller that has
        already checked its arrays against :attr:`signature` (or made them from it) and
        calls often enough that :meth:`check` would cost as much as a small kernel."""
        self._call(*addresses)

    def __repr__(self) -> str:
        args = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in self.signature.params)
        return f"<CompiledFunction {self.name}({args})>"


class _FunctionTable:
    """Name -> CompiledFunction lookup shared by JIT modules and loaded libraries."""

    functions: dict[str, CompiledFunction]

    def __getitem__(self, name: str) -> CompiledFunction:
        try:
            return self.functions[name]
        except KeyError:
            raise CompileError(f"no function {name!r} in this module; it has: "
                               f"{', '.join(self.functions)}") from None

    def __call__(self, *arrays: np.ndarray) -> None:
        """Call the module's only function."""
        if len(self.functions) != 1:
            raise CompileError("this module has several functions; call module[name](...)")
        next(iter(self.functions.values()))(*arrays)

    @property
    def signatures(self) -> list[FunctionSignature]:
        return [f.signature for f in self.functions.values()]


class _ForeignFunction:
    """A function compiled for a CPU this process cannot run (another architecture, or
    features this host lacks): it can be exported, not called."""

    def __init__(self, signature: FunctionSignature, description: CPUDescription):
        self.signature = signature
        self.description = description

    @property
    def name(self) -> str:
        return self.signature.name

    def __call__(self, *arrays: np.ndarray) -> None:
        check_runs_on(self.description, what=f"function {self.name!r}")


class LLVMModule(_FunctionTable):
    """PrimFuncs compiled for a CPU description (default: the host) and, when this
    machine can run that code, loaded into this process (JIT)."""

    def __init__(self, funcs: Sequence[PrimFunc], name: str = "heterocc",
                 cpu: CPUDescription | None = None):
        self._generate(funcs, name, cpu)
        self._compile()

    def _generate(self, funcs: Sequence[PrimFunc], name: str,
                  cpu: CPUDescription | None) -> None:
        """The first half of the build, in Python: the unoptimized LLVM IR."""
        funcs = list(funcs)
        _check_names(funcs)
        self.cpu = cpu or host_cpu()
        state = machines(self.cpu)
        self.name = name
        self.funcs = funcs
        module_id = state.next_module_id()
        self._symbols = [f"{f.name}__hcc{module_id}" for f in funcs]
        self.unoptimized_ir = _generate(funcs, self._symbols, name, state)
        self._signatures = [FunctionSignature.of(f) for f in funcs]

    def _compile(self, worker: _Worker | None = None) -> None:
        """The second half, in LLVM: optimization, machine code, loading (JIT), here or,
        given a ``worker``, in that process (its object code loaded here: the same
        bytes). Little Python runs here: on :func:`build_later`'s threads, every return
        from LLVM waits for the thread that lowers to let go of the interpreter.
        Records :attr:`llvm_cpu_seconds`."""
        began = time.thread_time()
        state, symbols, signatures = machines(self.cpu), self._symbols, self._signatures
        worker_seconds, obj = 0.0, None
        if worker is not None and state.runnable:
            obj, worker_seconds = worker.compile(state.worker_header, self.unoptimized_ir,
                                                 self.name)
        else:
            self._llvm_module = _optimized_module(self.unoptimized_ir, state.jit_machine)
        if not state.runnable:
            self.functions = {s.name: _ForeignFunction(s, self.cpu) for s in signatures}
            self.llvm_cpu_seconds = time.thread_time() - began
            return
        if obj is None:
            def add(engine):
                engine.add_module(self._llvm_module)
        else:
            def add(engine):
                engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        addresses = _load_into_engine(state, add, symbols, PARALLEL_FOR in self.unoptimized_ir,
                                      uses_libmvec(self.unoptimized_ir),
                                      f"module {self.name!r}")
        self.functions = {s.name: CompiledFunction(s, address, self)
                          for s, address in zip(signatures, addresses)}
        #: CPU seconds LLVM took for this module (in a worker: its own, plus loading here)
        self.llvm_cpu_seconds = time.thread_time() - began + worker_seconds

    @functools.cached_property
    def ir(self) -> str:
        """The optimized LLVM IR (printed when first asked for; made again here where a
        worker process compiled the module: the optimization is deterministic)."""
        if not hasattr(self, "_llvm_module"):
            self._llvm_module = _optimized_module(self.unoptimized_ir,
                                                  machines(self.cpu).jit_machine)
        return str(self._llvm_module)

    def assembly(self) -> str:
        """Assembly of the optimized module for its CPU (for inspection)."""
        return machines(self.cpu).jit_machine.emit_assembly(llvm.parse_assembly(self.ir))

    def object_code(self) -> bytes:
        """Position-independent object code of the module for its CPU, its functions
        named as the PrimFuncs (C ABI: one data pointer per buffer). Link it with the
        runtime (``runtime.RUNTIME_SOURCE``) when a function has parallel loops, and with
        ``-lmvec -lm`` when it calls vector math (``vecmath.uses_libmvec(module.ir)``)."""
        state = machines(self.cpu)
        ir_text = _generate(self.funcs, [f.name for f in self.funcs], self.name, state)
        machine = state.export_machine
        return machine.emit_object(_optimized_module(ir_text, machine))

    def export_object(self, path: str | Path) -> Path:
        """Write :meth:`object_code` to ``path``."""
        path = Path(path)
        path.write_bytes(self.object_code())
        return path

    def export_library(self, path: str | Path) -> Path:
        """Write a shared library with one C-ABI function per PrimFunc, named as the
        PrimFunc, taking one data pointer per buffer; the runtime is linked in. The
        signatures and the CPU description are written beside it as ``<path>.json`` for
        :func:`load_library`.

        For another architecture the library is linked by a cross C compiler
        (:func:`cross_compiler`); where there is none, the object file is written to
        ``<path>.o`` and CompileError says what to install."""
        path = Path(path)
        command = link_command(self.cpu)
        if command is None:
            obj_path = self.export_object(Path(str(path) + ".o"))
            raise CompileError(
                f"no C compiler links {self.cpu.triple} code on this machine; the object "
                f"file is written to {obj_path}. Install a cross compiler (Debian: apt-get "
                f"install gcc-{self.cpu.arch.replace('_', '-')}-linux-gnu) or set "
                f"{cross_compiler_variable(self.cpu)}, then export again",
                kept_files=(str(obj_path),))
        with tempfile.TemporaryDirectory() as tmp:
            obj_path = self.export_object(Path(tmp) / "kernels.o")
            runtime = write_runtime_source(Path(tmp))
            libraries = ["-lmvec", "-lm"] if uses_libmvec(self.ir) else ["-lm"]
            run_compiler(["-O2", "-shared", "-fPIC", "-pthread", "-o", str(path), str(obj_path),
                          str(runtime), *libraries], f"linking {path.name}", command)
        signatures = [s.to_json() for s in self.signatures]
        Path(str(path) + ".json").write_text(json.dumps(
            {"functions": signatures, "target": self.cpu.to_json()}, indent=1))
        return path


def cross_compiler_variable(description: CPUDescription) -> str:
    """The environment variable naming the C compiler for ``description``'s
    architecture, e.g. ``HETEROCC_CC_AARCH64``."""
    return f"HETEROCC_CC_{description.arch.upper()}"


def link_command(description: CPUDescription) -> list[str] | None:
    """The C compiler command that links code for ``description``: the system compiler
    (``CC`` or ``cc``) for the host's own architecture; for another one the command in
    :func:`cross_compiler_variable`, else ``<arch>-linux-gnu-gcc`` (Debian's cross
    compilers) where installed. None where there is none."""
    if (description.arch, triple_system(description.triple)) == (
            host_cpu().arch, triple_system(host_cpu().triple)):
        return [compiler()]
    given = os.environ.get(cross_compiler_variable(description))
    if given:
        return given.split()
    if triple_system(description.triple) == "linux":
        gcc = shutil.which(f"{description.arch}-linux-gnu-gcc")
        if gcc:
            return [gcc]
    return None


class LoadedLibrary(_FunctionTable):
    """A shared library written by :meth:`LLVMModule.export_library`, loaded with ctypes
    after checking that this host can run the code (TargetError naming what it lacks)."""

    def __init__(self, path: str | Path, signatures: Sequence[FunctionSignature] | None = None):
        path = Path(path)
        meta = None
        if signatures is None:
            meta = json.loads(Path(str(path) + ".json").read_text())
            signatures = [FunctionSignature.from_json(f) for f in meta["functions"]]
            self.cpu = library_cpu(meta, path)
            check_runs_on(self.cpu, what=f"kernel library {path}")
        check_shared_object(path)
        try:
            self._library = ctypes.CDLL(str(path))
        except OSError as error:
            raise CompileError(f"cannot load kernel library {path}: {error}") from None
        self.functions = {}
        for signature in signatures:
            try:
                symbol = getattr(self._library, signature.name)
            except AttributeError:
                raise CompileError(f"library {path} has no function {signature.name!r}") from None
            address = ctypes.cast(symbol, ctypes.c_void_p).value
            self.functions[signature.name] = CompiledFunction(signature, address, self)

    def symbol_address(self, name: str) -> int | None:
        """The address of the library's symbol ``name``, or None where it has none (a
        library exported before the runtime had it)."""
        try:
            return ctypes.cast(getattr(self._library, name), ctypes.c_void_p).value
        except AttributeError:
            return None


#: ELF identification and the fields of the 64-bit header read by check_shared_object
_ELF_MAGIC = b"\x7fELF"
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_ELF_PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")
_PT_LOAD, _ET_DYN = 1, 3


def check_shared_object(path: str | Path) -> None:
    """CompileError unless ``path`` is a whole 64-bit little-endian ELF shared object:
    every segment the loader maps lies inside the file. The dynamic loader maps a
    truncated library without complaint and the process dies of SIGBUS when it touches
    the missing pages; this check turns that into an error before ``dlopen``."""
    try:
        with open(path, "rb") as f:
            header = f.read(_ELF_HEADER.size)
            size = os.fstat(f.fileno()).st_size
            if len(header) < _ELF_HEADER.size or not header.startswith(_ELF_MAGIC) \
                    or header[4] != 2 or header[5] != 1:
                raise CompileError(f"{path} is not a 64-bit little-endian ELF shared object")
            (_, kind, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum,
             _) = _ELF_HEADER.unpack(header)
            if kind != _ET_DYN or phentsize != _ELF_PROGRAM_HEADER.size \
                    or phoff + phnum * phentsize > size \
                    or (shnum and shoff + shnum * shentsize > size):
                raise CompileError(f"{path} is not a whole ELF shared object (truncated, or "
                                   "its headers point past its end)")
            f.seek(phoff)
            table = f.read(phnum * phentsize)
    except OSError as error:
        raise CompileError(f"cannot read kernel library {path}: {error.strerror}") from None
    for k in range(phnum):
        kind, _, offset, _, _, filesz, _, _ = _ELF_PROGRAM_HEADER.unpack_from(
            table, k * phentsize)
        if kind == _PT_LOAD and offset + filesz > size:
            raise CompileError(f"{path} is truncated: segment {k} ends at byte "
                               f"{offset + filesz}, the file has {size}")


def library_cpu(meta: dict, path: str | Path) -> CPUDescription:
    """The CPU description a library's metadata records; TargetError for a library
    that records none (written before libraries named their CPU: recompile it)."""
    if "target" not in meta:
        raise TargetError(f"kernel library {path} does not record the CPU it was compiled "
                          "for; recompile it")
    try:
        return CPUDescription.from_json(meta["target"])
    except (KeyError, TypeError, ValueError) as exc:
        raise TargetError(f"kernel library {path}: unreadable CPU record ({exc})") from None


def build(funcs: PrimFunc | Sequence[PrimFunc], name: str = "heterocc",
          cpu: CPUDescription | str | None = None) -> LLVMModule:
    """Compile PrimFuncs (lowered with ``te.lower``) for ``cpu`` (a description or a
    target string such as ``"llvm -mattr=-avx512f"``; default: the host) and JIT-load
    them where this machine can run them."""
    return LLVMModule([funcs] if isinstance(funcs, PrimFunc) else funcs, name, parse_cpu(cpu))


def llvm_jobs() -> int:
    """How many modules :func:`build_later` has LLVM compile at once: the environment's
    :data:`JOBS_VARIABLE`, else one per core this process may run on (at most 4)."""
    given = os.environ.get(JOBS_VARIABLE)
    if given is None:
        return max(1, min(host_cores(), 4))
    try:
        jobs = int(given)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise CompileError(f"{JOBS_VARIABLE}={given!r}: give a whole number of modules "
                           "LLVM compiles at once, 1 or more")
    return jobs


class _Worker:
    """A process running ``llvm_worker.py``: LLVM IR in, object code out. It uses a
    core of its own, where LLVM's threads in this process share one lock."""

    SCRIPT = Path(__file__).with_name("llvm_worker.py")

    def __init__(self):
        self._stderr = tempfile.TemporaryFile()
        # -P: the script's folder (this package) does not shadow modules it imports
        self._process = subprocess.Popen(
            [sys.executable, "-P", str(self.SCRIPT), str(os.getpid())], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._stderr)

    def compile(self, header: bytes, ir_text: str, name: str) -> tuple[bytes, float]:
        """Object code of ``ir_text`` for the machine ``header`` names and the worker's
        CPU seconds; CompileError as in-process (IR that does not verify) or naming
        module ``name`` and what the worker printed when it failed or died."""
        ir = ir_text.encode()
        try:
            self._process.stdin.write(llvm_worker.REQUEST.pack(len(header), len(ir)))
            self._process.stdin.write(header)
            self._process.stdin.write(ir)
            self._process.stdin.flush()
            reply = self._process.stdout.read(llvm_worker.REPLY.size)
            status, seconds, size = llvm_worker.REPLY.unpack(reply)
            payload = self._process.stdout.read(size)
            if len(payload) != size:
                raise EOFError
        except (OSError, EOFError, struct.error):
            raise CompileError(f"module {name!r}: LLVM's worker process ({self.SCRIPT.name}) "
                               f"{self._death()}; compile with {JOBS_VARIABLE}=1 to run "
                               "LLVM in this process") from None
        if status == llvm_worker.INVALID_IR:
            raise CompileError(f"generated LLVM IR does not verify: {payload.decode()}")
        if status != llvm_worker.OK:
            raise CompileError(f"module {name!r}: LLVM failed in its worker process: "
                               f"{payload.decode()}")
        return payload, seconds

    def _death(self) -> str:
        """How the worker ended, with the end of what it wrote to stderr."""
        code = self._process.wait(timeout=10)
        self._stderr.seek(0)
        printed = self._stderr.read().decode(errors="replace").strip()[-2000:]
        return f"exited with status {code}" + (f": {printed}" if printed else "")

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def close(self) -> None:
        """End the worker (it exits when its input closes) and wait for it."""
        try:
            self._process.stdin.close()
        except BrokenPipeError:  # it had died with a request unread
            pass
        self._process.wait()
        self._stderr.close()


class _LLVMPool:
    """:func:`build_later`'s LLVM: :func:`llvm_jobs` threads; with one, it compiles in
    this process; with several, each compiles through a worker process of its own,
    started when that thread first gets a module, so that LLVM's modules compile on
    several cores while the compiling thread lowers. None compiles in this process
    then: a thread that does takes the interpreter back from the lowering thread at
    every return from LLVM (ResNet-18 and MobileNetV2 int8 compiled with 5-10% more CPU
    seconds, the lowering thread's and LLVM's, with the first thread in the process).
    Where a worker cannot start, its thread compiles in this process."""

    def __init__(self, jobs: int):
        self.executor = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="heterocc-llvm")
        self._in_process = jobs == 1
        self._local = threading.local()
        self._workers: list[_Worker] = []

    def _worker(self) -> _Worker | None:
        if self._in_process:
            return None
        local = self._local
        if not hasattr(local, "worker"):
            local.worker = None
        if local.worker is None or not local.worker.alive:
            try:
                local.worker = _Worker()
                self._workers.append(local.worker)
            except OSError:
                local.worker = None
        return local.worker

    def compile(self, module: LLVMModule) -> None:
        module._compile(self._worker())

    def shutdown(self) -> None:
        """Wait for the modules submitted, then end the threads and worker processes."""
        self.executor.shutdown(wait=True)
        for worker in self._workers:
            worker.close()


@functools.cache
def _llvm_pool() -> _LLVMPool:
    return _LLVMPool(llvm_jobs())


# A forked child inherits the executor but not its threads (nor may it share the parent's
# workers): work submitted there would wait forever. The child makes its own on first use.
os.register_at_fork(after_in_child=_llvm_pool.cache_clear)


def build_later(funcs: PrimFunc | Sequence[PrimFunc], name: str = "heterocc",
                cpu: CPUDescription | str | None = None) -> Callable[[], LLVMModule]:
    """:func:`build` in two halves: the LLVM IR now, on this thread; LLVM's optimization
    and machine code in the background (:class:`_LLVMPool`). The callable returned waits
    for the module (raising what the build raised), so a compiler lowers its next
    function meanwhile."""
    module = LLVMModule.__new__(LLVMModule)
    module._generate([funcs] if isinstance(funcs, PrimFunc) else funcs, name, parse_cpu(cpu))
    pool = _llvm_pool()
    future = pool.executor.submit(pool.compile, module)

    def result() -> LLVMModule:
        future.result()
        return module
    return result


@dataclass(frozen=True)
class JitObject:
    """Object code for the JIT engine of a CPU description (:func:`jit_object`): the
    bytes, each function's signature and symbol, and what the code calls outside
    itself (the runtime's parallel loop, libmvec). Bytes that can be kept (a cache on
    disk) and loaded again by :func:`load_jit_object` in a later process."""

    code: bytes
    signatures: tuple[FunctionSignature, ...]
    symbols: tuple[str, ...]
    needs_runtime: bool
    needs_libmvec: bool


def jit_object(funcs: Sequence[PrimFunc], symbols: Sequence[str],
               cpu: CPUDescription) -> JitObject:
    """``funcs`` compiled for ``cpu``'s JIT target machine (what a worker process
    returns, :mod:`.llvm_worker`), each function under the matching name of
    ``symbols`` (the caller keeps them unique in the process)."""
    _check_names(funcs)
    state = machines(cpu)
    ir_text = _generate(funcs, symbols, "jit_object", state)
    code = state.jit_machine.emit_object(_optimized_module(ir_text, state.jit_machine))
    return JitObject(code, tuple(FunctionSignature.of(f) for f in funcs), tuple(symbols),
                     PARALLEL_FOR in ir_text, uses_libmvec(ir_text))


def load_jit_object(made: JitObject, cpu: CPUDescription) -> dict[str, CompiledFunction]:
    """The functions of ``made`` (:func:`jit_object`, in this process or an earlier one
    on this machine) loaded into ``cpu``'s engine, by name; TargetError where code for
    ``cpu`` does not run here. The bytes are trusted: check where they came from
    first."""
    state = machines(cpu)
    check_runs_on(cpu, what="object code")
    addresses = _load_into_engine(
        state, lambda engine: engine.add_object_file(llvm.ObjectFileRef.from_data(made.code)),
        made.symbols, made.needs_runtime, made.needs_libmvec, "object code")
    return {s.name: CompiledFunction(s, address, made)
            for s, address in zip(made.signatures, addresses)}


def _load_into_engine(state, add, symbols: Sequence[str], needs_runtime: bool,
                      needs_libmvec: bool, what: str) -> list[int]:
    """The addresses of ``symbols`` once ``add(engine)`` has put their code into
    ``state``'s JIT engine, with what the code calls outside itself loaded first (the
    C runtime only where a kernel has a parallel loop: it needs cc; libmvec);
    CompileError naming ``what`` where LLVM produced no code for one."""
    if needs_runtime:
        load_runtime()
    if needs_libmvec:
        llvm.load_library_permanently(libmvec_name())
    with state.engine_lock:
        add(state.engine)
        state.engine.finalize_object()
        addresses = [state.engine.get_function_address(symbol) for symbol in symbols]
    missing = [s for s, address in zip(symbols, addresses) if not address]
    if missing:
        raise CompileError(f"{what}: LLVM produced no code for {', '.join(missing)}")
    return addresses


def load_library(path: str | Path) -> LoadedLibrary:
    """Load a library exported by :meth:`LLVMModule.export_library`."""
    return LoadedLibrary(path)


def host_description() -> str:
    """The host CPU in one line: name, vector ISA, width, registers, caches."""
    return host_cpu().summary()
