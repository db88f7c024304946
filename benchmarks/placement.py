"""Placement by cost against the greedy and the all-CPU placements, on CNNs quantized by
onnxruntime's quantize_static (QDQ, int8 activations, per-channel weights) for
``vta,llvm``.

    python benchmarks/placement.py [--models resnet18,mobilenet_v2] [--size 224]
        [--configs 1x16x16@100,1x32x32@300,1x64x64@300] [--link-gbps 1] [--onnx-helper]
        [--stream mobilenet_v2:1x16x16@100[,MODEL:CONFIG...]] [--stream-inputs 16]
        [--stream-placement throughput|cost|greedy] [--stream-trace-dir DIR] [--svg-dir DIR]
        [--no-compile-time] [--cpu "llvm -mattr=-avx512f,-avxvnni"]
        [--normalise voters|reference] [--disturb-first-chain N]

Prints the machine, the accelerator configs with their clock and the host link; then
per model and config:

- the model's estimated end-to-end latency (one input, devices taking turns) of the
  cost placement, all on the CPU and the greedy placement (every pattern match on the
  accelerator), and the check that cost <= both;
- the accelerator's estimate per region against the cycles its kernels report in a run
  (the simulator's timing model) at the clock: the largest deviation;
- the CPU's estimate per unit placed on the CPU against its share of the compiled
  model's own CPU kernels, timed here (in :data:`CHECK_WINDOWS` chains, each normalised
  by the reference calls of its rounds, each kernel's median): median and largest
  deviation, and the machine's speed in each chain; and the
  candidates offloaded on the CPU's lower bound without measuring: how many the CPU
  runs faster than that bound;
- bit-exactness: the cost placement's output against the greedy placement's and the
  reference integer semantics of the partitioned graph (NumPy);
- a stream of inputs through the pipelined runtime for one model and config, placed for
  throughput (``--stream-placement``: the devices' time per input balanced, so both
  carry work): the modelled sequential and pipelined times (CPU spans and the host part
  of accelerator calls measured in a replay pass without the simulator beside them,
  accelerator spans from its cycle counts at the clock, transfers from the link) and the
  throughput ratio, and the CPU time per input in the live run beside the simulator;
- compile time, each compile in a fresh interpreter: greedy, cost with an empty estimate
  cache, cost again (cache warm): what placement adds over the greedy compile, and the
  partition pass's share.

The CPU estimates are the fastest of several calls, and so is the measurement they are
compared with; figures depend on the load of the machine (printed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402
from vta_resnet18 import quantized  # noqa: E402

import heterocc  # noqa: E402
from heterocc.passes.placement import saved_ports  # noqa: E402
from heterocc.passes.placement_picture import placement_svg  # noqa: E402
from heterocc.runtime.interpreter import evaluate  # noqa: E402
from heterocc.runtime.pipeline import chrome_trace  # noqa: E402
from heterocc.sdk.registry import parse_target_spec  # noqa: E402
from heterocc.targets import get_target  # noqa: E402
from heterocc.targets.llvm import cost as cpu_cost  # noqa: E402
from heterocc.targets.vta import VtaTarget  # noqa: E402
from heterocc.targets.vta.cost import host_link  # noqa: E402

#: the issue's two configs (the default 16x16 at an FPGA-like 100 MHz; a 32x32 at
#: 300 MHz) and a larger one the compiler and simulator support end to end: the 64x64
#: preset (4096 MACs a cycle, 0.9 MB of buffers, a 128-bit memory port; see
#: ``HardwareConfig.preset``) at 300 MHz, on the same 1 GB/s link
DEFAULT_CONFIGS = "1x16x16@100,1x32x32@300,1x64x64@300"

#: the CPU check times the compiled model's kernels in this many windows
CHECK_WINDOWS = 3


class _Repeated:
    """A kernel's call run ``times`` times (the same kernel, for ``kernel_threads``)."""

    def __init__(self, call, times: int):
        self.call, self.times, self.prim = call, times, getattr(call, "prim", None)

    def __call__(self, args) -> None:
        for _ in range(self.times):
            self.call(args)


