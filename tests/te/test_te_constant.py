"""Constant tables in tensor expressions (``te.constant_tensor``): read like any tensor,
lowered as an argument, their data passed by the caller."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.errors import CompileError
from heterocc.targets.llvm.module import build


def test_constant_tensor_copies_its_data_read_only():
    data = np.array([3, 1, 4], np.int64)
    table = te.constant_tensor(data, "table", "int32")
    data[0] = 99
    assert table.shape == (3,) and table.dtype == "int32"
    assert isinstance(table.op, te.ConstantOp) and isinstance(table.op, te.PlaceholderOp)
    assert table.op.data.tolist() == [3, 1, 4] and not table.op.data.flags.writeable


def test_constant_tensors_are_found_through_computes_in_first_read_order():
    x = te.placeholder((4, 3), "int32", "x")
    first = te.constant_tensor(np.arange(3, dtype=np.int32), "first")
    second = te.constant_tensor(np.arange(4, dtype=np.int32), "second")
    scaled = te.compute((4, 3), lambda i, j: x[i, j] * first[j], name="scaled")
    shifted = te.compute((4, 3), lambda i, j: scaled[i, j] + second[i] + first[j], name="out")
    assert te.constant_tensors([shifted]) == [first, second]
    assert te.constant_tensors([scaled]) == [first]


def test_a_table_lowers_to_a_parameter_and_reads_per_row():
    x = te.placeholder((5, 8), "int32", "x")
    table = te.constant_tensor(np.array([7, -2, 0, 5, 11], np.int32), "scale")
    y = te.compute((5, 8), lambda i, j: x[i, j] * table[i], name="y")
    schedule = te.create_schedule(y)
    schedule[y].vectorize(y.op.axis[1])
    with pytest.raises(CompileError, match="constant tensor 'scale'.*constant_tensors"):
        te.lower(schedule, [x, y])
    func = te.lower(schedule, [x, *te.constant_tensors([y]), y], name="scaled_rows")
    data = np.arange(40, dtype=np.int32).reshape(5, 8)
    out = np.zeros((5, 8), np.int32)
    build(func)(data, table.op.data, out)
    np.testing.assert_array_equal(out, data * table.op.data[:, None])
