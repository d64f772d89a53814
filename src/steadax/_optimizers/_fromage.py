"""Fromage: steps relative to each layer's weight norm, with the norm kept in check."""

from typing import Any
from jax.typing import ArrayLike

from .._core._checks import check_nonnegative
from .._core._combine import Chain, chain
from .._core._docs import shared_args
from .._core._types import ScalarOrSchedule
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._trust_ratio import scale_by_trust_ratio

__all__ = ["fromage"]


def _shrink(lr: Any) -> Any:
  """``1 / sqrt(1 + lr^2)``: undoes the growth of ``||w||`` caused by a step of relative size lr."""
  return 1 / (1 + lr**2) ** 0.5


@shared_args
def fromage(learning_rate: ScalarOrSchedule, min_norm: ArrayLike = 1e-6) -> Chain:
  """Fromage (Frobenius matched gradient descent).

  Each layer (leaf) moves by ``learning_rate`` relative to its own norm,
  ``w <- (w - lr ||w|| / ||g|| g) / sqrt(1 + lr^2)``, which bounds the relative change of every
  layer; the division keeps weight norms from growing. As a chain:
  ``chain(scale_by_trust_ratio(min_norm), scale_by_learning_rate(lr * m), add_decayed_weights(m - 1))``
  with ``m = 1 / sqrt(1 + lr^2)``.

  Args:
    learning_rate: a scalar or a schedule (the relative step size; ~1e-2 is typical).
    min_norm: the floor of the parameter and gradient norms (non-negative).

  Returns:
    The optimizer; its state is ``(EmptyState, EmptyState | ScaleByScheduleState, EmptyState |
    WeightDecaySchedule)``. ``params`` must be passed to ``update``.

  References:
    Bernstein et al., "On the distance between two neural networks and the stability of learning",
    NeurIPS 2020 (Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.fromage(0.75)
    >>> p = jnp.array([3.0, 4.0])
    >>> new_p = steadax.apply_updates(p, opt.update(jnp.array([1.0, 0.0]), opt.init(p), p)[0])
    >>> [round(float(x), 4) for x in new_p]  # (p - 0.75 * 5 * g) * 0.8
    [-0.6, 3.2]
  """
  check_nonnegative("fromage", "min_norm", min_norm)
  if callable(learning_rate):
    return chain(
        scale_by_trust_ratio(min_norm),
        scale_by_learning_rate(lambda count: _shrink(learning_rate(count)) * learning_rate(count)),
        add_decayed_weights(lambda count: _shrink(learning_rate(count)) - 1),
    )
  mult = _shrink(learning_rate)
  return chain(
      scale_by_trust_ratio(min_norm),
      scale_by_learning_rate(learning_rate * mult),
      add_decayed_weights(mult - 1),
  )
