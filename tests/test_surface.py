"""The drop-in promise: every public name of Optax's namespaces exists in steadax, callables take the
same parameters (names, kinds, order, defaults), and state records have the same field names.

Rules, applied to every name (documented here once rather than per name):
* steadax may add parameters only as keyword-only parameters with defaults (``nu_dtype`` of the Adam
  family, ``accumulator_dtype`` of ``apply_every`` ...): every call written for Optax still works.
* The names of ``*args`` / ``**kwargs`` are not part of a call and are not compared.
* Defaults compare by value. Where Optax's default is an object built at import time, steadax's
  must be its counterpart: a callable for a function (``clip_value_fn``, ``decay_rate_fn``,
  ``transform_fn`` ...), a ``GradientTransformation`` for a transformation (``lbfgs``'s line search),
  an instance of the same-named class otherwise (``Gumbel()``), the same-named member of the
  same-named enum for an enum.
* NamedTuples (state records) compare their field names; protocols (``TransformInitFn`` ...) are
  annotations and are only required to exist.
Deliberate exceptions are listed in ``DIFFERENCES`` with their reason.
"""

from __future__ import annotations

import enum
import inspect
import typing
import warnings

import optax
import pytest

import steadax

NAMESPACES = [
    "", "transforms", "losses", "tree", "tree_utils", "schedules", "microbatching", "projections",
    "second_order", "assignment", "perturbations", "contrib", "experimental", "experimental.aggregating",
]

# Written by another engineer (issue 3); tolerated only until steadax.contrib.muon exists, after
# which every one of these names is enforced.
MUON_GALORE = {"muon", "scale_by_muon", "MuonDimensionNumbers", "MuonState",
               "galore", "scale_by_galore", "GaLoreDimensionNumbers", "GaLoreState"}

# (namespace, name) -> why steadax's signature differs from Optax's.
DIFFERENCES = {
    ("", "GradientTransformation"): (
        "a frozen-dataclass pytree whose __new__ dispatches `GradientTransformation(init, update)` "
        "to a function pair (positional and Optax's keywords both work, see tests/core/test_base.py); "
        "library transformations subclass it with their own fields"),
    ("", "GradientTransformationExtraArgs"): "as GradientTransformation",
    ("experimental.aggregating", "Aggregator"): (
        "as GradientTransformation: `Aggregator(init, update)` builds a function pair (Optax's is a "
        "NamedTuple with fields init and update)"),
}
# (namespace, name, parameter) -> why that default differs.
DEFAULT_DIFFERENCES = {
    ("contrib", "sophia", "hessian_diagonal_fn"): (
        "None builds a fresh hutchinson_estimator_diag_hessian() per call, the same estimator as "
        "Optax's default instance, without one shared object in the signature"),
}


def _get(root, path):
  for part in filter(None, path.split(".")):
    root = getattr(root, part)
  return root


def _public_names(module):
  """Optax's own public names in ``module``: no private names, re-exported typing helpers or
  imported modules other than its own subpackages."""
  names = []
  for name in dir(module):
    if name.startswith("_"):
      continue
    obj = getattr(module, name)
    if inspect.ismodule(obj):
      if obj.__name__.startswith(module.__name__ + "."):
        names.append(name)
      continue
    if getattr(typing, name, None) is obj:
      continue  # `Any`, `NamedTuple`, `Protocol`... imported for annotations
    names.append(name)
  return names


def _same_default(theirs, ours):
  if theirs is inspect.Parameter.empty or ours is inspect.Parameter.empty:
    return theirs is ours
  if isinstance(theirs, enum.Enum):
    return type(theirs).__name__ == type(ours).__name__ and theirs.name == getattr(ours, "name", None)
  if hasattr(theirs, "init") and hasattr(theirs, "update"):  # a transformation (Optax: a NamedTuple)
    return isinstance(ours, steadax.GradientTransformation)
  if isinstance(theirs, (type(None), bool, int, float, complex, str, bytes, tuple, frozenset)):
    return type(theirs) is type(ours) and theirs == ours
  if inspect.isfunction(theirs) or inspect.isbuiltin(theirs):
    return callable(ours)
  if isinstance(theirs, type):
    return isinstance(ours, type) and theirs.__name__ == ours.__name__
  # Another object built at import time (a noise distribution ...): its counterpart's class.
  return type(theirs).__name__ == type(ours).__name__


def _signature(obj):
  try:
    return inspect.signature(obj)
  except (TypeError, ValueError):
    return None


