"""run_pipeline: the passes the driver and tuning both run, with the partitioner's report
returned and the fallback target's own graph passes before fusion."""

from onnx import helper

from heterocc.frontend import from_onnx
from heterocc.passes.pipeline import run_pipeline
from heterocc.patterns import CompositePattern, is_op, wildcard
from tests.conftest import make_model


class _Cpu:
    """A fallback target with a graph pass of its own (notes the ops left to it)."""

    name = "cpu"

    def __init__(self):
        self.seen = []

    def graph_passes(self):
        def look(graph):
            self.seen.append(sorted(n.op for n in graph.nodes if n.body is None))
            return graph

        look.pass_name = "cpu_look"
        return [look]


class _Accel:
    name = "accel"

    def pattern_table(self):
        return [CompositePattern("relu", is_op("Relu")(wildcard()))]


def _graph(rng):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["r"], ["y"], name="sigmoid")]
    return from_onnx(make_model(nodes, [("x", "float32", [2, 3])], [("y", "float32", None)]))


def test_one_target_runs_no_partitioning_and_returns_no_report(rng):
    cpu = _Cpu()
    result = run_pipeline(_graph(rng), {"cpu": cpu})
    names = [r.name for r in result.records]
    assert result.report is None and "partition" not in names
    assert names.index("cpu_look") == names.index("fuse_ops") - 1
    assert cpu.seen == [["Relu", "Sigmoid"]]


def test_partitioning_returns_its_report_and_the_fallback_sees_what_is_left(rng):
    cpu = _Cpu()
    result = run_pipeline(_graph(rng), {"accel": _Accel(), "cpu": cpu})
    names = [r.name for r in result.records]
    assert names.index("partition") < names.index("cpu_look") < names.index("fuse_ops")
    placed = {p.node: p.target for p in result.report.placements}
    assert placed == {"relu": "accel", "sigmoid": "cpu"}
    assert cpu.seen == [["Sigmoid"]]  # the Relu is in the accelerator's function


def test_dumps_number_every_pass_in_order(rng, tmp_path):
    result = run_pipeline(_graph(rng), {"accel": _Accel(), "cpu": _Cpu()},
                          dump_ir=str(tmp_path))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files[0] == "00_input.txt"
    assert [f.split("_", 1)[1][:-4] for f in files[1:]] == [r.name for r in result.records]
    assert [int(f[:2]) for f in files] == list(range(len(files)))


def test_the_llvm_target_declares_its_layout_pass():
    from heterocc.passes.manager import pass_name
    from heterocc.targets.llvm import LLVMTarget

    for spec, lanes in (("llvm -mcpu=x86-64-v4", 16), ("llvm -mcpu=x86-64-v3", 8)):
        *integer, layout, fold = LLVMTarget(cpu=spec).graph_passes()
        # quantized concatenations stay in integers between integer convolutions,
        # element-wise functions of one int8 tensor become tables, global average pools
        # sum integers, and integer matrix products run as 1x1 integer convolutions
        assert [p if isinstance(p, str) else pass_name(p) for p in integer] == [
            "integer_concats", "lookup_tables", "integer_global_average_pools",
            "integer_products_as_convolutions"]
        # the layout pass pads convolution outputs to the target's vectors
        assert (pass_name(layout), fold) == ("alter_layout", "fold_constants")
        assert layout.keywords == {"vector_channels": lanes}
    assert LLVMTarget(blocked_layout=False).graph_passes() == integer
