"""Write ``python/popxl/_native.pyi``, the type stubs of the native module, from the installed module.

Run after ``pip install ./popxl/python`` whenever a native function or class is added::

    python popxl/python/stubgen.py

Signatures come from PyO3's ``__text_signature__``; parameter and return types from the tables
below (by parameter name, and by function for returns); the first line of each docstring is kept.
``tests/test_ops_more.py::test_stubs_are_installed`` fails when a public native name has no stub.
"""

import inspect
import os
import sys

import popxl._native as native

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "python", "popxl", "_native.pyi")

TENSOR = {
    "t", "lhs", "X", "x", "indices", "values", "weight", "scale", "bias", "mean", "var", "condition", "seed_tensor",
    "seed_t", "data", "rois", "batch_index", "acc_first_order", "acc_second_order", "t_update", "index",
    "num_classes", "cond", "probs", "labels", "parent_tensor", "graph_tensor", "remote_buffer_t",
}
OPT_TENSOR = {"initial_values", "time_step", "W", "r1", "r2", "offset_t"}
TENSOR_LIKE = {"rhs", "Y"}
FACTOR = {"f", "a", "b", "weight_decay", "beta1", "beta2", "epsilon", "learning_rate", "max_weight_norm", "step",
          "loss_grad"}
INTS = {"stride", "padding", "dilation", "out_pads", "in_dilation", "kernel_size", "output_padding", "output_shape",
        "strides", "axes", "sizes", "permutation", "start", "stop", "axis_list", "assignment", "ipus", "shape",
        "meta_shape", "levels", "enable_conv_dithering"}
TYPES = {
    "graph": "Graph", "then_branch": "Graph", "else_branch": "Graph", "fn_": "Callable[..., Any]",
    "dtype": "Any", "data_type": "Any", "output_type": "Any", "partials_type": "Any",
    "ts": "Sequence[Tensor]", "name": "str", "output_name": "str", "title": "str", "op": "str",
    "reduction": "str", "mode": "str", "pad_type": "str", "auto_pad": "str", "nearest_mode": "str",
    "coordinate_transformation_mode": "str", "retrieval_mode": "str", "check": "str", "tensor_id": "str",
    "replica_grouping": "ReplicaGrouping", "group": "ReplicaGrouping", "h2d_stream": "HostToDeviceStream",
    "d2h_stream": "DeviceToHostStream", "scale_factor": "Sequence[float]", "save_dir": "Union[str, os.PathLike]",
    "available_memory_proportions": "Sequence[float]", "partials_types": "Sequence[str]", "splits": "Union[int, Sequence[int]]",
    "output_size": "Tuple[int, int]", "inputs_dict": "Mapping[Tensor, Any]", "then_inputs_dict": "Mapping[Tensor, Tensor]",
    "else_inputs_dict": "Mapping[Tensor, Tensor]", "then_inputs": "Sequence[Tensor]", "else_inputs": "Sequence[Tensor]",
    "inputs": "Any", "key": "Any", "other": "Any", "value": "Any", "device_type": "str", "handle": "int",
    "buffer": "RemoteBuffer", "fwd_call_info": "CallSiteInfo", "grad_call_info": "CallSiteInfo",
    "remote_buffer": "RemoteBuffer", "tensor": "Tensor", "tensors": "Any", "ir": "Ir",
    "grads_provided": "Sequence[Tensor]", "grads_required": "Sequence[Tensor]",
    "called_graphs_grad_info": "Mapping[Graph, GradGraphInfo]", "enabled": "Union[bool, str]",
    "ignore_index": "int", "axis_size": "int", "ipu": "int",
}
#: Types of a parameter of one function or method, where its name means something else elsewhere.
PARAM_TYPES = {
    ("write_variable_data", "data"): "Any", ("run", "inputs"): "Mapping[HostToDeviceStream, Any]",
    ("run_with_outputs", "inputs"): "Mapping[HostToDeviceStream, Any]",
    ("run_with_outputs", "outputs"): "Mapping[DeviceToHostStream, np.ndarray]",
    ("write_variables_data", "tensors"): "Mapping[Tensor, Any]", ("get_tensors_data", "tensors"): "Sequence[Tensor]",
    ("conditional", "inputs"): "Sequence[Tensor]",
}
INT_NAMES = {"axis", "dim", "k", "groups", "group_size", "num_groups", "repeat_count", "destination", "source",
             "n", "idx", "stride", "seed", "offset", "batches_per_step", "gradient_accumulation_factor",
             "replicas", "entries", "sampling_ratio", "replication"}
