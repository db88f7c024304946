"""The ``heterocc`` command line.

    heterocc compile MODEL.onnx --target T -o OUT
    heterocc run OUT_OR_MODEL --input NAME=FILE.npy ... [--profile]
    heterocc inspect MODEL.onnx [--target T] [--dot FILE] [--dump-ir DIR]
    heterocc quantize MODEL.onnx --calibrate DIR_OR_NPZ -o QDQ.onnx
    heterocc partition MODEL.onnx --target vta,llvm
    heterocc tune MODEL.onnx --target llvm --trials N --log F
    heterocc hil STREAM_OR_MODEL.onnx --device rtl [--simulator icarus|verilator]
    heterocc hil MODEL.onnx --target NAME [--device target] [--input NAME=FILE.npy]
    heterocc targets
    heterocc demo
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import onnx

from .accel_sim.cli import add_accel_parser
from .accel_sim.hil import add_hil_parser
from .demo import run_demo
from .driver import compile as hcompile
from .errors import HeteroccError, InputError, TargetError
from .frontend.onnx import load_model
from .ir.dot import to_dot
from .passes import fused_functions
from .passes.partition import single_target_report
from .quantization import quantize_model
from .runtime.artifact import load_artifact
from .runtime.budget import current_budget
from .runtime.inputs import load_samples, parse_shapes
from .runtime.memory import plan_memory
from .runtime.signing import generate_keypair
from .sdk_hil import model_hil
from .targets import available_targets, get_target
from .targets.registry import parse_target_spec
from .tuning.cli import add_tune_parser


def _load_inputs(items: list[str] | None) -> dict[str, np.ndarray]:
    arrays = {}
    for item in items or []:
        name, _, path = item.partition("=")
        if not path:
            raise InputError(f"--input {item!r}: expected NAME=FILE.npy")
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {name}: cannot load {path!r}: {exc}") from None
    return arrays


def _random_inputs(compiled) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for spec in compiled.inputs:
        if not all(isinstance(d, int) for d in spec.shape):
            raise InputError(f"input {spec.name!r} has shape {spec.shape}; give --shape or "
                             "--input for it")
        if spec.dtype.startswith("float"):
            out[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
        elif spec.dtype == "bool":
            out[spec.name] = rng.integers(0, 2, spec.shape).astype(bool)
        else:
            out[spec.name] = rng.integers(0, 10, spec.shape).astype(spec.dtype)
    return out


def cmd_compile(args) -> int:
    t0 = time.perf_counter()
    compiled = hcompile(args.model, target=args.target, shapes=parse_shapes(args.shape),
                        dump_ir=args.dump_ir, tuning_log=args.tuning_log,
                        calibration=_calibration(args.calibrate))
    elapsed = time.perf_counter() - t0
    export = getattr(compiled, "export", None)
    if args.output:
        if export is None:
            raise HeteroccError(f"target {args.target!r} cannot export an artifact yet")
        export(args.output, sign=args.sign)
        print(f"wrote {args.output}" + (f" (signed with {args.sign})" if args.sign else ""))
    elif args.sign:
        raise InputError("--sign signs an exported artifact: give -o DIR as well")
    print(f"compiled {args.model} for {args.target} in {elapsed:.2f} s")
    return 0


def cmd_keygen(args) -> int:
    generate_keypair(args.private_key, args.public_key)
    print(f"wrote {args.private_key} (private: keep it secret) and {args.public_key} "
          "(public: give it to run --verify)")
    return 0


def cmd_run(args) -> int:
    path = args.model
    if os.path.isdir(path):
        # artifacts come with the CPU code generator
        compiled = load_artifact(path, verify=args.verify)
    elif args.verify:
        raise InputError(f"--verify checks an exported artifact (a directory); {path!r} is "
                         "not one")
    else:
        compiled = hcompile(path, target=args.target, shapes=parse_shapes(args.shape),
                            tuning_log=args.tuning_log, calibration=_calibration(args.calibrate))
    inputs = _load_inputs(args.input)
    if not inputs:
        inputs = _random_inputs(compiled)
        print("no --input given: running on random inputs (seed 0)")
    if args.profile:
        compiled.enable_profiling()
    t0 = time.perf_counter()
    outputs = compiled.run(inputs)
    elapsed = time.perf_counter() - t0
    for name, out in zip(compiled.output_names, outputs):
        print(f"{name}: {out.dtype}{list(out.shape)}  "
              f"min {out.min() if out.size else 'n/a'}  max {out.max() if out.size else 'n/a'}")
        if args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            np.save(os.path.join(args.output_dir, f"{_safe(name)}.npy"), out)
    print(f"ran in {elapsed * 1e3:.2f} ms")
    if args.profile:
        print(compiled.profile_report())

        print(plan_memory(compiled.graph).summary())
    return 0


def _calibration(path: str | None) -> list | None:
    """``--calibrate``: sample inputs for the built-in quantizer, or None."""
    if path is None:
        return None
    return load_samples(path)


def cmd_quantize(args) -> int:
    samples = _calibration(args.calibrate)
    onnx.save(quantize_model(args.model, samples), args.output)
    print(f"wrote {args.output} (int8 QDQ, calibrated on {len(samples)} samples)")
    return 0


def _target_name(target) -> str:
    return target.split()[0] if isinstance(target, str) else target.name


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def cmd_inspect(args) -> int:
    proto = load_model(args.model)
    compiled = hcompile(proto, target=args.target, shapes=parse_shapes(args.shape),
                        dump_ir=args.dump_ir, calibration=_calibration(args.calibrate))
    graph = compiled.graph
    functions = fused_functions(graph)
    if args.json:
        print(json.dumps({"onnx_nodes": len(proto.graph.node), "nodes": graph.num_nodes(),
                          "functions": len(functions), "op_counts": graph.op_counts()}))
        return 0
    print(graph)
    print()
    print(f"ONNX nodes: {len(proto.graph.node)}   after passes: {graph.num_nodes()} ops in "
          f"{len(functions)} fused functions")
    print("op counts: " + ", ".join(f"{op}={n}" for op, n in graph.op_counts().items()))

    print(plan_memory(graph).summary())
    if compiled.placement_report is not None:
        print()
        print(compiled.placement_report.format())
    print()
    print(_pass_table(compiled.pass_records))
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(to_dot(graph, default_target=_target_name(compiled.targets[-1])))
        print(f"wrote {args.dot}")
    return 0


def cmd_partition(args) -> int:
    compiled = hcompile(args.model, target=args.target, shapes=parse_shapes(args.shape),
                        strict=args.strict)
    report = compiled.placement_report
    if args.json:
        if report is None:  # one target: everything is placed on it
            report = single_target_report(compiled.graph, compiled.targets[-1])
        print(json.dumps({"targets": [str(t) for t in compiled.targets], **report.to_json()},
                         indent=1))
        return 0
    if report is None:
        print(f"one target ({args.target}): every node goes to it")
        return 0
    print(report.format())
    if args.dot:
        with open(args.dot, "w") as f:
            f.write(to_dot(compiled.graph, default_target=_target_name(compiled.targets[-1])))
        print(f"wrote {args.dot}")
    return 0


def _pass_table(records) -> str:
    lines = [f"{'pass':20s} {'ms':>8s}  nodes"]
    lines += [f"{r.name:20s} {r.seconds * 1e3:8.2f}  {r.nodes_before} -> {r.nodes_after}"
              for r in records]
    return "\n".join(lines)


def cmd_targets(args) -> int:
    for name, info in available_targets().items():
        summary = info.description.splitlines()[0] if info.description else ""
        print(f"{name:12s} {info.source:24s} {summary}")
    return 0


def cmd_demo(args) -> int:
    return run_demo(target=args.target)


def _hil(args, stream_command) -> int:
    """``hil`` takes a stream file, or a model: the ``--target`` accelerator's own replay
    (its ``hil_command`` hook, e.g. vta's streams on the RTL) when it has one and
    ``--device`` does not say ``target``; else the model on the target's device, checked
    layer by layer against the NumPy references (``heterocc.sdk_hil``)."""
    if not args.stream.endswith(".onnx"):
        if args.device not in (None, "rtl"):
            raise InputError(f"--device {args.device}: a stream file runs on the RTL")
        return stream_command(args)
    name, options = parse_target_spec(args.target)
    target = get_target(name, **options)
    command = getattr(target, "hil_command", None)
    if args.device == "rtl" or (args.device is None and callable(command)):
        if not callable(command):
            raise TargetError(f"target {name!r} cannot replay a model on the RTL (it has "
                              "no hil_command hook); --device target checks it on its device")
        return command(args)
    if not callable(getattr(target, "pattern_table", None)):
        raise TargetError(f"target {name!r} cannot replay a model: it has no hil_command hook "
                          "and no pattern table (no layer of a model goes to it)")
    report = model_hil(args.stream, target, _load_inputs(args.input) or None,
                       _calibration(args.calibrate),
                       stop_at_first=not args.all_layers)
    print(report.summary())
    return 0 if report.agrees else 1


CALIBRATE_HELP = ("quantize to int8 with the built-in calibrator on these sample inputs: a "
                  "directory of .npz files (one sample each, arrays by input name) or one .npz "
                  "whose arrays stack the samples along a new first axis")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="heterocc", description="heterocc deep-learning compiler")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="compile an ONNX model")
    p.add_argument("model")
    p.add_argument("--target", default="llvm", help="e.g. llvm, cuda, vta,llvm, reference")
    p.add_argument("-o", "--output", help="artifact directory to write")
    p.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic dims")
    p.add_argument("--dump-ir", help="directory receiving the IR after every pass")
    p.add_argument("--tuning-log", help="apply the best configs of this tuning log")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    p.add_argument("--sign", metavar="PRIVATE_KEY",
                   help="sign the artifact's manifest with this Ed25519 key (heterocc keygen)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("keygen", help="write a new Ed25519 key pair for signing artifacts")
    p.add_argument("private_key", help="file for the private key (PEM, owner-only)")
    p.add_argument("public_key", help="file for the public key (PEM), for run --verify")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("run", help="run a model or an exported artifact")
    p.add_argument("model")
    p.add_argument("--target", default="llvm")
    p.add_argument("--input", action="append", help="NAME=FILE.npy")
    p.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic dims")
    p.add_argument("--output-dir", help="save each output as NAME.npy here")
    p.add_argument("--verify", metavar="PUBLIC_KEY",
                   help="refuse an artifact not signed by this key's private key, before "
                        "reading any of its other files")
    p.add_argument("--profile", action="store_true", help="print per-function times")
    p.add_argument("--tuning-log", help="apply the best configs of this tuning log")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("inspect", help="show the graph after the passes")
    p.add_argument("model")
    p.add_argument("--target", default="reference",
                   help="compile for these targets (e.g. vta,llvm: shows the placement too)")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    p.add_argument("--shape", action="append")
    p.add_argument("--dot", help="write the fused graph as Graphviz to this file")
    p.add_argument("--dump-ir", help="directory receiving the IR after every pass")
    p.add_argument("--json", action="store_true", help="counts only, as JSON")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("partition", help="show where every node goes across targets")
    p.add_argument("model")
    p.add_argument("--target", required=True, help="e.g. vta,llvm (the last is the fallback)")
    p.add_argument("--shape", action="append")
    p.add_argument("--strict", action="store_true", help="refuse silent CPU fallback")
    p.add_argument("--dot", help="write the partitioned graph as Graphviz to this file")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: nodes (node, op, target, macs, reason), "
                        "macs_by_target, nodes_by_target, total_macs")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("quantize", help="quantize a float model to int8 QDQ ONNX with the "
                                        "built-in calibrator")
    p.add_argument("model")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", required=True, help=CALIBRATE_HELP)
    p.add_argument("-o", "--output", required=True, help="the QDQ .onnx file to write")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("targets", help="list installed targets")
    p.set_defaults(func=cmd_targets)

    p = sub.add_parser("demo", help="compile and run the bundled example model")
    p.add_argument("--target", default="vta,llvm",
                   help="targets of the int8 run (the last also runs the float32 model)")
    p.set_defaults(func=cmd_demo)

    add_tune_parser(sub)
    hil = add_hil_parser(sub)
    hil.add_argument("--target", default="vta",
                     help="with a model: the accelerator target brought up (a name, or a "
                          "spec with options such as 'dotprod -flag=value')")
    hil.add_argument("--input", action="append", help="with a model: NAME=FILE.npy "
                     "(default: seeded random inputs)")
    hil.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    hil.add_argument("--all-layers", action="store_true",
                     help="with --device target: check every layer, not only up to the "
                          "first that diverges")
    stream_command = hil.get_default("func")
    hil.set_defaults(func=lambda args: _hil(args, stream_command))

    accel = add_accel_parser(sub)
    accel.set_defaults(func=lambda args: args.handler(args))
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except HeteroccError as exc:
        print(f"heterocc: error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        # what the memory budget did not foresee (heterocc.runtime.budget): still a
        # message and a failing status, never a silent or traceback-only end
        print("heterocc: error: out of memory; lower the model's sizes or run it where "
              f"more memory is free (budget: {current_budget():,} bytes, "
              "HETEROCC_MEMORY_BUDGET)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
