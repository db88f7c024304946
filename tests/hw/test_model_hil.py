"""Hardware-in-the-loop for a whole model: the compiler's accelerator streams,
replayed on the RTL, agree bit-exactly with the simulator."""

import onnx
import pytest

from heterocc.cli import main
from heterocc.models import tiny_cnn
from heterocc.targets.vta.hil import model_hil
from tests.hw.conftest import BUILD_ROOT, require_rtl_tools

pytestmark = [pytest.mark.rtl, pytest.mark.hil]


def test_compiled_model_streams_agree_on_the_rtl():
    require_rtl_tools("icarus")
    results = model_hil(tiny_cnn(size=8), simulator="icarus", build_root=BUILD_ROOT)
    assert len(results) == 4  # three convolutions and the dense layer
    assert all(r.matches for r in results), [r.summary() for r in results]
    for r in results:
        assert abs(r.rtl_cycles / r.model_cycles - 1) < 0.05, r.summary()


def test_hil_command_takes_a_model(tmp_path, capsys):
    require_rtl_tools("icarus")
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(size=8), str(path))
    assert main(["hil", str(path), "--device", "rtl", "--simulator", "icarus",
                 "--build-dir", str(BUILD_ROOT)]) == 0
    assert "4/4 accelerator functions agree" in capsys.readouterr().out
