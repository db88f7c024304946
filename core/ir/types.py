"""Tensor types of the Graph IR: a static shape and a dtype name."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from onnx import helper

from ..errors import TypeInferenceError

#: dtypes the IR accepts, by NumPy name.
DTYPES = (
    "float16", "float32", "float64",
    "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
    "bool",
)
FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
#: narrow formats ONNX defines (bfloat16, float8, float4, int4, int2), as NumPy dtypes
#: from ml_dtypes (a dependency of onnx): storage and casts only, no arithmetic kernels
EXTENDED_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                   "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4",
                   "int2", "uint2")
#: ONNX string tensors are NumPy object arrays
STRING_DTYPE = "object"


def np_dtype(name: str) -> np.dtype:
    """The NumPy dtype of an IR dtype name (extended formats through ml_dtypes)."""
    if name in EXTENDED_DTYPES:
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def normalize_dtype(dtype) -> str:
    """The IR's name for ``dtype`` (a NumPy dtype, a type object or a name)."""
    if isinstance(dtype, str) and dtype in EXTENDED_DTYPES:
        return dtype
    name = np.dtype(dtype).name
    if name not in DTYPES and name not in EXTENDED_DTYPES and name != STRING_DTYPE:
        raise TypeInferenceError(f"dtype {name!r} is not supported "
                                 f"(supported: {', '.join(DTYPES)})")
    return name


@dataclass(frozen=True)
class TensorType:
    """The type of one tensor: a static shape (tuple of ints) and a dtype name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        if any(d < 0 for d in self.shape):
            raise TypeInferenceError(f"negative dimension in shape {self.shape}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.np_dtype.itemsize

    @property
    def np_dtype(self) -> np.dtype:
        return np_dtype(self.dtype)

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        """The type of a NumPy array."""
        return cls(tuple(array.shape), array.dtype.name)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def dtype_from_onnx(elem_type: int) -> str:
    """The IR dtype of an ONNX ``TensorProto`` element type (as used by Cast's ``to``)."""
    try:
        return normalize_dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise TypeInferenceError(f"ONNX element type {elem_type} is not supported") from None
