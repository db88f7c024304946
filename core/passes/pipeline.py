"""The compile pipeline: the graph passes ``heterocc.compile`` runs for a set of targets.

:func:`run_pipeline` is what the driver runs before it builds kernels, and what tuning
runs to see the workloads the kernels really have. Its order:

1. the target-independent simplifications (``expand_qoperator``, then
   :data:`DEFAULT_PIPELINE` up to fusion);
2. with ``calibration``: post-training quantization and its clean-up;
3. with several targets: partitioning by the pattern tables of every target but the
   fallback (imported QDQ chains become integer ops first, when not quantizing);
4. the graph passes the fallback target contributes (its ``graph_passes`` hook, e.g.
   the CPU's blocked layout): after quantization and partitioning, so they see only
   the nodes left to it;
5. fusion;
6. the constants moved into one buffer on huge pages, in the order the functions read
   them (``pool_constants``), which the kernels built from the graph then read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..ir.graph import Graph
from ..quantization import QuantizationOptions, quantize_graph
from . import DEFAULT_PIPELINE
from .manager import GraphPass, PassManager, PassRecord
from .partition import PartitionReport, partition


@dataclass
class PipelineResult:
    """The optimized graph, what each pass did, and where partitioning placed every node
    (None with one target: nothing was partitioned)."""

    graph: Graph
    records: list[PassRecord]
    report: PartitionReport | None = None


def _quantization_passes(calibration: list, options: QuantizationOptions | None = None,
                         realize: str = "realize_qdq") -> list[GraphPass | str]:
    def quantize(graph: Graph) -> Graph:
        return quantize_graph(graph, calibration, options)

    quantize.pass_name = "quantize"
    return [quantize, realize, "uint8_to_int8", "fold_constants", "dce"]


def pattern_tables(targets: Mapping[str, object], fallback: str) -> dict[str, list]:
    """The pattern tables the partitioner offers nodes to: those of every target but the
    fallback that has one (the ``pattern_table`` hook), in priority order."""
    return {name: t.pattern_table() for name, t in targets.items()
            if name != fallback and callable(getattr(t, "pattern_table", None))}


def target_graph_passes(target: object) -> list[GraphPass | str]:
    """The graph passes ``target`` contributes (its optional ``graph_passes`` hook)."""
    hook = getattr(target, "graph_passes", None)
    return list(hook()) if callable(hook) else []


def integer_qdq(target: object) -> str | None:
    """The pass (``realize_qdq`` or a variant) by which ``target`` computes imported QDQ
    chains as integer ops when it runs alone (its optional ``integer_qdq`` attribute);
    None: it runs them as written."""
    return getattr(target, "integer_qdq", None) or None


def default_placement(targets: Mapping[str, object]) -> str:
    """``"cost"`` when every target can estimate a function's time, else ``"greedy"``."""
    return choose_placement("auto", targets)[0]


def choose_placement(requested: str, targets: Mapping[str, object]) -> tuple[str, str]:
    """The placement a compile runs for ``requested`` (``"auto"``, ``"cost"`` or
    ``"greedy"``) and why, for the report: ``"auto"`` is cost when every target can
    estimate a function's time (the ``estimate`` hook), greedy otherwise."""
    if requested != "auto":
        return requested, "asked for"
    silent = [name for name, t in targets.items() if not callable(getattr(t, "estimate", None))]
    if silent:
        return "greedy", (f"the default; by cost needs every target's time estimate, and "
                          f"{', '.join(silent)} gives none (no estimate hook)")
    return "cost", f"the default: every target ({', '.join(targets)}) estimates its time"


def run_pipeline(graph: Graph, targets: Mapping[str, object], fallback: str | None = None,
                 strict: bool = False, calibration: Sequence | None = None,
                 dump_ir: str | Callable[[str, Graph], None] | None = None,
                 quantization: QuantizationOptions | None = None,
                 placement: str = "greedy") -> PipelineResult:
    """Run the compile pipeline on ``graph`` for ``targets`` (target instances by name, in
    priority order); ``fallback`` (default: the last) takes what no pattern table claims.
    ``strict``: partitioning raises PartitionError rather than leaving to the fallback
    a match its target refused. ``calibration``: sample inputs for int8 post-training
    quantization (``quantization``: its options). ``dump_ir``: see :class:`PassManager`.
    ``placement``: ``"greedy"``
    (every pattern match on its target) or ``"cost"`` (where the targets' estimates say
    it is faster; see ``partition``)."""
    fallback = list(targets)[-1] if fallback is None else fallback
    tables = pattern_tables(targets, fallback)
    fuse_at = DEFAULT_PIPELINE.index("fuse_ops")
    before: list[GraphPass | str] = ["expand_qoperator", *DEFAULT_PIPELINE[:fuse_at]]
    if calibration is not None:
        # (with an accelerator, the chains its lookup tables take stay whole)
        before += _quantization_passes(list(calibration), quantization,
                                       "realize_qdq_before_tables" if tables else "realize_qdq")
    elif tables or integer_qdq(targets[fallback]):
        # imported QDQ chains become integer ops before their weights fold to float
        # (for an accelerator's patterns, or those of a fallback computing in integers)
        at = before.index("infer_types") + 1
        before[at:at] = ["realize_qdq_before_tables" if tables
                         else integer_qdq(targets[fallback]),
                         "uint8_to_int8"]
    # every pass's result is checked (types included): a rewrite that leaves a node its
    # op's type rule refuses (a per-channel requantization on the wrong axis, a broadcast
    # that does not type-check) stops the compile there, naming the pass and the node,
    # rather than reaching a code generator that would compute something else
    if tables:
        # an accelerator's GEMM core runs quantized average pools as depthwise
        # convolutions, its ALU quantized concatenations as copies and element-wise
        # functions as lookup tables, channel shuffles and splits as gathers
        at = before.index("uint8_to_int8") + 1
        # (constants folded first: a normalization's dequantized parameters become floats)
        before[at:at] = ["fold_constants", "integer_average_pools", "integer_concats",
                         "lookup_tables", "channel_gathers"]
    manager = PassManager(before, dump_ir=dump_ir, check=True)
    graph = manager.run(graph)
    report = None
    if tables:
        graph, report = manager.run_step(
            "partition", lambda g: partition(g, tables, fallback, strict, placement, targets),
            graph)
    graph = manager.run_passes([*target_graph_passes(targets[fallback]),
                                *DEFAULT_PIPELINE[fuse_at:], "pool_constants"], graph)
    return PipelineResult(graph, manager.records, report)
