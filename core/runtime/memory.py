"""Static memory planning of a graph's intermediate tensors.

Every value a node produces lives from its producer to its last reader. The
planner assigns each one a storage slot, reusing a slot once its previous
tenant is dead (best fit by size), so the planned peak is the sum of the slot
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
    free: list[int] = []  # slots whose tenant is dead
    ending: dict[int, list[Value]] = {}
    for v, last in plan.last_use.items():
        ending.setdefault(last, []).append(v)
    for index, node in enumerate(graph.nodes):
        for v in node.outputs:
            size = v.type.nbytes
            plan.naive_bytes += size
            if v in returned or v not in plan.last_use:
                plan.slot_of[v] = len(plan.slot_bytes)
                plan.slot_bytes.append(size)
                continue
            fitting = [s for s in free if plan.slot_bytes[s] >= size]
            if fitting:
                slot = min(fitting, key=lambda s: plan.slot_bytes[s])
            elif free:  # grow the largest free slot rather than adding one
                slot = max(free, key=lambda s: plan.slot_bytes[s])
                plan.slot_bytes[slot] = size
            else:
                slot = len(plan.slot_bytes)
                plan.slot_bytes.append(size)
                plan.slot_of[v] = slot
                continue
            free.remove(slot)
            plan.slot_of[v] = slot
        for v in ending.get(index, []):
            if v in plan.slot_of and v not in returned:
                free.append(plan.slot_of[v])
    return plan
