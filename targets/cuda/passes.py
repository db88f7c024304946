"""TIR passes of the CUDA target: a GPU-scheduled PrimFunc to kernels.

A lowered function is a sequence of root loop nests (one per stage computed at root),
each of which becomes one kernel launch; intermediates computed at root become global
workspace buffers that the host allocates. Inside a kernel:

* loops bound to ``blockIdx.*`` form the outer chain and give the grid; loops bound to
  ``threadIdx.*`` give the block (the widest loop of each axis). Code outside the thread
  loops is *block level*: every thread of the block runs it.
* a store to shared or global memory at block level for some thread axis is restricted
  to thread 0 of that axis (:func:`guard_owner_stores`), so every element is written
  once, as in a sequential reading of the TIR;
* threads exchange data only through shared buffers allocated at block level; a
  barrier goes between block-level statements where one writes a shared buffer that
  a later one reads or overwrites (:func:`insert_barriers`), including around the back
  edge of a loop;
* a ``local`` buffer allocated at block level but only touched inside thread loops holds
  one region per thread: it is compacted to that region, addressed without the thread
  indices (:func:`compact_local_buffers`), so it fits in registers.

These rules make the kernel's meaning the sequential meaning of the same TIR with the
thread loops run as serial loops (and each per-thread buffer given one copy per
thread), which is what :mod:`heterocc.targets.cuda.emulate` runs on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from heterocc.sdk import CompileError
from heterocc.tir import expr as tx
from heterocc.tir.functor import StmtFunctor
from heterocc.tir.passes import (
    flatten_buffers,
    guard_load_bounds,
    inject_virtual_threads,
    remove_true_guards,
    unroll_loops,
    vectorize_loops,
)
from heterocc.tir.simplify import (
    Interval,
    LinearForm,
    const_bound,
    from_linear_form,
    linear_form,
    loop_ranges,
    structurally_equal,
)
from heterocc.tir.simplify import simplify as simplify_expr
from heterocc.tir.stmt import (
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
from heterocc.tir.visitor import Mutator, children, collect, free_vars, substitute

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
#: most threads one block may have on every NVIDIA GPU since sm_20.
MAX_THREADS_PER_BLOCK = 1024


@dataclass(frozen=True, eq=False, repr=False)
class Barrier(Stmt):
    """Every thread of the block waits here; shared-memory writes made before it are
    visible to every thread after it (``__syncthreads()``)."""


@dataclass
class Kernel:
    """One kernel launch: its body (flattened TIR), the global buffers it takes in order,
    the extent of every GPU axis it uses, the variables standing for the thread indices
    at block level (in owner guards) and its per-thread buffers (compacted ``local``
    buffers allocated at block level, with the thread axes they are private to)."""

    name: str
    params: tuple[tx.Buffer, ...]
    body: Stmt
    launch: dict[str, int]
    thread_index_vars: dict[str, tx.Var] = field(default_factory=dict)
    per_thread: dict[tx.Buffer, tuple[str, ...]] = field(default_factory=dict)

    @property
    def grid(self) -> tuple[int, int, int]:
        return tuple(self.launch.get(tag, 1) for tag in BLOCK_TAGS)

    @property
    def block(self) -> tuple[int, int, int]:
        return tuple(self.launch.get(tag, 1) for tag in THREAD_AXES)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)


@dataclass
class GpuFunction:
    """A lowered function as kernel launches: ``params`` are the caller's buffers,
    ``workspaces`` the global intermediates the host allocates for the launches."""

    name: str
    params: tuple[tx.Buffer, ...]
    workspaces: tuple[tx.Buffer, ...]
    kernels: list[Kernel]


def _is_thread_loop(node: Stmt, tags=THREAD_AXES) -> bool:
    return isinstance(node, For) and node.kind is ForKind.THREAD_BINDING and node.thread_tag in tags


def _constant(value: tx.Expr, what: str) -> int:
    if not isinstance(value, tx.IntImm):
        raise CompileError(f"{what} must have a constant extent on the GPU, got {value!r}")
    return value.value


# ----------------------------------------------------------------------------- kernels


def _split_root(body: Stmt) -> tuple[list[tx.Buffer], list[Stmt]]:
    """Global buffers allocated at the root (workspaces) and the root loop nests."""
    workspaces = []
    while isinstance(body, Allocate) and body.buffer.scope == "global":
        workspaces.append(body.buffer)
        body = body.body
    nests = list(body.stmts) if isinstance(body, SeqStmt) else [body]
    return workspaces, [n for n in nests if not (isinstance(n, SeqStmt) and not n.stmts)]


def _launch_extents(name: str, nest: Stmt) -> dict[str, int]:
    """Grid and block extents; blockIdx loops must form the nest's outer chain."""
    launch: dict[str, int] = {}
    node = nest
    while isinstance(node, Allocate | For) and not (
            isinstance(node, For) and not _is_thread_loop(node, BLOCK_TAGS)):
        if isinstance(node, For):
            if node.thread_tag in launch:
                raise CompileError(f"kernel {name!r}: two loops bound to {node.thread_tag}")
            launch[node.thread_tag] = _constant(node.extent, f"loop {node.var.name!r}")
        node = node.body
    stray = collect(node, lambda n: _is_thread_loop(n, BLOCK_TAGS))
    if stray:
        raise CompileError(
            f"kernel {name!r}: loop {stray[0].var.name!r} is bound to {stray[0].thread_tag} but "
            "is not in the outer chain of blockIdx loops; bind only outermost loops to blocks")
    if collect(node, lambda n: isinstance(n, For) and n.kind is ForKind.THREAD_BINDING
               and n.thread_tag == "vthread"):
        raise CompileError(f"kernel {name!r}: vthread loops must be injected before codegen")
    for loop in collect(node, _is_thread_loop):
        extent = _constant(loop.extent, f"thread loop {loop.var.name!r}")
        launch[loop.thread_tag] = max(launch.get(loop.thread_tag, 1), extent)
    threads = math.prod(launch.get(tag, 1) for tag in THREAD_AXES)
    if threads > MAX_THREADS_PER_BLOCK:
        raise CompileError(f"kernel {name!r}: {threads} threads per block exceed "
                           f"{MAX_THREADS_PER_BLOCK}; split the thread loops further")
    return launch


