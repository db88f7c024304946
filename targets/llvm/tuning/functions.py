"""Whole fused functions as tuning tasks: their specs, the choice between the auto record
and the hand schedule, their measurement."""

from __future__ import annotations

import functools
import json
import math
import statistics

import numpy as np

from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.sdk import CompileError, te
from heterocc.sdk.graph import run_pipeline
from heterocc.sdk.registry import get_target
from heterocc.sdk.runtime import evaluate
from heterocc.sdk.te_target import express_function, fold_scalars
from heterocc.sdk.tuning import (
    BASELINE,
    PAIRED,
    ApplyHistoryBest,
    CandidateError,
    Config,
    ConfigSpace,
    Knob,
    MeasureOptions,
    MeasureRecord,
    Sketch,
    Task,
    Template,
    auto_name,
    check_output,
    task_inputs,
    time_calls,
    workload_key,
)

from ..cpu import CPUDescription, active_cpu, compiling_for
from ..schedules import (
    default_panel,
    pack_matmul_rows,
    pack_matmuls,
    reachable_computes,
    schedule_packed_rows,
)
from ..schedules.winograd_conv import winograd_output_tile, winograd_tiles_of
from .apply import ScheduleConfigs
from .common import search_hints
from .matmul import _closest, _panel_options
from .measure import _flush_of, _rotating, pool_watch

# ------------------------------------------------------------------ whole fused functions
#
# A configuration that wins on a bare workload can lose in the model, where the function
# compiled around the same convolution or product also finishes its epilogue (bias,
# activation, residual addition) in the tiles, reads its input in another block layout
# and its constant operand packed once at build time. So the auto search tunes each
# fused function as the model compiles it: a ``function`` task is one distinct function
# body (its ops, attributes and types; constants by shape, small ones by value), built
# and timed through this target's own compile path. Its ``auto.function`` twin searches
# the sketch of the whole function; the ``function`` template has one point, the
# target's hand schedule, which ``tune --search auto`` times on the same harness. At
# compile time a function takes the auto record only where it beat that hand schedule
# (:func:`function_configs`); a function without records of its own falls back to the
# workload records above.

#: ops whose float functions become function tasks (the anchors the sketch tiles); a
#: reduction's task is where the sketch's rfactor rule applies (few output points)
REDUCTION_ANCHORS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare",
                     "ReduceL1", "ReduceL2")
#: pools (of a blocked layout too: a window over its rows, columns and channel lanes):
#: with the hand rules off their generic schedule is scalar, 5% of ResNet-18's time
POOL_ANCHORS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
FUNCTION_ANCHORS = {"ConvNCHWc": "conv2d_nchwc", "MatMul": "matmul", "Gemm": "matmul",
                    **{op: "reduce" for op in REDUCTION_ANCHORS},
                    **{op: "pool" for op in POOL_ANCHORS}}
#: how much faster than the hand schedule a function's auto record must have been
#: measured to be applied (timings on a shared machine vary by a few percent, and the
#: best of many candidates is the one most flattered by that)
FUNCTION_MARGIN = 0.03
#: non-float constants up to this many elements are part of a function task by value
#: (shapes, axes), as are one-element constants (clip bounds, scalars folded into the
#: code); others by shape only, random when timed
_SPEC_VALUE_ELEMENTS = 64


