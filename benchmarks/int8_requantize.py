"""The requantization of int8 convolutions from the exact product's high word (one
multiply-high, then the rest of the shift with the rounding and the zero point in int32;
:func:`heterocc.compute.qnn._high_product_form`) against the product shifted by the
product shift and rounded in the steps the reference takes, in alternating rounds in one
process, on the CPU clock.

    python benchmarks/int8_requantize.py [--rounds 6] [--target "llvm -mattr=-avx512f"]
    python benchmarks/int8_requantize.py --model mobilenet_v2 [--rounds 6] [--form split]
                                         [--kernels]
    python benchmarks/int8_requantize.py --residual [--rounds 6] [--target ...]

``--residual``: residual additions instead, each a quantized convolution (MobileNetV2's
1x1 projections, ResNet-18's 3x3) whose output is added to a skip input, the addition's
two terms (an int8 operand less its zero point, product shift ~10, shift 0) requantized
in int32 products (:func:`heterocc.compute.qnn._split_product_form`) against the 64-bit
step; ``--form split`` compares whole models that way, ``--kernels`` the kernels it
changes one by one.

Each layer is an ONNX Runtime-quantized (QDQ, per-channel int8 weights, uint8
activations) 1x1 convolution with ReLU6 followed by a 1x1 projection, so that the
measured kernel (the first convolution, its requantization fused) writes uint8 as in
MobileNetV2. Prints each kernel's median ms per call and new / old; both give the same
bits (checked). With ``--model``, the zoo's int8 model of that name instead (exported
and quantized as ``benchmarks/zoo.py`` does), whole runs compared.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from alternating import alternating_samples

#: (input channels, output channels, size, kernel): MobileNetV2's expansions with few
#: input channels, one with more, and a ResNet-18 3x3
LAYERS = ((16, 96, 112, 1), (24, 144, 56, 1), (32, 192, 28, 1), (96, 576, 14, 1),
          (64, 64, 56, 3))
#: the same for the residual additions: MobileNetV2's projections into a residual sum
#: and ResNet-18's second 3x3 of a basic block
RESIDUAL_LAYERS = ((144, 24, 56, 1), (192, 32, 28, 1), (384, 64, 14, 1), (576, 96, 14, 1),
                   (960, 160, 7, 1), (64, 64, 56, 3), (128, 128, 28, 3))
#: what each ``--form`` turns off for the old side: the deciding functions of
#: :mod:`heterocc.compute.qnn` and what they answer where a form does not apply
FORMS = {"high-word": {"_high_product_form": False, "_clamp_implied": False},
         "split": {"_split_product_form": None}}


def quantized_layer(cin: int, cout: int, size: int, kernel: int, directory: Path):
    """The QDQ model of one layer (see the module's docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from ort_quantize import quantize_qdq

    rng = np.random.default_rng(0)
    shape = (1, cin, size, size)
    weights = rng.standard_normal((cout, cin, kernel, kernel)) / np.sqrt(cin * kernel * kernel)
    inits = [numpy_helper.from_array(weights.astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(0, np.float32), "low"),
             numpy_helper.from_array(np.array(6, np.float32), "high"),
             numpy_helper.from_array((rng.standard_normal((cin, cout, 1, 1))
                                      * (1 / np.sqrt(cout))).astype(np.float32), "project")]
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["y"], pads=[kernel // 2] * 4),
             helper.make_node("Clip", ["y", "low", "high"], ["relu6"]),
             helper.make_node("Conv", ["relu6", "project"], ["output"])]
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9

    onnx.save(model, str(directory / "float.onnx"))
    quantize_qdq(str(directory / "float.onnx"), str(directory / "qdq.onnx"),
                 [{"input": np.random.default_rng(i).standard_normal(shape).astype(np.float32)}
                  for i in range(2)])
    return onnx.load(str(directory / "qdq.onnx"))


def residual_layer(cin: int, cout: int, size: int, kernel: int, directory: Path):
    """The QDQ model of ``project(relu(conv(input) + skip))`` (see the module's
    docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from ort_quantize import quantize_qdq

    rng = np.random.default_rng(0)
    shape, out_shape = (1, cin, size, size), (1, cout, size, size)
    weights = rng.standard_normal((cout, cin, kernel, kernel)) / np.sqrt(cin * kernel * kernel)
    inits = [numpy_helper.from_array(weights.astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((cout, cout, 1, 1))
                                      * (1 / np.sqrt(cout))).astype(np.float32), "project")]
    # the projection after the sum keeps the measured kernel's output int8, as in a model
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["y"], pads=[kernel // 2] * 4),
             helper.make_node("Add", ["y", "skip"], ["sum"]),
             helper.make_node("Relu", ["sum"], ["relu"]),
             helper.make_node("Conv", ["relu", "project"], ["output"])]
    graph = helper.make_graph(
        nodes, "residual", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape),
                            helper.make_tensor_value_info("skip", TensorProto.FLOAT, out_shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9

    onnx.save(model, str(directory / "float.onnx"))
    quantize_qdq(str(directory / "float.onnx"), str(directory / "qdq.onnx"),
                 [{"input": np.random.default_rng(i).standard_normal(shape).astype(np.float32),
                   "skip": np.random.default_rng(i + 9).standard_normal(out_shape)
                   .astype(np.float32)} for i in range(2)])
    return onnx.load(str(directory / "qdq.onnx"))


def compiled_model(model, target: str, allowed: bool, form: str = "high-word"):
    """``model`` compiled for ``target``, the requantization ``form`` (a key of
    :data:`FORMS`) allowed or not."""
    import heterocc
    from heterocc.compute import qnn

    saved = {name: getattr(qnn, name) for name in FORMS[form]}
    if not allowed:
        for name, refused in FORMS[form].items():
            setattr(qnn, name, functools.partial(lambda refused, *args: refused, refused))
    qnn._FORMS.clear()  # the forms decided per attributes, with the functions as set now
    try:
        return heterocc.compile(model, target=target)
    finally:
        for name, function in saved.items():
            setattr(qnn, name, function)
        qnn._FORMS.clear()


def whole_model(name: str, args) -> int:
    """The zoo's int8 ``name`` (see the module's docstring), both forms in alternating
    rounds of whole runs."""
    import onnxruntime as ort
    from ort_quantize import quantize_qdq
    from zoo import CALIBRATION_INPUTS, export, random_feed

    from heterocc.compute import qnn

    with tempfile.TemporaryDirectory() as directory:
        float_path, path = (os.path.join(directory, f"{name}{k}.onnx") for k in ("", ".int8"))
        why = export(name, float_path)
        if why:
            print(f"{name}: {why}")
            return 1
        session = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(2)
        quantize_qdq(float_path, path, [random_feed(session, rng)
                                        for _ in range(CALIBRATION_INPUTS)])
        feed = random_feed(session, np.random.default_rng(1))
        old, new = (compiled_model(path, args.target, allowed, args.form)
                    for allowed in (False, True))
    requantizes = [b.attrs for n in new.graph.nodes if n.body is not None
                   for b in n.body.nodes if b.op == "Requantize"]
    print(f"{name}: {len(requantizes)} requantizations, "
          f"{sum(map(qnn._high_product_form, requantizes))} from the high word, "
          f"{sum(map(qnn._clamp_implied, requantizes))} of them without the clamp; "
          f"{sum(qnn._split_product_form(a, 255) is not None for a in requantizes)} "
          "of int8 terms in int32 products")
    if not np.array_equal(old.run(feed)[0], new.run(feed)[0]):
        print(f"{name}: the two forms differ")
        return 1
    if args.kernels:
        return kernels_of(old, new, args)
    samples = alternating_samples([functools.partial(m.run, feed) for m in (old, new)],
                                  args.rounds * args.calls, args.calls, pause_s=0.0,
                                  clock=time.process_time)
    before, after = (statistics.median(times) for times in samples)
    print(f"{name} int8 on {args.target}: without the {args.form} form {before * 1e3:.2f} "
          f"ms, with it {after * 1e3:.2f} ms, {after / before:.3f}x")
    return 0


def random_input(rng, tensor_type) -> np.ndarray:
    """Random data of a kernel input's type: every value of an integer dtype, or normal."""
    dtype = np.dtype(tensor_type.dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, tensor_type.shape).astype(dtype)
    return rng.standard_normal(tensor_type.shape).astype(dtype)


