"""A vector of lookups in a 256-entry byte table (an int8 model's ``LookupTable``: a
requantization to another scale, an activation) done in registers: on AVX-512 VBMI two
two-table byte permutes (``vpermi2b``, 128 entries each) and a blend on the index's top
bit; on AArch64 four four-register table lookups (``tbl``, 64 entries each; an index
past a lookup's entries gives 0), or-ed together. Elsewhere (AVX2, SSE) the load stays
the gather LLVM makes of it, lane by lane.

The table is read as whole vectors each time it is used; the loads do not depend on
the loop, so LLVM keeps them in registers across it.
"""

from __future__ import annotations

from llvmlite import ir

from heterocc.sdk.graph import TABLE_ENTRIES, TABLE_OFFSET
from heterocc.tir import expr as tx

from .llvm_types import I8, I32


def byte_table_index(buffer: tx.Buffer, index: tx.Expr) -> tx.Expr | None:
    """The int8 vector ``x`` whose lookups ``buffer[index]`` reads, where ``buffer`` is a
    256-entry byte table and ``index`` is ``int32(x) + 128`` (``LookupTable``'s read);
    None for any other load."""
    if buffer.size != TABLE_ENTRIES or buffer.dtype not in ("int8", "uint8"):
        return None
    index = _unclamped(index)
    if not isinstance(index, tx.Binary) or index.op != "add":
        return None
    for cast, offset in ((index.a, index.b), (index.b, index.a)):
        if isinstance(cast, tx.Cast) and tx.scalar_dtype(cast.value.dtype) == "int8" \
                and isinstance(offset, tx.Broadcast) and isinstance(offset.value, tx.IntImm) \
                and offset.value.value == TABLE_OFFSET:
            return cast.value
    return None


def _unclamped(index: tx.Expr) -> tx.Expr:
    """``index`` without the clamp to [0, 255] and the widening the lowering may wrap
    around a table's index (they change nothing for ``int32(x) + 128``)."""
    while True:
        if isinstance(index, tx.Binary) and index.op in ("max", "min") and \
                isinstance(index.b, tx.Broadcast) and isinstance(index.b.value, tx.IntImm) \
                and index.b.value.value == (0 if index.op == "max" else TABLE_ENTRIES - 1):
            index = index.a
        elif isinstance(index, tx.Cast) and tx.scalar_dtype(index.value.dtype) in ("int32",
                                                                                   "int64"):
            index = index.value
        else:
            return index


def byte_table_lanes(features: frozenset[str], arch: str) -> int:
    """Bytes one table lookup of this CPU returns at once (0: no table instruction)."""
    if arch == "x86_64" and {"avx512vbmi", "avx512bw"} <= features:
        return 64
    if arch == "aarch64" and "neon" in features:
        return 16
    return 0


def emit_byte_table_lookup(builder: ir.IRBuilder, function_of, table: ir.Value,
                           x: ir.Value, lanes: int, width: int) -> ir.Value:
    """``table[x + 128]`` for the ``lanes`` int8 values of ``x`` (a vector), ``table`` a
    pointer to the 256 bytes, in pieces of ``width`` lanes (:func:`byte_table_lanes`).
    ``function_of(name, ret, args)`` declares an intrinsic."""
    vector = ir.VectorType(I8, width)
    # x + 128 as an unsigned byte: the top bit flipped
    flip = ir.Constant(ir.VectorType(I8, lanes), [TABLE_OFFSET] * lanes)
    index = builder.xor(x, flip)
    entries = [builder.load(builder.gep(table, [ir.Constant(I32, start)], inbounds=True,
                                        source_etype=I8), typ=vector, align=1)
               for start in range(0, TABLE_ENTRIES, width)]
    lookup = _vbmi_lookup if width == 64 else _tbl_lookup
    pieces = []
    for start in range(0, lanes, width):
        piece = _lanes(builder, index, start, width, lanes)
        pieces.append(lookup(builder, function_of, entries, piece, vector))
    return _joined(builder, pieces, width, lanes)


def _vbmi_lookup(builder, function_of, entries, index, vector):
    permute = function_of("llvm.x86.avx512.vpermi2var.qi.512", vector,
                          [vector, vector, vector])
    low = builder.call(permute, [entries[0], index, entries[1]])
    high = builder.call(permute, [entries[2], index, entries[3]])
    top_bit = builder.icmp_signed("<", index, ir.Constant(vector, [0] * vector.count))
    return builder.select(top_bit, high, low)


def _tbl_lookup(builder, function_of, entries, index, vector):
    tbl4 = function_of("llvm.aarch64.neon.tbl4.v16i8", vector, [vector] * 5)
    result = None
    for quarter in range(4):
        # the quarter's 64 entries indexed from 0; other indices wrap past 63: 0
        shifted = builder.sub(index, ir.Constant(vector, [64 * quarter] * vector.count))
        part = builder.call(tbl4, [*entries[4 * quarter:4 * quarter + 4], shifted])
        result = part if result is None else builder.or_(result, part)
    return result


def _lanes(builder, value, start: int, width: int, lanes: int):
    """Lanes ``[start, start + width)`` of ``value`` (``lanes`` of them), those past its
    end zero."""
    if start == 0 and width == lanes:
        return value
    zero = ir.Constant(value.type, None)
    picks = [start + k if start + k < lanes else lanes for k in range(width)]
    return builder.shuffle_vector(value, zero, ir.Constant(ir.VectorType(I32, width), picks))


def _joined(builder, pieces, width: int, lanes: int):
    """The first ``lanes`` lanes of ``pieces`` (``width`` lanes each) one after another."""
    while len(pieces) > 1:
        if len(pieces) % 2:
            pieces.append(ir.Constant(pieces[0].type, None))
        size = pieces[0].type.count
        both = ir.Constant(ir.VectorType(I32, 2 * size), list(range(2 * size)))
        pieces = [builder.shuffle_vector(a, b, both) for a, b in zip(pieces[::2], pieces[1::2])]
    (joined,) = pieces
    if joined.type.count == lanes:
        return joined
    return builder.shuffle_vector(joined, ir.Constant(joined.type, None),
                                  ir.Constant(ir.VectorType(I32, lanes), list(range(lanes))))