def _attr_json(value):
    if isinstance(value, np.ndarray):
        if value.size > _SPEC_VALUE_ELEMENTS:
            raise TypeError(f"an array attribute of {value.size} elements is too large "
                            "for a function task's text")
        return {"array": value.tolist(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_attr_json(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {k: _attr_json(v) for k, v in sorted(value.items())}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"attribute value of type {type(value).__name__} has no JSON form")


def _attr_value(data):
    if isinstance(data, list):
        return [_attr_value(v) for v in data]
    if isinstance(data, dict):
        if "array" in data:
            return np.array(data["array"], np.dtype(data["dtype"])).reshape(data["shape"])
        if "dict" in data:
            return {k: _attr_value(v) for k, v in data["dict"].items()}
        return float(data["float"])
    return data


def function_spec(body: Graph) -> str:
    """The canonical JSON text of a function body as a tuning task knows it: inputs and
    node outputs by shape and dtype, ops with their attributes, constants by shape and
    dtype (and value when folded into the code or a small shape-like one). Bodies that
    compile to the same kernel have the same text; :func:`function_body` rebuilds a body
    of that text."""
    refs: dict = {}
    constants: list = []
    for position, value in enumerate(body.inputs):
        refs[value] = ["in", position]
    nodes = []
    for node in body.nodes:
        args = []
        for value in node.inputs:
            if value is not None and value not in refs:
                if not value.is_const:
                    raise CompileError(f"function value {value.name!r} is undefined")
                data = np.asarray(value.data)
                # by value: what the kernel folds into its code (one-element
                # constants) and small non-float ones (shapes, axes) that the ops'
                # references read; float tensors are data, like the graph's inputs
                small = data.size == 1 or (data.dtype.kind != "f"
                                           and data.size <= _SPEC_VALUE_ELEMENTS)
                constants.append([list(data.shape), data.dtype.str,
                                  data.reshape(-1).tolist() if small else None])
                refs[value] = ["const", len(constants) - 1]
            args.append(None if value is None else refs[value])
        for position, value in enumerate(node.outputs):
            refs[value] = ["node", len(nodes), position]
        nodes.append([node.op, {k: _attr_json(v) for k, v in sorted(node.attrs.items())},
                      args, [[list(v.type.shape), v.type.dtype] for v in node.outputs]])
    spec = {"inputs": [[list(v.type.shape), v.type.dtype] for v in body.inputs],
            "constants": constants, "nodes": nodes,
            "outputs": [refs[v] for v in body.outputs]}
    return json.dumps(spec, separators=(",", ":"), sort_keys=True)


@functools.lru_cache(maxsize=64)
def function_body(spec: str) -> Graph:
    """The function body of :func:`function_spec` text ``spec``; large constants get
    random values (the same for every call with one spec; zeros when not floats)."""
    data = json.loads(spec)
    rng = np.random.default_rng(0)
    values: dict = {}
    inputs = [Value(f"in{k}", TensorType(tuple(shape), dtype))
              for k, (shape, dtype) in enumerate(data["inputs"])]
    constants = []
    for k, (shape, dtype, content) in enumerate(data["constants"]):
        if content is not None:
            array = np.array(content, np.dtype(dtype)).reshape(shape)
        elif np.dtype(dtype).kind == "f":
            array = rng.standard_normal(shape).astype(dtype)
        else:  # indices, masks: zeros are valid wherever any value is
            array = np.zeros(shape, np.dtype(dtype))
        constants.append(Value(f"c{k}", TensorType(tuple(shape), np.dtype(dtype).name), array))

    def resolve(ref):
        if ref is None:
            return None
        kind, *where = ref
        if kind == "in":
            return inputs[where[0]]
        if kind == "const":
            return constants[where[0]]
        return values[tuple(where)]

    nodes = []
    for number, (op, attrs, args, outs) in enumerate(data["nodes"]):
        outputs = [Value(f"v{number}_{k}", TensorType(tuple(shape), dtype))
                   for k, (shape, dtype) in enumerate(outs)]
        for k, value in enumerate(outputs):
            values[number, k] = value
        nodes.append(Node(op, [resolve(a) for a in args], outputs,
                          {k: _attr_value(v) for k, v in attrs.items()}, f"n{number}"))
    return Graph(inputs, [resolve(r) for r in data["outputs"]], nodes, "function")


def _function_node(spec: str) -> Node:
    body = function_body(spec)
    return Node("Function", list(body.inputs), list(body.outputs), {}, "candidate", body)


def _function_flops(args: tuple) -> int:
    """Multiply-adds x 2 of the function's convolutions and products, plus one
    operation per element its reductions read and per tap of its pools' windows."""
    total = 0
    for node in function_body(args[1]).nodes:
        if node.op in REDUCTION_ANCHORS or node.op.startswith("Global"):
            total += math.prod(node.inputs[0].type.shape)
        elif node.op in POOL_ANCHORS:
            window = math.prod(node.attrs.get("kernel_shape") or (1,))
            total += math.prod(node.outputs[0].type.shape) * window
        elif node.op == "ConvNCHWc":
            _, per_group, kh, kw, block, _ = node.inputs[1].type.shape
            total += 2 * math.prod(node.outputs[0].type.shape) * per_group * block * kh * kw
        elif node.op in ("MatMul", "Gemm"):
            a = node.inputs[0].type.shape
            out = node.outputs[0].type.shape
            k = a[0] if node.op == "Gemm" and node.attrs.get("transA") else a[-1]
            total += 2 * math.prod(out) * k
    return total


def _function_inputs(args: tuple, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype)
            for v in function_body(args[1]).inputs]


def _function_reference(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return evaluate(function_body(args[1]), inputs)


def function_keys(spec: str, kind: str, rules: str = "hand") -> tuple[str, str]:
    """The workload keys of a function's baseline and auto-search tasks: the baseline
    is its hand schedule, or with ``rules="none"`` its generic schedule
    (:data:`GENERIC_FUNCTION`)."""
    return (workload_key(baseline_template(rules), (kind, spec)),
            workload_key(auto_name(FUNCTION), (kind, spec)))


def baseline_template(rules: str) -> str:
    """The template whose one point is what the target compiles a function to without
    an auto record, under its schedule ``rules`` (``LLVMTarget.rules``)."""
    return GENERIC_FUNCTION if rules == "none" else FUNCTION


def _function_kind(body: Graph) -> str | None:
    """The anchor kind of a float function the function tasks cover, or None."""
    kinds = [("depthwise_" if n.op == "ConvNCHWc" and int(n.attrs.get("group") or 1) > 1
              else "") + FUNCTION_ANCHORS[n.op]
             for n in body.nodes if n.op in FUNCTION_ANCHORS
             and n.outputs[0].type.dtype.startswith("float")]
    return kinds[0] if len(kinds) == 1 else None


def function_configs(body: Graph, log: ApplyHistoryBest | None,
                     rules: str = "hand") -> ScheduleConfigs:
    """The configs of one function's schedules from the applied tuning ``log``: whether
    it takes its auto record as a whole (only where that was measured faster than the
    hand schedule of the same function on the same harness, by
    :data:`FUNCTION_MARGIN`) or keeps the hand schedule; functions the log has no
    records of keep the workload records' say (see :func:`function_tuned`). With the
    target's ``rules="none"`` the baseline the record must have beaten is the generic
    schedule (:func:`baseline_template`)."""
    return ScheduleConfigs(log, _decide(body, log, rules))


def logged_seconds(body: Graph, log: ApplyHistoryBest | None, rules: str = "hand"
                   ) -> float | None:
    """The seconds per call the applied tuning ``log`` measured for the function
    ``body`` as compile will build it under that log (:func:`function_configs`): the
    fastest timing of its auto record where that was chosen, else of its hand schedule;
    None where the log has no record of the schedule compile will use (a measurement
    must tell)."""
    choice = _decide(body, log, rules)
    if choice is None:
        return None
    hand_key, auto_key = function_keys(function_spec(body), _function_kind(body), rules)
    if choice[0] == "auto":
        key, index = auto_key, choice[1].index
    else:
        key, index = hand_key, FUNCTION_TEMPLATE.default_config(()).index
    floor = log.floor_cost(key, index)
    return floor if floor is not None and math.isfinite(floor) else None


def _decide(body: Graph, context: ApplyHistoryBest | None, rules: str = "hand"
            ) -> tuple | None:
    """:attr:`ScheduleConfigs.choice` of the function ``body`` under log ``context``."""
    choice = None
    kind = _function_kind(body) if context is not None else None
    spec = _spec_or_none(body) if kind is not None else None
    if spec is not None:
        hand_key, auto_key = function_keys(spec, kind, rules)
        hand_cost, config = context.best_cost(hand_key), context.lookup(auto_key)
        paired = _paired_choice(context, auto_key, hand_key)
        if paired is not None:
            choice = ("auto", paired[0]) if paired[1] else ("hand", None)
        elif config is not None and (hand_cost is None or _beats_hand(
                context, auto_key, config, hand_key)):
            choice = ("auto", config)
        elif hand_cost is not None or config is not None:
            choice = ("hand", None)
    return choice


def _paired_choice(context: ApplyHistoryBest, auto_key: str, hand_key: str
                   ) -> tuple[Config, bool] | None:
    """The search's best as it was timed in turn with the hand schedule (the records
    tagged :data:`~heterocc.tuning.records.PAIRED` and ``BASELINE``), and whether it won
    those pairs by :data:`FUNCTION_MARGIN`, both by the median of its timings and by
    its fastest; None where the log holds no such pairs (or their config is no point
    of today's space). Only these timings decide where they exist: the search's own
    were taken minutes earlier under another load (a point timed 0.15 ms while the
    machine was quiet, 0.27 ms beside the hand schedule's 0.21 ms later, took the
    place of that hand schedule and ran 0.45 ms in the model)."""
    paired = context.records(auto_key, PAIRED)
    baseline = context.records(hand_key, BASELINE)
    if not paired or not baseline:
        return None
    index = paired[-1].config_index  # the last run's finalist
    config = context.lookup(auto_key, lambda c: c.index == index)
    if config is None:
        return None
    pairs = []
    for record in (r for r in paired if r.config_index == index):
        after = [r for r in baseline if r.timestamp >= record.timestamp]
        if after:
            pairs.append((record.cost, min(after, key=lambda r: r.timestamp).cost))
    if not pairs:
        return None
    auto_costs, hand_costs = zip(*pairs)
    return config, _faster_by_margin(statistics.median(auto_costs),
                                     statistics.median(hand_costs),
                                     min(auto_costs), min(hand_costs))


def _beats_hand(context: ApplyHistoryBest, auto_key: str, config: Config,
                hand_key: str) -> bool:
    """Whether the auto record ``config`` was measured faster than the hand schedule
    by :data:`FUNCTION_MARGIN`, both by the median of its records and by its fastest
    single timing: on a shared machine a burst of other work slows some timings
    several-fold, which the median of a few records does not always outvote and the
    fastest timing never shows."""
    hand_index = FUNCTION_TEMPLATE.default_config(()).index
    return _faster_by_margin(context.best_cost(auto_key), context.best_cost(hand_key),
                             context.floor_cost(auto_key, config.index),
                             context.floor_cost(hand_key, hand_index))


def _faster_by_margin(auto_typical: float, hand_typical: float,
                      auto_fastest: float | None, hand_fastest: float | None) -> bool:
    """Whether the search's point beat the hand schedule by :data:`FUNCTION_MARGIN`
    both in its typical timing (a median) and in its fastest (where both are known)."""
    keep = 1 - FUNCTION_MARGIN
    return (auto_typical < hand_typical * keep
            and (auto_fastest is None or hand_fastest is None
                 or auto_fastest < hand_fastest * keep))


def _spec_or_none(body: Graph) -> str | None:
    """:func:`function_spec` of ``body``, or None for a function no task can describe
    (an attribute with no JSON form, or too large: it is never tuned as a whole)."""
    try:
        return function_spec(body)
    except (TypeError, CompileError):
        return None


def _function_sketch(outputs, cpu: CPUDescription) -> Sketch:
    return Sketch(outputs, search_hints(outputs[0].dtype, cpu))


def function_tuned(expressed, configs: ScheduleConfigs,
                   cpu: CPUDescription) -> te.Schedule | None:
    """The schedule of a function (its products packed already, its convolution
    computed by the algorithm of the auto record, :func:`record_winograd_tile`) by its
    auto record when ``configs`` chose it (:func:`function_configs`), else None (the
    target's own schedule follows; so too where the record chose Winograd and the
    target computes the convolution directly: ``LLVMTarget.winograd=False``)."""
    choice = configs.choice
    if choice is None or choice[0] != "auto":
        return None
    m = record_winograd_tile(choice[1].values)
    if m and not _is_winograd(expressed.outputs):
        return None
    pack_matmuls(expressed.outputs, configs.matmul_panel, cpu=cpu)
    sketch = _function_sketch(expressed.outputs, cpu)
    config = (choice[1] if not m
              else sketch.space.from_values(_algorithm_values(choice[1].values, m)))
    blocks = _pack_rows(sketch, expressed.outputs, config)
    s = te.create_schedule(expressed.outputs)
    fold_scalars(s, expressed.scalars)
    sketch.schedule_stages(s, expressed.outputs, config)
    for packed in blocks:
        schedule_packed_rows(s, packed, cpu)
    return s


#: the layouts of a product's A that a function's auto search chooses between: read in
#: place, or copied in blocks of the register tile's rows by the reduction's chunk
#: (``schedules.pack_matmul_rows``)
A_LAYOUTS = ("in_place", "row_blocks")


def _pack_rows(sketch: Sketch, outputs, config: Config) -> list[te.Tensor]:
    """Where ``config`` (a point of the function's sketch ``sketch``, derived from the
    same compute before A was packed) chooses ``row_blocks``: every 2-D product among
    the sketch's anchors reads A through a copy in blocks of its register tile's rows
    (the innermost tile of its row axis) by its reduction chunk (the inner tile of its
    reduction), so that the tile's broadcasts read one contiguous block. Returns the
    copies' stages, for the caller to schedule."""
    if config.values.get("a_layout", "in_place") != "row_blocks":
        return []
    by_name = {t.name: t for t in reachable_computes(outputs)}
    blocks = []
    for number, anchor in enumerate(sketch.anchors):
        product = by_name.get(anchor.name)
        if (product is None or product.ndim != 2 or "packed_B" not in product.op.attrs
                or f"a{number}.tile.r0" not in config.values):
            continue
        rows = config[f"a{number}.tile.s0"][-1]
        blocks.append(pack_matmul_rows(product, rows, config[f"a{number}.tile.r0"]))
    return blocks


def _llvm_target(template: str | None = None):
    """A fresh instance of this target for the active CPU (through the registry: the
    target's module builds on this one), with the generic rules for the
    :data:`GENERIC_FUNCTION` template's candidates."""
    rules = "none" if template == GENERIC_FUNCTION else "hand"
    return get_target("llvm", cpu=active_cpu(), schedule_rules=rules)


def _expressed_function(spec: str, m: int = 0):
    """A function task's body expressed and packed as the target compiles it (its
    constant operands prepacked in the default panels: the sketch does not depend on
    the panel width), its convolution direct, or with ``m`` by Winograd's F(m, 3) (the
    transformed weight a constant of the kernel, as the hand rules have it): the
    compute whose sketch an auto record of that algorithm is a point of."""
    target = _llvm_target()
    target.winograd = m or False
    with target.compile_context():
        expressed = express_function(function_body(spec))
        target.schedule(expressed, ScheduleConfigs(choice=("hand", None)))
    target._packings.pop(id(expressed), None)
    return expressed


def _auto_function_sketch(spec: str, m: int = 0) -> Sketch:
    """The sketch of a function task for the CPU being tuned for (its lanes and
    registers shape the space), of its direct compute or of its F(m, 3) one."""
    return _auto_function_sketch_for(spec, active_cpu(), m)


@functools.lru_cache(maxsize=64)
def _auto_function_sketch_for(spec: str, cpu: CPUDescription, m: int = 0) -> Sketch:
    with compiling_for(cpu):
        return _function_sketch(_expressed_function(spec, m).outputs, active_cpu())


# ------------------------------------------------------------------ the algorithm
#
# As TVM's operator strategy offers the auto-scheduler a convolution's Winograd compute
# beside the direct one, a function whose convolution Winograd may compute (a dense 3x3
# stride-1 float blocked one of enough channels: ``winograd_tiles_of``) is searched over
# both: the ``algorithm`` knob picks the direct compute or F(m, 3), and the point's
# schedule is one of that compute's sketch (its product tiled as any reduction anchor,
# its transforms flat with their matrices' indices unrolled: ``CONSTANT_SELECTS``). The
# space holds every algorithm's knobs, those of F(m, 3)'s sketch named
# ``w<m><knob>``; a point of one algorithm leaves the others' knobs at their defaults
# (:func:`_auto_function_admissible`), so that each schedule is one point.

#: the knob choosing a convolution's algorithm, and its value for the direct sum
ALGORITHM = "algorithm"
DIRECT = "direct"


def _winograd_name(m: int, name: str) -> str:
    return f"w{m}{name}"


def record_winograd_tile(values: dict) -> int:
    """The F(m, 3) tile ``m`` an auto record's knob ``values`` compute its function's
    convolution by, or 0 (the direct compute: no :data:`ALGORITHM` knob, or ``direct``)."""
    algorithm = values.get(ALGORITHM, DIRECT)
    return 0 if algorithm == DIRECT else int(algorithm)


def _algorithm_values(values: dict, m: int) -> dict:
    """The values of F(m, 3)'s own sketch in a point's ``values``."""
    prefix = _winograd_name(m, "")
    return {name[len(prefix):]: value for name, value in values.items()
            if name.startswith(prefix)}


def _is_winograd(outputs) -> bool:
    return any(winograd_output_tile(t) for t in reachable_computes(outputs))


@functools.lru_cache(maxsize=64)
def _winograd_tiles(spec: str) -> tuple[int, ...]:
    """The F(m, 3) tiles a function task's convolution may be computed by (none where it
    has no such convolution, e.g. a product's or a pool's task)."""
    body = function_body(spec)
    if [n.op for n in body.nodes].count("ConvNCHWc") != 1:
        return ()
    direct = _expressed_function(spec)
    tiles = {m for t in reachable_computes(direct.outputs) for m in winograd_tiles_of(t)}
    # (a weight also read otherwise is not transformed: no Winograd compute then)
    return tuple(m for m in sorted(tiles) if _is_winograd(_expressed_function(spec, m).outputs))


def _winograd_knobs(spec: str, m: int) -> list[Knob]:
    """F(m, 3)'s sketch's knobs, renamed (:func:`_winograd_name`); the transformed input,
    which every output channel block reads, is computed at root (inlined into the
    product it would be transformed again for each block and reduction step)."""
    sketch = _auto_function_sketch(spec, m)
    knobs = []
    for knob in sketch.space.knobs:
        options = knob.options
        if knob.name.startswith("p") and knob.name.endswith(".location"):
            options = ("root",)
        knobs.append(Knob(_winograd_name(m, knob.name), knob.kind, options))
    return knobs


def _winograd_defaults(spec: str, m: int) -> dict:
    values = {_winograd_name(m, k): v
              for k, v in _auto_function_sketch(spec, m).default_values().items()}
    return {**values, **_fixed_locations(spec, m)}


def _fixed_locations(spec: str, m: int) -> dict:
    return {k.name: k.options[0] for k in _winograd_knobs(spec, m) if len(k.options) == 1}


def _other_algorithms(spec: str, m: int) -> dict:
    """The default values of every algorithm's knobs but F(m, 3)'s (``m`` 0: but the
    direct compute's)."""
    values = {} if not m else _direct_defaults(spec)
    for tile in _winograd_tiles(spec):
        if tile != m:
            values.update(_winograd_defaults(spec, tile))
    return values


def _direct_defaults(spec: str) -> dict:
    values = _auto_function_sketch(spec).default_values()
    if _has_panel(spec):
        values.update(_product_default(spec))
    return values


def _with_algorithm(spec: str, m: int, values: dict) -> dict:
    """A point of F(m, 3)'s sketch (``values`` by its own knob names; ``m`` 0: of the
    direct compute's, knob names as they are), the others' knobs at their defaults."""
    if not _winograd_tiles(spec):
        return values
    if m:
        values = {**{_winograd_name(m, k): v for k, v in values.items()},
                  **_fixed_locations(spec, m)}
    return {**_other_algorithms(spec, m), **values, ALGORITHM: DIRECT if not m else m}


def _auto_function_admissible(args: tuple, values: dict) -> bool:
    """Whether a point of a function's space keeps the sampling rules of the sketch of
    the algorithm it chooses (the evolution drops a child that breaks them; the layout
    knobs have none) and leaves the knobs of the algorithms it does not choose at their
    defaults (a mutation of such a knob changes no schedule)."""
    spec = args[1]
    if not _winograd_tiles(spec):
        return _auto_function_sketch(spec).admissible(values)
    m = record_winograd_tile(values)
    if any(values.get(name) != value for name, value in _other_algorithms(spec, m).items()):
        return False
    own = _algorithm_values(values, m) if m else values
    return _auto_function_sketch(spec, m).admissible(own)


def _has_panel(spec: str) -> bool:
    return any(n.op in ("MatMul", "Gemm") and len(n.outputs[0].type.shape) == 2
               for n in function_body(spec).nodes)


def _function_product(spec: str) -> Node:
    """The MatMul or Gemm node of a function with a product (see :func:`_has_panel`)."""
    (product,) = [n for n in function_body(spec).nodes if n.op in ("MatMul", "Gemm")]
    return product


def _panel_knob(spec: str) -> Knob:
    product = _function_product(spec)
    n, dtype = product.outputs[0].type.shape[1], product.outputs[0].type.dtype
    return Knob("panel", "layout", _panel_options(n, dtype))


def _auto_function_space(args: tuple) -> ConfigSpace:
    """The sketch of the whole function, and for a product the layouts of its operands,
    choices made before the sketch's stages exist: the panel width its B is packed in,
    and whether its A is read in place or copied in row blocks (:data:`A_LAYOUTS`); for
    a convolution Winograd may compute, its :data:`ALGORITHM` and each F(m, 3)
    compute's sketch (see above)."""
    knobs = _auto_function_sketch(args[1]).space.knobs
    if _has_panel(args[1]):
        knobs = (_panel_knob(args[1]), Knob("a_layout", "layout", A_LAYOUTS), *knobs)
    tiles = _winograd_tiles(args[1])
    if tiles:
        knobs = (Knob(ALGORITHM, "layout", (DIRECT, *tiles)), *knobs,
                 *(k for m in tiles for k in _winograd_knobs(args[1], m)))
    return ConfigSpace(tuple(knobs))


def _product_default(spec: str) -> dict:
    product = _function_product(spec)
    shape, dtype = product.outputs[0].type.shape, product.outputs[0].type.dtype
    return {"panel": _closest(_panel_knob(spec).options,
                              default_panel(shape[1], dtype, cpu=active_cpu())),
            "a_layout": "in_place"}


def _auto_function_default(args: tuple) -> dict:
    return _with_algorithm(args[1], 0, _direct_defaults(args[1]))


def _auto_function_upgrade(args: tuple, values: dict) -> dict:
    """A product's record written before the ``a_layout`` knob read A in place; a
    convolution's written before the :data:`ALGORITHM` knob computed it directly."""
    if _has_panel(args[1]):
        values.setdefault("a_layout", "in_place")
    if _winograd_tiles(args[1]) and ALGORITHM not in values:
        values = _with_algorithm(args[1], 0, values)
    return values


def _auto_function_seeds(args: tuple) -> list[dict]:
    """The sketch's seeds; a product's at each panel width its register tile fits, and
    those that chunk its reduction (cache blocking) also with A in row blocks; a
    convolution's also those of each F(m, 3) compute's sketch."""
    seeds = _auto_function_sketch(args[1]).seed_values()
    if _winograd_tiles(args[1]):
        return [*(_with_algorithm(args[1], 0, values) for values in seeds),
                *(_with_algorithm(args[1], m, values) for m in _winograd_tiles(args[1])
                  for values in _auto_function_sketch(args[1], m).seed_values())]
    if not _has_panel(args[1]):
        return seeds
    default = _auto_function_default(args)
    widths = _panel_knob(args[1]).options
    k = _function_depth(_function_product(args[1]))
    found = []
    for values in seeds:
        tile = values["a0.tile.s1"][-1]
        panel = tile if tile in widths else default["panel"]
        found.append({**values, "panel": panel, "a_layout": "in_place"})
    found += [{**values, "a_layout": "row_blocks"} for values in found
              if values.get("a0.tile.r0", k) < k]
    return found


def _auto_function_sample(args: tuple, rng: np.random.Generator) -> dict:
    """A random point of a function's space by its sketch's sampling rules; a product's
    B packed in panels of its register tile's width where that is a panel width offered
    (else a random one: a panel narrower or wider than the tile splits or straddles its
    vectors' loads), its A read in place or in row blocks at random."""
    tiles = _winograd_tiles(args[1])
    if tiles:  # each algorithm alike, then a point of its sketch
        m = (0, *tiles)[int(rng.integers(len(tiles) + 1))]
        return _with_algorithm(args[1], m, _auto_function_sketch(args[1], m).sample_values(rng))
    values = _auto_function_sketch(args[1]).sample_values(rng)
    if _has_panel(args[1]):
        widths = _panel_knob(args[1]).options
        tile = values["a0.tile.s1"][-1]
        values["panel"] = tile if tile in widths else widths[int(rng.integers(len(widths)))]
        values["a_layout"] = A_LAYOUTS[int(rng.integers(len(A_LAYOUTS)))]
    return values


def _function_depth(product: Node) -> int:
    """The reduction length of a function's MatMul or Gemm node."""
    a = product.inputs[0].type.shape
    return a[0] if product.op == "Gemm" and product.attrs.get("transA") else a[-1]


def _hand_function_space(args: tuple) -> ConfigSpace:
    return ConfigSpace((Knob("schedule", "order", ("hand",)),))


def _forced_log(template: str, args: tuple, config: Config) -> ApplyHistoryBest:
    """A log whose only record makes ``config`` the choice of this function (an empty
    one for the hand schedule: no outer log's records apply either)."""
    if template in (FUNCTION, GENERIC_FUNCTION):
        return ApplyHistoryBest([])
    record = MeasureRecord(workload_key(template, args), config.to_json(), config.index,
                           (0.0,), tuner="forced")
    return ApplyHistoryBest([record])


def _instantiate_function(args: tuple, config: Config, template: str):
    """The function scheduled by ``config`` through the target's own schedule (what the
    cost model's features describe)."""
    target = _llvm_target(template)
    body = function_body(args[1])
    with target.compile_context():
        expressed = express_function(body)
        schedule = target.schedule(expressed,
                                   function_configs(body, _forced_log(template, args, config)))
    target._packings.pop(id(expressed), None)
    return schedule, [*expressed.params, *expressed.outputs]


def _measure_function(task: Task, config: Config, options: MeasureOptions
                      ) -> tuple[float, ...]:
    """Compile the function through the target (prepacked constants, folded scalars,
    the epilogue in the tiles), check every output against the NumPy references, time
    the kernel as the graph executor calls it."""
    node = _function_node(task.args[1])
    target = _llvm_target(task.template)
    try:
        with _forced_log(task.template, task.args, config):
            kernel = target.kernel(node, target.compiled(node))
    except Exception as error:  # any failure to build is this candidate's
        raise CandidateError("build", f"{type(error).__name__}: {error}") from None
    inputs, expected = task_inputs(task.workload_key, options.seed)
    inputs = list(inputs)
    try:
        outputs = kernel(inputs)
    except Exception as error:
        raise CandidateError("runtime", f"{type(error).__name__}: {error}") from None
    for got, want in zip(outputs, expected):
        check_output(task, got, want, options)
    call = lambda: kernel(inputs)  # noqa: E731
    if options.cache == "rotate":  # its constants and outputs rotate, its inputs stay
        def make():
            twin = kernel.with_own_constants()
            return lambda: twin(inputs)
        call = _rotating(make, sum(c.nbytes for c in kernel.constants)
                         + sum(o.nbytes for o in outputs))
    return time_calls(call, options, _flush_of(options, kernel.constants), pool_watch)


FUNCTION = "function"
#: a fused function under the target's generic schedule (its hand rules off), the
#: baseline of the search from scratch
GENERIC_FUNCTION = "function_generic"

#: a fused function under the target's hand schedule (one point: what compile does
#: without a log), the baseline its auto twin must beat to be applied
FUNCTION_TEMPLATE = Template(
    FUNCTION, "llvm", _hand_function_space, lambda args: {"schedule": "hand"},
    functools.partial(_instantiate_function, template=FUNCTION), _function_inputs,
    _function_reference, _function_flops)

#: a fused function under the generic rules (one point: what compile does with
#: ``rules="none"`` and no auto record), the baseline of the search from scratch
GENERIC_FUNCTION_TEMPLATE = Template(
    GENERIC_FUNCTION, "llvm", _hand_function_space, lambda args: {"schedule": "hand"},
    functools.partial(_instantiate_function, template=GENERIC_FUNCTION), _function_inputs,
    _function_reference, _function_flops)

#: a fused function searched by the sketch rules of its whole compute
AUTO_FUNCTION_TEMPLATE = Template(
    auto_name(FUNCTION), "llvm", _auto_function_space, _auto_function_default,
    functools.partial(_instantiate_function, template=auto_name(FUNCTION)),
    _function_inputs, _function_reference, _function_flops, seeds=_auto_function_seeds,
    upgrade=_auto_function_upgrade, sample=_auto_function_sample,
    admissible=_auto_function_admissible)


def function_tasks(graph: Graph, target) -> list[Task]:
    """The auto search's tasks of ``graph`` as ``target`` compiles it: one
    ``auto.function`` task per distinct fused function (by :func:`function_spec`) with
    one float convolution, product or reduction, weighted by how many functions share
    it."""
    graph = run_pipeline(graph, {target.name: target}).graph
    found: dict[str, Task] = {}
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if node.body is None or node.attrs.get("target", target.name) != target.name:
            continue
        kind = _function_kind(node.body)
        if kind is None:
            continue
        spec = _spec_or_none(node.body)
        if spec is None:
            continue
        task = Task(auto_name(FUNCTION), (kind, spec))
        found.setdefault(task.workload_key, task)
        counts[task.workload_key] = counts.get(task.workload_key, 0) + 1
    return [task.weighted(counts[key]) for key, task in found.items()]
