"""Step sizes from the problem itself: Polyak's step and distance over gradients (layer-wise DoG).

Scalar statistics follow the dtype policy: Polyak's step is computed in the widest real floating
dtype of the tree (at least float32), whatever the dtype of the ``value`` passed in; DoG's
per-leaf statistics are real and at least float32. Updates keep each parameter's dtype, so a
float32 + bfloat16 tree stays mixed.

References:
  Polyak, "Introduction to Optimization", 1987 (§5.3); Loizou et al., "Stochastic Polyak Step-size
  for SGD: An Adaptive Learning Rate for Fast Convergence", AISTATS 2021 (SPS_max, eq. 5);
  Garrigos et al., "Function value learning: Adaptive learning rates based on the Polyak stepsize
  and function splitting in ERM", 2023 (SPS+).
  Ivgi et al., "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule", ICML 2023
  (arXiv:2302.12022, eq. 1 and §4 "layer-wise DoG").
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive
from .._core._leafwise import Scalars
from .._core._module import hyper_field, static_field
from .._core._policy import compute_dtype, hyper, real_dtype, scalar_stat_dtype
from .._core._roles import OTHER, state_roles
from .._core._tree import copy_like, tree_map, tree_sum_of_squares
from ._moments import abs_sq
from .._core._types import Params, Updates

__all__ = [
    "ScaleByDistanceOverGradientsState",
    "scale_by_polyak",
    "scale_by_distance_over_gradients",
]

_POLYAK_VARIANTS = ("sps", "sps+")
# Below this squared gradient norm the Polyak step is not taken (Optax's threshold: float64 eps).
_TINY = float(np.finfo(np.float64).eps)


class ScaleByPolyak(Transformation):
  name = "scale_by_polyak"
  elementwise = True
  f_min: Any = hyper_field(0.0)
  max_learning_rate: Any = hyper_field(1.0, check=check_positive)
  eps: Any = hyper_field(0.0, check=check_nonnegative)
  variant: str = static_field(default="sps")

  def __post_init__(self):
    if self.variant not in _POLYAK_VARIANTS:
      raise ValueError(f"{self.name}: variant must be one of {_POLYAK_VARIANTS}, got {self.variant!r}.")

  def update_fn(self, updates, state, params=None, **extra_args):
    value = extra_args.get("value")
    if value is None:
      raise TypeError(
          f"{self.name}: update() needs the keyword argument `value` (the objective's value at "
          "`params`), e.g. `tx.update(grads, state, params, value=loss)`.")
    # The step is a whole-tree statistic: computed outside the leaf function, in the widest real
    # floating dtype of the tree (tree_sum_of_squares already sums in it).
    stat = scalar_stat_dtype(updates)
    sq_norm = tree_sum_of_squares(updates)
    gap = hyper(value, stat) - hyper(self.f_min, stat)
    if self.variant == "sps+":
      gap = jnp.maximum(gap, jnp.zeros_like(gap))
    denom = sq_norm + hyper(self.eps, stat)
    vanishing = denom <= np.asarray(_TINY, stat)
    safe_denom = jnp.where(vanishing, jnp.ones_like(denom), denom)
    step = jnp.minimum(gap / safe_denom, hyper(self.max_learning_rate, stat))
    step = jnp.where(vanishing, jnp.zeros_like(step), step)

    out, = self.leafwise(lambda k, g: k.step * g, updates, params=params,
                         scalars=Scalars(step=step))
    return out, state


@shared_args
def scale_by_polyak(
    f_min: ArrayLike = 0.0,
    max_learning_rate: ArrayLike = 1.0,
    eps: ArrayLike = 0.0,
    variant: str = "sps",
) -> Transformation:
  """Scales updates by the Polyak step ``min((f(x) - f_min) / (||g||^2 + eps), max_learning_rate)``.

  ``update`` needs the keyword argument ``value`` (the objective at ``params``); without it a
  TypeError names the argument. Where ``||g||^2 + eps`` vanishes the step is 0.

  Args:
    f_min: a lower bound on the objective (``f*``).
    max_learning_rate: the largest step (SPS_max).
    eps: added to the squared gradient norm.
    variant: ``"sps"``, or ``"sps+"`` which clips a negative gap ``f(x) - f_min`` to zero.

  Returns:
    A stateless transformation (``EmptyState``).

  References:
    Loizou et al., "Stochastic Polyak Step-size for SGD", AISTATS 2021, eq. 5; Garrigos et al.,
    "Function value learning", 2023 (SPS+).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_polyak()
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)), value=2.0)[0]  # step 2 / 4
    Array([1.], dtype=float32)
  """
  return ScaleByPolyak(f_min, max_learning_rate, eps, variant=variant)


# Per leaf: a scalar, a length-1 vector and a copy of the parameters (none mirrors the parameters'
# shapes and dtypes as an accumulator does): OTHER, checked for drift.
@state_roles(max_dist=OTHER, grad_sum_of_squares=OTHER, init_params=OTHER)
class ScaleByDistanceOverGradientsState(NamedTuple):
  """State of ``scale_by_distance_over_gradients`` (per leaf: the largest distance travelled, the
  sum of squared gradient norms as a length-1 vector, and the initial parameters).

  Attributes:
    max_dist: per leaf, the largest distance travelled from the initial parameters.
    grad_sum_of_squares: per leaf, the sum of squared gradient norms (a length-1 vector).
    init_params: the initial parameters.
  """

  max_dist: jax.Array
  grad_sum_of_squares: Updates
  init_params: Params


def _stat_dtype(dtype: Any) -> np.dtype:
  return real_dtype(compute_dtype(dtype))


class ScaleByDistanceOverGradients(Transformation):
  name = "scale_by_distance_over_gradients"
  State = ScaleByDistanceOverGradientsState
  reps_rel: Any = hyper_field(1e-06, check=check_positive)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  param_dtype: Any = static_field(default=jnp.float32)
  global_scale: Any = hyper_field(default=1.0)

  def init_fn(self, params):  # non-zero statistics and a copy of the parameters: by hand
    def initial_distance(p):
      # A small positive start, relative to the parameters' size, so the first steps are not zero;
      # the norm is summed in the statistics dtype (at least float32).
      norm = jnp.sqrt(tree_sum_of_squares(p))
      return hyper(self.reps_rel, norm.dtype) * (1 + norm)

    return ScaleByDistanceOverGradientsState(
        max_dist=tree_map(initial_distance, params),
        grad_sum_of_squares=tree_map(lambda p: jnp.zeros((1,), _stat_dtype(p.dtype)), params),
        init_params=copy_like(params, self.param_dtype),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError(f"{self.name}: `params` must be passed to update() (distances are measured "
                       "from the initial parameters).")

    def leaf(k, g, d, sos, p, p0):
      # r_t = max(r_{t-1}, ||x_t - x_0||), G_t = G_{t-1} + ||g_t||^2, eta_t = r_t / sqrt(G_t) (eq. 1,
      # per leaf as in §4). The sum is kept as a length-1 vector (Optax's layout).
      d = jnp.maximum(d, jnp.sqrt(jnp.sum(abs_sq(p - p0))))
      sos = sos + jnp.sum(abs_sq(g))
      eta = k.global_scale * d / jnp.sqrt(jnp.reshape(sos, ()) + k.eps)
      return g * eta, d, sos

    scalars = Scalars(global_scale=self.global_scale, eps=self.eps)
    out, max_dist, sos = self.leafwise(leaf, updates, state.max_dist, state.grad_sum_of_squares,
                                       params=params, reads=(params, state.init_params), scalars=scalars)
    return out, ScaleByDistanceOverGradientsState(max_dist=max_dist, grad_sum_of_squares=sos,
                                                  init_params=state.init_params)


@shared_args
def scale_by_distance_over_gradients(
    reps_rel: ArrayLike = 1e-6,
    eps: ArrayLike = 1e-8,
    param_dtype: DTypeLike = jnp.float32,
    global_scale: ArrayLike = 1.0,
) -> Transformation:
  """Layer-wise DoG: scales each leaf by ``max distance from x_0 / sqrt(sum of squared grad norms)``.

  A learning-rate-free step size: per leaf, ``eta_t = global_scale * r_t / sqrt(G_t + eps)`` with
  ``r_t = max(reps_rel (1 + ||x_0||), max_{i<=t} ||x_i - x_0||)`` and ``G_t = sum_{i<=t} ||g_i||^2``.
  ``params`` must be passed to ``update``.

  Args:
    reps_rel: the initial distance relative to ``1 + ||x_0||`` (1e-6; 1e-4 with batch norm).
    eps: added to the sum of squared gradient norms.
    param_dtype: dtype of the stored initial parameters (a real dtype keeps complex parameters
      complex).
    global_scale: multiplies every step (use -1 to descend without a learning rate).

  Returns:
    A transformation with ``ScaleByDistanceOverGradientsState(max_dist, grad_sum_of_squares,
    init_params)``; the per-leaf statistics are real and at least float32.

  References:
    Ivgi et al., "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule", ICML 2023
    (arXiv:2302.12022).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_distance_over_gradients(reps_rel=0.5, eps=0.0)
    >>> p = jnp.zeros(1)
    >>> tx.update(jnp.array([2.0]), tx.init(p), p)[0]  # 0.5 * (1 + 0) / 2 * 2
    Array([0.5], dtype=float32)
  """
  return ScaleByDistanceOverGradients(reps_rel, eps, param_dtype=param_dtype, global_scale=global_scale)
