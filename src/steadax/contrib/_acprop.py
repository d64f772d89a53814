"""ACProp (Zhuang et al., "Momentum Centering and Asynchronous Update for Adaptive Gradient
Methods", NeurIPS 2021).

AdaBelief's second *central* moment with an asynchronous update: the step at time ``t`` divides
the raw gradient ``g_t`` by the (bias-corrected) central moment of steps ``<= t - 1``, so the
denominator does not depend on the gradient it scales (Algorithm 2 of the paper):

    s_t = b2 s_{t-1} + (1 - b2) |g_t - m_{t-1}|^2 + eps_root,    m_t = b1 m_{t-1} + (1 - b1) g_t,
    u_t = g_t / (sqrt(s_{t-1} / (1 - b2^{t-1})) + eps)           (u_1 = g_1 / (1 + eps)).

The state is AdaBelief's ``ScaleByBeliefState``; ``nu`` is real for complex parameters.
"""

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative
from .._core._combine import chain
from .._core._leafwise import Scalars
from .._core._module import derived, derived_field, hyper_field
from .._core._policy import safe_increment
from .._core._types import ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adam_variants import ScaleByBeliefState
from ..transforms._decay import add_decayed_weights
from ..transforms._moments import abs_sq, moving_average, one_minus_pow
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["scale_by_acprop", "acprop"]


class ScaleByAcprop(Transformation):
  name = "scale_by_acprop"
  elementwise = True
  State = ScaleByBeliefState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-16, check=check_nonnegative)
  eps_root: Any = hyper_field(1e-16, check=check_nonnegative)
  one_minus_b1: Any = derived_field(lambda t: 1 - t.b1)
  one_minus_b2: Any = derived_field(lambda t: 1 - t.b2)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    initial = state.count == 0

    def leaf(k, g, m, s):
      # Algorithm 2: the step divides g_t by the central moment of the steps before t (the first
      # step, which has none, divides by 1) ...
      s_hat = jnp.where(initial, jnp.ones_like(s), s / k.c2)
      u = g / (jnp.sqrt(s_hat) + k.eps)
      # ... then the moments take g_t in: the belief |g_t - m_{t-1}|^2, and m.
      s = moving_average(k.b2, s, abs_sq(g - m), k.one_minus_b2) + k.eps_root
      m = moving_average(k.b1, m, g, k.one_minus_b1)
      return u, m, s

    # The bias correction is the previous step's (old count), as Optax's.
    scalars = Scalars(b1=self.b1, one_minus_b1=derived(self, "one_minus_b1"), b2=self.b2,
                      one_minus_b2=derived(self, "one_minus_b2"),
                      c2=one_minus_pow(self.b2, jnp.where(initial, count, state.count)),
                      eps=self.eps, eps_root=self.eps_root)

    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    return out, ScaleByBeliefState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_acprop(b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-16, eps_root: ArrayLike = 1e-16) -> Transformation:
  """Rescales updates by ACProp: the gradient over the previous step's central second moment.

  Args:
    b1: decay of the first moment (the prediction of the next gradient).
    b2: decay of the second central moment ``|g - m|^2``.
    eps: <shared>
    eps_root: added to the second central moment at every step.

  Returns:
    A transformation with ``ScaleByBeliefState(count, mu, nu)``.

  References:
    Zhuang et al., "Momentum Centering and Asynchronous Update for Adaptive Gradient Methods",
    NeurIPS 2021 (Algorithm 2).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_acprop(eps=0.0)
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]  # no history yet: g / 1
    Array([2.], dtype=float32)
  """
  return ScaleByAcprop(b1, b2, eps, eps_root)


@shared_args
def acprop(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    weight_decay: ArrayLike = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """ACProp: AdaBelief with an asynchronous (previous-step) denominator and the raw gradient.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: decay of the second central moment.
    eps: <shared>
    eps_root: added to the second central moment at every step.
    weight_decay: weight decay added after the scaling (multiplied by the learning rate).
    mask: <shared>

  Returns:
    ``chain(scale_by_acprop, add_decayed_weights, scale_by_learning_rate)``, as in Optax.

  References:
    Zhuang et al., "Momentum Centering and Asynchronous Update for Adaptive Gradient Methods",
    NeurIPS 2021.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.acprop(0.1)
    >>> p = {"w": jnp.ones(2, jnp.bfloat16)}
    >>> u, s = opt.update(p, opt.init(p), p)
    >>> u["w"].dtype, s[0].nu["w"].dtype
    (dtype(bfloat16), dtype(bfloat16))
  """
  check_nonnegative("acprop", "weight_decay", weight_decay)
  return chain(ScaleByAcprop(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
               scale_by_learning_rate(learning_rate))
