"""``popxl.ops.var_updates``: in-place variable updates."""

from popxl._native import (  # noqa: F401
    accumulate_, accumulate_mean_, accumulate_moving_average_, accumulate_moving_average_square_,
    accumulate_square_, accumulator_scale_, accumulator_zero_, copy_var_update_,
)
from popxl._native import (  # noqa: F401,E402
    adam_updater, adam_var_update, adamax_updater, lamb_updater, sparse_accumulate_,
)
