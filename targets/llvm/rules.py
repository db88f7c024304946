"""The CPU's schedule rules: which stages of a function get which CPU schedule, decided
from each compute's structure (see :class:`heterocc.sdk.te_target.ScheduleRule`).

In the order :func:`cpu_rules` tries them:

* :class:`Int8ConvRule`: the sums of an integer convolution the CPU computes on its 8-bit
  dot product (``use_int8_convs``), tensorized, with their packing stages;
* :class:`Int8ConvResultRule`: those sums cropped and corrected, finishing the
  function's elementwise epilogue row by row;
* :class:`DirectConvRule`: an NCHW convolution (``sum(data * w[k, rc, ry, rx])`` over
  three reduction axes), register-tiled, finishing its epilogue in the tiles;
* :class:`WinogradConvRule`: a blocked convolution the target computes by Winograd
  (:mod:`.schedules.winograd_conv`), with its transforms and product, finishing its
  epilogue in the output transform's tiles;
* :class:`BlockedConvRule`: a convolution in the blocked NCHW[x]c layout (the compute
  carries its workload, the key of its tuning task), with the tuning log's tiles;
* :class:`LayoutTransformRule`: a copy between the plain and the blocked channel layout,
  run row by row (a flat vectorized loop would need vector division to recover each
  lane's channel);
* :class:`BlockedPoolRule`: pooling over an NCHW[x]c tensor's rows and columns, one
  vector per pixel over the channel block;
* :class:`PoolRule`: pooling of an NCHW tensor (an int8 model's), rows of output
  pixels updated tap by tap over a padded copy;
* :class:`MatmulRule`: a product the CPU packed (``pack_matmul``), register-tiled over B's
  panels, finishing its epilogue in the tiles;
* :class:`SoftmaxRowsRule`: a softmax over its last axis, every stage of a row computed
  at the row's loop (:mod:`.schedules.softmax`);
* :class:`ReductionRule`: any other reduction, output points in parallel;
* :class:`ChannelSelectRule`: an NCHW[x]c output that reads a stage choosing its source
  by channel block (a blocked concatenation), one channel block per outer iteration;
* :class:`InjectiveRule`: what stays in memory without being an anchor (outputs, kept
  stages), flat, vectorized and in parallel; a copy that permutes or cuts outer axes
  (a channel shuffle, a head transpose) as rows of its contiguous innermost axes.
"""

from __future__ import annotations

from collections.abc import Sequence

from heterocc.sdk import te
from heterocc.sdk.te_target import ScheduleRule
from heterocc.te.tensor import Reduce, TensorLoad
from heterocc.tir import expr as tx
from heterocc.tir.visitor import collect, free_vars

from .cpu import CPUDescription
from .schedules import (
    BlockedConvTiles,
    Int8RowTiles,
    contiguous_reduction_block,
    depthwise_data,
    depthwise_weight,
    injective_rows,
    int8_conv_packings,
    lanes_of_kept_axes,
    reduction_blocks,
    row_sums,
    schedule_channel_blocks,
    schedule_contiguous_rows,
    schedule_conv2d_nchw,
    schedule_injective,
    schedule_int8_conv,
    schedule_int8_conv_result,
    schedule_int8_depthwise,
    schedule_int8_rows,
    schedule_int8_rows_result,
    schedule_matmul,
    schedule_pool_nchw,
    schedule_pool_nchwc,
    schedule_reduction,
    schedule_reduction_in_lanes,
    schedule_rows,
)
from .schedules.int8_depthwise_quads import (
    attach_copies_in_blocks,
    quad_stages,
    weight_sum_stages,
)
from .schedules.softmax import (
    row_fits_the_l1,
    rows_are_private,
    schedule_softmax_rows,
    softmax_row_stages,
)
from .schedules.winograd_conv import (
    WINOGRAD_PRODUCT,
    schedule_winograd_conv,
    winograd_output_tile,
    winograd_stages,
)
from .tuning import ScheduleConfigs, apply_conv_auto, apply_matmul_config, schedule_blocked_conv


class CPURule(ScheduleRule):
    """A rule scheduling for one CPU description with the configs the tuning log gives
    the function being compiled."""

    def __init__(self, cpu: CPUDescription, configs: ScheduleConfigs | None = None):
        self.cpu = cpu
        self.configs = configs or ScheduleConfigs()


