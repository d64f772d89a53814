"""COCOB-Backprop (Orabona & Tommasi, "Training Deep Networks without Learning Rates Through Coin
Betting", NeurIPS 2017, Algorithm 2).

Each coordinate bets a fraction of its accumulated reward on the sign of the summed negative
gradients: with ``L`` the largest gradient magnitude seen, ``G`` the sum of magnitudes, ``R`` the
reward and ``θ`` the summed negative gradients,

    x_{t+1} = x_0 + θ / (L max(G + L, α L)) (L + R).

Complex parameters bet in the plane of each coordinate (coin betting in a Hilbert space): ``|g|``
is the modulus and the reward uses ``Re(g conj(x - x_0))``; for real parameters this is the paper's
algorithm. The magnitudes and the reward are real (the parameter's real dtype); every statistic is
per coordinate, so mixed-precision trees keep each leaf's dtype (Optax 0.2.8 does too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_positive, check_schedule_or_scalar
from .._core._combine import chain
from .._core._policy import as_compute, compute_dtype, hyper, per_dtype, real_dtype
from .._core._tree import copy_like, tree_map, tree_map_n, zeros_like
from .._core._types import ScalarOrSchedule
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate
from .._core._module import hyper_field

__all__ = ["COCOBState", "scale_by_cocob", "cocob"]


class COCOBState(NamedTuple):
  """State of ``scale_by_cocob`` (Optax's field names), one leaf per parameter in each field.

  Attributes:
    init_particles: the initial point ``x_0``.
    cumulative_gradients: ``θ``, the sum of the negative gradients.
    scale: ``L``, the largest gradient magnitude seen (starts at ``eps``).
    subgradients: ``G``, the sum of gradient magnitudes.
    reward: ``R``, the accumulated reward (non-negative).
  """

  init_particles: Any
  cumulative_gradients: Any
  scale: Any
  subgradients: Any
  reward: Any


class ScaleByCOCOB(Transformation):
  name = "scale_by_cocob"
  alpha: Any = hyper_field(100.0)
  eps: Any = hyper_field(1e-08)

  def init_fn(self, params):
    def scale(x):
      dtype = real_dtype(x.dtype)
      return jnp.full(jnp.shape(x), hyper(self.eps, dtype), dtype)

    return COCOBState(
        init_particles=copy_like(params),
        cumulative_gradients=zeros_like(params),
        scale=tree_map(scale, params),
        subgradients=zeros_like(params, real=True),
        reward=zeros_like(params, real=True),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("scale_by_cocob: `params` must be passed to update().")
    alphas = per_dtype(lambda rdt: hyper(self.alpha, rdt))

    def leaf(g, p, x0, theta, big_l, big_g, reward):
      cdt = compute_dtype(g.dtype, p.dtype, x0.dtype)
      rdt = real_dtype(cdt)
      gc = as_compute(g, cdt)
      moved = as_compute(p, cdt) - as_compute(x0, cdt)
      magnitude = jnp.abs(gc).astype(rdt)
      l_new = jnp.maximum(as_compute(big_l, rdt), magnitude)
      g_new = as_compute(big_g, rdt) + magnitude
      gain = jnp.real(gc) * jnp.real(moved) + jnp.imag(gc) * jnp.imag(moved) if jnp.iscomplexobj(gc) \
          else gc * moved
      r_new = jnp.maximum(as_compute(reward, rdt) - gain.astype(rdt), jnp.zeros((), rdt))
      theta_new = as_compute(theta, cdt) - gc
      # L = 0 only when every gradient so far was 0 (eps underflowed in float16): then θ = 0, no bet.
      seen = l_new > 0
      safe_l = jnp.where(seen, l_new, jnp.ones((), rdt))
      bet = jnp.where(seen, (l_new + r_new) / (safe_l * jnp.maximum(g_new + safe_l, alphas(rdt) * safe_l)),
                      jnp.zeros((), rdt))
      step = theta_new * bet.astype(cdt) - moved
      return (step.astype(p.dtype), theta_new.astype(theta.dtype), l_new.astype(big_l.dtype),
              g_new.astype(big_g.dtype), r_new.astype(reward.dtype))

    out, theta, big_l, big_g, reward = tree_map_n(
        leaf, 5, updates, params, state.init_particles, state.cumulative_gradients, state.scale,
        state.subgradients, state.reward)
    return out, COCOBState(state.init_particles, theta, big_l, big_g, reward)


def scale_by_cocob(alpha: Any = 100.0, eps: Any = 1e-8) -> Transformation:
  """Replaces the updates by COCOB-Backprop's coin-betting step (no learning rate).

  Args:
    alpha: bounds the fraction bet early on (``max(G + L, α L)`` in the denominator), positive.
    eps: the initial gradient-magnitude bound ``L``, positive (avoids dividing by zero).

  Returns:
    A transformation with ``COCOBState``.

  References:
    Orabona & Tommasi, "Training Deep Networks without Learning Rates Through Coin Betting",
    NeurIPS 2017 (Algorithm 2).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_cocob(alpha=1.0, eps=1.0)
    >>> p = jnp.array([0.0])
    >>> tx.update(jnp.array([1.0]), tx.init(p), p)[0]  # θ = -1, L = 1, G = 1: -1 / 2
    Array([-0.5], dtype=float32)
  """
  check_positive("scale_by_cocob", "alpha", alpha)
  check_positive("scale_by_cocob", "eps", eps)
  return ScaleByCOCOB(alpha, eps)


def cocob(
    learning_rate: ScalarOrSchedule = 1.0,
    alpha: Any = 100.0,
    eps: Any = 1e-8,
    weight_decay: Any = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """COCOB-Backprop: learning-rate-free SGD by coin betting, per coordinate.

  Args:
    learning_rate: multiplies the gradients before betting (scalar or schedule), usually 1.
    alpha: bounds the fraction bet early on, positive.
    eps: the initial gradient-magnitude bound, positive.
    weight_decay: L2 penalty added to the gradients.
    mask: where the weight decay applies (a tree of booleans or a callable of the params).

  Returns:
    ``chain(add_decayed_weights, scale_by_learning_rate(flip_sign=False), scale_by_cocob)``, as in
    Optax.

  References:
    Orabona & Tommasi, "Training Deep Networks without Learning Rates Through Coin Betting",
    NeurIPS 2017.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.cocob()
    >>> params = {"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(1)}
    >>> updates, _ = opt.update(params, opt.init(params), params)
    >>> updates["w"].dtype, updates["b"].dtype
    (dtype(bfloat16), dtype('float32'))
  """
  check_schedule_or_scalar("cocob", "learning_rate", learning_rate)
  check_nonnegative("cocob", "weight_decay", weight_decay)
  check_positive("cocob", "alpha", alpha)
  check_positive("cocob", "eps", eps)
  return chain(add_decayed_weights(weight_decay, mask),
               scale_by_learning_rate(learning_rate, flip_sign=False),
               ScaleByCOCOB(alpha, eps))
