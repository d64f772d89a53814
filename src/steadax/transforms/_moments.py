"""Shared helpers for moments, bias correction and safe norms (Optax's names and signatures)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._core._policy import as_compute, compute_dtype, hyper, real_dtype
from .._core._tree import tree_map

__all__ = [
    "update_moment",
    "update_moment_per_elem_norm",
    "update_infinity_moment",
    "bias_correction",
    "safe_norm",
    "safe_root_mean_squares",
    "abs_sq",
    "moment_step",
    "second_moment_step",
]


def abs_sq(x: jax.Array) -> jax.Array:
  """``|x|^2`` as a real array (``x * conj(x)`` for complex inputs)."""
  if jnp.iscomplexobj(x):
    return jnp.real(x) ** 2 + jnp.imag(x) ** 2
  return x * x


def moment_step(g: jax.Array, m: jax.Array, decay: Any, order: int = 1) -> jax.Array:
  """``(1 - decay) * g**order + decay * m`` computed in at least float32, returned in m's dtype."""
  cdt = compute_dtype(g.dtype, m.dtype)
  d = hyper(decay, cdt)
  gc = as_compute(g, cdt)
  if order != 1:
    gc = gc**order
  out = (jnp.asarray(1, cdt) - d) * gc + d * as_compute(m, cdt)
  return out.astype(m.dtype)


def second_moment_step(g: jax.Array, v: jax.Array, decay: Any, order: int = 2) -> jax.Array:
  """``(1 - decay) * |g|**order + decay * v`` (real-valued; complex g uses its modulus)."""
  cdt = real_dtype(compute_dtype(g.dtype, v.dtype))
  d = hyper(decay, cdt)
  gc = g.astype(compute_dtype(g.dtype))
  if order == 2:
    stat = abs_sq(gc)
  else:
    stat = jnp.abs(gc) ** order
  out = (jnp.asarray(1, cdt) - d) * stat.astype(cdt) + d * as_compute(v, cdt)
  return out.astype(v.dtype)


def update_moment(updates: Any, moments: Any, decay: Any, order: int) -> Any:
  """Exponential moving average of the ``order``-th power of the updates.

  Args:
    updates: the new observations (a tree).
    moments: the running moments (same structure).
    decay: the weight of the old moment, in [0, 1).
    order: the power applied to the updates (1 for the mean, 2 for the raw second moment).

  Returns:
    The new moments, each in its old dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.update_moment(jnp.array([1.0]), jnp.array([0.0]), 0.9, 1)
    Array([0.1], dtype=float32)
  """
  return tree_map(lambda g, m: moment_step(g, m, decay, order), updates, moments)


def update_moment_per_elem_norm(updates: Any, moments: Any, decay: Any, order: int) -> Any:
  """Moving average of ``|updates|**order`` (elementwise modulus, so complex inputs give reals).

  Args:
    updates: the new observations.
    moments: the running moments.
    decay: the weight of the old moment.
    order: the power of the modulus.

  Returns:
    The new moments.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.update_moment_per_elem_norm(jnp.array([-2.0]), jnp.array([0.0]), 0.5, 2)
    Array([2.], dtype=float32)
  """
  return tree_map(lambda g, v: second_moment_step(g, v, decay, order), updates, moments)


def update_infinity_moment(updates: Any, moments: Any, decay: Any, eps: Any) -> Any:
  """``max(|updates| + eps, decay * moments)``: the infinity-norm moment of Adamax.

  Args:
    updates: the new observations.
    moments: the running moments.
    decay: the decay of the old moment.
    eps: added to ``|updates|``.

  Returns:
    The new moments.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.update_infinity_moment(jnp.array([1.0]), jnp.array([4.0]), 0.5, 0.0)
    Array([2.], dtype=float32)
  """
  def step(g, v):
    cdt = real_dtype(compute_dtype(g.dtype, v.dtype))
    a = jnp.abs(g.astype(compute_dtype(g.dtype))).astype(cdt)
    return jnp.maximum(a + hyper(eps, cdt), hyper(decay, cdt) * as_compute(v, cdt)).astype(v.dtype)

  return tree_map(step, updates, moments)


def bias_correction(moment: Any, decay: Any, count: jax.Array) -> Any:
  """Divides a moment by ``1 - decay**count`` (Adam's bias correction).

  Args:
    moment: a tree of moments.
    decay: the moment's decay.
    count: the (int32) step count, at least 1.

  Returns:
    The corrected moments, each in its moment's dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.bias_correction(jnp.array([0.1]), 0.9, jnp.asarray(1, jnp.int32))
    Array([1.], dtype=float32)
  """
  def correct(m):
    cdt = compute_dtype(m.dtype)
    rdt = real_dtype(cdt)
    factor = jnp.asarray(1, rdt) - hyper(decay, rdt) ** jnp.asarray(count).astype(rdt)
    return (as_compute(m, cdt) / factor.astype(cdt)).astype(m.dtype)

  return tree_map(correct, moment)


def safe_norm(x: jax.Array, min_norm: Any, ord: Any = None, axis: Any = None, keepdims: bool = False):
  """``max(norm(x), min_norm)`` with a gradient that is zero (not NaN) at ``x = 0``.

  Args:
    x: an array.
    min_norm: the lower bound.
    ord: the norm's order (as ``jnp.linalg.norm``).
    axis: the axes to reduce.
    keepdims: keep reduced axes.

  Returns:
    The clipped norm.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> float(steadax.safe_norm(jnp.zeros(3), 1e-3))
    0.001
  """
  dtype = real_dtype(compute_dtype(x.dtype))
  xc = x.astype(compute_dtype(x.dtype))
  floor = hyper(min_norm, dtype)
  norm = jnp.linalg.norm(xc, ord=ord, axis=axis, keepdims=True).astype(dtype)
  masked = jnp.where(norm <= floor, jnp.ones_like(xc), xc)
  safe = jnp.linalg.norm(masked, ord=ord, axis=axis, keepdims=True).astype(dtype)
  out = jnp.where(norm <= floor, floor, safe)
  if not keepdims:
    out = jnp.squeeze(out, axis=axis) if axis is not None else jnp.squeeze(out)
  return out.astype(real_dtype(x.dtype)) if jnp.issubdtype(x.dtype, jnp.inexact) else out


def safe_root_mean_squares(x: jax.Array, min_rms: Any) -> jax.Array:
  """``max(rms(x), min_rms)`` with a safe gradient at zero.

  Args:
    x: an array.
    min_rms: the lower bound.

  Returns:
    A scalar.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> round(float(steadax.safe_root_mean_squares(jnp.array([3.0, 4.0]), 0.0)) ** 2, 4)
    12.5
  """
  dtype = real_dtype(compute_dtype(x.dtype))
  xc = x.astype(compute_dtype(x.dtype))
  floor = hyper(min_rms, dtype)
  ms = jnp.mean(abs_sq(xc)).astype(dtype)
  safe_ms = jnp.where(ms <= floor**2, jnp.ones_like(ms), ms)
  return jnp.where(ms <= floor**2, floor, jnp.sqrt(safe_ms)).astype(real_dtype(x.dtype))