def _check_nesting(name: str, stmt: Stmt, bound: frozenset = frozenset()) -> None:
    """No thread axis bound twice on one path; no shared buffer private to a thread."""
    if isinstance(stmt, For) and _is_thread_loop(stmt):
        if stmt.thread_tag in bound:
            raise CompileError(f"kernel {name!r}: loop {stmt.var.name!r} is bound to "
                               f"{stmt.thread_tag} inside another loop bound to it")
        bound = bound | {stmt.thread_tag}
    if isinstance(stmt, Allocate) and stmt.buffer.scope == "shared" and bound:
        raise CompileError(
            f"kernel {name!r}: shared buffer {stmt.buffer.name!r} is allocated inside the "
            f"{'/'.join(sorted(bound))} loops, so each thread would see another thread's data; "
            "compute_at it at a loop outside the threadIdx loops")
    for child in _child_stmts(stmt):
        _check_nesting(name, child, bound)


def _child_stmts(stmt: Stmt) -> list[Stmt]:
    return [child for child in children(stmt) if isinstance(child, Stmt)]


def _global_buffers(stmt: Stmt) -> set[tx.Buffer]:
    accessed = collect(stmt, lambda n: isinstance(n, BufferStore | tx.BufferLoad))
    return {n.buffer for n in accessed if n.buffer.scope == "global"}


class _UnitLoopRemover(Mutator):
    def visit_For(self, node: For) -> Stmt:
        node = self.generic(node)
        if isinstance(node.extent, tx.IntImm) and node.extent.value == 1:
            return substitute(node.body, {node.var: node.min})
        return node


def remove_unit_loops(func: PrimFunc) -> PrimFunc:
    """Loops of one iteration (GPU-bound ones included, whose axis then has extent 1)
    replaced by their body, so the index they fix is a constant the compiler sees."""
    return _UnitLoopRemover().func(func)


