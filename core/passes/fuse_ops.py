"""Operator fusion over the post-dominator tree (after the TVM paper).

Rules, applied to a node and its immediate post-dominator ``p`` (every path
from the node to the graph's outputs passes through ``p``), fusing the node,
``p`` and everything on the paths between them:

* an out-fusable group (conv2d, dense, matmul) takes its elementwise and
  broadcast epilogue (a residual Add included): the paths and ``p`` must be
  elementwise or broadcast;
* an elementwise or broadcast group fuses forward into ``p`` when the paths
  are injective at most and ``p`` is at most a reduction;
* an injective group does the same, in a second phase, so that out-fusable
  ops have taken their epilogues first; reductions thus take injective inputs;
* opaque ops stand alone.

Every resulting group, single ops included, becomes a function node whose
``body`` holds the group's nodes.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import GraphError
from ..ir.graph import FUNCTION_OP, Graph, NameScope, Node, Value
from ..ops import FusionKind, get_op
from .manager import register_pass
from .rewrite import substitute

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
    """Union-find over node indices with each group's pattern and size."""

    def __init__(self, kinds: list[FusionKind]):
        self.parent = list(range(len(kinds)))
        self.pattern = list(kinds)
        self.size = [1] * len(kinds)

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
        self.size[ra] += self.size[rb]

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
        if sum(groups.size[r] for r in members) > MAX_FUSED_OPS:
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
            elif kind == FusionKind.INJECTIVE and phase == 1:
                try_fuse(i, p, FusionKind.INJECTIVE, FusionKind.REDUCTION)
    return [groups.find(i) for i in range(n)]


def _function_name(ops: list[str], scope: NameScope) -> str:
    base = "fused_" + "_".join(op.lower() for op in ops[:6])
    if len(ops) > 6:
        base += f"_{len(ops) - 6}more"
    return scope.fresh(base)


@register_pass("fuse_ops")
def fuse_ops(graph: Graph) -> Graph:
    """Group nodes by the fusion rules and wrap each group in a function node."""
    if any(node.body is not None for node in graph.nodes):
        return graph  # already fused
    roots = fusion_groups(graph)
    members: dict[int, list[int]] = {}
    for i, r in enumerate(roots):
        members.setdefault(r, []).append(i)
    producer_group = {v: roots[i] for i, node in enumerate(graph.nodes) for v in node.outputs}
    returned = set(graph.outputs)
    users = graph.consumers()
    scope = NameScope.of(graph)

    # Topological order of groups (Kahn; ties by first member).
    deps = {r: {producer_group[v] for i in idx for v in graph.nodes[i].inputs
                if v is not None and v in producer_group} - {r}
            for r, idx in members.items()}
    order, done = [], set()
    while len(order) < len(members):
        ready = [r for r in members if r not in done and deps[r] <= done]
        if not ready:
            raise GraphError("fuse_ops formed a cycle between fused groups (internal error)")
        r = min(ready)
        order.append(r)
        done.add(r)

    mapping: dict[Value, Value] = {}
    new_nodes = []
    for r in order:
        group_nodes = [graph.nodes[i] for i in members[r]]
        inside = set(group_nodes)
        params: dict[Value, Value] = {}
        for node in group_nodes:
            for v in node.inputs:
                if v is not None and not v.is_const and v not in params \
                        and producer_group.get(v) != r:
                    params[v] = Value(v.name, v.type)
        body_nodes = [replace(node, inputs=[params.get(v, v) if v is not None else None
                                            for v in node.inputs]) for node in group_nodes]
        outs = [v for node in group_nodes for v in node.outputs
                if v in returned or any(u not in inside for u in users.get(v, ()))]
        body = Graph(list(params.values()), outs, body_nodes,
                     _function_name([n.op for n in group_nodes], scope))
        call_outs = [Value(v.name, v.type) for v in outs]
        mapping.update(zip(outs, call_outs))
        pattern = max(node_kind(node) for node in group_nodes)
        new_nodes.append(Node(FUNCTION_OP, list(params), call_outs,
                              {"pattern": int(pattern), "primitive": 1}, body.name, body))
    return substitute(graph, mapping, new_nodes)


def fused_functions(graph: Graph) -> list[Node]:
    """The function nodes of a fused graph."""
    return [node for node in graph.nodes if node.body is not None]
