"""The templates and tasks of the CPU target: a model's tasks, the measurement of a
candidate, the target's ``tuning()`` hook."""

from __future__ import annotations

import functools

import numpy as np

from heterocc.ir.graph import Graph, Node
from heterocc.sdk import TargetError, te
from heterocc.sdk.graph import conv_geometry, run_pipeline
from heterocc.sdk.tuning import (
    CandidateError,
    Config,
    MeasureOptions,
    TargetTuning,
    Task,
    auto_name,
    check_output,
    matmul_dims,
    task_inputs,
    time_calls,
)

from ..cpu import active_cpu, check_runs_on
from ..module import build
from .auto import AUTO_TEMPLATES
from .blocked_conv import CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC, blocked_conv_task_args
from .conv import CONV2D, DEPTHWISE_CONV2D
from .functions import (
    AUTO_FUNCTION_TEMPLATE,
    FUNCTION,
    FUNCTION_TEMPLATE,
    GENERIC_FUNCTION,
    GENERIC_FUNCTION_TEMPLATE,
    _measure_function,
    baseline_template,
    function_tasks,
)
from .matmul import BATCH_MATMUL, DENSE, MATMUL
from .measure import _flush_of, _rotating, pool_watch

# ------------------------------------------------------------------ the tasks of a model


#: every template of the CPU target
TEMPLATES = (MATMUL, BATCH_MATMUL, CONV2D, DEPTHWISE_CONV2D, CONV2D_NCHWC,
             DEPTHWISE_CONV2D_NCHWC, DENSE)


def measure_candidate(task: Task, config: Config, options: MeasureOptions
                      ) -> tuple[float, ...]:
    """Build ``config`` of ``task`` with LLVM for the CPU being tuned for, check it
    against NumPy, time it (a function task through the target's compile path, see
    :func:`_measure_function`). A worker whose CPU cannot run that code (a node of
    another CPU in a Ray cluster) fails the candidate with the reason instead of
    stopping on an illegal instruction."""
    try:
        check_runs_on(active_cpu(), what="code tuned for this target")
    except TargetError as error:
        raise CandidateError("runtime", f"this worker cannot run it: {error}") from None
    if task.template in (FUNCTION, GENERIC_FUNCTION, auto_name(FUNCTION)):
        return _measure_function(task, config, options)
    try:
        schedule, tensors = task.definition.instantiate(task.args, config)
        module = build(te.lower(schedule, tensors, name="candidate"), cpu=active_cpu())
    except Exception as error:  # any failure to build is this candidate's, not the tuner's
        raise CandidateError("build", f"{type(error).__name__}: {error}") from None
    inputs, expected = task_inputs(task.workload_key, options.seed)
    output = np.zeros(tensors[-1].shape, tensors[-1].dtype)
    function = module["candidate"]
    try:
        function(*inputs, output)
    except Exception as error:
        raise CandidateError("runtime", f"{type(error).__name__}: {error}") from None
    check_output(task, output, expected, options)
    call = lambda: function(*inputs, output)  # noqa: E731
    if options.cache == "rotate":  # a template's operands are all inputs: all rotate
        def make():
            copies = [a.copy() for a in (*inputs, output)]
            return lambda: function(*copies)
        call = _rotating(make, sum(a.nbytes for a in (*inputs, output)))
    return time_calls(call, options, _flush_of(options), pool_watch)




def _conv_task(node: Node) -> Task | None:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(x.shape) != 4 or len(w.shape) != 4:
        return None
    n, c, h, width = x.shape
    out_channels, _, r, s = w.shape
    group = int(node.attrs.get("group") or 1)
    kernel, strides, dilations, pads, (oh, ow) = conv_geometry(x.shape, w.shape, node.attrs)
    if set(dilations) != {1} or len(set(strides)) != 1 or len(set(pads)) != 1:
        return None  # the templates cover square strides and symmetric padding
    stride, pad = strides[0], pads[0]
    if group == 1:
        return Task("conv2d_nchw", (n, c, h, width, out_channels, r, s, stride, pad, x.dtype))
    if group == c == out_channels and w.shape[1] == 1:
        return Task("depthwise_conv2d_nchw", (n, c, h, width, r, s, stride, pad, x.dtype))
    return None


