"""inject_hyperparams: a transformation's hyperparameters as state entries, scheduled or overwritable.

The wrapper splits the factory's arguments once, at construction:

* numbers and arrays become entries of ``state.hyperparams`` (users may overwrite them between
  steps); each keeps the dtype the user declared (``_core._policy.hyperparam_dtype``: Python floats
  are float32 in both x64 modes, arrays keep theirs) unless ``hyperparam_dtype`` overrides it;
* callables are schedules of the step count (or stateful schedules), evaluated every step, their
  values cast to their declared dtype and recorded in ``state.hyperparams`` too;
* everything else (booleans, None, strings, dtypes, ``static_args``) is passed through unchanged.

Every update rebuilds the inner transformation from the current values; steadax transformations are
frozen pytrees, so building one from traced values inside ``jit`` or ``lax.scan`` costs nothing.
"""

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._contract import ContractError
from .._core._deprecations import warn_deprecated_call
from .._core._module import Module, hyper_field, static_field
from .._core._policy import safe_increment, zero_count
from .._core._roles import COUNTER, INNER, OTHER, state_roles
from .._fusion._elementwise import fusion_blocker
from ._common import cast, declared_dtype
from .._core._types import OptState, Schedule

__all__ = [
    "InjectHyperparamsState",
    "InjectStatefulHyperparamsState",
    "StatefulSchedule",
    "WrappedSchedule",
    "inject_hyperparams",
    "inject_stateful_hyperparams",
]


@state_roles(count=COUNTER, hyperparams=OTHER, inner_state=INNER)
class InjectHyperparamsState(NamedTuple):
  """Optax's older record for injected hyperparameters (kept for compatibility).

  ``inject_hyperparams`` returns ``InjectStatefulHyperparamsState``, as Optax does.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    hyperparams: the current value of each injected hyperparameter, by name.
    inner_state: the state of the inner transformation.
  """

  count: jax.Array
  hyperparams: dict[str, jax.Array]
  inner_state: OptState


@state_roles(count=COUNTER, hyperparams=OTHER, hyperparams_states=OTHER, inner_state=INNER)
class InjectStatefulHyperparamsState(NamedTuple):
  """State of ``inject_hyperparams``.

  Attributes:
    count: the int32 number of updates so far.
    hyperparams: ``{name: value}`` for every numeric and scheduled hyperparameter: the values used
      by the latest update (at init: the initial ones). Numeric entries may be overwritten.
    hyperparams_states: ``{name: schedule state}`` for the scheduled hyperparameters.
    inner_state: the inner transformation's state.
  """

  count: jax.Array
  hyperparams: dict[str, jax.Array]
  hyperparams_states: dict[str, Any]
  inner_state: OptState


@runtime_checkable
class StatefulSchedule(Protocol):
  """A schedule with its own state: ``init()``, ``update(state, **extra)``, ``__call__(state, **extra)``."""

  def init(self) -> Any: ...

  def update(self, state: Any, **extra_args: Any) -> Any: ...

  def __call__(self, state: Any, **extra_args: Any) -> Any: ...


@state_roles(count=COUNTER)
class WrappedScheduleState(NamedTuple):
  """State of a ``WrappedSchedule``: the int32 step count."""

  count: jax.Array


class WrappedSchedule(Module):
  """A stateful schedule around a schedule of the step count (the count is its state).

  ``schedule_fn`` stays a pytree leaf when it is a steadax schedule, so its values can change
  without recompiling.

  Attributes:
    schedule_fn: the schedule, a function of the int32 step count.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> sched = steadax.WrappedSchedule(steadax.linear_schedule(1.0, 0.0, 4))
    >>> state = sched.update(sched.init())
    >>> sched(state)
    Array(0.75, dtype=float32)
  """

  schedule_fn: Schedule = hyper_field()

  def init(self) -> WrappedScheduleState:
    return WrappedScheduleState(count=zero_count())

  def update(self, state: WrappedScheduleState, **extra_args: Any) -> WrappedScheduleState:
    del extra_args
    return WrappedScheduleState(count=safe_increment(state.count))

  def __call__(self, state: WrappedScheduleState, **extra_args: Any) -> Any:
    del extra_args
    return self.schedule_fn(state.count)


def _is_stateful_schedule(value: Any) -> bool:
  return isinstance(value, StatefulSchedule) and not isinstance(value, GradientTransformation)


def _is_numeric(value: Any) -> bool:
  if isinstance(value, (bool, np.bool_)):
    return False
  return isinstance(value, (int, float, np.number, np.ndarray, jax.Array))


