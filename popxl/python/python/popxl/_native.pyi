"""Type stubs of ``popxl._native``, the Rust half of the ``popxl`` package (written by ``stubgen.py``)."""

import os
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, final

import numpy as np

#: What an op accepts where PopXL takes a tensor or a host value converted to a constant.
_TensorLike = Union["Tensor", np.ndarray, float, int, bool]

class UndefinedValue(Exception):
    """A value that was never set was read (a tensor's ipu or tile set)."""

__all__ = ['CallSiteInfo', 'ConditionalSiteInfo', 'DeviceToHostStream', 'ExpectedConnection', 'GradGraphInfo', 'Graph', 'HostToDeviceStream', 'Ir', 'Op', 'RemoteBuffer', 'ReplicaGrouping', 'Session', 'Tensor', 'UndefinedValue', 'abs', 'accumulate_', 'accumulate_mean_', 'accumulate_moving_average_', 'accumulate_moving_average_square_', 'accumulate_square_', 'accumulator_scale_', 'accumulator_zero_', 'adam_updater', 'adam_var_update', 'adamax_updater', 'add', 'add_', 'all_reduce', 'all_reduce_identical_grad_inputs', 'all_reduce_identical_inputs', 'argmax', 'argmin', 'autodiff', 'average_pool', 'batch_norm', 'batch_norm_inference', 'call', 'call_with_info', 'cast', 'ceil', 'clip', 'concat', 'concat_', 'conditional_with_info', 'constant', 'conv', 'conv_pow2scaled', 'conv_transpose', 'conv_transpose_pow2scaled', 'copy_var_update_', 'cos', 'create_seeds', 'cumsum', 'd2h_stream', 'decompose_sum', 'detach', 'detach_', 'div', 'dropout', 'dynamic_slice', 'dynamic_update', 'dynamic_update_', 'equal', 'exp', 'exp_', 'flatten', 'flatten_', 'floor', 'fmod', 'gather', 'gcg', 'gelu', 'gelu_', 'geluerf', 'geluerf_', 'gir', 'gmg', 'graph_input', 'graph_output', 'greater', 'group_norm', 'groupedgather', 'h2d_stream', 'histogram', 'host_load', 'host_store', 'identity', 'in_sequence', 'increment_mod', 'increment_mod_', 'init', 'interpolate', 'io_tile_copy', 'io_tiles', 'ipu', 'ipu_copy', 'isfinite', 'isinf', 'isnan', 'l1', 'l2', 'lamb_square', 'lamb_updater', 'layer_norm', 'less', 'log', 'log1p', 'log2', 'logical_and', 'logical_not', 'logical_or', 'logsum', 'logsumexp', 'matmul', 'matmul_pow2scaled', 'max', 'max_pool', 'maximum', 'mean', 'median', 'merge_exchange', 'min', 'minimum', 'mul', 'name_scope', 'negate', 'nll_loss', 'nll_loss_with_softmax_grad', 'onehot', 'pow', 'pow2scale_cast_from_fp8', 'pow2scale_cast_to_fp8', 'print_tensor', 'prod', 'random_normal', 'random_uniform', 'relu', 'relu_', 'remote_buffer', 'remote_code_load', 'remote_load', 'remote_load_', 'remote_replica_sharded_variable', 'remote_store', 'remote_variable', 'repeat', 'repeat_with_info', 'replica_sharded_buffer', 'replica_sharded_slice', 'replica_sharded_variable', 'replicated_all_gather', 'replicated_all_reduce', 'replicated_all_reduce_', 'replicated_reduce_scatter', 'replicated_slice', 'reshape', 'reshape_', 'roi_align', 'scaled_add', 'scaled_add_', 'scatter', 'scatter_reduce', 'shaped_dropout', 'sigmoid', 'sign', 'sin', 'slice', 'slice_', 'softmax', 'sparse_accumulate_', 'split', 'split_random_seed', 'sqrt', 'squeeze', 'sub', 'subsample', 'sum', 'sumsquare', 'swish', 'swish_', 'tanh', 'tied_gather', 'topk', 'transpose', 'transpose_', 'variable', 'where']

@final
class CallSiteInfo:
    """The call site of a `call_with_info` / `repeat_with_info` (PopXL's `CallSiteInfo`)."""
    @property
    def called_graph(self) -> Graph:
        """The called graph."""
    @property
    def graph(self) -> Graph:
        """The graph of the call op."""
    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor connected to a called graph's tensor."""
    @property
    def inputs(self) -> List[Tensor]:
        """The call's inputs, in the parent graph."""
    @property
    def outputs(self) -> List[Tensor]:
        """The call's outputs, in the parent graph."""
    def parent_input(self, idx: int) -> Tensor:
        """The parent tensor connected to input `idx`."""
    def parent_output(self, idx: int) -> Tensor:
        """The parent tensor of output `idx`."""
    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The called graph's tensor connected to a parent tensor."""
    def set_parent_input_modified(self, parent_tensor: Tensor) -> None:
        """Mark a parent input as modified by the call (passed by reference)."""

@final
class ConditionalSiteInfo:
    """The call site of a `conditional_with_info` (PopXL's `ConditionalSiteInfo`)."""
    @property
    def called_graph(self) -> Tuple[Graph, Graph]:
        """The called graphs of the conditional op: `(then_branch, else_branch)`."""
    @property
    def graph(self) -> Graph:
        """The graph of the conditional op."""
    def graph_to_parent(self, graph_tensor: Tensor) -> Tensor:
        """The parent tensor of a branch graph's input or output."""
    def graph_to_parent_input_index(self, idx: int, then_branch: bool = True) -> int:
        """Get the parent graph input tensor index given the graph input tensor index."""
    def graph_to_parent_output_index(self, idx: int, then_branch: bool = True) -> int:
        """Get the parent graph output tensor index given the graph output tensor index."""
    @property
    def inputs(self) -> List[Tensor]:
        """The op's inputs in the parent graph: the condition, then each distinct branch input."""
    def is_parent_index_in_then_branch(self, idx: int) -> bool:
        """Whether parent input `idx` goes to the then branch (else the else branch); IndexError if it goes to neither."""
    @property
    def outputs(self) -> List[Tensor]:
        """The op's outputs in the parent graph."""
    def parent_input(self, idx: int) -> Tensor:
        """The parent tensor at op input `idx` (0 is the condition)."""
    def parent_output(self, idx: int) -> Tensor:
        """The parent tensor at op output `idx`."""
    def parent_to_graph(self, parent_tensor: Tensor) -> Tensor:
        """The branch graph input receiving a parent tensor (the then branch's first)."""
    def parent_to_graph_input_index(self, idx: int) -> int:
        """Get the graph input tensor index given the parent graph input tensor index."""
    def parent_to_graph_output_index(self, idx: int, then_branch: bool = True) -> int:
        """Get the graph output tensor index given the parent graph output tensor index."""

@final
class DeviceToHostStream:
    """A host stream of the main graph (PopXL's `h2d_stream` / `d2h_stream`)."""
    @property
    def dtype(self) -> Any:
        """The stream's dtype."""
    @property
    def shape(self) -> Tuple[int, ...]:
        """The stream's shape."""
    @property
    def spec(self) -> Any:
        """`TensorSpec(shape, dtype)`."""
    @property
    def tensor_id(self) -> str:
        """The id of the stream's tensor."""

