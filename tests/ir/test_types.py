"""Tensor types of the Graph IR (heterocc.ir.types)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from heterocc.errors import TypeInferenceError
from heterocc.ir.types import TensorType, dtype_from_onnx, normalize_dtype, np_dtype


def test_a_type_normalizes_its_shape_and_dtype():
    t = TensorType([np.int64(2), 3], np.float32)
    assert t.shape == (2, 3) and isinstance(t.shape[0], int) and t.dtype == "float32"
    assert (t.ndim, t.size, t.nbytes) == (2, 6, 24)
    assert str(t) == "float32[2, 3]" and str(TensorType((), "bool")) == "bool[]"
    assert t == TensorType((2, 3), "float32") and hash(t) == hash(TensorType((2, 3), "float32"))


def test_of_an_array():
    assert TensorType.of(np.zeros((4, 1), np.uint8)) == TensorType((4, 1), "uint8")


def test_negative_dimensions_and_unsupported_dtypes_are_refused():
    with pytest.raises(TypeInferenceError, match="negative dimension"):
        TensorType((2, -1), "float32")
    with pytest.raises(TypeInferenceError, match="'complex64' is not supported"):
        TensorType((2,), "complex64")


def test_extended_formats_are_storage_dtypes_from_ml_dtypes():
    t = TensorType((4,), "bfloat16")
    assert t.np_dtype == np.dtype(ml_dtypes.bfloat16) and t.nbytes == 8
    assert np_dtype("int4") == np.dtype(ml_dtypes.int4)
    assert normalize_dtype(np.dtype(ml_dtypes.float8_e4m3fn)) == "float8_e4m3fn"
    assert normalize_dtype(object) == "object"  # ONNX strings


def test_onnx_element_types():
    assert dtype_from_onnx(TensorProto.FLOAT) == "float32"
    assert dtype_from_onnx(TensorProto.INT8) == "int8"
    assert dtype_from_onnx(TensorProto.BFLOAT16) == "bfloat16"
    with pytest.raises(TypeInferenceError, match="element type 9999"):
        dtype_from_onnx(9999)
