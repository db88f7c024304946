"""The tensor-expression language: placeholders, computes over index spaces, reduction
axes and the sum/max/min reductions (the *what*, independent of any schedule)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import TypeInferenceError
from ..ir.types import normalize_dtype
from ..tir import expr as tx
from ..tir.visitor import collect

SPATIAL = "spatial"
REDUCE = "reduce"


@dataclass(eq=False)
class IterVar:
    """An iteration axis: its loop variable, its domain ``[min, min + extent)`` and whether
    it is a data-parallel (``spatial``) or a reduction (``reduce``) axis."""

    var: tx.Var
    extent: int
    kind: str = SPATIAL
    min: int = 0

    @property
    def name(self) -> str:
        return self.var.name

    def __tir_expr__(self) -> tx.Var:
        return self.var

    def __repr__(self) -> str:
        return f"IterVar({self.name}, [{self.min}, {self.min + self.extent}), {self.kind})"


def _delegate_to_var(name: str):
    def operator(self, *args):
        return getattr(self.var, name)(*args)

    operator.__name__ = name
    return operator


# An IterVar reads as its loop variable in expressions (``A[i, k + 1]``).
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__neg__", "__lt__",
              "__le__", "__gt__", "__ge__"):
    setattr(IterVar, _name, _delegate_to_var(_name))


@dataclass(eq=False)
class PlaceholderOp:
    """An input tensor; its data comes from the caller. ``folded``: the value of a
    one-element constant that the code takes as an immediate (``fold_scalars`` of the
    SDK), so that a compute may read its range at build time; None for a true input."""

    name: str
    folded: np.ndarray | None = field(default=None, kw_only=True, repr=False)


@dataclass(eq=False)
class ConstantOp(PlaceholderOp):
    """An input whose data the compute itself fixes (a per-channel table of integers, a
    small lookup table): ``data`` is a read-only C-ordered array of the tensor's shape and
    dtype. It schedules and lowers as a placeholder; the caller passes ``data`` as one more
    argument (the CPU and GPU targets append it to the function's constants, see
    :func:`constant_tensors`)."""

    data: np.ndarray


@dataclass(eq=False)
class ComputeOp:
    """``tensor[axis] = body`` for every point of the axes (``body`` may be a Reduce)."""

    name: str
    axis: tuple[IterVar, ...]
    body: tx.Expr
    attrs: dict = field(default_factory=dict)

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.body.axis if isinstance(self.body, Reduce) else ()


@dataclass(eq=False)
class Tensor:
    """A named, typed, statically shaped tensor produced by ``op``. Index it with
    ``t[i, j]`` to read it inside a compute."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    op: PlaceholderOp | ConstantOp | ComputeOp

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> TensorLoad:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TypeInferenceError(
                f"tensor {self.name!r} has rank {self.ndim} but was indexed with "
                f"{len(indices)} indices")
        exprs = []
        for index in indices:
            index = tx.as_expr(index, tx.INDEX_DTYPE)
            if not tx.is_int(index.dtype):
                raise TypeInferenceError(
                    f"tensor {self.name!r} indexed with a {index.dtype} expression; indices "
                    "must be integers (cast them)")
            exprs.append(tx.cast(tx.INDEX_DTYPE, index))
        return TensorLoad(self, tuple(exprs))

    def __repr__(self) -> str:
        return f"Tensor({self.name}: {self.dtype}{list(self.shape)})"


@dataclass(frozen=True, eq=False, repr=False)
class TensorLoad(tx.Expr):
    """A read of ``tensor`` at ``indices`` inside a compute body."""

    tensor: Tensor
    indices: tuple[tx.Expr, ...]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def describe(self, fmt: Callable[[tx.Expr], str]) -> str:
        return f"{self.tensor.name}[{', '.join(fmt(i) for i in self.indices)}]"


#: combiner -> (identity element builder, combine function)
COMBINERS: dict[str, tuple[Callable[[str], tx.Expr], Callable[[tx.Expr, tx.Expr], tx.Expr]]] = {
    "sum": (lambda dtype: tx.const(0, dtype), lambda acc, x: tx.binary("add", acc, x)),
    "max": (tx.dtype_min, tx.maximum),
    "min": (tx.dtype_max, tx.minimum),
}


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(tx.Expr):
    """``combiner`` of ``source`` over the reduction axes ``axis``; only valid as the whole
    body of a compute."""

    combiner: str
    source: tx.Expr
    axis: tuple[IterVar, ...]

    @property
    def dtype(self) -> str:
        return self.source.dtype

    def identity(self) -> tx.Expr:
        return COMBINERS[self.combiner][0](self.dtype)

    def combine(self, accumulated: tx.Expr, value: tx.Expr) -> tx.Expr:
        return COMBINERS[self.combiner][1](accumulated, value)

    def describe(self, fmt: Callable[[tx.Expr], str]) -> str:
        axes = ", ".join(iv.name for iv in self.axis)
        return f"{self.combiner}({fmt(self.source)}, axis=[{axes}])"