@final
class ExpectedConnection:
    """A tensor the gradient graph connects to: the forward tensor itself (`ExpectedConnectionType.Fwd`) or its gradient (`FwdGrad`)."""
    @property
    def connection_type(self) -> str:
        """`"Fwd"` or `"FwdGrad"`."""
    @property
    def fwd_tensor(self) -> Tensor:
        """The forward graph's tensor."""

@final
class GradGraphInfo:
    """The result of `autodiff` (PopXL's `GradGraphInfo`)."""
    @property
    def expected_inputs(self) -> List[ExpectedConnection]:
        """What each gradient graph input is, in order."""
    @property
    def expected_outputs(self) -> List[ExpectedConnection]:
        """What each gradient graph output is (the gradient of a forward input), in order."""
    @property
    def forward_graph(self) -> Graph:
        """The forward graph."""
    def fwd_graph_ins_to_grad_parent_outs(self, grad_call_info: CallSiteInfo) -> Dict[Tensor, Tensor]:
        """`{forward graph input: gradient parent output}`."""
    def fwd_parent_ins_to_grad_parent_outs(self, fwd_call_info: CallSiteInfo, grad_call_info: CallSiteInfo) -> Dict[Tensor, Tensor]:
        """`{forward parent input: gradient parent output}`."""
    @property
    def graph(self) -> Graph:
        """The gradient graph."""
    def inputs_dict(self, fwd_call_info: CallSiteInfo) -> Dict[Tensor, Tensor]:
        """`{gradient graph input: forward parent tensor}` for the activations of a forward call."""

@final
class Graph:
    """A graph of an IR (PopXL's `popxl.Graph`); `with graph:` makes it current."""
    def __enter__(self) -> Graph: ...
    def __exit__(self, *_args: Any) -> bool: ...
    @property
    def called_graphs(self) -> List[Graph]:
        """The graphs this graph calls."""
    @property
    def constants(self) -> List[Tensor]:
        """The constants of the graph."""
    def get_tensor(self, tensor_id: str) -> Tensor:
        """The tensor named `tensor_id`."""
    @property
    def id(self) -> str:
        """The graph's id."""
    @property
    def inputs(self) -> List[Tensor]:
        """The graph's inputs, in order."""
    @property
    def inputs_by_name(self) -> Dict[str, Tensor]:
        """The graph's inputs by name."""
    @property
    def ir(self) -> Ir:
        """The IR."""
    @property
    def name(self) -> str:
        """The graph's name."""
    @property
    def outputs(self) -> List[Tensor]:
        """The graph's outputs, in order."""
    def register_op_created_hook(self, fn_: Callable[..., Any]) -> int:
        """Register a function to be called after an op is created in the graph; it gets the op (`popxl.Op`). Returns a handle for `remove_op_created_hook`."""
    def remove_op_created_hook(self, handle: int) -> None:
        """Remove an op created hook (`handle` from `register_op_created_hook`); KeyError for an unknown handle."""
    @property
    def tensors(self) -> List[Tensor]:
        """Every tensor of the graph."""
    @property
    def variables(self) -> List[Tensor]:
        """The variables of the graph."""

@final
class HostToDeviceStream:
    """A host stream of the main graph (PopXL's `h2d_stream` / `d2h_stream`)."""
    @property
    def dtype(self) -> Any:
        """The stream's dtype."""
    @property
    def shape(self) -> Tuple[int, ...]:
        """The stream's shape."""
    @property
    def spec(self) -> Any:
        """`TensorSpec(shape, dtype)`."""
    @property
    def tensor_id(self) -> str:
        """The id of the stream's tensor."""

@final
class Ir:
    """An IR (PopXL's `popxl.Ir`): its main graph, subgraphs and host streams."""
    def __new__(cls, replication: Optional[int] = None) -> Ir: ...
    def create_empty_graph(self, name: Optional[str] = None) -> Graph:
        """An empty subgraph, to fill with `with graph:`."""
    def create_graph(self, fn_: Callable[..., Any], *args: Any, **kwargs: Any) -> Graph:
        """Trace `fn(*args, **kwargs)` (a function or `popxl.Module`) into a new subgraph: every Tensor / TensorSpec argument becomes a graph input."""
    def dot_checkpoint(self, check: str, save_dir: Optional[Union[str, os.PathLike]] = None) -> None:
        """Output a graphical representation of the IR in Graphviz DOT format, to `<save_dir>/<check>_all.dot`. `save_dir` (created if needed) stays the directory of this IR's later checkpoints; the default is the current directory. If the `POPART_DOT_CHECKS` environment variable is set (names separated by `:`), only the checkpoints it names (or all with `ALL`) are written."""
    def get_all_d2h_streams(self) -> List[DeviceToHostStream]:
        """All device-to-host streams."""
    def get_all_h2d_streams(self) -> List[HostToDeviceStream]:
        """All host-to-device streams."""
    @property
    def id(self) -> int:
        """The IR's id."""
    @property
    def instance_replication_factor(self) -> int:
        """The number of replicas this process runs: `replication_factor` divided by the processes of the launch (`Ir(replication="popdist")`)."""
    @property
    def main_graph(self) -> Graph:
        """The main graph."""
    @property
    def num_host_transfers(self) -> int:
        """Batches per `run` per stream."""
    def replica_grouping(self, stride: int = 1, group_size: Optional[int] = None) -> ReplicaGrouping:
        """`ir.replica_grouping(stride=1, group_size=None)` (group_size defaults to replication_factor // stride)."""
    def replica_grouping_from_assignments(self, assignment: Sequence[int]) -> ReplicaGrouping:
        """`ir.replica_grouping_from_assignments(assignment)`."""
    @property
    def replication_factor(self) -> int:
        """The number of replicas."""

@final
class Op:
    """An op, as an op-created hook sees it (PopXL passes its internal op object)."""
    @property
    def graph(self) -> Graph:
        """The graph of the op."""
    @property
    def id(self) -> int:
        """The op's id, unique within its graph."""
    def is_alive(self) -> bool:
        """Whether the op is still in its graph (a transform may have removed it)."""
    @property
    def name(self) -> str:
        """The op's name."""
    def opType(self) -> str:
        """PopART's spelling of `op_type`."""
    @property
    def op_type(self) -> str:
        """The op's type (`"MatMul"`, `"HostLoad"`, ...)."""

@final
class RemoteBuffer:
    """An array of `entries` tensors in streaming memory (PopXL's `RemoteBuffer`)."""
    @property
    def entries(self) -> int:
        """The number of entries."""
    @property
    def remote_buffer_id(self) -> int:
        """The buffer's id (1, 2... per IR)."""
    @property
    def tensor_dtype(self) -> Any:
        """The dtype of each entry."""
    @property
    def tensor_shape(self) -> Tuple[int, ...]:
        """The shape of each entry."""

@final
class ReplicaGrouping:
    """How replicas form groups (PopXL's `ReplicaGrouping`, made by `ir.replica_grouping`)."""
    @property
    def assignment(self) -> List[int]:
        """The group of each replica."""
    @property
    def group_size(self) -> int:
        """The number of replicas in each group."""
    @property
    def is_const(self) -> bool:
        """Whether the grouping is a (stride, group_size) pattern."""
    @property
    def num_groups(self) -> int:
        """The number of groups."""
    @property
    def stride(self) -> Optional[int]:
        """The distance between consecutive replicas of a group."""
    def transpose(self) -> ReplicaGrouping:
        """The grouping whose groups take one replica of each of these groups."""

