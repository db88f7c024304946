"""A requantization's exact product: ``int32((int64(a) * int64(m)) >> s)`` on vectors.

``Requantize`` with a ``product_shift`` (:func:`heterocc.ops.qnn.requantize`) multiplies
each int32 accumulator by an int32 multiplier exactly, in 64 bits, and keeps the 32 bits
above the shift. Written as it reads (both operands widened to int64 lanes, multiplied,
shifted, narrowed), a vector of ``L`` int32 lanes becomes two vectors of ``L/2`` int64
lanes on x86: each operand split and widened (four extracts and extensions), two 64-bit
products, two shifts, two narrowings and a concatenation, about 13 instructions.

x86's ``pmuldq`` (SSE4.1, AVX2, AVX-512F) multiplies the even int32 lanes of two vectors
into int64 products in place, so :func:`emit_shifted_product` takes the even lanes'
products from the operands as they are and the odd lanes' from the operands with their
odd lanes moved down by one shuffle (``pshufd``; an int64 arithmetic shift by 32 has no
AVX2 or SSE instruction, and LLVM emulated those products from unsigned ones, ten
instructions each: MobileNetV2 int8 on Haswell code took 6.14-6.21 ms, now 5.31-5.63),
and puts the 32 wanted bits of each product where its int32 lane lies: the even
products shifted right by ``s`` (the low half), the odd ones moved so that bits
``[s, s + 32)`` land in the high half (left by ``32 - s``, or right, arithmetic, by
``s - 32``), then one blend. About 7 instructions, the same bits: each 64-bit product is
exact, and bits ``[s, s + 32)`` of it (sign-extended past bit 63) are what the narrowing
of ``product >> s`` keeps.

Elsewhere the widened form stays (AArch64's ``smull``/``smull2`` widen and multiply in
one instruction: the even/odd form would take twice as many there).
"""

from __future__ import annotations

from llvmlite import ir

from heterocc.tir import expr as tx

I32 = ir.IntType(32)
I64 = ir.IntType(64)


def shifted_product_operands(node: tx.Cast) -> tuple[tx.Expr, tx.Expr, int] | None:
    """``(a, m, s)`` where ``node`` is ``int32((int64(a) * int64(m)) >> s)`` on vectors,
    ``a`` and ``m`` int32 and ``s`` a constant in [0, 63]; otherwise None."""
    lanes = tx.lanes_of(node.dtype)
    if lanes < 2 or tx.scalar_dtype(node.dtype) != "int32":
        return None
    shifted = node.value
    if not (isinstance(shifted, tx.Binary) and shifted.op == "shr"
            and tx.scalar_dtype(shifted.dtype) == "int64"):
        return None
    amount = shifted.b.value if isinstance(shifted.b, tx.Broadcast) else shifted.b
    product = shifted.a
    if not (isinstance(amount, tx.IntImm) and 0 <= amount.value <= 63
            and isinstance(product, tx.Binary) and product.op == "mul"):
        return None
    operands = [_widened_int32(side) for side in (product.a, product.b)]
    if operands[0] is None or operands[1] is None:
        return None
    return operands[0], operands[1], int(amount.value)


def _widened_int32(side: tx.Expr) -> tx.Expr | None:
    """The int32 vector ``side`` widens to int64: ``int64(x)``, ``broadcast(int64(s))``
    (the vectorizer's form of a widened scalar: ``broadcast(s)``) or the broadcast of an
    int64 immediate within int32; else None."""
    if isinstance(side, tx.Broadcast):
        inner = _widened_int32(side.value)
        return None if inner is None else tx.Broadcast(inner, side.lanes)
    if isinstance(side, tx.Cast) and tx.scalar_dtype(side.value.dtype) == "int32":
        return side.value
    if isinstance(side, tx.IntImm) and -2 ** 31 <= side.value < 2 ** 31:
        return tx.IntImm(side.value, "int32")  # a multiplier folded into an immediate
    return None


def even_odd_products(features: frozenset[str], arch: str) -> bool:
    """Whether :func:`emit_shifted_product` applies: x86 with ``pmuldq`` (SSE4.1)."""
    return arch == "x86_64" and "sse4.1" in features


def emit_shifted_product(builder: ir.IRBuilder, a: ir.Value, m: ir.Value,
                         shift: int) -> ir.Value:
    """``int32((int64(a) * int64(m)) >> shift)`` lane by lane for ``<L x i32>`` ``a`` and
    ``m`` (``shift`` in [0, 63]), as even and odd ``pmuldq`` products and one
    blend (see the module's docstring)."""
    if shift == 0:
        return builder.mul(a, m)  # the low 32 bits of the product: int32's wrapping one
    lanes = a.type.count
    if lanes % 2:
        # one lane more (undefined, dropped after): a 7-pixel row's vector
        wider = ir.Constant(ir.VectorType(I32, lanes + 1), list(range(lanes + 1)))
        a, m = (builder.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), wider)
                for v in (a, m))
        product = emit_shifted_product(builder, a, m, shift)
        return builder.shuffle_vector(product, ir.Constant(product.type, ir.Undefined),
                                      ir.Constant(ir.VectorType(I32, lanes),
                                                  list(range(lanes))))
    half = ir.VectorType(I64, lanes // 2)

    def splat(value: int) -> ir.Constant:
        return ir.Constant(half, [value] * (lanes // 2))

    def low_half_signed(value: ir.Value) -> ir.Value:
        # sign-extended from bit 31 in place: the form LLVM selects as pmuldq's operand
        return builder.ashr(builder.shl(value, splat(32)), splat(32))

    def odd_lanes(value: ir.Value) -> ir.Value:
        # the odd int32 lanes moved down into the even ones (one pshufd): an arithmetic
        # shift of int64 lanes by 32 instead has no instruction on AVX2 (vpsraq is
        # AVX-512's), and LLVM then emulated each odd product in ten instructions
        odd_mask = ir.Constant(ir.VectorType(I32, lanes),
                               [lane | 1 for lane in range(lanes)])
        return builder.bitcast(builder.shuffle_vector(
            value, ir.Constant(value.type, ir.Undefined), odd_mask), half)

    wide_a, wide_m = builder.bitcast(a, half), builder.bitcast(m, half)
    even = builder.mul(low_half_signed(wide_a), low_half_signed(wide_m))
    odd = builder.mul(low_half_signed(odd_lanes(a)), low_half_signed(odd_lanes(m)))
    even = builder.ashr(even, splat(shift))  # bits [shift, shift + 32) in the low half
    if shift > 32:
        odd = builder.ashr(odd, splat(shift - 32))  # ... in the high half
    elif shift < 32:
        odd = builder.shl(odd, splat(32 - shift))
    words = ir.VectorType(I32, lanes)
    blend = ir.Constant(ir.VectorType(I32, lanes),
                        [lane if lane % 2 == 0 else lanes + lane for lane in range(lanes)])
    return builder.shuffle_vector(builder.bitcast(even, words), builder.bitcast(odd, words),
                                  blend)
