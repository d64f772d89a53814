"""Regression losses: squared error, L2, Huber, log-cosh and cosine similarity/distance."""

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    Axis,
    broadcast_pair,
    check_where,
    hyper,
    normalize_axes,
    require_floating,
    require_numeric,
    require_same_shape,
    result_dtype,
)

__all__ = [
    "squared_error",
    "l2_loss",
    "huber_loss",
    "log_cosh",
    "cosine_similarity",
    "cosine_distance",
]


def _errors(fn: str, predictions: Any, targets: Any, *, same_shape: bool):
  """``predictions - targets`` in the computation dtype, and the result dtype."""
  predictions = require_floating(fn, "predictions", predictions)
  if targets is None:
    out_dtype = result_dtype(predictions)
    return cast(predictions, compute_dtype(out_dtype)), out_dtype
  targets = require_numeric(fn, "targets", targets)
  if same_shape:
    require_same_shape(fn, "predictions", predictions, "targets", targets)
  else:
    predictions, targets = broadcast_pair(fn, "predictions", predictions, "targets", targets)
  out_dtype = result_dtype(predictions, targets)
  cdt = compute_dtype(out_dtype)
  return cast(predictions, cdt) - cast(targets, cdt), out_dtype


def squared_error(predictions: ArrayLike, targets: ArrayLike | None = None) -> jax.Array:
  r"""Elementwise squared error ``(predictions - targets)^2``.

  The mean squared error is ``squared_error(p, t).mean()``.

  Args:
    predictions: floating predictions of any shape.
    targets: targets of the same shape, or None for zeros.

  Returns:
    The elementwise squared errors, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.squared_error(jnp.array([1.0, 2.0]), jnp.array([0.5, 4.0]))
    Array([0.25, 4.  ], dtype=float32)

  References:
    Hastie, Tibshirani and Friedman, `The Elements of Statistical Learning
    <https://hastie.su.domains/ElemStatLearn/>`_, 2009, eq. 2.9.
  """
  errors, out_dtype = _errors("squared_error", predictions, targets, same_shape=True)
  return cast(jnp.square(errors), out_dtype)


def l2_loss(predictions: ArrayLike, targets: ArrayLike | None = None) -> jax.Array:
  r"""Half the squared error, ``0.5 (predictions - targets)^2``.

  The factor 1/2 (as in Bishop's book) makes the gradient the plain error.

  Args:
    predictions: floating predictions of any shape.
    targets: targets of the same shape, or None for zeros.

  Returns:
    The elementwise losses, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.l2_loss(jnp.array([1.0, 2.0]), jnp.array([0.5, 4.0]))
    Array([0.125, 2.   ], dtype=float32)

  References:
    Bishop, `Pattern Recognition and Machine Learning
    <https://www.microsoft.com/en-us/research/publication/pattern-recognition-machine-learning/>`_,
    2006, eq. 1.2.
  """
  errors, out_dtype = _errors("l2_loss", predictions, targets, same_shape=True)
  return cast(0.5 * jnp.square(errors), out_dtype)


def huber_loss(predictions: ArrayLike, targets: ArrayLike | None = None, *, delta: ArrayLike = 1.0) -> jax.Array:
  r"""Huber loss: quadratic for errors up to ``delta``, linear beyond.

  .. math::
    \ell(e) = \begin{cases} \tfrac12 e^2 & |e| \le \delta \\
              \delta (|e| - \tfrac12 \delta) & |e| > \delta \end{cases}

  Its gradient is the error clipped to ``[-delta, delta]``.

  Args:
    predictions: floating predictions.
    targets: targets broadcastable with ``predictions``, or None for zeros.
    delta: the threshold between the quadratic and the linear regime.

  Returns:
    The elementwise losses, of the broadcast shape, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.huber_loss(jnp.array([0.5, 3.0]), delta=1.0)
    Array([0.125, 2.5  ], dtype=float32)

  References:
    Huber, `Robust Estimation of a Location Parameter
    <https://doi.org/10.1214/aoms/1177703732>`_, 1964, section 4.
  """
  fn = "huber_loss"
  errors, out_dtype = _errors(fn, predictions, targets, same_shape=False)
  d = hyper(fn, "delta", delta, errors.dtype)
  abs_errors = jnp.abs(errors)
  quadratic = jnp.minimum(abs_errors, d)
  return cast(0.5 * jnp.square(quadratic) + d * (abs_errors - quadratic), out_dtype)


