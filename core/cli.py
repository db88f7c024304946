"""The ``heterocc`` command line.

    heterocc compile MODEL.onnx --target T -o OUT
    heterocc run OUT_OR_MODEL --input NAME=FILE.npy ... [--profile]
    heterocc inspect MODEL.onnx [--target T] [--dot FILE] [--dump-ir DIR]
    heterocc quantize MODEL.onnx --calibrate DIR_OR_NPZ -o QDQ.onnx
    heterocc partition MODEL.onnx --target vta,llvm
    heterocc tune MODEL.onnx --target llvm --trials N --log F
    heterocc hil STREAM_OR_MODEL.onnx --device rtl [--simulator icarus|verilator]
    heterocc hil MODEL.onnx --target NAME [--device target] [--input NAME=FILE.npy]
    heterocc accel build MODEL.onnx -o OUT.stream
    heterocc targets
    heterocc demo

Every command takes -v/-q/--log-level (progress lines are INFO, fallbacks WARNING).
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import sys
import time

import numpy as np
import onnx

from . import __version__
from .accel_sim.cli import add_accel_parser
from .accel_sim.hil import add_hil_parser
from .demo import run_demo
from .diagnostics import logger
from .driver import compile as hcompile
from .errors import HeteroccError, InputError, TargetError
from .frontend.onnx import load_model
from .ir.dot import to_dot
from .passes import fused_functions
from .passes.partition import single_target_report
from .passes.placement_picture import placement_html, placement_svg
from .profiling import write_profile
from .quantization import CALIBRATION_METHODS, QuantizationOptions, quantize_model
from .runtime.artifact import load_artifact
from .runtime.budget import current_budget
from .runtime.inputs import load_input_files, load_samples, parse_shapes
from .runtime.memory import plan_memory
from .runtime.pipeline import chrome_trace
from .runtime.signing import generate_keypair
from .sdk.hil import model_hil
from .sdk.registry import available_targets, get_target, parse_target_spec
from .tuning.cli import add_tune_parser
from .tuning.curve import tuning_curve_svg
from .tuning.records import read_records
from .tuning.task import SCHEDULE_RULES


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
                        calibration=_calibration(args.calibrate), strict=args.strict,
                        placement=args.placement, schedule_rules=args.schedule_rules)
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
        for flag, value in (("--target", args.target), ("--tuning-log", args.tuning_log),
                            ("--calibrate", args.calibrate),
                            ("--schedule-rules",
                             None if args.schedule_rules == "hand" else args.schedule_rules)):
            if value is not None:
                message = (f"{flag} does not apply to an artifact, which runs the code it "
                           f"was compiled to "
                           f"({', '.join(sorted(set(compiled.executor.placement.values())))}"
                           f"); compile the "
                           f"model again with {flag} to change it")
                if args.strict:
                    raise InputError(message)
                logger.warning(message)
    elif args.verify:
        raise InputError(f"--verify checks an exported artifact (a directory); {path!r} is "
                         "not one")
    else:
        compiled = hcompile(path, target=args.target or "llvm",
                            shapes=parse_shapes(args.shape), tuning_log=args.tuning_log,
                            calibration=_calibration(args.calibrate), strict=args.strict,
                            placement=args.placement, schedule_rules=args.schedule_rules)
    inputs = load_input_files(args.input, args.inputs)
    if not inputs:
        inputs = _random_inputs(compiled)
        print("no --input given: running on random inputs (seed 0)")
    if args.stream:
        return _run_stream(compiled, inputs, args)
    profiling = args.profile or args.profile_out or args.trace
    if profiling:
        compiled.enable_profiling()
    if args.repeat < 1:
        raise InputError(f"--repeat {args.repeat}: give a number of runs >= 1")
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        outputs = compiled.run(inputs)
        times.append(time.perf_counter() - t0)
    for name, out in zip(compiled.output_names, outputs):
        print(f"{name}: {out.dtype}{list(out.shape)}  "
              f"min {out.min() if out.size else 'n/a'}  max {out.max() if out.size else 'n/a'}")
        if args.output_dir:
            os.makedirs(args.output_dir, exist_ok=True)
            np.save(os.path.join(args.output_dir, f"{_safe(name)}.npy"), out)
    if args.outputs:
        np.savez(args.outputs, **dict(zip(compiled.output_names, outputs)))
        print(f"wrote {args.outputs}")
    if args.repeat == 1:
        print(f"ran in {times[0] * 1e3:.2f} ms")
    else:
        print(latency_statistics(times))
    if args.profile:
        print(compiled.profile_report())

        print(plan_memory(compiled.graph).summary())
    for path, trace in ((args.profile_out, False), (args.trace, True)):
        if path:
            write_profile(path, compiled.profile_entries(), trace=trace)
            print(f"wrote {path}")
    return 0


def latency_statistics(seconds: list[float]) -> str:
    """One line of latency statistics over runs, in milliseconds (as ``--repeat`` prints
    them): count, mean, standard deviation, median, 90th and 99th percentile, min, max."""
    ms = np.asarray(seconds) * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return (f"latency over {len(ms)} runs (ms): mean {ms.mean():.3f}  std {ms.std():.3f}  "
            f"median {p50:.3f}  p90 {p90:.3f}  p99 {p99:.3f}  min {ms.min():.3f}  "
            f"max {ms.max():.3f}")
def _run_stream(compiled, inputs: dict, args) -> int:
    """``run --stream N``: the input N times through the pipelined runtime; prints the
    modelled sequential and pipelined times and writes the timeline (``--trace``)."""
    if args.stream < 1:
        raise InputError(f"--stream {args.stream}: give a number of inputs of at least 1")
    if not callable(getattr(compiled, "run_stream", None)):
        raise InputError("--stream runs a model compiled here, not a loaded artifact: give "
                         "the .onnx model and --target")
    result = compiled.run_stream([inputs] * args.stream)
    reference = compiled.run(inputs)
    exact = all(np.array_equal(a, b) for outs in result.outputs
                for a, b in zip(outs, reference))
    sequential = result.makespan(result.sequential)
    pipelined = result.makespan(result.pipelined)
    print(f"stream of {args.stream} inputs: modelled {sequential * 1e3:.3f} ms one function "
          f"at a time, {pipelined * 1e3:.3f} ms with the devices overlapping "
          f"({result.speedup:.2f}x the throughput); wall time here "
          f"{result.wall_seconds * 1e3:.1f} ms (CPU spans and the host part of device "
          f"calls measured in a replay without the simulator beside them, accelerator spans "
          f"from the device's cycle counts at its clock, transfers from its link)")
    busy = result.busy(result.pipelined)
    print("busy per lane: " + ", ".join(f"{lane} {seconds * 1e3:.3f} ms"
                                        for lane, seconds in busy.items()))
    print(f"outputs equal to one-at-a-time runs: {exact}; replay bit-exact: "
          f"{result.replay_bit_exact}")
    if args.trace:
        names = {k: n.name for k, n in enumerate(compiled.graph.nodes)}
        with open(args.trace, "w") as f:
            json.dump(chrome_trace(result.pipelined, names, "pipelined (modelled)"), f)
        print(f"wrote {args.trace} (Chrome trace: chrome://tracing or Perfetto)")
    return 0 if exact and result.replay_bit_exact else 1


def _calibration(path: str | None) -> list | None:
    """``--calibrate``: sample inputs for the built-in quantizer, or None."""
    if path is None:
        return None
    return load_samples(path)


def cmd_quantize(args) -> int:
    samples = _calibration(args.calibrate)
    options = QuantizationOptions(per_channel=args.per_channel, symmetric=not args.asymmetric,
                                  method=args.method, percentile=args.percentile,
                                  exclude=tuple(args.exclude or ()))
    onnx.save(quantize_model(args.model, samples, options), args.output)
    print(f"wrote {args.output} (int8 QDQ, calibrated on {len(samples)} samples)")
    return 0


def _target_name(target) -> str:
    return target.split()[0] if isinstance(target, str) else target.name


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def cmd_inspect(args) -> int:
    proto = load_model(args.model)
    compiled = hcompile(proto, target=args.target, shapes=parse_shapes(args.shape),
                        dump_ir=args.dump_ir, calibration=_calibration(args.calibrate),
                        placement=args.placement)
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
                        strict=args.strict, placement=args.placement,
                        tuning_log=args.tuning_log)
    report = compiled.placement_report
    for path, write in ((args.svg, placement_svg), (args.html, placement_html)):
        if path and report is not None:
            with open(path, "w") as f:
                f.write(write(report, f"{os.path.basename(args.model)} on {args.target}"))
            print(f"wrote {path}", file=sys.stderr)
    if args.json:
        if report is None:  # one target: everything is placed on it
            report = single_target_report(compiled.graph, _target_name(compiled.targets[-1]))
            report.warnings = compiled.warnings
        print(json.dumps({"targets": [str(t) for t in compiled.targets], **report.to_json()},
                         indent=1))
        return 0
    if report is None:
        print(f"one target ({_target_name(compiled.targets[-1])}): every node goes to it")
        for warning in compiled.warnings:
            print(f"warning: {warning}")
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


def cmd_tuning_curve(args) -> int:
    records = read_records(args.log, args.target)
    if not records:
        raise InputError(f"{args.log}: no tuning records (write one with heterocc tune "
                         "--log)")
    with open(args.output, "w") as f:
        f.write(tuning_curve_svg(records, title=f"tuning curve: {os.path.basename(args.log)}"))
    print(f"wrote {args.output} ({len({r.workload_key for r in records})} tasks, "
          f"{len(records)} records)")
    return 0


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
    layer by layer against the NumPy references (``heterocc.sdk.hil``)."""
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
    report = model_hil(args.stream, target, load_input_files(args.input) or None,
                       _calibration(args.calibrate),
                       stop_at_first=not args.all_layers)
    print(report.summary())
    return 0 if report.agrees else 1


