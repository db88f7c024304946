"""LLVMKernel's calls: outputs recycled once nobody holds them (their addresses kept
with them), one kernel's output read by the next, and an output the caller took over
and resized read at its new address."""

from __future__ import annotations

import numpy as np

from heterocc import te
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.target import LLVMKernel

N = 64


def _kernel(name, fcompute):
    A = te.placeholder((N,), "float32", "A")
    B = te.compute((N,), lambda i: fcompute(A[i]), name="B")
    s = te.create_schedule(B)
    s[B].vectorize(s[B].split(s[B].op.axis[0], factor=8)[1])
    module = hllvm.build(te.lower(s, [A, B], name=name))
    return LLVMKernel(name, module[name], [], [((N,), "float32")])


def test_outputs_are_recycled_only_when_nobody_holds_them():
    double = _kernel("double", lambda x: x * 2.0)
    x = np.arange(N, dtype=np.float32)
    (first,) = double([x])
    address = first.ctypes.data
    del first
    (again,) = double([x])
    assert again.ctypes.data == address  # written again: nobody held it
    (other,) = double([x + 1])
    assert other is not again  # "again" is held: a fresh array
    np.testing.assert_array_equal(again, x * 2)
    np.testing.assert_array_equal(other, (x + 1) * 2)


def test_an_input_made_by_a_kernel_is_read_by_the_next():
    double = _kernel("double2", lambda x: x * 2.0)
    plus = _kernel("plus", lambda x: x + 1.0)
    x = np.arange(N, dtype=np.float32)
    for _ in range(3):  # the second and third calls write recycled arrays
        (y,) = double([x])
        (z,) = plus([y])
        np.testing.assert_array_equal(z, x * 2 + 1)
        del y, z


def test_an_output_the_caller_took_over_and_resized_is_not_trusted():
    double = _kernel("double3", lambda x: x * 2.0)
    plus = _kernel("plus3", lambda x: x + 1.0)
    x = np.arange(N, dtype=np.float32)
    (held,) = double([x])
    (fresh,) = double([x])  # "held" is the caller's now; the kernel made another
    assert fresh is not held
    held.resize(16 * N, refcheck=False)  # new memory for the same object
    held.resize(N, refcheck=False)
    held[:] = 5.0
    np.testing.assert_array_equal(plus([held])[0], np.full(N, 6.0, np.float32))
