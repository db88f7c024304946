"""Products: ``pack_matmul`` rewrites the compute library's plain product to read B
through column panels one register tile wide (packing is this target's decision, taken
before scheduling); ``schedule_matmul`` gives it a register-tiled, vectorized, parallel
schedule that can finish each tile with the function's elementwise epilogue; a constant
B is packed once, by NumPy, when the kernel is built (``pack_columns``,
``use_prepacked``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from heterocc.sdk import CompileError, te
from heterocc.sdk.graph import matmul as plain_matmul
from heterocc.te.schedule_reads import reads_of
from heterocc.te.tensor import Reduce, TensorLoad
from heterocc.tir import expr as tx

from ..cpu import CPUDescription
from .common import (
    PANEL_VECTORS,
    TASKS_PER_CORE,
    PanelChoice,
    even_tiles,
    panel_vectors,
    schedule_reduction,
    tile_rows,
    vector_lanes,
)


def panel_width(dtype: str, cpu: CPUDescription) -> int:
    """Columns of one packed panel of B: :func:`panel_vectors` vector registers of
    ``dtype`` on ``cpu``."""
    return panel_vectors(cpu) * vector_lanes(dtype, cpu)


def default_panel(n: int, dtype: str, cpu: CPUDescription) -> int:
    """The panel width of a product with ``n`` columns on ``cpu``: :func:`panel_width`,
    or, when ``n`` is narrower, the most vectors that ``n`` fills or needs, a power of
    two (a panel past the last column only adds zero-padding to multiply; a panel of
    three AVX-512 vectors, 48 floats, ran 5x slower than one of two or four:
    [197, 3072] x [3072, 768]); halved, down to :data:`PANEL_VECTORS` vectors, while it
    leaves a last panel that must run a vector at a time (:func:`ragged_panel_tail`:
    a tail of 20 floats in a panel of 64 left 4 of them to a guarded scalar loop,
    where a panel of 32 runs them as one short vector)."""
    lanes = vector_lanes(dtype, cpu)
    vectors = -(-n // lanes)
    width = min(panel_width(dtype, cpu), (1 << (vectors.bit_length() - 1)) * lanes)
    while width > PANEL_VECTORS * lanes and ragged_panel_tail(n, width, dtype, cpu):
        width //= 2
    return width


def matmul_tile_rows(m: int, panel: int, dtype: str,
                     cpu: CPUDescription) -> int:
    """Rows per register tile of :func:`schedule_matmul` for a product of ``m`` rows
    read through panels of ``panel`` columns: :func:`tile_rows` for ``m`` rows and the
    panel's vectors. A panel narrower than :data:`PANEL_VECTORS` vectors (a product
    with few columns) keeps a full panel's rows: every row more costs one load of A per
    multiply-add, which slowed a one-vector panel down (30 rows 25% slower than 8-14)."""
    vectors = max(PANEL_VECTORS, -(-panel // vector_lanes(dtype, cpu)))
    return tile_rows(cpu, m, vectors)


#: multiply-adds (vector FMAs) per iteration of a matmul register tile's reduction loop
#: that unrolling it aims for on x86: each iteration also bumps its pointers and counts
#: and branches, which take issue slots and ALU ports beside the FMAs; unrolled this
#: far, they are a few percent of them. AVX2's 6x16 tile does 12 FMAs a step: unrolled 8
#: times, 1024x1024x1024 ran 4-8% faster (128x768x768, 128x3072x768 likewise; 4 steps
#: gained half that); AVX-512's 14x32 (28 a step, 4 steps) ran as fast or 1-3% faster.
MATMUL_UNROLLED_MULADDS = 96


def reduction_unroll_limit(rows: int, panel: int, dtype: str,
                           cpu: CPUDescription) -> int:
    """Steps of the reduction that one iteration of a register tile's loop should do,
    for a tile of ``rows`` rows by a panel of ``panel`` columns on ``cpu``: on x86 the
    fewest that reach :data:`MATMUL_UNROLLED_MULADDS`; elsewhere one (on AArch64 LLVM
    loads the next steps' elements of A ahead into registers, and the unrolled 13-row
    NEON tile spilled its accumulators)."""
    description = cpu
    if not description.is_x86:
        return 1
    muladds = rows * -(-panel // vector_lanes(dtype, description))
    return -(-MATMUL_UNROLLED_MULADDS // muladds)


def reduction_steps(extent: int, limit: int) -> int:
    """Steps of a reduction of ``extent`` that one unrolled iteration does: the most, at
    most ``limit``, that divide ``extent`` (no guarded tail)."""
    return max(d for d in range(1, min(limit, extent) + 1) if extent % d == 0)


def unroll_reduction(stage: te.Stage, k, extent: int, limit: int) -> list:
    """Split the reduction loop ``k`` (of ``extent`` steps) of a register tile's
    ``stage`` into iterations of :func:`reduction_steps` steps, unrolled by LLVM;
    returns the loops, outer first, for the caller's reorder (just ``[k]`` for one
    step)."""
    steps = reduction_steps(extent, limit)
    if steps == 1:
        return [k]
    outer, inner = stage.split(k, steps)
    stage.unroll(inner, explicit=False)
    return [outer, inner]


def panel_group(m: int, depth: int, panels: int, panel: int, itemsize: int,
                batch: int = 1, *, cpu: CPUDescription) -> int:
    """Column panels per group of :func:`schedule_matmul` (each row tile of A then meets
    a group's panels one after the other, so its rows are read from memory once per
    group, not once per panel) for a product of ``m`` rows, a reduction of ``depth``,
    ``panels`` panels of ``panel`` columns and ``batch`` matrices, on ``cpu``.

    One when A (``m x depth``) and a panel fit in the L2 together: A then stays cached
    from one panel to the next (a BERT layer's [128, 3072] x [3072, 768], 1.9 MiB with
    a panel in a 2 MiB L2, measured 15% slower on two cores in groups of 2). Otherwise
    the most panels that fit in half the L2 (they serve every row tile of A before the
    next group), leaving every core :data:`TASKS_PER_CORE` groups or more, evened over
    the panels (:func:`even_tiles`). 1024x1024x1024 in fp32 on 2 cores with a 2 MiB
    L2: 4 panels of 32 columns per group, 8 groups (A's 4 MiB read 8 times instead of
    32: +10% on one core, +6% on two, measured; groups of 8 were no faster, and a
    core slowed by another process had fewer groups to leave to the other)."""
    description = cpu
    panel_bytes = depth * panel * itemsize
    if m * depth * itemsize + panel_bytes <= description.l2:
        return 1
    group = min(description.l2 // 2 // panel_bytes,
                panels * batch // (TASKS_PER_CORE * description.num_cores))
    return even_tiles(panels, max(1, group))


def _matmul_loads(product: te.Tensor) -> tuple[TensorLoad, TensorLoad] | None:
    """The loads ``(A[..., i, k], B[..., k, j])`` of a plain product
    (``sum(A[..., i, k] * B[..., k, j], k)`` with ``i, j`` its last two axes, as
    ``heterocc.compute.nn.matmul`` makes it), or None when it has another form (a 1-D
    operand, or packed already)."""
    op = product.op
    if (not isinstance(op, te.ComputeOp) or "packed_B" in op.attrs or len(op.axis) < 2):
        return None
    body = op.body
    if not (isinstance(body, Reduce) and body.combiner == "sum" and len(body.axis) == 1
            and isinstance(body.source, tx.Binary) and body.source.op == "mul"):
        return None
    a, b = body.source.a, body.source.b
    if not (isinstance(a, TensorLoad) and isinstance(b, TensorLoad)
            and len(a.indices) >= 2 and len(b.indices) >= 2):
        return None
    i, j = (iv.var for iv in op.axis[-2:])
    k = body.axis[0].var
    if not (a.indices[-2] is i and a.indices[-1] is k
            and b.indices[-2] is k and b.indices[-1] is j):
        return None
    return a, b


def pack_matmul(product: te.Tensor, panel: int | None = None,
                *, cpu: CPUDescription,
                panel_of: PanelChoice | None = None) -> bool:
    """Make the CPU's layout of a plain product (``heterocc.compute.nn.matmul``: a sum
    of ``A[..., i, k] * B[..., k, j]``): rewrite ``product`` in place (before any
    schedule is made) to read B
    through a packed copy ``[..., n / panel, k, panel]`` (zero-padded past column n), so
    that :func:`schedule_matmul`'s register tile reads B contiguously. The packed stage is
    recorded as the op's ``packed_B`` attribute.

    The panel is ``panel`` when given, else ``panel_of(m, n, k, dtype)`` for a 2-D
    product when that gives one (the tuning log's best for this shape, which the
    target passes down), else :func:`default_panel`. Returns False, touching nothing,
    for a product of another form (see :func:`_matmul_loads`)."""
    loads = _matmul_loads(product)
    if loads is None:
        return False
    a_load, b_load = loads
    B = b_load.tensor
    depth, n = B.shape[-2:]
    if panel is None and product.ndim == 2 and panel_of is not None:
        panel = panel_of(product.shape[0], n, depth, product.dtype)
    width = panel or default_panel(n, B.dtype, cpu)
    zero = te.const(0, B.dtype)

    full_panels = n // width

    def element(*index):
        *batch, p, k, c = index
        column = p * width + c
        padded = te.if_then_else(column < n, B[(*batch, k, te.minimum(column, n - 1))], zero)
        if full_panels == -(-n // width):
            return padded
        # a full panel reads its row as it is, a contiguous vector (its panel clamped
        # so that the read is in bounds as written); the guard on the panel (one per
        # vector) branches, where the clamped columns of every panel gathered lane by
        # lane
        full = te.minimum(p, full_panels - 1) * width + c
        return te.if_then_else(p < full_panels, B[(*batch, k, full)], padded)

    packed = te.compute((*B.shape[:-2], -(-n // width), depth, width), element,
                        name=f"{product.name}.packed_B", dtype=B.dtype)
    op = product.op
    j, k = op.axis[-1].var, op.body.axis[0].var
    source = a_load * packed[(*b_load.indices[:-2], j // width, k, j % width)]
    product.op = te.ComputeOp(op.name, op.axis, Reduce("sum", source, op.body.axis),
                              {**op.attrs, "packed_B": packed})
    return True


def pack_matmul_rows(product: te.Tensor, rows: int, block: int) -> te.Tensor:
    """Make a 2-D product packed by :func:`pack_matmul` read A through a copy in row
    blocks ``[ceil(m / rows), k / block, rows, block]`` (zero rows past row m): each
    register tile of ``rows`` rows then reads its chunk of ``block`` reduction steps
    from one contiguous ``rows x block`` block. A read in place has its rows a whole
    row of A apart: 4 KiB for a reduction of 1024 fp32, so that the tile's 14 rows all
    fall in one set of a 12-way L1 cache and evict each other (the hand schedule on A
    padded to 1040 columns ran 4-7% faster one-threaded, 1024^3 on AVX-512). Returns
    the copy's stage (the product's ``packed_A`` attribute), for
    :func:`schedule_packed_rows`."""
    op = product.op
    packed_b = op.attrs.get("packed_B") if isinstance(op, te.ComputeOp) else None
    if packed_b is None or product.ndim != 2 or "packed_A" in op.attrs:
        raise CompileError(f"pack_matmul_rows: {product.name!r} is no 2-D product packed "
                           "by pack_matmul (or its A is packed already)")
    a_load = op.body.source.a
    A = a_load.tensor
    m, depth = A.shape
    if A.ndim != 2 or rows < 1 or block < 1 or depth % block:
        raise CompileError(f"pack_matmul_rows: {product.name!r} reads A "
                           f"{list(A.shape)}; blocks of {rows} rows by {block} of its "
                           f"{depth} columns need 2-D A and a block dividing the columns")
    zero = te.const(0, A.dtype)

    def element(tile, chunk, row, step):
        index = tile * rows + row
        return te.if_then_else(index < m, A[te.minimum(index, m - 1), chunk * block + step],
                               zero)

    blocks = te.compute((-(-m // rows), depth // block, rows, block), element,
                        name=f"{product.name}.packed_A", dtype=A.dtype)
    i, k = a_load.indices
    source = blocks[i // rows, k // block, i % rows, k % block] * op.body.source.b
    product.op = te.ComputeOp(op.name, op.axis, Reduce("sum", source, op.body.axis),
                              {**op.attrs, "packed_A": blocks})
    return blocks


def schedule_packed_rows(schedule: te.Schedule, blocks: te.Tensor,
                         cpu: CPUDescription) -> None:
    """The copy of :func:`pack_matmul_rows` at root: its row tiles in parallel, each
    block's rows copied a vector at a time (where the block is whole vectors)."""
    stage = schedule[blocks]
    stage.compute_root()
    tile, chunk, _, step = stage.op.axis
    lanes = vector_lanes(blocks.dtype, cpu)
    if int(step.extent) % lanes == 0:
        _, lane = stage.split(step, lanes)
        stage.vectorize(lane)
    stage.parallel(stage.fuse(tile, chunk))


