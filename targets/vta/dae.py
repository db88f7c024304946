"""TIR -> DAE instruction stream.

The lowered, thread-interleaved TIR of an accelerator schedule is walked with
every enclosing serial loop unrolled (the stream is static). Each leaf operation
(a perfect loop nest around one store or ``vta.gemm`` call, see
``vthreads.is_leaf_operation``) becomes instructions:

- a copy from a DRAM tensor into an on-chip scope: a LOAD (2-D strided DMA);
- a zero store into the accumulator scope: a GEMM with the reset flag;
- ``vta.gemm`` calls: a GEMM whose two hardware loops are the outer two tile
  loops and whose micro-op kernel enumerates the remaining ones;
- a store of an elementwise expression of an accumulator into a DRAM tensor: one
  ALU instruction per operation of the expression, in place on the accumulator
  (which dies there), then a STORE (narrowing when the tensor is int8).

Index expressions are evaluated at the loop corners; their coefficients become
the instructions' strides and factors. Micro-op kernels are deduplicated in DRAM
and not reloaded while resident in the micro-op buffer. The dependency tokens are
inserted by ``tokens.insert_dependency_tokens`` and the stream checker runs before
the program is returned.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.checker import check_stream
from heterocc.accel_sim.isa import (
    DMA_PAD_BITS,
    Alu,
    AluOp,
    Buffer,
    Finish,
    Gemm,
    Load,
    MicroOp,
    Store,
    buffer_depth,
)
from heterocc.accel_sim.program import DramTensor, Program, ProgramBuilder, tile_shape
from heterocc.sdk import CompileError, tir

from .index_forms import LinearForm, compile_index, evaluate, linear_form
from .intrin import GEMM_CALL, SCOPE_BUFFERS
from .tokens import Step, TileRange, insert_dependency_tokens
from .vthreads import is_leaf_operation

_ALU_OPS = {"add": AluOp.ADD, "max": AluOp.MAX, "min": AluOp.MIN, "mul": AluOp.MUL,
            "shr": AluOp.SHR}




@dataclass
class _Nest:
    """A leaf operation: its loops (outermost first) and the store or call inside."""

    loops: list[tuple[tir.Var, int]]
    leaf: tir.Stmt


def _nest(stmt: tir.Stmt) -> _Nest:
    loops = []
    while isinstance(stmt, tir.For):
        if not isinstance(stmt.min, tir.IntImm) or stmt.min.value != 0 or \
                not isinstance(stmt.extent, tir.IntImm):
            raise CompileError(f"loop {stmt.var.name!r} needs constant bounds from 0")
        loops.append((stmt.var, stmt.extent.value))
        stmt = stmt.body
    return _Nest(loops, stmt)


class _Affine(NamedTuple):
    """``base + sum(coeff * loop)`` over a nest's tile loops (a named tuple: one is made
    per access of every unrolled operation, and a frozen dataclass builds slower)."""

    base: int
    coeffs: tuple[int, ...]

    def at(self, point) -> int:
        return self.base + sum(c * p for c, p in zip(self.coeffs, point))

    def span(self, extents) -> tuple[int, int]:
        """[lowest, highest + 1) over the loops' ranges."""
        low = self.base + sum(min(0, c * (e - 1)) for c, e in zip(self.coeffs, extents))
        high = self.base + sum(max(0, c * (e - 1)) for c, e in zip(self.coeffs, extents))
        return low, high + 1


class _Kernel(tuple):
    """A micro-op kernel (a tuple of ``MicroOp``) that hashes once: kernels key the
    placement's dicts (distinct, resident) at every GEMM and ALU step of a stream, and
    a tuple of dataclasses rehashes every element each time."""

    def __new__(cls, uops):
        kernel = super().__new__(cls, uops)
        kernel._hash = tuple.__hash__(kernel)
        return kernel

    def __hash__(self) -> int:
        return self._hash


