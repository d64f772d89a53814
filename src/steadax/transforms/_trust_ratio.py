"""Layer-wise scaling relative to the parameters' norms: the trust ratio of LARS and LAMB, and the
parameter-scale factors of Adafactor.

References:
  You, Gitman & Ginsburg, "Large Batch Training of Convolutional Networks", arXiv:1708.03888, 2017
  (LARS, eq. 6).
  You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", ICLR 2020
  (LAMB, Algorithm 2).
  Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", ICML 2018
  (relative step sizes, §8).
"""

from typing import Any

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._interface import EmptyState
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from ._moments import safe_norm, safe_root_mean_squares

__all__ = [
    "ScaleByTrustRatioState", "scale_by_trust_ratio", "scale_by_param_block_norm",
    "scale_by_param_block_rms",
]

ScaleByTrustRatioState = EmptyState  # Optax's name for scale_by_trust_ratio's (empty) state


def _require_params(owner: str, params: Any) -> None:
  if params is None:
    raise ValueError(f"{owner}: `params` must be passed to update(); the scaling depends on them.")


class ScaleByTrustRatio(Transformation):
  name = "scale_by_trust_ratio"
  min_norm: Any = hyper_field(0.0, check=check_nonnegative)
  trust_coefficient: Any = hyper_field(1.0)
  eps: Any = hyper_field(0.0, check=check_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    _require_params(self.name, params)

    def leaf(k, g, p):
      # Norms of the compute-dtype values: a bfloat16 norm would round the ratio to 3 digits.
      param_norm = safe_norm(p, k.min_norm)
      update_norm = safe_norm(g, k.min_norm)
      ratio = k.trust_coefficient * param_norm / (update_norm + k.eps)  # LARS eq. 6, LAMB Alg. 2
      # A zero norm (fresh zero-initialised layer, zero update) would freeze or blow up the layer.
      ratio = jnp.where((param_norm == 0) | (update_norm == 0), 1, ratio)
      return g * ratio

    scalars = Scalars(min_norm=self.min_norm, eps=self.eps, trust_coefficient=self.trust_coefficient)
    out, = self.leafwise(leaf, updates, params=params, reads=(params,), scalars=scalars)
    return out, state


@shared_args
def scale_by_trust_ratio(min_norm: ArrayLike = 0.0, trust_coefficient: ArrayLike = 1.0, eps: ArrayLike = 0.0) -> Transformation:
  """Scales each parameter's update by the trust ratio ``coefficient * ||p|| / (||u|| + eps)``.

  Norms are per leaf (a layer's weight matrix is one block) and floored at ``min_norm``; where
  either norm is zero the ratio is 1. Used by ``lars`` (You et al. 2017, eq. 6) and ``lamb``
  (You et al. 2020, Algorithm 2).

  Args:
    min_norm: the floor of both norms (non-negative).
    trust_coefficient: multiplies the ratio.
    eps: added to the update's norm (non-negative).

  Returns:
    A stateless transformation; ``update`` needs ``params``.

  References:
    You, Gitman & Ginsburg, "Large Batch Training of Convolutional Networks", arXiv:1708.03888.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_trust_ratio()
    >>> p = jnp.array([3.0, 4.0])
    >>> tx.update(jnp.array([0.0, 0.5]), tx.init(p), p)[0]
    Array([0., 5.], dtype=float32)
  """
  return ScaleByTrustRatio(min_norm, trust_coefficient, eps)


class ScaleByParamBlockNorm(Transformation):
  name = "scale_by_param_block_norm"
  min_scale: Any = hyper_field(0.001, check=check_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    _require_params(self.name, params)
    scalars = Scalars(min_scale=self.min_scale)
    out, = self.leafwise(lambda k, g, p: g * safe_norm(p, k.min_scale), updates, params=params,
                         reads=(params,), scalars=scalars)
    return out, state


@shared_args
def scale_by_param_block_norm(min_scale: ArrayLike = 1e-3) -> Transformation:
  """Multiplies each parameter's update by the parameter's l2 norm (floored at ``min_scale``).

  Args:
    min_scale: the floor of the norm (non-negative).

  Returns:
    A stateless transformation; ``update`` needs ``params``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_param_block_norm()
    >>> p = jnp.array([3.0, 4.0])
    >>> tx.update(jnp.ones(2), tx.init(p), p)[0]
    Array([5., 5.], dtype=float32)
  """
  return ScaleByParamBlockNorm(min_scale)


class ScaleByParamBlockRms(Transformation):
  name = "scale_by_param_block_rms"
  min_scale: Any = hyper_field(0.001, check=check_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    _require_params(self.name, params)
    # Adafactor's relative step size (§8): the update times the parameter's RMS, floored.
    scalars = Scalars(min_scale=self.min_scale)
    out, = self.leafwise(lambda k, g, p: g * safe_root_mean_squares(p, k.min_scale), updates,
                         params=params, reads=(params,), scalars=scalars)
    return out, state


@shared_args
def scale_by_param_block_rms(min_scale: ArrayLike = 1e-3) -> Transformation:
  """Multiplies each parameter's update by the parameter's root mean square (floored at
  ``min_scale``): Adafactor's relative step size (Shazeer & Stern 2018, §8).

  Args:
    min_scale: the floor of the root mean square (non-negative).

  Returns:
    A stateless transformation; ``update`` needs ``params``.

  References:
    Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", ICML 2018.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_param_block_rms()
    >>> p = jnp.array([1.0, -1.0])
    >>> tx.update(jnp.array([2.0, 3.0]), tx.init(p), p)[0]
    Array([2., 3.], dtype=float32)
  """
  return ScaleByParamBlockRms(min_scale)