def _matmul_task(node: Node) -> Task | None:
    a, b = node.inputs[0].type, node.inputs[1].type
    if node.op != "Gemm" and len(a.shape) == 3 and len(b.shape) == 3:
        return Task("batch_matmul", (a.shape[0], a.shape[1], b.shape[2], a.shape[2], a.dtype))
    dims = matmul_dims(node)
    return None if dims is None else Task("matmul", (*dims, a.dtype))


def _blocked_conv_task(node: Node) -> Task:
    x, w = node.inputs[0].type, node.inputs[1].type
    attrs = node.attrs
    return Task(*blocked_conv_task_args(x.shape, w.shape, attrs["strides"], attrs["pads"],
                                        attrs["dilations"], attrs["group"], x.dtype))


_EXTRACTORS = {"Conv": _conv_task, "ConvInteger": _conv_task, "MatMul": _matmul_task,
               "MatMulInteger": _matmul_task, "Gemm": _matmul_task,
               "ConvNCHWc": _blocked_conv_task}


def extract_tasks(graph: Graph, target) -> list[Task]:
    """The float workloads of ``graph`` as ``target`` (an LLVMTarget) compiles it: the
    compile pipeline runs first (layout alteration included), so tasks carry the
    workloads the kernels really have: the blocked convolutions (``conv2d_nchwc``,
    ``depthwise_conv2d_nchwc``), any convolution left in NCHW (``conv2d_nchw``,
    ``depthwise_conv2d_nchw``, square stride and symmetric padding), matmul (MatMul and
    Gemm, after its transposes) and batch matmul."""
    graph = run_pipeline(graph, {target.name: target}).graph
    found: dict[str, Task] = {}
    counts: dict[str, int] = {}
    for _, node in graph.walk():
        extractor = _EXTRACTORS.get(node.op)
        if extractor is None or any(v is None for v in node.inputs[:2]):
            continue
        if not node.inputs[0].type.dtype.startswith("float"):
            continue
        task = extractor(node)
        if task is not None:
            found.setdefault(task.workload_key, task)
            counts[task.workload_key] = counts.get(task.workload_key, 0) + 1
    return [task.weighted(counts[key]) for key, task in found.items()]


def llvm_tuning(target) -> TargetTuning:
    """The tuning hook of ``target`` (an LLVMTarget): the auto search tunes whole fused
    functions (:func:`function_tasks`). With the target's hand rules off
    (``rules="none"``) the search starts from scratch: no seeds from the hand
    schedules, and each function's generic schedule is the baseline its best is timed
    beside (:func:`_baseline_task`)."""
    rules = getattr(target, "rules", "hand")
    return TargetTuning(TEMPLATES + AUTO_TEMPLATES + (FUNCTION_TEMPLATE, AUTO_FUNCTION_TEMPLATE,
                                                      GENERIC_FUNCTION_TEMPLATE),
                        functools.partial(extract_tasks, target=target), measure_candidate,
                        functools.partial(function_tasks, target=target),
                        baseline=functools.partial(_baseline_task, rules=rules),
                        seeded=rules == "hand")


def _baseline_task(task: Task, rules: str) -> Task | None:
    """What compile gives ``task``'s workload without its auto record under the
    target's schedule ``rules``: a function's hand or generic schedule, a workload's
    template (its default config); None for a task of no auto search."""
    if task.template == auto_name(FUNCTION):
        return Task(baseline_template(rules), task.args)
    plain = next((t.name for t in TEMPLATES if auto_name(t.name) == task.template), None)
    return None if plain is None else Task(plain, task.args)


