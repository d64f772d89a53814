"""Shared machinery of the losses: input validation, the dtype rule and masked reductions.

The dtype rule of every loss: the result has the promotion of the floating-point array inputs
(integer and boolean labels, masks and scalar hyperparameters do not count; weak-typed Python
numbers count only when nothing else is floating), and the arithmetic runs in at least float32. So
bfloat16 in gives bfloat16 out, computed in float32. Casts are explicit, so the losses work under
``jax_numpy_dtype_promotion="strict"`` and ``jax_numpy_rank_promotion="raise"``.

Masked reductions never produce ``inf - inf`` or ``0 * inf`` on excluded entries, in the forward
pass or in the gradient: excluded entries are replaced by finite values before any arithmetic
(the "double where" idiom).
"""

import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._policy import default_float_dtype
from .._core._policy import hyper as _policy_hyper
from .._core._policy import result_dtype as _promotion

__all__: list[str] = []

Axis = int | tuple[int, ...] | None


def as_array(fn: str, name: str, x: Any) -> jax.Array:
  """``x`` as a JAX array; a clear TypeError naming ``fn`` and ``name`` otherwise."""
  if isinstance(x, jax.Array):
    return x
  try:
    return jnp.asarray(x)
  except (TypeError, ValueError) as err:
    raise TypeError(f"{fn}: {name} must be an array, got {type(x).__name__} ({err}).") from None


def require_floating(fn: str, name: str, x: Any) -> jax.Array:
  """``x`` as an array, which must have a real floating dtype."""
  x = as_array(fn, name, x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(f"{fn}: {name} must have a floating dtype, got {np.dtype(x.dtype).name}.")
  return x


def require_integer(fn: str, name: str, x: Any) -> jax.Array:
  """``x`` as an array, which must have an integer dtype (class indices)."""
  x = as_array(fn, name, x)
  if not jnp.issubdtype(x.dtype, jnp.integer):
    raise TypeError(
        f"{fn}: {name} must have an integer dtype (class indices), got "
        f"{np.dtype(x.dtype).name}; use the one-hot variant for probability labels."
    )
  return x


def require_numeric(fn: str, name: str, x: Any) -> jax.Array:
  """``x`` as an array of booleans, integers or reals (complex values are rejected)."""
  x = as_array(fn, name, x)
  if jnp.issubdtype(x.dtype, jnp.complexfloating) or not (
      jnp.issubdtype(x.dtype, jnp.number) or x.dtype == jnp.bool_
  ):
    raise TypeError(f"{fn}: {name} must be real-valued, got {np.dtype(x.dtype).name}.")
  return x


def require_rank(fn: str, name: str, x: jax.Array, rank: int, what: str) -> None:
  if x.ndim != rank:
    raise ValueError(f"{fn}: {name} must have rank {rank} ({what}), got shape {x.shape}.")


def require_same_shape(fn: str, name_a: str, a: jax.Array, name_b: str, b: jax.Array) -> None:
  if a.shape != b.shape:
    raise ValueError(
        f"{fn}: {name_a} and {name_b} must have the same shape, got {a.shape} and {b.shape}."
    )


def result_dtype(*xs: jax.Array | None) -> np.dtype:
  """The promotion of the floating inputs (weak ones only if nothing else is floating).

  Integer and boolean inputs (labels, masks) do not count; with no floating input the result is
  JAX's default floating dtype.
  """
  floats = [x for x in xs if x is not None and jnp.issubdtype(x.dtype, jnp.floating)]
  # _promotion treats weak values as weak: they never widen a strong input.
  return _promotion(*floats) if floats else default_float_dtype()


def hyper(fn: str, name: str, value: Any, dtype: Any) -> jax.Array:
  """A numeric hyperparameter (Python number, array or tracer) cast to the computation dtype."""
  return _policy_hyper(require_numeric(fn, name, value), dtype)


def broadcast_to(fn: str, name: str, x: jax.Array, shape: Sequence[int], target: str) -> jax.Array:
  """``x`` broadcast to ``shape`` explicitly (rank promotion may be disabled by the user)."""
  shape = tuple(shape)
  if x.shape == shape:
    return x
  try:
    out_shape = np.broadcast_shapes(x.shape, shape)
  except ValueError:
    out_shape = None
  if out_shape != shape:
    raise ValueError(
        f"{fn}: {name} of shape {x.shape} does not broadcast to the shape of {target} {shape}."
    )
  return jnp.broadcast_to(x, shape)


def broadcast_pair(fn: str, name_a: str, a: jax.Array, name_b: str, b: jax.Array):
  """Both arrays broadcast to their common shape, with an error naming both arguments."""
  if a.shape == b.shape:
    return a, b
  try:
    shape = np.broadcast_shapes(a.shape, b.shape)
  except ValueError:
    raise ValueError(
        f"{fn}: {name_a} of shape {a.shape} and {name_b} of shape {b.shape} do not broadcast."
    ) from None
  return jnp.broadcast_to(a, shape), jnp.broadcast_to(b, shape)


def normalize_axes(fn: str, axis: Axis, ndim: int, name: str = "axis", *,
                   keep_order: bool = False) -> tuple[int, ...]:
  """``axis`` (an int, a tuple of ints, or None for all) as a sorted tuple of positive axes.

  ``keep_order`` keeps the order given, for a caller whose result depends on it (a flattening).
  """
  if axis is None:
    return tuple(range(ndim))
  items = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
  out = []
  for a in items:
    try:
      a = operator.index(a)
    except TypeError:
      raise TypeError(f"{fn}: {name} must be an int or a tuple of ints, got {axis!r}.") from None
    if not -ndim <= a < ndim:
      raise ValueError(f"{fn}: {name}={axis!r} is out of bounds for an array of rank {ndim}.")
    out.append(a % ndim)
  if len(set(out)) != len(out):
    raise ValueError(f"{fn}: {name}={axis!r} repeats an axis.")
  return tuple(out) if keep_order else tuple(sorted(out))


def check_where(fn: str, where: Any, shape: Sequence[int], axes: tuple[int, ...] | None,
                target: str = "logits", name: str = "where") -> jax.Array:
  """A boolean mask of exactly ``shape``.

  The mask may have ``shape`` itself, a shape broadcasting to it, or (when ``axes`` is given) the
  batch shape, i.e. ``shape`` without the reduced axes, in which case whole slices are kept or
  dropped.
  """
  where = as_array(fn, name, where)
  if where.dtype != jnp.bool_:
    raise TypeError(
        f"{fn}: {name} must be a boolean mask, got dtype {np.dtype(where.dtype).name} "
        f"(use `mask.astype(bool)` or a comparison)."
    )
  shape = tuple(shape)
  if axes is not None and where.ndim == len(shape) - len(axes) and axes:
    batch_shape = tuple(d for i, d in enumerate(shape) if i not in axes)
    if where.shape != batch_shape:
      raise ValueError(
          f"{fn}: {name} of shape {where.shape} matches neither the shape of {target} {shape} "
          f"nor its batch shape {batch_shape}."
      )
    where = jnp.expand_dims(where, axes)
  return broadcast_to(fn, name, where, shape, target)


def masked_max(x: jax.Array, axes: tuple[int, ...], mask: jax.Array | None) -> jax.Array:
  """Max over ``axes`` (kept as size-1 dims) of the included entries; 0 where nothing is included
  or the max is not finite, so that subtracting it is always safe."""
  filled = x if mask is None else jnp.where(mask, x, -jnp.inf)
  m = jnp.max(filled, axis=axes, keepdims=True)
  return jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, jnp.zeros_like(m)))


