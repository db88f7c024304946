"""Kernels (flattened TIR, see :mod:`heterocc.targets.cuda.passes`) to CUDA C.

The module text comes from the jinja2 template ``templates/module.cu.j2``: a comment with
the host launch description, integer helpers, and one ``extern "C" __global__`` function
per kernel with ``__launch_bounds__`` of its block size. Statements and expressions are
printed here. Blocks and threads: a loop bound to ``blockIdx.*`` reads the block index;
a loop bound to ``threadIdx.*`` reads the thread index under ``if (threadIdx.x < extent)``
when it is narrower than the block. Vector TIR: a vector copy between global/shared
buffers whose offsets are provably multiples of the vector width becomes one ``float2``
/ ``float4`` access; any other vector statement is printed lane by lane.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

import jinja2
import numpy as np

from heterocc.sdk import CompileError
from heterocc.tir import expr as tx
from heterocc.tir import stmt as ts
from heterocc.tir.functor import ExprFunctor, StmtEmitter
from heterocc.tir.simplify import Interval, const_bound, linear_form, loop_range
from heterocc.tir.visitor import collect

from .passes import BLOCK_TAGS, Barrier, Kernel

_C_TYPES = {
    "bool": "bool", "int8": "signed char", "uint8": "unsigned char", "int16": "short",
    "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int", "int64": "long long",
    "uint64": "unsigned long long", "float16": "__half", "float32": "float", "float64": "double",
}
#: TIR math intrinsic -> CUDA function for float32 (float64 drops the ``f``).
_MATH = {"round": "rint", "fabs": "fabs"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "lt": "<", "le": "<=", "gt": ">",
          "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||", "bitand": "&",
          "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}
#: vector types of float32 the code generator uses for aligned vector copies.
_FLOAT_VECTORS = {2: "float2", 4: "float4"}
INDENT = "  "


def c_type(dtype: str) -> str:
    """CUDA C type of a scalar dtype."""
    try:
        return _C_TYPES[tx.scalar_dtype(dtype)]
    except KeyError:
        raise CompileError(f"dtype {dtype!r} has no CUDA C type") from None


@cache
def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("heterocc.targets.cuda", "templates"),
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template("module.cu.j2")


#: C++ keywords and alternative operator spellings, and CUDA names a variable must not
#: shadow.
_RESERVED = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t
    char32_t class compl const constexpr const_cast continue decltype default delete do
    double dynamic_cast else enum explicit export extern false float for friend goto if
    inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq
    private protected public register reinterpret_cast return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try
    typedef typeid typename union unsigned using virtual void volatile wchar_t while xor
    xor_eq threadIdx blockIdx blockDim gridDim warpSize min max abs rint fmin fmax fmod nan
    """.split()) | {f"{name}{suffix}" for name in tx.INTRINSICS for suffix in ("", "f")}


def _identifier(name: str) -> str:
    text = re.sub(r"\W", "_", name)
    if not text or text[0].isdigit():
        text = "v_" + text
    clash = text in _RESERVED or text.startswith(("__", "hcc_"))
    return text + "_" if clash else text


@dataclass
class KernelText:
    """What the template needs of one kernel."""

    name: str
    params: list[str]
    param_names: list[str]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    threads: int
    body: str


