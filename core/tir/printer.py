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
from .functor import ExprFunctor, StmtFunctor
from .stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt

_INFIX = {
    "add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
    "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=",
    "and": "and", "or": "or", "bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<",
    "shr": ">>",
}


class _Printer(ExprFunctor, StmtFunctor):
    """Expressions to one line of text; statements (with their indent) to lines."""

    def visit_IntImm(self, expr: IntImm) -> str:
        if is_bool(expr.dtype):
            return "True" if expr.value else "False"
        return str(expr.value) if expr.dtype == "int64" else f"{expr.dtype}({expr.value})"

    def visit_FloatImm(self, expr: FloatImm) -> str:
        return repr(expr.value) if expr.dtype == "float32" else f"{expr.dtype}({expr.value!r})"

    def visit_Var(self, expr: Var) -> str:
        return expr.name

    def visit_Binary(self, expr: Binary) -> str:
        if expr.op in _INFIX:
            return f"({self.expr(expr.a)} {_INFIX[expr.op]} {self.expr(expr.b)})"
        return f"{expr.op}({self.expr(expr.a)}, {self.expr(expr.b)})"

    def visit_Not(self, expr: Not) -> str:
        return f"not {self.expr(expr.a)}"

    def visit_Select(self, expr: Select) -> str:
        return (f"select({self.expr(expr.condition)}, {self.expr(expr.true_value)}, "
                f"{self.expr(expr.false_value)})")

    def visit_Cast(self, expr: Cast) -> str:
        return f"{expr.dtype}({self.expr(expr.value)})"

    def visit_Call(self, expr: Call) -> str:
        return f"{expr.name}({', '.join(self.expr(a) for a in expr.args)})"

    def visit_BufferLoad(self, expr: BufferLoad) -> str:
        text = f"{expr.buffer.name}[{', '.join(self.expr(i) for i in expr.indices)}]"
        return text if expr.predicate is None else f"({text} if {self.expr(expr.predicate)})"

    def visit_Ramp(self, expr: Ramp) -> str:
        return f"ramp({self.expr(expr.base)}, {self.expr(expr.stride)}, {expr.lanes})"

    def visit_Broadcast(self, expr: Broadcast) -> str:
        return f"broadcast({self.expr(expr.value)}, {expr.lanes})"

    def visit_For(self, stmt: For, indent: int) -> list[str]:
        kind = stmt.kind.value if stmt.kind is not ForKind.THREAD_BINDING else stmt.thread_tag
        head = (f"{_pad(indent)}for {stmt.var.name} in {kind}({self.expr(stmt.min)}, "
                f"{self.expr(stmt.extent)}):")
        return [head, *self.stmt(stmt.body, indent + 1)]

    def visit_BufferStore(self, stmt: BufferStore, indent: int) -> list[str]:
        idx = ", ".join(self.expr(i) for i in stmt.indices)
        return [f"{_pad(indent)}{stmt.buffer.name}[{idx}] = {self.expr(stmt.value)}"]

    def visit_Allocate(self, stmt: Allocate, indent: int) -> list[str]:
        b = stmt.buffer
        head = f"{_pad(indent)}allocate {b.name}: {b.dtype}{list(b.shape)} in {b.scope!r}"
        return [head, *self.stmt(stmt.body, indent)]

    def visit_IfThenElse(self, stmt: IfThenElse, indent: int) -> list[str]:
        likely = "likely " if stmt.likely else ""
        lines = [f"{_pad(indent)}if {likely}{self.expr(stmt.condition)}:",
                 *self.stmt(stmt.then_case, indent + 1)]
        if stmt.else_case is not None:
            lines += [f"{_pad(indent)}else:", *self.stmt(stmt.else_case, indent + 1)]
        return lines

    def visit_SeqStmt(self, stmt: SeqStmt, indent: int) -> list[str]:
        if not stmt.stmts:
            return [f"{_pad(indent)}pass"]
        return [line for s in stmt.stmts for line in self.stmt(s, indent)]

    def visit_Evaluate(self, stmt: Evaluate, indent: int) -> list[str]:
        return [f"{_pad(indent)}{self.expr(stmt.value)}"]

    def visit_default(self, node, *indent):
        # Nodes from outside the TIR core: TE's tensor reads describe themselves; other
        # statements (a target's own) print as their class name.
        if indent:
            return [f"{_pad(indent[0])}<{type(node).__name__}>"]
        describe = getattr(node, "describe", None)
        return describe(self.expr) if describe else type(node).__name__


def _pad(indent: int) -> str:
    return "  " * indent


_PRINTER = _Printer()


def expr_to_str(expr: Expr) -> str:
    """One-line text of an expression."""
    return _PRINTER.expr(expr)


def stmt_to_str(stmt: Stmt) -> str:
    """Indented multi-line text of a statement."""
    return "\n".join(_PRINTER.stmt(stmt, 0))


def func_to_str(func: PrimFunc) -> str:
    """Text of a PrimFunc: its signature, then its body."""
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in func.params)
    return "\n".join([f"def {func.name}({params}):", *_PRINTER.stmt(func.body, 1)])
