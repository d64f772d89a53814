"""MARS: Adam driven by a variance-reduced gradient estimate (the MARS-AdamW instance).

References:
  Yuan, Liu, Wu, Zhou & Gu, "MARS: Unleashing the Power of Variance Reduction for Training Large
  Models", arXiv:2411.10438, 2024 (Algorithm 1 and its AdamW instance, Algorithm 2; the approximate
  variant, MARS-approx, replaces the second gradient evaluation with the previous step's gradient).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative, check_positive
from .._core._module import hyper_field, static_field
from .._core._policy import hyper, safe_increment
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._docs import shared_args
from ._adam import AdamDecays, adam_scalars, adam_step
from ._moments import abs_sq
from .._core._types import Updates

__all__ = ["ScaleByMarsState", "scale_by_mars"]


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator("nu_dtype", real=True),
             prev_grad=accumulator())
class ScaleByMarsState(NamedTuple):
  """State of ``scale_by_mars``: int32 count, Adam's moments of the corrected gradient, and the
  previous raw gradient (MARS-approx's stand-in for the gradient at the previous iterate).

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the first moment of the corrected gradient.
    nu: the second moment of the corrected gradient.
    prev_grad: the previous raw gradient.
  """

  count: jax.Array
  mu: Updates
  nu: Updates
  prev_grad: Updates


class ScaleByMars(AdamDecays):
  name = "scale_by_mars"
  State = ScaleByMarsState
  b1: Any = hyper_field(0.95, check=check_decay_below_one)
  b2: Any = hyper_field(0.99, check=check_decay_below_one)
  gamma: Any = hyper_field(0.025, check=check_nonnegative)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  max_norm: Any = hyper_field(1.0, check=check_positive)  # None: no clipping
  mu_dtype: Any = static_field(default=None)
  nu_dtype: Any = static_field(default=None)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    # The paper starts from x_0 = x_1, so the first correction term is zero (the reference code's
    # zero-initialised last gradient would instead scale the first gradient by 1 + gamma b1/(1-b1)).
    first = state.count == 0

    def leaf(k, g, m, v, g_prev):
      # c_t = g_t + gamma b1/(1-b1) (g_t - g_{t-1})  (Algorithm 1, line 4)
      c = g + k.weight * (g - g_prev)
      if k.max_norm is not None:
        # Clip(c_t, 1): rescaled to the threshold when the tensor's l2 norm exceeds it (per tensor,
        # as the authors' implementation does).
        c = c * (k.max_norm / jnp.maximum(jnp.sqrt(jnp.sum(abs_sq(c))), k.max_norm))
      # Adam on c_t (Algorithm 2); the raw gradient is kept for the next correction.
      return (*adam_step(k, c, m, v), g)

    def scalars(dt):
      b1 = hyper(self.b1, dt)
      weight = jnp.where(first, 0, hyper(self.gamma, dt) * b1 / (1 - b1))
      k = self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root, weight=weight)
      k.max_norm = None if self.max_norm is None else hyper(self.max_norm, dt)
      return k

    out, mu, nu, prev = self.leafwise(leaf, updates, state.mu, state.nu, state.prev_grad, params=params,
                                      scalars=scalars)
    return out, ScaleByMarsState(count=count, mu=mu, nu=nu, prev_grad=prev)


@shared_args
def scale_by_mars(
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.99,
    gamma: ArrayLike = 0.025,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    *,
    max_norm: ArrayLike = 1.0,
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> Transformation:
  """Rescales updates by MARS-AdamW: Adam's moments of a variance-reduced gradient estimate.

  With the previous gradient ``g_{t-1}`` kept in state (MARS-approx),
  ``c_t = g_t + gamma * b1 / (1 - b1) * (g_t - g_{t-1})``, clipped to l2 norm ``max_norm`` per
  tensor, feeds Adam's moments ``m = b1 m + (1 - b1) c``, ``v = b2 v + (1 - b2) |c|^2``, and the
  update is ``m_hat / (sqrt(v_hat + eps_root) + eps)``. The first step uses ``c_1 = g_1`` (the
  paper's ``x_0 = x_1``). ``gamma = 0`` gives Adam on clipped gradients.

  Args:
    b1: decay of the first moment; also sets the correction's weight ``b1 / (1 - b1)``.
    b2: <shared>
    gamma: strength of the gradient correction (the paper's ``gamma_t``, 0.025 in its experiments).
    eps: <shared>
    eps_root: <shared>
    max_norm: the clipping threshold of ``c_t`` (1 in the paper); None disables clipping.
    mu_dtype: <shared>
    nu_dtype: dtype of the second moment (default: each parameter's real dtype).

  Returns:
    A transformation with ``ScaleByMarsState(count, mu, nu, prev_grad)``.

  References:
    Yuan et al., "MARS: Unleashing the Power of Variance Reduction for Training Large Models",
    arXiv:2411.10438, 2024 (Algorithm 1 with the AdamW preconditioner, Algorithm 2).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_mars()
    >>> tx.update(jnp.array([0.5]), tx.init(jnp.zeros(1)))[0]
    Array([1.], dtype=float32)
  """
  return ScaleByMars(b1, b2, gamma, eps, eps_root, max_norm, mu_dtype=mu_dtype, nu_dtype=nu_dtype)
