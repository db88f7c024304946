"""Tensors stored outside the model file (ONNX external data), read relative to the model.

An ONNX model may keep its tensors in side files (``X.onnx.data``, what torch's dynamo
exporter and ``onnx.save_model(..., save_as_external_data=True)`` write), each entry
naming its file *relative to the model's folder*. They are read here, from that folder
wherever the process runs, into the ModelProto, so that the checker and the importer
see an ordinary self-contained model. A location that would leave the folder (an
absolute path, ``..``, a symbolic link pointing out of it) is refused: a model file must
not make the compiler read arbitrary files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import onnx
from onnx import external_data_helper

from ..errors import ModelLoadError


def external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of ``model`` (initializers and attribute tensors, subgraphs included)
    whose data lives in an external file."""
    for tensor in external_data_helper._get_all_tensors(model):
        if external_data_helper.uses_external_data(tensor):
            yield tensor


def _location(tensor: onnx.TensorProto) -> str:
    return next((entry.value for entry in tensor.external_data if entry.key == "location"), "")


def resolve_location(tensor: onnx.TensorProto, base_dir: str) -> str:
    """The real path of ``tensor``'s external file under ``base_dir``, or ModelLoadError
    naming the tensor when the location is missing, leaves the folder or is no regular
    file."""
    location = _location(tensor)
    where = f"tensor {tensor.name!r} keeps its data in external file {location!r}"
    if not location:
        raise ModelLoadError(f"tensor {tensor.name!r} is marked as external data but names "
                             "no location")
    if os.path.isabs(location) or os.path.splitdrive(location)[0]:
        raise ModelLoadError(f"{where}: an absolute path; external data must be named "
                             "relative to the model's folder")
    folder = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(folder, location))
    if os.path.commonpath([folder, path]) != folder:
        raise ModelLoadError(f"{where}, which leaves the model's folder {folder!r} "
                             f"(resolves to {path!r}); keep external data files beside "
                             "the model")
    if not os.path.isfile(path):
        raise ModelLoadError(f"{where}, which is not a regular file in {folder!r}; copy it "
                             "beside the model")
    return path


def load_external_data(model: onnx.ModelProto, base_dir: str) -> onnx.ModelProto:
    """``model`` with every external tensor read from its file relative to ``base_dir``
    (the model file's folder), in place; ModelLoadError naming the tensor on a location
    that leaves the folder or data that does not fit its file."""
    for tensor in external_tensors(model):
        resolve_location(tensor, base_dir)
        try:
            external_data_helper.load_external_data_for_tensor(tensor, base_dir)
        except Exception as exc:  # onnx raises ValueError / OSError / its C++ errors
            raise ModelLoadError(f"cannot read the external data of tensor {tensor.name!r} "
                                 f"({_location(tensor)!r} in {base_dir!r}): {exc}") from None
    return model
