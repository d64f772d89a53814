"""Prodigy (Mishchenko & Defazio, "Prodigy: An Expeditiously Adaptive Parameter-Free Learner", 2023).

Adam whose step size is scaled by an estimate ``d`` of the distance to the solution:
``d_k = max(d_{k-1}, r_k / ||s_k||_1)`` with ``r_k`` the (β3-weighted) sum of
``d_i^2 <g_i, x_0 - x_i>`` and ``s_k`` the weighted sum of ``d_i^2 g_i`` (Algorithm 3 of the paper,
with Adam's bias correction folded into the step as in the reference implementation).

Scalar statistics (``estim_lr``, ``numerator_weighted``) take one dtype fixed at init: the widest
floating dtype among the parameters, at least float32. Optax 0.2.8 uses the lowest dtype (bfloat16
for mixed trees) and lets float32 inputs widen it under x64; steadax does neither.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range, check_schedule_or_scalar
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._leafwise import Scalars, tree_reduce
from .._core._policy import cast, hyper, reciprocal, scalar_sqrt, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, OTHER, SCALAR, accumulator, declared_roles, role_zeros, state_roles
from .._core._tree import copy_like
from .._core._types import Params, ScalarOrSchedule
from ..transforms._moments import abs_sq
from ..transforms._scaling import value_at
from ._reductions import real_inner

__all__ = ["ProdigyState", "prodigy"]


@state_roles(
    exp_avg=accumulator(wide=True),
    exp_avg_sq=accumulator(real=True, wide=True),
    grad_sum=accumulator(wide=True),
    params0=OTHER,
    estim_lr=SCALAR,
    numerator_weighted=SCALAR,
    count=COUNTER,
)
class ProdigyState(NamedTuple):
  """State of ``prodigy`` (Optax's field names).

  ``exp_avg``, ``exp_avg_sq`` and ``grad_sum`` are statistics of ``d * g`` with ``d`` starting at
  ``estim_lr0`` (1e-6): they are stored in at least float32 (in float16 they underflow and the
  first step overshoots). ``params0`` is a copy of the initial parameters in their dtype.

  Attributes:
    exp_avg: first moment of ``d * g``.
    exp_avg_sq: second moment of ``d * g``.
    grad_sum: the weighted sum of ``d * g``, the estimate's denominator.
    params0: the initial parameters.
    estim_lr: the current estimate ``d`` of the distance to the solution.
    numerator_weighted: the running numerator of the estimate.
    count: the number of updates so far (int32, saturating at its maximum).
  """

  exp_avg: Params
  exp_avg_sq: Params
  grad_sum: Params
  params0: Params
  estim_lr: jax.Array
  numerator_weighted: jax.Array
  count: jax.Array


def check_betas(owner: str, name: str, betas: Any) -> None:
  """Adam's ``(b1, b2)``: a pair, each in [0, 1)."""
  if not isinstance(betas, (tuple, list)) or len(betas) != 2:
    raise ValueError(f"{owner}: {name} must be a pair (b1, b2), got {betas!r}.")
  for i, beta in enumerate(betas):
    check_range(owner, f"{name}[{i}]", beta, 0.0, 1.0, high_open=True)


class Prodigy(Transformation):
  name = "prodigy"
  elementwise = True
  State = ProdigyState
  learning_rate: Any = hyper_field(1.0, check=check_schedule_or_scalar)
  betas: Any = hyper_field((0.9, 0.999), check=check_betas)
  beta3: Any = hyper_field(None)
  eps: Any = hyper_field(1e-08)
  estim_lr0: Any = hyper_field(1e-06, check=check_positive)
  estim_lr_coef: Any = hyper_field(1.0)
  weight_decay: Any = hyper_field(0.0, check=check_nonnegative)
  safeguard_warmup: bool = static_field(default=False)
  beta3_default: Any = derived_field(lambda t: scalar_sqrt(t.betas[1]) if t.beta3 is None else t.beta3)
  one_minus_b1: Any = derived_field(lambda t: 1 - t.betas[0])
  one_minus_b2: Any = derived_field(lambda t: 1 - t.betas[1])

  def init_fn(self, params):
    # params0 is a copy of the parameters and estim_lr starts at estim_lr0: built here, checked
    # against the roles.
    stat = scalar_stat_dtype(params)
    roles = declared_roles(ProdigyState)
    return ProdigyState(
        exp_avg=role_zeros(params, roles["exp_avg"], self),
        exp_avg_sq=role_zeros(params, roles["exp_avg_sq"], self),
        grad_sum=role_zeros(params, roles["grad_sum"], self),
        params0=copy_like(params),
        estim_lr=jnp.asarray(hyper(self.estim_lr0, stat)),
        numerator_weighted=jnp.zeros([], stat),
        count=zero_count(),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("prodigy: `params` must be passed to update().")
    stat = state.estim_lr.dtype
    beta1, beta2 = self.betas
    beta3 = derived(self, "beta3_default")
    d0 = self.estim_lr0
    count = safe_increment(state.count)
    sched = value_at(self.learning_rate, state.count)
    d = state.estim_lr
    with jax.numpy_dtype_promotion("standard"):  # Optax's arithmetic on the scalars, as written
      correction = ((1 - beta2**count) ** 0.5) / (1 - beta1**count)
      dlr = cast(d * sched * correction, stat)
    grad_weight = d if self.safeguard_warmup else dlr

    def leaf(k, g, m, v, s):
      dg = k.d * g
      m = k.b1 * m + k.one_minus_b1 * dg
      v = k.b2 * v + k.one_minus_b2 * dg * dg if not jnp.iscomplexobj(dg) else k.b2 * v + k.one_minus_b2 * abs_sq(dg)
      s = k.b3 * s + k.grad_weight * dg * k.inv_d0
      return g, m, v, s

    scalars = lambda dt: Scalars(
        b1=beta1, b2=beta2, b3=beta3, one_minus_b1=derived(self, "one_minus_b1"),
        one_minus_b2=derived(self, "one_minus_b2"), d=d, grad_weight=grad_weight, inv_d0=reciprocal(d0, dt))
    _, exp_avg, exp_avg_sq, grad_sum = self.leafwise(
        leaf, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum, params=params, scalars=scalars)
    # r_k: the inner product Re<g, x0 - x>, a whole-tree reduction in the statistics dtype.
    numerator_step = tree_reduce(lambda k, g, x0, x: real_inner(g, x0 - x), stat, updates, state.params0, params)
    with jax.numpy_dtype_promotion("standard"):
      numerator = cast(beta3 * state.numerator_weighted + (d * reciprocal(d0, stat)) * dlr * numerator_step, stat)
    # ||s_k||_1, a whole-tree reduction in the statistics dtype.
    denominator = tree_reduce(lambda k, s: jnp.sum(jnp.abs(s)), stat, grad_sum)
    safe_den = jnp.where(denominator > 0, denominator, jnp.ones_like(denominator))
    with jax.numpy_dtype_promotion("standard"):
      estimate = jnp.where(denominator > 0, cast(self.estim_lr_coef * numerator / safe_den, stat), d)
    new_d = jnp.maximum(d, estimate)

    # The step uses the new estimate in the denominator's eps (as the reference implementation and
    # Optax do) and the step size dlr of the previous one.
    def step(k, m, v, p):
      return (-k.wd) * k.dlr * p - k.dlr * m / (jnp.sqrt(v) + k.d_eps)

    out, = self.leafwise(step, exp_avg, params=params, reads=(exp_avg_sq, params),
                         scalars=Scalars(wd=self.weight_decay, dlr=dlr, d_eps=new_d * self.eps))
    return out, ProdigyState(exp_avg, exp_avg_sq, grad_sum, state.params0, new_d, numerator, count)


@shared_args
def prodigy(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[ArrayLike, ArrayLike] = (0.9, 0.999),
    beta3: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    estim_lr0: ArrayLike = 1e-6,
    estim_lr_coef: ArrayLike = 1.0,
    weight_decay: ArrayLike = 0.0,
    safeguard_warmup: bool = False,
) -> Transformation:
  """Prodigy: Adam with a learning rate estimated from the distance to the solution.

  Args:
    learning_rate: a multiplier of the estimated step size (scalar or schedule), usually 1.
    betas: Adam's ``(b1, b2)``.
    beta3: decay of the distance statistics (default ``sqrt(b2)``).
    eps: added to the denominator (scaled by the estimate).
    estim_lr0: initial distance estimate ``d_0``.
    estim_lr_coef: multiplier of the estimate.
    weight_decay: decoupled weight decay.
    safeguard_warmup: exclude the learning rate from the gradient-sum weights (for warm-up).

  Returns:
    A transformation with ``ProdigyState``; its scalar statistics have the widest floating dtype
    among the parameters (at least float32) in both x64 modes.

  References:
    Mishchenko & Defazio, "Prodigy: An Expeditiously Adaptive Parameter-Free Learner", ICML 2024.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.prodigy()
    >>> opt.init({"w": jnp.zeros(2, jnp.bfloat16)}).estim_lr.dtype
    dtype('float32')
  """
  check_betas("prodigy", "betas", betas)  # before tuple(): a bad value names the argument
  return Prodigy(learning_rate, tuple(betas), beta3, eps, estim_lr0, estim_lr_coef, weight_decay,
                 safeguard_warmup=safeguard_warmup)
