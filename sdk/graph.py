"""The graph-level pieces a target's own passes and lowerings use: the compile pipeline and
pass manager (a target's ``graph_passes`` run in it), the layout pass a target chooses its
layout with, the TE computes of the op inventory, and the geometry helpers of the ops a
target lowers (convolution, pooling, blocked convolution, quantized zero points, the
order of a LookupTable's entries), an op's definition (``get_op``: its attributes
normalized as the importer does), and ``outline`` (nodes made one function node, as the
compiler's fusion makes them: a cost model times what the build will compile).

They are the compiler's own functions (``heterocc.passes``, ``heterocc.ops``,
``heterocc.compute``), gathered here so that a target imports them from the SDK."""

from heterocc.compute import compute_of
from heterocc.compute.nn import matmul
from heterocc.ops import get_op
from heterocc.ops.layout import blocked_conv_geometry, blocked_conv_input_shape, conv_nchwc
from heterocc.ops.lookup import TABLE_ENTRIES, TABLE_OFFSET
from heterocc.ops.macs import multiply_accumulates
from heterocc.ops.nn import conv_geometry, pool_geometry
from heterocc.ops.qnn import zero_point_bias
from heterocc.passes import DEFAULT_PIPELINE
from heterocc.passes.alter_layout import alter_layout_for
from heterocc.passes.manager import PassManager
from heterocc.passes.pipeline import run_pipeline, target_graph_passes
from heterocc.passes.rewrite import outline

__all__ = [
    "DEFAULT_PIPELINE", "TABLE_ENTRIES", "TABLE_OFFSET", "PassManager", "alter_layout_for",
    "blocked_conv_geometry", "blocked_conv_input_shape", "compute_of", "conv_geometry",
    "conv_nchwc", "get_op", "matmul",
    "multiply_accumulates", "outline", "pool_geometry", "run_pipeline", "target_graph_passes",
    "zero_point_bias",
]
