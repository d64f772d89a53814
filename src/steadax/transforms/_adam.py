"""Adam's preconditioner and its close relatives (AMSGrad, Adamax).

References:
  Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015 (Algorithm 1; Adamax in §7.1).
  Dozat, "Incorporating Nesterov Momentum into Adam", ICLR workshop 2016 (NAdam).
  Reddi et al., "On the Convergence of Adam and Beyond", ICLR 2018 (AMSGrad).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay, check_decay_below_one, check_nonnegative
from .._core._leafwise import Scalars
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import safe_increment
from .._core._docs import shared_args
from ._moments import abs_sq, moving_average
from ._moments import one_minus_pow  # noqa: F401  (imported from here by other modules)
from .._core._types import Params, Updates

__all__ = [
    "AdamDecays",
    "ScaleByAdamState",
    "ScaleByAmsgradState",
    "scale_by_adam",
    "scale_by_amsgrad",
    "scale_by_adamax",
]


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator("nu_dtype", real=True))
class ScaleByAdamState(NamedTuple):
  """State of ``scale_by_adam`` (and ``scale_by_adamax``): int32 count, first and second moments.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the first moment, one leaf per parameter.
    nu: the second moment (real), one leaf per parameter.
  """

  count: jax.Array
  mu: Updates
  nu: Updates


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator(real=True),
             nu_max=accumulator(real=True))
class ScaleByAmsgradState(NamedTuple):
  """State of ``scale_by_amsgrad``: Adam's state plus the running maximum of ``nu``.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the first moment.
    nu: the second moment.
    nu_max: the running maximum of ``nu``.
  """

  count: jax.Array
  mu: Updates
  nu: Updates
  nu_max: Params


def adam_scalars(b1: Any, b2: Any, count: jax.Array, dtype: Any, *, one_minus_b1: Any = None,
                 one_minus_b2: Any = None, **more: Any) -> Scalars:
  """Adam's per-dtype scalars: the decays, their complements and the bias corrections at ``count``.

  As Optax computes them: ``one_minus_b1``/``one_minus_b2`` are ``1 - b`` from the transformation's
  derived fields (exact, see ``_core._module.derived_field``; ``1 - b`` on the values given when
  None), the bias corrections ``1 - b**count`` are ``one_minus_pow``'s. ``c1_next``
  (``1 - b1**(count + 1)``) is there for Nesterov's look-ahead (Dozat 2016); further keyword
  values (``eps=...``) are passed as they are.
  """
  return Scalars(b1=b1, b2=b2,
                 one_minus_b1=1 - b1 if one_minus_b1 is None else one_minus_b1,
                 one_minus_b2=1 - b2 if one_minus_b2 is None else one_minus_b2,
                 c1=one_minus_pow(b1, count), c1_next=one_minus_pow(b1, safe_increment(count)),
                 c2=one_minus_pow(b2, count), **more)


def debiased_mu(k: Scalars, m: jax.Array, g: jax.Array, nesterov: bool = False) -> jax.Array:
  """Bias-corrected first moment; with Nesterov, the look-ahead mix of Dozat (2016), in Optax's
  order: ``b1 * (m / c1_next) + (1 - b1) * (g / c1)``."""
  if nesterov:
    one_minus_b1 = k.one_minus_b1 if "one_minus_b1" in dict(k.items()) else 1 - k.b1
    return k.b1 * (m / k.c1_next) + one_minus_b1 * (g / k.c1)
  return m / k.c1


# The Adam skeleton: every Adam-like leaf function (the variants below and in _adam_variants.py,
# low-memory and 8-bit Adam, MARS, AdEMAMix) writes its moments and denominator with these, on
# compute-dtype leaves and the ``Scalars`` of ``adam_scalars``.


def adam_moments(k: Scalars, g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Adam's moment estimates (Kingma & Ba 2015, Algorithm 1): ``m <- b1 m + (1 - b1) g``,
  ``v <- b2 v + (1 - b2) |g|^2`` (real for complex ``g``)."""
  return (moving_average(k.b1, m, g, k.one_minus_b1),
          moving_average(k.b2, v, abs_sq(g), k.one_minus_b2))


def adam_denominator(k: Scalars, v: jax.Array) -> jax.Array:
  """``sqrt(v_hat + eps_root) + eps`` with the bias-corrected ``v_hat = v / (1 - b2^t)``."""
  return jnp.sqrt(v / k.c2 + k.eps_root) + k.eps


