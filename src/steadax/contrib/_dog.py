"""Distance over Gradients: DoG (Ivgi et al. 2023) and DoWG (Khaled et al. 2023).

DoG's step size is the largest distance travelled from the initial point over the root of the sum
of squared gradient norms; DoWG weights each squared gradient norm by the current squared distance:

    DoG:   η_t = max_{k<=t} ||x_k - x_0|| / sqrt(Σ_{k<=t} ||g_k||^2 + eps)
    DoWG:  r̄_t^2 = max(r̄_{t-1}^2, ||x_t - x_0||^2),  v_t = v_{t-1} + r̄_t^2 ||g_t||^2,
           η_t = r̄_t^2 / (sqrt(v_t) + eps)

The scalar statistics take one dtype fixed at init (the widest floating dtype among the parameters,
at least float32) and the distances are computed in at least float32. Optax 0.2.8 stores them in the
lowest dtype (bfloat16 in a mixed tree), the first update widens them to float32 and returns a
float32 update for a bfloat16 parameter; ``lax.scan`` and ``apply_if_finite`` then fail. DoG's
initial distance ``alpha (1 + ||x_0||)`` is computed with traceable operations, so ``init`` also runs
under ``jax.eval_shape``. Complex parameters use ``|.|`` norms.
"""

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._stateless import identity
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_schedule_or_scalar
from .._core._combine import chain
from .._core._leafwise import Scalars, tree_reduce
from .._core._module import hyper_field, static_field
from .._core._policy import hyper, scalar_stat_dtype
from .._core._roles import OTHER, SCALAR, state_roles
from .._core._tree import copy_like
from .._core._types import Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate
from ._reductions import sq_norm

__all__ = ["DoGState", "DoWGState", "scale_by_dog", "scale_by_dowg", "dog", "dowg"]

_INIT_STEP_TYPES = ("distance", "learning_rate", "heuristic")


@state_roles(is_init_step=OTHER, init_params=OTHER, max_dist=SCALAR, sum_sq_norm_grads=SCALAR)
class DoGState(NamedTuple):
  """State of ``scale_by_dog`` (Optax's field names).

  Attributes:
    is_init_step: bool, True until the first update.
    init_params: the initial point ``x_0``, one leaf per parameter.
    max_dist: ``max_k ||x_k - x_0||`` (starting from the initial distance ``r_eps``).
    sum_sq_norm_grads: ``Σ_k ||g_k||^2``.
  """

  is_init_step: jax.Array
  init_params: Params
  max_dist: jax.Array
  sum_sq_norm_grads: jax.Array


@state_roles(init_params=OTHER, weighted_sq_norm_grads=SCALAR, estim_sq_dist=SCALAR)
class DoWGState(NamedTuple):
  """State of ``scale_by_dowg`` (Optax's field names).

  Attributes:
    init_params: the initial point ``x_0``.
    weighted_sq_norm_grads: ``v_t = Σ_k r̄_k^2 ||g_k||^2``.
    estim_sq_dist: ``r̄_t^2``, the largest squared distance from ``x_0``.
  """

  init_params: Params
  weighted_sq_norm_grads: jax.Array
  estim_sq_dist: jax.Array


def _distance_and_grad_norms(owner, updates, init_params, params, stat):
  """``(||x - x_0||^2, ||g||^2)`` over the whole tree, each leaf in its compute dtype, summed in
  the statistics dtype ``stat``."""
  if params is None:
    raise ValueError(f"{owner}: `params` must be passed to update() (the distance needs them).")
  sq_dist = tree_reduce(lambda k, g, x0, p: sq_norm(x0 - p), stat, updates, init_params, params)
  sq_grad = tree_reduce(lambda k, g, x0, p: sq_norm(g), stat, updates, init_params, params)
  return sq_dist, sq_grad


def _scale(tx, updates, step):
  """``step * g`` leaf by leaf (``step``: the step size, a scalar in the statistics dtype); each
  update keeps the incoming update's dtype."""
  return tx.leafwise(lambda k, g: k.step * g, updates, scalars=Scalars(step=step))[0]


