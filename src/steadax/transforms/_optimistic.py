"""Optimistic gradients: extrapolation from the previous gradient, for min-max games.

References:
  Daskalakis et al., "Training GANs with Optimism", ICLR 2018 (optimistic mirror descent, eq. 4).
  Mokhtari et al., "A Unified Analysis of Extra-gradient and Optimistic Gradient Methods for
  Saddle Point Problems", AISTATS 2020 (the generalised ``alpha``/``beta`` form).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._leafwise import Scalars
from .._core._module import derived, derived_field, hyper_field
from .._core._roles import OTHER, accumulator, role_zeros, state_roles
from .._core._types import Updates

__all__ = ["ScaleByOptimisticGradientState", "scale_by_optimistic_gradient"]


@state_roles(is_initial_step=OTHER, previous_gradient=accumulator())
class ScaleByOptimisticGradientState(NamedTuple):
  """State of ``scale_by_optimistic_gradient``: a bool first-step flag and the previous gradient.

  Attributes:
    is_initial_step: a bool scalar, True before the first update.
    previous_gradient: the previous gradient.
  """

  is_initial_step: jax.Array
  previous_gradient: Updates


def _check_not_schedule(owner: str, name: str, value: Any) -> None:
  """Optimistic coefficients are scalars: the transformation keeps no step count for a schedule."""
  if callable(value):
    raise TypeError(f"{owner}: {name} must be a scalar; schedules are not supported for it.")


class ScaleByOptimisticGradient(Transformation):
  name = "scale_by_optimistic_gradient"
  elementwise = True
  State = ScaleByOptimisticGradientState
  alpha: Any = hyper_field(1.0, check=_check_not_schedule)
  beta: Any = hyper_field(1.0, check=_check_not_schedule)
  alpha_plus_beta: Any = derived_field(lambda t: t.alpha + t.beta)

  def init_fn(self, params):  # the flag starts True: by hand (the roles still check the rest)
    return ScaleByOptimisticGradientState(
        is_initial_step=jnp.asarray(True),
        previous_gradient=role_zeros(params, accumulator(), self))

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g, previous):
      # No previous gradient at the first step: extrapolating from zero would double the step.
      previous = jnp.where(state.is_initial_step, g, previous)
      # (alpha + beta) g_t - beta g_{t-1}: Daskalakis et al. (2018, eq. 4) for alpha = beta = 1,
      # generalised by Mokhtari et al. (2020); g_t is stored as the next step's g_{t-1}.
      return k.alpha_plus_beta * g - k.beta * previous, g

    scalars = Scalars(alpha_plus_beta=derived(self, "alpha_plus_beta"), beta=self.beta)
    out, previous = self.leafwise(leaf, updates, state.previous_gradient, params=params, scalars=scalars)
    return out, ScaleByOptimisticGradientState(is_initial_step=jnp.asarray(False), previous_gradient=previous)


@shared_args
def scale_by_optimistic_gradient(alpha: ArrayLike = 1.0, beta: ArrayLike = 1.0) -> Transformation:
  """The generalised optimistic gradient ``(alpha + beta) g_t - beta g_{t-1}``.

  At the first step ``g_{t-1}`` is taken to be ``g_t`` (the update is ``alpha g_t``).
  ``alpha = beta = 1`` gives optimistic gradient descent ``2 g_t - g_{t-1}``.

  Args:
    alpha: coefficient of the current gradient.
    beta: coefficient of the extrapolation (negative momentum).

  Returns:
    A transformation with ``ScaleByOptimisticGradientState(is_initial_step, previous_gradient)``.

  References:
    Daskalakis et al., "Training GANs with Optimism", ICLR 2018; Mokhtari et al., "A Unified
    Analysis of Extra-gradient and Optimistic Gradient Methods for Saddle Point Problems", AISTATS
    2020.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_optimistic_gradient()
    >>> _, s = tx.update(jnp.array([1.0]), tx.init(jnp.zeros(1)))
    >>> tx.update(jnp.array([3.0]), s)[0]
    Array([5.], dtype=float32)
  """
  return ScaleByOptimisticGradient(alpha, beta)