def _static_shape(shape, what: str) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise TypeInferenceError(f"{what} has a negative dimension in shape {dims}")
    return dims


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder",
                folded: np.ndarray | None = None) -> Tensor:
    """An input tensor of static ``shape`` and ``dtype`` (``folded``: see
    :class:`PlaceholderOp`)."""
    shape = _static_shape(shape, f"placeholder {name!r}")
    return Tensor(name, shape, normalize_dtype(dtype), PlaceholderOp(name, folded=folded))


def constant_tensor(data, name: str = "constant", dtype: str | None = None) -> Tensor:
    """A tensor holding ``data`` (array-like, converted to ``dtype`` when given), read
    in a compute like any tensor: ``table[channel]`` is a load, so a per-channel
    constant costs one (vectorizable) memory read instead of a tree of selects. The
    array is copied, so later changes to ``data`` do not reach it.

    In an operator's compute the data must follow from the op's attributes and types
    alone: TE-compiled targets share one kernel among functions of one structure
    (``heterocc.sdk.te_target.structure_key``), tables included unless the compute's
    ``code_key`` leaves their contents out of it (then each function passes its own)."""
    array = np.array(data, dtype=None if dtype is None else normalize_dtype(dtype), order="C")
    dtype_name = normalize_dtype(array.dtype.name)
    array = np.require(array, requirements="C")
    array.setflags(write=False)
    shape = _static_shape(array.shape, f"constant {name!r}")
    return Tensor(name, shape, dtype_name, ConstantOp(name, array))


def reduce_axis(dom, name: str = "k") -> IterVar:
    """A reduction axis over ``dom``: an extent ``n`` or a ``(begin, end)`` pair."""
    begin, end = (0, dom) if isinstance(dom, int) else dom
    if end <= begin:
        raise TypeInferenceError(f"reduce axis {name!r} has an empty domain [{begin}, {end})")
    return IterVar(tx.Var(name), int(end) - int(begin), REDUCE, int(begin))


def _axis_names(fcompute: Callable, ndim: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) == ndim and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                   for p in params):
        return [p.name for p in params]
    return [f"i{d}" for d in range(ndim)]


def compute(shape: Sequence[int], fcompute: Callable, name: str = "compute",
            dtype: str | None = None, attrs: dict | None = None) -> Tensor:
    """The tensor whose element at index ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    ``fcompute`` receives one index variable per dimension and returns an expression;
    a reduction (``sum``/``max``/``min``) may only be the whole returned expression.
    """
    shape = _static_shape(shape, f"compute {name!r}")
    axis = tuple(IterVar(tx.Var(n), d) for n, d in zip(_axis_names(fcompute, len(shape)), shape))
    body = fcompute(*(iv.var for iv in axis))
    body = tx.as_expr(body, dtype)
    if dtype is not None:
        if isinstance(body, Reduce):
            body = Reduce(body.combiner, tx.cast(dtype, body.source), body.axis)
        else:
            body = tx.cast(dtype, body)
    nested = collect(body.source if isinstance(body, Reduce) else body,
                     lambda n: isinstance(n, Reduce))
    if nested:
        raise TypeInferenceError(
            f"compute {name!r}: a reduction must be the whole body, not part of it; compute "
            "the reduction as its own tensor and combine it in a second compute")
    return Tensor(name, shape, tx.scalar_dtype(body.dtype), ComputeOp(name, axis, body,
                                                                       dict(attrs or {})))


def _reduction(combiner: str):
    def build(expr, axis) -> Reduce:
        axes = tuple(axis) if isinstance(axis, list | tuple) else (axis,)
        if not axes or any(not isinstance(a, IterVar) or a.kind != REDUCE for a in axes):
            raise TypeInferenceError(
                f"{combiner}() needs reduction axes made by te.reduce_axis, got {axes!r}")
        return Reduce(combiner, tx.as_expr(expr), axes)

    build.__name__ = combiner
    build.__doc__ = f"The {combiner} of ``expr`` over the reduction axes ``axis``."
    return build


sum = _reduction("sum")  # noqa: A001 - mirrors the mathematical name, as numpy does
max = _reduction("max")  # noqa: A001
min = _reduction("min")  # noqa: A001