def kernel_medians(kernels, inputs, args) -> tuple[float, float] | None:
    """Median CPU seconds per call of the two compiled kernels (without, with a form) on
    ``inputs``, in alternating rounds; None when their outputs differ."""
    if not np.array_equal(kernels[0](inputs)[0], kernels[1](inputs)[0]):
        return None
    samples = alternating_samples([functools.partial(k, inputs) for k in kernels],
                                  args.rounds * args.calls, args.calls, pause_s=0.0,
                                  clock=time.process_time)
    before, after = (statistics.median(times) for times in samples)
    return before, after


def kernels_of(old, new, args) -> int:
    """Each function of a compiled model that holds a residual addition (three
    Requantize or more) or a requantization from the high word, by ``args.form``, timed
    alone in both compilations (random inputs, alternating rounds): the whole model's
    ratio drowns a few kernels' change in the other core's noise."""
    from heterocc.compute import qnn

    def takes(node) -> bool:
        requantizes = [b.attrs for b in node.body.nodes if b.op == "Requantize"]
        if args.form == "split":
            return len(requantizes) >= 3
        return any(qnn._high_product_form(a) for a in requantizes)

    rng = np.random.default_rng(0)
    totals = [0.0, 0.0]
    for node in [n for n in new.graph.nodes if n.body is not None and takes(n)]:
        inputs = [random_input(rng, v.type) for v in node.inputs]
        medians = kernel_medians([m.kernels[node.name] for m in (old, new)], inputs, args)
        if medians is None:
            print(f"{node.name}: the kernels differ")
            return 1
        before, after = medians
        totals = [totals[0] + before, totals[1] + after]
        print(f"{node.name} {[v.type.shape for v in node.inputs]}: {before * 1e3:.4f} -> "
              f"{after * 1e3:.4f} ms, {after / before:.3f}x")
    print(f"these kernels together: without the {args.form} form {totals[0] * 1e3:.3f} ms, "
          f"with it {totals[1] * 1e3:.3f} ms, {totals[1] / max(totals[0], 1e-12):.3f}x")
    return 0


