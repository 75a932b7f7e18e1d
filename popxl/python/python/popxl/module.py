"""``popxl.Module``: a callable whose ``build`` method ``Ir.create_graph`` traces."""

__all__ = ["Module"]


class Module:
    """Subclass and define ``build``; ``ir.create_graph(module, *args)`` traces it into a graph.

    Graph inputs made with ``popxl.graph_input`` inside ``build`` are usually kept on ``self``
    to connect them at call sites (``ops.call(graph, x, inputs_dict={self.w: w})``).
    """

    def build(self, *args, **kwargs):
        raise NotImplementedError("Your popxl.Module must define `build`")

    def __call__(self, *args, **kwargs):
        return self.build(*args, **kwargs)
