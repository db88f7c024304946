"""PyTorch entry points (the optional extra ``heterocc[torch]``): a module compiled through
torch's ONNX export, and a ``torch.compile`` backend.

    import heterocc.torch
    fast = heterocc.torch.compile(model.eval(), (x,), target="llvm")
    y = fast(x)                                    # torch tensors in, torch tensors out

    opt = torch.compile(model, backend=heterocc.torch.backend)   # or backend="heterocc"
    opt = torch.compile(model, backend=heterocc.torch.make_backend(target="vta,llvm",
                                                                   calibration=samples))

Both export with torch's TorchScript-based ONNX exporter (opset 17; every module
torchvision ships exports with it), compile the ONNX model with ``heterocc.compile`` (its
keyword arguments pass through: ``calibration`` quantizes to int8 for ``vta,llvm``) and
run it on NumPy copies of the tensors. The shapes are those of ``example_inputs``; a
``torch.compile`` backend recompiles when dynamo sees new ones.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from .driver import CompiledModel
from .driver import compile as compile_onnx
from .errors import InputError

#: the ONNX opset the export asks for
OPSET = 17


def _torch():
    try:
        import torch
    except ImportError:
        raise InputError("heterocc.torch needs PyTorch: pip install 'heterocc[torch]'") from None
    return torch


def export_onnx(module, example_inputs: Sequence, opset: int = OPSET) -> bytes:
    """``module`` exported to ONNX on ``example_inputs`` (a tuple of tensors): inputs
    ``input_0``, ``input_1``, ... and outputs ``output_0``, ... in order."""
    torch = _torch()
    inputs = tuple(example_inputs)
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise InputError("heterocc.torch: example_inputs must be a tuple of tensors, got "
                         f"{[type(x).__name__ for x in inputs]}")
    with torch.no_grad():
        sample = module(*inputs)
    count = len(sample) if isinstance(sample, tuple | list) else 1
    buffer = io.BytesIO()
    # the TorchScript exporter: the torch.export-based one rejects some FX graphs dynamo
    # hands a backend, and needs onnxscript
    kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy exporter, on purpose
        torch.onnx.export(module, inputs, buffer, opset_version=opset,
                          input_names=[f"input_{i}" for i in range(len(inputs))],
                          output_names=[f"output_{i}" for i in range(count)], **kwargs)
    return buffer.getvalue()


class CompiledModule:
    """A torch module compiled by heterocc: call it with tensors (as the module); the
    heterocc model is ``compiled`` (its ``placement_report``, ``profile_report``...)."""

    def __init__(self, compiled: CompiledModel, returns_sequence: bool):
        self.compiled = compiled
        self.returns_sequence = returns_sequence

    def __call__(self, *inputs):
        torch = _torch()
        arrays = [x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
                  for x in inputs]
        outputs = [torch.from_numpy(np.ascontiguousarray(y))
                   for y in self.compiled.run(arrays)]
        return tuple(outputs) if self.returns_sequence else outputs[0]


def compile(module, example_inputs: Sequence, target="llvm",  # noqa: A001
            **options) -> CompiledModule:
    """``module`` (in eval mode) compiled for ``target`` through its ONNX export on
    ``example_inputs``; ``options`` go to :func:`heterocc.compile` (e.g.
    ``calibration=[(x,), ...]`` for int8)."""
    torch = _torch()
    with torch.no_grad():
        sample = module(*tuple(example_inputs))
    compiled = compile_onnx(export_onnx(module, example_inputs), target=target, **options)
    return CompiledModule(compiled, isinstance(sample, tuple | list))


def make_backend(target="llvm", **options) -> Callable:
    """A ``torch.compile`` backend compiling each graph dynamo captures for ``target``
    (``options`` as :func:`heterocc.compile` takes them)."""

    def heterocc_backend(graph_module, example_inputs):
        """Compile one graph dynamo captured (a ``torch.fx.GraphModule``) on its example
        inputs; the result is called with the graph's inputs."""
        # the module returns what the graph does (dynamo's graphs return tuples)
        return compile(graph_module, tuple(example_inputs), target=target, **options)

    return heterocc_backend


#: ``torch.compile(model, backend=heterocc.torch.backend)``: the host CPU (``llvm``);
#: registered with dynamo as ``backend="heterocc"`` through the ``torch_dynamo_backends``
#: entry point
backend = make_backend()
