"""``popxl.ops.collectives``: operations across replicas."""

from popxl._native import (  # noqa: F401
    replica_sharded_slice, replicated_all_gather, replicated_all_reduce, replicated_all_reduce_,
    replicated_reduce_scatter, replicated_slice,
)
