"""Graph passes: each a named function ``Graph -> Graph``, run by a PassManager."""

from .alter_layout import alter_layout, alter_layout_for
from .channel_gathers import channel_gathers
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .fuse_ops import fuse_ops, fused_functions, fusion_groups, post_dominators
from .infer_types import infer_types
from .int8_activations import uint8_to_int8
from .lookup_tables import lookup_tables
from .manager import PassManager, PassRecord, get_pass, register_pass
from .pool_constants import pool_constants
from .qoperator import expand_qoperator  # noqa: F401  (registers the pass)
from .quantize import (
    integer_average_pools,
    integer_concats,
    integer_global_average_pools,
    realize_qdq,
)
from .simplify import simplify

#: the default optimization pipeline, up to fusion
DEFAULT_PIPELINE = ("infer_types", "fold_constants", "simplify", "fold_batchnorm",
                    "fold_constants", "cse", "dce", "fuse_ops")

__all__ = ["DEFAULT_PIPELINE", "PassManager", "PassRecord", "alter_layout", "alter_layout_for",
           "channel_gathers",
           "eliminate_common_subexpressions",
           "eliminate_dead_code", "fold_batchnorm", "fold_constants", "fuse_ops",
           "fused_functions", "fusion_groups", "get_pass", "infer_types",
           "integer_average_pools", "integer_concats", "integer_global_average_pools",
           "lookup_tables", "pool_constants",
           "post_dominators",
           "realize_qdq", "register_pass", "simplify", "uint8_to_int8"]
