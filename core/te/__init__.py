"""heterocc.te: tensor expressions (the *what*) and schedules (the *how*).

Example::

    from heterocc import te
    A = te.placeholder((n, k), "float32", "A")
    B = te.placeholder((k, m), "float32", "B")
    r = te.reduce_axis(k, "r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 32)
    s[C].vectorize(ji)
    func = te.lower(s, [A, B, C], name="matmul")   # a tir.PrimFunc
"""

from ..tir.expr import call_intrin as call_intrin
from ..tir.expr import (
    cast,
    ceil,
    const,
    cos,
    equal,
    erf,
    exp,
    fabs,
    floor,
    log,
    logical_and,
    logical_or,
    maximum,
    minimum,
    not_equal,
    power,
    sin,
    sqrt,
    tanh,
    truncdiv,
    truncmod,
)
from ..tir.expr import select as if_then_else
from .intrin import BufferRegion, TensorIntrin
from .lower import READ_SLACK, REGION_MULTIPLE, lower, symbolic_bounds
from .schedule import Fuse, Schedule, Split, Stage, create_schedule
from .schedule_reads import constant_tensors
from .tensor import (
    ComputeOp,
    ConstantOp,
    IterVar,
    PlaceholderOp,
    Reduce,
    Tensor,
    TensorLoad,
    compute,
    constant_tensor,
    max,
    min,
    placeholder,
    reduce_axis,
    sum,
)

__all__ = [
    "READ_SLACK",
    "REGION_MULTIPLE",
    "BufferRegion", "ComputeOp", "ConstantOp", "Fuse", "IterVar", "PlaceholderOp", "Reduce",
    "Schedule", "Split", "Stage", "Tensor", "TensorIntrin", "TensorLoad", "call_intrin", "cast",
    "ceil", "compute", "const", "constant_tensor", "constant_tensors", "cos", "create_schedule",
    "equal", "erf", "exp", "fabs", "floor", "if_then_else", "log", "logical_and", "logical_or",
    "lower", "max", "maximum", "min", "minimum", "not_equal", "placeholder", "power",
    "reduce_axis", "sin", "sqrt", "sum", "symbolic_bounds", "tanh", "truncdiv", "truncmod",
]
