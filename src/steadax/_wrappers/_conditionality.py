"""Conditional wrappers: conditionally_transform, conditionally_mask, apply_if_finite, zero_nans."""

from typing import Any, ClassVar, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import COUNTER_DTYPE, hyper, safe_increment, zero_count
from .._core._roles import COUNTER, INNER, OTHER, state_roles
from ._branching import all_finite, check_predicate, pinned_state, pinned_updates, zero_updates
from .._core._types import ArrayTree, OptState

__all__ = [
    "ConditionFn",
    "ConditionallyTransformState",
    "ConditionallyMaskState",
    "conditionally_transform",
    "conditionally_mask",
    "ApplyIfFiniteState",
    "apply_if_finite",
    "ZeroNansState",
    "zero_nans",
]


class ConditionFn(Protocol):
  """``fn(step, **extra_args) -> bool scalar``: whether the inner transformation runs this step."""

  def __call__(self, step: jax.Array, **extra_args: Any) -> jax.Array:
    ...


@state_roles(inner_state=INNER, step=COUNTER)
class ConditionallyTransformState(NamedTuple):
  """State of ``conditionally_transform``: the inner state and the int32 call count.

  Attributes:
    inner_state: the state of the inner transformation.
    step: the number of calls so far (int32).
  """

  inner_state: OptState
  step: jax.Array


@state_roles(step=COUNTER, inner_state=INNER)
class ConditionallyMaskState(NamedTuple):
  """State of ``conditionally_mask``: the int32 call count and the inner state.

  Attributes:
    step: the number of calls so far (int32).
    inner_state: the state of the inner transformation.
  """

  step: jax.Array
  inner_state: OptState


def _run_inner(owner, inner, updates, state, params, extra_args):
  """The inner update with its outputs pinned to the types a ``lax.cond`` branch must return."""
  new_updates, new_state = inner.update(updates, state, params, **extra_args)
  where = f"{owner} (inner transformation)"
  return pinned_updates(where, updates, params, new_updates), pinned_state(where, state, new_state)


