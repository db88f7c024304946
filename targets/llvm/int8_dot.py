"""The CPU's 8-bit dot product: ``acc + sum of four byte products per int32 lane``.

TIR names it with one call (:data:`DOT4_CALL`),
``int32xL = call(acc[0], a[0], b[0], bytes of a, bytes of b)``, each operand a scalar
load of its first element, which stands for its address (as an accelerator intrinsic's
region does):

* ``acc``: ``L`` consecutive int32 accumulators;
* ``a``, ``b``: ``4L`` consecutive bytes
  (lane ``l`` reads bytes ``4l .. 4l+3``), or 4, the same four bytes for every lane (a
  broadcast operand: a weight multiplying every output pixel of a vector); the counts
  say which;
* lane ``l`` of the result: ``acc[l] + sum_j a[4l+j] * b[4l+j]`` in int32, exactly.

With int16 operands the group is two elements (``2L`` or 2 of each; the same four bytes
per lane), each lane ``acc[l] + a[2l] * b[2l] + a[2l+1] * b[2l+1]``: a depthwise
convolution's pair of taps (:mod:`.schedules.int8_depthwise`).

:func:`emit_dot4` lowers it to the CPU description's instruction where it has one and
otherwise to an exact alternative:

* AVX-512 VNNI ``vpdpbusd`` (uint8 ``a`` x int8 ``b``, 512, 256 or 128 bits; 256 and 128
  bits need AVX-512VL, or AVX-VNNI, which LLVM emits with the VEX encoding);
* AArch64 ``sdot`` / ``udot`` (``+dotprod``: int8 x int8, uint8 x uint8, 128 bits);
* ``vpmaddubsw``/``pmaddubsw`` (AVX-512BW, AVX2, SSSE3; uint8 ``a`` x int8 ``b``) on
  the data split in two, ``a = 128 * hi + lo`` with ``lo = a & 127`` and ``hi = a >> 7``
  (0 or 1): each adds two byte products in int16 with saturation, which ``a * b``
  itself could reach (255 * -128 * 2) but ``lo * b`` (at most 127 * 128 * 2 = 32512
  in magnitude) and ``hi * b`` never do; then ``vpmaddwd`` adds each lane's two int16
  sums into int32, by 1 and by 128: exact, no shuffle, and the split is made once per
  data vector, which a register tile multiplies by several weights (splitting the
  weight instead costs a byte shift, four instructions, per broadcast weight).
  Kernel against ``pmaddwd`` on operands widened to int16 (below): AVX2 0.66-0.92x, AVX-512BW
  0.80-1.02x over four runs at load 8-15. Only the kernels of one-pixel outputs
  (output channels as lanes, each weight read once) take it now: the others' weights
  are widened when packed (next);
* ``vpmaddwd``/``pmaddwd`` (AVX-512BW, AVX2, SSE2) by int16 weights, where the
  convolution widened its int8 weights once, when it packed them (``b`` four int16,
  broadcast, or ``4L`` for vectors of output channels, each lane's first two weights
  then each lane's last two: :meth:`Dot4Emitter.emit_widened_lanes`;
  :func:`.schedules.int8_conv.weight_dtype`, on the CPUs whose byte product
  would be the split ``vpmaddubsw``): each group's first two data bytes, moved into
  int16 lanes by one byte shuffle, times its first two weights (one broadcast 32-bit
  load), and its last two by its last two; two adds. Exact (a pair of byte products
  fits int32), and two multiplies a group where the split form takes four: the data's
  shuffles are shared by a tile's weights, and the weights need no instruction but
  their loads (:meth:`Dot4Emitter.emit_widened_weight`);
* ``vpmaddwd``/``pmaddwd`` (AVX-512BW, AVX2, SSE2) on operands widened to int16, then
  adjacent int32 pairs added: exact, since a byte product and the sum of two fit in int32
  (int8 x int8, or uint8 x uint8);
* elsewhere: widened to int32, multiplied, four lanes added (LLVM picks the instructions).

and int16 pairs to ``vpdpwssd`` (AVX-512 VNNI, AVX-VNNI), else ``vpmaddwd``/``pmaddwd``
as they are and one add (exact: the pair sum of two int16 products fits in int32 but for
``-32768 * -32768 * 2``, which the operands here, 9-bit data and 8-bit weights, never
reach), else the widened form.

The wrap-around of int32 accumulation is the same in every form (two's complement adds).
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from heterocc.sdk import CompileError
from heterocc.tir import expr as tx

from .llvm_types import element_size, storage_type

#: the TIR call the CPU's codegen lowers to its dot-product instruction
DOT4_CALL = "cpu.dot4"

#: bytes one dot-product lane adds (the instruction's group: a convolution's input
#: channels, or a depthwise kernel row's taps)
GROUP = 4

#: ``pmaddwd`` by the int32 lanes it gives
PMADDWD = {16: "llvm.x86.avx512.pmaddw.d.512", 8: "llvm.x86.avx2.pmadd.wd",
           4: "llvm.x86.sse2.pmadd.wd"}

I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)


def _vector(element: ir.Type, lanes: int) -> ir.VectorType:
    return ir.VectorType(element, lanes)


def _mask(indices) -> ir.Constant:
    return ir.Constant(_vector(I32, len(indices)), list(indices))


def dot4_instruction(features: frozenset[str], arch: str, lanes: int, a_unsigned: bool,
                     b_unsigned: bool, element_bits: int = 8) -> str:
    """Which instruction :func:`emit_dot4` uses for ``lanes`` int32 results: ``vpdpbusd``,
    ``sdot``, ``udot``, ``pmaddwd`` or ``generic``; with int16 operands
    (``element_bits`` 16, signed) ``vpdpwssd``, ``pmaddwd`` or ``generic``."""
    if element_bits == 16:
        if arch == "x86_64" and not (a_unsigned or b_unsigned):
            if _vnni_width(features, lanes):
                return "vpdpwssd"
            if _pmaddwd_width(features, lanes):
                return "pmaddwd"
        return "generic"
    if arch == "x86_64" and a_unsigned and not b_unsigned and _vnni_width(features, lanes):
        return "vpdpbusd"
    if arch == "x86_64" and a_unsigned and not b_unsigned and _pmaddubsw_width(features,
                                                                               lanes):
        return "pmaddubsw"
    if arch == "aarch64" and "dotprod" in features and lanes % 4 == 0 \
            and a_unsigned == b_unsigned:
        return "udot" if a_unsigned else "sdot"
    if arch == "x86_64" and _pmaddwd_width(features, 2 * lanes):
        return "pmaddwd"
    return "generic"


def _vnni_width(features: frozenset[str], lanes: int) -> bool:
    """Whether the CPU has the VNNI instructions (``vpdpbusd``, ``vpdpwssd``) for
    ``lanes`` int32 results: 512 bits with AVX-512 VNNI, 256 or 128 with AVX-VNNI or
    AVX-512 VNNI and VL."""
    if lanes == 16:
        return "avx512vnni" in features
    return lanes in (4, 8) and ("avxvnni" in features
                                or {"avx512vnni", "avx512vl"} <= features)


def _pmaddubsw_width(features: frozenset[str], lanes: int) -> int:
    """The widest ``pmaddubsw`` (int32 lanes of four bytes) dividing ``lanes`` that
    the CPU has, with the ``pmaddwd`` of the same width."""
    for width, feature in ((16, "avx512bw"), (8, "avx2"), (4, "ssse3")):
        if feature in features and "sse2" in features and lanes % width == 0:
            return width
    return 0


def _pmaddwd_width(features: frozenset[str], pairs: int) -> int:
    """The widest ``pmaddwd`` (int32 lanes) dividing ``pairs`` (the pair sums to make:
    two per lane of bytes, one per lane of int16 pairs) that the CPU has."""
    for width, feature in ((16, "avx512bw"), (8, "avx2"), (4, "sse2")):
        if feature in features and pairs % width == 0:
            return width
    return 0


class Dot4Emitter:
    """Emits :data:`DOT4_CALL` into ``builder`` for a CPU's ``features`` and ``arch``;
    ``function(name, ret, args)`` declares an intrinsic in the module."""

    def __init__(self, builder: ir.IRBuilder, function, features: frozenset[str], arch: str):
        self.builder = builder
        self.function = function
        self.features = features
        self.arch = arch

    def emit(self, acc: ir.Value, a: ir.Value, b: ir.Value, a_unsigned: bool,
             b_unsigned: bool) -> ir.Value:
        lanes = acc.type.count if isinstance(acc.type, ir.VectorType) else 1
        element = a.type.element if isinstance(a.type, ir.VectorType) else a.type
        bits = element.width
        group = 32 // bits  # elements per int32 lane: four bytes or two int16
        if bits not in (8, 16) or _element_bits(b) != bits:
            raise CompileError(f"{DOT4_CALL}: operands of {bits} and {_element_bits(b)} bits; it "
                               "takes two byte or two int16 operands")
        a, b = self._group(a, lanes, group, "a"), self._group(b, lanes, group, "b")
        kind = dot4_instruction(self.features, self.arch, lanes, a_unsigned, b_unsigned,
                                bits)
        if kind in ("vpdpbusd", "vpdpwssd"):
            return self._vnni(kind, acc, a, b, lanes)
        if kind in ("sdot", "udot"):
            return self._neon_dot(kind, acc, a, b, lanes)
        if kind == "pmaddubsw":
            return self._pmaddubsw(acc, a, b, lanes)
        if kind == "pmaddwd" and bits == 16:
            return self._pmaddwd_pairs(acc, a, b, lanes)
        if kind == "pmaddwd":
            return self._pmaddwd(acc, a, b, lanes, a_unsigned, b_unsigned)
        return self._generic(acc, a, b, lanes, a_unsigned, b_unsigned, group)

    # ------------------------------------------------------------------ operands

    def _group(self, value: ir.Value, lanes: int, group: int, name: str) -> ir.Value:
        """``value`` as ``group * L`` elements: a one-group operand (four bytes or two
        int16, one int32 word) repeated for every lane."""
        count = value.type.count if isinstance(value.type, ir.VectorType) else 1
        if count == group * lanes:
            return value
        if count != group:
            raise CompileError(f"{DOT4_CALL}: operand {name} has {count} elements; it needs "
                               f"{group * lanes} ({group} per int32 lane) or {group} "
                               "(broadcast)")
        return self.builder.bitcast(self._splat(self.builder.bitcast(value, I32), lanes),
                                    _vector(value.type.element, group * lanes))

    def _splat(self, word: ir.Value, lanes: int) -> ir.Value:
        """The int32 ``word`` in every lane of ``<lanes x i32>`` (one broadcast)."""
        vector = self.builder.insert_element(ir.Constant(_vector(I32, lanes), ir.Undefined),
                                             word, ir.Constant(I32, 0))
        return self.builder.shuffle_vector(vector, ir.Constant(vector.type, ir.Undefined),
                                           _mask([0] * lanes))

    # ------------------------------------------------------------------ lowerings

    def _vnni(self, kind: str, acc, a, b, lanes: int) -> ir.Value:
        ty = _vector(I32, lanes)
        name = f"llvm.x86.avx512.{kind}.{lanes * 32}"
        fn = self.function(name, ty, [ty, ty, ty])
        return self.builder.call(fn, [acc, self.builder.bitcast(a, ty),
                                      self.builder.bitcast(b, ty)])

    def _neon_dot(self, kind: str, acc, a, b, lanes: int) -> ir.Value:
        quad, bytes_ = _vector(I32, 4), _vector(I8, 16)
        fn = self.function(f"llvm.aarch64.neon.{kind}.v4i32.v16i8", quad,
                           [quad, bytes_, bytes_])
        pieces = []
        for start in range(0, lanes, 4):
            part = [self._slice(v, 4 * start, 16) for v in (a, b)]
            pieces.append(self.builder.call(fn, [self._slice(acc, start, 4), *part]))
        return self._concat(pieces)

    def _pmaddwd(self, acc, a, b, lanes: int, a_unsigned: bool, b_unsigned: bool):
        width = _pmaddwd_width(self.features, 2 * lanes)
        fn = self._pmaddwd_function(width)
        wide_a = self._extend(a, I16, a_unsigned)
        wide_b = self._extend(b, I16, b_unsigned)
        pairs = [self.builder.call(fn, [self._slice(wide_a, start, 2 * width),
                                        self._slice(wide_b, start, 2 * width)])
                 for start in range(0, 4 * lanes, 2 * width)]
        pairs = self._concat(pairs)  # 2L int32: the sums of adjacent byte products
        return self._add_groups(acc, pairs, lanes, 2)

    def _pmaddubsw(self, acc, a, b, lanes: int):
        """uint8 ``a`` x int8 ``b``: ``pmaddubsw`` of each half of the split data (see
        the module's docstring) by ``b``, ``pmaddwd`` by 1 and by 128, two adds."""
        width = _pmaddubsw_width(self.features, lanes)
        bytes_, words = _vector(I8, 4 * width), _vector(I16, 2 * width)
        names = {16: "llvm.x86.avx512.pmaddubs.w.512", 8: "llvm.x86.avx2.pmadd.ub.sw",
                 4: "llvm.x86.ssse3.pmadd.ub.sw.128"}
        bytes_fn = self.function(names[width], words, [bytes_, bytes_])
        words_fn = self._pmaddwd_function(width)
        low = self.builder.and_(a, ir.Constant(a.type, [127] * a.type.count))
        high = self.builder.lshr(a, ir.Constant(a.type, [7] * a.type.count))
        ones, scale_high = (ir.Constant(words, [k] * (2 * width)) for k in (1, 128))
        pieces = []
        for start in range(0, 4 * lanes, 4 * width):
            weight = self._slice(b, start, 4 * width)
            total = self._slice(acc, start // 4, width)
            for half, scale in ((low, ones), (high, scale_high)):
                pairs = self.builder.call(bytes_fn, [self._slice(half, start, 4 * width),
                                                     weight])
                total = self.builder.add(total, self.builder.call(words_fn, [pairs, scale]))
            pieces.append(total)
        return self._concat(pieces)

    def emit_widened_weight(self, acc: ir.Value, a: ir.Value, words: Sequence[ir.Value],
                            a_unsigned: bool) -> ir.Value:
        """``acc`` plus the dot products of uint8 ``a`` (``4L`` bytes) by one group of
        four int8 weights held as int16, ``words`` its two 32-bit words (weights 0, 1
        and 2, 3), each broadcast: ``pmaddwd`` of each group's data bytes 0, 1 (one byte
        shuffle into int16 lanes) by the first word and of bytes 2, 3 by the second."""
        lanes = acc.type.count
        if len(words) != 2:
            raise CompileError(f"{DOT4_CALL}: a broadcast group of int16 weights is two "
                               "32-bit words")
        halves = [self.builder.bitcast(self._splat(word, lanes), _vector(I16, 2 * lanes))
                  for word in words]
        return self._widened_sum(acc, a, halves, a_unsigned)

    def emit_widened_lanes(self, acc: ir.Value, a: ir.Value, b: ir.Value,
                           a_unsigned: bool) -> ir.Value:
        """``acc`` plus the dot products of one group of four uint8 ``a`` (broadcast to
        every lane) by ``L`` output channels' int16 weights ``b`` (``4L``: each lane's
        weights 0, 1, then each lane's 2, 3, as the channels' vectors are widened when
        packed): ``pmaddwd`` of the data's bytes 0, 1 (in int16 lanes) by the first half
        and of bytes 2, 3 by the second, two adds."""
        lanes = acc.type.count
        if b.type.count != 4 * lanes:
            raise CompileError(f"{DOT4_CALL}: {lanes} lanes of int16 weights are "
                               f"{4 * lanes} of them, not {b.type.count}")
        halves = [self._slice(b, half * 2 * lanes, 2 * lanes) for half in (0, 1)]
        return self._widened_sum(acc, self._group(a, lanes, 4, "a"), halves, a_unsigned)

    def _widened_sum(self, acc: ir.Value, a: ir.Value, halves: Sequence[ir.Value],
                     a_unsigned: bool) -> ir.Value:
        """``acc`` plus ``pmaddwd`` of each group's data bytes 0, 1 (``a``: ``4L``
        unsigned bytes, moved into int16 lanes by one byte shuffle) by ``halves[0]``
        and of bytes 2, 3 by ``halves[1]`` (each ``2L`` int16)."""
        lanes = acc.type.count
        width = _pmaddwd_width(self.features, lanes) if self.arch == "x86_64" else 0
        if not width or not a_unsigned:
            raise CompileError(f"{DOT4_CALL}: int16 weights take uint8 data on x86's "
                               "pmaddwd")
        fn = self._pmaddwd_function(width)
        data = [self._data_pairs(a, half, lanes) for half in (0, 1)]
        pieces = []
        for start in range(0, 2 * lanes, 2 * width):
            total = self._slice(acc, start // 2, width)
            for half in (0, 1):
                total = self.builder.add(total, self.builder.call(
                    fn, [self._slice(data[half], start, 2 * width),
                         self._slice(halves[half], start, 2 * width)]))
            pieces.append(total)
        return self._concat(pieces)

    def _data_pairs(self, value: ir.Value, half: int, lanes: int) -> ir.Value:
        """Bytes ``2 half`` and ``2 half + 1`` of each group of four of ``value``
        (``4L`` unsigned bytes), zero-extended: ``2L`` int16, by one byte shuffle."""
        count = value.type.count
        mask = [source for lane in range(lanes) for j in (0, 1)
                for source in (4 * lane + 2 * half + j, count)]  # the byte, then a zero
        zero = ir.Constant(value.type, [0] * count)
        return self.builder.bitcast(self.builder.shuffle_vector(value, zero, _mask(mask)),
                                    _vector(I16, 2 * lanes))

    def _pmaddwd_pairs(self, acc, a, b, lanes: int):
        """int16 pairs: ``pmaddwd`` on the operands as they are, one add."""
        width = _pmaddwd_width(self.features, lanes)
        fn = self._pmaddwd_function(width)
        pairs = [self.builder.call(fn, [self._slice(a, start, 2 * width),
                                        self._slice(b, start, 2 * width)])
                 for start in range(0, 2 * lanes, 2 * width)]
        return self.builder.add(acc, self._concat(pairs))

    def _generic(self, acc, a, b, lanes: int, a_unsigned: bool, b_unsigned: bool,
                 group: int = 4):
        products = self.builder.mul(self._extend(a, I32, a_unsigned),
                                    self._extend(b, I32, b_unsigned))
        return self._add_groups(acc, products, lanes, group)

    # ------------------------------------------------------------------ helpers

    def _pmaddwd_function(self, width: int):
        """``pmaddwd`` giving ``width`` int32 lanes (16: AVX-512BW, 8: AVX2, 4: SSE2)."""
        halves, ints = _vector(I16, 2 * width), _vector(I32, width)
        return self.function(PMADDWD[width], ints, [halves, halves])

    def _extend(self, value, element: ir.Type, unsigned: bool) -> ir.Value:
        ty = _vector(element, value.type.count)
        return (self.builder.zext if unsigned else self.builder.sext)(value, ty)

    def _add_groups(self, acc, values, lanes: int, group: int) -> ir.Value:
        """``acc[l] + sum_j values[group * l + j]``."""
        total = acc
        undefined = ir.Constant(values.type, ir.Undefined)
        for j in range(group):
            part = self.builder.shuffle_vector(values, undefined,
                                               _mask([group * lane + j for lane in range(lanes)]))
            total = self.builder.add(total, part)
        return total

    def _slice(self, value, start: int, count: int) -> ir.Value:
        if value.type.count == count:
            return value
        return self.builder.shuffle_vector(value, ir.Constant(value.type, ir.Undefined),
                                           _mask(range(start, start + count)))

    def _concat(self, pieces: list[ir.Value]) -> ir.Value:
        return concat_vectors(self.builder, pieces)


def concat_vectors(builder: ir.IRBuilder, pieces: list[ir.Value]) -> ir.Value:
    """One vector of ``pieces`` (a power of two of vectors of one type) end to end, by
    shuffles of neighbouring pairs."""
    while len(pieces) > 1:
        count = pieces[0].type.count * 2
        pieces = [builder.shuffle_vector(low, high, _mask(range(count)))
                  for low, high in zip(pieces[::2], pieces[1::2])]
    return pieces[0]


def window_load_bytes(span: int) -> int:
    """The bytes the window form of :data:`DOT4_CALL` loads for a window of ``span``
    bytes where it gathers its quads by one byte shuffle of the whole vector: the span
    rounded up to a power of two (the buffer must hold them all)."""
    return 1 << (span - 1).bit_length()


#: bytes of one block of a byte shuffle that stays within 128-bit blocks (x86's
#: ``pshufb``): the window of each block's four lanes is loaded into it
SHUFFLE_BLOCK = 16


def window_blocks(features: frozenset[str], arch: str, lanes: int) -> bool:
    """Whether the window form of :data:`DOT4_CALL` for ``lanes`` int32 results gathers
    its quads block by block (x86 without AVX-512 VBMI's whole-vector ``vpermb``: each
    128-bit block's four lanes from a load of its own, by ``pshufb``) rather than from
    one load of the whole window by one shuffle (VBMI, NEON's ``tbl``)."""
    return arch == "x86_64" and "avx512vbmi" not in features and lanes > 4


def window_read_bytes(span: int, lanes: int, stride: int, features: frozenset[str],
                      arch: str) -> int:
    """The bytes from a window's first that its :data:`DOT4_CALL` reads (the buffer must
    hold them), for a window of ``span`` bytes over ``lanes`` pixels ``stride`` apart:
    :func:`window_load_bytes` of the span, or where it loads block by block
    (:func:`window_blocks`) up to the end of the last block's load."""
    if window_blocks(features, arch, lanes):
        return GROUP * stride * (lanes // GROUP - 1) + SHUFFLE_BLOCK
    return window_load_bytes(span)


def _window_quads(builder: ir.IRBuilder, emitter, operand: tx.BufferLoad, span: int,
                  lanes: int, stride: int, dilation: int) -> ir.Value:
    """Lane ``l``'s four bytes ``operand[stride * l + dilation * j]`` of a window
    (``4L`` bytes): one load of the span and one shuffle, or where the CPU shuffles bytes
    within 128-bit blocks only (:func:`window_blocks`), a 16-byte load per block of four
    lanes (its window starting at lane ``4 b``'s first byte) and a shuffle within each
    block, which LLVM emits as one ``pshufb``."""
    codegen = emitter.codegen
    quad = [dilation * j for j in range(GROUP)]
    if not window_blocks(codegen.features, codegen.arch, lanes):
        loaded = _load_run(emitter, operand, window_load_bytes(span))
        return builder.shuffle_vector(loaded, ir.Constant(loaded.type, ir.Undefined), _mask(
            [stride * lane + j for lane in range(lanes) for j in quad]))
    blocks = []
    (index,) = operand.indices
    start = emitter.expr(index)
    for block in range(lanes // GROUP):
        offset = ir.Constant(start.type, GROUP * stride * block)
        address = emitter._address(operand.buffer, builder.add(start, offset))
        blocks.append(builder.load(address, typ=_vector(I8, SHUFFLE_BLOCK), align=1))
    loaded = concat_vectors(builder, blocks)
    return builder.shuffle_vector(loaded, ir.Constant(loaded.type, ir.Undefined), _mask(
        [SHUFFLE_BLOCK * (lane // GROUP) + stride * (lane % GROUP) + j
         for lane in range(lanes) for j in quad]))


def _element_bits(value: ir.Value) -> int:
    """The bits of ``value``'s elements."""
    return (value.type.element if isinstance(value.type, ir.VectorType) else value.type).width


def _load_run(emitter, operand: tx.BufferLoad, count: int) -> ir.Value:
    """A vector of ``count`` elements of ``operand``'s buffer, loaded from the address of
    ``operand`` (a scalar load of the run's first element) in the function ``emitter``
    emits."""
    (index,) = operand.indices
    return emitter.builder.load(emitter._address(operand.buffer, emitter.expr(index)),
                                typ=ir.VectorType(storage_type(operand.buffer.dtype), count),
                                align=element_size(operand.buffer.dtype))


def emit_dot4_call(emitter, node: tx.Call) -> ir.Value:
    """:data:`DOT4_CALL` in the function ``emitter`` (the codegen's ``FunctionEmitter``)
    emits: its operands read from the addresses of their first elements (``lanes``
    int32 accumulators, then the two byte operands). The window form (two more
    arguments, ``stride`` and ``dilation``) reads ``a`` as a window: lane ``l``'s four
    bytes are ``a[stride * l + dilation * j]``, gathered by byte shuffles
    (:func:`_window_quads`; the buffer must hold :func:`window_read_bytes`). A group of
    int16 weights (four, broadcast: widened when packed) multiplies either form's bytes
    by :meth:`Dot4Emitter.emit_widened_weight`."""
    operands, counts = node.args[:3], node.args[3:]
    if len(counts) not in (2, 4) or not all(
            isinstance(o, tx.BufferLoad) and tx.lanes_of(o.dtype) == 1 for o in operands):
        raise CompileError(f"{DOT4_CALL} takes (acc[0], a[0], b[0], bytes of a, bytes of b"
                           "[, window stride, window dilation]): scalar loads of each "
                           "operand's first element and two (or four) counts")
    lanes = tx.lanes_of(node.dtype)
    window = tuple(c.value for c in counts[2:])
    sizes = [lanes, *(c.value for c in counts[:2])]
    builder = emitter.builder
    dot = Dot4Emitter(builder, emitter._function, emitter.codegen.features,
                      emitter.codegen.arch)
    acc = _load_run(emitter, operands[0], lanes)
    a = _window_quads(builder, emitter, operands[1], sizes[1], lanes, *window) if window \
        else _load_run(emitter, operands[1], sizes[1])
    data_type, weight_type = (o.buffer.dtype for o in operands[1:])
    if weight_type == "int16" and data_type in ("uint8", "int8"):
        # bytes by weights widened when packed: a broadcast group, or vectors of
        # output channels by one group of data bytes
        unsigned = tx.is_unsigned(operands[1].buffer.dtype)
        if sizes[2] == GROUP:
            return dot.emit_widened_weight(acc, a, _words(emitter, operands[2]), unsigned)
        if sizes[1] == GROUP and sizes[2] == GROUP * lanes:
            return dot.emit_widened_lanes(acc, a, _load_run(emitter, operands[2], sizes[2]),
                                          unsigned)
        raise CompileError(f"{DOT4_CALL}: int16 weights come as one group (four, "
                           "broadcast) or as a vector of output channels by one group of "
                           "data bytes")
    b = _load_run(emitter, operands[2], sizes[2])
    return dot.emit(acc, a, b, *(tx.is_unsigned(o.buffer.dtype) for o in operands[1:]))


def _words(emitter, operand: tx.BufferLoad) -> tuple[ir.Value, ir.Value]:
    """The two 32-bit words at ``operand``'s address (four int16), loaded one by one:
    each then broadcast is one broadcast load, where the four loaded as one 64-bit value
    went through a general register and were split there (five instructions a group)."""
    (index,) = operand.indices
    address = emitter._address(operand.buffer, emitter.expr(index))
    return tuple(emitter.builder.load(emitter.builder.gep(address, [ir.Constant(I32, half)],
                                                          source_etype=I32),
                                      typ=I32, align=element_size(operand.buffer.dtype))
                 for half in (0, 1))


#: the TIR call the CPU's codegen lowers to a byte interleave (a transpose of ``G`` runs
#: of ``N`` elements into ``N`` groups of ``G``): the data packing of the dot-product
#: convolutions (:func:`.schedules.int8_conv.pack_int8_flat`)
INTERLEAVE_CALL = "cpu.interleave"


def interleave_mask(groups: int, count: int) -> list[int]:
    """The shuffle mask interleaving ``groups`` concatenated runs of ``count`` elements:
    element ``g`` of group ``p`` (result lane ``groups * p + g``) is run ``g``'s element
    ``p``."""
    return [g * count + p for p in range(count) for g in range(groups)]


def emit_interleave_call(emitter, node: tx.Call) -> ir.Value:
    """:data:`INTERLEAVE_CALL` ``(src_0[0], ..., src_G-1[0], N)`` in the function
    ``emitter`` (the codegen's ``FunctionEmitter``) emits: ``G`` vectors of ``N``
    elements loaded from the addresses of the runs' first elements (scalar loads), and
    one shuffle interleaving them, ``result[G * p + g] = src_g[p]``. Stored whole, it is
    the pattern LLVM's interleaved-access lowering turns into unpack instructions (x86)
    or one ``st4`` (AArch64) rather than ``G * N`` byte moves."""
    *operands, count = node.args
    if not isinstance(count, tx.IntImm) or len(operands) < 2 or not all(
            isinstance(o, tx.BufferLoad) and tx.lanes_of(o.dtype) == 1 for o in operands):
        raise CompileError(f"{INTERLEAVE_CALL} takes (src_0[0], ..., src_G-1[0], N): scalar "
                           "loads of each run's first element (two or more) and the run's "
                           "length")
    groups, length = len(operands), count.value
    if tx.lanes_of(node.dtype) != groups * length:
        raise CompileError(f"{INTERLEAVE_CALL}: {groups} runs of {length} make "
                           f"{groups * length} lanes, not {tx.lanes_of(node.dtype)}")
    builder = emitter.builder
    runs = [_load_run(emitter, operand, length) for operand in operands]
    while len(runs) & (len(runs) - 1):  # a power of two of runs for the pairwise concat
        runs.append(ir.Constant(runs[0].type, ir.Undefined))
    whole = concat_vectors(builder, runs)
    return builder.shuffle_vector(whole, ir.Constant(whole.type, ir.Undefined),
                                  _mask(interleave_mask(groups, length)))