def log_cosh(predictions: ArrayLike, targets: ArrayLike | None = None) -> jax.Array:
  r"""Log-cosh loss ``log(cosh(predictions - targets))``.

  About ``e^2 / 2`` for small errors and ``|e| - log 2`` for large ones, and twice
  differentiable. Computed as ``log1p(2 sinh(e/2)^2)`` below 1 (accurate for tiny errors) and
  ``|e| + log1p(exp(-2|e|)) - log 2`` above (no overflow).

  Args:
    predictions: floating predictions.
    targets: targets broadcastable with ``predictions``, or None for zeros.

  Returns:
    The elementwise losses, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.log_cosh(jnp.array([0.0, 1.0, 100.0])).tolist()
    [0.0, 0.4338, 99.3069]

  References:
    Chen et al., `Log Hyperbolic Cosine Loss Improves Variational Auto-Encoder
    <https://openreview.net/forum?id=rkglvsC9Ym>`_, 2019, eq. 3.
  """
  errors, out_dtype = _errors("log_cosh", predictions, targets, same_shape=False)
  a = jnp.abs(errors)
  small = a < 1.0
  a_small = jnp.where(small, a, jnp.zeros_like(a))
  a_large = jnp.where(small, jnp.ones_like(a), a)
  near = jnp.log1p(2.0 * jnp.square(jnp.sinh(0.5 * a_small)))
  far = a_large + jnp.log1p(jnp.exp(-2.0 * a_large)) - math.log(2.0)
  return cast(jnp.where(small, near, far), out_dtype)


def cosine_similarity(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    epsilon: ArrayLike = 0.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Cosine of the angle between ``predictions`` and ``targets`` along ``axis``.

  .. math::
    \frac{\langle a, b \rangle}{\sqrt{\max(\|a\|^2, \epsilon)} \sqrt{\max(\|b\|^2, \epsilon)}}

  Args:
    predictions: floating vectors, shape ``[..., dim]``.
    targets: floating vectors broadcastable with ``predictions``.
    epsilon: lower bound on the squared norms in the denominator (0 makes a zero vector give
      NaN).
    axis: the vector axis or axes.
    where: optional boolean mask broadcastable to the inputs; excluded entries take no part in
      the norms or the inner product.

  Returns:
    The similarities in ``[-1, 1]``, shape without ``axis``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> a = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    >>> b = jnp.array([[0.0, 2.0], [3.0, 3.0]])
    >>> steadax.cosine_similarity(a, b)
    Array([0., 1.], dtype=float32)

  References:
    `Cosine similarity <https://en.wikipedia.org/wiki/Cosine_similarity>`_, Wikipedia.
  """
  similarity, out_dtype = _cosine_similarity(
      "cosine_similarity", predictions, targets, epsilon, axis, where)
  return cast(similarity, out_dtype)


def _cosine_similarity(fn, predictions, targets, epsilon, axis, where):
  predictions = require_floating(fn, "predictions", predictions)
  targets = require_floating(fn, "targets", targets)
  predictions, targets = broadcast_pair(fn, "predictions", predictions, "targets", targets)
  axes = normalize_axes(fn, axis, predictions.ndim)
  mask = None if where is None else check_where(
      fn, where, predictions.shape, None, target="predictions")
  out_dtype = result_dtype(predictions, targets)
  cdt = compute_dtype(out_dtype)
  a, b = cast(predictions, cdt), cast(targets, cdt)
  eps = hyper(fn, "epsilon", epsilon, cdt)
  a_norm = jnp.sqrt(jnp.maximum(jnp.sum(a * a, axis=axes, where=mask, keepdims=True), eps))
  b_norm = jnp.sqrt(jnp.maximum(jnp.sum(b * b, axis=axes, where=mask, keepdims=True), eps))
  return jnp.sum((a / a_norm) * (b / b_norm), axis=axes, where=mask), out_dtype


def cosine_distance(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    epsilon: ArrayLike = 0.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Cosine distance ``1 - cosine_similarity(predictions, targets)``, in ``[0, 2]``.

  Args:
    predictions: floating vectors, shape ``[..., dim]``.
    targets: floating vectors broadcastable with ``predictions``.
    epsilon: lower bound on the squared norms (see :func:`cosine_similarity`).
    axis: the vector axis or axes.
    where: optional boolean mask broadcastable to the inputs.

  Returns:
    The distances, shape without ``axis``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> a = jnp.array([[1.0, 0.0], [1.0, 1.0]])
    >>> b = jnp.array([[0.0, 2.0], [3.0, 3.0]])
    >>> steadax.cosine_distance(a, b)
    Array([1., 0.], dtype=float32)

  References:
    `Cosine distance <https://en.wikipedia.org/wiki/Cosine_similarity#Cosine_distance>`_,
    Wikipedia.
  """
  similarity, out_dtype = _cosine_similarity(
      "cosine_distance", predictions, targets, epsilon, axis, where)
  return cast(1.0 - similarity, out_dtype)
