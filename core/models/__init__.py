"""Bundled example models, built in code with onnx.helper (seeded weights)."""

from .tiny_cnn import tiny_cnn
from .zoo import encoder_layer, mobilenet_v2, resnet18

__all__ = ["encoder_layer", "mobilenet_v2", "resnet18", "tiny_cnn"]
