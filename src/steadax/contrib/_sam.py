"""Sharpness-aware minimisation (Foret et al., "Sharpness-Aware Minimization for Efficiently
Improving Generalization", ICLR 2021) and gradient normalisation.

SAM minimises ``max_{||ε|| <= ρ} L(x + ε)``: from the outer point ``x`` it takes ``sync_period - 1``
ascent steps with ``adv_optimizer`` (typically ``chain(normalize(), sgd(ρ))``), then applies the
outer ``optimizer`` to the gradient found there, from ``x`` (Algorithm 1 of the paper, generalised
to several ascent steps as in Optax).

* Transparent mode (default): every call is one step of that cycle, so the training loop is
  unchanged; the outer point is cached in the state (a copy, so parameters and state can both be
  donated). Only the optimizer the current step uses is run (``lax.cond``), which halves the work
  of Optax's "compute both, pick one" with the same results. With ``sync_period=1`` steadax is the
  outer optimizer (Optax reads a stale cache there and alternates between two points).
* Opaque mode: one call runs the whole cycle and needs ``grad_fn(params, i)`` as an extra argument.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import EmptyState, GradientTransformation
from .._core._transformation import Transformation
from .._core._updates import apply_updates
from .._core._leafwise import Scalars
from .._core._module import child_field, static_field
from .._core._policy import COUNTER_DTYPE, zero_count
from .._core._roles import COUNTER, INNER, OTHER, state_roles
from .._core._tree import copy_like, l2_norm, tree_map
from .._core._types import OptState, Params
from .._fusion._elementwise import children_blocker

__all__ = ["NormalizeState", "SAMState", "normalize", "sam"]

NormalizeState = EmptyState  # Optax's name for normalize's (empty) state


@state_roles(steps_since_sync=COUNTER, opt_state=INNER, adv_state=INNER, cache=OTHER)
class SAMState(NamedTuple):
  """State of ``sam`` (Optax's field names).

  Attributes:
    steps_since_sync: int32 position in the cycle (0 at the outer point).
    opt_state: the outer optimizer's state.
    adv_state: the adversarial (ascent) optimizer's state.
    cache: the outer point (None in opaque mode).
  """

  steps_since_sync: jax.Array
  opt_state: OptState
  adv_state: Params
  cache: Params | None


class Normalize(Transformation):
  name = "normalize"
  elementwise = True

  def update_fn(self, updates, state, params=None, **extra_args):
    norm = l2_norm(updates)
    # Optax's division g / norm; a zero tree (norm 0, where Optax divides 0 by 0) is divided by 1
    # and stays zero. Each update keeps the incoming update's dtype.
    safe = jnp.where(norm > 0, norm, jnp.ones_like(norm))
    out, = self.leafwise(lambda k, g: g / k.norm, updates, scalars=Scalars(norm=safe))
    return out, state


@shared_args
def normalize() -> Transformation:
  """Divides the updates by their global l2 norm (a zero tree stays zero).

  Returns:
    A stateless transformation (``NormalizeState`` is ``EmptyState``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.normalize()
    >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]
    {'a': Array([0.6], dtype=float32), 'b': Array([0.8], dtype=float32)}
  """
  return Normalize()


def _select(pred: jax.Array, on_true: Any, on_false: Any) -> Any:
  return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), on_true, on_false)


class SAM(Transformation):
  name = "sam"
  State = SAMState
  optimizer: Any = child_field()
  adv_optimizer: Any = child_field()
  sync_period: int = static_field(default=2)
  reset_state: bool = static_field(default=True)
  opaque_mode: bool = static_field(default=False)
  batch_axis_name: Any = static_field(default=None)

  def __post_init__(self):
    n = self.sync_period
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
      raise ValueError(f"sam: sync_period must be an integer >= 1, got {n!r}.")

  def elementwise(self, flat_params: bool) -> str | None:
    """Read by the fusion layer: as elementwise as the inner optimizers, but never fused opaque.

    In opaque mode grad_fn is the caller's function of the parameters, called on the points this
    update computes: fuse would call it on its own packed buffers, which the caller's function
    cannot read. On FlatParams it gets FlatParams, which the caller's loss reads with `.tree()`.
    """
    if self.opaque_mode and not flat_params:
      return (f"{self.owner} (opaque_mode: grad_fn is called on the parameters, and fuse would pass "
              "it its packed buffers)")
    return children_blocker(self, flat_params)

  def init_fn(self, params):
    # The inner states and the cached outer point (a copy) are not zeros: built here.
    return SAMState(
        steps_since_sync=zero_count(),
        opt_state=self.optimizer.init(params),
        adv_state=self.adv_optimizer.init(params),
        cache=None if self.opaque_mode else copy_like(params),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("sam: `params` must be passed to update() (the outer point is cached from them).")
    grad_fn = extra_args.pop("grad_fn", None)
    if self.opaque_mode:
      return self._opaque(updates, state, params, grad_fn)
    return self._transparent(updates, state, params, extra_args)

  def _transparent(self, updates, state, params, extra_args):
    first = state.steps_since_sync == 0
    last = state.steps_since_sync == self.sync_period - 1
    # The outer point: these params at the start of a cycle, else the cached ones.
    outer = _select(first, params, state.cache)

    def outer_step():
      out, opt_state = self.optimizer.update(updates, state.opt_state, outer, **extra_args)

      # Back to the outer point, then the outer step: (outer - x) + u, in the parameter's dtype.
      out, = self.leafwise(lambda k, u, c, x: c - x + u, out, params=params, reads=(outer, params))
      adv_state = self.adv_optimizer.init(params) if self.reset_state else state.adv_state
      return out, opt_state, adv_state

    def ascent_step():
      out, adv_state = self.adv_optimizer.update(updates, state.adv_state, params, **extra_args)
      out, = self.leafwise(lambda k, u: -u, out, params=params)  # an ascent: the updates are subtracted
      return out, state.opt_state, adv_state

    out, opt_state, adv_state = jax.lax.cond(last, outer_step, ascent_step)
    steps = (state.steps_since_sync + np.asarray(1, COUNTER_DTYPE)) % np.asarray(self.sync_period, COUNTER_DTYPE)
    return out, SAMState(steps_since_sync=steps, opt_state=opt_state, adv_state=adv_state, cache=outer)

  def _opaque(self, updates, state, params, grad_fn):
    if grad_fn is None:
      raise ValueError(
          "sam: opaque_mode=True needs `grad_fn`: pass update(grads, state, params, grad_fn=fn) with "
          "fn(params, i) returning the gradient at params.")
    adv_params, adv_updates, adv_state = params, updates, state.adv_state
    for i in range(self.sync_period - 1):
      step, adv_state = self.adv_optimizer.update(adv_updates, adv_state, adv_params)
      adv_params = apply_updates(adv_params, tree_map(lambda u: -u, step))
      adv_updates = grad_fn(adv_params, i)
      if self.batch_axis_name is not None:
        adv_updates = jax.lax.pmean(adv_updates, axis_name=self.batch_axis_name)
    if self.reset_state:
      adv_state = self.adv_optimizer.init(params)
    out, opt_state = self.optimizer.update(adv_updates, state.opt_state, params)
    return out, SAMState(steps_since_sync=zero_count(), opt_state=opt_state, adv_state=adv_state, cache=None)


@shared_args
def sam(
    optimizer: GradientTransformation,
    adv_optimizer: GradientTransformation,
    sync_period: int = 2,
    reset_state: bool = True,
    opaque_mode: bool = False,
    batch_axis_name: str | None = None,
) -> Transformation:
  """Sharpness-aware minimisation around an outer ``optimizer``.

  Args:
    optimizer: the outer optimizer (applied to the gradient at the adversarial point, from the
      outer point).
    adv_optimizer: the ascent optimizer; its updates are *subtracted* (a descent optimizer such as
      ``chain(normalize(), sgd(rho))`` becomes an ascent of length ``rho``).
    sync_period: the cycle length: ``sync_period - 1`` ascent steps, then one outer step (>= 1).
    reset_state: re-initialise ``adv_optimizer``'s state after each outer step.
    opaque_mode: run the whole cycle in one call, with ``grad_fn(params, i)`` passed to
      ``update``; otherwise each call is one step of the cycle.
    batch_axis_name: in opaque mode, average ``grad_fn``'s gradients over this ``pmap``/``shard_map``
      axis.

  Returns:
    A transformation with ``SAMState``. In transparent mode the keyword extras of ``update`` (other
    than ``grad_fn``) are passed to both optimizers, since they describe the point where the
    gradient was taken; in opaque mode they are not (the inner gradients come from ``grad_fn``).

  References:
    Foret et al., "Sharpness-Aware Minimization for Efficiently Improving Generalization",
    ICLR 2021 (arXiv:2010.01412, Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.sam(steadax.sgd(0.1), steadax.sgd(0.5))
    >>> x = jnp.array([1.0]); s = opt.init(x)
    >>> u, s = opt.update(2 * x, s, x); x_adv = x + u  # ascent: 1 + 0.5 * 2
    >>> u, s = opt.update(2 * x_adv, s, x_adv); x_adv, x_adv + u  # back to 1, minus 0.1 * 4
    (Array([2.], dtype=float32), Array([0.6], dtype=float32))
  """
  if isinstance(sync_period, bool) or not isinstance(sync_period, (int, np.integer)) or sync_period < 1:
    raise ValueError(f"sam: sync_period must be an integer >= 1, got {sync_period!r}.")
  return SAM(as_inner(optimizer, "sam", "optimizer"), as_inner(adv_optimizer, "sam", "adv_optimizer"),
             sync_period=int(sync_period),
             reset_state=reset_state, opaque_mode=opaque_mode, batch_axis_name=batch_axis_name)
