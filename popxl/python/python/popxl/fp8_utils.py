"""``popxl.fp8_utils``: host conversions to and from PopXL's float8 formats, and
the choice of a power-of-two scale for a cast.

Float8 host data is a numpy array of the one-byte codes under the structured
dtype ``popxl.dtypes.np_dtype_float8_143`` (``np.dtype([("float8_143", "u1")])``)
or ``np_dtype_float8_152``. Rounding is to nearest, ties to even; the codes are
computed natively (``popart_ir::float8``), the same functions the ``cpu``
device's float8 ops use.
"""

import numpy as np

from popxl import _native
from popxl.dtypes import dtype as _dtype
from popxl.dtypes import float8_143, float8_152, float16, float32, float64, np_dtype_float8_143, np_dtype_float8_152

__all__ = [
    "host_pow2scale_cast_to_fp8",
    "host_pow2scale_cast_from_fp8",
    "host_fp8_mse_scale",
    "host_fp8_mse_scale_pb",
]

_NUMPY_OF = {float8_143: np_dtype_float8_143, float8_152: np_dtype_float8_152}


def _to_numpy(src):
    try:
        import torch

        if isinstance(src, torch.Tensor):
            return src.detach().numpy()
    except ImportError:
        pass
    return src if isinstance(src, np.ndarray) else np.asarray(src, order="C")


def host_pow2scale_cast_to_fp8(src, dtype: _dtype = None, log2_scale: int = 0, nan_on_overflow: bool = True):
    """Run a fused operation ``cast(src * pow2(log2_scale), dtype)`` on the host.

    Args:
        src: The data to convert: a numpy array of dtype ``np.float16``,
            ``np.float32`` or ``np.float64`` (torch tensors and what numpy
            converts are accepted).
        dtype: ``popxl.float8_143`` or ``popxl.float8_152``.
        log2_scale: The data is multiplied by ``pow2(log2_scale)`` before
            casting; an int in ``[-32, 32)``.
        nan_on_overflow: If set, values the format cannot represent become NaN,
            else they saturate to the largest magnitude.

    Raises:
        RuntimeError: If ``dtype`` or ``src.dtype`` are not supported.
        ValueError: If ``log2_scale`` is outside ``[-32, 32)``.

    Returns:
        np.ndarray: The codes, with dtype ``np_dtype_float8_143`` or ``np_dtype_float8_152``.
    """
    src = _to_numpy(src)
    if dtype not in _NUMPY_OF:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    codes = _native._host_pow2scale_cast_to_fp8(src, dtype, int(log2_scale), bool(nan_on_overflow))
    return codes.reshape(src.shape).view(_NUMPY_OF[dtype])


def host_pow2scale_cast_from_fp8(src: np.ndarray, dtype: _dtype = None, log2_scale: int = 0):
    """Run a fused operation ``cast(src, dtype) * pow2(log2_scale)`` on the host.

    Args:
        src: float8 codes, a numpy array of dtype ``np_dtype_float8_143`` or
            ``np_dtype_float8_152``.
        dtype: ``popxl.float16``, ``popxl.float32`` or ``popxl.float64``.
        log2_scale: The data is multiplied by ``pow2(log2_scale)`` after
            casting; an int in ``[-32, 32)``.

    Raises:
        RuntimeError: If ``src.dtype`` or ``dtype`` are not supported.
        ValueError: If ``log2_scale`` is outside ``[-32, 32)``.

    Returns:
        np.ndarray: The values, with dtype ``np.float16``, ``np.float32`` or ``np.float64``.
    """
    if not isinstance(src, np.ndarray) or src.dtype not in (np_dtype_float8_143, np_dtype_float8_152):
        raise RuntimeError(f"src.dtype {getattr(src, 'dtype', type(src))} not currently supported.")
    if dtype not in (float16, float32, float64):
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    fmt = float8_143 if src.dtype == np_dtype_float8_143 else float8_152
    return _native._host_pow2scale_cast_from_fp8(src.view(np.uint8), fmt, dtype, int(log2_scale))


def _mse_scale(src, dtype):
    src = _to_numpy(src)
    if src.dtype not in (np.float16, np.float32):
        raise RuntimeError(f"dtype {src.dtype} not currently supported.")
    return _native._host_fp8_mse_scale(np.ascontiguousarray(src), dtype == float8_152)


def host_fp8_mse_scale(src, dtype: _dtype = None):
    """Choose the log2 scale ``s`` for which ``cast(src * 2**s, dtype)`` loses the
    least information, by a mean-square-error model over the binades of ``src``.

    The model: a histogram of ``|src|`` over the float32 binades; for each
    scaling bias ``b`` in ``[-31, 31]`` the float8 format's binades, shifted by
    ``b``, cover some of them; values in binades below count their whole
    magnitude as error, those inside the format's rounding error, those above
    their distance to the format's largest binade. The bias with the least
    error wins (the median one among equals) and ``s = -b``.

    Args:
        src: A numpy array (or torch tensor, or what numpy converts) of dtype
            ``float16`` or ``float32``.
        dtype: ``popxl.float8_143`` (the default, also for ``None``) or
            ``popxl.float8_152``.

    Raises:
        RuntimeError: If ``src.dtype`` or ``dtype`` are not supported.
        ValueError: If ``src`` is empty.

    Returns:
        tuple: ``(error, s)``: the model's error of the chosen scale (a float)
        and the scale ``s`` (an int in ``[-31, 31]``).
    """
    if dtype is not None and dtype not in _NUMPY_OF:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    return _mse_scale(src, dtype)


def host_fp8_mse_scale_pb(src, dtype: _dtype = None) -> int:
    """Choose the log2 scale ``s`` for which ``cast(src * 2**s, dtype)`` loses the
    least information (see :func:`host_fp8_mse_scale`, whose scale this is).

    Args:
        src: A numpy array (or torch tensor, or what numpy converts) of dtype
            ``float16`` or ``float32``.
        dtype: ``popxl.float8_143`` or ``popxl.float8_152``.

    Raises:
        RuntimeError: If ``dtype`` or ``src.dtype`` are not supported.
        ValueError: If ``src`` is empty.

    Returns:
        int: The scale ``s``, in ``[-31, 31]``.
    """
    if dtype not in _NUMPY_OF:
        raise RuntimeError(f"dtype {dtype} not currently supported.")
    return _mse_scale(src, dtype)[1]
