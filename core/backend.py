"""The ONNX Backend API (``prepare``, ``run_model``, ``supports_device``) over heterocc.

    import heterocc.backend as backend
    rep = backend.prepare(model, "CPU", target="reference")
    outputs = rep.run([x])

Keyword arguments of ``prepare`` / ``run_model`` go to :func:`heterocc.compile`
(``target=``, ``shapes=``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from onnx.backend.base import Backend, BackendRep

from .driver import CompiledModel, compile
from .sdk.registry import available_targets


class HeteroccRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the outputs as a list."""

    def __init__(self, compiled: CompiledModel):
        self.compiled = compiled

    def run(self, inputs, **kwargs) -> list[np.ndarray]:
        if isinstance(inputs, Mapping):
            return self.compiled.run(dict(inputs))
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return self.compiled.run(list(inputs))


_DEVICES = {"CPU": ("llvm", "reference"), "CUDA": ("cuda",)}


class HeteroccBackend(Backend):
    """ONNX backend running models through heterocc."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        kind = str(device).split(":")[0].upper()
        return any(t in available_targets() for t in _DEVICES.get(kind, ()))

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> HeteroccRep:
        kwargs.setdefault("target", _default_target(device))
        return HeteroccRep(compile(model, **kwargs))

    @classmethod
    def run_model(cls, model, inputs: Sequence[np.ndarray], device: str = "CPU",
                  **kwargs) -> list[np.ndarray]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        raise NotImplementedError("run_node: build a one-node model and use run_model")


def _default_target(device: str) -> str:
    kind = str(device).split(":")[0].upper()
    for name in _DEVICES.get(kind, ("reference",)):
        if name in available_targets():
            return name
    return "reference"


prepare = HeteroccBackend.prepare
run_model = HeteroccBackend.run_model
supports_device = HeteroccBackend.supports_device
