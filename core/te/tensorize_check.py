"""The proof obligation of ``Stage.tensorize``: the intrinsic computes what the loops it
replaces compute.

A tensor intrinsic declares its semantics as a small TE compute. Lowering binds the
stage's input tensors to the intrinsic's placeholders (in first-read order) and the loops
from the tensorized axis inwards to the intrinsic's axes; this module checks that under
that binding the two computations are the same expression:

- both reduce, with the same combiner, or neither does;
- the expression trees have the same operators, constants and dtypes at every node (casts
  included, so an int16 accumulation does not pass for an int32 one); ``add``, ``mul``,
  ``min``, ``max`` and the like match in either operand order;
- each read is of the tensor bound to the placeholder read at the same place (operand
  roles), and each of its dimensions is indexed by the loops that the binding maps to the
  intrinsic's index variables there (a transposed or swapped read is caught);
- every replaced loop longer than one iteration is covered by an axis of the intrinsic
  (a reduction the intrinsic leaves out is caught), and every axis of the intrinsic by one.

The first difference found is raised as a ``CompileError`` that names it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import CompileError
from ..tir import expr as tx
from ..tir.printer import expr_to_str
from ..tir.visitor import children, free_vars
from .intrin import TensorIntrin
from .tensor import Reduce, Tensor, TensorLoad

#: binary operators whose operands may be exchanged
COMMUTATIVE_OPS = frozenset({"add", "mul", "min", "max", "bitand", "bitor", "bitxor",
                             "eq", "ne", "and", "or"})


class _Mismatch(Exception):
    """A difference between the stage and the intrinsic (message without location)."""


@dataclass
class _Binding:
    """What the stage's loops and tensors stand for on the intrinsic's side."""

    roles: dict[int, Tensor]  # id(intrinsic placeholder) -> the stage tensor bound to it
    loop_extents: dict[tx.Var, int]  # the replaced loops (tensorized axis inwards)
    loops_to_axes: dict[tx.Var, tx.Var] = field(default_factory=dict)

    def long_loops(self, expr: tx.Expr) -> set[tx.Var]:
        return {v for v in free_vars(expr) if self.loop_extents.get(v, 1) > 1}


def check_tensorize(body: tx.Expr, intrin: TensorIntrin, read: Sequence[Tensor],
                    store_indices: Sequence[tx.Expr], output_shape: Sequence[int],
                    loop_extents: Mapping[tx.Var, int], where: str) -> None:
    """Raise ``CompileError`` unless ``intrin`` computes ``body``.

    ``body`` is the stage's compute body with its axes replaced by loop expressions,
    ``read`` the tensors it reads in first-read order (bound one to one to
    ``intrin.inputs``), ``store_indices`` the stage's output index per dimension, and
    ``output_shape`` the extent of the output region the intrinsic covers, per
    dimension. ``loop_extents`` are the loops the intrinsic replaces."""
    op = intrin.compute.op
    binding = _Binding({id(p): t for p, t in zip(intrin.inputs, read)}, dict(loop_extents))
    try:
        _bind_output_axes(binding, store_indices, output_shape, op.axis)
        _match(body, op.body, binding)
        _check_coverage(body, op.body, binding)
    except _Mismatch as exc:
        raise CompileError(f"{where}: the intrinsic does not compute what the loops it "
                           f"replaces compute: {exc}") from None


def _bind_output_axes(binding: _Binding, store_indices, output_shape, axes) -> None:
    """Map the loops indexing each non-unit output dimension to the intrinsic axis of
    that dimension (the intrinsic's output drops unit dimensions the same way)."""
    stage_dims = [index for index, extent in zip(store_indices, output_shape) if extent != 1]
    intrin_axes = [axis for axis in axes if axis.extent != 1]
    for index, axis in zip(stage_dims, intrin_axes):
        for loop in binding.long_loops(index):
            binding.loops_to_axes[loop] = axis.var


def _match(stage: tx.Expr, intrin: tx.Expr, binding: _Binding) -> None:
    stage_reduces, intrin_reduces = isinstance(stage, Reduce), isinstance(intrin, Reduce)
    if stage_reduces != intrin_reduces:
        if stage_reduces:
            raise _Mismatch(f"the loops compute a {stage.combiner}-reduction "
                            f"{_show(stage)}, the intrinsic no reduction ({_show(intrin)})")
        raise _Mismatch(f"the intrinsic computes a {intrin.combiner}-reduction "
                        f"{_show(intrin)}, the loops no reduction ({_show(stage)})")
    if stage_reduces:
        if stage.combiner != intrin.combiner:
            raise _Mismatch(f"the loops combine with {stage.combiner!r}, the intrinsic with "
                            f"{intrin.combiner!r}")
        _match_expr(stage.source, intrin.source, binding)
        return
    _match_expr(stage, intrin, binding)


def _match_expr(stage: tx.Expr, intrin: tx.Expr, binding: _Binding) -> None:
    if type(stage) is not type(intrin) or _operator(stage) != _operator(intrin):
        raise _Mismatch(f"the loops compute {_show(stage)} where the intrinsic computes "
                        f"{_show(intrin)}")
    if stage.dtype != intrin.dtype:
        raise _Mismatch(f"{_show(stage)} is {stage.dtype} in the loops but "
                        f"{_show(intrin)} is {intrin.dtype} in the intrinsic")
    if isinstance(stage, TensorLoad):
        _match_read(stage, intrin, binding)
        return
    if isinstance(stage, tx.IntImm | tx.FloatImm):
        if stage.value != intrin.value:
            raise _Mismatch(f"constant {_show(stage)} in the loops is {_show(intrin)} in the "
                            "intrinsic")
        return
    if isinstance(stage, tx.Var):
        raise _Mismatch(f"the loops read the variable {stage.name!r} where the intrinsic "
                        f"reads {intrin.name!r}; an intrinsic reads only its inputs")
    stage_children, intrin_children = list(children(stage)), list(children(intrin))
    if isinstance(stage, tx.Binary) and stage.op in COMMUTATIVE_OPS:
        saved = dict(binding.loops_to_axes)
        try:
            _match_all(stage_children, intrin_children, binding)
            return
        except _Mismatch:
            binding.loops_to_axes = saved
            try:
                _match_all(stage_children, intrin_children[::-1], binding)
                return
            except _Mismatch:
                binding.loops_to_axes = saved
        # report the difference in the written order
    _match_all(stage_children, intrin_children, binding)


def _match_all(stage_children, intrin_children, binding: _Binding) -> None:
    if len(stage_children) != len(intrin_children):
        raise _Mismatch(f"{len(stage_children)} operands in the loops, "
                        f"{len(intrin_children)} in the intrinsic")
    for s, i in zip(stage_children, intrin_children):
        _match_expr(s, i, binding)


def _operator(expr: tx.Expr) -> str | None:
    """What distinguishes nodes of one class: the operator, call name or combiner."""
    for attribute in ("op", "name", "combiner"):
        value = getattr(expr, attribute, None)
        if isinstance(value, str) and not isinstance(expr, tx.Var):
            return value
    return None


def _match_read(stage: TensorLoad, intrin: TensorLoad, binding: _Binding) -> None:
    bound = binding.roles.get(id(intrin.tensor))
    if bound is None:
        raise _Mismatch(f"the intrinsic reads {intrin.tensor.name!r}, which is not one of "
                        "its inputs")
    if bound is not stage.tensor:
        raise _Mismatch(f"operand roles differ: the intrinsic's input {intrin.tensor.name!r} "
                        f"is bound to {bound.name!r}, but where the intrinsic reads it "
                        f"({_show(intrin)}) the loops read {_show(stage)}")
    stage_dims = [index for index in stage.indices if binding.long_loops(index)]
    intrin_dims = [index for index, extent in zip(intrin.indices, intrin.tensor.shape)
                   if extent != 1]
    if len(stage_dims) != len(intrin_dims):
        raise _Mismatch(f"{_show(stage)} walks {len(stage_dims)} dimensions of "
                        f"{stage.tensor.name!r} inside the replaced loops, {_show(intrin)} "
                        f"walks {len(intrin_dims)}")
    for dim, (stage_index, intrin_index) in enumerate(zip(stage_dims, intrin_dims)):
        _match_index(stage, intrin, dim, stage_index, intrin_index, binding)


def _match_index(stage: TensorLoad, intrin: TensorLoad, dim: int, stage_index: tx.Expr,
                 intrin_index: tx.Expr, binding: _Binding) -> None:
    loops = binding.long_loops(stage_index)
    axes = free_vars(intrin_index)
    unbound = {loop for loop in loops if loop not in binding.loops_to_axes}
    free_axes = axes - {binding.loops_to_axes[loop] for loop in loops - unbound}
    if unbound and len(free_axes) == 1:
        (axis,) = free_axes
        if axis in binding.loops_to_axes.values():
            raise _Mismatch(f"in {_show(stage)}, loops {_names(unbound)} index dimension {dim}"
                            f" where the intrinsic's {_show(intrin)} uses axis {axis.name!r}, "
                            "which other loops already stand for")
        for loop in unbound:
            binding.loops_to_axes[loop] = axis
    mapped = {binding.loops_to_axes.get(loop) for loop in loops}
    if mapped != axes:
        raise _Mismatch(f"{_show(stage)} indexes its dimension {dim} with loops "
                        f"{_names(loops)} but the intrinsic's {_show(intrin)} indexes it with "
                        f"{_names(axes)} (a transposed or swapped operand?)")


def _check_coverage(stage_body: tx.Expr, intrin_body: tx.Expr, binding: _Binding) -> None:
    used = binding.long_loops(stage_body)
    uncovered = sorted(loop.name for loop in used if loop not in binding.loops_to_axes)
    if uncovered:
        raise _Mismatch(f"the replaced loops {uncovered} (extents "
                        f"{[binding.loop_extents[v] for v in used if v.name in uncovered]}) "
                        "have no counterpart in the intrinsic: it covers fewer axes, e.g. a "
                        "reduction it leaves out")
    if isinstance(intrin_body, Reduce):
        covered = set(binding.loops_to_axes.values())
        missing = [axis.name for axis in intrin_body.axis
                   if axis.extent > 1 and axis.var not in covered]
        if missing:
            raise _Mismatch(f"the intrinsic reduces over {missing}, which no replaced loop "
                            "walks")


def _names(variables) -> list[str]:
    return sorted(v.name for v in variables)


def _show(expr: tx.Expr) -> str:
    return expr_to_str(expr)
