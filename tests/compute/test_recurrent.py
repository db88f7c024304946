"""RNN, GRU and LSTM (core/compute/recurrent.py), unrolled over the sequence, against
the NumPy references through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check, random_array

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _operands(rng, op, direction, layout, lengths, initial, hidden=3, batch=2, steps=4,
              features=5):
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op] * hidden
    x_shape = (steps, batch, features) if layout == 0 else (batch, steps, features)
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    operands = [random_array(rng, x_shape, "float32", high=1.0),
                random_array(rng, (dirs, gates, features), "float32", high=0.5),
                random_array(rng, (dirs, gates, hidden), "float32", high=0.5),
                random_array(rng, (dirs, 2 * gates), "float32", high=0.5),
                np.array(lengths, np.int32) if lengths is not None else None,
                random_array(rng, state, "float32") if initial else None]
    if op == "LSTM":
        operands += [random_array(rng, state, "float32") if initial else None,
                     random_array(rng, (dirs, 3 * hidden), "float32", high=0.5)]
    return operands


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout,lengths,initial", [(0, None, False), (1, [4, 2], True),
                                                    (0, [0, 3], True)])
def test_recurrent(op, direction, layout, lengths, initial, rng):
    attrs = {"direction": direction, "layout": layout, "hidden_size": 3}
    check(op, _operands(rng, op, direction, layout, lengths, initial), attrs,
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,attrs", [
    ("RNN", {"activations": ["Relu"], "clip": 0.5}),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [0.7],
             "activation_beta": [1.5]}),
    ("GRU", {"linear_before_reset": 1, "activations": ["HardSigmoid", "Softsign"]}),
    ("LSTM", {"input_forget": 1, "activations": ["Sigmoid", "Elu", "Softplus"]}),
    ("LSTM", {"activations": ["Affine", "LeakyRelu", "ThresholdedRelu"],
              "activation_alpha": [0.5, 0.1, 0.2], "activation_beta": [0.1]}),
])
def test_recurrent_activations_and_variants(op, attrs, rng):
    check(op, _operands(rng, op, "forward", 0, None, True), {**attrs, "hidden_size": 3},
          rtol=1e-5, atol=1e-5)
