"""The interface: Optax's ``GradientTransformation`` as frozen pytree objects.

``GradientTransformation`` and ``GradientTransformationExtraArgs`` are the two classes every
transformation is an instance of; ``GradientTransformation(init, update)`` builds one from a pair of
functions, exactly as in Optax, so the classes that hold such a pair live here too: constructing the
interface is part of the interface. A function pair goes through the same contract
(``_contract.py``) as every steadax transformation.
"""

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple, Self

from ._contract import conform_init, conform_state, conform_updates
from ._module import Module, static_field
from ._types import OptState, Params, Updates

__all__ = [
    "EmptyState",
    "GradientTransformation",
    "GradientTransformationExtraArgs",
    "TransformInitFn",
    "TransformUpdateExtraArgsFn",
    "TransformUpdateFn",
    "init_empty_state",
]

TransformInitFn = Callable[[Params], OptState]
TransformUpdateFn = Callable[..., tuple[Updates, OptState]]
TransformUpdateExtraArgsFn = TransformUpdateFn


class EmptyState(NamedTuple):
  """The state of a stateless transformation."""


def init_empty_state(params: Params) -> EmptyState:
  """Init function of stateless transformations: returns ``EmptyState()``.

  Args:
    params: the parameters (unused).

  Returns:
    ``EmptyState()``.

  Example:
    >>> import steadax
    >>> steadax.init_empty_state({"w": 1.0})
    EmptyState()
  """
  del params
  return EmptyState()


class GradientTransformation(Module):
  """A pair of pure functions ``init(params) -> state`` and ``update(updates, state, params)``.

  ``GradientTransformation(init_fn, update_fn)`` builds one from two functions, exactly as in Optax,
  and unpacks as a pair (``init, update = tx``). Every transformation steadax builds is an instance.

  Example:
    >>> import jax.numpy as jnp
    >>> tx = GradientTransformation(lambda p: EmptyState(), lambda u, s, p=None: (u, s))
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([1., 1.], dtype=float32)
  """

  def __new__(cls, *args: Any, **kwargs: Any) -> Self:
    # Both function-pair classes subclass the class called, so the result is an instance of `cls`.
    if cls is GradientTransformation:
      return object.__new__(_FunctionTransformation)  # pyright: ignore[reportReturnType]
    if cls is GradientTransformationExtraArgs:
      return object.__new__(_FunctionTransformationExtraArgs)  # pyright: ignore[reportReturnType]
    return object.__new__(cls)

  # The abstract interface; concrete subclasses override both.
  def init(self, params: Params) -> OptState:  # pragma: no cover - abstract
    raise NotImplementedError

  def update(self, updates: Updates, state: OptState, params: Params | None = None):  # pragma: no cover
    raise NotImplementedError

  # Optax's transformations are NamedTuples (init, update); keep that unpacking working.
  def __iter__(self):
    return iter((self.init, self.update))

  def __len__(self) -> int:
    return 2

  def __getitem__(self, index: int):
    return (self.init, self.update)[index]


class GradientTransformationExtraArgs(GradientTransformation):
  """A transformation whose ``update`` accepts keyword extras (``value``, ``grad``, ``value_fn``...).

  Every transformation steadax builds is one; unknown extras are ignored.

  Example:
    >>> import jax.numpy as jnp
    >>> tx = GradientTransformationExtraArgs(
    ...     lambda p: EmptyState(), lambda u, s, p=None, **extra: (u, s))
    >>> tx.update(jnp.ones(1), EmptyState(), value=3.0)[0]
    Array([1.], dtype=float32)
  """


def _set_function_pair(obj: Any, owner: str, init: Any, update: Any, fields: dict) -> None:
  """Fill the ``init_fn``/``update_fn`` fields from Optax's ``(init, update)`` arguments.

  Optax's transformations are NamedTuples built as ``GradientTransformation(init=..., update=...)``;
  the field names are accepted too because ``dataclasses.replace`` passes those.
  """
  init = fields.pop("init_fn", init)
  update = fields.pop("update_fn", update)
  if fields:
    raise TypeError(f"{owner}: unexpected arguments {sorted(fields)}; expected `init` and `update`.")
  for name, fn in (("init", init), ("update", update)):
    if not callable(fn):
      raise TypeError(f"{owner}: `{name}` must be a callable, got {fn!r}.")
  object.__setattr__(obj, "init_fn", init)
  object.__setattr__(obj, "update_fn", update)


class _FunctionTransformation(GradientTransformation):
  init_fn: Callable = static_field()
  update_fn: Callable = static_field()

  def __init__(self, init: Any = None, update: Any = None, **fields: Any):
    _set_function_pair(self, "GradientTransformation", init, update, fields)

  def init(self, params):
    return conform_init(_function_owner(self), self.init_fn(params))

  def update(self, updates, state, params=None, **extra_args):
    del extra_args
    result = self.update_fn(*_update_arguments(self.update_fn, updates, state, params))
    return _conform_pair(self, updates, state, params, *result)


class _FunctionTransformationExtraArgs(GradientTransformationExtraArgs):
  init_fn: Callable = static_field()
  update_fn: Callable = static_field()

  def __init__(self, init: Any = None, update: Any = None, **fields: Any):
    _set_function_pair(self, "GradientTransformationExtraArgs", init, update, fields)

  def init(self, params):
    return conform_init(_function_owner(self), self.init_fn(params))

  def update(self, updates, state, params=None, **extra_args):
    result = self.update_fn(*_update_arguments(self.update_fn, updates, state, params), **extra_args)
    return _conform_pair(self, updates, state, params, *result)


def _update_arguments(update_fn: Callable, updates: Any, state: Any, params: Any) -> tuple:
  """The positional arguments for a user's ``update`` function.

  Optax's ``GradientTransformation`` is a NamedTuple: ``tx.update(g, s)`` calls the user's function
  with exactly ``(g, s)``, so ``lambda u, s: (u, s)`` is a valid update there. Without params, the
  function gets ``None`` for them only where it takes a third positional argument.
  """
  if params is not None or _takes_params(update_fn):
    return updates, state, params
  return updates, state


def _takes_params(update_fn: Callable) -> bool:
  try:
    signature = inspect.signature(update_fn)
  except (TypeError, ValueError):
    return True  # a builtin or an odd callable: pass params as Optax's callers do
  try:
    signature.bind(None, None, None)
  except TypeError:
    return False
  return True


def _function_owner(tx: Any) -> str:
  return f"GradientTransformation({getattr(tx.update_fn, '__qualname__', 'update')})"


def _conform_pair(tx: Any, updates: Any, state: Any, params: Any, new_updates: Any, new_state: Any):
  """A function pair goes through the same contract as every steadax transformation."""
  owner = _function_owner(tx)
  return conform_updates(owner, updates, params, new_updates), conform_state(owner, state, new_state)