FLOAT_NAMES = {"eps", "momentum", "p", "ratio", "low", "high", "std", "spatial_scale", "increment", "modulus",
               "min", "max", "available_memory_proportion"}
BOOL_NAMES = {"keepdims", "keepdim", "largest", "sorted", "zero_OOR", "no_overlap", "log_prob", "downcast",
              "by_ref", "print_self", "print_gradient", "absolute_of_input", "unbiased_variance", "check_inputs",
              "enable_index_broadcast", "configure_output_for_replicated_tensor_sharding", "then_branch_",
              "verify_overlap"}

RETURNS = {
    "split": "List[Tensor]", "split_random_seed": "List[Tensor]", "topk": "Tuple[Tensor, Tensor]",
    "nll_loss_with_softmax_grad": "Tuple[Tensor, Tensor]", "batch_norm": "Tuple[Tensor, Tensor, Tensor]",
    "call": "Tuple[Tensor, ...]", "repeat": "Tuple[Tensor, ...]", "conditional": "Tuple[Tensor, ...]",
    "call_with_info": "CallSiteInfo", "repeat_with_info": "CallSiteInfo",
    "conditional_with_info": "ConditionalSiteInfo", "host_store": "None", "graph_output": "None",
    "all_reduce": "List[Tensor]", "all_reduce_identical_inputs": "List[Tensor]",
    "all_reduce_identical_grad_inputs": "List[Tensor]", "create_seeds": "np.ndarray", "gcg": "Graph",
    "gmg": "Graph", "gir": "Ir", "h2d_stream": "HostToDeviceStream", "d2h_stream": "DeviceToHostStream",
    "autodiff": "GradGraphInfo", "merge_exchange": "int", "remote_buffer": "RemoteBuffer",
    "replica_sharded_buffer": "RemoteBuffer", "replica_sharded_variable": "Tuple[Tensor, Tensor]",
    "remote_replica_sharded_variable": "Tensor", "remote_store": "None", "remote_code_load": "None",
    "register_op_created_hook": "int", "remove_op_created_hook": "None", "dot_checkpoint": "None",
    "create_graph": "Graph", "create_empty_graph": "Graph", "replica_grouping": "ReplicaGrouping",
    "replica_grouping_from_assignments": "ReplicaGrouping", "get_all_h2d_streams": "List[HostToDeviceStream]",
    "get_all_d2h_streams": "List[DeviceToHostStream]", "set_num_host_transfers": "None",
    "set_replication_factor": "None", "strides": "List[int]",
    "run": "Dict[DeviceToHostStream, np.ndarray]", "run_with_outputs": "None",
    "get_tensor_data": "np.ndarray", "get_tensors_data": "Dict[Tensor, np.ndarray]",
    "write_variable_data": "None", "write_variables_data": "None", "weights_to_host": "None",
    "weights_from_host": "None", "create_host_outputs": "Dict[DeviceToHostStream, np.ndarray]",
    "parent_to_graph_input_index": "int", "graph_to_parent_input_index": "int",
    "is_parent_index_in_then_branch": "bool", "graph_to_parent_output_index": "int",
    "parent_to_graph_output_index": "int", "set_parent_input_modified": "None", "is_alive": "bool",
    "opType": "str", "fwd_graph_ins_to_grad_parent_outs": "Dict[Tensor, Tensor]",
    "fwd_parent_ins_to_grad_parent_outs": "Dict[Tensor, Tensor]", "inputs_dict": "Dict[Tensor, Tensor]",
    "get_input_tensors": "Tuple[Tensor, ...]", "expected_inputs": "List[HostToDeviceStream]", "get_output_tensors": "Tuple[Tensor, ...]",
}

HEADER = '''"""Type stubs of ``popxl._native``, the Rust half of the ``popxl`` package (written by ``stubgen.py``)."""

import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, final

import numpy as np

#: What an op accepts where PopXL takes a tensor or a host value converted to a constant.
_TensorLike = Union["Tensor", np.ndarray, float, int, bool]

class UndefinedValue(Exception):
    """A value that was never set was read (a tensor's ipu or tile set)."""

'''


def annotate(name, default):
    if default in ("True", "False"):
        return "bool"
    literal = literal_type(default)
    ty = name_type(name, default)
    parts = [p.strip() for p in ty.replace("Optional[", "").replace("Union[", "").rstrip("]").split(",")]
    if literal and ty != "Any" and literal not in parts and not (literal == "int" and "float" in parts):
        return literal
    return ty


def literal_type(default):
    """The type of a literal default (None for None, ``...`` and no default)."""
    if default is None or default in ("None", "..."):
        return None
    if default.startswith(("'", '"')):
        return "str"
    if default.lstrip("-").isdigit():
        return "int"
    try:
        float(default)
        return "float"
    except ValueError:
        return None


