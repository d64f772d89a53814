"""Random trees: one key per leaf, random leaves shaped like a target tree."""

import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from ._leafwise import flatten_like
from .._core._types import Params

__all__ = ["tree_split_key_like", "tree_random_like", "tree_unwrap_random_key_data"]


def tree_split_key_like(rng_key: jax.Array, target_tree: Params) -> Any:
  """Splits ``rng_key`` into one key per leaf of ``target_tree``.

  Leaf ``i`` (in flattening order) gets ``jax.random.split(rng_key, num_leaves)[i]``, the same keys
  as Optax, so random trees drawn from the same key agree with Optax's.

  Args:
    rng_key: a PRNG key (typed or raw uint32).
    target_tree: the tree whose structure the keys take.

  Returns:
    A tree of keys with the structure of ``target_tree``.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> keys = steadax.tree.split_key_like(jax.random.key(0), {"a": jnp.ones(2), "b": jnp.ones(3)})
    >>> sorted(keys)
    ['a', 'b']
  """
  treedef = jax.tree_util.tree_structure(target_tree)
  keys = jax.random.split(rng_key, treedef.num_leaves)
  return jax.tree_util.tree_unflatten(treedef, list(keys))


def tree_random_like(
    rng_key: jax.Array,
    target_tree: Params,
    sampler: Callable[..., jax.Array] = jax.random.normal,
    dtype: DTypeLike | None = None,
) -> Any:
  """A random tree with the structure, shapes and (by default) dtypes of ``target_tree``.

  Args:
    rng_key: a PRNG key; leaves get independent keys (``split_key_like``).
    target_tree: the tree to mirror; its leaves must be arrays.
    sampler: ``sampler(key, shape, dtype)``, optionally also taking ``out_sharding`` (then each
      leaf's sharding is passed), e.g. ``jax.random.normal`` or ``jax.random.uniform``.
    dtype: the dtype of every leaf, or None for each leaf's own.

  Returns:
    A random tree like ``target_tree``.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> noise = steadax.tree.random_like(jax.random.key(0), {"a": jnp.zeros(3, jnp.bfloat16)})
    >>> noise["a"].shape, noise["a"].dtype
    ((3,), dtype(bfloat16))
  """
  try:
    takes_sharding = "out_sharding" in inspect.signature(sampler).parameters
  except (TypeError, ValueError):
    takes_sharding = False
  keys = tree_split_key_like(rng_key, target_tree)
  leaves, treedef, (key_leaves,) = flatten_like("random_like", target_tree, [keys], ["keys"])
  out = []
  for leaf, key in zip(leaves, key_leaves):
    if leaf is None:
      out.append(None)
      continue
    shape = np.shape(leaf)
    leaf_dtype = dtype if dtype is not None else getattr(leaf, "dtype", None)
    if leaf_dtype is None:
      raise TypeError(f"random_like: leaf {leaf!r} has no dtype; pass `dtype`")
    if takes_sharding:
      out.append(sampler(key, shape, leaf_dtype, out_sharding=jax.typeof(leaf).sharding))
    else:
      out.append(sampler(key, shape, leaf_dtype))
  return treedef.unflatten(out)


def tree_unwrap_random_key_data(input_tree: Params) -> Any:
  """Replaces typed PRNG keys by their raw ``key_data`` (to compare or print states holding keys).

  Args:
    input_tree: a tree of arrays, some of which may be typed keys.

  Returns:
    The tree with typed keys replaced by uint32 arrays; other leaves unchanged.

  Example:
    >>> import jax, steadax
    >>> steadax.tree.unwrap_random_key_data({"k": jax.random.key(0)})["k"].dtype
    dtype('uint32')
  """
  def unwrap(x):
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
      return jax.random.key_data(x)
    return x

  return jax.tree_util.tree_map(unwrap, input_tree)
