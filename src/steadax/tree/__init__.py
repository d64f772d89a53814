"""Tree utilities (Optax's ``optax.tree``): algebra, reductions, casting, random trees, state access.

Every function takes and returns pytrees of arrays; see ``docs/tree.md`` for the dtype rules
(elementwise ops keep the promoted dtype of their inputs, reductions accumulate in at least float32).
``steadax.tree_utils`` holds the same functions under their ``tree_*`` names.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ..transforms._moments import (
      bias_correction as bias_correction,
      update_infinity_moment as update_infinity_moment,
      update_moment as update_moment,
      update_moment_per_elem_norm as update_moment_per_elem_norm,
  )
  from ._casting import (
      tree_cast as cast,
      tree_cast_like as cast_like,
      tree_dtype as dtype,
  )
  from ._math import (
      tree_add as add,
      tree_add_scale as add_scale,
      tree_batch_shape as batch_shape,
      tree_clip as clip,
      tree_conj as conj,
      tree_div as div,
      tree_full_like as full_like,
      tree_mul as mul,
      tree_ones_like as ones_like,
      tree_real as real,
      tree_scale as scale,
      tree_sub as sub,
      tree_where as where,
      tree_zeros_like as zeros_like,
  )
  from ._random import (
      tree_random_like as random_like,
      tree_split_key_like as split_key_like,
      tree_unwrap_random_key_data as unwrap_random_key_data,
  )
  from ._reduce import (
      tree_allclose as allclose,
      tree_max as max,  # noqa: A004
      tree_min as min,  # noqa: A004
      tree_norm as norm,
      tree_size as size,
      tree_sum as sum,  # noqa: A004
      tree_vdot as vdot,
  )
  from ._state import (
      NamedTupleKey as NamedTupleKey,
      tree_get as get,
      tree_get_all_with_path as get_all_with_path,
      tree_map_params as map_params,
      tree_set as set,  # noqa: A004
  )

__all__ = [
    "add", "add_scale", "allclose", "batch_shape", "bias_correction", "cast", "cast_like", "clip",
    "conj", "div", "dtype", "full_like", "get", "get_all_with_path", "map_params", "max", "min",
    "mul", "norm", "ones_like", "random_like", "real", "scale", "set", "size", "split_key_like",
    "sub", "sum", "unwrap_random_key_data", "update_infinity_moment", "update_moment",
    "update_moment_per_elem_norm", "vdot", "where", "zeros_like", "NamedTupleKey",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
