"""docs/api.md documents every public name of the modules a target author uses, so that a
public name added without documentation fails CI.

The page is a list of mkdocstrings directives (``::: dotted.path``, optionally with an
``options: members: [...]`` list). A name is documented when a directive names it, names
the module it is defined in with the name among its members, or names an object it is
(a re-export documented where it is defined). Every documented class and function must
also carry a docstring of its own: the page renders nothing else."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"

#: the modules whose every public name the page must cover
COVERED_MODULES = ("heterocc.sdk", "heterocc.te", "heterocc.tir", "heterocc.sdk.te_target")

_DIRECTIVE = re.compile(r"^::: *(?P<path>[\w.]+)[ \t]*\n(?P<options>(?:[ \t]+.*\n|\n)*)",
                        re.MULTILINE)
_MEMBERS = re.compile(r"members:\s*\[(?P<names>[^\]]*)\]")


def directives(text: str) -> dict[str, list[str] | None]:
    """Each directive's dotted path -> its ``members`` list (None: the whole object)."""
    found: dict[str, list[str] | None] = {}
    for directive in _DIRECTIVE.finditer(text):
        members = _MEMBERS.search(directive["options"])
        found[directive["path"]] = (None if members is None else
                                    [m.strip() for m in members["names"].split(",")
                                     if m.strip()])
    return found


def resolve(path: str):
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(path)


def public_names(module) -> list[str]:
    """``__all__``, or else the classes and functions the module defines and does not
    hide behind an underscore."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, obj in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
            and obj.__module__ == module.__name__]


def documented_objects(text: str) -> list[object]:
    """Every object the page documents: those its directives name, their listed members,
    and every public name of a module documented whole."""
    objects = []
    for path, members in directives(text).items():
        owner = resolve(path)
        objects.append(owner)
        if members is None and inspect.ismodule(owner):
            members = public_names(owner)
        objects.extend(getattr(owner, name) for name in members or ())
    return objects


def is_documented(obj, text: str, documented: list[object]) -> bool:
    """Whether the page documents ``obj``; a module (``sdk.te``) counts when the page
    documents it or any of its submodules (the modules' own names are checked apart)."""
    if any(obj is known for known in documented):
        return True
    if inspect.ismodule(obj):
        return any(path == obj.__name__ or path.startswith(obj.__name__ + ".")
                   for path in directives(text))
    return False


def _own_docstring(obj) -> str | None:
    doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
    # a dataclass without a docstring gets its signature as one
    return None if not doc or doc.startswith(f"{obj.__name__}(") else doc


def test_the_page_parses_into_directives():
    found = directives(API_PAGE.read_text())
    assert found["heterocc.sdk"] and "MirroredDevice" in found["heterocc.sdk"]
    assert found["heterocc.errors"] is None  # documented whole
    # every directive and member names something that exists
    assert documented_objects(API_PAGE.read_text())


@pytest.mark.parametrize("module_name", COVERED_MODULES)
def test_every_public_name_is_documented(module_name):
    module = importlib.import_module(module_name)
    text = API_PAGE.read_text()
    documented = documented_objects(text)
    missing = [name for name in public_names(module)
               if not is_documented(getattr(module, name), text, documented)]
    assert not missing, (f"public names of {module_name} missing from docs/api.md: "
                         f"{', '.join(missing)}; add each to a directive's members list "
                         "(where it is defined)")


def test_documented_classes_and_functions_have_docstrings():
    undocumented = sorted({f"{obj.__module__}.{obj.__qualname__}"
                           for obj in documented_objects(API_PAGE.read_text())
                           if (inspect.isclass(obj) or inspect.isfunction(obj))
                           and obj.__module__.startswith("heterocc")
                           and not _own_docstring(obj)})
    assert not undocumented, f"without a docstring: {', '.join(undocumented)}"


def test_a_name_added_without_docs_is_reported(monkeypatch):
    import heterocc.sdk as sdk

    def brand_new_helper():
        """Not on the page."""

    monkeypatch.setattr(sdk, "brand_new_helper", brand_new_helper, raising=False)
    monkeypatch.setattr(sdk, "__all__", [*sdk.__all__, "brand_new_helper"])
    with pytest.raises(AssertionError, match="of heterocc.sdk missing from docs/api.md: "
                                             "brand_new_helper;"):
        test_every_public_name_is_documented("heterocc.sdk")
