"""Validation of hyperparameters at construction time (concrete values only; tracers pass)."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

__all__ = [
    "check_range", "check_positive", "check_nonnegative", "check_decay", "check_schedule_or_scalar",
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
  if arr.shape != () or not np.issubdtype(arr.dtype, np.number):
    return None
  if np.iscomplexobj(arr):
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


def check_decay(owner: str, name: str, value: Any) -> None:
  """A decay rate (``b1``, ``b2``, ``momentum``) lies in [0, 1]."""
  check_range(owner, name, value, 0.0, 1.0)


def check_schedule_or_scalar(owner: str, name: str, value: Any) -> None:
  """A learning rate must be a real scalar or a callable; NaN/inf are rejected."""
  if value is None:
    raise ValueError(f"{owner}: {name} is required.")
  if callable(value):
    return
  if isinstance(value, (str, bytes)):
    raise TypeError(f"{owner}: {name} must be a number or a schedule, got {value!r}.")
  shape = np.shape(value)
  if shape != ():
    raise ValueError(f"{owner}: {name} must be a scalar, got an array of shape {shape}.")
  v = _concrete(value)
  if v is not None and not math.isfinite(v):
    raise ValueError(f"{owner}: {name} must be finite, got {value!r}.")
