"""Ranking losses: scores of the items of a list against their relevance labels.

They work on the last axis; leading axes are batch axes (one list each).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    broadcast_to,
    check_where,
    masked_log_softmax,
    require_floating,
    require_numeric,
    result_dtype,
)

__all__ = ["ranking_softmax_loss"]


def _reduce(fn: str, loss: jax.Array, row_mask: jax.Array | None,
            reduce_fn: Callable[..., Any] | None) -> jax.Array:
  if reduce_fn is None:
    return loss if row_mask is None else jnp.where(row_mask, loss, jnp.zeros_like(loss))
  if not callable(reduce_fn):
    raise TypeError(f"{fn}: reduce_fn must be a callable such as jnp.mean or jnp.sum, or None.")
  out = jnp.asarray(reduce_fn(loss, where=row_mask))
  if reduce_fn is jnp.mean:
    # A batch whose lists are all masked out has no loss to average: report 0, not NaN, but keep
    # NaN that comes from the inputs.
    inputs_ok = jnp.logical_not(jnp.any(jnp.isnan(loss)))
    out = jnp.where(jnp.isnan(out) & inputs_ok, jnp.zeros_like(out), out)
  return out


def ranking_softmax_loss(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    where: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    reduce_fn: Callable[..., ArrayLike] | None = jnp.mean,
) -> jax.Array:
  r"""Listwise softmax cross entropy between item scores and relevance labels.

  .. math::
    \ell(s, y) = -\sum_i w_i y_i \log \frac{e^{s_i}}{\sum_j e^{s_j}}

  over the valid items of each list (the last axis); the per-list losses are then reduced with
  ``reduce_fn`` over the lists that have at least one valid item.

  Args:
    logits: floating item scores, shape ``[..., list_size]``.
    labels: relevance labels (graded or binary), broadcastable to ``logits``.
    where: optional boolean mask of valid items, broadcastable to ``logits``.
    weights: optional per-item weights, broadcastable to ``logits``.
    reduce_fn: a reduction accepting a ``where`` keyword (``jnp.mean``, ``jnp.sum``), or None for
      the per-list losses (0 for lists with no valid item). ``jnp.mean`` of an empty selection
      gives 0.

  Returns:
    The reduced loss, or the ``[...]`` per-list losses, in ``logits``' dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> scores = jnp.array([2.0, 1.0, 3.0])
    >>> labels = jnp.array([1.0, 0.0, 0.0])
    >>> steadax.losses.ranking_softmax_loss(scores, labels).tolist()
    1.4076

  References:
    Cao et al., `Learning to Rank: From Pairwise Approach to Listwise Approach
    <https://doi.org/10.1145/1273496.1273513>`_, ICML 2007 (ListNet);
    Bruch et al., `An Analysis of the Softmax Cross Entropy Loss for Learning-to-Rank with Binary
    Relevance <https://doi.org/10.1145/3341981.3344221>`_, ICTIR 2019, eq. 5.
  """
  fn = "ranking_softmax_loss"
  logits = require_floating(fn, "logits", logits)
  if logits.ndim < 1:
    raise ValueError(f"{fn}: logits must have a list axis (shape [..., list_size]), got a scalar.")
  labels = broadcast_to(fn, "labels", require_numeric(fn, "labels", labels), logits.shape,
                        "logits")
  mask = None if where is None else check_where(fn, where, logits.shape, None)
  out_dtype = result_dtype(logits)
  cdt = compute_dtype(out_dtype)
  x, y = cast(logits, cdt), cast(labels, cdt)
  if weights is not None:
    w = broadcast_to(fn, "weights", require_numeric(fn, "weights", weights), logits.shape,
                     "logits")
    y = y * cast(w, cdt)
  log_probs = masked_log_softmax(x, (x.ndim - 1,), mask)
  loss = -jnp.sum(y * log_probs, axis=-1, where=mask)
  row_mask = None if mask is None else jnp.any(mask, axis=-1)
  return cast(_reduce(fn, loss, row_mask, reduce_fn), out_dtype)
