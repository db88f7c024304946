"""Features of a lowered loop nest, for the cost model.

A candidate is lowered to TIR without the optimizing pipeline, so loops keep their kinds
and extents. Every buffer store is described by the loops around it (extents and kinds),
the arithmetic it does, and each buffer access in it (its stride along the innermost,
the vectorized and the parallel loop, how many iterations reuse the same element, how
many bytes it touches). Per-store descriptions are summed, weighted by how often the
store runs, into a fixed-length vector whose meaning does not depend on the template, so
one model can learn across tasks.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .. import te
from ..tir import expr as tx
from ..tir.stmt import Allocate, BufferStore, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt
from ..tir.visitor import collect

_LOOP_KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED)
#: stride classes of an access along a loop: not moving, unit stride, small, large
_STRIDE_CLASSES = ("broadcast", "contiguous", "short", "long")
_SHORT_STRIDE = 16

FEATURE_NAMES: tuple[str, ...] = (
    "log_iterations", "depth",
    *(f"log_extent_{kind.value}" for kind in _LOOP_KINDS),
    "innermost_extent", *(f"innermost_is_{kind.value}" for kind in _LOOP_KINDS),
    "log_float_ops", "log_int_ops", "log_loads",
    *(f"inner_{c}" for c in _STRIDE_CLASSES),
    *(f"vector_{c}" for c in _STRIDE_CLASSES),
    "log_reuse", "log_touched_bytes", "log_parallel_chunk_bytes",
    "log_local_bytes", "guarded",
)


@dataclass(frozen=True)
class _Loop:
    var: tx.Var
    extent: int
    kind: ForKind


def _static_extent(expr: tx.Expr) -> int:
    return int(expr.value) if isinstance(expr, tx.IntImm) else 1


def _stores(stmt: Stmt, loops: tuple[_Loop, ...], guarded: bool
            ) -> Iterator[tuple[BufferStore, tuple[_Loop, ...], bool]]:
    if isinstance(stmt, BufferStore):
        yield stmt, loops, guarded
    elif isinstance(stmt, For):
        # an unroll left to the code generator is an unrolled loop all the same
        kind = ForKind.UNROLLED if stmt.kind is ForKind.UNROLL_HINT else stmt.kind
        loop = _Loop(stmt.var, _static_extent(stmt.extent), kind)
        yield from _stores(stmt.body, (*loops, loop), guarded)
    elif isinstance(stmt, SeqStmt):
        for inner in stmt.stmts:
            yield from _stores(inner, loops, guarded)
    elif isinstance(stmt, Allocate):
        yield from _stores(stmt.body, loops, guarded)
    elif isinstance(stmt, IfThenElse):
        yield from _stores(stmt.then_case, loops, True)
        if stmt.else_case is not None:
            yield from _stores(stmt.else_case, loops, True)


_EVALUATORS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b if b else 0, "floormod": lambda a, b: a % b if b else 0,
    "truncdiv": lambda a, b: int(a / b) if b else 0,
    "truncmod": lambda a, b: int(math.fmod(a, b)) if b else 0,
    "min": min, "max": max,
}


def _evaluate(expr: tx.Expr, env: dict) -> int:
    """Integer value of an index expression with loop variables from ``env`` (0 when
    absent); non-arithmetic parts count as 0 (the features only need strides)."""
    if isinstance(expr, tx.IntImm):
        return int(expr.value)
    if isinstance(expr, tx.Var):
        return env.get(expr, 0)
    if isinstance(expr, tx.Cast):
        return _evaluate(expr.value, env)
    if isinstance(expr, tx.Binary) and expr.op in _EVALUATORS:
        return int(_EVALUATORS[expr.op](_evaluate(expr.a, env), _evaluate(expr.b, env)))
    if isinstance(expr, tx.Select):
        return _evaluate(expr.true_value, env)
    return 0


def _offset(buffer: tx.Buffer, indices: tuple[tx.Expr, ...], env: dict) -> int:
    offset = 0
    for index, dim in zip(indices, buffer.shape):
        offset = offset * int(dim) + _evaluate(index, env)
    return offset


def _strides(buffer: tx.Buffer, indices: tuple[tx.Expr, ...], loops) -> dict:
    """Elements the access moves by per step of each of ``loops`` (by loop variable;
    the offset at zero evaluated once for all)."""
    base = _offset(buffer, indices, {})
    return {loop.var: abs(_offset(buffer, indices, {loop.var: 1}) - base) for loop in loops}


def _stride_class(stride: int) -> int:
    if stride == 0:
        return 0
    return 1 if stride == 1 else 2 if stride <= _SHORT_STRIDE else 3


def _log(value: float) -> float:
    return math.log2(1.0 + max(value, 0.0))


def _store_features(store: BufferStore, loops: tuple[_Loop, ...], guarded: bool
                    ) -> np.ndarray:
    iterations = math.prod(loop.extent for loop in loops)
    by_kind = {kind: math.prod(loop.extent for loop in loops if loop.kind == kind)
               for kind in _LOOP_KINDS}
    innermost = loops[-1] if loops else None
    binaries = collect(store.value, lambda n: isinstance(n, tx.Binary))
    float_ops = sum(1 for b in binaries if tx.is_float(b.dtype))
    loads = collect(store.value, lambda n: isinstance(n, tx.BufferLoad))
    accesses = [(load.buffer, load.indices) for load in loads]
    accesses.append((store.buffer, store.indices))
    vectorized = [loop for loop in loops if loop.kind == ForKind.VECTORIZED]
    parallel = [i for i, loop in enumerate(loops) if loop.kind == ForKind.PARALLEL]
    inner_classes = np.zeros(len(_STRIDE_CLASSES))
    vector_classes = np.zeros(len(_STRIDE_CLASSES))
    reuse = touched = chunk = 0.0
    for buffer, indices in accesses:
        itemsize = np.dtype(tx.scalar_dtype(buffer.dtype)).itemsize
        strides = _strides(buffer, indices, loops)
        if innermost is not None:
            inner_classes[_stride_class(strides[innermost.var])] += 1
        if vectorized:
            vector_classes[_stride_class(strides[vectorized[-1].var])] += 1
        moving = [loop for loop in loops if strides[loop.var]]
        distinct = math.prod(loop.extent for loop in moving)
        reuse += iterations / max(distinct, 1)
        touched += min(distinct, buffer.size) * itemsize
        if parallel:
            inside = loops[parallel[0] + 1:]
            chunk += min(math.prod(loop.extent for loop in inside if loop in moving),
                         buffer.size) * itemsize
    return np.array([
        _log(iterations), len(loops), *(math.log2(by_kind[kind]) for kind in _LOOP_KINDS),
        innermost.extent if innermost else 0,
        *((1.0 if innermost and innermost.kind == kind else 0.0) for kind in _LOOP_KINDS),
        _log(float_ops * iterations), _log((len(binaries) - float_ops) * iterations),
        _log(len(loads) * iterations),
        *inner_classes, *vector_classes,
        _log(reuse), _log(touched), _log(chunk), 0.0, float(guarded),
    ], np.float64)


def loop_nest_features(func: PrimFunc) -> np.ndarray:
    """The feature vector (see FEATURE_NAMES) of an unoptimized lowered PrimFunc: the
    per-store features weighted by each store's share of all iterations."""
    stores = list(_stores(func.body, (), False))
    if not stores:
        return np.zeros(len(FEATURE_NAMES))
    rows = np.stack([_store_features(*entry) for entry in stores])
    weights = np.array([2.0 ** row[0] for row in rows])
    combined = (rows * (weights / weights.sum())[:, None]).sum(axis=0)
    local = collect(func.body, lambda n: isinstance(n, Allocate) and n.buffer.scope == "local")
    local_bytes = sum(a.buffer.size * np.dtype(tx.scalar_dtype(a.buffer.dtype)).itemsize
                      for a in local)
    combined[FEATURE_NAMES.index("log_local_bytes")] = _log(local_bytes)
    combined[0] = _log(float(weights.sum()))
    return combined


#: knob slots appended to every feature vector (spaces with more knobs are cut)
MAX_KNOBS = 8


def knob_features(space, config) -> np.ndarray:
    """The config's option position of each knob scaled to [0, 1], padded to MAX_KNOBS:
    what the loop nest cannot show (an option's effect on code generation) the model can
    still learn per task from these."""
    digits = space.normalized_digits(config.index)[:MAX_KNOBS]
    return np.pad(digits, (0, MAX_KNOBS - len(digits)))


def candidate_features(task, config) -> np.ndarray:
    """Features of one candidate of ``task`` (a :class:`~.task.Task`): the template's own
    when it has them, else those of its lowered loop nest; then its knob positions."""
    template = task.definition
    if template.features is not None:
        described = np.asarray(template.features(task.args, config), np.float64)
    else:
        schedule, tensors = template.instantiate(task.args, config)
        described = loop_nest_features(te.lower(schedule, tensors, name="candidate",
                                                optimize=False))
    return np.concatenate([described, knob_features(task.space, config)])
