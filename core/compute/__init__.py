"""The compute library: TE computes for the ops of the registry.

Importing this package registers every compute (on ``OpDef.te_compute``).
"""

from . import (  # noqa: F401  (registrations)
    activation,
    attention,
    einsum,
    elementwise,
    indexing,
    layout,
    linalg,
    loss,
    nn,
    nn_dynamic,
    nn_extra,
    normalization,
    quantize,
    recurrent,
    reduction,
    sampling,
    scatter,
    signal,
    tensor,
    topk,
)
from .registry import compute_of, has_compute, register_compute

__all__ = ["compute_of", "has_compute", "register_compute"]