class MicroOpKernels:
    """Distinct micro-op kernels (one DRAM block each) and which are resident on chip."""

    def __init__(self, depth: int):
        self.depth = depth
        self.dram: dict[tuple[MicroOp, ...], int] = {}
        self.words: list[MicroOp] = []
        self.resident: dict[tuple[MicroOp, ...], int] = {}
        self.next_free = 0

    def preload(self, kernels: list[tuple[MicroOp, ...]]) -> Load:
        """Make every one of ``kernels`` (distinct, fitting the buffer together) resident
        with one LOAD of their DRAM block."""
        for kernel in kernels:
            self.place(kernel)
        return Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1,
                    x_size=len(self.words), x_stride=len(self.words))

    def place(self, kernel: tuple[MicroOp, ...]) -> tuple[int, Load | None]:
        """(first on-chip index of ``kernel``, the LOAD that brings it there or None).
        The LOAD's ``dram_base`` is relative to the start of the micro-op block."""
        if kernel in self.resident:
            return self.resident[kernel], None
        if len(kernel) > self.depth:
            raise CompileError(f"a micro-op kernel of {len(kernel)} micro-ops exceeds the "
                               f"micro-op buffer ({self.depth}); choose a smaller k_chunk")
        if self.next_free + len(kernel) > self.depth:
            self.resident.clear()  # compute runs in order: earlier kernels are done
            self.next_free = 0
        if kernel not in self.dram:
            self.dram[kernel] = len(self.words)
            self.words.extend(kernel)
        begin = self.next_free
        self.resident[kernel] = begin
        self.next_free += len(kernel)
        return begin, Load(buffer=Buffer.UOP, sram_base=begin, dram_base=self.dram[kernel],
                           y_size=1, x_size=len(kernel), x_stride=len(kernel))


