"""Quantized element-wise additions (a ResNet block's residual sum) on the vector ALU.

``realize_qdq`` writes ``Q(DQ(a) + DQ(b))`` (optionally through a Relu) as

    acc = (((int32(a) - za) * Ma) >> ka) + (((int32(b) - zb) * Mb) >> kb)
    y   = Requantize(acc; multiplier 1, shift s, zero point zy, clamp [qmin, qmax])

(each term a ``Requantize`` with a product shift and 31-bit multiplier, or a ``Mul``
by a multiplier of at most 15 bits, product shift 0)

and the accelerator runs exactly that: both int8 operands are LOADed into the input
buffer in the blocked layout of the convolutions around them (tiles of ``batch x
block_in`` elements, channel blocks outermost), reach the accumulators through ALU
instructions that read the input buffer (``src_inp``), and the ALU centers, scales,
adds, rounds, shifts and clamps them; a STORE narrows the result. No GEMM runs and the
program needs no constant tensors (multipliers, zero points and the shift are per
tensor):

    X = 0; X += inp[a]; X -= za; X = (X * MA) >> ka      (Y the same with b)
    X += Y; X += 2**(s-1); X >>= s; X += zy; X = max(X, qmin); X = min(X, qmax)

(a shift above 15 rounds as ``X >>= s - 15; X += 2**14; X >>= 15``, the same value
with a rounding constant that fits an immediate)

A 15-bit multiplier (``ka`` 0) is an immediate. A 31-bit one multiplies from an
accumulator tile ``MA`` holding it in every element, which the program builds once
from 11-bit immediate digits (``MA = 0; MA += d2; MA <<= 11; MA += d1; MA <<= 11;
MA += d0``) in a tile past the chunks; the MUL shifts its 64-bit product right by
``ka`` (its immediate field, docs/isa.md section 5). The intermediate values stay
inside int32 (``realize_qdq`` picks ``s`` so), so int32 never wraps and the result
equals the graph's reference.

Work is split into chunks of tiles, two chunks in flight: the load module fills one
chunk's input tiles while the compute module works on the other and the store module
drains a third, synchronized by dependency tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Load, MicroOp, Store
from heterocc.accel_sim.program import Program, ProgramBuilder
from heterocc.ir.graph import Node

#: the ALU's signed immediate range
_IMMEDIATE = (-(1 << 15), (1 << 15) - 1)
#: chunks in flight (each holds its two operands in INP and two tiles per element in ACC)
_SLOTS = 2
#: the largest rounding constant an immediate holds is 2**14: a larger shift first
#: shifts by the excess (see _alu_steps)
_ROUNDING_BITS = 14


@dataclass(frozen=True)
class QuantizedAdd:
    """The integer parameters of one quantized addition (see the module docstring)."""

    zero_a: int
    multiplier_a: int
    zero_b: int
    multiplier_b: int
    shift: int
    zero_point: int
    qmin: int
    qmax: int
    product_shift_a: int = 0
    product_shift_b: int = 0

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The addition in NumPy (int64), as the ALU computes it."""
        acc = (((a.astype(np.int64) - self.zero_a) * self.multiplier_a)
               >> self.product_shift_a) + \
            (((b.astype(np.int64) - self.zero_b) * self.multiplier_b) >> self.product_shift_b)
        rounding = (1 << (self.shift - 1)) if self.shift else 0
        return np.clip(((acc + rounding) >> self.shift) + self.zero_point, self.qmin, self.qmax)


