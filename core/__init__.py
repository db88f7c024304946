"""heterocc: a deep-learning compiler SDK (ONNX in; CPU, CUDA and accelerator code out).

    import heterocc
    model = heterocc.compile("model.onnx", target="llvm")
    outputs = model.run({"input": x})
"""

__version__ = "0.1.0"

from . import errors  # noqa: E402
from .driver import CompiledModel, compile  # noqa: E402
from .frontend.onnx import from_onnx  # noqa: E402
from .runtime.artifact import LoadedModel  # noqa: E402
from .runtime.artifact import load_artifact as load  # noqa: E402
from .session import InferenceSession, NodeArg  # noqa: E402

__all__ = ["CompiledModel", "InferenceSession", "LoadedModel", "NodeArg", "__version__",
           "compile", "errors", "from_onnx", "load"]
