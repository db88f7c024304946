"""The run-time pieces a target's kernels, artifacts and bring-up use: the graph executor
and its device tensors, the NumPy reference interpreter, what a kernel offers to be
called in a native run (:class:`NativeEntry`, :class:`SequencePlan`), artifact member
paths, the reader of ``--input`` files, the fallback report, and the compiler's front door
(:func:`compile_model`, for a target's bring-up and search seeds; :func:`load_model`, an
ONNX model from a path or bytes, and :func:`from_onnx`, its Graph IR; :func:`tiny_cnn`, a
small model to run them on).

They are the compiler's own functions (``heterocc.runtime``, ``heterocc.driver``,
``heterocc.frontend``, ``heterocc.diagnostics``, ``heterocc.models``), gathered here so
that a target imports them from the SDK."""

from heterocc.diagnostics import report_fallback
from heterocc.driver import CompiledModel
from heterocc.driver import compile as compile_model
from heterocc.frontend.onnx import from_onnx, load_model
from heterocc.models import tiny_cnn
from heterocc.runtime.executor import DeviceTensor, GraphExecutor
from heterocc.runtime.files import member_path
from heterocc.runtime.inputs import load_input_files
from heterocc.runtime.interpreter import evaluate
from heterocc.runtime.native import NativeEntry, SequencePlan

__all__ = [
    "CompiledModel", "DeviceTensor", "GraphExecutor", "compile_model", "evaluate", "from_onnx",
    "NativeEntry", "SequencePlan", "load_input_files", "load_model", "member_path",
    "report_fallback", "tiny_cnn",
]