STRICT_HELP = ("make every fallback an error: a pattern matched but refused, a target that "
               "takes nothing, a device emulated, an op run on NumPy")
CALIBRATE_HELP = ("quantize to int8 with the built-in calibrator on these sample inputs: a "
                  "directory of .npz files (one sample each, arrays by input name) or one .npz "
                  "whose arrays stack the samples along a new first axis")


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    # argparse exposes sub-parsers only through its actions
    return [child for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for child in a.choices.values()]


def _all_options(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings of ``parser`` and of every sub-command under it."""
    own = [o for a in parser._actions for o in a.option_strings]
    return own + [o for child in _subcommands(parser) for o in _all_options(child)]


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for misspelt options and commands."""

    def error(self, message: str):
        hint = ""
        if message.startswith("unrecognized arguments:"):
            known = _all_options(self)
            for word in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1)
                if close:
                    hint = f" (did you mean {close[0]}?)"
                    break
        elif "invalid choice:" in message:
            wrong = message.split("invalid choice:", 1)[1].split("(")[0].strip(" '")
            choices = [c for a in self._actions for c in (a.choices or ())]
            close = difflib.get_close_matches(wrong, [str(c) for c in choices], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        super().error(message + hint)


LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_logging_options(parser: argparse.ArgumentParser) -> None:
    """-v/-q/--log-level on ``parser`` and every sub-command under it."""
    group = parser.add_argument_group("logging")
    taken = parser._option_string_actions  # a command's own flag (tune --quiet) stays

    def add(*flags: str, **kwargs) -> None:
        free = [f for f in flags if f not in taken]
        if free:
            group.add_argument(*free, dest=flags[-1].lstrip("-").replace("-", "_"),
                               default=argparse.SUPPRESS, **kwargs)

    add("-v", "--verbose", action="count", help="more output: -v debug messages")
    add("-q", "--quiet", action="count", help="less output: -q warnings and errors only "
        "(no progress), -qq errors only")
    add("--log-level", choices=LOG_LEVELS, help="the level of messages shown (default "
        "info: progress lines and warnings)")
    for child in _subcommands(parser):
        _add_logging_options(child)


def log_level(args: argparse.Namespace) -> int:
    """The logging level ``-v``/``-q``/``--log-level`` ask for (default INFO)."""
    if getattr(args, "log_level", None):
        return getattr(logging, args.log_level.upper())
    level = logging.INFO + 10 * (getattr(args, "quiet", 0) - getattr(args, "verbose", 0))
    return min(max(level, logging.DEBUG), logging.ERROR)


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"heterocc: {record.levelname.lower()}: {record.getMessage()}"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a message comes (not the stream it was
    when the handler was made: ``main`` may run many times in one process)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def setup_logging(level: int) -> None:
    """heterocc's messages on stderr as ``heterocc: level: message`` (they still reach
    the root logger's handlers, if an embedding program set any)."""
    handler = _StderrHandler()
    handler.setFormatter(_Formatter())
    logger.handlers[:] = [h for h in logger.handlers if not isinstance(h, _StderrHandler)]
    logger.addHandler(handler)
    logger.setLevel(level)
PLACEMENTS = ["auto", "cost", "greedy", "throughput"]
PLACEMENT_HELP = ("with several targets, cost: offload a match only where the targets' time "
                  "estimates say it is faster (transfers included); greedy: every match; "
                  "throughput: for a stream of inputs, balance the devices' time per input "
                  "(they overlap across inputs); auto (default): cost when every target can "
                  "estimate (see heterocc partition)")


def _add_schedule_rules(p) -> None:
    p.add_argument("--schedule-rules", choices=SCHEDULE_RULES, default="hand",
                   help="none: the CPU's hand schedule rules off, every function on the "
                        "generic schedule of its compute's kind or a tuning log's auto "
                        "record (-schedule-rules=none in the CPU's target string)")


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(prog="heterocc", description="heterocc deep-learning compiler")
    ap.add_argument("--version", action="version", version=f"heterocc {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="compile an ONNX model")
    p.add_argument("model")
    p.add_argument("--target", default="llvm", help="e.g. llvm, cuda, vta,llvm, reference")
    p.add_argument("-o", "--output", help="artifact directory to write")
    p.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic dims")
    p.add_argument("--dump-ir", help="directory receiving the IR after every pass")
    p.add_argument("--tuning-log", help="apply the best configs of this tuning log")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--placement", choices=PLACEMENTS, default="auto",
                   help=PLACEMENT_HELP)
    p.add_argument("--sign", metavar="PRIVATE_KEY",
                   help="sign the artifact's manifest with this Ed25519 key (heterocc keygen)")
    _add_schedule_rules(p)
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("keygen", help="write a new Ed25519 key pair for signing artifacts")
    p.add_argument("private_key", help="file for the private key (PEM, owner-only)")
    p.add_argument("public_key", help="file for the public key (PEM), for run --verify")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("run", help="run a model or an exported artifact")
    p.add_argument("model")
    p.add_argument("--target", help="targets to compile a model for (default llvm); an "
                   "artifact runs on the targets it was compiled for")
    p.add_argument("--input", action="append", help="NAME=FILE.npy")
    p.add_argument("--inputs", metavar="FILE.npz", help="the inputs as one .npz, arrays "
                   "by input name")
    p.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic dims")
    p.add_argument("--output-dir", help="save each output as NAME.npy here")
    p.add_argument("--outputs", metavar="FILE.npz", help="save the outputs as one .npz, "
                   "arrays by output name")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run N times and print latency statistics (mean, std, median, "
                        "p90, p99, min, max)")
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--verify", metavar="PUBLIC_KEY",
                   help="refuse an artifact not signed by this key's private key, before "
                        "reading any of its other files")
    p.add_argument("--profile", action="store_true", help="print per-function times")
    p.add_argument("--profile-out", metavar="FILE.csv|FILE.json",
                   help="write the per-function profile as CSV or JSON")
    p.add_argument("--trace", metavar="FILE.json", help="write every call as a Chrome "
                   "trace (chrome://tracing, ui.perfetto.dev); with --stream, the pipelined "
                   "timeline")
    p.add_argument("--tuning-log", help="apply the best configs of this tuning log")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    p.add_argument("--placement", choices=PLACEMENTS, default="auto",
                   help=PLACEMENT_HELP)
    p.add_argument("--stream", type=int, default=0, metavar="N",
                   help="run the input N times as a stream, the devices overlapping (CPU on "
                        "one input while the accelerator works on another); prints the "
                        "modelled sequential and pipelined times")
    _add_schedule_rules(p)
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
    p.add_argument("--placement", choices=PLACEMENTS, default="auto",
                   help=PLACEMENT_HELP)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("partition", help="show where every node goes across targets")
    p.add_argument("model")
    p.add_argument("--target", required=True, help="e.g. vta,llvm (the last is the fallback)")
    p.add_argument("--shape", action="append")
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--dot", help="write the partitioned graph as Graphviz to this file")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object: nodes (node, op, target, macs, reason, and "
                        "by cost the estimates per candidate target), regions, "
                        "macs_by_target, nodes_by_target, total_macs, and by cost the "
                        "estimated totals of the chosen, all-CPU and greedy placements")
    p.add_argument("--placement", choices=PLACEMENTS, default="auto",
                   help="cost: offload a match only where the targets' time estimates say "
                        "it is faster (transfers included); greedy: every match; auto "
                        "(default): cost when every target can estimate")
    p.add_argument("--svg", help="write a picture of the placement (SVG) to this file")
    p.add_argument("--html", help="write the picture and the table (HTML) to this file")
    p.add_argument("--tuning-log", help="apply the best configs of this tuning log (placement "
                                        "by cost reads the CPU kernels' times from it)")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("quantize", help="quantize a float model to int8 QDQ ONNX with the "
                                        "built-in calibrator")
    p.add_argument("model")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", required=True, help=CALIBRATE_HELP)
    p.add_argument("-o", "--output", required=True, help="the QDQ .onnx file to write")
    p.add_argument("--per-channel", action="store_true",
                   help="one weight scale per output channel (default: per tensor)")
    p.add_argument("--asymmetric", action="store_true",
                   help="activations over [min, max] with an int8 zero point (default: "
                        "symmetric, zero point 0)")
    p.add_argument("--method", choices=CALIBRATION_METHODS, default="minmax",
                   help="calibration: the extremes (minmax) or a percentile of each "
                        "sample's values (outliers clipped)")
    p.add_argument("--percentile", type=float, default=99.99,
                   help="with --method percentile (default 99.99)")
    p.add_argument("--exclude", action="append", metavar="NODE_OR_OP",
                   help="leave this node (by name) or every node of this op type float "
                        "(repeatable)")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("tuning-curve", help="draw a tuning log's best-so-far curves as SVG")
    p.add_argument("log", help="a tuning log (heterocc tune --log)")
    p.add_argument("-o", "--output", required=True, help="the .svg file to write")
    p.add_argument("--target", help="only the records for this target description")
    p.set_defaults(func=cmd_tuning_curve)

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
    add_accel_build_parser(accel)
    add_accel_explore_parser(accel)
    _add_logging_options(ap)
    return ap


