"""heterocc.tir: the loop-level IR every code generator consumes.

Expressions (``expr``), statements and PrimFuncs (``stmt``), an IRBuilder, a printer,
the functors every traversal dispatches through (``functor``: one rule per node class),
an arithmetic simplifier with interval analysis, and passes (loop partition, guard
removal, load bound checks, flatten, unroll, vectorize) chained by
:func:`lower_pipeline`.
"""

from .builder import IRBuilder
from .expr import (
    INDEX_DTYPE,
    INTRINSICS,
    Binary,
    Broadcast,
    Buffer,
    BufferLoad,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Ramp,
    Select,
    Var,
    as_expr,
    binary,
    call_intrin,
    cast,
    ceil,
    const,
    cos,
    dtype_max,
    dtype_min,
    equal,
    erf,
    exp,
    fabs,
    floor,
    lanes_of,
    log,
    logical_and,
    logical_or,
    maximum,
    minimum,
    not_equal,
    power,
    scalar_dtype,
    select,
    sin,
    sqrt,
    tanh,
    truncdiv,
    truncmod,
)
from .functor import ExprFunctor, Functor, StmtEmitter, StmtFunctor
from .passes import (
    flatten_buffers,
    guard_load_bounds,
    inject_virtual_threads,
    lower_pipeline,
    partition_loops,
    remove_true_guards,
    unroll_loops,
    vectorize_loops,
)
from .printer import expr_to_str, func_to_str, stmt_to_str
from .simplify import (
    Interval,
    IntervalAnalysis,
    const_bound,
    prove,
    simplify,
    simplify_stmt,
    structurally_equal,
)
from .stmt import (
    THREAD_TAGS,
    Allocate,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from .visitor import Mutator, collect, collect_statements, free_vars, substitute, walk

__all__ = [
    "Allocate", "as_expr", "Binary", "binary", "Broadcast", "Buffer", "BufferLoad",
    "BufferStore", "Call", "call_intrin", "Cast", "cast", "ceil", "collect", "collect_statements",
    "const", "const_bound", "cos", "dtype_max", "dtype_min", "equal", "erf", "Evaluate", "exp",
    "Expr",
    "expr_to_str", "ExprFunctor", "fabs", "flatten_buffers", "FloatImm", "floor", "For", "ForKind",
    "free_vars", "func_to_str", "Functor", "guard_load_bounds", "IfThenElse", "INDEX_DTYPE",
    "inject_virtual_threads", "Interval", "IntervalAnalysis", "IntImm", "INTRINSICS", "IRBuilder",
    "lanes_of",
    "log", "logical_and", "logical_or", "lower_pipeline", "maximum", "minimum", "Mutator",
    "Not", "not_equal", "partition_loops", "power", "PrimFunc", "prove", "Ramp",
    "remove_true_guards", "scalar_dtype", "Select", "select", "seq", "SeqStmt", "simplify",
    "simplify_stmt", "sin", "sqrt", "Stmt", "StmtEmitter", "StmtFunctor", "stmt_to_str",
    "structurally_equal", "substitute",
    "tanh", "THREAD_TAGS", "truncdiv", "truncmod", "unroll_loops", "Var", "vectorize_loops",
    "walk",
]
