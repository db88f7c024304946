"""Maps the top-level folders into the single ``heterocc`` import namespace.

pyproject.toml cannot compute sub-package lists for a remapped folder, so the
mapping lives here: ``core/`` is ``heterocc``, ``sdk/`` is ``heterocc.sdk`` (the
interface targets are built on), ``targets/`` is ``heterocc.targets`` and ``accel_sim/``
is ``heterocc.accel_sim``.
"""

from setuptools import find_packages, setup

FOLDERS = {"heterocc": "core", "heterocc.sdk": "sdk", "heterocc.targets": "targets",
           "heterocc.accel_sim": "accel_sim"}

# Folders of data files read as package resources (jinja2's PackageLoader): Python sees
# them as namespace packages, so they are listed as packages with their files as data
# (setuptools warns that a data folder left out of ``packages`` would not be shipped).
DATA_PACKAGES = {"heterocc.targets.cuda.templates": ["*.j2"]}


def _packages_under(prefix: str, folder: str) -> list[str]:
    return [prefix] + [f"{prefix}.{sub}" for sub in find_packages(folder)]


setup(
    package_dir=dict(FOLDERS),
    packages=[pkg for prefix, folder in FOLDERS.items() for pkg in _packages_under(prefix, folder)]
    + list(DATA_PACKAGES),
    package_data=DATA_PACKAGES,
    include_package_data=True,
)
