"""CPU schedules of the LLVM target.

``pack_matmul`` rewrites the compute library's plain product to read B through column
panels one register tile wide (so the micro-kernel reads B contiguously): packing is
this target's decision, taken before scheduling. ``schedule_matmul`` gives the product
a register-tiled, vectorized, parallel schedule: each (row tile, column panel)
accumulates in a local ``tile_rows() x panel`` buffer that LLVM keeps in vector
registers, with one FMA per vector per step of the reduction, and can finish each tile
with the function's elementwise epilogue; a constant B is packed once, by NumPy, when
the kernel is built (:func:`pack_columns`, :func:`use_prepacked`). ``schedule_conv2d_nchw``
tiles a direct convolution the same way, over output channels and output columns
(grouped and depthwise ones too), and can finish each tile with the function's
elementwise epilogue.

``schedule_injective`` runs an elementwise/injective stage as one flat loop cut into
vectors (and into parallel chunks when it is large); ``schedule_reduction`` runs the
output points of a reduction in parallel, each reduced by an inner loop that LLVM
vectorizes (float reductions are reassociable).

One module per kind: :mod:`.common` (tile sizes from the CPU description, the
injective, row and reduction schedules), :mod:`.direct_conv` (NCHW convolutions),
:mod:`.blocked_conv` (NCHW[x]c convolutions, dense and depthwise), :mod:`.pool`
(NCHW[x]c pooling), :mod:`.channel_blocks` (blocked concatenations and what is fused
after them), :mod:`.matmul` (packing and the products' schedules),
:mod:`.int8_conv` (integer convolutions on the CPU's 8-bit dot product),
:mod:`.int8_depthwise` (integer depthwise ones) and :mod:`.int8_rewrite` (which
``ConvInteger`` computes take them).
"""

from __future__ import annotations

from .blocked_conv import (
    BLOCKED_CONV_ACCUMULATOR_SHARE,
    BLOCKED_CONV_BROADCASTS_PER_REGISTER,
    BLOCKED_CONV_MAX_CHANNEL_BLOCKS,
    BLOCKED_CONV_MAX_COLUMNS,
    BLOCKED_CONV_PAIRED_COLUMNS,
    BLOCKED_CONV_WEIGHT_VECTORS,
    DEPTHWISE_MAX_COLUMNS,
    DEPTHWISE_MIN_COLUMNS,
    DEPTHWISE_PARALLEL_MIN_VECTOR_MULADDS,
    BlockedConvTiles,
    DepthwiseConvTiles,
    blocked_conv_columns,
    default_block_unroll,
    default_blocked_conv_tiles,
    default_depthwise_conv_tiles,
    dense_conv_channel_blocks,
    dense_conv_column_limit,
    dense_conv_reduction_blocks,
    depthwise_conv_tile,
    looped_window_columns,
    one_block_columns,
    one_block_tile_columns,
    pointwise_conv_tile,
    schedule_conv2d_nchwc,
    schedule_depthwise_conv2d_nchwc,
    window_shares_inputs,
)
from .channel_blocks import schedule_channel_blocks, split_at_channel_selects
from .common import (
    OPERAND_REGISTERS,
    PANEL_VECTORS,
    PARALLEL_MIN_ELEMENTS,
    TASKS_PER_CORE,
    PanelChoice,
    even_tiles,
    panel_vectors,
    schedule_injective,
    schedule_reduction,
    schedule_rows,
    tile_rows,
    vector_lanes,
)
from .contiguous import (
    contiguous_suffix,
    injective_rows,
    reduction_blocks,
    schedule_contiguous_rows,
)
from .direct_conv import (
    CONV_TILE_CHANNELS,
    DEPTHWISE_TILE_CHANNELS,
    conv_tile_channels,
    conv_tile_columns,
    schedule_conv2d_nchw,
)
from .int8_conv import (
    WIDENED_WEIGHT_PACKING,
    Int8ChannelTiles,
    Int8ConvTiles,
    channel_lanes_tiles,
    int8_conv,
    int8_conv_inputs,
    int8_conv_packings,
    int8_conv_tiles,
    pack_int8_weight_array,
    packed_weight_dtype,
    packed_weight_shape,
    schedule_int8_conv,
    schedule_int8_conv_result,
    weight_dtype,
)
from .int8_depthwise import (
    CENTERED,
    DEPTHWISE_PACKINGS,
    WEIGHT_PAIRS,
    WEIGHT_PLANE,
    WEIGHT_QUADS,
    Int8DepthwiseTiles,
    depthwise_data,
    depthwise_weight,
    depthwise_weight_packing,
    int8_depthwise_conv,
    int8_depthwise_tiles,
    pack_depthwise_weight_array,
    pack_weight_lanes_array,
    schedule_int8_depthwise,
    weight_lanes_shape,
)
from .int8_rewrite import int8_conv_operands, use_int8_conv, use_int8_convs
from .matmul import (
    MATMUL_UNROLLED_MULADDS,
    default_panel,
    matmul,
    matmul_function,
    matmul_tile_rows,
    pack_columns,
    pack_matmul,
    pack_matmul_rows,
    pack_matmuls,
    packed_source,
    panel_group,
    panel_width,
    ragged_panel_tail,
    reachable_computes,
    reduction_steps,
    reduction_unroll_limit,
    schedule_matmul,
    schedule_packed_rows,
    unroll_reduction,
    use_prepacked,
    vectorize_panel_columns,
)
from .matmul import (
    _matmul_loads as _matmul_loads,
)
from .pool import (
    schedule_pool_nchw,
    schedule_pool_nchwc,
)

