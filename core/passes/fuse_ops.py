"""Operator fusion over the post-dominator tree (after the TVM paper).

Rules, applied to a node and its immediate post-dominator ``p`` (every path
from the node to the graph's outputs passes through ``p``), fusing the node,
``p`` and everything on the paths between them:

* an out-fusable group (conv2d, dense, matmul) takes its elementwise and
  broadcast epilogue (a residual Add included): the paths and ``p`` must be
  elementwise or broadcast;
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
                if phase == 0:
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
