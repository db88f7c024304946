"""The placement's maximum flow (``_residual_reach``): the nodes the source reaches in
the residual graph are the least minimum cut, checked against every cut of small
random graphs shaped like the placement's (each unit an edge from the source or to the
sink, or both; saving terms through extra nodes)."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np

from heterocc.passes.placement import _residual_reach


def _least_minimum_cut(graph, nodes: int) -> set[int]:
    cuts = []
    for bits in itertools.product((0, 1), repeat=nodes - 2):
        side = {0} | {k + 2 for k, b in enumerate(bits) if b}
        capacity = sum(c for a, edges in graph.items() for b, c in edges.items()
                       if a in side and b not in side)
        cuts.append((capacity, side))
    least = min(c for c, _ in cuts)
    return set.intersection(*[s for c, s in cuts if c == least])


def test_the_source_side_is_the_least_minimum_cut():
    rng = np.random.default_rng(0)
    for _ in range(60):
        inner = int(rng.integers(1, 7))
        graph = defaultdict(lambda: defaultdict(int))
        for x in range(2, inner + 2):
            if rng.random() < 0.7:
                graph[0][x] += int(rng.integers(0, 5))
            if rng.random() < 0.7:
                graph[x][1] += int(rng.integers(0, 5))
            for y in range(2, inner + 2):
                if y != x and rng.random() < 0.25:
                    graph[x][y] += int(rng.integers(1, 4))
        assert _residual_reach(graph, 0, 1) == _least_minimum_cut(graph, inner + 2)
