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

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_range, check_schedule_or_scalar
from .._core._combine import chain
from .._core._module import hyper_field, static_field
from .._core._policy import as_compute, compute_dtype, hyper, per_dtype, real_dtype, safe_increment, zero_count
from .._core._tree import tree_map_n, zeros_like
from .._core._types import ScalarOrSchedule
from ..transforms._adam import one_minus_pow
from ..transforms._decay import add_decayed_weights
from ..transforms._moments import abs_sq
from ..transforms._scaling import scale_by_learning_rate, value_at

__all__ = [
    "ScaleByAdemamixState",
    "ScaleBySimplifiedAdEMAMixState",
    "scale_by_ademamix",
    "ademamix",
    "scale_by_simplified_ademamix",
    "simplified_ademamix",
]


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
  m1: Any
  m2: Any
  nu: Any


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
  """State of ``scale_by_simplified_ademamix`` (Optax's field names).

  Attributes:
    t: int32 number of updates.
    m: the undamped momentum ``Σ b1^k g``.
    n: the EMA of the squared gradients (real for complex parameters).
  """

  t: jax.Array
  m: Any
  n: Any


class ScaleByAdemamix(Transformation):
  name = "scale_by_ademamix"
  b1: Any = hyper_field(0.9)
  b2: Any = hyper_field(0.999)
  b3: Any = hyper_field(0.9999)
  alpha: Any = hyper_field(6.0)
  eps: Any = hyper_field(1e-08)
  eps_root: Any = hyper_field(0.0)
  mu_dtype: Any = static_field(default=None)

  def init_fn(self, params):
    return ScaleByAdemamixState(
        count=zero_count(),
        count_m2=zero_count(),
        m1=zeros_like(params, self.mu_dtype),
        m2=zeros_like(params, self.mu_dtype),
        nu=zeros_like(params, self.mu_dtype, real=True),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    b3_now = value_at(self.b3, state.count_m2)
    alpha_now = value_at(self.alpha, state.count_m2)

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1, b3, b2 = hyper(self.b1, cdt), hyper(b3_now, cdt), hyper(self.b2, rdt)
      return dict(b1=b1, one_minus_b1=hyper(1 - self.b1, cdt), b3=b3, one_minus_b3=hyper(1 - b3_now, cdt),
                  b2=b2, one_minus_b2=hyper(1 - self.b2, rdt), alpha=hyper(alpha_now, cdt),
                  c1=one_minus_pow(self.b1, count, rdt).astype(cdt), c2=one_minus_pow(self.b2, count, rdt),
                  eps=hyper(self.eps, rdt), eps_root=hyper(self.eps_root, rdt))

    def leaf(g, m1, m2, v):
      cdt = compute_dtype(g.dtype, m1.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc = as_compute(g, cdt)
      m1_new = k["b1"] * as_compute(m1, cdt) + k["one_minus_b1"] * gc
      m2_new = k["b3"] * as_compute(m2, cdt) + k["one_minus_b3"] * gc
      v_new = k["b2"] * as_compute(v, rdt) + k["one_minus_b2"] * abs_sq(gc).astype(rdt)
      denom = jnp.sqrt(v_new / k["c2"] + k["eps_root"]) + k["eps"]
      out = (m1_new / k["c1"] + k["alpha"] * m2_new) / denom.astype(cdt)
      return out.astype(g.dtype), m1_new.astype(m1.dtype), m2_new.astype(m2.dtype), v_new.astype(v.dtype)

    out, m1, m2, nu = tree_map_n(leaf, 4, updates, state.m1, state.m2, state.nu)
    return out, ScaleByAdemamixState(count=count, count_m2=safe_increment(state.count_m2), m1=m1, m2=m2, nu=nu)


class ScaleBySimplifiedAdemamix(Transformation):
  name = "scale_by_simplified_ademamix"
  b1: Any = hyper_field(0.99)
  b2: Any = hyper_field(0.95)
  alpha: Any = hyper_field(0.0)
  eps: Any = hyper_field(1e-08)
  eps_root: Any = hyper_field(0.0)

  def init_fn(self, params):
    return ScaleBySimplifiedAdEMAMixState(t=zero_count(), m=zeros_like(params), n=zeros_like(params, real=True))

  def update_fn(self, updates, state, params=None, **extra_args):
    t = safe_increment(state.t)
    alpha_now = value_at(self.alpha, state.t)

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b2 = hyper(self.b2, rdt)
      return dict(b1=hyper(self.b1, cdt), b2=b2, one_minus_b2=hyper(1 - self.b2, rdt),
                  alpha=hyper(alpha_now, cdt), c2=one_minus_pow(self.b2, t, rdt),
                  eps=hyper(self.eps, rdt), eps_root=hyper(self.eps_root, rdt))

    def leaf(g, m, n):
      cdt = compute_dtype(g.dtype, m.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc = as_compute(g, cdt)
      m_new = k["b1"] * as_compute(m, cdt) + gc
      n_new = k["b2"] * as_compute(n, rdt) + k["one_minus_b2"] * abs_sq(gc).astype(rdt)
      denom = jnp.sqrt(n_new / k["c2"] + k["eps_root"]) + k["eps"]
      out = (m_new + k["alpha"] * gc) / denom.astype(cdt)
      return out.astype(g.dtype), m_new.astype(m.dtype), n_new.astype(n.dtype)

    out, m, n = tree_map_n(leaf, 3, updates, state.m, state.n)
    return out, ScaleBySimplifiedAdEMAMixState(t=t, m=m, n=n)


def _check_common(owner: str, b1: Any, b2: Any, alpha: Any, eps: Any, eps_root: Any) -> None:
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  if not callable(alpha):
    check_nonnegative(owner, "alpha", alpha)
  check_nonnegative(owner, "eps", eps)
  check_nonnegative(owner, "eps_root", eps_root)


def _check_ademamix(owner, b1, b2, b3, alpha, eps, eps_root):
  _check_common(owner, b1, b2, alpha, eps, eps_root)
  if not callable(b3):
    check_range(owner, "b3", b3, 0.0, 1.0, high_open=True)


def scale_by_ademamix(
    b1: Any = 0.9,
    b2: Any = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 6.0,
    eps: Any = 1e-8,
    eps_root: Any = 0.0,
    mu_dtype: Any = None,
) -> Transformation:
  """Rescales updates by AdEMAMix: Adam's numerator plus ``alpha`` times a slow gradient EMA.

  Args:
    b1: decay of the fast EMA (bias-corrected).
    b2: decay of the second moment (bias-corrected).
    b3: decay of the slow EMA (not bias-corrected), a scalar or a schedule.
    alpha: weight of the slow EMA, a scalar or a schedule.
    eps: added to the denominator outside the square root.
    eps_root: added inside the square root.
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
  _check_ademamix("scale_by_ademamix", b1, b2, b3, alpha, eps, eps_root)
  return ScaleByAdemamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype=mu_dtype)


def ademamix(
    learning_rate: ScalarOrSchedule,
    b1: Any = 0.9,
    b2: Any = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 5.0,
    eps: Any = 1e-8,
    eps_root: Any = 0.0,
    mu_dtype: Any = None,
    weight_decay: Any = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """AdEMAMix: Adam with a mixture of a fast and a slow EMA of the gradients, and weight decay.

  The slow EMA (``b3`` close to 1) keeps gradients from thousands of steps ago relevant; the paper
  warms ``alpha`` and ``b3`` up with schedules (both accept one).

  Args:
    learning_rate: a scalar or a schedule.
    b1: decay of the fast EMA.
    b2: decay of the second moment.
    b3: decay of the slow EMA (scalar or schedule).
    alpha: weight of the slow EMA (scalar or schedule).
    eps: added to the denominator outside the square root.
    eps_root: added inside the square root.
    mu_dtype: dtype of the moments.
    weight_decay: decoupled weight decay (multiplied by the learning rate).
    mask: where the weight decay applies (a tree of booleans or a callable of the params).

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
  check_schedule_or_scalar("ademamix", "learning_rate", learning_rate)
  _check_ademamix("ademamix", b1, b2, b3, alpha, eps, eps_root)
  check_nonnegative("ademamix", "weight_decay", weight_decay)
  return chain(ScaleByAdemamix(b1, b2, b3, alpha, eps, eps_root, mu_dtype=mu_dtype),
               add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate))


def scale_by_simplified_ademamix(
    b1: Any = 0.99,
    b2: Any = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: Any = 1e-8,
    eps_root: Any = 0.0,
) -> Transformation:
  """Rescales updates by simplified AdEMAMix: ``(m + alpha g) / (sqrt(n_hat + eps_root) + eps)``.

  Args:
    b1: decay of the undamped momentum ``m = b1 m + g``.
    b2: decay of the second moment (bias-corrected).
    alpha: weight of the current gradient (scalar or schedule).
    eps: added to the denominator outside the square root.
    eps_root: added inside the square root.

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
  _check_common("scale_by_simplified_ademamix", b1, b2, alpha, eps, eps_root)
  return ScaleBySimplifiedAdemamix(b1, b2, alpha, eps, eps_root)


def simplified_ademamix(
    learning_rate: ScalarOrSchedule,
    b1: Any = 0.99,
    b2: Any = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: Any = 1e-8,
    eps_root: Any = 0.0,
    weight_decay: Any = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """Simplified AdEMAMix: one undamped momentum plus ``alpha`` times the gradient, over RMS.

  With ``b1`` close to 1 the momentum sums many past gradients; scale the learning rate down by
  about ``1 - b1`` compared with Adam.

  Args:
    learning_rate: a scalar or a schedule.
    b1: decay of the momentum.
    b2: decay of the second moment.
    alpha: weight of the current gradient (scalar or schedule).
    eps: added to the denominator outside the square root.
    eps_root: added inside the square root.
    weight_decay: decoupled weight decay (multiplied by the learning rate).
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
  check_schedule_or_scalar("simplified_ademamix", "learning_rate", learning_rate)
  _check_common("simplified_ademamix", b1, b2, alpha, eps, eps_root)
  check_nonnegative("simplified_ademamix", "weight_decay", weight_decay)
  return chain(ScaleBySimplifiedAdemamix(b1, b2, alpha, eps, eps_root), add_decayed_weights(weight_decay, mask),
               scale_by_learning_rate(learning_rate))
