"""Static memory planning of a graph's intermediate tensors.

Every value a node produces lives from its producer to its last reader. The
planner assigns each one a storage slot, reusing a slot once its previous
tenant is dead (the one freed last that fits), so the planned peak is the sum of the slot
sizes rather than the sum of all intermediate tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import Graph, Value


@dataclass
class MemoryPlan:
    """Storage slot of every intermediate value, and the byte counts."""

    slot_of: dict[Value, int] = field(default_factory=dict)
    slot_bytes: list[int] = field(default_factory=list)
    last_use: dict[Value, int] = field(default_factory=dict)  # node index of the last reader
    naive_bytes: int = 0

    @property
    def planned_bytes(self) -> int:
        return sum(self.slot_bytes)

    def summary(self) -> str:
        saved = 1 - self.planned_bytes / self.naive_bytes if self.naive_bytes else 0.0
        return (f"memory plan: {len(self.slot_bytes)} buffers, {self.planned_bytes:,} bytes "
                f"planned peak vs {self.naive_bytes:,} bytes with one buffer per tensor "
                f"({100 * saved:.0f}% less)")


def plan_memory(graph: Graph) -> MemoryPlan:
    """Liveness-based slot assignment for the values produced by ``graph``'s nodes.

    Graph outputs keep their own buffers for the whole run.
    """
    plan = MemoryPlan()
    returned = set(graph.outputs)
    for index, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v is not None and not v.is_const:
                plan.last_use[v] = index
    produced = [(index, v) for index, node in enumerate(graph.nodes) for v in node.outputs]
    # a returned value, or one nobody reads, has a slot of its own
    slots, plan.slot_bytes = assign_slots([
        Lifetime(index, None if v in returned or v not in plan.last_use
                 else plan.last_use[v], v.type.nbytes) for index, v in produced])
    plan.slot_of = {v: slot for (_, v), slot in zip(produced, slots)}
    plan.naive_bytes = sum(v.type.nbytes for _, v in produced)
    return plan


@dataclass(frozen=True)
class Lifetime:
    """A buffer written at step ``first`` and last read at step ``last`` (both
    included; None: it keeps a slot of its own, never shared), of ``nbytes``."""

    first: int
    last: int | None
    nbytes: int


def assign_slots(lifetimes: list[Lifetime]) -> tuple[list[int], list[int]]:
    """The slot of each buffer (in the order given, which is by ``first``) and the size
    of each slot: a buffer takes a slot whose tenant was last read at an earlier step
    (of those that fit, the one freed last, whose lines the caches likeliest still hold:
    a kernel writing its output there finds it warm; of those freed at one step, the
    smallest; else the largest free one, grown), so two buffers share a slot only if
    their lifetimes do not overlap; the outputs of a step never share with its inputs."""
    slot_of: list[int] = []
    slot_bytes: list[int] = []
    free: list[int] = []  # slots whose tenant is dead
    freed_at: dict[int, int] = {}  # free slot -> the step that last read its tenant
    ending: dict[int, list[int]] = {}
    step = None
    for life in lifetimes:
        if life.first != step:  # free what earlier steps were the last to read
            for s in sorted(e for e in ending if step is None or e < life.first):
                for slot in ending.pop(s):
                    freed_at[slot] = s
                    free.append(slot)
            step = life.first
        size = life.nbytes
        fitting = [s for s in free if slot_bytes[s] >= size] if life.last is not None else []
        if fitting:
            slot = max(fitting, key=lambda s: (freed_at[s], -slot_bytes[s]))
        elif free and life.last is not None:  # grow the largest free slot, not add one
            slot = max(free, key=lambda s: slot_bytes[s])
            slot_bytes[slot] = size
        else:
            slot = len(slot_bytes)
            slot_bytes.append(size)
            slot_of.append(slot)
            if life.last is not None:
                ending.setdefault(life.last, []).append(slot)
            continue
        free.remove(slot)
        slot_of.append(slot)
        ending.setdefault(life.last, []).append(slot)
    return slot_of, slot_bytes


def arena_offsets(lifetimes: list[Lifetime], alignment: int = 64) -> tuple[list[int], int]:
    """Byte offsets of buffers in one arena, and the arena's size: the buffers share
    memory as :func:`assign_slots` lets them, each slot starting on ``alignment`` bytes."""
    slots, sizes = assign_slots(lifetimes)
    starts, total = [], 0
    for size in sizes:
        starts.append(total)
        total += -(-size // alignment) * alignment
    return [starts[s] for s in slots], total
