"""Moving averages, bias correction and safe norms: the one place these formulas are written.

Leaf functions (``Transformation.leafwise``) call ``moving_average`` and ``abs_sq`` on inputs that are
already in the compute dtype; the public tree functions (Optax's names and signatures:
``update_moment``, ``bias_correction`` ...) run the same formulas through the per-leaf primitive, so
they follow the dtype policy too: arithmetic in at least float32, results in each moment's dtype.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._leafwise import Scalars, TreeScalar, leafwise
from .._core._policy import cast, compute_dtype, default_float_dtype, hyper, real_dtype
from .._core._types import Updates

__all__ = [
    "update_moment",
    "update_moment_per_elem_norm",
    "update_infinity_moment",
    "bias_correction",
    "safe_norm",
    "safe_root_mean_squares",
    "abs_sq",
]


def abs_sq(x: jax.Array) -> jax.Array:
  """``|x|^2`` as a real array (``x * conj(x)`` for complex inputs)."""
  if jnp.iscomplexobj(x):
    return jnp.real(x) ** 2 + jnp.imag(x) ** 2
  return x ** 2  # `integer_pow`, bound directly (x * x traces through jnp.multiply's dispatch)


def moving_average(decay: Any, average: jax.Array, x: jax.Array, one_minus_decay: Any = None) -> jax.Array:
  """One step of an exponential moving average: ``(1 - decay) * x + decay * average``.

  The one moving average of the library, for leaf functions (inputs in the compute dtype, ``decay``
  a scalar of ``Scalars``): Adam's moments, AdEMAMix's slow average, AdaBelief's belief ...

  Written in Optax's order, ``(1 - decay) * x + decay * average`` (XLA fuses multiply-adds, so the
  order of the two products changes the rounding). ``one_minus_decay`` is ``1 - decay`` as Optax
  computes it: a transformation's derived constant (``_core._module.derived_field``), exact where
  the decay is a Python number; without it ``1 - decay`` is formed from the value given.

  Example:
    >>> import jax.numpy as jnp
    >>> moving_average(0.5, jnp.array([4.0]), jnp.array([2.0]))
    Array([3.], dtype=float32)
  """
  return ((1 - decay) if one_minus_decay is None else one_minus_decay) * x + decay * average


def one_minus_pow(decay: Any, count: jax.Array, dtype: Any = None) -> Any:
  """``1 - decay**count``: Adam's bias-correction factor (Kingma & Ba 2015, §3), in ``dtype``.

  Computed as Optax's ``bias_correction`` computes it: the decay as JAX holds it (a Python number
  or a weakly typed leaf: float32, or float64 under x64) to the power of the integer count, then
  rounded to ``dtype``. With ``dtype=None`` it is a ``TreeScalar`` for a leaf function's
  ``Scalars``, left in the decay's precision: leafwise rounds it per leaf, as Optax's
  ``t / c.astype(t.dtype)`` does, and gives it to the leaves as Optax's jitted bias correction
  divides by it (see ``_core._leafwise.TreeScalar``).
  """
  base = decay if isinstance(decay, jax.Array) else jnp.asarray(decay)
  default = default_float_dtype()
  if not jnp.issubdtype(base.dtype, jnp.inexact) or np.dtype(base.dtype).itemsize < np.dtype(default).itemsize:
    # A narrower decay (an injected float32 one under x64, whether jit traced it or not) is raised
    # to the default float, so the factor does not depend on how the transformation was called.
    base = base.astype(default)
  with jax.numpy_dtype_promotion("standard"):
    # Optax's bias_correction is jitted, so its count is traced even when called eagerly:
    # ``lax.pow`` of the decay to the count converted to it (XLA's power of two floats). The count
    # enters as a weakly typed float (an integer times a Python float is one), so a weakly typed
    # decay gives a weakly typed factor: rounded where it meets each leaf's arrays, one conversion
    # per use, as Optax's ``t / c.astype(t.dtype)``.
    count = jnp.asarray(count).astype(jnp.int32)
    exponent = count * 1.0
    if exponent.dtype != base.dtype:  # a strong decay (an injected float32 one): as jnp.power converts
      exponent = count.astype(base.dtype)
    factor = 1 - jax.lax.pow(base, exponent)
  return TreeScalar(factor) if dtype is None else cast(factor, dtype)


def _moments_of(owner: str, stat: Any, updates: Any, moments: Any, decay: Any) -> Any:
  """``moving_average(decay, moments, stat(updates))`` leaf by leaf, under the dtype policy."""
  def leaf(k, g, m):
    return g, moving_average(k.decay, m, stat(g))  # the update slot carries g through unchanged

  _, new = leafwise(owner, leaf, updates, moments, scalars=Scalars(decay=decay))
  return new


def update_moment(updates: Updates, moments: Updates, decay: ArrayLike, order: int) -> Any:
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
  return _moments_of("update_moment", lambda g: g if order == 1 else g**order, updates, moments, decay)


def update_moment_per_elem_norm(updates: Updates, moments: Updates, decay: ArrayLike, order: int) -> Any:
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
  stat = abs_sq if order == 2 else (lambda g: jnp.abs(g) ** order)
  return _moments_of("update_moment_per_elem_norm", stat, updates, moments, decay)


def update_infinity_moment(updates: Updates, moments: Updates, decay: ArrayLike, eps: ArrayLike) -> Any:
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
  def leaf(k, g, v):
    return g, jnp.maximum(jnp.abs(g) + k.eps, k.decay * v)  # Kingma & Ba 2015, §7.1

  scalars = Scalars(decay=decay, eps=eps)
  _, new = leafwise("update_infinity_moment", leaf, updates, moments, scalars=scalars)
  return new


def bias_correction(moment: Updates, decay: ArrayLike, count: jax.Array) -> Any:
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
  scalars = Scalars(c=one_minus_pow(decay, count))
  (corrected,) = leafwise("bias_correction", lambda k, m: m / k.c, moment, scalars=scalars)
  return corrected


def safe_norm(x: jax.Array, min_norm: ArrayLike, ord: int | float | str | None = None, axis: tuple[int, ...] | int | None = None,
              keepdims: bool = False) -> jax.Array:
  """``max(norm(x), min_norm)`` with a gradient that is zero (not NaN) at ``x = 0``.

  Computed in at least float32 and returned in ``x``'s real dtype.

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
  xc = cast(x, compute_dtype(x.dtype))
  floor = hyper(min_norm, real_dtype(xc.dtype))
  norm = jnp.linalg.norm(xc, ord=ord, axis=axis, keepdims=True)
  small = norm <= floor
  # Norm of ones where the true norm is below the floor: its gradient is finite, then discarded.
  safe = jnp.linalg.norm(jnp.where(small, jnp.ones_like(xc), xc), ord=ord, axis=axis, keepdims=True)
  out = jnp.where(small, floor, safe)
  if not keepdims:
    out = jnp.squeeze(out, axis=axis) if axis is not None else jnp.squeeze(out)
  return cast(out, real_dtype(x.dtype)) if jnp.issubdtype(x.dtype, jnp.inexact) else out


def safe_root_mean_squares(x: jax.Array, min_rms: ArrayLike) -> jax.Array:
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
  xc = cast(x, compute_dtype(x.dtype))
  floor = min_rms if isinstance(min_rms, (int, float)) else hyper(min_rms, real_dtype(xc.dtype))
  # Optax's arithmetic: the root compared with the floor, and taken again of ones where it is below.
  small = jnp.sqrt(jnp.mean(abs_sq(xc))) <= floor
  xs = jnp.where(small, jnp.ones_like(xc), xc)
  return cast(jnp.where(small, floor, jnp.sqrt(jnp.mean(abs_sq(xs)))), real_dtype(x.dtype))
