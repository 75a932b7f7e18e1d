"""``popxl.transforms``: automatic differentiation and exchange merging."""

from contextlib import contextmanager

from popxl._native import (
    ExpectedConnection, GradGraphInfo, autodiff, decompose_sum, gcg, in_sequence, io_tiles,
)
from popxl._native import merge_exchange as _merge_exchange_now


class ExpectedConnectionType:
    """Kinds of gradient graph connection (``ExpectedConnection.connection_type``)."""

    Fwd = "Fwd"
    FwdGrad = "FwdGrad"


#: The op types ``merge_exchange`` merges.
_EXCHANGE_OP_TYPES = frozenset(["HostLoad", "HostStore", "RemoteLoad", "RemoteLoadInplace", "RemoteStore"])


@contextmanager
def merge_exchange():
    """Combine RemoteLoad/RemoteStore/HostLoad/HostStore operations so that they exchange together.

    Used as a context manager, as in PopXL::

        with popxl.transforms.merge_exchange():
            ops.host_load(...)
            ops.host_store(...)

    When the context closes, the host and remote transfers of the current graph are made
    adjacent in its schedule where the data dependencies allow (topological constraints
    only: every value is unchanged), so the device pays one exchange for them. PopXL fuses
    the transfers created inside the context into one ``MergeExchange`` op; here the
    transfers stay separate ops, ordered together, and transfers of the graph created
    before the context may join them. Combine with ``popxl.in_sequence(False)`` so that no
    constraint between the transfers prevents the merge.
    """
    yield
    _merge_exchange_now()


@contextmanager
def io_tile_exchange(verify_overlap: bool = True):
    """Combine io_tiles, merge_exchange and in_sequence(False).

    The ops created inside run on the IO tiles without topological constraints between
    them; when the context closes, ``merge_exchange()`` merges the current graph's host
    and remote transfers.

    Args:
        verify_overlap (bool, optional): Verify only one Operation remains after the context closes
            (the merged exchange: every op created inside, ``init`` aside, must be a host or
            remote transfer). This is an important requirement for overlapping IO and Compute.
            Defaults to True.

    Raises:
        RuntimeError: If more than one Op remains after io_tile_exchange.
    """
    graph = gcg()
    added = []

    def hook(op):
        if op.op_type != "Init":
            added.append(op)

    handle = graph.register_op_created_hook(hook)
    try:
        with io_tiles(), in_sequence(False):
            yield
    finally:
        graph.remove_op_created_hook(handle)
    _merge_exchange_now()
    if verify_overlap:
        alive = [op for op in added if op.is_alive()]
        compute = [op for op in alive if op.op_type not in _EXCHANGE_OP_TYPES]
        exchanges = [op for op in alive if op.op_type in _EXCHANGE_OP_TYPES]
        if len(compute) + (1 if exchanges else 0) > 1:
            ops_debug = "\n   ".join(f"{op.name} ({op.op_type})" for op in compute + exchanges)
            raise RuntimeError(
                "More than one Op remained after `io_tile_exchange`. "
                "This will prevent overlap with following compute. Remaining Ops:"
                f"\n   {ops_debug}"
            )


__all__ = ["autodiff", "GradGraphInfo", "ExpectedConnection", "ExpectedConnectionType", "merge_exchange",
           "io_tile_exchange", "decompose_sum"]
