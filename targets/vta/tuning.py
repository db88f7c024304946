"""The accelerator's tuning space: its GEMM tiling and virtual threads, tuned through the
machinery of ``heterocc.tuning`` (``heterocc tune --target vta``).

The ``vta_gemm`` template's knobs are the chunk sizes of a tiled GEMM (rows of A and
columns of C per block, reduction tiles per chunk, all in hardware tiles) and the
number of virtual threads. A candidate's instruction stream is generated, executed by
the functional simulator on random int8 data (its result checked against NumPy) and
its cost is the timing model's total cycles, so measurements are exact and repeatable.
Tilings that overflow a virtual thread's share of a buffer are rejected as build errors.

Workload: ``(rows, k, n, hardware, requantize)``: C (rows x n) = A (rows x k) @ W.T, W
(n x k), on the hardware config named ``hardware`` (its full ``HardwareConfig.name``, so
keys are canonical; :func:`vta_gemm_task` also takes a preset such as ``"1x16x16"`` or a
config); with ``requantize`` the
accumulators are requantized to int8 by the ALU before the store, as the accelerator
target compiles every composite (its per-column constants take accumulator space).
"""

from __future__ import annotations

import functools

import numpy as np

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import Buffer
from heterocc.accel_sim.reference_programs import (
    GemmTiling,
    Requantization,
    default_gemm_tiling,
    tiled_gemm_program,
)
from heterocc.ir.graph import Graph, Node
from heterocc.sdk import InputError
from heterocc.sdk.graph import conv_geometry
from heterocc.sdk.tuning import (
    CandidateError,
    Config,
    ConfigSpace,
    Knob,
    MeasureOptions,
    TargetTuning,
    Task,
    Template,
    check_output,
    divisors,
    lookup,
    matmul_dims,
)

#: fixed-point shift of the test requantization (keeps int8 results spread out)
_SHIFT = 8


def _grid(args: tuple) -> tuple[HardwareConfig, int, int, int]:
    rows, k, n, name, _ = args
    config = HardwareConfig.from_name(name)
    if rows % config.batch or k % config.block_in or n % config.block_out:
        raise InputError(f"vta_gemm {rows}x{k}x{n}: rows, k and n must be multiples of the "
                         f"GEMM core of {name} ({config.batch}, {config.block_in}, "
                         f"{config.block_out}); pad the operands")
    return config, rows // config.batch, n // config.block_out, k // config.block_in


def _space(args: tuple) -> ConfigSpace:
    _, m_tiles, n_tiles, k_tiles = _grid(args)
    return ConfigSpace((
        Knob("block_rows", "split", tuple(divisors(m_tiles))),
        Knob("block_cols", "split", tuple(divisors(n_tiles))),
        Knob("k_chunk", "split", tuple(divisors(k_tiles))),
        Knob("virtual_threads", "threads", (1, 2)),
    ))


def _default(args: tuple) -> dict:
    config, m_tiles, n_tiles, k_tiles = _grid(args)
    usable = config.acc_depth - _constant_count(args) * n_tiles
    tiling = default_gemm_tiling(config, m_tiles, n_tiles, k_tiles, 2, acc_depth=usable)
    return {"block_rows": tiling.block_rows, "block_cols": tiling.block_cols,
            "k_chunk": tiling.k_chunk, "virtual_threads": 2}


