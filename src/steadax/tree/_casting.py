"""Casting trees and reading their dtype."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from .._core._policy import key_path_str, promote_types
from ._leafwise import map_leaves
from .._core._types import Params

__all__ = ["tree_cast", "tree_cast_like", "tree_dtype"]


def _astype(x: Any, dtype: Any) -> Any:
  # tree_cast is the public astype (Optax's tree.cast): the user asked for exactly this cast.
  return x.astype(dtype) if hasattr(x, "astype") else jnp.asarray(x, dtype)


def tree_cast(tree: Params, dtype: DTypeLike | None) -> Any:
  """Casts every leaf to ``dtype``; ``dtype=None`` returns ``tree`` unchanged.

  Args:
    tree: a tree of arrays.
    dtype: the target dtype, or None.

  Returns:
    The cast tree.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.cast({"a": jnp.array([1.0])}, jnp.bfloat16)
    {'a': Array([1], dtype=bfloat16)}
  """
  if dtype is None:
    return tree
  return map_leaves("cast", lambda x: _astype(x, dtype), tree)


def tree_cast_like(tree: Params, other_tree: Params) -> Any:
  """Casts every leaf of ``tree`` to the dtype of the matching leaf of ``other_tree``.

  Args:
    tree: the tree to cast.
    other_tree: a tree with the same structure; leaves without a dtype leave theirs unchanged.

  Returns:
    The cast tree.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.cast_like({"a": jnp.array([1.0])}, {"a": jnp.array([0], jnp.bfloat16)})
    {'a': Array([1], dtype=bfloat16)}
  """
  return map_leaves(
      "cast_like",
      lambda x, o: _astype(x, o.dtype) if hasattr(o, "dtype") else x,
      tree,
      other_tree,
      names=["other_tree"],
  )


def _ordered(dtype1: np.dtype, dtype2: np.dtype, highest: bool) -> np.dtype:
  """The higher (or lower) of two dtypes when one promotes to the other."""
  joined = promote_types(dtype1, dtype2)
  if joined not in (dtype1, dtype2):
    raise ValueError(
        f"dtype: {dtype1.name} and {dtype2.name} are not ordered (neither promotes to the other); "
        "use mixed_dtype_handler='promote'."
    )
  if highest:
    return joined
  return dtype2 if joined == dtype1 else dtype1


def tree_dtype(tree: Params, mixed_dtype_handler: str | None = None) -> np.dtype:
  """The dtype of a tree's leaves.

  Args:
    tree: a tree of arrays.
    mixed_dtype_handler: what to do when the leaves' dtypes differ: None raises a ValueError that
      names each disagreeing path; ``"promote"`` returns JAX's standard promotion of all of them;
      ``"highest"`` / ``"lowest"`` return the largest / smallest in the promotion order (a
      ValueError if two of them are not ordered, such as int32 and uint32).

  Returns:
    A numpy dtype; an empty tree gives JAX's default floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tree = {"a": jnp.zeros(1, jnp.bfloat16), "b": jnp.zeros(1, jnp.float32)}
    >>> steadax.tree.dtype(tree, "lowest"), steadax.tree.dtype(tree, "promote")
    (dtype(bfloat16), dtype('float32'))
  """
  with_path = jax.tree_util.tree_flatten_with_path(tree)[0]
  if not with_path:
    return np.dtype(jnp.asarray([]).dtype)
  dtypes = [np.dtype(jnp.asarray(x).dtype) for _, x in with_path]
  if mixed_dtype_handler is None:
    first = dtypes[0]
    bad = [
        f"{key_path_str(path)} has {d.name}"
        for (path, _), d in zip(with_path, dtypes)
        if d != first
    ]
    if bad:
      raise ValueError(
          f"dtype: the leaves have different dtypes (first leaf: {first.name}; "
          + ", ".join(bad[:5])
          + "); pass mixed_dtype_handler='promote', 'highest' or 'lowest'."
      )
    return first
  if mixed_dtype_handler == "promote":
    return promote_types(*dtypes)
  if mixed_dtype_handler in ("highest", "lowest"):
    result = dtypes[0]
    for d in dtypes[1:]:
      result = _ordered(result, d, mixed_dtype_handler == "highest")
    return result
  raise ValueError(
      f"dtype: invalid `mixed_dtype_handler`={mixed_dtype_handler!r}; use None, 'promote', "
      "'highest' or 'lowest'."
  )