class ScaleByDoG(Transformation):
  name = "scale_by_dog"
  State = DoGState
  init_step_value: Any = hyper_field(1e-06, check=check_positive)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  init_step_type: str = static_field(default="heuristic")

  def __post_init__(self):
    if self.init_step_type not in _INIT_STEP_TYPES:
      raise ValueError(
          f"{self.name}: init_step[0] must be one of {_INIT_STEP_TYPES}, got {self.init_step_type!r}.")

  def init_fn(self, params):
    stat = scalar_stat_dtype(params)
    if self.init_step_type == "distance":
      r_eps = jnp.asarray(hyper(self.init_step_value, stat))
    elif self.init_step_type == "heuristic":
      sq = tree_reduce(lambda k, x: sq_norm(x), stat, params)
      r_eps = hyper(self.init_step_value, stat) * (1 + jnp.sqrt(sq))
    else:
      r_eps = jnp.zeros([], stat)
    return DoGState(
        is_init_step=jnp.asarray(True),
        init_params=copy_like(params),
        max_dist=r_eps,
        sum_sq_norm_grads=jnp.zeros([], stat),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    stat = state.max_dist.dtype
    sq_dist, sq_grad = _distance_and_grad_norms(self.name, updates, state.init_params, params, stat)
    max_dist = jnp.maximum(state.max_dist, jnp.sqrt(sq_dist))
    sum_sq = state.sum_sq_norm_grads + sq_grad
    step = max_dist / jnp.sqrt(sum_sq + hyper(self.eps, stat))
    if self.init_step_type == "learning_rate":
      step = jnp.where(state.is_init_step, hyper(self.init_step_value, stat), step)
    return _scale(self, updates, step), DoGState(
        is_init_step=jnp.zeros_like(state.is_init_step),
        init_params=state.init_params,
        max_dist=max_dist,
        sum_sq_norm_grads=sum_sq,
    )


class ScaleByDoWG(Transformation):
  name = "scale_by_dowg"
  State = DoWGState
  init_estim_sq_dist: Any = hyper_field(None, check=check_positive)
  eps: Any = hyper_field(0.0001, check=check_nonnegative)

  def __post_init__(self):
    if self.init_estim_sq_dist is None:
      # eps is then the initial squared distance too: it must be positive.
      check_positive(self.name, "eps (the default initial squared distance)", self.eps)

  def init_fn(self, params):
    stat = scalar_stat_dtype(params)
    initial = self.eps if self.init_estim_sq_dist is None else self.init_estim_sq_dist
    return DoWGState(
        init_params=copy_like(params),
        weighted_sq_norm_grads=jnp.zeros([], stat),
        estim_sq_dist=jnp.asarray(hyper(initial, stat)),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    stat = state.estim_sq_dist.dtype
    sq_dist, sq_grad = _distance_and_grad_norms(self.name, updates, state.init_params, params, stat)
    estim_sq_dist = jnp.maximum(state.estim_sq_dist, sq_dist)
    weighted = state.weighted_sq_norm_grads + estim_sq_dist * sq_grad
    step = estim_sq_dist / (jnp.sqrt(weighted) + hyper(self.eps, stat))
    return _scale(self, updates, step), DoWGState(
        init_params=state.init_params, weighted_sq_norm_grads=weighted, estim_sq_dist=estim_sq_dist)


def _check_init_step(owner: str, init_step: Any) -> tuple[str, Any]:
  if not isinstance(init_step, (tuple, list)) or len(init_step) != 2:
    raise ValueError(f"{owner}: init_step must be a pair (kind, value), got {init_step!r}.")
  kind, value = init_step
  if kind not in _INIT_STEP_TYPES:
    raise ValueError(f"{owner}: init_step[0] must be one of {_INIT_STEP_TYPES}, got {kind!r}.")
  check_positive(owner, "init_step[1]", value)
  return kind, value


@shared_args
def scale_by_dog(init_step: tuple[Literal["distance", "learning_rate", "heuristic"], ArrayLike], eps: ArrayLike = 1e-8) -> Transformation:
  """Scales updates by DoG's step size ``max_dist / sqrt(Σ ||g||^2 + eps)`` (no sign flip).

  Args:
    init_step: ``(kind, value)`` setting the first step: ``("distance", r)`` starts the maximal
      distance at ``r``; ``("heuristic", a)`` at ``a * (1 + ||x_0||)``; ``("learning_rate", lr)``
      uses ``lr`` as the first step size.
    eps: added to the sum of squared gradient norms.

  Returns:
    A transformation with ``DoGState``.

  References:
    Ivgi, Hinder & Carmon, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule",
    ICML 2023 (Eq. 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_dog(init_step=("distance", 0.5))
    >>> p = jnp.array([3.0, 4.0])
    >>> tx.update(p, tx.init(p), p)[0]  # 0.5 / ||g|| * g
    Array([0.3, 0.4], dtype=float32)
  """
  kind, value = _check_init_step("scale_by_dog", init_step)
  return ScaleByDoG(value, eps, init_step_type=kind)


@shared_args
def scale_by_dowg(init_estim_sq_dist: ArrayLike | None = None, eps: ArrayLike = 1e-4) -> Transformation:
  """Scales updates by DoWG's step size ``r̄^2 / (sqrt(Σ r̄^2 ||g||^2) + eps)`` (no sign flip).

  Args:
    init_estim_sq_dist: initial estimate of the squared distance to the solution (default ``eps``).
    eps: added to the denominator; also the default initial squared distance.

  Returns:
    A transformation with ``DoWGState``.

  References:
    Khaled, Mishchenko & Jin, "DoWG Unleashed: An Efficient Universal Parameter-Free Gradient
    Descent Method", NeurIPS 2023 (Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_dowg(init_estim_sq_dist=1.0, eps=0.0)
    >>> p = jnp.array([3.0, 4.0])
    >>> tx.update(p, tx.init(p), p)[0]  # 1 / ||g|| * g
    Array([0.6, 0.8], dtype=float32)
  """
  return ScaleByDoWG(init_estim_sq_dist, eps)


def _with_decay(owner: str, weight_decay: Any, mask: Any, core: Transformation, learning_rate: Any):
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  if weight_decay is not None:
    check_nonnegative(owner, "weight_decay", weight_decay)
  decay = add_decayed_weights(weight_decay, mask) if weight_decay is not None else identity()
  return chain(decay, core, scale_by_learning_rate(learning_rate))


@shared_args
def dog(
    learning_rate: ScalarOrSchedule = 1.0,
    init_step: tuple[Literal["distance", "learning_rate", "heuristic"], ArrayLike] = ("heuristic", 1e-6),
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike | None = None,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """Distance over Gradients: SGD with step size ``max_k ||x_k - x_0|| / sqrt(Σ_k ||g_k||^2)``.

  The step size grows while the iterates move away from ``x_0`` and shrinks with the accumulated
  gradient norms; no learning rate needs tuning (the authors recommend iterate averaging).

  Args:
    learning_rate: multiplier of DoG's step size (scalar or schedule), usually 1.
    init_step: ``(kind, value)``: ``("heuristic", a)`` (default) starts the maximal distance at
      ``a * (1 + ||x_0||)`` (``a`` = 1e-6, or 1e-4 with batch normalisation); ``("distance", r)`` at
      ``r``; ``("learning_rate", lr)`` takes ``lr`` as the first step size.
    eps: added to the sum of squared gradient norms.
    weight_decay: weight decay added to the gradients before DoG (None: none).
    mask: <shared>

  Returns:
    ``chain(add_decayed_weights or identity, scale_by_dog, scale_by_learning_rate)``, as in Optax.

  References:
    Ivgi, Hinder & Carmon, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule",
    ICML 2023.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.dog()
    >>> params = {"w": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update(params, state, params)
    >>> updates["w"].dtype, state[1].max_dist.dtype
    (dtype(bfloat16), dtype('float32'))
  """
  kind, value = _check_init_step("dog", init_step)
  check_nonnegative("dog", "eps", eps)  # named after the factory (the class check says scale_by_dog)
  return _with_decay("dog", weight_decay, mask, ScaleByDoG(value, eps, init_step_type=kind), learning_rate)


@shared_args
def dowg(
    learning_rate: ScalarOrSchedule = 1.0,
    init_estim_sq_dist: ArrayLike | None = None,
    eps: ArrayLike = 1e-4,
    weight_decay: ArrayLike | None = None,
    mask: Any | Callable[[Any], Any] | None = None,
) -> Transformation:
  """Distance over Weighted Gradients: DoG with gradient norms weighted by the squared distance.

  Args:
    learning_rate: multiplier of DoWG's step size (scalar or schedule), usually 1.
    init_estim_sq_dist: initial estimate of the squared distance to the solution (default ``eps``).
    eps: added to the denominator; also the default initial squared distance.
    weight_decay: weight decay added to the gradients before DoWG (None: none).
    mask: <shared>

  Returns:
    ``chain(add_decayed_weights or identity, scale_by_dowg, scale_by_learning_rate)``, as in Optax.

  References:
    Khaled, Mishchenko & Jin, "DoWG Unleashed: An Efficient Universal Parameter-Free Gradient
    Descent Method", NeurIPS 2023.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.dowg()
    >>> state = jax.eval_shape(opt.init, {"w": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2)})
    >>> state[1].estim_sq_dist.dtype
    dtype('float32')
  """
  core = scale_by_dowg(init_estim_sq_dist, eps)
  return _with_decay("dowg", weight_decay, mask, core, learning_rate)