@dataclass(frozen=True)
class QuantizedMul:
    """The integer parameters of one quantized product (``realize_qdq``'s
    ``_rewrite_mul``): ``clamp(((((a - za) * (b - zb) * multiplier) >> product_shift) +
    2**(shift-1)) >> shift) + zero_point, qmin, qmax)``."""

    zero_a: int
    zero_b: int
    multiplier: int
    product_shift: int
    shift: int
    zero_point: int
    qmin: int
    qmax: int

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The product in NumPy (int64), as the ALU computes it."""
        acc = (a.astype(np.int64) - self.zero_a) * (b.astype(np.int64) - self.zero_b)
        scaled = (acc * self.multiplier) >> self.product_shift
        rounding = (1 << (self.shift - 1)) if self.shift else 0
        return np.clip(((scaled + rounding) >> self.shift) + self.zero_point, self.qmin,
                       self.qmax)


def _scalar_constant(value) -> int | None:
    if value is None or not value.is_const or value.data.size != 1:
        return None
    return int(value.data.reshape(()))


def _term_scaling(term: Node) -> tuple[int, int] | None:
    """(multiplier, product shift) of a ``Mul`` by a constant, or of a ``Requantize``
    that only scales (shift 0, zero point 0, int32 out, no clamp an int8 difference
    reaches); None otherwise."""
    if term.op == "Mul":
        multiplier = _scalar_constant(term.inputs[1])
        return None if multiplier is None else (multiplier, 0)
    a = term.attrs
    if isinstance(a["multiplier"], list) or isinstance(a["shift"], list) or a["shift"] or \
            a["zero_point"] or a["out_dtype"] != "int32" or a["qmin"] > -2 ** 31 or \
            a["qmax"] < 2 ** 31 - 1 or isinstance(a["acc_limit"], list) or \
            a["acc_limit"] < 255 or not 0 < a["multiplier"] < 2 ** 31:
        return None
    return int(a["multiplier"]), int(a.get("product_shift", 0))


def _operand(term: Node, nodes: list[Node]) -> tuple[Node, int, int, int] | None:
    """(the Cast, its zero point, its multiplier, its product shift) of one scaled
    operand, or None."""
    scaling, centered = _term_scaling(term), _centered_operand(term.inputs[0], nodes)
    if scaling is None or centered is None:
        return None
    return (*centered, *scaling)


def quantized_add(nodes: list[Node]) -> tuple[QuantizedAdd, list[Node]] | str:
    """The parameters of a matched ``quantized_add`` composite and its two Casts (in
    operand order), or why the accelerator cannot run it."""
    add = next(n for n in nodes if n.op == "Add")
    requant = nodes[-1]
    by_output = {n.outputs[0]: n for n in nodes}
    operands = [_operand(by_output[v], nodes) for v in add.inputs]
    if any(o is None for o in operands):
        return "an operand is not a constant per-tensor zero point and multiplier"
    (cast_a, za, ma, ka), (cast_b, zb, mb, kb) = operands
    a = requant.attrs
    shift = a["shift"]
    if any(isinstance(a[k], list) for k in ("multiplier", "shift", "acc_limit")) or \
            a["multiplier"] != 1:
        return "the requantization is per channel or scales again (multiplier != 1)"
    why = _int8_operands_and_output(cast_a, cast_b, a)
    if why is not None:
        return why
    if cast_a.inputs[0].type.shape != cast_b.inputs[0].type.shape or \
            cast_a.inputs[0].type.ndim != 4:
        return "the operands are not two 4-D tensors of one shape (no broadcasting)"
    rounding = (1 << (shift - 1)) if shift else 0
    # a multiplier with a product shift multiplies from a tile; one without is immediate
    immediates = {"multiplier": tuple(m for m, k in ((ma, ka), (mb, kb)) if not k),
                  "zero point": (-za, -zb, a["zero_point"])}
    for what, values in immediates.items():
        if not all(_IMMEDIATE[0] <= v <= _IMMEDIATE[1] for v in values):
            return f"a {what} {values} does not fit the ALU's 16-bit immediate"
    if not 0 <= shift < 31:
        return f"shift {shift} outside [0, 31)"
    if not all(0 <= k < 62 for k in (ka, kb)):
        return f"product shifts {ka}, {kb} outside [0, 62)"
    bound = ((255 * abs(ma)) >> ka) + ((255 * abs(mb)) >> kb) + 1 + rounding
    if bound >= min(a["acc_limit"], 2 ** 31 - 1) or (ka and 255 * ma >= 2 ** 62) or \
            (kb and 255 * mb >= 2 ** 62):
        return "the sum could leave int32 or reach the requantization's accumulator clamp"
    return QuantizedAdd(za, ma, zb, mb, shift, int(a["zero_point"]), int(a["qmin"]),
                        int(a["qmax"]), ka, kb), [cast_a, cast_b]


def _int8_operands_and_output(cast_a: Node, cast_b: Node, attrs: dict) -> str | None:
    """Why the ALU cannot read these operands (int8 tiles widened to int32) or store
    the requantization's output (int8), or None."""
    for cast in (cast_a, cast_b):
        if cast.inputs[0].type.dtype != "int8" or cast.outputs[0].type.dtype != "int32":
            return (f"operand {cast.inputs[0].name} is {cast.inputs[0].type.dtype}; the ALU "
                    "reads int8 input tiles")
    if attrs["out_dtype"] != "int8":
        return f"output type {attrs['out_dtype']} is not int8"
    return None


