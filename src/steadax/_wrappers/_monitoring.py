"""Monitoring: snapshot, monitor and measure_with_ema keep measurements of the updates in state."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._adapters import with_extra_args_support
from .._core._docs import shared_args
from .._core._interface import EmptyState, GradientTransformation, GradientTransformationExtraArgs
from .._core._transformation import Transformation
from .._core._module import hyper_field, static_field
from .._core._policy import is_inexact_dtype
from .._core._roles import INNER, OTHER, state_roles
from .._core._tree import cast_like
from ..transforms._scaling import ema
from ._branching import pinned_state, strong
from .._core._types import Params

__all__ = ["SnapshotState", "MonitorState", "snapshot", "monitor", "measure_with_ema"]


@state_roles(measurement=OTHER)  # shaped like the measure's output, not like the parameters
class SnapshotState(NamedTuple):
  """State of ``snapshot``: ``{measure_name: measurement}`` of the last updates.

  Attributes:
    measurement: ``{measure_name: measurement}`` of the last updates.
  """

  measurement: dict[str, Any]


@state_roles(measurements=OTHER, measure_states=INNER)
class MonitorState(NamedTuple):
  """State of ``monitor``: the last measurements by name and the measures' own states.

  Attributes:
    measurements: the last measurement of each measure, by name.
    measure_states: the states of the stateful measures (``measure_with_ema`` ...), in order.
  """

  measurements: dict[str, Params]
  measure_states: tuple


class _Snapshot(Transformation):
  name = "snapshot"
  requires_float = False
  State = SnapshotState
  measure_name: str = static_field()
  measure: Callable = static_field()

  def init_fn(self, params):
    return SnapshotState({self.measure_name: strong(self.measure(params))})

  def update_fn(self, updates, state, params=None, **extra_args):
    # The measurement keeps the types it had at init (measured on the params), so a weakly typed or
    # differently promoted result cannot change the state's type.
    value = cast_like(self.measure(updates), state.measurement[self.measure_name])
    return updates, SnapshotState({self.measure_name: value})


@shared_args
def snapshot(measure_name: str, measure: Callable[[Params], Params]) -> Transformation:
  """Stores ``measure(updates)`` in the state, to look at updates midway through a chain.

  Args:
    measure_name: the key of the measurement (find it with ``steadax.tree.get(state, name)``-style
      look-ups or ``state.measurement[name]``).
    measure: a function of the updates returning an array or a tree of arrays.

  Returns:
    A transformation that leaves updates unchanged, with ``SnapshotState(measurement)``. At init the
    measurement is ``measure(params)``; later ones keep its types.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.chain(steadax.snapshot("raw_norm", steadax.tree.norm), steadax.clip(1.0))
    >>> u, state = tx.update(jnp.array([3.0, 4.0]), tx.init(jnp.zeros(2)))
    >>> float(state[0].measurement["raw_norm"])
    5.0
  """
  return _Snapshot(measure_name, measure)


class _Measure(Transformation):
  """A stateless measurement: its 'updates' are ``fn(updates)``, not parameter-shaped."""

  name = "measure"
  requires_float = False
  updates_follow_params = False
  fn: Callable = static_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    return self.fn(updates), state


def _as_measure(measure: Any) -> GradientTransformation:
  if isinstance(measure, GradientTransformation) or (
      isinstance(measure, tuple) and len(measure) == 2 and all(callable(m) for m in measure)):
    return with_extra_args_support(measure)
  if callable(measure):
    return _Measure(measure)
  raise TypeError(
      f"monitor: a measure must be a transformation or a callable, got {type(measure).__name__}.")


class _Monitor(Transformation):
  name = "monitor"
  requires_float = False
  State = MonitorState
  measures: tuple = static_field()
  names: tuple = static_field(default=())

  def init_fn(self, params):
    states = tuple(m.init(params) for m in self.measures)
    # Optax starts from an empty dict, so the state changes structure at the first update and
    # cannot be carried through lax.scan; the measurements start at zeros of their final types.
    measurements = {}
    for name, measure, state in zip(self.names, self.measures, states):
      shapes = jax.eval_shape(lambda p, s, m=measure: m.update(p, s, p)[0], params, state)
      measurements[name] = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
    return MonitorState(measurements=measurements, measure_states=states)

  def update_fn(self, updates, state, params=None, **extra_args):
    measurements, states = {}, []
    for name, measure, old in zip(self.names, self.measures, state.measure_states):
      value, new = measure.update(updates, old, params, **extra_args)
      measurements[name] = cast_like(value, state.measurements[name])
      states.append(pinned_state(f"monitor ({name!r})", old, new))
    return updates, MonitorState(measurements=measurements, measure_states=tuple(states))


@shared_args
def monitor(measures: dict[str, Callable[[Params], Params] | GradientTransformationExtraArgs]) -> Transformation:
  """Records several measurements of the updates, some of them stateful (``measure_with_ema``).

  Args:
    measures: ``{name: measure}`` where a measure is a function of the updates or a transformation
      whose output is the measurement (such as ``measure_with_ema``).

  Returns:
    A transformation that leaves updates unchanged, with ``MonitorState(measurements,
    measure_states)``. Unlike Optax (whose init holds an empty dict), the measurements exist from
    init on, as zeros of their types, so the state is the same type at every step (``lax.scan``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.monitor({"norm": steadax.tree.norm,
    ...                       "norm_ema": steadax.measure_with_ema(steadax.tree.norm, 0.5)})
    >>> state = tx.init(jnp.zeros(2))
    >>> u, state = tx.update(jnp.array([3.0, 4.0]), state)
    >>> float(state.measurements["norm"]), float(state.measurements["norm_ema"])
    (5.0, 5.0)
  """
  if not isinstance(measures, dict):
    raise TypeError(
        f"monitor: measures must be a dict of name -> measure, got {type(measures).__name__}.")
  names = tuple(measures)
  return _Monitor(tuple(_as_measure(measures[n]) for n in names), names)


def _floating(tree: Any) -> Any:
  """Measurements as strong floating arrays: booleans and integers become float32."""
  def fix(x):
    x = strong(x)
    # A flag or a count is averaged as a frequency: the EMA needs a floating input.
    return x if is_inexact_dtype(x.dtype) else x.astype(jnp.float32)

  return jax.tree_util.tree_map(fix, tree)


class _MeasureWithEma(Transformation):
  name = "measure_with_ema"
  requires_float = False
  updates_follow_params = False
  measure: Callable = static_field()
  average: Any = hyper_field(None)

  def init_fn(self, params):
    return (EmptyState(), self.average.init(_floating(self.measure(params))))

  def update_fn(self, updates, state, params=None, **extra_args):
    value = _floating(self.measure(updates))
    # The measurement's tree, not the parameters', is what the average runs over.
    out, ema_state = self.average.update(value, state[1], None)
    return out, (state[0], ema_state)


@shared_args
def measure_with_ema(
    measure: Callable[[Params], Params], decay: ArrayLike, debias: bool = True, accumulator_dtype: DTypeLike | None = None
) -> Transformation:
  """An exponential moving average of ``measure(updates)``, for use in ``monitor``.

  Its output (its "updates") is the averaged measurement. Boolean and integer measurements (``norm >
  threshold``) are averaged as float32, so the average is a frequency; Optax keeps a boolean
  accumulator that turns into a float at the first update.

  Args:
    measure: a function of the updates returning an array or a tree of arrays.
    decay: the weight of the old average.
    debias: divide by ``1 - decay**count``, as Adam's first moment.
    accumulator_dtype: dtype of the average (default: the measurement's floating dtype).

  Returns:
    A transformation with Optax's state ``(EmptyState(), EmaState(count, ema))``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.measure_with_ema(lambda u: steadax.tree.norm(u) > 1.0, decay=0.5)
    >>> state = tx.init(jnp.zeros(2))
    >>> out, state = tx.update(jnp.array([3.0, 4.0]), state)
    >>> out
    Array(1., dtype=float32)
  """
  return _MeasureWithEma(measure, ema(decay, debias=debias, accumulator_dtype=accumulator_dtype))
