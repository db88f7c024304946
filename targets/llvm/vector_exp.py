"""exp of float32 vectors computed in registers (Cody-Waite reduction and Cephes' degree-5
polynomial), not by a call: a libmvec call per vector in a convolution's epilogue (a
Swish, x * sigmoid(x)) clobbers every vector register, so the tile's accumulators go to the
stack and back around each call, and libmvec hands every lane of |x| > 87.3 to scalar
expf. Inline, EfficientNet-B0's 16->96 1x1 convolution with its Swish at 112x112 took
0.98 ms against 1.16 with the call on AVX2, 0.72 against 0.95 on AVX-512 (0.35 with a
ReLU; one thread, load 7), and the whole model 0.93 of the time on AVX2.

exp(x) = 2^n * e^r with n = round(x / ln 2) and r = x - n ln 2 (|r| <= ln 2 / 2, ln 2 in
two parts so n ln 2 is exact), e^r by Cephes' expf polynomial (within 2 ulps of the
correctly rounded result), and 2^n applied as two powers of two built from their
exponent bits (each a normal float, so the product rounds once where the result is
denormal). The argument is clamped to [-104, 89] first: beyond, the result is 0 or
infinity all the same; a NaN stays NaN.
"""

from __future__ import annotations

from llvmlite import ir

from .int8_dot import concat_vectors
from .llvm_types import I32

#: where the argument is clamped: exp(-104) rounds to 0 and exp(89) overflows
EXP_ARGUMENT_RANGE = (-104.0, 89.0)
#: 1 / ln 2, and ln 2 in a high part with few significant bits (n * it is exact for any
#: n the range gives) and the low rest
LOG2_E = 1.44269504088896341
LN2_HIGH = 0.693359375
LN2_LOW = -2.12194440e-4
#: 1.5 * 2^23: adding it rounds a float of magnitude below 2^22 to an integer (to
#: nearest even), which its low mantissa bits then hold
ROUNDING_MAGIC = 12582912.0
#: Cephes' expf polynomial: e^r ~ 1 + r + r^2 * (P[0] r^5 + ... + P[5])
EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                  1.6666665459e-1, 5.0000001201e-1)
#: a float's exponent field: its shift and bias
_MANTISSA_BITS, _EXPONENT_BIAS = 23, 127


def emit_vector_exp(builder: ir.IRBuilder, x: ir.Value,
                    flags: tuple[str, ...] = ("contract",),
                    features: frozenset[str] = frozenset()) -> ir.Value:
    """exp of the float32 vector ``x`` (see the module's docstring). ``flags``: the
    fast-math flags of the arithmetic (contraction into FMA, which rounds once where a
    multiply and an add round twice); never reassociation, which would cancel the
    rounding to an integer. ``features``: the CPU's; with AVX-512 the power of two is
    applied by ``vscalefps`` (:func:`_scale_by_power_of_two`)."""
    count = x.type.count
    ints = ir.VectorType(I32, count)

    def splat(value: float) -> ir.Constant:
        return ir.Constant(x.type, [value] * count)

    def splat_int(value: int) -> ir.Constant:
        return ir.Constant(ints, [value] * count)

    low, high = EXP_ARGUMENT_RANGE
    # selects on ordered compares: a NaN lane compares false and passes through
    x = builder.select(builder.fcmp_ordered("<", x, splat(low)), splat(low), x)
    x = builder.select(builder.fcmp_ordered(">", x, splat(high)), splat(high), x)
    # contracted into multiply-adds (``flags``): one rounding each, never a regrouping,
    # so the magic constant still rounds x log2 e to an integer, and x - n ln2 is as
    # exact as two rounded steps or more (three instructions fewer per vector)
    shifted = builder.fadd(builder.fmul(x, splat(LOG2_E), flags=flags),
                           splat(ROUNDING_MAGIC), flags=flags)
    n = builder.fsub(shifted, splat(ROUNDING_MAGIC))
    n_int = builder.sub(builder.bitcast(shifted, ints),
                        builder.bitcast(splat(ROUNDING_MAGIC), ints))
    r = builder.fsub(builder.fsub(x, builder.fmul(n, splat(LN2_HIGH), flags=flags),
                                  flags=flags),
                     builder.fmul(n, splat(LN2_LOW), flags=flags), flags=flags)
    poly = splat(EXP_POLYNOMIAL[0])
    for coefficient in EXP_POLYNOMIAL[1:]:
        poly = builder.fadd(builder.fmul(poly, r, flags=flags), splat(coefficient),
                            flags=flags)
    square = builder.fmul(r, r, flags=flags)
    value = builder.fadd(builder.fadd(builder.fmul(poly, square, flags=flags), r,
                                      flags=flags), splat(1.0), flags=flags)

    scaled = _scale_by_power_of_two(builder, value, n, features)
    if scaled is not None:
        return scaled

    def power_of_two(exponent: ir.Value) -> ir.Value:
        biased = builder.add(exponent, splat_int(_EXPONENT_BIAS))
        return builder.bitcast(builder.shl(biased, splat_int(_MANTISSA_BITS)), x.type)

    half = builder.ashr(n_int, splat_int(1))
    rest = builder.sub(n_int, half)
    return builder.fmul(builder.fmul(value, power_of_two(half)), power_of_two(rest))