def pack_columns(b: np.ndarray, width: int) -> np.ndarray:
    """NumPy's copy of :func:`pack_matmul`'s layout: ``b`` ``[..., k, n]`` as column
    panels ``[..., ceil(n / width), k, width]``, zero-padded past column n. What a
    constant B is packed into once, when its kernel is built (:func:`use_prepacked`)."""
    *batch, depth, n = b.shape
    panels = -(-n // width)
    padded = np.zeros((*batch, depth, panels * width), b.dtype)
    padded[..., :n] = b
    return np.ascontiguousarray(
        np.swapaxes(padded.reshape(*batch, depth, panels, width), -2, -3))


def packed_source(product: te.Tensor) -> te.Tensor | None:
    """The B that a product packed by :func:`pack_matmul` packs (the tensor its packed
    stage reads), or None when it is not packed, or already reads a prepacked copy."""
    packed = product.op.attrs.get("packed_B") if isinstance(product.op, te.ComputeOp) \
        else None
    if packed is None or not isinstance(packed.op, te.ComputeOp):
        return None
    (source,) = {id(t): t for t in reads_of(packed.op.body)}.values()
    return source


def use_prepacked(product: te.Tensor, prepacked: te.Tensor) -> None:
    """Make ``product`` (packed by :func:`pack_matmul`) read B's panels from
    ``prepacked``, a tensor of the packed shape holding :func:`pack_columns` of B (a
    constant packed once, when the kernel is built), instead of packing B itself."""
    op = product.op
    packed = op.attrs["packed_B"]
    if tuple(prepacked.shape) != tuple(packed.shape) or prepacked.dtype != packed.dtype:
        raise CompileError(f"use_prepacked: {product.name!r} reads B packed as "
                           f"{packed.dtype}{list(packed.shape)}, not "
                           f"{prepacked.dtype}{list(prepacked.shape)}")
    a_load, b_load = op.body.source.a, op.body.source.b
    source = a_load * prepacked[tuple(b_load.indices)]
    product.op = te.ComputeOp(op.name, op.axis, Reduce("sum", source, op.body.axis),
                              {**op.attrs, "packed_B": prepacked})


def reachable_computes(outputs: Sequence[te.Tensor]) -> list[te.Tensor]:
    """Every compute stage that computing ``outputs`` runs, each once."""
    seen: dict[int, te.Tensor] = {}
    pending = list(outputs)
    while pending:
        tensor = pending.pop()
        if id(tensor) in seen or not isinstance(tensor.op, te.ComputeOp):
            continue
        seen[id(tensor)] = tensor
        pending += reads_of(tensor.op.body)
    return list(seen.values())


def pack_matmuls(outputs: Sequence[te.Tensor], panel_of: PanelChoice | None = None,
                 *, cpu: CPUDescription) -> None:
    """:func:`pack_matmul` on every product that computing ``outputs`` reads: the CPU's
    rewrite of a function's plain computes before it is scheduled (``panel_of``: the
    tuned panel width of a shape, see :func:`pack_matmul`)."""
    for tensor in reachable_computes(outputs):
        pack_matmul(tensor, cpu=cpu, panel_of=panel_of)


def matmul(A: te.Tensor, B: te.Tensor, name: str = "C", panel: int | None = None,
           *, cpu: CPUDescription,
           panel_of: PanelChoice | None = None) -> te.Tensor:
    """``A @ B`` for 2-D ``A`` (m, k) and ``B`` (k, n) of one dtype in the CPU's layout:
    the plain product (``heterocc.compute.nn.matmul``) packed by :func:`pack_matmul`
    (``panel``, else ``panel_of``'s choice, else the default panel width)."""
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0] or A.dtype != B.dtype:
        raise CompileError(f"matmul {name!r}: needs A (m, k) and B (k, n) of one dtype, got "
                           f"{A.dtype}{list(A.shape)} and {B.dtype}{list(B.shape)}")
    C = plain_matmul(A, B, name)
    pack_matmul(C, panel, cpu=cpu, panel_of=panel_of)
    return C