class _StreamEmitter(tir.StmtEmitter):
    """The walk of the lowered TIR: every serial loop around leaf operations unrolled,
    each leaf operation (``_operation``) turned into steps; ``env`` (the loop variables
    bound so far) is the extra argument of every rule."""

    role = "VTA DAE codegen"

    def __init__(self, config: HardwareConfig, tensors: dict[tir.Buffer, DramTensor]):
        self.config = config
        self.tensors = tensors
        self.sram: dict[tir.Buffer, tuple[Buffer, int]] = {}
        self.top = dict.fromkeys(SCOPE_BUFFERS.values(), 0)
        self.steps: list[Step] = []
        self.kernel_of: dict[int, tuple[MicroOp, ...]] = {}
        self._built_kernels: dict[tuple, tuple[MicroOp, ...]] = {}
        self._splits: dict[tuple, tuple] = {}
        self._tile_loops: dict[int, tuple[tir.Stmt, int]] = {}
        self._offsets: dict = {}
        self._shifted: dict = {}

    # ------------------------------------------------------------------ walking

    def visit_Allocate(self, stmt: tir.Allocate, env: dict) -> None:
        buffer = stmt.buffer
        kind = SCOPE_BUFFERS.get(buffer.scope)
        if kind is None:
            raise CompileError(f"buffer {buffer.name!r} is allocated in scope {buffer.scope!r}; "
                               f"the accelerator has {', '.join(SCOPE_BUFFERS)}")
        if tuple(buffer.shape[-2:]) != tile_shape(self.config, kind):
            raise CompileError(f"buffer {buffer.name!r} {list(buffer.shape)} does not end in "
                               f"the {kind.name} tile shape {tile_shape(self.config, kind)}")
        tiles = math.prod(buffer.shape[:-2])
        base = self.top[kind]
        depth = buffer_depth(self.config, kind)
        if base + tiles > depth:
            raise CompileError(f"buffer {buffer.name!r} ({tiles} tiles) overflows the {kind.name} "
                               f"buffer ({depth} tiles, {base} in use); choose smaller blocks")
        self.sram[buffer] = (kind, base)
        self.top[kind] = base + tiles
        self.stmt(stmt.body, env)
        self.top[kind] = base
        del self.sram[buffer]

    def visit_IfThenElse(self, stmt: tir.IfThenElse, env: dict) -> None:
        branch = stmt.then_case if evaluate(stmt.condition, env) else stmt.else_case
        if branch is not None:
            self.stmt(branch, env)

    def visit_For(self, stmt: tir.For, env: dict) -> None:
        if is_leaf_operation(stmt):
            self._operation(_nest(stmt), env)
            return
        if not isinstance(stmt.extent, tir.IntImm):
            raise CompileError(f"loop {stmt.var.name!r} needs a constant extent")
        start = evaluate(stmt.min, env)
        for value in range(start, start + stmt.extent.value):
            self.stmt(stmt.body, {**env, stmt.var: value})

    def visit_default(self, stmt: tir.Stmt, env: dict) -> None:
        """A store or call outside any loop: a leaf operation of no loops."""
        self._operation(_nest(stmt), env)

    # ------------------------------------------------------------------ addresses

    def _tile_index(self, buffer: tir.Buffer, indices) -> tuple[Buffer, Callable]:
        """(buffer kind, tile address as a function of the loop variables) of an access;
        for DRAM tensors the address is in tiles of the tensor's buffer kind."""
        if buffer in self.sram:
            kind, base = self.sram[buffer]
        elif buffer in self.tensors:
            kind, base = self.tensors[buffer].buffer, self.tensors[buffer].tile_base
        else:
            raise CompileError(f"buffer {buffer.name!r} is neither on chip nor a DRAM tensor")
        key = (buffer, id(indices))
        if key not in self._offsets:  # the indices object is kept, so its id stays unique
            self._offsets[key] = (_tile_offset(indices[:-2], buffer.shape[:-2]), indices)
        offset_of = self._offsets[key][0]
        if isinstance(offset_of, LinearForm):
            shifted = self._shifted.get((key, base))
            if shifted is None:  # the same on every iteration: made once
                shifted = self._shifted[(key, base)] = offset_of.shifted(base)
            return kind, shifted
        return kind, lambda env: base + offset_of(env)

    def _affine(self, address: Callable, loops, env: dict) -> _Affine:
        if isinstance(address, LinearForm):  # affine in every variable: no probing
            coeffs, outside = self._split(address.coeffs, loops)
            try:
                return _Affine(address.constant + sum(c * env[v] for v, c in outside), coeffs)
            except KeyError as exc:
                raise CompileError(f"index variable {exc.args[0].name!r} is not bound here") \
                    from None
        zero = {**env, **{var: 0 for var, _ in loops}}
        base = address(zero)
        coeffs = tuple(address({**zero, var: 1}) - base for var, _ in loops)
        form = _Affine(base, coeffs)
        corner = {**env, **{var: extent - 1 for var, extent in loops}}
        if address(corner) != form.at([e - 1 for _, e in loops]):
            raise CompileError("a tile index is not affine in the loops of an accelerator "
                               f"operation (loops {', '.join(v.name for v, _ in loops)})")
        return form

    def _split(self, coeffs: dict, loops) -> tuple[tuple[int, ...], tuple]:
        """(the coefficients of ``loops``' variables, (variable, coefficient) of the
        others) of an affine form's ``coeffs``: the same for every iteration of the loops
        around an operation, so found once per form and loop nest."""
        key = (id(coeffs), tuple(var for var, _ in loops))
        found = self._splits.get(key)
        if found is None or found[0] is not coeffs:  # (the form is kept: its id is its own)
            inner = set(key[1])
            found = (coeffs, tuple(coeffs.get(var, 0) for var in key[1]),
                     tuple((v, c) for v, c in coeffs.items() if v not in inner))
            self._splits[key] = found
        return found[1], found[2]

    def _element_loops(self, nest: _Nest, accesses) -> list:
        """The nest's tile loops, after checking that its innermost loops walk the
        elements of one tile in every access (a unit tile dimension has no loop); the
        check depends on the operation alone, so it runs once per operation."""
        checked = self._tile_loops.get(id(nest.leaf))
        if checked is not None and checked[0] is nest.leaf:
            return nest.loops[:checked[1]]
        first, indices = accesses[0]
        tile = tuple(first.shape[-2:])
        walked = [None if dim == 1 and isinstance(index, tir.IntImm) and index.value == 0
                  else index for index, dim in zip(indices[-2:], tile)]
        inner = [(index, dim) for index, dim in zip(walked, tile) if index is not None]
        tail = nest.loops[len(nest.loops) - len(inner):] if inner else []
        ok = len(tail) == len(inner) and all(
            var is index and extent == dim for (var, extent), (index, dim) in zip(tail, inner))
        for buffer, indices in accesses:
            ok = ok and tuple(buffer.shape[-2:]) == tile and all(
                (index is None and isinstance(actual, tir.IntImm) and actual.value == 0)
                or actual is index for index, actual in zip(walked, indices[-2:]))
        if not ok:
            raise CompileError(f"an access to {first.name!r} does not cover whole tiles with the "
                               "innermost loops of its operation")
        self._tile_loops[id(nest.leaf)] = (nest.leaf, len(nest.loops) - len(tail))
        return nest.loops[:len(nest.loops) - len(tail)]

    # ------------------------------------------------------------------ operations

    def _operation(self, nest: _Nest, env: dict) -> None:
        leaf = nest.leaf
        if isinstance(leaf, tir.Evaluate) and isinstance(leaf.value, tir.Call) \
                and leaf.value.name == GEMM_CALL:
            self._gemm(nest, env)
        elif isinstance(leaf, tir.BufferStore) and leaf.buffer in self.sram:
            if _copied_tensor(leaf.value, self.tensors) is not None:
                self._load(nest, env)
            elif isinstance(leaf.value, tir.IntImm) and leaf.value.value == 0:
                self._reset(nest, env)
            else:
                raise CompileError(f"no accelerator instruction computes {leaf.buffer.name!r} "
                                   f"= {leaf.value!r}")
        elif isinstance(leaf, tir.BufferStore) and leaf.buffer in self.tensors:
            self._store(nest, env)
        else:
            raise CompileError(f"no accelerator instruction implements {leaf!r}")

    def _dma(self, loops, sram: _Affine, dram: _Affine, what: str) -> dict:
        """The 2-D transfer fields of a copy over ``loops`` (at most two)."""
        if len(loops) > 2:
            raise CompileError(f"{what}: a transfer has at most two tile loops, got {len(loops)}")
        extents, s_coeffs, d_coeffs = [e for _, e in loops], sram.coeffs, dram.coeffs
        if len(loops) == 1 and (s_coeffs, d_coeffs) != ((1,), (1,)):
            extents, s_coeffs, d_coeffs = extents + [1], s_coeffs + (0,), d_coeffs + (0,)
        while len(extents) < 2:  # a single contiguous row, or a single tile
            extents, s_coeffs, d_coeffs = [1] + extents, (0,) + s_coeffs, (0,) + d_coeffs
        y_size, x_size = extents
        ok = (x_size == 1 or (s_coeffs[1] == 1 and d_coeffs[1] == 1)) and \
            (y_size == 1 or s_coeffs[0] == x_size)
        if not ok:
            raise CompileError(f"{what}: the tiles are not a 2-D strided block "
                               f"(on-chip strides {s_coeffs}, DRAM strides {d_coeffs})")
        return dict(sram_base=sram.base, dram_base=dram.base, y_size=y_size, x_size=x_size,
                    x_stride=d_coeffs[0] if y_size > 1 else x_size)

    @staticmethod
    def _transfers(loops, env: dict):
        """(the two innermost tile loops, env) per transfer: a DMA moves a 2-D block, so
        tile loops outside those two are unrolled into one transfer per iteration."""
        outer, inner = loops[:-2], loops[-2:]
        for point in itertools.product(*(range(extent) for _, extent in outer)):
            yield inner, {**env, **{var: value for (var, _), value in zip(outer, point)}}

    def _load(self, nest: _Nest, env: dict) -> None:
        store = nest.leaf
        source = _copied_tensor(store.value, self.tensors)
        loops = self._element_loops(nest, [(store.buffer, store.indices),
                                           (source.buffer, source.indices)])
        kind, sram_index = self._tile_index(store.buffer, store.indices)
        _, dram_index = self._tile_index(source.buffer, source.indices)
        what = f"load of {store.buffer.name!r}"
        for inner, at in self._transfers(loops, env):
            if isinstance(store.value, tir.Select):
                elements = {var: 0 for var, _ in nest.loops[len(loops):]}
                fields = self._padded_dma(inner, store.value, sram_index, dram_index,
                                          {**at, **elements}, what)
            else:
                fields = self._dma(inner, self._affine(sram_index, inner, at),
                                   self._affine(dram_index, inner, at), what)
            load = Load(buffer=kind, **fields)
            tiles = load.padded_rows * load.padded_cols
            self.steps.append(Step(load, writes=[TileRange(kind, load.sram_base,
                                                           load.sram_base + tiles)]))

    def _padded_dma(self, loops, value: tir.Select, sram_index, dram_index, env: dict,
                    what: str) -> dict:
        """The fields of a LOAD that copies the tiles where ``value.condition`` holds and
        pads the others with ``value.false_value``: the tiles inside must form one
        rectangle of the 2-D block, whose rows the LOAD's padding fields surround."""
        if not isinstance(value.false_value, tir.IntImm):
            raise CompileError(f"{what}: padding must be a constant, not {value.false_value!r}")
        while len(loops) < 2:
            loops = [(tir.Var("unit"), 1), *loops]
        (row_var, rows), (col_var, cols) = loops
        row_ok, col_ok = _inside_bounds(value.condition, row_var, rows, col_var, cols, env,
                                        what)
        sram = self._affine(sram_index, loops, env)
        dense = (rows == 1 or sram.coeffs[0] == cols) and (cols == 1 or sram.coeffs[1] == 1)
        if not dense:
            raise CompileError(f"{what}: the on-chip block is not dense rows of {cols} tiles")
        pad = dict(sram_base=sram.base, pad_value=value.false_value.value)
        (top, bottom), (left, right) = _run(row_ok, what), _run(col_ok, what)
        if top == bottom or left == right:  # the whole block is padding: no DRAM access
            return dict(pad, dram_base=0, y_size=0, x_size=cols, x_stride=cols,
                        y_pad_top=_pad_field(rows, what))
        dram = self._affine(dram_index, loops, env)
        if right - left > 1 and dram.coeffs[1] != 1:
            raise CompileError(f"{what}: the tiles of a row are not consecutive in DRAM")
        return dict(pad, dram_base=dram.at((top, left)), y_size=bottom - top,
                    x_size=right - left, x_stride=dram.coeffs[0] if bottom - top > 1
                    else right - left,
                    y_pad_top=_pad_field(top, what), y_pad_bottom=_pad_field(rows - bottom, what),
                    x_pad_left=_pad_field(left, what), x_pad_right=_pad_field(cols - right, what))

    def _loop_instruction(self, loops, indices: dict[str, Callable], env: dict):
        """(outer extent, inner extent, {name: (factor_outer, factor_inner)}, {name:
        (base, coefficients and extents of the loops beyond the outer two)}, {name: span}).
        The micro-ops (one per iteration of the loops beyond the outer two) are built
        from the second by ``_micro_ops``."""
        hardware = list(loops[:2])
        while len(hardware) < 2:
            hardware.insert(0, (tir.Var("unit"), 1))
        everything = hardware + list(loops[2:])
        extents = [e for _, e in everything]
        uop_extents = tuple(extents[2:])
        factors, columns, spans = {}, {}, {}
        for name, expr in indices.items():
            form = self._affine(expr, everything, env)
            factors[name] = form.coeffs[:2]
            columns[name] = (form.base, form.coeffs[2:], uop_extents)
            spans[name] = form.span(extents)
        return hardware[0][1], hardware[1][1], factors, columns, spans

    def _micro_ops(self, dst: tuple, src: tuple | None = None, wgt: tuple | None = None
                   ) -> tuple[MicroOp, ...]:
        """The micro-op kernel whose fields walk the columns ``dst``, ``src`` and ``wgt``
        of ``_loop_instruction`` (0 where None). Kernels recur with every task, so each
        distinct one is built once per stream and shared."""
        key = (dst, src, wgt)
        kernel = self._built_kernels.get(key)
        if kernel is None:
            fields = [_column(column) if column is not None else None
                      for column in (dst, src, wgt)]
            size = len(fields[0])
            fields = [f if f is not None else (0,) * size for f in fields]
            kernel = _Kernel(map(MicroOp, *fields))
            self._built_kernels[key] = kernel
        return kernel

    def _kernel(self, uops: tuple[MicroOp, ...]) -> tuple[int, int]:
        """Records the micro-op kernel of the next step; its on-chip range is chosen
        once the whole stream is known (``_place_kernels``)."""
        self.kernel_of[len(self.steps)] = uops
        return 0, len(uops)

    def _reset(self, nest: _Nest, env: dict) -> None:
        store = nest.leaf
        loops = self._element_loops(nest, [(store.buffer, store.indices)])
        _, acc = self._tile_index(store.buffer, store.indices)
        outer, inner, factors, columns, spans = self._loop_instruction(loops, {"acc": acc}, env)
        begin, end = self._kernel(self._micro_ops(columns["acc"]))
        gemm = Gemm(reset=True, uop_begin=begin, uop_end=end, loop_outer=outer, loop_inner=inner,
                    acc_factor_outer=factors["acc"][0], acc_factor_inner=factors["acc"][1])
        self.steps.append(Step(gemm, writes=[TileRange(Buffer.ACC, *spans["acc"])]))

    def _gemm(self, nest: _Nest, env: dict) -> None:
        out, inp, wgt = nest.leaf.value.args
        indices = {name: self._tile_index(load.buffer, load.indices)[1]
                   for name, load in (("acc", out), ("inp", inp), ("wgt", wgt))}
        outer, inner, f, columns, spans = self._loop_instruction(nest.loops, indices, env)
        begin, end = self._kernel(self._micro_ops(columns["acc"], columns["inp"],
                                                  columns["wgt"]))
        gemm = Gemm(uop_begin=begin, uop_end=end, loop_outer=outer, loop_inner=inner,
                    acc_factor_outer=f["acc"][0], acc_factor_inner=f["acc"][1],
                    inp_factor_outer=f["inp"][0], inp_factor_inner=f["inp"][1],
                    wgt_factor_outer=f["wgt"][0], wgt_factor_inner=f["wgt"][1])
        acc = TileRange(Buffer.ACC, *spans["acc"])
        self.steps.append(Step(gemm, reads=[TileRange(Buffer.INP, *spans["inp"]),
                                            TileRange(Buffer.WGT, *spans["wgt"]), acc],
                               writes=[acc]))

    def _store(self, nest: _Nest, env: dict) -> None:
        store = nest.leaf
        value = store.value.value if isinstance(store.value, tir.Cast) else store.value
        accumulator, steps = _epilogue_steps(value, self.sram)
        accesses = [(store.buffer, store.indices), (accumulator.buffer, accumulator.indices)]
        accesses += [(o.buffer, o.indices) for _, o, _ in steps
                     if isinstance(o, tir.BufferLoad)]
        loops = self._element_loops(nest, accesses)
        _, acc = self._tile_index(accumulator.buffer, accumulator.indices)
        for op, operand, product_shift in steps:
            self._alu(op, operand, acc, loops, env, product_shift)
        kind, dram_index = self._tile_index(store.buffer, store.indices)
        for inner, at in self._transfers(loops, env):
            fields = self._dma(inner, self._affine(acc, inner, at),
                               self._affine(dram_index, inner, at),
                               f"store of {store.buffer.name!r}")
            instruction = Store(buffer=kind, **fields)
            tiles = instruction.y_size * instruction.x_size
            self.steps.append(Step(instruction, reads=[TileRange(
                Buffer.ACC, instruction.sram_base, instruction.sram_base + tiles)]))

    def _alu(self, op: str, operand, acc: tir.Expr, loops, env: dict,
             product_shift: int = 0) -> None:
        indices = {"dst": acc}
        if isinstance(operand, tir.BufferLoad):
            indices["src"] = self._tile_index(operand.buffer, operand.indices)[1]
        outer, inner, f, columns, spans = self._loop_instruction(loops, indices, env)
        fields = dict(alu_op=_ALU_OPS[op], loop_outer=outer, loop_inner=inner,
                      dst_factor_outer=f["dst"][0], dst_factor_inner=f["dst"][1])
        reads = [TileRange(Buffer.ACC, *spans["dst"])]
        if isinstance(operand, tir.BufferLoad):
            kernel = self._micro_ops(columns["dst"], columns["src"])
            fields.update(src_factor_outer=f["src"][0], src_factor_inner=f["src"][1],
                          imm=product_shift)
            reads.append(TileRange(Buffer.ACC, *spans["src"]))
        else:
            imm = operand.value
            if not -(1 << 15) <= imm < (1 << 15):
                raise CompileError(f"ALU immediate {imm} does not fit 16 signed bits")
            kernel = self._micro_ops(columns["dst"])
            fields.update(use_imm=True, imm=imm)
        begin, end = self._kernel(kernel)
        self.steps.append(Step(Alu(uop_begin=begin, uop_end=end, **fields), reads=reads,
                               writes=[TileRange(Buffer.ACC, *spans["dst"])]))


