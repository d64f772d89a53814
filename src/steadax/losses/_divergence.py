"""Kullback-Leibler divergences: normalized, with log-space targets, and generalized."""

import warnings
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    Axis,
    broadcast_pair,
    check_where,
    normalize_axes,
    require_floating,
    result_dtype,
)

__all__ = [
    "kl_divergence",
    "kl_divergence_with_log_targets",
    "generalized_kl_divergence",
    "convex_kl_divergence",
]


def _prepare(fn: str, log_predictions: Any, targets_name: str, targets: Any, axis: Axis,
             where: Any):
  log_predictions = require_floating(fn, "log_predictions", log_predictions)
  targets = require_floating(fn, targets_name, targets)
  log_predictions, targets = broadcast_pair(
      fn, "log_predictions", log_predictions, targets_name, targets)
  axes = normalize_axes(fn, axis, log_predictions.ndim)
  mask = None if where is None else check_where(
      fn, where, log_predictions.shape, None, target="log_predictions")
  out_dtype = result_dtype(log_predictions, targets)
  cdt = compute_dtype(out_dtype)
  return cast(log_predictions, cdt), cast(targets, cdt), axes, mask, out_dtype


def _kl_terms(log_p: jax.Array, t: jax.Array) -> jax.Array:
  """``t (log t - log_p)`` with the convention ``0 log 0 = 0`` also where ``log_p = -inf``."""
  zero = t == 0
  safe_t = jnp.where(zero, jnp.ones_like(t), t)
  safe_log_p = jnp.where(zero, jnp.zeros_like(log_p), log_p)
  return jnp.where(zero, jnp.zeros_like(t), t * (jnp.log(safe_t) - safe_log_p))


