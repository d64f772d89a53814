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

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_positive
from .._core._module import hyper_field, static_field
from .._core._policy import (
    as_compute,
    compute_dtype,
    hyper,
    per_dtype,
    real_dtype,
    scalar_stat_dtype,
)
from .._core._tree import copy_like, tree_map, tree_map_n, tree_sum_of_squares
from ._moments import abs_sq

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
  f_min: Any = hyper_field(0.0)
  max_learning_rate: Any = hyper_field(1.0)
  eps: Any = hyper_field(0.0)
  variant: str = static_field(default="sps")

  def update_fn(self, updates, state, params=None, **extra_args):
    value = extra_args.get("value")
    if value is None:
      raise TypeError(
          f"{self.name}: update() needs the keyword argument `value` (the objective's value at "
          "`params`), e.g. `tx.update(grads, state, params, value=loss)`.")
    stat = scalar_stat_dtype(updates)
    sq_norm = tree_sum_of_squares(updates).astype(stat)
    gap = hyper(value, stat) - hyper(self.f_min, stat)
    if self.variant == "sps+":
      gap = jnp.maximum(gap, jnp.zeros_like(gap))
    denom = sq_norm + hyper(self.eps, stat)
    vanishing = denom <= np.asarray(_TINY, stat)
    safe_denom = jnp.where(vanishing, jnp.ones_like(denom), denom)
    step = jnp.minimum(gap / safe_denom, hyper(self.max_learning_rate, stat))
    step = jnp.where(vanishing, jnp.zeros_like(step), step)

    steps = per_dtype(lambda cdt: step.astype(cdt))

    def leaf(g):
      cdt = compute_dtype(g.dtype)
      return (as_compute(g, cdt) * steps(cdt)).astype(g.dtype)

    return tree_map(leaf, updates), state


def scale_by_polyak(
    f_min: Any = 0.0,
    max_learning_rate: Any = 1.0,
    eps: Any = 0.0,
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
  owner = "scale_by_polyak"
  if variant not in _POLYAK_VARIANTS:
    raise ValueError(f"{owner}: variant must be one of {_POLYAK_VARIANTS}, got {variant!r}.")
  check_positive(owner, "max_learning_rate", max_learning_rate)
  check_nonnegative(owner, "eps", eps)
  return ScaleByPolyak(f_min, max_learning_rate, eps, variant=variant)


class ScaleByDistanceOverGradientsState(NamedTuple):
  """State of ``scale_by_distance_over_gradients`` (per leaf: the largest distance travelled, the
  sum of squared gradient norms as a length-1 vector, and the initial parameters)."""

  max_dist: Any
  grad_sum_of_squares: Any
  init_params: Any


def _stat_dtype(dtype: Any) -> np.dtype:
  return real_dtype(compute_dtype(dtype))


def _norm(x: jax.Array, dtype: Any) -> jax.Array:
  return jnp.sqrt(jnp.sum(abs_sq(as_compute(x, compute_dtype(x.dtype))))).astype(dtype)


class ScaleByDistanceOverGradients(Transformation):
  name = "scale_by_distance_over_gradients"
  reps_rel: Any = hyper_field(1e-06)
  eps: Any = hyper_field(1e-08)
  param_dtype: Any = static_field(default=jnp.float32)
  global_scale: Any = hyper_field(1.0)

  def init_fn(self, params):
    def initial_distance(p):
      rdt = _stat_dtype(p.dtype)
      # A small positive start, relative to the parameters' size, so the first steps are not zero.
      return hyper(self.reps_rel, rdt) * (1 + _norm(p, rdt))

    return ScaleByDistanceOverGradientsState(
        max_dist=tree_map(initial_distance, params),
        grad_sum_of_squares=tree_map(lambda p: jnp.zeros((1,), _stat_dtype(p.dtype)), params),
        init_params=copy_like(params, self.param_dtype),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError(f"{self.name}: `params` must be passed to update() (distances are measured "
                       "from the initial parameters).")

    def leaf(g, d, sos, p, p0):
      rdt = d.dtype
      cdt = compute_dtype(p.dtype, p0.dtype)
      dist = _norm(as_compute(p, cdt) - as_compute(p0, cdt), rdt)
      d_new = jnp.maximum(d, dist)
      sos_new = sos + jnp.sum(abs_sq(as_compute(g, compute_dtype(g.dtype)))).astype(sos.dtype)
      # The sum is kept as a length-1 vector (Optax's layout); the step size itself is a scalar.
      eta = hyper(self.global_scale, rdt) * d_new / jnp.sqrt(jnp.reshape(sos_new, ()) + hyper(self.eps, rdt))
      gdt = compute_dtype(g.dtype)
      out = as_compute(g, gdt) * eta.astype(gdt)
      return out.astype(g.dtype), d_new, sos_new

    out, max_dist, sos = tree_map_n(leaf, 3, updates, state.max_dist, state.grad_sum_of_squares, params,
                                    state.init_params)
    return out, ScaleByDistanceOverGradientsState(max_dist=max_dist, grad_sum_of_squares=sos,
                                                  init_params=state.init_params)


def scale_by_distance_over_gradients(
    reps_rel: Any = 1e-6,
    eps: Any = 1e-8,
    param_dtype: Any = jnp.float32,
    global_scale: Any = 1.0,
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
  owner = "scale_by_distance_over_gradients"
  check_positive(owner, "reps_rel", reps_rel)
  check_nonnegative(owner, "eps", eps)
  return ScaleByDistanceOverGradients(reps_rel, eps, param_dtype=param_dtype, global_scale=global_scale)
