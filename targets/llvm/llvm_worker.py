"""LLVM's half of a build: optimize LLVM IR for a target machine and emit its object
code, in this process or in a worker process that serves such requests over pipes.

Kept free of heterocc imports (only the standard library and llvmlite): a worker runs
this file as a script (``python -P llvm_worker.py``), so that it starts in a fraction of
the time a process importing the compiler would. In-process builds call the same
functions, so the two give the same bytes.

Run as a script, its one argument is the id of the process it serves: the worker exits
when that process has died (:func:`exit_with_parent`).

The protocol, one request at a time on stdin/stdout: a request is a header
(``>II``: length of a JSON machine description, length of the IR) followed by both;
a reply is ``>BdI`` (status, CPU seconds the request took, payload length) followed by
the payload: the object code (status :data:`OK`), the verifier's message
(:data:`INVALID_IR`) or a description of any other failure (:data:`FAILED`).
"""

from __future__ import annotations

import functools
import json
import os
import struct
import sys
import threading
import time

import llvmlite.binding as llvm

#: LLVM optimization level of the pass pipeline and of machine code generation.
OPT_LEVEL = 3

REQUEST = struct.Struct(">II")
REPLY = struct.Struct(">BdI")
OK, INVALID_IR, FAILED = 0, 1, 2


class InvalidIR(ValueError):
    """The generated LLVM IR does not verify (the message is LLVM's)."""


def jit_target_machine(target: llvm.Target, cpu: str, features: str) -> llvm.TargetMachine:
    """The target machine whose code this process's MCJIT engine runs."""
    return target.create_target_machine(cpu=cpu, features=features, opt=OPT_LEVEL,
                                        codemodel="jitdefault", jit=True)


@functools.cache
def _pipeline_tuning() -> llvm.PipelineTuningOptions:
    """The pass pipeline's options (made once: every call into LLVM made on a
    background thread waits for the interpreter on its way back)."""
    tuning = llvm.PipelineTuningOptions(speed_level=OPT_LEVEL)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    return tuning


@functools.cache
def _triple_and_layout(machine: llvm.TargetMachine) -> tuple[str, str]:
    return machine.triple, str(machine.target_data)


def optimized_module(ir_text: str, machine: llvm.TargetMachine) -> llvm.ModuleRef:
    """``ir_text`` parsed, verified (:class:`InvalidIR` if not) and optimized for
    ``machine``."""
    module = llvm.parse_assembly(ir_text)
    module.triple, module.data_layout = _triple_and_layout(machine)
    try:
        module.verify()
    except RuntimeError as error:
        raise InvalidIR(str(error)) from None
    builder = llvm.create_pass_builder(machine, _pipeline_tuning())
    builder.getModulePassManager().run(module, builder)
    return module


@functools.cache
def _machine(header: bytes) -> llvm.TargetMachine:
    spec = json.loads(header)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return jit_target_machine(llvm.Target.from_triple(spec["triple"]), spec["cpu"],
                              spec["features"])


def machine_header(triple: str, cpu: str, features: str) -> bytes:
    """The request header naming the JIT target machine a worker compiles for."""
    return json.dumps({"triple": triple, "cpu": cpu, "features": features},
                      sort_keys=True).encode()


def _read(stream, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def _answer(header: bytes, ir_text: str) -> tuple[int, bytes]:
    try:
        machine = _machine(header)
        return OK, machine.emit_object(optimized_module(ir_text, machine))
    except InvalidIR as error:
        return INVALID_IR, str(error).encode()
    except Exception as error:  # reported to the compiling process, which raises it
        return FAILED, f"{type(error).__name__}: {error}".encode()


def serve(requests, replies) -> None:
    """Answer requests from the binary stream ``requests`` on ``replies`` until the
    first closes."""
    while (sizes := _read(requests, REQUEST.size)) is not None:
        header_size, ir_size = REQUEST.unpack(sizes)
        header, ir = _read(requests, header_size), _read(requests, ir_size)
        if header is None or ir is None:
            return
        began = time.process_time()
        status, payload = _answer(header, ir.decode())
        replies.write(REPLY.pack(status, time.process_time() - began, len(payload)))
        replies.write(payload)
        replies.flush()


#: seconds between a worker's checks that the process it serves is still alive
PARENT_POLL_S = 0.5


def exit_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """A daemon thread that ends this process once process ``parent``, the one that
    started it, has died (the orphan's parent id changes when it is adopted; the id is
    passed in, since the parent may die while this process still imports LLVM). A
    worker reading a request notices its input closing, but one inside LLVM does not: a
    tuning candidate's measuring process killed at its time-out left the worker
    compiling that candidate for 11 minutes and more, a core busy under every later
    measurement. (LLVM runs with the interpreter released, so this thread runs beside
    it.)"""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    # argument: the id of the process served (the parent's own at the start, if absent)
    exit_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())
    serve(sys.stdin.buffer, sys.stdout.buffer)
