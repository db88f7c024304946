"""Compiling across two targets: a test target that takes Conv(+Relu) composites."""

from dataclasses import dataclass

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.cli import main
from heterocc.models import tiny_cnn
from heterocc.patterns import CompositePattern, is_constant, is_op, optional, wildcard
from heterocc.runtime.interpreter import evaluate
from heterocc.targets import register_target

CONV = is_op("Conv")(wildcard(), is_constant(), optional(is_constant()))


@dataclass
class ConvOnlyTarget:
    """Runs Conv composites through the interpreter, counting its calls."""

    name: str = "convonly"
    calls: int = 0

    def pattern_table(self):
        def check(nodes):
            channels = nodes[0].inputs[0].type.shape[1]
            return None if channels >= 8 else f"{channels} input channels (fewer than 8)"

        return [CompositePattern("conv_relu", is_op("Relu")(CONV), check),
                CompositePattern("conv", CONV, check)]

    def build(self, function):
        def kernel(args):
            self.calls += 1
            return evaluate(function.body, args)

        return kernel


register_target("convonly", ConvOnlyTarget, "test target for partitioning")


def test_two_targets_run_and_report():
    model = tiny_cnn()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    compiled = heterocc.compile(model, target="convonly,reference")
    ref = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_allclose(compiled.run([x])[0], ref, rtol=1e-6)
    report = compiled.placement_report
    placed = {p.node: (p.target, p.reason) for p in report.placements}
    assert placed["stem_conv"] == ("reference", "convonly pattern conv_relu matched, but "
                                   "3 input channels (fewer than 8)")
    assert placed["block_a_conv"][0] == "convonly"
    targets = [n.attrs.get("target") for n in compiled.graph.nodes if n.body is not None]
    assert "convonly" in targets and None in targets


def test_strict_mode_raises_for_a_refused_match():
    with pytest.raises(heterocc.errors.PartitionError, match="3 input channels \\(fewer than 8\\)"):
        heterocc.compile(tiny_cnn(), target=["convonly", "reference"], strict=True)


def test_partition_command(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(tiny_cnn(), str(path))
    assert main(["partition", str(path), "--target", "convonly,reference", "--dot",
                 str(tmp_path / "p.dot")]) == 0
    out = capsys.readouterr().out
    assert "nodes per target" in out and "convonly" in out
    assert "convonly_region" in (tmp_path / "p.dot").read_text()