def _tile_offset(indices, shape) -> LinearForm | Callable:
    """The row-major tile offset of ``indices`` in a buffer of ``shape`` (its tile
    dimensions left out): a LinearForm when every index is affine (combined from the
    indices' own forms, without building the expression), else a compiled evaluator."""
    forms = [linear_form(index) for index in indices]
    if all(form is not None for form in forms):
        constant, coeffs = 0, {}
        for form, dim in zip(forms, shape):
            constant = constant * dim + form.constant
            coeffs = {v: c * dim for v, c in coeffs.items()}
            for v, c in form.coeffs.items():
                coeffs[v] = coeffs.get(v, 0) + c
            coeffs = {v: c for v, c in coeffs.items() if c}
        return LinearForm(constant, coeffs)
    offset: tir.Expr = tir.IntImm(0)
    for index, dim in zip(indices, shape):
        offset = offset * dim + index
    linear = linear_form(offset)
    return compile_index(offset) if linear is None else linear


@functools.lru_cache(maxsize=1024)
def _offsets(coeffs: tuple[int, ...], extents: tuple[int, ...]) -> tuple[int, ...]:
    """``sum(c * p)`` at every point ``p`` of loops of ``extents``, the first loop
    outermost (the order ``itertools.product`` walks them)."""
    offsets = [0]
    for coeff, extent in zip(coeffs, extents):
        offsets = [o + coeff * i for o in offsets for i in range(extent)]
    return tuple(offsets)


