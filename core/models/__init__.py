"""Bundled example models, built in code with onnx.helper (seeded weights)."""

from .tiny_cnn import tiny_cnn
from .zoo import conv_chain, encoder_layer, mobilenet_v2, resnet18

__all__ = ["conv_chain", "encoder_layer", "mobilenet_v2", "resnet18", "tiny_cnn"]
