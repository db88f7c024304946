"""TIR -> LLVM IR with llvmlite.

Each PrimFunc becomes ``void name(ptr noalias buf0, ptr noalias buf1, ...)`` over the
buffers' data (row-major, flattened by the TIR pipeline). Vector TIR (ramps and
broadcasts) becomes LLVM vector types; float arithmetic carries the ``contract``
fast-math flag so multiply-adds fuse into FMA. A parallel loop is outlined into
``task(begin, end, closure)``, which unpacks the captured values and calls an
always-inlined body function whose buffer arguments are ``noalias`` (so the inliner
keeps the aliasing facts as scoped metadata); the runtime thread pool runs the task.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import ChainMap
from collections.abc import Callable

from llvmlite import ir

from heterocc.sdk import CompileError
from heterocc.tir import expr as tx
from heterocc.tir import stmt as ts
from heterocc.tir.functor import ExprFunctor, StmtEmitter
from heterocc.tir.simplify import structural_key
from heterocc.tir.visitor import child_list, collect

from .byte_table import byte_table_index, byte_table_lanes, emit_byte_table_lookup
from .cpu import masked_vector_loads, masked_vector_stores
from .int8_dot import DOT4_CALL, INTERLEAVE_CALL, emit_dot4_call, emit_interleave_call
from .int8_product import emit_shifted_product, even_odd_products, shifted_product_operands
from .int8_tiles import TILE_CALLS, configure_tiles, emit_tile_call
from .llvm_types import (
    I1,
    I8,
    I32,
    I64,
    PTR,
    element_size,
    scalar_type,
    storage_type,
    type_suffix,
    value_type,
)
from .runtime import PARALLEL_FOR
from .vecmath import VectorISA, vector_symbol
from .vector_exp import emit_vector_exp

#: fast-math flags of float arithmetic: contraction into FMA and reassociation (for
#: vectorized reductions), but no assumptions about NaN or infinity.
FLOAT_FLAGS = ("contract", "reassoc", "nsz")
#: The function attribute that has LLVM realign a function's stack to its spills'
#: alignment. Without it, LLVM spilled 512-bit registers to slots of the 16 bytes a call
#: aligns the stack to, each reload then a load across two cache lines (and now and then
#: across pages) in three of four entry alignments: MobileNetV2's int8 16->96 1x1 at
#: 112x112, whose register tile reloads 64 spilled weight broadcasts a tile, ran its
#: kernel in 0.110 ms there and 0.081 ms at the fourth (AVX-512 VNNI, Zen 5). llvmlite
#: knows no such attribute, so it is written into the IR's text (``ir_text``).
STACK_REALIGN = '"stackrealign"'

#: PrimFunc attribute: its float arithmetic rounds as written (no fast-math flags), for
#: float steps whose result is rounded to integers (an int8 model's float glue before a
#: QuantizeLinear), where one contracted or reordered sum moves an output step
EXACT_FLOAT = "exact_float"
#: allocations up to this size live on the stack (per thread), larger ones on the heap.
STACK_ALLOCATION_LIMIT = 256 * 1024
#: alignment of allocated buffers: one cache line (and one AVX-512 vector).
BUFFER_ALIGNMENT = 64

_LLVM_INTRINSICS = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
    "log10": "llvm.log10", "sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor",
    "ceil": "llvm.ceil", "trunc": "llvm.trunc", "round": "llvm.roundeven", "sin": "llvm.sin",
    "cos": "llvm.cos", "pow": "llvm.pow", "fma": "llvm.fma",
}
_LIBM = ("tan", "tanh", "erf", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
         "atanh")


class FunctionEmitter(ExprFunctor, StmtEmitter):
    """Emits statements and expressions into one LLVM function (a ``visit_<Class>``
    rule per TIR node class)."""

    role = "LLVM codegen"

    def __init__(self, codegen: CodeGenLLVM, function: ir.Function, in_parallel: bool):
        self.codegen = codegen
        self.module = codegen.module
        self.function = function
        self.in_parallel = in_parallel
        entry = function.append_basic_block("entry")
        self.entry_builder = ir.IRBuilder(entry)
        self.builder = ir.IRBuilder(function.append_basic_block("body"))
        self.vars: dict[tx.Var, ir.Value] = {}
        self.buffers: dict[tx.Buffer, ir.Value] = {}
        #: values emitted for the expression being emitted, by structural key: an equal
        #: sub-expression (shared, or built twice) is emitted once where it dominates
        self._values: ChainMap | None = None
        #: values of expressions that read no memory, by structural key, emitted where
        #: they dominate all the code still to come in this region (a loop body, a
        #: branch of a guard: a layer each, dropped when it ends): the statements of
        #: an unrolled tile share their index arithmetic instead of each emitting it
        self._region: ChainMap = ChainMap()
        self._branches = 0  # selects being emitted as branches around the current point
        self._reads: dict[int, tuple[tx.Expr, bool]] = {}  # whether a node loads, by id
        #: whether the function has emitted a tile instruction (:mod:`.int8_tiles`): its
        #: entry then configures the tiles and its return releases them
        self.uses_tiles = False

    def finish(self) -> None:
        if self.uses_tiles:
            configure_tiles(self)
        self.builder.ret_void()
        self.entry_builder.branch(self.function.blocks[1])

    # ------------------------------------------------------------------ helpers

    def _function(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name)

    def _stack_slot(self, ty: ir.Type, name: str) -> ir.Value:
        """An aligned entry-block stack slot, as an opaque pointer."""
        slot = self.entry_builder.alloca(ty, name=name)
        slot.align = BUFFER_ALIGNMENT
        # llvmlite types allocas as typed pointers; everything here uses opaque ones.
        slot.type = PTR
        return slot

    def _address(self, buffer: tx.Buffer, index: ir.Value) -> ir.Value:
        try:
            base = self.buffers[buffer]
        except KeyError:
            raise CompileError(f"buffer {buffer.name!r} is used outside its allocation") from None
        return self.builder.gep(base, [index], inbounds=True,
                                source_etype=storage_type(buffer.dtype))

    def _broadcast(self, value: ir.Value, lanes: int) -> ir.Value:
        constant = self.codegen.constant
        vector_type = ir.VectorType(value.type, lanes)
        undefined = constant(vector_type, ir.Undefined)
        one = self.builder.insert_element(undefined, value, constant(I32, 0))
        mask = constant(ir.VectorType(I32, lanes), [0] * lanes)
        return self.builder.shuffle_vector(one, undefined, mask)

    def _lanes_apply(self, dtype: str, operands: list[ir.Value],
                     scalar_op: Callable[..., ir.Value]) -> ir.Value:
        """``scalar_op`` applied lane by lane (for operations with no vector form)."""
        lanes = tx.lanes_of(dtype)
        if lanes == 1:
            return scalar_op(*operands)
        result = ir.Constant(value_type(dtype), ir.Undefined)
        for lane in range(lanes):
            index = ir.Constant(I32, lane)
            parts = [self.builder.extract_element(op, index) for op in operands]
            result = self.builder.insert_element(result, scalar_op(*parts), index)
        return result

    # ------------------------------------------------------------------ statements

    def visit_Evaluate(self, node: ts.Evaluate) -> None:
        if isinstance(node.value, tx.Call) and node.value.name in TILE_CALLS:
            # an instruction on tile registers: emitted where it stands, never shared
            emit_tile_call(self, node.value)
            return
        self.expr(node.value)

    def visit_BufferStore(self, node: ts.BufferStore) -> None:
        if len(node.indices) != 1:
            raise CompileError(f"store to {node.buffer.name!r} is not flattened; run the TIR "
                               "pipeline (tir.lower_pipeline) before codegen")
        (index,) = node.indices
        value = self.expr(node.value)
        if tx.is_bool(node.buffer.dtype):
            value = self.builder.zext(value, value_type(tx.with_lanes("int8", tx.lanes_of(
                node.value.dtype))))
        align = element_size(node.buffer.dtype)
        lanes = tx.lanes_of(index.dtype)
        if lanes == 1:
            self.builder.store(value, self._address(node.buffer, self.expr(index)), align=align)
        elif isinstance(index, tx.Ramp) and _is_one(index.stride):
            address = self._address(node.buffer, self.expr(index.base))
            if self._masked_store(node.buffer, lanes):
                self._partial_store(value, address, lanes, align)
            else:
                self.builder.store(value, address, align=align)
        else:
            offsets = self.expr(index)
            for lane in range(lanes):
                at = ir.Constant(I32, lane)
                element = self.builder.extract_element(value, at)
                offset = self.builder.extract_element(offsets, at)
                self.builder.store(element, self._address(node.buffer, offset), align=align)

    def _masked_store(self, buffer: tx.Buffer, lanes: int) -> bool:
        """Whether a contiguous store of ``lanes`` elements of ``buffer`` is one masked
        store (:meth:`_partial_store`): a lane count that is no power of two, on a CPU
        with masked stores of the elements (:func:`.cpu.masked_vector_stores`), to a
        buffer the function never reads. A masked store's bytes are not forwarded to a
        load that follows it, nor kept in a register by LLVM in its place: ResNet-18's
        int8 max pool, which takes the maximum in its output row by row (56 bytes, one
        masked store of 64 a tap), ran 4x slower (AVX-512 VNNI, Zen 5)."""
        return bool(lanes & (lanes - 1)) and masked_vector_stores(
            self.codegen.features, self.codegen.arch, element_size(buffer.dtype)) \
            and buffer not in self.codegen.read_buffers()

    def _partial_store(self, value: ir.Value, address: ir.Value, lanes: int,
                       align: int) -> None:
        """A store of ``lanes`` elements, no power of two, as one masked store of the next
        power of two: a row of 7 bytes (a 7x7 image's) one ``vmovdqu8`` under a mask
        where LLVM would store 4, 2 and 1 bytes; MobileNetV2's int8 depthwise layers at
        7x7 spent 43% of their samples in such pieces (AVX-512 VNNI, Zen 5)."""
        width = 1 << lanes.bit_length()
        element = value.type.element
        wide_type = ir.VectorType(element, width)
        wide = self.builder.shuffle_vector(
            value, ir.Constant(value.type, ir.Undefined),
            ir.Constant(ir.VectorType(I32, width), [min(i, lanes) for i in range(width)]))
        mask_type = ir.VectorType(I1, width)
        store = self._function(f"llvm.masked.store.{type_suffix(wide_type)}.p0",
                               ir.VoidType(), [wide_type, PTR, I32, mask_type])
        self.builder.call(store, [wide, address, ir.Constant(I32, align),
                                  ir.Constant(mask_type, [i < lanes for i in range(width)])])

    def visit_For(self, node: ts.For) -> None:
        if node.kind is ts.ForKind.THREAD_BINDING:
            raise CompileError(
                f"loop {node.var.name!r} is bound to {node.thread_tag}; GPU-bound loops need a "
                "GPU target (cuda), not llvm")
        if node.kind is ts.ForKind.PARALLEL and not self.in_parallel:
            self._parallel_for(node)
            return
        start = self.expr(node.min)
        end = self.builder.add(start, self.expr(node.extent))
        self.emit_loop(node.var, start, end, node.body,
                       unroll=node.kind is ts.ForKind.UNROLL_HINT)

    def emit_loop(self, var: tx.Var, start: ir.Value, end: ir.Value, body: ts.Stmt,
                  unroll: bool = False) -> None:
        """A serial loop of ``var`` over [start, end) around ``body`` (``unroll``: with
        LLVM's request to unroll it fully)."""
        preheader = self.builder.block
        header = self.function.append_basic_block(f"{var.name}.header")
        loop_body = self.function.append_basic_block(f"{var.name}.body")
        exit_block = self.function.append_basic_block(f"{var.name}.exit")
        self.builder.branch(header)
        self.builder.position_at_end(header)
        index = self.builder.phi(I64, name=var.name)
        index.add_incoming(start, preheader)
        self.builder.cbranch(self.builder.icmp_signed("<", index, end), loop_body, exit_block)
        self.builder.position_at_end(loop_body)
        self.vars[var] = index
        self._in_region(body)
        step = self.builder.add(index, self.codegen.constant(I64, 1), flags=["nsw"])
        index.add_incoming(step, self.builder.block)
        latch = self.builder.branch(header)
        if unroll:
            latch.set_metadata("llvm.loop", self.codegen.full_unroll_id())
        self.builder.position_at_end(exit_block)
        del self.vars[var]

    def _parallel_for(self, node: ts.For) -> None:
        captured_vars = list(self.vars.items())
        captured_buffers = list(self.buffers.items())
        values = [v for _, v in captured_vars] + [b for _, b in captured_buffers]
        closure_type = ir.LiteralStructType([v.type for v in values] or [I8])
        closure = self._stack_slot(closure_type, "closure")
        for position, value in enumerate(values):
            slot = self.builder.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, position)],
                                    inbounds=True, source_etype=closure_type)
            self.builder.store(value, slot)

        name = self.codegen.fresh_name(self.function.name + ".par")
        body_args = [v.type for v in values]
        body_function = ir.Function(self.module, ir.FunctionType(
            ir.VoidType(), [I64, I64, *body_args]), name + ".body")
        body_function.linkage = "internal"
        body_function.attributes.add("alwaysinline")
        body_function.attributes.add("nounwind")
        emitter = FunctionEmitter(self.codegen, body_function, in_parallel=True)
        begin, end, *rest = body_function.args
        for (var, _), arg in zip(captured_vars, rest):
            emitter.vars[var] = arg
        for (buffer, _), arg in zip(captured_buffers, rest[len(captured_vars):]):
            arg.add_attribute("noalias")
            emitter.buffers[buffer] = arg
        start = emitter.expr(node.min)
        emitter.emit_loop(node.var, emitter.builder.add(start, begin),
                          emitter.builder.add(start, end), node.body)
        emitter.finish()

        task = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I64, I64, PTR]), name)
        task.linkage = "internal"
        task_builder = ir.IRBuilder(task.append_basic_block("entry"))
        task_begin, task_end, task_closure = task.args
        unpacked = []
        for position, value in enumerate(values):
            slot = task_builder.gep(task_closure, [ir.Constant(I32, 0), ir.Constant(I32, position)],
                                    inbounds=True, source_etype=closure_type)
            unpacked.append(task_builder.load(slot, typ=value.type))
        task_builder.call(body_function, [task_begin, task_end, *unpacked])
        task_builder.ret_void()

        parallel_for = self._function(PARALLEL_FOR, I32, [PTR, PTR, I64])
        self.builder.call(parallel_for, [task, closure, self.expr(node.extent)])

    def visit_IfThenElse(self, node: ts.IfThenElse) -> None:
        condition = self.expr(node.condition)
        likely = True if node.likely else None
        if node.else_case is None:
            with self.builder.if_then(condition, likely=likely):
                self._in_region(node.then_case)
            return
        with self.builder.if_else(condition, likely=likely) as (then, otherwise):
            with then:
                self._in_region(node.then_case)
            with otherwise:
                self._in_region(node.else_case)

    def visit_Allocate(self, node: ts.Allocate) -> None:
        buffer = node.buffer
        nbytes = max(buffer.size * element_size(buffer.dtype), 1)
        element = storage_type(buffer.dtype)
        if nbytes <= STACK_ALLOCATION_LIMIT:
            # In the entry block: one slot per call, reused by every loop iteration.
            self.buffers[buffer] = self._stack_slot(
                ir.ArrayType(element, max(buffer.size, 1)), buffer.name)
            self.stmt(node.body)
            del self.buffers[buffer]
            return
        rounded = -(-nbytes // BUFFER_ALIGNMENT) * BUFFER_ALIGNMENT
        aligned_alloc = self._function("aligned_alloc", PTR, [I64, I64])
        memory = self.builder.call(aligned_alloc, [ir.Constant(I64, BUFFER_ALIGNMENT),
                                                   ir.Constant(I64, rounded)])
        self.buffers[buffer] = memory
        self.stmt(node.body)
        del self.buffers[buffer]
        self.builder.call(self._function("free", ir.VoidType(), [PTR]), [memory])

    # ------------------------------------------------------------------ expressions

    def expr(self, node: tx.Expr) -> ir.Value:
        """The value of ``node``. Within one expression of a statement (no store runs
        in between) structurally equal sub-expressions are one computation: emitted
        once, reused where the first emission dominates (not past a branch of a
        select that reads memory). One that reads no memory is also reused by the
        later statements of its region (:meth:`_in_region`)."""
        if isinstance(node, tx.IntImm | tx.FloatImm | tx.Var):
            return self.dispatch(node)
        values = self._values
        if values is None:
            self._values = self._region.new_child()
            try:
                return self.expr(node)
            finally:
                self._values = None
        key = structural_key(node)
        value = values.get(key)
        if value is None:
            value = self.dispatch(node)
            if self._branches == 0 and not self._reads_memory(node):
                self._region[key] = value
            else:
                values[key] = value
        return value

    def _in_branch(self, build: Callable[[], ir.Value]) -> ir.Value:
        """``build()`` in a branch: it sees the values emitted before, and what it emits
        is forgotten after it (the branch does not dominate the code after the merge)."""
        outer = self._values
        self._values = outer.new_child()
        self._branches += 1
        try:
            return build()
        finally:
            self._values = outer
            self._branches -= 1

    def _in_region(self, body: ts.Stmt) -> None:
        """Emit ``body`` as a region of its own (a loop body, a branch of a guard): it
        reuses the values emitted before it, and the values it emits are forgotten
        after it (it does not dominate the code after it)."""
        outer = self._region
        self._region = outer.new_child()
        try:
            self.stmt(body)
        finally:
            self._region = outer

    def _reads_memory(self, node: tx.Expr) -> bool:
        """Whether ``node`` loads from a buffer (each distinct node examined once)."""
        if isinstance(node, tx.BufferLoad):
            return True
        hit = self._reads.get(id(node))
        if hit is None:
            hit = self._reads[id(node)] = (node, any(
                self._reads_memory(child) for child in child_list(node)))
        return hit[1]

    def visit_IntImm(self, node: tx.IntImm) -> ir.Value:
        return self.codegen.constant(scalar_type(node.dtype), node.value)

    def visit_FloatImm(self, node: tx.FloatImm) -> ir.Value:
        return self.codegen.constant(scalar_type(node.dtype), node.value)

    def visit_Var(self, node: tx.Var) -> ir.Value:
        try:
            return self.vars[node]
        except KeyError:
            raise CompileError(f"variable {node.name!r} is used outside its loop") from None

    def visit_Ramp(self, node: tx.Ramp) -> ir.Value:
        base = self._broadcast(self.expr(node.base), node.lanes)
        stride = self._broadcast(self.expr(node.stride), node.lanes)
        element = scalar_type(node.base.dtype)
        steps = self.codegen.constant(ir.VectorType(element, node.lanes), list(range(node.lanes)))
        return self.builder.add(base, self.builder.mul(stride, steps))

    def visit_Broadcast(self, node: tx.Broadcast) -> ir.Value:
        return self._broadcast(self.expr(node.value), node.lanes)

    def visit_BufferLoad(self, node: tx.BufferLoad) -> ir.Value:
        return self._load(node)

    def _load(self, node: tx.BufferLoad, guard: ir.Value | None = None) -> ir.Value:
        """The value of ``node``; lanes whose ``guard`` bit (a vector of i1) is clear, like
        those its predicate clears, are not read and hold zero."""
        if len(node.indices) != 1:
            raise CompileError(f"load from {node.buffer.name!r} is not flattened; run the TIR "
                               "pipeline (tir.lower_pipeline) before codegen")
        (index,) = node.indices
        element = storage_type(node.buffer.dtype)
        align = element_size(node.buffer.dtype)
        lanes = tx.lanes_of(index.dtype)
        contiguous = isinstance(index, tx.Ramp) and _is_one(index.stride)
        every = every_lane(node.predicate) if (
            contiguous and guard is None and node.predicate is not None and lanes > 1
            and not self._masked_load_instruction(node.buffer.dtype)) else None
        if every is not None:
            # the predicate's lanes all hold where one scalar condition does (a padded
            # copy's vector inside the image): tested before any vector mask is made
            address = self._address(node.buffer, self.expr(index.base))
            value = self._whole_or_masked_load(
                address, ir.VectorType(element, lanes), align, self.expr(every),
                lambda: self.expr(node.predicate))
            if tx.is_bool(node.buffer.dtype):
                value = self.builder.trunc(value, value_type(node.dtype))
            return value
        mask = self.expr(node.predicate) if node.predicate is not None and lanes > 1 else None
        if guard is not None:
            mask = guard if mask is None else self.builder.and_(mask, guard)
        if lanes == 1:
            value = self.builder.load(self._address(node.buffer, self.expr(index)),
                                      typ=element, align=align)
        elif contiguous:
            address = self._address(node.buffer, self.expr(index.base))
            vector_type = ir.VectorType(element, lanes)
            if mask is None:
                value = self.builder.load(address, typ=vector_type, align=align)
            elif self._masked_load_instruction(node.buffer.dtype):
                value = self._masked_load(address, vector_type, align, mask)
            else:
                bits = self.builder.bitcast(mask, ir.IntType(lanes))
                whole = self.builder.icmp_unsigned("==", bits,
                                                   ir.Constant(ir.IntType(lanes), -1))
                value = self._whole_or_masked_load(address, vector_type, align, whole,
                                                   lambda: mask)
        elif (isinstance(index, tx.Ramp) and _small_stride(index.stride)
              and self._wide_masked_loads(node.buffer.dtype)):
            value = self._strided_load(node.buffer, self.expr(index.base),
                                       index.stride.value, lanes, mask)
        elif mask is None and (table := self._byte_table_read(node.buffer, index)):
            indices, width = table
            value = emit_byte_table_lookup(self.builder, self._function,
                                           self.buffers[node.buffer], self.expr(indices),
                                           lanes, width)
        else:
            value = self._gather(node.buffer, self.expr(index), lanes, mask)
        if tx.is_bool(node.buffer.dtype):
            value = self.builder.trunc(value, value_type(node.dtype))
        return value

    def _byte_table_read(self, buffer: tx.Buffer, index: tx.Expr
                         ) -> tuple[tx.Expr, int] | None:
        """Where ``buffer[index]`` reads a 256-entry byte table at an int8 vector's values
        (``LookupTable``) and this CPU has a table lookup instruction: that vector and the
        lanes one lookup returns (the load is then lookups in registers,
        :mod:`.byte_table`, not a gather); else None."""
        width = byte_table_lanes(self.codegen.features, self.codegen.arch)
        indices = byte_table_index(buffer, index) if width else None
        return None if indices is None else (indices, width)

    def _masked_load(self, address: ir.Value, vector_type: ir.VectorType, align: int,
                     mask: ir.Value) -> ir.Value:
        """``llvm.masked.load`` of ``vector_type`` at ``address``: the lanes whose
        ``mask`` bit is clear are not read and hold zero."""
        masked_load = self._function(f"llvm.masked.load.{type_suffix(vector_type)}.p0",
                                     vector_type, [PTR, I32, mask.type, vector_type])
        return self.builder.call(masked_load, [address, ir.Constant(I32, align), mask,
                                               ir.Constant(vector_type, None)])

    def _masked_load_instruction(self, dtype: str) -> bool:
        """Whether the CPU loads a contiguous vector of ``dtype`` under a mask in one
        instruction (:func:`.cpu.masked_vector_loads`)."""
        return masked_vector_loads(self.codegen.features, self.codegen.arch,
                                   element_size(dtype))

    def _whole_or_masked_load(self, address: ir.Value, vector_type: ir.VectorType,
                              align: int, whole: ir.Value,
                              mask: Callable[[], ir.Value]) -> ir.Value:
        """A masked load on a CPU without the instruction for it: one plain vector load
        where ``whole`` (an i1: every lane is read), else the lane-by-lane masked load
        under ``mask()`` (emitted in that branch only). A padded row's vectors are
        mostly whole, and only its borders go lane by lane: MobileNetV2's int8
        depthwise kernels with their padded int16 copy, compiled for AVX2, 32 channels at
        112x112 took 0.19-0.20 ms where every vector went lane by lane took 0.24, 144 at
        56x56 0.26 against 0.32-0.33 (``benchmarks/int8_depthwise.py``, Zen 5)."""
        with self.builder.if_else(whole, likely=True) as (then, otherwise):
            with then:
                plain = self.builder.load(address, typ=vector_type, align=align)
                plain_block = self.builder.block
            with otherwise:
                masked = self._in_branch(
                    lambda: self._masked_load(address, vector_type, align, mask()))
                masked_block = self.builder.block
        value = self.builder.phi(vector_type)
        value.add_incoming(plain, plain_block)
        value.add_incoming(masked, masked_block)
        return value

    def _wide_masked_loads(self, dtype: str) -> bool:
        """Whether the CPU loads a vector of ``dtype`` under a mask in one instruction
        (AVX-512; bytes and 16-bit words need its BW extension): elsewhere LLVM loads a
        masked vector lane by lane, and a gather of the strided lanes reads fewer."""
        return self.codegen.masked_loads and (
            element_size(dtype) >= 4 or "avx512bw" in self.codegen.features)

    def _strided_load(self, buffer: tx.Buffer, base: ir.Value, stride: int, lanes: int,
                      mask: ir.Value | None) -> ir.Value:
        """Lanes ``stride`` elements apart from ``base`` (a phase-split copy's reads) as
        one masked load of the ``lanes * stride`` contiguous elements and a shuffle
        picking every ``stride``-th: the backend's wide masked move and a permute where
        a gather would load lane by lane. The elements between the lanes, and those of
        lanes whose ``mask`` bit is clear, are masked off, so nothing outside the lanes'
        own elements is read (the last lane's stride - 1 followers may lie past the
        buffer)."""
        element = storage_type(buffer.dtype)
        width = lanes * stride
        wide_type = ir.VectorType(element, width)
        wide_mask_type = ir.VectorType(I1, width)
        if mask is None:
            wide_mask = ir.Constant(wide_mask_type, [p % stride == 0 for p in range(width)])
        else:
            # lane i's bit at position i * stride, a clear bit (the constant's) elsewhere
            wide_mask = self.builder.shuffle_vector(
                mask, ir.Constant(mask.type, [0] * lanes),
                ir.Constant(ir.VectorType(I32, width),
                            [p // stride if p % stride == 0 else lanes
                             for p in range(width)]))
        masked_load = self._function(
            f"llvm.masked.load.{type_suffix(wide_type)}.p0", wide_type,
            [PTR, I32, wide_mask_type, wide_type])
        wide = self.builder.call(masked_load, [
            self._address(buffer, base), ir.Constant(I32, element_size(buffer.dtype)),
            wide_mask, ir.Constant(wide_type, None)])
        return self.builder.shuffle_vector(
            wide, ir.Constant(wide_type, ir.Undefined),
            ir.Constant(ir.VectorType(I32, lanes), list(range(0, width, stride))))

    def _gather(self, buffer: tx.Buffer, offsets: ir.Value, lanes: int,
                mask: ir.Value | None) -> ir.Value:
        """Loads at ``offsets`` as one ``llvm.masked.gather`` (the backend picks gather
        instructions or scalar loads); lanes whose ``mask`` bit is clear are not read and
        hold zero."""
        element = storage_type(buffer.dtype)
        vector_type = ir.VectorType(element, lanes)
        pointers_type = ir.VectorType(PTR, lanes)
        try:
            base = self.buffers[buffer]
        except KeyError:
            raise CompileError(f"buffer {buffer.name!r} is used outside its allocation") from None
        if offsets.type.element.width > 32 and buffer.size < 2 ** 31:
            # 32-bit offsets: x86 gathers 16 of them in one instruction, 8 of 64 bits
            offsets = self.builder.trunc(offsets, ir.VectorType(I32, lanes))
        pointers = self.builder.gep(base, [offsets], inbounds=True, source_etype=element)
        pointers.type = pointers_type  # llvmlite types a vector GEP as a scalar pointer
        if mask is None:
            mask = ir.Constant(ir.VectorType(I1, lanes), [1] * lanes)
        gather = self._function(f"llvm.masked.gather.{type_suffix(vector_type)}.v{lanes}p0",
                                vector_type, [pointers_type, I32, mask.type, vector_type])
        return self.builder.call(gather, [pointers, ir.Constant(I32, element_size(buffer.dtype)),
                                          mask, ir.Constant(vector_type, None)])

    def visit_Not(self, node: tx.Not) -> ir.Value:
        return self.builder.not_(self.expr(node.a))

    def visit_Select(self, node: tx.Select) -> ir.Value:
        reads = self._reads_memory(node.true_value) or self._reads_memory(node.false_value)
        guarded = _guarded_vector_load(node) if self.codegen.masked_loads else None
        if guarded is not None:
            # A padded read (a vector or zero): one masked load under the condition,
            # no branch, so the loads of a whole tile stay in one block for LLVM to
            # schedule and to merge where taps read the same vector.
            return self._load(guarded, self._broadcast(self.expr(node.condition),
                                                       tx.lanes_of(guarded.dtype)))
        if reads and tx.lanes_of(node.condition.dtype) == 1:
            # Branch, so the untaken side's loads (possibly out of bounds) never run.
            condition = self.expr(node.condition)
            with self.builder.if_else(condition) as (then, otherwise):
                with then:
                    true_value = self._in_branch(lambda: self.expr(node.true_value))
                    true_block = self.builder.block
                with otherwise:
                    false_value = self._in_branch(lambda: self.expr(node.false_value))
                    false_block = self.builder.block
            phi = self.builder.phi(true_value.type)
            phi.add_incoming(true_value, true_block)
            phi.add_incoming(false_value, false_block)
            return phi
        return self.builder.select(self.expr(node.condition), self.expr(node.true_value),
                                   self.expr(node.false_value))

    def visit_Cast(self, node: tx.Cast) -> ir.Value:
        if even_odd_products(self.codegen.features, self.codegen.arch):
            product = shifted_product_operands(node)
            if product is not None:  # a requantization's exact product (.int8_product)
                a, m, shift = product
                return emit_shifted_product(self.builder, self.expr(a), self.expr(m), shift)
        value = self.expr(node.value)
        source, target = node.value.dtype, node.dtype
        to_type = value_type(target)
        b = self.builder
        if tx.is_bool(target):
            zero = ir.Constant(value.type, None)
            if tx.is_float(source):
                return b.fcmp_unordered("!=", value, zero)
            return b.icmp_unsigned("!=", value, zero)
        if tx.is_float(source) and tx.is_float(target):
            if tx.bits_of(source) == tx.bits_of(target):
                return value
            return (b.fpext if tx.bits_of(target) > tx.bits_of(source) else b.fptrunc)(
                value, to_type)
        if tx.is_float(target):
            signed = not (tx.is_unsigned(source) or tx.is_bool(source))
            return (b.sitofp if signed else b.uitofp)(value, to_type)
        if tx.is_float(source):
            return (b.fptoui if tx.is_unsigned(target) else b.fptosi)(value, to_type)
        if tx.bits_of(source) == tx.bits_of(target):
            return value
        if tx.bits_of(target) < tx.bits_of(source):
            return b.trunc(value, to_type)
        signed = not (tx.is_unsigned(source) or tx.is_bool(source))
        return (b.sext if signed else b.zext)(value, to_type)

    def visit_Call(self, node: tx.Call) -> ir.Value:
        if node.name == DOT4_CALL:
            return emit_dot4_call(self, node)
        if node.name == INTERLEAVE_CALL:
            return emit_interleave_call(self, node)
        args = [self.expr(a) for a in node.args]
        lanes = tx.lanes_of(node.dtype)
        variant = vector_symbol(node.name, tx.scalar_dtype(node.dtype), lanes,
                                self.codegen.vector_isas) if lanes > 1 else None
        if node.name == "exp" and lanes > 1 and tx.scalar_dtype(node.dtype) == "float32":
            return emit_vector_exp(self.builder, args[0],
                                   ("contract",) if self.codegen.float_flags else (),
                                   self.codegen.features)
        if variant is not None:
            return self._vector_library_call(*variant, args)
        if node.name in _LLVM_INTRINSICS:
            ty = value_type(node.dtype)
            name = f"{_LLVM_INTRINSICS[node.name]}.{type_suffix(ty)}"
            return self.builder.call(self._function(name, ty, [ty] * len(args)), args,
                                     fastmath=self.codegen.float_flags)
        if node.name in _LIBM:
            return self._lanes_apply(node.dtype, args, self._libm_call(node.name, node.dtype))
        raise CompileError(f"LLVM codegen: intrinsic {node.name!r} is not supported; supported: "
                           f"{', '.join(sorted([*_LLVM_INTRINSICS, *_LIBM]))}")

    def _vector_library_call(self, symbol: str, width: int, args: list[ir.Value]) -> ir.Value:
        """``symbol`` (a libmvec function on ``width`` lanes) over vectors of a multiple of
        ``width`` lanes: split, call per piece, concatenate."""
        builder = self.builder
        piece_type = ir.VectorType(args[0].type.element, width)
        function = self._function(symbol, piece_type, [piece_type] * len(args))

        def lanes_mask(start: int, count: int) -> ir.Constant:
            return ir.Constant(ir.VectorType(I32, count), list(range(start, start + count)))

        total = args[0].type.count
        pieces = []
        for start in range(0, total, width):
            parts = [arg if width == total else builder.shuffle_vector(
                arg, ir.Constant(arg.type, ir.Undefined), lanes_mask(start, width))
                for arg in args]
            pieces.append(builder.call(function, parts))
        while len(pieces) > 1:
            count = pieces[0].type.count * 2
            pieces = [builder.shuffle_vector(low, high, lanes_mask(0, count))
                      for low, high in zip(pieces[::2], pieces[1::2])]
        return pieces[0]

    def _libm_call(self, name: str, dtype: str) -> Callable[..., ir.Value]:
        base = tx.scalar_dtype(dtype)
        wide = "float64" if base == "float64" else "float32"
        wide_type = scalar_type(wide)
        function = self._function(name if wide == "float64" else name + "f", wide_type,
                                  [wide_type])

        def call(x: ir.Value) -> ir.Value:
            if base == "float16":
                x = self.builder.fpext(x, wide_type)
            result = self.builder.call(function, [x])
            return self.builder.fptrunc(result, scalar_type(base)) if base == "float16" else result

        return call

    def visit_Binary(self, node: tx.Binary) -> ir.Value:
        a, b = self.expr(node.a), self.expr(node.b)
        dtype = node.a.dtype
        if tx.is_float(dtype):
            return self._float_binary(node.op, a, b, dtype)
        if tx.is_bool(dtype) and node.op in ("and", "or"):
            return (self.builder.and_ if node.op == "and" else self.builder.or_)(a, b)
        return self._int_binary(node.op, a, b, dtype)

    def _float_binary(self, op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        builder = self.builder
        arithmetic = {"add": builder.fadd, "sub": builder.fsub, "mul": builder.fmul,
                      "div": builder.fdiv}
        if op in arithmetic:
            result = arithmetic[op](a, b)
            result.flags.extend(self.codegen.float_flags)
            return result
        compare = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "=="}
        if op in compare:
            return builder.fcmp_ordered(compare[op], a, b)
        if op == "ne":
            return builder.fcmp_unordered("!=", a, b)
        ty = value_type(dtype)
        if op in ("min", "max"):
            name = f"llvm.{op}num.{type_suffix(ty)}"
            return builder.call(self._function(name, ty, [ty, ty]), [a, b])
        if op == "truncdiv":
            trunc = self._function(f"llvm.trunc.{type_suffix(ty)}", ty, [ty])
            return builder.call(trunc, [builder.fdiv(a, b)])
        if op == "truncmod":
            return builder.frem(a, b)
        floor = self._function(f"llvm.floor.{type_suffix(ty)}", ty, [ty])
        quotient = builder.call(floor, [builder.fdiv(a, b)])
        if op == "floordiv":
            return quotient
        if op == "floormod":
            return builder.fsub(a, builder.fmul(quotient, b))
        raise CompileError(f"LLVM codegen: float operator {op!r} is not supported")

    def _int_binary(self, op: str, a: ir.Value, b: ir.Value, dtype: str) -> ir.Value:
        builder = self.builder
        unsigned = tx.is_unsigned(dtype) or tx.is_bool(dtype)
        if op == "add":
            return builder.add(a, b)
        if op == "sub":
            return builder.sub(a, b)
        if op == "mul":
            return builder.mul(a, b)
        compare = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
        if op in compare:
            icmp = builder.icmp_unsigned if unsigned else builder.icmp_signed
            return icmp(compare[op], a, b)
        if op in ("min", "max"):
            icmp = builder.icmp_unsigned if unsigned else builder.icmp_signed
            return builder.select(icmp("<" if op == "min" else ">", a, b), a, b)
        bitwise = {"bitand": builder.and_, "bitor": builder.or_, "bitxor": builder.xor,
                   "shl": builder.shl, "shr": builder.lshr if unsigned else builder.ashr}
        if op in bitwise:
            return bitwise[op](a, b)
        if op in ("floordiv", "floormod", "truncdiv", "truncmod") and unsigned:
            return (builder.udiv if op.endswith("div") else builder.urem)(a, b)
        if op in ("truncdiv", "truncmod"):
            return (builder.sdiv if op == "truncdiv" else builder.srem)(a, b)
        if op in ("floordiv", "floormod"):
            return self._floor_div_mod(op, a, b)
        raise CompileError(f"LLVM codegen: integer operator {op!r} is not supported")

    def _floor_div_mod(self, op: str, a: ir.Value, b: ir.Value) -> ir.Value:
        # Truncating division, corrected by one where the remainder and divisor signs differ.
        builder = self.builder
        quotient, remainder = builder.sdiv(a, b), builder.srem(a, b)
        zero = ir.Constant(a.type, None)
        signs_differ = builder.icmp_signed("<", builder.xor(remainder, b), zero)
        needs_fix = builder.and_(builder.icmp_signed("!=", remainder, zero), signs_differ)
        if op == "floordiv":
            return builder.sub(quotient, builder.zext(needs_fix, a.type))
        return builder.select(needs_fix, builder.add(remainder, b), remainder)


def _is_one(expr: tx.Expr) -> bool:
    return isinstance(expr, tx.IntImm) and expr.value == 1


#: the largest stride :meth:`_strided_load` loads as one wide vector (a convolution's or
#: pool's phase split); a larger one gathers
MAX_WIDE_STRIDE = 4


def _small_stride(expr: tx.Expr) -> bool:
    return isinstance(expr, tx.IntImm) and 1 < expr.value <= MAX_WIDE_STRIDE


def every_lane(predicate: tx.Expr) -> tx.Expr | None:
    """A scalar condition that holds exactly where every lane of the vector
    ``predicate`` does, for the predicates of padded reads: broadcast conditions, and
    comparisons of a ramp of constant stride with a broadcast value (its extreme lane
    decides), joined by ``and``; None for any other predicate. ::

        every_lane(broadcast(r >= 0) and ramp(16 * c - 1, 1, 16) >= broadcast(0))
            == (r >= 0) and (16 * c - 1 >= 0)
    """
    if isinstance(predicate, tx.Broadcast):
        return predicate.value
    if not isinstance(predicate, tx.Binary):
        return None
    if predicate.op == "and":
        a, b = every_lane(predicate.a), every_lane(predicate.b)
        return None if a is None or b is None else tx.logical_and(a, b)
    flipped = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
    if predicate.op not in flipped:
        return None
    op, ramp, bound = predicate.op, predicate.a, predicate.b
    if isinstance(bound, tx.Ramp) and isinstance(ramp, tx.Broadcast):
        op, ramp, bound = flipped[op], bound, ramp
    if not (isinstance(ramp, tx.Ramp) and isinstance(ramp.stride, tx.IntImm)
            and isinstance(bound, tx.Broadcast)):
        return None
    step = ramp.stride.value
    # the lane nearest to failing (the smallest against a lower bound, the largest
    # against an upper one): the last where the ramp runs towards the bound
    last = step < 0 if op in ("gt", "ge") else step > 0
    lane = ramp.base + tx.IntImm((ramp.lanes - 1) * step, ramp.base.dtype) if last \
        else ramp.base
    return tx.binary(op, lane, bound.value)


def _guarded_vector_load(node: tx.Select) -> tx.BufferLoad | None:
    """The vector load of ``select(c, load, 0)`` with a scalar ``c`` (a read of a padded
    tensor), which a masked load computes; None for any other select."""
    load, zero = node.true_value, node.false_value
    if (tx.lanes_of(node.condition.dtype) != 1 or not isinstance(load, tx.BufferLoad)
            or tx.lanes_of(load.dtype) == 1 or not isinstance(zero, tx.Broadcast)):
        return None
    value = zero.value
    if isinstance(value, tx.FloatImm):
        return load if value.value == 0 and math.copysign(1.0, value.value) > 0 else None
    return load if isinstance(value, tx.IntImm) and value.value == 0 else None


def _constant_key(value) -> object:
    """A key of an ``ir.Constant`` value that tells apart what prints differently (floats
    by their bits: ``-0.0`` from ``0.0``; ``True`` from ``1``; lists lane by lane), or
    None for a value of another kind (not remembered)."""
    kind = type(value)
    if kind is int or kind is bool:
        return kind, value
    if kind is float:
        return kind, value.hex()
    if value is None or value is ir.Undefined:
        return value
    if kind is list:
        keys = tuple(_constant_key(v) for v in value)
        return None if None in keys else keys
    return None


#: lane values :class:`_UniformVector` writes once (``ir.Undefined`` is an object)
_UNIFORM_LANE_TYPES = (int, float, bool, type(ir.Undefined))


class _UniformVector(ir.Constant):
    """A vector constant of one value in every lane, written as LLVM's printer writes it
    (``undef``, ``zeroinitializer``, ``splat (float 2.0)``), which parses to the same
    constant as the lanes one by one (``<64 x i1> <i1 undef, i1 undef, ...>``) in a
    fraction of the text: a 64-lane mask is 1,200 characters lane by lane."""

    def _get_reference(self) -> str:
        lane = self.constant[0]
        if lane.constant is ir.Undefined:
            return "undef"
        if lane.constant is not None and lane.constant == 0 and not (
                isinstance(lane.constant, float) and math.copysign(1.0, lane.constant) < 0):
            return "zeroinitializer"
        return f"splat ({lane.type} {lane.get_reference()})"


#: the text of a loop ID placeholder (see :meth:`CodeGenLLVM.full_unroll_id`)
_UNROLL_PLACEHOLDER = "heterocc.unroll.full."


class CodeGenLLVM:
    """Builds one LLVM module from PrimFuncs. ``vector_isas`` are the vector ABIs the
    target CPU can call libmvec with (none: vector math is computed lane by lane).
    ``masked_loads``: the CPU loads a vector under a mask in one instruction (AVX-512's
    mask registers), so a padded read, ``select(c, load, 0)`` with a scalar ``c``, is a
    masked load; elsewhere (AVX2's masked loads cost an extra vector operation, NEON has
    none) it is a branch around the load. ``features`` and ``arch``: the CPU's, which pick
    the instruction of an 8-bit dot product (:mod:`.int8_dot`)."""

    def __init__(self, module_name: str = "heterocc", vector_isas: tuple[VectorISA, ...] = (),
                 masked_loads: bool = False, features: frozenset[str] = frozenset(),
                 arch: str = ""):
        self.module = ir.Module(name=module_name)
        self.vector_isas = vector_isas
        self.masked_loads = masked_loads
        self.features = frozenset(features)
        self.arch = arch
        self._counter = itertools.count()
        self._constants: dict[tuple, ir.Constant] = {}
        #: fast-math flags of the function being emitted (:data:`EXACT_FLOAT`)
        self.float_flags = FLOAT_FLAGS
        #: the body of the function being emitted, and the buffers it reads (found when
        #: first asked for: :meth:`read_buffers`)
        self._body: ts.Stmt | None = None
        self._read: frozenset | None = None

    def read_buffers(self) -> frozenset:
        """The buffers the function being emitted loads from anywhere."""
        if self._read is None:
            self._read = frozenset(load.buffer for load in collect(
                self._body, lambda node: isinstance(node, tx.BufferLoad)))
        return self._read

    def constant(self, ty: ir.Type, value) -> ir.Constant:
        """``ir.Constant(ty, value)``, made once per module for each type and value (a
        constant has no place in the IR, so one object serves every use; making them
        anew, vectors lane by lane, was a tenth of the IR emission); a vector of one
        value in every lane written as one (:class:`_UniformVector`)."""
        value_key = _constant_key(value)
        if value_key is None and value is not None:
            return ir.Constant(ty, value)
        key = (ty, value_key)
        found = self._constants.get(key)
        if found is None:
            uniform = isinstance(ty, ir.VectorType) and value is not None and (
                not isinstance(value, list) or all(v == value[0] for v in value))
            made = _UniformVector if uniform and type(value[0] if isinstance(
                value, list) else value) in _UNIFORM_LANE_TYPES else ir.Constant
            found = self._constants[key] = made(ty, value)
        return found

    def fresh_name(self, prefix: str) -> str:
        return f"{prefix}{next(self._counter)}"

    def full_unroll_id(self) -> ir.MDValue:
        """A new loop ID asking LLVM to unroll its loop fully. A loop ID must be a
        distinct node whose first operand is itself, which llvmlite cannot build: this
        is a placeholder that :meth:`ir_text` rewrites into one."""
        return self.module.add_metadata(
            [ir.MetaDataString(self.module, f"{_UNROLL_PLACEHOLDER}{next(self._counter)}")])

    def ir_text(self) -> str:
        """The module's LLVM IR, every function realigning its stack
        (:data:`STACK_REALIGN`), loop IDs made distinct and self-referencing."""
        text = re.sub(r"^(define [^\n]*?)( ?\{)?$", rf"\1 {STACK_REALIGN}\2",
                      str(self.module), flags=re.MULTILINE)
        if _UNROLL_PLACEHOLDER not in text:  # a substring search: far cheaper than the regex
            return text
        placeholders = re.findall(rf'^!(\d+) = !{{ !"{_UNROLL_PLACEHOLDER}\d+" }}$', text,
                                  flags=re.MULTILINE)
        if not placeholders:
            return text
        request = f"!{len(self.module.metadata) + len(placeholders)}"
        for node in placeholders:
            text = re.sub(rf'^!{node} = !{{ !"{_UNROLL_PLACEHOLDER}\d+" }}$',
                          f"!{node} = distinct !{{ !{node}, {request} }}", text,
                          flags=re.MULTILINE)
        return text + f'\n{request} = !{{ !"llvm.loop.unroll.full" }}\n'

    def add_function(self, func: ts.PrimFunc, symbol: str) -> ir.Function:
        """Emit ``func`` as the exported function ``symbol``."""
        function = ir.Function(self.module, ir.FunctionType(
            ir.VoidType(), [PTR] * len(func.params)), symbol)
        function.attributes.add("nounwind")
        self.float_flags = () if func.attrs.get(EXACT_FLOAT) else FLOAT_FLAGS
        self._body, self._read = func.body, None
        emitter = FunctionEmitter(self, function, in_parallel=False)
        for buffer, arg in zip(func.params, function.args):
            arg.name = buffer.name
            arg.add_attribute("noalias")
            emitter.buffers[buffer] = arg
        emitter.stmt(func.body)
        emitter.finish()
        return function
