"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (core/compute/loss.py)
against the NumPy references through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check

FORMS = [("none", None), ("sum", None), ("mean", None), ("mean", 2), ("none", -1)]


def _targets(rng, shape, classes, ignore_index):
    target = rng.integers(0, classes, shape).astype(np.int64)
    if ignore_index is not None:
        target.reshape(-1)[::3] = ignore_index
    return target


@pytest.mark.parametrize("reduction,ignore_index,weighted,shape", [
    (reduction, ignore_index, k % 2 == 1, [(4, 5), (2, 3, 4, 2)][k // 2 % 2])
    for k, (reduction, ignore_index) in enumerate(FORMS)])
def test_negative_log_likelihood(reduction, ignore_index, weighted, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    target = _targets(rng, (shape[0], *shape[2:]), shape[1], ignore_index)
    weight = rng.random(shape[1]).astype(np.float32) if weighted else None
    check("NegativeLogLikelihoodLoss", [x, target, weight],
          {"reduction": reduction, "ignore_index": ignore_index}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction,ignore_index,weighted", [
    ("none", None, False), ("mean", 2, True), ("sum", -1, True)])
def test_softmax_cross_entropy_gives_loss_and_log_probabilities(reduction, ignore_index,
                                                                weighted, rng):
    scores = (rng.standard_normal((3, 6, 4)) * 5).astype(np.float64)
    labels = _targets(rng, (3, 4), 6, ignore_index).astype(np.int32)
    weights = rng.random(6) if weighted else None
    check("SoftmaxCrossEntropyLoss", [scores, labels, weights],
          {"reduction": reduction, "ignore_index": ignore_index}, rtol=1e-9, atol=1e-12)


def test_every_target_ignored_gives_the_references_nan(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    check("NegativeLogLikelihoodLoss", [x, np.full(3, 1, np.int64)],
          {"reduction": "mean", "ignore_index": 1})