@final
class Session:
    """A session on a device (PopXL's `popxl.Session`): `with session:` attaches and copies the weights to the device; `run` runs the main graph."""
    def __new__(cls, ir: Ir, device_desc: str = 'cpu', weights_to_host_on_exit: bool = True) -> Session: ...
    def __enter__(self) -> Session: ...
    def __exit__(self, exc_type: Any = None, _exc: Any = None, _tb: Any = None) -> bool: ...
    def create_host_outputs(self) -> Dict[DeviceToHostStream, np.ndarray]:
        """Zeroed output arrays for `run_with_outputs`."""
    def expected_inputs(self) -> List[HostToDeviceStream]:
        """The host-to-device streams `run` expects."""
    def get_tensor_data(self, tensor: Tensor) -> np.ndarray:
        """The value of a variable or constant, as a numpy array."""
    def get_tensors_data(self, tensors: Sequence[Tensor]) -> Dict[Tensor, np.ndarray]:
        """The values of several variables or constants: `{tensor: array}`."""
    @property
    def ir(self) -> Ir:
        """The IR the session runs."""
    @property
    def is_attached(self) -> bool:
        """Whether the session is attached to its device."""
    def run(self, inputs: Optional[Mapping[HostToDeviceStream, Any]] = None, downcast_inputs: bool = True) -> Dict[DeviceToHostStream, np.ndarray]:
        """Run the main graph once: `{h2d_stream: array}` in, `{d2h_stream: array}` out."""
    def run_with_outputs(self, inputs: Mapping[HostToDeviceStream, Any], outputs: Mapping[DeviceToHostStream, np.ndarray], downcast_inputs: bool = True) -> None:
        """Run, writing into the given output arrays (`{d2h_stream: array}`, as `create_host_outputs` makes them)."""
    def weights_from_host(self) -> None:
        """Copy the variables' host values to the device."""
    def weights_to_host(self) -> None:
        """Copy the variables' device values to the host."""
    def write_variable_data(self, tensor: Tensor, data: Any) -> None:
        """Write a variable's value (host, and device if attached)."""
    def write_variables_data(self, tensors: Mapping[Tensor, Any]) -> None:
        """Write several variables: `{tensor: array}`."""

@final
class Tensor:
    """A tensor of a graph (PopXL's `popxl.Tensor`): a handle naming an IR's tensor."""
    @property
    def T(self) -> Tensor:
        """The transpose with the axes reversed."""
    @property
    def T_(self) -> Tensor:
        """The in-place transpose (a view)."""
    def __getitem__(self, key: Any, /) -> Tensor: ...
    def __iter__(self, /) -> Tensor: ...
    def __len__(self, /) -> Tensor: ...
    def copy_to_ipu(self, destination: int, source: Optional[int] = None) -> Tensor:
        """Copy the tensor to IPU `destination` (`ops.ipu_copy`); `source` defaults to the IPU of the tensor's producer."""
    def detach(self) -> Tensor:
        """The same values, with no gradient flowing back."""
    def diag(self) -> Tensor:
        """The diagonal of a 2-d tensor."""
    @property
    def dtype(self) -> Any:
        """The `popxl.dtype`."""
    def flatten(self) -> Tensor:
        """A 1-d tensor of the elements."""
    def flatten_(self) -> Tensor:
        """In-place `flatten`."""
    @property
    def graph(self) -> Graph:
        """The graph the tensor belongs to."""
    @property
    def id(self) -> str:
        """The tensor's id, with its name scope (`layer0/x`)."""
    @property
    def ipu(self) -> int:
        """The IPU the tensor is placed on (`UndefinedValue` if never set)."""
    @property
    def ir(self) -> Ir:
        """The IR."""
    @property
    def meta_shape(self) -> Tuple[int, ...]:
        """The meta shape of the tensor: for a replica-sharded tensor the shape of the whole tensor before replicated tensor sharding, else `()`."""
    @property
    def name(self) -> str:
        """The tensor's name."""
    @property
    def nelms(self) -> int:
        """The number of elements."""
    @property
    def rank(self) -> int:
        """The number of dimensions."""
    def reshape(self, shape: Sequence[int]) -> Tensor:
        """A reshaped tensor (one dimension may be -1)."""
    def reshape_(self, shape: Sequence[int]) -> Tensor:
        """In-place `reshape`."""
    @property
    def shape(self) -> Tuple[int, ...]:
        """The shape, a tuple of ints."""
    @property
    def spec(self) -> Any:
        """`TensorSpec(shape, dtype)`."""
    def strides(self) -> List[int]:
        """Element strides, in elements."""
    @property
    def tile_set(self) -> str:
        """The tile set (`compute` or `io`) that the tensor is assigned to (`UndefinedValue` if no op produces or consumes it)."""
    def transpose(self, permutation: Optional[Sequence[int]] = None) -> Tensor:
        """Permute the axes (reversed when `permutation` is None)."""
    def transpose_(self, permutation: Optional[Sequence[int]] = None) -> Tensor:
        """In-place `transpose`."""
    def __add__(self, other: _TensorLike, /) -> Tensor: ...
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
    def __hash__(self) -> int: ...

@final
class in_sequence:
    """`with popxl.in_sequence(enabled=True):` ops run in creation order."""
    def __new__(cls, enabled: Optional[Union[bool, str]] = None) -> in_sequence: ...
    def __enter__(self) -> in_sequence: ...
    def __exit__(self, *_args: Any) -> bool: ...

@final
class io_tiles:
    """`with popxl.io_tiles():` places ops on the IO tiles."""
    def __new__(cls) -> io_tiles: ...
    def __enter__(self) -> io_tiles: ...
    def __exit__(self, *_args: Any) -> bool: ...

@final
class ipu:
    """`with popxl.ipu(n):` places ops on IPU `n`."""
    def __new__(cls, ipu: int) -> ipu: ...
    def __enter__(self) -> ipu: ...
    def __exit__(self, *_args: Any) -> bool: ...

@final
class name_scope:
    """`with popxl.name_scope(name):` prefixes tensor names with `name/`."""
    def __new__(cls, name: str) -> name_scope: ...
    def __enter__(self) -> name_scope: ...
    def __exit__(self, *_args: Any) -> bool: ...

def abs(t: Tensor) -> Tensor:
    """`ops.abs(t)`, elementwise."""

