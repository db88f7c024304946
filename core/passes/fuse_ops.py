"""Operator fusion over the post-dominator tree (after the TVM paper).

Rules, applied to a node and its immediate post-dominator ``p`` (every path
from the node to the graph's outputs passes through ``p``), fusing the node,
``p`` and everything on the paths between them:

* an out-fusable group (conv2d, dense, matmul) takes its elementwise and
  broadcast epilogue (a residual Add included): the paths and ``p`` must be
  elementwise or broadcast; of two convolutions whose quantized outputs are
  added, the first stops at its 8-bit output (the other's epilogue widens it);
* an elementwise or broadcast group fuses forward into ``p`` when the paths
  are injective at most and ``p`` is at most a reduction; an integer one also
  where ``p`` is an elementwise step of an out-fusable group's epilogue and the
  paths are broadcast at most (a quantized residual addition's other term);
* an injective group does the same, in a second phase, so that out-fusable
  ops have taken their epilogues first; reductions thus take injective inputs;
* opaque ops stand alone.

Every resulting group, single ops included, becomes a function node whose
``body`` holds the group's nodes.
"""

from __future__ import annotations

from ..ir.graph import Graph, NameScope, Node
from ..ops import FusionKind, get_op
from .manager import register_pass
from .rewrite import outline

#: largest number of ops in one fused function
MAX_FUSED_OPS = 256


def node_kind(node: Node) -> FusionKind:
    if node.body is not None:
        return FusionKind(node.attrs.get("pattern", FusionKind.OPAQUE))
    return get_op(node.op).fusion_kind


def post_dominators(graph: Graph) -> list[int]:
    """Immediate post-dominator of each node (by index); ``len(nodes)`` is the exit."""
    n = len(graph.nodes)
    index = {node: i for i, node in enumerate(graph.nodes)}
    users = graph.consumers()
    returned = set(graph.outputs)
    ipdom = [n] * n
    depth = [0] * (n + 1)

    def lca(a: int, b: int) -> int:
        while a != b:
            if depth[a] < depth[b]:
                a, b = b, a
            a = ipdom[a] if a < n else n
        return a

    for i in range(n - 1, -1, -1):
        node = graph.nodes[i]
        succ: set[int] = set()
        for v in node.outputs:
            if v in returned or v not in users:
                succ.add(n)
            succ.update(index[u] for u in users.get(v, ()))
        if not succ:
            succ = {n}
        it = iter(succ)
        dom = next(it)
        for s in it:
            dom = lca(dom, s)
        ipdom[i] = dom
        depth[i] = depth[dom] + 1
    return ipdom


class _Groups:
    """Union-find over node indices with each group's pattern and members (by root;
    empty for a node that is no longer a root)."""

    def __init__(self, kinds: list[FusionKind]):
        self.parent = list(range(len(kinds)))
        self.pattern = list(kinds)
        self.members = [[i] for i in range(len(kinds))]

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if ra > rb:
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.pattern[ra] = max(self.pattern[ra], self.pattern[rb])
        # the shorter list appended to the longer: each node moves O(log n) times
        kept, moved = self.members[ra], self.members[rb]
        if len(kept) < len(moved):
            kept, moved = moved, kept
        kept.extend(moved)
        self.members[ra], self.members[rb] = kept, []

    def size(self, i: int) -> int:
        """The number of nodes in ``i``'s group."""
        return len(self.members[self.find(i)])

    def kind(self, i: int) -> FusionKind:
        return self.pattern[self.find(i)]


def _paths_between(src: int, dst: int, succ: list[list[int]]) -> set[int]:
    """Nodes strictly between ``src`` and its post-dominator ``dst``."""
    seen: set[int] = set()
    stack = [s for s in succ[src] if s != dst]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(s for s in succ[i] if s != dst and s not in seen)
    return seen


def fusion_groups(graph: Graph) -> list[int]:
    """The group (root node index) of every node."""
    nodes = graph.nodes
    n = len(nodes)
    kinds = [node_kind(node) for node in nodes]
    ipdom = post_dominators(graph)
    index = {node: i for i, node in enumerate(nodes)}
    users = graph.consumers()
    succ = [sorted({index[u] for v in node.outputs for u in users.get(v, ())}) for node in nodes]
    producer = {v: i for i, node in enumerate(nodes) for v in node.outputs}
    groups = _Groups(kinds)

    def try_fuse(i: int, p: int, path_max: FusionKind, sink_max: FusionKind) -> None:
        between = _paths_between(i, p, succ)
        if any(groups.kind(j) > path_max for j in between) or groups.kind(p) > sink_max:
            return
        members = {groups.find(j) for j in between | {i, p}}
        if sum(groups.size(r) for r in members) > MAX_FUSED_OPS:
            return
        for j in between | {p}:
            groups.union(i, j)

    for phase in (0, 1):
        for i in range(n):
            p = ipdom[i]
            if p == n or groups.find(i) == groups.find(p):
                continue
            kind = groups.kind(i)
            if kind == FusionKind.OPAQUE:
                continue
            if kind == FusionKind.OUT_FUSABLE:
                if phase == 0 and not _widens_for_a_later_epilogue(nodes, kinds, succ, ipdom,
                                                                   producer, p):
                    try_fuse(i, p, FusionKind.BROADCAST, FusionKind.BROADCAST)
            elif kind <= FusionKind.BROADCAST:
                try_fuse(i, p, FusionKind.INJECTIVE, FusionKind.REDUCTION)
                if groups.find(i) != groups.find(p) and _side_chain_of_epilogue(
                        nodes, groups, i, p, kinds):
                    try_fuse(i, p, FusionKind.BROADCAST, FusionKind.OUT_FUSABLE)
            elif kind == FusionKind.INJECTIVE and phase == 1:
                try_fuse(i, p, FusionKind.INJECTIVE, FusionKind.REDUCTION)
    return [groups.find(i) for i in range(n)]