class _Conditional(Transformation):
  """Runs ``inner`` when ``should_transform_fn(step)`` holds; the subclasses say what happens else."""
  elementwise = "children"

  requires_float = False
  zero_when_skipped = False  # ClassVar: zero updates (mask) or the updates unchanged (transform)
  State: ClassVar[Any]  # the subclass's state record
  inner: Any = child_field()
  should_transform_fn: Any = static_field()
  forward_extra_args: bool = static_field(default=False)

  def init_fn(self, params):
    return self.State(step=zero_count(), inner_state=self.inner.init(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    kwargs = extra_args if self.forward_extra_args else {}
    run = check_predicate(
        self.owner, "should_transform_fn", self.should_transform_fn(state.step, **kwargs))

    def transform():
      return _run_inner(self.owner, self.inner, updates, state.inner_state, params, extra_args)

    def skip():
      if self.zero_when_skipped:
        return zero_updates(updates, params), state.inner_state
      return pinned_updates(self.owner, updates, params, updates), state.inner_state

    new_updates, inner_state = jax.lax.cond(run, transform, skip)
    return new_updates, self.State(step=safe_increment(state.step), inner_state=inner_state)


class _ConditionallyTransform(_Conditional):
  name = "conditionally_transform"
  elementwise = "children"
  State = ConditionallyTransformState


class _ConditionallyMask(_Conditional):
  name = "conditionally_mask"
  elementwise = "children"
  State = ConditionallyMaskState
  zero_when_skipped = True


@shared_args
def conditionally_transform(
    inner: GradientTransformation,
    should_transform_fn: ConditionFn,
    forward_extra_args: bool = False,
) -> Transformation:
  """Runs ``inner`` on the steps where ``should_transform_fn(step)`` holds; passes updates through
  unchanged (and keeps the inner state) on the others.

  Args:
    inner: the transformation to run conditionally.
    should_transform_fn: ``fn(step, **extra_args) -> bool scalar``; ``step`` is the int32 number of
      previous calls.
    forward_extra_args: pass ``update``'s keyword extras (``value`` ...) to ``should_transform_fn``.

  Returns:
    A transformation with ``ConditionallyTransformState(inner_state, step)``. Both branches return
    updates in the parameters' dtypes, so incoming float32 gradients for bfloat16 parameters do not
    make the branches disagree.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.conditionally_transform(steadax.scale(10.0), lambda step: step >= 1)
    >>> state = tx.init(jnp.zeros(1))
    >>> u, state = tx.update(jnp.ones(1), state)
    >>> u, tx.update(jnp.ones(1), state)[0]
    (Array([1.], dtype=float32), Array([10.], dtype=float32))
  """
  return _ConditionallyTransform(
      as_inner(inner, "conditionally_transform", "inner"), should_transform_fn,
      bool(forward_extra_args))


@shared_args
def conditionally_mask(
    inner: GradientTransformation,
    should_transform_fn: ConditionFn,
    forward_extra_args: bool = False,
) -> Transformation:
  """Runs ``inner`` on the steps where ``should_transform_fn(step)`` holds; returns zero updates
  (and keeps the inner state) on the others.

  Args:
    inner: the transformation to run conditionally.
    should_transform_fn: ``fn(step, **extra_args) -> bool scalar``; ``step`` is the int32 number of
      previous calls.
    forward_extra_args: pass ``update``'s keyword extras to ``should_transform_fn``.

  Returns:
    A transformation with ``ConditionallyMaskState(step, inner_state)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.conditionally_mask(steadax.sgd(1.0), lambda step: step % 2 == 1)
    >>> state = tx.init(jnp.zeros(1))
    >>> u, state = tx.update(jnp.ones(1), state)
    >>> u, tx.update(jnp.ones(1), state)[0]
    (Array([0.], dtype=float32), Array([-1.], dtype=float32))
  """
  return _ConditionallyMask(
      as_inner(inner, "conditionally_mask", "inner"), should_transform_fn, bool(forward_extra_args))


@state_roles(notfinite_count=COUNTER, last_finite=OTHER, total_notfinite=COUNTER, inner_state=INNER)
class ApplyIfFiniteState(NamedTuple):
  """State of ``apply_if_finite``.

  Attributes:
    notfinite_count: int32, consecutive updates with a NaN or an infinity; back to 0 after a finite
      one.
    last_finite: bool, whether the last update was finite.
    total_notfinite: int32, non-finite updates since init (never reset; saturating).
    inner_state: the inner transformation's state.
  """

  notfinite_count: jax.Array
  last_finite: jax.Array
  total_notfinite: jax.Array
  inner_state: OptState


class _ApplyIfFinite(Transformation):
  name = "apply_if_finite"
  elementwise = "children"
  requires_float = False
  State = ApplyIfFiniteState
  inner: Any = child_field()
  max_consecutive_errors: Any = hyper_field(0)

  def init_fn(self, params):
    return ApplyIfFiniteState(
        notfinite_count=zero_count(),
        last_finite=jnp.asarray(True),
        total_notfinite=zero_count(),
        inner_state=self.inner.init(params),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    finite = all_finite(updates)
    notfinite_count = jnp.where(finite, zero_count(), safe_increment(state.notfinite_count))
    total = jnp.where(finite, state.total_notfinite, safe_increment(state.total_notfinite))
    give_up = notfinite_count > hyper(self.max_consecutive_errors, COUNTER_DTYPE)

    def apply():
      return _run_inner(self.name, self.inner, updates, state.inner_state, params, extra_args)

    def reject():
      return zero_updates(updates, params), state.inner_state

    new_updates, inner_state = jax.lax.cond(jnp.logical_or(finite, give_up), apply, reject)
    return new_updates, ApplyIfFiniteState(
        notfinite_count=notfinite_count, last_finite=finite, total_notfinite=total,
        inner_state=inner_state)


@shared_args
def apply_if_finite(inner: GradientTransformation, max_consecutive_errors: int) -> Transformation:
  """Skips updates holding a NaN or an infinity, up to ``max_consecutive_errors`` in a row.

  A non-finite update returns zeros and leaves the inner state untouched. The consecutive counter
  goes back to 0 after every finite update; once more than ``max_consecutive_errors`` non-finite
  updates arrive in a row, they are passed to ``inner`` (which then decides what a NaN does).

  Args:
    inner: the transformation to protect.
    max_consecutive_errors: how many non-finite updates in a row are skipped (a leaf: a new value
      does not recompile).

  Returns:
    A transformation with ``ApplyIfFiniteState(notfinite_count, last_finite, total_notfinite,
    inner_state)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.apply_if_finite(steadax.sgd(1.0), max_consecutive_errors=2)
    >>> state = tx.init(jnp.zeros(1))
    >>> u, state = tx.update(jnp.array([jnp.nan]), state)
    >>> u, int(state.notfinite_count), bool(state.last_finite)
    (Array([0.], dtype=float32), 1, False)
  """
  if isinstance(max_consecutive_errors, (int, np.integer)) and max_consecutive_errors < 0:
    raise ValueError(
        f"apply_if_finite: max_consecutive_errors must be >= 0, got {max_consecutive_errors}.")
  return _ApplyIfFinite(as_inner(inner, "apply_if_finite", "inner"), max_consecutive_errors)


@state_roles(found_nan=OTHER)  # bool scalars per parameter: not shaped like them
class ZeroNansState(NamedTuple):
  """State of ``zero_nans``: one bool scalar per parameter, True where the last update had a NaN.

  Attributes:
    found_nan: one bool scalar per parameter, True where the last update had a NaN.
  """

  found_nan: ArrayTree


class _ZeroNans(Transformation):
  name = "zero_nans"
  elementwise = True
  requires_float = False
  State = ZeroNansState

  def init_fn(self, params):
    return ZeroNansState(found_nan=jax.tree_util.tree_map(lambda _: jnp.asarray(False), params))

  def update_fn(self, updates, state, params=None, **extra_args):
    # Integer and float0 updates (of integer parameters) hold no NaN: they pass unchanged.
    inexact = lambda u: jnp.issubdtype(u.dtype, jnp.inexact)  # noqa: E731
    found = jax.tree_util.tree_map(
        lambda u: jnp.any(jnp.isnan(u)) if inexact(u) else jnp.asarray(False), updates)
    cleaned = jax.tree_util.tree_map(
        lambda u: jnp.where(jnp.isnan(u), jnp.zeros((), u.dtype), u) if inexact(u) else u, updates)
    return cleaned, ZeroNansState(found_nan=found)


@shared_args
def zero_nans() -> Transformation:
  """Replaces NaNs in the updates by zeros and records, per parameter, whether there were any.

  Infinities are left alone (use ``apply_if_finite`` or ``MultiSteps(..., skip_not_finite)`` to
  skip them).

  Returns:
    A transformation with ``ZeroNansState(found_nan)``: a tree like the parameters of bool scalars
    (bool in every mode and inside ``MultiSteps``, ``lax.scan`` and ``lax.cond``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.zero_nans()
    >>> u, state = tx.update({"w": jnp.array([1.0, jnp.nan])}, tx.init({"w": jnp.zeros(2)}))
    >>> u["w"], bool(state.found_nan["w"])
    (Array([1., 0.], dtype=float32), True)
  """
  return _ZeroNans()