def _centered_operand(value, nodes: list[Node]) -> tuple[Node, int] | None:
    """(the Cast, its zero point) of ``Cast(x)`` or ``Cast(x) - zero``, or None."""
    by_output = {n.outputs[0]: n for n in nodes}
    inner, zero = by_output.get(value), 0
    if inner is not None and inner.op == "Sub":
        zero = _scalar_constant(inner.inputs[1])
        inner = by_output.get(inner.inputs[0])
    if inner is None or inner.op != "Cast" or zero is None:
        return None
    return inner, zero


def quantized_mul(nodes: list[Node]) -> tuple[QuantizedMul, list[Node]] | str:
    """The parameters of a matched ``quantized_mul`` composite and its two Casts (in
    operand order), or why the accelerator cannot run it. The second operand may
    broadcast along axes of length 1 (the kernel expands it on the host)."""
    mul = next(n for n in nodes if n.op == "Mul")
    requant = nodes[-1]
    operands = [_centered_operand(v, nodes) for v in mul.inputs]
    if any(o is None for o in operands):
        return "an operand is not an int8 tensor less a constant per-tensor zero point"
    (cast_a, za), (cast_b, zb) = operands
    a = requant.attrs
    if any(isinstance(a[k], list) for k in ("multiplier", "shift", "acc_limit")):
        return "the requantization is per channel"
    why = _int8_operands_and_output(cast_a, cast_b, a)
    if why is not None:
        return why
    shape_a, shape_b = cast_a.inputs[0].type.shape, cast_b.inputs[0].type.shape
    if len(shape_a) != 4 or len(shape_b) != 4 or any(
            d != e and e != 1 for d, e in zip(shape_a, shape_b)):
        return "the operands are not 4-D, the second one broadcasting to the first's shape"
    shift, product_shift, multiplier = a["shift"], a["product_shift"], a["multiplier"]
    rounding = (1 << (shift - 1)) if shift else 0
    if not (0 < product_shift < 62 and 0 < multiplier < 2 ** 31 and 0 <= shift < 31):
        return (f"multiplier {multiplier}, product shift {product_shift} or shift {shift} "
                "is not one the ALU takes from a tile")
    zero_points = (-za, -zb, a["zero_point"])
    if not all(_IMMEDIATE[0] <= v <= _IMMEDIATE[1] for v in zero_points):
        return f"a zero point {zero_points} does not fit the ALU's 16-bit immediate"
    bound = ((255 * 255 * multiplier) >> product_shift) + 1 + rounding
    if bound >= 2 ** 31 or a["acc_limit"] < 255 * 255:
        return "the product could leave int32 or reach the requantization's accumulator clamp"
    return QuantizedMul(za, zb, multiplier, product_shift, shift, int(a["zero_point"]),
                        int(a["qmin"]), int(a["qmax"])), [cast_a, cast_b]


def _tile_multipliers(add: QuantizedAdd | QuantizedMul) -> list[tuple[int, int]]:
    """(operand 0 or 1, multiplier) of each term that multiplies from a tile (a
    product's one multiplier scales operand 0's accumulators, holding the product)."""
    if isinstance(add, QuantizedMul):
        return [(0, add.multiplier)]
    return [(operand, m) for operand, (m, k) in enumerate(
        ((add.multiplier_a, add.product_shift_a), (add.multiplier_b, add.product_shift_b)))
        if k]


