"""The memory budget: how large a tensor (and a run's planned intermediates) may be.

Sizes are checked against it before anything is allocated: the executor checks every
tensor of a graph, and the graph's memory plan, when it is made (at compile time and
when an artifact loads), so a model whose shapes ask for 40 GB fails at once with a
ResourceError naming the tensor, its size and the budget rather than in NumPy's
allocator (or the kernel's OOM killer) later.

The budget is, first match wins: the value set by :func:`set_memory_budget` (or inside
``with memory_budget(n):``), the environment variable ``HETEROCC_MEMORY_BUDGET`` (bytes,
or with a suffix K, M, G, T: powers of 1024), else the smaller of this machine's
physical memory and the process's address-space limit (``ulimit -v``).
"""

from __future__ import annotations

import contextlib
import os
import resource

import numpy as np

from ..errors import InputError, ResourceError

ENVIRONMENT = "HETEROCC_MEMORY_BUDGET"
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_set: int | None = None


def parse_size(text: str) -> int:
    """Bytes from ``text``: an integer with an optional K, M, G or T suffix (and B)."""
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    number, suffix = cleaned, ""
    if cleaned and cleaned[-1] in _SUFFIXES:
        number, suffix = cleaned[:-1], cleaned[-1]
    try:
        value = float(number) * _SUFFIXES[suffix]
    except ValueError:
        raise InputError(f"memory budget {text!r}: expected bytes such as 8G, 512M or "
                         "1000000") from None
    if not value > 0:
        raise InputError(f"memory budget {text!r} must be positive")
    return int(value)


def machine_memory() -> int:
    """Physical memory, capped by the process's address-space limit where one is set."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        physical = 1 << 40
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return min(physical, soft) if soft != resource.RLIM_INFINITY else physical


def current_budget() -> int:
    """The memory budget in bytes now (see the module docstring)."""
    if _set is not None:
        return _set
    text = os.environ.get(ENVIRONMENT)
    return parse_size(text) if text else machine_memory()


def set_memory_budget(nbytes: int | str | None) -> None:
    """Set the budget for this process (bytes, or a size such as ``"8G"``; None: back
    to the environment's or the machine's)."""
    global _set
    _set = None if nbytes is None else (parse_size(nbytes) if isinstance(nbytes, str)
                                        else int(nbytes))


@contextlib.contextmanager
def memory_budget(nbytes: int | str | None):
    """The budget set to ``nbytes`` inside the ``with`` block."""
    global _set
    before = _set
    set_memory_budget(nbytes)
    try:
        yield
    finally:
        _set = before


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes:,} bytes ({nbytes / scale:.1f} {unit})"
    return f"{nbytes:,} bytes"


def check_tensor(name: str, shape, dtype, what: str = "tensor",
                 budget: int | None = None) -> None:
    """ResourceError unless a ``dtype`` tensor of ``shape`` fits the budget (sizes in
    Python integers: no int64 overflow)."""
    budget = current_budget() if budget is None else budget
    count = 1
    for d in shape:
        count *= int(d)
    nbytes = count * np.dtype(dtype).itemsize
    if nbytes > budget:
        raise ResourceError(
            f"{what} {name!r} of shape {tuple(int(d) for d in shape)} ({np.dtype(dtype).name}) "
            f"needs {_size(nbytes)}, over the memory budget of {_size(budget)}; set "
            f"{ENVIRONMENT} (or heterocc.runtime.budget.set_memory_budget) if the machine "
            "that runs it has that much")


def check_total(nbytes: int, what: str, budget: int | None = None) -> None:
    """ResourceError unless ``nbytes`` (``what``: what they are) fit the budget."""
    budget = current_budget() if budget is None else budget
    if nbytes > budget:
        raise ResourceError(f"{what} need {_size(nbytes)}, over the memory budget of "
                            f"{_size(budget)}; set {ENVIRONMENT} if the machine that runs "
                            "it has that much")