def name_type(name, default):
    if name in TENSOR:
        ty = "Tensor"
    elif name in OPT_TENSOR:
        ty = "Optional[Tensor]"
    elif name in TENSOR_LIKE:
        ty = "_TensorLike"
    elif name in FACTOR:
        ty = "Union[float, Tensor]"
    elif name in TYPES:
        ty = TYPES[name]
    elif name in INTS:
        ty = "Union[int, Sequence[int]]" if name in {"start", "stop", "axis_list"} else "Sequence[int]"
    elif name in INT_NAMES:
        ty = "int"
    elif name in FLOAT_NAMES:
        ty = "float"
    elif name in BOOL_NAMES:
        ty = "bool"
    elif default is not None and default.startswith(("'", '"')):
        ty = "str"
    elif default is not None and default.lstrip("-").isdigit():
        ty = "int"
    else:
        ty = "Any"
    if default == "None" and not ty.startswith("Optional") and ty != "Any":
        ty = f"Optional[{ty}]"
    return ty


def signature(obj, name, method=False):
    text = getattr(obj, "__text_signature__", None)
    try:
        sig = inspect.signature(obj) if text else None
    except (ValueError, TypeError):
        sig = None
    params = []
    if sig is not None:
        for p in sig.parameters.values():
            if p.name in ("self", "$self", "cls", "$cls"):
                continue
            default = None if p.default is inspect.Parameter.empty else repr(p.default)
            if p.default is Ellipsis:
                default = "..."
            if default is not None and ("<" in default or len(default) > 40):
                default = "..."
            ty = PARAM_TYPES.get((name, p.name)) or annotate(p.name, default)
            if default == "None" and not ty.startswith("Optional") and ty != "Any":
                ty = f"Optional[{ty}]"
            if p.kind is inspect.Parameter.VAR_POSITIONAL:
                params.append(f"*{p.name}: {'Tensor' if p.name in ('ts', 'inputs') else 'Any'}")
            elif p.kind is inspect.Parameter.VAR_KEYWORD:
                params.append(f"**{p.name}: Any")
            else:
                params.append(f"{p.name}: {ty}" + (f" = {default}" if default is not None else ""))
    else:
        params = ["*args: Any", "**kwargs: Any"]
    if method:
        params.insert(0, "self")
    return ", ".join(params)


def doc_of(obj, indent):
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ").replace('"""', "'''").strip()
    if not first:
        return f"{indent}..."
    return f'{indent}"""{first}"""'


def function(name, f, indent="", method=False):
    ret = RETURNS.get(name, "Tensor")
    return f"{indent}def {name}({signature(f, name, method)}) -> {ret}:\n{doc_of(f, indent + '    ')}\n"


def klass(name, cls):
    out = ["@final", f"class {name}:", doc_of(cls, "    ")]
    init_sig = getattr(cls, "__text_signature__", None)
    if init_sig:
        params = signature(cls, "__new__")
        out.append(f"    def __new__(cls{', ' if params else ''}{params}) -> {name}: ...")
    for attr, value in sorted(vars(cls).items()):
        if attr.startswith("_") and attr not in ("__enter__", "__exit__", "__getitem__", "__len__", "__iter__"):
            continue
        if inspect.isdatadescriptor(value):
            ty = PROPERTY_TYPES.get((name, attr), PROPERTY_TYPES.get(attr, "Any"))
            out.append(f"    @property\n    def {attr}(self) -> {ty}:\n{doc_of(value, '        ')}")
        elif callable(value) or inspect.ismethoddescriptor(value):
            if attr == "__enter__":
                out.append(f"    def __enter__(self) -> {name}: ...")
            elif attr == "__exit__":
                out.append(f"    def __exit__({signature(value, attr, method=True)}) -> bool: ...")
            elif attr.startswith("__"):
                params = signature(value, attr, method=True)
                out.append(f"    def {attr}({params}, /) -> {METHOD_RETURNS.get((name, attr), 'Tensor')}: ...")
            else:
                ret = METHOD_RETURNS.get((name, attr), RETURNS.get(attr, "Tensor"))
                out.append(f"    def {attr}({signature(value, attr, method=True)}) -> {ret}:\n"
                           f"{doc_of(value, '        ')}")
    if name == "Tensor":
        defined = {line.split("(")[0].strip() for line in out if line.strip().startswith("def ")}
        out += [op for op in TENSOR_OPERATORS.split("\n") if op.split("(")[0].strip() not in defined]
    return "\n".join(out) + "\n"


