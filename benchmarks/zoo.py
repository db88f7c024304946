"""A model zoo through heterocc next to ONNX Runtime, float and int8, in one process.

    python benchmarks/zoo.py [--models squeezenet1_1 resnet18 ...] [--rounds 4] [--block 5]
                             [--target llvm] [--float | --int8] [--threads 2]
                             [--clock wall|cpu]

torchvision's classification models (random weights, ``weights=None``) and one layer of
BERT-base and of GPT-2 built from ``transformers`` configs (random weights, nothing
downloaded), each exported by torch (TorchScript exporter, opset 17) and, for int8,
quantized by ONNX Runtime (``quant_pre_process``, then ``quantize_static``: QDQ, uint8
activations, per-channel int8 weights, calibrated on a few random inputs).

Per model and precision: heterocc's compile time, the largest difference of its output
from ONNX Runtime's, the median and best latency of heterocc and of ONNX Runtime
(``--threads`` intra-op threads; heterocc's thread pool gets the same through
``HETEROCC_NUM_THREADS`` unless it is set) measured in ``--rounds`` alternating blocks of
``--block`` runs, their ratio, and the worst op: the op (a function's anchor, e.g. its
Conv or MaxPool, a quantized product computed as a 1x1 ConvInteger its MatMul; ONNX
Runtime's fused kernels by their base op) where heterocc's per-op
profile exceeds ONNX Runtime's profiler most, in ms per run ("none" where no op's
exceeds it), with the share of heterocc's time its slowest function takes and where that
ran (``llvm/numpy``: a NumPy fallback), and how many functions ran on NumPy fallbacks;
with ``--reference``, whether the output equals heterocc's NumPy reference of the
compiled graph (for int8: the integer reference, bit for bit); on ``llvm`` at two threads
or more, the share of heterocc's parallel loops in the timed runs that a worker ran on
another CPU than the caller's (the others ran at one thread's speed: a machine whose
scheduler held the threads together). The first lines name the CPU and ISA and the load.

torch, torchvision and transformers are optional (``pip install heterocc[zoo]``): a model
whose libraries are missing is listed as skipped, with why, and the script exits 0. It
exits 1 only when heterocc fails to compile or run a model ONNX Runtime runs.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass

import numpy as np

from heterocc.targets.llvm.runtime import pool_counters

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from alternating import alternating_samples  # noqa: E402  (beside this script)
from machine import core_round_trip_ns, describe  # noqa: E402  (beside this script)
from ort_quantize import quantize_qdq  # noqa: E402  (beside this script)

#: torchvision classification models: name -> extra constructor arguments
VISION = {
    "resnet18": {}, "resnet50": {}, "mobilenet_v2": {}, "mobilenet_v3_small": {},
    "mobilenet_v3_large": {}, "efficientnet_b0": {}, "squeezenet1_1": {},
    "shufflenet_v2_x1_0": {}, "regnet_y_400mf": {}, "densenet121": {},
    "googlenet": {"aux_logits": False, "init_weights": True}, "mnasnet1_0": {},
    "convnext_tiny": {}, "vit_b_16": {},
}
#: transformer layers from ``transformers`` configs (base sizes, one layer)
TEXT = ("bert_layer", "gpt2_layer")
#: tokens of a transformer layer's input
TOKENS = 128
VOCAB = 1000
#: inputs the int8 models are calibrated on
CALIBRATION_INPUTS = 4
#: runs whose per-op times make each profile
PROFILE_RUNS = 5
#: what a timed run is measured with (``--clock``)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _missing(*modules: str) -> str | None:
    """The first of ``modules`` that cannot be imported, or None."""
    import importlib.util

    return next((m for m in modules if importlib.util.find_spec(m) is None), None)


def _torch_export(module, example, path: str, input_name: str) -> None:
    import torch

    kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module, (example,), path, input_names=[input_name],
                          output_names=["output"], opset_version=17, **kwargs)


def _vision(name: str, path: str) -> None:
    import torch
    import torchvision
    from torch_models import randomize_batchnorm

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, **VISION[name])
    model = randomize_batchnorm(model).eval()
    fastpath = getattr(getattr(torch.backends, "mha", None), "set_fastpath_enabled", None)
    if fastpath is not None:
        # ViT's attention in eval mode takes torch's fused kernel, which the exporter
        # cannot write as ONNX: export the composite ops it stands for
        fastpath(False)
    _torch_export(model, torch.randn(1, 3, 224, 224), path, "input")


def _text(name: str, path: str) -> None:
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if name == "bert_layer":
        model = tf.BertModel(tf.BertConfig(num_hidden_layers=1, vocab_size=VOCAB))
    else:  # gpt2_layer (export checked the name)
        model = tf.GPT2Model(tf.GPT2Config(n_layer=1, vocab_size=VOCAB, bos_token_id=0,
                                           eos_token_id=0))
    model.config.return_dict = False
    from transformers_int8 import _Wrapped  # the last hidden state, from token ids only

    _torch_export(_Wrapped(model.eval()), torch.randint(0, VOCAB, (1, TOKENS)), path,
                  "input_ids")


@contextlib.contextmanager
def _quiet():
    """Without the quantizer's warnings (per-channel axes of 1-D LayerNorm weights and
    the like), which would bury the table."""
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.getLogger().setLevel(level)


def export(name: str, path: str) -> str | None:
    """Export ``name`` to ``path``; None, or why it was skipped. A name that is no zoo
    model is an error (not some other model benchmarked under it)."""
    if name not in VISION and name not in TEXT:
        raise ValueError(f"no zoo model is named {name!r}; the zoo has "
                         f"{', '.join([*VISION, *TEXT])}")
    needed = ("torch", "torchvision") if name in VISION else ("torch", "transformers")
    missing = _missing(*needed)
    if missing:
        return f"{missing} is not installed (pip install heterocc[zoo])"
    (_vision if name in VISION else _text)(name, path)
    return None


def quantize(float_path: str, path: str) -> None:
    """``float_path``'s int8 form at ``path`` as this benchmark makes it: ONNX Runtime's
    ``quantize_static`` (QDQ, per channel), calibrated on :data:`CALIBRATION_INPUTS`
    random feeds (seed 2), so that every script studying a zoo model quantizes the same."""
    import onnxruntime as ort

    session = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(2)
    with _quiet():
        quantize_qdq(float_path, path, [random_feed(session, rng)
                                        for _ in range(CALIBRATION_INPUTS)])


def model_arguments(parser) -> None:
    """The arguments of a script that studies one zoo model: the model, ``--int8``,
    ``--runs`` and ``--target``."""
    parser.add_argument("model", choices=[*VISION, *TEXT])
    parser.add_argument("--int8", action="store_true", help="the ORT-quantized QDQ model")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--target", default="llvm")


def random_feed(session, rng) -> dict:
    """A random input for each of ``session``'s inputs (token ids below VOCAB)."""
    feed = {}
    for spec in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in spec.shape]
        if "int" in spec.type:
            feed[spec.name] = rng.integers(0, VOCAB, shape).astype(np.int64)
        else:
            feed[spec.name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def base_op(op: str) -> str:
    """An op's name without its layout, fusion or integer prefix/suffix, so that
    heterocc's and ONNX Runtime's kernels of one op compare (``ConvNCHWc``,
    ``FusedConv``, ``QLinearConv``: ``Conv``; ``NhwcMaxPool``: ``MaxPool``). Global
    pools count as pools: heterocc computes a blocked global pool as a pool whose window
    is the whole image. A ``Gemm`` counts as a ``MatMul`` (ONNX Runtime fuses a MatMul
    and the Add of its bias into one, heterocc a MatMul and its epilogue into a
    function), and ONNX Runtime's NCHWc reorders as heterocc's ``LayoutTransform``."""
    for prefix in ("QLinear", "DynamicQuantize", "Fused", "Nhwc", "Global"):
        if op.startswith(prefix) and len(op) > len(prefix):
            op = op[len(prefix):]
    if len(op) > 1 and op[0] == "Q" and op[1].isupper():  # QGemm, QAttention
        op = op[1:]
    for suffix in ("NCHWc", "IntegerToFloat", "Integer"):
        if op.endswith(suffix) and len(op) > len(suffix):
            op = op[:-len(suffix)]
    return _SAME_OP.get(op, op)


#: ops one engine computes that the other computes under another name
_SAME_OP = {"Gemm": "MatMul", "ReorderInput": "LayoutTransform",
            "ReorderOutput": "LayoutTransform"}


#: how much of a function's time an op of each kind is taken to be: a product or a
#: convolution first, then a reduction (pooling, softmax), then an opaque op
_ANCHOR_RANK = {"OUT_FUSABLE": 3, "REDUCTION": 2, "OPAQUE": 1}

#: the conversions at a quantized function's edges: the op between them is what it computes
#: (a LookupTable requantizes a concatenation's part, as ORT's QLinearConcat does inside)
_QUANTIZATION_GLUE = frozenset({"DequantizeLinear", "QuantizeLinear", "Requantize", "Cast",
                                "LookupTable"})


def anchor_op(ops: str) -> str:
    """The op a fused function of ``ops`` (``"LayoutTransform+ConvNCHWc+Relu"``) is timed
    under: its first product or convolution, else its first reduction, else its first
    opaque op, else its first op that is not a (de)quantization (``"DequantizeLinear+
    Concat+Relu"``: ``Concat``), else its first op."""
    from heterocc.ops import get_op
    from heterocc.ops.registry import has_op

    def rank(name: str) -> int:  # a composite's name is no op: rank 0
        if name in _QUANTIZATION_GLUE:
            return -1
        return _ANCHOR_RANK.get(get_op(name).fusion_kind.name, 0) if has_op(name) else 0

    names = [name.split(" x")[0] for name in ops.split("+")]  # "MatMul x2": MatMul
    return base_op(max(names, key=rank))  # max keeps the first of equal rank


def product_functions(compiled) -> set[str]:
    """The functions of ``compiled`` whose ``ConvInteger`` is a product of rows: a
    quantized MatMul or Gemm that ``llvm`` computes as a 1x1 convolution of one-pixel
    images (``targets/llvm/int8_matmul.py``), timed as the ``MatMul`` it is, as ONNX
    Runtime's ``QGemm`` and ``MatMulInteger`` are. (One row, a classifier's, is no
    product of rows: it stays with the convolutions, as a squeeze-excite's 1x1 on a
    pooled image does.)"""
    from heterocc.targets.llvm.schedules.int8_rows import row_products

    return {function.name for _, function in compiled.graph.walk()
            if function.body is not None and any(
                node.op == "ConvInteger" and row_products(
                    node.inputs[0].type.shape, node.inputs[1].type.shape, node.attrs)
                for node in function.body.nodes)}


def heterocc_profile(compiled, feed: dict, runs: int):
    """(ms per run by anchor op, (slowest function's ops, its target, its share)); a
    product computed as a convolution counts as ``MatMul`` (:func:`product_functions`)."""
    compiled.enable_profiling()
    for _ in range(runs):
        compiled.run(feed)
    entries = list(compiled._profile.values())
    products = product_functions(compiled)
    by_op: dict[str, float] = collections.defaultdict(float)
    for e in entries:
        by_op["MatMul" if e.node in products else anchor_op(e.op)] += e.seconds * 1e3 / runs
    total = sum(e.seconds for e in entries) or 1.0
    slowest = max(entries, key=lambda e: e.seconds)
    return by_op, (slowest.op, slowest.target, slowest.seconds / total)


def ort_profile(path: str, threads: int, feed: dict, runs: int, directory: str):
    """ONNX Runtime's kernel time per run by base op, in ms, from its profiler."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(directory, "ort_profile")
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    session.run(None, feed)  # the first run's allocations are not part of the figure
    for _ in range(runs):
        session.run(None, feed)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    by_op: dict[str, float] = collections.defaultdict(float)
    kernels = sorted((e for e in events if e.get("cat") == "Node"
                      and e.get("name", "").endswith("_kernel_time")), key=lambda e: e["ts"])
    seen = set()
    for e in kernels:
        if e["name"] not in seen:  # each node's first call: the warm-up run
            seen.add(e["name"])
            continue
        by_op[ort_kernel_op(e["args"].get("op_name", "?"), e["name"])] += e["dur"] / 1e3 / runs
    return by_op


def ort_kernel_op(op_name: str, node_name: str) -> str:
    """The base op of one of ONNX Runtime's kernels (``op_name``, its profiler's
    ``node_name``). A BatchNormalization that ONNX Runtime's NCHWc transformer rewrote as
    a per-channel convolution (one not folded into a convolution before it: DenseNet's 62
    BatchNormalization + Relu after its Concats) keeps its name
    (``.../BatchNormalization_output_0_bn_nchwc``) and counts as BatchNormalization, not
    as Conv: its time would otherwise hide in ONNX Runtime's convolutions, where heterocc
    computes it in the function of the Concat it follows."""
    op = base_op(op_name)
    if op == "Conv" and "BatchNormalization" in node_name:
        return "BatchNormalization"
    return op


#: the column's resolution (ms per run): an op over ORT's time by less is within it
WORST_OP_RESOLUTION_MS = 0.005


def worst_op(ours: dict[str, float], theirs: dict[str, float]) -> str:
    """The op whose time (ms per run, by base op) exceeds ONNX Runtime's most, with both
    figures; where none exceeds it by what the column can show, says so."""
    worst = max(set(ours) | set(theirs), key=lambda op: ours.get(op, 0.0) - theirs.get(op, 0.0))
    if ours.get(worst, 0.0) - theirs.get(worst, 0.0) < WORST_OP_RESOLUTION_MS:
        return "none: every op within ORT's time"
    return f"{worst} {ours[worst]:.2f} vs {theirs.get(worst, 0.0):.2f}"


@dataclass
class Row:
    model: str
    precision: str
    compile_s: float = 0.0
    diff: float = 0.0
    ms: tuple[float, float] = (0.0, 0.0)  #: heterocc's median, best
    ort_ms: tuple[float, float] = (0.0, 0.0)
    worst: str = ""
    slowest: str = ""
    reference: str = ""  #: against heterocc's NumPy reference, where ``--reference`` asks
    #: of heterocc's parallel loops in the timed runs, the share a worker ran on another
    #: CPU than the caller's (the others ran at one thread's speed); None: not counted
    spread: float | None = None
    #: the first two CPUs' cache-line round trip (``core_round_trip_ns``, ns) before and
    #: after the timed runs, at more than one thread: two-thread figures depend on it
    apart: tuple[int | None, int | None] | None = None


    def line(self) -> str:
        ratio = self.ms[0] / self.ort_ms[0]
        return (f"{self.model:19s} {self.precision:5s} {self.compile_s:7.2f} "
                f"{self.diff:9.2e} {self.ms[0]:8.2f} {self.ms[1]:8.2f} {self.ort_ms[0]:8.2f} "
                f"{self.ort_ms[1]:8.2f} {ratio:6.2f}x  {self.worst}  | {self.slowest}"
                + (f" | reference: {self.reference}" if self.reference else "")
                + (f" | pool: {100 * self.spread:.0f}% of loops on 2+ CPUs"
                   if self.spread is not None else "")
                + (" | cores {} / {} ns apart before / after".format(
                    *(a if a is not None else "?" for a in self.apart))
                   if self.apart is not None else ""))


HEADER = (f"{'model':19s} {'prec':5s} {'comp_s':>7s} {'max|diff|':>9s} {'med_ms':>8s} "
          f"{'best_ms':>8s} {'ort_med':>8s} {'ort_best':>8s} {'ratio':>7s}  "
          "worst op (heterocc vs ORT ms/run)  | slowest function (target, share); "
          "functions on NumPy")


def measure(name: str, precision: str, path: str, args, directory: str) -> Row:
    """One model at one precision: compile, compare, time in alternating rounds, profile."""
    import onnxruntime as ort

    import heterocc

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = random_feed(session, np.random.default_rng(1))
    t0 = time.perf_counter()
    compiled = heterocc.compile(path, target=args.target)
    row = Row(name, precision, compile_s=time.perf_counter() - t0)
    ours = compiled.run(feed)[0]
    theirs = session.run(None, feed)[0]
    row.diff = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
    counted = args.threads > 1 and args.target.split()[0] == "llvm"
    before = pool_counters() if counted else (0, 0)
    apart_before = core_round_trip_ns() if args.threads > 1 else None
    samples = alternating_samples([lambda: compiled.run(feed),
                                   lambda: session.run(None, feed)],
                                  args.rounds * args.block, args.block, pause_s=0.2,
                                  clock=CLOCKS[args.clock])
    (row.ms, row.ort_ms) = [(statistics.median(s) * 1e3, min(s) * 1e3) for s in samples]
    if args.threads > 1:
        row.apart = (apart_before, core_round_trip_ns())
    if counted:
        loops, spread = (after - start for after, start in zip(pool_counters(), before))
        row.spread = spread / loops if loops else None
    ours_by_op, (ops, target, share) = heterocc_profile(compiled, feed, PROFILE_RUNS)
    on_numpy = sum(e.target.endswith("/numpy") for e in compiled._profile.values())
    theirs_by_op = ort_profile(path, args.threads, feed, PROFILE_RUNS, directory)
    row.worst = worst_op(ours_by_op, theirs_by_op)
    row.slowest = f"{ops[:40]} ({target}, {100 * share:.0f}%); {on_numpy} on NumPy"
    if args.reference:
        row.reference = against_reference(compiled, feed, ours)
    return row


def against_reference(compiled, feed: dict, output: np.ndarray) -> str:
    """How the compiled model's first output compares with the same graph evaluated op by
    op by heterocc's NumPy reference (for an int8 model, the integer semantics the CPU
    and the accelerator must reproduce bit for bit)."""
    from heterocc.runtime.interpreter import evaluate

    expected = evaluate(compiled.graph, [feed[v.name] for v in compiled.graph.inputs])[0]
    if np.array_equal(output, expected):
        return "bit-exact"
    return f"max|diff| {float(np.max(np.abs(output.astype(np.float64) - expected))):.3g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=[*VISION, *TEXT],
                        default=[*VISION, *TEXT])
    parser.add_argument("--rounds", type=int, default=4, help="alternating blocks per engine")
    parser.add_argument("--block", type=int, default=5, help="timed runs per block")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of both")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall: elapsed time; cpu: CPU seconds of the process, all "
                             "threads (with --threads 1, a figure that a loaded machine "
                             "does not inflate; with more, it counts threads that wait "
                             "busily)")
    parser.add_argument("--reference", action="store_true",
                        help="also compare each model's output with heterocc's NumPy "
                             "reference of the compiled graph (int8: the integer semantics, "
                             "bit-exact or not); slow for large models")
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument("--float", action="store_true", help="float models only")
    precision.add_argument("--int8", action="store_true", help="int8 (QDQ) models only")
    args = parser.parse_args()
    os.environ.setdefault("HETEROCC_NUM_THREADS", str(args.threads))
    precisions = ["float"] if args.float else ["int8"] if args.int8 else ["float", "int8"]
    missing = _missing("onnxruntime")
    if missing:
        print(f"skipped: the zoo needs onnxruntime ({missing} is not installed)")
        return 0

    print(describe(args.target))
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}; {args.threads} threads each; "
          f"{args.rounds} rounds of {args.block} runs; {args.clock} clock")
    print(HEADER)
    failed = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            float_path = os.path.join(tmp, f"{name}.onnx")
            try:
                why = export(name, float_path)
            except Exception as exc:  # the exporter's failure, not heterocc's
                why = f"torch could not export it: {type(exc).__name__}: {exc}"
            if why:
                print(f"{name:19s} skipped: {why}")
                skipped += 1
                continue
            for precision in precisions:
                path = float_path
                if precision == "int8":
                    path = os.path.join(tmp, f"{name}.int8.onnx")
                    quantize(float_path, path)
                try:
                    row = measure(name, precision, path, args, tmp)
                except Exception as exc:
                    print(f"{name:19s} {precision:5s} FAILED: {type(exc).__name__}: {exc}")
                    failed += 1
                    continue
                print(row.line(), flush=True)
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end; "
          f"{skipped} skipped, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
