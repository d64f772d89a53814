"""Decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019)."""

from typing import Any, NamedTuple

import jax
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._interface import EmptyState
from .._core._transformation import Transformation
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from .._core._policy import safe_increment, zero_count
from .._core._roles import COUNTER, state_roles
from .._core._types import MaskOrFn, ScalarOrSchedule
from ._masked import masked

__all__ = ["AddDecayedWeightsState", "WeightDecaySchedule", "add_decayed_weights"]

AddDecayedWeightsState = EmptyState


@state_roles(count=COUNTER)
class WeightDecaySchedule(NamedTuple):
  """State of ``add_decayed_weights`` with a scheduled weight decay: the int32 count.

  Attributes:
    count: the step count (int32) the weight-decay schedule is evaluated at.
  """

  count: jax.Array


class AddDecayedWeights(Transformation):
  name = "add_decayed_weights"
  elementwise = True
  weight_decay: Any = hyper_field(0.0)  # any sign: fromage adds (mult - 1) * params, mult < 1

  def init_fn(self, params):  # the state depends on whether the weight decay is a schedule
    if callable(self.weight_decay):
      return WeightDecaySchedule(count=zero_count())
    return EmptyState()

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("add_decayed_weights: `params` must be passed to update().")
    if callable(self.weight_decay):
      wd = self.weight_decay(state.count)
      state = WeightDecaySchedule(count=safe_increment(state.count))
    else:
      wd = self.weight_decay
      if isinstance(wd, (int, float)) and wd == 0:
        return updates, state
    if updates is None:  # no updates at all (Optax's `update(None, state, params)`): none to add to
      return None, state

    # Decoupled weight decay: the decay term is added to the update, not to the gradient of the
    # loss (Loshchilov & Hutter 2019, Algorithm 2, line 12).
    leaf = lambda k, g, p: g + k.weight_decay * p
    scalars = Scalars(weight_decay=wd)
    out, = self.leafwise(leaf, updates, params=params, reads=(params,), scalars=scalars)
    return out, state


@shared_args
def add_decayed_weights(weight_decay: ScalarOrSchedule | ArrayLike = 0.0, mask: MaskOrFn = None) -> Transformation:
  """Adds ``weight_decay * params`` to the updates (decoupled weight decay).

  Args:
    weight_decay: a scalar or a schedule of the step count.
    mask: a tree of booleans (or a callable of the params returning one): decay only where True.

  Returns:
    A transformation (``masked`` around it when a mask is given).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.add_decayed_weights(0.1)
    >>> p = jnp.array([2.0])
    >>> tx.update(jnp.zeros(1), tx.init(p), p)[0]
    Array([0.2], dtype=float32)
  """
  tx = AddDecayedWeights(weight_decay)
  if mask is not None:
    return masked(tx, mask)
  return tx