def _column(column: tuple) -> list[int]:
    """The values of one micro-op field: (base, coefficients, extents) of
    ``_loop_instruction``."""
    base, coeffs, extents = column
    return [base + o for o in _offsets(coeffs, extents)]


def _copied_tensor(value: tir.Expr, tensors: dict) -> tir.BufferLoad | None:
    """The DRAM tensor read of a copy's value: a plain read, or a read selected where a
    condition holds with a constant elsewhere (a padded copy); None otherwise."""
    if isinstance(value, tir.Select):
        value = value.true_value
    return value if isinstance(value, tir.BufferLoad) and value.buffer in tensors else None


def _conjuncts(condition: tir.Expr) -> list[tir.Expr]:
    if isinstance(condition, tir.Binary) and condition.op == "and":
        return _conjuncts(condition.a) + _conjuncts(condition.b)
    return [condition]


def _inside_bounds(condition: tir.Expr, row_var, rows: int, col_var, cols: int,
                   env: dict, what: str) -> tuple[list[bool], list[bool]]:
    """(rows, columns) of a 2-D block where a padded copy's ``condition`` holds: a
    padding condition is a conjunction of bounds on the row and on the column, so each
    bound is evaluated once per row or per column."""
    row_ok, col_ok = [True] * rows, [True] * cols
    for term in _conjuncts(condition):
        uses = tir.free_vars(term)
        check = compile_index(term)
        if col_var not in uses:
            row_ok = [ok and bool(check({**env, row_var: r})) for r, ok in enumerate(row_ok)]
        elif row_var not in uses:
            col_ok = [ok and bool(check({**env, col_var: c})) for c, ok in enumerate(col_ok)]
        else:
            raise CompileError(f"{what}: the padding condition {term!r} bounds rows and "
                               "columns together")
    return row_ok, col_ok


