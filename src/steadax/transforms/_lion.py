"""Lion's sign-of-interpolated-momentum preconditioner.

References:
  Chen et al., "Symbolic Discovery of Optimization Algorithms", NeurIPS 2023 (Program 1).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_range
from .._core._module import hyper_field, static_field
from .._core._policy import as_compute, compute_dtype, hyper, per_dtype, safe_increment, zero_count
from .._core._tree import tree_map_n, zeros_like

__all__ = ["ScaleByLionState", "scale_by_lion"]

_MODES = ("hard", "smooth", "refined")


class ScaleByLionState(NamedTuple):
  """State of ``scale_by_lion``: the int32 count and the momentum ``mu``."""

  count: jax.Array
  mu: Any


class ScaleByLion(Transformation):
  name = "scale_by_lion"
  b1: Any = hyper_field(0.9)
  b2: Any = hyper_field(0.99)
  mu_dtype: Any = static_field(default=None)
  mode: str = static_field(default="hard")
  smooth_beta: Any = hyper_field(1.0)

  def init_fn(self, params):
    return ScaleByLionState(count=zero_count(), mu=zeros_like(params, self.mu_dtype))

  def update_fn(self, updates, state, params=None, **extra_args):
    @per_dtype
    def scalars(cdt):
      b1, b2 = hyper(self.b1, cdt), hyper(self.b2, cdt)
      beta = hyper(self.smooth_beta, cdt) if self.mode == "smooth" else None
      return b1, np.asarray(1, cdt) - b1, b2, np.asarray(1, cdt) - b2, beta

    def leaf(g, m):
      cdt = compute_dtype(g.dtype, m.dtype)
      b1, one_minus_b1, b2, one_minus_b2, beta = scalars(cdt)
      gc, mc = as_compute(g, cdt), as_compute(m, cdt)
      mix = one_minus_b1 * gc + b1 * mc
      if self.mode == "hard":
        direction = jnp.sign(mix)
      elif self.mode == "smooth":
        direction = jnp.tanh(beta * mix)
      else:  # "refined": linear near zero, the sign beyond unit magnitude
        direction = jnp.where(jnp.abs(mix) < 1, mix, jnp.sign(mix))
      m_new = b2 * mc + one_minus_b2 * gc
      return direction.astype(g.dtype), m_new.astype(m.dtype)

    out, mu = tree_map_n(leaf, 2, updates, state.mu)
    return out, ScaleByLionState(count=safe_increment(state.count), mu=mu)


def scale_by_lion(
    b1: Any = 0.9,
    b2: Any = 0.99,
    mu_dtype: Any = None,
    *,
    mode: str = "hard",
    smooth_beta: Any = 1.0,
) -> Transformation:
  """Lion's update direction: the sign of an interpolation of the momentum and the gradient.

  ``u = sign((1 - b1) g + b1 m)`` then ``m = b2 m + (1 - b2) g`` (Chen et al. 2023, Program 1).
  ``mode="smooth"`` uses ``tanh(smooth_beta * x)`` instead of the sign, ``mode="refined"`` keeps
  ``x`` where ``|x| < 1``. For complex parameters the sign is ``x / |x|``.

  Args:
    b1: the weight of the momentum in the update's interpolation, in [0, 1].
    b2: the decay of the momentum, in [0, 1].
    mu_dtype: dtype of the momentum (default: each parameter's dtype).
    mode: ``"hard"``, ``"smooth"`` or ``"refined"``.
    smooth_beta: the tanh's sharpness in ``"smooth"`` mode.

  Returns:
    A transformation with ``ScaleByLionState(count, mu)``.

  References:
    Chen et al., "Symbolic Discovery of Optimization Algorithms", NeurIPS 2023.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_lion()
    >>> tx.update(jnp.array([0.3, -2.0]), tx.init(jnp.zeros(2)))[0]
    Array([ 1., -1.], dtype=float32)
  """
  check_range("scale_by_lion", "b1", b1, 0.0, 1.0)
  check_range("scale_by_lion", "b2", b2, 0.0, 1.0)
  if mode not in _MODES:
    raise ValueError(f"scale_by_lion: mode must be one of {_MODES}, got {mode!r}.")
  return ScaleByLion(b1, b2, mu_dtype=mu_dtype, mode=mode, smooth_beta=smooth_beta)