def add_accel_build_parser(accel: argparse.ArgumentParser) -> None:
    """``accel build MODEL -o OUT.stream``: the model's accelerator streams as files."""
    actions = next(a for a in accel._actions if isinstance(a, argparse._SubParsersAction))
    p = actions.add_parser("build", help="compile a model and write its accelerator "
                           "functions' instruction streams (for hil and accel disasm); "
                           "every layer the accelerator takes goes there (greedy placement)")
    p.add_argument("model", help="an ONNX model (int8 QDQ/QOperator, or float with "
                   "--calibrate)")
    p.add_argument("-o", "--output", required=True,
                   help="OUT.stream (one file per accelerator function: OUT.stream for "
                        "one, OUT.NAME.stream for several) or a directory")
    p.add_argument("--target", default="vta", help="the accelerator (with options, e.g. "
                   "'vta -config=1x8x8')")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    p.add_argument("--input", action="append", help="NAME=FILE.npy: the run whose DRAM "
                   "images are written beside the streams (default: seeded random inputs)")
    p.set_defaults(handler=cmd_accel_build)


def _target_hook(spec: str, hook: str, missing: str):
    """The target ``spec`` names and its method ``hook``; TargetError saying what the
    target lacks (``missing``) when it has none."""
    name, options = parse_target_spec(spec)
    target = get_target(name, **options)
    method = getattr(target, hook, None)
    if not callable(method):
        raise TargetError(f"target {name!r} has no {missing} (no {hook} hook)")
    return target, method