def lower_to_kernels(func: PrimFunc) -> GpuFunction:
    """Kernels of ``func``, lowered by ``te.lower(..., optimize=False)`` from a GPU
    schedule. The pipeline is the default one without loop partitioning (which would
    duplicate thread-bound loops); split tails stay guarded."""
    func = remove_true_guards(remove_unit_loops(inject_virtual_threads(func)))
    func = guard_load_bounds(func)
    workspaces, nests = _split_root(func.body)
    kernels = []
    for position, nest in enumerate(nests):
        name = f"{func.name}_kernel{position}"
        launch = _launch_extents(name, nest)
        _check_nesting(name, nest)
        body, per_thread = compact_local_buffers(nest)
        used = _global_buffers(body)
        params = tuple(b for b in (*func.params, *workspaces) if b in used)
        kernel_func = PrimFunc(name, params, body)
        for step in (flatten_buffers, unroll_loops, remove_true_guards, vectorize_loops,
                     remove_true_guards):
            kernel_func = step(kernel_func)
        thread_tags = tuple(t for t in THREAD_AXES if t in launch)
        index_vars = {tag: tx.Var(tag.replace(".", "_")) for tag in thread_tags}
        body = guard_owner_stores(kernel_func.body, index_vars)
        body = insert_barriers(body, name, frozenset(index_vars.values()))
        kernels.append(Kernel(name, params, body, launch, index_vars, per_thread))
    return GpuFunction(func.name, func.params, tuple(workspaces), kernels)


# ----------------------------------------------------------------------------- owner guards


def _writes_memory_shared_by_threads(stmt: Stmt) -> bool:
    return bool(collect(stmt, lambda n: isinstance(n, BufferStore)
                        and n.buffer.scope in ("global", "shared")))


def guard_owner_stores(stmt: Stmt, index_vars: dict[str, tx.Var],
                       bound: frozenset = frozenset()) -> Stmt:
    """Stores to global or shared memory made outside the loops of some thread axis run
    on thread 0 of that axis only (``index_vars`` stand for the thread indices; ``bound``
    are the thread axes whose loops enclose ``stmt``)."""
    return _OwnerGuards(index_vars).stmt(stmt, bound)


class _OwnerGuards(StmtFunctor):
    """The walk of :func:`guard_owner_stores`: each rule takes the thread axes bound
    around its statement."""

    def __init__(self, index_vars: dict[str, tx.Var]):
        self.index_vars = index_vars

    def stmt(self, stmt: Stmt, bound: frozenset) -> Stmt:
        missing = [tag for tag in self.index_vars if tag not in bound]
        if not missing:
            return stmt
        if not collect(stmt, lambda n: _is_thread_loop(n, tuple(missing))):
            if not _writes_memory_shared_by_threads(stmt):
                return stmt
            condition = None
            for tag in missing:
                is_first = tx.equal(self.index_vars[tag], 0)
                condition = is_first if condition is None else tx.logical_and(condition,
                                                                              is_first)
            return IfThenElse(condition, stmt)
        return self.dispatch(stmt, bound)

    def visit_SeqStmt(self, stmt: SeqStmt, bound: frozenset) -> Stmt:
        return SeqStmt(tuple(self.stmt(s, bound) for s in stmt.stmts))

    def visit_For(self, stmt: For, bound: frozenset) -> Stmt:
        inner = bound | {stmt.thread_tag} if _is_thread_loop(stmt) else bound
        return dataclasses.replace(stmt, body=self.stmt(stmt.body, inner))

    def visit_Allocate(self, stmt: Allocate, bound: frozenset) -> Stmt:
        return dataclasses.replace(stmt, body=self.stmt(stmt.body, bound))

    def visit_IfThenElse(self, stmt: IfThenElse, bound: frozenset) -> Stmt:
        else_case = None if stmt.else_case is None else self.stmt(stmt.else_case, bound)
        return dataclasses.replace(stmt, then_case=self.stmt(stmt.then_case, bound),
                                   else_case=else_case)

    def visit_default(self, stmt: Stmt, bound: frozenset) -> Stmt:
        return stmt


# ----------------------------------------------------------------------------- barriers


