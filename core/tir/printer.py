"""Text form of TIR, for dumps and error messages (Python-like, one statement a line)."""

from __future__ import annotations

from .expr import (
    Binary,
    Broadcast,
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
    is_bool,
)
from .stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
    "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
    "and": "and", "or": "or", "bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<",
    "shr": ">>",
}


def expr_to_str(expr: Expr) -> str:
    """One-line text of an expression."""
    if isinstance(expr, IntImm):
        if is_bool(expr.dtype):
            return "True" if expr.value else "False"
        return str(expr.value) if expr.dtype == "int64" else f"{expr.dtype}({expr.value})"
    if isinstance(expr, FloatImm):
        return repr(expr.value) if expr.dtype == "float32" else f"{expr.dtype}({expr.value!r})"
    if isinstance(expr, Var):
        return expr.name
    if isinstance(expr, Binary):
        if expr.op in _INFIX:
            return f"({expr_to_str(expr.a)} {_INFIX[expr.op]} {expr_to_str(expr.b)})"
        return f"{expr.op}({expr_to_str(expr.a)}, {expr_to_str(expr.b)})"
    if isinstance(expr, Not):
        return f"not {expr_to_str(expr.a)}"
    if isinstance(expr, Select):
        return (f"select({expr_to_str(expr.condition)}, {expr_to_str(expr.true_value)}, "
                f"{expr_to_str(expr.false_value)})")
    if isinstance(expr, Cast):
        return f"{expr.dtype}({expr_to_str(expr.value)})"
    if isinstance(expr, Call):
        return f"{expr.name}({', '.join(expr_to_str(a) for a in expr.args)})"
    if isinstance(expr, BufferLoad):
        text = f"{expr.buffer.name}[{', '.join(expr_to_str(i) for i in expr.indices)}]"
        return text if expr.predicate is None else f"({text} if {expr_to_str(expr.predicate)})"
    if isinstance(expr, Ramp):
        return f"ramp({expr_to_str(expr.base)}, {expr_to_str(expr.stride)}, {expr.lanes})"
    if isinstance(expr, Broadcast):
        return f"broadcast({expr_to_str(expr.value)}, {expr.lanes})"
    describe = getattr(expr, "describe", None)
    return describe(expr_to_str) if describe else type(expr).__name__


def _stmt_lines(stmt: Stmt, indent: int) -> list[str]:
    pad = "  " * indent
    if isinstance(stmt, For):
        kind = stmt.kind.value if stmt.kind is not ForKind.THREAD_BINDING else stmt.thread_tag
        head = (f"{pad}for {stmt.var.name} in {kind}({expr_to_str(stmt.min)}, "
                f"{expr_to_str(stmt.extent)}):")
        return [head, *_stmt_lines(stmt.body, indent + 1)]
    if isinstance(stmt, BufferStore):
        idx = ", ".join(expr_to_str(i) for i in stmt.indices)
        return [f"{pad}{stmt.buffer.name}[{idx}] = {expr_to_str(stmt.value)}"]
    if isinstance(stmt, Allocate):
        b = stmt.buffer
        head = f"{pad}allocate {b.name}: {b.dtype}{list(b.shape)} in {b.scope!r}"
        return [head, *_stmt_lines(stmt.body, indent)]
    if isinstance(stmt, IfThenElse):
        likely = "likely " if stmt.likely else ""
        lines = [f"{pad}if {likely}{expr_to_str(stmt.condition)}:",
                 *_stmt_lines(stmt.then_case, indent + 1)]
        if stmt.else_case is not None:
            lines += [f"{pad}else:", *_stmt_lines(stmt.else_case, indent + 1)]
        return lines
    if isinstance(stmt, SeqStmt):
        if not stmt.stmts:
            return [f"{pad}pass"]
        return [line for s in stmt.stmts for line in _stmt_lines(s, indent)]
    if isinstance(stmt, Evaluate):
        return [f"{pad}{expr_to_str(stmt.value)}"]
    return [f"{pad}<{type(stmt).__name__}>"]


def stmt_to_str(stmt: Stmt) -> str:
    """Indented multi-line text of a statement."""
    return "\n".join(_stmt_lines(stmt, 0))


def func_to_str(func: PrimFunc) -> str:
    """Text of a PrimFunc: its signature, then its body."""
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in func.params)
    return "\n".join([f"def {func.name}({params}):", *_stmt_lines(func.body, 1)])