PROPERTY_TYPES = {
    "id": "Any", "name": "str", "shape": "Tuple[int, ...]", "dtype": "Any", "spec": "Any", "rank": "int",
    "nelms": "int", "graph": "Graph", "ir": "Ir", "ipu": "int", "T": "Tensor", "T_": "Tensor",
    "meta_shape": "Tuple[int, ...]", "tile_set": "str", "main_graph": "Graph", "num_host_transfers": "int",
    "replication_factor": "int", "instance_replication_factor": "int", "inputs": "List[Tensor]",
    "outputs": "List[Tensor]", "tensors": "List[Tensor]", "variables": "List[Tensor]",
    "constants": "List[Tensor]", "called_graphs": "List[Graph]", "inputs_by_name": "Dict[str, Tensor]",
    "called_graph": "Any", "stride": "Optional[int]", "group_size": "int", "num_groups": "int",
    "assignment": "List[int]", "is_const": "bool", "op_type": "str", "in_dtype": "Any",
    "expected_inputs": "List[ExpectedConnection]", "expected_outputs": "List[ExpectedConnection]",
    "forward_graph": "Graph", "fwd_tensor": "Tensor", "connection_type": "str", "entries": "int",
    "tensor_shape": "Tuple[int, ...]", "tensor_dtype": "Any", "device": "str", "is_attached": "bool",
    "tensor_id": "str", "remote_buffer_id": "int", "spec": "Any",
    ("ConditionalSiteInfo", "called_graph"): "Tuple[Graph, Graph]", ("CallSiteInfo", "called_graph"): "Graph",
    ("Op", "id"): "int", ("Ir", "id"): "int", ("Graph", "id"): "str", ("Tensor", "id"): "str",
    ("HostToDeviceStream", "dtype"): "Any", ("HostToDeviceStream", "shape"): "Tuple[int, ...]",
}
METHOD_RETURNS = {("Tensor", "strides"): "List[int]", ("ReplicaGrouping", "transpose"): "ReplicaGrouping", ("Tensor", "copy_to_ipu"): "Tensor",
                  ("Session", "run"): "Dict[DeviceToHostStream, np.ndarray]"}
TENSOR_OPERATORS = '''    def __add__(self, other: _TensorLike, /) -> Tensor: ...
    def __radd__(self, other: _TensorLike, /) -> Tensor: ...
    def __sub__(self, other: _TensorLike, /) -> Tensor: ...
    def __rsub__(self, other: _TensorLike, /) -> Tensor: ...
    def __mul__(self, other: _TensorLike, /) -> Tensor: ...
    def __rmul__(self, other: _TensorLike, /) -> Tensor: ...
    def __truediv__(self, other: _TensorLike, /) -> Tensor: ...
    def __rtruediv__(self, other: _TensorLike, /) -> Tensor: ...
    def __mod__(self, other: _TensorLike, /) -> Tensor: ...
    def __pow__(self, other: _TensorLike, mod: None = None, /) -> Tensor: ...
    def __rpow__(self, other: _TensorLike, mod: None = None, /) -> Tensor: ...
    def __rmod__(self, other: _TensorLike, /) -> Tensor: ...
    def __rand__(self, other: _TensorLike, /) -> Tensor: ...
    def __ror__(self, other: _TensorLike, /) -> Tensor: ...
    def __matmul__(self, other: _TensorLike, /) -> Tensor: ...
    def __rmatmul__(self, other: _TensorLike, /) -> Tensor: ...
    def __and__(self, other: _TensorLike, /) -> Tensor: ...
    def __or__(self, other: _TensorLike, /) -> Tensor: ...
    def __invert__(self) -> Tensor: ...
    def __neg__(self) -> Tensor: ...
    def __iadd__(self, other: _TensorLike, /) -> Tensor: ...
    def __getitem__(self, key: Any, /) -> Tensor: ...
    def __len__(self) -> int: ...
    def __hash__(self) -> int: ...'''


def main():
    classes, functions, other = [], [], []
    for name in sorted(dir(native)):
        if name.startswith("_") or name == "UndefinedValue":
            continue
        obj = getattr(native, name)
        if inspect.isclass(obj):
            classes.append(klass(name, obj))
        elif callable(obj):
            functions.append(function(name, obj))
        else:
            other.append(f"{name}: Any")
    names = [n for n in dir(native) if not n.startswith("_")]
    text = HEADER + f"__all__ = {names!r}\n\n" + "\n".join(classes) + "\n" + "\n".join(functions) + "\n".join(other) + "\n"
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}: {len(classes)} classes, {len(functions)} functions", file=sys.stderr)


if __name__ == "__main__":
    main()