@dataclass
class _SharedAccess:
    reads: set = field(default_factory=set)
    writes: set = field(default_factory=set)

    def conflicts_with(self, later: _SharedAccess, ordered_writes: bool = True) -> bool:
        """Whether ``later`` must wait for this: it reads what this wrote, or overwrites
        what this read (or wrote, when ``ordered_writes``: two different statements may
        write one element, the iterations of one loop each write their own)."""
        overwritten = self.reads | self.writes if ordered_writes else self.reads
        return bool(later.reads & self.writes or later.writes & overwritten)

    def merge(self, other: _SharedAccess) -> None:
        self.reads |= other.reads
        self.writes |= other.writes


def _shared_access(stmt: Stmt) -> _SharedAccess:
    loads = collect(stmt, lambda n: isinstance(n, tx.BufferLoad) and n.buffer.scope == "shared")
    stores = collect(stmt, lambda n: isinstance(n, BufferStore) and n.buffer.scope == "shared")
    return _SharedAccess({n.buffer for n in loads}, {n.buffer for n in stores})


def _head_and_tail(stmt: Stmt) -> tuple[_SharedAccess, _SharedAccess]:
    """Shared accesses before the first barrier and after the last one of ``stmt``."""
    parts = list(stmt.stmts) if isinstance(stmt, SeqStmt) else [stmt]
    positions = [k for k, s in enumerate(parts) if isinstance(s, Barrier)]
    if not positions:
        everything = _shared_access(stmt)
        return everything, everything
    head, tail = _SharedAccess(), _SharedAccess()
    for s in parts[:positions[0]]:
        head.merge(_shared_access(s))
    for s in parts[positions[-1] + 1:]:
        tail.merge(_shared_access(s))
    return head, tail


def _own_element_only(loop: For, buffer: tx.Buffer) -> bool:
    """Whether every access to ``buffer`` in ``loop`` is at one index that involves the
    loop's thread index (each thread updates its own element)."""
    accesses = collect(loop.body, lambda n: isinstance(n, BufferStore | tx.BufferLoad)
                       and n.buffer is buffer)
    first = accesses[0].indices
    return loop.var in free_vars(first[0]) and all(
        len(a.indices) == len(first) and all(structurally_equal(x, y)
                                             for x, y in zip(a.indices, first))
        for a in accesses)


def _check_thread_private(stmt: For, kernel: str) -> None:
    access = _shared_access(stmt)
    exchanged = {b for b in access.reads & access.writes if not _own_element_only(stmt, b)}
    if exchanged:
        names = ", ".join(sorted(b.name for b in exchanged))
        raise CompileError(
            f"kernel {kernel!r}: shared buffer(s) {names} are written and read inside the same "
            f"{stmt.thread_tag} loop {stmt.var.name!r}, where no barrier can separate the "
            "threads; attach the producer at a loop outside the threadIdx loops")


def insert_barriers(stmt: Stmt, kernel: str, index_vars: frozenset = frozenset()) -> Stmt:
    """Barriers between block-level statements that exchange data through shared
    memory, and at the end of loop bodies whose next iteration overwrites what this
    one read. Statements under an owner guard (a condition on the thread indices
    ``index_vars`` only) run on one thread and need none."""
    return _Barriers(kernel, index_vars).stmt(stmt)