def disturb_first_chains(times: int) -> None:
    """From now on, the first chain timed against each cost cache runs the reference
    kernel from cold caches ``times`` times a call (its warm call and the other voters
    as usual): a phase that slows it alone while that chain sets the baselines, as a
    shared machine once did (2.3x, the kernels 1.2x)."""
    original, seen = cpu_cost.time_in_chains, set()

    def timed(calls, **options):
        cache = os.environ.get("HETEROCC_CACHE_DIR")
        if cpu_cost.REFERENCE in calls and cache not in seen:
            seen.add(cache)
            call, args = calls[cpu_cost.REFERENCE]
            calls = {**calls, cpu_cost.REFERENCE: (_Repeated(call, times), args)}
        return original(calls, **options)

    cpu_cost.time_in_chains = timed


def normalise_by_reference_alone() -> None:
    """The normalisation before the voters (for an A/B): each chain by the reference
    kernel from cold caches alone."""
    cpu_cost.VOTERS = (cpu_cost.REFERENCE,)


def _compile(model, vta: VtaTarget, placement: str, cpu: str = "llvm"):
    start = time.perf_counter()
    compiled = heterocc.compile(model, target=[vta, cpu], placement=placement)
    seconds = time.perf_counter() - start
    partition = sum(r.seconds for r in compiled.pass_records if r.name == "partition")
    return compiled, seconds, partition


def _timed_compile(model_bytes: bytes, text: str, link_gbps: float, placement: str,
                   cache: str, cpu: str, queue) -> None:
    """In a fresh interpreter (nothing compiled before, no warm in-process caches): one
    compile's seconds and its partition pass's."""
    os.environ["HETEROCC_CACHE_DIR"] = cache
    _, seconds, partition = _compile(model_bytes, vta_config(text, link_gbps), placement, cpu)
    queue.put((seconds, partition))