def signature_problems(namespace, name, theirs, ours):
  """Differences between the parameters of Optax's and steadax's ``name``."""
  if (namespace, name) in DIFFERENCES:
    return []
  if isinstance(theirs, type) and hasattr(theirs, "_fields"):
    ours_fields = getattr(ours, "_fields", None)
    return [] if ours_fields == theirs._fields else [f"fields {ours_fields} != Optax's {theirs._fields}"]
  if not callable(theirs) or isinstance(theirs, enum.EnumMeta) or getattr(theirs, "_is_protocol", False):
    return []  # protocols (TransformInitFn ...) are annotations, not constructors
  sig_theirs, sig_ours = _signature(theirs), _signature(ours)
  if sig_theirs is None or sig_ours is None:
    return [] if (sig_theirs is None) == (sig_ours is None) else ["one signature is not inspectable"]
  problems = []
  p_theirs = list(sig_theirs.parameters.values())
  p_ours = list(sig_ours.parameters.values())
  variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)

  def key(p):
    return p.kind if p.kind in variadic else (p.name, p.kind)

  theirs_keys = [key(p) for p in p_theirs]
  shared = [p for p in p_ours if key(p) in theirs_keys]
  if [key(p) for p in shared] != theirs_keys:
    problems.append(f"parameters {[key(p) for p in p_ours]} != Optax's {theirs_keys}")
    return problems
  for p in p_ours:
    if key(p) not in theirs_keys and not (p.kind is inspect.Parameter.KEYWORD_ONLY
                                          and p.default is not inspect.Parameter.empty):
      problems.append(f"extra parameter {p.name!r} must be keyword-only with a default")
  for a, b in zip(p_theirs, shared):
    if (namespace, name, a.name) in DEFAULT_DIFFERENCES:
      continue
    if not _same_default(a.default, b.default):
      problems.append(f"default of {a.name!r}: {b.default!r} != Optax's {a.default!r}")
  return problems


@pytest.mark.parametrize("namespace", NAMESPACES, ids=[n or "optax" for n in NAMESPACES])
def test_namespace_matches_optax(namespace):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # Optax's deprecated aliases
    theirs_module = _get(optax, namespace)
    ours_module = _get(steadax, namespace)
    tolerated = MUON_GALORE if namespace == "contrib" and not hasattr(steadax.contrib, "muon") else set()
    missing, mismatched = [], []
    for name in _public_names(theirs_module):
      if not hasattr(ours_module, name):
        if name not in tolerated:
          missing.append(name)
        continue
      theirs, ours = getattr(theirs_module, name), getattr(ours_module, name)
      if inspect.ismodule(theirs):
        assert inspect.ismodule(ours), f"{namespace}.{name} should be a module"
        continue
      problems = signature_problems(namespace, name, theirs, ours)
      if problems:
        mismatched.append(f"{name}: " + "; ".join(problems))
  assert not missing, f"steadax.{namespace or '<top>'} lacks {missing}"
  assert not mismatched, "\n".join(mismatched)


def test_tolerance_for_muon_and_galore_ends_when_muon_exists():
  if hasattr(steadax.contrib, "muon"):
    assert all(hasattr(steadax.contrib, n) for n in MUON_GALORE)
  else:
    # Tolerated names really are Optax's (a typo here would hide a missing name).
    assert MUON_GALORE <= set(_public_names(optax.contrib))


def test_documented_differences_are_real():
  # An entry that no longer differs must be removed from the tables above.
  for (namespace, name), _ in DIFFERENCES.items():
    theirs, ours = getattr(_get(optax, namespace), name), getattr(_get(steadax, namespace), name)
    assert _signature(theirs) is not None
    assert str(_signature(theirs)) != str(_signature(ours)), name
  for (namespace, name, parameter), _ in DEFAULT_DIFFERENCES.items():
    theirs = inspect.signature(getattr(_get(optax, namespace), name)).parameters[parameter].default
    ours = inspect.signature(getattr(_get(steadax, namespace), name)).parameters[parameter].default
    assert not _same_default(theirs, ours), (name, parameter)


def test_the_rules_catch_differences():
  # The checker itself: a renamed, a reordered, a positional extra and a changed default all fail.
  def reference(a, b=1, *, c=None):
    return a, b, c

  assert not signature_problems("", "f", reference, lambda a, b=1, *, c=None, d=0: None)
  assert signature_problems("", "f", reference, lambda a, bb=1, *, c=None: None)
  assert signature_problems("", "f", reference, lambda b=1, a=0, *, c=None: None)
  assert signature_problems("", "f", reference, lambda a, b=1, e=0, *, c=None: None)
  assert signature_problems("", "f", reference, lambda a, b=2, *, c=None: None)
  assert signature_problems("", "f", reference, lambda a, b=1.0, *, c=None: None)
