"""Gradient accumulation: MultiSteps (with skip functions) and apply_every."""

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._checks import check_schedule_output
from .._core._leafwise import Scalars, saturating_cast
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import COUNTER_DTYPE, hyper, safe_increment, zero_count
from .._core._roles import COUNTER, INNER, OTHER, accumulator, state_roles
from .._core._tree import cast_like, zeros_like
from ._branching import (
    check_predicate,
    count_not_finite,
    pinned_state,
    pinned_updates,
    strong,
    sum_of_squares,
    zero_updates,
)
from .._core._types import OptState, Params, Schedule, Updates

__all__ = [
    "ShouldSkipUpdateFunction",
    "skip_not_finite",
    "skip_large_updates",
    "MultiStepsState",
    "MultiSteps",
    "ApplyEvery",
    "apply_every",
]


def _concrete_or_none(schedule: Callable, step: int) -> Any:
  """``schedule(step)`` computed eagerly, or None when it cannot be (it needs a traced step)."""
  try:
    return np.asarray(schedule(jnp.asarray(step, COUNTER_DTYPE)))
  except Exception:  # noqa: BLE001 - checked when it runs instead
    return None


def _check_k(what: str, k: Any) -> None:
  if k is not None and np.ndim(k) == 0 and np.asarray(k) < 1:
    raise ValueError(
        f"{what} returned {np.asarray(k).item()}; the number of mini-steps per update must be at "
        "least 1.")


def _check_constant_k(owner: str, name: str, k: Any) -> None:
  if k is not None and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
    raise ValueError(f"{owner}: every_k_schedule must be at least 1, got {k!r}.")


class ShouldSkipUpdateFunction(Protocol):
  """``fn(updates, gradient_step, params) -> (should_skip, skip_state)`` for ``MultiSteps``.

  ``should_skip`` is a boolean scalar; ``skip_state`` is any tree of arrays, stored in
  ``MultiStepsState.skip_state`` for monitoring. The function is called at ``init`` too (with zero
  updates), which fixes the skip state's types.
  """

  def __call__(self, updates: Any, gradient_step: jax.Array, params: Any) -> tuple[jax.Array, Any]:
    ...


def skip_not_finite(updates: Updates, gradient_step: ArrayLike, params: Params | None) -> tuple[jax.Array, dict]:
  """Skips a mini-step whose updates hold a NaN or an infinity.

  Args:
    updates: the updates of the mini-step.
    gradient_step: the gradient step (unused).
    params: the parameters (unused).

  Returns:
    ``(should_skip, {"should_skip": should_skip, "num_not_finite": count})``: a bool scalar and the
    number of non-finite elements as an int32 scalar (saturating; Optax uses the default integer
    type, int64 under x64). Inside ``shard_map`` the count covers all shards of a sharded leaf.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> skip, info = steadax.skip_not_finite({"w": jnp.array([1.0, jnp.nan])}, 0, None)
    >>> bool(skip), int(info["num_not_finite"])
    (True, 1)
  """
  del gradient_step, params
  count = count_not_finite(updates)
  should_skip = count > 0
  return should_skip, {"should_skip": should_skip, "num_not_finite": count}


def skip_large_updates(
    updates: Updates, gradient_step: ArrayLike, params: Params | None, max_squared_norm: ArrayLike
) -> tuple[jax.Array, dict]:
  """Skips a mini-step whose updates have a squared global norm of at least ``max_squared_norm``.

  Use it through ``functools.partial(skip_large_updates, max_squared_norm=...)``. A NaN norm is
  skipped too (the comparison ``norm_sq < max_squared_norm`` fails).

  Args:
    updates: the updates of the mini-step.
    gradient_step: the gradient step (unused).
    params: the parameters (unused).
    max_squared_norm: the largest squared norm accepted (exclusive).

  Returns:
    ``(should_skip, {"should_skip": should_skip, "norm_squared": norm_sq})``; the squared norm is
    accumulated in the widest floating dtype of the updates, at least float32 (inside
    ``shard_map``, over all shards of a sharded leaf).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> skip, info = steadax.skip_large_updates(jnp.array([3.0, 4.0]), 0, None, 10.0)
    >>> bool(skip), float(info["norm_squared"])
    (True, 25.0)
  """
  del gradient_step, params
  norm_sq = sum_of_squares(updates)
  should_skip = jnp.logical_not(norm_sq < hyper(max_squared_norm, norm_sq.dtype))
  return should_skip, {"should_skip": should_skip, "norm_squared": norm_sq}


