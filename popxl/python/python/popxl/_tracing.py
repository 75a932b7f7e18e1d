"""Tracing Python functions and Modules into subgraphs (``Ir.create_graph``)."""

import inspect
from typing import Any, Dict, Tuple

from popxl import _native
from popxl.tensor import Tensor, TensorByRef, TensorSpec


def _input(arg: Any, name: str):
    if isinstance(arg, TensorByRef):
        t = arg.tensor
        return _native.graph_input(t.shape, t.dtype, t.name, by_ref=True)
    if isinstance(arg, Tensor):
        return _native.graph_input(arg.shape, arg.dtype, arg.name)
    if isinstance(arg, TensorSpec):
        return _native.graph_input(arg.shape, arg.dtype, name)
    return None


def _substitute(arg: Any, name: str):
    """A graph input for a Tensor / TensorSpec argument (also inside lists and tuples), else the argument."""
    t = _input(arg, name)
    if t is not None:
        return t
    if isinstance(arg, (list, tuple)) and any(isinstance(a, (Tensor, TensorSpec, TensorByRef)) for a in arg):
        return type(arg)(_substitute(a, f"{name}_{i}") for i, a in enumerate(arg))
    return arg


def create_graph(ir, fn, args: Tuple, kwargs: Dict):
    """Trace ``fn(*args, **kwargs)`` into a new subgraph of ``ir`` and return it."""
    from popxl.module import Module

    kwargs = kwargs or {}
    if isinstance(fn, Module):
        target = fn.build
        name = type(fn).__name__
    elif callable(fn):
        target = fn
        name = getattr(fn, "__name__", type(fn).__name__)
    else:
        raise TypeError(f"create_graph expects a function or a popxl.Module, not {type(fn).__name__}")
    try:
        sig = inspect.signature(target)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        if isinstance(e, TypeError) and "argument" in str(e):
            raise TypeError(f"create_graph: the arguments do not match {name}'s signature: {e}") from None
        bound = None
    graph = ir.create_empty_graph(name)
    with graph:
        if bound is not None:
            new_args = []
            new_kwargs = {}
            for pname, value in bound.arguments.items():
                kind = sig.parameters[pname].kind
                if kind == inspect.Parameter.VAR_POSITIONAL:
                    new_args.extend(_substitute(v, f"{pname}_{i}") for i, v in enumerate(value))
                elif kind == inspect.Parameter.VAR_KEYWORD:
                    new_kwargs.update({k: _substitute(v, k) for k, v in value.items()})
                elif kind == inspect.Parameter.KEYWORD_ONLY:
                    new_kwargs[pname] = _substitute(value, pname)
                else:
                    new_args.append(_substitute(value, pname))
        else:
            new_args = [_substitute(a, f"arg{i}") for i, a in enumerate(args)]
            new_kwargs = {k: _substitute(v, k) for k, v in kwargs.items()}
        outputs = target(*new_args, **new_kwargs)
        if outputs is None:
            outputs = []
        elif isinstance(outputs, Tensor):
            outputs = [outputs]
        for out in outputs:
            if not isinstance(out, Tensor):
                raise ValueError(f"{name} returned {type(out).__name__}: a graph function returns None, a Tensor or an iterable of Tensors")
            _native.graph_output(out)
    return graph
