"""Rprop: per-coordinate step sizes adapted from the signs of successive gradients.

References:
  Riedmiller & Braun, "A Direct Adaptive Method for Faster Backpropagation Learning: The RPROP
  Algorithm", IEEE ICNN 1993.
  Igel & Hüsken, "Improving the Rprop Learning Algorithm", NC 2000 (the iRprop- variant used here:
  after a sign flip the step is skipped and the gradient forgotten).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_range
from .._core._policy import as_compute, compute_dtype, hyper, key_path_str, per_dtype
from .._core._tree import tree_map, tree_map_n, zeros_like
from .._core._module import hyper_field

__all__ = ["ScaleByRpropState", "scale_by_rprop"]


class ScaleByRpropState(NamedTuple):
  """State of ``scale_by_rprop``: the current step size and the last update, per coordinate."""

  step_sizes: Any
  prev_updates: Any


def _reject_complex(owner: str, params: Any) -> None:
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    if jnp.issubdtype(getattr(leaf, "dtype", np.float32), jnp.complexfloating):
      raise TypeError(
          f"{owner}: parameter at {key_path_str(path)} is complex; Rprop compares the signs of "
          "successive gradients, which complex numbers do not have (split real and imaginary parts "
          "into separate real parameters).")


class ScaleByRprop(Transformation):
  name = "scale_by_rprop"
  learning_rate: Any = hyper_field()
  eta_minus: Any = hyper_field(0.5)
  eta_plus: Any = hyper_field(1.2)
  min_step_size: Any = hyper_field(1e-06)
  max_step_size: Any = hyper_field(50.0)

  def init_fn(self, params):
    _reject_complex(self.name, params)
    step_sizes = tree_map(lambda z: z + hyper(self.learning_rate, z.dtype), zeros_like(params))
    return ScaleByRpropState(step_sizes=step_sizes, prev_updates=zeros_like(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    @per_dtype
    def scalars(cdt):
      return (hyper(self.eta_minus, cdt), hyper(self.eta_plus, cdt), hyper(self.min_step_size, cdt),
              hyper(self.max_step_size, cdt))

    def leaf(g, step, prev):
      cdt = compute_dtype(g.dtype, step.dtype, prev.dtype)
      eta_minus, eta_plus, lo, hi = scalars(cdt)
      gc = as_compute(g, cdt)
      agreement = gc * as_compute(prev, cdt)
      stepc = as_compute(step, cdt)
      # Same sign: grow the step; flipped sign: shrink it; a zero (after a flip, or at the start)
      # leaves it unchanged.
      grown = jnp.clip(stepc * jnp.where(agreement > 0, eta_plus, eta_minus), lo, hi)
      new_step = jnp.where(agreement == 0, stepc, grown)
      # After a flip the step is skipped and the stored update zeroed, so the next step neither
      # grows nor shrinks (iRprop-).
      new_update = jnp.where(agreement < 0, jnp.zeros_like(gc), new_step * jnp.sign(gc))
      new_update = new_update.astype(prev.dtype)
      return new_update.astype(g.dtype), new_step.astype(step.dtype), new_update

    out, step_sizes, prev_updates = tree_map_n(leaf, 3, updates, state.step_sizes, state.prev_updates)
    return out, ScaleByRpropState(step_sizes=step_sizes, prev_updates=prev_updates)


def scale_by_rprop(
    learning_rate: Any,
    eta_minus: Any = 0.5,
    eta_plus: Any = 1.2,
    min_step_size: Any = 1e-6,
    max_step_size: Any = 50.0,
) -> Transformation:
  """Rprop's update ``step_size * sign(g)`` with step sizes adapted per coordinate.

  When the gradient keeps its sign the step size is multiplied by ``eta_plus``, when it flips by
  ``eta_minus`` (and that step is skipped), always clipped to ``[min_step_size, max_step_size]``.
  The update points *along* the gradient: chain with ``scale(-1.0)`` to descend (as ``rprop``).
  Real parameters only.

  Args:
    learning_rate: the initial step size of every coordinate.
    eta_minus: factor applied to the step size after a sign flip, in (0, 1].
    eta_plus: factor applied when the sign is kept, at least 1.
    min_step_size: the smallest step size.
    max_step_size: the largest step size.

  Returns:
    A transformation with ``ScaleByRpropState(step_sizes, prev_updates)``.

  References:
    Riedmiller & Braun, "A Direct Adaptive Method for Faster Backpropagation Learning: The RPROP
    Algorithm", IEEE ICNN 1993; Igel & Hüsken, "Improving the Rprop Learning Algorithm", 2000.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_rprop(0.1)
    >>> s = tx.init(jnp.zeros(2))
    >>> u, s = tx.update(jnp.array([3.0, -1.0]), s)
    >>> u, s = tx.update(jnp.array([2.0, 1.0]), s)
    >>> s.step_sizes
    Array([0.12, 0.05], dtype=float32)
  """
  owner = "scale_by_rprop"
  check_range(owner, "learning_rate", learning_rate, 0.0, np.inf, low_open=True)
  check_range(owner, "eta_minus", eta_minus, 0.0, 1.0, low_open=True)
  check_range(owner, "eta_plus", eta_plus, 1.0, np.inf)
  check_range(owner, "min_step_size", min_step_size, 0.0, np.inf)
  check_range(owner, "max_step_size", max_step_size, 0.0, np.inf, low_open=True)
  if isinstance(min_step_size, (int, float)) and isinstance(max_step_size, (int, float)):
    if min_step_size > max_step_size:
      raise ValueError(f"{owner}: min_step_size ({min_step_size}) exceeds max_step_size ({max_step_size}).")
  return ScaleByRprop(learning_rate, eta_minus, eta_plus, min_step_size, max_step_size)