@state_roles(mini_step=COUNTER, gradient_step=COUNTER, inner_opt_state=INNER,
             acc_grads=accumulator("accumulator_dtype"), skip_state=OTHER)
class MultiStepsState(NamedTuple):
  """State of ``MultiSteps``.

  Attributes:
    mini_step: int32, mini-steps accumulated since the last emitted update (0 to k - 1).
    gradient_step: int32, updates emitted so far (the inner optimizer's step).
    inner_opt_state: the wrapped optimizer's state.
    acc_grads: the running mean (or sum) of this period's gradients in ``accumulator_dtype``;
      ``()`` when ``every_k_schedule`` is the int 1 (nothing is accumulated).
    skip_state: what ``should_skip_update_fn`` returned last (``()`` without one).
  """

  mini_step: jax.Array
  gradient_step: jax.Array
  inner_opt_state: OptState
  acc_grads: Updates
  skip_state: Params = ()


def _no_skip(updates, gradient_step, params):
  del updates, gradient_step, params
  return jnp.asarray(False), ()


class MultiSteps(Transformation):
  """Accumulates gradients over ``k`` mini-steps and applies the inner optimizer once per ``k``.

  Each call to ``update`` adds the gradient to an accumulator (a running mean by default, a sum with
  ``use_grad_mean=False``) and returns zero updates, except on the ``k``-th call of a period, where
  the accumulated gradient goes through the inner optimizer and its updates are returned. The inner
  optimizer runs only on those calls (under ``lax.cond``), and its state changes only then, so
  ``MultiSteps(opt, k)`` over ``k`` micro-batches equals ``opt`` over their mean gradient.

  Type stability: both branches of the conditional return the same types for any inner optimizer
  (steadax's or not): updates take the parameters' dtypes and the inner state is held to the state
  it was given (strict mode raises on drift, otherwise it is cast back). Boolean states stay
  boolean.

  Memory: with ``every_k_schedule`` the int 1, no accumulator is held (``acc_grads`` is ``()``) and
  ``update`` calls the inner optimizer directly. Otherwise ``acc_grads`` is one tree shaped like the
  parameters, in ``accumulator_dtype``.

  Args:
    opt: the inner optimizer.
    every_k_schedule: mini-steps per update, an int, or a schedule ``fn(gradient_step) -> k``
      (varying the effective batch size over training). ``k`` must be at least 1: an int below 1,
      a schedule returning a non-scalar or a value below 1 at step 0, and a value below 1 seen
      outside ``jit`` raise a ValueError; inside ``jit``, where a traced value cannot raise, a
      value below 1 counts as 1 (every mini-step updates).
    use_grad_mean: average the accumulated gradients (the default) instead of summing them.
    should_skip_update_fn: a ``ShouldSkipUpdateFunction`` (``skip_not_finite``,
      ``skip_large_updates``); a skipped mini-step changes nothing but ``skip_state`` and returns
      zero updates.
    accumulator_dtype: dtype of ``acc_grads`` (float32 by default; complex parameters get the
      complex counterpart; None for each parameter's own dtype).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> ms = steadax.MultiSteps(steadax.sgd(1.0), every_k_schedule=2)
    >>> params = jnp.zeros(1)
    >>> state = ms.init(params)
    >>> u, state = ms.update(jnp.array([1.0]), state, params)
    >>> u, bool(ms.has_updated(state))
    (Array([0.], dtype=float32), False)
    >>> u, state = ms.update(jnp.array([3.0]), state, params)
    >>> u, bool(ms.has_updated(state))
    (Array([-2.], dtype=float32), True)
  """

  name = "MultiSteps"
  elementwise = "children"
  requires_float = False
  State = MultiStepsState
  opt: Any = child_field()
  schedule: Any = hyper_field(None)
  period: int | None = static_field(default=None, check=_check_constant_k)  # a constant k
  use_grad_mean: bool = static_field(default=True)
  should_skip_update_fn: Callable | None = static_field(default=None)
  accumulator_dtype: DTypeLike = static_field(default=jnp.float32)

  def __init__(
      self,
      opt: GradientTransformation,
      every_k_schedule: int | Schedule,
      use_grad_mean: bool = True,
      should_skip_update_fn: ShouldSkipUpdateFunction | None = None,
      accumulator_dtype: DTypeLike = jnp.float32,
  ):
    if isinstance(every_k_schedule, (int, np.integer)) and not isinstance(every_k_schedule, bool):
      period, schedule = int(every_k_schedule), None  # checked by the field (`.replace(period=0)` too)
    elif callable(every_k_schedule):
      period, schedule = None, every_k_schedule
      check_schedule_output("MultiSteps", "every_k_schedule", schedule)
      _check_k("MultiSteps: every_k_schedule(0)", _concrete_or_none(schedule, 0))
    else:
      raise TypeError(
          "MultiSteps: every_k_schedule must be an int or a callable of the gradient step, got "
          f"{type(every_k_schedule).__name__}.")
    set_ = object.__setattr__
    set_(self, "opt", as_inner(opt, "MultiSteps", "opt"))
    set_(self, "schedule", schedule)
    set_(self, "period", period)
    set_(self, "use_grad_mean", bool(use_grad_mean))
    set_(self, "should_skip_update_fn", should_skip_update_fn)
    set_(self, "accumulator_dtype", accumulator_dtype)

  @property
  def inner_opt(self) -> GradientTransformation:
    """The wrapped optimizer."""
    return self.opt

  @property
  def every_k_schedule(self) -> int | Callable:
    """The int or schedule given at construction."""
    return self.period if self.period is not None else self.schedule

  def _period_at(self, gradient_step: jax.Array) -> jax.Array:
    """The number of mini-steps of the period that starts at ``gradient_step``."""
    if self.period is not None:
      return jnp.asarray(self.period, COUNTER_DTYPE)
    period = jnp.asarray(self.schedule(gradient_step))
    if period.shape != ():
      raise ValueError(f"MultiSteps: every_k_schedule must return a scalar, got shape {period.shape}.")
    if not isinstance(period, jax.core.Tracer):
      _check_k("MultiSteps: every_k_schedule(gradient_step)", period)
    # Inside jit a value below 1 cannot raise: it counts as 1 (documented in the docstring).
    return jnp.maximum(hyper(period, COUNTER_DTYPE), jnp.asarray(1, COUNTER_DTYPE))

  def _skip_fn(self) -> Callable:
    return self.should_skip_update_fn if self.should_skip_update_fn is not None else _no_skip

  def init_fn(self, params):
    gradient_step = zero_count()
    skip_state = ()
    if self.should_skip_update_fn is not None:
      _, skip_state = self.should_skip_update_fn(zeros_like(params), gradient_step, params)
      skip_state = strong(skip_state)
    acc_grads = () if self.period == 1 else zeros_like(params, self.accumulator_dtype)
    return MultiStepsState(
        mini_step=zero_count(),
        gradient_step=gradient_step,
        inner_opt_state=self.opt.init(params),
        acc_grads=acc_grads,
        skip_state=skip_state,
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    should_skip, skip_state = self._skip_fn()(updates, state.gradient_step, params)
    should_skip = check_predicate(self.owner, "should_skip_update_fn", should_skip)
    # The skip state is diagnostics: it keeps the types fixed at init whatever the updates' dtypes.
    skip_state = cast_like(skip_state, state.skip_state)

    def inner_step(grads):
      new_updates, inner_state = self.opt.update(grads, state.inner_opt_state, params, **extra_args)
      where = f"{self.owner} (inner optimizer)"
      new_updates = pinned_updates(where, updates, params, new_updates)
      inner_state = pinned_state(where, state.inner_opt_state, inner_state)
      return new_updates, inner_state

    def accept():
      if self.period == 1:
        new_updates, inner_state = inner_step(updates)
        return new_updates, state._replace(
            gradient_step=safe_increment(state.gradient_step), inner_opt_state=inner_state,
            skip_state=skip_state)
      return self._accumulate(updates, state, params, skip_state, inner_step)

    if self.should_skip_update_fn is None:
      return accept()

    def reject():
      return zero_updates(updates, params), state._replace(skip_state=skip_state)

    return jax.lax.cond(should_skip, reject, accept)

  def _accumulate(self, updates, state, params, skip_state, inner_step):
    period = self._period_at(state.gradient_step)
    n = state.mini_step

    def add(k, g, acc):
      # The running mean of the period's gradients (or their sum); the update output is unused.
      return g, (acc + (g - acc) / k.seen if self.use_grad_mean else acc + g)

    scalars = lambda dt: Scalars(seen=n + jnp.asarray(1, COUNTER_DTYPE))
    _, acc_grads = self.leafwise(add, updates, state.acc_grads, scalars=scalars)
    emit = n >= period - jnp.asarray(1, COUNTER_DTYPE)

    def emit_branch():
      # A sum of k float16 gradients can exceed float16's range: saturated, not infinite.
      grads = jax.tree_util.tree_map(lambda a, u: saturating_cast(a, u.dtype), acc_grads, updates)
      new_updates, inner_state = inner_step(grads)
      return new_updates, MultiStepsState(
          mini_step=zero_count(),
          gradient_step=safe_increment(state.gradient_step),
          inner_opt_state=inner_state,
          acc_grads=jax.tree_util.tree_map(jnp.zeros_like, acc_grads),
          skip_state=skip_state,
      )

    def hold_branch():
      return zero_updates(updates, params), MultiStepsState(
          mini_step=safe_increment(n),
          gradient_step=state.gradient_step,
          inner_opt_state=state.inner_opt_state,
          acc_grads=acc_grads,
          skip_state=skip_state,
      )

    return jax.lax.cond(emit, emit_branch, hold_branch)

  def has_updated(self, state: MultiStepsState) -> jax.Array:
    """Whether the last ``update`` emitted the inner optimizer's updates (a bool scalar).

    Args:
      state: a ``MultiStepsState``.

    Returns:
      ``mini_step == 0 and gradient_step > 0``.
    """
    return jnp.logical_and(state.mini_step == 0, state.gradient_step > 0)

  def gradient_transformation(self) -> "MultiSteps":
    """This wrapper as a transformation (it already is one; kept for Optax's API).

    Returns:
      ``self``.
    """
    return self


@state_roles(count=COUNTER, grad_acc=accumulator("accumulator_dtype"))
class ApplyEvery(NamedTuple):
  """State of ``apply_every``: the int32 position in the period and the running sum.

  Attributes:
    count: int32, calls since the last emitted sum (0 to k - 1).
    grad_acc: the sum of this period's updates (``()`` when ``k`` is 1).
  """

  count: jax.Array
  grad_acc: Params


class _ApplyEvery(Transformation):
  name = "apply_every"
  elementwise = True
  requires_float = False
  State = ApplyEvery
  period: int = static_field(default=1)  # apply_every's k
  accumulator_dtype: Any = static_field(default=None)

  def init_fn(self, params):
    if self.period == 1:
      return ApplyEvery(count=zero_count(), grad_acc=())
    return super().init_fn(params)

  def update_fn(self, updates, state, params=None, **extra_args):
    if self.period == 1:
      return updates, state
    keep = state.count != 0
    emit = state.count == jnp.asarray(self.period - 1, COUNTER_DTYPE)

    def leaf(k, g, acc):
      total = jnp.where(keep, acc, jnp.zeros_like(acc)) + g
      return jnp.where(emit, total, jnp.zeros_like(total)), total

    out, grad_acc = self.leafwise(leaf, updates, state.grad_acc)
    count = safe_increment(state.count) % jnp.asarray(self.period, COUNTER_DTYPE)
    return out, ApplyEvery(count=count, grad_acc=grad_acc)


@shared_args
def apply_every(k: int = 1, *, accumulator_dtype: DTypeLike | None = None) -> Transformation:
  """Sums updates over ``k`` calls and emits the sum on every ``k``-th call, zeros otherwise.

  Unlike ``MultiSteps``, the transformations before it in a chain still run (and update their state)
  on every call; use ``MultiSteps`` for an exact large-batch equivalent.

  Args:
    k: the period (a Python int, part of the compiled program).
    accumulator_dtype: dtype of the running sum (keyword-only, beyond Optax; default: each
      parameter's dtype, as Optax). With ``k == 1`` nothing is accumulated: ``grad_acc`` is ``()``.

  Returns:
    A transformation with state ``ApplyEvery(count, grad_acc)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.apply_every(2)
    >>> state = tx.init(jnp.zeros(1))
    >>> u, state = tx.update(jnp.array([1.0]), state)
    >>> tx.update(jnp.array([2.0]), state)[0]
    Array([3.], dtype=float32)
  """
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
    raise ValueError(f"apply_every: k must be a positive int, got {k!r}.")
  return _ApplyEvery(int(k), accumulator_dtype=accumulator_dtype)
