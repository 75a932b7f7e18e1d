"""Where tensors live: ``TensorStorage``, ``ReplicatedTensorSharding``, ``TensorLocation``,
``TileSet`` and ``ExecutionContext`` (PopXL's ``popxl.tensorlocation``)."""

from enum import Enum

__all__ = ["TensorStorage", "ReplicatedTensorSharding", "TensorLocation", "TileSet", "ExecutionContext"]


class TensorStorage(Enum):
    """Enum type to specify whether to store tensors on-chip in tile memory, or in Streaming Memory."""

    OnChip = "OnChip"  #: Store the tensor in tile memory.
    OffChip = "OffChip"  #: Store the tensor in Streaming Memory.


class ReplicatedTensorSharding(Enum):
    """Enum type to specify whether to shard tensors over replicas."""

    On = "On"  #: Tensors will be sharded over replicas.
    Off = "Off"  #: Tensors will not be sharded over replicas.


class TileSet(Enum):
    """The tiles an op runs on (``Tensor.tile_set`` gives the names ``"compute"`` and ``"io"``)."""

    Compute = 0  #: The tiles that run compute.
    IO = 1  #: The tiles that run host and remote exchange (``popxl.io_tiles()``).
    Undefined = 2  #: Not set.


class ExecutionContext(Enum):
    """The part of a step an op runs in (PopART's ``ExecutionContext``)."""

    Normal = 0  #: The step's main program.
    AccumulateOuterFragment = 1  #: After the gradient accumulation loop.
    WeightsFromHostFragment = 2  #: The program writing the weights from the host.
    WeightsToHostFragment = 3  #: The program reading the weights to the host.
    OptimizerFromHostFragment = 4  #: The program writing optimizer values from the host.
    Subgraph = 5  #: A called graph.


class TensorLocation:
    """Class that describes the memory characteristics of one or multiple tensors."""

    def __init__(
        self,
        storage: TensorStorage = TensorStorage.OnChip,
        replicated_tensor_sharding: ReplicatedTensorSharding = ReplicatedTensorSharding.Off,
    ) -> None:
        if not isinstance(storage, TensorStorage):
            raise TypeError(f"storage must be a TensorStorage, not {storage!r}")
        if not isinstance(replicated_tensor_sharding, ReplicatedTensorSharding):
            raise TypeError(f"replicated_tensor_sharding must be a ReplicatedTensorSharding, not "
                            f"{replicated_tensor_sharding!r}")
        self._storage = storage
        self._replicated_tensor_sharding = replicated_tensor_sharding

    @property
    def storage(self) -> TensorStorage:
        return self._storage

    @property
    def replicated_tensor_sharding(self) -> ReplicatedTensorSharding:
        return self._replicated_tensor_sharding

    def __eq__(self, other):
        return isinstance(other, TensorLocation) and (self.storage, self.replicated_tensor_sharding) == (
            other.storage, other.replicated_tensor_sharding)

    def __hash__(self):
        return hash((self.storage, self.replicated_tensor_sharding))

    def __repr__(self):
        return f"TensorLocation(storage={self.storage}, replicated_tensor_sharding={self.replicated_tensor_sharding})"
