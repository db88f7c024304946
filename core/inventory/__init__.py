"""The operator inventory: TE computes for the ops of the registry.

Importing this package registers every compute (on ``OpDef.te_compute``).
"""

from . import elementwise, nn, tensor  # noqa: F401  (registration side effects)
from .registry import compute_of, has_compute, register_compute

__all__ = ["compute_of", "has_compute", "register_compute"]
