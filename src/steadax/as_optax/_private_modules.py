"""Optax's private modules under the switch: ``optax._src.base`` and the like, made of steadax's objects.

Code written for Optax imports its private modules for types and helpers (``from optax._src import
base``, ``from optax._src.utils import canonicalize_dtype``, ``from optax.contrib._muon import
MuonDimensionNumbers``). Under ``steadax.as_optax`` each module Optax 0.2.8 has is an
``OptaxPrivateModule``: reading one of its names gives steadax's counterpart (the same object as
``steadax.<name>`` for the names Optax also makes public), looked up on first read from the
generated table ``_optax_private.PRIVATE_NAMES``. A name Optax defines there but steadax has no
counterpart for raises ``ImportError`` on first read, naming the module, the name and what to use
instead: an ``ImportError`` rather than an ``AttributeError``, because ``from m import name`` turns
an ``AttributeError`` into its own message and the explanation would be lost. A name Optax does not
define there either raises ``AttributeError``, as with Optax. ``optax._src``, a directory of
modules in Optax, is a module with no names of its own.

Making a module imports nothing and registers nothing beyond what every import does: the
``sys.modules`` entry and the attribute on the parent package. The parent of ``optax.contrib._muon``
is ``steadax.contrib`` itself, which has a private submodule of the same name; that submodule is
imported first, so that its own import (the first name read from ``steadax.contrib`` may trigger
it) cannot later replace the attribute. ``restore()`` puts steadax's submodules back (``unbind``).
``from optax.contrib import _muon`` reads that attribute: after steadax imported its own ``_muon``
and before any ``optax.contrib._muon`` import, it is steadax's module (which defines the same
objects under the names Optax's does, but not every one); ``from optax.contrib._muon import ...``
always gives this module.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

from ._optax_private import PRIVATE_NAMES

__all__ = ["OptaxPrivateModule", "find_spec", "is_private_module", "private_module_error", "unbind"]

_SWITCH = "optax resolves to steadax: steadax.as_optax"

# What to use instead of a name that has no counterpart, where steadax has something close.
_HINTS: dict[tuple[str, str], str] = {
    ("optax._src.linesearch", "zoom_linesearch"):
        "steadax.scale_by_zoom_linesearch, the transformation that runs it",
    ("optax._src.linesearch", "ZoomLinesearchState"):
        "steadax.ScaleByZoomLinesearchState, the transformation's state (the search's inner "
        "state is not exposed)",
    ("optax._src.linesearch", "BacktrackingLineSearchState"):
        "steadax.ScaleByBacktrackingLinesearchState, the transformation's state (the search's "
        "inner state is not exposed)",
    ("optax.contrib._sophia", "scale_by_sophia"): "steadax.contrib.sophia",
}


def _packages() -> frozenset[str]:
  """Optax's private directories of modules (``optax._src``): parents of table modules that are
  private and not modules themselves."""
  parents = set()
  for module in PRIVATE_NAMES:
    parts = module.split(".")
    for i in range(2, len(parts)):
      parent = ".".join(parts[:i])
      if parent not in PRIVATE_NAMES and any(p.startswith("_") for p in parts[1:i]):
        parents.add(parent)
  return frozenset(parents)


_PACKAGES = _packages()


def _resolve(reference: str) -> Any:
  """The object a table entry names: ``"steadax.contrib:muon"`` -> ``steadax.contrib.muon``."""
  module, _, attribute = reference.partition(":")
  return getattr(importlib.import_module(module), attribute)


def _public(reference: str) -> str:
  module, _, attribute = reference.partition(":")
  return f"{module}.{attribute}"


class OptaxPrivateModule(types.ModuleType):
  """An Optax-private module under the switch: its names are steadax's objects (module docstring)."""

  def __init__(self, name: str, names: dict[str, str | None]):
    super().__init__(name, f"Optax's private module {name}, resolved to steadax's objects "
                           f"(steadax.as_optax).")
    self.__dict__["_steadax_names"] = names
    self.__all__ = sorted(n for n, reference in names.items() if reference is not None)

  def __getattr__(self, name: str) -> Any:
    names = self.__dict__.get("_steadax_names", {})
    if name not in names:
      raise AttributeError(f"module {self.__name__!r} has no attribute {name!r} (nor has Optax "
                           f"0.2.8's; {_SWITCH}).", name=name, obj=self)
    reference = names[name]
    if reference is None:
      hint = _HINTS.get((self.__name__, name))
      instead = (f"Use {hint} instead." if hint else
                 "Keep a copy of it in your program, or run the program with Optax itself "
                 "(without steadax.as_optax).")
      raise ImportError(
          f"{self.__name__}.{name}: Optax 0.2.8 defines {name!r} in its private module "
          f"{self.__name__}, and steadax has no counterpart for it ({_SWITCH}). {instead}",
          name=self.__name__)
    value = _resolve(reference)
    self.__dict__[name] = value  # later reads do not come here
    return value

  def __dir__(self) -> list[str]:
    return sorted((set(self.__dict__) | set(self.__all__)) - {"_steadax_names"})


class _Loader(importlib.abc.Loader):
  """Makes the ``OptaxPrivateModule`` for a spec's name (a package for ``optax._src``)."""

  def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
    name = spec.name
    parent, _, child = name.rpartition(".")
    own = "steadax" + parent[len("optax"):] + "." + child
    if not any(part.startswith("_") for part in parent.split(".")[1:]):
      # The parent is a steadax package (optax.contrib is steadax.contrib): import steadax's own
      # submodule of that name first, so that its import cannot replace this module there later.
      try:
        found = importlib.util.find_spec(own)
      except ModuleNotFoundError:
        found = None
      if found is not None:
        importlib.import_module(own)
    module = OptaxPrivateModule(name, PRIVATE_NAMES.get(name, {}))
    if name in _PACKAGES:
      module.__path__ = []
    return module

  def exec_module(self, module: types.ModuleType) -> None:
    pass  # the module's names are read from the table on first access


def find_spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
  """The spec of Optax-private module ``fullname`` under the switch; None if Optax 0.2.8 has none."""
  if fullname not in PRIVATE_NAMES and fullname not in _PACKAGES:
    return None
  return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=fullname in _PACKAGES)


def private_module_error(fullname: str) -> ModuleNotFoundError:
  """The error for an Optax-private module path Optax 0.2.8 does not have either."""
  return ModuleNotFoundError(
      f"No module named {fullname!r} ({_SWITCH}). Optax 0.2.8 has no module of that name either; "
      f"its private modules resolve to steadax's objects (optax._src.base, optax.contrib._muon, "
      f"...). Import the public name (optax.<name>, the same object as steadax.<name>) instead.",
      name=fullname)


def unbind() -> None:
  """Undoes the attributes imports set on parent packages for these modules (``steadax._src``,
  ``steadax.contrib._muon``): steadax's own submodule where it has one, nothing otherwise."""
  for name, module in list(sys.modules.items()):
    if not isinstance(module, OptaxPrivateModule):
      continue
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name)
    if parent is None or getattr(parent, "__dict__", {}).get(child) is not module:
      continue
    own = sys.modules.get("steadax" + parent_name[len("optax"):] + "." + child)
    if own is not None:
      setattr(parent, child, own)
    else:
      delattr(parent, child)


def is_private_module(module: object) -> bool:
  """Whether ``module`` is one of these modules (``restore()`` removes them with the others)."""
  return isinstance(module, OptaxPrivateModule)