def accumulate_(t: Tensor, X: Tensor, f: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.accumulate_(t, X, f)`, in place."""

def accumulate_mean_(t: Tensor, X: Tensor, step: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.accumulate_mean_(t, X, step)`, in place."""

def accumulate_moving_average_(t: Tensor, X: Tensor, f: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.accumulate_moving_average_(t, X, f)`, in place."""

def accumulate_moving_average_square_(t: Tensor, X: Tensor, f: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.accumulate_moving_average_square_(t, X, f)`, in place."""

def accumulate_square_(t: Tensor, X: Tensor, f: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.accumulate_square_(t, X, f)`, in place."""

def accumulator_scale_(t: Tensor, f: Union[float, Tensor]) -> Tensor:
    """`ops.var_updates.accumulator_scale_(t, f)`."""

def accumulator_zero_(t: Tensor) -> Tensor:
    """`ops.accumulator_zero_(t)`, elementwise."""

def adam_updater(acc_first_order: Tensor, acc_second_order: Tensor, weight: Optional[Tensor] = None, time_step: Optional[Tensor] = None, weight_decay: Optional[Union[float, Tensor]] = None, beta1: Optional[Union[float, Tensor]] = None, beta2: Optional[Union[float, Tensor]] = None, epsilon: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.adam_updater(acc_first_order, acc_second_order, weight=None, time_step=None, weight_decay=None, beta1=None, beta2=None, epsilon=1e-07)`: Adam's updater term `mc / (sqrt(vc) + eps) + wd * w`; with `time_step` (incremented in place) the moments are bias-corrected with `beta1` and `beta2`."""

def adam_var_update(t: Tensor, x: Tensor, r1: Optional[Tensor], r2: Optional[Tensor], learning_rate: Optional[Union[float, Tensor]] = None, max_weight_norm: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.adam_var_update(t, x, r1, r2, learning_rate=None, max_weight_norm=None)`: `t -= learning_rate * ratio * x` in place, `ratio = min(sqrt(r1), max_weight_norm) / sqrt(r2)` (LAMB's trust ratio; 1 when `r1` or `r2` is 0, or both are None as for Adam)."""

def adamax_updater(acc_first_order: Tensor, acc_second_order: Tensor, weight: Optional[Tensor] = None, time_step: Optional[Tensor] = None, weight_decay: Optional[Union[float, Tensor]] = None, beta1: Optional[Union[float, Tensor]] = None, epsilon: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.adamax_updater(acc_first_order, acc_second_order, weight=None, time_step=None, weight_decay=None, beta1=0.9, epsilon=1e-07)`: AdaMax's updater term `mc / (u + eps) + wd * w`; `time_step` is required (incremented in place)."""

def add(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.add(lhs, rhs)`, with numpy broadcasting."""

def add_(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.add_(lhs, rhs)`, with numpy broadcasting."""

def all_reduce(ts: Sequence[Tensor], ipus: Optional[Sequence[int]] = None, op: str = 'add') -> List[Tensor]:
    """`ops.collectives.all_reduce(ts, ipus=None, op='add')`: reduce the tensors `ts`, one per IPU of a replica (`ipus`, by default the tensors' IPUs), giving one result per IPU."""

def all_reduce_identical_grad_inputs(ts: Sequence[Tensor], ipus: Optional[Sequence[int]] = None, op: str = 'add') -> List[Tensor]:
    """`ops.collectives.all_reduce_identical_grad_inputs(ts, ipus=None, op='add')`: `all_reduce` whose gradients are known to be identical: each input's gradient is its output's."""

def all_reduce_identical_inputs(ts: Sequence[Tensor], ipus: Optional[Sequence[int]] = None, op: str = 'add') -> List[Tensor]:
    """`ops.collectives.all_reduce_identical_inputs(ts, ipus=None, op='add')`: `all_reduce` of tensors known to be identical: each output is its input; the gradient is all-reduced."""

def argmax(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """`ops.argmax(t, dim=0, keepdim=False)`."""

def argmin(t: Tensor, dim: int = 0, keepdim: bool = False) -> Tensor:
    """`ops.argmin(t, dim=0, keepdim=False)`."""

def autodiff(graph: Graph, grads_provided: Optional[Sequence[Tensor]] = None, grads_required: Optional[Sequence[Tensor]] = None, called_graphs_grad_info: Optional[Mapping[Graph, GradGraphInfo]] = None, return_all_grad_graphs: bool = False) -> GradGraphInfo:
    """`transforms.autodiff(graph, grads_provided=None, grads_required=None, called_graphs_grad_info=None, return_all_grad_graphs=False)`."""

def average_pool(t: Tensor, kernel_size: Sequence[int], stride: Optional[Sequence[int]] = None, padding: Optional[Sequence[int]] = None, out_pads: Optional[Sequence[int]] = None, dilation: Optional[Sequence[int]] = None, in_dilation: Optional[Sequence[int]] = None, auto_pad: str = 'not_set', ceil_mode: bool = False) -> Tensor:
    """`ops.average_pool(t, kernel_size, stride=None, padding=None, out_pads=None, dilation=None, in_dilation=None, auto_pad='not_set', ceil_mode=False)`."""

def batch_norm(t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, epsilon: Union[float, Tensor] = 1e-05, momentum: float = 0.9, unbiased_variance: bool = False) -> Tuple[Tensor, Tensor, Tensor]:
    """`ops.batch_norm(t, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, unbiased_variance=False)` -> `(y, new_mean, new_var)`: training-mode batch normalisation (PopART's `BatchNormalization` in training mode; PopXL itself has only `batch_norm_inference`). Each channel of `t` `[N, C, ..]` is normalised with the mean and biased variance of its elements over the batch and spatial dims, then scaled and shifted; `new_mean = momentum * mean + (1 - momentum) * batch mean` (likewise `new_var`, with the unbiased batch variance if `unbiased_variance`). Write the running statistics back with `ops.var_updates.copy_var_update_`."""

def batch_norm_inference(t: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, epsilon: Union[float, Tensor] = 1e-05, momentum: float = 0.9) -> Tensor:
    """`ops.batch_norm_inference(t, scale, bias, mean, var, epsilon=1e-5, momentum=0.9)`."""

def call(graph: Graph, *inputs: Tensor, inputs_dict: Optional[Mapping[Tensor, Any]] = None) -> Tuple[Tensor, ...]:
    """`ops.call(graph, *inputs, inputs_dict=None)` -> the tuple of outputs."""

def call_with_info(graph: Graph, *inputs: Tensor, inputs_dict: Optional[Mapping[Tensor, Any]] = None) -> CallSiteInfo:
    """`ops.call_with_info(graph, *inputs, inputs_dict=None)` -> `CallSiteInfo`."""

def cast(t: Tensor, data_type: Any) -> Tensor:
    """`ops.cast(t, data_type)`."""

def ceil(t: Tensor) -> Tensor:
    """`ops.ceil(t)`, elementwise."""

def clip(t: Tensor, min: Optional[float] = None, max: Optional[float] = None) -> Tensor:
    """`ops.clip(t, min=-inf, max=inf)`."""

def concat(ts: Sequence[Tensor], axis: int = 0) -> Tensor:
    """`ops.concat(ts, axis=0)`."""

def concat_(ts: Sequence[Tensor], axis: int = 0) -> Tensor:
    """`ops.concat_(ts, axis=0)`: a view concatenating the tensors."""

def conditional_with_info(cond: Tensor, then_branch: Graph, else_branch: Graph, then_inputs: Optional[Sequence[Tensor]] = None, else_inputs: Optional[Sequence[Tensor]] = None, then_inputs_dict: Optional[Mapping[Tensor, Tensor]] = None, else_inputs_dict: Optional[Mapping[Tensor, Tensor]] = None, check_inputs: bool = True) -> ConditionalSiteInfo:
    """`ops.conditional_with_info(cond, then_branch, else_branch, then_inputs=None, else_inputs=None, then_inputs_dict=None, else_inputs_dict=None, check_inputs=True)` -> `ConditionalSiteInfo`: run `then_branch` if `cond` else `else_branch` (graphs with the same outputs). The branch inputs are checked whatever `check_inputs` says."""

def constant(data: Tensor, dtype: Any = None, name: Optional[str] = None, downcast: bool = True, log2_scale: Any = None, nan_on_overflow: Any = None) -> Tensor:
    """`constant(data, dtype=None, name=None, downcast=True, log2_scale=None, nan_on_overflow=None)` (the last two apply to float data for a float8 constant)."""

def conv(t: Tensor, weight: Tensor, stride: Optional[Sequence[int]] = None, padding: Optional[Sequence[int]] = None, dilation: Optional[Sequence[int]] = None, groups: int = 1, pad_type: str = 'not_set') -> Tensor:
    """`ops.conv(t, weight, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, pad_type='not_set')`."""

def conv_pow2scaled(t: Tensor, weight: Tensor, log2_scale: Any, stride: Optional[Sequence[int]] = None, padding: Optional[Sequence[int]] = None, dilation: Optional[Sequence[int]] = None, groups: int = 1, pad_type: str = 'not_set', available_memory_proportions: Optional[Sequence[float]] = None, enable_conv_dithering: Optional[Sequence[int]] = None) -> Tensor:
    """`ops.conv_pow2scaled(t, weight, log2_scale, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, pad_type='not_set', available_memory_proportions=None, enable_conv_dithering=None)`: `conv(t, weight) · 2^log2_scale` as float16."""

def conv_transpose(t: Tensor, weight: Tensor, stride: Optional[Sequence[int]] = None, padding: Optional[Sequence[int]] = None, dilation: Optional[Sequence[int]] = None, groups: int = 1, pad_type: str = 'not_set', output_padding: Optional[Sequence[int]] = None, output_shape: Optional[Sequence[int]] = None, available_memory_proportions: Optional[Sequence[float]] = None, partials_types: Optional[Sequence[str]] = None, enable_conv_dithering: Optional[Sequence[int]] = None) -> Tensor:
    """`ops.conv_transpose(t, weight, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, pad_type='not_set', output_padding=(), output_shape=(), available_memory_proportions=None, partials_types=None, enable_conv_dithering=None)`: the transposed convolution of `t` `[N, C_in, D..]` with `weight` `[C_in, C_out / groups, K..]` (ONNX `ConvTranspose`). If `output_shape` is given the padding is derived from it."""

def conv_transpose_pow2scaled(t: Tensor, weight: Tensor, log2_scale: Any, stride: Optional[Sequence[int]] = None, padding: Optional[Sequence[int]] = None, dilation: Optional[Sequence[int]] = None, groups: int = 1, pad_type: str = 'not_set', output_padding: Optional[Sequence[int]] = None, output_shape: Optional[Sequence[int]] = None, available_memory_proportions: Optional[Sequence[float]] = None, enable_conv_dithering: Optional[Sequence[int]] = None) -> Tensor:
    """`ops.conv_transpose_pow2scaled(t, weight, log2_scale, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, pad_type='not_set', output_padding=(), output_shape=(), available_memory_proportions=None, enable_conv_dithering=None)`: `conv_transpose(t, weight) · 2^log2_scale` as float16, `weight` `[C_in, C_out / groups, K..]`."""

def copy_var_update_(t: Tensor, X: Tensor) -> Tensor:
    """`ops.var_updates.copy_var_update_(t, X)`: copy `X` into `t` in place (PopXL's names)."""

def cos(t: Tensor) -> Tensor:
    """`ops.cos(t)`, elementwise."""

def create_seeds(seed: int, offset: Optional[int] = None, batches_per_step: int = 1, gradient_accumulation_factor: int = 1, replicas: int = 1) -> np.ndarray:
    """`popxl.create_seeds(seed, offset=0, batches_per_step=1, gradient_accumulation_factor=1, replicas=1)`: a uint32 array of `batches_per_step * gradient_accumulation_factor * replicas` seed tensors (each a uint64 as two uint32 elements), of shape `[batches_per_step, gradient_accumulation_factor, replicas, 2]` with the size-1 dims removed, drawn as numpy's `default_rng(seed + offset)`."""

def cumsum(t: Tensor, dim: int = 0) -> Tensor:
    """`ops.cumsum(t, dim=0)`."""

def d2h_stream(shape: Sequence[int], dtype: Any, name: Optional[str] = None) -> DeviceToHostStream:
    """`d2h_stream(shape, dtype, name=None)`."""

def decompose_sum(graph: Graph) -> Tensor:
    """`transforms.decompose_sum(graph)` -> graph: transform the graph by decomposing Sum operations with >2 inputs into a liveness optimal tree of additions."""

def detach(t: Tensor) -> Tensor:
    ...

def detach_(t: Tensor) -> Tensor:
    """`ops.detach_(t)`, elementwise."""

def div(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.div(lhs, rhs)`, with numpy broadcasting."""

def dropout(t: Tensor, seed_tensor: Tensor, p: float) -> Tensor:
    """`ops.dropout(t, seed_tensor, p)`."""

def dynamic_slice(t: Tensor, index: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool) -> Tensor:
    """`ops.dynamic_slice(t, index, axes, sizes, no_overlap)`."""

def dynamic_update(t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool) -> Tensor:
    """`ops.dynamic_update(t, index, t_update, axes, sizes, no_overlap)`."""

def dynamic_update_(t: Tensor, index: Tensor, t_update: Tensor, axes: Sequence[int], sizes: Sequence[int], no_overlap: bool) -> Tensor:
    """`ops.dynamic_update_(t, index, t_update, axes, sizes, no_overlap)`, in place."""

def equal(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.equal(lhs, rhs)`, with numpy broadcasting."""

def exp(t: Tensor) -> Tensor:
    """`ops.exp(t)`, elementwise."""

def exp_(t: Tensor) -> Tensor:
    """`ops.exp_(t)`, elementwise."""

def flatten(t: Tensor) -> Tensor:
    """`ops.flatten(t)`, elementwise."""

def flatten_(t: Tensor) -> Tensor:
    """`ops.flatten_(t)`, elementwise."""

def floor(t: Tensor) -> Tensor:
    """`ops.floor(t)`, elementwise."""

def fmod(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.fmod(lhs, rhs)`, with numpy broadcasting."""

def gather(t: Tensor, indices: Tensor, axis: int = 0, zero_OOR: bool = False) -> Tensor:
    """`ops.gather(t, indices, axis=0, zero_OOR=False)`."""

def gcg() -> Graph:
    """The current graph (`gcg`)."""

def gelu(t: Tensor) -> Tensor:
    """`ops.gelu(t)`, elementwise."""

def gelu_(t: Tensor) -> Tensor:
    """`ops.gelu_(t)`, elementwise."""

def geluerf(t: Tensor) -> Tensor:
    """`ops.geluerf(t)`, elementwise."""

def geluerf_(t: Tensor) -> Tensor:
    """`ops.geluerf_(t)`, elementwise."""

def gir() -> Ir:
    """The current IR (`gir`)."""

def gmg() -> Graph:
    """The current IR's main graph (`gmg`)."""

def graph_input(shape: Sequence[int], dtype: Any, name: Optional[str] = None, by_ref: bool = False) -> Tensor:
    """`graph_input(shape, dtype, name=None, by_ref=False)`: an input of the current subgraph."""

def graph_output(t: Tensor) -> None:
    """`graph_output(t)`: mark `t` an output of the current subgraph."""

def greater(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.greater(lhs, rhs)`, with numpy broadcasting."""

def group_norm(t: Tensor, weight: Tensor, bias: Tensor, num_groups: int, eps: float = 1e-05) -> Tensor:
    """`ops.group_norm(t, weight, bias, num_groups, eps=1e-5)`."""

def groupedgather(t: Tensor, indices: Tensor, axis: int = 0, group_size: int = 1, available_memory_proportion: Optional[float] = None, zero_OOR: bool = False) -> Tensor:
    """`ops.groupedgather(t, indices, axis=0, group_size=1, available_memory_proportion=None, zero_OOR=False)`: a gather per group; `t` and `indices` have a leading dimension of `group_size` groups and group `g` of the result is `gather(t[g], indices[g])` along `axis`."""

def h2d_stream(shape: Sequence[int], dtype: Any, name: Optional[str] = None) -> HostToDeviceStream:
    """`h2d_stream(shape, dtype, name=None)`."""

def histogram(t: Tensor, levels: Sequence[int], absolute_of_input: bool) -> Tensor:
    """`ops.histogram(t, levels, absolute_of_input)`: counts of elements below, between and above the levels."""

def host_load(h2d_stream: HostToDeviceStream, name: Optional[str] = None) -> Tensor:
    """`ops.host_load(h2d_stream, name=None)`."""

def host_store(d2h_stream: DeviceToHostStream, t: Tensor) -> None:
    """`ops.host_store(d2h_stream, t)`."""

def identity(t: Tensor, output_name: Optional[str] = None) -> Tensor:
    """`ops.identity(t, output_name=None)`."""

def increment_mod(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`ops.increment_mod(t, increment, modulus)`: (t + increment) mod modulus."""

def increment_mod_(t: Tensor, increment: float, modulus: float) -> Tensor:
    """`ops.increment_mod_(t, increment, modulus)`, in place."""

def init(shape: Sequence[int], dtype: Any, name: Optional[str] = None, init_type: str = 'zero') -> Tensor:
    """`ops.init(shape, dtype, name=None, init_type="zero")`."""

def interpolate(t: Tensor, scale_factor: Optional[Sequence[float]] = None, mode: str = 'nearest', nearest_mode: str = 'round_prefer_floor', coordinate_transformation_mode: str = 'half_pixel') -> Tensor:
    """`ops.interpolate(t, scale_factor=(1.0, 1.0, 1.0, 1.0), mode='nearest', nearest_mode='round_prefer_floor', coordinate_transformation_mode='half_pixel')`: resize every dim of `t` by its scale (output dim `floor(input dim * scale)`). `mode` 'nearest' or 'linear' ('cubic' is not provided); `nearest_mode` 'round_prefer_floor', 'round_prefer_ceil', 'floor' or 'ceil'; `coordinate_transformation_mode` 'half_pixel', 'pytorch_half_pixel', 'align_corners' or 'asymmetric'."""

def io_tile_copy(t: Tensor) -> Tensor:
    """`ops.io_tile_copy(t)`: copy a tensor between the compute and IO tiles (to the IO tiles inside `popxl.io_tiles()`, to the compute tiles outside it)."""

def ipu_copy(t: Tensor, destination: int, source: Optional[int] = None) -> Tensor:
    """`ops.ipu_copy(t, destination, source=None)`: copy a tensor to IPU `destination`. By default the source is the IPU of the tensor's producer; a tensor without one needs `source`."""

def isfinite(t: Tensor) -> Tensor:
    """`ops.isfinite(t)`, elementwise."""

def isinf(t: Tensor) -> Tensor:
    """`ops.isinf(t)`, elementwise."""

def isnan(t: Tensor) -> Tensor:
    """`ops.isnan(t)`, elementwise."""

def l1(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.l1(t, axis=None, keepdims=False)`."""

def l2(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.l2(t, axis=None, keepdims=False)`."""

def lamb_square(t: Tensor) -> Tensor:
    """`ops.lamb_square(t)`: the sum of squares, as LAMB uses it."""

def lamb_updater(acc_first_order: Tensor, acc_second_order: Tensor, weight: Optional[Tensor] = None, time_step: Optional[Tensor] = None, weight_decay: Optional[Union[float, Tensor]] = None, beta1: Optional[Union[float, Tensor]] = None, beta2: Optional[Union[float, Tensor]] = None, epsilon: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.var_updates.lamb_updater(acc_first_order, acc_second_order, weight=None, time_step=None, weight_decay=None, beta1=None, beta2=None, epsilon=1e-07)`: LAMB's updater term (Adam's; the trust ratio is applied by `adam_var_update`)."""

def layer_norm(t: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-05) -> Tensor:
    """`ops.layer_norm(t, weight, bias, eps=1e-5)`."""

def less(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.less(lhs, rhs)`, with numpy broadcasting."""

def log(t: Tensor) -> Tensor:
    """`ops.log(t)`, elementwise."""

def log1p(t: Tensor) -> Tensor:
    """`ops.log1p(t)`, elementwise."""

def log2(t: Tensor) -> Tensor:
    """`ops.log2(t)`, elementwise."""

def logical_and(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.logical_and(lhs, rhs)`, with numpy broadcasting."""

def logical_not(t: Tensor) -> Tensor:
    """`ops.logical_not(t)`, elementwise."""

def logical_or(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.logical_or(lhs, rhs)`, with numpy broadcasting."""

def logsum(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.logsum(t, axis=None, keepdims=False)`."""

def logsumexp(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.logsumexp(t, axis=None, keepdims=False)`."""

def matmul(lhs: Tensor, rhs: _TensorLike, available_memory_proportion: Optional[float] = None, output_type: Any = None, partials_type: Any = None) -> Tensor:
    """`ops.matmul(lhs, rhs, available_memory_proportion=None, output_type=None, partials_type=None)`: the matrix product with numpy's `matmul` rules."""

def matmul_pow2scaled(lhs: Tensor, rhs: _TensorLike, log2_scale: Any, available_memory_proportion: Optional[float] = None) -> Tensor:
    """`ops.matmul_pow2scaled(lhs, rhs, log2_scale, available_memory_proportion=None)`: `(lhs @ rhs) · 2^log2_scale` as float16."""

def max(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.max(t, axis=None, keepdims=False)`."""

def max_pool(t: Tensor, kernel_size: Sequence[int], stride: Optional[Sequence[int]] = None, padding: Optional[Sequence[int]] = None, out_pads: Optional[Sequence[int]] = None, dilation: Optional[Sequence[int]] = None, in_dilation: Optional[Sequence[int]] = None, auto_pad: str = 'not_set', ceil_mode: bool = False) -> Tensor:
    """`ops.max_pool(t, kernel_size, stride=None, padding=None, out_pads=None, dilation=None, in_dilation=None, auto_pad='not_set', ceil_mode=False)`."""

def maximum(*ts: Tensor) -> Tensor:
    """`ops.maximum(*ts)`."""

def mean(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.mean(t, axis=None, keepdims=False)`."""

def median(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.median(t, axis=None, keepdims=False)`."""

def merge_exchange() -> int:
    """`transforms.merge_exchange()`: merge the current graph's host and remote transfers."""

def min(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.min(t, axis=None, keepdims=False)`."""

def minimum(*ts: Tensor) -> Tensor:
    """`ops.minimum(*ts)`."""

def mul(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.mul(lhs, rhs)`, with numpy broadcasting."""

def negate(t: Tensor) -> Tensor:
    """`ops.negate(t)`, elementwise."""

def nll_loss(probs: Tensor, labels: Tensor, ignore_index: Optional[int] = None, reduction: str = 'mean', log_prob: bool = False) -> Tensor:
    """`ops.nll_loss(probs, labels, ignore_index=None, reduction='mean', log_prob=False)`."""

def nll_loss_with_softmax_grad(probs: Tensor, labels: Tensor, loss_grad: Optional[Union[float, Tensor]] = None, ignore_index: Optional[int] = None, reduction: str = 'mean') -> Tuple[Tensor, Tensor]:
    """`ops.nll_loss_with_softmax_grad(probs, labels, loss_grad=1, ignore_index=None, reduction='mean')` -> (loss, gradient of the logits)."""

def onehot(t: Tensor, num_classes: Tensor, values: Tensor, axis: int) -> Tensor:
    """`ops.onehot(t, num_classes, values, axis)`."""

def pow(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.pow(lhs, rhs)`, with numpy broadcasting."""

def pow2scale_cast_from_fp8(t: Tensor, log2_scale: Any, data_type: Any) -> Tensor:
    """`ops.pow2scale_cast_from_fp8(t, log2_scale, data_type)`: `cast(t, data_type) · 2^log2_scale`."""

def pow2scale_cast_to_fp8(t: Tensor, log2_scale: Any, data_type: Any) -> Tensor:
    """`ops.pow2scale_cast_to_fp8(t, log2_scale, data_type)`: `cast(t · 2^log2_scale, data_type)`."""

def print_tensor(t: Tensor, title: Optional[str] = None, print_self: bool = True, print_gradient: bool = False) -> Tensor:
    """`ops.print_tensor(t, title=None, print_self=True, print_gradient=False)`: prints the tensor's value to stderr when it runs; returns the same values."""

def prod(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.prod(t, axis=None, keepdims=False)`."""

def random_normal(seed_tensor: Tensor, shape: Sequence[int], mean: float = 0.0, std: float = 1.0, dtype: Any = None) -> Tensor:
    """`ops.random_normal(seed_tensor, shape, mean=0.0, std=1.0, dtype=popxl.float32)`."""

def random_uniform(seed_tensor: Tensor, shape: Sequence[int], low: float = 0.0, high: float = 1.0, dtype: Any = None) -> Tensor:
    """`ops.random_uniform(seed_tensor, shape, low=0.0, high=1.0, dtype=popxl.float32)`."""

def relu(t: Tensor) -> Tensor:
    """`ops.relu(t)`, elementwise."""

def relu_(t: Tensor) -> Tensor:
    """`ops.relu_(t)`, elementwise."""

def remote_buffer(tensor_shape: Any, tensor_dtype: Any, entries: int = 1) -> RemoteBuffer:
    """`remote_buffer(tensor_shape, tensor_dtype, entries=1)`."""

def remote_code_load(graph: Graph, destination: int) -> None:
    """`ops.remote_code_load(graph, destination)`: the graph's code must be in tile memory from here."""

def remote_load(remote_buffer: RemoteBuffer, offset: int, name: Optional[str] = None) -> Tensor:
    """`ops.remote_load(remote_buffer, offset, name=None)`."""

def remote_load_(remote_buffer: RemoteBuffer, offset: int, t: Tensor) -> Tensor:
    """`ops.remote_load_(remote_buffer, offset, t)`."""

def remote_replica_sharded_variable(data: Tensor, remote_buffer: RemoteBuffer, offset: int = 0, dtype: Any = None, name: Optional[str] = None, downcast: bool = True, replica_grouping: Optional[ReplicaGrouping] = None, retrieval_mode: Optional[str] = None) -> Tensor:
    """`remote_replica_sharded_variable(data, remote_buffer, offset=0, dtype=None, name=None, downcast=True, replica_grouping=None, retrieval_mode=None)`."""

def remote_store(remote_buffer: RemoteBuffer, offset: int, t: Tensor) -> None:
    """`ops.remote_store(remote_buffer, offset, t)`."""

def remote_variable(data: Tensor, remote_buffer: RemoteBuffer, offset: int = 0, dtype: Any = None, name: Optional[str] = None, downcast: bool = True, replica_grouping: Optional[ReplicaGrouping] = None, retrieval_mode: Optional[str] = None) -> Tensor:
    """`remote_variable(data, remote_buffer, offset=0, dtype=None, name=None, downcast=True, replica_grouping=None, retrieval_mode=None)`."""

def repeat(graph: Graph, repeat_count: int, *inputs: Tensor, inputs_dict: Optional[Mapping[Tensor, Any]] = None) -> Tuple[Tensor, ...]:
    """`ops.repeat(graph, repeat_count, *inputs, inputs_dict=None)`."""

def repeat_with_info(graph: Graph, repeat_count: int, *inputs: Tensor, inputs_dict: Optional[Mapping[Tensor, Any]] = None) -> CallSiteInfo:
    """`ops.repeat_with_info(graph, repeat_count, *inputs, inputs_dict=None)`."""

def replica_sharded_buffer(tensor_shape: Any, tensor_dtype: Any, replica_grouping: Optional[ReplicaGrouping] = None, shard_over: Any = None, entries: int = 1) -> RemoteBuffer:
    """`replica_sharded_buffer(tensor_shape, tensor_dtype, replica_grouping=None, shard_over=None, entries=1)`."""

def replica_sharded_slice(t: Tensor, group: Optional[ReplicaGrouping] = None) -> Tensor:
    """`ops.collectives.replica_sharded_slice(t, group=None)`."""

def replica_sharded_variable(data: Tensor, dtype: Any = None, name: Optional[str] = None, downcast: bool = True, replica_grouping: Optional[ReplicaGrouping] = None, shard_over: Any = None, retrieval_mode: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    """`replica_sharded_variable(data, dtype=None, name=None, downcast=True, replica_grouping=None, shard_over=None, retrieval_mode=None)` -> (remote variable, its loaded shard)."""

def replicated_all_gather(t: Tensor, axis: int = 0, group: Optional[ReplicaGrouping] = None, output_shape: str = 'auto') -> Tensor:
    """`ops.collectives.replicated_all_gather(t, axis=0, group=None, output_shape='auto')`."""

def replicated_all_reduce(t: Tensor, op: str = 'add', group: Optional[ReplicaGrouping] = None) -> Tensor:
    """`ops.collectives.replicated_all_reduce(t, op='add', group=None)`."""

def replicated_all_reduce_(t: Tensor, op: str = 'add', group: Optional[ReplicaGrouping] = None) -> Tensor:
    """`ops.collectives.replicated_all_reduce_(t, op='add', group=None)`, in place."""

def replicated_reduce_scatter(t: Tensor, op: str = 'add', group: Optional[ReplicaGrouping] = None, configure_output_for_replicated_tensor_sharding: bool = False) -> Tensor:
    """`ops.collectives.replicated_reduce_scatter(t, op='add', group=None, configure_output_for_replicated_tensor_sharding=False)`."""

def replicated_slice(t: Tensor, axis: int = 0, group: Optional[ReplicaGrouping] = None) -> Tensor:
    """`ops.collectives.replicated_slice(t, axis=0, group=None)`."""

def reshape(t: Tensor, shape: Sequence[int]) -> Tensor:
    """`ops.reshape(t, shape)`."""

def reshape_(t: Tensor, shape: Sequence[int]) -> Tensor:
    """`ops.reshape_(t, shape)`."""

def roi_align(t: Tensor, rois: Tensor, batch_index: Tensor, output_size: Tuple[int, int], spatial_scale: float, sampling_ratio: int) -> Tensor:
    """`ops.roi_align(t, rois, batch_index, output_size, spatial_scale, sampling_ratio)`: average pooling of `t` `[N, C, H, W]` over regions of interest `rois` `[R, 4]` (`[x1, y1, x2, y2]`, scaled by `spatial_scale`) of the images `batch_index` `[R]`, giving `[R, C, output_size[0], output_size[1]]`; each bin averages `sampling_ratio`² bilinear samples (0: adaptive)."""

def scaled_add(X: Tensor, Y: _TensorLike, a: Optional[Union[float, Tensor]] = None, b: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.scaled_add(X, Y, a=1.0, b=1.0)` = aX + bY."""

def scaled_add_(X: Tensor, Y: _TensorLike, a: Optional[Union[float, Tensor]] = None, b: Optional[Union[float, Tensor]] = None) -> Tensor:
    """`ops.scaled_add_(X, Y, a=1.0, b=1.0)`: X = aX + bY in place."""

def scatter(t: Tensor, indices: Tensor, values: Tensor, axis: int = 0) -> Tensor:
    """`ops.scatter(t, indices, values, axis=0)`: a copy of `t` with `values` written at `indices`."""

def scatter_reduce(data: Tensor, indices: Tensor, reduction: str, initial_values: Optional[Tensor] = None, axis: int = 0, axis_size: Optional[int] = None, enable_index_broadcast: bool = True, available_memory_proportion: Optional[float] = None) -> Tensor:
    """`ops.scatter_reduce(data, indices, reduction, initial_values=None, axis=0, axis_size=None, enable_index_broadcast=True, available_memory_proportion=None)`: reduce `data` into an output at `indices` along `axis` (`reduction` one of 'sum', 'min', 'max', 'none')."""

def shaped_dropout(t: Tensor, seed_tensor: Tensor, shape: Sequence[int], ratio: float) -> Tensor:
    """`ops.shaped_dropout(t, seed_tensor, shape, ratio)`."""

def sigmoid(t: Tensor) -> Tensor:
    """`ops.sigmoid(t)`, elementwise."""

def sign(t: Tensor) -> Tensor:
    """`ops.sign(t)`, elementwise."""

def sin(t: Tensor) -> Tensor:
    """`ops.sin(t)`, elementwise."""

def slice(t: Tensor, start: Optional[Union[int, Sequence[int]]] = None, stop: Optional[Union[int, Sequence[int]]] = None, step: Optional[Union[float, Tensor]] = None, axis: Optional[int] = None) -> Tensor:
    """`ops.slice(t, start=None, stop=None, step=None, axis=None)`."""

def slice_(t: Tensor, start: Optional[Union[int, Sequence[int]]] = None, stop: Optional[Union[int, Sequence[int]]] = None, step: Optional[Union[float, Tensor]] = None, axis: Optional[int] = None) -> Tensor:
    """`ops.slice_(t, start=None, stop=None, step=None, axis=None)`: a view."""

def softmax(t: Tensor, axis: int) -> Tensor:
    """`ops.softmax(t, axis)`."""

def sparse_accumulate_(t: Tensor, X: Tensor, indices: Tensor, axis: int = 0, f: Optional[Union[float, Tensor]] = None, W: Optional[Tensor] = None) -> Tensor:
    """`ops.var_updates.sparse_accumulate_(t, X, indices, axis=0, f=None, W=None)`: `t[.., indices[j], ..] += f * X[.., j, ..]` along `axis` in place (repeated indices add up). `W` is the weight whose layout `t` copies on the IPU; its shape must be `t`'s."""

def split(t: Tensor, splits: Union[int, Sequence[int]], axis: int = 0) -> List[Tensor]:
    """`ops.split(t, splits, axis=0)`: `splits` an int (equal parts) or a list of sizes."""

def split_random_seed(seed: int, n: int = 2) -> List[Tensor]:
    """`ops.split_random_seed(seed, n=2)`."""

def sqrt(t: Tensor) -> Tensor:
    """`ops.sqrt(t)`, elementwise."""

def squeeze(t: Tensor, axes: Optional[Sequence[int]] = None) -> Tensor:
    """`ops.squeeze(t, axes=None)`."""

def sub(lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.sub(lhs, rhs)`, with numpy broadcasting."""

def subsample(t: Tensor, strides: Sequence[int]) -> Tensor:
    """`ops.subsample(t, strides)`."""

def sum(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.sum(t, axis=None, keepdims=False)`."""

def sumsquare(t: Tensor, axis: Optional[int] = None, keepdims: bool = False) -> Tensor:
    """`ops.sumsquare(t, axis=None, keepdims=False)`."""

def swish(t: Tensor) -> Tensor:
    """`ops.swish(t)`, elementwise."""

def swish_(t: Tensor) -> Tensor:
    """`ops.swish_(t)`, elementwise."""

def tanh(t: Tensor) -> Tensor:
    """`ops.tanh(t)`, elementwise."""

def tied_gather(t: Tensor, indices: Tensor, axis: int = 0, available_memory_proportion: Optional[float] = None, zero_OOR: bool = False) -> Tensor:
    """`ops.tied_gather(t, indices, axis=0, available_memory_proportion=None, zero_OOR=False)`: `gather` of a weight tied to a matmul (same values and gradient as `gather`)."""

def topk(t: Tensor, k: int, axis: int = ..., largest: bool = True, sorted: bool = True) -> Tuple[Tensor, Tensor]:
    """`ops.topk(t, k, axis=-1, largest=True, sorted=True)` -> (values, indices)."""

def transpose(t: Tensor, permutation: Optional[Sequence[int]] = None) -> Tensor:
    """`ops.transpose(t, permutation=None)`."""

def transpose_(t: Tensor, permutation: Optional[Sequence[int]] = None) -> Tensor:
    """`ops.transpose_(t, permutation=None)`."""

def variable(data: Tensor, dtype: Any = None, name: Optional[str] = None, downcast: bool = True, replica_grouping: Optional[ReplicaGrouping] = None, retrieval_mode: Optional[str] = None, log2_scale: Any = None, nan_on_overflow: Any = None) -> Tensor:
    """`variable(data, dtype=None, name=None, downcast=True, replica_grouping=None, retrieval_mode=None, log2_scale=None, nan_on_overflow=None)`: a variable of the main graph (grouped data has a leading `num_groups` dimension; the last two apply to float data for a float8 variable)."""

def where(condition: Tensor, lhs: Tensor, rhs: _TensorLike) -> Tensor:
    """`ops.where(condition, lhs, rhs)`."""

