"""D-Adaptation for AdamW (Defazio & Mishchenko, "Learning-Rate-Free Learning by D-Adaptation", 2023).

AdamW whose step size is ``d_k * lr * sqrt(1 - b2^k) / (1 - b1^k)``, with ``d_k`` a non-decreasing
lower bound on the distance to the solution (Algorithm 4 of the paper, the Adam variant):

    s_k = sqrt(b2) s_{k-1} + (1 - sqrt(b2)) dlr_k g_k
    r_k = sqrt(b2) r_{k-1} + (1 - sqrt(b2)) dlr_k Re<g_k, s_{k-1} / (sqrt(v_{k-1}) + eps)>
    d_{k+1} = max(d_k, r_k / ((1 - sqrt(b2)) ||s_k||_1))

Scalar statistics (``estim_lr``, ``numerator_weighted``) take one dtype fixed at init: the widest
floating dtype among the parameters, at least float32. Optax 0.2.8 stores them in the lowest dtype
(bfloat16 in a mixed tree) and the first update turns them into float32, which ``lax.scan`` and
``apply_if_finite`` reject; steadax keeps them. A zero ``||s_k||_1`` (all gradients zero so far)
keeps ``d`` instead of dividing by zero.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_schedule_or_scalar
from .._core._leafwise import Scalars, tree_reduce
from .._core._module import derived, derived_field, hyper_field
from .._core._policy import cast, hyper, safe_increment, scalar_sqrt, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, SCALAR, accumulator, declared_roles, role_zeros, state_roles
from .._core._types import Params, ScalarOrSchedule
from ..transforms._moments import abs_sq
from ..transforms._scaling import value_at
from ._prodigy import check_betas
from ._reductions import real_inner

__all__ = ["DAdaptAdamWState", "dadapt_adamw"]


# ``exp_avg`` and ``grad_sum`` accumulate ``dlr * g`` with ``d`` starting at ``estim_lr0`` (1e-6), and
# ``s / sqrt(v)`` feeds the estimate of ``d``, so all three are stored in at least float32 (in
# float16, ``s`` and ``v`` underflow to zero for gradients of 1e-3 and the estimate of ``d`` explodes).
@state_roles(
    exp_avg=accumulator(wide=True),
    exp_avg_sq=accumulator(real=True, wide=True),
    grad_sum=accumulator(wide=True),
    estim_lr=SCALAR,
    numerator_weighted=SCALAR,
    count=COUNTER,
)
class DAdaptAdamWState(NamedTuple):
  """State of ``dadapt_adamw`` (Optax's field names).

  Attributes:
    exp_avg: first moment of ``dlr * g``, one leaf per parameter.
    exp_avg_sq: second moment of ``g`` (real for complex parameters).
    grad_sum: the weighted sum ``s`` of ``dlr * g``.
    estim_lr: the distance estimate ``d`` (scalar-statistics dtype).
    numerator_weighted: the weighted numerator ``r`` of the estimate (same dtype).
    count: int32 number of updates so far.
  """

  exp_avg: Params
  exp_avg_sq: Params
  grad_sum: Params
  estim_lr: jax.Array
  numerator_weighted: jax.Array
  count: jax.Array


def _safe_denominator(v: jax.Array, eps: Any) -> jax.Array:
  """``sqrt(v) + eps``, with 1 where it is 0: there every gradient so far was 0 (so are ``m`` and
  ``s``), and ``eps = 0`` must give a zero step instead of 0 / 0."""
  denominator = jnp.sqrt(v) + eps
  return jnp.where(denominator > 0, denominator, jnp.ones((), denominator.dtype))


class DAdaptAdamW(Transformation):
  name = "dadapt_adamw"
  elementwise = True
  State = DAdaptAdamWState
  learning_rate: Any = hyper_field(1.0, check=check_schedule_or_scalar)
  betas: Any = hyper_field((0.9, 0.999), check=check_betas)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  estim_lr0: Any = hyper_field(1e-06, check=check_positive)
  weight_decay: Any = hyper_field(0.0, check=check_nonnegative)
  one_minus_b1: Any = derived_field(lambda t: 1 - t.betas[0])
  one_minus_b2: Any = derived_field(lambda t: 1 - t.betas[1])
  sqrt_beta2: Any = derived_field(lambda t: scalar_sqrt(t.betas[1]))
  one_minus_sqrt_beta2: Any = derived_field(lambda t: 1 - scalar_sqrt(t.betas[1]))

  def init_fn(self, params):
    # estim_lr starts at estim_lr0 (not zero): built here, checked against the roles.
    stat = scalar_stat_dtype(params)
    roles = declared_roles(DAdaptAdamWState)
    return DAdaptAdamWState(
        exp_avg=role_zeros(params, roles["exp_avg"], self),
        exp_avg_sq=role_zeros(params, roles["exp_avg_sq"], self),
        grad_sum=role_zeros(params, roles["grad_sum"], self),
        estim_lr=jnp.asarray(hyper(self.estim_lr0, stat)),
        numerator_weighted=jnp.zeros([], stat),
        count=zero_count(),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("dadapt_adamw: `params` must be passed to update() (for the weight decay).")
    stat = state.estim_lr.dtype
    count = safe_increment(state.count)
    beta1, beta2 = self.betas
    sb2 = derived(self, "sqrt_beta2")  # the root of the Python number, as the reference takes it
    one_minus_sb2 = derived(self, "one_minus_sqrt_beta2")
    sched = value_at(self.learning_rate, state.count)
    d = state.estim_lr
    with jax.numpy_dtype_promotion("standard"):  # Optax's arithmetic on the scalars, as written
      correction = ((1 - beta2**count) ** 0.5) / (1 - beta1**count)
      dlr = cast(d * sched * correction, stat)

    # r's increment uses the statistics before this step (Algorithm 4 of the paper): a whole-tree
    # inner product, each leaf's term in its compute dtype and summed in the statistics dtype.
    numerator_step = tree_reduce(lambda k, g, v, s: real_inner(g, s / _safe_denominator(v, k.eps)), stat,
                                 updates, state.exp_avg_sq, state.grad_sum, scalars=Scalars(eps=self.eps))

    def leaf(k, g, m, v, s, p):
      m = k.b1 * m + k.one_minus_b1 * k.dlr * g
      v = k.b2 * v + (k.one_minus_b2 * g * g if not jnp.iscomplexobj(g) else k.one_minus_b2 * abs_sq(g))
      s = k.sb2 * s + k.one_minus_sb2 * k.dlr * g
      return (-k.wd) * k.dlr * p - m / _safe_denominator(v, k.eps), m, v, s

    scalars = Scalars(b1=beta1, one_minus_b1=derived(self, "one_minus_b1"), b2=beta2,
                      one_minus_b2=derived(self, "one_minus_b2"), sb2=sb2, one_minus_sb2=one_minus_sb2,
                      dlr=dlr, eps=self.eps, wd=self.weight_decay)
    out, exp_avg, exp_avg_sq, grad_sum = self.leafwise(
        leaf, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum, params=params,
        reads=(params,), scalars=scalars)
    # ||s_k||_1: a whole-tree reduction in the statistics dtype.
    l1 = tree_reduce(lambda k, s: jnp.sum(jnp.abs(s)), stat, grad_sum)
    with jax.numpy_dtype_promotion("standard"):
      numerator = cast(sb2 * state.numerator_weighted + one_minus_sb2 * dlr * numerator_step, stat)
      denominator = cast(one_minus_sb2 * l1, stat)
    positive = denominator > 0
    estimate = numerator / jnp.where(positive, denominator, np.ones((), stat))
    estim_lr = jnp.where(positive, jnp.maximum(d, estimate), d)
    return out, DAdaptAdamWState(exp_avg, exp_avg_sq, grad_sum, estim_lr, numerator, count)


@shared_args
def dadapt_adamw(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[ArrayLike, ArrayLike] = (0.9, 0.999),
    eps: ArrayLike = 1e-8,
    estim_lr0: ArrayLike = 1e-6,
    weight_decay: ArrayLike = 0.0,
) -> Transformation:
  """AdamW with its step size set by D-Adaptation (an estimate of the distance to the solution).

  The effective learning rate is ``d * learning_rate`` with ``d`` grown from ``estim_lr0`` by the
  D-Adaptation lower bound; ``learning_rate`` is a multiplier (1, or a schedule peaking at 1).

  Args:
    learning_rate: multiplier of the estimated step size (scalar or schedule of the count).
    betas: Adam's ``(b1, b2)``, each in [0, 1).
    eps: added to the square root of the second moment.
    estim_lr0: the initial (under-)estimate ``d_0`` of the distance, positive.
    weight_decay: decoupled weight decay, scaled by the effective step size.

  Returns:
    A transformation with ``DAdaptAdamWState``; ``estim_lr`` and ``numerator_weighted`` have the
    widest floating dtype among the parameters (at least float32) in both x64 modes.

  References:
    Defazio & Mishchenko, "Learning-Rate-Free Learning by D-Adaptation", ICML 2023 (Algorithm 4).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.dadapt_adamw()
    >>> params = {"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(1)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update(params, state, params)
    >>> updates["w"].dtype, state.estim_lr.dtype
    (dtype(bfloat16), dtype('float32'))
  """
  check_betas("dadapt_adamw", "betas", betas)  # before tuple(): a bad value names the argument
  return DAdaptAdamW(learning_rate, tuple(betas), eps, estim_lr0, weight_decay)
