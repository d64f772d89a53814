"""The module graph of src/steadax, read with ``ast`` (docs/internals.md, "Layers").

* No import inside a function: a module's dependencies are the lines at its top.
* No import cycle among steadax's modules (the imports that run when a module is loaded, with the
  packages they load on the way: importing ``steadax.transforms._adam`` runs
  ``steadax/transforms/__init__.py`` first).
* The core (``steadax._core``) imports nothing else of steadax: the fusion layer (``_fusion``) and
  everything else sit above it.
* A package whose modules other layers import (``steadax.transforms``) loads nothing above the core
  when its ``__init__`` runs: its re-exports are read lazily (``_core/_lazy.py``), so the public
  ``steadax.transforms`` namespace, which also re-exports the wrappers, does not make the
  transforms layer import the wrappers layer.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import steadax

SRC = pathlib.Path(steadax.__file__).resolve().parent
CORE = "steadax._core"

# (module, line) of an import inside a function that is allowed, and why. Empty: keep it so.
IMPORTS_IN_FUNCTIONS: dict[tuple[str, int], str] = {}


def _module_name(path: pathlib.Path) -> str:
  parts = ["steadax", *path.relative_to(SRC).with_suffix("").parts]
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
  name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
  return name in ("TYPE_CHECKING", "_TYPE_CHECKING")


def _targets(module: str, node: Import) -> list[str]:
  """The steadax modules an import statement loads (a ``from`` import of a submodule included)."""
  if isinstance(node, ast.Import):
    return [alias.name for alias in node.names if alias.name.split(".")[0] == "steadax"]
  if node.level:
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    package_parts = package.split(".")
    base = ".".join(package_parts[:len(package_parts) - (node.level - 1)])
    base = f"{base}.{node.module}" if node.module else base
  else:
    base = node.module or ""
  if base.split(".")[0] != "steadax":
    return []
  return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]


Import = ast.Import | ast.ImportFrom


@functools.cache
def _imports(module: str) -> tuple[list[tuple[Import, bool]], list[Import]]:
  """``(import statement, runs at import)`` pairs of ``module``, and the imports inside functions."""
  tree = ast.parse(MODULES[module].read_text())
  found: list[tuple[Import, bool]] = []
  in_functions: list[Import] = []

  def visit(node: ast.AST, runs: bool, in_function: bool) -> None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      if in_function:
        in_functions.append(node)
      found.append((node, runs and not in_function))
      return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
      for child in node.body:
        visit(child, False, in_function)
      for child in node.orelse:
        visit(child, runs, in_function)
      return
    inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    for child in ast.iter_child_nodes(node):
      visit(child, runs, inside)

  visit(tree, True, False)
  return found, in_functions


@functools.cache
def _graph() -> dict[str, set[str]]:
  """Module -> the steadax modules loading it loads (with their packages), at import time."""
  graph: dict[str, set[str]] = {m: set() for m in MODULES}
  for module in MODULES:
    own_packages = {module.rsplit(".", i)[0] for i in range(module.count(".") + 1)}
    for node, runs in _imports(module)[0]:
      if not runs:
        continue
      for target in _targets(module, node):
        parts = target.split(".")
        loaded = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        # A package this module belongs to is already being loaded: importing from it adds nothing.
        graph[module] |= {m for m in loaded if m in MODULES and m not in own_packages}
  return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components with more than one module (Tarjan), or a self-import."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found: list[list[str]] = []

  def connect(v: str) -> None:
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        connect(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1 or v in graph[v]:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      connect(v)
  return found


def test_no_import_inside_a_function():
  found = {}
  for module in MODULES:
    for node in _imports(module)[1]:
      found[(module, node.lineno)] = ast.unparse(node)
  unexpected = {k: v for k, v in found.items() if k not in IMPORTS_IN_FUNCTIONS}
  assert not unexpected, f"imports inside functions (move them to the top of the module): {unexpected}"
  stale = set(IMPORTS_IN_FUNCTIONS) - set(found)
  assert not stale, f"allowed but gone (remove from IMPORTS_IN_FUNCTIONS): {sorted(stale)}"


def test_no_import_cycle():
  assert _cycles(_graph()) == []


def test_the_core_imports_nothing_above_it():
  upward = set()
  for module in MODULES:
    if module != CORE and not module.startswith(CORE + "."):
      continue
    for node, _ in _imports(module)[0]:  # run-time and type-checking imports alike
      for target in _targets(module, node):
        if target != CORE and not target.startswith(CORE + "."):
          upward.add((module, target))
  assert not upward, f"core modules importing from above the core: {sorted(upward)}"


def test_layers_packages_load_nothing_above_the_core_at_import():
  # A package other modules import from (a layer, such as steadax.transforms) runs its __init__
  # whenever one of its modules is loaded: it must not load another layer then.
  graph = _graph()
  layers = {m for targets in graph.values() for m in targets if MODULES[m].name == "__init__.py"}
  loaded = {(package, m) for package in layers for m in graph[package]
            if m != CORE and not m.startswith(CORE + ".") and not m.startswith(package + ".")}
  assert not loaded, f"packages importing other layers eagerly (use the lazy block): {sorted(loaded)}"


def test_the_checks_see_what_they_check():
  # The graph is not empty by accident: the core's modules and the fusion layer's edges are read.
  graph = _graph()
  assert "steadax._core._interface" in graph["steadax._core._transformation"]
  assert "steadax._core._transformation" in graph["steadax._fusion._flat"]
  assert "steadax.transforms" in graph["steadax._optimizers._adam"]  # the package, loaded first
  assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
