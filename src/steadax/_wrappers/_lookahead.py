"""lookahead: k fast steps forward, one step back toward slow weights."""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._checks import check_range
from .._core._contract import conform_updates
from .._core._leafwise import Scalars
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import COUNTER_DTYPE, hyper, zero_count
from .._core._roles import COUNTER, INNER, state_roles
from .._core._types import Params

__all__ = ["LookaheadParams", "LookaheadState", "lookahead"]


@state_roles(fast_state=INNER, steps_since_sync=COUNTER)
class LookaheadState(NamedTuple):
  """State of ``lookahead``.

  Attributes:
    fast_state: the fast optimizer's state.
    steps_since_sync: int32 number of fast steps since the slow and fast weights were last synced.
  """

  fast_state: Params
  steps_since_sync: jax.Array


class LookaheadParams(NamedTuple):
  """The fast and slow parameters of ``lookahead``.

  Compute gradients at ``fast``; evaluate (and deploy) ``slow``.

  Attributes:
    fast: the parameters the fast optimizer moves every step.
    slow: the parameters that move toward ``fast`` every ``sync_period`` steps.
  """

  fast: Params
  slow: Params

  @classmethod
  def init_synced(cls, params: Any) -> "LookaheadParams":
    """Fast and slow parameters both equal to ``params`` (``slow`` holds distinct buffers).

    Args:
      params: the initial parameters.

    Returns:
      ``LookaheadParams(fast=params, slow=copy of params)``; the copy lets a jitted step donate
      both halves.

    Example:
      >>> import jax.numpy as jnp, steadax
      >>> steadax.LookaheadParams.init_synced(jnp.ones(1)).slow
      Array([1.], dtype=float32)
    """
    slow = jax.tree_util.tree_map(lambda x: x.copy() if isinstance(x, jax.Array) else x, params)
    return cls(fast=params, slow=slow)


class Lookahead(Transformation):
  name = "lookahead"
  elementwise = "children"
  State = LookaheadState
  updates_follow_params = False  # the updates are LookaheadParams; update_fn checks both halves
  fast_optimizer: Any = child_field()
  sync_period: Any = hyper_field(1)
  slow_step_size: Any = hyper_field(0.5)
  reset_state: bool = static_field(default=False)

  def init_fn(self, params):
    fast = params.fast if isinstance(params, LookaheadParams) else params
    return LookaheadState(fast_state=self.fast_optimizer.init(fast), steps_since_sync=zero_count())

  def update_fn(self, updates, state, params=None, **extra_args):
    if not isinstance(params, LookaheadParams):
      raise ValueError(
          f"lookahead: update needs params=LookaheadParams(fast, slow), got "
          f"{type(params).__name__}; build them with LookaheadParams.init_synced(params)."
      )
    fast_updates, fast_state = self.fast_optimizer.update(
        updates, state.fast_state, params.fast, **extra_args
    )
    period = hyper(self.sync_period, COUNTER_DTYPE)
    sync = state.steps_since_sync == period - jnp.asarray(1, COUNTER_DTYPE)

    def leaf(k, update, slow, fast):
      # Zhang et al. 2019, Algorithm 1: on a sync step the slow weights move alpha of the way to
      # where the fast weights land (phi += alpha (theta - phi)) and the fast weights jump to them.
      diff = fast + update - slow
      zero = jnp.zeros_like(diff)
      fast_update = update - jnp.where(sync, (1 - k.alpha) * diff, zero)
      # The slow half's update goes through leafwise's state slot so it is written in the slow
      # parameters' dtype (the fast half's in the fast parameters').
      return fast_update, jnp.where(sync, k.alpha * diff, zero)

    scalars = Scalars(alpha=self.slow_step_size)
    new_fast, new_slow = self.leafwise(
        leaf, fast_updates, params.slow, params=params.fast, reads=(params.fast,), scalars=scalars)
    new_fast = conform_updates(self.owner, updates, params.fast, new_fast)
    new_slow = conform_updates(self.owner, updates, params.slow, new_slow)

    if self.reset_state:
      initial = self.fast_optimizer.init(params.fast)
      fast_state = jax.tree_util.tree_map(
          lambda current, init: jnp.where(sync, init, current), fast_state, initial)
    steps = jnp.remainder(state.steps_since_sync + jnp.asarray(1, COUNTER_DTYPE), period)
    return LookaheadParams(fast=new_fast, slow=new_slow), LookaheadState(fast_state, steps)


@shared_args
def lookahead(
    fast_optimizer: GradientTransformation,
    sync_period: int,
    slow_step_size: float,
    reset_state: bool = False,
) -> Lookahead:
  """Lookahead: the fast optimizer takes ``sync_period`` steps, then the slow weights move toward it.

  Every step the fast parameters take the fast optimizer's step; on every ``sync_period``-th step
  the slow parameters move ``slow_step_size`` of the way to the fast ones and the fast parameters
  are reset to the new slow ones. Parameters are ``LookaheadParams(fast, slow)``; the gradients are
  the fast parameters' (a tree with ``fast``'s structure) and the updates are ``LookaheadParams`` to
  pass to ``apply_updates`` unchanged, each half in its parameters' dtypes.

  Args:
    fast_optimizer: the inner optimizer.
    sync_period: fast steps between synchronisations (at least 1).
    slow_step_size: the slow weights' interpolation factor (``alpha``).
    reset_state: re-initialise the fast optimizer's state after each synchronisation.

  Returns:
    A transformation with state ``LookaheadState(fast_state, steps_since_sync)``.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> tx = steadax.lookahead(steadax.sgd(0.5), sync_period=2, slow_step_size=0.5)
    >>> params = steadax.LookaheadParams.init_synced(jnp.ones(1))
    >>> state = tx.init(params)
    >>> for _ in range(2):
    ...   updates, state = tx.update(params.fast, state, params)   # the gradient of |x|^2 / 2
    ...   params = steadax.apply_updates(params, updates)
    >>> params.slow, params.fast
    (Array([0.625], dtype=float32), Array([0.625], dtype=float32))

  References:
    Zhang et al., `Lookahead Optimizer: k steps forward, 1 step back
    <https://arxiv.org/abs/1907.08610>`_, 2019 (Algorithm 1).
  """
  check_range("lookahead", "sync_period", sync_period, 1, math.inf)
  return Lookahead(
      as_inner(fast_optimizer, "lookahead", "fast_optimizer"), sync_period, slow_step_size,
      reset_state=reset_state
  )
