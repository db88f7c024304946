"""The matmul, batch matmul and dense templates: B read through packed panels, register
tiles of C."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from heterocc.sdk import te
from heterocc.sdk.tuning import Config, ConfigSpace, Knob, Template, split_options

from ..cpu import active_cpu
from ..schedules import (
    default_panel,
    matmul_tile_rows,
    panel_group,
    ragged_panel_tail,
    reduction_unroll_limit,
    unroll_reduction,
    vector_lanes,
    vectorize_panel_columns,
)
from .common import _random_inputs

# ------------------------------------------------------------------ (batch) matmul, dense
#
# B is read through a packed copy [panels, k, panel] (zero-padded past column n) so that a
# register tile of C reads B contiguously; A's rows are broadcast one scalar at a time.


def _pack_columns(read_b: Callable, n: int, depth: int, panel: int, dtype: str,
                  name: str, batch: int | None = None) -> te.Tensor:
    """B packed into column panels; ``read_b(k, column[, b])`` reads one element of B."""
    panels = -(-n // panel)
    zero = te.const(0, dtype)

    def element(k, column, *batch_index):
        clamped = te.minimum(column, n - 1)
        return te.if_then_else(column < n, read_b(k, clamped, *batch_index), zero)

    if batch is None:
        return te.compute((panels, depth, panel),
                          lambda p, k, c: element(k, p * panel + c), name=name)
    return te.compute((batch, panels, depth, panel),
                      lambda b, p, k, c: element(k, p * panel + c, b), name=name)


def _panel_options(n: int, dtype: str) -> tuple[int, ...]:
    """Panel widths of B: one to six vectors of the active CPU, those that divide ``n``
    (a panel that does not leaves C's column tiles a guarded tail that cannot be
    vectorized: an order of magnitude slower), or every one that fits when none does;
    and the default schedule's (``schedules.default_panel``)."""
    lanes = vector_lanes(dtype, cpu=active_cpu())
    widths = [lanes * vectors for vectors in (1, 2, 3, 4, 6)]
    dividing = tuple(w for w in widths if n % w == 0)
    options = dividing or split_options(-(-n // lanes) * lanes, widths)
    return tuple(sorted({*options, default_panel(n, dtype, cpu=active_cpu())}))


def _matmul_space(args: tuple, batch: int = 1) -> ConfigSpace:
    """Register tile (rows x panel: rows of C x packed columns of B), the reduction's
    chunk (with ``accumulate="memory"`` the chunk loop runs outside the row tiles: cache
    blocking of B's panel), tile order, the panels a row tile meets in turn (with
    ``accumulate="registers"`` and ``panels_outer``: ``schedules.panel_group``), which
    tile loop runs in parallel, unrolling (of the tile's rows, and the most steps of its
    innermost reduction loop, up to ``unroll_k``, that divide the loop:
    ``schedules.unroll_reduction``)."""
    m, n, k, dtype = args[:4]
    default = _matmul_default_tiles(args, batch)
    return ConfigSpace((
        Knob("tile_rows", "split",
             split_options(m, (1, 2, 3, 4, 6, 8, 12, 16, default["tile_rows"]))),
        Knob("panel", "layout", _panel_options(n, dtype)),
        Knob("k_chunk", "split", split_options(k, (16, 64, 128, 256, 512, k))),
        Knob("accumulate", "order", ("registers", "memory")),
        Knob("loop_order", "order", ("panels_outer", "rows_outer")),
        Knob("panel_group", "split", _panel_group_options(n, dtype, default["panel_group"])),
        Knob("parallel", "parallel", ("outer", "inner", "none")),
        Knob("unroll_rows", "unroll", (True, False)),
        Knob("unroll_k", "unroll", split_options(k, (1, 2, 4, 8, 16, default["unroll_k"]))),
    ))


def _panel_group_options(n: int, dtype: str, default: int) -> tuple[int, ...]:
    """Panels per group: 1, 2, 4 or 8 where they divide the panel count of the narrowest
    panel (one vector), and the default's. A group that leaves a ragged last group
    lowers its columns as a guarded scalar loop: slow to run, and with the tile's rows and
    reduction unrolled LLVM takes minutes to optimize it (a [64, 48] x [48, 40] product in
    groups of 2 of 3 panels: over 60 s)."""
    panels = -(-n // vector_lanes(dtype, cpu=active_cpu()))
    dividing = [g for g in (1, 2, 4, 8) if panels % g == 0]
    return split_options(panels, (*dividing, default))


def _matmul_default_tiles(args: tuple, batch: int = 1) -> dict:
    """The default schedule's panel, rows, panel group and reduction unrolling for the
    workload ``args``."""
    m, n, k, dtype = args[:4]
    panel = default_panel(n, dtype, cpu=active_cpu())
    rows = matmul_tile_rows(m, panel, dtype, cpu=active_cpu())
    return {"panel": panel, "tile_rows": rows,
            "panel_group": panel_group(m, k, -(-n // panel), panel,
                                       np.dtype(dtype).itemsize, batch, cpu=active_cpu()),
            "unroll_k": min(k, reduction_unroll_limit(rows, panel, dtype, cpu=active_cpu()))}


def _matmul_default(args: tuple, batch: int = 1) -> dict:
    """The choices of ``targets.llvm.schedules.schedule_matmul``."""
    k = args[2]
    return {**_matmul_default_tiles(args, batch), "k_chunk": k, "accumulate": "registers",
            "loop_order": "panels_outer", "parallel": "outer", "unroll_rows": True}


def _matmul_upgrade(args: tuple, values: dict) -> dict:
    """A record written before the panel group knob or the reduction's unrolling: one
    panel per group, one reduction step per loop iteration (what its schedule did)."""
    values.setdefault("panel_group", 1)
    values.setdefault("unroll_k", 1)
    return values


def _closest(options: tuple, wanted: int):
    return min(options, key=lambda option: (abs(option - wanted), option))


def schedule_matmul_config(s: te.Schedule, C: te.Tensor, packed: te.Tensor,
                           config: Config) -> None:
    """Schedule a (batch) matmul ``C`` reading B through ``packed`` [.., panels, k, panel]
    by a ``matmul`` config: register-tile C by (tile_rows x panel) and accumulate each
    tile in a local buffer over the reduction split into k_chunk pieces, or straight into
    C with the chunk loop outside the row tiles (so a chunk of a B panel stays in cache
    while rows stream by). Leading axes of C (a batch) run outermost."""
    if isinstance(packed.op, te.ComputeOp):  # else a constant packed at build time
        pack_axes = s[packed].op.axis
        s[packed].parallel(pack_axes[0])
        s[packed].vectorize(pack_axes[-1])
    rows, panel = config["tile_rows"], config["panel"]
    if config["accumulate"] == "registers":
        local = s.cache_write(C, "local")
    *batch, i, j = s[C].op.axis
    io, ii = s[C].split(i, rows)
    jo, ji = s[C].split(j, panel)
    outer = [jo, io] if config["loop_order"] == "panels_outer" else [io, jo]
    if (config["accumulate"] == "registers" and config["loop_order"] == "panels_outer"
            and config["panel_group"] > 1):
        group, jo = s[C].split(jo, config["panel_group"])
        outer = [group, io, jo]  # a row tile meets the group's panels in turn
    if config["accumulate"] == "registers":
        s[C].reorder(*batch, *outer, ii, ji)
        s[local].compute_at(s[C], outer[-1])
        *local_batch, li, lj = s[local].op.axis
        (lk,) = s[local].op.reduce_axis
        chunk = min(config["k_chunk"], lk.extent)
        chunks = [lk] if chunk == lk.extent else list(s[local].split(lk, chunk))
        chunks[-1:] = unroll_reduction(s[local], chunks[-1], chunk, config["unroll_k"])
        s[local].reorder(*local_batch, *chunks, li, lj)
        tile_stage, tile_rows, tile_cols = s[local], li, lj
    else:
        (kk,) = s[C].op.reduce_axis
        ko, ki = s[C].split(kk, config["k_chunk"])
        inner = unroll_reduction(s[C], ki, min(config["k_chunk"], kk.extent),
                                 config["unroll_k"])
        s[C].reorder(*batch, outer[0], ko, outer[1], *inner, ii, ji)
        tile_stage, tile_rows, tile_cols = s[C], ii, ji
    if config["unroll_rows"]:
        # unrolled by LLVM, as schedule_matmul's rows: the same machine code from a
        # TIR that does not repeat the body once per row
        if config["accumulate"] == "registers":
            s[C].unroll(ii, explicit=False)
        tile_stage.unroll(tile_rows, explicit=False)
    ragged = ragged_panel_tail(C.shape[-1], panel, C.dtype, cpu=active_cpu())
    vectorize_panel_columns(tile_stage, tile_cols, ragged, C.dtype, cpu=active_cpu())
    if config["accumulate"] == "registers":
        vectorize_panel_columns(s[C], ji, ragged, C.dtype, cpu=active_cpu())
    if config["parallel"] == "outer":
        s[C].parallel(batch[0] if batch else outer[0])
    elif config["parallel"] == "inner":
        s[C].parallel(outer[1])


def _instantiate_matmul(args: tuple, config: Config, transpose_b: bool = False):
    m, n, k, dtype = args
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((n, k) if transpose_b else (k, n), dtype, "B")
    panel = config["panel"]
    packed = _pack_columns((lambda r, c: B[c, r]) if transpose_b else (lambda r, c: B[r, c]),
                           n, k, panel, dtype, "B.packed")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * packed[j // panel, r, j % panel],
                                               axis=r), name="C")
    s = te.create_schedule(C)
    schedule_matmul_config(s, C, packed, config)
    return s, [A, B, C]


def _matmul_inputs(args, rng, transpose_b: bool = False):
    m, n, k, dtype = args
    return _random_inputs([(m, k), (n, k) if transpose_b else (k, n)], dtype, rng)


def _matmul_reference(args, inputs, transpose_b: bool = False):
    a, b = inputs
    return a @ (b.T if transpose_b else b)


def _matmul_flops(args) -> int:
    m, n, k = args[:3]
    return 2 * m * n * k


MATMUL = Template(
    "matmul", "llvm", _matmul_space, _matmul_default, _instantiate_matmul, _matmul_inputs,
    _matmul_reference, _matmul_flops, upgrade=_matmul_upgrade)


def _batch_space(args: tuple) -> ConfigSpace:
    batch, m, n, k, dtype = args
    return _matmul_space((m, n, k, dtype), batch)


def _batch_default(args: tuple) -> dict:
    batch, m, n, k, dtype = args
    return _matmul_default((m, n, k, dtype), batch)


def _batch_upgrade(args: tuple, values: dict) -> dict:
    return _matmul_upgrade(args[1:], values)


def _instantiate_batch_matmul(args: tuple, config: Config):
    batch, m, n, k, dtype = args
    A = te.placeholder((batch, m, k), dtype, "A")
    B = te.placeholder((batch, k, n), dtype, "B")
    panel = config["panel"]
    packed = _pack_columns(lambda r, c, b: B[b, r, c], n, k, panel, dtype, "B.packed", batch)
    r = te.reduce_axis(k, "k")
    C = te.compute((batch, m, n),
                   lambda b, i, j: te.sum(A[b, i, r] * packed[b, j // panel, r, j % panel],
                                          axis=r), name="C")
    s = te.create_schedule(C)
    schedule_matmul_config(s, C, packed, config)
    return s, [A, B, C]


BATCH_MATMUL = Template(
    "batch_matmul", "llvm", _batch_space, _batch_default, _instantiate_batch_matmul,
    lambda args, rng: _random_inputs([args[:2] + (args[3],), (args[0], args[3], args[2])],
                                     args[4], rng),
    lambda args, inputs: np.matmul(*inputs),
    lambda args: 2 * math.prod(args[:4]), upgrade=_batch_upgrade)


#: dense is ``X @ W.T`` (ONNX Gemm with transB, a fully connected layer): the same
#: template, packing W's rows as B's columns.
DENSE = Template(
    "dense", "llvm", _matmul_space, _matmul_default,
    functools.partial(_instantiate_matmul, transpose_b=True),
    functools.partial(_matmul_inputs, transpose_b=True),
    functools.partial(_matmul_reference, transpose_b=True), _matmul_flops,
    upgrade=_matmul_upgrade)