def _compile_time(model, text: str, link_gbps: float, placement: str,
                  cache: str, cpu: str = "llvm") -> tuple[float, float]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_timed_compile, args=(
        model.SerializeToString(), text, link_gbps, placement, cache, cpu, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def _accelerator_accuracy(compiled, vta: VtaTarget) -> tuple[int, float]:
    """Regions compared, and the largest relative deviation of the estimate's cycles
    from the cycles the region's kernels reported in the last run."""
    ran = {k.name: k.last_cycles for k in vta.kernels}
    regions: dict[str, list[int]] = {}
    for p in compiled.placement_report.placements:
        if p.target == "vta" and "vta" in p.estimates and p.function in ran:
            sums = regions.setdefault(p.region, [0, 0])
            sums[0] += p.estimates["vta"].detail["cycles"]
            sums[1] += ran[p.function]
    worst = max((abs(e - c) / c for e, c in regions.values() if c), default=0.0)
    return len(regions), worst


def _link_accuracy(compiled, vta: VtaTarget) -> tuple[float, float]:
    """The offloaded composites' link time as estimated (their copies, less those of
    the tensors the placement counts as kept in the device's DRAM) and as the run made
    them (the bytes and copies each kernel's last call moved), seconds."""
    plan = compiled.placement_report.plan
    link = host_link(vta.config)
    estimated = sum(u.candidates["vta"].transfer_s for u in plan.composites
                    if u.chosen == "vta" and "vta" in u.candidates)
    estimated -= sum(port.link_s for port in saved_ports(plan, "chosen"))
    ran = {p.function for p in compiled.placement_report.placements if p.target == "vta"}
    made = sum(link.seconds(k.last_bytes_in + k.last_bytes_out, k.last_copies)
               for k in vta.kernels if k.name in ran and k.last_timing is not None)
    return estimated, made


def _cpu_accuracy(compiled, report, cpu: str = "llvm"
                  ) -> tuple[list[tuple[float, float, str]], int, int]:
    """(estimate, measured seconds, name and the estimate's source) of each unit the
    placement keeps on the CPU: measured is its share (``kernel_shares``, as the
    estimate divides the kernels it times) of the compiled model's own CPU kernels,
    timed here the way the estimate times them (``time_chain``: in graph order, one
    call of each kernel per round, the fastest call, as many rounds, normalised by the
    reference calls; in :data:`CHECK_WINDOWS` windows, each kernel's median); and of
    the candidates the accelerator took on the CPU's lower bound alone, how many and
    how many of them the CPU runs faster than that bound (a wrong bound), each fused and
    timed alone."""
    name, options = parse_target_spec(cpu)
    llvm = get_target(name, **options)
    units = [*report.plan.composites, *report.plan.others]
    kernels = compiled.kernels
    on_cpu = [n for n in compiled.graph.nodes
              if n.body is not None and "target" not in n.attrs and n.name in kernels]
    shares = cpu_cost.kernel_shares(on_cpu, {k: frozenset(n.name for n in unit.nodes)
                                             for k, unit in enumerate(units)})
    # every kernel timed the way the estimate times them (in graph order, one call of
    # each per round, the fastest call), in as many rounds: the fastest of more rounds
    # lies lower, so more here would measure something else than the estimate; with
    # the reference kernel after them in each round, normalised by it (``time_chain``)
    # in CHECK_WINDOWS windows, each kernel's median: one window whose reference calls
    # ran apart from the kernels moves no figure
    calls = {n.name: (kernels[n.name], cpu_cost.random_arguments(n.inputs)) for n in on_cpu}
    chains, speeds = [], []
    for _ in range(CHECK_WINDOWS):
        chain, slower = cpu_cost.time_chain(llvm, calls)
        chains.append(chain)
        speeds.append(slower)
    model = report.plan.targets["llvm"].cost_model
    compiled_chains = [f"{x:.2f}x" for c in (model.context, model.placed_context) if c
                       for x in c.slowdowns if x is not None]
    if None not in speeds:
        print(f"  the machine's speed by the reference calls against their baselines: the "
              f"compile's chains {', '.join(compiled_chains) or 'none (figures cached)'}; "
              f"the check's windows {', '.join(f'{x:.2f}x' for x in speeds)} (each "
              "window's figures normalised by it, each kernel's median taken)")
    timed = {name: statistics.median(c[name][0] for c in chains) for name in chains[0]}
    pairs = []
    bounded = wrong = 0
    for k, unit in enumerate(units):
        if "llvm needs at least" in unit.reason:
            bounded += 1
            run, graph = cpu_cost.cpu_program(llvm, unit.function)
            measured = min(cpu_cost.time_call(run, cpu_cost.random_arguments(graph.inputs),
                                              min_samples=5, min_seconds=0.2))
            wrong += measured < llvm.lower_bound(unit.function)[0]
        elif unit.chosen == "llvm" and "llvm" in unit.candidates and shares[k]:
            # the estimate of the unit as placed (its neighbours offloaded) where made
            estimate = unit.as_placed or unit.candidates["llvm"]
            pairs.append((estimate.compute_s,
                          sum(share * timed[n.name] for n, share in shares[k]),
                          f"{unit.function.name} ({estimate.source})"))
    return pairs, bounded, wrong


def _print_cpu_accuracy(pairs: list[tuple[float, float, str]]) -> None:
    for label, chosen in (("functions of 0.1 ms or more", [p for p in pairs if p[1] >= 1e-4]),
                          ("functions under 0.1 ms", [p for p in pairs if p[1] < 1e-4])):
        if not chosen:
            continue
        deviations = [abs(e - m) / m for e, m, _ in chosen]
        within = sum(1 for d in deviations if d <= 0.25)
        print(f"  CPU estimate vs the model's kernels, {label}: {len(chosen)}, median deviation "
              f"{100 * statistics.median(deviations):.1f}%, largest {100 * max(deviations):.1f}%, "
              f"{within} within 25%")
        if label.endswith("or more"):
            for (e, m, name), d in zip(chosen, deviations):
                if d > 0.25:
                    print(f"    off by more than 25%: {name}: estimate {e * 1e3:.3f} ms, "
                          f"measured {m * 1e3:.3f} ms")
    estimated, measured = sum(e for e, *_ in pairs), sum(m for _, m, _ in pairs)
    if measured:
        print(f"  CPU estimate vs the model's kernels, all CPU functions together: "
              f"{estimated * 1e3:.3f} ms vs {measured * 1e3:.3f} ms "
              f"({100 * abs(estimated - measured) / measured:.1f}%)")


def _stream(model, vta: VtaTarget, size: int, count: int, placement: str,
            trace: str | None = None, cpu: str = "llvm") -> bool:
    """``count`` inputs through the pipelined runtime, placed by ``placement``; whether
    the stream's outputs are the bits of one run after another."""
    compiled = heterocc.compile(model, target=[vta, cpu], placement=placement)
    plan = compiled.placement_report.plan
    if plan is not None:
        on = compiled.placement_report.by_target()
        print(f"  placement {placement}: nodes per device {on}; estimated busy per input: "
              + ", ".join(f"{d} {s * 1e3:.2f} ms" for d, s in sorted(plan.busy().items())))
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 3, size, size)).astype(np.float32) for _ in range(count)]
    start = time.process_time()
    result = compiled.run_stream([[x] for x in xs], replays=5)
    cpu_seconds = time.process_time() - start
    exact = all(np.array_equal(out[0], compiled.run([x])[0])
                for x, out in zip(xs, result.outputs))
    busy = result.busy(result.sequential)
    device = [s for s in result.pipelined if s.lane == "vta"]
    cpu = [s for s in result.pipelined if s.lane == "llvm"]
    overlap = sum(1 for a in cpu if any(a.start < b.end and b.start < a.end and a.input != b.input
                                        for b in device))
    print(f"  stream of {count}: per input, CPU functions {busy.get('llvm', 0) / count * 1e3:.2f} "
          f"ms measured in the replay (accelerator results replayed, fastest of 5 passes; "
          f"{result.live_seconds.get('llvm', 0) / count * 1e3:.2f} ms in the live run beside "
          "the simulator); vta: host part "
          f"{busy.get('vta host', 0) / count * 1e3:.2f} ms measured, link "
          f"{busy.get('vta link', 0) / count * 1e3:.2f} ms and compute "
          f"{busy.get('vta', 0) / count * 1e3:.2f} ms modelled")
    print(f"  modelled: sequential {result.makespan(result.sequential) * 1e3:.1f} ms, "
          f"pipelined {result.makespan(result.pipelined) * 1e3:.1f} ms -> throughput "
          f"{result.speedup:.2f}x; CPU spans overlapping another input's accelerator "
          f"compute: {overlap} of {len(cpu)}; replay bit-exact: {result.replay_bit_exact}; "
          f"outputs bit-exact against one run after another: {exact}; wall time here "
          f"{result.wall_seconds:.1f} s, CPU time of the live run and replays "
          f"{cpu_seconds:.1f} s")
    busy_cpu = result.busy(result.timeline(False, clock="cpu"))
    print(f"  the same replay timed by this process's CPU seconds instead of wall time "
          f"(other processes do not slow it; a parallel kernel's threads counted together): "
          f"CPU functions {busy_cpu.get('llvm', 0) / count * 1e3:.2f} ms, vta host part "
          f"{busy_cpu.get('vta host', 0) / count * 1e3:.2f} ms per input -> throughput "
          f"{result.speedup_of('cpu'):.2f}x")
    print(f"  with the accelerator calls' host part on the CPU's lane instead (the driver's "
          f"conversions waiting for the CPU's functions): "
          f"{result.speedup_of(host_parts_on='llvm'):.2f}x (wall), "
          f"{result.speedup_of('cpu', 'llvm'):.2f}x (CPU seconds)")
    if trace:
        names = {k: n.name for k, n in enumerate(compiled.graph.nodes)}
        with open(trace, "w") as f:
            json.dump(chrome_trace(result.pipelined, names, "pipelined (modelled)"), f)
        print(f"  wrote {trace}")
    return exact and result.replay_bit_exact


