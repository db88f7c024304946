"""ONNX Runtime's static quantization as the benchmarks use it: ``quant_pre_process``,
then ``quantize_static`` to QDQ with per-channel weights, calibrated on given inputs."""

from __future__ import annotations


def quantize_qdq(src: str, dst: str, feeds: list[dict], activation: str = "QUInt8",
                 weight: str = "QInt8") -> None:
    """``src`` quantized to ``dst`` (QDQ, per-channel weights, ``activation`` and
    ``weight`` types named as ``onnxruntime.quantization.QuantType``), calibrated on
    ``feeds`` (input name -> array dicts)."""
    from onnxruntime import quantization as oq

    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(feeds)

        def get_next(self):
            return next(self.feeds, None)

    pre = dst + ".pre.onnx"
    oq.quant_pre_process(src, pre, skip_symbolic_shape=True)
    oq.quantize_static(pre, dst, Reader(), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                       activation_type=getattr(oq.QuantType, activation),
                       weight_type=getattr(oq.QuantType, weight))
