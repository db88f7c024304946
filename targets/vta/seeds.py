"""Real accelerator streams from the compiler, as seeds for the device boundary's
mutation fuzzer (``heterocc.accel_sim.fuzz``): a small CNN (convolutions with their
requantizing epilogues, a dense layer) quantized by the built-in calibrator and
compiled for the accelerator."""

from __future__ import annotations

import numpy as np

from heterocc.accel_sim.fuzz import Seed
from heterocc.sdk.runtime import compile_model, tiny_cnn

from . import VtaTarget


def tiny_cnn_seeds(size: int = 8, seed: int = 0) -> list[Seed]:
    """One seed per accelerator function of ``tiny_cnn(size=size)``, compiled for the
    default accelerator config (about a second to compile at size 8)."""
    rng = np.random.default_rng(seed)
    calibration = [[rng.standard_normal((1, 3, size, size)).astype(np.float32)]
                   for _ in range(2)]
    target = VtaTarget()
    compile_model(tiny_cnn(size=size), target=[target, "reference"],
                     calibration=calibration)
    return [Seed.from_program(kernel.name, kernel.program) for kernel in target.kernels]
