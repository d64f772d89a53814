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

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive
from .._core._combine import chain
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from .._core._roles import OTHER, accumulator, state_roles
from .._core._tree import copy_like, filled_like, zeros_like
from .._core._types import Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["COCOBState", "scale_by_cocob", "cocob"]


@state_roles(init_particles=OTHER, cumulative_gradients=accumulator(), scale=accumulator(real=True),
             subgradients=accumulator(real=True), reward=accumulator(real=True))
class COCOBState(NamedTuple):
  """State of ``scale_by_cocob`` (Optax's field names), one leaf per parameter in each field.

  Attributes:
    init_particles: the initial point ``x_0``.
    cumulative_gradients: ``θ``, the sum of the negative gradients.
    scale: ``L``, the largest gradient magnitude seen (starts at ``eps``).
    subgradients: ``G``, the sum of gradient magnitudes.
    reward: ``R``, the accumulated reward (non-negative).
  """

  init_particles: Params
  cumulative_gradients: Params
  scale: Params
  subgradients: Params
  reward: Params


class ScaleByCOCOB(Transformation):
  name = "scale_by_cocob"
  elementwise = True
  State = COCOBState
  alpha: Any = hyper_field(100.0, check=check_positive)
  eps: Any = hyper_field(1e-08, check=check_positive)

  def init_fn(self, params):
    # L starts at eps and x_0 is a copy of the parameters: built here, checked against the roles.
    return COCOBState(
        init_particles=copy_like(params),
        cumulative_gradients=zeros_like(params),
        scale=filled_like(params, self.eps, real=True),
        subgradients=zeros_like(params, real=True),
        reward=zeros_like(params, real=True),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("scale_by_cocob: `params` must be passed to update().")

    def leaf(k, g, theta, big_l, big_g, reward, x, x0):
      # Algorithm 2: L = max(L, |g|), G = G + |g|, R = max(R - <g, x - x_0>, 0), θ = θ - g.
      moved = x - x0
      magnitude = jnp.abs(g)
      big_l = jnp.maximum(big_l, magnitude)
      big_g = big_g + magnitude
      gain = jnp.real(g) * jnp.real(moved) + jnp.imag(g) * jnp.imag(moved) if jnp.iscomplexobj(g) \
          else g * moved
      reward = jnp.maximum(reward - gain, 0)
      theta = theta - g
      # L = 0 only when every gradient so far was 0 (eps underflowed in float16): then θ = 0, no bet
      # (Optax divides 0 by 0 there). Elsewhere Optax's arithmetic: x0 + θ / (L max(G + L, αL)) (L + R).
      seen = big_l > 0
      safe_l = jnp.where(seen, big_l, 1)
      bet = -x + (x0 + theta / (safe_l * jnp.maximum(big_g + safe_l, k.alpha * safe_l)) * (safe_l + reward))
      return jnp.where(seen, bet, -moved), theta, big_l, big_g, reward

    out, theta, big_l, big_g, reward = self.leafwise(
        leaf, updates, state.cumulative_gradients, state.scale, state.subgradients, state.reward,
        params=params, reads=(params, state.init_particles), scalars=Scalars(alpha=self.alpha))
    return out, COCOBState(state.init_particles, theta, big_l, big_g, reward)


@shared_args
def scale_by_cocob(alpha: ArrayLike = 100.0, eps: ArrayLike = 1e-8) -> Transformation:
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
  return ScaleByCOCOB(alpha, eps)


@shared_args
def cocob(
    learning_rate: ScalarOrSchedule = 1.0,
    alpha: ArrayLike = 100.0,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """COCOB-Backprop: learning-rate-free SGD by coin betting, per coordinate.

  Args:
    learning_rate: multiplies the gradients before betting (scalar or schedule), usually 1.
    alpha: bounds the fraction bet early on, positive.
    eps: the initial gradient-magnitude bound, positive.
    weight_decay: L2 penalty added to the gradients.
    mask: <shared>

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
  # Checked here too, so the messages name the factory (the class's name scale_by_cocob).
  check_nonnegative("cocob", "weight_decay", weight_decay)
  check_positive("cocob", "alpha", alpha)
  check_positive("cocob", "eps", eps)
  return chain(add_decayed_weights(weight_decay, mask),
               scale_by_learning_rate(learning_rate, flip_sign=False),
               ScaleByCOCOB(alpha, eps))
