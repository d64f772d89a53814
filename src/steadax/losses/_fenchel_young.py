"""Fenchel-Young losses built from a regularized max function."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype
from ._common import (
    broadcast_to,
    require_floating,
    require_numeric,
    result_dtype,
)

__all__ = ["make_fenchel_young_loss"]


def make_fenchel_young_loss(max_fun: Callable[..., ArrayLike]) -> Callable[..., jax.Array]:
  r"""Build the Fenchel-Young loss of a regularized max function.

  For a convex ``max_fun`` :math:`\Omega^*` (log-sum-exp, sparsemax's max, ...), the loss is

  .. math::
    L(s; y) = \Omega^*(s) - \langle y, s \rangle

  (up to a term constant in ``s``): its gradient in ``s`` is the prediction map
  :math:`\nabla\Omega^*(s)` minus ``y``. ``logsumexp`` gives the softmax cross entropy up to the
  target's entropy.

  Args:
    max_fun: maps a score vector ``[n]`` to a scalar; extra positional and keyword arguments of
      the loss are passed on to it.

  Returns:
    ``loss(scores, targets, *args, **kwargs)``, working on the last axis with any leading batch
    axes (Optax's behaviour, unlike JAXopt, which flattens); ``targets`` broadcasts to ``scores``.
    The result has the inputs' floating dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> from jax.scipy.special import logsumexp
    >>> loss = steadax.losses.make_fenchel_young_loss(logsumexp)
    >>> loss(jnp.array([[1.2, -0.8, -0.5]]), jnp.array([[1.0, 0.0, 0.0]])).tolist()
    [0.2761]

  References:
    Blondel, Martins and Niculae, `Learning with Fenchel-Young Losses
    <https://arxiv.org/abs/1901.02324>`_, JMLR 2020, definition 2.
  """
  if not callable(max_fun):
    raise TypeError(f"make_fenchel_young_loss: max_fun must be callable, got {max_fun!r}.")
  max_last_axis = jnp.vectorize(max_fun, signature="(n)->()")

  def fenchel_young_loss(scores, targets, *args, **kwargs):
    fn = "fenchel_young_loss"
    scores = require_floating(fn, "scores", scores)
    targets = broadcast_to(fn, "targets", require_numeric(fn, "targets", targets), scores.shape,
                           "scores")
    out_dtype = result_dtype(scores, targets)
    cdt = compute_dtype(out_dtype)
    max_value = jnp.asarray(max_last_axis(scores, *args, **kwargs))
    inner = jnp.sum(cast(targets, cdt) * cast(scores, cdt), axis=-1)
    return cast(cast(max_value, cdt) - inner, out_dtype)

  return fenchel_young_loss
