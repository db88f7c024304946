"""A channel concatenation of blocked tensors (DenseNet's growing feature maps) stays in
the NCHW[x]c layout and runs one channel block per outer iteration
(:class:`ChannelSelectRule`), its block loop cut where the sources meet
(:func:`split_at_channel_selects`): results as ONNX Runtime's and NumPy's on AVX-512 and
AVX2 code."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import helper

import heterocc
from heterocc.compute.registry import compute_of
from heterocc.ir.types import TensorType
from heterocc.sdk import te
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.rules import ChannelSelectRule
from heterocc.targets.llvm.schedules import split_at_channel_selects
from heterocc.tir import (
    BufferLoad,
    BufferStore,
    For,
    ForKind,
    collect,
    collect_statements,
    func_to_str,
)
from tests.compute.test_elementwise import random_array
from tests.conftest import make_model

ISAS = pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"],
                               ids=["host", "avx2"])


def _dense_block(rng, layers=3, channels=16, growth=16, size=8, batch=1):
    """DenseNet's block: each layer concatenates every earlier feature map, then
    BatchNorm -> Relu -> 3x3 conv adds ``growth`` channels."""
    inits, nodes, features = {}, [], ["x"]
    for i in range(layers):
        nodes.append(helper.make_node("Concat", list(features), [f"cat{i}"], axis=1))
        inits[f"s{i}"] = rng.uniform(0.5, 1.5, channels).astype(np.float32)
        inits[f"b{i}"] = random_array(rng, (channels,), "float32")
        inits[f"m{i}"] = random_array(rng, (channels,), "float32")
        inits[f"v{i}"] = rng.uniform(0.5, 1.5, channels).astype(np.float32)
        nodes.append(helper.make_node("BatchNormalization",
                                      [f"cat{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"],
                                      [f"bn{i}"]))
        nodes.append(helper.make_node("Relu", [f"bn{i}"], [f"r{i}"]))
        inits[f"w{i}"] = random_array(rng, (growth, channels, 3, 3), "float32", high=0.2)
        nodes.append(helper.make_node("Conv", [f"r{i}", f"w{i}"], [f"f{i}"], pads=[1] * 4))
        features.append(f"f{i}")
        channels += growth
    nodes.append(helper.make_node("Concat", features, ["y"], axis=1))
    return make_model(nodes, [("x", "float32", [batch, 16, size, size])],
                      [("y", "float32", None)], inits)


@ISAS
@pytest.mark.parametrize("batch", [1, 2])
def test_dense_block_matches_onnxruntime(target, batch, rng):
    # the input is NCHW: the first concat (of it alone) stays NCHW, the later ones
    # concatenate it, transformed once, with the blocked conv outputs
    model = _dense_block(rng, batch=batch)
    x = random_array(rng, (batch, 16, 8, 8), "float32")
    got = heterocc.compile(model, target=target).run([x])[0]
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _blocked(name, blocks, size=4, block=16):
    return te.placeholder((1, blocks, size, size, block), "float32", name)


def _concat(*tensors):
    shape = list(tensors[0].shape)
    shape[1] = sum(t.shape[1] for t in tensors)
    out = TensorType(tuple(shape), "float32")
    return compute_of("Concat")(list(tensors), {"axis": 1}, [out])[0]


def _relu(t):
    return te.compute(t.shape, lambda *i: te.maximum(t[i], te.const(0.0, "float32")),
                      name="relu", dtype="float32")


def test_rule_takes_a_blocked_concat_and_what_follows_it():
    rule = ChannelSelectRule(active_cpu())
    concat = _concat(_blocked("a", 2), _blocked("b", 1))
    assert rule.matches(concat)
    assert rule.matches(_relu(concat))  # the concat inlined into the activation


def test_rule_leaves_plain_elementwise_and_nchw_concats():
    rule = ChannelSelectRule(active_cpu())
    assert not rule.matches(_relu(_blocked("a", 2)))
    plain = [te.placeholder((1, 16, 4, 4), "float32", n) for n in "ab"]
    assert not rule.matches(_relu(_concat(*plain)))


@ISAS
@pytest.mark.parametrize("blocks", [(1, 1), (2, 3, 1)])
def test_scheduled_concat_matches_numpy(target, blocks, rng):
    """relu(concat) of 5-D tensors along their block axis (the rule's stage) against
    NumPy, over two and over six channel blocks of uneven sources."""
    arrays = [random_array(rng, (1, b, 5, 5, 16), "float32") for b in blocks]
    got = heterocc.compile(_concat_model(blocks), target=target).run(arrays)[0]
    np.testing.assert_allclose(got, np.maximum(np.concatenate(arrays, axis=1), 0))


def _concat_model(blocks):
    names = [f"t{i}" for i in range(len(blocks))]
    nodes = [helper.make_node("Concat", names, ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, [(n, "float32", [1, b, 5, 5, 16]) for n, b in zip(names, blocks)],
                      [("y", "float32", None)])


def _lowered_concat(blocks, size, split=True):
    """relu(concat) of 5-D sources of ``blocks`` channel blocks, scheduled by the rule
    and lowered through the TIR pipeline (with or without the split)."""
    from heterocc.te.lower import lower
    from heterocc.tir import lower_pipeline

    tensors = [_blocked(f"t{i}", b, size) for i, b in enumerate(blocks)]
    concat = _concat(*tensors)
    relu = _relu(concat)
    schedule = te.create_schedule([relu])
    schedule[concat].compute_inline()
    ChannelSelectRule(active_cpu()).apply(schedule, relu)
    func = lower(schedule, [*tensors, relu], optimize=False)
    return tensors, lower_pipeline(split_at_channel_selects(func) if split else func)


@pytest.mark.parametrize("size,kind", [(4, ForKind.SERIAL), (16, ForKind.PARALLEL)])
def test_each_piece_of_the_block_loop_reads_one_source(size, kind):
    """Cut at every source's first block, the loop's stores each read one source and no
    select on the block index is left (a small tensor: serial loops one per piece; a
    large one: one parallel loop branching to its pieces)."""
    blocks = (2, 1, 3, 1)
    tensors, func = _lowered_concat(blocks, size)
    (outer,) = [s for s in collect_statements(func.body, lambda n: isinstance(n, For))
                if s.kind is kind][:1] or [None]
    assert outer is not None, func_to_str(func)
    stores = collect_statements(func.body, lambda n: isinstance(n, BufferStore))
    assert len(stores) == len(blocks)
    read = [{load.buffer.name for load in collect(s.value, lambda n: isinstance(n, BufferLoad))}
            for s in stores]
    assert sorted(name for names in read for name in names) == sorted(t.name for t in tensors)
    assert all(len(names) == 1 for names in read)


def test_without_the_split_every_vector_walks_the_chain():
    """The case the split removes: one store reading every source through selects."""
    tensors, func = _lowered_concat((2, 1, 3, 1), 16, split=False)
    (store,) = collect_statements(func.body, lambda n: isinstance(n, BufferStore))
    assert {load.buffer.name for load in collect(store.value, lambda n: isinstance(n, BufferLoad))
            } == {t.name for t in tensors}


@ISAS
@pytest.mark.parametrize("blocks,size", [((1,) * 9, 3), ((2, 1, 1, 3, 1, 2, 1, 1, 2), 14)])
def test_many_sources_match_numpy(target, blocks, size, rng):
    """Nine sources (DenseNet's later concatenations have up to 25), serial and parallel
    forms, against NumPy."""
    arrays = [random_array(rng, (1, b, size, size, 16), "float32") for b in blocks]
    names = [f"t{i}" for i in range(len(blocks))]
    nodes = [helper.make_node("Concat", names, ["c"], axis=1),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [(n, "float32", [1, b, size, size, 16])
                               for n, b in zip(names, blocks)], [("y", "float32", None)])
    got = heterocc.compile(model, target=target).run(arrays)[0]
    np.testing.assert_array_equal(got, np.maximum(np.concatenate(arrays, axis=1), 0))
