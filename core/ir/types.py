"""Tensor types of the Graph IR: a static shape and a dtype name."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def normalize_dtype(dtype) -> str:
    """The IR's name for ``dtype`` (a NumPy dtype, a type object or a name)."""
    name = np.dtype(dtype).name
    if name not in DTYPES:
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
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        """The type of a NumPy array."""
        return cls(tuple(array.shape), array.dtype.name)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


def dtype_from_onnx(elem_type: int) -> str:
    """The IR dtype of an ONNX ``TensorProto`` element type (as used by Cast's ``to``)."""
    from onnx import helper

    try:
        return normalize_dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        raise TypeInferenceError(f"ONNX element type {elem_type} is not supported") from None