def _integer(node: Node) -> bool:
    """Whether every input and output of ``node`` is an integer tensor."""
    return all(v.type.dtype.startswith(("int", "uint"))
               for v in (*node.inputs, *node.outputs) if v is not None)


def _is_byte_widening(node: Node) -> bool:
    """Whether ``node`` casts an 8-bit integer tensor to a wider integer one."""
    return node.op == "Cast" and node.inputs[0].type.dtype in ("int8", "uint8") and \
        _integer(node) and node.outputs[0].type.dtype not in ("int8", "uint8")


def _widens_for_a_later_epilogue(nodes: list[Node], kinds: list[FusionKind],
                                 succ: list[list[int]], ipdom: list[int],
                                 producer: dict, p: int) -> bool:
    """Whether ``p``, reached by an out-fusable group's epilogue, widens its 8-bit
    output into an integer chain that ends in an addition whose other term comes, along
    a chain of its own, from an out-fusable op later in the graph (a quantized residual
    addition of two convolutions' outputs: a ResNet's downsampling skip). The epilogue
    then stops at its 8-bit value, which the later op's epilogue reads, rather than
    writing the int32 term (4x the bytes) for it to read. Of two such terms exactly one
    stops: the one whose out-fusable op comes first. ``producer``: the index of each
    value's producer."""
    n = len(nodes)
    if not _is_byte_widening(nodes[p]):
        return False
    last = j = p
    while j < n and _single_integer_step(nodes[j], kinds[j], succ[j]):
        last, j = j, ipdom[j]
    if j == n or kinds[j] > FusionKind.BROADCAST or not _integer(nodes[j]):
        return False
    operands = _tensor_inputs(nodes[j])
    if len(operands) != 2:
        return False
    starts, own = [], None
    for operand in operands:
        if producer.get(operand) == last:
            own = len(starts)
        # walk the term back to where it starts, through single-reader integer steps
        k = producer.get(operand)
        while k is not None and _single_integer_step(nodes[k], kinds[k], succ[k]):
            k = producer.get(_tensor_inputs(nodes[k])[0])
        if k is None or kinds[k] != FusionKind.OUT_FUSABLE:
            return False
        starts.append(k)
    return own is not None and starts[own] < starts[1 - own]


def _single_integer_step(node: Node, kind: FusionKind, readers: list[int]) -> bool:
    """Whether ``node`` is an elementwise or broadcast integer step of one tensor
    operand (other operands constants) read by one node."""
    return kind <= FusionKind.BROADCAST and _integer(node) and \
        len(_tensor_inputs(node)) == 1 and len(readers) == 1


def _tensor_inputs(node: Node) -> list:
    """``node``'s inputs that are not constants."""
    return [v for v in node.inputs if v is not None and not v.is_const]


def _side_chain_of_epilogue(nodes: list[Node], groups: _Groups, i: int, p: int,
                            kinds: list[FusionKind]) -> bool:
    """Whether ``i``'s group is an integer elementwise chain whose post-dominator ``p``
    is an elementwise step of an out-fusable group's epilogue (a quantized residual
    addition's other term: ``Requantize(int32(skip) - zero)``). The chain then joins
    that epilogue, which reads the int8 operand, whichever of the two the node order
    reached first (else the chain is a function of its own writing int32)."""
    if groups.kind(p) != FusionKind.OUT_FUSABLE or kinds[p] > FusionKind.BROADCAST:
        return False
    return all(_integer(nodes[j]) for j in groups.members[groups.find(i)])


def _function_name(ops: list[str], scope: NameScope) -> str:
    base = "fused_" + "_".join(op.lower() for op in ops[:6])
    if len(ops) > 6:
        base += f"_{len(ops) - 6}more"
    return scope.fresh(base)


@register_pass("fuse_ops")
def fuse_ops(graph: Graph) -> Graph:
    """Group op nodes by the fusion rules and wrap each group in a function node.

    Function nodes already in the graph (partitioned regions) stay as they are.
    """
    if all(node.body is not None for node in graph.nodes):
        return graph
    roots = fusion_groups(graph)
    members: dict[int, list[Node]] = {}
    for i, r in enumerate(roots):
        if graph.nodes[i].body is None:
            members.setdefault(r, []).append(graph.nodes[i])
    scope = NameScope.of(graph)

    def make_call(nodes: list[Node], body: Graph) -> tuple[str, dict]:
        pattern = max(node_kind(n) for n in nodes)
        return _function_name([n.op for n in nodes], scope), {"pattern": int(pattern),
                                                              "primitive": 1}

    return outline(graph, list(members.values()), make_call)


def fused_functions(graph: Graph) -> list[Node]:
    """The function nodes of a fused graph."""
    return [node for node in graph.nodes if node.body is not None]
