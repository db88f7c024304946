"""Tuning tasks: one template applied to one workload, named by a stable key.

A workload key is the JSON text of ``[template, *args]`` (e.g.
``["matmul", 1024, 1024, 1024, "float32"]``): the same in every process and run, so a
log written by one run is read, resumed and applied by another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import InputError
from ..ops.nn import conv_geometry
from .space import Config, ConfigSpace
from .templates import Template, get_template


@dataclass(frozen=True)
class Task:
    """Tune ``template`` (a registered name) on workload ``args``."""

    template: str
    args: tuple

    @property
    def workload_key(self) -> str:
        return workload_key(self.template, self.args)

    @property
    def definition(self) -> Template:
        return get_template(self.template)

    @property
    def target(self) -> str:
        return self.definition.target

    @property
    def space(self) -> ConfigSpace:
        return self.definition.space(self.args)

    def default_config(self) -> Config:
        return self.definition.default_config(self.args)

    @property
    def flops(self) -> int:
        return self.definition.flops(self.args)

    @classmethod
    def from_key(cls, key: str) -> Task:
        """The task a workload key names."""
        try:
            name, *args = json.loads(key)
        except (json.JSONDecodeError, TypeError, ValueError):
            raise InputError(f"{key!r} is not a workload key (JSON list [template, *args])"
                             ) from None
        get_template(name)
        return cls(name, tuple(args))

    def __str__(self) -> str:
        return self.workload_key


def workload_key(template: str, args: tuple) -> str:
    """The stable key of ``template`` on ``args``."""
    return json.dumps([template, *args], separators=(",", ":"))


def _conv_task(node, target: str, preset: str) -> Task | None:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(x.shape) != 4 or len(w.shape) != 4:
        return None
    n, c, h, width = x.shape
    out_channels, _, r, s = w.shape
    group = int(node.attrs.get("group") or 1)
    kernel, strides, dilations, pads, (oh, ow) = conv_geometry(x.shape, w.shape, node.attrs)
    if target == "vta":
        if group != 1:
            return None
        return _vta_task(n * oh * ow, c * r * s, out_channels, preset)
    if set(dilations) != {1} or len(set(strides)) != 1 or len(set(pads)) != 1:
        return None  # the templates cover square strides and symmetric padding
    stride, pad = strides[0], pads[0]
    if group == 1:
        return Task("conv2d_nchw", (n, c, h, width, out_channels, r, s, stride, pad, x.dtype))
    if group == c == out_channels and w.shape[1] == 1:
        return Task("depthwise_conv2d_nchw", (n, c, h, width, r, s, stride, pad, x.dtype))
    return None


def _matmul_task(node, target: str, preset: str) -> Task | None:
    a, b = node.inputs[0].type, node.inputs[1].type
    if node.op == "Gemm":
        m, k = reversed(a.shape) if node.attrs.get("transA") else a.shape
        n = b.shape[0] if node.attrs.get("transB") else b.shape[1]
        shape = (m, n, k)
    elif len(a.shape) == 2 and len(b.shape) == 2:
        shape = (a.shape[0], b.shape[1], a.shape[1])
    elif len(a.shape) == 3 and len(b.shape) == 3 and target == "llvm":
        return Task("batch_matmul", (a.shape[0], a.shape[1], b.shape[2], a.shape[2], a.dtype))
    else:
        return None
    if target == "vta":
        return _vta_task(shape[0], shape[2], shape[1], preset)
    return Task("matmul", (*shape, a.dtype))


def _vta_task(rows: int, k: int, n: int, preset: str) -> Task | None:
    from ..accel_sim import HardwareConfig
    from .accel import vta_gemm_task

    config = HardwareConfig.preset(preset)
    if rows % config.batch:
        return None

    def round_up(value: int, multiple: int) -> int:
        return -(-value // multiple) * multiple

    return vta_gemm_task(rows, round_up(k, config.block_in), round_up(n, config.block_out),
                         config)


def _blocked_conv_task(node, target: str, preset: str) -> Task | None:
    from .templates import blocked_conv_task_args

    x, w = node.inputs[0].type, node.inputs[1].type
    attrs = node.attrs
    return Task(*blocked_conv_task_args(x.shape, w.shape, attrs["strides"], attrs["pads"],
                                        attrs["dilations"], attrs["group"], x.dtype))


_EXTRACTORS = {"Conv": _conv_task, "ConvInteger": _conv_task, "MatMul": _matmul_task,
               "MatMulInteger": _matmul_task, "Gemm": _matmul_task,
               "ConvNCHWc": _blocked_conv_task}


def _as_compiled_for_llvm(graph):
    """``graph`` after the passes ``heterocc.compile`` runs for the llvm target (layout
    alteration included), so that tasks carry the workloads the kernels really have."""
    from ..passes.pipeline import run_pipeline
    from ..targets import get_target

    return run_pipeline(graph, {"llvm": get_target("llvm")}).graph


def extract_tasks(model, target: str = "llvm", preset: str = "1x16x16",
                  shapes: dict | None = None) -> list[Task]:
    """One task per distinct tunable workload of ``model`` (an ONNX path, bytes,
    ModelProto or a heterocc Graph), in order of first appearance.

    On ``llvm``: the workloads of the graph as the compiler builds it (its passes run
    first): the blocked convolutions (``conv2d_nchwc``, ``depthwise_conv2d_nchwc``), any
    convolution left in NCHW (``conv2d_nchw``, ``depthwise_conv2d_nchw``, square stride
    and symmetric padding), matmul (MatMul and Gemm, after its transposes) and batch
    matmul. On ``vta``: the GEMM of every ungrouped convolution (im2col) and dense
    layer, padded to the ``preset`` core's block sizes as the accelerator target pads
    them."""
    from ..frontend import from_onnx
    from ..ir.graph import Graph

    if target not in ("llvm", "vta"):
        raise InputError(f"no tuning templates for target {target!r}; use llvm or vta")
    graph = model if isinstance(model, Graph) else from_onnx(model, shapes=shapes)
    if target == "llvm":
        graph = _as_compiled_for_llvm(graph)
    found: dict[str, Task] = {}
    for _, node in graph.walk():
        extractor = _EXTRACTORS.get(node.op)
        if extractor is None or any(v is None for v in node.inputs[:2]):
            continue
        if target == "llvm" and not node.inputs[0].type.dtype.startswith("float"):
            continue
        task = extractor(node, target, preset)
        if task is not None:
            found.setdefault(task.workload_key, task)
    return list(found.values())