def _compute(tensor: te.Tensor) -> te.ComputeOp | None:
    return tensor.op if isinstance(tensor.op, te.ComputeOp) else None


def _sum_of_product(op: te.ComputeOp) -> tx.Binary | None:
    """The ``a * b`` of a compute ``sum(a * b)``, else None."""
    body = op.body
    if (isinstance(body, Reduce) and body.combiner == "sum"
            and isinstance(body.source, tx.Binary) and body.source.op == "mul"):
        return body.source
    return None


class Int8ConvRule(CPURule):
    """The sums of :func:`.schedules.int8_conv` (they carry ``int8_conv``, their tiles):
    dot-product instructions over packed bytes, or of
    :func:`.schedules.int8_depthwise_conv` (``int8_depthwise``): int32 multiply-adds over
    packed rows; the packing of the data (and of a weight not packed at build time)
    belongs to them."""

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        return op is not None and ("int8_conv" in op.attrs or "int8_depthwise" in op.attrs)

    def owned(self, tensor: te.Tensor) -> Sequence[te.Tensor]:
        if tensor.op.attrs.get("int8_quads"):
            return [t for t in quad_stages(tensor).values() if isinstance(t.op, te.ComputeOp)]
        if "int8_depthwise" in tensor.op.attrs:
            return [t for t in (depthwise_data(tensor), depthwise_weight(tensor))
                    if isinstance(t.op, te.ComputeOp)]
        return int8_conv_packings(tensor)

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        if "int8_depthwise" in tensor.op.attrs:
            schedule_int8_depthwise(schedule, tensor, self.cpu)
        elif isinstance(tensor.op.attrs["int8_conv"], Int8RowTiles):
            schedule_int8_rows(schedule, tensor, self.cpu)
        else:
            schedule_int8_conv(schedule, tensor, self.cpu)
        return False


class Int8ConvResultRule(CPURule):
    """What :func:`.schedules.int8_conv` gives a graph: its sums cropped to the output's
    width and corrected by the zero point (``int8_conv_result``), finished with the
    function's elementwise epilogue, row by row."""

    epilogue = True

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        return op is not None and bool(op.attrs.get("int8_conv_result"))

    def owned(self, tensor: te.Tensor) -> Sequence[te.Tensor]:
        return weight_sum_stages(tensor)  # at root, once per call

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        if row_sums(tensor) is not None:
            schedule_int8_rows_result(schedule, tensor, epilogue, self.cpu)
        else:
            schedule_int8_conv_result(schedule, tensor, epilogue, cpu=self.cpu)
        # the parallel loop over blocks of the sums is the stage's first
        stage = schedule[epilogue if epilogue is not None else tensor]
        attach_copies_in_blocks(schedule, tensor, stage, stage.leaf_iter_vars[0])
        return epilogue is not None


class DirectConvRule(CPURule):
    """An NCHW 2-D convolution: four output axes, a sum over three reduction axes
    ``(rc, ry, rx)`` of the (padded, phase-split or guarded) data times the weight read
    as ``w[k, rc, ry, rx]`` (``k`` the output's channel axis)."""

    epilogue = True
    epilogue_chain = True

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        product = None if op is None else _sum_of_product(op)
        if product is None or len(op.axis) != 4 or len(op.body.axis) != 3:
            return False
        if not str(tensor.dtype).startswith("float") and int(op.body.axis[0].extent) != 1:
            # a dense integer convolution the dot product does not take (a weight zero
            # point) keeps the generic reduction schedule; a depthwise one (one input
            # channel per output: no four channels for a dot product) takes these
            # tiles, one int32 vector of columns per channel, multiply and add exact
            return False
        weight = product.b
        wanted = (op.axis[1].var, *(iv.var for iv in op.body.axis))
        return (isinstance(weight, TensorLoad) and len(weight.indices) == 4
                and all(index is var for index, var in zip(weight.indices, wanted)))

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_conv2d_nchw(schedule, tensor, epilogue, list(chain), cpu=self.cpu)
        return epilogue is not None