def kl_divergence(
    log_predictions: ArrayLike,
    targets: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Kullback-Leibler divergence ``KL(targets || predictions)``.

  .. math::
    \mathrm{KL}(t \,\|\, p) = \sum_j t_j (\log t_j - \log p_j)

  with ``0 log 0 = 0``: a zero target contributes nothing, even where ``log_predictions`` is
  ``-inf`` (Optax returns NaN there).

  Args:
    log_predictions: log-probabilities of the predicted distribution, shape ``[..., dim]``.
    targets: probabilities of the target distribution (non-negative), broadcastable with
      ``log_predictions``.
    axis: the axis or axes to sum over (None: all).
    where: optional boolean mask broadcastable to ``log_predictions``; excluded entries are
      left out of the sum.

  Returns:
    The divergence, shape without ``axis``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> p = jnp.array([0.5, 0.25, 0.25])
    >>> t = jnp.array([0.25, 0.25, 0.5])
    >>> steadax.kl_divergence(jnp.log(p), t).tolist()
    0.1733

  References:
    Kullback and Leibler, `On Information and Sufficiency
    <https://doi.org/10.1214/aoms/1177729694>`_, 1951, eq. 2.4.
  """
  log_p, t, axes, mask, out_dtype = _prepare(
      "kl_divergence", log_predictions, "targets", targets, axis, where)
  return cast(jnp.sum(_kl_terms(log_p, t), axis=axes, where=mask), out_dtype)


def kl_divergence_with_log_targets(
    log_predictions: ArrayLike,
    log_targets: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Kullback-Leibler divergence with the targets given as log-probabilities.

  .. math::
    \mathrm{KL}(t \,\|\, p) = \sum_j e^{\log t_j} (\log t_j - \log p_j)

  A target with ``log_targets = -inf`` (probability 0) contributes 0.

  Args:
    log_predictions: log-probabilities of the predicted distribution, shape ``[..., dim]``.
    log_targets: log-probabilities of the target distribution, broadcastable with
      ``log_predictions``.
    axis: the axis or axes to sum over (None: all).
    where: optional boolean mask broadcastable to ``log_predictions``.

  Returns:
    The divergence, shape without ``axis``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> p = jnp.array([0.5, 0.25, 0.25])
    >>> t = jnp.array([0.25, 0.25, 0.5])
    >>> steadax.losses.kl_divergence_with_log_targets(jnp.log(p), jnp.log(t)).tolist()
    0.1733

  References:
    Kullback and Leibler, `On Information and Sufficiency
    <https://doi.org/10.1214/aoms/1177729694>`_, 1951, eq. 2.4.
  """
  log_p, log_t, axes, mask, out_dtype = _prepare(
      "kl_divergence_with_log_targets", log_predictions, "log_targets", log_targets, axis, where)
  t = jnp.exp(log_t)
  zero = t == 0
  safe_log_t = jnp.where(zero, jnp.zeros_like(log_t), log_t)
  safe_log_p = jnp.where(zero, jnp.zeros_like(log_p), log_p)
  terms = jnp.where(zero, jnp.zeros_like(t), t * (safe_log_t - safe_log_p))
  return cast(jnp.sum(terms, axis=axes, where=mask), out_dtype)


def generalized_kl_divergence(
    log_predictions: ArrayLike,
    targets: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Generalized Kullback-Leibler divergence between unnormalized non-negative measures.

  .. math::
    D(t \,\|\, p) = \sum_j t_j (\log t_j - \log p_j) - t_j + p_j

  the Bregman divergence of :math:`x \log x - x`; it equals :func:`kl_divergence` when both
  measures sum to 1.

  Args:
    log_predictions: logarithms of the predicted measure, shape ``[..., dim]``.
    targets: the target measure (non-negative), broadcastable with ``log_predictions``.
    axis: the axis or axes to sum over (None: all).
    where: optional boolean mask broadcastable to ``log_predictions``.

  Returns:
    The divergence, shape without ``axis``, in the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> p = jnp.array([1.0, 2.0])
    >>> t = jnp.array([2.0, 2.0])
    >>> steadax.generalized_kl_divergence(jnp.log(p), t).tolist()
    0.3863

  References:
    Bregman, `The relaxation method of finding the common point of convex sets and its
    application to the solution of problems in convex programming
    <https://doi.org/10.1016/0041-5553(67)90040-7>`_, 1967; Boyd and Vandenberghe, `Convex
    Optimization <https://web.stanford.edu/~boyd/cvxbook/>`_, 2004, p. 90.
  """
  log_p, t, axes, mask, out_dtype = _prepare(
      "generalized_kl_divergence", log_predictions, "targets", targets, axis, where)
  terms = _kl_terms(log_p, t) + jnp.exp(log_p) - t
  return cast(jnp.sum(terms, axis=axes, where=mask), out_dtype)


def convex_kl_divergence(
    log_predictions: ArrayLike,
    targets: ArrayLike,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
  r"""Deprecated name of :func:`generalized_kl_divergence` (Optax deprecated it too).

  Emits a DeprecationWarning. Removal: together with Optax's removal of the name.

  Args:
    log_predictions: logarithms of the predicted measure, shape ``[..., dim]``.
    targets: the target measure, broadcastable with ``log_predictions``.
    axis: the axis or axes to sum over (None: all).
    where: optional boolean mask broadcastable to ``log_predictions``.

  Returns:
    ``generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)``.

  Example:
    >>> import warnings, jax.numpy as jnp, steadax
    >>> with warnings.catch_warnings():
    ...   warnings.simplefilter("ignore", DeprecationWarning)
    ...   print(steadax.convex_kl_divergence(jnp.log(jnp.array([1.0, 2.0])),
    ...                                      jnp.array([2.0, 2.0])).round(4))
    0.3863

  References:
    See :func:`generalized_kl_divergence`.
  """
  warnings.warn(
      "convex_kl_divergence is deprecated; use generalized_kl_divergence instead.",
      DeprecationWarning,
      stacklevel=2,
  )
  return generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)
