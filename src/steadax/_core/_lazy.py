"""Lazy public surfaces (PEP 562): a package's names are imported when first read, not at import.

``import steadax`` used to import every module of the library (about 160, 120 Module classes built)
and took several times Optax's import. A public ``__init__.py`` now writes its re-exports as it
always did, ``from ._adam import adam as adam``, inside an ``if _TYPE_CHECKING:`` block: pyright,
IDEs and the API reference (griffe reads the file) see them as before, and at run time
``lazy_surface`` reads the same block (one ``ast.parse`` of the package's own file) and serves each
name from a module ``__getattr__`` the first time it is read, then keeps it in the module's
namespace (later reads are plain attribute look-ups). The block is the one list of names: nothing is
written twice.

``dir()``, ``help()`` and ``from package import *`` see every name (``__dir__`` lists them and
``__all__`` holds them), and ``import steadax.contrib`` or ``steadax.contrib`` work as for any
package.
"""

import ast
import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_surface"]


def _is_type_checking(test: ast.expr) -> bool:
  name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else ""
  return name in ("TYPE_CHECKING", "_TYPE_CHECKING")


def _exports(path: str) -> dict[str, tuple[str, str | None]]:
  """``public name -> (relative module, attribute or None for a submodule)`` from the
  ``if _TYPE_CHECKING:`` blocks of the file at ``path``."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  table: dict[str, tuple[str, str | None]] = {}
  for node in tree.body:
    if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
      continue
    for statement in node.body:
      if not isinstance(statement, ast.ImportFrom) or statement.level == 0:
        raise SyntaxError(f"{path}:{statement.lineno}: the lazy block holds only relative "
                          "`from . import name as name` re-exports")
      base = "." * statement.level + (statement.module or "")
      for alias in statement.names:
        public = alias.asname or alias.name
        if statement.module is None:  # ``from . import contrib as contrib``: a submodule
          table[public] = (base + alias.name, None)
        else:
          table[public] = (base, alias.name)
  return table


def lazy_surface(package: str, path: str, fallback: Callable[[str], Any] | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
  """The ``__getattr__``, ``__dir__`` and ``__all__`` of a package whose re-exports are lazy.

  Args:
    package: the package's ``__name__``.
    path: its ``__file__`` (whose ``if _TYPE_CHECKING:`` block lists the re-exports).
    fallback: a ``__getattr__`` for names outside the list (a deprecation table), or None.

  Returns:
    ``(__getattr__, __dir__, __all__)`` to assign in the package; ``__all__`` is every listed name
    (sorted).

  Example:
    >>> import steadax
    >>> "adam" in dir(steadax) and "adam" in steadax.__all__
    True
  """
  table = _exports(path)
  namespace = sys.modules[package].__dict__

  def __getattr__(name: str) -> Any:
    entry = table.get(name)
    if entry is None:
      if fallback is not None:
        return fallback(name)
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, attribute = entry
    value = importlib.import_module(module, package)
    if attribute is not None:
      value = getattr(value, attribute)
    namespace[name] = value  # later reads do not come here
    return value

  def __dir__() -> list[str]:
    return sorted(set(namespace) | set(table))

  return __getattr__, __dir__, sorted(table)