class _Barriers(StmtFunctor):
    """The walk of :func:`insert_barriers` over the statements of ``kernel``."""

    def __init__(self, kernel: str, index_vars: frozenset):
        self.kernel, self.index_vars = kernel, index_vars

    def stmt(self, stmt: Stmt) -> Stmt:
        if isinstance(stmt, IfThenElse) and free_vars(stmt.condition) <= self.index_vars:
            return stmt
        if _is_thread_loop(stmt):
            _check_thread_private(stmt, self.kernel)
            return stmt
        return self.dispatch(stmt)

    def visit_SeqStmt(self, stmt: SeqStmt) -> Stmt:
        out: list[Stmt] = []
        pending = _SharedAccess()
        for child in stmt.stmts:
            child = self.stmt(child)
            head, tail = _head_and_tail(child)
            if pending.conflicts_with(head):
                out.append(Barrier())
                pending = _SharedAccess()
            out.append(child)
            if any(isinstance(s, Barrier) for s in _child_stmts(child)):
                pending = tail
            else:
                pending.merge(tail)
        return seq(out)

    def visit_For(self, stmt: For) -> Stmt:
        body = self.stmt(stmt.body)
        if _is_thread_loop(stmt, BLOCK_TAGS):  # each iteration is another block
            return dataclasses.replace(stmt, body=body)
        head, tail = _head_and_tail(body)
        if tail.conflicts_with(head, ordered_writes=False):
            body = seq([body, Barrier()])
        return dataclasses.replace(stmt, body=body)

    def visit_Allocate(self, stmt: Allocate) -> Stmt:
        return dataclasses.replace(stmt, body=self.stmt(stmt.body))

    def visit_IfThenElse(self, stmt: IfThenElse) -> Stmt:
        then_case = self.stmt(stmt.then_case)
        else_case = None if stmt.else_case is None else self.stmt(stmt.else_case)
        if collect(then_case, lambda n: isinstance(n, Barrier)) or (
                else_case is not None and collect(else_case, lambda n: isinstance(n, Barrier))):
            raise CompileError(
                f"kernel {self.kernel!r}: a barrier is needed under the guard "
                f"{stmt.condition!r}, which threads may disagree on; choose split factors "
                "that divide the extents of the loops around shared-memory stages")
        return dataclasses.replace(stmt, then_case=then_case, else_case=else_case)

    def visit_default(self, stmt: Stmt) -> Stmt:
        return stmt


# ----------------------------------------------------------------------------- local buffers


@dataclass
class _Access:
    indices: tuple[tx.Expr, ...]
    threads: dict[str, tx.Var]  # thread axis -> the variable of its enclosing loop


class _Accesses(StmtFunctor):
    """Every access to ``buffer`` under a statement, each with the thread loops around
    it (a rule per statement class takes the thread loops around its statement)."""

    def __init__(self, buffer: tx.Buffer):
        self.buffer = buffer
        self.found: list[_Access] = []

    def _loads(self, exprs: list[tx.Expr], threads: dict[str, tx.Var]) -> None:
        for expr in exprs:
            for load in collect(expr, lambda n: isinstance(n, tx.BufferLoad)
                                and n.buffer is self.buffer):
                self.found.append(_Access(load.indices, threads))

    def visit_BufferStore(self, stmt: BufferStore, threads: dict[str, tx.Var]) -> None:
        if stmt.buffer is self.buffer:
            self.found.append(_Access(stmt.indices, threads))
        self._loads([stmt.value, *stmt.indices], threads)

    def visit_Evaluate(self, stmt: Evaluate, threads: dict[str, tx.Var]) -> None:
        self._loads([stmt.value], threads)

    def visit_For(self, stmt: For, threads: dict[str, tx.Var]) -> None:
        if _is_thread_loop(stmt):
            threads = {**threads, stmt.thread_tag: stmt.var}
        self._loads([stmt.min, stmt.extent], threads)
        self.stmt(stmt.body, threads)

    def visit_IfThenElse(self, stmt: IfThenElse, threads: dict[str, tx.Var]) -> None:
        self._loads([stmt.condition], threads)
        self.visit_default(stmt, threads)

    def visit_default(self, stmt: Stmt, threads: dict[str, tx.Var]) -> None:
        for child in _child_stmts(stmt):  # a sequence, an allocation, a barrier
            self.stmt(child, threads)


def _accesses(stmt: Stmt, buffer: tx.Buffer, threads: dict[str, tx.Var]) -> list[_Access]:
    walk = _Accesses(buffer)
    walk.stmt(stmt, threads)
    return walk.found


