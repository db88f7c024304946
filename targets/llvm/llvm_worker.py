"""LLVM's half of a build: optimize LLVM IR for a target machine and emit its object
code, in this process or in a worker process that serves such requests over pipes.

Kept free of heterocc imports (only the standard library and llvmlite): a worker runs
this file as a script (``python -P llvm_worker.py``), so that it starts in a fraction of
the time a process importing the compiler would. In-process builds call the same
functions, so the two give the same bytes.

The protocol, one request at a time on stdin/stdout: a request is a header
(``>II``: length of a JSON machine description, length of the IR) followed by both;
a reply is ``>BdI`` (status, CPU seconds the request took, payload length) followed by
the payload: the object code (status :data:`OK`), the verifier's message
(:data:`INVALID_IR`) or a description of any other failure (:data:`FAILED`).
"""

from __future__ import annotations

import functools
import json
import struct
import sys
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


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
