"""``popxl.transforms``: automatic differentiation and exchange merging."""

from popxl._native import ExpectedConnection, GradGraphInfo, autodiff, merge_exchange


class ExpectedConnectionType:
    """Kinds of gradient graph connection (``ExpectedConnection.connection_type``)."""

    Fwd = "Fwd"
    FwdGrad = "FwdGrad"


__all__ = ["autodiff", "GradGraphInfo", "ExpectedConnection", "ExpectedConnectionType", "merge_exchange"]
