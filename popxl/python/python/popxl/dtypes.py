"""PopXL's data types: ``popxl.float32``, ``popxl.int32``... with their numpy equivalents."""

import builtins
from typing import Any

import numpy as np

__all__ = [
    "dtype", "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "half", "float", "double",
]
__all__ += ["float8_143", "float8_152", "np_dtype_float8_143", "np_dtype_float8_152"]


class dtype:
    """A tensor data type. Use the module's instances (``popxl.float32``); not constructible."""

    _by_name: dict = {}
    _by_numpy: dict = {}

    def __init__(self) -> None:
        raise TypeError("popxl.dtype cannot be constructed; use popxl.float32, popxl.int32, ...")

    @classmethod
    def _make(cls, name, is_int, is_floating_point, is_signed, np_name, py_type=None):
        d = object.__new__(cls)
        d._popxl_name = name
        d._is_int = is_int
        d._is_floating_point = is_floating_point
        d._is_signed = is_signed
        d._np = np.dtype(np_name)
        cls._by_name[name] = d
        cls._by_numpy[d._np] = d
        if py_type is not None:
            cls._by_numpy[py_type] = d
        return d

    @property
    def name(self) -> str:
        return self._popxl_name

    @property
    def is_complex(self) -> builtins.bool:
        return False

    @property
    def is_int(self) -> builtins.bool:
        return self._is_int

    @property
    def is_floating_point(self) -> builtins.bool:
        return self._is_floating_point

    @property
    def is_signed(self) -> builtins.bool:
        return self._is_signed

    def as_numpy(self) -> np.dtype:
        """The numpy dtype of the same type."""
        return self._np

    @classmethod
    def from_name(cls, name: str) -> "dtype":
        """The dtype called ``name`` (``"float32"``, ``"half"``...)."""
        aliases = {"half": "float16", "float": "float32", "double": "float64"}
        try:
            return cls._by_name[aliases.get(name, name)]
        except KeyError:
            raise ValueError(f"dtype {name} does not exist.") from None

    @classmethod
    def as_dtype(cls, type_value: Any) -> "dtype":
        """The dtype of a popxl dtype, a numpy dtype or type, a Python type or a name."""
        if isinstance(type_value, dtype):
            return type_value
        if isinstance(type_value, str):
            return cls.from_name(type_value)
        if isinstance(type_value, type) and type_value in (builtins.bool, builtins.int, builtins.float):
            return {builtins.bool: bool, builtins.int: int64, builtins.float: float32}[type_value]
        try:
            return cls._by_numpy[np.dtype(type_value)]
        except (KeyError, TypeError):
            raise ValueError(f"There is not a popxl dtype that corresponds to {type_value!r}") from None

    def __repr__(self) -> str:
        return f"popxl.dtypes.{self._popxl_name}"

    def __reduce__(self):
        return (dtype.from_name, (self._popxl_name,))


bool = dtype._make("bool", False, False, False, "bool", builtins.bool)
int8 = dtype._make("int8", True, False, True, "int8")
int16 = dtype._make("int16", True, False, True, "int16")
int32 = dtype._make("int32", True, False, True, "int32")
int64 = dtype._make("int64", True, False, True, "int64")
uint8 = dtype._make("uint8", True, False, False, "uint8")
uint16 = dtype._make("uint16", True, False, False, "uint16")
uint32 = dtype._make("uint32", True, False, False, "uint32")
uint64 = dtype._make("uint64", True, False, False, "uint64")
float16 = dtype._make("float16", False, True, True, "float16")
float32 = dtype._make("float32", False, True, True, "float32")
float64 = dtype._make("float64", False, True, True, "float64")
half = float16
float = float32
double = float64

# Float8 (PopXL): numpy has no float8, so host data is the one-byte codes under a
# structured dtype (``host_pow2scale_cast_to_fp8`` makes such arrays).
np_dtype_float8_143 = np.dtype([("float8_143", "u1")])
np_dtype_float8_152 = np.dtype([("float8_152", "u1")])
float8_143 = dtype._make("float8_143", False, True, True, np_dtype_float8_143)
float8_152 = dtype._make("float8_152", False, True, True, np_dtype_float8_152)