def _is_prng_key(value_or_dtype: Any) -> bool:
  """A typed PRNG key (``jax.random.key``), or its dtype."""
  dtype = getattr(value_or_dtype, "dtype", value_or_dtype)
  try:
    return jnp.issubdtype(dtype, jax.dtypes.prng_key)
  except TypeError:
    return False


def _as_declared(value: Any, dtype: Any) -> Any:
  """A hyperparameter in its declared dtype. A typed PRNG key (noisy_sgd's ``key``, injected as in
  Optax) has no numeric dtype to cast to: it must come back a key of the same implementation."""
  if not _is_prng_key(dtype):
    return cast(value, dtype)
  if not _is_prng_key(value) or value.dtype != dtype or np.shape(value) != ():
    raise TypeError(f"inject_hyperparams: a PRNG key hyperparameter ({dtype}) was given "
                    f"{type(value).__name__} {getattr(value, 'dtype', '')}; keep it a scalar key.")
  return value


def _check_schedule_state(owner: str, name: str, old: Any, new: Any) -> None:
  """A stateful schedule's update that turns an integer state leaf floating is refused.

  Outside strict mode the contract casts a drifting state leaf back to its dtype; here that would
  truncate the schedule's value (a running total of 0.3 cast back to int32 is 0, and so is the
  learning rate read from it). Optax lets the state change type instead.
  """
  old_leaves = jax.tree_util.tree_flatten_with_path(old)[0]
  new_leaves = jax.tree_util.tree_leaves(new)
  if len(old_leaves) != len(new_leaves):
    return  # a structure change: the contract names it
  for (path, a), b in zip(old_leaves, new_leaves):
    if (hasattr(a, "dtype") and hasattr(b, "dtype") and not jnp.issubdtype(a.dtype, jnp.inexact)
        and jnp.issubdtype(b.dtype, jnp.inexact)):
      raise ContractError(
          f"{owner}: the state of the schedule for {name!r} at {jax.tree_util.keystr(path)} "
          f"changed dtype from {np.dtype(a.dtype).name} to {np.dtype(b.dtype).name} in its update; "
          "cast back it would lose its fractional part. Make the schedule's init return this leaf "
          f"as {np.dtype(b.dtype).name}.")


def _is_static_value(value: Any) -> bool:
  # dtypes are callable (jnp.bfloat16(1.0)) but are never schedules.
  return value is None or isinstance(value, (bool, np.bool_, str, bytes, type, np.dtype))


