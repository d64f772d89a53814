"""D-Adaptation for AdamW (Defazio & Mishchenko, "Learning-Rate-Free Learning by D-Adaptation", 2023).

AdamW whose step size is ``d_k * lr * sqrt(1 - b2^k) / (1 - b1^k)``, with ``d_k`` a non-decreasing
lower bound on the distance to the solution (Algorithm 4 of the paper, the Adam variant):

    s_k = sqrt(b2) s_{k-1} + (1 - sqrt(b2)) dlr_k g_k
    r_k = sqrt(b2) r_{k-1} + (1 - sqrt(b2)) dlr_k Re<g_k, s_{k-1} / (sqrt(v_{k-1}) + eps)>
    d_{k+1} = max(d_k, r_k / ((1 - sqrt(b2)) ||s_k||_1))

Scalar statistics (``estim_lr``, ``numerator_weighted``) take one dtype fixed at init: the widest
floating dtype among the parameters, at least float32. Optax 0.2.8 stores them in the lowest dtype
(bfloat16 in a mixed tree) and the first update turns them into float32, which ``lax.scan`` and
``apply_if_finite`` reject; steadax keeps them. A zero ``||s_k||_1`` (all gradients zero so far)
keeps ``d`` instead of dividing by zero.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range, check_schedule_or_scalar
from .._core._policy import (
    as_compute,
    compute_dtype,
    hyper,
    per_dtype,
    real_dtype,
    safe_increment,
    scalar_stat_dtype,
    zero_count,
)
from .._core._tree import tree_map_n, zeros_like
from .._core._types import ScalarOrSchedule
from ..transforms._moments import abs_sq
from ..transforms._scaling import value_at
from ._reductions import real_inner, sum_scalars
from .._core._module import hyper_field

__all__ = ["DAdaptAdamWState", "dadapt_adamw"]


class DAdaptAdamWState(NamedTuple):
  """State of ``dadapt_adamw`` (Optax's field names).

  Attributes:
    exp_avg: first moment of ``dlr * g``, one leaf per parameter.
    exp_avg_sq: second moment of ``g`` (real for complex parameters).
    grad_sum: the weighted sum ``s`` of ``dlr * g``.
    estim_lr: the distance estimate ``d`` (scalar-statistics dtype).
    numerator_weighted: the weighted numerator ``r`` of the estimate (same dtype).
    count: int32 number of updates so far.
  """

  exp_avg: Any
  exp_avg_sq: Any
  grad_sum: Any
  estim_lr: jax.Array
  numerator_weighted: jax.Array
  count: jax.Array


def _safe_denominator(v: jax.Array, eps: Any) -> jax.Array:
  """``sqrt(v) + eps``, with 1 where it is 0: there every gradient so far was 0 (so are ``m`` and
  ``s``), and ``eps = 0`` must give a zero step instead of 0 / 0."""
  denominator = jnp.sqrt(v) + eps
  return jnp.where(denominator > 0, denominator, jnp.ones((), denominator.dtype))


class DAdaptAdamW(Transformation):
  name = "dadapt_adamw"
  learning_rate: Any = hyper_field(1.0)
  betas: Any = hyper_field((0.9, 0.999))
  eps: Any = hyper_field(1e-08)
  estim_lr0: Any = hyper_field(1e-06)
  weight_decay: Any = hyper_field(0.0)

  def init_fn(self, params):
    stat = scalar_stat_dtype(params)
    return DAdaptAdamWState(
        exp_avg=zeros_like(params),
        exp_avg_sq=zeros_like(params, real=True),
        grad_sum=zeros_like(params),
        estim_lr=jnp.asarray(hyper(self.estim_lr0, stat)),
        numerator_weighted=jnp.zeros([], stat),
        count=zero_count(),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("dadapt_adamw: `params` must be passed to update() (for the weight decay).")
    stat = state.estim_lr.dtype
    count = safe_increment(state.count)
    k = count.astype(stat)
    beta1, beta2 = hyper(self.betas[0], stat), hyper(self.betas[1], stat)
    # sqrt taken on the hyperparameter itself (a Python float in float64), as the reference does.
    sqrt_beta2 = hyper(self.betas[1] ** 0.5, stat)
    lr = hyper(value_at(self.learning_rate, state.count), stat)
    d = state.estim_lr
    dlr = d * lr * (jnp.sqrt(1 - beta2**k) / (1 - beta1**k))

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      return dict(
          b1=hyper(self.betas[0], cdt), b1_dlr=((1 - beta1) * dlr).astype(cdt),
          b2=hyper(self.betas[1], rdt), one_minus_b2=(1 - beta2).astype(rdt),
          sb2=sqrt_beta2.astype(cdt), sb2_dlr=((1 - sqrt_beta2) * dlr).astype(cdt),
          eps=hyper(self.eps, rdt), wd_dlr=(hyper(self.weight_decay, stat) * dlr).astype(cdt))

    def leaf(g, m, v, s, p):
      cdt = compute_dtype(g.dtype, m.dtype, p.dtype)
      rdt = real_dtype(cdt)
      c = scalars(cdt)
      gc = as_compute(g, cdt)
      sc = as_compute(s, cdt)
      # r's increment uses the statistics before this step (Algorithm 4 of the paper).
      weighted = sc / _safe_denominator(as_compute(v, rdt), c["eps"]).astype(cdt)
      numerator = real_inner(gc, weighted).astype(stat)
      m_new = c["b1"] * as_compute(m, cdt) + c["b1_dlr"] * gc
      v_new = c["b2"] * as_compute(v, rdt) + c["one_minus_b2"] * abs_sq(gc).astype(rdt)
      s_new = c["sb2"] * sc + c["sb2_dlr"] * gc
      l1 = jnp.sum(jnp.abs(s_new)).astype(stat)
      step = -c["wd_dlr"] * as_compute(p, cdt) - m_new / _safe_denominator(v_new, c["eps"]).astype(cdt)
      return (step.astype(p.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype),
              s_new.astype(s.dtype), numerator, l1)

    out, exp_avg, exp_avg_sq, grad_sum, numerators, l1s = tree_map_n(
        leaf, 6, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum, params)
    numerator = sqrt_beta2 * state.numerator_weighted + (1 - sqrt_beta2) * dlr * sum_scalars(numerators, stat)
    denominator = (1 - sqrt_beta2) * sum_scalars(l1s, stat)
    positive = denominator > 0
    estimate = numerator / jnp.where(positive, denominator, np.ones((), stat))
    estim_lr = jnp.where(positive, jnp.maximum(d, estimate), d)
    return out, DAdaptAdamWState(exp_avg, exp_avg_sq, grad_sum, estim_lr, numerator, count)


def dadapt_adamw(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[Any, Any] = (0.9, 0.999),
    eps: Any = 1e-8,
    estim_lr0: Any = 1e-6,
    weight_decay: Any = 0.0,
) -> Transformation:
  """AdamW with its step size set by D-Adaptation (an estimate of the distance to the solution).

  The effective learning rate is ``d * learning_rate`` with ``d`` grown from ``estim_lr0`` by the
  D-Adaptation lower bound; ``learning_rate`` is a multiplier (1, or a schedule peaking at 1).

  Args:
    learning_rate: multiplier of the estimated step size (scalar or schedule of the count).
    betas: Adam's ``(b1, b2)``, each in [0, 1).
    eps: added to the square root of the second moment.
    estim_lr0: the initial (under-)estimate ``d_0`` of the distance, positive.
    weight_decay: decoupled weight decay, scaled by the effective step size.

  Returns:
    A transformation with ``DAdaptAdamWState``; ``estim_lr`` and ``numerator_weighted`` have the
    widest floating dtype among the parameters (at least float32) in both x64 modes.

  References:
    Defazio & Mishchenko, "Learning-Rate-Free Learning by D-Adaptation", ICML 2023 (Algorithm 4).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.dadapt_adamw()
    >>> params = {"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(1)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update(params, state, params)
    >>> updates["w"].dtype, state.estim_lr.dtype
    (dtype(bfloat16), dtype('float32'))
  """
  check_schedule_or_scalar("dadapt_adamw", "learning_rate", learning_rate)
  if len(betas) != 2:
    raise ValueError(f"dadapt_adamw: betas must be a pair (b1, b2), got {betas!r}.")
  check_range("dadapt_adamw", "betas[0]", betas[0], 0.0, 1.0, high_open=True)
  check_range("dadapt_adamw", "betas[1]", betas[1], 0.0, 1.0, high_open=True)
  check_nonnegative("dadapt_adamw", "eps", eps)
  check_positive("dadapt_adamw", "estim_lr0", estim_lr0)
  check_nonnegative("dadapt_adamw", "weight_decay", weight_decay)
  return DAdaptAdamW(learning_rate, tuple(betas), eps, estim_lr0, weight_decay)
