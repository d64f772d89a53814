"""ACProp (Zhuang et al., "Momentum Centering and Asynchronous Update for Adaptive Gradient
Methods", NeurIPS 2021).

AdaBelief's second *central* moment with an asynchronous update: the step at time ``t`` divides
the raw gradient ``g_t`` by the (bias-corrected) central moment of steps ``<= t - 1``, so the
denominator does not depend on the gradient it scales (Algorithm 2 of the paper):

    s_t = b2 s_{t-1} + (1 - b2) |g_t - m_{t-1}|^2 + eps_root,    m_t = b1 m_{t-1} + (1 - b1) g_t,
    u_t = g_t / (sqrt(s_{t-1} / (1 - b2^{t-1})) + eps)           (u_1 = g_1 / (1 + eps)).

The state is AdaBelief's ``ScaleByBeliefState``; ``nu`` is real for complex parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_range, check_schedule_or_scalar
from .._core._combine import chain
from .._core._policy import as_compute, compute_dtype, hyper, per_dtype, real_dtype, safe_increment, zero_count
from .._core._tree import tree_map_n, zeros_like
from .._core._types import ScalarOrSchedule
from ..transforms._adam_variants import ScaleByBeliefState
from ..transforms._decay import add_decayed_weights
from ..transforms._moments import abs_sq
from ..transforms._scaling import scale_by_learning_rate
from .._core._module import hyper_field

__all__ = ["scale_by_acprop", "acprop"]


class ScaleByAcprop(Transformation):
  name = "scale_by_acprop"
  b1: Any = hyper_field(0.9)
  b2: Any = hyper_field(0.999)
  eps: Any = hyper_field(1e-16)
  eps_root: Any = hyper_field(1e-16)

  def init_fn(self, params):
    return ScaleByBeliefState(count=zero_count(), mu=zeros_like(params), nu=zeros_like(params, real=True))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    initial = state.count == 0

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1, b2 = hyper(self.b1, cdt), hyper(self.b2, rdt)
      # 1 - b is taken before rounding: 1 - float32(0.999) is 1.3e-5 off in relative terms, which
      # ACProp's raw-gradient numerator amplifies near a minimum.
      # The denominator is the moment of the previous step: its bias correction uses the old count
      # (the first step, which has none, divides by 1).
      old = jnp.maximum(state.count, np.asarray(1, np.int32)).astype(rdt)
      return dict(b1=b1, one_minus_b1=hyper(1 - self.b1, cdt), b2=b2, one_minus_b2=hyper(1 - self.b2, rdt),
                  c2=np.asarray(1, rdt) - b2**old, eps=hyper(self.eps, rdt), eps_root=hyper(self.eps_root, rdt))

    def leaf(g, m, v):
      cdt = compute_dtype(g.dtype, m.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc, mc, vc = as_compute(g, cdt), as_compute(m, cdt), as_compute(v, rdt)
      m_new = k["b1"] * mc + k["one_minus_b1"] * gc
      v_new = k["b2"] * vc + k["one_minus_b2"] * abs_sq(gc - mc).astype(rdt) + k["eps_root"]
      v_hat = jnp.where(initial, jnp.ones_like(vc), vc / k["c2"])
      out = gc / (jnp.sqrt(v_hat) + k["eps"]).astype(cdt)
      return out.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

    out, mu, nu = tree_map_n(leaf, 3, updates, state.mu, state.nu)
    return out, ScaleByBeliefState(count=count, mu=mu, nu=nu)


def _check(owner: str, b1: Any, b2: Any, eps: Any, eps_root: Any) -> None:
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  check_nonnegative(owner, "eps", eps)
  check_nonnegative(owner, "eps_root", eps_root)


def scale_by_acprop(b1: Any = 0.9, b2: Any = 0.999, eps: Any = 1e-16, eps_root: Any = 1e-16) -> Transformation:
  """Rescales updates by ACProp: the gradient over the previous step's central second moment.

  Args:
    b1: decay of the first moment (the prediction of the next gradient).
    b2: decay of the second central moment ``|g - m|^2``.
    eps: added to the denominator.
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
  _check("scale_by_acprop", b1, b2, eps, eps_root)
  return ScaleByAcprop(b1, b2, eps, eps_root)


def acprop(
    learning_rate: ScalarOrSchedule,
    b1: Any = 0.9,
    b2: Any = 0.999,
    eps: Any = 1e-16,
    eps_root: Any = 1e-16,
    weight_decay: Any = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """ACProp: AdaBelief with an asynchronous (previous-step) denominator and the raw gradient.

  Args:
    learning_rate: a scalar or a schedule.
    b1: decay of the first moment.
    b2: decay of the second central moment.
    eps: added to the denominator.
    eps_root: added to the second central moment at every step.
    weight_decay: weight decay added after the scaling (multiplied by the learning rate).
    mask: where the weight decay applies (a tree of booleans or a callable of the params).

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
  check_schedule_or_scalar("acprop", "learning_rate", learning_rate)
  _check("acprop", b1, b2, eps, eps_root)
  check_nonnegative("acprop", "weight_decay", weight_decay)
  return chain(ScaleByAcprop(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
               scale_by_learning_rate(learning_rate))