class WinogradConvRule(CPURule):
    """A blocked convolution computed by F(m, 3) (``winograd_conv``, made by
    :func:`.schedules.winograd_conv.use_winograd_conv`): its padded input, transforms
    and product belong to it."""

    epilogue = True
    epilogue_chain = True

    def matches(self, tensor: te.Tensor) -> bool:
        return winograd_output_tile(tensor) > 0

    def owned(self, tensor: te.Tensor) -> Sequence[te.Tensor]:
        return list(winograd_stages(tensor).values())

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_winograd_conv(schedule, tensor, epilogue, list(chain), cpu=self.cpu)
        return epilogue is not None


class BlockedConvRule(CPURule):
    """A convolution over NCHW[x]c data: the compute carries its workload
    (``blocked_conv``, the key of its tuning task). The tiles are the applied tuning
    log's best for the workload, else the defaults (or the auto search's schedule when
    the log's auto record of it is faster)."""

    epilogue = True
    epilogue_chain = True

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        return op is not None and "blocked_conv" in op.attrs and bool(op.reduce_axis)

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        if apply_conv_auto(schedule, tensor, self.configs.conv_auto(tensor), epilogue,
                           self.cpu):
            return epilogue is not None
        tiles = self.configs.blocked_conv_tiles(tensor) or BlockedConvTiles()
        schedule_blocked_conv(schedule, tensor, tiles, epilogue, list(chain), cpu=self.cpu)
        return epilogue is not None


def _channel(index: tx.Expr, axes: Sequence[tx.Var]) -> tx.Var | None:
    """The output axis that ``index`` reads a channel by: the axis itself, or
    ``outer * block + inner`` with ``inner`` the output's last axis (a blocked output)."""
    if any(index is a for a in axes):
        return index
    if (isinstance(index, tx.Binary) and index.op == "add" and index.b is axes[-1]
            and isinstance(index.a, tx.Binary) and index.a.op == "mul"
            and any(index.a.a is a for a in axes[:-1]) and isinstance(index.a.b, tx.IntImm)):
        return index.a.a
    return None


class LayoutTransformRule(CPURule):
    """A copy between the plain NCHW and the blocked NCHW[x]c layout (either way, or
    between two block sizes): the source read as ``x[n, c, y, x]`` or
    ``x[n, c // b, y, x, c % b]``, where the channel ``c`` is an output axis or, for a
    blocked output, ``outer * block + inner``; every other index one output axis."""

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        if op is None or op.reduce_axis or not isinstance(op.body, TensorLoad):
            return False
        axes = [iv.var for iv in op.axis]
        indices = list(op.body.indices)
        if len(axes) not in (4, 5) or len(indices) not in (4, 5):
            return False
        channel = indices[1]
        if len(indices) == 5:
            first, last = indices[1], indices[4]
            if not (isinstance(first, tx.Binary) and first.op == "floordiv"
                    and isinstance(last, tx.Binary) and last.op == "floormod"
                    and first.a is last.a and isinstance(first.b, tx.IntImm)
                    and isinstance(last.b, tx.IntImm) and first.b.value == last.b.value):
                return False
            channel = first.a
        outer = _channel(channel, axes)
        if outer is None or (channel is outer and len(indices) == 4):
            return False  # a plain copy of the same layout is no layout transform
        rest = [indices[0], indices[2], indices[3]]
        return all(index is axis for index, axis in zip(rest, [axes[0], axes[2], axes[3]]))

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_rows(schedule, tensor, self.cpu)
        return False


class BlockedPoolRule(CPURule):
    """Pooling of an NCHW[x]c tensor: five output axes, a max or sum over a window of
    rows and columns and a window of one over the channel block."""

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        return (op is not None and isinstance(op.body, Reduce)
                and op.body.combiner in ("max", "sum") and len(op.axis) == 5
                and len(op.body.axis) == 3 and int(op.body.axis[-1].extent) == 1)

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_pool_nchwc(schedule, tensor, self.cpu)
        return False


