"""TIR index expressions on the accelerator: compiled to evaluators, or read as
affine forms whose coefficients become an instruction's strides and factors.

The stream walk (``dae``) evaluates each index once per unrolled iteration: a
compiled closure (``compile_index``) avoids walking the expression each time, and an
affine index (``linear_form``) is evaluated from its coefficients alone.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

from heterocc.sdk import CompileError, tir

_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
           "floordiv": operator.floordiv, "floormod": operator.mod, "min": min, "max": max,
           "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
           "eq": operator.eq, "ne": operator.ne, "and": operator.and_, "or": operator.or_}


class _IndexCompiler(tir.ExprFunctor):
    """Index expression -> a function from variable values to its integer value."""

    role = "VTA index"

    def visit_IntImm(self, expr: tir.IntImm) -> Callable[[dict], int]:
        value = expr.value
        return lambda env: value

    def visit_Var(self, expr: tir.Var) -> Callable[[dict], int]:
        def lookup(env):
            try:
                return env[expr]
            except KeyError:
                raise CompileError(f"index variable {expr.name!r} is not bound here") from None
        return lookup

    def visit_Cast(self, expr: tir.Cast) -> Callable[[dict], int]:
        return self.expr(expr.value)

    def visit_Binary(self, expr: tir.Binary) -> Callable[[dict], int]:
        if expr.op not in _BINARY:
            return self.visit_default(expr)
        op, a, b = _BINARY[expr.op], self.expr(expr.a), self.expr(expr.b)
        return lambda env: int(op(a(env), b(env)))

    def visit_default(self, expr: tir.Expr, *args):
        raise CompileError(f"index expression {expr!r} is not integer arithmetic")


_INDEX_COMPILER = _IndexCompiler()


def compile_index(expr: tir.Expr) -> Callable[[dict], int]:
    """A function from variable values to the integer value of index expression ``expr``
    (the stream walk evaluates each index once per unrolled iteration)."""
    return _INDEX_COMPILER.expr(expr)


@dataclass(frozen=True)
class LinearForm:
    """``constant + sum(coeffs[v] * v)``: an index expression that is affine in every
    variable, evaluated without walking the expression."""

    constant: int
    coeffs: dict

    def __call__(self, env: dict) -> int:
        return self.constant + sum(c * env[v] for v, c in self.coeffs.items())

    def shifted(self, offset: int) -> LinearForm:
        return LinearForm(self.constant + offset, self.coeffs)

    def at_zero(self, env: dict, loops) -> int:
        """The value with the ``loops`` variables at 0 and the others from ``env``."""
        inner = {var for var, _ in loops}
        try:
            return self.constant + sum(c * env[v] for v, c in self.coeffs.items()
                                       if v not in inner)
        except KeyError as exc:
            raise CompileError(f"index variable {exc.args[0].name!r} is not bound here") \
                from None


class _LinearForms(tir.ExprFunctor):
    """Index expression -> its LinearForm, or None where it is not affine."""

    role = "VTA linear form"

    def visit_IntImm(self, expr: tir.IntImm) -> LinearForm:
        return LinearForm(expr.value, {})

    def visit_Var(self, expr: tir.Var) -> LinearForm:
        return LinearForm(0, {expr: 1})

    def visit_Cast(self, expr: tir.Cast) -> LinearForm | None:
        return self.expr(expr.value)

    def visit_Binary(self, expr: tir.Binary) -> LinearForm | None:
        if expr.op not in ("add", "sub", "mul"):
            return None
        a, b = self.expr(expr.a), self.expr(expr.b)
        if a is None or b is None:
            return None
        if expr.op == "mul":
            if a.coeffs and b.coeffs:
                return None
            scale, form = (a.constant, b) if not a.coeffs else (b.constant, a)
            return LinearForm(form.constant * scale,
                              {v: c * scale for v, c in form.coeffs.items() if c * scale})
        sign = 1 if expr.op == "add" else -1
        coeffs = dict(a.coeffs)
        for v, c in b.coeffs.items():
            coeffs[v] = coeffs.get(v, 0) + sign * c
        return LinearForm(a.constant + sign * b.constant, {v: c for v, c in coeffs.items() if c})

    def visit_default(self, expr: tir.Expr, *args) -> None:
        return None  # a division, a comparison, a load: not affine


_LINEAR_FORMS = _LinearForms()


def linear_form(expr: tir.Expr) -> LinearForm | None:
    """``expr`` as a LinearForm, or None when it is not affine (a product of variables,
    a division, a comparison)."""
    return _LINEAR_FORMS.expr(expr)


def evaluate(expr: tir.Expr, env: dict) -> int:
    """The integer value of an index expression with every variable bound in ``env``."""
    return compile_index(expr)(env)
