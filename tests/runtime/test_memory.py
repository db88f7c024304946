import numpy as np
import pytest

import heterocc
from heterocc.models import resnet18, tiny_cnn
from heterocc.runtime.memory import Lifetime, assign_slots, plan_memory


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
