"""Rprop: per-coordinate step sizes adapted from the signs of successive gradients.

References:
  Riedmiller & Braun, "A Direct Adaptive Method for Faster Backpropagation Learning: The RPROP
  Algorithm", IEEE ICNN 1993.
  Igel & Hüsken, "Improving the Rprop Learning Algorithm", NC 2000 (the iRprop- variant used here:
  after a sign flip the step is skipped and the gradient forgotten).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_range
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from .._core._policy import key_path_str
from .._core._roles import accumulator, role_zeros, state_roles
from .._core._tree import filled_like
from .._core._types import Params

__all__ = ["ScaleByRpropState", "scale_by_rprop"]


@state_roles(step_sizes=accumulator(), prev_updates=accumulator())
class ScaleByRpropState(NamedTuple):
  """State of ``scale_by_rprop``: the current step size and the last update, per coordinate.

  Attributes:
    step_sizes: the current step size of each coordinate.
    prev_updates: the last update of each coordinate.
  """

  step_sizes: Params
  prev_updates: Params


def _reject_complex(owner: str, params: Any) -> None:
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if jnp.issubdtype(getattr(leaf, "dtype", np.float32), jnp.complexfloating):
      raise TypeError(
          f"{owner}: parameter at {key_path_str(path)} is complex; Rprop compares the signs of "
          "successive gradients, which complex numbers do not have (split real and imaginary parts "
          "into separate real parameters).")


_check_positive = lambda owner, name, value: check_range(owner, name, value, 0.0, np.inf, low_open=True)


class ScaleByRprop(Transformation):
  name = "scale_by_rprop"
  elementwise = True
  State = ScaleByRpropState
  learning_rate: Any = hyper_field(check=_check_positive)
  eta_minus: Any = hyper_field(
      0.5, check=lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0, low_open=True))
  eta_plus: Any = hyper_field(1.2, check=lambda owner, name, value: check_range(owner, name, value, 1.0, np.inf))
  min_step_size: Any = hyper_field(
      1e-06, check=lambda owner, name, value: check_range(owner, name, value, 0.0, np.inf))
  max_step_size: Any = hyper_field(50.0, check=_check_positive)

  def __post_init__(self):
    # The one check across fields (runs on construction and .replace, as the field checks do).
    low, high = self.min_step_size, self.max_step_size
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low > high:
      raise ValueError(f"{self.name}: min_step_size ({low}) exceeds max_step_size ({high}).")

  def init_fn(self, params):  # step sizes start at the learning rate: by hand (roles still check)
    _reject_complex(self.name, params)
    return ScaleByRpropState(step_sizes=filled_like(params, self.learning_rate),
                             prev_updates=role_zeros(params, accumulator(), self))

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g, step, previous):
      agreement = g * previous
      # Same sign: grow the step; flipped sign: shrink it; a zero (after a flip, or at the start)
      # leaves it unchanged (Riedmiller & Braun 1993, eq. 4).
      grown = jnp.clip(step * jnp.where(agreement > 0, k.eta_plus, k.eta_minus),
                       k.min_step_size, k.max_step_size)
      step = jnp.where(agreement == 0, step, grown)
      # After a flip the step is skipped and the stored update zeroed, so the next step neither
      # grows nor shrinks (iRprop-, Igel & Hüsken 2000).
      update = jnp.where(agreement < 0, 0, step * jnp.sign(g))
      return update, step, update

    scalars = Scalars(eta_minus=self.eta_minus, eta_plus=self.eta_plus,
                      min_step_size=self.min_step_size, max_step_size=self.max_step_size)
    out, step_sizes, prev_updates = self.leafwise(leaf, updates, state.step_sizes, state.prev_updates,
                                                  params=params, scalars=scalars)
    return out, ScaleByRpropState(step_sizes=step_sizes, prev_updates=prev_updates)


@shared_args
def scale_by_rprop(
    learning_rate: ArrayLike,
    eta_minus: ArrayLike = 0.5,
    eta_plus: ArrayLike = 1.2,
    min_step_size: ArrayLike = 1e-6,
    max_step_size: ArrayLike = 50.0,
) -> Transformation:
  """Rprop's update ``step_size * sign(g)`` with step sizes adapted per coordinate.

  When the gradient keeps its sign the step size is multiplied by ``eta_plus``, when it flips by
  ``eta_minus`` (and that step is skipped), always clipped to ``[min_step_size, max_step_size]``.
  The update points *along* the gradient: chain with ``scale(-1.0)`` to descend (as ``rprop``).
  Real parameters only.

  Args:
    learning_rate: the initial step size of every coordinate.
    eta_minus: factor applied to the step size after a sign flip, in (0, 1].
    eta_plus: factor applied when the sign is kept, at least 1.
    min_step_size: the smallest step size.
    max_step_size: the largest step size.

  Returns:
    A transformation with ``ScaleByRpropState(step_sizes, prev_updates)``.

  References:
    Riedmiller & Braun, "A Direct Adaptive Method for Faster Backpropagation Learning: The RPROP
    Algorithm", IEEE ICNN 1993; Igel & Hüsken, "Improving the Rprop Learning Algorithm", 2000.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_rprop(0.1)
    >>> s = tx.init(jnp.zeros(2))
    >>> u, s = tx.update(jnp.array([3.0, -1.0]), s)
    >>> u, s = tx.update(jnp.array([2.0, 1.0]), s)
    >>> s.step_sizes
    Array([0.12, 0.05], dtype=float32)
  """
  return ScaleByRprop(learning_rate, eta_minus, eta_plus, min_step_size, max_step_size)