def chunk_tiles(config: HardwareConfig, reserved: int = 0) -> int:
    """Tiles per chunk: _SLOTS chunks of two operands fit the input and the accumulator
    buffers (less ``reserved`` accumulator tiles, the multiplier tiles)."""
    return max(1, min(config.inp_depth, config.acc_depth - reserved) // (2 * _SLOTS))


#: bits of each immediate digit a multiplier tile is built from (three digits: 31 bits)
_DIGIT_BITS = 11


def _multiplier_digits(multiplier: int) -> list[int]:
    """The multiplier's base-2**11 digits, most significant first (each fits an
    immediate)."""
    return [(multiplier >> (_DIGIT_BITS * d)) & ((1 << _DIGIT_BITS) - 1) for d in (2, 1, 0)]


@functools.lru_cache(maxsize=64)
def add_program(config: HardwareConfig, tiles: int, add: QuantizedAdd | QuantizedMul
                ) -> Program:
    """The program adding (a ``QuantizedAdd``) or multiplying (a ``QuantizedMul``)
    tensors "A" and "B" (``tiles`` tiles each, in rows of ``batch x block_in``) into "Y"
    (rows of ``batch x block_out``, int8)."""
    batch, bi, bo = config.batch, config.block_in, config.block_out
    builder = ProgramBuilder(config)
    a = builder.tensor("A", Buffer.INP, shape=(tiles * batch, bi))
    b = builder.tensor("B", Buffer.INP, shape=(tiles * batch, bi))
    y = builder.tensor("Y", Buffer.OUT, shape=(tiles * batch, bo))
    tiled = _tile_multipliers(add)
    chunk = chunk_tiles(config, len(tiled))
    constant_tile = {operand: _SLOTS * 2 * chunk + i for i, (operand, _) in enumerate(tiled)}
    # per slot: (a's dst/src, b's dst/src, a's dst with b's accumulators as src), then
    # one per tile multiplier (its operand's dst, the multiplier tile as src)
    kernel = []
    for slot in range(_SLOTS):
        base = slot * 2 * chunk
        kernel += [MicroOp(base, base), MicroOp(base + chunk, base + chunk),
                   MicroOp(base, base + chunk)]
        kernel += [MicroOp(base + operand * chunk, constant_tile[operand])
                   for operand, _ in tiled]
    # the multiplier tiles themselves, as destinations
    kernel += [MicroOp(constant_tile[operand], 0) for operand, _ in tiled]
    width = 3 + len(tiled)
    builder.emit(builder.load_uops(builder.uops("kernel", kernel)))
    one_tile = dict(loop_outer=1, loop_inner=1)
    for i, (_, multiplier) in enumerate(tiled):
        uop = _SLOTS * width + i
        builds = [(AluOp.MUL, 0)]
        for position, digit in enumerate(_multiplier_digits(multiplier)):
            builds += [(AluOp.SHR, -_DIGIT_BITS)] if position else []
            builds += [(AluOp.ADD, digit)]
        for op, imm in builds:
            builder.emit(Alu(alu_op=op, uop_begin=uop, uop_end=uop + 1, use_imm=True,
                             imm=imm, **one_tile))
    starts = list(range(0, tiles, chunk))
    for index, start in enumerate(starts):
        size = min(chunk, tiles - start)
        slot = index % _SLOTS
        base = slot * 2 * chunk
        reuse = index >= _SLOTS  # the slot held an earlier chunk
        again = index + _SLOTS < len(starts)  # a later chunk reuses the slot
        last = index == len(starts) - 1
        for operand, tensor in enumerate((a, b)):
            builder.emit(Load(buffer=Buffer.INP, sram_base=base + operand * chunk,
                              dram_base=tensor.tile(start, 0), y_size=1, x_size=size,
                              x_stride=size, pop_next=reuse and operand == 0,
                              push_next=operand == 1))
        steps = _alu_steps(add)
        loop = dict(loop_outer=size, loop_inner=1, dst_factor_outer=1, src_factor_outer=1)
        for position, (uops, op, operand) in enumerate(steps):
            first, final = position == 0, position == len(steps) - 1
            begin = slot * width + uops[0]
            if isinstance(operand, tuple):  # ("tile", product shift)
                fields = dict(imm=operand[1], **{**loop, "src_factor_outer": 0})
            else:
                fields = dict(use_imm=isinstance(operand, int),
                              imm=operand if isinstance(operand, int) else 0,
                              src_inp=operand == "inp", **loop)
            builder.emit(Alu(alu_op=op, uop_begin=begin, uop_end=slot * width + uops[1],
                             pop_prev=first, pop_next=first and reuse,
                             push_prev=final and again, push_next=final, **fields))
        builder.emit(Store(buffer=Buffer.OUT, sram_base=base, dram_base=y.tile(start, 0),
                           y_size=1, x_size=size, x_stride=size, pop_prev=True,
                           push_prev=again or last))
    builder.finish(pop_next=True)
    return builder.build()


def alu_iterations_per_tile(add: QuantizedAdd | QuantizedMul) -> tuple[int, int]:
    """(ALU iterations over each output tile, ALU instructions per chunk of tiles) of
    :func:`add_program`: every pass of :func:`_alu_steps` runs once per tile and
    micro-op of its range (the multiplier tiles' own set-up, once a program, not
    counted)."""
    steps = _alu_steps(add)
    return sum(end - begin for (begin, end), _, _ in steps), len(steps)


def _alu_steps(add: QuantizedAdd | QuantizedMul
               ) -> list[tuple[tuple[int, int], AluOp, int | str | tuple]]:
    """The ALU passes of one chunk: (micro-op range within the slot's, op, operand: an
    immediate, "inp", "acc" or ("tile", product shift)). Micro-ops 0 and 1 address a's
    and b's accumulators (and input tiles), micro-op 2 adds b's accumulators into a's,
    micro-ops from 3 multiply an operand by its multiplier tile."""
    both, first, second, combine = (0, 2), (0, 1), (1, 2), (2, 3)
    tiled = [operand for operand, _ in _tile_multipliers(add)]

    def scale(operand: int, uops, multiplier: int, product_shift: int):
        if not product_shift:
            return (uops, AluOp.MUL, multiplier)
        at = 3 + tiled.index(operand)
        return ((at, at + 1), AluOp.MUL, ("tile", product_shift))

    steps: list[tuple[tuple[int, int], AluOp, int | str]] = [
        (both, AluOp.MUL, 0), (both, AluOp.ADD, "inp")]
    if add.zero_a == add.zero_b:
        steps += [(both, AluOp.ADD, -add.zero_a)] if add.zero_a else []
    else:
        steps += [(uops, AluOp.ADD, -zero) for uops, zero in
                  ((first, add.zero_a), (second, add.zero_b)) if zero]
    if isinstance(add, QuantizedMul):
        # X *= Y (|X * Y| <= 255 * 255), then X = (X * M) >> k from the multiplier tile
        steps += [(combine, AluOp.MUL, "acc"), scale(0, first, add.multiplier,
                                                    add.product_shift)]
    else:
        steps += [scale(0, first, add.multiplier_a, add.product_shift_a),
                  scale(1, second, add.multiplier_b, add.product_shift_b),
                  (combine, AluOp.ADD, "acc")]
    if add.shift > _ROUNDING_BITS + 1:
        # (X + 2**(s-1)) >> s == ((X >> (s-15)) + 2**14) >> 15 (2**(s-1) is a multiple of
        # 2**(s-15)): the rounding constant stays a 16-bit immediate for any shift
        low = add.shift - _ROUNDING_BITS - 1
        steps += [(first, AluOp.SHR, low), (first, AluOp.ADD, 1 << _ROUNDING_BITS),
                  (first, AluOp.SHR, _ROUNDING_BITS + 1)]
    elif add.shift:
        steps += [(first, AluOp.ADD, 1 << (add.shift - 1)), (first, AluOp.SHR, add.shift)]
    if add.zero_point:
        steps.append((first, AluOp.ADD, add.zero_point))
    # the STORE narrows by truncation: clamp to int8 even without an activation
    steps += [(first, AluOp.MAX, max(add.qmin, -128)), (first, AluOp.MIN, min(add.qmax, 127))]
    return steps
