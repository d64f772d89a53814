"""Lion's sign-of-interpolated-momentum preconditioner.

References:
  Chen et al., "Symbolic Discovery of Optimization Algorithms", NeurIPS 2023 (Program 1).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike
from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_decay, check_one_of
from .._core._leafwise import Scalars
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import safe_increment
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._types import Updates
from ._moments import moving_average

__all__ = ["ScaleByLionState", "scale_by_lion"]

_MODES = ("hard", "smooth", "refined")


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"))
class ScaleByLionState(NamedTuple):
  """State of ``scale_by_lion``: the int32 count and the momentum ``mu``.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the momentum.
  """

  count: jax.Array
  mu: Updates


class ScaleByLion(Transformation):
  name = "scale_by_lion"
  elementwise = True
  State = ScaleByLionState
  b1: Any = hyper_field(0.9, check=check_decay)
  b2: Any = hyper_field(0.99, check=check_decay)
  mu_dtype: Any = static_field(default=None)
  mode: str = static_field(default="hard")
  smooth_beta: Any = hyper_field(default=1.0)
  one_minus_b1: Any = derived_field(lambda t: 1.0 - t.b1)
  one_minus_b2: Any = derived_field(lambda t: 1 - t.b2)

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g, m):
      c = k.one_minus_b1 * g + k.b1 * m   # Program 1: interpolate, take the sign, then update m
      if self.mode == "hard":
        u = jnp.sign(c)
      elif self.mode == "smooth":
        u = jnp.tanh(k.beta * c)
      else:  # "refined": linear near zero, the sign beyond unit magnitude
        u = jnp.where(jnp.abs(c) < 1, c, jnp.sign(c))
      return u, moving_average(k.b2, m, g, k.one_minus_b2)

    scalars = Scalars(b1=self.b1, one_minus_b1=derived(self, "one_minus_b1"), b2=self.b2,
                      one_minus_b2=derived(self, "one_minus_b2"),
                      beta=self.smooth_beta if self.mode == "smooth" else None)

    out, mu = self.leafwise(leaf, updates, state.mu, params=params, scalars=scalars)
    return out, ScaleByLionState(count=safe_increment(state.count), mu=mu)


@shared_args
def scale_by_lion(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    mu_dtype: DTypeLike | None = None,
    *,
    mode: str = "hard",
    smooth_beta: float = 1.0,
) -> Transformation:
  """Lion's update direction: the sign of an interpolation of the momentum and the gradient.

  ``u = sign((1 - b1) g + b1 m)`` then ``m = b2 m + (1 - b2) g`` (Chen et al. 2023, Program 1).
  ``mode="smooth"`` uses ``tanh(smooth_beta * x)`` instead of the sign, ``mode="refined"`` keeps
  ``x`` where ``|x| < 1``. For complex parameters the sign is ``x / |x|``.

  Args:
    b1: the weight of the momentum in the update's interpolation, in [0, 1].
    b2: the decay of the momentum, in [0, 1].
    mu_dtype: dtype of the momentum (default: each parameter's dtype).
    mode: ``"hard"``, ``"smooth"`` or ``"refined"``.
    smooth_beta: the tanh's sharpness in ``"smooth"`` mode.

  Returns:
    A transformation with ``ScaleByLionState(count, mu)``.

  References:
    Chen et al., "Symbolic Discovery of Optimization Algorithms", NeurIPS 2023.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_lion()
    >>> tx.update(jnp.array([0.3, -2.0]), tx.init(jnp.zeros(2)))[0]
    Array([ 1., -1.], dtype=float32)
  """
  check_one_of(*_MODES)("scale_by_lion", "mode", mode)
  return ScaleByLion(b1, b2, mu_dtype=mu_dtype, mode=mode, smooth_beta=smooth_beta)