def _pool_window(op: te.ComputeOp) -> TensorLoad | None:
    """The read of a 2-D NCHW pool, ``data[n, c, y * s + ry * d, x * s + rx * d]``
    under a max or sum over ``(ry, rx)``, else None."""
    body = op.body
    if not (isinstance(body, Reduce) and body.combiner in ("max", "sum")
            and len(op.axis) == 4 and len(body.axis) == 2
            and isinstance(body.source, TensorLoad) and len(body.source.indices) == 4):
        return None
    n, c, y, x = (iv.var for iv in op.axis)
    ry, rx = (iv.var for iv in body.axis)
    indices = body.source.indices
    if indices[0] is not n or indices[1] is not c:
        return None
    for index, (axis, reduce) in zip(indices[2:], ((y, ry), (x, rx))):
        used = free_vars(index)
        if axis not in used or reduce not in used:
            return None
    return body.source


class PoolRule(CPURule):
    """Pooling of an NCHW tensor: a max or sum over a window of rows and columns read
    as ``data[n, c, y * s + ry * d, x * s + rx * d]`` (an int8 model's pools, which the
    blocked layout does not take); a padding stage it reads belongs to it."""

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        return op is not None and _pool_window(op) is not None

    def owned(self, tensor: te.Tensor) -> Sequence[te.Tensor]:
        source = _pool_window(tensor.op).tensor
        return [source] if isinstance(source.op, te.ComputeOp) else []

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        source = _pool_window(tensor.op).tensor
        schedule_pool_nchw(schedule, tensor,
                           source if isinstance(source.op, te.ComputeOp) else None, self.cpu)
        return False


class MatmulRule(CPURule):
    """A product the CPU packed (``packed_B``: the target's rewrite of every
    ``sum(A[..., i, k] * B[..., k, j])`` before scheduling): the applied tuning log's
    schedule for its shape when there is one, else the default register tiles, which
    finish the epilogue."""

    epilogue = True

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        return op is not None and "packed_B" in op.attrs

    def owned(self, tensor: te.Tensor) -> Sequence[te.Tensor]:
        return [tensor.op.attrs["packed_B"]]

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        if apply_matmul_config(schedule, tensor, self.configs.matmul(tensor), self.cpu):
            return False
        schedule_matmul(schedule, tensor, self.cpu, epilogue=epilogue)
        return epilogue is not None


class SoftmaxRowsRule(CPURule):
    """A softmax over its last axis (:func:`.schedules.softmax.softmax_row_stages`) whose
    rows fit the L1 (:func:`.schedules.softmax.row_fits_the_l1`), an anchor at its
    output: every stage of a row (maximum, shift, exponentials, sum) is computed at the
    output's row loop, which the rule owns (its reductions, which :class:`ReductionRule`
    also matches, are then no anchors of their own: ``sdk.schedule_by_rules``)."""

    def matches(self, tensor: te.Tensor) -> bool:
        stages = softmax_row_stages(tensor)
        return stages is not None and row_fits_the_l1(tensor, self.cpu)

    def owned(self, tensor: te.Tensor) -> Sequence[te.Tensor]:
        return softmax_row_stages(tensor).owned

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        stages = softmax_row_stages(tensor)
        if rows_are_private(schedule, tensor, stages):
            schedule_softmax_rows(schedule, tensor, stages, self.cpu)
            return False
        # another stage reads a row stage: each stage in memory, as without the rule
        for stage_tensor in stages.owned:
            if stage_tensor.op.reduce_axis:
                schedule_reduction(schedule, stage_tensor,
                                   reduction_blocks(schedule, stage_tensor), self.cpu)
            else:
                schedule_in_memory(schedule, stage_tensor, self.cpu)
        schedule_in_memory(schedule, tensor, self.cpu)
        return False


class ReductionRule(CPURule):
    """Any other reduction: output points in parallel, each reduced by inner loops (not
    a Winograd convolution's product, which :class:`WinogradConvRule` owns); a last axis
    read in blocks (:func:`.schedules.reduction_blocks`) or contiguously
    (:func:`.schedules.contiguous_reduction_block`) into a partial per vector lane."""

    def matches(self, tensor: te.Tensor) -> bool:
        return bool(tensor.op.reduce_axis) and WINOGRAD_PRODUCT not in tensor.op.attrs

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        blocks = reduction_blocks(schedule, tensor)
        if blocks and all(block == 1 for block in blocks):
            blocks[-1] = contiguous_reduction_block(schedule, tensor, self.cpu)
            if blocks[-1] == 1:
                axes = lanes_of_kept_axes(schedule, tensor, self.cpu)
                if axes:
                    schedule_reduction_in_lanes(schedule, tensor, axes, self.cpu)
                    return False
        schedule_reduction(schedule, tensor, blocks, self.cpu)
        return False


