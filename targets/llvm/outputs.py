"""Output arrays of a CPU kernel (or a native run of kernels) in one thread, recycled
across that thread's calls."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

#: references to an array that ``OutputArrays.recycled`` itself holds while counting: its
#: list slot and ``sys.getrefcount``'s argument.
_OWN_REFERENCES = 2


@dataclass
class OutputArrays:
    """Output arrays of a kernel in one thread, recycled across that thread's calls: an
    array from the last call is written again once nothing else refers to it (the
    executor dropped an intermediate after its last reader). Fresh arrays cost page
    faults on every call, which on a loaded machine can take longer than the kernel
    itself. The arrays' data addresses are kept with them: reading one from NumPy costs
    about a microsecond.

    One per thread (``LLVMKernel`` keeps them in a ``threading.local``): the reference
    count says nothing about another thread that is about to claim the same arrays, so
    two threads sharing one set would write each other's results."""

    specs: list[tuple[tuple[int, ...], str]]
    last: list[np.ndarray] = field(default_factory=list)
    addresses: tuple[int, ...] = ()

    def recycled(self) -> tuple[list[np.ndarray], tuple[int, ...]]:
        """The arrays to write this call and their data addresses."""
        last = self.last
        if last:
            getrefcount = sys.getrefcount
            for array in last:
                if getrefcount(array) > _OWN_REFERENCES + 1:  # + the loop's variable
                    break
            else:
                return last.copy(), self.addresses
        arrays = [np.empty(shape, dtype) for shape, dtype in self.specs]
        self.addresses = tuple(a.ctypes.data for a in arrays)
        self.last = arrays
        return arrays.copy(), self.addresses
