"""PopXL's Python API on the popart-rs crates: build graphs, differentiate them and run them on ``cpu``.

Programs written for Graphcore's PopXL run unchanged where they use what this package provides.
"""

from popxl import dtypes, errors, ops, transforms  # noqa: F401
from popxl._native import (  # noqa: F401
    DeviceToHostStream, Graph, HostToDeviceStream, Ir, Session, d2h_stream, gcg, gir, gmg, h2d_stream,
    RemoteBuffer, ReplicaGrouping, in_sequence, io_tiles, ipu, name_scope, remote_buffer, remote_replica_sharded_variable, remote_variable,
    replica_sharded_buffer, replica_sharded_variable,
)
from popxl.dtypes import (  # noqa: F401
    bool, double, dtype, float, float16, float32, float64, half, int8, int16, int32, int64, uint8, uint16,
    uint32, uint64,
)
from popxl.dtypes import float8_143, float8_152  # noqa: F401
from popxl.module import Module  # noqa: F401
from popxl.tensor import (  # noqa: F401
    Tensor, TensorByRef, TensorSpec, constant, graph_input, graph_output, variable,
)

__all__ = [
    "Ir", "Graph", "Tensor", "TensorSpec", "TensorByRef", "Module", "Session", "HostToDeviceStream",
    "DeviceToHostStream", "variable", "constant", "graph_input", "graph_output", "h2d_stream", "d2h_stream",
    "in_sequence", "name_scope", "RemoteBuffer", "ReplicaGrouping", "remote_buffer", "remote_variable", "remote_replica_sharded_variable", "replica_sharded_buffer",
    "replica_sharded_variable", "ipu", "gcg", "gmg", "gir", "ops", "transforms", "dtypes", "errors", "dtype",
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
    "float64", "half", "float", "double",
]

get_current_graph = gcg
get_main_graph = gmg
get_ir = gir
__all__ += ["io_tiles", "get_current_graph", "get_main_graph", "get_ir"]

from popxl._native import Op, create_seeds  # noqa: F401,E402
from popxl.tensorlocation import (  # noqa: F401,E402
    ExecutionContext, ReplicatedTensorSharding, TensorLocation, TensorStorage, TileSet,
)
__all__ += ["create_seeds", "Op", "TensorLocation", "TensorStorage", "ReplicatedTensorSharding", "ExecutionContext",
            "TileSet"]
__all__ += ["float8_143", "float8_152", "fp8_utils"]
from popxl import fp8_utils  # noqa: E402,F401