def _run(flags: list[bool], what: str) -> tuple[int, int]:
    """[first, last + 1) of the True entries, which must be consecutive."""
    kept = [k for k, ok in enumerate(flags) if ok]
    if kept and kept[-1] + 1 - kept[0] != len(kept):
        raise CompileError(f"{what}: the tiles inside the padding are not a rectangle")
    return (kept[0], kept[-1] + 1) if kept else (0, 0)


def _pad_field(tiles: int, what: str) -> int:
    if tiles > (1 << DMA_PAD_BITS) - 1:
        raise CompileError(f"{what}: {tiles} padding tiles exceed the LOAD's "
                           f"{DMA_PAD_BITS}-bit padding field")
    return tiles


def _shifted_product(value: tir.Expr):
    """(x, c, k) of ``int32((int64(x) * int64(c)) >> k)`` with a constant ``k`` (a MUL
    whose exact product shifts right by its immediate field), else None."""
    if not (isinstance(value, tir.Cast) and isinstance(value.value, tir.Binary)
            and value.value.op == "shr" and isinstance(value.value.b, tir.IntImm)):
        return None
    product = value.value.a
    if not (isinstance(product, tir.Binary) and product.op == "mul"):
        return None
    x, c = (v.value if isinstance(v, tir.Cast) else v for v in (product.a, product.b))
    return x, c, value.value.b.value


