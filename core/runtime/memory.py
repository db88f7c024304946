"""Static memory planning of a graph's intermediate tensors.

Every value a node produces lives from its producer to its last reader. The
planner assigns each one a storage slot, reusing a slot once its previous
tenant is dead (the one freed last that fits), so the planned peak is the sum of the slot
sizes rather than the sum of all intermediate tensors.

The constants of a compiled graph live in one pool on transparent huge pages, in the
order its functions read them (:func:`pool_graph_constants`).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir.graph import Graph, Value

#: bytes of a transparent huge page (2 MiB on x86-64, and on AArch64 with 4 KiB pages)
HUGE_PAGE_BYTES = 2 << 20
#: byte alignment of each array in a pool (a cache line: no array shares one with another)
POOL_ALIGNMENT = 64


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


def huge_page_buffer(nbytes: int) -> np.ndarray:
    """A writable ``uint8`` buffer of ``nbytes``, zeroed, which the operating system is
    asked to back with transparent huge pages (``madvise(MADV_HUGEPAGE)`` on anonymous
    memory starting on a huge page boundary) where it can and the buffer spans one;
    elsewhere (no ``MADV_HUGEPAGE``, a buffer under a huge page) a plain array aligned
    to :data:`POOL_ALIGNMENT`. The pages stay mapped while a view of the buffer lives."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or nbytes < HUGE_PAGE_BYTES:
        raw = np.zeros(nbytes + POOL_ALIGNMENT, np.uint8)
        start = -raw.ctypes.data % POOL_ALIGNMENT
        return raw[start:start + nbytes]
    # one huge page more than asked, so that the buffer can start on a boundary (the
    # unused head and tail are never touched: address space, not memory)
    region = mmap.mmap(-1, nbytes + HUGE_PAGE_BYTES,
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        region.madvise(advice)
    except OSError:  # THP off in this kernel: plain pages, the same buffer
        pass
    raw = np.frombuffer(region, np.uint8)  # keeps the mapping alive while a view lives
    start = -raw.ctypes.data % HUGE_PAGE_BYTES
    return raw[start:start + nbytes]


def pooled(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Copies of ``arrays`` (same shapes, dtypes and contents, C order) laid out one
    after another, in the order given, in one :func:`huge_page_buffer`, each starting on
    :data:`POOL_ALIGNMENT` bytes: the constants of a network in the order its kernels
    read them, on as few pages as they fit."""
    offsets, total = [], 0
    for array in arrays:
        offsets.append(total)
        total += -(-array.nbytes // POOL_ALIGNMENT) * POOL_ALIGNMENT
    buffer = huge_page_buffer(total)
    copies = []
    for array, offset in zip(arrays, offsets):
        copy = buffer[offset:offset + array.nbytes].view(array.dtype).reshape(array.shape)
        copy[...] = array
        copies.append(copy)
    return copies


#: dtype kinds a pool holds (bool, integers, floats, complex): plain bytes
_POOLED_KINDS = "biufc"
#: ops whose constant operands kernels read in a packing of their own (a matrix
#: product's B in the CPU's panels, uploaded to a device's memory), never as the graph
#: holds them: a pool's copy of one would cost a compile its page faults for nothing
#: (ViT-B/16: 340 MB of such weights, 2 s)
REPACKED_BY_KERNELS = frozenset({"MatMul", "Gemm"})


def constants_in_reading_order(graph: Graph) -> list[Value]:
    """The constants ``graph``'s nodes read (through function bodies, nested ones
    included), each once, in the order they are first read."""
    return list(_constant_readers(graph))


def _constant_readers(graph: Graph) -> dict[Value, set[str]]:
    """The ops reading each constant of ``graph`` (through function bodies), the
    constants in the order they are first read."""
    readers: dict[Value, set[str]] = {}

    def walk(g: Graph) -> None:
        for node in g.nodes:
            if node.body is not None:
                walk(node.body)
            for v in node.inputs:
                if v is not None and v.is_const:
                    readers.setdefault(v, set()).add(node.op)

    walk(graph)
    return readers


def pool_graph_constants(graph: Graph, least: int = HUGE_PAGE_BYTES) -> None:
    """Every constant array of more than one element that ``graph`` reads copied, in
    reading order, into one :func:`pooled` buffer, its value's ``data`` now that copy
    (single elements are folded into the code; arrays of objects stay as they are, and
    so do the operands of :data:`REPACKED_BY_KERNELS`), where they hold ``least`` bytes
    or more.

    A run of a network streams all its weights once (EfficientNet-B0: 21 MB in 150
    arrays), each kernel's from wherever NumPy put them: thousands of 4 KiB pages, more
    than the TLB covers, so each kernel pays page walks for weights the kernels before
    it evicted; in one buffer of 2 MiB pages they take a few dozen TLB entries (the
    copy costs a compile 10-40 ms for ResNet-18's 45 MB, mostly page faults). The
    contents, shapes and dtypes stay the same; only where the bytes live changes (the
    arrays replaced are freed with their last reference), so kernels built afterwards,
    which take their constants from the graph, read the pool."""
    values = [v for v, ops in _constant_readers(graph).items()
              if v.data.size > 1 and v.data.dtype.kind in _POOLED_KINDS
              and not ops & REPACKED_BY_KERNELS]
    if sum(v.data.nbytes for v in values) < least:
        return  # on fewer pages than a huge page: a copy (and its page faults) for nothing
    for v, copy in zip(values, pooled([v.data for v in values])):
        v.data = copy
