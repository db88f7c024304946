"""Model importers."""

from .onnx import DynamicShapeError, SpecializationNeeded, from_onnx, load_model

__all__ = ["DynamicShapeError", "SpecializationNeeded", "from_onnx", "load_model"]
