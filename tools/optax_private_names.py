"""Writes src/steadax/as_optax/_optax_private.py: Optax's private modules -> steadax's objects.

Under ``steadax.as_optax`` an import of an Optax-private module (``optax._src.base``,
``optax.contrib._muon``) gives a module whose names are steadax's objects. The table is built from
the installed Optax (0.2.8): for every module of Optax with a private part in its dotted path, every
public name it defines (top-level ``def``, ``class`` and assignments) -> ``"module:attribute"`` of
its counterpart, or None where steadax has none (the name then raises a clear error when read).
A counterpart is, in this order:

1. steadax's object at the shortest public Optax path holding the same object
   (``optax._src.alias.adam`` is ``optax.adam``; ``optax.tree_utils._tree_math.tree_add`` is
   ``optax.tree.add``), where steadax has that path: steadax's public paths are Optax's
   (tests/test_surface.py);
2. for a name Optax keeps private, steadax's public object of the same name and structure
   (``optax._src.transform.ScaleByRmsWithCountState`` -> ``steadax.transforms``'s);
3. an entry of ``PRIVATE_COUNTERPARTS`` below, checked the same way: steadax's private objects
   (type aliases, records) and the Optax helpers public code imports (``as_optax._optax_helpers``).

"The same structure": the same NamedTuple fields; a function, or a class's constructor, accepting
every call Optax's does, and the public attributes of Optax's class; or an equal value (type aliases
naming the same types, messages).

Run: ``PYTHONPATH=src python tools/optax_private_names.py`` (tests/as_optax checks the file is
current).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import sys
import types
import typing
import warnings
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET = ROOT / "src" / "steadax" / "as_optax" / "_optax_private.py"

_HELPERS = "steadax.as_optax._optax_helpers"
# Names Optax keeps private that steadax has no public name for, with their counterparts. Optax's
# aliases of other libraries' objects (``PRNGKey = jax.Array``) map to those objects themselves.
PRIVATE_COUNTERPARTS: dict[tuple[str, str], str] = {
    ("optax._src.base", "ArrayTree"): f"{_HELPERS}:ArrayTree",
    ("optax._src.base", "PRNGKey"): "jax:Array",
    ("optax._src.base", "PyTree"): "steadax._core._types:PyTree",
    ("optax._src.base", "ScheduleState"): "typing:Any",
    ("optax._src.base", "Shape"): "steadax._core._types:Shape",
    ("optax._src.linesearch", "FLAG_CURVATURE_COND_NOT_SATISFIED"):
        "steadax._linesearch._zoom:FLAG_CURVATURE_COND_NOT_SATISFIED",
    ("optax._src.linesearch", "FLAG_INTERVAL_NOT_FOUND"):
        "steadax._linesearch._zoom:FLAG_INTERVAL_NOT_FOUND",
    ("optax._src.linesearch", "FLAG_INTERVAL_TOO_SMALL"):
        "steadax._linesearch._zoom:FLAG_INTERVAL_TOO_SMALL",
    ("optax._src.linesearch", "FLAG_NOT_A_DESCENT_DIRECTION"):
        "steadax._linesearch._zoom:FLAG_NOT_A_DESCENT_DIRECTION",
    ("optax._src.linesearch", "FLAG_NO_STEPSIZE_FOUND"):
        "steadax._linesearch._zoom:FLAG_NO_STEPSIZE_FOUND",
    ("optax._src.numerics", "abs_sq"): f"{_HELPERS}:abs_sq",
    ("optax._src.transform", "abs_sq"): f"{_HELPERS}:abs_sq",
    ("optax._src.utils", "canonicalize_dtype"): f"{_HELPERS}:canonicalize_dtype",
    ("optax._src.utils", "MultiNormalDiagFromLogScale"):
        "steadax._utils._multi_normal:MultiNormalDiagFromLogScale",
    ("optax.contrib._muon", "orthogonalize_via_newton_schulz"):
        "steadax.contrib._muon:orthogonalize_via_newton_schulz",
    ("optax.contrib._muon", "scale_by_shape"): "steadax.contrib._muon:scale_by_shape",
    ("optax.contrib._complex_valued", "SplitRealAndImaginaryArrays"):
        "steadax.contrib._complex_valued:SplitRealAndImaginaryArrays",
    ("optax.microbatching._microbatching", "IndividualOutputs"):
        "steadax.microbatching._microbatching:IndividualOutputs",
    ("optax.schedules._inject", "WrappedScheduleState"):
        "steadax.schedules._inject:WrappedScheduleState",
    ("optax.tree_utils._state_utils", "Initable"): "steadax.tree._state:Initable",
}


def _defined_names(module: types.ModuleType) -> list[str]:
  """Public names bound at the top level of ``module``'s source (not imported ones)."""
  source = pathlib.Path(module.__file__ or "").read_text(encoding="utf-8")
  names = []
  for node in ast.parse(source).body:
    targets: list[ast.expr] = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
      names.append(node.name)
    elif isinstance(node, ast.Assign):
      targets = node.targets
    elif isinstance(node, ast.AnnAssign):
      targets = [node.target]
    for target in targets:
      names.extend(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
  return [n for n in dict.fromkeys(names) if not n.startswith("_")]


def _module_names(optax: types.ModuleType) -> list[str]:
  """Every module of the Optax package but its tests, from its files (``optax/_src`` has no
  ``__init__.py``, so ``pkgutil.walk_packages`` does not enter it)."""
  root = pathlib.Path(optax.__file__).parent
  names = []
  for path in sorted(root.rglob("*.py")):
    parts = path.relative_to(root.parent).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    if parts[-1].endswith("_test") or parts[-1] in ("test_utils", "conftest"):
      continue
    names.append(".".join(parts))
  return names


def _namespaces(package: types.ModuleType, names: list[str]) -> list[tuple[str, types.ModuleType]]:
  """``(dotted prefix, module)`` for ``package`` and its public namespaces among ``names``, and the
  public module attributes of those (``optax.experimental.aggregating`` is
  ``optax.experimental._aggregating``)."""
  top = package.__name__
  namespaces = [("", package)]
  for name in names:
    if name != top and not any(part.startswith("_") for part in name.split(".")):
      namespaces.append((name.removeprefix(top + "."), importlib.import_module(name)))
  for prefix, namespace in list(namespaces):
    for name in dir(namespace):
      value = getattr(namespace, name)
      if (isinstance(value, types.ModuleType) and not name.startswith("_")
          and value.__name__.startswith(top + ".") and value.__name__.rpartition(".")[2] != name
          and (f"{prefix}.{name}" if prefix else name) not in dict(namespaces)):
        namespaces.append((f"{prefix}.{name}" if prefix else name, value))
  return namespaces


def _public_paths(namespaces: list[tuple[str, types.ModuleType]]) -> dict[int, list[str]]:
  """``id(object) -> [dotted public paths]`` over ``namespaces``."""
  paths: dict[int, list[str]] = {}
  for prefix, namespace in namespaces:
    for name in dir(namespace):
      if name.startswith("_"):
        continue
      value = getattr(namespace, name)
      if isinstance(value, (types.ModuleType, bool, int, float, str, type(None))):
        continue  # a module is a namespace, not a name; small constants are shared objects
      paths.setdefault(id(value), []).append(f"{prefix}.{name}" if prefix else name)
  return paths


def _steadax_namespaces() -> list[tuple[str, types.ModuleType]]:
  import steadax
  names = [f"steadax.{n}" for n in dir(steadax)
           if not n.startswith("_") and isinstance(getattr(steadax, n), types.ModuleType)]
  return _namespaces(steadax, names + ["steadax.experimental.aggregating"])


def _reference(path: str) -> str:
  """``"steadax.module:attribute"`` for a dotted public steadax path (``contrib.muon``)."""
  module, _, attribute = f"steadax.{path}".rpartition(".")
  return f"{module}:{attribute}"


def resolve(reference: str) -> Any:
  module, _, attribute = reference.partition(":")
  return getattr(importlib.import_module(module), attribute)


def _accepts_calls_of(ours: Any, theirs: Any) -> bool:
  """Whether every call ``theirs``'s signature accepts, ``ours``'s does (same names and order)."""
  try:
    mine, other = inspect.signature(ours).parameters, inspect.signature(theirs).parameters
  except (TypeError, ValueError):
    return False
  positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
  if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in other.values()):
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in mine.values())
  if not set(other) <= set(mine):
    return False
  ours_positional = [n for n, p in mine.items() if p.kind in positional]
  theirs_positional = [n for n, p in other.items() if p.kind in positional]
  required = {n for n, p in mine.items() if p.default is inspect.Parameter.empty
              and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
  return ours_positional[:len(theirs_positional)] == theirs_positional and required <= set(other)


def same_structure(ours: Any, theirs: Any) -> bool:
  """Whether ``ours`` can stand for Optax's ``theirs`` (see the module docstring)."""
  if ours is theirs:
    return True
  if inspect.isclass(ours) and inspect.isclass(theirs):
    if hasattr(ours, "_fields") or hasattr(theirs, "_fields"):
      return getattr(ours, "_fields", None) == getattr(theirs, "_fields", None)
    def public(cls: type) -> set[str]:  # attributes, and fields declared by annotation
      names = set(dir(cls)) | {n for c in cls.__mro__ for n in vars(c).get("__annotations__", {})}
      return {n for n in names if not n.startswith("_")}
    return public(theirs) <= public(ours) and _accepts_calls_of(ours, theirs)
  if inspect.isfunction(theirs):
    return callable(ours) and _accepts_calls_of(ours, theirs)
  return _same_alias(ours, theirs)


def _same_alias(ours: Any, theirs: Any) -> bool:
  """Equal values, or type aliases naming the same types (``collections.abc.Sequence[int]`` for
  ``typing.Sequence[int]``; forward references by name)."""
  try:
    if ours == theirs:
      return True
  except Exception:  # noqa: BLE001 - values that do not compare are not the same
    return False
  forward = lambda t: t.__forward_arg__ if isinstance(t, typing.ForwardRef) else t  # noqa: E731
  if isinstance(forward(ours), str) and isinstance(forward(theirs), str):
    return forward(ours) == forward(theirs)  # a forward reference, by the name it refers to
  origin = typing.get_origin(ours)
  if origin is None or origin != typing.get_origin(theirs):
    return False
  ours_args, theirs_args = typing.get_args(ours), typing.get_args(theirs)
  if origin is typing.Union:  # members in any order
    return len(ours_args) == len(theirs_args) and all(
        any(_same_alias(a, b) for b in theirs_args) for a in ours_args)
  return len(ours_args) == len(theirs_args) and all(map(_same_alias, ours_args, theirs_args))


def table() -> dict[str, dict[str, str | None]]:
  """``{private optax module: {name it defines: "module:attribute" of its counterpart, or None}}``."""
  import optax
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    optax_paths = _public_paths(_namespaces(optax, _module_names(optax)))
    steadax_namespaces = _steadax_namespaces()
    steadax_paths = {p for paths in _public_paths(steadax_namespaces).values() for p in paths}
    result: dict[str, dict[str, str | None]] = {}
    for module_name in _module_names(optax):
      parts = module_name.split(".")[1:]
      if not any(p.startswith("_") for p in parts):
        continue
      try:
        module = importlib.import_module(module_name)
      except ImportError:
        continue  # a module needing an optional dependency
      mapped: dict[str, str | None] = {}
      for name in _defined_names(module):
        value = getattr(module, name, None)
        candidates = [p for p in optax_paths.get(id(value), []) if p in steadax_paths]
        if not (inspect.isfunction(value) or inspect.isclass(value)):
          # A type alias (ArrayTree = chex.ArrayTree) is the same object as other aliases
          # (OptState, Params): only its own name is a counterpart.
          candidates = [p for p in candidates if p.rpartition(".")[2] == name]
        reference = None
        if candidates:
          best = min(candidates, key=lambda p: (p.count("."), p.rpartition(".")[2] != name, p))
          reference = _reference(best)
        else:
          same_name = sorted((p for p, ns in steadax_namespaces
                              if name in dir(ns) and same_structure(getattr(ns, name), value)),
                             key=lambda p: (p.count("."), p))
          if same_name:
            reference = _reference(f"{same_name[0]}.{name}" if same_name[0] else name)
          elif (module_name, name) in PRIVATE_COUNTERPARTS:
            reference = PRIVATE_COUNTERPARTS[module_name, name]
            if not same_structure(resolve(reference), value):
              raise AssertionError(f"{reference} does not stand for {module_name}.{name}")
        mapped[name] = reference
      result[module_name] = dict(sorted(mapped.items()))
  unused = set(PRIVATE_COUNTERPARTS) - {(m, n) for m, names in result.items() for n in names
                                        if names[n] == PRIVATE_COUNTERPARTS.get((m, n))}
  if unused:
    raise AssertionError(f"PRIVATE_COUNTERPARTS entries not used: {sorted(unused)}")
  return dict(sorted(result.items()))


def render() -> str:
  import optax
  lines = []
  for module, names in table().items():
    if not names:
      lines.append(f"  {module!r}: {{}},")
      continue
    lines.append(f"  {module!r}: {{")
    lines.extend(f"    {name!r}: {reference!r}," for name, reference in names.items())
    lines.append("  },")
  body = "{\n" + "\n".join(lines) + "\n}"
  return (
      f'"""Generated by tools/optax_private_names.py from Optax {optax.__version__}: do not edit.\n\n'
      "Every module of Optax with a private part in its path -> {every public name it defines:\n"
      '"module:attribute" of its steadax counterpart, or None where steadax has none}. Read by\n'
      "steadax.as_optax (_private_modules.py), which makes these modules under the switch.\n"
      '"""\n\n'
      f"PRIVATE_NAMES: dict[str, dict[str, str | None]] = {body}\n")


if __name__ == "__main__":
  TARGET.write_text(render(), encoding="utf-8")
  print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
