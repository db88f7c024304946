"""Op definitions. Importing this package registers every op."""

from . import (  # noqa: F401  (registration side effects)
    activation,
    channel_gather,
    control_flow,
    elementwise,
    indexing,
    layout,
    lookup,
    nn,
    normalization,
    qlinear_contrib,
    qnn,
    quantize,
    reduction,
    resize,
    sequence_models,
    signal,
    strings,
    tensor,
)
from .registry import (
    DEFAULT_DOMAINS,
    MS_DOMAIN,
    REQUIRED,
    FusionKind,
    InferContext,
    OpDef,
    ShapeOperandError,
    all_ops,
    get_op,
    has_op,
    infer_node_types,
    op_key,
    register_op,
)

__all__ = ["DEFAULT_DOMAINS", "MS_DOMAIN", "REQUIRED", "FusionKind", "InferContext", "OpDef",
           "ShapeOperandError", "all_ops", "get_op", "has_op", "infer_node_types", "op_key",
           "register_op"]
