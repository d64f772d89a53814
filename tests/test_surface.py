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

import ast
import enum
import importlib
import inspect
import pathlib
import re
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


# One surface (issue 8, item 7). The public names of steadax and of each of Optax's namespaces are
# exactly Optax 0.2.8's plus these extensions; docs/extensions.md gives each one's reason (and
# test_extensions_page_lists_the_same_names keeps the page and this table equal). Anything else
# lives in a private module.
# Packages that are layers of the code base, not namespaces: what they define is re-exported at the
# top level or, for Optax's transforms-only names, in steadax.transforms.
INTERNAL_LAYERS = ["_optimizers", "_wrappers", "_linesearch", "_solvers"]
# Imports point down the layers (core, then transforms, then optimizers and wrappers, then the
# public surfaces); packages of one rank may import each other. Package __init__ files are the
# public surfaces and may import from any layer.
LAYER_RANKS = {
    "_core": 0, "_fusion": 1, "tree": 1, "_linalg": 2, "_utils": 3, "schedules": 3, "losses": 3, "projections": 3,
    "second_order": 3, "assignment": 3, "perturbations": 3, "microbatching": 3, "experimental": 3,
    "checkpoint": 3,
    "transforms": 4, "_linesearch": 4, "_optimizers": 5, "_wrappers": 5, "contrib": 6, "testing": 6, "_solvers": 6,
    "": 7, "as_optax": 7,
}
# (module, imported module) pairs that still point up; each must be removed from this table when
# the import goes (test_imports_point_down_the_layers fails on a stale entry).
UPWARD_IMPORTS: dict = {}
SRC = pathlib.Path(steadax.__file__).resolve().parent
EXTENSIONS_PAGE = SRC.parents[1] / "docs" / "extensions.md"


def _listed_extensions() -> dict[str, set[str]]:
  """The extensions docs/extensions.md lists, by namespace: the one list of them (a new public name
  that Optax lacks is a bullet on that page, nothing more)."""
  section = EXTENSIONS_PAGE.read_text().split("\n## The list\n", 1)[1].split("\n## ", 1)[0]
  listed: dict[str, set[str]] = {}
  for line in section.splitlines():
    if line.startswith("- "):  # a bullet's first line holds its names
      for dotted in re.findall(r"`steadax\.([\w.]+)`", line.split(":", 1)[0]):
        namespace, _, name = dotted.rpartition(".")
        listed.setdefault(namespace, set()).add(name)
  return listed


EXTENSIONS = _listed_extensions()


def _all_attributes(module):
  """Every name a user sees in ``dir(module)``: imported modules and typing helpers included."""
  return {n for n in dir(module) if not n.startswith("_")}


@pytest.mark.parametrize("namespace", [n for n in NAMESPACES if n != "transforms"],
                         ids=[n or "optax" for n in NAMESPACES if n != "transforms"])
def test_public_names_are_optax_plus_extensions(namespace):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    theirs = set(_public_names(_get(optax, namespace)))
  extra = _all_attributes(_get(steadax, namespace)) - theirs
  assert extra == EXTENSIONS.get(namespace, set()), (
      f"not Optax's and not a listed extension: {sorted(extra - EXTENSIONS.get(namespace, set()))}; "
      f"listed but not public: {sorted(EXTENSIONS.get(namespace, set()) - extra)}")


def test_transforms_holds_optax_transforms_and_the_blocks():
  # Optax's optax.transforms, plus the building blocks Optax keeps at its top level: every other
  # name is a top-level name (the same object), and every top-level name defined in a
  # steadax.transforms module is there (aliases such as ScaleState = EmptyState are defined in
  # the core, so the first check, not the second, covers them).
  theirs = set(_public_names(optax.transforms))
  ours = _all_attributes(steadax.transforms)
  top = _all_attributes(steadax)
  assert not ours - theirs - top, sorted(ours - theirs - top)
  blocks = {n for n in top
            if getattr(getattr(steadax, n), "__module__", "").startswith("steadax.transforms.")}
  assert not blocks - ours, sorted(blocks - ours)
  for name in ours & top:
    assert getattr(steadax.transforms, name) is getattr(steadax, name), name


@pytest.mark.parametrize("namespace", [n for n in NAMESPACES if n] + INTERNAL_LAYERS)
def test_dunder_all_is_the_surface(namespace):
  module = importlib.import_module(f"steadax.{namespace}")
  assert sorted(module.__all__) == sorted(_all_attributes(module)), namespace


@pytest.mark.parametrize("layer", INTERNAL_LAYERS)
def test_internal_layers_are_not_namespaces(layer):
  # A layer re-exports nothing: the surfaces import from its modules (one export line per name).
  assert layer.startswith("_") and layer not in _all_attributes(steadax)
  module = importlib.import_module(f"steadax.{layer}")
  assert module.__all__ == [] and not _all_attributes(module), layer


def test_no_star_imports_in_public_surfaces():
  for init in SRC.rglob("__init__.py"):
    for node in ast.walk(ast.parse(init.read_text())):
      if isinstance(node, ast.ImportFrom):
        assert all(alias.name != "*" for alias in node.names), init.relative_to(SRC)


def test_extensions_page_is_read():
  # The parse found the page's bullets (a broken parse would list nothing and fail above, too).
  assert {"adam8bit", "soap", "Transformation", "as_optax"} <= EXTENSIONS[""]
  assert EXTENSIONS["contrib"] == {"cautious", "CautiousState", "scale_by_dog", "scale_by_dowg", "normuon",
                                   "scale_by_normuon", "NorMuonState", "polar_express_coefficients",
                                   "qk_clip", "QKClipSpec"}


def _relative_imports(path):
  """(imported module as a dotted path under steadax) for every relative import in ``path``."""
  package = list(path.relative_to(SRC).parts[:-1])
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.ImportFrom) and node.level:
      base = package[: len(package) - (node.level - 1)]
      yield ".".join(base + (node.module.split(".") if node.module else []))


def test_imports_point_down_the_layers():
  upward = set()
  for path in sorted(SRC.rglob("*.py")):
    if path.name == "__init__.py":
      continue
    rel = path.relative_to(SRC)
    rank = LAYER_RANKS[rel.parts[0]]
    for target in _relative_imports(path):
      if LAYER_RANKS[target.split(".")[0]] > rank:
        upward.add((rel.as_posix(), target))
  assert upward == set(UPWARD_IMPORTS), (
      f"new upward imports: {sorted(upward - set(UPWARD_IMPORTS))}; "
      f"gone (remove from UPWARD_IMPORTS): {sorted(set(UPWARD_IMPORTS) - upward)}")