__all__ = [
    "BLOCKED_CONV_ACCUMULATOR_SHARE",
    "BLOCKED_CONV_BROADCASTS_PER_REGISTER",
    "BLOCKED_CONV_MAX_CHANNEL_BLOCKS",
    "BLOCKED_CONV_MAX_COLUMNS",
    "BLOCKED_CONV_PAIRED_COLUMNS",
    "BLOCKED_CONV_WEIGHT_VECTORS",
    "BlockedConvTiles",
    "CONV_TILE_CHANNELS",
    "DEPTHWISE_MAX_COLUMNS",
    "DEPTHWISE_MIN_COLUMNS",
    "DEPTHWISE_PARALLEL_MIN_VECTOR_MULADDS",
    "DEPTHWISE_TILE_CHANNELS",
    "DepthwiseConvTiles",
    "Int8ConvTiles",
    "Int8DepthwiseTiles",
    "MATMUL_UNROLLED_MULADDS",
    "OPERAND_REGISTERS",
    "PANEL_VECTORS",
    "PARALLEL_MIN_ELEMENTS",
    "PanelChoice",
    "TASKS_PER_CORE",
    "blocked_conv_columns",
    "contiguous_suffix",
    "conv_tile_channels",
    "conv_tile_columns",
    "default_block_unroll",
    "default_blocked_conv_tiles",
    "default_depthwise_conv_tiles",
    "default_panel",
    "dense_conv_channel_blocks",
    "injective_rows",
    "reduction_blocks",
    "dense_conv_column_limit",
    "dense_conv_reduction_blocks",
    "depthwise_conv_tile",
    "depthwise_data",
    "depthwise_weight",
    "CENTERED",
    "pack_weight_lanes_array",
    "pack_depthwise_weight_array",
    "depthwise_weight_packing",
    "WEIGHT_QUADS",
    "DEPTHWISE_PACKINGS",
    "WEIGHT_PAIRS",
    "WEIGHT_PLANE",
    "weight_lanes_shape",
    "even_tiles",
    "int8_conv",
    "int8_conv_inputs",
    "int8_conv_packings",
    "int8_conv_operands",
    "int8_conv_tiles",
    "int8_depthwise_conv",
    "int8_depthwise_tiles",
    "matmul",
    "matmul_function",
    "matmul_tile_rows",
    "one_block_columns",
    "looped_window_columns",
    "one_block_tile_columns",
    "window_shares_inputs",
    "pack_columns",
    "pack_int8_weight_array",
    "weight_dtype",
    "packed_weight_dtype",
    "WIDENED_WEIGHT_PACKING",
    "channel_lanes_tiles",
    "Int8ChannelTiles",
    "pack_matmul",
    "pack_matmul_rows",
    "pack_matmuls",
    "packed_source",
    "packed_weight_shape",
    "panel_group",
    "panel_vectors",
    "panel_width",
    "pointwise_conv_tile",
    "ragged_panel_tail",
    "reachable_computes",
    "reduction_steps",
    "reduction_unroll_limit",
    "schedule_channel_blocks",
    "schedule_contiguous_rows",
    "schedule_conv2d_nchw",
    "schedule_conv2d_nchwc",
    "schedule_depthwise_conv2d_nchwc",
    "schedule_injective",
    "schedule_int8_conv",
    "schedule_int8_conv_result",
    "schedule_int8_depthwise",
    "schedule_matmul",
    "schedule_packed_rows",
    "schedule_pool_nchw",
    "schedule_pool_nchwc",
    "schedule_reduction",
    "schedule_rows",
    "split_at_channel_selects",
    "tile_rows",
    "unroll_reduction",
    "use_prepacked",
    "vector_lanes",
    "vectorize_panel_columns",
    "use_int8_conv",
    "use_int8_convs",
]
