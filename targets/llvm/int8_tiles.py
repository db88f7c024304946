"""The CPU's matrix tiles (x86 AMX): 8-bit products of whole tiles, named in TIR and
lowered to LLVM.

A tile register holds up to 16 rows of 64 bytes. One tile instruction multiplies a tile
of 16 rows by 64 bytes (``A``: 16 output rows, 64 int8 values each) by one of 16 rows of
16 groups of four bytes (``B``: 64 reduction values by 16 columns, each group of four
consecutive values of one column) and adds the products into 16 by 16 int32
accumulators (``C``):

    C[m][n] += sum over k < 64 of A[m][k] * B[k // 4][4 * n + k % 4]

in 16 x 16 x 64 = 16384 multiply-adds, exact (int32 wrap-around as ``vpdpbusd``'s).
``TDPBSUD`` takes ``A`` signed and ``B`` unsigned: a convolution's int8 weights by its
data stored as uint8 (:mod:`.schedules.int8_matrix`). The same bytes that
``vpdpbusd`` reads as a vector of 16 pixels' four channels are one row of ``B``: the
packed data of :func:`.schedules.int8_conv.pack_int8_flat` is read as it is.

TIR names them with calls in an ``Evaluate`` (the tile numbers are the registers,
immediate; addresses are scalar loads of the first element; strides in bytes):

* :data:`TILE_LOAD_CALL` ``(tile, buffer[first], stride)``: 16 rows of 64 bytes,
  ``stride`` bytes apart;
* :data:`TILE_STORE_CALL` ``(tile, buffer[first], stride)``: the reverse;
* :data:`TILE_DOT_CALL` ``(c, a, b)``: ``C += A x B`` as above;
* :data:`TILE_ZERO_CALL` ``(tile)``: every byte of the tile 0.

Every tile has one shape (:data:`TILE_ROWS` rows of :data:`TILE_BYTES` bytes), so one
configuration serves every kernel: the code generator loads it (``ldtilecfg``) once at
the entry of each function that uses tiles (a parallel loop's task body included: the
configuration is a thread's state) and releases the tiles (``tilerelease``) before it
returns, so that no thread keeps 8 KB of tile state for the operating system to save.
Linux lets a process use the tiles once it asks (:func:`request_tile_permission`);
:func:`.cpu.describe_cpu` asks for the host and drops the features if refused.
"""

from __future__ import annotations

import ctypes
import functools
import platform

from llvmlite import ir

from heterocc.sdk import CompileError
from heterocc.tir import expr as tx

from .llvm_types import I8, I64, PTR

TILE_LOAD_CALL = "cpu.tile_load"
TILE_STORE_CALL = "cpu.tile_store"
TILE_DOT_CALL = "cpu.tile_dot"
TILE_ZERO_CALL = "cpu.tile_zero"
TILE_CALLS = frozenset({TILE_LOAD_CALL, TILE_STORE_CALL, TILE_DOT_CALL, TILE_ZERO_CALL})

#: rows of every tile, and bytes of each row
TILE_ROWS = 16
TILE_BYTES = 64
#: tile registers
TILE_REGISTERS = 8
#: the features a CPU description needs for the tile kernels
TILE_FEATURES = frozenset({"amx-tile", "amx-int8"})

#: Linux's ``arch_prctl`` request for a dynamically enabled state component, and the
#: component of the tiles' data
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
_SYS_ARCH_PRCTL = 158  # x86-64


def has_tiles(features, arch: str) -> bool:
    """Whether a CPU of ``features`` and ``arch`` multiplies 8-bit tiles (AMX-INT8)."""
    return arch == "x86_64" and TILE_FEATURES <= frozenset(features)


@functools.cache
def request_tile_permission() -> bool:
    """Ask Linux to let this process use the tile registers (once; the answer is the
    process's). True where it may, False where the system refuses or is not Linux on
    x86-64 (there the tile instructions would stop the process)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


def tile_configuration() -> bytes:
    """The 64-byte ``ldtilecfg`` operand: palette 1, every tile :data:`TILE_ROWS` rows
    of :data:`TILE_BYTES` bytes."""
    config = bytearray(64)
    config[0] = 1  # palette
    for tile in range(TILE_REGISTERS):
        config[16 + 2 * tile:18 + 2 * tile] = TILE_BYTES.to_bytes(2, "little")
        config[48 + tile] = TILE_ROWS
    return bytes(config)


def _void(emitter, name: str, args: list[ir.Type]) -> ir.Function:
    return emitter._function(name, ir.VoidType(), args)


def _tile_number(node: tx.Expr, what: str) -> ir.Constant:
    if not isinstance(node, tx.IntImm) or not 0 <= node.value < TILE_REGISTERS:
        raise CompileError(f"{what}: a tile is a register number 0-{TILE_REGISTERS - 1}, "
                           f"not {node}")
    return ir.Constant(I8, node.value)


def _address(emitter, node: tx.Expr, what: str) -> ir.Value:
    if not isinstance(node, tx.BufferLoad) or tx.lanes_of(node.dtype) != 1:
        raise CompileError(f"{what}: an address is a scalar load of the first element")
    (index,) = node.indices
    return emitter._address(node.buffer, emitter.expr(index))


def emit_tile_call(emitter, node: tx.Call) -> None:
    """One of :data:`TILE_CALLS` in the function ``emitter`` emits (the codegen's
    ``FunctionEmitter``, which configures the tiles at its entry once it has emitted
    one: ``uses_tiles``)."""
    if node.name == TILE_DOT_CALL:
        if len(node.args) != 3:
            raise CompileError(f"{TILE_DOT_CALL} takes (c, a, b) tile numbers")
        c, a, b = (_tile_number(arg, TILE_DOT_CALL) for arg in node.args)
        emitter.builder.call(_void(emitter, "llvm.x86.tdpbsud", [I8, I8, I8]), [c, a, b])
    elif node.name == TILE_ZERO_CALL:
        if len(node.args) != 1:
            raise CompileError(f"{TILE_ZERO_CALL} takes (tile)")
        emitter.builder.call(_void(emitter, "llvm.x86.tilezero", [I8]),
                             [_tile_number(node.args[0], TILE_ZERO_CALL)])
    else:
        if len(node.args) != 3 or not isinstance(node.args[2], tx.IntImm):
            raise CompileError(f"{node.name} takes (tile, buffer[first], stride in bytes)")
        tile = _tile_number(node.args[0], node.name)
        address = _address(emitter, node.args[1], node.name)
        stride = ir.Constant(I64, node.args[2].value)
        symbol = "llvm.x86.tileloadd64" if node.name == TILE_LOAD_CALL \
            else "llvm.x86.tilestored64"
        emitter.builder.call(_void(emitter, symbol, [I8, PTR, I64]), [tile, address, stride])
    emitter.uses_tiles = True


def configure_tiles(emitter) -> None:
    """Load the tile configuration at the entry of ``emitter``'s function and release
    the tiles before it returns (its builder at the return)."""
    module = emitter.module
    name = "heterocc.tile_config"
    config = module.globals.get(name)
    if config is None:
        data = tile_configuration()
        array = ir.ArrayType(I8, len(data))
        config = ir.GlobalVariable(module, array, name)
        config.global_constant = True
        config.linkage = "internal"
        config.align = 64
        config.initializer = ir.Constant(array, bytearray(data))
    emitter.entry_builder.call(_void(emitter, "llvm.x86.ldtilecfg", [PTR]), [config])
    emitter.builder.call(_void(emitter, "llvm.x86.tilerelease", []), [])