def schedule_matmul(schedule: te.Schedule, C: te.Tensor,
                    cpu: CPUDescription,
                    epilogue: te.Tensor | None = None) -> None:
    """The register-tiled CPU schedule of a product packed by :func:`pack_matmul`: tiles
    of :func:`matmul_tile_rows` rows (of ``cpu``) by one panel accumulate in registers,
    column panels (or groups of them that each row tile meets in turn,
    :func:`panel_group`) and batch axes outermost and in parallel. A product it could not
    pack (a 1-D operand) gets the reduction schedule.

    ``epilogue``, when given, is the function's elementwise tail of the product (see
    ``heterocc.sdk.te_target.elementwise_epilogue``: bias, GELU, residual add, with the stages
    between inlined into it): the tiles are then laid out on it, and each tile's sums are
    finished by it straight from registers instead of in a second pass over memory. (The
    inlined stages vary along the vector lanes, the product's columns, so they need not
    be computed per tile as a convolution's per-channel ones are.)"""
    packed = C.op.attrs.get("packed_B")
    if packed is None:
        body = C.op.body if isinstance(C.op, te.ComputeOp) else None
        if not (isinstance(body, Reduce) and body.combiner == "sum"
                and isinstance(body.source, tx.Binary) and body.source.op == "mul"):
            raise CompileError(f"schedule_matmul: {C.name!r} is not a product "
                               "sum(A[..., i, k] * B[..., k, j])")
        schedule_reduction(schedule, C)
        return
    width = packed.shape[-1]
    if isinstance(packed.op, te.ComputeOp):  # else a constant packed at build time
        *pack_outer, _, column = schedule[packed].op.axis
        schedule[packed].parallel(schedule[packed].fuse(*pack_outer) if len(pack_outer) > 1
                                  else pack_outer[0])
        schedule[packed].vectorize(column)
    if epilogue is None:
        local, outer = schedule.cache_write(C, "local"), C
    else:
        local, outer = C, epilogue
        schedule[C].set_scope("local")
    *batch, i, j = schedule[outer].op.axis
    m, n, depth = C.shape[-2], C.shape[-1], packed.shape[-2]
    rows = matmul_tile_rows(m, width, packed.dtype, cpu)
    row_tile, panel_index, row, col = schedule[outer].tile(i, j, rows, width)
    group = panel_group(m, depth, -(-n // width), width, np.dtype(packed.dtype).itemsize,
                        math.prod(C.shape[:-2]), cpu=cpu)
    # Column panels (or groups of them) outermost: each thread keeps its panels of B in
    # its own cache while the rows of A stream past (a row tile meeting a group's panels
    # in turn). The batch axes run inside them, in the same parallel loop: a short last
    # panel then starts at one point of that loop, where partitioning splits it off (its
    # own branch of the loop body); with the batch outermost, every panel of every matrix
    # kept the short panel's guard and ran its columns as a short vector and scalars.
    if group > 1:
        group_index, panel_index = schedule[outer].split(panel_index, group)
        schedule[outer].reorder(group_index, *batch, row_tile, panel_index, row, col)
        tile = panel_index
    else:
        group_index = panel_index
        schedule[outer].reorder(panel_index, *batch, row_tile, row, col)
        tile = row_tile
    schedule[outer].parallel(schedule[outer].fuse(group_index, *batch) if batch
                             else group_index)
    # The rows unroll in LLVM (which then keeps the tile's accumulators in registers),
    # not in the TIR: 64 rows' tile of 13 and tail of 12 would be 25 copies of the body
    # (an epilogue's GELU in each) for every TIR pass and the code generator to walk;
    # the machine code is the same.
    schedule[outer].unroll(row, explicit=False)
    ragged = ragged_panel_tail(n, width, packed.dtype, cpu)
    vectorize_panel_columns(schedule[outer], col, ragged, packed.dtype, cpu)
    schedule[local].compute_at(schedule[outer], tile)
    *_, local_row, local_col = schedule[local].op.axis
    (k,) = schedule[local].op.reduce_axis
    reduction = unroll_reduction(schedule[local], k, depth,
                                 reduction_unroll_limit(rows, width, packed.dtype, cpu))
    schedule[local].reorder(*reduction, local_row, local_col)
    schedule[local].unroll(local_row, explicit=False)
    vectorize_panel_columns(schedule[local], local_col, ragged, packed.dtype, cpu)


def ragged_panel_tail(n: int, width: int, dtype: str,
                      cpu: CPUDescription) -> bool:
    """Whether the last panel of a product of ``n`` columns in panels of ``width``, cut
    short by the guard, is wider than a vector register but no whole number of them
    (20 of 32 lanes on AVX-512). One vector of that width made LLVM scalarize the tile
    and spill its accumulators (512x512x500: 71 GFLOP/s, NumPy 320); a vector at a
    time (:func:`vectorize_panel_columns`), the tail is a whole vector and a short one
    (16 + 4: 253 GFLOP/s); so is a tail of whole vectors that are no power of two in
    number (48 of 64 lanes: three vectors; see :func:`default_panel`). Other tails keep
    one vector per row: the split costs a full panel's tile 4-7% (1024x1024x1000)."""
    lanes, tail = vector_lanes(dtype, cpu), n % width
    vectors = tail // lanes
    return tail > lanes and (tail % lanes != 0 or vectors & (vectors - 1) != 0)


def vectorize_panel_columns(stage, columns, ragged: bool, dtype: str,
                            cpu: CPUDescription) -> None:
    """Vectorize a register tile's loop over a panel's columns: as one vector, or
    (``ragged``, see :func:`ragged_panel_tail`) one register-wide vector at a time,
    the vectors unrolled by LLVM."""
    if ragged:
        vectors, columns = stage.split(columns, vector_lanes(dtype, cpu))
        stage.unroll(vectors, explicit=False)
    stage.vectorize(columns)


def matmul_function(m: int, n: int, k: int, dtype: str = "float32", name: str = "matmul",
                    *, cpu: CPUDescription):
    """Placeholders, product and schedule of an (m, k) x (k, n) matmul for ``cpu``
    lowered: returns the PrimFunc taking (A, B, C)."""
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    C = matmul(A, B, cpu=cpu)
    schedule = te.create_schedule(C)
    schedule_matmul(schedule, C, cpu)
    return te.lower(schedule, [A, B, C], name=name)
