"""Schedule-free learning (Defazio et al., "The Road Less Scheduled", NeurIPS 2024).

The user's parameters are the gradient-evaluation point ``y``; the state holds the base sequence
``z``. One step, for a base optimizer giving ``Δ`` and the weight ``c = γ_max^p / Σ γ_max^p``:

    z' = z + Δ,    x = (y - (1 - β) z) / β,    x' = (1 - c) x + c z',    y' = β x' + (1 - β) z'.

Unlike Optax 0.2.8, the step count starts at 0, so a schedule is evaluated at the same count as in
the base optimizer (Optax PR 1744); scalar state takes one dtype fixed at init (the widest floating
dtype among the params, at least float32), so bfloat16 params cannot make ``lax.cond`` branches
disagree.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._adapters import as_inner
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._checks import check_range, check_schedule_or_scalar
from .._core._combine import chain
from .._core._leafwise import Scalars, leafwise
from .._core._module import child_field, derived, derived_field, hyper_field, static_field
from .._core._policy import hyper, reciprocal, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, INNER, SCALAR, accumulator, state_roles
from .._core._tree import copy_like
from .._core._types import OptState, Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..schedules import warmup_constant_schedule
from ..transforms import add_decayed_weights, scale_by_learning_rate, scale_by_rms
from ..transforms._scaling import value_at

__all__ = [
    "ScheduleFreeState",
    "schedule_free",
    "schedule_free_adamw",
    "schedule_free_sgd",
    "schedule_free_eval_params",
]


@state_roles(b1=SCALAR, weight_sum=SCALAR, step_count=COUNTER, max_lr=SCALAR, base_optimizer_state=INNER,
             z=accumulator("state_dtype"))
class ScheduleFreeState(NamedTuple):
  """State of ``schedule_free`` (Optax's field names).

  Attributes:
    b1: the interpolation coefficient β (kept for ``schedule_free_eval_params``).
    weight_sum: Σ of the averaging weights so far.
    step_count: int32 number of updates so far (starts at 0).
    max_lr: the largest learning rate seen.
    base_optimizer_state: the base optimizer's state.
    z: the base sequence, one leaf per parameter.
  """

  b1: jax.Array
  weight_sum: jax.Array
  step_count: jax.Array
  max_lr: jax.Array
  base_optimizer_state: Params
  z: Params


def _check_b1(owner: str, name: str, value: Any) -> None:
  """The interpolation coefficient lies in (0, 1] (x is recovered by dividing by it)."""
  check_range(owner, name, value, 0.0, 1.0, low_open=True)


def _evaluation_point(k: Scalars, y: jax.Array, z: jax.Array) -> jax.Array:
  """``x = (y - (1 - β) z) / β``: the averaged sequence, from the gradient point and the base one."""
  return (y - (1 - k.b1) * z) / k.b1


class ScheduleFree(Transformation):
  name = "schedule_free"
  elementwise = "children"
  State = ScheduleFreeState
  base_optimizer: Any = child_field()
  learning_rate: Any = hyper_field(check=check_schedule_or_scalar)
  b1: Any = hyper_field(0.9, check=_check_b1)
  # An exponent, static as in Optax's closure: XLA compiles a power by a constant 2 as a square.
  weight_lr_power: Any = static_field(2.0)
  state_dtype: Any = static_field(default=None)
  one_minus_b1: Any = derived_field(lambda t: 1.0 - t.b1)

  def init_fn(self, params):
    # z starts at a copy of the parameters (so params and z can both be donated to a jitted step)
    # and b1 holds the hyperparameter: built here, checked against the roles.
    stat = scalar_stat_dtype(params)
    return ScheduleFreeState(
        b1=jnp.asarray(hyper(self.b1, stat)),
        weight_sum=jnp.zeros([], stat),
        step_count=zero_count(),
        max_lr=jnp.zeros([], stat),
        base_optimizer_state=self.base_optimizer.init(params),
        z=copy_like(params, self.state_dtype),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("schedule_free: `params` must be passed to update().")
    stat = state.max_lr.dtype
    # The schedule at step_count (from 0: Optax 0.2.8 starts at 1 and skips the schedule's first
    # value, fixed in Optax PR 1744), then Optax's arithmetic: the weight max_lr ** power.
    max_lr = jnp.maximum(state.max_lr, hyper(value_at(self.learning_rate, state.step_count), stat))
    with jax.numpy_dtype_promotion("standard"):
      weight = max_lr ** self.weight_lr_power
    total = state.weight_sum + weight
    # c = weight / total, 0 while every learning rate so far was 0 (warm-up from 0).
    ck = jnp.where(total > 0, weight / jnp.where(total > 0, total, jnp.ones_like(total)), jnp.zeros_like(total))
    base_updates, base_state = self.base_optimizer.update(
        updates, state.base_optimizer_state, params, **extra_args)

    def leaf(k, u, z, y):
      # Algorithm 1: z' = z + Δ, x' = (1 - c) x + c z', y' = β x' + (1 - β) z'; the update is y' - y.
      z_new = z + u
      x = (y - k.one_minus_b1 * z) * k.inv_b1
      x = (1 - k.c) * x + k.c * z_new
      return k.b1 * x + k.one_minus_b1 * z_new - y, z_new

    scalars = lambda dt: Scalars(b1=self.b1, one_minus_b1=derived(self, "one_minus_b1"),
                                 inv_b1=reciprocal(self.b1, dt), c=ck)
    out, z = self.leafwise(leaf, base_updates, state.z, params=params, reads=(params,), scalars=scalars)
    return out, ScheduleFreeState(
        b1=state.b1, weight_sum=total, step_count=safe_increment(state.step_count),
        max_lr=max_lr, base_optimizer_state=base_state, z=z)


@shared_args
def schedule_free(
    base_optimizer: GradientTransformation,
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DTypeLike | None = None,
) -> Transformation:
  """Turns ``base_optimizer`` into its schedule-free version (Defazio et al. 2024, Alg. 1).

  Evaluate the model at ``schedule_free_eval_params(state, params)`` (the averaged sequence ``x``).

  Args:
    base_optimizer: the optimizer producing the ``z`` steps (its learning rate included).
    learning_rate: the same learning rate (scalar or schedule), used for the averaging weights.
    b1: interpolation between ``x`` and ``z`` for the gradient point (momentum-like), in (0, 1].
    weight_lr_power: the power of the learning rate in the averaging weights.
    state_dtype: dtype of ``z`` (default: each parameter's dtype).

  Returns:
    A transformation with ``ScheduleFreeState``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.schedule_free(steadax.sgd(0.5), learning_rate=0.5)
    >>> p = jnp.array([1.0]); s = opt.init(p)
    >>> u, s = opt.update(2 * p, s, p); p = steadax.apply_updates(p, u)
    >>> steadax.contrib.schedule_free_eval_params(s, p)
    Array([0.], dtype=float32)
  """
  return ScheduleFree(as_inner(base_optimizer, "schedule_free", "base_optimizer"), learning_rate,
                      b1, weight_lr_power, state_dtype=state_dtype)


def _warmup(learning_rate: Any, warmup_steps: int | None) -> ScalarOrSchedule:
  if warmup_steps is None:
    return learning_rate
  return warmup_constant_schedule(init_value=0.0, peak_value=learning_rate, warmup_steps=warmup_steps)


@shared_args
def schedule_free_adamw(
    learning_rate: ArrayLike = 0.0025,
    warmup_steps: int | None = None,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 0.0,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DTypeLike | None = None,
) -> Transformation:
  """Schedule-free AdamW: schedule_free around Adam without momentum (RMS scaling), weight decay.

  Args:
    learning_rate: peak learning rate.
    warmup_steps: linear warm-up from 0 over this many steps (None: no warm-up).
    b1: schedule-free interpolation coefficient.
    b2: <shared>
    eps: <shared>
    weight_decay: decoupled weight decay.
    weight_lr_power: the power of the learning rate in the averaging weights.
    state_dtype: dtype of ``z``.

  Returns:
    The optimizer.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.schedule_free_adamw(0.1, warmup_steps=10)
    >>> opt.init(jnp.zeros(2)).step_count
    Array(0, dtype=int32)
  """
  lr = _warmup(learning_rate, warmup_steps)
  base = chain(
      scale_by_rms(decay=b2, eps=eps, eps_in_sqrt=False, bias_correction=True),
      add_decayed_weights(weight_decay),
      scale_by_learning_rate(lr),
  )
  return schedule_free(base, learning_rate=lr, b1=b1, weight_lr_power=weight_lr_power,
                       state_dtype=state_dtype)


@shared_args
def schedule_free_sgd(
    learning_rate: ArrayLike = 1.0,
    warmup_steps: int | None = None,
    b1: ArrayLike = 0.9,
    weight_decay: ArrayLike | None = None,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DTypeLike | None = None,
) -> Transformation:
  """Schedule-free SGD (Defazio et al. 2024).

  Args:
    learning_rate: peak learning rate.
    warmup_steps: linear warm-up from 0 over this many steps (None: no warm-up).
    b1: schedule-free interpolation coefficient.
    weight_decay: decoupled weight decay (None: none).
    weight_lr_power: the power of the learning rate in the averaging weights.
    state_dtype: dtype of ``z``.

  Returns:
    The optimizer.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.schedule_free_sgd(0.1)
    >>> opt.init(jnp.zeros(2)).z
    Array([0., 0.], dtype=float32)
  """
  lr = _warmup(learning_rate, warmup_steps)
  parts = [add_decayed_weights(weight_decay)] if weight_decay is not None else []
  base = chain(*parts, scale_by_learning_rate(lr))
  return schedule_free(base, learning_rate=lr, b1=b1, weight_lr_power=weight_lr_power,
                       state_dtype=state_dtype)


def _find_schedule_free_state(state):
  if isinstance(state, ScheduleFreeState):
    return state
  if isinstance(state, (tuple, list)):
    for s in state:
      found = _find_schedule_free_state(s)
      if found is not None:
        return found
  if isinstance(state, dict):
    for s in state.values():
      found = _find_schedule_free_state(s)
      if found is not None:
        return found
  for name in ("inner_state", "inner_opt_state", "base_optimizer_state"):
    if hasattr(state, name):
      found = _find_schedule_free_state(getattr(state, name))
      if found is not None:
        return found
  return None


def schedule_free_eval_params(state: OptState, params: Params) -> Any:
  """The averaged parameters ``x = (y - (1 - β) z) / β`` to evaluate a schedule-free model with.

  Args:
    state: a ``ScheduleFreeState``, or a state containing one (inside chain or MultiSteps).
    params: the current parameters ``y``.

  Returns:
    The evaluation parameters, each in its parameter's dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.schedule_free_sgd(0.1)
    >>> p = jnp.ones(2)
    >>> steadax.contrib.schedule_free_eval_params(opt.init(p), p)
    Array([1., 1.], dtype=float32)
  """
  sf = _find_schedule_free_state(state)
  if sf is None:
    raise ValueError("schedule_free_eval_params: `state` holds no ScheduleFreeState.")

  return leafwise("schedule_free_eval_params", lambda k, y, z: _evaluation_point(k, y, z), params,
                  reads=(sf.z,), scalars=Scalars(b1=sf.b1))[0]