def adam_step(k: Scalars, g: jax.Array, m: jax.Array, v: jax.Array,
              nesterov: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
  """One Adam step on one leaf: ``(update, m, v)`` with ``update = m_hat / (sqrt(v_hat + eps_root)
  + eps)`` (Algorithm 1; NAdam's look-ahead ``m_hat`` with ``nesterov``, Dozat 2016)."""
  m, v = adam_moments(k, g, m, v)
  return debiased_mu(k, m, g, nesterov) / adam_denominator(k, v), m, v


class AdamDecays(Transformation):
  """A transformation with Adam's decays ``b1`` and ``b2`` (its subclass declares them): their
  complements ``1 - b1`` and ``1 - b2`` as Optax computes them (``derived_field``), and Adam's
  per-dtype scalars of them."""

  one_minus_b1: Any = derived_field(lambda t: 1 - t.b1)
  one_minus_b2: Any = derived_field(lambda t: 1 - t.b2)

  def adam_scalars(self, count: jax.Array, dtype: Any, **more: Any) -> Scalars:
    """``adam_scalars`` of this transformation's decays at ``count``, with ``more`` values."""
    b1, b2 = getattr(self, "b1"), getattr(self, "b2")  # declared by the subclass
    return adam_scalars(b1, b2, count, dtype, one_minus_b1=derived(self, "one_minus_b1"),
                        one_minus_b2=derived(self, "one_minus_b2"), **more)


class _AdamFields(AdamDecays):
  """The hyperparameters Adam and AMSGrad share (their defaults and checks, written once)."""

  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-8, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  mu_dtype: Any = static_field(default=None)


class ScaleByAdam(_AdamFields):
  name = "scale_by_adam"
  elementwise = True
  State = ScaleByAdamState
  nu_dtype: Any = static_field(default=None)
  nesterov: bool = static_field(default=False)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, m, v):
      return adam_step(k, g, m, v, self.nesterov)

    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root)
    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    return out, ScaleByAdamState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_adam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: DTypeLike | None = None,
) -> Transformation:
  """Rescales updates by Adam's bias-corrected moment estimates.

  ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) |g|^2``,
  ``u = m_hat / (sqrt(v_hat + eps_root) + eps)`` (Kingma & Ba 2015, Algorithm 1). Arithmetic runs in
  at least float32, so float16 gradients of 1e-7 give finite updates.

  Args:
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: <shared>
    nesterov: use Nesterov momentum (NAdam, Dozat 2016).
    nu_dtype: dtype of the second moment (default: each parameter's real dtype). steadax extension.

  Returns:
    A transformation with ``ScaleByAdamState(count, mu, nu)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_adam()
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
    Array([1.], dtype=float32)
  """
  return ScaleByAdam(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype, nesterov=nesterov)


class ScaleByAmsgrad(_AdamFields):
  name = "scale_by_amsgrad"
  elementwise = True
  State = ScaleByAmsgradState
  bias_correction_mu: bool = static_field(default=True)
  bias_correction_nu: bool = static_field(default=True)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, m, v, v_max):
      m, v = adam_moments(k, g, m, v)
      m_hat = m / k.c1 if self.bias_correction_mu else m
      v_hat = v / k.c2 if self.bias_correction_nu else v
      v_max = jnp.maximum(v_max, v_hat)
      return m_hat / (jnp.sqrt(v_max + k.eps_root) + k.eps), m, v, v_max

    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps, eps_root=self.eps_root)
    out, mu, nu, nu_max = self.leafwise(leaf, updates, state.mu, state.nu, state.nu_max, params=params,
                                        scalars=scalars)
    return out, ScaleByAmsgradState(count=count, mu=mu, nu=nu, nu_max=nu_max)


@shared_args
def scale_by_amsgrad(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
) -> Transformation:
  """AMSGrad: Adam with the running maximum of the (bias-corrected) second moment.

  Args:
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    mu_dtype: <shared>
    bias_correction_mu: bias-correct the first moment.
    bias_correction_nu: bias-correct the second moment before taking the maximum.

  Returns:
    A transformation with ``ScaleByAmsgradState(count, mu, nu, nu_max)``.

  References:
    Reddi et al., "On the Convergence of Adam and Beyond", ICLR 2018.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_amsgrad()
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
    Array([1.], dtype=float32)
  """
  return ScaleByAmsgrad(
      b1, b2, eps, eps_root, mu_dtype=mu_dtype,
      bias_correction_mu=bias_correction_mu, bias_correction_nu=bias_correction_nu,
  )


class ScaleByAdamax(AdamDecays):
  name = "scale_by_adamax"
  elementwise = True
  State = ScaleByAdamState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)  # 1 - b1^t divides; b2 is not corrected
  b2: Any = hyper_field(0.999, check=check_decay)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, m, u):
      m = moving_average(k.b1, m, g, k.one_minus_b1)
      u = jnp.maximum(jnp.abs(g) + k.eps, k.b2 * u)   # the infinity norm, eps inside (§7.1)
      return m / k.c1 / u, m, u

    scalars = lambda dt: self.adam_scalars(count, dt, eps=self.eps)
    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    return out, ScaleByAdamState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_adamax(b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-8) -> Transformation:
  """Adamax: Adam with the infinity norm, ``v = max(b2 v, |g| + eps)`` (Kingma & Ba 2015, §7.1).

  Args:
    b1: <shared>
    b2: decay of the infinity-norm moment.
    eps: added to ``|g|``.

  Returns:
    A transformation with ``ScaleByAdamState(count, mu, nu)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_adamax(eps=0.0)
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
    Array([1.], dtype=float32)
  """
  return ScaleByAdamax(b1, b2, eps)
