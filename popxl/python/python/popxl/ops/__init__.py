"""``popxl.ops``: the operations, under PopXL's names, parameter names and defaults."""

from popxl._native import (  # noqa: F401
    CallSiteInfo, abs, accumulator_zero_, add, add_, argmax, argmin, call, call_with_info, cast, ceil, clip,
    concat, cos, cumsum, detach, div, dropout, equal, exp, exp_, flatten, flatten_, floor, fmod, gather, gelu,
    gelu_, geluerf, geluerf_, greater, group_norm, host_load, host_store, identity, l1, l2, layer_norm, less,
    log, log1p, log2, logical_and, logical_not, logical_or, logsum, logsumexp, matmul, max, maximum, mean,
    median, min, minimum, mul, negate, nll_loss, nll_loss_with_softmax_grad, pow, prod, relu, relu_, repeat,
    repeat_with_info, reshape, reshape_, scaled_add, scaled_add_, sigmoid, sign, sin, slice, softmax, split,
    sqrt, squeeze, sub, sum, sumsquare, swish, swish_, tanh, topk, transpose, transpose_,
)
from popxl._native import (  # noqa: F401
    average_pool, batch_norm_inference, conv, dynamic_slice, dynamic_update, dynamic_update_,
    increment_mod, increment_mod_, isfinite, isinf, isnan, max_pool, onehot, random_normal, random_uniform,
    split_random_seed, subsample,
)
from popxl._native import concat_, detach_, histogram, lamb_square, print_tensor, scatter, shaped_dropout, slice_  # noqa: F401,E501
from popxl._native import init, remote_code_load, remote_load, remote_load_, remote_store, where  # noqa: F401
from popxl._native import (  # noqa: F401
    ConditionalSiteInfo, batch_norm, conditional_with_info, conv_transpose, groupedgather, interpolate,
    io_tile_copy, ipu_copy, roi_align, scatter_reduce, tied_gather,
)
from popxl._native import conv_pow2scaled, conv_transpose_pow2scaled, matmul_pow2scaled  # noqa: F401
from popxl._native import pow2scale_cast_from_fp8, pow2scale_cast_to_fp8  # noqa: F401
from popxl.ops import collectives, var_updates  # noqa: F401
from popxl.ops.var_updates import (  # noqa: F401
    accumulate_, accumulate_mean_, accumulate_moving_average_, accumulate_moving_average_square_,
    accumulate_square_, accumulator_scale_, copy_var_update_,
)


def clamp(t, min=float("-inf"), max=float("inf")):
    """``clip`` under its other name."""
    return clip(t, min, max)


def rename(t, name):
    """The same values under a new name (``identity``)."""
    return identity(t, name)


def conditional(cond, then_branch, else_branch, then_inputs=None, else_inputs=None, then_inputs_dict=None,
                else_inputs_dict=None):
    """Execute ``then_branch`` or ``else_branch`` according to the value of tensor ``cond`` at runtime.

    The ``then/else_inputs`` and ``then/else_inputs_dict`` tensors are passed as the branches'
    inputs, positionally or by subgraph input. Both branches must have the same outputs
    (number, types, shapes); returns the outputs of the branch taken, as a tuple.
    """
    info = conditional_with_info(cond, then_branch, else_branch, then_inputs, else_inputs, then_inputs_dict,
                                 else_inputs_dict)
    return tuple(info.outputs)
