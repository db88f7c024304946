"""Dump the generated code of every CPU kernel of a few models, to check that a
refactoring leaves it byte-identical.

For each model (ResNet-18 and MobileNetV2 exported from ``benchmarks/torch_models.py``
when torch is installed, or given as ONNX paths; the transformer encoder layer of
``heterocc.models``) and each CPU description (``llvm``: the host, and
``llvm -mattr=-avx512f``: AVX2's tiles), the model is compiled and every distinct kernel
of the llvm target is written out twice: its lowered TIR (the PrimFunc's text) and its
assembly. The module counter in the kernels' JIT symbols (``name__hccN``) is replaced by
``__hcc`` so that the count of modules built before does not show as a difference.
``digests.txt`` lists a SHA-256 per file; compare two runs with ``diff -r`` or by digest::

    python tools/dump_codegen.py /tmp/before
    (refactor)
    python tools/dump_codegen.py /tmp/after
    diff /tmp/before/digests.txt /tmp/after/digests.txt
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile

TARGETS = {"avx512": "llvm", "avx2": "llvm -mattr=-avx512f"}
#: with ``--cuda``: the CUDA C of every GPU function (the CPU emulation runs them)
CUDA_TARGETS = {"cuda": "cuda"}
_MODULE_COUNTER = re.compile(r"__hcc\d+")


def _models(onnx_paths: dict[str, str]) -> dict[str, object]:
    """name -> ONNX model (path or ModelProto)."""
    from heterocc.models import encoder_layer

    models: dict[str, object] = dict(onnx_paths)
    missing = [n for n in ("resnet18", "mobilenet_v2") if n not in models]
    if missing:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
        from torch_models import export  # needs torch

        directory = tempfile.mkdtemp(prefix="dump_codegen_")
        for name in missing:
            models[name] = export(name, os.path.join(directory, f"{name}.onnx"))
    models["encoder"] = encoder_layer(seq=64, d_model=256, heads=4, ffn=1024)
    return models


def dump(model, target: str, directory: str) -> list[tuple[str, str]]:
    """Write the TIR and assembly of every compiled kernel of ``model`` for ``target``
    into ``directory``; returns ``(file name, sha256)`` of each file written."""
    import heterocc

    compiled = heterocc.compile(model, target=target)
    os.makedirs(directory, exist_ok=True)
    if target.startswith("cuda"):
        return _dump_cuda(compiled.build_static().targets["cuda"], directory)
    llvm = compiled.build_static().targets["llvm"]
    written = []
    for index, function in enumerate(llvm._compiled.values()):
        if function.error is not None:
            texts = {"error": f"{type(function.error).__name__}: {function.error}\n"}
        else:
            asm = _MODULE_COUNTER.sub("__hcc", function.code._owner.assembly())
            texts = {"tir": str(function.lowered) + "\n", "s": asm}
        for suffix, text in texts.items():
            name = f"{index:03d}.{suffix}"
            with open(os.path.join(directory, name), "w") as f:
                f.write(text)
            written.append((name, hashlib.sha256(text.encode()).hexdigest()))
    fallbacks = "".join(f"{k}: {v}\n" for k, v in sorted(llvm.fallbacks.items()))
    with open(os.path.join(directory, "fallbacks.txt"), "w") as f:
        f.write(fallbacks)
    written.append(("fallbacks.txt", hashlib.sha256(fallbacks.encode()).hexdigest()))
    return written


def _dump_cuda(cuda, directory: str) -> list[tuple[str, str]]:
    """The CUDA C of each distinct GPU module, in the order they were compiled."""
    written = []
    modules = {id(m): m for m in cuda.modules.values()}
    for index, module in enumerate(modules.values()):
        name = f"{index:03d}.cu"
        with open(os.path.join(directory, name), "w") as f:
            f.write(module.source)
        written.append((name, hashlib.sha256(module.source.encode()).hexdigest()))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="directory to write the dumps and digests.txt into")
    parser.add_argument("--resnet18", help="ONNX path of ResNet-18 (default: export it)")
    parser.add_argument("--mobilenet-v2", help="ONNX path of MobileNetV2 (default: export)")
    parser.add_argument("--models", help="comma-separated subset of models to dump")
    parser.add_argument("--targets", help="comma-separated subset of avx512,avx2 "
                        "(empty: none)")
    parser.add_argument("--cuda", action="store_true",
                        help="also the CUDA C of every GPU function")
    args = parser.parse_args(argv)
    paths = {k: v for k, v in (("resnet18", args.resnet18),
                               ("mobilenet_v2", args.mobilenet_v2)) if v}
    models = _models(paths)
    if args.models:
        models = {k: models[k] for k in args.models.split(",")}
    targets = TARGETS if args.targets is None else {
        k: TARGETS[k] for k in args.targets.split(",") if k}
    if args.cuda:
        targets = {**targets, **CUDA_TARGETS}
    lines = []
    for model_name, model in models.items():
        for target_name, target in targets.items():
            sub = f"{model_name}/{target_name}"
            for name, digest in dump(model, target, os.path.join(args.out, sub)):
                lines.append(f"{digest}  {sub}/{name}\n")
            print(f"{sub}: done", flush=True)
    with open(os.path.join(args.out, "digests.txt"), "w") as f:
        f.writelines(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
