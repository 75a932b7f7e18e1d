"""``popxl.Tensor`` (implemented natively), ``TensorSpec`` and ``TensorByRef``."""

from typing import Iterable, NamedTuple, Optional, Tuple

from popxl._native import Tensor, constant, graph_input, graph_output, variable
from popxl.dtypes import dtype

__all__ = ["Tensor", "TensorSpec", "TensorByRef", "variable", "constant", "graph_input", "graph_output"]


class TensorSpec(NamedTuple):
    """A shape and dtype: describes a tensor without creating one (``create_graph`` arguments)."""

    shape: Tuple[int, ...]
    dtype: dtype
    meta_shape: Tuple[int, ...] = ()

    def to_dict(self):
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}


class TensorByRef:
    """A ``create_graph`` argument whose graph input is passed by reference."""

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor
