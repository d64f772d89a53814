"""Adam's relatives: AdaBelief, Yogi, RAdam and Adan.

Each keeps Adam's first moment and changes what the denominator measures or how the step is
corrected. Arithmetic runs in at least float32 (so float16 gradients of 1e-7 give finite updates);
second-moment statistics of complex parameters are real.

References:
  Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed Gradients",
  NeurIPS 2020 (Algorithm 2).
  Zaheer et al., "Adaptive Methods for Nonconvex Optimization", NeurIPS 2018 (Yogi, Algorithm 2).
  Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond", ICLR 2020 (RAdam,
  Algorithm 2).
  Xie et al., "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing Deep Models", 2022
  (arXiv:2208.06677, Algorithm 1).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative, check_positive, check_range
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import default_float_dtype, hyper, safe_increment, zero_count
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._tree import filled_like, tree_map, zeros_like
from .._core._docs import shared_args
from ._adam import AdamDecays, ScaleByAdamState, adam_denominator, adam_moments, adam_scalars, debiased_mu
from ._moments import abs_sq, moving_average, one_minus_pow
from .._core._types import Params, Updates

__all__ = [
    "ScaleByBeliefState",
    "ScaleByAdanState",
    "scale_by_belief",
    "scale_by_yogi",
    "scale_by_radam",
    "scale_by_adan",
]


@state_roles(count=COUNTER, mu=accumulator(), nu=accumulator(real=True))
class ScaleByBeliefState(NamedTuple):
  """State of ``scale_by_belief``: int32 count, first moment, second central moment.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the first moment.
    nu: the second central moment (of the gradient's deviation from ``mu``).
  """

  count: jax.Array
  mu: Updates
  nu: Updates


@state_roles(m=accumulator(), v=accumulator(), n=accumulator(real=True), g=accumulator(), t=COUNTER)
class ScaleByAdanState(NamedTuple):
  """State of ``scale_by_adan``: the three moments, the previous gradient and the int32 count.

  Attributes:
    m: the first moment of the gradients.
    v: the first moment of the gradient differences.
    n: the second moment of the corrected gradients.
    g: the previous gradient.
    t: the number of updates so far (int32, saturating at its maximum).
  """

  m: Params
  v: Params
  n: Params
  g: Params
  t: jax.Array


# The variance of RAdam's adaptive learning rate is finite only for rho_t > 4 (paper, §4).
_check_threshold = lambda owner, name, value: check_range(owner, name, value, 4.0, np.inf)


class ScaleByBelief(AdamDecays):
  name = "scale_by_belief"
  elementwise = True
  State = ScaleByBeliefState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-16, check=check_nonnegative)
  eps_root: Any = hyper_field(1e-16, check=check_nonnegative)
  nesterov: bool = static_field(default=False)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, m, s):
      m = moving_average(k.b1, m, g, k.one_minus_b1)
      # The "belief": the squared deviation of the gradient from its prediction m (eq. 2).
      s = moving_average(k.b2, s, abs_sq(g - m), k.one_minus_b2) + k.eps_root
      return debiased_mu(k, m, g, self.nesterov) / (jnp.sqrt(s / k.c2) + k.eps), m, s

    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root)
    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    return out, ScaleByBeliefState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_belief(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nesterov: bool = False,
) -> Transformation:
  """Rescales updates by AdaBelief's estimate of the gradient's variance around its mean.

  ``m = b1 m + (1 - b1) g``, ``s = b2 s + (1 - b2) |g - m|^2 + eps_root``,
  ``u = m_hat / (sqrt(s_hat) + eps)``: Adam with the second *central* moment, so steps are large
  where the gradient is predictable and small where it is noisy.

  Args:
    b1: <shared>
    b2: decay of the second central moment.
    eps: <shared>
    eps_root: added to the second central moment at every step (stored in the state, as in the
      paper's Algorithm 2).
    nesterov: use Nesterov momentum in the first moment.

  Returns:
    A transformation with ``ScaleByBeliefState(count, mu, nu)``.

  References:
    Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed Gradients",
    NeurIPS 2020, Algorithm 2.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_belief()
    >>> u, _ = tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))
    >>> bool(u[0] > 0)
    True
  """
  return ScaleByBelief(b1, b2, eps, eps_root, nesterov=nesterov)


class ScaleByYogi(AdamDecays):
  name = "scale_by_yogi"
  elementwise = True
  State = ScaleByAdamState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(0.001, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  initial_accumulator_value: Any = hyper_field(1e-06, check=check_positive)

  def init_fn(self, params):  # non-zero initial moments: by hand (the roles still check it)
    return ScaleByAdamState(
        count=zero_count(),
        mu=filled_like(params, self.initial_accumulator_value, real=False),
        nu=filled_like(params, self.initial_accumulator_value, real=True),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, m, v):
      m = moving_average(k.b1, m, g, k.one_minus_b1)
      g2 = abs_sq(g)
      # Additive (not multiplicative) change of v: it moves towards g^2 by at most (1 - b2) g^2.
      v = v - k.one_minus_b2 * jnp.sign(v - g2) * g2
      return m / k.c1 / adam_denominator(k, v), m, v

    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root)
    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    return out, ScaleByAdamState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_yogi(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-3,
    eps_root: ArrayLike = 0.0,
    initial_accumulator_value: ArrayLike = 1e-6,
) -> Transformation:
  """Rescales updates by Yogi's additively updated second moment.

  ``v = v - (1 - b2) sign(v - g^2) g^2`` instead of Adam's ``v = b2 v + (1 - b2) g^2``: the
  effective learning rate cannot grow abruptly when gradients become small.

  Args:
    b1: <shared>
    b2: rate of the second-moment update.
    eps: <shared>
    eps_root: <shared>
    initial_accumulator_value: the starting value of both moments (positive).

  Returns:
    A transformation with ``ScaleByAdamState(count, mu, nu)``.

  References:
    Zaheer et al., "Adaptive Methods for Nonconvex Optimization", NeurIPS 2018, Algorithm 2.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_yogi()
    >>> tx.init(jnp.zeros(2)).nu
    Array([1.e-06, 1.e-06], dtype=float32)
  """
  return ScaleByYogi(b1, b2, eps, eps_root, initial_accumulator_value)


class ScaleByRadam(AdamDecays):
  name = "scale_by_radam"
  elementwise = True
  State = ScaleByAdamState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  threshold: Any = hyper_field(5.0, check=_check_threshold)
  nesterov: bool = static_field(default=False)

  def _rectification(self, count: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Whether to rectify, and the rectification ``r_t`` (eqs. 5-6 of the paper).

    ``rho_t = rho_inf - 2 t b2^t / (1 - b2^t)`` subtracts two numbers near ``2 / (1 - b2)``; with
    ``1 - b2^t`` formed by ``expm1`` it is accurate to ~1e-4 in float32 (the direct form is off by
    ~0.03 at t = 6, which changes the step by 1%). It runs in the widest float JAX allows.
    """
    wide = default_float_dtype()
    t = count.astype(wide)  # outside the leaf function: the step count in the widest float
    one_minus_b2 = hyper(derived(self, "one_minus_b2"), wide)
    rho_inf = 2 / one_minus_b2 - 1
    b2t_minus_one = jnp.expm1(t * jnp.log1p(-one_minus_b2))
    rho = rho_inf - 2 * t * (b2t_minus_one + 1) / -b2t_minus_one
    ratio = (rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho)
    # Below rho = 4 the ratio is meaningless (negative at first); that branch is never selected
    # (threshold >= 4), but keep its values finite.
    r = jnp.sqrt(jnp.maximum(ratio, jnp.zeros_like(ratio)))
    return rho >= hyper(self.threshold, wide), r

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    rectify, r = self._rectification(count)

    def leaf(k, g, m, v):
      m, v = adam_moments(k, g, m, v)
      m_hat = debiased_mu(k, m, g, self.nesterov)
      adaptive = k.r * m_hat / adam_denominator(k, v)
      return jnp.where(rectify, adaptive, m_hat), m, v

    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root,
                                      r=r)
    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    return out, ScaleByAdamState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_radam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    threshold: ArrayLike = 5.0,
    *,
    nesterov: bool = False,
) -> Transformation:
  """Rescales updates by Rectified Adam: momentum SGD until the variance estimate is reliable.

  While the length of the approximated simple moving average ``rho_t`` is below ``threshold`` the
  update is the bias-corrected first moment; afterwards it is Adam's update times the rectification
  ``r_t`` that removes the variance of the adaptive learning rate.

  Args:
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    threshold: ``rho_t`` from which the adaptive step is used, at least 4 (the paper uses 4, Optax
      5; below 4 the rectification is undefined and Optax returns NaN).
    nesterov: use Nesterov momentum in the first moment.

  Returns:
    A transformation with ``ScaleByAdamState(count, mu, nu)``.

  References:
    Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond", ICLR 2020, Algorithm 2.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_radam()
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]  # first steps: momentum only
    Array([2.], dtype=float32)
  """
  return ScaleByRadam(b1, b2, eps, eps_root, threshold, nesterov=nesterov)