class KernelPrinter(ExprFunctor, StmtEmitter):
    """Prints one kernel's body (a ``visit_<Class>`` rule per TIR node class: a statement
    appends lines, an expression returns its text for ``lane`` of a vector statement, or
    None outside one); ``wide_index`` keeps index arithmetic in 64 bits."""

    role = "CUDA codegen"

    def __init__(self, kernel: Kernel, wide_index: bool):
        self.kernel = kernel
        self.index_type = "long long" if wide_index else "int"
        self.names: dict[object, str] = {}
        self.used_names: set[str] = set()
        self.ranges: dict[tx.Var, Interval] = {}
        self.lines: list[str] = []
        self.depth = 1
        for tag, var in kernel.thread_index_vars.items():
            self.names[var] = f"((int){tag})"
        for buffer in kernel.params:
            self._name(buffer, buffer.name)

    # ------------------------------------------------------------------ names

    def _name(self, key, hint: str) -> str:
        if key not in self.names:
            base = _identifier(hint)
            name, suffix = base, 1
            while name in self.used_names:
                suffix += 1
                name = f"{base}_{suffix}"
            self.used_names.add(name)
            self.names[key] = name
        return self.names[key]

    def _emit(self, line: str) -> None:
        self.lines.append(INDENT * self.depth + line)

    def _block(self, head: str, body: ts.Stmt) -> None:
        self._emit(head + " {")
        self.depth += 1
        self.stmt(body)
        self.depth -= 1
        self._emit("}")

    # ------------------------------------------------------------------ signature

    def params(self) -> list[str]:
        written = {n.buffer for n in collect(self.kernel.body,
                                             lambda n: isinstance(n, ts.BufferStore))}
        out = []
        for buffer in self.kernel.params:
            const = "" if buffer in written else "const "
            out.append(f"{const}{c_type(buffer.dtype)}* __restrict__ {self.names[buffer]}")
        return out

    # ------------------------------------------------------------------ statements

    def visit_IfThenElse(self, node: ts.IfThenElse) -> None:
        self._block(f"if ({self.expr(node.condition)})", node.then_case)
        if node.else_case is not None:
            self._block("else", node.else_case)

    def visit_Barrier(self, node: Barrier) -> None:
        self._emit("__syncthreads();")

    def visit_Evaluate(self, node: ts.Evaluate) -> None:
        self._emit(self.expr(node.value) + ";")

    def visit_For(self, node: ts.For) -> None:
        name = self._name(node.var, node.var.name)
        bound = loop_range(node)
        if bound is not None:
            self.ranges[node.var] = bound
        if node.kind is ts.ForKind.THREAD_BINDING:
            tag = node.thread_tag
            declare = f"const {self.index_type} {name} = ({self.index_type}){tag};"
            extent = node.extent.value
            # a thread axis narrower than its launch dimension guards the surplus threads
            covers_launch = tag in BLOCK_TAGS or extent == self.kernel.launch[tag]
            self._emit("{" if covers_launch else f"if ({tag} < {extent}) {{")
            self.depth += 1
            self._emit(declare)
            self.stmt(node.body)
            self.depth -= 1
            self._emit("}")
            return
        start, extent = self.expr(node.min), self.expr(node.extent)
        end = extent if start == "0" else f"{start} + {extent}"
        if node.kind in (ts.ForKind.UNROLLED, ts.ForKind.UNROLL_HINT):
            self._emit("#pragma unroll")
        self._block(f"for ({self.index_type} {name} = {start}; {name} < {end}; ++{name})",
                    node.body)

    def visit_Allocate(self, node: ts.Allocate) -> None:
        buffer = node.buffer
        name = self._name(buffer, buffer.name)
        size = max(buffer.size, 1)
        if buffer.scope == "shared":
            self._emit(f"__shared__ __align__(16) {c_type(buffer.dtype)} {name}[{size}];")
        elif buffer.scope == "local":
            self._emit(f"{c_type(buffer.dtype)} {name}[{size}];")
        else:
            raise CompileError(
                f"CUDA codegen: buffer {buffer.name!r} in scope {buffer.scope!r} is allocated "
                "inside a kernel; only 'shared' and 'local' buffers can be")
        self.stmt(node.body)

    def visit_BufferStore(self, node: ts.BufferStore) -> None:
        (index,) = node.indices
        buffer = self.names[node.buffer]
        lanes = tx.lanes_of(index.dtype)
        if lanes == 1:
            self._emit(f"{buffer}[{self.expr(index)}] = {self.expr(node.value)};")
            return
        copy = self._vector_copy(node)
        if copy is not None:
            self._emit(copy)
            return
        for lane in range(lanes):
            self._emit(f"{buffer}[{self.expr(index, lane)}] = {self.expr(node.value, lane)};")

    def _aligned(self, index: tx.Expr, lanes: int) -> bool:
        if not isinstance(index, tx.Ramp) or not (isinstance(index.stride, tx.IntImm)
                                                  and index.stride.value == 1):
            return False
        form = linear_form(index.base)
        return form.constant % lanes == 0 and all(c % lanes == 0 for c, _ in form.terms.values())

    def _vector_copy(self, node: ts.BufferStore) -> str | None:
        """``*(float4*)(dst + i) = *(const float4*)(src + j)`` where both are aligned."""
        value, (index,) = node.value, node.indices
        lanes = tx.lanes_of(index.dtype)
        vector = _FLOAT_VECTORS.get(lanes)
        if (vector is None or node.buffer.dtype != "float32"
                or not isinstance(value, tx.BufferLoad) or value.predicate is not None
                or {node.buffer.scope, value.buffer.scope} - {"global", "shared"}
                or not self._aligned(index, lanes) or not self._aligned(value.indices[0], lanes)):
            return None
        target = f"{self.names[node.buffer]} + {self.expr(index.base)}"
        source = f"{self.names[value.buffer]} + {self.expr(value.indices[0].base)}"
        return f"*({vector}*)({target}) = *(const {vector}*)({source});"

    # ------------------------------------------------------------------ expressions

    def expr(self, node: tx.Expr, lane: int | None = None) -> str:
        """The C text of ``node`` (of lane ``lane`` of a vector statement)."""
        return self.dispatch(node, lane)

    def _scalar_type(self, dtype: str) -> str:
        return self.index_type if tx.scalar_dtype(dtype) == tx.INDEX_DTYPE else c_type(dtype)

    def visit_IntImm(self, node: tx.IntImm, lane) -> str:
        if tx.is_bool(node.dtype):
            return "true" if node.value else "false"
        if abs(node.value) < 2**31:
            text = str(node.value)
            return text if node.value >= 0 else f"({text})"
        suffix = "ULL" if tx.is_unsigned(node.dtype) else "LL"
        return f"({node.value}{suffix})"

    def visit_FloatImm(self, node: tx.FloatImm, lane) -> str:
        value, double = node.value, tx.scalar_dtype(node.dtype) == "float64"
        if math.isnan(value):
            text = "nan(\"\")" if double else "nanf(\"\")"
        elif math.isinf(value):
            bits = "__longlong_as_double(0x7ff0000000000000LL)" if double else \
                "__int_as_float(0x7f800000)"
            text = bits if value > 0 else f"(-{bits})"
        else:
            text = repr(float(value))
            if "e" not in text and "." not in text:
                text += ".0"
            text = text if double else text + "f"
            text = text if value >= 0 else f"({text})"
        if tx.scalar_dtype(node.dtype) == "float16":
            return f"__float2half({text})"
        return text

    def visit_Var(self, node: tx.Var, lane) -> str:
        try:
            return self.names[node]
        except KeyError:
            raise CompileError(f"CUDA codegen: variable {node.name!r} is used outside the "
                               "loop that defines it") from None

    def _nonnegative(self, node: tx.Expr) -> bool:
        return const_bound(node, self.ranges).lo >= 0

    def visit_Binary(self, node: tx.Binary, lane) -> str:
        a, b = self.expr(node.a, lane), self.expr(node.b, lane)
        op, dtype = node.op, node.a.dtype
        if op in ("floordiv", "floormod"):
            if tx.is_float(dtype):
                floor = f"floor({a} / {b})"
                return floor if op == "floordiv" else f"({a} - {floor} * {b})"
            positive_divisor = isinstance(node.b, tx.IntImm) and node.b.value > 0
            if positive_divisor and lane is None and self._nonnegative(node.a):
                return f"({a} {'/' if op == 'floordiv' else '%'} {b})"
            return f"hcc_{op}<{self._scalar_type(dtype)}>({a}, {b})"
        if op == "truncdiv":
            return f"({a} / {b})"
        if op == "truncmod":
            return f"fmod({a}, {b})" if tx.is_float(dtype) else f"({a} % {b})"
        if op in ("min", "max"):
            if tx.is_float(dtype):  # minnum/maxnum semantics, as on the CPU
                return f"f{op}{'f' if tx.scalar_dtype(dtype) == 'float32' else ''}({a}, {b})"
            return f"hcc_{op}<{self._scalar_type(dtype)}>({a}, {b})"
        return f"({a} {_INFIX[op]} {b})"

    def visit_Not(self, node: tx.Not, lane) -> str:
        operator = "!" if tx.is_bool(node.dtype) else "~"
        return f"({operator}{self.expr(node.a, lane)})"

    def visit_Select(self, node: tx.Select, lane) -> str:
        return (f"({self.expr(node.condition, lane)} ? {self.expr(node.true_value, lane)} : "
                f"{self.expr(node.false_value, lane)})")

    def visit_Cast(self, node: tx.Cast, lane) -> str:
        return f"(({self._scalar_type(node.dtype)})({self.expr(node.value, lane)}))"

    def visit_Call(self, node: tx.Call, lane) -> str:
        args = ", ".join(self.expr(a, lane) for a in node.args)
        base = tx.scalar_dtype(node.dtype)
        if base not in ("float32", "float64"):
            raise CompileError(f"CUDA codegen: intrinsic {node.name!r} on {base} is not "
                               "supported; compute it in float32")
        name = _MATH.get(node.name, node.name)
        return f"{name}{'f' if base == 'float32' else ''}({args})"

    def visit_BufferLoad(self, node: tx.BufferLoad, lane) -> str:
        (index,) = node.indices
        load = f"{self.names[node.buffer]}[{self.expr(index, lane)}]"
        if node.predicate is None:
            return load
        zero = f"(({c_type(node.buffer.dtype)})0)"
        return f"({self.expr(node.predicate, lane)} ? {load} : {zero})"

    def visit_Ramp(self, node: tx.Ramp, lane) -> str:
        if lane is None:
            raise CompileError("CUDA codegen: a vector index outside a vector statement")
        if isinstance(node.stride, tx.IntImm):
            offset = node.stride.value * lane
            return self.expr(node.base) if offset == 0 else f"({self.expr(node.base)} + {offset})"
        return f"({self.expr(node.base)} + {self.expr(node.stride)} * {lane})"

    def visit_Broadcast(self, node: tx.Broadcast, lane) -> str:
        return self.expr(node.value)

    # ------------------------------------------------------------------ kernel

    def text(self) -> KernelText:
        self.stmt(self.kernel.body)
        return KernelText(self.kernel.name, self.params(),
                          [self.names[b] for b in self.kernel.params], self.kernel.grid,
                          self.kernel.block, self.kernel.threads_per_block,
                          "\n".join(self.lines))


def needs_wide_index(buffers) -> bool:
    """Whether 32-bit index arithmetic could overflow (or int64 data is involved)."""
    return any(b.size >= 2**31 or tx.scalar_dtype(b.dtype) in ("int64", "uint64")
               for b in buffers)


def cuda_source(module_name: str, kernels: list[Kernel]) -> str:
    """The CUDA C translation unit of ``kernels``."""
    buffers = [b for k in kernels for b in k.params]
    buffers += [n.buffer for k in kernels
                for n in collect(k.body, lambda n: isinstance(n, ts.Allocate))]
    wide = needs_wide_index(buffers)
    texts = [KernelPrinter(k, wide).text() for k in kernels]
    uses_half = any(tx.scalar_dtype(b.dtype) == "float16" for b in buffers)
    return _template().render(module_name=module_name, kernels=texts, uses_half=uses_half)


def launch_shared_bytes(kernel: Kernel) -> int:
    """Bytes of static shared memory the kernel declares (for reports)."""
    allocations = collect(kernel.body, lambda n: isinstance(n, ts.Allocate)
                          and n.buffer.scope == "shared")
    return sum(a.buffer.size * np.dtype(tx.scalar_dtype(a.buffer.dtype)).itemsize
               for a in allocations)
