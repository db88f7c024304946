"""Winograd convolutions F(m x m, 3 x 3) of blocked NCHW[x]c data (Lavin & Gray, "Fast
Algorithms for Convolutional Neural Networks", 2015), for the dense 3x3 stride-1
convolutions whose channels pay for the transforms.

Each output tile of ``m x m`` pixels comes from an input tile of ``a x a`` (``a = m +
2``) as ``Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A``: ``a²`` products per channel pair and
tile where the direct convolution does ``9 m²`` (F(2,3): 16 for 36, F(4,3): 36 for 144).
The stages, each a TE compute the CPU schedules (:func:`schedule_winograd_conv`):

* ``winograd_rows`` and ``winograd_data``: the input tiles in the Winograd domain,
  ``Bᵀ d B`` as two passes of ``Bᵀ`` (rows, then columns), ``(a, a, C/ib, T, ib)``
  with ``T`` the tiles of every image, one vector per tile and channel block (a read
  outside the input, padding or a ragged tile's, is a zero);
* ``winograd_product``: per point of the domain, the product over the input channels
  ``M[p, q, k, t, :] = sum_c V[p, q, c, t] U[p, q, k, c, :]``, register-tiled as a 1x1
  convolution of a ``T``-pixel image (vectorized over the output channel block);
* ``winograd_columns`` and the convolution itself: ``Aᵀ M A`` as two passes, computed
  per output tile in registers, the function's epilogue (bias, residual add,
  activation) finished there.

The weight's transform ``U = G g Gᵀ`` is done once, by NumPy (a float32 product), when the
kernel is built (:func:`transform_weight_array`): the weight is a constant.
The transforms' matrices come from the interpolation points (Cook-Toom, exact
fractions), their nonzero coefficients constants in the code (a ±1 an addition or a
subtraction): F(2,3)'s points ``{0, 1, -1}`` give the input and output transforms
coefficients of ±1 only; F(4,3)'s ``{0, ±1, ±2}`` up to 5 and 8, which grow the rounding
error some ten times F(2,3)'s (both well inside what the float models' tests and the
zoo's comparison with ONNX Runtime accept: see ``docs/cpu-targets.md``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from heterocc.sdk import CompileError, te
from heterocc.sdk.tuning import CONSTANT_SELECTS
from heterocc.te.schedule_reads import reads_of
from heterocc.tir import expr as tx

from ..cpu import CPUDescription
from .blocked_conv import pointwise_conv_tile, unroll_block_reduction
from .common import even_tiles

#: the attribute that marks a :func:`winograd_conv` output, with its tile ``m``
WINOGRAD_ATTR = "winograd_conv"
#: the kernel size a Winograd convolution here computes
KERNEL = 3
#: output tile sizes offered (F(2,3), F(4,3)), with their interpolation points
#: (the point at infinity is implied)
TILE_POINTS = {2: (0, 1, -1), 4: (0, 1, -1, 2, -2)}
WINOGRAD_TILES = tuple(TILE_POINTS)
#: the attribute of a Winograd convolution's product (owned by its output's rule)
WINOGRAD_PRODUCT = "winograd_product"
#: a kernel's packing of a constant weight transformed by :func:`transform_weight_array`
WINOGRAD_PACKING = "winograd"
#: fewest input and output channels of a convolution each tile takes: a narrower layer
#: gains microseconds (8 -> 16 channels at 28x28: 21 us direct, 16 us by F(4,3), AVX2)
#: for rounding that stands out in its small outputs: chains of 16-channel layers (a
#: dense block) came 2.7e-4 off the reference on outputs of 0.6 by F(4,3), beyond the
#: 1e-4 the repo's tests of such blocks allow; F(2,3) rounds some seven times less
TILE_MIN_CHANNELS = {2: 16, 4: 32}
WINOGRAD_MIN_CHANNELS = min(TILE_MIN_CHANNELS.values())
#: most bytes of one chunk's transformed input or product (:func:`tiles_per_chunk`): the
#: code generator's largest stack slot (larger buffers are allocated per call, and a
#: large allocation is paged in afresh each time)
WINOGRAD_CHUNK_BYTES = 256 * 1024


@dataclass(frozen=True)
class WinogradMatrices:
    """The transforms of F(m x m, 3 x 3), exact fractions: ``AT`` (m x a) takes an
    ``a``-point product back to ``m`` outputs, ``G`` (a x 3) a kernel row into the
    domain, ``BT`` (a x a) an ``a``-element input row."""

    m: int
    AT: tuple[tuple[Fraction, ...], ...]
    G: tuple[tuple[Fraction, ...], ...]
    BT: tuple[tuple[Fraction, ...], ...]

    @property
    def alpha(self) -> int:
        """Input tile size ``m + 2``."""
        return self.m + KERNEL - 1


def _poly_mul(a: list[Fraction], b: list[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


@functools.cache
def winograd_matrices(m: int) -> WinogradMatrices:
    """The Cook-Toom transforms of F(m, 3) at :data:`TILE_POINTS`'s points ``p_i`` and
    infinity, for a correlation (a convolution layer's sum): ``AT[j][i] = p_iʲ`` (the
    point at infinity feeds the last output only); ``G[i] = (p_iᵏ / N_i)_k`` with ``N_i
    = prod_{l != i} (p_i - p_l)`` and ``G[∞] = (0, 0, 1)``; row ``i`` of ``BT`` the
    coefficients of ``prod_{l != i} (x - p_l)`` (length a - 1, then 0), ``BT[∞]`` those
    of ``prod_l (x - p_l)``, each reversed into a correlation's order. Checked
    against the direct sum by the tests."""
    if m not in TILE_POINTS:
        raise CompileError(f"winograd: no F({m}, 3) (offered: {sorted(TILE_POINTS)})")
    points = [Fraction(p) for p in TILE_POINTS[m]]
    finite = len(points)  # alpha - 1
    alpha = finite + 1
    at = [[p ** j for p in points] + [Fraction(1 if j == m - 1 else 0)] for j in range(m)]
    g = []
    for i, p in enumerate(points):
        norm = Fraction(1)
        for q_index, q in enumerate(points):
            if q_index != i:
                norm *= p - q
        g.append([p ** k / norm for k in range(KERNEL)])
    g.append([Fraction(0)] * (KERNEL - 1) + [Fraction(1)])
    bt = []
    for i in range(finite):
        poly = [Fraction(1)]
        for q_index, q in enumerate(points):
            if q_index != i:
                poly = _poly_mul(poly, [-q, Fraction(1)])
        bt.append(poly + [Fraction(0)] * (alpha - len(poly)))
    poly = [Fraction(1)]
    for q in points:
        poly = _poly_mul(poly, [-q, Fraction(1)])
    bt.append(poly)
    return WinogradMatrices(m, tuple(map(tuple, at)), tuple(map(tuple, g)),
                            tuple(map(tuple, bt)))


def _as_array(rows) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in rows], dtype=np.float64)


def transform_weight_array(packed: np.ndarray, m: int) -> np.ndarray:
    """A blocked convolution's packed 3x3 weight ``(O/ob, C/ib, 3, 3, ib, ob)`` in the
    Winograd domain of F(m, 3), ``U = G g Gᵀ``: ``(a, a, O/ob, C/ib, ib, ob)`` float32
    (each a float32 sum of nine terms: its rounding is a small part of the
    convolution's, see :func:`winograd_matrices`)."""
    if packed.ndim != 6 or packed.shape[2:4] != (KERNEL, KERNEL):
        raise CompileError(f"winograd: weight of shape {packed.shape} is no packed 3x3 one")
    g = _as_array(winograd_matrices(m).G)
    alpha = g.shape[0]
    # one product by G ⊗ G (a² x 9) of the taps (each a row of every channel pair), in
    # the layout the kernel reads: the taps' transpose is 9/a² of the result's size
    taps = packed.transpose(2, 3, 0, 1, 4, 5).reshape(KERNEL * KERNEL, -1)
    transformed = np.kron(g, g).astype(np.float32) @ taps
    return transformed.reshape(alpha, alpha, *packed.shape[:2], *packed.shape[4:])


def transformed_weight_shape(weight_shape, m: int) -> tuple[int, ...]:
    """The shape :func:`transform_weight_array` gives a packed weight of
    ``weight_shape``."""
    alpha = m + KERNEL - 1
    return (alpha, alpha, *weight_shape[:2], *weight_shape[4:])


def _combination(coefficients, loads) -> tx.Expr:
    """``sum_i coefficients[i] * loads(i)`` over the nonzero coefficients, a ±1 as an
    addition or subtraction (no multiply)."""
    expr = None
    for index, c in enumerate(coefficients):
        if c == 0:
            continue
        load = loads(index)
        magnitude = abs(c)
        term = load if magnitude == 1 else tx.const(float(magnitude), "float32") * load
        if expr is None:
            expr = term if c > 0 else tx.const(0.0, "float32") - term
        else:
            expr = expr + term if c > 0 else expr - term
    return expr if expr is not None else tx.const(0.0, "float32")


def _by_index(index, rows, loads) -> tx.Expr:
    """The combination of ``rows[i]`` for the value ``i`` of ``index`` (an axis that an
    unrolled loop makes a constant: the selects fold away)."""
    expr = _combination(rows[-1], loads)
    for i in range(len(rows) - 2, -1, -1):
        expr = te.if_then_else(te.equal(index, i), _combination(rows[i], loads), expr)
    return expr


@dataclass(frozen=True)
class WinogradShape:
    """Where the tiles of a Winograd convolution lie: ``images``, output
    ``height x width``, tiles ``rows x columns`` per image of ``m x m`` pixels."""

    m: int
    images: int
    height: int
    width: int

    @property
    def alpha(self) -> int:
        return self.m + KERNEL - 1

    @property
    def rows(self) -> int:
        return -(-self.height // self.m)

    @property
    def columns(self) -> int:
        return -(-self.width // self.m)

    @property
    def tiles(self) -> int:
        return self.images * self.rows * self.columns


def winograd_conv(x: te.Tensor, u: te.Tensor, pads, out_shape, m: int,
                  name: str = "conv_nchwc") -> te.Tensor:
    """The stages of a dense 3x3 stride-1 convolution of blocked ``x`` ``(N, C/ib, H, W,
    ib)`` by F(m, 3), ``u`` the weight in the domain (:func:`transform_weight_array`),
    ``pads`` (top, left, bottom, right), to ``out_shape`` ``(N, O/ob, OH, OW, ob)``.
    Returns the output (named ``name``, attribute ``winograd_conv``: its F(m, 3))."""
    n_images, in_blocks, height, width, in_block = x.shape
    _, out_blocks, out_h, out_w, out_block = out_shape
    shape = WinogradShape(m, n_images, out_h, out_w)
    matrices = winograd_matrices(m)
    alpha = shape.alpha
    top, left = pads[0], pads[1]

    def padded(n, c, yy, xx, i):
        inside = tx.logical_and(
            tx.logical_and(yy >= top, yy < top + height),
            tx.logical_and(xx >= left, xx < left + width))
        return te.if_then_else(inside, x[n, c, yy - top, xx - left, i],
                               tx.const(0.0, x.dtype))

    data = te.compute((n_images, in_blocks, shape.rows * m + KERNEL - 1,
                       shape.columns * m + KERNEL - 1, in_block), padded,
                      name="winograd_pad", dtype=x.dtype)
    bt = matrices.BT
    # tiles by image, row and column (indices affine in the loops, so that a chunk of
    # tiles needs exactly its own region of every stage)
    tiled = (n_images, in_blocks, shape.rows, shape.columns, in_block)
    rows = te.compute(
        (alpha, alpha, *tiled),
        lambda p, s, n, c, ty, tx_, i: _by_index(
            p, bt, lambda r: data[n, c, ty * m + r, tx_ * m + s, i]),
        name="winograd_rows", dtype=x.dtype)
    transformed = te.compute(
        (alpha, alpha, *tiled),
        lambda p, q, n, c, ty, tx_, i: _by_index(
            q, bt, lambda s: rows[p, s, n, c, ty, tx_, i]),
        name="winograd_data", dtype=x.dtype,
        # (the rows' select is on p, the columns' on q: a sketch unrolls both)
        attrs={CONSTANT_SELECTS: {0: alpha, 1: alpha}})
    rco = te.reduce_axis(in_blocks, "rco")
    rci = te.reduce_axis(in_block, "rci")
    product = te.compute(
        (alpha, alpha, n_images, out_blocks, shape.rows, shape.columns, out_block),
        lambda p, q, n, k, ty, tx_, o: te.sum(
            transformed[p, q, n, rco, ty, tx_, rci] * u[p, q, k, rco, rci, o],
            axis=[rco, rci]),
        name="winograd_product", dtype=x.dtype, attrs={WINOGRAD_PRODUCT: True})
    at = matrices.AT

    def columns_body(n, k, ty, tx_, j, q, o):
        return _by_index(j, at, lambda p: product[p, q, n, k, ty, tx_, o])

    columns = te.compute((n_images, out_blocks, shape.rows, shape.columns, m, alpha,
                          out_block), columns_body, name="winograd_columns", dtype=x.dtype)

    def output(n, k, yy, xx, o):
        return _by_index(xx % m, at,
                         lambda q: columns[n, k, yy // m, xx // m, yy % m, q, o])

    return te.compute(out_shape, output, name=name, dtype=x.dtype,
                      attrs={WINOGRAD_ATTR: {"m": m}, CONSTANT_SELECTS: {2: m, 3: m}})


def winograd_output_tile(tensor: te.Tensor) -> int:
    """The ``m`` of F(m, 3) where ``tensor`` is a :func:`winograd_conv` output, else 0."""
    attrs = getattr(tensor.op, "attrs", None) or {}
    return int(attrs[WINOGRAD_ATTR]["m"]) if WINOGRAD_ATTR in attrs else 0


def winograd_stages(conv: te.Tensor) -> dict[str, te.Tensor]:
    """The stages of a :func:`winograd_conv` output, by name: ``columns``, ``product``,
    ``data``, ``rows``, ``pad``."""
    found = {}
    stack = [conv]
    names = {"winograd_columns": "columns", "winograd_product": "product",
             "winograd_data": "data", "winograd_rows": "rows", "winograd_pad": "pad"}
    seen = set()
    while stack:
        tensor = stack.pop()
        if id(tensor) in seen or not isinstance(tensor.op, te.ComputeOp):
            continue
        seen.add(id(tensor))
        key = names.get(tensor.op.name)
        if key is not None and key not in found:
            found[key] = tensor
        stack.extend(reads_of(tensor.op.body))
    if len(found) != len(names):
        raise CompileError(f"winograd: {conv.name!r} lacks stages "
                           f"{sorted(set(names.values()) - set(found))}")
    return found




def winograd_applies(workload: dict, dtype: str) -> bool:
    """Whether F(m, 3) computes a blocked convolution of ``workload`` (its
    ``blocked_conv`` attribute: input and packed weight shapes, strides, dilations,
    group) on ``dtype``: dense (group 1), a 3x3 kernel at stride 1 and dilation 1, a
    blocked input (5-D), float32."""
    return (str(dtype) == "float32" and workload["group"] == 1
            and len(workload["input_shape"]) == 5
            and tuple(workload["weight_shape"][2:4]) == (KERNEL, KERNEL)
            and tuple(workload["strides"]) == (1, 1)
            and tuple(workload["dilations"]) == (1, 1))


def winograd_operands(conv: te.Tensor) -> dict | None:
    """``{"x", "w", "pads"}`` of a blocked convolution compute (its ``blocked_conv``
    workload) that F(m, 3) computes (:func:`winograd_applies`); else None."""
    op = conv.op
    workload = op.attrs.get("blocked_conv") if isinstance(op, te.ComputeOp) else None
    if workload is None or not winograd_applies(workload, conv.dtype) or len(
            op.reduce_axis) != 4:
        return None
    reads = reads_of(op.body)
    if len(reads) != 2:
        return None
    data, weight = reads
    x = data
    if tuple(data.shape) != tuple(workload["input_shape"]):  # the padded copy's source
        sources = reads_of(data.op.body) if isinstance(data.op, te.ComputeOp) else []
        if len(sources) != 1:
            return None
        x = sources[0]
    if tuple(x.shape) != tuple(workload["input_shape"]):
        return None
    return {"x": x, "w": weight, "pads": tuple(workload["pads"])}


def winograd_multiply_accumulates(workload: dict, out_shape) -> int:
    """The fewest multiply-accumulates of a Winograd product computing a blocked
    convolution of ``workload`` (one :func:`winograd_applies` accepts) to
    ``out_shape``: of :data:`WINOGRAD_TILES`, over whole tiles. (A lower bound of the
    convolution's time counts these: the direct sum's at the vector peak is no bound
    on a Winograd kernel.)"""
    n, out_blocks, height, width, out_block = out_shape
    _, in_blocks, _, _, in_block = workload["input_shape"]
    return min(WinogradShape(m, n, height, width).tiles * (m + KERNEL - 1) ** 2
               * in_blocks * in_block * out_blocks * out_block for m in WINOGRAD_TILES)


def _nonzeros(rows) -> int:
    return sum(1 for row in rows for value in row if value != 0)


def winograd_vector_operations(conv_shape, in_channels: int, m: int, lanes: int) -> float:
    """Vector operations of a Winograd convolution F(m, 3) of ``in_channels`` input
    channels to the blocked output ``conv_shape`` ``(N, O/ob, OH, OW, ob)``, ``lanes``
    floats per vector: the product's multiply-adds over whole tiles (a ragged tile
    costs a whole one), the transforms' additions and multiplies (a term per nonzero
    coefficient of ``Bᵀ`` over both passes of an input tile, of ``Aᵀ`` over both passes
    of an output tile), and a store and a load of each vector of the transformed input
    and of the product."""
    n, out_blocks, height, width, out_block = conv_shape
    out_channels = out_blocks * out_block
    shape = WinogradShape(m, n, height, width)
    matrices = winograd_matrices(m)
    points = shape.tiles * shape.alpha ** 2
    product = points * in_channels * out_channels / lanes
    input_transform = shape.tiles * in_channels / lanes * 2 * shape.alpha * _nonzeros(
        matrices.BT)
    output_transform = shape.tiles * out_channels / lanes * (
        shape.alpha * _nonzeros(matrices.AT) + m * _nonzeros(matrices.AT))
    traffic = 2 * points * (in_channels + out_channels) / lanes
    return product + input_transform + output_transform + traffic


def direct_vector_operations(conv_shape, in_channels: int, lanes: int) -> float:
    """Vector multiply-adds of the direct 3x3 convolution to ``conv_shape`` (see
    :func:`winograd_vector_operations`)."""
    n, out_blocks, height, width, out_block = conv_shape
    return n * height * width * KERNEL * KERNEL * in_channels * out_blocks * out_block / lanes


def winograd_tiles_of(conv: te.Tensor) -> tuple[int, ...]:
    """The tiles ``m`` of F(m, 3) that may compute the blocked convolution ``conv``: of
    :data:`WINOGRAD_TILES`, those whose :data:`TILE_MIN_CHANNELS` its input and output
    channels reach, where Winograd applies to it at all (:func:`winograd_operands`;
    else none)."""
    operands = winograd_operands(conv)
    if operands is None:
        return ()
    _, in_blocks, _, _, in_block = operands["x"].shape
    narrowest = min(in_blocks * in_block, conv.shape[1] * conv.shape[4])
    return tuple(m for m in WINOGRAD_TILES if narrowest >= TILE_MIN_CHANNELS[m])


def winograd_tile(conv: te.Tensor, cpu: CPUDescription) -> int:
    """The output tile ``m`` of F(m, 3) for the blocked convolution ``conv`` on ``cpu``,
    or 0 (the direct convolution): of the tiles whose :data:`TILE_MIN_CHANNELS` the
    layer's input and output channels reach, the one of the fewest vector operations
    (:func:`winograd_vector_operations`) when they are fewer than the direct
    convolution's multiply-adds; but where the transformed weights outweigh the data
    under every such tile (:func:`weights_dominate`) and the chosen tile's overflow the
    L2, the tile of the fewest weights. (F(4,3) measured 1.2-3.5x faster than the
    direct tiles on ResNet-18's 56x56 and 28x28 layers, F(2,3) 1.1-2x on its 14x14 and
    7x7 ones, and 1.4-2.7x on 16-128-channel layers, with AVX-512 and AVX2 alike;
    ``benchmarks/winograd_conv.py``.)"""
    tiles = winograd_tiles_of(conv)
    if not tiles:
        return 0
    # (the workload's input shape: winograd_tiles_of found the operands of that shape)
    _, in_blocks, _, _, in_block = conv.op.attrs["blocked_conv"]["input_shape"]
    lanes = cpu.vector_lanes(conv.dtype)
    channels = in_blocks * in_block
    out_channels = conv.shape[1] * conv.shape[4]
    best, best_count = 0, direct_vector_operations(conv.shape, channels, lanes)
    for m in tiles:
        count = winograd_vector_operations(conv.shape, channels, m, lanes)
        if count < best_count:
            best, best_count = m, count
    itemsize = np.dtype(conv.dtype).itemsize
    if best and all(_weights_dominate(conv.shape, channels, m) for m in tiles) and (
            (best + KERNEL - 1) ** 2 * channels * out_channels * itemsize > cpu.l2):
        # the kernel streams its transformed weights from beyond the L2 whatever the
        # tile: the tile of the fewest (ResNet-18's 512-channel 7x7 layer: F(2,3) 0.73
        # of the direct kernel's time, F(4,3) 0.90 with AVX-512; 0.68 and 0.73 with AVX2)
        return min(tiles)
    return best


def use_winograd_conv(conv: te.Tensor, weight: te.Tensor, m: int) -> None:
    """Make ``conv`` (a blocked convolution :func:`winograd_operands` accepts) compute
    by F(m, 3) (:func:`winograd_conv`), reading ``weight``, its weight in the domain
    (:func:`transform_weight_array`, done when the kernel is built)."""
    operands = winograd_operands(conv)
    if operands is None:
        raise CompileError(f"winograd: {conv.name!r} is no dense 3x3 stride-1 blocked "
                           "convolution")
    expected = transformed_weight_shape(operands["w"].shape, m)
    if tuple(weight.shape) != expected:
        raise CompileError(f"winograd: {conv.name!r} reads a transformed weight of shape "
                           f"{expected}, not {tuple(weight.shape)}")
    new = winograd_conv(operands["x"], weight, operands["pads"], conv.shape, m,
                        conv.op.name)
    conv.op = new.op


def tiles_per_chunk(conv: te.Tensor, in_channels: int, cpu: CPUDescription) -> int:
    """Tiles of one row of tiles that a Winograd convolution ``conv`` (F(m, 3), output
    ``(N, O/ob, OH, OW, ob)``) transforms, multiplies and transforms back at once: the
    most whose transformed input and product, ``a²`` vectors of every channel per tile,
    fill at most half of ``cpu``'s L2 together and each stay within a stack slot
    (:data:`WINOGRAD_CHUNK_BYTES`), at least one; evened over the row
    (:func:`.common.even_tiles`)."""
    m = winograd_output_tile(conv)
    _, out_blocks, height, width, out_block = conv.shape
    shape = WinogradShape(m, conv.shape[0], height, width)
    itemsize = np.dtype(conv.dtype).itemsize
    per_tile = shape.alpha ** 2 * itemsize
    fit = min(cpu.l2 // 2 // (per_tile * (in_channels + out_blocks * out_block)),
              WINOGRAD_CHUNK_BYTES // (per_tile * max(in_channels, out_blocks * out_block)))
    return even_tiles(shape.columns, max(1, fit))


def weights_dominate(conv: te.Tensor, in_channels: int) -> bool:
    """Whether a Winograd convolution ``conv`` reads more of its transformed weight
    (``a²`` x input x output channels) than of its transformed input and product
    (``a²`` x tiles x (input + output channels)): then its stages run over all tiles
    at once, each weight read once (a deep layer on a small image: chunked by rows of
    tiles, ResNet-18's 512-channel 7x7 layer read its 38 MB of weights once per row
    and took 1.5x as long), else chunk by chunk (:func:`tiles_per_chunk`)."""
    return _weights_dominate(conv.shape, in_channels,
                             winograd_output_tile(conv))


def _weights_dominate(conv_shape, in_channels: int, m: int) -> bool:
    n, out_blocks, height, width, out_block = conv_shape
    tiles = WinogradShape(m, n, height, width).tiles
    out_channels = out_blocks * out_block
    return in_channels * out_channels > tiles * (in_channels + out_channels)


def schedule_winograd_conv(schedule: te.Schedule, conv: te.Tensor,
                           epilogue: te.Tensor | None = None,
                           chain=(), *, cpu: CPUDescription) -> None:
    """The CPU schedule of a :func:`winograd_conv` output ``conv`` and its stages.

    Where the transformed weight is the larger operand (:func:`weights_dominate`),
    each step runs over all tiles, in parallel, its result in memory; otherwise chunks
    of a row of tiles (:func:`tiles_per_chunk`) run in parallel, each through the
    three steps with its padded input rows, transformed input and product in buffers
    of its own that stay in the caches. The steps: the input transform per (input
    block, tile), its ``a x a`` vectors of the block's channels (each pass unrolled over
    the points it computes); the product per domain point as a 1x1 blocked
    convolution over the tiles (:func:`.blocked_conv.pointwise_conv_tile`'s register
    tile over tiles and output channel blocks, the input block's channels unrolled);
    the output per ``m x m`` tile of pixels of one output block, ``Aᵀ M A`` (likewise),
    then ``chain`` and ``epilogue`` (the function's elementwise tail, as in
    :func:`.blocked_conv.schedule_conv2d_nchwc`) from registers."""
    stages = winograd_stages(conv)
    m = winograd_output_tile(conv)
    data, rows, product, pad = (stages[name] for name in ("data", "rows", "product", "pad"))
    in_channels = data.shape[3] * data.shape[6]
    whole = weights_dominate(conv, in_channels)
    chunk = data.shape[5] if whole else tiles_per_chunk(conv, in_channels, cpu)

    # the output: per output block and tile (chunks of a row of tiles in parallel, or
    # rows of tiles of each block)
    columns_stage = stages["columns"]
    if epilogue is None:
        local, outer = schedule.cache_write(conv, "local"), conv
    else:
        local, outer = conv, epilogue
    n, k, y, x, o = schedule[outer].op.axis
    y_outer, y_inner = schedule[outer].split(y, factor=m)
    x_outer, x_inner = schedule[outer].split(x, factor=m)
    if whole:
        schedule[outer].reorder(n, k, y_outer, x_outer, y_inner, x_inner, o)
        schedule[outer].parallel(schedule[outer].fuse(n, k, y_outer))
    else:
        x_chunk, x_outer = schedule[outer].split(x_outer, factor=chunk)
        schedule[outer].reorder(n, y_outer, x_chunk, k, x_outer, y_inner, x_inner, o)
        # rows of tiles in parallel (images in turn: a fused loop's division would
        # leave the chunk's region of each stage unbounded), the chunks of a row in turn
        schedule[outer].parallel(y_outer)
    # each transform unrolled over the index its select is on (a constant then: the
    # select folds), a loop over the other: unrolled over both, the TIR and LLVM's work
    # on it took twice as long (ResNet-18's compile: 6.8 CPU seconds against 8.0,
    # kernels the same within the noise)
    schedule[outer].unroll(x_inner)
    schedule[outer].vectorize(o)
    tile_stages = [columns_stage, local, *chain]
    schedule[tile_stages[-1]].compute_at(schedule[outer], x_outer)
    for producer, reader in zip(tile_stages, tile_stages[1:]):
        schedule[producer].compute_at(schedule[reader], schedule[reader].op.axis[0])
    for stage_tensor in tile_stages:
        schedule[stage_tensor].set_scope("local")
    for stage_tensor in [local, *chain]:
        _, _, rows_axis, columns_axis, block = schedule[stage_tensor].op.axis
        schedule[stage_tensor].unroll(columns_axis)
        schedule[stage_tensor].vectorize(block)
    *_, cj, cq, co = schedule[columns_stage].op.axis
    schedule[columns_stage].unroll(cj)
    schedule[columns_stage].vectorize(co)

    # the product: a 1x1 blocked convolution of the tiles per domain point
    out_blocks, out_block = product.shape[3], product.shape[6]
    columns, channel_blocks = pointwise_conv_tile(
        out_blocks, chunk, out_block * np.dtype(product.dtype).itemsize, cpu)
    accumulators = schedule.cache_write(product, "local")
    p, q, pn, kk, pty, t, oo = schedule[product].op.axis
    k_outer, k_inner = schedule[product].split(kk, factor=channel_blocks)
    t_outer, t_inner = schedule[product].split(t, factor=columns)
    schedule[product].reorder(pn, pty, p, q, k_outer, t_outer, k_inner, t_inner, oo)
    if whole:
        schedule[product].reorder(p, q, k_outer, pn, pty, t_outer, k_inner, t_inner, oo)
        schedule[product].parallel(schedule[product].fuse(p, q, k_outer))
    else:
        schedule[product].compute_at(schedule[outer], x_chunk)
    schedule[product].unroll(k_inner)
    schedule[product].unroll(t_inner)
    schedule[product].vectorize(oo)
    schedule[accumulators].compute_at(schedule[product], t_outer)
    schedule[accumulators].set_scope("local")
    lp, lq, ln, lk, lty, lt, lo = schedule[accumulators].op.axis
    reduction = unroll_block_reduction(
        schedule[accumulators], list(schedule[accumulators].op.reduce_axis), None, conv.name)
    schedule[accumulators].reorder(lp, lq, ln, lty, *reduction, lk, lt, lo)
    schedule[accumulators].unroll(lk)
    schedule[accumulators].unroll(lt)
    schedule[accumulators].vectorize(lo)

    # the input transform: per (input block, tile), its points in registers, from the
    # input's rows padded (those of the chunk's row of tiles, or all of them)
    p, q, dn, c, dty, t, i = schedule[data].op.axis
    schedule[data].reorder(dn, c, dty, t, p, q, i)
    if whole:
        schedule[data].parallel(schedule[data].fuse(dn, c, dty))
        schedule[pad].compute_at(schedule[data], schedule[data].leaf_iter_vars[0])
    else:
        schedule[data].compute_at(schedule[product], pty)
        schedule[pad].compute_at(schedule[data], dty)
    schedule[pad].vectorize(schedule[pad].op.axis[-1])
    schedule[data].unroll(q)
    schedule[data].vectorize(i)
    schedule[rows].compute_at(schedule[data], t)
    schedule[rows].set_scope("local")
    rp, rs, *_, ri = schedule[rows].op.axis
    schedule[rows].unroll(rp)
    schedule[rows].vectorize(ri)
