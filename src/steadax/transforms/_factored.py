"""Adafactor's factored second-moment estimate.

For a matrix of squared gradients ``V`` (n x m), Adafactor keeps only its row means ``R`` and column
means ``C`` and estimates ``V ~ R C^T / mean(R)``, the rank-1 matrix with those marginals
(Shazeer & Stern 2018, Algorithm 4). Tensors of higher rank are factored over their two largest
axes; whether a parameter is factored is decided from its shape only, so it is static.

References:
  Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", ICML 2018.
  Zhai et al., "Scaling Vision Transformers", CVPR 2022 (capping the decay schedule, via
  ``decay_rate_fn``).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative
from .._core._leafwise import Scalars, place_kept_axes, place_like
from .._core._module import hyper_field, static_field
from .._core._policy import COUNTER_DTYPE, accumulator_dtype, cast, hyper, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, state_roles
from .._core._tree import tree_map, zeros_mirroring
from ._moments import abs_sq
from .._core._types import Params

__all__ = ["FactoredState", "scale_by_factored_rms"]


# v_row, v_col and v hold, per parameter, either its factors or its full statistic and a (1,)
# placeholder for the others: none mirrors the parameters' shapes, so they are OTHER (drift-checked).
@state_roles(count=COUNTER, v_row=OTHER, v_col=OTHER, v=OTHER)
class FactoredState(NamedTuple):
  """State of ``scale_by_factored_rms``.

  Attributes:
    count: the int32 step count.
    v_row: per factored parameter, the mean of the squared gradient over its largest axis
      (a ``(1,)`` placeholder for parameters that are not factored).
    v_col: per factored parameter, the mean over its second largest axis (or a placeholder).
    v: per unfactored parameter, the full second moment (a ``(1,)`` placeholder where factored).
  """

  count: jax.Array
  v_row: Params
  v_col: Params
  v: Params


def _decay_rate_pow(step: ArrayLike, exponent: ArrayLike = 0.8) -> jax.Array:
  """Adafactor's default schedule ``1 - (step + 1)**(-exponent)`` (Shazeer & Stern 2018, §7.2)."""
  t = (jnp.asarray(step) + 1).astype(jnp.float32)  # float32 whatever the parameters, as in Optax
  with jax.numpy_dtype_promotion("standard"):  # Optax's arithmetic, as written
    return cast(1.0 - t ** (-jnp.asarray(exponent)), jnp.float32)


def factored_dims(shape: tuple[int, ...], factored: bool, min_dim_size_to_factor: int):
  """The two axes a parameter of ``shape`` is factored over, ``(second largest, largest)``, or None.

  A parameter is factored when ``factored`` is set, it has at least two axes and its second largest
  axis has at least ``min_dim_size_to_factor`` (and at least one) entries.

  Example:
    >>> factored_dims((256, 300), True, 128)
    (0, 1)
    >>> factored_dims((256, 64), True, 128) is None
    True
  """
  if not factored or len(shape) < 2:
    return None
  order = np.argsort(shape)
  if shape[order[-2]] < max(min_dim_size_to_factor, 1):
    return None
  return int(order[-2]), int(order[-1])


def _zeros_without_axis(x: Any, axis: int, dtype: Any) -> jax.Array:
  """A factor of ``x`` (its mean over ``axis``): zeros with the sharding of ``x``'s other axes,
  which is the layout the factor's update (a mean, all-reduced over ``axis``'s shards) has."""
  kept = tuple(i for i in range(np.ndim(x)) if i != axis)
  return place_kept_axes(x, jnp.zeros(tuple(np.shape(x)[i] for i in kept), dtype), kept)


def _check_min_dim_size(owner: str, value: Any) -> None:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise TypeError(f"{owner}: min_dim_size_to_factor must be an int (it decides shapes), got {value!r}.")
  if value < 0:
    raise ValueError(f"{owner}: min_dim_size_to_factor must be >= 0, got {value}.")


