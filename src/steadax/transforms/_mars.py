"""MARS: Adam driven by a variance-reduced gradient estimate (the MARS-AdamW instance).

References:
  Yuan, Liu, Wu, Zhou & Gu, "MARS: Unleashing the Power of Variance Reduction for Training Large
  Models", arXiv:2411.10438, 2024 (Algorithm 1 and its AdamW instance, Algorithm 2; the approximate
  variant, MARS-approx, replaces the second gradient evaluation with the previous step's gradient).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range
from .._core._module import hyper_field, static_field
from .._core._policy import as_compute, compute_dtype, hyper, per_dtype, real_dtype, safe_increment, zero_count
from .._core._tree import tree_map_n, zeros_like
from ._adam import one_minus_pow
from ._moments import abs_sq

__all__ = ["ScaleByMarsState", "scale_by_mars"]


class ScaleByMarsState(NamedTuple):
  """State of ``scale_by_mars``: int32 count, Adam's moments of the corrected gradient, and the
  previous raw gradient (MARS-approx's stand-in for the gradient at the previous iterate)."""

  count: jax.Array
  mu: Any
  nu: Any
  prev_grad: Any


class ScaleByMars(Transformation):
  name = "scale_by_mars"
  b1: Any = hyper_field(0.95)
  b2: Any = hyper_field(0.99)
  gamma: Any = hyper_field(0.025)
  eps: Any = hyper_field(1e-08)
  eps_root: Any = hyper_field(0.0)
  max_norm: Any = hyper_field(1.0)
  mu_dtype: Any = static_field(default=None)
  nu_dtype: Any = static_field(default=None)

  def init_fn(self, params):
    return ScaleByMarsState(
        count=zero_count(),
        mu=zeros_like(params, self.mu_dtype),
        nu=zeros_like(params, self.nu_dtype, real=True),
        prev_grad=zeros_like(params),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    # The paper starts from x_0 = x_1, so the first correction term is zero (the reference code's
    # zero-initialised last gradient would instead scale the first gradient by 1 + gamma b1/(1-b1)).
    first = state.count == 0

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1r = hyper(self.b1, rdt)
      weight = hyper(self.gamma, rdt) * b1r / (np.asarray(1, rdt) - b1r)
      b1, b2 = hyper(self.b1, cdt), hyper(self.b2, rdt)
      return dict(
          weight=jnp.where(first, jnp.zeros([], rdt), weight).astype(cdt),
          b1=b1, b2=b2, one_minus_b1=np.asarray(1, cdt) - b1, one_minus_b2=np.asarray(1, rdt) - b2,
          c1=one_minus_pow(self.b1, count, rdt).astype(cdt), c2=one_minus_pow(self.b2, count, rdt),
          eps=hyper(self.eps, rdt), eps_root=hyper(self.eps_root, rdt),
          max_norm=None if self.max_norm is None else hyper(self.max_norm, rdt))

    def leaf(g, m, v, prev):
      cdt = compute_dtype(g.dtype, m.dtype, prev.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc = as_compute(g, cdt)
      # c_t = g_t + gamma b1/(1-b1) (g_t - g_{t-1})  (Algorithm 1, line 4)
      c = gc + k["weight"] * (gc - as_compute(prev, cdt))
      if k["max_norm"] is not None:
        # Clip(c_t, 1): rescale to the threshold when the tensor's l2 norm exceeds it (per tensor, as
        # the authors' implementation does).
        norm = jnp.sqrt(jnp.sum(abs_sq(c).astype(rdt)))
        c = c * (k["max_norm"] / jnp.maximum(norm, k["max_norm"])).astype(cdt)
      m_new = k["b1"] * as_compute(m, cdt) + k["one_minus_b1"] * c
      v_new = k["b2"] * as_compute(v, rdt) + k["one_minus_b2"] * abs_sq(c).astype(rdt)
      denom = jnp.sqrt(v_new / k["c2"] + k["eps_root"]) + k["eps"]
      out = (m_new / k["c1"]) / denom.astype(cdt)
      return out.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), g.astype(prev.dtype)

    out, mu, nu, prev = tree_map_n(leaf, 4, updates, state.mu, state.nu, state.prev_grad)
    return out, ScaleByMarsState(count=count, mu=mu, nu=nu, prev_grad=prev)


def scale_by_mars(
    b1: Any = 0.95,
    b2: Any = 0.99,
    gamma: Any = 0.025,
    eps: Any = 1e-8,
    eps_root: Any = 0.0,
    *,
    max_norm: Any = 1.0,
    mu_dtype: Any = None,
    nu_dtype: Any = None,
) -> Transformation:
  """Rescales updates by MARS-AdamW: Adam's moments of a variance-reduced gradient estimate.

  With the previous gradient ``g_{t-1}`` kept in state (MARS-approx),
  ``c_t = g_t + gamma * b1 / (1 - b1) * (g_t - g_{t-1})``, clipped to l2 norm ``max_norm`` per
  tensor, feeds Adam's moments ``m = b1 m + (1 - b1) c``, ``v = b2 v + (1 - b2) |c|^2``, and the
  update is ``m_hat / (sqrt(v_hat + eps_root) + eps)``. The first step uses ``c_1 = g_1`` (the
  paper's ``x_0 = x_1``). ``gamma = 0`` gives Adam on clipped gradients.

  Args:
    b1: decay of the first moment; also sets the correction's weight ``b1 / (1 - b1)``.
    b2: decay of the second moment.
    gamma: strength of the gradient correction (the paper's ``gamma_t``, 0.025 in its experiments).
    eps: added to the denominator outside the square root.
    eps_root: added inside the square root.
    max_norm: the clipping threshold of ``c_t`` (1 in the paper); None disables clipping.
    mu_dtype: dtype of the first moment (default: each parameter's dtype).
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
  owner = "scale_by_mars"
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  check_nonnegative(owner, "gamma", gamma)
  check_nonnegative(owner, "eps", eps)
  check_nonnegative(owner, "eps_root", eps_root)
  if max_norm is not None:
    check_positive(owner, "max_norm", max_norm)
  return ScaleByMars(b1, b2, gamma, eps, eps_root, max_norm, mu_dtype=mu_dtype, nu_dtype=nu_dtype)
