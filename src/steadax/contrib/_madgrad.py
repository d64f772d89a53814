"""MADGRAD (Defazio & Jelassi, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual
Averaged Gradient Method for Stochastic Optimization", JMLR 2022).

Dual averaging with a cube-root AdaGrad denominator and momentum by averaging the iterates
(Algorithm 1 of the paper), with ``λ_k = (lr + eps) sqrt(k + 1)``:

    s_k = s_{k-1} + λ_k g_k,    v_k = v_{k-1} + λ_k |g_k|^2,    z = x_0 - s_k / (v_k^(1/3) + eps),
    x_{k+1} = (1 - c) z + c x_k         (c = ``momentum``).

The block includes the learning rate and returns ``x_{k+1} - x_k``, as in Optax. ``grad_sum_sq`` is
real for complex parameters; the stored initial point ``x0`` is a copy, so parameters and state can
both be donated.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._transformation import Transformation
from .._core._checks import check_decay, check_nonnegative, check_range, check_schedule_or_scalar
from .._core._combine import chain
from .._core._leafwise import Scalars
from .._core._module import derived, derived_field, hyper_field
from .._core._policy import safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, state_roles
from .._core._tree import copy_like, zeros_like
from .._core._types import Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._moments import abs_sq
from ..transforms._scaling import value_at

__all__ = ["MadgradState", "scale_by_madgrad", "madgrad"]


@state_roles(count=COUNTER, grad_sum_sq=accumulator(real=True), s=accumulator(), x0=OTHER)
class MadgradState(NamedTuple):
  """State of ``scale_by_madgrad`` (Optax's field names).

  Attributes:
    count: int32 number of updates so far.
    grad_sum_sq: ``Σ λ_k |g_k|^2`` (real for complex parameters).
    s: ``Σ λ_k g_k``.
    x0: the initial parameters.
  """

  count: jax.Array
  grad_sum_sq: Params
  s: Params
  x0: Params


class ScaleByMadgrad(Transformation):
  name = "scale_by_madgrad"
  elementwise = True
  State = MadgradState
  learning_rate: Any = hyper_field(check=check_schedule_or_scalar)
  momentum: Any = hyper_field(0.9, check=check_decay)
  eps: Any = hyper_field(1e-06, check=check_nonnegative)
  lr_stable: Any = derived_field(lambda t: t.learning_rate + t.eps)
  one_minus_momentum: Any = derived_field(lambda t: 1 - t.momentum)

  def init_fn(self, params):
    # x0 is a copy of the parameters (not zeros), so the state is built here; the roles check it.
    return MadgradState(count=zero_count(), grad_sum_sq=zeros_like(params, real=True), s=zeros_like(params),
                        x0=copy_like(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("scale_by_madgrad: `params` must be passed to update() (the step is x_{k+1} - x_k).")
    lr = value_at(self.learning_rate, state.count)

    # λ_k = (lr + eps) sqrt(k + 1), with k the number of previous steps (Algorithm 1), as Optax
    # computes it: lr + eps from the numbers, times the float32 root of the int32 k + 1.
    lr_stable = lr + self.eps if callable(self.learning_rate) else derived(self, "lr_stable")
    with jax.numpy_dtype_promotion("standard"):
      lamb = lr_stable * jnp.sqrt(state.count + 1)
    scalars = Scalars(lamb=lamb, eps=self.eps, c=self.momentum, one_minus_c=derived(self, "one_minus_momentum"))

    def leaf(k, g, v, s, x0, x):
      v = v + k.lamb * abs_sq(g)
      s = s + k.lamb * g
      z = x0 - s / (jnp.cbrt(v) + k.eps)
      x_new = k.one_minus_c * z + k.c * x
      return x_new - x, v, s

    out, grad_sum_sq, s = self.leafwise(leaf, updates, state.grad_sum_sq, state.s, params=params,
                                        reads=(state.x0, params), scalars=scalars)
    return out, MadgradState(count=safe_increment(state.count), grad_sum_sq=grad_sum_sq, s=s, x0=state.x0)


def _check(owner: str, learning_rate: Any, momentum: Any, eps: Any) -> None:
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  check_range(owner, "momentum", momentum, 0.0, 1.0)
  check_nonnegative(owner, "eps", eps)


@shared_args
def scale_by_madgrad(learning_rate: ScalarOrSchedule, momentum: float = 0.9, eps: float = 1e-6) -> Transformation:
  """MADGRAD's step ``x_{k+1} - x_k`` (learning rate included; no sign flip needed).

  Args:
    learning_rate: a scalar or a schedule (it weights the gradients in the dual averages).
    momentum: iterate-averaging weight ``c`` in ``x_{k+1} = (1 - c) z + c x_k``, in [0, 1].
    eps: added to the learning rate and to the cube-root denominator.

  Returns:
    A transformation with ``MadgradState(count, grad_sum_sq, s, x0)``; ``update`` needs ``params``.

  References:
    Defazio & Jelassi, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual Averaged
    Gradient Method for Stochastic Optimization", JMLR 2022 (arXiv:2101.11075, Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_madgrad(1.0, momentum=0.0, eps=0.0)
    >>> p = jnp.array([1.0])
    >>> tx.update(jnp.array([8.0]), tx.init(p), p)[0]  # x0 - 8 / 64^(1/3) - x
    Array([-2.], dtype=float32)
  """
  return ScaleByMadgrad(learning_rate, momentum, eps)


@shared_args
def madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    eps: float = 1e-6,
) -> Transformation:
  """MADGRAD: momentumized dual averaging with a cube-root adaptive denominator.

  Args:
    learning_rate: <shared>
    momentum: iterate-averaging weight in [0, 1].
    weight_decay: weight decay added to the gradients before the dual averages.
    eps: added to the learning rate and to the denominator.

  Returns:
    ``chain(add_decayed_weights, scale_by_madgrad)``, as in Optax.

  References:
    Defazio & Jelassi, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual Averaged
    Gradient Method for Stochastic Optimization", JMLR 2022 (arXiv:2101.11075).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.madgrad(0.01)
    >>> state = jax.eval_shape(opt.init, {"w": jnp.zeros(2, jnp.complex64)})
    >>> state[1].grad_sum_sq["w"].dtype, state[1].s["w"].dtype
    (dtype('float32'), dtype('complex64'))
  """
  _check("madgrad", learning_rate, momentum, eps)  # named after the factory (the class says scale_by_madgrad)
  check_nonnegative("madgrad", "weight_decay", weight_decay)
  return chain(add_decayed_weights(weight_decay), ScaleByMadgrad(learning_rate, momentum, eps))
