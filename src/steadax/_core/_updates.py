"""Updating parameters: ``apply_updates``, ``incremental_update`` and ``periodic_update``."""

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._contract import InputMismatchError
from ._diagnosis import diagnose_apply_updates
from ._policy import promote_types
from ._types import Params, Updates

__all__ = ["apply_updates", "incremental_update", "periodic_update"]


def _add_leaf(p, u):
  if p is None:
    return None
  p = jnp.asarray(p)
  u = jnp.asarray(u)
  if u.dtype == jax.dtypes.float0:
    return p  # the tangent of an integer leaf (``jax.grad(..., allow_int=True)``): no change
  dtype = promote_types(p.dtype, u.dtype)
  return (p.astype(dtype) + u.astype(dtype)).astype(p.dtype)


def apply_updates(params: Params, updates: Updates) -> Params:
  """``params + updates`` leaf by leaf, each result in its parameter's dtype.

  The addition runs in the wider of the two dtypes, then is cast back, so bfloat16 parameters with
  float32 updates stay bfloat16. A ``float0`` update (the gradient of an integer leaf) leaves its
  parameter unchanged.

  Args:
    params: a tree of parameters.
    updates: a tree of updates with the same structure (None leaves are kept).

  Returns:
    The updated parameters.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.apply_updates({"w": jnp.ones(2)}, {"w": jnp.ones(2)})
    {'w': Array([2., 2.], dtype=float32)}
  """
  try:
    return jax.tree_util.tree_map(_add_leaf, params, updates, is_leaf=lambda x: x is None)
  except (ValueError, TypeError) as error:
    message = diagnose_apply_updates(params, updates)
    if message is None:
      raise
    raise InputMismatchError(message) from error


def incremental_update(new_tensors: Params, old_tensors: Params, step_size: ArrayLike) -> Params:
  """Polyak averaging: ``step_size * new + (1 - step_size) * old`` leaf by leaf.

  Args:
    new_tensors: the latest values.
    old_tensors: the running average.
    step_size: the weight of the new values, in [0, 1].

  Returns:
    The new running average, in each old tensor's dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.incremental_update(jnp.ones(1), jnp.zeros(1), 0.25)
    Array([0.25], dtype=float32)
  """
  def mix(new, old):
    if new is None:
      return None
    dtype = promote_types(new.dtype, old.dtype, jnp.float32)
    s = jnp.asarray(step_size).astype(dtype)
    out = s * new.astype(dtype) + (jnp.asarray(1, dtype) - s) * old.astype(dtype)
    return out.astype(old.dtype)

  return jax.tree_util.tree_map(mix, new_tensors, old_tensors, is_leaf=lambda x: x is None)


def periodic_update(new_tensors: Params, old_tensors: Params, steps: jax.Array,
                    update_period: int) -> Params:
  """Takes ``new_tensors`` every ``update_period`` steps, else keeps ``old_tensors``.

  Args:
    new_tensors: the latest values.
    old_tensors: the values kept in between.
    steps: the current step (an integer scalar).
    update_period: how many steps apart the copies happen.

  Returns:
    The selected tensors.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.periodic_update(jnp.ones(1), jnp.zeros(1), jnp.asarray(4), 2)
    Array([1.], dtype=float32)
  """
  take_new = (steps % update_period) == 0
  return jax.tree_util.tree_map(
      lambda n, o: None if n is None else jnp.where(take_new, n, o).astype(o.dtype),
      new_tensors, old_tensors, is_leaf=lambda x: x is None,
  )