class ScaleByAdan(AdamDecays):
  name = "scale_by_adan"
  elementwise = True
  State = ScaleByAdanState
  b1: Any = hyper_field(0.98, check=check_decay_below_one)
  b2: Any = hyper_field(0.92, check=check_decay_below_one)
  b3: Any = hyper_field(0.99, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  one_minus_b3: Any = derived_field(lambda t: 1 - t.b3)

  def update_fn(self, updates, state, params=None, **extra_args):
    t = safe_increment(state.t)
    first = state.t == 0

    def leaf(k, g, m, v, n, g_prev):
      # No previous gradient at the first step: the difference term starts at zero.
      d = jnp.where(first, jnp.zeros_like(g), g - g_prev)
      m = moving_average(k.b1, m, g, k.one_minus_b1)
      v = moving_average(k.b2, v, d, k.one_minus_b2)
      n = moving_average(k.b3, n, abs_sq(g + k.one_minus_b2 * d), k.one_minus_b3)
      step = m / k.c1 + k.one_minus_b2 * (v / k.c2)
      return step / (jnp.sqrt(n / k.c3 + k.eps_root) + k.eps), m, v, n, g

    scalars = lambda dt: self.adam_scalars(t, dt, b3=self.b3, one_minus_b3=derived(self, "one_minus_b3"),
                                           c3=one_minus_pow(self.b3, t),
                                      eps=self.eps, eps_root=self.eps_root)

    out, m, v, n, g_prev = self.leafwise(leaf, updates, state.m, state.v, state.n, state.g,
                                         params=params, scalars=scalars)
    return out, ScaleByAdanState(m=m, v=v, n=n, g=g_prev, t=t)


@shared_args
def scale_by_adan(
    b1: ArrayLike = 0.98,
    b2: ArrayLike = 0.92,
    b3: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
) -> Transformation:
  """Rescales updates by Adan's Nesterov-style moments.

  With ``d = g - g_prev`` (zero at the first step): ``m = b1 m + (1 - b1) g``,
  ``v = b2 v + (1 - b2) d``, ``n = b3 n + (1 - b3) |g + (1 - b2) d|^2`` and
  ``u = (m_hat + (1 - b2) v_hat) / (sqrt(n_hat + eps_root) + eps)`` (bias-corrected moments).
  The decays weight the *old* value, as in Optax (the paper writes ``1 - beta``).

  Args:
    b1: decay of the gradient average.
    b2: decay of the average of gradient differences.
    b3: decay of the second moment.
    eps: <shared>
    eps_root: <shared>

  Returns:
    A transformation with ``ScaleByAdanState(m, v, n, g, t)``.

  References:
    Xie et al., "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing Deep Models",
    2022 (arXiv:2208.06677), Algorithm 1.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_adan()
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
    Array([1.], dtype=float32)
  """
  return ScaleByAdan(b1, b2, b3, eps, eps_root)
