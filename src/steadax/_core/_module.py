"""Frozen dataclass pytrees: the base of every steadax object that carries hyperparameters.

A ``Module`` subclass is a frozen dataclass registered with JAX. Its fields are split at flatten time:

* fields declared with ``static_field()`` always go to the tree's auxiliary data;
* other fields are *leaves* when they hold numbers, arrays or pytrees of those (including other
  Modules), and auxiliary data otherwise (plain callables, strings, dtypes, booleans, ``None``).

So ``jax.jit(step)(tx, ...)`` sees a learning rate of ``0.1`` as a traced scalar (a new value does not
recompile) while flags, masks and user callables are part of the compiled program's identity.
Equality is identity, as for Optax's transformations built from closures.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

__all__ = ["Module", "static_field", "field"]

_NUMERIC_SCALARS = (int, float, complex, np.ndarray, np.generic, jax.Array)


def static_field(**kwargs: Any) -> Any:
  """A dataclass field that is always static (part of the compiled program's identity)."""
  metadata = dict(kwargs.pop("metadata", {}) or {})
  metadata["static"] = True
  return dataclasses.field(metadata=metadata, **kwargs)


def field(**kwargs: Any) -> Any:
  """A dataclass field whose value decides, at flatten time, whether it is a leaf."""
  return dataclasses.field(**kwargs)


def _is_numeric_leaf(value: Any) -> bool:
  return isinstance(value, _NUMERIC_SCALARS) and not isinstance(value, bool)


def _is_dynamic(value: Any) -> bool:
  """Whether a field value belongs among the tree's children."""
  if value is None or isinstance(value, (bool, str, bytes, type, np.dtype)):
    return False
  if _is_numeric_leaf(value) or isinstance(value, Module):
    return True
  if callable(value):
    return False
  if isinstance(value, (tuple, list, dict)):
    leaves = jax.tree_util.tree_leaves(value, is_leaf=lambda x: isinstance(x, Module))
    return bool(leaves) and all(_is_numeric_leaf(l) or isinstance(l, Module) for l in leaves)
  return False


def _static_equal(a: Any, b: Any) -> bool:
  if a is b:
    return True
  if type(a) is not type(b):
    return False
  try:
    hash(a)
    hash(b)
  except TypeError:
    return False
  try:
    return bool(a == b)
  except Exception:  # pragma: no cover - exotic __eq__
    return False


def _static_hash(value: Any) -> int:
  try:
    return hash(value)
  except TypeError:
    return id(value)


class _Aux:
  """Auxiliary data of a Module: hashable even when a static value (a mask tree) is not."""

  __slots__ = ("dynamic_names", "static_items")

  def __init__(self, dynamic_names: tuple[str, ...], static_items: tuple[tuple[str, Any], ...]):
    self.dynamic_names = dynamic_names
    self.static_items = static_items

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, _Aux):
      return NotImplemented
    if self.dynamic_names != other.dynamic_names or len(self.static_items) != len(other.static_items):
      return False
    return all(
        na == nb and _static_equal(va, vb)
        for (na, va), (nb, vb) in zip(self.static_items, other.static_items)
    )

  def __hash__(self) -> int:
    return hash((self.dynamic_names, tuple((n, _static_hash(v)) for n, v in self.static_items)))

  def __repr__(self) -> str:
    return f"_Aux(dynamic={self.dynamic_names}, static={[n for n, _ in self.static_items]})"


class Module:
  """Base class: subclasses become frozen dataclasses registered as JAX pytrees.

  Example:
    >>> import jax
    >>> class Scale(Module):
    ...   factor: float
    >>> jax.tree_util.tree_leaves(Scale(0.5))
    [0.5]
  """

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    if "__annotations__" not in cls.__dict__:
      cls.__annotations__ = {}
    dataclasses.dataclass(frozen=True, eq=False, repr=True)(cls)
    names = tuple(f.name for f in dataclasses.fields(cls))
    static = frozenset(f.name for f in dataclasses.fields(cls) if f.metadata.get("static", False))

    def flatten_with_keys(obj):
      dyn_names, children, static_items = [], [], []
      for name in names:
        value = obj.__dict__[name]
        if name not in static and _is_dynamic(value):
          dyn_names.append(name)
          children.append((jax.tree_util.GetAttrKey(name), value))
        else:
          static_items.append((name, value))
      return children, _Aux(tuple(dyn_names), tuple(static_items))

    def flatten(obj):
      children, aux = flatten_with_keys(obj)
      return [c for _, c in children], aux

    def unflatten(aux: _Aux, children):
      obj = object.__new__(cls)
      for name, value in aux.static_items:
        object.__setattr__(obj, name, value)
      for name, value in zip(aux.dynamic_names, children):
        object.__setattr__(obj, name, value)
      return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)

  def replace(self, **changes: Any):
    """A copy with some fields changed (``dataclasses.replace``)."""
    return dataclasses.replace(self, **changes)