def first_convolution(model, target: str, allowed: bool, form: str = "high-word"):
    """The compiled kernel of the model's first convolution and its inputs' types, the
    requantization ``form`` allowed or not."""
    from heterocc.compute import qnn

    compiled = compiled_model(model, target, allowed, form)
    node = next(n for n in compiled.graph.nodes if n.body is not None
                and "ConvInteger" in [b.op for b in n.body.nodes])
    forms = [(qnn._high_product_form(b.attrs), qnn._clamp_implied(b.attrs))
             for b in node.body.nodes if b.op == "Requantize"]
    return compiled.kernels[node.name], [v.type for v in node.inputs], forms


def residual_layers(args) -> list[float]:
    """Each of :data:`RESIDUAL_LAYERS`, its convolution's kernel (the addition fused in)
    with and without the split form; the ratios new / old."""
    rng = np.random.default_rng(1)
    ratios = []
    for cin, cout, size, kernel in RESIDUAL_LAYERS:
        with tempfile.TemporaryDirectory() as directory:
            model = residual_layer(cin, cout, size, kernel, Path(directory))
        (old, types, _), (new, _, _) = (first_convolution(model, args.target, allowed, "split")
                                        for allowed in (False, True))
        inputs = [random_input(rng, t) for t in types]
        medians = kernel_medians((old, new), inputs, args)
        if medians is None:
            print(f"{cin}->{cout} at {size}x{size}: the kernels differ")
            return []
        before, after = medians
        ratios.append(after / before)
        print(f"{kernel}x{kernel} {cin:3d}->{cout:3d} at {size:3d}x{size:<3d} + skip: 64-bit "
              f"terms {before * 1e3:.3f} ms, int32 terms {after * 1e3:.3f} ms, "
              f"{after / before:.2f}x")
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=5, help="calls per timed block")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--model", help="a zoo model (e.g. mobilenet_v2) instead of layers")
    parser.add_argument("--form", choices=sorted(FORMS), default="high-word",
                        help="with --model: the form compared (default high-word)")
    parser.add_argument("--kernels", action="store_true",
                        help="with --model: time the kernels the form changes one by one")
    parser.add_argument("--residual", action="store_true",
                        help="convolutions with a residual addition, the split form")
    args = parser.parse_args()
    os.environ.setdefault("HETEROCC_NUM_THREADS", "1")
    if args.model:
        print(f"load average (1 min) {os.getloadavg()[0]:.2f}; {args.rounds} alternating "
              f"rounds of {args.calls} runs; CPU clock, 1 thread")
        code = whole_model(args.model, args)
        print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end")
        return code
    print(f"{args.target}; load average (1 min) {os.getloadavg()[0]:.2f}; {args.rounds} "
          f"alternating rounds of {args.calls} calls; CPU clock, 1 thread")
    if args.residual:
        ratios = residual_layers(args)
        print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end")
        return 0 if ratios else 1
    rng = np.random.default_rng(1)
    ratios = []
    for cin, cout, size, kernel in LAYERS:
        with tempfile.TemporaryDirectory() as directory:
            model = quantized_layer(cin, cout, size, kernel, Path(directory))
        (old, in_type, _), (new, _, forms) = (first_convolution(model, args.target, high)
                                              for high in (False, True))
        if not all(high for high, _ in forms):
            print(f"{cin}->{cout} at {size}x{size}: the high-word form does not apply")
            continue
        (in_type,) = in_type
        info = np.iinfo(in_type.dtype)
        x = rng.integers(info.min, info.max + 1, in_type.shape).astype(in_type.dtype)
        medians = kernel_medians((old, new), [x], args)
        if medians is None:
            print(f"{cin}->{cout} at {size}x{size}: the kernels differ")
            return 1
        before, after = medians
        ratios.append(after / before)
        print(f"{kernel}x{kernel} {cin:3d}->{cout:3d} at {size:3d}x{size:<3d}: stepwise "
              f"{before * 1e3:.3f} ms, high word {after * 1e3:.3f} ms, {after / before:.2f}x "
              f"(clamp to the limit {'skipped' if all(c for _, c in forms) else 'kept'})")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
