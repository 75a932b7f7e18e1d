"""``popxl.ops.collectives``: operations across replicas."""

from enum import Enum

from popxl._native import (  # noqa: F401
    all_reduce, all_reduce_identical_grad_inputs, all_reduce_identical_inputs, replica_sharded_slice,
    replicated_all_gather, replicated_all_reduce, replicated_all_reduce_, replicated_reduce_scatter, replicated_slice,
)

__all__ = [
    "all_reduce", "all_reduce_identical_inputs", "all_reduce_identical_grad_inputs", "CommGroup", "CommGroupType",
    "replicated_all_gather", "replicated_all_reduce", "replicated_all_reduce_", "replicated_reduce_scatter",
    "replica_sharded_slice", "replicated_slice",
]


class CommGroupType(Enum):
    """How replicas are grouped for a collective (PopART's ``CommGroupType``)."""

    All = 0  #: All replicas in one group.
    Consecutive = 1  #: Groups of ``replicaGroupSize`` consecutive replicas.
    Orthogonal = 2  #: Groups of replicas ``replicaGroupSize`` apart (one per consecutive group).
    Ungrouped = 3  #: Each replica alone.


class CommGroup:
    """A replica group of a collective (PopART's ``CommGroup``): a type and a group size.

    The ops here take a ``popxl.ReplicaGrouping`` (``ir.replica_grouping``); ``to_replica_grouping``
    converts.
    """

    def __init__(self, type: CommGroupType = CommGroupType.All, replicaGroupSize: int = 0) -> None:
        if not isinstance(type, CommGroupType):
            raise TypeError(f"type must be a CommGroupType, not {type!r}")
        if int(replicaGroupSize) < 0:
            raise ValueError(f"replicaGroupSize must be >= 0, not {replicaGroupSize}")
        self.type = type
        self.replicaGroupSize = int(replicaGroupSize)

    def to_replica_grouping(self, ir):
        """The ``ReplicaGrouping`` of ``ir``'s replicas this group describes."""
        n = ir.replication_factor
        size = self.replicaGroupSize
        if self.type == CommGroupType.All:
            return ir.replica_grouping(stride=1, group_size=n)
        if self.type == CommGroupType.Ungrouped:
            return ir.replica_grouping(stride=1, group_size=1)
        if size < 1 or n % size:
            raise ValueError(f"replicaGroupSize {size} does not divide the replication factor {n}")
        if self.type == CommGroupType.Consecutive:
            return ir.replica_grouping(stride=1, group_size=size)
        return ir.replica_grouping(stride=size, group_size=n // size)

    def __eq__(self, other):
        return isinstance(other, CommGroup) and (self.type, self.replicaGroupSize) == (
            other.type, other.replicaGroupSize)

    def __hash__(self):
        return hash((self.type, self.replicaGroupSize))

    def __repr__(self):
        return f"CommGroup(type={self.type}, replicaGroupSize={self.replicaGroupSize})"
