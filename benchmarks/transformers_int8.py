"""Int8 transformer encoders against ONNX Runtime: output steps off per target.

    python benchmarks/transformers_int8.py [--tokens 8] [--targets llvm vta,llvm]

BERT, DistilBERT and a T5 encoder are built from small ``transformers`` configs (random
weights, nothing downloaded: 2 layers, hidden 64), exported by torch, pre-processed by
``onnxruntime.quantization.quant_pre_process`` and quantized by ``quantize_static``
(QDQ, int8 activations and weights, per-channel weights, a few random token sequences
to calibrate). Each model then runs on heterocc for every target and on ONNX Runtime
with graph optimizations disabled (the reference: the QDQ graph as written) and
enabled; the figure is the largest difference of any output element, in steps of the
output's quantization scale (the scale of the DequantizeLinear producing it).

torch and transformers are optional for heterocc: without them this says so and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402  (beside this script)
from ort_quantize import quantize_qdq  # noqa: E402  (beside this script)

VOCAB = 100


def _models(hidden: int, layers: int):
    """(name, torch module) of each encoder, random weights from a fixed seed."""
    import torch
    import transformers as tf

    common = {"vocab_size": VOCAB}
    heads = 2
    builders = {
        "bert": lambda: tf.BertModel(tf.BertConfig(
            hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=2 * hidden, max_position_embeddings=64, **common)),
        "distilbert": lambda: tf.DistilBertModel(tf.DistilBertConfig(
            dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=2 * hidden,
            max_position_embeddings=64, **common)),
        "t5-encoder": lambda: tf.T5EncoderModel(tf.T5Config(
            d_model=hidden, d_ff=2 * hidden, num_layers=layers, num_heads=heads,
            d_kv=hidden // heads, **common)),
    }
    for name, build in builders.items():
        torch.manual_seed(0)
        model = build().eval()
        model.config.return_dict = False
        yield name, model


class _Wrapped:
    """The encoder's last hidden state only, from token ids only."""

    def __new__(cls, model):
        import torch

        class Encoder(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids):
                return self.model(input_ids=input_ids)[0]

        return Encoder().eval()


def _export(model, tokens: int, path: str, exporter: str) -> None:
    """torch's ONNX export: ``dynamo`` (torch.export; its tensors in ``path.data``) or
    ``torchscript`` (the tracing exporter)."""
    import torch

    ids = torch.randint(0, VOCAB, (1, tokens))
    with torch.no_grad():
        if exporter == "dynamo":
            torch.onnx.export(_Wrapped(model), (ids,), path, input_names=["input_ids"],
                              output_names=["hidden"], dynamo=True, external_data=True)
            # quant_pre_process runs shape inference on a copy in a temporary folder,
            # where the external data is not: hand it the tensors inline
            import onnx

            onnx.save(onnx.load(path), path)
        else:
            torch.onnx.export(_Wrapped(model), (ids,), path, input_names=["input_ids"],
                              output_names=["hidden"], opset_version=17, dynamo=False)


def _quantize(src: str, dst: str, tokens: int) -> None:
    rng = np.random.default_rng(7)
    quantize_qdq(src, dst, [{"input_ids": rng.integers(0, VOCAB, (1, tokens))}
                            for _ in range(8)], activation="QInt8")


def output_scale(model, name: str) -> float:
    """The scale of the DequantizeLinear that produces graph output ``name`` (1.0 when a
    float op produces it: the figure is then in real units)."""
    from onnx import numpy_helper

    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    producer = next((n for n in model.graph.node if name in n.output), None)
    if producer is None or producer.op_type != "DequantizeLinear":
        return 1.0
    return float(np.asarray(inits[producer.input[1]]).reshape(-1)[0])


def steps_off(a: np.ndarray, b: np.ndarray, scale: float) -> int:
    """The largest element difference in steps of ``scale``."""
    return int(np.rint(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))) / scale))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--inputs", type=int, default=3, help="token sequences compared")
    parser.add_argument("--targets", nargs="+", default=["llvm", "vta,llvm"])
    parser.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript")
    # greedy: every layer an accelerator's patterns take runs there, so the figures are
    # those of its integer arithmetic (placement by cost may keep small layers on the CPU)
    parser.add_argument("--placement", choices=["greedy", "cost", "auto"], default="greedy")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"skipped: this benchmark needs torch and transformers ({exc.name} is missing); "
              "pip install torch transformers")
        return 0
    import onnx
    import onnxruntime as ort

    import heterocc

    print(describe())
    print(f"{args.layers} layers, hidden {args.hidden}, {args.tokens} tokens, "
          f"{args.inputs} random inputs, {args.exporter} export, {args.placement} placement; "
          "steps off: max |difference| / output scale")
    print("model        Q nodes | vs ORT, optimizations off: " + ", ".join(args.targets)
          + " | vs ORT, optimized: " + ", ".join(args.targets) + ", ORT off"
          + " | nodes per target")
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in _models(args.hidden, args.layers):
            float_path = os.path.join(tmp, f"{name}.onnx")
            int8_path = os.path.join(tmp, f"{name}.int8.onnx")
            _export(model, args.tokens, float_path, args.exporter)
            _quantize(float_path, int8_path, args.tokens)
            proto = onnx.load(int8_path)
            scale = output_scale(proto, proto.graph.output[0].name)
            plain = ort.SessionOptions()
            plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sessions = {"off": ort.InferenceSession(int8_path, plain,
                                                    providers=["CPUExecutionProvider"]),
                        "on": ort.InferenceSession(int8_path,
                                                   providers=["CPUExecutionProvider"])}
            compiled = {t: heterocc.compile(int8_path, target=t, placement=args.placement)
                        for t in args.targets}
            rng = np.random.default_rng(11)
            off = {(ref, t): 0 for ref in sessions for t in [*args.targets, "off"]}
            for _ in range(args.inputs):
                ids = rng.integers(0, VOCAB, (1, args.tokens))
                outputs = {t: c.run([ids])[0] for t, c in compiled.items()}
                expected = {ref: s.run(None, {"input_ids": ids})[0]
                            for ref, s in sessions.items()}
                outputs["off"] = expected["off"]
                for (ref, t) in off:
                    off[ref, t] = max(off[ref, t], steps_off(outputs[t], expected[ref], scale))
            q_nodes = sum(n.op_type == "QuantizeLinear" for n in proto.graph.node)
            print(f"{name:11s} {q_nodes:5d}   | "
                  + ", ".join(str(off["off", t]) for t in args.targets) + " | "
                  + ", ".join(str(off["on", t]) for t in [*args.targets, "off"]) + " | "
                  + "; ".join(_nodes_per_target(c, t) for t, c in compiled.items()))
    return 0


def _nodes_per_target(compiled, targets: str) -> str:
    """``vta 36, llvm 310``: where the compiled model's nodes ran (one target: all)."""
    if compiled.placement_report is None:  # nothing was partitioned
        return f"{targets} all"
    counts = compiled.placement_report.by_target()
    return ", ".join(f"{t} {n}" for t, n in sorted(counts.items(), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    sys.exit(main())
