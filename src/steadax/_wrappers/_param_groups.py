"""Per-group multipliers of a base optimizer's learning rate and weight decay (``groups(..., base)``).

``torch.optim`` parameter groups and muP-style scaling give each group the base optimizer with its
learning rate and weight decay multiplied. Here that is a rewrite of the base transformation, done
once at construction: every ``learning_rate`` / ``weight_decay`` hyperparameter found in its tree
(the fields of ``scale_by_learning_rate``, ``add_decayed_weights``, the learning-rate-free
optimizers ...) is multiplied, a number by a number and a schedule by wrapping it. The group then
holds exactly the state the base would, so ``groups`` stays a ``partition`` with Optax's state.

Under ``inject_hyperparams`` the injected value stays the base value in the state (one
``state_set(state, "learning_rate", x)`` moves every group, keeping their ratios): the multiplier is
applied where the factory receives the value, every step.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._core._interface import GradientTransformation
from .._core._module import _CHILD, _HYPER, _KIND, Module, hyper_field
from .._core._transformation import Transformation
from ..schedules._inject import InjectHyperparams

__all__ = ["MULTIPLIERS", "scaled_base"]

# The settings a group may give, and the hyperparameter each one multiplies.
MULTIPLIERS = {"lr_mult": "learning_rate", "wd_mult": "weight_decay"}


class ScaledSchedule(Module):
  """``count -> factor * schedule(count)``: a schedule of a group with a multiplier."""

  schedule: Any = hyper_field()
  factor: Any = hyper_field()

  def __call__(self, count: Any) -> Any:
    return self.schedule(count) * self.factor


class _ScaledFactory:
  """An ``inject_hyperparams`` factory whose named arguments are multiplied before it builds.

  Static data of ``InjectHyperparams`` (``inner_factory``): compared and hashed by value, so equal
  groups share a compiled program.
  """

  def __init__(self, factory: Callable, factors: tuple[tuple[str, float], ...]):
    self.factory = factory
    self.factors = factors
    self.__name__ = getattr(factory, "__name__", "inner_factory")

  def __call__(self, *args: Any, **kwargs: Any) -> GradientTransformation:
    for name, factor in self.factors:
      kwargs[name] = _scaled_value(kwargs[name], factor)
    return self.factory(*args, **kwargs)

  def __eq__(self, other: object) -> bool:
    return (isinstance(other, _ScaledFactory) and other.factory == self.factory
            and other.factors == self.factors)

  def __hash__(self) -> int:
    return hash((_ScaledFactory, self.factory, self.factors))


def _scaled_value(value: Any, factor: float) -> Any:
  if callable(value):
    return ScaledSchedule(value, factor)
  return value * factor


def _check_factor(where: str, setting: str, factor: Any) -> float:
  if isinstance(factor, bool) or not isinstance(factor, (int, float, np.integer, np.floating)):
    raise TypeError(f"groups: {where}: {setting} must be a real number, got {factor!r}.")
  factor = float(factor)
  if not np.isfinite(factor) or factor < 0:
    raise ValueError(f"groups: {where}: {setting} must be finite and >= 0, got {factor}.")
  return factor


def _rewrite(node: Any, factors: dict[str, float], found: set[str]) -> Any:
  """``node`` with every hyperparameter named in ``factors`` multiplied (children included)."""
  if isinstance(node, InjectHyperparams):
    injected = set(node.numeric_names) | set(node.schedule_names)
    here = tuple(sorted((n, f) for n, f in factors.items() if n in injected))
    if not here:
      return node
    found.update(n for n, _ in here)
    return node.replace(inner_factory=_ScaledFactory(node.inner_factory, here))
  if not isinstance(node, Transformation):
    return node  # a foreign transformation (Optax's, a user's pair): its values are out of reach
  changes = {}
  for field in dataclasses.fields(node):
    kind, value = field.metadata.get(_KIND), getattr(node, field.name)
    if kind == _HYPER and field.name in factors and value is not None:
      found.add(field.name)
      changes[field.name] = _scaled_value(value, factors[field.name])
    elif kind == _CHILD:
      if isinstance(value, tuple):
        new = tuple(_rewrite(v, factors, found) for v in value)
      elif isinstance(value, dict):
        new = {k: _rewrite(v, factors, found) for k, v in value.items()}
      else:
        new = _rewrite(value, factors, found)
      changes[field.name] = new
  return node.replace(**changes) if changes else node


def scaled_base(base: GradientTransformation, settings: Mapping[str, Any], where: str) -> GradientTransformation:
  """``base`` with its learning rate and weight decay multiplied as ``settings`` says.

  Args:
    base: the base optimizer of ``groups``.
    settings: ``{"lr_mult": ..., "wd_mult": ...}`` (either or both; empty for the base as it is).
    where: the group's pattern, for the messages.

  Returns:
    The rewritten transformation (``base`` itself when every multiplier is 1).

  Raises:
    ValueError: an unknown setting, a negative or non-finite multiplier, or a multiplier whose
      hyperparameter the base does not have (a foreign transformation hides its values).
  """
  unknown = sorted(set(settings) - set(MULTIPLIERS))
  if unknown:
    raise ValueError(
        f"groups: {where}: unknown group settings {unknown}; a group gives a transformation or "
        f"multipliers of the base's hyperparameters: {sorted(MULTIPLIERS)}.")
  factors = {MULTIPLIERS[k]: _check_factor(where, k, v) for k, v in settings.items()}
  factors = {name: f for name, f in factors.items() if f != 1.0}
  if not factors:
    return base
  found: set[str] = set()
  scaled = _rewrite(base, factors, found)
  missing = sorted(set(factors) - found)
  if missing:
    settings_names = [k for k, v in MULTIPLIERS.items() if v in missing]
    raise ValueError(
        f"groups: {where}: {settings_names} multiplies the base optimizer's {missing}, which it "
        f"does not have (a {type(base).__name__}); steadax finds these hyperparameters in its own "
        "transformations and in inject_hyperparams, not inside foreign (Optax or user-written) "
        "transformations.")
  return scaled
