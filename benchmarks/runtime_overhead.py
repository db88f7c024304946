"""What running a compiled CPU model costs beyond its kernels' machine code, in two
figures that matter for networks of many small layers:

- the thread pool's hand-off: one tiny kernel compiled with its rows in parallel and
  serially, each called back to back (the difference is what entering a parallel loop
  costs: waking or reaching the workers, and waiting for them);
- the graph executor's cost per node: a chain of tiny Conv+Relu functions run by the
  executor, against the same kernels' machine code called back to back with the same
  buffers (the difference, per node, is the Python between two kernels), with the chain
  called as one native run (``heterocc.runtime.native``: the default) and with one call
  per function (``native_runs=False``: what profiling runs).

    python benchmarks/runtime_overhead.py [--nodes 200] [--blocks 20]
        [--models efficientnet_b0 mobilenet_v2 --precision float|int8 --rounds 6]

``--models``: whole zoo models (``zoo.py``'s torchvision exports; int8: quantized as
there) run by the executor with native runs and with one call per function, in
alternating blocks of 5 runs on one thread, timed in CPU seconds of this process.

Both peers are measured in the same run, in alternating blocks, so a change in machine
load affects both alike; the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from machine import describe


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200, help="Conv+Relu functions in the chain")
    parser.add_argument("--blocks", type=int, default=20, help="alternating blocks per figure")
    parser.add_argument("--models", nargs="*", default=[], help="zoo models to time whole")
    parser.add_argument("--precision", choices=("float", "int8"), default="float")
    parser.add_argument("--rounds", type=int, default=6, help="alternating blocks per model")
    return parser.parse_args()


def _alternate(runs, blocks: int, calls: int) -> list[tuple[float, float]]:
    """(min, median) microseconds per call of each callable, over ``blocks`` alternating
    blocks of ``calls`` calls."""
    per_call: list[list[float]] = [[] for _ in runs]
    for _ in range(blocks):
        for run, samples in zip(runs, per_call):
            start = time.perf_counter()
            for _ in range(calls):
                run()
            samples.append((time.perf_counter() - start) / calls * 1e6)
    return [(min(s), statistics.median(s)) for s in per_call]


def pool_hand_off(blocks: int) -> None:
    from heterocc import te
    from heterocc.targets import llvm as hllvm

    def build(parallel: bool):
        A = te.placeholder((8, 16), "float32", "A")
        B = te.compute((8, 16), lambda i, j: A[i, j] * A[i, j], name="B")
        s = te.create_schedule(B)
        s[B].vectorize(s[B].op.axis[1])
        if parallel:
            s[B].parallel(s[B].op.axis[0])
        name = f"square_{'parallel' if parallel else 'serial'}"
        return hllvm.build(te.lower(s, [A, B], name=name))[name]

    a = np.random.default_rng(0).random((8, 16), dtype=np.float32)
    b = np.empty_like(a)
    addresses = (a.ctypes.data, b.ctypes.data)
    serial, parallel = build(False), build(True)
    (s_min, s_med), (p_min, p_med) = _alternate(
        [lambda: serial.call_addresses(*addresses), lambda: parallel.call_addresses(*addresses)],
        blocks, 1000)
    np.testing.assert_array_equal(b, a * a)
    print(f"tiny kernel, serial:   min {s_min:7.2f}  median {s_med:7.2f} us/call")
    print(f"tiny kernel, parallel: min {p_min:7.2f}  median {p_med:7.2f} us/call "
          f"({hllvm.num_threads()} threads)")
    print(f"pool hand-off:         min {p_min - s_min:7.2f}  median {p_med - s_med:7.2f} us/loop")


def executor_per_node(nodes: int, blocks: int) -> None:
    import heterocc
    from heterocc.models import conv_chain
    from heterocc.runtime.executor import GraphExecutor

    model = conv_chain(nodes)
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 8)).astype(np.float32)
    executor = heterocc.compile(model, target="llvm").build_static().executor
    per_node = GraphExecutor(executor.graph, executor.kernels, executor.placement,
                             native_runs=False)
    expected = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_allclose(executor.execute([x])[0], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(per_node.execute([x])[0], executor.execute([x])[0])
    direct = machine_code_calls(executor, [x])

    def machine_code():
        for call, addresses, _ in direct:
            call(*addresses)

    count = len(executor.graph.nodes)
    # one run per sample: on a loaded machine the mean of a block is mostly preemptions
    (e_min, e_med), (p_min, p_med), (m_min, m_med) = _alternate(
        [lambda: executor.execute([x]), lambda: per_node.execute([x]), machine_code],
        10 * blocks, 1)
    runs = len(executor.runs)
    for what, low, mid in (("executor, native runs", e_min, e_med),
                           ("executor, one call each", p_min, p_med),
                           ("machine code", m_min, m_med)):
        print(f"{count} nodes, {what + ':':24s} min {low / count:6.2f}  median "
              f"{mid / count:6.2f} us/node")
    print(f"executor's cost per node, native runs ({runs} run(s)):  min "
          f"{(e_min - m_min) / count:6.2f}  median {(e_med - m_med) / count:6.2f} us/node")
    print(f"executor's cost per node, one call each:     min {(p_min - m_min) / count:6.2f}  "
          f"median {(p_med - m_med) / count:6.2f} us/node")


def machine_code_calls(executor, inputs: list[np.ndarray]) -> list:
    """Each function of ``executor``'s graph as its machine code called directly: (call,
    data addresses, the arrays behind them) with copies of the arguments it had in a run
    on ``inputs``, its constants and outputs of its own (holding the run's arrays would
    keep the kernels from recycling theirs), in order."""
    from heterocc.runtime.executor import GraphExecutor

    seen = []

    def recording(kernel):
        def run(args):
            seen.append((kernel, [a.copy() for a in args]))
            return kernel(args)
        return run

    one_by_one = GraphExecutor(executor.graph, {name: recording(kernel) for name, kernel
                                                in executor.kernels.items()},
                               executor.placement, native_runs=False)
    one_by_one.execute(inputs)
    calls = []
    for kernel, arguments in seen:
        outputs = [np.empty(shape, dtype) for shape, dtype in kernel.out_specs]
        arrays = [*arguments, *kernel.constants, *outputs]
        calls.append((kernel.function.call_addresses, [a.ctypes.data for a in arrays],
                      arrays))
    return calls


def whole_models(names: list[str], precision: str, rounds: int) -> None:
    import tempfile

    import onnxruntime as ort
    from alternating import alternating_samples
    from zoo import export, quantize, random_feed

    import heterocc
    from heterocc.runtime.executor import GraphExecutor

    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.onnx")
            why = export(name, path)
            if why:
                print(f"{name}: skipped: {why}")
                continue
            session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            rng = np.random.default_rng(1)
            feed = random_feed(session, rng)
            if precision == "int8":
                quantized = os.path.join(tmp, f"{name}.int8.onnx")
                quantize(path, quantized)
                path = quantized
            executor = heterocc.compile(path, target="llvm").build_static().executor
        per_node = GraphExecutor(executor.graph, executor.kernels, executor.placement,
                                 native_runs=False)
        x = [feed[k] for k in executor.input_names]
        for got, want in zip(executor.execute(x), per_node.execute(x)):
            np.testing.assert_array_equal(got, want)
        runs = executor.runs
        inside = sum(run.last - run.first + 1 for run in runs)
        native, one_each = alternating_samples(
            [lambda e=executor, x=x: e.execute(x), lambda e=per_node, x=x: e.execute(x)],
            5 * rounds, 5,
            pause_s=0.1, clock=time.process_time)
        n_med, o_med = statistics.median(native) * 1e3, statistics.median(one_each) * 1e3
        n_min, o_min = min(native) * 1e3, min(one_each) * 1e3
        count = len(executor.graph.nodes)
        print(f"{name} {precision}: {count} functions, {inside} in {len(runs)} native "
              f"run(s); CPU ms/run native {n_med:.3f} (best {n_min:.3f}), one call each "
              f"{o_med:.3f} (best {o_min:.3f}): saved {o_med - n_med:.3f} ms "
              f"({(o_med - n_med) / count * 1e3:.2f} us/function), ratio "
              f"{n_med / o_med:.3f} (best-of {n_min / o_min:.3f})", flush=True)


def main() -> None:
    args = _parse()
    print(describe())
    if args.models:
        os.environ.setdefault("HETEROCC_NUM_THREADS", "1")
        print(f"load average {os.getloadavg()[0]:.2f}")
        whole_models(args.models, args.precision, args.rounds)
        print(f"load average {os.getloadavg()[0]:.2f}")
        return
    pool_hand_off(args.blocks)
    executor_per_node(args.nodes, args.blocks)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
