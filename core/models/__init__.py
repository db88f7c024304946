"""Bundled example models, built in code with onnx.helper (seeded weights)."""

from .tiny_cnn import tiny_cnn

__all__ = ["tiny_cnn"]