def vta_config(text: str, link_gbps: float) -> VtaTarget:
    """``SHAPE@CLOCK[/LINK]``: a preset shape at CLOCK MHz behind a LINK GB/s host link
    (default ``link_gbps``)."""
    text, _, link = text.partition("/")
    shape, _, clock = text.partition("@")
    return VtaTarget(config=shape, clock_mhz=float(clock or 100),
                     link_gbps=float(link) if link else link_gbps)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help="accelerator shapes and clocks (MHz), comma-separated, each "
                         "optionally with its own host link: SHAPE@MHZ/GBPS")
    ap.add_argument("--link-gbps", type=float, default=1.0)
    ap.add_argument("--stream", default="mobilenet_v2:1x16x16@100",
                    help="MODEL:CONFIG[,MODEL:CONFIG...] each run as a stream of "
                         "--stream-inputs inputs (a split where both devices carry work); "
                         "empty: none")
    ap.add_argument("--stream-inputs", type=int, default=16)
    ap.add_argument("--stream-trace-dir", help="write each stream's pipelined timeline here "
                                               "as Chrome trace JSON (MODEL-CONFIG.json)")
    ap.add_argument("--stream-placement", default="throughput",
                    choices=["throughput", "cost", "greedy"],
                    help="placement of the stream's model (default throughput: the devices' "
                         "time per input balanced, since they overlap across inputs)")
    ap.add_argument("--no-compile-time", dest="compile_time", action="store_false",
                    help="skip the compile times (three compiles in fresh interpreters per "
                         "model and config; benchmarks/placement_compile_time.py measures "
                         "them in CPU time)")
    ap.add_argument("--svg-dir", help="write each placement's picture here "
                                      "(MODEL-SHAPE@CLOCK.svg)")
    ap.add_argument("--cpu", default="llvm",
                    help="the CPU target with its options, e.g. \"llvm -mattr=-avx512f,-avxvnni\" "
                         "(AVX2 code without the integer dot products, as on CPUs that lack "
                         "them) (default: llvm, the host)")
    ap.add_argument("--onnx-helper", action="store_true",
                    help="build the models with onnx.helper instead of exporting from torch")
    ap.add_argument("--disturb-first-chain", type=int, default=1, metavar="N",
                    help="the first chain against each config's cost cache runs the "
                         "reference kernel from cold caches N times a call: a phase that "
                         "slows it alone while the baselines are set (default 1: none)")
    ap.add_argument("--normalise", choices=["voters", "reference"], default="voters",
                    help="voters (default): the median of the reference calls' slowdowns; "
                         "reference: the reference kernel from cold caches alone (the "
                         "earlier design, for an A/B)")
    args = ap.parse_args()
    if args.disturb_first_chain > 1:
        disturb_first_chains(args.disturb_first_chain)
    if args.normalise == "reference":
        normalise_by_reference_alone()
    print(describe())
    print(f"CPU target: {args.cpu}; normalised by: {args.normalise}; the first chain's "
          f"reference from cold caches run {args.disturb_first_chain}x a call")
    print(f"load average at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    configs = args.configs.split(",")
    for text in configs:
        c = vta_config(text, args.link_gbps).config
        print(f"accelerator {c.name}: {c.block_in}x{c.block_out} GEMM core at "
              f"{c.clock_mhz} MHz; host link {c.link_mbytes_per_s / 1000:g} GB/s, "
              f"{c.link_latency_ns / 1000:g} us per transfer")
    failures = []
    strictly_better = False
    for name in [m for m in args.models.split(",") if m]:
        model = quantized(name, not args.onnx_helper, args.size, "qdq", "int8", False)
        x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(
            np.float32)
        for text in configs:
            cache = tempfile.mkdtemp(prefix="heterocc-costs-")
            # compile times, each in a fresh interpreter: greedy, cost with an empty
            # estimate cache, cost again with the cache it left
            if args.compile_time:
                t_greedy, _ = _compile_time(model, text, args.link_gbps, "greedy", cache,
                                            args.cpu)
                t_cold, p_cold = _compile_time(model, text, args.link_gbps, "cost", cache,
                                               args.cpu)
                t_warm, p_warm = _compile_time(model, text, args.link_gbps, "cost", cache,
                                               args.cpu)
            os.environ["HETEROCC_CACHE_DIR"] = cache
            greedy, _, _ = _compile(model, vta_config(text, args.link_gbps), "greedy",
                                    args.cpu)
            vta = vta_config(text, args.link_gbps)
            warm, _, _ = _compile(model, vta, "cost", args.cpu)
            report = warm.placement_report
            if args.svg_dir:
                os.makedirs(args.svg_dir, exist_ok=True)
                svg = os.path.join(args.svg_dir, f"{name}-{text.replace('/', '-')}.svg")
                with open(svg, "w") as f:
                    f.write(placement_svg(report, f"{name}, vta {text} MHz + llvm"))
            totals = report.plan.totals()
            chosen, cpu, greedy_ms = totals["chosen_ms"], totals["all_cpu_ms"], \
                totals["greedy_ms"]
            ok = chosen <= cpu and chosen <= greedy_ms
            strictly_better |= chosen < cpu and chosen < greedy_ms
            moved = sum(1 for u in report.plan.composites if u.chosen != u.greedy)
            print(f"\n{name} on vta {text} MHz + llvm, link "
                  f"{vta.config.link_mbytes_per_s / 1000:g} GB/s: "
                  f"{len(report.plan.composites)} candidate composites, {moved} kept on "
                  "the CPU by cost")
            print(f"  estimated latency: cost {chosen:.2f} ms, all-CPU {cpu:.2f} ms, greedy "
                  f"{greedy_ms:.2f} ms -> cost <= both: {ok}; vs greedy "
                  f"{greedy_ms / chosen:.3f}x, vs all-CPU {cpu / chosen:.2f}x")
            (out,) = warm.run([x])
            (expected,) = greedy.run([x])
            exact = np.array_equal(out, expected) and np.array_equal(
                out, evaluate(warm.graph, [x])[0])
            regions, worst = _accelerator_accuracy(warm, vta)
            pairs, bounded, wrong = _cpu_accuracy(warm, report, args.cpu)
            print(f"  accelerator estimate vs timing model in the run: {regions} regions, "
                  f"largest deviation {100 * worst:.2f}%")
            linked, copied = _link_accuracy(warm, vta)
            print(f"  accelerator link, estimated (tensors kept in its DRAM not copied) vs "
                  f"the run's copies: {1e3 * linked:.3f} vs {1e3 * copied:.3f} ms")
            _print_cpu_accuracy(pairs)
            hosted = [u.candidates["vta"] for u in report.plan.composites
                      if "vta" in u.candidates]
            if hosted:
                on_vta = [u.candidates["vta"] for u in report.plan.composites
                          if u.chosen == "vta" and "vta" in u.candidates]
                print(f"  accelerator host part (layouts, packing: CPU time per call): "
                      f"{1e3 * sum(e.host_s for e in hosted):.3f} ms over the {len(hosted)} "
                      f"candidates estimated on vta (their transfers "
                      f"{1e3 * sum(e.transfer_s for e in hosted):.3f} ms, device "
                      f"{1e3 * sum(e.compute_s for e in hosted):.3f} ms); of the layers "
                      f"offloaded {1e3 * sum(e.host_s for e in on_vta):.3f} ms")
            print(f"  offloaded on the CPU's lower bound, unmeasured while compiling: "
                  f"{bounded}; of them measured here faster than the bound: {wrong}")
            print(f"  bit-exact (cost vs greedy vs integer reference): {exact}")
            if args.compile_time:
                print(f"  compile (each in a fresh interpreter): greedy {t_greedy:.2f} s; cost, "
                      f"empty estimate cache {t_cold:.2f} s "
                      f"(+{100 * (t_cold / t_greedy - 1):.1f}% over greedy; partition pass "
                      f"{p_cold:.2f} s, accelerator kernels it compiled reused by the "
                      f"build); cost, cache warm {t_warm:.2f} s "
                      f"(+{100 * (t_warm / t_greedy - 1):.1f}% over greedy; partition pass "
                      f"{p_warm:.2f} s = {100 * p_warm / t_warm:.1f}% of the compile)")
            if not ok or not exact:
                failures.append(f"{name} {text}")
    for stream in [item for item in args.stream.split(",") if item]:
        name, _, text = stream.partition(":")
        model = quantized(name, not args.onnx_helper, args.size, "qdq", "int8", False)
        print(f"\n{name} on vta {text} MHz + llvm, {args.stream_placement} placement, "
              f"pipelined (load {os.getloadavg()[0]:.2f}):")
        trace = os.path.join(args.stream_trace_dir,
                             f"{name}-{text.replace('/', '-')}.json") \
            if args.stream_trace_dir else None
        if args.stream_trace_dir:
            os.makedirs(args.stream_trace_dir, exist_ok=True)
        if not _stream(model, vta_config(text, args.link_gbps), args.size, args.stream_inputs,
                       args.stream_placement, trace, args.cpu):
            failures.append(f"stream {stream}")
    print(f"\ncost strictly better than both on at least one: {strictly_better}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