class InjectHyperparams(Transformation):
  """The transformation ``inject_hyperparams(factory)(...)`` returns."""

  name = "inject_hyperparams"
  State = InjectStatefulHyperparamsState
  requires_float = False  # the inner transformation checks its parameters
  inner_factory: Callable = static_field()
  numeric_names: tuple = static_field(default=())
  numeric_values: tuple = hyper_field(default=())
  numeric_dtypes: tuple = static_field(default=())
  schedule_names: tuple = static_field(default=())
  schedules: tuple = hyper_field(default=())
  static_items: tuple = static_field(default=())
  positional_names: tuple = static_field(default=())
  hyperparam_dtype: Any = static_field(default=None)

  @property
  def owner(self) -> str:
    return f"inject_hyperparams({getattr(self.inner_factory, '__name__', 'inner_factory')})"

  def elementwise(self, flat_params: bool) -> str | None:
    """Read by the fusion layer: as elementwise as the inner transformation.

    The inner transformation is rebuilt every step from the injected values; its kind (and so
    whether it is elementwise) does not depend on them, so any values will do.
    """
    hyperparams = dict(zip(self.numeric_names, self.numeric_values))
    hyperparams.update(self._scheduled({n: s.init() for n, s in zip(self.schedule_names, self.schedules)}, {}))
    return fusion_blocker(self._inner(hyperparams), flat_params)

  def _dtype_for(self, value: Any) -> Any:
    if _is_prng_key(value):
      return value.dtype
    dtype = declared_dtype(value)
    if self.hyperparam_dtype is not None and jnp.issubdtype(dtype, jnp.floating):
      dtype = np.dtype(jax.dtypes.canonicalize_dtype(self.hyperparam_dtype))
    return dtype

  def _scheduled(self, schedule_states: dict, extra_args: dict) -> dict:
    values = {}
    for name, schedule in zip(self.schedule_names, self.schedules):
      value = schedule(schedule_states[name], **extra_args)
      values[name] = cast(value, self._dtype_for(value))
    return values

  def _inner(self, hyperparams: dict) -> GradientTransformation:
    arguments = {**dict(self.static_items), **hyperparams}
    args = [arguments.pop(name) for name in self.positional_names]
    factory = getattr(self.inner_factory, "__name__", "inner_factory")
    return as_inner(self.inner_factory(*args, **arguments), self.owner,
                    f"the value {factory}(...) returned")

  def init_fn(self, params):
    schedule_states = {n: s.init() for n, s in zip(self.schedule_names, self.schedules)}
    hyperparams = {
        n: _as_declared(v, d)
        for n, v, d in zip(self.numeric_names, self.numeric_values, self.numeric_dtypes)
    }
    hyperparams.update(self._scheduled(schedule_states, {}))
    return InjectStatefulHyperparamsState(
        count=zero_count(),
        hyperparams=hyperparams,
        hyperparams_states=schedule_states,
        inner_state=self._inner(hyperparams).init(params),
    )

  def _normalize(self, state: Any, extra_args: dict) -> Any:
    """The incoming state with its hyperparameters in their declared dtypes.

    Users overwrite entries with Python numbers or arrays of any dtype; casting them here keeps the
    state's types exact, so the contract check compares like with like.
    """
    expected = set(self.numeric_names) | set(self.schedule_names)
    given = state.hyperparams
    if not hasattr(given, "keys") or set(given.keys()) != expected:
      got = sorted(given.keys()) if hasattr(given, "keys") else type(given).__name__
      raise ValueError(
          f"{self.owner}: state.hyperparams must hold exactly the keys {sorted(expected)}, got {got}."
      )
    dtypes = dict(zip(self.numeric_names, self.numeric_dtypes))
    # A scheduled entry is recomputed every step; its incoming value only needs the right type.
    for name, value in self._scheduled(state.hyperparams_states, extra_args).items():
      dtypes[name] = value.dtype
    hyperparams = {}
    for name, value in given.items():
      dtype = dtypes[name]
      if _is_prng_key(dtype):
        hyperparams[name] = _as_declared(value, dtype)
        continue
      incoming = np.dtype(jnp.result_type(value))
      if jnp.issubdtype(dtype, jnp.integer) and not jnp.issubdtype(incoming, jnp.integer):
        raise TypeError(
            f"{self.owner}: hyperparams[{name!r}] was declared {dtype.name} (a Python int at "
            f"construction) and cannot take a {incoming.name} value; declare it as a float "
            f"(e.g. {name}=1.0) to overwrite it with fractional values."
        )
      if jnp.issubdtype(incoming, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(
            f"{self.owner}: hyperparams[{name!r}] was declared {dtype.name} and cannot take a "
            f"complex value."
        )
      hyperparams[name] = cast(value, dtype)
    return state._replace(hyperparams=hyperparams)

  def update(self, updates, state, params=None, **extra_args):
    return super().update(updates, self._normalize(state, extra_args), params, **extra_args)

  def update_fn(self, updates, state, params=None, **extra_args):
    hyperparams = {
        n: _as_declared(state.hyperparams[n], d) for n, d in zip(self.numeric_names, self.numeric_dtypes)
    }
    hyperparams.update(self._scheduled(state.hyperparams_states, extra_args))
    schedule_states = {
        n: s.update(state.hyperparams_states[n], **extra_args)
        for n, s in zip(self.schedule_names, self.schedules)
    }
    for name in self.schedule_names:
      _check_schedule_state(self.owner, name, state.hyperparams_states[name], schedule_states[name])
    updates, inner_state = self._inner(hyperparams).update(
        updates, state.inner_state, params, **extra_args
    )
    return updates, InjectStatefulHyperparamsState(
        count=safe_increment(state.count),
        hyperparams=hyperparams,
        hyperparams_states=schedule_states,
        inner_state=inner_state,
    )


@shared_args
def inject_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: np.dtype | None = None,
) -> Callable[..., InjectHyperparams]:
  """Turns a transformation factory into one whose hyperparameters live in the state.

  ``inject_hyperparams(factory)(*args, **kwargs)`` takes the factory's arguments, except that any
  numeric one may be a schedule (a callable of the int32 step count, or a ``StatefulSchedule``).
  Numeric arguments become entries of ``state.hyperparams`` that can be overwritten between steps
  (``state.hyperparams["learning_rate"] = 0.01``); scheduled ones are evaluated at the count every
  step and recorded there too (overwriting those has no effect). Booleans, None, strings, dtypes
  and the names in ``static_args`` are passed through unchanged.

  Each hyperparameter keeps the dtype its value declared, whatever the parameters' dtype and the
  x64 mode: Python floats are float32, Python ints int32, arrays keep their dtype; schedule outputs
  are cast the same way every step. So a float32 learning rate stays float32 with bfloat16
  parameters, and the state's types never change inside ``jit`` or ``lax.scan`` (Optax instead
  casts to the parameters' widest dtype).

  Args:
    inner_factory: a function returning a transformation (``steadax.adam``, ``steadax.scale``...).
    static_args: the name (or names) of callable arguments that are not schedules.
    hyperparam_dtype: if given, every floating hyperparameter is held in this dtype instead.

  Returns:
    A factory with ``inner_factory``'s signature returning a transformation whose state is
    ``InjectStatefulHyperparamsState(count, hyperparams, hyperparams_states, inner_state)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.inject_hyperparams(steadax.sgd)(learning_rate=0.1)
    >>> params = jnp.zeros(2)
    >>> state = tx.init(params)
    >>> state.hyperparams["learning_rate"] = 0.5
    >>> tx.update(jnp.ones(2), state, params)[0]
    Array([-0.5, -0.5], dtype=float32)
  """
  owner = "inject_hyperparams"
  if isinstance(inner_factory, GradientTransformation):
    raise TypeError(
        f"{owner}: inner_factory must be the factory (e.g. `steadax.adam`), got a transformation it "
        f"built ({type(inner_factory).__name__}): write `{owner}(steadax.adam)(learning_rate=...)`.")
  if not callable(inner_factory):
    raise TypeError(f"{owner}: inner_factory must be callable, got {type(inner_factory).__name__}.")
  static_names = {static_args} if isinstance(static_args, str) else set(static_args)
  signature = inspect.signature(inner_factory)
  parameters = signature.parameters
  has_var_keyword = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
  unknown = static_names - set(parameters)
  if unknown and not has_var_keyword:
    raise ValueError(
        f"{owner}: static_args must name parameters of {getattr(inner_factory, '__name__', 'inner_factory')}"
        f" ({sorted(parameters)}), got unknown {sorted(unknown)}."
    )
  positional_names = tuple(n for n, p in parameters.items() if p.kind is p.POSITIONAL_ONLY)

  @functools.wraps(inner_factory)
  def wrapped(*args: Any, **kwargs: Any) -> InjectHyperparams:
    try:
      bound = signature.bind(*args, **kwargs)
    except TypeError as error:
      factory = getattr(inner_factory, "__name__", "inner_factory")
      raise TypeError(
          f"{owner}({factory}): {error}; {factory} takes {list(parameters)}.") from None
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
      kind = parameters[name].kind
      if kind is inspect.Parameter.VAR_POSITIONAL:
        if value:
          raise TypeError(
              f"{owner}: {getattr(inner_factory, '__name__', 'inner_factory')} takes *{name}; "
              "inject_hyperparams passes hyperparameters by name only."
          )
      elif kind is inspect.Parameter.VAR_KEYWORD:
        arguments.update(value)
      else:
        arguments[name] = value

    numeric, scheduled, static = {}, {}, {}
    for name, value in arguments.items():
      if name in static_names or _is_static_value(value):
        static[name] = value
      elif _is_stateful_schedule(value):
        scheduled[name] = value
      elif callable(value) and not isinstance(value, GradientTransformation):
        scheduled[name] = WrappedSchedule(value)  # pyright: ignore[reportArgumentType]  (a callable hyperparameter is a schedule)
      elif _is_numeric(value):
        numeric[name] = value
      else:
        static[name] = value

    tx = InjectHyperparams(
        inner_factory,
        numeric_names=tuple(numeric),
        numeric_values=tuple(numeric.values()),
        numeric_dtypes=(),
        schedule_names=tuple(scheduled),
        schedules=tuple(scheduled.values()),
        static_items=tuple(static.items()),
        positional_names=positional_names,
        hyperparam_dtype=None if hyperparam_dtype is None else np.dtype(hyperparam_dtype),
    )
    return tx.replace(numeric_dtypes=tuple(tx._dtype_for(v) for v in numeric.values()))

  return wrapped


@shared_args
def inject_stateful_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: np.dtype | None = None,
) -> Callable[..., InjectHyperparams]:
  """The same as ``inject_hyperparams`` (Optax's older name; both accept stateful schedules).

  Deprecated, as in Optax 0.2.8, and warns so when called.

  Args:
    inner_factory: a function returning a transformation.
    static_args: the name (or names) of callable arguments that are not schedules.
    hyperparam_dtype: if given, every floating hyperparameter is held in this dtype instead.

  Returns:
    A factory with ``inner_factory``'s signature; see ``inject_hyperparams``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...   warnings.simplefilter("ignore", DeprecationWarning)
    ...   tx = steadax.inject_stateful_hyperparams(steadax.sgd)(learning_rate=0.1)
    >>> sorted(tx.init(jnp.zeros(1)).hyperparams)
    ['learning_rate']
  """
  warn_deprecated_call("inject_stateful_hyperparams is deprecated, use inject_hyperparams instead")
  return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)
