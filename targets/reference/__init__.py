"""The reference target: runs every function on the ops' NumPy references.

It accepts everything, compiles nothing, and is the semantics every other
target is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heterocc.ir.graph import Node
from heterocc.sdk import Kernel, register_target
from heterocc.sdk.runtime import evaluate


@dataclass
class ReferenceTarget:
    """Interprets function bodies with NumPy."""

    name: str = "reference"

    def build(self, function: Node) -> Kernel:
        body = function.body

        def kernel(args: Sequence[np.ndarray]) -> list[np.ndarray]:
            return evaluate(body, args)

        return kernel


register_target("reference", ReferenceTarget, "NumPy reference implementations (the oracle)")