def _compaction(alloc: Allocate, ranges: dict[tx.Var, Interval]):
    """(thread axes, per-dimension (lowest index, extent), rewritten indices of every
    access in :func:`_accesses` order) of a block-level local buffer, or None when it is
    not private to threads; the last two are None when it cannot be compacted."""
    accesses = _accesses(alloc.body, alloc.buffer, {})
    if not accesses:
        return None
    tags = set(accesses[0].threads)
    for access in accesses[1:]:
        tags &= set(access.threads)
    tags = tuple(t for t in THREAD_AXES if t in tags)
    if not tags:
        return None
    dims = []
    rewritten: list[list[tx.Expr]] = [[] for _ in accesses]
    for dim, size in enumerate(alloc.buffer.shape):
        signature, remainders = None, []
        for access in accesses:
            thread_vars = {access.threads[t]: t for t in tags}
            form = linear_form(simplify_expr(access.indices[dim]))
            coefficients = {t: 0 for t in tags}
            rest = {}
            for key, (coeff, atom) in form.terms.items():
                if atom in thread_vars:
                    coefficients[thread_vars[atom]] += coeff
                elif free_vars(atom) & thread_vars.keys():
                    return tags, None, None  # a thread index inside a non-linear term
                else:
                    rest[key] = [coeff, atom]
            if signature is None:
                signature = coefficients
            elif signature != coefficients:
                return tags, None, None
            remainders.append(from_linear_form(LinearForm(rest, form.constant), tx.INDEX_DTYPE))
        bounds = [const_bound(r, ranges) for r in remainders]
        low, high = min(b.lo for b in bounds), max(b.hi for b in bounds)
        if not (math.isfinite(low) and math.isfinite(high)) or high - low + 1 > size:
            return tags, None, None
        dims.append((int(low), int(high - low + 1)))
        for indices, remainder in zip(rewritten, remainders):
            indices.append(simplify_expr(remainder - int(low), ranges))
    return tags, dims, [tuple(indices) for indices in rewritten]


class _LocalCompactor(Mutator):
    def __init__(self, ranges: dict[tx.Var, Interval]):
        self.ranges = ranges
        self.depth = 0  # thread loops around the current node
        self.per_thread: dict[tx.Buffer, tuple[str, ...]] = {}
        self.replaced: dict[tx.Buffer, tx.Buffer] = {}
        self.indices: dict[tx.Buffer, list[tuple[tx.Expr, ...]]] = {}

    def visit_For(self, node: For) -> Stmt:
        inside = _is_thread_loop(node)
        self.depth += inside
        try:
            return self.generic(node)
        finally:
            self.depth -= inside

    def visit_Allocate(self, node: Allocate) -> Stmt:
        if node.buffer.scope != "local" or self.depth:
            return self.generic(node)
        found = _compaction(node, self.ranges)
        if found is None:
            return self.generic(node)
        tags, dims, rewritten = found
        self.per_thread[node.buffer] = tags
        if dims is None:
            return self.generic(node)
        compact = dataclasses.replace(node.buffer, shape=tuple(e for _, e in dims))
        self.replaced[node.buffer] = compact
        self.indices[node.buffer] = rewritten
        self.per_thread[compact] = self.per_thread.pop(node.buffer)
        body = self.stmt(node.body)
        return Allocate(compact, body)

    def _next_indices(self, buffer: tx.Buffer) -> tuple[tx.Expr, ...]:
        return self.indices[buffer].pop(0)

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        # Accesses are rewritten in the order _accesses lists them: the store, then the
        # loads of its value and indices.
        if node.buffer not in self.replaced:
            return self.generic(node)
        indices = self._next_indices(node.buffer)
        value = self.expr(node.value)
        return BufferStore(self.replaced[node.buffer], value, indices)

    def visit_BufferLoad(self, node: tx.BufferLoad) -> tx.Expr:
        if node.buffer not in self.replaced:
            return self.generic(node)
        return tx.BufferLoad(self.replaced[node.buffer], self._next_indices(node.buffer),
                             node.predicate)


def compact_local_buffers(nest: Stmt) -> tuple[Stmt, dict[tx.Buffer, tuple[str, ...]]]:
    """``local`` buffers allocated at block level and used only inside thread loops,
    each shrunk to the region one thread touches (indices without the thread terms);
    returns the new nest and every such per-thread buffer with its thread axes."""
    compactor = _LocalCompactor(loop_ranges(nest))
    return compactor.stmt(nest), compactor.per_thread