def _masked_lse_parts(x: jax.Array, axes: tuple[int, ...], mask: jax.Array | None):
  m = masked_max(x, axes, mask)
  shifted = x - m
  if mask is not None:
    shifted = jnp.where(mask, shifted, -jnp.inf)
  total = jnp.sum(jnp.exp(shifted), axis=axes, keepdims=True)
  has_mass = total > 0
  safe_total = jnp.where(has_mass, total, jnp.ones_like(total))
  return jnp.log(safe_total) + m, has_mass


def masked_logsumexp(x: jax.Array, axes: tuple[int, ...], mask: jax.Array | None,
                     keepdims: bool = False) -> jax.Array:
  """Log-sum-exp over ``axes`` of the included entries.

  Rows with no included entry (or only ``-inf`` ones) give ``-inf`` without a NaN gradient.
  """
  lse, has_mass = _masked_lse_parts(x, axes, mask)
  out = jnp.where(has_mass, lse, -jnp.inf)
  if not keepdims:
    out = jnp.squeeze(out, axis=axes)
  return out


def masked_log_softmax(x: jax.Array, axes: tuple[int, ...], mask: jax.Array | None) -> jax.Array:
  """Log-softmax over ``axes`` among the included entries.

  Excluded entries, and rows whose included entries are all ``-inf``, hold 0: a finite placeholder
  the caller drops. Included ``-inf`` entries of other rows give ``-inf``.
  """
  lse, has_mass = _masked_lse_parts(x, axes, mask)
  ok = has_mass if mask is None else has_mass & mask
  safe_x = jnp.where(ok, x, jnp.zeros_like(x))
  safe_lse = jnp.where(has_mass, lse, jnp.zeros_like(lse))
  return jnp.where(ok, safe_x - safe_lse, jnp.zeros_like(x))


def xlogy_safe(x: jax.Array, y: jax.Array) -> jax.Array:
  """``x * log(y)`` with ``0 log 0 = 0`` and a finite gradient at ``x = 0``."""
  zero = x == 0
  safe_y = jnp.where(zero, jnp.ones_like(y), y)
  return jnp.where(zero, jnp.zeros_like(x), x * jnp.log(safe_y))


def check_reduction(fn: str, reduction: str) -> None:
  if reduction not in ("mean", "sum", "none"):
    raise ValueError(f"{fn}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}.")
