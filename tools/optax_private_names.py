"""Writes src/steadax/as_optax/_optax_private.py: Optax's private modules -> steadax's public names.

Under ``steadax.as_optax`` an import of an Optax-private module (``optax._src.base``,
``optax.contrib._muon``) raises an error naming, for each name that module defines, the public
steadax name to use. The table is built from the installed Optax (0.2.8): for every module of Optax
with a private part in its dotted path, the names it defines (top-level ``def``, ``class`` and
assignments, public ones), each mapped to the shortest public Optax path holding the same object
(``optax._src.alias.adam`` is ``optax.adam``; ``optax.tree_utils._tree_math.tree_add`` is
``optax.tree.add``) where steadax has that path too. steadax's public paths are Optax's
(tests/test_surface.py), so the Optax path is the steadax path.

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
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET = ROOT / "src" / "steadax" / "as_optax" / "_optax_private.py"


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


def _public_paths(optax: types.ModuleType) -> dict[int, list[str]]:
  """``id(object) -> [dotted public paths]`` over Optax's public namespaces."""
  paths: dict[int, list[str]] = {}
  namespaces = [("", optax)]
  for name in _module_names(optax):
    if name != "optax" and not any(part.startswith("_") for part in name.split(".")):
      namespaces.append((name.removeprefix("optax."), importlib.import_module(name)))
  for prefix, namespace in list(namespaces):
    for name in dir(namespace):  # optax.experimental.aggregating is optax.experimental._aggregating
      value = getattr(namespace, name)
      if (isinstance(value, types.ModuleType) and not name.startswith("_")
          and value.__name__.startswith("optax.") and value.__name__.rpartition(".")[2] != name):
        namespaces.append((f"{prefix}.{name}" if prefix else name, value))
  for prefix, namespace in namespaces:
    for name in dir(namespace):
      if name.startswith("_"):
        continue
      value = getattr(namespace, name)
      if isinstance(value, (types.ModuleType, bool, int, float, str, type(None))):
        continue  # a module is a namespace, not a name; small constants are shared objects
      paths.setdefault(id(value), []).append(f"{prefix}.{name}" if prefix else name)
  return paths


def _steadax_has(path: str) -> bool:
  import steadax
  obj = steadax
  for part in path.split("."):
    if not hasattr(obj, part):
      return False
    obj = getattr(obj, part)
  return True


def table() -> dict[str, dict[str, str]]:
  """``{private optax module: {name it defines: public steadax path}}``, sorted."""
  import optax
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    paths = _public_paths(optax)
    result: dict[str, dict[str, str]] = {}
    for module_name in _module_names(optax):
      parts = module_name.split(".")[1:]
      if not any(p.startswith("_") for p in parts):
        continue
      try:
        module = importlib.import_module(module_name)
      except ImportError:
        continue  # a module needing an optional dependency
      mapped = {}
      for name in _defined_names(module):
        value = getattr(module, name, None)
        candidates = [p for p in paths.get(id(value), []) if _steadax_has(p)]
        if not (inspect.isfunction(value) or inspect.isclass(value)):
          # A type alias (ArrayTree = chex.ArrayTree) is the same object as other aliases
          # (OptState, Params): only its own name is a counterpart.
          candidates = [p for p in candidates if p.rpartition(".")[2] == name]
        if candidates:
          mapped[name] = min(candidates, key=lambda p: (p.count("."), p.rpartition(".")[2] != name, p))
      result[module_name] = dict(sorted(mapped.items()))
  return dict(sorted(result.items()))


def render() -> str:
  import optax
  lines = []
  for module, names in table().items():
    if not names:
      lines.append(f"  {module!r}: {{}},")
      continue
    lines.append(f"  {module!r}: {{")
    lines.extend(f"    {name!r}: {path!r}," for name, path in names.items())
    lines.append("  },")
  body = "{\n" + "\n".join(lines) + "\n}"
  return (
      f'"""Generated by tools/optax_private_names.py from Optax {optax.__version__}: do not edit.\n\n'
      "Every module of Optax with a private part in its path -> {name it defines: the public path of\n"
      "the same object, which steadax has}. Read by steadax.as_optax's error for a private import.\n"
      '"""\n\n'
      f"PRIVATE_NAMES: dict[str, dict[str, str]] = {body}\n")


if __name__ == "__main__":
  TARGET.write_text(render(), encoding="utf-8")
  print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
