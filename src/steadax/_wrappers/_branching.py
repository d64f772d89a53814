"""Helpers for wrappers that branch (lax.cond) between an inner update and a fallback.

Both branches of a ``lax.cond`` must return identical types. A wrapper cannot rely on its inner
transformation for that when the inner one is foreign (an Optax transformation, a user's
``(init, update)`` pair), so the helpers here pin every branch output to one reference:

* updates take, leaf by leaf, the dtype of the parameter (of the incoming update where ``params`` is
  None), the same rule as the contract's;
* an inner state is checked against the state it was given (``conform_state``: structure and shape
  drift raise, dtype drift raises in strict mode and is cast back otherwise).
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._contract import conform_state, conform_updates, is_weak
from .._core._policy import COUNTER_DTYPE, compute_dtype, real_dtype

__all__ = []


def _is_none(x: Any) -> bool:
  return x is None


def update_targets(updates: Any, params: Any) -> Any:
  """The dtype each update leaf must have: its parameter's, or its own where params is None."""
  if params is None:
    return jax.tree_util.tree_map(lambda u: np.dtype(u.dtype), updates)
  def target(u, p):
    return np.dtype(p.dtype if hasattr(p, "dtype") else jnp.result_type(p))

  return jax.tree_util.tree_map(target, updates, params)


def zero_updates(updates: Any, params: Any) -> Any:
  """Zeros shaped like ``updates`` in the dtypes the updates must have.

  ``zeros_like`` (not ``zeros(shape)``) keeps the update's varying manual axes inside ``shard_map``,
  so a branch returning these zeros matches a branch returning computed updates.
  """
  targets = update_targets(updates, params)
  return jax.tree_util.tree_map(lambda u, d: jnp.zeros_like(u, dtype=d), updates, targets)


def pinned_updates(owner: str, updates: Any, params: Any, new_updates: Any) -> Any:
  """``new_updates`` checked against ``updates`` and cast to the dtypes the updates must have."""
  return conform_updates(owner, updates, params, new_updates)


def pinned_state(owner: str, old_state: Any, new_state: Any) -> Any:
  """``new_state`` with exactly ``old_state``'s types (the contract's check, for foreign inners)."""
  return conform_state(owner, old_state, new_state)


def strong(tree: Any) -> Any:
  """Every leaf as a strongly typed array of its own dtype (Python scalars become arrays)."""
  def fix(x):
    x = jnp.asarray(x)
    return x.astype(x.dtype) if is_weak(x) else x  # the one way to drop a weak type

  return jax.tree_util.tree_map(fix, tree)


def manual_axes(x: Any) -> tuple[str, ...]:
  """The ``shard_map`` mesh axes over which ``x`` varies (empty outside ``shard_map``)."""
  axis_type = getattr(jax.typeof(x), "manual_axis_type", None)
  return tuple(sorted(getattr(axis_type, "varying", None) or ()))


def _global(x: jax.Array, reduce: Any) -> jax.Array:
  """``x`` reduced over the manual axes it varies over, so every device sees the same value."""
  axes = manual_axes(x)
  return reduce(x, axes) if axes else x


def all_finite(tree: Any) -> jax.Array:
  """A bool scalar: every element of every leaf is finite (True for an empty tree).

  Inside ``shard_map`` the answer covers every shard of a sharded leaf, so all devices agree.
  """
  finite = []
  for leaf in jax.tree_util.tree_leaves(tree):
    leaf = jnp.asarray(leaf)
    if jnp.issubdtype(leaf.dtype, jnp.inexact) and leaf.size:
      local = jnp.all(jnp.isfinite(leaf))
      if manual_axes(local):
        local = _global(local.astype(COUNTER_DTYPE), jax.lax.pmin) > 0  # pmin has no boolean form
      finite.append(local)
  # One stacked reduction of the leaves' all(isfinite), as Optax writes it: XLA fuses the leaves'
  # reductions into one kernel (a chain of maxima of any(not finite) gave one kernel per leaf).
  return jnp.all(jnp.stack(finite)) if finite else jnp.asarray(True)


def count_not_finite(tree: Any) -> jax.Array:
  """The number of non-finite elements in ``tree`` as an int32 scalar, saturating at int32's max.

  Inside ``shard_map`` the shards of a sharded leaf are added up.
  """
  top = jnp.asarray(np.iinfo(np.int32).max, COUNTER_DTYPE)
  total = jnp.zeros([], COUNTER_DTYPE)
  for leaf in jax.tree_util.tree_leaves(tree):
    leaf = jnp.asarray(leaf)
    if not jnp.issubdtype(leaf.dtype, jnp.inexact) or leaf.size == 0:
      continue
    count = _global(jnp.sum(jnp.logical_not(jnp.isfinite(leaf)), dtype=COUNTER_DTYPE), jax.lax.psum)
    total = jnp.where(total > top - count, top, total + count)
  return total


def sum_of_squares(tree: Any) -> jax.Array:
  """``sum |x|^2`` over all leaves in the widest floating dtype present (at least float32).

  Inside ``shard_map`` the shards of a sharded leaf are added up (a replicated leaf counts once).
  """
  leaves = [jnp.asarray(x) for x in jax.tree_util.tree_leaves(tree)]
  dtype = real_dtype(compute_dtype(*[x.dtype for x in leaves]))
  total = jnp.zeros([], dtype)
  for x in leaves:
    # A whole-tree reduction (outside any leaf function): each leaf is squared in its own compute
    # dtype (at least float32) and its sum joins the total in the widest dtype present.
    xc = x.astype(compute_dtype(x.dtype))
    sq = jnp.real(xc * jnp.conj(xc)) if jnp.iscomplexobj(xc) else xc * xc
    total = total + _global(jnp.sum(sq).astype(dtype), jax.lax.psum)
  return total


def check_predicate(owner: str, argument: str, value: Any) -> jax.Array:
  """``value`` as a bool scalar, or a ValueError naming the argument that produced it.

  A predicate that differs between ``shard_map`` devices is or-reduced: one decision for all, so
  replicated parameters stay replicated.
  """
  value = jnp.asarray(value)
  if value.shape != () or value.dtype != jnp.bool_:
    raise ValueError(
        f"{owner}: `{argument}` must return a boolean scalar, got dtype "
        f"{np.dtype(value.dtype).name} and shape {value.shape}.")
  if manual_axes(value):
    value = _global(value.astype(COUNTER_DTYPE), jax.lax.pmax) > 0  # pmax has no boolean form
  return value
