"""The SDK tutorial (docs/add-a-target.md, "Try it") runs as written: its shell commands in
order from an empty directory, then its Python block."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dotprod_accel")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "add-a-target.md"


def _block(marker: str) -> str:
    text = PAGE.read_text()
    assert text.count(marker) == 1, f"{PAGE.name} has no single {marker}"
    block = re.match(r"\s*```\w*\n(.*?)\n```", text.split(marker, 1)[1], re.DOTALL)
    assert block, f"no code block after {marker}"
    return block.group(1)


def _command(line: str) -> list[str]:
    """A shell line as argv, run with this interpreter (``heterocc`` as its module)."""
    words = shlex.split(line)
    if words[0] == "heterocc":
        return [sys.executable, "-m", "heterocc.cli", *words[1:]]
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    raise AssertionError(f"the tutorial runs {words[0]!r}; teach this test to run it")


def test_the_tutorial_commands_run_in_order(tmp_path):
    lines = [ln for ln in _block("<!-- tutorial-commands -->").splitlines() if ln.strip()]
    assert len(lines) >= 4
    outputs = []
    for line in lines:
        done = subprocess.run(_command(line), cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, line
        outputs.append(done.stdout)
    assert (tmp_path / "mlp_int8.onnx").exists() and (tmp_path / "y.npz").exists()
    assert "dotprod" in outputs[0]  # heterocc targets lists it
    assert "dotprod" in outputs[2] and "llvm" in outputs[2]  # the placement uses both
    assert "latency over 10 runs" in outputs[3]


def test_the_tutorial_python_block_runs(tmp_path, monkeypatch):
    from dotprod_accel.models import main

    monkeypatch.chdir(tmp_path)
    assert main(["mlp_int8.onnx"]) == 0
    exec(compile(_block("<!-- tutorial-python -->"), str(PAGE), "exec"), {})
