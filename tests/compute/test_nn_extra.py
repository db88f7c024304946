"""ConvTranspose, LpPool, GlobalLpPool, MaxUnpool and Col2Im (core/compute/nn_extra.py)
against the NumPy references through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.compute import compute_of
from heterocc.errors import CompileError
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from tests.compute.test_elementwise import check, random_array


@pytest.mark.parametrize("attrs,x_shape,w_shape", [
    ({}, (1, 2, 4, 4), (2, 3, 3, 3)),
    ({"strides": [2, 2], "pads": [1, 0, 1, 0], "output_padding": [1, 1]}, (2, 2, 3, 4),
     (2, 2, 3, 2)),
    ({"group": 2, "dilations": [2, 1]}, (1, 4, 3, 3), (4, 1, 2, 2)),
    ({"strides": [3, 2], "auto_pad": "SAME_UPPER"}, (1, 1, 3, 3), (1, 2, 3, 3)),
    ({"strides": [2], "output_shape": [10]}, (1, 2, 4), (2, 3, 3)),
    ({"strides": [1, 2, 1]}, (1, 1, 2, 3, 2), (1, 2, 2, 2, 2)),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(attrs, x_shape, w_shape, bias, rng):
    x = random_array(rng, x_shape, "float32")
    w = random_array(rng, w_shape, "float32")
    b = random_array(rng, (w_shape[1] * attrs.get("group", 1),), "float32") if bias else None
    check("ConvTranspose", [x, w, b], attrs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "p": 1},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2], "p": 3},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
])
def test_lp_pool(attrs, rng):
    check("LpPool", [random_array(rng, (2, 3, 7, 6), "float32")], attrs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p, rng):
    check("GlobalLpPool", [random_array(rng, (2, 3, 5, 4), "float64")], {"p": p})


def _max_pool_with_indices(x, attrs):
    return get_op("MaxPool").run([x], get_op("MaxPool").normalize_attrs(attrs))


@pytest.mark.parametrize("output_shape", [None, (1, 2, 6, 7)])
def test_max_unpool_inverts_max_pool(output_shape, rng):
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    pooled, indices = _max_pool_with_indices(random_array(rng, (1, 2, 4, 6), "float32"), attrs)
    shape = None if output_shape is None else np.array(output_shape, np.int64)
    check("MaxUnpool", [pooled, indices, shape], attrs)


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 6], [2, 3], {}),
    ([4, 7], [2, 3], {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    ([3, 4, 5], [2, 2, 3], {}),
])
def test_col2im(image, block, attrs, rng):
    channels = 2
    strides = attrs.get("strides", [1] * len(image))
    dilations = attrs.get("dilations", [1] * len(image))
    pads = attrs.get("pads", [0] * 2 * len(image))
    counts = [(size + pads[i] + pads[i + len(image)] - (k - 1) * d - 1) // s + 1
              for i, (size, k, d, s) in enumerate(zip(image, block, dilations, strides))]
    data = random_array(rng, (2, channels * int(np.prod(block)), int(np.prod(counts))),
                        "float32")
    check("Col2Im", [data, np.array(image, np.int64), np.array(block, np.int64)], attrs,
          rtol=1e-5, atol=1e-5)


def test_col2im_with_an_ambiguous_block_is_refused():
    """Over a 4 x 4 image, (1, 4) and (4, 1) blocks both take 4 rows per channel and slide
    to 4 positions: the shapes cannot tell them apart."""
    with pytest.raises(CompileError, match="block shape"):
        compute_of("Col2Im")([te.placeholder((1, 4, 4), "float32", "x"), None, None],
                             {"strides": None, "dilations": None, "pads": None},
                             [TensorType((1, 1, 4, 4), "float32")])
