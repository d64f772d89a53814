"""Griffe extensions for the API pages (mkdocs.yml loads both).

* ``ExampleSections``: steadax docstrings head their doctests ``Example:``. Griffe's Google-style
  parser reads only ``Examples:`` as an examples section (rendered as code) and turns ``Example:``
  into an admonition of plain Markdown, where ``x[0]["w"]`` reads as a reference link. The heading
  is renamed before the docstring is parsed, so every doctest renders as a Python code block.
* ``RedundantAliasesArePublic``: a package without a literal ``__all__`` (the top-level ``steadax``) declares
  its public names by redundant aliases, ``from ._x import A as A`` (the convention type checkers
  read too); griffe treats imported names as private unless listed in ``__all__``, so these are
  marked public.
* ``SharedArguments``: ``name: <shared>`` lines of a docstring (``steadax._core._docs``) are filled in
  at import time for ``help()``; griffe reads the source, not the imported object, so the extension
  applies the same ``fill_shared`` with the same ``ARGS`` (loaded from src/steadax/_core/_docs.py by
  path: one source for both, without importing steadax and JAX into the docs build).
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import re
from typing import Any

import griffe

_DOCS_MODULE = pathlib.Path(__file__).resolve().parents[1] / "src" / "steadax" / "_core" / "_docs.py"


def _load_fill_shared():
  spec = importlib.util.spec_from_file_location("_steadax_docs_for_griffe", _DOCS_MODULE)
  assert spec is not None and spec.loader is not None
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.fill_shared


_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", flags=re.M)


class ExampleSections(griffe.Extension):
  """Reads ``Example:`` docstring sections as ``Examples:``."""

  def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
    if obj.docstring is not None:
      obj.docstring.value = _HEADING.sub(r"\1Examples:", obj.docstring.value)


class SharedArguments(griffe.Extension):
  """Fills in ``name: <shared>`` argument descriptions, as ``shared_args`` does at import time."""

  def __init__(self) -> None:
    super().__init__()
    self._fill = _load_fill_shared()

  def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
    if obj.path.startswith("steadax._core._docs"):
      return  # the mechanism's own docstrings show the marker as an example
    if obj.docstring is not None and "<shared>" in obj.docstring.value:
      obj.docstring.value = self._fill(obj.docstring.value, obj.path)


class RedundantAliasesArePublic(griffe.Extension):
  """Marks ``from m import A as A`` as a public name in a module without a literal ``__all__``.

  The top-level ``steadax`` computes its ``__all__`` from its lazy re-exports (``_core/_lazy.py``),
  which sit in an ``if _TYPE_CHECKING:`` block: every name imported there is public, renamed ones
  (``safe_increment as safe_int32_increment``) included, as ``lazy_surface`` serves them.
  """

  def on_module_members(self, *, node: Any, mod: griffe.Module, **kwargs: Any) -> None:
    if not isinstance(node, ast.Module) or _literal_all(node):
      return
    for statement in node.body:
      if isinstance(statement, ast.ImportFrom):
        _mark_public(mod, statement, redundant_only=True)
      elif isinstance(statement, ast.If) and _is_type_checking(statement.test):
        for inner in statement.body:  # the lazy block: every name in it is re-exported
          if isinstance(inner, ast.ImportFrom):
            _mark_public(mod, inner, redundant_only=False)


def _is_type_checking(test: ast.expr) -> bool:
  name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
  return name in ("TYPE_CHECKING", "_TYPE_CHECKING")


def _mark_public(mod: griffe.Module, statement: ast.ImportFrom, *, redundant_only: bool) -> None:
  for name in statement.names:
    public = name.asname or name.name
    if (name.asname == name.name or not redundant_only) and public in mod.members:
      mod.members[public].public = True


def _literal_all(node: ast.Module) -> bool:
  """Whether the module assigns ``__all__`` a list or tuple written out."""
  return any(isinstance(s, ast.Assign) and isinstance(s.value, (ast.List, ast.Tuple))
             and any(isinstance(t, ast.Name) and t.id == "__all__" for t in s.targets)
             for s in node.body)
