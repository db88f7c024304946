"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from .. import te
from ..errors import CompileError
from ..tir import expr as tx
from .reduction import log_softmax, reduce_stage
from .registry import register_compute


def _class_of(target: te.Tensor, index: tuple, classes: int, ignore_index) -> tuple:
    """The class that target element ``index`` picks (clamped into range, so a gather
    through it never leaves the buffer) and whether it is ignored."""
    label = te.cast("int64", target[index])
    ignored = te.const(False, "bool") if ignore_index is None else te.equal(
        label, te.const(int(ignore_index), "int64"))
    safe = te.if_then_else(ignored, te.const(0, "int64"), label)
    safe = te.minimum(te.maximum(safe, te.const(0, "int64")), te.const(classes - 1, "int64"))
    return safe, ignored


def negative_log_likelihood(log_prob: te.Tensor, target: te.Tensor, weight, reduction: str,
                            ignore_index, dtype: str) -> te.Tensor:
    """-log_prob[n, target[n, ...], ...] weighted by ``weight[target]`` (0 where the
    target is ``ignore_index``), kept per element, summed, or averaged over the weights."""
    if not tx.is_float(dtype) or dtype == "float16":
        raise CompileError(f"NegativeLogLikelihoodLoss on {dtype} has no TE compute")
    classes = log_prob.shape[1]
    zero, one = te.const(0, dtype), te.const(1, dtype)

    def weight_at(index):
        safe, ignored = _class_of(target, index, classes, ignore_index)
        given = one if weight is None else te.cast(dtype, weight[safe])
        return te.if_then_else(ignored, zero, given)

    def loss_at(index):
        safe, _ = _class_of(target, index, classes, ignore_index)
        picked = log_prob[(index[0], safe, *index[1:])]
        return -picked * weight_at(index)

    if reduction == "none":
        return te.compute(target.shape, lambda *i: loss_at(i), name="nll", dtype=dtype)
    axes = list(range(target.ndim))
    total = reduce_stage(target, axes, "sum", loss_at, "nll_sum", dtype, keepdims=False)
    if reduction == "sum":
        return total
    weights = reduce_stage(target, axes, "sum", weight_at, "nll_weight", dtype, keepdims=False)
    return te.compute((), lambda: total[()] / weights[()], name="nll_mean", dtype=dtype)


@register_compute("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(inputs, attrs, out_types):
    log_prob, target = inputs[:2]
    weight = inputs[2] if len(inputs) > 2 else None
    return [negative_log_likelihood(log_prob, target, weight, attrs["reduction"],
                                    attrs["ignore_index"], out_types[0].dtype)]


@register_compute("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(inputs, attrs, out_types):
    """NLL of LogSoftmax(scores, axis=1); the log-probabilities are the second output."""
    scores, labels = inputs[:2]
    weights = inputs[2] if len(inputs) > 2 else None
    (log_prob,) = log_softmax([scores], {"axis": 1}, out_types[1:])
    loss = negative_log_likelihood(log_prob, labels, weights, attrs["reduction"],
                                   attrs["ignore_index"], out_types[0].dtype)
    return [loss, log_prob][:len(out_types)]