def _shares(args: tuple, config: Config) -> tuple[float, float, float]:
    """Fractions of a virtual thread's input, weight and accumulator buffer share that
    one block uses (above 1: it does not fit)."""
    hardware, _, n_tiles, _ = _grid(args)
    threads = config["virtual_threads"]
    rows, cols, chunk = config["block_rows"], config["block_cols"], config["k_chunk"]
    constant_tiles = _constant_count(args) * n_tiles
    return (rows * chunk / (hardware.inp_depth // threads),
            cols * chunk / (hardware.wgt_depth // threads),
            rows * cols / max((hardware.acc_depth - constant_tiles) // threads, 1))


def _constant_count(args: tuple) -> int:
    """Per-column constant rows the requantizing epilogue keeps in the accumulator."""
    return len(_requantization(np.zeros(args[2], np.int64)).column_constants) if args[4] else 0


def _requantization(bias: np.ndarray) -> Requantization:
    column = np.ones(len(bias), np.int64)
    return Requantization(bias=bias, limit=column << 20, multiplier=column,
                          rounding=column << (_SHIFT - 1), shift=column * _SHIFT,
                          zero_point=0, qmin=-128, qmax=127)


def _instantiate(args: tuple, config: Config):
    hardware = _grid(args)[0]
    if max(_shares(args, config)) > 1:
        raise CandidateError("build", f"tiling {config.to_json()} overflows a virtual "
                                      "thread's share of the on-chip buffers")
    return hardware, GemmTiling(config["block_rows"], config["block_cols"], config["k_chunk"])


def _inputs(args: tuple, rng: np.random.Generator) -> list[np.ndarray]:
    """A, W and (when requantizing) the per-column bias of the epilogue."""
    rows, k, n, _, requantize = args
    arrays = [rng.integers(-128, 128, (rows, k), dtype=np.int8),
              rng.integers(-128, 128, (n, k), dtype=np.int8)]
    return arrays + [rng.integers(-1000, 1000, n)] if requantize else arrays


def _reference(args: tuple, inputs: list[np.ndarray]) -> np.ndarray:
    a, w, *bias = inputs
    acc = a.astype(np.int64) @ w.astype(np.int64).T
    if not bias:
        return acc
    epilogue = _requantization(bias[0])
    clamped = np.clip(acc + epilogue.bias, -epilogue.limit, epilogue.limit)
    scaled = (clamped * epilogue.multiplier + epilogue.rounding) >> epilogue.shift
    return np.clip(scaled + epilogue.zero_point, epilogue.qmin, epilogue.qmax)


def _features(args: tuple, config: Config) -> np.ndarray:
    """Log2 of the block sizes and threads, and the buffer shares a block uses."""
    sizes = [config["block_rows"], config["block_cols"], config["k_chunk"],
             config["virtual_threads"]]
    return np.array([*np.log2(sizes), *_shares(args, config)], np.float64)


VTA_GEMM = Template(
    "vta_gemm", "vta", _space, _default, _instantiate, _inputs, _reference,
    lambda args: 2 * args[0] * args[1] * args[2], _features, cost_unit="cycles")


def hardware_name(hardware: HardwareConfig | str) -> str:
    """The full name of a hardware config given as a config, a preset ("1x16x16") or a
    full name."""
    if isinstance(hardware, HardwareConfig):
        return hardware.name
    return HardwareConfig.from_name(hardware).name if "_" in hardware \
        else HardwareConfig.preset(hardware).name


def vta_gemm_task(rows: int, k: int, n: int, hardware: HardwareConfig | str = "1x16x16",
                  requantize: bool = True) -> Task:
    """The tuning task of one accelerator GEMM (shapes already padded to the core)."""
    return Task("vta_gemm", (rows, k, n, hardware_name(hardware), requantize))


def measure_candidate(task: Task, config: Config, options: MeasureOptions) -> tuple[float]:
    """Generate the candidate's stream, check its result on the functional simulator
    and return its modelled cycles."""
    template = task.definition
    hardware, tiling = template.instantiate(task.args, config)
    inputs = template.inputs(task.args, np.random.default_rng(options.seed))
    a, w, *bias = inputs
    epilogue = _requantization(bias[0]) if bias else None
    program = tiled_gemm_program(hardware, a, w, config["virtual_threads"], tiling,
                                 Buffer.ACC if epilogue is None else Buffer.OUT, epilogue)
    report = program.run()
    got = program.read("C").astype(np.int64)
    check_output(task, got, template.reference(task.args, inputs), options)
    return (float(report.timing.total_cycles),)


def vta_tiling(rows: int, k: int, n: int, hardware, requantize: bool = True
               ) -> tuple[GemmTiling, int] | None:
    """The current tuning log's best GEMM tiling and virtual thread count of a
    (rows x k) @ (k x n) GEMM on ``hardware`` (a ``HardwareConfig``, preset or config
    name), or None."""
    config = lookup(vta_gemm_task(rows, k, n, hardware, requantize).workload_key)
    if config is None:
        return None
    tiling = GemmTiling(config["block_rows"], config["block_cols"], config["k_chunk"])
    return tiling, config["virtual_threads"]


def _gemm_task(rows: int, k: int, n: int, config: HardwareConfig) -> Task | None:
    """The task of a GEMM padded to the core's block sizes, as the target pads it."""
    if rows % config.batch:
        return None

    def round_up(value: int, multiple: int) -> int:
        return -(-value // multiple) * multiple

    return vta_gemm_task(rows, round_up(k, config.block_in), round_up(n, config.block_out),
                         config)


def _conv_task(node: Node, config: HardwareConfig) -> Task | None:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(x.shape) != 4 or len(w.shape) != 4 or int(node.attrs.get("group") or 1) != 1:
        return None
    n, c = x.shape[:2]
    out_channels, _, r, s = w.shape
    _, _, _, _, (oh, ow) = conv_geometry(x.shape, w.shape, node.attrs)
    return _gemm_task(n * oh * ow, c * r * s, out_channels, config)


def _matmul_task(node: Node, config: HardwareConfig) -> Task | None:
    dims = matmul_dims(node)
    if dims is None:
        return None
    m, n, k = dims
    return _gemm_task(m, k, n, config)


_EXTRACTORS = {"Conv": _conv_task, "ConvInteger": _conv_task, "MatMul": _matmul_task,
               "MatMulInteger": _matmul_task, "Gemm": _matmul_task}


def extract_tasks(graph: Graph, config: HardwareConfig) -> list[Task]:
    """The GEMM of every ungrouped convolution (im2col) and dense layer of ``graph``,
    padded to the block sizes of the ``config`` core as the target pads them."""
    found: dict[str, Task] = {}
    for _, node in graph.walk():
        extractor = _EXTRACTORS.get(node.op)
        if extractor is None or any(v is None for v in node.inputs[:2]):
            continue
        task = extractor(node, config)
        if task is not None:
            found.setdefault(task.workload_key, task)
    return list(found.values())


def vta_tuning(config: HardwareConfig) -> TargetTuning:
    """The tuning hook of an accelerator target on hardware ``config``."""
    return TargetTuning((VTA_GEMM,), functools.partial(extract_tasks, config=config),
                        measure_candidate)
