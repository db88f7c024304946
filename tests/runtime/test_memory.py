import numpy as np
import pytest

import heterocc
from heterocc.models import resnet18, tiny_cnn
from heterocc.runtime.memory import (
    HUGE_PAGE_BYTES,
    POOL_ALIGNMENT,
    Lifetime,
    assign_slots,
    constants_in_reading_order,
    huge_page_buffer,
    plan_memory,
    pooled,
)


@pytest.mark.slow  # ResNet-18 compiled end to end
def test_plan_reuses_buffers_and_never_aliases_live_values():
    graph = heterocc.compile(resnet18(size=64)).graph
    plan = plan_memory(graph)
    assert plan.planned_bytes < 0.6 * plan.naive_bytes
    # no two values that are alive at the same time share a slot
    produced = {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    live = {v: (produced[v], plan.last_use.get(v, len(graph.nodes))) for v in plan.slot_of}
    by_slot: dict[int, list] = {}
    for v, slot in plan.slot_of.items():
        by_slot.setdefault(slot, []).append(live[v])
        assert v.type.nbytes <= plan.slot_bytes[slot]
    for intervals in by_slot.values():
        intervals.sort()
        for (_, end), (start, _) in zip(intervals, intervals[1:]):
            assert start >= end


def test_executor_drops_dead_intermediates_and_still_matches():
    compiled = heterocc.compile(tiny_cnn())
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    executor = next(iter(compiled._cache.values())).executor
    assert executor.memory.planned_bytes <= executor.memory.naive_bytes
    a = compiled.run([x])[0]
    b = compiled.run([x])[0]
    np.testing.assert_array_equal(a, b)
    assert "planned peak" in executor.memory.summary()


def test_a_buffer_takes_the_fitting_slot_freed_last():
    # the slot whose tenant was read last is the likeliest still in the caches: the
    # kernel writing the new buffer finds it warm; of slots freed at one step, the
    # smallest that fits (the arena stays as small as best fit would make it there)
    slots, sizes = assign_slots([Lifetime(0, 1, 100), Lifetime(0, 2, 100),
                                 Lifetime(3, 4, 100)])
    assert slots == [0, 1, 1] and sizes == [100, 100]
    slots, sizes = assign_slots([Lifetime(0, 1, 200), Lifetime(0, 1, 100),
                                 Lifetime(0, 3, 300), Lifetime(2, 4, 50)])
    assert slots == [0, 1, 2, 1] and sizes == [200, 100, 300]


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def test_pooled_copies_keep_their_contents_in_order_in_one_buffer():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 5)).astype(np.float32),
              rng.integers(-9, 9, (7,), dtype=np.int8),  # an odd byte count
              np.arange(12, dtype=np.int64).reshape(2, 3, 2),
              np.asfortranarray(rng.standard_normal((4, 3))),  # copied in C order
              np.array([True, False, True])]
    copies = pooled(arrays)
    starts = [c.ctypes.data for c in copies]
    for array, copy in zip(arrays, copies):
        assert copy.shape == array.shape and copy.dtype == array.dtype
        assert copy.flags.c_contiguous and not np.shares_memory(copy, array)
        np.testing.assert_array_equal(copy, array)
    assert len({id(_root(c)) for c in copies}) == 1  # one buffer
    assert starts == sorted(starts) and all(s % POOL_ALIGNMENT == 0 for s in starts)
    # each right after the last, rounded up to the alignment
    for (a, s), t in zip(zip(arrays, starts), starts[1:]):
        assert t - s == -(-a.nbytes // POOL_ALIGNMENT) * POOL_ALIGNMENT


def test_a_buffer_spanning_huge_pages_starts_on_one():
    small = huge_page_buffer(1000)
    assert small.nbytes == 1000 and small.ctypes.data % POOL_ALIGNMENT == 0
    large = huge_page_buffer(HUGE_PAGE_BYTES + 100)
    assert large.nbytes == HUGE_PAGE_BYTES + 100 and large.dtype == np.uint8
    assert not large.any()  # zeroed, and writable
    large[-1] = 7
    if hasattr(__import__("mmap"), "MADV_HUGEPAGE"):
        assert large.ctypes.data % HUGE_PAGE_BYTES == 0


#: a model whose weights span huge pages (two 3x3 convolutions of 256 channels: 4.7 MB)
WIDE_CNN = dict(channels=256, size=8)


def test_a_compiled_models_kernels_read_its_constants_from_one_pool():
    model = tiny_cnn(**WIDE_CNN)
    # direct convolutions: a Winograd kernel reads its weight transformed (a packing of
    # its own, made from the pooled array when the kernel is built)
    compiled = heterocc.compile(model, target="llvm -winograd=0")
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_allclose(compiled.run([x])[0], expected, rtol=1e-4, atol=1e-5)
    graph = compiled.graph
    pooled_values = [v for v in constants_in_reading_order(graph) if v.data.size > 1
                     and not any(n.op == "Gemm" and v in n.inputs for _, n in graph.walk())]
    assert len(pooled_values) >= 6  # the convolutions' weights and biases, the dense's bias
    assert len({id(_root(v.data)) for v in pooled_values}) == 1
    starts = [v.data.ctypes.data for v in pooled_values]
    assert starts == sorted(starts)  # in the order the functions read them
    kernel_arrays = [c for k in compiled.kernels.values() for c in getattr(k, "constants", ())
                     if c.size > 1]
    # the kernels take the graph's (pooled) arrays, not copies of the old ones; the
    # dense's weight, which its kernel reads in panels of its own, stays out
    (gemm,) = [n for _, n in graph.walk() if n.op == "Gemm"]
    assert _root(gemm.inputs[1].data) is not _root(pooled_values[0].data)
    pool = _root(pooled_values[0].data)
    for c in kernel_arrays:
        if any(c.shape == v.data.shape and np.array_equal(c, v.data) for v in pooled_values):
            assert _root(c) is pool
    assert sum(_root(c) is pool for c in kernel_arrays) >= 6


def test_a_loaded_artifacts_constants_are_pooled_as_a_compiles(tmp_path):
    model = tiny_cnn(**WIDE_CNN)
    heterocc.compile(model, target="llvm").export(str(tmp_path / "a"))
    loaded = heterocc.load(str(tmp_path / "a"))
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_allclose(loaded.run([x])[0], expected, rtol=1e-4, atol=1e-5)
    values = [v for v in constants_in_reading_order(loaded.graph) if v.data.size > 1
              and not any(n.op == "Gemm" and v in n.inputs for _, n in loaded.graph.walk())]
    assert values and len({id(_root(v.data)) for v in values}) == 1


def test_constants_under_a_huge_page_stay_where_they_are():
    compiled = heterocc.compile(tiny_cnn(), target="llvm")  # 0.1 MB of weights
    values = [v for v in constants_in_reading_order(compiled.graph) if v.data.size > 1]
    assert len({id(_root(v.data)) for v in values}) == len(values)
