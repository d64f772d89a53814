"""Validation of hyperparameters at construction time (concrete values only; tracers pass)."""

import inspect
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import numpy as np

from ._interface import GradientTransformation

__all__ = [
    "check_range", "check_positive", "check_nonnegative", "check_positive_int", "check_nonnegative_int",
    "check_one_of", "check_decay", "check_decay_below_one",
    "check_schedule_or_scalar",
    "check_schedule_output",
]


def _concrete(value: Any) -> float | None:
  if callable(value) or value is None:
    return None
  if isinstance(value, jax.core.Tracer):
    return None
  try:
    arr = np.asarray(value)
  except Exception:
    return None
  # jnp.issubdtype knows the ml_dtypes floats (bfloat16, float8...), which numpy does not count as
  # numbers: a bfloat16 value is checked like a float32 one.
  if arr.shape != () or arr.dtype == np.bool_ or not jax.numpy.issubdtype(arr.dtype, np.number):
    return None
  if jax.numpy.issubdtype(arr.dtype, np.complexfloating):
    return None
  return float(arr)


def check_range(owner: str, name: str, value: Any, low: float, high: float, *,
                low_open: bool = False, high_open: bool = False) -> None:
  """Raise ValueError if a concrete ``value`` lies outside ``[low, high]`` (or the open variant)."""
  v = _concrete(value)
  if v is None:
    return
  bad = math.isnan(v) or v < low or v > high or (low_open and v == low) or (high_open and v == high)
  if bad:
    lb = "(" if low_open else "["
    hb = ")" if high_open else "]"
    raise ValueError(f"{owner}: {name} must lie in {lb}{low}, {high}{hb}, got {value!r}.")


def check_positive(owner: str, name: str, value: Any) -> None:
  check_range(owner, name, value, 0.0, math.inf, low_open=True)


def check_nonnegative(owner: str, name: str, value: Any) -> None:
  check_range(owner, name, value, 0.0, math.inf)


def _check_int(owner: str, name: str, value: Any, kind: str, low: int) -> None:
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
    raise ValueError(f"{owner}: {name} must be a {kind} Python int, got {value!r}.")


def check_positive_int(owner: str, name: str, value: Any) -> None:
  """Raise a ValueError unless ``value`` is a positive Python (or NumPy) int: the static sizes of
  the matrix optimizers, checked from ``__post_init__`` (the class, its factory and ``.replace``).

  Example:
    >>> check_positive_int("scale_by_soap", "precondition_frequency", 0)
    Traceback (most recent call last):
    ...
    ValueError: scale_by_soap: precondition_frequency must be a positive Python int, got 0.
  """
  _check_int(owner, name, value, "positive", 1)


def check_nonnegative_int(owner: str, name: str, value: Any) -> None:
  _check_int(owner, name, value, "non-negative", 0)


def check_one_of(*options: Any) -> Callable[[str, str, Any], None]:
  """The check of a field that takes one of ``options`` (a static choice: a mode, an algorithm)."""
  def check(owner: str, name: str, value: Any) -> None:
    if value not in options:
      raise ValueError(f"{owner}: {name} must be one of {options}, got {value!r}.")
  return check


def check_decay(owner: str, name: str, value: Any) -> None:
  """A decay rate (``b1``, ``b2``, ``momentum``) lies in [0, 1]."""
  check_range(owner, name, value, 0.0, 1.0)


def check_decay_below_one(owner: str, name: str, value: Any) -> None:
  """A decay in [0, 1) where ``1 - decay^t`` is a divisor (Adam's bias corrections): at 1 it is 0."""
  check_range(owner, name, value, 0.0, 1.0, high_open=True)


def check_schedule_or_scalar(owner: str, name: str, value: Any) -> None:
  """A learning rate must be a real scalar or a schedule returning one; NaN/inf are rejected.

  A schedule is traced once on an abstract int32 step (``jax.eval_shape``, no computation): one that
  returns an array is rejected here instead of being broadcast against the parameters. A schedule
  that cannot be traced abstractly (Python control flow on the step) is checked when it runs.
  """
  if value is None:
    raise ValueError(f"{owner}: {name} is required.")
  if callable(value):
    check_schedule_output(owner, name, value)
    return
  if isinstance(value, (str, bytes)):
    raise TypeError(f"{owner}: {name} must be a number or a schedule, got {value!r}.")
  shape = np.shape(value)
  if shape != ():
    raise ValueError(f"{owner}: {name} must be a scalar, got an array of shape {shape}.")
  v = _concrete(value)
  if v is not None and not math.isfinite(v):
    raise ValueError(f"{owner}: {name} must be finite, got {value!r}.")


def check_schedule_output(owner: str, name: str, schedule: Any) -> None:
  """Raise ValueError if ``schedule(step)`` is not a scalar (traced abstractly; untraceable passes)."""
  if isinstance(schedule, GradientTransformation) or isinstance(schedule, type):
    raise TypeError(
        f"{owner}: {name} must be a number or a schedule (a function of the step count), got "
        f"{getattr(schedule, '__name__', type(schedule).__name__)}.")
  try:
    inspect.signature(schedule).bind(0)
  except TypeError:
    raise TypeError(
        f"{owner}: the schedule given as {name} must take one argument, the step count "
        f"(`lambda count: ...`); its signature is {inspect.signature(schedule)}.") from None
  except ValueError:  # no signature to read (a builtin): checked when it runs
    pass
  try:
    out = jax.eval_shape(schedule, jax.ShapeDtypeStruct((), np.int32))
  except Exception:  # noqa: BLE001 - a schedule that needs a concrete step is checked at run time
    return
  shapes = [np.shape(leaf) for leaf in jax.tree_util.tree_leaves(out)]
  if len(shapes) != 1 or shapes[0] != ():
    got = f"shape {shapes[0]}" if len(shapes) == 1 else f"{type(out).__name__} {out}"
    raise ValueError(
        f"{owner}: the schedule given as {name} returned {got}; a schedule must return a scalar "
        "(one value for every parameter; an array is not broadcast per column).")
