"""Resource limits with clear errors: tensors checked against the memory budget before
anything is allocated, int64-overflowing shapes refused, long chains compiled without
recursion, and the CLI never exiting 0 without output."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import heterocc
from heterocc import cli
from heterocc.errors import HeteroccError, InputError, ResourceError
from heterocc.runtime.budget import current_budget, memory_budget, parse_size

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import resource_probes as probes  # noqa: E402


def test_sizes_parse_with_binary_suffixes():
    assert parse_size("8G") == 8 << 30
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1000") == 1000
    with pytest.raises(InputError):
        parse_size("lots")
    with pytest.raises(InputError):
        parse_size("-1G")


def test_the_budget_is_set_by_the_environment_and_in_a_block(monkeypatch):
    monkeypatch.setenv("HETEROCC_MEMORY_BUDGET", "3M")
    assert current_budget() == 3 << 20
    with memory_budget("1K"):
        assert current_budget() == 1024
    assert current_budget() == 3 << 20


@pytest.mark.parametrize("make", [probes.constant_of_shape, probes.expand])
def test_a_tensor_over_the_budget_is_refused_naming_it(make):
    with pytest.raises(ResourceError) as error:
        heterocc.compile(make(), target="llvm")
    message = str(error.value)
    assert "'y'" in message and "(100000, 100000)" in message
    assert "40,000,000,000 bytes" in message and "memory budget" in message


def test_a_huge_input_is_refused_before_anything_is_allocated():
    with pytest.raises(ResourceError, match=r"input 'x' of shape \(100000, 100000\)"):
        heterocc.compile(probes.huge_input(), target="llvm")


def test_a_small_budget_refuses_what_a_large_one_runs():
    model = probes.expand()
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(
        np.array([300, 400], np.int64), "shape"))
    with memory_budget("100K"), pytest.raises(ResourceError, match="480,000 bytes"):
        heterocc.compile(model, target="llvm")
    x = np.full((1, 1), 2.5, np.float32)
    (y,) = heterocc.compile(model, target="llvm").run([x])
    np.testing.assert_array_equal(y, np.full((300, 400), 2.5, np.float32))


def test_a_reshape_whose_size_overflows_int64_is_refused():
    with pytest.raises(HeteroccError, match="4294967296"):
        heterocc.compile(probes.reshape_overflow(), target="llvm")


def test_the_cli_exits_2_with_the_reason_for_a_huge_input(tmp_path, capsys):
    path = tmp_path / "huge.onnx"
    onnx.save(probes.huge_input(), str(path))
    assert cli.main(["run", str(path)]) == 2
    captured = capsys.readouterr()
    assert "heterocc: error: input 'x'" in captured.err and "memory budget" in captured.err


def test_a_long_elementwise_chain_compiles_and_matches_the_reference():
    model = probes.chain(600)  # fused functions nest deeper than the recursive visitors go
    x = np.array([-2.0, -0.5, 0.5, 3.0], np.float32)
    compiled = heterocc.compile(model, target="llvm")
    expected = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_array_equal(compiled.run([x])[0], expected)


@pytest.mark.slow
def test_a_20000_node_chain_compiles_without_recursion():
    x = np.array([-2.0, -0.5, 0.5, 3.0], np.float32)
    (y,) = heterocc.compile(probes.chain(20_000), target="llvm").run([x])
    np.testing.assert_array_equal(y, np.zeros(4, np.float32))  # even count: Relu(-Relu(..))


def test_the_cli_turns_an_unforeseen_memory_error_into_a_message(monkeypatch, capsys):
    def exhausted(args):
        raise MemoryError

    monkeypatch.setattr(cli, "cmd_targets", exhausted)
    assert cli.main(["targets"]) == 2
    assert "heterocc: error: out of memory" in capsys.readouterr().err