#: AVX-512's ``vscalefps`` (value * 2^floor(n), rounded once: a denormal or overflowing
#: result as the two powers of two give it) by vector width in lanes, and the feature
#: each needs; the 512-bit one takes a rounding operand (4: the current rounding mode)
_SCALEF = {16: ("llvm.x86.avx512.mask.scalef.ps.512", "avx512f"),
           8: ("llvm.x86.avx512.mask.scalef.ps.256", "avx512vl"),
           4: ("llvm.x86.avx512.mask.scalef.ps.128", "avx512vl")}


def _scale_by_power_of_two(builder: ir.IRBuilder, value: ir.Value, n: ir.Value,
                           features: frozenset[str]) -> ir.Value | None:
    """``value * 2^n`` (``n`` whole numbers as floats) by one ``vscalefps`` per register
    where the CPU has AVX-512 (a vector of a power of two registers in register-wide
    parts; other widths, such as 12 or 20 lanes, keep the powers of two),
    in place of the two powers of two built from exponent bits and their two
    multiplies (eight instructions); None elsewhere."""
    count = value.type.count
    # register-wide parts joined pairwise: a power of two of them (12 lanes would be
    # three parts of 4, which pairs cannot join into one vector)
    width = next((lanes for lanes, (_, needs) in _SCALEF.items()
                  if needs in features and count % lanes == 0
                  and (count // lanes) & (count // lanes - 1) == 0), None)
    if width is None or "avx512f" not in features:
        return None
    name, _ = _SCALEF[width]
    part_type = ir.VectorType(value.type.element, width)
    mask_type = ir.IntType(max(8, width))
    module = builder.module
    rounding = [ir.Constant(I32, 4)] if width == 16 else []
    function = module.globals.get(name) or ir.Function(module, ir.FunctionType(
        part_type, [part_type, part_type, part_type, mask_type] + [I32] * len(rounding)),
        name)
    all_lanes = ir.Constant(mask_type, -1)
    if count == width:
        return builder.call(function, [value, n, value, all_lanes, *rounding])
    parts = []
    for start in range(0, count, width):
        lanes = ir.Constant(ir.VectorType(I32, width), list(range(start, start + width)))
        part_value = builder.shuffle_vector(value, value, lanes)
        part_n = builder.shuffle_vector(n, n, lanes)
        parts.append(builder.call(function, [part_value, part_n, part_value, all_lanes,
                                             *rounding]))
    return concat_vectors(builder, parts)
