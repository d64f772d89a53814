"""One dtype-knob naming convention across the public surface.

Every public factory of steadax (top level and public subpackages) is inspected:

* where the installed Optax has a factory of the same name, steadax keeps Optax's name for each of
  Optax's dtype arguments (``mu_dtype``, ``accumulator_dtype``, ``dtype_momentum``, ...): code written
  for Optax keeps working;
* any other dtype argument (a knob only steadax has) is named ``<statistic>_dtype`` after the state
  statistic it sets, from one vocabulary (``STEADAX_KNOBS``), so the same statistic never gets two
  names (``precond_dtype`` beside ``preconditioner_dtype``) and no new name joins Optax's four.

A dtype argument is any parameter whose name contains ``dtype``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import optax
import pytest

import steadax

# Knobs steadax adds where Optax has none: `<statistic>_dtype`, the statistic named as in the state.
STEADAX_KNOBS = frozenset({
    "mu_dtype",              # first moment (Optax's name, also where Optax lacks the knob)
    "nu_dtype",              # second moment
    "accumulator_dtype",     # a generic accumulator (Optax's name for trace/ema/sgd)
    "preconditioner_dtype",  # matrix preconditioners (Shampoo, PSGD)
    "statistics_dtype",      # matrix statistics (Shampoo, SOAP)
    "eigenbasis_dtype",      # SOAP's eigenbasis
    "average_dtype",         # the parameter average of ema_params / swa_params (state `average`)
    "compensation_dtype",    # kahan_summation's error term (state `compensation`)
})
_CONVENTION = re.compile(r"^[a-z]+_dtype$")

# Factories known to break the convention, with why; strict xfail: fixing one makes its entry fail
# until it is removed from here.
KNOWN_VIOLATIONS: dict = {}

# Optax modules searched for a factory of the same name, per steadax subpackage.
_OPTAX_HOMES = {
    "": ("", "contrib"),
    "transforms": ("",),
    "optimizers": ("",),
    "wrappers": ("",),
    "linesearch": ("",),
}


def _public_modules():
  mods = {"": steadax}
  for info in pkgutil.iter_modules(steadax.__path__):
    if not info.name.startswith("_"):
      mods[info.name] = importlib.import_module(f"steadax.{info.name}")
  return mods


def _dtype_params(fn):
  try:
    params = inspect.signature(fn).parameters
  except (TypeError, ValueError):
    return None
  return [name for name in params if "dtype" in name]


def _optax_counterpart(subpackage, name):
  for home in _OPTAX_HOMES.get(subpackage, (subpackage, "")):
    module = optax if not home else getattr(optax, home, None)
    fn = getattr(module, name, None) if module is not None else None
    if callable(fn) and not inspect.isclass(fn) and _dtype_params(fn) is not None:
      return fn
  return None


def _factories():
  seen = {}
  for sub, module in _public_modules().items():
    # The top-level package re-exports its subpackages without an ``__all__`` of its own.
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in names:
      fn = getattr(module, name, None)
      if not callable(fn) or inspect.isclass(fn):
        continue
      knobs = _dtype_params(fn)
      if knobs is None:
        continue
      key = f"{sub}.{name}" if sub else name
      seen[key] = (sub, name, fn)
  return seen


FACTORIES = _factories()
WITH_KNOBS = sorted(k for k, (_, _, fn) in FACTORIES.items() if _dtype_params(fn))


def _violations(key):
  sub, name, fn = FACTORIES[key]
  ours = _dtype_params(fn)
  theirs = _optax_counterpart(sub, name)
  optax_knobs = _dtype_params(theirs) if theirs is not None else []
  problems = [f"Optax's `{k}` is missing (renamed?)" for k in optax_knobs if k not in ours]
  for k in ours:
    if k in optax_knobs:
      continue
    if k not in STEADAX_KNOBS or not _CONVENTION.match(k):
      problems.append(f"`{k}` is neither Optax's name here nor one of {sorted(STEADAX_KNOBS)}")
  return problems


def _marks(key):
  name = key.rsplit(".", 1)[-1]
  if name in KNOWN_VIOLATIONS:
    return [pytest.mark.xfail(reason=KNOWN_VIOLATIONS[name], strict=True)]
  return []


@pytest.mark.parametrize("key", [pytest.param(k, marks=_marks(k)) for k in WITH_KNOBS])
def test_dtype_knob_names(key):
  problems = _violations(key)
  assert not problems, f"{key}: " + "; ".join(problems)


def test_optax_dtype_knobs_keep_optax_names():
  """Every factory Optax has with a dtype argument exists in steadax with that argument."""
  missing = []
  for key, (sub, name, fn) in FACTORIES.items():
    theirs = _optax_counterpart(sub, name)
    if theirs is None:
      continue
    for k in _dtype_params(theirs):
      if k not in _dtype_params(fn):
        missing.append(f"{key}: {k}")
  assert not missing, missing


def test_the_inspection_sees_the_knobs():
  # Guards the test itself: if discovery broke (no factories found), every check above would pass.
  names = {k.rsplit(".", 1)[-1] for k in WITH_KNOBS}
  assert {"adam", "sgd", "ema", "inject_hyperparams", "adafactor"} <= names
  assert _optax_counterpart("", "adam") is optax.adam
  assert _optax_counterpart("contrib", "schedule_free") is optax.contrib.schedule_free
