"""flatten: run a transformation on one vector holding every parameter."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._policy import promote_types
from .._core._leafwise import place_like
from .._core._module import child_field
from ..transforms._matrix import replicate_whole

__all__ = ["flatten"]


def _flat_dtype(tree: Any) -> np.dtype:
  """The vector's dtype: the standard promotion of the leaves' dtypes (float32 for no leaves)."""
  dtypes = [np.dtype(x.dtype) for x in jax.tree_util.tree_leaves(tree)]
  if not dtypes:
    return np.dtype(jnp.float32)
  return np.dtype(jax.dtypes.canonicalize_dtype(promote_types(*dtypes)))


def _ravel(tree: Any, dtype: np.dtype) -> jax.Array:
  leaves = jax.tree_util.tree_leaves(tree)
  if not leaves:
    return jnp.zeros((0,), dtype)
  # One vector holds every leaf, so they share one dtype (the promotion of theirs); a float0
  # gradient (of an integer parameter, from jax.grad(allow_int=True)) holds zeros there.
  # The vector is not sharded like any leaf: sharded leaves are gathered into it (explicitly under
  # explicit mesh axes, where a reshape cannot merge sharded axes), and each piece is put back in
  # its parameter's layout by _unravel.
  return jnp.concatenate([
      jnp.zeros(np.size(x), dtype) if x.dtype == jax.dtypes.float0
      else jnp.ravel(replicate_whole(x)[0][0]).astype(dtype)
      for x in leaves])


def _unravel(like: Any, flat: jax.Array, params: Any = None) -> Any:
  """Split ``flat`` into ``like``'s leaves (shapes and dtypes); complex parts of real leaves drop.

  A float0 leaf (the gradient of an integer parameter) gets a zero update in its parameter's dtype.
  """
  leaves, treedef = jax.tree_util.tree_flatten(like)
  param_leaves = treedef.flatten_up_to(params) if params is not None else [None] * len(leaves)
  out, start = [], 0
  for leaf, p in zip(leaves, param_leaves):
    size = int(np.size(leaf))
    if leaf.dtype == jax.dtypes.float0:
      out.append(jnp.zeros(np.shape(leaf), p.dtype) if p is not None else leaf)
      start += size
      continue
    piece = flat[start:start + size].reshape(np.shape(leaf))
    if jnp.iscomplexobj(piece) and not jnp.issubdtype(leaf.dtype, jnp.complexfloating):
      piece = jnp.real(piece)
    # Back from the vector's shared dtype to the leaf's own, and to its parameter's layout.
    out.append(place_like(p if p is not None else leaf, piece.astype(leaf.dtype)))
    start += size
  return treedef.unflatten(out)


class Flatten(Transformation):
  name = "flatten"
  requires_float = False  # the inner transformation checks its parameters
  inner: Any = child_field()

  def init_fn(self, params):
    return self.inner.init(_ravel(params, _flat_dtype(params)))

  def update_fn(self, updates, state, params=None, **extra_args):
    dtype = _flat_dtype(updates if params is None else params)
    flat_params = None if params is None else _ravel(params, dtype)
    flat_updates, state = self.inner.update(_ravel(updates, dtype), state, flat_params, **extra_args)
    return _unravel(updates, flat_updates, params), state


@shared_args
def flatten(inner: GradientTransformation) -> Flatten:
  """Runs ``inner`` on a single vector concatenating every leaf (fewer, larger operations).

  The vector's dtype is the standard promotion of the parameters' dtypes (a tree of bfloat16 and
  float32 leaves gives a float32 vector, so the inner state is float32 too); the updates come back
  in each leaf's own dtype. ``None`` leaves are skipped; an empty tree gives an empty float32 vector.

  Args:
    inner: the transformation to run on the flat vector.

  Returns:
    A transformation whose state is ``inner``'s state over the flat vector (Optax's layout).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.flatten(steadax.adam(0.1))
    >>> params = {"w": jnp.ones((2, 2)), "b": jnp.ones(3)}
    >>> tx.init(params)[0].mu.shape
    (7,)
  """
  return Flatten(as_inner(inner, "flatten", "inner"))
