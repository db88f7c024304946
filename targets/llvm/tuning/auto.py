"""The auto search's workloads: the plain computes this target compiles, their space
derived by the sketch rules of ``heterocc.tuning.auto``."""

from __future__ import annotations

import functools

from heterocc.sdk import te
from heterocc.sdk.graph import matmul as plain_matmul
from heterocc.sdk.tuning import AutoWorkload, Template, auto_template

from ..cpu import active_cpu
from ..schedules import (
    default_panel,
    pack_matmul,
    pack_matmuls,
)
from .apply import matmul_panel
from .blocked_conv import (
    CONV2D_NCHWC,
    DEPTHWISE_CONV2D_NCHWC,
    BlockedConvWorkload,
    _blocked_conv_compute,
)
from .common import search_hints
from .matmul import BATCH_MATMUL, MATMUL

# ------------------------------------------------------------------ auto search workloads
#
# The template-free search (``heterocc tune --search auto``) tunes the same workloads from
# the plain computes this target compiles (the compute library's, with the target's own
# rewrite: products read B through packed panels), its space derived by the sketch rules
# of ``heterocc.tuning.auto``; the CPU description gives its vector width and registers.


def _build_matmul(args: tuple):
    m, n, k, dtype = args
    A, B = te.placeholder((m, k), dtype, "A"), te.placeholder((k, n), dtype, "B")
    C = plain_matmul(A, B, "C")
    # the default panel, not a tuning log's: the auto search's sketch of this workload is
    # what a log's auto record is read back against
    pack_matmul(C, default_panel(n, dtype, cpu=active_cpu()), cpu=active_cpu())
    return [A, B], [C]


def _build_batch_matmul(args: tuple):
    batch, m, n, k, dtype = args
    A = te.placeholder((batch, m, k), dtype, "A")
    B = te.placeholder((batch, k, n), dtype, "B")
    C = plain_matmul(A, B, "C")
    pack_matmuls([C], matmul_panel, cpu=active_cpu())
    return [A, B], [C]


def _build_blocked_conv(args: tuple, depthwise: bool):
    data, weight, conv = _blocked_conv_compute(BlockedConvWorkload.from_args(args, depthwise))
    return [data, weight], [conv]


def _auto_of(template: Template, build) -> Template:
    return auto_template(AutoWorkload(template.name, build,
                                      lambda args: search_hints(args[-1]), template.inputs,
                                      template.reference, template.flops), "llvm")


#: the auto search's workloads: every template workload the target builds as a plain
#: compute (dense and the NCHW convolutions are compiled through the forms above)
AUTO_TEMPLATES = (
    _auto_of(MATMUL, _build_matmul), _auto_of(BATCH_MATMUL, _build_batch_matmul),
    _auto_of(CONV2D_NCHWC, functools.partial(_build_blocked_conv, depthwise=False)),
    _auto_of(DEPTHWISE_CONV2D_NCHWC, functools.partial(_build_blocked_conv, depthwise=True)),
)


