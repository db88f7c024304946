"""Matching the inputs a user passes to a model's declared inputs."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass
class InputSpec:
    """A model input as the user sees it: name, dtype and (possibly symbolic) shape."""

    name: str
    dtype: str
    shape: tuple

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, d: dict) -> InputSpec:
        return cls(d["name"], d["dtype"], tuple(d["shape"]))


@functools.cache
def _dtype(name: str) -> np.dtype | None:
    try:
        return np.dtype(name)
    except TypeError:  # a type NumPy does not know by that name
        return None


def is_dtype(array: np.ndarray, name: str) -> bool:
    """Whether ``array``'s dtype is called ``name`` (``dtype.name``, which takes about a
    microsecond, is asked only when the dtype is not NumPy's of that name)."""
    return array.dtype == _dtype(name) or array.dtype.name == name


def native_order(array: np.ndarray) -> np.ndarray:
    """``array`` with its elements in this machine's byte order: a big-endian array on a
    little-endian host is converted (a copy), since kernels read the bytes as native."""
    if array.dtype.isnative or array.dtype.byteorder == "|":
        return array
    return array.astype(array.dtype.newbyteorder("="))


def name_inputs(specs: Sequence[InputSpec],
                inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | np.ndarray | None,
                named: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs by name, checked for unknown, missing, mistyped and misshapen entries, each
    in this machine's byte order (:func:`native_order`).

    ``inputs`` is a dict by name or a list in the model's input order;
    ``named`` are keyword inputs.
    """
    names = [s.name for s in specs]
    if inputs is None:
        given = dict(named)
    elif isinstance(inputs, Mapping):
        given = {**inputs, **named}
    else:
        seq = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
        if len(seq) > len(names):
            raise InputError(f"{len(seq)} inputs given, the model takes {len(names)} "
                             f"({', '.join(names)})")
        given = dict(zip(names, seq))
        given.update(named)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise InputError(f"unknown input(s) {', '.join(map(repr, unknown))}; the model's "
                         f"inputs are {', '.join(names)}")
    missing = [n for n in names if n not in given or given[n] is None]
    if missing:
        raise InputError(f"missing input(s): {', '.join(missing)}")
    out = {}
    for spec in specs:
        arr = np.asarray(given[spec.name])
        if not is_dtype(arr, spec.dtype):
            raise InputError(f"input {spec.name!r}: dtype {arr.dtype.name}, the model "
                             f"expects {spec.dtype}")
        if len(spec.shape) != arr.ndim or any(
                isinstance(d, int) and d != a for d, a in zip(spec.shape, arr.shape)):
            raise InputError(f"input {spec.name!r}: shape {tuple(arr.shape)}, the model "
                             f"expects {spec.shape}")
        out[spec.name] = native_order(arr)
    return out


def parse_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``--shape`` values (``NAME=D0,D1,...``, or ``NAME=D0xD1``) as a shapes dict."""
    shapes = {}
    for item in items or []:
        name, _, dims = item.partition("=")
        if not dims:
            raise InputError(f"--shape {item!r}: expected NAME=D0,D1,...")
        try:
            shapes[name] = tuple(int(d) for d in dims.replace("x", ",").split(",") if d)
        except ValueError:
            raise InputError(f"--shape {item!r}: dimensions must be integers") from None
    return shapes


def load_samples(path: str) -> list[dict[str, np.ndarray]]:
    """Sample inputs (e.g. for calibration) from ``path``: a directory of ``.npz``
    files, one sample each (keys: input names), or one ``.npz`` file whose arrays
    (keys: input names) stack the samples along a new leading axis."""
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if f.endswith(".npz"))
        if not files:
            raise InputError(f"{path!r} holds no .npz files (one sample each, arrays by input "
                             "name)")
        return [_load_npz(os.path.join(path, f)) for f in files]
    stacked = _load_npz(path)
    counts = {name: len(array) if array.ndim else 0 for name, array in stacked.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        raise InputError(f"{path!r}: the arrays must stack the same number of samples along "
                         f"their first axis; they have {counts}")
    count = next(iter(counts.values()))
    return [{name: array[i] for name, array in stacked.items()} for i in range(count)]


def _load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load samples from {path!r}: {exc}") from None
    if not arrays:
        raise InputError(f"{path!r} holds no arrays")
    return arrays


def load_input_files(items: Sequence[str] | None,
                     npz: str | None = None) -> dict[str, np.ndarray]:
    """Arrays by input name from ``--input NAME=FILE.npy`` items (repeatable) and
    ``--inputs FILE.npz`` (arrays by input name, as tvmc takes them); a file that does
    not load is an InputError naming it."""
    arrays = {}
    if npz is not None:
        try:
            with np.load(npz, allow_pickle=False) as data:
                arrays.update({name: data[name] for name in data.files})
        except (OSError, ValueError) as exc:
            raise InputError(f"--inputs: cannot load {npz!r}: {exc}") from None
    for item in items or []:
        name, _, path = item.partition("=")
        if not name or not path:
            raise InputError(f"--input {item!r}: expected NAME=FILE.npy")
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"--input {name}: cannot load {path!r}: {exc}") from None
    return arrays
