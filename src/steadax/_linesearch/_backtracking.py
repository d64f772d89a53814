"""Backtracking (Armijo) line search.

Starting from ``min(increase_factor * previous step, max_learning_rate)``, the step is multiplied by
``decrease_factor`` until the sufficient decrease (Armijo) condition holds (Nocedal & Wright,
"Numerical Optimization", 2nd ed., Alg. 3.1 and Eq. 3.4).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range
from .._core._module import hyper_field, static_field
from .._core._policy import hyper, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, OTHER, SCALAR, accumulator, state_roles
from .._core._tree import cast_like, zeros_like
from ._common import (
    add_scaled,
    as_stat,
    check_extra_args,
    check_same_structure,
    errors_to_inf,
    print_if,
    real_vdot,
    scale_tree,
    value_fn_kwargs,
)
from .._core._types import Params

__all__ = [
    "BacktrackingLinesearchInfo",
    "ScaleByBacktrackingLinesearchState",
    "scale_by_backtracking_linesearch",
]


@state_roles(num_linesearch_steps=COUNTER, decrease_error=SCALAR)
class BacktrackingLinesearchInfo(NamedTuple):
  """Diagnostics of the last backtracking search.

  Attributes:
    num_linesearch_steps: int32 number of objective evaluations of the last search.
    decrease_error: how much the returned step misses the sufficient decrease condition (0 when it
      holds, +inf when every trial step gave a non-finite value and no step was taken).
  """

  num_linesearch_steps: jax.Array
  decrease_error: jax.Array


# grad: mirrors the parameters when store_grad, else None (an accumulator holding nothing).
@state_roles(learning_rate=SCALAR, value=SCALAR, grad=accumulator(), info=OTHER)
class ScaleByBacktrackingLinesearchState(NamedTuple):
  """State of ``scale_by_backtracking_linesearch`` (Optax's field names).

  Attributes:
    learning_rate: the step size found by the last search (the next search starts near it).
    value: the objective at the returned step (reused by ``value_and_grad_from_state``).
    grad: the gradient there (JAX's convention) when ``store_grad=True``, else None.
    info: ``BacktrackingLinesearchInfo``.
  """

  learning_rate: jax.Array
  value: jax.Array
  grad: Params | None
  info: BacktrackingLinesearchInfo


@state_roles(learning_rate=SCALAR, new_value=SCALAR, new_grad=OTHER, decrease_error=SCALAR,
             iter_num=COUNTER)
class BacktrackingLineSearchState(NamedTuple):
  """The carry of the search loop (internal; Optax's name)."""

  learning_rate: jax.Array
  new_value: jax.Array
  new_grad: Any
  decrease_error: jax.Array
  iter_num: jax.Array


class ScaleByBacktrackingLinesearch(Transformation):
  # The search evaluates value_fn at params + step * updates and differentiates it: integer leaves
  # have no such step (Optax fails inside jax.grad); they are refused at init with their path.
  requires_float = True
  name = "scale_by_backtracking_linesearch"
  State = ScaleByBacktrackingLinesearchState
  max_backtracking_steps: Any = hyper_field()
  slope_rtol: Any = hyper_field(0.0001)
  decrease_factor: Any = hyper_field(0.8)
  increase_factor: Any = hyper_field(1.5)
  max_learning_rate: Any = hyper_field(1.0)
  atol: Any = hyper_field(0.0)
  rtol: Any = hyper_field(0.0)
  store_grad: bool = static_field(default=False)
  verbose: bool = static_field(default=False)

  def init_fn(self, params):
    stat = scalar_stat_dtype(params)
    return ScaleByBacktrackingLinesearchState(
        learning_rate=jnp.ones([], stat),
        value=jnp.full([], jnp.inf, stat),
        grad=zeros_like(params) if self.store_grad else None,
        info=BacktrackingLinesearchInfo(
            num_linesearch_steps=zero_count(), decrease_error=jnp.full([], jnp.inf, stat)),
    )

  def update_fn(self, updates, state, params=None, *, value=None, grad=None, value_fn=None,
                **extra_args):
    check_extra_args(self.owner, params, value, grad, value_fn)
    assert value_fn is not None  # check_extra_args raised otherwise
    check_same_structure(self.owner, "grad", grad, updates)
    stat = state.learning_rate.dtype
    fn_kwargs = value_fn_kwargs(value_fn, extra_args)
    value = as_stat(self.owner, "value", value, stat)
    slope = real_vdot(updates, grad, stat)
    c1, rtol, atol = hyper(self.slope_rtol, stat), hyper(self.rtol, stat), hyper(self.atol, stat)
    shrink = hyper(self.decrease_factor, stat)
    max_steps = hyper(self.max_backtracking_steps, jnp.int32)

    def trial_value(stepsize):
      out = value_fn(add_scaled(params, stepsize, updates), **fn_kwargs)
      return as_stat(self.owner, "value_fn(params)", out, stat)

    def decrease_error(stepsize, new_value):
      # Armijo with slack: f(w + t u) <= (1 + rtol) f(w) + c1 t <u, grad> (+ atol, in cond below).
      return errors_to_inf(new_value - (1 + rtol) * value - stepsize * c1 * slope)

    def keep_going(carry):
      return ~(carry.decrease_error <= atol) & (carry.iter_num <= max_steps)

    def body(carry):
      stepsize = jnp.where(carry.iter_num > 0, shrink * carry.learning_rate, carry.learning_rate)
      new_value = trial_value(stepsize)
      return BacktrackingLineSearchState(
          learning_rate=stepsize,
          new_value=new_value,
          new_grad=None,
          decrease_error=decrease_error(stepsize, new_value),
          iter_num=safe_increment(carry.iter_num),
      )

    guess = jnp.minimum(hyper(self.increase_factor, stat) * state.learning_rate,
                        hyper(self.max_learning_rate, stat))
    start = BacktrackingLineSearchState(
        learning_rate=guess, new_value=value, new_grad=None,
        decrease_error=jnp.full([], jnp.inf, stat), iter_num=zero_count())
    final = jax.lax.while_loop(keep_going, body, start)

    # Every trial left the domain (inf/NaN values): take no step rather than a poisoned one.
    stepsize = jnp.where(jnp.isinf(final.decrease_error), jnp.zeros_like(final.learning_rate),
                         final.learning_rate)
    new_grad = None
    if self.store_grad:
      # One gradient at the accepted point, after the loop: each trial costs a forward pass only.
      at = add_scaled(params, final.learning_rate, updates)
      new_grad = cast_like(jax.grad(lambda p: value_fn(p, **fn_kwargs))(at), state.grad)
    if self.verbose:
      # Optax's report, line for line (its "sufficent" spelled right), read by users and notebooks.
      print_if(final.decrease_error > atol,
               "INFO: optax.scale_by_backtracking_linesearch:\n"
               "Backtracking linesearch failed to find a stepsize ensuring sufficient decrease.\n"
               "Value at current params: {value},\n"
               "Slope along update direction: {slope}\n"
               "Stepsize: {stepsize}\n"
               "Decrease Error: {decrease_error}",
               value=value, slope=slope, stepsize=final.learning_rate, decrease_error=final.decrease_error)
      print_if(jnp.isinf(final.decrease_error), "Using a stepsize of 0 to avoid infinite or nan values.")
    new_state = ScaleByBacktrackingLinesearchState(
        learning_rate=stepsize,
        value=final.new_value,
        grad=new_grad,
        info=BacktrackingLinesearchInfo(final.iter_num, final.decrease_error),
    )
    return scale_tree(self.owner, stepsize, updates), new_state


@shared_args
def scale_by_backtracking_linesearch(
    max_backtracking_steps: ArrayLike,
    slope_rtol: ArrayLike = 1e-4,
    decrease_factor: ArrayLike = 0.8,
    increase_factor: ArrayLike = 1.5,
    max_learning_rate: ArrayLike = 1.0,
    atol: ArrayLike = 0.0,
    rtol: ArrayLike = 0.0,
    store_grad: bool = False,
    verbose: bool = False,
) -> Transformation:
  """Scales the updates by a step size satisfying the sufficient decrease (Armijo) condition.

  Finds ``eta`` with ``f(w + eta u) <= (1 + rtol) f(w) + slope_rtol * eta * <u, grad f(w)> + atol``
  by backtracking: the first trial is ``min(increase_factor * previous eta, max_learning_rate)``,
  each next one ``decrease_factor`` times smaller. ``u`` must be a descent direction (``sgd``'s
  updates are; ``adam``'s need not be). If every trial gives a non-finite value the step is 0.

  ``update`` needs the keyword arguments ``value`` (f at params), ``grad`` (its gradient, conjugated
  for complex parameters like any gradient) and ``value_fn``; other extras whose names ``value_fn``
  accepts (a data batch) are passed on to it. The slope and every statistic use the state's scalar
  dtype (the widest floating dtype among the params, at least float32); the step counter is int32.

  Args:
    max_backtracking_steps: the most step-size reductions per search (a leaf: no recompiles).
    slope_rtol: the Armijo constant ``c1`` in (0, 1).
    decrease_factor: the reduction factor in (0, 1).
    increase_factor: growth of the first trial over the previous step size (``1`` keeps it,
      ``math.inf`` restarts from ``max_learning_rate`` each time; positive, and below 1 it shrinks
      the first trial, as in Optax).
    max_learning_rate: the largest step size tried.
    atol: absolute slack of the condition.
    rtol: relative slack of the condition (relative to ``f(w)``).
    store_grad: also compute the gradient at the accepted point and store it in the state (for
      ``value_and_grad_from_state``); costs one gradient evaluation per step.
    verbose: print a diagnostic when no step size satisfies the condition.

  Returns:
    A transformation with ``ScaleByBacktrackingLinesearchState``.

  References:
    Nocedal & Wright, "Numerical Optimization" (2nd ed.), 2006, Alg. 3.1 and Eq. 3.4;
    Vaswani et al., "Painless Stochastic Gradient", NeurIPS 2019.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> def f(w): return jnp.sum((w - 1.0) ** 2)
    >>> opt = steadax.chain(steadax.sgd(1.0), steadax.scale_by_backtracking_linesearch(15))
    >>> w = jnp.zeros(3); state = opt.init(w)
    >>> value, grad = jax.value_and_grad(f)(w)
    >>> updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
    >>> bool(f(steadax.apply_updates(w, updates)) < value)
    True
  """
  owner = "scale_by_backtracking_linesearch"
  check_nonnegative(owner, "max_backtracking_steps", max_backtracking_steps)
  check_range(owner, "slope_rtol", slope_rtol, 0.0, 1.0, high_open=True)
  check_range(owner, "decrease_factor", decrease_factor, 0.0, 1.0, low_open=True, high_open=True)
  check_positive(owner, "increase_factor", increase_factor)  # below 1 shrinks the first trial (Optax)
  check_positive(owner, "max_learning_rate", max_learning_rate)
  check_nonnegative(owner, "atol", atol)
  check_nonnegative(owner, "rtol", rtol)
  return ScaleByBacktrackingLinesearch(
      max_backtracking_steps, slope_rtol, decrease_factor, increase_factor, max_learning_rate,
      atol, rtol, store_grad=store_grad, verbose=verbose)