def cmd_accel_build(args) -> int:
    target, write = _target_hook(args.target, "write_streams", "instruction streams to write")
    # greedy: the streams of every layer the accelerator takes are what is asked for,
    # whether or not placement by cost would run them there
    compiled = hcompile(args.model, target=[target, "llvm"], placement="greedy",
                        calibration=_calibration(args.calibrate))
    inputs = load_input_files(args.input) or _random_inputs(compiled)
    compiled.run(inputs)  # the DRAM images of this run go beside the streams
    for path in write(args.output):
        print(f"wrote {path}")
    return 0


def add_accel_explore_parser(accel: argparse.ArgumentParser) -> None:
    """``accel explore MODEL --gemm 8x8,16x16``: model latency against FPGA resources."""
    actions = next(a for a in accel._actions if isinstance(a, argparse._SubParsersAction))
    p = actions.add_parser("explore", help="sweep accelerator configs: the model's latency "
                           "(timing model) against Yosys resources on an FPGA part")
    p.add_argument("model", help="an ONNX model (int8 QDQ/QOperator, or float with "
                   "--calibrate)")
    p.add_argument("--target", default="vta", help="the accelerator (default vta)")
    p.add_argument("--gemm", default="8x8,16x16,32x32",
                   help="GEMM shapes, BLOCK_INxBLOCK_OUT (or BATCHxINxOUT), or preset names "
                   "(pynq-z2), comma-separated")
    p.add_argument("--wgt-kib", help="weight buffer sizes in KiB (e.g. 128,256)")
    p.add_argument("--acc-kib", help="accumulator buffer sizes in KiB (e.g. 64,128)")
    p.add_argument("--inp-kib", help="input buffer sizes in KiB")
    p.add_argument("--clock-mhz", help="clocks in MHz (latency only: Yosys knows no timing)")
    p.add_argument("--part", default="xc7z020", help="FPGA part (xc7z020, xczu3eg, xczu7ev)")
    p.add_argument("--limit", type=float, default=0.8,
                   help="largest share of each resource that fits (default 0.8)")
    p.add_argument("--resource", default="lut", choices=["lut", "dsp"],
                   help="the Pareto plot's area axis")
    p.add_argument("--jobs", type=int, default=1, help="Yosys runs at a time")
    p.add_argument("-o", "--output", default="explore",
                   help="folder for explore.txt, explore.json and pareto_<resource>.svg")
    p.add_argument("--calibrate", metavar="DIR_OR_NPZ", help=CALIBRATE_HELP)
    p.set_defaults(handler=cmd_accel_explore)


def cmd_accel_explore(args) -> int:
    _, explore = _target_hook(args.target, "explore_command",
                              "hardware configurations to explore")
    args.calibration = _calibration(args.calibrate)
    return explore(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(log_level(args))
    # our handler prints heterocc's messages; a handler another library put on the root
    # logger (onnxruntime's quantizer does) must not print them again
    propagate, logger.propagate = logger.propagate, False
    try:
        status = args.func(args)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not at exit
        return status
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
    except BrokenPipeError:
        # the reader went away (`heterocc accel disasm F | head`): stop quietly, and keep
        # Python from reporting the flush of the closed stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    finally:
        logger.propagate = propagate


if __name__ == "__main__":
    sys.exit(main())
