"""An ``InferenceSession`` as ONNX Runtime users know it, over heterocc's compiled models.

    sess = heterocc.InferenceSession("model.onnx", target="vta,llvm")
    name = sess.get_inputs()[0].name
    (probabilities,) = sess.run(["probabilities"], {name: x})   # None: every output

It takes a model (path, bytes or ModelProto: compiled with ``heterocc.compile`` and its
keyword arguments), an exported artifact directory (loaded with ``heterocc.load``), or a
model heterocc already compiled or loaded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .driver import CompiledModel, compile
from .errors import InputError
from .ir.types import dtype_from_onnx
from .runtime.artifact import LoadedModel, load_artifact


@dataclass(frozen=True)
class NodeArg:
    """An input or output of the session: ``name``, ``shape`` (ints, or strings for
    symbolic dimensions) and ``type`` in ONNX Runtime's spelling (``tensor(float)``)."""

    name: str
    shape: list
    type: str


#: heterocc dtype names -> ONNX Runtime's type strings where they differ
_ORT_TYPE = {"float32": "float", "float64": "double", "bool": "bool"}


def _ort_type(dtype: str) -> str:
    return f"tensor({_ORT_TYPE.get(dtype, dtype)})"


def _outputs_of(model) -> list[NodeArg]:
    """The outputs' names, shapes and types: from the ONNX model a compiled model keeps,
    or from the graph of a loaded artifact."""
    proto = getattr(model, "model", None)
    if proto is not None:
        args = []
        for vi in proto.graph.output:
            tt = vi.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                     for d in tt.shape.dim]
            args.append(NodeArg(vi.name, shape, _ort_type(dtype_from_onnx(tt.elem_type))))
        return args
    return [NodeArg(name, list(v.type.shape), _ort_type(v.type.dtype))
            for name, v in zip(model.output_names, model.graph.outputs)]


class InferenceSession:
    """``get_inputs()``, ``get_outputs()`` and ``run(output_names, feeds)`` over a model
    compiled for ``target`` (keyword arguments go to ``heterocc.compile``). ``model``
    (the compiled or loaded model) offers the rest: ``placement_report``,
    ``profile_report``, ``warnings``..."""

    def __init__(self, model, target="llvm", **compile_options):
        if isinstance(model, CompiledModel | LoadedModel):
            self.model = model
        elif isinstance(model, str | os.PathLike) and os.path.isdir(model):
            if compile_options or target != "llvm":
                raise InputError(f"{model} is an artifact: it runs the code it was compiled "
                                 "to; compile the ONNX model to choose targets or options")
            self.model = load_artifact(str(model))
        else:
            self.model = compile(model, target=target, **compile_options)
        self._outputs = _outputs_of(self.model)

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs, in order."""
        return [NodeArg(s.name, list(s.shape), _ort_type(s.dtype)) for s in self.model.inputs]

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs, in order."""
        return list(self._outputs)

    def run(self, output_names: Sequence[str] | None,
            input_feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs named in ``output_names`` (None or empty: all, in order) for the
        inputs in ``input_feed`` (arrays by input name)."""
        names = list(self.model.output_names)
        wanted = list(output_names) if output_names else names
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise InputError(f"unknown output(s) {', '.join(unknown)}; the model's outputs "
                             f"are {', '.join(names)}")
        outputs = dict(zip(names, self.model.run(dict(input_feed))))
        return [outputs[n] for n in wanted]