class ScaleByFactoredRms(Transformation):
  name = "scale_by_factored_rms"
  State = FactoredState
  factored: bool = static_field(default=True)
  decay_rate: Any = hyper_field(default=0.8)
  step_offset: Any = hyper_field(default=0)
  min_dim_size_to_factor: int = static_field(default=128)
  epsilon: Any = hyper_field(default=1e-30, check=check_nonnegative)
  decay_rate_fn: Callable = static_field(default=_decay_rate_pow)

  def __post_init__(self):
    # Static fields are checked here (hyper_field checks cover the hyperparameters).
    _check_min_dim_size(self.name, self.min_dim_size_to_factor)
    if not callable(self.decay_rate_fn):
      raise TypeError(f"{self.name}: decay_rate_fn must be callable, got {self.decay_rate_fn!r}.")

  def _dims(self, x):
    return factored_dims(np.shape(x), self.factored, self.min_dim_size_to_factor)

  def init_fn(self, params):  # factors and placeholders, not the parameters' shapes: by hand
    def placeholder(dtype):
      return jnp.zeros((1,), dtype)

    def init(p):
      dtype = accumulator_dtype(p.dtype, real=True)
      dims = self._dims(p)
      if dims is None:
        v = zeros_mirroring(p, dtype)
        return placeholder(dtype), placeholder(dtype), v
      d1, d0 = dims
      return _zeros_without_axis(p, d0, dtype), _zeros_without_axis(p, d1, dtype), placeholder(dtype)

    v_row, v_col, v = (tree_map(lambda p, i=i: init(p)[i], params) for i in range(3))
    return FactoredState(count=zero_count(), v_row=v_row, v_col=v_col, v=v)

  def update_fn(self, updates, state, params=None, **extra_args):
    # Before the offset the schedule would see a negative step (a NaN power): hold it at zero.
    step = jnp.maximum(state.count - hyper(self.step_offset, COUNTER_DTYPE), np.asarray(0, COUNTER_DTYPE))
    decay_t = self.decay_rate_fn(step, self.decay_rate)

    def leaf(k, g, v_row, v_col, v):
      # Factored statistics are reductions of the leaf, not elementwise maths; they still run here:
      # every state leaf (factor, full statistic or placeholder) keeps its own shape and dtype.
      g_sq = abs_sq(g) + k.eps
      dims = self._dims(g)
      if dims is None:
        v = k.decay * v + (1.0 - k.decay) * g_sq
        return g * v ** -0.5, v_row, v_col, v
      d1, d0 = dims
      # Algorithm 4: R = decay R + (1 - decay) mean over the largest axis, C over the second.
      v_row = k.decay * v_row + (1.0 - k.decay) * jnp.mean(g_sq, axis=d0)
      v_col = k.decay * v_col + (1.0 - k.decay) * jnp.mean(g_sq, axis=d1)
      # v_row lost axis d0, so axis d1 moved one place left when it came after d0.
      reduced_d1 = d1 - 1 if d1 > d0 else d1
      row_factor = (v_row / jnp.mean(v_row, axis=reduced_d1, keepdims=True)) ** -0.5
      col_factor = v_col ** -0.5
      # V ~ R C^T / mean(R): the update g / sqrt(V) as a product of the two factors (Optax's order).
      return g * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(col_factor, d1), v_row, v_col, v

    scalars = Scalars(decay=decay_t, eps=self.epsilon)
    out, v_row, v_col, v = self.leafwise(leaf, updates, state.v_row, state.v_col, state.v, params=params,
                                         scalars=scalars)
    # The factors keep their layout from step to step (under automatic mesh axes the compiler
    # would otherwise choose a new one for the reduced statistics: a recompilation at step 2).
    v_row, v_col = (tree_map(place_like, old, new) for old, new in ((state.v_row, v_row), (state.v_col, v_col)))
    return out, FactoredState(count=safe_increment(state.count), v_row=v_row, v_col=v_col, v=v)


@shared_args
def scale_by_factored_rms(
    factored: bool = True,
    decay_rate: ArrayLike = 0.8,
    step_offset: ArrayLike = 0,
    min_dim_size_to_factor: int = 128,
    epsilon: ArrayLike = 1e-30,
    decay_rate_fn: Callable[[ArrayLike, ArrayLike], ArrayLike] = _decay_rate_pow,
) -> Transformation:
  """Divides updates by a factored estimate of the root mean square of the gradients (Adafactor).

  For a factored parameter (see ``factored_dims``) the squared gradient ``|g|^2 + epsilon`` is
  averaged over its largest axis into ``v_row`` and over its second largest into ``v_col`` (moving
  averages with decay ``decay_rate_fn(step - step_offset, decay_rate)``), and the update is
  ``g / sqrt(v_row * v_col / mean(v_row))`` (Shazeer & Stern 2018, Algorithm 4). Other parameters
  keep a full moving average ``v`` and get ``g / sqrt(v)``. The statistics are real for complex
  parameters.

  Args:
    factored: factor the second moment of parameters with two large enough axes.
    decay_rate: the exponent of the default decay schedule ``1 - (t + 1)**(-decay_rate)``.
    step_offset: subtracted from the step count (set it to the first step of a fine-tuning run);
      steps before it count as step 0.
    min_dim_size_to_factor: factor only when the second largest axis has at least this many entries.
    epsilon: added to the squared gradients.
    decay_rate_fn: ``(step, decay_rate) -> decay``, the schedule of the moving averages' decay.

  Returns:
    A transformation with ``FactoredState(count, v_row, v_col, v)``.

  References:
    Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", ICML 2018.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_factored_rms(min_dim_size_to_factor=2, epsilon=0.0)
    >>> g = jnp.outer(jnp.array([1.0, -2.0]), jnp.array([3.0, 1.0, -1.0]))
    >>> tx.update(g, tx.init(g))[0]
    Array([[ 1.0000001,  1.       , -1.       ],
           [-1.0000001, -1.       ,  1.       ]], dtype=float32)
  """
  _check_min_dim_size("scale_by_factored_rms", min_dim_size_to_factor)  # before int() below
  return ScaleByFactoredRms(
      factored=factored, decay_rate=decay_rate, step_offset=step_offset,
      min_dim_size_to_factor=int(min_dim_size_to_factor), epsilon=epsilon, decay_rate_fn=decay_rate_fn,
  )
