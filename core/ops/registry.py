"""The op registry: every op is defined once, with its type inference, its NumPy
reference implementation (the oracle of every test), its fusion kind, its
attributes with their defaults, and (filled in by the compute library) its
tensor-expression compute.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TypeInferenceError
from ..ir.types import TensorType


class FusionKind(enum.IntEnum):
    """How an op may be fused (ordered as in the TVM paper: lower fuses more freely)."""

    ELEMWISE = 0  #: one output element from the same element of each input
    BROADCAST = 1  #: elementwise with NumPy broadcasting
    INJECTIVE = 2  #: each output element from one input element (reshape, transpose, slice)
    REDUCTION = 3  #: reduces axes (sum, max, softmax, pooling)
    OUT_FUSABLE = 4  #: complex op that takes an elementwise epilogue (conv2d, dense)
    OPAQUE = 8  #: never fused (data-dependent, control flow, sorting)


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: default of an attribute the model must give.
REQUIRED: Any = _Required()

#: the ONNX domain names of the standard operator set
DEFAULT_DOMAINS = ("", "ai.onnx")
#: ONNX Runtime's contrib operator domain
MS_DOMAIN = "com.microsoft"


def op_key(op_type: str, domain: str = "") -> str:
    """The registry's (and the Graph IR's) name of ONNX op ``op_type`` of ``domain``.

    Standard ops keep their ONNX name; an op of another domain is qualified by
    it (``com.microsoft.QLinearAdd``), so ops of different domains never clash.
    """
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


class ShapeOperandError(TypeInferenceError):
    """A shape-like operand (Reshape's shape, Pad's pads, ...) is not a constant.

    The compiler answers it by specializing the model on the run-time values of
    the graph inputs behind ``value_index``.
    """

    def __init__(self, op: str, index: int):
        self.op = op
        self.value_index = index
        super().__init__(f"{op}: input {index} decides the output shape but is not a constant")


@dataclass
class InferContext:
    """What type inference of one node sees.

    ``types[i]`` is the type of input i (None if omitted), ``values[i]`` its
    contents when it is a constant.
    """

    op: str
    types: list[TensorType | None]
    values: list[np.ndarray | None]
    attrs: dict[str, Any]
    num_outputs: int
    node: str = ""

    def has(self, i: int) -> bool:
        """Whether optional input ``i`` was given."""
        return i < len(self.types) and self.types[i] is not None

    def type(self, i: int) -> TensorType:
        if not self.has(i):
            raise self.error(f"input {i} is required")
        return self.types[i]

    def value(self, i: int) -> np.ndarray:
        """The constant contents of input ``i`` (raises ShapeOperandError if not constant)."""
        if not self.has(i):
            raise self.error(f"input {i} is required")
        if self.values[i] is None:
            raise ShapeOperandError(self.op, i)
        return self.values[i]

    def error(self, message: str) -> TypeInferenceError:
        where = f" (node {self.node!r})" if self.node else ""
        return TypeInferenceError(f"{self.op}{where}: {message}")


InferFn = Callable[[InferContext], Sequence[TensorType]]


@dataclass
class OpDef:
    """The one definition of an op.

    ``name`` is the op's name in the Graph IR: its ONNX ``op_type``, qualified by
    its ``domain`` unless that is the standard one (see :func:`op_key`).
    """

    name: str
    reference: Callable[..., Any]
    infer: InferFn
    fusion_kind: FusionKind
    attrs: dict[str, Any] = field(default_factory=dict)
    #: input positions whose *values* (not only types) decide the output types
    shape_operands: tuple[int, ...] = ()
    #: the TE compute, set by the compute library; None: not compiled yet
    te_compute: Callable[..., Any] | None = None
    doc: str = ""
    #: the ONNX domain the op belongs to ("" for the standard operator set)
    domain: str = ""

    @property
    def input_names(self) -> tuple[str, ...] | None:
        """The op's inputs in order (optional ones included), from its reference's
        signature; None for a variadic op (Concat, Sum, ...)."""
        parameters = inspect.signature(self.reference).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters):
            return None
        return tuple(p.name for p in parameters if p.name not in self.attrs
                     and p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                    inspect.Parameter.POSITIONAL_OR_KEYWORD))

    @property
    def op_type(self) -> str:
        """The ONNX op_type (the name without its domain)."""
        return self.name[len(self.domain) + 1:] if self.domain else self.name

    def normalize_attrs(self, attrs: dict[str, Any], node: str = "") -> dict[str, Any]:
        """Attributes with defaults filled in; unknown or missing ones are errors."""
        where = f" (node {node!r})" if node else ""
        unknown = sorted(set(attrs) - set(self.attrs))
        if unknown:
            raise TypeInferenceError(
                f"{self.name}{where}: unknown attribute(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(self.attrs)) or 'none'}")
        out = {}
        for key, default in self.attrs.items():
            if key in attrs:
                out[key] = attrs[key]
            elif default is REQUIRED:
                raise TypeInferenceError(f"{self.name}{where}: attribute {key!r} is required")
            else:
                out[key] = default
        return out

    def run(self, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any]) -> list[np.ndarray]:
        """Evaluate the NumPy reference; always returns a list of arrays."""
        result = self.reference(*inputs, **attrs)
        if isinstance(result, (tuple, list)):
            return [np.asarray(r) for r in result]
        return [np.asarray(result)]


_REGISTRY: dict[str, OpDef] = {}


def register_op(name: str, *, infer: InferFn, fusion: FusionKind,
                attrs: dict[str, Any] | None = None,
                shape_operands: tuple[int, ...] = (), domain: str = "") -> Callable:
    """Decorator registering ``fn`` as the NumPy reference of ONNX op ``name`` of
    ``domain`` (default: the standard operator set).

    The reference is called as ``fn(*inputs, **attrs)`` with every attribute
    present (defaults filled in) and returns an array or a tuple of arrays.
    An op of another domain is registered, and appears in the Graph IR, as
    ``op_key(name, domain)``, e.g. ``com.microsoft.QGemm``.
    """
    key = op_key(name, domain)

    def decorate(fn: Callable) -> Callable:
        if key in _REGISTRY:
            raise ValueError(f"op {key!r} registered twice")
        _REGISTRY[key] = OpDef(key, fn, infer, fusion, dict(attrs or {}), shape_operands,
                               doc=(fn.__doc__ or "").strip(),
                               domain="" if domain in DEFAULT_DOMAINS else domain)
        return fn

    return decorate


def get_op(name: str, domain: str = "") -> OpDef:
    """The definition of op ``name`` (an IR name, or an ONNX op_type with its
    ``domain``); KeyError if it is not registered."""
    return _REGISTRY[op_key(name, domain)]


def has_op(name: str, domain: str = "") -> bool:
    """Whether op ``name`` (of ``domain``, default the standard set) is registered."""
    return op_key(name, domain) in _REGISTRY


def all_ops() -> dict[str, OpDef]:
    """Every registered op by its IR name (qualified by domain outside the standard set)."""
    return dict(_REGISTRY)


def infer_node_types(op: OpDef, types, values, attrs, num_outputs: int,
                     node: str = "") -> list[TensorType]:
    """Run ``op``'s type inference, turning stray exceptions into TypeInferenceError."""
    ctx = InferContext(op.name, list(types), list(values), attrs, num_outputs, node)
    try:
        out = list(op.infer(ctx))
    except TypeInferenceError:
        raise
    except Exception as exc:  # a bug or an input the infer function did not foresee
        raise ctx.error(f"type inference failed: {type(exc).__name__}: {exc}") from exc
    return out[:num_outputs]
