"""mkdocs hook: lays out the ``heterocc`` namespace for the API-reference collector.

setup.py maps ``core/`` to ``heterocc`` and ``sdk/``, ``targets/`` and ``accel_sim/`` into it;
the collector (griffe) reads sources from folders named like the packages, does not
follow that mapping, and does not descend into linked folders. Before the build, this
hook mirrors the mapped folders into ``build/api-src/heterocc`` (real folders, each
Python file a symbolic link to its source) and mkdocs.yml points the collector there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[2]
#: package -> folder, as in setup.py
MAPPING = {"heterocc": "core", "heterocc.sdk": "sdk", "heterocc.targets": "targets",
           "heterocc.accel_sim": "accel_sim"}
LAYOUT_ROOT = ROOT / "build" / "api-src"


def _mirror(source: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.is_dir() and (entry / "__init__.py").exists():
            _mirror(entry, destination / entry.name)
        elif entry.suffix == ".py":
            (destination / entry.name).symlink_to(entry)


def assemble_layout() -> Path:
    """Recreate the mirrored ``heterocc`` package under ``build/api-src``; returns
    that folder (the collector's search path)."""
    shutil.rmtree(LAYOUT_ROOT, ignore_errors=True)
    for package, folder in MAPPING.items():
        _mirror(ROOT / folder, LAYOUT_ROOT.joinpath(*package.split(".")))
    return LAYOUT_ROOT


@event_priority(100)  # before mkdocstrings reads its search paths (they must exist then)
def on_config(config, **kwargs):
    assemble_layout()
    return config