def _epilogue_steps(value: tir.Expr, sram: dict):
    """(the accumulator load, [(op, operand, product shift)] innermost first) of an
    elementwise expression of one accumulator: the accumulator is the first operand of
    every operation, the second a constant tile or an immediate; a multiplication may
    shift its 64-bit product right (``_shifted_product``)."""
    steps = []
    while (shifted := _shifted_product(value)) is not None or isinstance(value, tir.Binary):
        if shifted is not None:
            x, c, k = shifted
            if not isinstance(c, tir.BufferLoad):
                raise CompileError(f"the ALU multiplies with a shifted product only by a "
                                   f"constant tile, not {c!r}")
            steps.append(("mul", c, k))
            value = x
            continue
        # the simplifier writes x + (-c) as x - c and may put an immediate first
        if value.op == "sub" and isinstance(value.b, tir.IntImm):
            value = tir.Binary("add", value.a, tir.IntImm(-value.b.value, value.b.dtype))
        elif value.op in ("add", "mul", "min", "max") and isinstance(value.a, tir.IntImm):
            value = tir.Binary(value.op, value.b, value.a)
        if value.op not in _ALU_OPS or not isinstance(value.b, tir.BufferLoad | tir.IntImm):
            raise CompileError(f"the ALU cannot compute {value!r}: it applies min, max, add, "
                               "shr or mul of an accumulator and a constant tile or immediate")
        steps.append((value.op, value.b, 0))
        value = value.a
    if not (isinstance(value, tir.BufferLoad) and value.buffer in sram):
        raise CompileError(f"a store to DRAM must read an on-chip accumulator, not {value!r}")
    return value, steps[::-1]


