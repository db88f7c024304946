"""Control flow: If, Loop and Scan, with their bodies as Graph IR sub-graphs.

The frontend turns ONNX's implicit captures (outer values a body reads by name)
into explicit inputs: each body graph takes its formal inputs followed by the
``num_captures`` captured values, which the node passes as its last inputs.
Shapes stay static: a Loop whose outputs change shape across iterations needs
all its inputs constant (the compiler specializes on graph inputs) and is then
evaluated at compile time.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .registry import REQUIRED, FusionKind, InferContext, ShapeOperandError, register_op


def _run(graph, args):
    from ..runtime.interpreter import evaluate  # the interpreter imports the op registry

    return evaluate(graph, list(args))


def _infer_if(ctx: InferContext):
    cond = ctx.type(0)
    if cond.size != 1:
        raise ctx.error(f"condition must hold one element, got {cond}")
    then_types = [v.type for v in ctx.attrs["then_branch"].outputs]
    else_types = [v.type for v in ctx.attrs["else_branch"].outputs]
    if ctx.has(0) and ctx.values[0] is not None:
        return then_types if bool(np.asarray(ctx.values[0]).reshape(())) else else_types
    if then_types != else_types:
        raise ShapeOperandError("If", 0)  # branches differ: only a known condition types it
    return then_types


@register_op("If", infer=_infer_if, fusion=FusionKind.OPAQUE,
             attrs={"then_branch": REQUIRED, "else_branch": REQUIRED})
def if_(cond, *captured, then_branch, else_branch):
    """The outputs of the branch ``cond`` selects."""
    branch = then_branch if bool(np.asarray(cond).reshape(())) else else_branch
    return tuple(_run(branch, captured))


def _loop_parts(inputs, num_captures):
    n = len(inputs) - num_captures
    return inputs[0], inputs[1], list(inputs[2:n]), list(inputs[n:])


def _infer_loop(ctx: InferContext):
    body = ctx.attrs["body"]
    n = len(ctx.types) - ctx.attrs["num_captures"]
    carried = [t for t in ctx.types[2:n]]
    body_carried = [v.type for v in body.outputs[1:1 + len(carried)]]
    scan_outputs = len(body.outputs) - 1 - len(carried)
    if scan_outputs == 0 and body_carried == carried:
        return carried
    # shapes depend on the trip count: evaluate the loop on constant inputs
    for i in range(len(ctx.types)):
        if ctx.has(i):
            ctx.value(i)
    results = loop(*ctx.values, **ctx.attrs)
    return [TensorType.of(np.asarray(r)) for r in results]


@register_op("Loop", infer=_infer_loop, fusion=FusionKind.OPAQUE,
             attrs={"body": REQUIRED, "num_captures": 0})
def loop(max_trips, cond, *rest, body, num_captures):
    """``while i < max_trips and cond``: run the body on (i, cond, carried..., captures...);
    scan outputs are stacked along a new first axis."""
    *_, carried, captured = _loop_parts([max_trips, cond, *rest], num_captures)
    limit = None if max_trips is None else int(np.asarray(max_trips).reshape(()))
    keep_going = True if cond is None else bool(np.asarray(cond).reshape(()))
    scans: list[list[np.ndarray]] = []
    i = 0
    while keep_going and (limit is None or i < limit):
        outs = _run(body, [np.asarray(i, np.int64), np.asarray(keep_going), *carried, *captured])
        keep_going = bool(np.asarray(outs[0]).reshape(()))
        carried = outs[1:1 + len(carried)]
        for k, value in enumerate(outs[1 + len(carried):]):
            if len(scans) <= k:
                scans.append([])
            scans[k].append(value)
        i += 1
    n_scan = len(body.outputs) - 1 - len(carried)
    stacked = []
    for k in range(n_scan):
        if k < len(scans):
            stacked.append(np.stack(scans[k]))
        else:  # zero iterations
            t = body.outputs[1 + len(carried) + k].type
            stacked.append(np.zeros((0, *t.shape), t.np_dtype))
    return tuple(carried) + tuple(stacked)


def _scan_layout(ctx_attrs, n_scan_in, n_scan_out, n_state):
    axes_in = ctx_attrs["scan_input_axes"] or [0] * n_scan_in
    dirs_in = ctx_attrs["scan_input_directions"] or [0] * n_scan_in
    axes_out = ctx_attrs["scan_output_axes"] or [0] * n_scan_out
    dirs_out = ctx_attrs["scan_output_directions"] or [0] * n_scan_out
    return axes_in, dirs_in, axes_out, dirs_out


def _infer_scan(ctx: InferContext):
    body = ctx.attrs["body"]
    n_in = ctx.attrs["num_scan_inputs"]
    n = len(ctx.types) - ctx.attrs["num_captures"]
    n_state = n - n_in
    scan_in = ctx.types[n_state:n]
    n_out = len(body.outputs) - n_state
    axes_in, _, axes_out, _ = _scan_layout(ctx.attrs, n_in, n_out, n_state)
    lengths = {t.shape[a % t.ndim] for t, a in zip(scan_in, axes_in)}
    if len(lengths) != 1:
        raise ctx.error(f"scan inputs have different sequence lengths {sorted(lengths)}")
    length = lengths.pop()
    out = [v.type for v in body.outputs[:n_state]]
    for v, axis in zip(body.outputs[n_state:], axes_out):
        shape = list(v.type.shape)
        shape.insert(axis % (len(shape) + 1), length)
        out.append(TensorType(tuple(shape), v.type.dtype))
    return out


@register_op("Scan", infer=_infer_scan, fusion=FusionKind.OPAQUE,
             attrs={"body": REQUIRED, "num_scan_inputs": REQUIRED, "scan_input_axes": None,
                    "scan_input_directions": None, "scan_output_axes": None,
                    "scan_output_directions": None, "num_captures": 0})
def scan(*inputs, body, num_scan_inputs, scan_input_axes, scan_input_directions,
         scan_output_axes, scan_output_directions, num_captures):
    """Run the body once per element of the scan inputs' sequence axis, threading the
    state through; scan outputs are stacked along their output axes."""
    n = len(inputs) - num_captures
    captured = list(inputs[n:])
    n_state = n - num_scan_inputs
    state = list(inputs[:n_state])
    xs = list(inputs[n_state:n])
    n_out = len(body.outputs) - n_state
    attrs = {"scan_input_axes": scan_input_axes, "scan_input_directions": scan_input_directions,
             "scan_output_axes": scan_output_axes,
             "scan_output_directions": scan_output_directions}
    axes_in, dirs_in, axes_out, dirs_out = _scan_layout(attrs, len(xs), n_out, n_state)
    xs = [np.moveaxis(x, a, 0) for x, a in zip(xs, axes_in)]
    xs = [x[::-1] if d else x for x, d in zip(xs, dirs_in)]
    length = xs[0].shape[0] if xs else 0
    collected: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for t in range(length):
        outs = _run(body, [*state, *[x[t] for x in xs], *captured])
        state = outs[:n_state]
        for k, value in enumerate(outs[n_state:]):
            collected[k].append(value)
    stacked = []
    for k, (axis, direction) in enumerate(zip(axes_out, dirs_out)):
        values = collected[k][::-1] if direction else collected[k]
        t = body.outputs[n_state + k].type
        arr = np.stack(values) if values else np.zeros((0, *t.shape), t.np_dtype)
        stacked.append(np.moveaxis(arr, 0, axis % arr.ndim))
    return tuple(state) + tuple(stacked)