def _selects_by_channel_block(op: te.ComputeOp) -> bool:
    """Whether ``op`` (5-D) picks a value by a condition on its channel-block axis
    alone (axis 1): a concatenation of blocked tensors."""
    block_axis = op.axis[1].var
    return any(isinstance(node, tx.Select) and free_vars(node.condition) == {block_axis}
               for node in collect(op.body, lambda n: isinstance(n, tx.Select)))


def _inlined_producers(op: te.ComputeOp) -> list[te.ComputeOp]:
    """``op`` and the elementwise computes it reads, transitively (the stages inlined
    into it: none of them reduces)."""
    found, stack, seen = [], [op], set()
    while stack:
        current = stack.pop()
        if id(current) in seen or current.reduce_axis:
            continue
        seen.add(id(current))
        found.append(current)
        for load in collect(current.body, lambda n: isinstance(n, TensorLoad)):
            producer = load.tensor.op
            if isinstance(producer, te.ComputeOp):
                stack.append(producer)
    return found


class ChannelSelectRule(CPURule):
    """An NCHW[x]c output (five axes, no reduction) computed from a stage that chooses
    its source by the channel-block index alone, and that index only: a concatenation of
    blocked tensors along the channels, with the elementwise ops fused after it."""

    anchor = False

    def matches(self, tensor: te.Tensor) -> bool:
        op = _compute(tensor)
        if op is None or op.reduce_axis or len(op.axis) != 5:
            return False
        return any(len(p.axis) == 5 and _selects_by_channel_block(p)
                   for p in _inlined_producers(op))

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_channel_blocks(schedule, tensor, self.cpu)
        return False


class InjectiveRule(CPURule):
    """An output or kept stage no anchor finished: flat, vectorized, in parallel."""

    anchor = False

    def matches(self, tensor: te.Tensor) -> bool:
        return True

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_in_memory(schedule, tensor, self.cpu)
        return False


def schedule_in_memory(schedule: te.Schedule, tensor: te.Tensor, cpu: CPUDescription) -> None:
    """A stage that stays in memory without an anchor: rows of its contiguous innermost
    axes where a read breaks the flat index (:func:`.schedules.injective_rows`), else one
    flat vectorized loop."""
    inner = injective_rows(schedule, tensor, cpu)
    if inner:
        schedule_contiguous_rows(schedule, tensor, inner, cpu)
    else:
        schedule_injective(schedule, tensor, cpu)


def cpu_rules(cpu: CPUDescription,
              configs: ScheduleConfigs | None = None) -> list[ScheduleRule]:
    """The CPU's schedule rules for ``cpu`` with the tuning
    log's ``configs`` for the function (None: the defaults), in the order they are
    tried."""
    rules = (Int8ConvRule, Int8ConvResultRule, DirectConvRule, WinogradConvRule,
             BlockedConvRule, LayoutTransformRule, BlockedPoolRule, PoolRule, MatmulRule,
             SoftmaxRowsRule, ReductionRule, ChannelSelectRule, InjectiveRule)
    return [rule(cpu, configs) for rule in rules]


def generic_rules(cpu: CPUDescription,
                  configs: ScheduleConfigs | None = None) -> list[ScheduleRule]:
    """The rules of the target with its hand rules off (``schedule_rules="none"``):
    where TVM's and Ansor's searches start, every stage scheduled by its compute's kind
    alone. A reduction of any kind (convolution, product, pool) runs its output points
    in parallel, each reduced by plain inner loops (:class:`ReductionRule`); what stays
    in memory otherwise is flat, vectorized and parallel (:class:`InjectiveRule`). No
    register tiles, packing of data, epilogue in the tiles or tuning-log tiles: only a
    tuning log's auto record of a whole function schedules it otherwise."""
    return [rule(cpu, configs) for rule in (ReductionRule, InjectiveRule)]