def _place_kernels(steps: list[Step], kernel_of: dict[int, tuple[MicroOp, ...]], depth: int):
    """(steps with their micro-op ranges and the micro-op LOADs they need, the DRAM
    micro-op words, indices of those LOADs). When all distinct kernels fit the
    micro-op buffer together, one LOAD at the start brings them all; otherwise each
    is loaded before its first use and stays until the buffer fills up."""
    kernels = MicroOpKernels(depth)
    placed, loads = [], []
    distinct = list(dict.fromkeys(kernel_of.values()))
    if distinct and sum(len(k) for k in distinct) <= depth:
        loads.append(len(placed))
        placed.append(Step(kernels.preload(distinct)))
    for index, step in enumerate(steps):
        kernel = kernel_of.get(index)
        if kernel is not None:
            begin, load = kernels.place(kernel)
            if load is not None:
                loads.append(len(placed))
                placed.append(Step(load))
            step = Step(dataclasses.replace(step.instruction, uop_begin=begin,
                                            uop_end=begin + len(kernel)), step.reads, step.writes)
        placed.append(step)
    return placed, kernels.words, loads


def emit_program(func: tir.PrimFunc, config: HardwareConfig, builder: ProgramBuilder,
                 tensors: dict[str, DramTensor], check: bool = True) -> Program:
    """The program of ``func`` (lowered, thread-interleaved): ``tensors`` names the DRAM
    tensor of each parameter, already placed by ``builder``. With ``check=False`` the
    stream checker is left to the caller (a candidate stream that is only timed: the
    timing model validates every instruction itself, and the stream chosen is checked
    before it is used)."""
    by_buffer = {}
    for param in func.params:
        if param.name not in tensors:
            raise CompileError(f"parameter {param.name!r} has no DRAM tensor")
        by_buffer[param] = tensors[param.name]
    emitter = _StreamEmitter(config, by_buffer)
    emitter.stmt(func.body, {})
    steps, words, uop_loads = _place_kernels(emitter.steps, emitter.kernel_of,
                                             config.uop_depth)
    if words:
        block = builder.uops("uops", words)
        for index in uop_loads:
            load = steps[index].instruction
            steps[index] = Step(dataclasses.replace(load,
                                                    dram_base=load.dram_base + block.tile_base))
    everything = [TileRange(b, 0, buffer_depth(config, b)) for b in SCOPE_BUFFERS.values()]
    steps.append(Step(Finish(), reads=everything, writes=everything))  # a barrier
    for instruction in insert_dependency_tokens(steps, config):
        builder.emit(instruction)
    program = builder.build()
    if check:
        check_program(program, config)
    return program


def check_program(program: Program, config: HardwareConfig) -> None:
    """The stream checker on ``program``'s stream, its DRAM ranges included."""
    check_stream(program.instructions, config, dram_bytes=len(program.dram))
