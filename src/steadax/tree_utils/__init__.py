"""Optax's ``optax.tree_utils``: the functions of ``steadax.tree`` under their ``tree_*`` names.

Optax 0.2.8's deprecated names of this module (``tree_scalar_mul``, ``tree_add_scalar_mul``,
``tree_l1_norm``, ``tree_l2_norm``, ``tree_linf_norm``) resolve too, with Optax's
``DeprecationWarning``: each is the current function it names (``tree_scale``, ``tree_add_scale``)
or ``tree_norm`` with the matching ``ord``.
"""

import functools as _functools

from ..transforms._moments import (
    bias_correction as tree_bias_correction,
    update_infinity_moment as tree_update_infinity_moment,
    update_moment as tree_update_moment,
    update_moment_per_elem_norm as tree_update_moment_per_elem_norm,
)
from ..tree._casting import (
    tree_cast as tree_cast,
    tree_cast_like as tree_cast_like,
    tree_dtype as tree_dtype,
)
from ..tree._math import (
    tree_add as tree_add,
    tree_sub as tree_sub,
    tree_mul as tree_mul,
    tree_div as tree_div,
    tree_scale as tree_scale,
    tree_add_scale as tree_add_scale,
    tree_where as tree_where,
    tree_clip as tree_clip,
    tree_conj as tree_conj,
    tree_real as tree_real,
    tree_batch_shape as tree_batch_shape,
    tree_zeros_like as tree_zeros_like,
    tree_ones_like as tree_ones_like,
    tree_full_like as tree_full_like,
)
from ..tree._random import (
    tree_split_key_like as tree_split_key_like,
    tree_random_like as tree_random_like,
    tree_unwrap_random_key_data as tree_unwrap_random_key_data,
)
from ..tree._reduce import (
    tree_sum as tree_sum,
    tree_max as tree_max,
    tree_min as tree_min,
    tree_norm as tree_norm,
    tree_vdot as tree_vdot,
    tree_size as tree_size,
    tree_allclose as tree_allclose,
)
from ..tree._state import (
    NamedTupleKey as NamedTupleKey,
    tree_get_all_with_path as tree_get_all_with_path,
    tree_get as tree_get,
    tree_set as tree_set,
    tree_map_params as tree_map_params,
)

__all__ = [
    "NamedTupleKey", "tree_add", "tree_add_scale", "tree_allclose", "tree_batch_shape",
    "tree_bias_correction", "tree_cast", "tree_cast_like", "tree_clip", "tree_conj", "tree_div",
    "tree_dtype", "tree_full_like", "tree_get", "tree_get_all_with_path", "tree_map_params", "tree_max",
    "tree_min", "tree_mul", "tree_norm", "tree_ones_like", "tree_random_like", "tree_real", "tree_scale",
    "tree_set", "tree_size", "tree_split_key_like", "tree_sub", "tree_sum", "tree_unwrap_random_key_data",
    "tree_update_infinity_moment", "tree_update_moment", "tree_update_moment_per_elem_norm", "tree_vdot",
    "tree_where", "tree_zeros_like",
]

_deprecations = {
    # Optax deprecated these in 0.2.5 and still serves them in 0.2.8.
    "tree_scalar_mul": (
        "steadax.tree_utils.tree_scalar_mul is deprecated: use steadax.tree_utils.tree_scale "
        "(as optax.tree_utils.tree_scalar_mul since optax v0.2.5).",
        lambda: tree_scale,
    ),
    "tree_add_scalar_mul": (
        "steadax.tree_utils.tree_add_scalar_mul is deprecated: use steadax.tree_utils.tree_add_scale "
        "(as optax.tree_utils.tree_add_scalar_mul since optax v0.2.5).",
        lambda: tree_add_scale,
    ),
    "tree_l1_norm": (
        "steadax.tree_utils.tree_l1_norm is deprecated: use steadax.tree_utils.tree_norm(..., ord=1) "
        "(as optax.tree_utils.tree_l1_norm since optax v0.2.5).",
        lambda: _functools.partial(tree_norm, ord=1),
    ),
    "tree_l2_norm": (
        "steadax.tree_utils.tree_l2_norm is deprecated: use steadax.tree_utils.tree_norm "
        "(as optax.tree_utils.tree_l2_norm since optax v0.2.5).",
        lambda: _functools.partial(tree_norm, ord=2),
    ),
    "tree_linf_norm": (
        "steadax.tree_utils.tree_linf_norm is deprecated: use "
        "steadax.tree_utils.tree_norm(..., ord=jnp.inf) (as optax.tree_utils.tree_linf_norm since "
        "optax v0.2.5).",
        lambda: _functools.partial(tree_norm, ord="inf"),
    ),
}

from .._core._deprecations import deprecation_getattr as _deprecation_getattr  # noqa: E402

__getattr__ = _deprecation_getattr(__name__, _deprecations)
