"""Box bounds ``lower <= x <= upper`` on a parameter tree: checks, broadcasting, projection.

A bound is None (no bound), one scalar for every leaf, or a tree with the parameters' structure
whose leaves are scalars or arrays broadcastable to their parameter's shape; infinities are allowed.
The solvers work on one flat vector (every leaf raveled and concatenated in the statistics dtype),
so the bounds are flattened the same way.
"""

from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._leafwise import _axis_kinds, place_like
from .._core._policy import key_path_str

__all__ = ["bound_leaves", "check_bounds", "flatten", "unflatten", "project", "projected_gradient"]


def _is_single(bound: Any) -> bool:
  return bound is None or isinstance(bound, (int, float, np.number)) or (
      hasattr(bound, "shape") and jnp.ndim(bound) == 0)


def _is_concrete(x: Any) -> bool:
  return not isinstance(x, jax.core.Tracer)


def bound_leaves(owner: str, which: str, bound: Any, params: Any) -> list[tuple[str, Any]]:
  """``[(path, bound leaf)]`` for each parameter leaf (None leaves skipped); raises a ValueError
  naming the path where the structure or a shape does not match the parameters."""
  default = -np.inf if which == "lower" else np.inf
  flat_params = jax.tree_util.tree_flatten_with_path(params)[0]
  if _is_single(bound):
    value = default if bound is None else bound
    return [(key_path_str(path), value) for path, _ in flat_params]
  params_def = jax.tree_util.tree_structure(params)
  bound_def = jax.tree_util.tree_structure(bound)
  if params_def != bound_def:
    raise ValueError(
        f"{owner}: `{which}` must be None, a scalar, or a tree with the parameters' structure; got "
        f"structure {bound_def}, expected {params_def}.")
  out = []
  for (path, p), b in zip(flat_params, jax.tree_util.tree_leaves(bound)):
    shape = jnp.shape(b)
    try:
      broadcast = jnp.broadcast_shapes(shape, jnp.shape(p))
    except ValueError:
      broadcast = None
    if broadcast != tuple(jnp.shape(p)):
      raise ValueError(
          f"{owner}: `{which}` at {key_path_str(path)} has shape {shape}, which does not broadcast "
          f"to the parameter's shape {tuple(jnp.shape(p))}.")
    if jnp.iscomplexobj(b):
      raise ValueError(f"{owner}: `{which}` at {key_path_str(path)} is complex; bounds are real.")
    out.append((key_path_str(path), b))
  return out


def check_bounds(owner: str, lower: Any, upper: Any, params: Any) -> None:
  """Structure and shape checks, and ``lower <= upper`` where the bounds are concrete."""
  lows = bound_leaves(owner, "lower", lower, params)
  ups = bound_leaves(owner, "upper", upper, params)
  for (path, lo), (_, up) in zip(lows, ups):
    if _is_concrete(lo) and _is_concrete(up):
      lo_np, up_np = np.asarray(lo, np.float64), np.asarray(up, np.float64)
      if np.any(lo_np > up_np) or np.any(np.isnan(lo_np)) or np.any(np.isnan(up_np)):
        raise ValueError(
            f"{owner}: the bounds at {path} are inconsistent: lower > upper (or NaN) "
            f"somewhere (lower {lo_np.tolist()}, upper {up_np.tolist()}).")


def _replicated(x: Any) -> Any:
  """``x`` gathered to every device when its traced type is sharded over explicit mesh axes.

  The flat vector couples every coordinate (sorting, the compact matrices), so it is replicated;
  ``reshape`` of a sharded explicit type is rejected, hence the explicit gather. Under automatic
  axes (and for concrete arrays) the compiler inserts the same gather itself.
  """
  if not isinstance(x, jax.core.Tracer):
    return x
  sharding: Any = getattr(jax.typeof(x), "sharding", None)
  if "Explicit" not in _axis_kinds(sharding) or all(a is None for a in tuple(sharding.spec)):
    return x
  return jax.sharding.reshard(x, jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec()))


def flatten(tree: Any, dtype: Any) -> jax.Array:
  """Every leaf raveled and concatenated, in ``dtype`` (a zero-length vector for an empty tree)."""
  leaves = jax.tree_util.tree_leaves(tree)
  if not leaves:
    return jnp.zeros([0], dtype)
  return jnp.concatenate([jnp.ravel(_replicated(jnp.asarray(x))).astype(dtype) for x in leaves])


def flat_bounds(owner: str, lower: Any, upper: Any, params: Any, dtype: Any):
  """The bounds as two flat vectors matching ``flatten(params)``."""
  def flat(which, bound):
    parts = [jnp.broadcast_to(jnp.asarray(b, dtype), jnp.shape(p)).ravel()
             for (_, b), p in zip(bound_leaves(owner, which, bound, params),
                                  jax.tree_util.tree_leaves(params))]
    return jnp.concatenate(parts) if parts else jnp.zeros([0], dtype)

  return flat("lower", lower), flat("upper", upper)


def unflatten(flat: jax.Array, like: Any) -> Any:
  """Split ``flat`` into ``like``'s leaves, each in its leaf's shape, dtype and sharding."""
  leaves, treedef = jax.tree_util.tree_flatten(like)
  out, start = [], 0
  for leaf in leaves:
    size = int(np.prod(jnp.shape(leaf), dtype=np.int64))
    # Each piece goes back to its parameter's layout (a local slice of the replicated vector).
    out.append(place_like(leaf, flat[start:start + size].reshape(jnp.shape(leaf)).astype(leaf.dtype)))
    start += size
  return jax.tree_util.tree_unflatten(treedef, out)


def project(owner: str, params: Any, lower: Any, upper: Any) -> Any:
  """``clip(params, lower, upper)`` leaf by leaf, in each parameter's dtype."""
  lows = [b for _, b in bound_leaves(owner, "lower", lower, params)]
  ups = [b for _, b in bound_leaves(owner, "upper", upper, params)]
  leaves, treedef = jax.tree_util.tree_flatten(params)
  out = []
  for p, lo, up in zip(leaves, lows, ups):
    out.append(jnp.clip(p, jnp.asarray(lo).astype(p.dtype), jnp.asarray(up).astype(p.dtype)))
  return jax.tree_util.tree_unflatten(treedef, out)


def projected_gradient(x: jax.Array, g: jax.Array, lower: jax.Array, upper: jax.Array) -> jax.Array:
  """``P(x - g) - x`` on flat vectors: zero exactly at a stationary point of the box problem
  (Byrd, Lu, Nocedal & Zhu 1995, Sec. 6; scipy's ``projgr`` takes its max norm)."""
  return jnp.clip(x - g, lower, upper) - x
