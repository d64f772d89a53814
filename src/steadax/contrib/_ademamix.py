"""AdEMAMix (Pagliardini, Ablin & Grangier, "The AdEMAMix Optimizer: Better, Faster, Older", 2024)
and its simplified form (Morwani et al., "Connections between Schedule-Free Optimizers, AdEMAMix,
and Accelerated SGD Variants", 2025).

AdEMAMix adds a second, slow EMA of the gradients to Adam's numerator (Algorithm 1 of the paper):

    m1 = b1 m1 + (1 - b1) g,   m2 = b3 m2 + (1 - b3) g,   nu = b2 nu + (1 - b2) |g|^2,
    u = (m1 / (1 - b1^t) + alpha m2) / (sqrt(nu / (1 - b2^t) + eps_root) + eps).

The simplified form keeps one undamped momentum ``m = b1 m + g`` and mixes in the raw gradient:
``u = (m + alpha g) / (sqrt(n_hat + eps_root) + eps)`` (their Algorithm 2).

``b3`` and ``alpha`` may be schedules (of the int32 count), as in Optax. Second moments of complex
parameters are real. As in Optax, AdEMAMix's ``nu`` takes ``mu_dtype`` too (its real part).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative
from .._core._combine import chain
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import safe_increment
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._types import Params, ScalarOrSchedule, Updates
from .._core._docs import shared_args
from ..transforms._adam import AdamDecays, adam_denominator, adam_moments, adam_scalars
from ..transforms._decay import add_decayed_weights
from ..transforms._moments import abs_sq, moving_average
from ..transforms._scaling import scale_by_learning_rate, value_at

__all__ = [
    "ScaleByAdemamixState",
    "ScaleBySimplifiedAdEMAMixState",
    "scale_by_ademamix",
    "ademamix",
    "scale_by_simplified_ademamix",
    "simplified_ademamix",
]


@state_roles(count=COUNTER, count_m2=COUNTER, m1=accumulator("mu_dtype"), m2=accumulator("mu_dtype"),
             nu=accumulator("mu_dtype", real=True))
class ScaleByAdemamixState(NamedTuple):
  """State of ``scale_by_ademamix`` (Optax's field names).

  Attributes:
    count: int32 number of updates (for the bias corrections).
    count_m2: int32 count at which the ``b3`` and ``alpha`` schedules are evaluated.
    m1: the fast EMA of the gradients.
    m2: the slow EMA of the gradients.
    nu: the EMA of the squared gradients (real for complex parameters).
  """

  count: jax.Array
  count_m2: jax.Array
  m1: Params
  m2: Params
  nu: Updates


@state_roles(t=COUNTER, m=accumulator(), n=accumulator(real=True))
class ScaleBySimplifiedAdEMAMixState(NamedTuple):
  """State of ``scale_by_simplified_ademamix`` (Optax's field names).

  Attributes:
    t: int32 number of updates.
    m: the undamped momentum ``Σ b1^k g``.
    n: the EMA of the squared gradients (real for complex parameters).
  """

  t: jax.Array
  m: Params
  n: Params


class ScaleByAdemamix(AdamDecays):
  name = "scale_by_ademamix"
  elementwise = True
  State = ScaleByAdemamixState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  b3: Any = hyper_field(0.9999, check=check_decay_below_one)  # or a schedule
  alpha: Any = hyper_field(6.0, check=check_nonnegative)  # or a schedule
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  mu_dtype: Any = static_field(default=None)

  one_minus_b3: Any = derived_field(lambda t: 1 - t.b3)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    b3, alpha = value_at(self.b3, state.count_m2), value_at(self.alpha, state.count_m2)
    one_minus_b3 = 1 - b3 if callable(self.b3) else derived(self, "one_minus_b3")

    def leaf(k, g, m1, m2, nu):
      # Algorithm 1: Adam's fast EMA and second moment, plus a slow EMA (not bias-corrected).
      m1, nu = adam_moments(k, g, m1, nu)
      m2 = moving_average(k.b3, m2, g, k.one_minus_b3)
      return (m1 / k.c1 + k.alpha * m2) / adam_denominator(k, nu), m1, m2, nu

    scalars = lambda dt: adam_scalars(
        self.b1, self.b2, count, dt, one_minus_b1=derived(self, "one_minus_b1"),
        one_minus_b2=derived(self, "one_minus_b2"), b3=b3, one_minus_b3=one_minus_b3, alpha=alpha,
        eps=self.eps, eps_root=self.eps_root)
    out, m1, m2, nu = self.leafwise(leaf, updates, state.m1, state.m2, state.nu, params=params, scalars=scalars)
    return out, ScaleByAdemamixState(count=count, count_m2=safe_increment(state.count_m2), m1=m1, m2=m2, nu=nu)


class ScaleBySimplifiedAdemamix(AdamDecays):
  name = "scale_by_simplified_ademamix"
  elementwise = True
  State = ScaleBySimplifiedAdEMAMixState
  b1: Any = hyper_field(0.99, check=check_decay_below_one)
  b2: Any = hyper_field(0.95, check=check_decay_below_one)
  alpha: Any = hyper_field(0.0, check=check_nonnegative)  # or a schedule
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    t = safe_increment(state.t)
    alpha = value_at(self.alpha, state.t)

    def leaf(k, g, m, n):
      # Algorithm 2: an undamped momentum (no 1 - b1 factor, no bias correction) plus alpha g; the
      # second moment as Optax interpolates it, |g|^2 + b2 (n - |g|^2).
      m = g + k.b1 * m
      g2 = abs_sq(g)
      n = g2 + k.b2 * (n - g2)
      return (m + k.alpha * g) / adam_denominator(k, n), m, n

    scalars = lambda dt: self.adam_scalars(t, dt, alpha=alpha, eps=self.eps, eps_root=self.eps_root)
    out, m, n = self.leafwise(leaf, updates, state.m, state.n, params=params, scalars=scalars)
    return out, ScaleBySimplifiedAdEMAMixState(t=t, m=m, n=n)


@shared_args
def scale_by_ademamix(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 6.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
) -> Transformation:
  """Rescales updates by AdEMAMix: Adam's numerator plus ``alpha`` times a slow gradient EMA.

  Args:
    b1: decay of the fast EMA (bias-corrected).
    b2: decay of the second moment (bias-corrected).
    b3: decay of the slow EMA (not bias-corrected), a scalar or a schedule.
    alpha: weight of the slow EMA, a scalar or a schedule.
    eps: <shared>
    eps_root: <shared>
    mu_dtype: dtype of ``m1``, ``m2`` and (its real part) ``nu``; default: each parameter's.

  Returns:
    A transformation with ``ScaleByAdemamixState(count, count_m2, m1, m2, nu)``.

  References:
    Pagliardini, Ablin & Grangier, "The AdEMAMix Optimizer: Better, Faster, Older", 2024
    (arXiv:2409.03137, Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_ademamix(alpha=0.0)
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]  # Adam's first step
    Array([1.], dtype=float32)
  """
  return ScaleByAdemamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype=mu_dtype)


@shared_args
def ademamix(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 5.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: ArrayLike = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """AdEMAMix: Adam with a mixture of a fast and a slow EMA of the gradients, and weight decay.

  The slow EMA (``b3`` close to 1) keeps gradients from thousands of steps ago relevant; the paper
  warms ``alpha`` and ``b3`` up with schedules (both accept one).

  Args:
    learning_rate: <shared>
    b1: decay of the fast EMA.
    b2: <shared>
    b3: decay of the slow EMA (scalar or schedule).
    alpha: weight of the slow EMA (scalar or schedule).
    eps: <shared>
    eps_root: <shared>
    mu_dtype: dtype of the moments.
    weight_decay: <shared>
    mask: <shared>

  Returns:
    ``chain(scale_by_ademamix, add_decayed_weights, scale_by_learning_rate)``, as in Optax.

  References:
    Pagliardini, Ablin & Grangier, "The AdEMAMix Optimizer: Better, Faster, Older", 2024
    (arXiv:2409.03137).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.ademamix(0.1, mu_dtype=jnp.bfloat16)
    >>> jax.eval_shape(opt.init, {"w": jnp.zeros(3)})[0].nu["w"].dtype
    dtype(bfloat16)
  """
  check_nonnegative("ademamix", "weight_decay", weight_decay)
  return chain(ScaleByAdemamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype=mu_dtype),
               add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate))


@shared_args
def scale_by_simplified_ademamix(
    b1: ArrayLike = 0.99,
    b2: ArrayLike = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
) -> Transformation:
  """Rescales updates by simplified AdEMAMix: ``(m + alpha g) / (sqrt(n_hat + eps_root) + eps)``.

  Args:
    b1: decay of the undamped momentum ``m = b1 m + g``.
    b2: decay of the second moment (bias-corrected).
    alpha: weight of the current gradient (scalar or schedule).
    eps: <shared>
    eps_root: <shared>

  Returns:
    A transformation with ``ScaleBySimplifiedAdEMAMixState(t, m, n)``.

  References:
    Morwani et al., "Connections between Schedule-Free Optimizers, AdEMAMix, and Accelerated SGD
    Variants", 2025 (arXiv:2502.02431, Algorithm 2).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_simplified_ademamix(alpha=1.0)
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]  # (g + g) / |g|
    Array([2.], dtype=float32)
  """
  return ScaleBySimplifiedAdemamix(b1, b2, alpha, eps, eps_root)


@shared_args
def simplified_ademamix(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.99,
    b2: ArrayLike = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ArrayLike = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """Simplified AdEMAMix: one undamped momentum plus ``alpha`` times the gradient, over RMS.

  With ``b1`` close to 1 the momentum sums many past gradients; scale the learning rate down by
  about ``1 - b1`` compared with Adam.

  Args:
    learning_rate: <shared>
    b1: decay of the momentum.
    b2: <shared>
    alpha: weight of the current gradient (scalar or schedule).
    eps: <shared>
    eps_root: <shared>
    weight_decay: <shared>
    mask: where the weight decay applies.

  Returns:
    ``chain(scale_by_simplified_ademamix, add_decayed_weights, scale_by_learning_rate)``.

  References:
    Morwani et al., "Connections between Schedule-Free Optimizers, AdEMAMix, and Accelerated SGD
    Variants", 2025 (arXiv:2502.02431).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.simplified_ademamix(0.01)
    >>> opt.init(jnp.zeros(2))[0].t
    Array(0, dtype=int32)
  """
  check_nonnegative("simplified_ademamix", "weight_decay", weight_decay)
  return chain(ScaleBySimplifiedAdemamix(b1, b2, alpha, eps, eps_root), add_decayed_weights(weight_decay, mask),
               scale_by_learning_rate(learning_rate))
