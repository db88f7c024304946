"""Every template of the CPU target builds correct code for several configs (checked
against NumPy)."""

import numpy as np
import pytest

from heterocc import te
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.tuning import TEMPLATES as LLVM_TEMPLATES

TEMPLATES = {template.name: template for template in LLVM_TEMPLATES}

WORKLOADS = {
    "matmul": (20, 40, 24, "float32"),
    "dense": (12, 20, 16, "float32"),
    "batch_matmul": (2, 12, 20, 16, "float32"),
    "conv2d_nchw": (1, 3, 9, 10, 8, 3, 3, 1, 1, "float32"),
    "depthwise_conv2d_nchw": (1, 4, 9, 10, 3, 3, 2, 1, "float32"),
    "conv2d_nchwc": (1, 2, 9, 10, 8, 4, 8, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1, "float32"),
    "depthwise_conv2d_nchwc": (1, 2, 11, 12, 8, 3, 3, 1, 1, 0, 1, 2, 1, 1, 1, "float32"),
}


def _check(name, config, rng):
    template, args = TEMPLATES[name], WORKLOADS[name]
    schedule, tensors = template.instantiate(args, config)
    module = build(te.lower(schedule, tensors, name="candidate"))
    inputs = template.inputs(args, rng)
    out = np.zeros(tensors[-1].shape, tensors[-1].dtype)
    module(*inputs, out)
    np.testing.assert_allclose(out, template.reference(args, inputs), rtol=1e-4, atol=1e-4,
                               err_msg=f"{name} {config.to_json()}")


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_template_configs_match_reference(name):
    template, args = TEMPLATES[name], WORKLOADS[name]
    space = template.space(args)
    rng = np.random.default_rng(0)
    indices = [template.default_config(args).index, *space.random_indices(rng, 2)]
    for index in dict.fromkeys(indices):
        _check(name, space.get(index), rng)


@pytest.mark.parametrize("name", ["conv2d_nchw", "depthwise_conv2d_nchw"])
def test_padding_inline_or_copied(name):
    template, args = TEMPLATES[name], WORKLOADS[name]
    default = template.default_config(args).to_json()
    for padding in ("inline", "copy"):
        config = template.space(args).from_values({**default, "padding": padding})
        _check(name, config, np.random.default_rng(1))
