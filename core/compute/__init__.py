"""The compute library: TE computes for the ops of the registry.

Importing this package registers every compute (on ``OpDef.te_compute``).
"""

from . import (  # noqa: F401  (registrations)
    activation,
    channel_gather,
    elementwise,
    indexing,
    layout,
    lookup,
    nn,
    normalization,
    qnn,
    quantize,
    reduction,
    resize,
    sequence_models,
    signal,
    tensor,
)
from .registry import compute_of, has_compute, register_compute

__all__ = ["compute_of", "has_compute", "register_compute"]
